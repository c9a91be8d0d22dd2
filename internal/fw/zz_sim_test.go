package fw

import (
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sort"
	"testing"
)

func TestZZSim(t *testing.T) {
	for _, kind := range ClassBenchKinds {
		rs, _ := ClassBench(kind, 100000, 1, 0, netip.Prefix{})
		c := compile(rs)
		for _, mode := range []string{"flood", "hit"} {
			rng := rand.New(rand.NewPCG(3, 4))
			acc := map[string]int{}
			const N = 20000
			for range N {
				fl := RandomFlow(rng, false)
				if mode == "hit" {
					fl = Hitting(rng, rs)
				}
				if !fl.Src.Is4() {
					continue
				}
				best := uint32(1<<32 - 1)
				span := func(s fwFwSpan, what string) {
					for i := s.Start; i < s.Start+s.Len; i++ {
						r := c.cands[i]
						acc[what+"-cand"]++
						if r.Prio >= best {
							return
						}
						if rs.Rules[r.Id-1].Matches(fl) {
							best = r.Prio
							return
						}
					}
				}
				span(c.wild[wildAnyProtocol], "wildany")
				span(c.wild[int(fl.Proto)], "wildproto")
				for dir, a := range []netip.Addr{fl.Src, fl.Dst} {
					v := uint32(a.As4()[0])<<24 | uint32(a.As4()[1])<<16 | uint32(a.As4()[2])<<8 | uint32(a.As4()[3])
					h := int(v >> 16)
					i := dir*idx4PerDir + h
					q := c.cls4[i/16] >> (4 * (i % 16)) & 15
					if q == 0 || cls4Floor(q) >= best {
						continue
					}
					acc["idx4"]++
					r := c.idx4[i]
					if r.First >= best {
						continue
					}
					var node uint32
					if r.Hi == rangeNode {
						node = r.Lo
					} else {
						lo, hi := r.Lo, r.Hi
						for lo < hi {
							acc["ivl4"]++
							mid := hi - (hi-lo)/2
							if c.ivl4[mid].Start <= v {
								lo = mid
							} else {
								hi = mid - 1
							}
						}
						acc["ivl4"]++
						node = c.ivl4[lo].Node
					}
					for node != 0 {
						acc["node"]++
						n := c.nodes[node]
						if n.First >= best {
							break
						}
						span(n.Span, "node")
						node = n.Parent
					}
				}
				if fl.Proto == 6 || fl.Proto == 17 {
					for dir, p := range []uint16{fl.SPort, fl.DPort} {
						tree := portTree(dir, fl.Proto)
						if c.set.PortTreeFirst[tree] >= best {
							continue
						}
						worth := uint32(0)
						for l := range portLevels {
							if c.set.PortFirst[tree][l] < best {
								worth |= 1 << l
							}
						}
						if worth == 0 {
							continue
						}
						acc["pwide"]++
						w := c.pwide[tree<<(16-portWideShift)|int(p)>>portWideShift]
						lv := w.Levels
						if worth&^(1<<portWideLevels-1) != 0 && w.Narrow>>(p%64)&1 != 0 {
							acc["pnarrow"]++
							lv |= uint32(c.pnarrow[tree<<16|int(p)]) << portWideLevels
						}
						lv &= worth
						for lv != 0 {
							l := bits.TrailingZeros32(lv)
							lv &= lv - 1
							if c.set.PortFirst[tree][l] >= best {
								continue
							}
							acc["pblock"]++
							span(c.pblock[tree*portBlocks+1<<l+int(p)>>(16-l)], "port")
						}
					}
				}
			}
			var keys []string
			for k := range acc {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			line := kind + " " + mode + ":"
			for _, k := range keys {
				line += " " + k + "=" + ftoa(float64(acc[k])/N)
			}
			t.Log(line)
		}
	}
}

func ftoa(f float64) string {
	return string(rune('0'+int(f)%10)) + "." + string(rune('0'+int(f*10)%10)) + string(rune('0'+int(f*100)%10))
}
