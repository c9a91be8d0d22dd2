package fw

import (
	"encoding/binary"
	"net/netip"
	"sort"
)

// A rule is anchored on one of its fields: the index that finds it. A packet
// checks the rules anchored on its source address, its destination address,
// its ports, and the unanchored ones; every rule that can match is in one of
// those spans, so first-match order is kept without walking all rules.
type anchor int

const (
	anchorNone anchor = iota
	anchorSrc
	anchorDst
	anchorDPort
	anchorSPort
)

// compiled is a rule set in the layout of one slot's maps.
type compiled struct {
	set   fwFwSet
	rules []fwFwRule // index 0 is the default policy's slot
	cands []uint32
	src4  map[fwFwLpm4Key]fwFwSpan
	dst4  map[fwFwLpm4Key]fwFwSpan
	src6  map[fwFwLpm6Key]fwFwSpan
	dst6  map[fwFwLpm6Key]fwFwSpan
	sport []fwFwSpan // 65536 entries, nil if no rule is anchored there
	dport []fwFwSpan
	// longest is the longest span: the most rules one packet may check.
	longest int
}

// compile lays out a validated rule set. Rule ids are positions + 1.
func compile(rs *RuleSet) *compiled {
	c := &compiled{
		rules: make([]fwFwRule, len(rs.Rules)+1),
		src4:  map[fwFwLpm4Key]fwFwSpan{}, dst4: map[fwFwLpm4Key]fwFwSpan{},
		src6: map[fwFwLpm6Key]fwFwSpan{}, dst6: map[fwFwLpm6Key]fwFwSpan{},
	}
	c.set.Nrules = uint32(len(rs.Rules))
	c.set.DefaultAction = uint8(rs.Default)
	for i, r := range rs.Rules {
		c.rules[i+1] = kernelRule(r)
	}

	anchors := chooseAnchors(rs.Rules)
	var wild []uint32
	bySrc, byDst := map[netip.Prefix][]uint32{}, map[netip.Prefix][]uint32{}
	var sport, dport []portRule
	for i, r := range rs.Rules {
		id := uint32(i + 1)
		switch anchors[i] {
		case anchorSrc:
			bySrc[r.Src.Prefix] = append(bySrc[r.Src.Prefix], id)
		case anchorDst:
			byDst[r.Dst.Prefix] = append(byDst[r.Dst.Prefix], id)
		case anchorDPort:
			dport = append(dport, portRule{r.DPort, id})
		case anchorSPort:
			sport = append(sport, portRule{r.SPort, id})
		default:
			wild = append(wild, id)
		}
	}
	c.set.Wild = c.addSpan(wild)
	c.prefixSpans(bySrc, c.src4, c.src6)
	c.prefixSpans(byDst, c.dst4, c.dst6)
	c.sport = c.portSpans(sport)
	c.dport = c.portSpans(dport)
	return c
}

// chooseAnchors puts each rule on the field it shares with the fewest other
// rules, so that spans stay short: a thousand rules for one source prefix
// with different ports go by port.
func chooseAnchors(rules []Rule) []anchor {
	src, dst := map[netip.Prefix]int{}, map[netip.Prefix]int{}
	sp, dp := map[Ports]int{}, map[Ports]int{}
	for _, r := range rules {
		if r.Src.IsValid() {
			src[r.Src.Prefix]++
		}
		if r.Dst.IsValid() {
			dst[r.Dst.Prefix]++
		}
		if !r.SPort.IsAny() {
			sp[r.SPort]++
		}
		if !r.DPort.IsAny() {
			dp[r.DPort]++
		}
	}
	out := make([]anchor, len(rules))
	for i, r := range rules {
		best, bestN := anchorNone, int(^uint(0)>>1)
		try := func(a anchor, ok bool, n int) {
			if ok && n < bestN {
				best, bestN = a, n
			}
		}
		// A /0 matches a whole family: no better than no anchor.
		try(anchorSrc, r.Src.IsValid() && r.Src.Bits() > 0, src[r.Src.Prefix])
		try(anchorDst, r.Dst.IsValid() && r.Dst.Bits() > 0, dst[r.Dst.Prefix])
		try(anchorDPort, !r.DPort.IsAny(), dp[r.DPort])
		try(anchorSPort, !r.SPort.IsAny(), sp[r.SPort])
		out[i] = best
	}
	return out
}

func (c *compiled) addSpan(ids []uint32) fwFwSpan {
	if len(ids) == 0 {
		return fwFwSpan{}
	}
	s := fwFwSpan{Start: uint32(len(c.cands)), Len: uint32(len(ids))}
	c.cands = append(c.cands, ids...)
	c.longest = max(c.longest, len(ids))
	return s
}

// prefixSpans gives each anchor prefix the rules of itself and of every
// shorter anchor prefix that contains it: an LPM lookup finds only the
// longest, and the others match the packet too.
func (c *compiled) prefixSpans(by map[netip.Prefix][]uint32, m4 map[fwFwLpm4Key]fwFwSpan, m6 map[fwFwLpm6Key]fwFwSpan) {
	lens := map[bool][]int{} // by Is4
	seen := map[bool]map[int]bool{true: {}, false: {}}
	for p := range by {
		is4 := p.Addr().Is4()
		if !seen[is4][p.Bits()] {
			seen[is4][p.Bits()] = true
			lens[is4] = append(lens[is4], p.Bits())
		}
	}
	for p, own := range by {
		ids := append([]uint32(nil), own...)
		for _, l := range lens[p.Addr().Is4()] {
			if l < p.Bits() {
				up, _ := p.Addr().Prefix(l)
				ids = append(ids, by[up]...)
			}
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		span := c.addSpan(ids)
		a := p.Addr().AsSlice()
		if p.Addr().Is4() {
			m4[fwFwLpm4Key{Prefixlen: uint32(p.Bits()), Addr: binary.LittleEndian.Uint32(a)}] = span
		} else {
			m6[fwFwLpm6Key{Prefixlen: uint32(p.Bits()), Addr: words(a)}] = span
		}
	}
}

type portRule struct {
	ports Ports
	id    uint32
}

// portSpans sweeps the port ranges: each stretch of ports between range
// boundaries gets one span of the rules covering it.
func (c *compiled) portSpans(rules []portRule) []fwFwSpan {
	if len(rules) == 0 {
		return nil
	}
	type event struct {
		port  int
		start bool
		id    uint32
	}
	var ev []event
	for _, r := range rules {
		ev = append(ev, event{int(r.ports.Lo), true, r.id}, event{int(r.ports.Hi) + 1, false, r.id})
	}
	sort.Slice(ev, func(i, j int) bool { return ev[i].port < ev[j].port })
	out := make([]fwFwSpan, 65536)
	active := map[uint32]bool{}
	for i := 0; i < len(ev); {
		p := ev[i].port
		for ; i < len(ev) && ev[i].port == p; i++ {
			if ev[i].start {
				active[ev[i].id] = true
			} else {
				delete(active, ev[i].id)
			}
		}
		if p > 65535 || len(active) == 0 {
			continue
		}
		end := 65536
		if i < len(ev) {
			end = ev[i].port
		}
		ids := make([]uint32, 0, len(active))
		for id := range active {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		span := c.addSpan(ids)
		for q := p; q < end && q < 65536; q++ {
			out[q] = span
		}
	}
	return out
}

// kernelRule converts a rule to the kernel's layout: addresses IPv4-mapped,
// words in memory (network) byte order.
func kernelRule(r Rule) fwFwRule {
	k := fwFwRule{
		Family: r.Family(), Proto: uint8(r.Proto), Action: uint8(r.Action),
		SportLo: r.SPort.Lo, SportHi: r.SPort.Hi, DportLo: r.DPort.Lo, DportHi: r.DPort.Hi,
	}
	if !r.SPort.IsAny() || !r.DPort.IsAny() {
		k.HasPorts = 1
	}
	k.SrcNet, k.SrcMask = netMask(r.Src)
	k.DstNet, k.DstMask = netMask(r.Dst)
	return k
}

func netMask(p Prefix) (net, mask [4]uint32) {
	if !p.IsValid() {
		return
	}
	a := p.Addr().As16() // IPv4-mapped for IPv4
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	var m [16]byte
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	for i := range a {
		a[i] &= m[i]
	}
	return words(a[:]), words(m[:])
}

// words reads 16 bytes as four words in memory order.
func words(b []byte) (w [4]uint32) {
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

func unwords(w [4]uint32) (b [16]byte) {
	for i := range w {
		binary.LittleEndian.PutUint32(b[4*i:], w[i])
	}
	return b
}

// ruleFromKernel reads a rule back from a slot's rule map.
func ruleFromKernel(k fwFwRule) Rule {
	r := Rule{
		Action: Action(k.Action), Proto: Proto(k.Proto),
		SPort: Ports{k.SportLo, k.SportHi, true}, DPort: Ports{k.DportLo, k.DportHi, true},
	}
	r.Src = prefixFromKernel(k.Family, k.SrcNet, k.SrcMask)
	r.Dst = prefixFromKernel(k.Family, k.DstNet, k.DstMask)
	return r
}

func prefixFromKernel(family uint8, net, mask [4]uint32) Prefix {
	m := unwords(mask)
	bits := 0
	for _, b := range m {
		for i := 7; i >= 0 && b&(1<<i) != 0; i-- {
			bits++
		}
		if b != 0xff {
			break
		}
	}
	if bits == 0 {
		return Prefix{}
	}
	a := netip.AddrFrom16(unwords(net))
	if family == 4 {
		a = a.Unmap()
		bits -= 96
	}
	return Prefix{netip.PrefixFrom(a, bits)}
}
