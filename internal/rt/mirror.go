package rt

import (
	"bytes"
	"fmt"

	"github.com/cilium/ebpf"
)

// MirrorMaps reads maps a control plane filled in the kernel, to give the
// runtime the same contents (--maps-in). Per-CPU maps give CPU 0's values,
// the one CPU of a test run in the runtime. Array entries that are all
// zero are left out, as arrays start zeroed. Maps that hold kernel objects
// (program arrays, maps of maps, CPU maps, ring buffers) are skipped.
func MirrorMaps(maps map[string]*ebpf.Map) (map[string][]Entry, error) {
	out := map[string][]Entry{}
	for name, m := range maps {
		switch m.Type() {
		case ebpf.ProgramArray, ebpf.ArrayOfMaps, ebpf.HashOfMaps, ebpf.CPUMap, ebpf.RingBuf, ebpf.PerfEventArray, ebpf.XSKMap:
			continue
		}
		percpu := m.Type() == ebpf.PerCPUArray || m.Type() == ebpf.PerCPUHash || m.Type() == ebpf.LRUCPUHash
		array := m.Type() == ebpf.Array || m.Type() == ebpf.PerCPUArray || m.Type() == ebpf.DevMap
		var (
			k   []byte
			v   []byte
			per [][]byte
		)
		it := m.Iterate()
		for {
			var ok bool
			if percpu {
				ok = it.Next(&k, &per)
				if ok && len(per) > 0 {
					v = per[0]
				}
			} else {
				ok = it.Next(&k, &v)
			}
			if !ok {
				break
			}
			if array && !bytes.ContainsFunc(v, func(r rune) bool { return r != 0 }) {
				continue
			}
			out[name] = append(out[name], Entry{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("read map %s: %w", name, err)
		}
	}
	return out, nil
}
