//go:build !fastpath_prevlayout

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

// layout changes nothing in a release build; the upgrade tests build a
// "previous release" whose maps have another layout (layout_prev.go).
func layout(*ebpf.CollectionSpec) {}
