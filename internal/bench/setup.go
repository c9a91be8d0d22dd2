package bench

import (
	"encoding/binary"
)

// Entry is a map entry as raw bytes, in the layout the program reads.
type Entry struct{ Key, Value []byte }

// Setup is the map contents each program needs for its interesting paths
// (a virtual IP and backends, blocked sources and ports), the same for the
// kernel and the userspace runtime in differential runs. The addresses
// match the corpus.
func Setup(name string) map[string][]Entry {
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	switch name {
	case "xdp_firewall":
		e := map[string][]Entry{"blocked_src": {{Key: corpusSrc4[1].To4(), Value: make([]byte, 8)}}}
		for _, port := range []uint32{22, 53, 443} {
			e["blocked_port"] = append(e["blocked_port"], Entry{Key: u32(port), Value: []byte{1}})
		}
		return e
	case "xdp_lb":
		vip := corpusDst4.To4()
		cfg := append(append([]byte{}, vip...), u32(3)...)
		var backends []Entry
		for i := 0; i < 3; i++ {
			v := []byte{10, 0, 200, byte(i + 1), 0x02, 0xbe, 0, 0, 0, byte(i + 1), 0, 0}
			backends = append(backends, Entry{Key: u32(uint32(i)), Value: v})
		}
		return map[string][]Entry{"lb_config": {{Key: u32(0), Value: cfg}}, "lb_backends": backends}
	}
	return nil
}
