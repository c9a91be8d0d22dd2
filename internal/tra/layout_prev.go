//go:build fastpath_prevlayout

package tra

import "github.com/cilium/ebpf"

// layout makes this build the "previous release" of the upgrade tests
// (upgrade_test.go): its maps differ from a release build's in ways a
// release may change them, each one the programs tolerate: a value that
// grows (the counters, per CPU, which the programs reach by pointer only)
// and a ring buffer of another size (made afresh: it holds no entries).
func layout(spec *ebpf.CollectionSpec) {
	if m := spec.Maps["tra_counters"]; m != nil {
		m.ValueSize += 8
	}
	if m := spec.Maps["tra_events"]; m != nil {
		m.MaxEntries *= 2
	}
}
