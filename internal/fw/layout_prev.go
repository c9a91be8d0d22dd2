//go:build fastpath_prevlayout

package fw

import "github.com/cilium/ebpf"

// loadFwSpec is the firewall's object as this release loads it.
func loadFwSpec() (*ebpf.CollectionSpec, error) {
	spec, err := loadFw()
	if err == nil {
		layout(spec)
	}
	return spec, err
}

// layout makes this build the "previous release" of the upgrade tests
// (upgrade_test.go): its maps differ from a release build's in the ways a
// release may change them, each one that the program tolerates: a value
// that grows (the connection scratch, per CPU, which the programs reach
// by pointer only), another max_entries (the block list) and a map the
// release build does not have.
func layout(spec *ebpf.CollectionSpec) {
	if m := spec.Maps["fw_ct_txn"]; m != nil {
		m.ValueSize += 8
	}
	if m := spec.Maps["fw_blocked"]; m != nil {
		m.MaxEntries *= 2
	}
	if spec.Programs["fw_xdp"] != nil {
		spec.Maps["fw_prev_extra"] = &ebpf.MapSpec{Name: "fw_prev_extra", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 16}
	}
}
