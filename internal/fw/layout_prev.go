//go:build fastpath_prevlayout

package fw

import "github.com/cilium/ebpf"

// layout makes this build the "previous release" of the upgrade tests
// (upgrade_test.go): its maps differ from a release build's in the ways a
// release may change them, each one that the program tolerates: a value
// that grows (the connection scratch, per CPU, which the programs reach
// by pointer only) and another max_entries (the block list). Maps added and
// removed are tested in internal/xdp (migrate_test.go).
func layout(spec *ebpf.CollectionSpec) {
	if m := spec.Maps["fw_ct_txn"]; m != nil {
		m.ValueSize += 8
	}
	if m := spec.Maps["fw_blocked"]; m != nil {
		m.MaxEntries *= 2
	}
}
