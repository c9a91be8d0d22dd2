package fw

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
)

// ClassBench-like rule sets, generated here rather than read from the
// original generator's seed files: what matters to a classifier is kept.
// Prefixes nest (hosts inside /24s inside /16s, a few popular networks
// holding most rules), port fields come in ClassBench's classes (any,
// 1024-65535, 0-1023, arbitrary ranges, exact ports), some rules set only a
// protocol, and a share of rules is IPv6. The three kinds follow the
// character of ClassBench's acl, fw and ipc seeds: acl rules name hosts and
// exact destination ports; fw rules leave addresses and ports open and use
// ranges; ipc rules mix both.

// ClassBenchKinds are the kinds ClassBench generates.
var ClassBenchKinds = []string{"acl", "fw", "ipc"}

// cbProfile is a kind's mix: shares out of 100.
type cbProfile struct {
	srcAny, dstAny   int // wildcard address
	srcHost, dstHost int // /32 (or /128)
	protoOnly        int // rules that set only a protocol
	sport, dport     portMix
	tcp, udp, icmp   int // the rest is "any"
}

// portMix gives the shares of ClassBench's port classes.
type portMix struct{ any, hi, lo, ar, em int }

var cbProfiles = map[string]cbProfile{
	"acl": {srcAny: 15, dstAny: 3, srcHost: 40, dstHost: 70, protoOnly: 1,
		sport: portMix{any: 95, hi: 3, ar: 1, em: 1}, dport: portMix{any: 15, hi: 5, lo: 2, ar: 10, em: 68},
		tcp: 85, udp: 8, icmp: 3},
	"fw": {srcAny: 35, dstAny: 25, srcHost: 25, dstHost: 30, protoOnly: 3,
		sport: portMix{any: 75, hi: 10, ar: 10, em: 5}, dport: portMix{any: 30, hi: 15, lo: 5, ar: 15, em: 35},
		tcp: 65, udp: 20, icmp: 5},
	"ipc": {srcAny: 20, dstAny: 15, srcHost: 30, dstHost: 40, protoOnly: 2,
		sport: portMix{any: 80, hi: 5, lo: 5, ar: 5, em: 5}, dport: portMix{any: 25, hi: 10, lo: 10, ar: 10, em: 45},
		tcp: 60, udp: 25, icmp: 8},
}

// A few arbitrary ranges, as ClassBench's seeds list them.
var cbRanges = []Ports{{20, 23, true}, {109, 110, true}, {1645, 1646, true}, {5000, 5001, true}, {6000, 6063, true}, {137, 139, true}, {1024, 5000, true}, {8000, 8080, true}, {33434, 33534, true}}

// cbPorts are common exact ports; the rest are random.
var cbPorts = []uint16{80, 443, 22, 53, 25, 21, 23, 110, 143, 389, 1521, 3306, 8080, 161, 123}

// ClassBench generates n rules of a kind ("acl", "fw", "ipc"), the same
// for the same seed. v6 is the share of IPv6 rules out of 100. No rule
// with an address overlaps avoid.
func ClassBench(kind string, n int, seed uint64, v6 int, avoid netip.Prefix) (*RuleSet, error) {
	prof, ok := cbProfiles[kind]
	if !ok {
		return nil, fmt.Errorf("ClassBench kind %q: use acl, fw or ipc", kind)
	}
	g := &cbGen{rng: rand.New(rand.NewPCG(seed, uint64(n))), prof: prof, avoid: avoid}
	g.networks(n)
	rs := &RuleSet{Default: Pass, File: fmt.Sprintf("ClassBench-like %s (%d)", kind, n)}
	rs.Rules = make([]Rule, 0, n)
	for len(rs.Rules) < n {
		r := g.rule(g.rng.IntN(100) < v6)
		if r.Validate() == nil {
			rs.Rules = append(rs.Rules, r)
		}
	}
	return rs, nil
}

type cbGen struct {
	rng   *rand.Rand
	prof  cbProfile
	avoid netip.Prefix
	// Popular networks: /16s, /24s inside them, per family.
	nets16 [2][]netip.Prefix
	nets24 [2][]netip.Prefix
}

func (g *cbGen) pct(p int) bool { return g.rng.IntN(100) < p }

// skewed picks mostly from the front of a list: a few networks hold most
// rules, as in real rule sets.
func (g *cbGen) skewed(n int) int {
	x := g.rng.Float64()
	return int(x * x * x * float64(n))
}

func (g *cbGen) networks(n int) {
	n16, n24 := max(n/200, 8), max(n/20, 32)
	for f := range 2 {
		for len(g.nets16[f]) < n16 {
			var a netip.Addr
			if f == 0 {
				var b [4]byte
				binary.BigEndian.PutUint32(b[:], g.rng.Uint32())
				if b[0] == 0 || b[0] >= 224 || b[0] == 127 {
					continue
				}
				a = netip.AddrFrom4(b)
			} else {
				var b [16]byte
				binary.BigEndian.PutUint64(b[:], 0x20010db800000000|uint64(g.rng.Uint32()))
				a = netip.AddrFrom16(b)
			}
			p, _ := a.Prefix(map[int]int{0: 16, 1: 64}[f])
			if p.Overlaps(g.avoid) {
				continue
			}
			g.nets16[f] = append(g.nets16[f], p)
		}
		for len(g.nets24[f]) < n24 {
			base := g.nets16[f][g.skewed(len(g.nets16[f]))]
			g.nets24[f] = append(g.nets24[f], g.within(base, base.Bits()+8))
		}
	}
}

// within returns a random prefix of length bits inside p.
func (g *cbGen) within(p netip.Prefix, bits int) netip.Prefix {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		if g.rng.IntN(2) == 1 {
			b[i/8] |= 0x80 >> (i % 8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	q, _ := a.Prefix(bits)
	return q
}

// prefix draws an address field: any, a host, or a network that nests in
// the popular ones; never one that overlaps avoid.
func (g *cbGen) prefix(v6 bool, anyPct, hostPct int) Prefix {
	for {
		p := g.drawPrefix(v6, anyPct, hostPct)
		if !p.IsValid() || !p.Overlaps(g.avoid) {
			return p
		}
	}
}

func (g *cbGen) drawPrefix(v6 bool, anyPct, hostPct int) Prefix {
	f, w := 0, 32
	if v6 {
		f, w = 1, 128
	}
	switch x := g.rng.IntN(100); {
	case x < anyPct:
		return Prefix{}
	case x < anyPct+hostPct:
		return Prefix{g.within(g.nets24[f][g.skewed(len(g.nets24[f]))], w)}
	case x < anyPct+hostPct+(100-anyPct-hostPct)/2:
		// Inside a popular /24: /25 to /31.
		return Prefix{g.within(g.nets24[f][g.skewed(len(g.nets24[f]))], w-7+g.rng.IntN(7))}
	default:
		// Inside a popular /16: /16 to /24, and now and then shorter.
		base := g.nets16[f][g.skewed(len(g.nets16[f]))]
		if g.pct(10) {
			return Prefix{g.within(base, base.Bits()-8+g.rng.IntN(8))}
		}
		return Prefix{g.within(base, base.Bits()+g.rng.IntN(9))}
	}
}

func (g *cbGen) ports(m portMix) Ports {
	switch x := g.rng.IntN(m.any + m.hi + m.lo + m.ar + m.em); {
	case x < m.any:
		return AnyPort
	case x < m.any+m.hi:
		return Ports{1024, 65535, true}
	case x < m.any+m.hi+m.lo:
		return Ports{0, 1023, true}
	case x < m.any+m.hi+m.lo+m.ar:
		return cbRanges[g.rng.IntN(len(cbRanges))]
	}
	if g.pct(70) {
		p := cbPorts[g.skewed(len(cbPorts))]
		return Ports{p, p, true}
	}
	p := uint16(g.rng.IntN(65536))
	return Ports{p, p, true}
}

func (g *cbGen) rule(v6 bool) Rule {
	r := Rule{Action: Action(g.rng.IntN(2)), SPort: AnyPort, DPort: AnyPort}
	p := g.prof
	if g.pct(p.protoOnly) {
		r.Proto = Proto([]uint8{6, 17, 1, 47, 50, 89}[g.rng.IntN(6)])
		if r.Proto == 1 && v6 {
			r.Proto = 58
		}
		return r
	}
	r.Src = g.prefix(v6, p.srcAny, p.srcHost)
	r.Dst = g.prefix(v6, p.dstAny, p.dstHost)
	switch x := g.rng.IntN(100); {
	case x < p.tcp:
		r.Proto = 6
	case x < p.tcp+p.udp:
		r.Proto = 17
	case x < p.tcp+p.udp+p.icmp:
		r.Proto = 1
		if v6 {
			r.Proto = 58
		}
	}
	if r.Proto == 1 && !r.Src.IsValid() && !r.Dst.IsValid() && v6 {
		r.Proto = 58
	}
	if r.Proto == 6 || r.Proto == 17 {
		r.SPort, r.DPort = g.ports(p.sport), g.ports(p.dport)
	}
	return r
}

// Hitting returns a flow inside a random rule of rs (ClassBench's trace
// generator does the same), or a random flow of the rule's family when the
// rule leaves a field open.
func Hitting(rng *rand.Rand, rs *RuleSet) Flow {
	r := rs.Rules[rng.IntN(len(rs.Rules))]
	v6 := r.Family() == 6 || r.Family() == 0 && rng.IntN(10) == 0
	fl := RandomFlow(rng, v6)
	pick := func(p Prefix, a netip.Addr) netip.Addr {
		if !p.IsValid() {
			return a
		}
		b, pb := a.AsSlice(), p.Addr().AsSlice()
		for i := 0; i < p.Bits(); i++ {
			m := byte(0x80 >> (i % 8))
			b[i/8] = b[i/8]&^m | pb[i/8]&m
		}
		out, _ := netip.AddrFromSlice(b)
		return out
	}
	fl.Src, fl.Dst = pick(r.Src, fl.Src), pick(r.Dst, fl.Dst)
	if r.Proto != 0 {
		fl.Proto = r.Proto
	}
	if fl.Proto != 6 && fl.Proto != 17 {
		fl.SPort, fl.DPort = 0, 0
		return fl
	}
	in := func(p Ports) uint16 {
		if p.IsAny() {
			return uint16(rng.IntN(65536))
		}
		return p.Lo + uint16(rng.IntN(int(p.Hi-p.Lo)+1))
	}
	fl.SPort, fl.DPort = in(r.SPort), in(r.DPort)
	return fl
}

// RandomFlow is a flow of random addresses and ports, TCP or UDP: what a
// flood of new flows looks like.
func RandomFlow(rng *rand.Rand, v6 bool) Flow {
	addr := func() netip.Addr {
		if v6 {
			var b [16]byte
			binary.BigEndian.PutUint64(b[:], 0x20010db800000000|uint64(rng.Uint32()))
			binary.BigEndian.PutUint64(b[8:], rng.Uint64())
			return netip.AddrFrom16(b)
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], rng.Uint32())
		return netip.AddrFrom4(b)
	}
	return Flow{Src: addr(), Dst: addr(), Proto: Proto([]uint8{6, 17}[rng.IntN(2)]), SPort: uint16(rng.IntN(65536)), DPort: uint16(rng.IntN(65536))}
}
