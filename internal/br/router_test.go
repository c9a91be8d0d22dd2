package br

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/scionproto/scion/pkg/addr"

	"github.com/fastpath-dev/fastpath/internal/checksum"
	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// The AS of the tests: 1-ff00:0:110, router br1 with interfaces of every
// link type, a sibling router br2, IPv4 and IPv6 underlays.
var (
	localIA   = addr.MustParseIA("1-ff00:0:110")
	childIA   = addr.MustParseIA("1-ff00:0:111")
	parentIA  = addr.MustParseIA("1-ff00:0:100")
	coreIA    = addr.MustParseIA("1-ff00:0:120")
	peerIA    = addr.MustParseIA("2-ff00:0:210")
	child6IA  = addr.MustParseIA("1-ff00:0:113")
	sibChild  = addr.MustParseIA("1-ff00:0:112")
	farIA     = addr.MustParseIA("1-ff00:0:999")
	internal  = netip.MustParseAddrPort("198.18.0.1:30042")
	sibling   = netip.MustParseAddrPort("198.18.0.2:30042")
	testKey   = b64("xEg7WN/vMCn+ccb3P7O/5A==") // derived from master key IAOYbTs/CobLFV3T3jt6lQ==
	otherKey  = b64("AAECAwQFBgcICQoLDA0ODw==")
	nowTS     = uint32(time.Now().Unix()) - 600
	hostA     = addr.HostIP(netip.MustParseAddr("198.18.0.100"))
	hostFar   = addr.HostIP(netip.MustParseAddr("198.51.100.7"))
	extLocal  = map[uint16]netip.AddrPort{}
	extRemote = map[uint16]netip.AddrPort{}
)

func b64(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func testConfig() *Config {
	ifs := []Interface{
		{ID: 1, Kind: External, LinkType: "child", NeighborIA: childIA},
		{ID: 2, Kind: External, LinkType: "parent", NeighborIA: parentIA},
		{ID: 3, Kind: External, LinkType: "core", NeighborIA: coreIA},
		{ID: 4, Kind: External, LinkType: "peer", NeighborIA: peerIA},
		{ID: 6, Kind: External, LinkType: "core", NeighborIA: coreIA},
		{ID: 7, Kind: External, LinkType: "child", NeighborIA: child6IA},
		{ID: 5, Kind: Sibling, LinkType: "child", NeighborIA: sibChild, SiblingAddr: sibling, Router: "br2", MTU: 1472},
	}
	for i := range ifs {
		f := &ifs[i]
		if f.Kind != External {
			continue
		}
		if f.ID == 7 {
			f.Local = netip.MustParseAddrPort("[2001:2::1]:50000")
			f.Remote = netip.MustParseAddrPort("[2001:2::2]:50000")
		} else {
			f.Local = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(f.ID), 1}), 50000)
			f.Remote = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(f.ID), 2}), 50000)
		}
		f.Router = "br1"
		f.MTU = 1472
		extLocal[f.ID], extRemote[f.ID] = f.Local, f.Remote
	}
	return &Config{
		Path: "test.toml", RouterID: "br1", MACCheck: true, SCMP: SCMPPass, XDPMode: XDPModeNative, UDPChecksum: UDPChecksumUpdate,
		IA: localIA, MTU: 1472, Internal: internal,
		DispatchedPortStart: 31000, DispatchedPortEnd: 32767,
		Interfaces: ifs, Keys: [2][]byte{testKey, nil},
	}
}

func requireKernel(t testing.TB) { labtest.RequireKernel(t) }

func loadTestRouter(t testing.TB, cfg *Config) *Router {
	t.Helper()
	requireKernel(t)
	r, err := Load(cfg, LoadOptions{SkipFIB: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// result is what one run of the router did to one frame.
type result struct {
	action  uint32
	verdict string
	out     []byte
}

func (r *Router) runOne(t testing.TB, frame []byte) result {
	t.Helper()
	return r.runWith(t, r.objs.Router, frame)
}

// runWith runs a frame through one program of the router (the generic-mode
// copy, say), reporting the one verdict it counted.
func (r *Router) runWith(t testing.TB, prog *ebpf.Program, frame []byte) result {
	t.Helper()
	before, err := r.Counters()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(frame)+256)
	opts := ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := prog.Run(&opts)
	if err != nil {
		t.Fatal(err)
	}
	after, err := r.Counters()
	if err != nil {
		t.Fatal(err)
	}
	res := result{action: ret, out: opts.DataOut, verdict: "none"}
	n := 0
	for s := range after {
		for v := range after[s] {
			if after[s][v].Packets != before[s][v].Packets {
				res.verdict = VerdictName(Verdict(v))
				n++
			}
		}
	}
	if n > 1 {
		t.Fatalf("one packet moved %d counters", n)
	}
	return res
}

const (
	xdpAborted = 0
	xdpDrop    = 1
	xdpPass    = 2
	xdpTX      = 3
)

// seg is a shorthand for a segment with hops given as (ingress, egress) pairs.
func seg(consDir bool, carried int, hops ...[2]uint16) Segment {
	s := Segment{ConsDir: consDir, Timestamp: nowTS, SegID: 0x1234, Carried: carried}
	for _, h := range hops {
		s.Hops = append(s.Hops, Hop{ConsIngress: h[0], ConsEgress: h[1], ExpTime: 63})
	}
	return s
}

type hopPair = [2]uint16

// arrival says where a packet comes from: an external interface, or the
// internal network from a given address.
type arrival struct {
	ifid uint16
	from netip.AddrPort // for ifid 0
}

type pktCase struct {
	path     PathSpec
	src, dst addr.IA
	dstHost  addr.Host
	dstPort  uint16
	in       arrival
	mutate   func([]byte)
	mac      func(*SCIONPacket)
	cfg      func(*Config)
	// frame, if set, edits the whole frame, underlay included: a case for
	// the XDP program alone (the reference's socket never sees underlays).
	frame func([]byte) []byte

	wantAction  uint32
	wantVerdict string
	// For forwarded packets: the path as it must leave, and where to.
	wantPath PathSpec
	wantFrom netip.AddrPort
	wantTo   netip.AddrPort
}

func (c pktCase) packet() SCIONPacket {
	p := SCIONPacket{
		Path: c.path, Key: testKey, SrcIA: c.src, DstIA: c.dst,
		SrcHost: hostFar, DstHost: c.dstHost, SrcPort: 40000, DstPort: c.dstPort,
		Payload: []byte("fastpath test payload"),
		Mutate:  c.mutate,
	}
	if c.dstHost == (addr.Host{}) {
		p.DstHost = hostFar
	}
	if p.DstPort == 0 {
		p.DstPort = 9
	}
	if c.in.ifid != 0 {
		p.UnderlaySrc, p.UnderlayDst = extRemote[c.in.ifid], extLocal[c.in.ifid]
	} else {
		p.UnderlaySrc, p.UnderlayDst = c.in.from, internal
		if !p.UnderlaySrc.IsValid() {
			p.UnderlaySrc = netip.MustParseAddrPort("198.18.0.100:40000")
		}
	}
	if c.mac != nil {
		c.mac(&p)
	}
	return p
}

func intp(i int) *int { return &i }

func TestRouterPackets(t *testing.T) {
	cases := routerCases()
	// Loading a router takes a third of a second: cases that keep the
	// default configuration share one.
	shared := loadTestRouter(t, testConfig())
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := shared
			if c.cfg != nil {
				cfg := testConfig()
				c.cfg(cfg)
				r = loadTestRouter(t, cfg)
			}
			checkCase(t, r, c)
		})
	}
}

// routerCases is the packet fixture table: each case's input and what the
// router must do with it.
func routerCases() map[string]pktCase {
	testConfig() // fills extLocal and extRemote
	// Paths as seen by br1 of 1-ff00:0:110 (interfaces: 1 child, 2 parent,
	// 3 and 6 core, 4 peer, 7 child over IPv6; 5 belongs to sibling br2).
	up := func(carried int) Segment { // child 111 → 110 → parent 100, against construction
		return seg(false, carried, hopPair{0, 21}, hopPair{2, 1}, hopPair{31, 0})
	}
	down := func(carried int) Segment { // parent 100 → 110 → child 111, along construction
		return seg(true, carried, hopPair{0, 31}, hopPair{2, 1}, hopPair{21, 0})
	}
	core := func(carried int) Segment { // 120 → 110 → 130 along a core segment
		return seg(true, carried, hopPair{0, 41}, hopPair{3, 6}, hopPair{51, 0})
	}
	cases := map[string]pktCase{
		"transit up, child to parent": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{up(1)}, CurrHF: 2},
			wantFrom: extLocal[2], wantTo: extRemote[2],
		},
		"transit down, parent to child": {
			path: PathSpec{Segments: []Segment{down(1)}, CurrHF: 1},
			src:  farIA, dst: childIA, in: arrival{ifid: 2},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{down(2)}, CurrHF: 2},
			wantFrom: extLocal[1], wantTo: extRemote[1],
		},
		"transit core to core": {
			path: PathSpec{Segments: []Segment{core(1)}, CurrHF: 1},
			src:  farIA, dst: coreIA, in: arrival{ifid: 3},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{core(2)}, CurrHF: 2},
			wantFrom: extLocal[6], wantTo: extRemote[6],
		},
		"transit child to IPv6 child is a link-type error": {
			path: PathSpec{Segments: []Segment{seg(true, 1, hopPair{0, 11}, hopPair{1, 7}, hopPair{21, 0})}, CurrHF: 1},
			src:  farIA, dst: child6IA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "link_type",
		},
		"outbound from a local host, first hop": {
			path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{2, 0}, hopPair{31, 21}, hopPair{0, 41})}, CurrHF: 0},
			src:  localIA, dst: farIA, in: arrival{ifid: 0},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{seg(false, 2, hopPair{2, 0}, hopPair{31, 21}, hopPair{0, 41})}, CurrHF: 1},
			wantFrom: extLocal[2], wantTo: extRemote[2],
		},
		"inbound to a local host, UDP port in the dispatched range": {
			path: PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2},
			src:  farIA, dst: localIA, dstHost: hostA, dstPort: 31500, in: arrival{ifid: 2},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2},
			wantFrom: internal, wantTo: netip.MustParseAddrPort("198.18.0.100:31500"),
		},
		"inbound to a local host, port outside the range goes to 30041": {
			path: PathSpec{Segments: []Segment{seg(false, 1, hopPair{0, 1}, hopPair{21, 41}, hopPair{31, 0})}, CurrHF: 0},
			src:  childIA, dst: localIA, dstHost: hostA, dstPort: 8080, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "bad_dst_ia", // CurrHF 0 is not the last hop
		},
		"inbound against construction updates SegID": {
			path: PathSpec{Segments: []Segment{seg(false, 1, hopPair{21, 41}, hopPair{31, 11}, hopPair{0, 1})}, CurrHF: 2},
			src:  childIA, dst: localIA, dstHost: hostA, dstPort: 8080, in: arrival{ifid: 1},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{seg(false, 0, hopPair{21, 41}, hopPair{31, 11}, hopPair{0, 1})}, CurrHF: 2},
			// 8080 lies outside dispatched_ports: its own port from
			// v0.14.0 (the default), 30041 before (versionCases).
			wantFrom: internal, wantTo: netip.MustParseAddrPort("198.18.0.100:8080"),
		},
		"AS transit in: to the sibling owning the egress": {
			path: PathSpec{Segments: []Segment{seg(true, 1, hopPair{0, 31}, hopPair{2, 5}, hopPair{21, 0})}, CurrHF: 1},
			src:  farIA, dst: sibChild, in: arrival{ifid: 2},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{seg(true, 1, hopPair{0, 31}, hopPair{2, 5}, hopPair{21, 0})}, CurrHF: 1},
			wantFrom: internal, wantTo: sibling,
		},
		"AS transit out: from the sibling to our interface": {
			path: PathSpec{Segments: []Segment{seg(false, 1, hopPair{0, 21}, hopPair{2, 5}, hopPair{31, 0})}, CurrHF: 1},
			src:  sibChild, dst: farIA, in: arrival{from: sibling},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{seg(false, 1, hopPair{0, 21}, hopPair{2, 5}, hopPair{31, 0})}, CurrHF: 2},
			wantFrom: extLocal[2], wantTo: extRemote[2],
		},
		"AS transit out from a host posing as the sibling": {
			path: PathSpec{Segments: []Segment{seg(false, 1, hopPair{0, 21}, hopPair{2, 5}, hopPair{31, 0})}, CurrHF: 1},
			src:  sibChild, dst: farIA, in: arrival{from: netip.MustParseAddrPort("198.18.0.66:30042")},
			wantAction: xdpDrop, wantVerdict: "underlay_mismatch",
		},
		"crossover up to down, IPv4 in, IPv6 out": {
			path: PathSpec{Segments: []Segment{
				seg(false, 1, hopPair{0, 21}, hopPair{0, 1}),
				seg(true, 0, hopPair{0, 7}, hopPair{31, 0}),
			}, CurrHF: 1},
			src: childIA, dst: child6IA, in: arrival{ifid: 1},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{
				seg(false, 0, hopPair{0, 21}, hopPair{0, 1}),
				seg(true, 1, hopPair{0, 7}, hopPair{31, 0}),
			}, CurrHF: 3},
			wantFrom: extLocal[7], wantTo: extRemote[7],
		},
		"crossover up to core segment": {
			path: PathSpec{Segments: []Segment{
				seg(false, 1, hopPair{0, 21}, hopPair{0, 1}),
				seg(true, 0, hopPair{0, 3}, hopPair{41, 0}),
			}, CurrHF: 1},
			src: childIA, dst: coreIA, in: arrival{ifid: 1},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{
				seg(false, 0, hopPair{0, 21}, hopPair{0, 1}),
				seg(true, 1, hopPair{0, 3}, hopPair{41, 0}),
			}, CurrHF: 3},
			wantFrom: extLocal[3], wantTo: extRemote[3],
		},
		"crossover with a bad MAC in the second segment": {
			path: PathSpec{Segments: []Segment{
				seg(false, 1, hopPair{0, 21}, hopPair{0, 1}),
				{ConsDir: true, Timestamp: nowTS, SegID: 7, Hops: []Hop{{ConsEgress: 3, ExpTime: 63, Key: otherKey}, {ConsIngress: 41, ExpTime: 63}}},
			}, CurrHF: 1},
			src: childIA, dst: coreIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "invalid_mac",
		},
		"crossover core to child is allowed, parent to child across segments is not": {
			path: PathSpec{Segments: []Segment{
				seg(false, 1, hopPair{0, 21}, hopPair{0, 2}),
				seg(true, 0, hopPair{0, 1}, hopPair{11, 0}),
			}, CurrHF: 1},
			src: parentIA, dst: childIA, in: arrival{ifid: 2},
			wantAction: xdpPass, wantVerdict: "link_type",
		},
		"peering: child to peer": {
			path: PathSpec{Segments: []Segment{
				{ConsDir: false, Peer: true, Timestamp: nowTS, SegID: 0x4242, Carried: 1, Hops: []Hop{{ConsIngress: 0, ConsEgress: 21, ExpTime: 63}, {ConsIngress: 4, ConsEgress: 1, ExpTime: 63}}},
				{ConsDir: true, Peer: true, Timestamp: nowTS, SegID: 0x5151, Carried: 1, Hops: []Hop{{ConsIngress: 9, ConsEgress: 8, ExpTime: 63, Key: otherKey}, {ConsIngress: 31, ConsEgress: 0, ExpTime: 63, Key: otherKey}}},
			}, CurrHF: 1},
			src: childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{
				{ConsDir: false, Peer: true, Timestamp: nowTS, SegID: 0x4242, Carried: 1, Hops: []Hop{{ConsIngress: 0, ConsEgress: 21, ExpTime: 63}, {ConsIngress: 4, ConsEgress: 1, ExpTime: 63}}},
				{ConsDir: true, Peer: true, Timestamp: nowTS, SegID: 0x5151, Carried: 1, Hops: []Hop{{ConsIngress: 9, ConsEgress: 8, ExpTime: 63, Key: otherKey}, {ConsIngress: 31, ConsEgress: 0, ExpTime: 63, Key: otherKey}}},
			}, CurrHF: 2},
			wantFrom: extLocal[4], wantTo: extRemote[4],
		},
		"peering: peer to child": {
			path: PathSpec{Segments: []Segment{
				{ConsDir: false, Peer: true, Timestamp: nowTS, SegID: 0x4242, Carried: 1, Hops: []Hop{{ConsIngress: 0, ConsEgress: 21, ExpTime: 63, Key: otherKey}, {ConsIngress: 9, ConsEgress: 8, ExpTime: 63, Key: otherKey}}},
				{ConsDir: true, Peer: true, Timestamp: nowTS, SegID: 0x5151, Carried: 1, Hops: []Hop{{ConsIngress: 4, ConsEgress: 1, ExpTime: 63}, {ConsIngress: 11, ConsEgress: 0, ExpTime: 63}}},
			}, CurrHF: 2},
			src: peerIA, dst: childIA, in: arrival{ifid: 4},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{
				{ConsDir: false, Peer: true, Timestamp: nowTS, SegID: 0x4242, Carried: 1, Hops: []Hop{{ConsIngress: 0, ConsEgress: 21, ExpTime: 63, Key: otherKey}, {ConsIngress: 9, ConsEgress: 8, ExpTime: 63, Key: otherKey}}},
				{ConsDir: true, Peer: true, Timestamp: nowTS, SegID: 0x5151, Carried: 1, Hops: []Hop{{ConsIngress: 4, ConsEgress: 1, ExpTime: 63}, {ConsIngress: 11, ConsEgress: 0, ExpTime: 63}}},
			}, CurrHF: 3},
			wantFrom: extLocal[1], wantTo: extRemote[1],
		},
		"IPv6 in, IPv4 out: child over IPv6 to parent": {
			path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{2, 7}, hopPair{31, 0})}, CurrHF: 1},
			src:  child6IA, dst: farIA, in: arrival{ifid: 7},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{seg(false, 1, hopPair{0, 21}, hopPair{2, 7}, hopPair{31, 0})}, CurrHF: 2},
			wantFrom: extLocal[2], wantTo: extRemote[2],
		},
		"IPv6 in, inbound to a host on the IPv4 internal network": {
			path: PathSpec{Segments: []Segment{seg(false, 1, hopPair{21, 41}, hopPair{31, 11}, hopPair{0, 7})}, CurrHF: 2},
			src:  child6IA, dst: localIA, dstHost: hostA, dstPort: 31001, in: arrival{ifid: 7},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{seg(false, 0, hopPair{21, 41}, hopPair{31, 11}, hopPair{0, 7})}, CurrHF: 2},
			wantFrom: internal, wantTo: netip.MustParseAddrPort("198.18.0.100:31001"),
		},
		"inbound to an IPv6 host over the IPv4 internal network goes to the slow path": {
			path: PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2},
			src:  farIA, dst: localIA, dstHost: addr.HostIP(netip.MustParseAddr("2001:2::100")), dstPort: 31500, in: arrival{ifid: 2},
			wantAction: xdpPass, wantVerdict: "not_implemented",
		},
		"expired hop field": {
			path: PathSpec{Segments: []Segment{{ConsDir: false, Timestamp: nowTS - 86400*2, SegID: 0x1234, Carried: 2, Hops: []Hop{{0, 21, 63, false, false, nil}, {2, 1, 63, false, false, nil}, {31, 0, 63, false, false, nil}}}}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "expired",
		},
		"expiry is Timestamp + (1+ExpTime)·337.5 s: 600 s old, ExpTime 1 lives": {
			path: PathSpec{Segments: []Segment{{ConsDir: false, Timestamp: uint32(time.Now().Unix()) - 600, SegID: 0x1234, Carried: 2, Hops: []Hop{{0, 21, 0, false, false, nil}, {2, 1, 1, false, false, nil}, {31, 0, 0, false, false, nil}}}}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpTX, wantVerdict: "forwarded",
		},
		"expiry is Timestamp + (1+ExpTime)·337.5 s: 700 s old, ExpTime 1 expired": {
			path: PathSpec{Segments: []Segment{{ConsDir: false, Timestamp: uint32(time.Now().Unix()) - 700, SegID: 0x1234, Carried: 2, Hops: []Hop{{0, 21, 0, false, false, nil}, {2, 1, 1, false, false, nil}, {31, 0, 0, false, false, nil}}}}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "expired",
		},
		"expiry of the second hop field at a crossover": {
			path: PathSpec{Segments: []Segment{
				seg(false, 1, hopPair{0, 21}, hopPair{0, 1}),
				{ConsDir: true, Timestamp: nowTS - 86400*3, SegID: 9, Hops: []Hop{{ConsEgress: 3, ExpTime: 63}, {ConsIngress: 41, ExpTime: 63}}},
			}, CurrHF: 1},
			src: childIA, dst: coreIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "expired",
		},
		"wrong ingress interface": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 3},
			wantAction: xdpPass, wantVerdict: "ingress_mismatch",
		},
		"invalid MAC": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mac: func(p *SCIONPacket) {
				p.Path.Segments[0].Hops[1].Key = otherKey
			},
			wantAction: xdpPass, wantVerdict: "invalid_mac",
		},
		"invalid MAC dropped when scmp = drop": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mac: func(p *SCIONPacket) {
				p.Path.Segments[0].Hops[1].Key = otherKey
			},
			cfg:        func(c *Config) { c.SCMP = SCMPDrop },
			wantAction: xdpDrop, wantVerdict: "invalid_mac",
		},
		"SegID not updated against construction fails the MAC": {
			path: PathSpec{Segments: []Segment{up(1)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "invalid_mac",
		},
		"source IA is local on an external interface": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  localIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "bad_src_ia",
		},
		"outbound first hop with a foreign source IA": {
			path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{2, 0}, hopPair{31, 21}, hopPair{0, 41})}, CurrHF: 0},
			src:  farIA, dst: childIA, in: arrival{ifid: 0},
			wantAction: xdpPass, wantVerdict: "bad_src_ia",
		},
		"outbound to the local IA": {
			path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{2, 0}, hopPair{31, 21}, hopPair{0, 41})}, CurrHF: 0},
			src:  localIA, dst: localIA, in: arrival{ifid: 0},
			wantAction: xdpPass, wantVerdict: "bad_dst_ia",
		},
		"last hop but destination elsewhere": {
			path: PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2},
			src:  farIA, dst: childIA, in: arrival{ifid: 2},
			wantAction: xdpPass, wantVerdict: "bad_dst_ia",
		},
		"unknown egress interface": {
			path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{99, 1}, hopPair{31, 0})}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "no_interface",
		},
		"from internal to a sibling interface": {
			path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{5, 0}, hopPair{31, 21}, hopPair{0, 41})}, CurrHF: 0},
			src:  localIA, dst: farIA, in: arrival{ifid: 0},
			wantAction: xdpPass, wantVerdict: "no_interface",
		},
		"child to child within a segment is a link-type error": {
			path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{7, 1}, hopPair{31, 0})}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "link_type",
		},
		"ingress router alert": {
			path: PathSpec{Segments: []Segment{{ConsDir: false, Timestamp: nowTS, SegID: 0x1234, Carried: 2, Hops: []Hop{{0, 21, 63, false, false, nil}, {2, 1, 63, false, true, nil}, {31, 0, 63, false, false, nil}}}}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "router_alert",
		},
		"egress router alert": {
			path: PathSpec{Segments: []Segment{{ConsDir: false, Timestamp: nowTS, SegID: 0x1234, Carried: 2, Hops: []Hop{{0, 21, 63, false, false, nil}, {2, 1, 63, true, false, nil}, {31, 0, 63, false, false, nil}}}}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpPass, wantVerdict: "router_alert",
		},
		"payload length disagrees": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mutate:     func(b []byte) { binary.BigEndian.PutUint16(b[6:], binary.BigEndian.Uint16(b[6:])+1) },
			wantAction: xdpPass, wantVerdict: "bad_length",
		},
		"HdrLen shorter than the path": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mutate:     func(b []byte) { b[5] -= 3 },
			wantAction: xdpDrop, wantVerdict: "parse_error",
		},
		"CurrINF does not match CurrHF": {
			path: PathSpec{Segments: []Segment{
				seg(false, 1, hopPair{0, 21}, hopPair{0, 1}),
				seg(true, 0, hopPair{0, 3}, hopPair{41, 0}),
			}, CurrHF: 1, CurrINF: intp(1)},
			src: childIA, dst: coreIA, in: arrival{ifid: 1},
			wantAction: xdpDrop, wantVerdict: "parse_error",
		},
		"singleton segment without peering": {
			path: PathSpec{Segments: []Segment{
				seg(false, 0, hopPair{2, 1}),
				seg(true, 0, hopPair{0, 3}, hopPair{41, 0}),
			}, CurrHF: 0},
			src: childIA, dst: coreIA, in: arrival{ifid: 1},
			wantAction: xdpDrop, wantVerdict: "parse_error",
		},
		"SVC destination goes to the slow path": {
			path: PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2},
			src:  farIA, dst: localIA, dstHost: addr.HostSVC(addr.SvcCS), in: arrival{ifid: 2},
			wantAction: xdpPass, wantVerdict: "not_implemented",
		},
		"empty path without BFD is discarded": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mutate:     func(b []byte) { b[8] = 0 },
			wantAction: xdpDrop, wantVerdict: "parse_error",
		},
		"EPIC path goes to the slow path": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mutate:     func(b []byte) { b[8] = 3 },
			wantAction: xdpPass, wantVerdict: "not_implemented",
		},
		"unknown path type is discarded": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mutate:     func(b []byte) { b[8] = 9 },
			wantAction: xdpDrop, wantVerdict: "parse_error",
		},
		"three segments: up, core, down, crossing from up to core here": {
			path: PathSpec{Segments: []Segment{
				seg(false, 1, hopPair{0, 21}, hopPair{0, 1}),
				seg(true, 0, hopPair{0, 3}, hopPair{41, 42}, hopPair{51, 0}),
				seg(true, 0, hopPair{0, 61}, hopPair{71, 0}),
			}, CurrHF: 1},
			src: childIA, dst: farIA, in: arrival{ifid: 1},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{
				seg(false, 0, hopPair{0, 21}, hopPair{0, 1}),
				seg(true, 1, hopPair{0, 3}, hopPair{41, 42}, hopPair{51, 0}),
				seg(true, 0, hopPair{0, 61}, hopPair{71, 0}),
			}, CurrHF: 3},
			wantFrom: extLocal[3], wantTo: extRemote[3],
		},
		"three segments: core to core in the middle segment": {
			path: PathSpec{Segments: []Segment{
				seg(false, 0, hopPair{0, 21}, hopPair{0, 11}),
				seg(true, 1, hopPair{0, 41}, hopPair{3, 6}, hopPair{51, 0}),
				seg(true, 0, hopPair{0, 61}, hopPair{71, 0}),
			}, CurrHF: 3},
			src: childIA, dst: farIA, in: arrival{ifid: 3},
			wantAction: xdpTX, wantVerdict: "forwarded",
			wantPath: PathSpec{Segments: []Segment{
				seg(false, 0, hopPair{0, 21}, hopPair{0, 11}),
				seg(true, 2, hopPair{0, 41}, hopPair{3, 6}, hopPair{51, 0}),
				seg(true, 0, hopPair{0, 61}, hopPair{71, 0}),
			}, CurrHF: 4},
			wantFrom: extLocal[6], wantTo: extRemote[6],
		},
		"underlay source is not the neighbour": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mac: func(p *SCIONPacket) {
				p.UnderlaySrc = netip.AddrPortFrom(p.UnderlaySrc.Addr(), 50001)
			},
			wantAction: xdpDrop, wantVerdict: "underlay_mismatch",
		},
		"BFD on an empty path goes up the stack": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mutate:     func(b []byte) { b[8] = 0; b[4] = 203 },
			wantAction: xdpPass, wantVerdict: "bfd",
		},
		"BFD on a one-hop path goes up the stack": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mutate:     func(b []byte) { b[8] = 2; b[4] = 203 },
			wantAction: xdpPass, wantVerdict: "bfd",
		},
		"one-hop path goes to the slow path": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mutate:     func(b []byte) { b[8] = 2 },
			wantAction: xdpPass, wantVerdict: "not_implemented",
		},
		"extension header goes to the slow path": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mutate:     func(b []byte) { b[4] = 200 },
			wantAction: xdpPass, wantVerdict: "not_implemented",
		},
		"inbound to the unspecified address": {
			path: PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2},
			src:  farIA, dst: localIA, dstHost: addr.HostIP(netip.MustParseAddr("0.0.0.0")), dstPort: 31500, in: arrival{ifid: 2},
			wantAction: xdpPass, wantVerdict: "bad_host_addr",
		},
		"inbound to an IPv4-mapped IPv6 address": {
			path: PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2},
			src:  farIA, dst: localIA, dstHost: addr.HostIP(netip.MustParseAddr("2001:2::100")), dstPort: 31500, in: arrival{ifid: 2},
			// slayers packs ::ffff:a.b.c.d as IPv4: write it by hand.
			mutate: func(b []byte) {
				copy(b[28:44], netip.MustParseAddr("::ffff:198.18.0.100").AsSlice())
			},
			wantAction: xdpPass, wantVerdict: "bad_host_addr",
		},
		"key rollover: slot 1 accepted when configured": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mac: func(p *SCIONPacket) {
				p.Key = otherKey
				p.Path.Segments[0].Hops[0].Key = testKey
			},
			cfg:        func(c *Config) { c.Keys[1] = otherKey; c.KeyRollover = true },
			wantAction: xdpTX, wantVerdict: "forwarded",
		},
		"key rollover: slot 1 ignored without key_rollover": {
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			mac:        func(p *SCIONPacket) { p.Key = otherKey },
			cfg:        func(c *Config) { c.Keys[1] = otherKey },
			wantAction: xdpPass, wantVerdict: "invalid_mac",
		},
	}
	// The underlay as the kernel's input checks it: what it would drop or
	// process first goes to it unchanged.
	transit6 := PathSpec{Segments: []Segment{seg(true, 1, hopPair{0, 11}, hopPair{7, 1}, hopPair{21, 0})}, CurrHF: 1}
	underlay := map[string]func([]byte) []byte{
		"IPv4 total length beyond the frame": func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[16:], binary.BigEndian.Uint16(f[16:])+100)
			return fixIPv4Checksum(f)
		},
		"IPv4 source route option": func(f []byte) []byte {
			// A loose source route (type 131) with one address, and a
			// pad: what the kernel refuses unless accept_source_route.
			opt := []byte{131, 7, 4, 198, 18, 1, 9, 0}
			f = append(f[:34:34], append(opt, f[34:]...)...)
			f[14] = 0x47
			binary.BigEndian.PutUint16(f[16:], binary.BigEndian.Uint16(f[16:])+uint16(len(opt)))
			return fixIPv4Checksum(f)
		},
		"IPv6 of another version": func(f []byte) []byte {
			f[14] = 0x50 | f[14]&0x0f
			return f
		},
		"IPv6 payload length beyond the frame": func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[18:], binary.BigEndian.Uint16(f[18:])+100)
			return f
		},
	}
	for name, mut := range underlay {
		c := pktCase{
			path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
			src:  childIA, dst: farIA, in: arrival{ifid: 1},
			frame: mut, wantAction: xdpPass, wantVerdict: "not_scion",
		}
		if strings.HasPrefix(name, "IPv6") {
			c.path, c.dst, c.in = transit6, childIA, arrival{ifid: 7}
		}
		if strings.Contains(name, "option") {
			c.wantVerdict = "not_implemented"
		}
		cases[name+" goes to the kernel"] = c
	}
	// SCMP to a local host, delivered as the reference decodes it: the
	// header (4 bytes) for a request, and a reply's whole body (echo:
	// identifier and sequence; traceroute: 20 bytes) for its identifier,
	// else the reference discards it.
	inbound := PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2}
	scmp := func(typ byte, n int) func(*SCIONPacket) {
		return func(p *SCIONPacket) {
			p.SCMP = make([]byte, n)
			p.SCMP[0] = typ
			if n >= 6 {
				binary.BigEndian.PutUint16(p.SCMP[4:], 31001) // identifier
			}
		}
	}
	for _, c := range []struct {
		name    string
		typ     byte
		n       int
		verdict string
		port    uint16
	}{
		{"echo request of 4 bytes", 128, 4, "forwarded", 30041},
		{"echo request of 7 bytes", 128, 7, "forwarded", 30041},
		{"echo reply of 7 bytes", 129, 7, "parse_error", 0},
		{"echo reply of 8 bytes", 129, 8, "forwarded", 31001},
		{"traceroute request of 4 bytes", 130, 4, "forwarded", 30041},
		{"traceroute reply of 8 bytes", 131, 8, "parse_error", 0},
		{"traceroute reply of 23 bytes", 131, 23, "parse_error", 0},
		{"traceroute reply of 24 bytes", 131, 24, "forwarded", 31001},
		{"message of 3 bytes", 128, 3, "parse_error", 0},
	} {
		pc := pktCase{
			path: inbound, src: farIA, dst: localIA, dstHost: hostA, in: arrival{ifid: 2},
			mac:        scmp(c.typ, c.n),
			wantAction: xdpDrop, wantVerdict: c.verdict,
		}
		if c.verdict == "forwarded" {
			pc.wantAction, pc.wantPath = xdpTX, inbound
			pc.wantFrom, pc.wantTo = internal, netip.AddrPortFrom(hostA.IP(), c.port)
		}
		cases["SCMP "+c.name+" to a local host"] = pc
	}
	// The reference reads a datagram whole up to 8,488 bytes (v0.14.0 on,
	// the default) or 9,000 (v0.12.0): a longer one is its to answer or
	// discard.
	sized := func(n int) func(p *SCIONPacket) {
		return func(p *SCIONPacket) {
			p.Payload = nil
			b, _ := p.SCIONBytes()
			p.Payload = make([]byte, n-len(b))
		}
	}
	v12 := func(c *Config) { c.SCIONVersion = "v0.12.0" }
	cases["datagram over 9,000 bytes goes to the slow path (v0.12.0)"] = pktCase{
		path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
		src:  childIA, dst: farIA, in: arrival{ifid: 1}, cfg: v12,
		mac:        sized(9001),
		wantAction: xdpPass, wantVerdict: "bad_length",
	}
	cases["datagram of 9,000 bytes is forwarded (v0.12.0)"] = pktCase{
		path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
		src:  childIA, dst: farIA, in: arrival{ifid: 1}, cfg: v12,
		mac:        sized(9000),
		wantAction: xdpTX, wantVerdict: "forwarded",
	}
	cases["datagram over 8,488 bytes goes to the slow path"] = pktCase{
		path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
		src:  childIA, dst: farIA, in: arrival{ifid: 1},
		mac:        sized(8489),
		wantAction: xdpPass, wantVerdict: "bad_length",
	}
	cases["datagram of 8,488 bytes is forwarded"] = pktCase{
		path: PathSpec{Segments: []Segment{up(2)}, CurrHF: 1},
		src:  childIA, dst: farIA, in: arrival{ifid: 1},
		mac:        sized(8488),
		wantAction: xdpTX, wantVerdict: "forwarded",
	}
	return cases
}

// fixIPv4Checksum sets the IPv4 header checksum of an Ethernet frame.
func fixIPv4Checksum(f []byte) []byte {
	ihl := int(f[14]&0x0f) * 4
	f[24], f[25] = 0, 0
	binary.BigEndian.PutUint16(f[24:], ^checksum.Fold(checksum.Sum(f[14:14+ihl], 0)))
	return f
}

func checkCase(t *testing.T, r *Router, c pktCase) {
	t.Helper()
	p := c.packet()
	frame, err := p.Frame()
	if err != nil {
		t.Fatal(err)
	}
	if c.frame != nil {
		frame = c.frame(frame)
	}
	res := r.runOne(t, frame)
	if res.action != c.wantAction || res.verdict != c.wantVerdict {
		t.Fatalf("action %d verdict %s, want action %d verdict %s", res.action, res.verdict, c.wantAction, c.wantVerdict)
	}
	if res.action != xdpTX && res.action != xdpPass {
		return
	}
	if res.action == xdpPass && !bytes.Equal(res.out, frame) {
		t.Fatal("a passed packet was modified: the slow path must see it as it arrived")
	}
	if c.wantFrom.IsValid() {
		want := p
		want.Path = c.wantPath
		want.UnderlaySrc, want.UnderlayDst = c.wantFrom, c.wantTo
		if c.mac != nil {
			c.mac(&want)
		}
		wantFrame, err := want.Frame()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(res.out, wantFrame) {
			t.Fatalf("frame\n%s\nwant\n%s", hexdump(res.out), hexdump(wantFrame))
		}
	}
}

func hexdump(b []byte) string {
	var s bytes.Buffer
	for i := 0; i < len(b); i += 16 {
		fmt.Fprintf(&s, "%04x  % x\n", i, b[i:min(i+16, len(b))])
	}
	return s.String()
}

// The MAC cache must never accept what a full check would refuse.
func TestMACCache(t *testing.T) {
	r := loadTestRouter(t, testConfig())
	good := transitFrame(t)
	if res := r.runOne(t, good); res.verdict != "forwarded" {
		t.Fatalf("valid packet: %s", res.verdict)
	}
	// Same MAC input, one MAC byte off: same cache slot candidates, no hit.
	bad := append([]byte(nil), good...)
	hf := 14 + 20 + 8 + 12 + 16 + 4 + 4 + 4 + 8 + 12 // start of hop field 1
	bad[hf+6+5] ^= 0x01
	setUDPChecksum(bad)
	if res := r.runOne(t, bad); res.verdict != "invalid_mac" {
		t.Fatalf("packet with a wrong MAC after a cached valid one: %s", res.verdict)
	}
	// Same MAC, other input (ExpTime): no hit.
	bad2 := append([]byte(nil), good...)
	bad2[hf+1] ^= 0x01
	setUDPChecksum(bad2)
	if res := r.runOne(t, bad2); res.verdict != "invalid_mac" {
		t.Fatalf("packet with a changed hop field after a cached valid one: %s", res.verdict)
	}
	if res := r.runOne(t, good); res.verdict != "forwarded" {
		t.Fatalf("valid packet again: %s", res.verdict)
	}
	// A new key invalidates what the old one verified.
	if err := r.SetKey(0, otherKey); err != nil {
		t.Fatal(err)
	}
	if res := r.runOne(t, good); res.verdict != "invalid_mac" {
		t.Fatalf("packet of the old key after a key change: %s", res.verdict)
	}
	if err := r.SetKey(0, testKey); err != nil {
		t.Fatal(err)
	}
	if res := r.runOne(t, good); res.verdict != "forwarded" {
		t.Fatalf("packet after the key came back: %s", res.verdict)
	}
}
