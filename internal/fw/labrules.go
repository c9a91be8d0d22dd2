package fw

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
)

// Rule sets for the lab's rows (internal/fw/fwlab) and the tests: random
// source prefixes that miss the test flow.

// MissPrefixes returns n distinct random IPv4 prefixes, /12 to /32, none of
// which overlaps avoid. The same n gives the same prefixes.
func MissPrefixes(n int, avoid netip.Prefix) []netip.Prefix {
	rng := rand.New(rand.NewPCG(uint64(n), 0xf1))
	seen := map[netip.Prefix]bool{}
	out := make([]netip.Prefix, 0, n)
	for len(out) < n {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], rng.Uint32())
		p, _ := netip.AddrFrom4(b).Prefix(12 + rng.IntN(21))
		if b[0] == 0 || b[0] >= 224 || p.Overlaps(avoid) || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out
}

// LabAvoid covers the whole testbed: 198.18.0.0/15.
var LabAvoid = netip.MustParsePrefix("198.18.0.0/15")

// LabRules is the lab's rule set: n drop rules on random source prefixes
// that miss the flow src → dst, one rule that passes it, then drop.
func LabRules(src, dst netip.Prefix, n int) *RuleSet {
	rs := &RuleSet{Default: Drop, File: fmt.Sprintf("lab rules (%d)", n)}
	for _, p := range MissPrefixes(n, LabAvoid) {
		rs.Rules = append(rs.Rules, Rule{Action: Drop, Src: Prefix{p}, SPort: AnyPort, DPort: AnyPort})
	}
	rs.Rules = append(rs.Rules, Rule{Action: Pass, Src: Prefix{src}, Dst: Prefix{dst}, SPort: AnyPort, DPort: AnyPort})
	return rs
}

// LabClassBench is a ClassBench-like set (see ClassBench) made to miss the
// lab's traffic, then the rule that passes it, then drop: no rule with an
// address covers the testbed, and the rules without one, which would match
// any address, are TCP while the lab's floods are UDP. The flood is then
// classified against every rule and passed by the last one.
func LabClassBench(kind string, n int, src, dst netip.Prefix) (*RuleSet, error) {
	rs, err := ClassBench(kind, n, 1, 0, LabAvoid)
	if err != nil {
		return nil, err
	}
	for i := range rs.Rules {
		r := &rs.Rules[i]
		if !r.Src.IsValid() && !r.Dst.IsValid() && (r.Proto == 0 || r.Proto == 17) {
			r.Proto = 6
		}
	}
	rs.Default, rs.File = Drop, fmt.Sprintf("lab ClassBench-like %s rules (%d)", kind, n)
	rs.Rules = append(rs.Rules, Rule{Action: Pass, Src: Prefix{src}, Dst: Prefix{dst}, SPort: AnyPort, DPort: AnyPort})
	return rs, rs.Validate()
}
