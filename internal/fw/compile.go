package fw

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
	"sort"
)

// A rule is anchored on one of its fields: the index that finds it. A packet
// checks the rules anchored on its source address, its destination address,
// its ports, and its family and protocol; every rule that can match is in one
// of those spans, so first-match order is kept without walking all rules.
type anchor int

const (
	anchorNone anchor = iota
	anchorSrc
	anchorDst
	anchorDPort
	anchorSPort
	// anchorDup marks a rule whose match fields repeat an earlier rule's:
	// it can never be the first match, so no index holds it.
	anchorDup
)

// Sizes the data path's arrays are declared with (bpf/fw/fw_shared.h).
const (
	portLevels     = 17
	portBlocks     = 1 << portLevels
	wildPerFamily  = 257
	statsSlotShift = 18
	flowWays       = 4
	maxNest4       = 33
	maxNest6       = 129
	directions     = 2 // source, destination
	// Port ranges exist for TCP and UDP only: one tree per direction and
	// protocol, so that a packet checks the other protocol's never.
	portTrees       = 2 * directions
	slash16s        = 1 << 16 // IPv4 /16s per direction
	wildAnyProtocol = 256
	portWideLevels  = 11
	portWideShift   = 16 - portWideLevels + 1
	snodeKeys       = 15 // FW_SNODE_KEYS
	hullShift       = 3  // FW_HULL_SHIFT
	hullLevels      = 6  // FW_HULL_LEVELS
	hullSpan        = 64 // FW_HULL_SPAN
)

// Flags of fw_set (enum fw_set_flag): which indexes hold rules.
const (
	setSrc4 = 1 << iota
	setDst4
	setSrc6
	setDst6
	setSPort
	setDPort
)

// compiled is a rule set in the layout of one slot's maps.
type compiled struct {
	set     fwFwSet
	rules   []fwFwRule // by id; index 0 is the default policy's slot
	cands   []fwFwRule
	hulls   []fwFwRule   // the candidates' blocks' hulls, level by level
	cls4    []uint64     // per direction, a nibble per IPv4 /16: its class (cls4Class)
	snode4  []fwFwSnode4 // both directions' IPv4 search trees
	leaf4   []uint32     // per direction and IPv4 /16: the tree node holding its intervals + 1, or 0
	ivl6    []fwFwIvl6
	nodes   []fwFwNode // 0 is "no anchor prefix"
	wild    []fwFwSpan
	pwide   []fwFwPwide // levels 0-10 per port >> portWideShift, and its ports with narrow levels
	pnarrow []uint8     // levels 11-16 per port
	pblock  []fwFwSpan
	// longest is the longest span: the most rules one span makes a packet
	// check.
	longest int
}

// compile lays out a validated rule set. Rule ids are positions + 1. Time
// and memory are linear in the rules (times a log for sorting): each rule
// is stored once, or on at most 32 port blocks, or twice when it matches
// both families and has no anchor.
func compile(rs *RuleSet) *compiled {
	c := &compiled{
		rules:   make([]fwFwRule, len(rs.Rules)+1),
		cls4:    make([]uint64, directions*slash16s/16),
		leaf4:   make([]uint32, directions*slash16s),
		nodes:   []fwFwNode{{}},
		wild:    make([]fwFwSpan, 2*wildPerFamily),
		pwide:   make([]fwFwPwide, portTrees<<(16-portWideShift)),
		pnarrow: make([]uint8, portTrees<<16),
		pblock:  make([]fwFwSpan, portTrees*portBlocks),
		cands:   make([]fwFwRule, 0, len(rs.Rules)+16),
	}
	for t := range c.set.PortFirst {
		c.set.PortTreeFirst[t] = math.MaxUint32
		for l := range c.set.PortFirst[t] {
			c.set.PortFirst[t][l] = math.MaxUint32
		}
	}
	c.set.Nrules = uint32(len(rs.Rules))
	c.set.DefaultAction = uint8(rs.Default)
	for i, r := range rs.Rules {
		c.rules[i+1] = kernelRule(r, uint32(i+1))
		c.rules[i+1].Prio = uint32(i+1) << prioShift
	}

	anchors := chooseAnchors(rs.Rules)
	// Chain each repeat to the next, for fw del (see dup_next).
	last := map[matchKey]uint32{}
	for i, r := range rs.Rules {
		id := uint32(i + 1)
		k := r.matchKey()
		if anchors[i] == anchorDup {
			c.rules[id].Flags |= ruleFlagDup
			c.rules[last[k]].DupNext = id
		}
		last[k] = id
	}
	prefixes := [directions]map[netip.Prefix][]uint32{{}, {}}
	var ports [portTrees][]portRule
	var wild [2 * wildPerFamily][]uint32
	for i, r := range rs.Rules {
		id := uint32(i + 1)
		switch anchors[i] {
		case anchorSrc:
			prefixes[0][r.Src.Prefix] = append(prefixes[0][r.Src.Prefix], id)
		case anchorDst:
			prefixes[1][r.Dst.Prefix] = append(prefixes[1][r.Dst.Prefix], id)
		case anchorSPort:
			t := portTree(0, r.Proto)
			ports[t] = append(ports[t], portRule{r.SPort, id})
		case anchorDPort:
			t := portTree(1, r.Proto)
			ports[t] = append(ports[t], portRule{r.DPort, id})
		case anchorNone:
			for f, fam := range []uint8{4, 6} {
				if r.Family() != 0 && r.Family() != fam {
					continue
				}
				k := f*wildPerFamily + wildAnyProtocol
				if r.Proto != 0 {
					k = f*wildPerFamily + int(r.Proto)
				}
				wild[k] = append(wild[k], id)
			}
		}
	}
	for k, ids := range wild {
		c.wild[k] = c.addSpan(ids)
	}
	for d := range directions {
		c.prefixIndex(d, prefixes[d])
	}
	for t := range portTrees {
		c.portIndex(t, ports[t])
	}
	c.hullLevels()
	return c
}

// hullLevels lays out the hulls of the candidates' aligned blocks: level l
// has one per 8^l candidates (FW_HULL_LEVELS in bpf/fw/fw_shared.h), each
// the hull of 8 of the level below. About a seventh of the candidates.
func (c *compiled) hullLevels() {
	below := c.cands
	for l := range hullLevels {
		c.set.HullBase[l] = uint32(len(c.hulls))
		var level []fwFwRule
		for lo := 0; lo < len(below); lo += 1 << hullShift {
			level = append(level, hullOf(below[lo:min(lo+1<<hullShift, len(below))]))
		}
		c.hulls = append(c.hulls, level...)
		below = level
	}
}

// hullOf is a rule that matches every packet one of rs matches, as narrow
// as one rule can be: their common family and protocol, the longest
// prefixes that cover all of theirs, the spans of their port ranges, and
// their least prio. Fragments after the first (no ports) skip it only when
// every rule has ports.
func hullOf(rs []fwFwRule) fwFwRule {
	h := rs[0]
	h.Id, h.Action, h.DupNext = 0, 0, 0
	for _, r := range rs[1:] {
		if r.Family != h.Family {
			h.Family = 0
		}
		if r.Proto != h.Proto {
			h.Proto = 0
		}
		if h.CtStates != 0 {
			if r.CtStates == 0 {
				h.CtStates = 0
			} else {
				h.CtStates |= r.CtStates
			}
		}
		h.Flags &= r.Flags
		h.SportLo, h.SportHi = min(h.SportLo, r.SportLo), max(h.SportHi, r.SportHi)
		h.DportLo, h.DportHi = min(h.DportLo, r.DportLo), max(h.DportHi, r.DportHi)
		h.Prio = min(h.Prio, r.Prio)
		h.SrcNet, h.SrcMask = coverBoth(h.SrcNet, h.SrcMask, r.SrcNet, r.SrcMask)
		h.DstNet, h.DstMask = coverBoth(h.DstNet, h.DstMask, r.DstNet, r.DstMask)
	}
	return h
}

// coverBoth is the longest prefix (as a rule's net and mask) that covers
// two others.
func coverBoth(n1, m1, n2, m2 [4]uint32) (net, mask [4]uint32) {
	a, b := unwords(n1), unwords(n2)
	ma, mb := unwords(m1), unwords(m2)
	bits := min(leadingOnes(ma), leadingOnes(mb))
	for i := range bits {
		if (a[i/8]^b[i/8])&(0x80>>(i%8)) != 0 {
			bits = i
			break
		}
	}
	var m [16]byte
	for i := range bits {
		m[i/8] |= 0x80 >> (i % 8)
	}
	for i := range a {
		a[i] &= m[i]
	}
	return words(a[:]), words(m[:])
}

func leadingOnes(m [16]byte) int {
	n := 0
	for _, b := range m {
		n += bits.LeadingZeros8(^b)
		if b != 0xff {
			break
		}
	}
	return n
}

// matchKey is what a rule matches, for finding repeats.
type matchKey struct {
	family, proto uint8
	src, dst      netip.Prefix
	sport, dport  Ports
	ct            CtStates
}

func (r Rule) matchKey() matchKey {
	return matchKey{r.Family(), uint8(r.Proto), r.Src.Prefix, r.Dst.Prefix, r.SPort.norm(), r.DPort.norm(), r.CtState}
}

// chooseAnchors puts each rule on the field where packets find it least:
// see the cost below. Addresses win ties.
func chooseAnchors(rules []Rule) []anchor {
	src, dst := map[netip.Prefix]int{}, map[netip.Prefix]int{}
	sp, dp := map[Ports]int{}, map[Ports]int{}
	seen := make(map[matchKey]struct{}, len(rules))
	out := make([]anchor, len(rules))
	for i, r := range rules {
		k := r.matchKey()
		if _, dup := seen[k]; dup {
			out[i] = anchorDup
			continue
		}
		seen[k] = struct{}{}
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
	for i, r := range rules {
		if out[i] == anchorDup {
			continue
		}
		// A packet checks every rule anchored on a value it falls in, so
		// a rule goes where few rules share the value and few packets
		// fall in it: the share of addresses or ports the value covers
		// times the rules that share it. A /0 is no anchor at all.
		best, bestCost := anchorNone, math.Inf(1)
		try := func(a anchor, ok bool, coverLog2 int, n int) {
			if cost := math.Ldexp(float64(n), coverLog2); ok && cost < bestCost {
				best, bestCost = a, cost
			}
		}
		try(anchorSrc, r.Src.IsValid() && r.Src.Bits() > 0, -r.Src.Bits(), src[r.Src.Prefix])
		try(anchorDst, r.Dst.IsValid() && r.Dst.Bits() > 0, -r.Dst.Bits(), dst[r.Dst.Prefix])
		try(anchorDPort, !r.DPort.IsAny(), bits.Len(uint(r.DPort.Hi-r.DPort.Lo))-16, dp[r.DPort])
		try(anchorSPort, !r.SPort.IsAny(), bits.Len(uint(r.SPort.Hi-r.SPort.Lo))-16, sp[r.SPort])
		out[i] = best
	}
	return out
}

// norm makes "any" one value whether it was given or not.
func (p Ports) norm() Ports {
	if p.IsAny() {
		return AnyPort
	}
	return p
}

func (c *compiled) addSpan(ids []uint32) fwFwSpan {
	if len(ids) == 0 {
		return fwFwSpan{}
	}
	s := fwFwSpan{Start: uint32(len(c.cands)), Len: uint32(len(ids))}
	for _, id := range ids {
		c.cands = append(c.cands, c.rules[id])
	}
	c.longest = max(c.longest, len(ids))
	return s
}

// u128 is an address as a number, IPv4 in the low word.
type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

func (a u128) next() (u128, bool) {
	if a.lo == math.MaxUint64 {
		return u128{a.hi + 1, 0}, a.hi == math.MaxUint64
	}
	return u128{a.hi, a.lo + 1}, false
}

func addrNum(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{0, uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// lastAddr is the highest address of a prefix.
func lastAddr(p netip.Prefix) u128 {
	a := addrNum(p.Addr())
	host := p.Addr().BitLen() - p.Bits()
	switch {
	case host >= 128:
		return u128{math.MaxUint64, math.MaxUint64}
	case host >= 64:
		return u128{a.hi | (1<<(host-64) - 1), math.MaxUint64}
	}
	return u128{a.hi, a.lo | (1<<host - 1)}
}

type interval struct {
	start u128
	node  uint32
}

// prefixIndex builds one direction's nodes and intervals for both
// families. Anchor prefixes of one family nest or are disjoint, so a sweep
// in address order with a stack of the prefixes that cover the current
// address yields each interval's longest cover and each node's parent.
func (c *compiled) prefixIndex(dir int, by map[netip.Prefix][]uint32) {
	var ps [2][]netip.Prefix
	for p := range by {
		f := 0
		if !p.Addr().Is4() {
			f = 1
		}
		ps[f] = append(ps[f], p)
	}
	for f := range ps {
		sort.Slice(ps[f], func(i, j int) bool {
			a, b := ps[f][i], ps[f][j]
			if a.Addr() != b.Addr() {
				return a.Addr().Less(b.Addr())
			}
			return a.Bits() < b.Bits()
		})
		type open struct {
			node uint32
			last u128
		}
		var (
			stack []open
			ivs   []interval
			cur   u128 // start of the next interval
			done  bool // cur ran past the last address
		)
		emit := func(node uint32) {
			if len(ivs) > 0 && ivs[len(ivs)-1].node == node {
				return
			}
			ivs = append(ivs, interval{cur, node})
		}
		// close ends the innermost open prefix: the addresses up to its
		// last are its own.
		close := func() {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if !done && !top.last.less(cur) {
				emit(top.node)
				cur, done = top.last.next()
			}
		}
		for _, p := range ps[f] {
			start := addrNum(p.Addr())
			for len(stack) > 0 && stack[len(stack)-1].last.less(start) {
				close()
			}
			if cur.less(start) {
				var node uint32
				if len(stack) > 0 {
					node = stack[len(stack)-1].node
				}
				emit(node)
			}
			cur = start
			parent := uint32(0)
			if len(stack) > 0 {
				parent = stack[len(stack)-1].node
			}
			id := uint32(len(c.nodes))
			first := c.rules[by[p][0]].Prio // ids ascend
			if parent != 0 {
				first = min(first, c.nodes[parent].First)
			}
			c.nodes = append(c.nodes, fwFwNode{Span: c.addSpan(by[p]), Parent: parent, First: first})
			stack = append(stack, open{id, lastAddr(p)})
		}
		for len(stack) > 0 {
			close()
		}
		if !done {
			emit(0)
		}
		if len(ivs) == 0 || ivs[0].start != (u128{}) {
			ivs = append([]interval{{}}, ivs...)
		}
		if len(ps[f]) > 0 {
			c.set.Flags |= [2][2]uint32{{setSrc4, setDst4}, {setSrc6, setDst6}}[f][dir]
		}
		if f == 0 {
			c.index4(dir, ivs)
		} else {
			base := uint32(len(c.ivl6))
			for _, iv := range ivs {
				c.ivl6 = append(c.ivl6, fwFwIvl6{Hi: iv.start.hi, Lo: iv.start.lo, Node: iv.node})
			}
			c.set.Ivl6[dir] = fwFwRange{Lo: base, Hi: uint32(len(c.ivl6)) - 1}
		}
	}
}

// index4 builds a direction's IPv4 search tree over its intervals and the
// class of each /16.
func (c *compiled) index4(dir int, ivs []interval) {
	for len(ivs) > 1 && ivs[len(ivs)-1].start.lo > math.MaxUint32 {
		ivs = ivs[:len(ivs)-1] // past the last IPv4 address
	}
	// Each /16's class: from the least first of the nodes its intervals
	// lead to (a node's first covers its parents). The intervals holding
	// its addresses run from the last that starts at or below its first
	// address; a sweep, so linear in the intervals.
	i := 0
	// The /16s with anchors, and the first and last interval holding their
	// addresses.
	type span16 struct{ h, first, last int }
	var held []span16
	for h := range slash16s {
		lo := uint64(h) << 16
		for i+1 < len(ivs) && ivs[i+1].start.lo <= lo {
			i++
		}
		first := uint32(math.MaxUint32)
		j := i
		for ; j < len(ivs) && ivs[j].start.lo <= lo|0xffff; j++ {
			if n := ivs[j].node; n != 0 {
				first = min(first, c.nodes[n].First)
			}
		}
		if first != math.MaxUint32 {
			c.setClass4(dir, h, first)
			held = append(held, span16{h, i, j - 1})
		}
	}
	c.stree4(dir, ivs)
	// A /16 whose intervals lie in one level-0 tree node is searched
	// there, without a walk from the root.
	base := int(c.set.Stree4Base[dir][0])
	for _, r := range held {
		if r.first/snodeKeys == r.last/snodeKeys {
			c.leaf4[dir*slash16s+r.h] = uint32(base + r.first/snodeKeys + 1)
		}
	}
}

// stree4 lays out a direction's search tree (struct fw_snode4): level 0
// holds the intervals' starts and nodes, each level above the first start
// of each tree node below, up to one tree node.
func (c *compiled) stree4(dir int, ivs []interval) {
	const k = snodeKeys
	keys := make([]uint32, len(ivs))
	for i, iv := range ivs {
		keys[i] = uint32(iv.start.lo)
	}
	for level := 0; ; level++ {
		c.set.Stree4Base[dir][level] = uint32(len(c.snode4))
		var up []uint32
		for lo := 0; lo < len(keys); lo += k {
			n := min(k, len(keys)-lo)
			sn := fwFwSnode4{N: uint32(n)}
			for j := range k {
				sn.Key[j] = math.MaxUint32
				if j < n {
					sn.Key[j] = keys[lo+j]
					if level == 0 {
						sn.Node[j] = ivs[lo+j].node
					}
				}
			}
			c.snode4 = append(c.snode4, sn)
			up = append(up, keys[lo])
		}
		if len(up) == 1 {
			c.set.Stree4Levels[dir] = uint32(level + 1)
			return
		}
		keys = up
	}
}

// cls4Class is the class of a /16 whose addresses lead to rules of prio
// first and above: the largest class whose floor (FW_CLS4_FLOOR in
// bpf/fw/fw_shared.h) is at most first. Class 0 is "no anchor".
func cls4Class(first uint32) uint64 {
	q := uint64(cls4Max)
	for q > 1 && cls4Floor(q) > first {
		q--
	}
	return q
}

func cls4Floor(q uint64) uint32 {
	if q < 2 {
		return 0
	}
	return 1 << (q + 14)
}

const cls4Max = 15

func (c *compiled) setClass4(dir, h int, first uint32) {
	i := dir*slash16s + h
	c.cls4[i/16] |= cls4Class(first) << (4 * (i % 16))
}

type portRule struct {
	ports Ports
	id    uint32
}

// portTree is the port tree of a direction (0 source, 1 destination) and
// protocol (a rule with ports is TCP or UDP), as bpf/fw/fw.c port_tree.
func portTree(dir int, p Proto) int {
	if p == 17 {
		return dir | 2
	}
	return dir
}

// portIndex stores each port range of one tree on the aligned blocks that
// tile it (at most 32), and marks for each port the levels of its blocks
// that hold rules.
func (c *compiled) portIndex(tree int, rules []portRule) {
	if len(rules) == 0 {
		return
	}
	c.set.Flags |= [2]uint32{setSPort, setDPort}[tree&1]
	blocks := map[uint32][]uint32{}
	for _, r := range rules {
		for lo, hi := int(r.ports.Lo), int(r.ports.Hi); lo <= hi; {
			size := 1 << 16
			if lo != 0 {
				size = lo & -lo
			}
			for size > hi-lo+1 {
				size >>= 1
			}
			level := 16 - bits.TrailingZeros(uint(size))
			b := uint32(1<<level + lo>>(16-level))
			blocks[b] = append(blocks[b], r.id)
			lo += size
		}
	}
	keys := make([]uint32, 0, len(blocks))
	for b := range blocks {
		keys = append(keys, b)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, b := range keys {
		c.pblock[tree*portBlocks+int(b)] = c.addSpan(blocks[b])
		level := bits.Len32(b) - 1
		// Spans ascend: the first rule is the block's lowest prio.
		c.set.PortFirst[tree][level] = min(c.set.PortFirst[tree][level], c.rules[blocks[b][0]].Prio)
		c.set.PortTreeFirst[tree] = min(c.set.PortTreeFirst[tree], c.set.PortFirst[tree][level])
		width := 1 << (16 - level)
		first := int(b-1<<level) * width
		if level < portWideLevels {
			for p := first >> portWideShift; p < (first+width)>>portWideShift; p++ {
				c.pwide[tree<<(16-portWideShift)|p].Levels |= 1 << level
				c.set.PortGroups[tree][p/64] |= 1 << (p % 64)
			}
			continue
		}
		for p := first; p < first+width; p++ {
			g := p >> portWideShift
			c.pnarrow[tree<<16|p] |= 1 << (level - portWideLevels)
			c.pwide[tree<<(16-portWideShift)|g].Narrow |= 1 << (p % (1 << portWideShift))
			c.set.PortGroups[tree][g/64] |= 1 << (g % 64)
		}
	}
}

// kernelRule converts a rule to the kernel's layout: addresses IPv4-mapped,
// words in memory (network) byte order.
func kernelRule(r Rule, id uint32) fwFwRule {
	k := fwFwRule{
		Id: id, Family: r.Family(), Proto: uint8(r.Proto), Action: uint8(r.Action),
		SportLo: r.SPort.Lo, SportHi: r.SPort.Hi, DportLo: r.DPort.Lo, DportHi: r.DPort.Hi,
		CtStates: uint8(r.CtState),
	}
	if !r.SPort.IsAny() || !r.DPort.IsAny() {
		k.Flags |= ruleFlagPorts
	}
	if r.Src.IsValid() {
		k.Flags |= ruleFlagSrc
	}
	if r.Dst.IsValid() {
		k.Flags |= ruleFlagDst
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
		CtState: CtStates(k.CtStates),
	}
	if k.Flags&ruleFlagSrc != 0 {
		r.Src = prefixFromKernel(k.Family, k.SrcNet, k.SrcMask)
	}
	if k.Flags&ruleFlagDst != 0 {
		r.Dst = prefixFromKernel(k.Family, k.DstNet, k.DstMask)
	}
	return r
}

// Flags of a kernel rule (enum fw_rule_flag).
const (
	ruleFlagPorts = 1
	ruleFlagSrc   = 2
	ruleFlagDst   = 4
	ruleFlagDup   = 8
)

// prefixFromKernel reads a prefix the rule gives; a zero mask is the /0 of
// the rule's family.
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
	a := netip.AddrFrom16(unwords(net))
	if family == 4 {
		a = a.Unmap()
		bits -= 96
	}
	return Prefix{netip.PrefixFrom(a, bits)}
}
