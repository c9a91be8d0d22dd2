//go:build !fastpath_prevlayout

package tra

import "github.com/cilium/ebpf"

// layout changes nothing in a release build; the upgrade tests build a
// "previous release" whose maps have another layout (layout_prev.go).
func layout(*ebpf.CollectionSpec) {}
