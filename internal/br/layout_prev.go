//go:build fastpath_prevlayout

package br

import "github.com/cilium/ebpf"

// layout makes this build the "previous release" of the upgrade tests
// (upgrade_test.go): its maps differ from a release build's in ways a
// release may change them, each one the program tolerates: a value that
// grows (the MAC cache, per CPU, which the program reaches by pointer only)
// and another max_entries (the router's local addresses).
func layout(spec *ebpf.CollectionSpec) {
	if m := spec.Maps["br_mac_cache"]; m != nil {
		m.ValueSize += 8
	}
	if m := spec.Maps["br_local_addrs"]; m != nil {
		m.MaxEntries *= 2
	}
}
