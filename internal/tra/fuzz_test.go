package tra

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path/empty"
	"github.com/scionproto/scion/pkg/slayers/path/scion"

	"github.com/fastpath-dev/fastpath/internal/checksum"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/pcap"
)

// Fuzzing the translator's programs through BPF_PROG_TEST_RUN: frames of
// the lab (fuzzseed_test.go) and of the other tests, mutated where the
// programs look (underlay, SCION common and address headers, path meta
// header, IPv6 header, L4 headers and lengths), run once each; every
// action and every emitted frame is checked against a reference written
// here from the rules the translator must keep, not from its C.
//
//	FASTPATH_FUZZ_SEED=n  repeats a run's mutations (each run logs its seed)
//	FASTPATH_FUZZ_RUNS=n  runs per program (500,000 by default)

const (
	envFuzzSeed = "FASTPATH_FUZZ_SEED"
	envFuzzRuns = "FASTPATH_FUZZ_RUNS"
	// fzRuns is how many mutated frames each program gets (a few
	// seconds: a test run and its check take 3-4 µs).
	fzRuns = 500_000
	// fzFrameMax keeps frames in one buffer of a test run (a page less
	// headroom and shared info): the reference need not model XDP frags.
	fzFrameMax = 3000
	// fzExamples is how many failing inputs of each kind are reported.
	fzExamples = 3
)

// The fixture's destinations besides remoteIA (packet_test.go): each with
// a set of paths of one length and MTU, so that which of them a flow takes
// does not change what the reference expects.
var (
	fzNativeIA  = addr.MustParseIA("1-64512")       // the lab's core AS: one long path through a router behind a gateway
	fzPublicIA  = addr.MustParseIA("1-2:0:7")       // a public ASN (the SM-IP form 0xe): the longest path there is
	fzMultiIA   = addr.MustParseIA("1-64515")       // three paths by three first hops, a SCION MTU of 1280
	fzHeldIA    = addr.MustParseIA("1-64599")       // no path: held for the daemon
	fzTopBGPIA  = addr.MustParseIA("1-524287")      // the highest ASN of the BGP form: large ISD-AS words
	fzLocal4    = netip.MustParseAddr("10.101.0.9") // another host of the local AS
	fzLocal6    = netip.MustParseAddr("fc00:10fc:100:1::a65:3")
	fzRemote6b  = netip.MustParseAddr("fc00:10fc:200::99")
	fzGwLinkLoc = netip.MustParseAddr("fe80::1")
)

// fzDest is a destination the fixture installs.
type fzDest struct {
	ia    addr.IA
	paths []Path
}

// fzFixture is loadTest's translator with paths to several ASes.
type fzFixture struct {
	tr    *Translator
	ns    string
	dests map[addr.IA][]Path
}

func newFzFixture(t *testing.T) *fzFixture {
	t.Helper()
	tr := loadTest(t)
	ns, _ := testNetns.Load(tr)
	short := testPath(t)
	dests := []fzDest{
		{remoteIA, []Path{
			{Raw: short, MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40},
			{Raw: fzOtherMACs(t, short, 1), MTU: 1472, NextHop: farRouter, Expiry: 1 << 40},
		}},
		{fzNativeIA, []Path{{Raw: threeSegmentPath(t), MTU: 1400, NextHop: farRouter, Expiry: 1 << 40}}},
		{fzPublicIA, []Path{{Raw: fzLongestPath(t), MTU: 1350, NextHop: routerAddr, Expiry: 1 << 40}}},
		{fzTopBGPIA, []Path{{Raw: short, MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40}}},
		{fzMultiIA, []Path{
			{Raw: fzOtherMACs(t, short, 2), MTU: 1280, NextHop: routerAddr, Expiry: 1 << 40},
			{Raw: fzOtherMACs(t, short, 3), MTU: 1280, NextHop: farRouter, Expiry: 1 << 40},
			{Raw: fzOtherMACs(t, short, 4), MTU: 1280, NextHop: unresolved, Expiry: 1 << 40},
		}},
	}
	fx := &fzFixture{tr: tr, ns: ns.(string), dests: map[addr.IA][]Path{}}
	for _, d := range dests {
		for _, p := range d.paths {
			if len(p.Raw) != len(d.paths[0].Raw) || p.MTU != d.paths[0].MTU {
				t.Fatalf("the paths to %s differ in length or MTU: the reference could not tell which a flow takes", d.ia)
			}
		}
		// As they are: paths smaller than the daemon takes too, for what
		// the programs do with them.
		if err := tr.installUnchecked(d.ia, uint32(d.ia)%uint32(MaxDests), d.paths); err != nil {
			t.Fatal(err)
		}
		fx.dests[d.ia] = d.paths
	}
	return fx
}

// fzOtherMACs is a path like raw with other hop field MACs: another path of
// the same length.
func fzOtherMACs(t *testing.T, raw []byte, salt byte) []byte {
	t.Helper()
	var d scion.Decoded
	if err := d.DecodeFromBytes(raw); err != nil {
		t.Fatal(err)
	}
	for i := range d.HopFields {
		d.HopFields[i].Mac[0] ^= salt
		d.HopFields[i].Mac[5] += salt
	}
	out := make([]byte, d.Len())
	if err := d.SerializeTo(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// fzLongestPath is a path of TRA_PATH_MAX bytes: meta, 3 info fields, 19 hops.
func fzLongestPath(t *testing.T) []byte { return pathOfSegments(t, [3]uint8{7, 6, 6}, 7) }

func fzMustSMIP(ia addr.IA, host netip.Addr) netip.Addr {
	a, err := FromSCION(ia, host)
	if err != nil {
		panic(err)
	}
	return a
}

// ---- Seeds ------------------------------------------------------------------

// fzReadSeeds reads a capture of testdata.
func fzReadSeeds(t testing.TB, path string) [][]byte {
	t.Helper()
	frames, err := pcap.Read(path)
	if err != nil {
		t.Fatalf("the fuzz seeds (captured by %s=1, see fuzzseed_test.go): %v", envFuzzCapture, err)
	}
	return frames
}

// fzInSeeds are SCION frames for tra_in: the lab's fitted to the fixture
// (and a quarter of them as captured, where fitting changed them), and the
// other tests' kinds of packet. The lab's translated host and its router
// are the fixture's (10.101.0.2 in 1-64513, 10.101.0.1:30042), so fitting
// changes none of today's capture; a capture of another lab needs it.
func fzInSeeds(t *testing.T) [][]byte {
	t.Helper()
	var out [][]byte
	for i, f := range fzReadSeeds(t, fzSeedsIn) {
		g := fzFitIn(f)
		if i%4 == 0 || bytes.Equal(g, f) {
			out = append(out, f)
		}
		if !bytes.Equal(g, f) {
			out = append(out, g)
		}
	}
	payload := func(n int) gopacket.Payload { return gopacket.Payload(bytes.Repeat([]byte{0x5a}, n)) }
	udp := func(n int) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 31001}, payload(n)}
	}
	scmp := func(typ slayers.SCMPType, code slayers.SCMPCode, body gopacket.SerializableLayer, quote []byte) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(typ, code)}, body, gopacket.Payload(quote)}
	}
	quote := fzQuoted(t)
	raw := testPath(t)
	local := netip.AddrPortFrom(fzLocal4, 30041)
	seeds := []fzSeedIn{
		{from: routerAddr, port: 31000, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: udp(0)},
		{from: routerAddr, port: 31000, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: udp(1)},
		{from: routerAddr, port: 32767, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: udp(100)},
		{from: farRouter, port: 30041, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: udp(1200)},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote6, dst: hostIP4, raw: raw, l4: udp(30)},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote4, dst: hostSMIP, raw: raw, l4: udp(30)},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: fzRemote6b, dst: hostSMIP, raw: fzLongestPath(t), l4: udp(30)},
		{from: routerAddr, port: 30041, srcIA: fzPublicIA, src: netip.MustParseAddr("10.7.0.2"), dst: hostIP4, raw: threeSegmentPath(t), l4: udp(64)},
		{from: routerAddr, port: 30041, srcIA: addr.MustParseIA("1-ff00:0:110"), src: remote4, dst: hostIP4, raw: raw, l4: udp(8)},
		{from: local, port: 30041, srcIA: localIA, src: fzLocal4, dst: hostIP4, l4: udp(20)},
		{from: local, port: 31010, srcIA: localIA, src: fzLocal4, dst: hostIP4, l4: []gopacket.SerializableLayer{
			&layers.TCP{SrcPort: 22, DstPort: 40000, ACK: true, Seq: 1, Ack: 2, Window: 100}}},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: []gopacket.SerializableLayer{
			&layers.TCP{SrcPort: 5201, DstPort: 40000, SYN: true, ACK: true, Window: 64000, Options: []layers.TCPOption{
				{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0x8c}},
				{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2}}}}},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: []gopacket.SerializableLayer{
			&layers.TCP{SrcPort: 5201, DstPort: 40000, ACK: true, PSH: true, Seq: 9, Ack: 3, Window: 500}, payload(700)}},
		{from: routerAddr, port: 30041, srcIA: fzNativeIA, src: netip.MustParseAddr("10.100.0.2"), dst: hostIP4, raw: threeSegmentPath(t), l4: scmp(slayers.SCMPTypeEchoRequest, 0, &slayers.SCMPEcho{Identifier: 7, SeqNumber: 1}, payload(56))},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: scmp(slayers.SCMPTypeEchoReply, 0, &slayers.SCMPEcho{Identifier: 7, SeqNumber: 2}, payload(8))},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: scmp(slayers.SCMPTypeTracerouteRequest, 0, &slayers.SCMPTraceroute{Identifier: 1, Sequence: 1}, nil)},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: netip.MustParseAddr("10.102.0.1"), dst: hostIP4, raw: raw, l4: scmp(slayers.SCMPTypeTracerouteReply, 0, &slayers.SCMPTraceroute{Identifier: 1, Sequence: 1, IA: remoteIA, Interface: 1}, nil)},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: scmp(slayers.SCMPTypeDestinationUnreachable, 4, &slayers.SCMPDestinationUnreachable{}, quote)},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: netip.MustParseAddr("10.255.2.1"), dst: hostIP4, raw: raw, l4: scmp(slayers.SCMPTypePacketTooBig, 0, &slayers.SCMPPacketTooBig{MTU: 1300}, quote)},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: scmp(slayers.SCMPTypeParameterProblem, 0, &slayers.SCMPParameterProblem{Pointer: 6}, quote)},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: scmp(slayers.SCMPTypeExternalInterfaceDown, 0, &slayers.SCMPExternalInterfaceDown{IA: remoteIA, IfID: 2}, quote)},
		{from: routerAddr, port: 30041, srcIA: remoteIA, src: remote4, dst: hostIP4, raw: raw, l4: scmp(slayers.SCMPTypeInternalConnectivityDown, 0, &slayers.SCMPInternalConnectivityDown{IA: remoteIA, Ingress: 1, Egress: 2}, quote)},
	}
	for _, s := range seeds {
		out = append(out, s.build(t))
	}
	return out
}

// fzQuoted is a SCION packet the host sent (a UDP datagram to remote4),
// as SCMP errors quote it.
func fzQuoted(t *testing.T) []byte {
	t.Helper()
	s := &slayers.SCION{SrcIA: localIA, DstIA: remoteIA, NextHdr: slayers.L4UDP, PathType: scion.PathType}
	s.SetSrcAddr(addr.HostIP(hostIP4))
	s.SetDstAddr(addr.HostIP(remote4))
	var p scion.Raw
	if err := p.DecodeFromBytes(testPath(t)); err != nil {
		t.Fatal(err)
	}
	s.Path = &p
	u := &slayers.UDP{SrcPort: 40000, DstPort: 31000}
	u.SetNetworkLayerForChecksum(s)
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, s, u, gopacket.Payload("quoted")); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// fzSeedIn is a SCION frame as a router (or a local host, on the empty path)
// hands it to the host.
type fzSeedIn struct {
	from     netip.AddrPort
	port     uint16
	srcIA    addr.IA
	src, dst netip.Addr
	raw      []byte // the path; nil: the empty path
	l4       []gopacket.SerializableLayer
}

func (o fzSeedIn) build(t *testing.T) []byte {
	t.Helper()
	return inFrame{from: o.from, port: o.port, srcIA: o.srcIA, srcHost: o.src, dstHost: o.dst, path: o.raw, emptyRaw: o.raw == nil, l4: o.l4}.build(t)
}

// fzFitIn makes a captured SCION frame one for the fixture's host: to its
// IPv4 and SCION addresses, from its router when the path is a standard
// one; an L4 checksum that was right stays right.
func fzFitIn(f []byte) []byte {
	g := append([]byte(nil), f...)
	l := fzLayoutIn(g)
	if len(g) < l.sc+36 || fzBe16(g[12:]) != 0x0800 || g[14+9] != 17 {
		return g
	}
	valid, haveL4 := false, l.l4 <= len(g) && l.l4 >= l.path
	plen := int(fzBe16(g[l.sc+6:]))
	if haveL4 && l.l4+plen <= len(g) && len(g) >= l.path {
		valid = fzScionL4Valid(g, l, plen)
	}
	h4 := hostIP4.As4()
	copy(g[14+16:], h4[:])
	if g[l.sc+8] == 1 {
		r := routerAddr.Addr().As4()
		copy(g[14+12:], r[:])
		fzPut16(g[l.udp:], routerAddr.Port())
	}
	binary.BigEndian.PutUint64(g[l.sc+12:], uint64(localIA))
	if l.dl == 4 && len(g) >= l.dst+4 {
		copy(g[l.dst:], h4[:])
	} else if l.dl == 16 && len(g) >= l.dst+16 {
		s := hostSMIP.As16()
		copy(g[l.dst:], s[:])
	}
	if valid {
		fzFixSCIONL4Checksum(g, l, plen)
	}
	fzFixIPv4Checksum(g)
	return g
}

// fzOutSeeds are IPv6 frames for tra_out: the lab's host's (fitted to the
// fixture's host, as fzInSeeds), and the other tests' kinds of packet, to
// every kind of destination.
func fzOutSeeds(t *testing.T, dests map[addr.IA][]Path) [][]byte {
	t.Helper()
	var out [][]byte
	for i, f := range fzReadSeeds(t, fzSeedsOut) {
		g := fzFitOut(f)
		if i%4 == 0 || bytes.Equal(g, f) {
			out = append(out, f)
		}
		if !bytes.Equal(g, f) {
			out = append(out, g)
		}
	}
	payload := func(n int) gopacket.Payload { return gopacket.Payload(bytes.Repeat([]byte{0xa5}, n)) }
	udp := func(n int) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.UDP{SrcPort: 40000, DstPort: 31000}, payload(n)}
	}
	native := fzMustSMIP(fzNativeIA, netip.MustParseAddr("10.100.0.2"))
	public := fzMustSMIP(fzPublicIA, netip.MustParseAddr("10.7.0.2"))
	multi := fzMustSMIP(fzMultiIA, netip.MustParseAddr("10.103.0.2"))
	held := fzMustSMIP(fzHeldIA, netip.MustParseAddr("10.104.0.2"))
	local4SMIP := fzMustSMIP(localIA, fzLocal4)
	// What the host received, as its ICMPv6 errors quote it.
	received := ipv6Frame(t, remote4SMIP, hostSMIP, &layers.UDP{SrcPort: 31000, DstPort: 40000}, gopacket.Payload("to a closed port"))[14:]
	icmpErr := func(typ, code uint8, param uint32) []gopacket.SerializableLayer {
		body := make([]byte, 4+len(received))
		binary.BigEndian.PutUint32(body, param)
		copy(body[4:], received)
		return []gopacket.SerializableLayer{&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, code)}, gopacket.Payload(body)}
	}
	echo := func(typ uint8, n int) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}, &layers.ICMPv6Echo{Identifier: 9, SeqNumber: 1}, payload(n)}
	}
	syn := func(mss uint16) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.TCP{SrcPort: 40000, DstPort: 5201, SYN: true, Window: 64240, Options: []layers.TCPOption{
			{OptionType: layers.TCPOptionKindNop},
			{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{byte(mss >> 8), byte(mss)}},
			{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
			{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}}}}}
	}
	// The largest UDP payload that fits remoteIA's path, and one more.
	p := dests[remoteIA][0]
	fit := int(p.MTU) - (12 + 16 + 4 + 4 + len(p.Raw)) - 8
	cases := []struct {
		dst netip.Addr
		l4  []gopacket.SerializableLayer
	}{
		{remote4SMIP, udp(0)}, {remote4SMIP, udp(1)}, {remote4SMIP, udp(fit)}, {remote4SMIP, udp(fit + 1)},
		{remote6, udp(100)}, {native, udp(1000)}, {fzMustSMIP(fzTopBGPIA, netip.MustParseAddr("10.1.1.1")), udp(100)}, {public, udp(500)}, {multi, udp(1300)}, {held, udp(10)},
		{local4SMIP, udp(10)}, {fzLocal6, udp(10)},
		{remote4SMIP, syn(1460)}, {native, syn(1440)}, {local4SMIP, syn(8960)}, {remote4SMIP, syn(536)},
		{remote4SMIP, []gopacket.SerializableLayer{&layers.TCP{SrcPort: 40000, DstPort: 5201, ACK: true, PSH: true, Seq: 7, Ack: 9, Window: 500}, payload(900)}},
		{remote4SMIP, []gopacket.SerializableLayer{&layers.TCP{SrcPort: 40000, DstPort: 5201, RST: true, Seq: 7, Window: 0}}},
		{remote4SMIP, echo(128, 56)}, {native, echo(129, 0)}, {local4SMIP, echo(128, 8)},
		{remote4SMIP, icmpErr(1, 4, 0)}, {remote4SMIP, icmpErr(2, 0, 1280)}, {remote4SMIP, icmpErr(3, 0, 0)}, {remote4SMIP, icmpErr(4, 0, 6)},
		{fzLocal6, icmpErr(1, 4, 0)},
		{remote4SMIP, []gopacket.SerializableLayer{&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(135, 0)}, payload(20)}},
	}
	for _, c := range cases {
		out = append(out, ipv6Frame(t, hostSMIP, c.dst, c.l4...))
	}
	hl1 := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 40000, DstPort: 33434}, payload(24))
	hl1[14+7] = 1
	ns := ipv6Frame(t, hostSMIP, netip.MustParseAddr("ff02::1:ff00:1"), &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(135, 0)}, payload(20))
	out = append(out, hl1, ns, fragmentFrame(t, 0), fragmentFrame(t, 185))
	return out
}

// fzFitOut makes a captured IPv6 frame one from the fixture's host.
func fzFitOut(f []byte) []byte {
	g := append([]byte(nil), f...)
	if len(g) < 54 || fzBe16(g[12:]) != 0x86dd {
		return g
	}
	if netip.AddrFrom16([16]byte(g[22:38])) == hostSMIP {
		return g
	}
	valid := fzIpv6L4Valid(g)
	s := hostSMIP.As16()
	copy(g[22:], s[:])
	if valid {
		fzFixIPv6L4Checksum(g)
	}
	return g
}

// ---- Byte helpers and checksums --------------------------------------------

func fzBe16(b []byte) uint16     { return binary.BigEndian.Uint16(b) }
func fzPut16(b []byte, v uint16) { binary.BigEndian.PutUint16(b, v) }

// fzInLayout is where tra_in's input keeps its headers, as its own fields
// say (a mutated frame may say nonsense).
type fzInLayout struct {
	udp, sc, dst, src, path, l4 int
	dl, sl                      int
}

func fzLayoutIn(f []byte) fzInLayout {
	ihl := 20
	if len(f) > 14 && int(f[14]&0xf)*4 > 20 {
		ihl = int(f[14]&0xf) * 4
	}
	l := fzInLayout{udp: 14 + ihl}
	l.sc = l.udp + 8
	l.dst = l.sc + 28
	l.dl, l.sl = 4, 4
	if len(f) > l.sc+9 {
		l.dl = 4 * (int(f[l.sc+9]>>4&3) + 1)
		l.sl = 4 * (int(f[l.sc+9]&3) + 1)
	}
	l.src = l.dst + l.dl
	l.path = l.src + l.sl
	l.l4 = l.path
	if len(f) > l.sc+5 {
		l.l4 = l.sc + int(f[l.sc+5])*4
	}
	return l
}

// fzL4CsumAt is where an L4 header keeps its checksum (SCMP and ICMPv6 alike).
func fzL4CsumAt(proto uint8) int {
	switch proto {
	case 6:
		return 16
	case 17:
		return 6
	}
	return 2
}

// fzScionPseudo is SCION's pseudo-header sum, from a frame's raw fields.
func fzScionPseudo(f []byte, l fzInLayout, plen int, proto uint8) uint32 {
	sum := checksum.Sum(f[l.sc+12:l.sc+28], 0)
	sum = checksum.Sum(f[l.dst:l.dst+l.dl], sum)
	sum = checksum.Sum(f[l.src:l.src+l.sl], sum)
	return sum + uint32(plen>>16) + uint32(plen&0xffff) + uint32(proto)
}

func fzScionL4Valid(f []byte, l fzInLayout, plen int) bool {
	return checksum.Fold(checksum.Sum(f[l.l4:l.l4+plen], fzScionPseudo(f, l, plen, f[l.sc+4]))) == 0xffff
}

func fzFixSCIONL4Checksum(f []byte, l fzInLayout, plen int) {
	proto := f[l.sc+4]
	at := l.l4 + fzL4CsumAt(proto)
	if at+2 > l.l4+plen || l.l4+plen > len(f) || l.path > len(f) {
		return
	}
	fzPut16(f[at:], 0)
	fzPut16(f[at:], ^checksum.Fold(checksum.Sum(f[l.l4:l.l4+plen], fzScionPseudo(f, l, plen, proto))))
}

func fzFixIPv4Checksum(f []byte) {
	if len(f) < 34 {
		return
	}
	ihl := int(f[14]&0xf) * 4
	if ihl < 20 || 14+ihl > len(f) {
		return
	}
	fzPut16(f[24:], 0)
	fzPut16(f[24:], ^checksum.Fold(checksum.Sum(f[14:14+ihl], 0)))
}

func fzIpv6Pseudo(src, dst []byte, plen int, proto uint8) uint32 {
	sum := checksum.Sum(src, 0)
	sum = checksum.Sum(dst, sum)
	return sum + uint32(plen>>16) + uint32(plen&0xffff) + uint32(proto)
}

// fzIpv6L4Valid says whether an IPv6 frame's L4 checksum is right (its
// payload length taken as the frame's).
func fzIpv6L4Valid(f []byte) bool {
	l4 := f[54:]
	return checksum.Fold(checksum.Sum(l4, fzIpv6Pseudo(f[22:38], f[38:54], len(l4), f[20]))) == 0xffff
}

func fzFixIPv6L4Checksum(f []byte) {
	proto := f[20]
	at := 54 + fzL4CsumAt(proto)
	if at+2 > len(f) || (proto != 6 && proto != 17 && proto != 58) {
		return
	}
	fzPut16(f[at:], 0)
	c := ^checksum.Fold(checksum.Sum(f[54:], fzIpv6Pseudo(f[22:38], f[38:54], len(f)-54, proto)))
	if c == 0 && proto == 17 {
		c = 0xffff
	}
	fzPut16(f[at:], c)
}

// ---- Mutation ---------------------------------------------------------------

// fzMutator changes seeds where the programs look.
type fzMutator struct {
	rng   *rand.Rand
	seeds [][]byte
	dests map[addr.IA][]Path // tra_out's destinations, for sizes at their MTUs
}

func (m *fzMutator) n(k int) int { return m.rng.IntN(k) }

func (m *fzMutator) chance(p float64) bool { return m.rng.Float64() < p }

func (m *fzMutator) byte8() byte {
	v := []byte{0, 1, 0x7f, 0x80, 0xfe, 0xff}
	if m.chance(0.3) {
		return byte(m.rng.Uint32())
	}
	return v[m.n(len(v))]
}

func (m *fzMutator) u16(f []byte, base int) uint16 {
	v := []int{0, 1, 7, 8, 19, 20, 40, 0x7fff, 0x8000, 0xffff, len(f), len(f) - base, len(f) - base - 1, len(f) - base + 1}
	if m.chance(0.2) {
		return uint16(m.rng.Uint32())
	}
	return uint16(v[m.n(len(v))])
}

// pos picks a byte, most often in the first hdr bytes (the headers).
func (m *fzMutator) pos(f []byte, hdr int) int {
	if hdr > len(f) || m.chance(0.15) {
		hdr = len(f)
	}
	return m.n(hdr)
}

func (m *fzMutator) resize(f []byte, n int) []byte {
	n = max(14, min(n, fzFrameMax))
	if n <= len(f) {
		return f[:n]
	}
	ext := make([]byte, n-len(f))
	if m.chance(0.5) {
		for i := range ext {
			ext[i] = byte(m.rng.Uint32())
		}
	}
	return append(f, ext...)
}

// insert puts n bytes at at (or removes -n there).
func (m *fzMutator) insert(f []byte, at, n int) []byte {
	if at > len(f) {
		at = len(f)
	}
	if n < 0 {
		if at-n > len(f) {
			return f
		}
		return append(f[:at:at], f[at-n:]...)
	}
	ext := make([]byte, n)
	for i := range ext {
		ext[i] = byte(m.rng.Uint32())
	}
	g := append(append(append([]byte(nil), f[:at]...), ext...), f[at:]...)
	if len(g) > fzFrameMax {
		return f
	}
	return g
}

func (m *fzMutator) generic(f []byte, hdr int) []byte {
	switch m.n(6) {
	case 0: // a bit
		if p := m.pos(f, hdr); p < len(f) {
			f[p] ^= 1 << m.n(8)
		}
	case 1: // a byte
		if p := m.pos(f, hdr); p < len(f) {
			f[p] = m.byte8()
		}
	case 2: // two bytes
		if p := m.pos(f, hdr); p+2 <= len(f) {
			fzPut16(f[p:], m.u16(f, p))
		}
	case 3: // cut
		f = m.resize(f, m.n(len(f)+1))
	case 4: // more
		f = m.resize(f, len(f)+1+m.n([]int{8, 64, 600}[m.n(3)]))
	case 5: // a run of bytes from another seed, at the same place
		o := m.seeds[m.n(len(m.seeds))]
		if len(o) > 14 {
			at := 14 + m.n(min(len(o), hdr+16)-14)
			n := 1 + m.n(24)
			for i := 0; i < n && at+i < len(f) && at+i < len(o); i++ {
				f[at+i] = o[at+i]
			}
		}
	}
	return f
}

// Interesting values of the fields tra_in reads.
var (
	fuzzIAs = []addr.IA{localIA, remoteIA, fzNativeIA, fzPublicIA, fzMultiIA, 0, addr.MustParseIA("1-0"), addr.MustParseIA("0-64513"),
		addr.MustParseIA("4095-64513"), addr.MustParseIA("1-ff00:0:110"), addr.MustParseIA("1-524287"), addr.MustParseIA("1-524288"),
		addr.MustParseIA("1-2:0:0"), addr.MustParseIA("1-2:ffff:ffff"), addr.MustParseIA("1-3:0:0"), addr.MustParseIA("65535-ffff:ffff:ffff")}
	fuzzIn4 = []netip.Addr{hostIP4, remote4, fzLocal4, routerAddr.Addr(), farRouter.Addr(), unresolved.Addr(), netip.MustParseAddr("10.101.0.66"),
		netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("127.0.0.1")}
	fuzzIn6 = []netip.Addr{hostSMIP, remote6, fzRemote6b, remote4SMIP, fzLocal6, netip.MustParseAddr("fc00::1"), netip.MustParseAddr("fc00::"),
		netip.MustParseAddr("::1"), netip.MustParseAddr("::"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::1"),
		netip.MustParseAddr("ff02::1"), netip.MustParseAddr("::ffff:10.102.0.2"), netip.MustParseAddr("fc00:1800::1"),
		netip.MustParseAddr("fc00:10fe:0:2:ffff:ffff:ffff:ffff"), fzMustSMIP(fzPublicIA, netip.MustParseAddr("10.7.0.2")), fzMustSMIP(addr.MustParseIA("0-0"), netip.MustParseAddr("10.0.0.1"))}
	fuzzPorts = []uint16{30041, 30042, 31000, 32767, 30999, 32768, 0, 65535, 40000}
)

func (m *fzMutator) ia() addr.IA {
	if m.chance(0.1) {
		return addr.IA(m.rng.Uint64())
	}
	return fuzzIAs[m.n(len(fuzzIAs))]
}

func (m *fzMutator) ip4() [4]byte {
	if m.chance(0.1) {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], m.rng.Uint32())
		return b
	}
	return fuzzIn4[m.n(len(fuzzIn4))].As4()
}

func (m *fzMutator) ip6() [16]byte {
	if m.chance(0.1) {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:], m.rng.Uint64())
		binary.BigEndian.PutUint64(b[8:], m.rng.Uint64())
		if m.chance(0.5) {
			b[0] = 0xfc
		}
		return b
	}
	return fuzzIn6[m.n(len(fuzzIn6))].As16()
}

// mutateIn changes a SCION frame in one of the places tra_in reads.
func (m *fzMutator) mutateIn(f []byte) []byte {
	l := fzLayoutIn(f)
	set := func(at int, b []byte) {
		if at >= 0 && at+len(b) <= len(f) {
			copy(f[at:], b)
		}
	}
	set16 := func(at int, v uint16) { set(at, []byte{byte(v >> 8), byte(v)}) }
	switch m.n(26) {
	case 0:
		set16(12, []uint16{0x0800, 0x86dd, 0x0806, 0x8100, uint16(m.rng.Uint32())}[m.n(5)])
	case 1: // IPv4 version and IHL
		set(14, []byte{[]byte{0x45, 0x46, 0x4f, 0x44, 0x40, 0x65, 0x05, 0x55}[m.n(8)]})
	case 2: // protocol, fragments
		if m.chance(0.5) {
			set(14+9, []byte{[]byte{17, 6, 1, 0}[m.n(4)]})
		} else {
			set16(14+6, []uint16{0, 0x4000, 0x2000, 0x0001, 0x1fff, 0x8000}[m.n(6)])
		}
	case 3: // underlay source
		a := m.ip4()
		set(14+12, a[:])
		if m.chance(0.5) {
			set16(l.udp, fuzzPorts[m.n(len(fuzzPorts))])
		}
	case 4: // underlay destination
		a := m.ip4()
		set(14+16, a[:])
	case 5: // ports
		set16(l.udp+2*m.n(2), fuzzPorts[m.n(len(fuzzPorts))])
	case 6: // IPv4 and UDP lengths
		if m.chance(0.5) {
			set16(14+2, m.u16(f, 14))
		} else {
			set16(l.udp+4, m.u16(f, l.udp))
		}
	case 7: // SCION version, QoS, flow
		if m.chance(0.5) {
			set(l.sc, []byte{fzF2(f, l.sc)&0x0f | byte(m.n(16))<<4})
		} else {
			set(l.sc+1, []byte{byte(m.rng.Uint32())})
		}
	case 8: // NextHdr
		set(l.sc+4, []byte{[]byte{6, 17, 202, 200, 201, 0, 1, 58, 255, 203}[m.n(10)]})
	case 9: // HdrLen
		hl := int(fzF2(f, l.sc+5))
		set(l.sc+5, []byte{byte([]int{hl - 1, hl + 1, 0, 9, 10, 255, (l.path - l.sc) / 4, (l.path-l.sc)/4 + 1, hl + 2}[m.n(9)])})
	case 10: // PayloadLen
		set16(l.sc+6, m.u16(f, l.l4))
	case 11: // PathType
		set(l.sc+8, []byte{[]byte{0, 1, 2, 3, 4, 255}[m.n(6)]})
	case 12: // address types and lengths
		nib := []byte{0, 3, 1, 2, 4, 7, 0xf}
		v := fzF2(f, l.sc+9)
		if m.chance(0.5) {
			v = v&0x0f | nib[m.n(len(nib))]<<4
		} else {
			v = v&0xf0 | nib[m.n(len(nib))]
		}
		set(l.sc+9, []byte{v})
	case 13: // reserved
		set16(l.sc+10, uint16(m.rng.Uint32()))
	case 14: // DstIA, SrcIA
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(m.ia()))
		set(l.sc+12+8*m.n(2), b[:])
	case 15: // the hosts, in place
		at, n := l.dst, l.dl
		if m.chance(0.6) {
			at, n = l.src, l.sl
		}
		if n == 4 {
			a := m.ip4()
			set(at, a[:])
		} else {
			a := m.ip6()
			set(at, a[:])
		}
	case 16: // a host of the other length: the header grows or shrinks
		src := m.chance(0.6)
		at, n, shift := l.dst, l.dl, 4
		if src {
			at, n, shift = l.src, l.sl, 0
		}
		if at+n > len(f) || l.sc+12 > len(f) {
			break
		}
		var a []byte
		if n == 4 {
			x := m.ip6()
			a = x[:]
		} else {
			x := m.ip4()
			a = x[:]
		}
		g := append(append(append([]byte(nil), f[:at]...), a...), f[at+n:]...)
		if len(a) == 16 {
			g[l.sc+9] = g[l.sc+9]&^(0xf<<shift) | 3<<shift
		} else {
			g[l.sc+9] &^= 0xf << shift
		}
		g[l.sc+5] = byte(int(g[l.sc+5]) + (len(a)-n)/4)
		f = g
	case 17: // path meta header
		if l.path+4 <= len(f) {
			f[l.path+m.n(4)] = m.byte8()
		}
	case 18: // a path of another seed, HdrLen and PathType along
		o := m.seeds[m.n(len(m.seeds))]
		lo := fzLayoutIn(o)
		if lo.l4 < lo.path || lo.l4 > len(o) || l.l4 < l.path || l.l4 > len(f) || l.sc+9 > len(f) {
			break
		}
		g := append(append(append([]byte(nil), f[:l.path]...), o[lo.path:lo.l4]...), f[l.l4:]...)
		g[l.sc+5] = byte((lo.l4 - lo.sc - (lo.path - lo.dst) + (l.path - l.dst)) / 4)
		g[l.sc+8] = o[lo.sc+8]
		f = g
	case 19: // the empty path, as a host of this AS sends it
		if l.l4 < l.path || l.l4 > len(f) || l.sc+9 > len(f) {
			break
		}
		f = append(f[:l.path:l.path], f[l.l4:]...)
		f[l.sc+5] = byte((l.path - l.sc) / 4)
		f[l.sc+8] = 0
		if m.chance(0.7) {
			binary.BigEndian.PutUint64(f[l.sc+20:], uint64(localIA))
		}
		if m.chance(0.7) && l.sl == 4 {
			copy(f[14+12:], f[l.src:l.src+4])
		}
	case 20: // SCMP type and code
		if l.l4+2 <= len(f) {
			f[l.l4] = []byte{0, 1, 2, 3, 4, 5, 6, 127, 128, 129, 130, 131, 132, 255}[m.n(14)]
			if m.chance(0.5) {
				f[l.l4+1] = m.byte8()
			}
		}
	case 21: // the L4 checksum, lengths, TCP offset and flags
		at := l.l4 + []int{2, 6, 16, 4, 12, 13}[m.n(6)]
		if at+2 <= len(f) {
			fzPut16(f[at:], m.u16(f, l.l4))
		}
	case 22: // the payload grows or shrinks, the lengths along
		d := []int{-1, 1, -8, 8, -100, 200, 1000}[m.n(7)]
		f = m.insert(f, len(f), d)
		m.fixLengthsIn(f)
	case 23: // the L4 header of another seed
		o := m.seeds[m.n(len(m.seeds))]
		lo := fzLayoutIn(o)
		n := []int{8, 20, 4}[m.n(3)]
		if lo.l4+n <= len(o) && l.l4+n <= len(f) && lo.l4 >= 0 && l.l4 >= 0 {
			copy(f[l.l4:], o[lo.l4:lo.l4+n])
			if m.chance(0.5) && lo.sc+5 < len(o) && l.sc+5 < len(f) {
				f[l.sc+4] = o[lo.sc+4]
			}
		}
	case 24: // SCION's common and address headers of another seed
		o := m.seeds[m.n(len(m.seeds))]
		lo := fzLayoutIn(o)
		n := []int{12, 28, 36}[m.n(3)]
		if lo.sc+n <= len(o) && l.sc+n <= len(f) {
			copy(f[l.sc:], o[lo.sc:lo.sc+n])
		}
	default:
		f = m.generic(f, l.l4+24)
	}
	return f
}

func fzF2(f []byte, at int) byte {
	if at >= 0 && at < len(f) {
		return f[at]
	}
	return 0
}

// fixLengthsIn makes the IPv4, UDP and SCION lengths the frame's.
func (m *fzMutator) fixLengthsIn(f []byte) {
	l := fzLayoutIn(f)
	if len(f) >= 34 {
		fzPut16(f[16:], uint16(len(f)-14))
	}
	if l.udp+8 <= len(f) {
		fzPut16(f[l.udp+4:], uint16(len(f)-l.udp))
	}
	if l.sc+8 <= len(f) && l.l4 <= len(f) {
		fzPut16(f[l.sc+6:], uint16(len(f)-l.l4))
	}
}

// fuzzIn is one mutated SCION frame.
func (m *fzMutator) fuzzIn() []byte {
	f := append([]byte(nil), m.seeds[m.n(len(m.seeds))]...)
	for k := 1 + m.n(3); k > 0; k-- {
		f = m.mutateIn(f)
	}
	if m.chance(0.4) {
		m.fixLengthsIn(f)
	}
	if m.chance(0.5) {
		l := fzLayoutIn(f)
		if l.sc+8 <= len(f) && l.path <= len(f) && l.l4 >= l.path {
			if plen := int(fzBe16(f[l.sc+6:])); l.l4+plen <= len(f) {
				fzFixSCIONL4Checksum(f, l, plen)
			}
		}
	}
	if m.chance(0.5) {
		fzFixIPv4Checksum(f)
	}
	if m.chance(0.1) {
		f = m.mutateIn(f)
	}
	return f
}

// Interesting IPv6 destinations for tra_out.
var fuzzOutDsts = []netip.Addr{
	remote4SMIP, remote6, fzRemote6b, fzMustSMIP(fzNativeIA, netip.MustParseAddr("10.100.0.2")), fzMustSMIP(fzPublicIA, netip.MustParseAddr("10.7.0.2")),
	fzMustSMIP(fzMultiIA, netip.MustParseAddr("10.103.0.2")), fzMustSMIP(fzHeldIA, netip.MustParseAddr("10.104.0.2")),
	fzMustSMIP(localIA, fzLocal4), fzLocal6, hostSMIP, netip.MustParseAddr("fc00::1"), netip.MustParseAddr("fc00::ffff:a00:1"),
	netip.MustParseAddr("fc00:1800::ffff:a00:1"), netip.MustParseAddr("fcff:f0fc:200::ffff:a66:2"), netip.MustParseAddr("fc00:10fe:0:7ff::1"),
	netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("ff02::1:ff00:1"), fzGwLinkLoc, netip.MustParseAddr("::1"),
	fzMustSMIP(addr.MustParseIA("1-524287"), netip.MustParseAddr("10.1.1.1")), netip.MustParseAddr("fc00:10fc:200:1::ffff:a66:2"),
}

// mutateOut changes an IPv6 frame in one of the places tra_out reads.
func (m *fzMutator) mutateOut(f []byte) []byte {
	set := func(at int, b []byte) {
		if at >= 0 && at+len(b) <= len(f) {
			copy(f[at:], b)
		}
	}
	set16 := func(at int, v uint16) { set(at, []byte{byte(v >> 8), byte(v)}) }
	l4 := 54
	if fzF2(f, 20) == 44 {
		l4 = 62
	}
	switch m.n(18) {
	case 0:
		set16(12, []uint16{0x86dd, 0x0800, 0x0806, 0x8100}[m.n(4)])
	case 1: // version, traffic class, flow label
		switch m.n(3) {
		case 0:
			set(14, []byte{fzF2(f, 14)&0x0f | []byte{0x60, 0x40, 0x00, 0x70, 0xf0}[m.n(5)]})
		case 1:
			set(14, []byte{fzF2(f, 14)&0xf0 | byte(m.n(16))})
		default:
			set16(16, []uint16{0, 1, 0xffff, uint16(m.rng.Uint32())}[m.n(4)])
		}
	case 2: // payload length
		set16(18, m.u16(f, 54))
	case 3: // next header
		set(20, []byte{[]byte{6, 17, 58, 44, 0, 43, 60, 59, 255, 4, 41}[m.n(11)]})
	case 4: // hop limit
		set(21, []byte{[]byte{0, 1, 2, 64, 255}[m.n(5)]})
	case 5: // source
		a := []netip.Addr{hostSMIP, remote4SMIP, fzMustSMIP(localIA, fzLocal4), netip.MustParseAddr("fe80::2"), netip.MustParseAddr("fc00:10fc:100::ffff:a65:3")}[m.n(5)].As16()
		set(22, a[:])
	case 6, 7: // destination
		a := fuzzOutDsts[m.n(len(fuzzOutDsts))].As16()
		if m.chance(0.1) {
			binary.BigEndian.PutUint64(a[8:], m.rng.Uint64())
		}
		set(38, a[:])
	case 8: // TCP flags, offset, options
		switch m.n(3) {
		case 0:
			set(l4+13, []byte{[]byte{0x02, 0x12, 0x10, 0x04, 0x01, 0x03, 0xff, 0}[m.n(8)]})
		case 1:
			set(l4+12, []byte{byte(m.n(16)) << 4})
		default:
			at := l4 + 20 + m.n(8)
			set(at, []byte{2, 4, m.byte8(), m.byte8()})
		}
	case 9: // UDP length, checksums
		at := l4 + []int{4, 6, 2, 16}[m.n(4)]
		set16(at, m.u16(f, l4))
	case 10: // ICMPv6 type and code
		set(l4, []byte{[]byte{1, 2, 3, 4, 128, 129, 130, 133, 135, 136, 143, 0, 255, 127}[m.n(14)]})
		if m.chance(0.3) {
			set(l4+1, []byte{m.byte8()})
		}
	case 11: // a fragment header
		if fzF2(f, 20) != 44 && len(f) >= 54 {
			g := append(append(append([]byte(nil), f[:54]...), f[20], 0, 0, 0, 0, 0, 0, 1), f[54:]...)
			g[20] = 44
			f = g
		} else {
			set16(56, []uint16{0, 1, 8, 0xfff8, 0xfff9}[m.n(5)])
			if m.chance(0.3) {
				set(54, []byte{[]byte{6, 17, 58, 44, 0}[m.n(5)]})
			}
		}
	case 12: // the payload grows or shrinks, the length along
		d := []int{-1, 1, -8, 8, -100, 200, 1000, -20}[m.n(8)]
		f = m.insert(f, len(f), d)
		fzFixLengthOut(f)
	case 13: // the size that just fits a destination's path, or one more
		if len(f) >= 54 {
			dst := netip.AddrFrom16([16]byte(f[38:54]))
			if mp, err := ToSCION(dst); err == nil && len(m.dests[mp.IA]) > 0 {
				p := m.dests[mp.IA][0]
				hdr := 12 + 16 + len(mp.Host(dst).AsSlice()) + 4 + len(p.Raw)
				f = m.resize(f, 54+int(p.MTU)-hdr+m.n(3)-1)
				fzFixLengthOut(f)
			}
		}
	case 14: // IPv6 header fields of another seed
		o := m.seeds[m.n(len(m.seeds))]
		field := [][2]int{{14, 4}, {18, 2}, {20, 2}, {22, 16}, {38, 16}}[m.n(5)]
		if at, w := field[0], field[1]; at+w <= len(o) && at+w <= len(f) {
			copy(f[at:], o[at:at+w])
		}
	case 15: // the L4 header of another seed
		o := m.seeds[m.n(len(m.seeds))]
		n := []int{8, 20, 24}[m.n(3)]
		if 54+n <= len(o) && 54+n <= len(f) {
			copy(f[54:], o[54:54+n])
			if m.chance(0.7) {
				f[20] = o[20]
			}
		}
	default:
		f = m.generic(f, 54+24)
	}
	return f
}

func fzFixLengthOut(f []byte) {
	if len(f) >= 54 {
		fzPut16(f[18:], uint16(len(f)-54))
	}
}

// fuzzOut is one mutated IPv6 frame.
func (m *fzMutator) fuzzOut() []byte {
	f := append([]byte(nil), m.seeds[m.n(len(m.seeds))]...)
	for k := 1 + m.n(3); k > 0; k-- {
		f = m.mutateOut(f)
	}
	if m.chance(0.6) {
		fzFixLengthOut(f)
	}
	if m.chance(0.5) && len(f) >= 54 {
		fzFixIPv6L4Checksum(f)
	}
	if m.chance(0.1) {
		f = m.mutateOut(f)
	}
	return f
}

// ---- The reference: what each program must do -------------------------------

// Actions.
const (
	fzActPass     = xdpPass
	fzActDrop     = xdpDrop
	fzActRedirect = xdpRedirect
	fzActShot     = tcActShot
	fzActTCRedir  = tcActRedirect
)

// fzInRef is what tra_in must do with a frame, and what it needs to check
// the IPv6 packet it hands the host.
type fzInRef struct {
	action uint32
	// either: the C may drop rather than pass it (what is not IPv4 at
	// all the kernel drops too; the C makes no point of which).
	either  bool
	why     string
	l       fzInLayout
	plen    int
	nh      uint8
	srcSMIP netip.Addr
}

// fzRefIn decides a frame by the rules: SCION/UDP/IPv4 to the host's address
// and one of its ports (in one buffer or several), version 0, to its ISD-AS and host
// (anything else is not the translator's: passed); then a standard path
// from one of the AS's routers or the empty path from the local host it
// names, headers within the frame, a source with an SM-IP address, and an
// L4 the host understands (TCP, UDP, SCMP echo); SCMP errors and
// traceroute replies go to the daemon. Anything else is dropped. With
// routers that deliver to the packet's own port (toPort: scionproto v0.14.0
// on), any other port of the host takes SCION too, if it has SCION's shape
// and a router handed it over.
func fzRefIn(f []byte, toPort bool) fzInRef {
	pass := func(why string) fzInRef { return fzInRef{action: fzActPass, why: why} }
	drop := func(why string) fzInRef { return fzInRef{action: fzActDrop, why: why} }
	if len(f) < 34 || fzBe16(f[12:]) != 0x0800 {
		return pass("not IPv4")
	}
	if f[14]>>4 != 4 {
		return fzInRef{action: fzActPass, either: true, why: "IP version not 4: passed or dropped, never translated"}
	}
	if f[14+9] != 17 || netip.AddrFrom4([4]byte(f[30:34])) != hostIP4 || fzBe16(f[20:])&0x3fff != 0 {
		return pass("not UDP to the host, or a fragment")
	}
	ihl := int(f[14]&0xf) * 4
	if ihl < 20 || len(f) < 14+ihl+8 {
		return pass("no UDP header")
	}
	l := fzLayoutIn(f)
	anyPort := false
	if p := fzBe16(f[l.udp+2:]); p != 30041 && (p < 31000 || p > 32767) {
		if !toPort {
			return pass("not the host's SCION ports")
		}
		anyPort = true
	}
	// What the kernel drops (a bad header checksum, lengths that do not
	// fit) is passed to it.
	ipLen, udpLen := int(fzBe16(f[16:])), int(fzBe16(f[l.udp+4:]))
	if ipLen < ihl+8 || 14+ipLen > len(f) || udpLen < 8 || udpLen > ipLen-ihl ||
		checksum.Fold(checksum.Sum(f[14:14+ihl], 0)) != 0xffff {
		return pass("IPv4 or UDP header the kernel drops")
	}
	udpEnd := l.udp + udpLen
	c := l.sc
	// On another port, what does not even have SCION's shape (version 0,
	// header and payload filling the datagram) is the host's own UDP.
	if anyPort && (len(f) < c+12 || f[c]>>4 != 0 || int(f[c+5])*4+int(fzBe16(f[c+6:]))+8 != udpLen) {
		return pass("another port, not shaped like SCION")
	}
	// There only a router hands over SCION: from anyone else it is the
	// host's own UDP, whatever it looks like.
	if sender := netip.AddrPortFrom(netip.AddrFrom4([4]byte(f[26:30])), fzBe16(f[l.udp:])); anyPort && sender != routerAddr && sender != farRouter {
		return pass("another port, not from a router")
	}
	if len(f) < c+36 {
		return pass("too short for SCION")
	}
	if f[c]>>4 != 0 {
		return pass("SCION version")
	}
	if addr.IA(binary.BigEndian.Uint64(f[c+12:])) != localIA {
		return pass("not to this AS")
	}
	dt, st := f[c+9]>>4, f[c+9]&0xf
	if (dt != 0 && dt != 3) || (st != 0 && st != 3) {
		return pass("not IP hosts")
	}
	pt := f[c+8]
	if pt != 0 && pt != 1 {
		return drop("path type")
	}
	if l.dl == 4 {
		if netip.AddrFrom4([4]byte(f[l.dst:l.dst+4])) != hostIP4 {
			return pass("another host")
		}
	} else {
		if len(f) < l.dst+16 {
			return drop("short")
		}
		if netip.AddrFrom16([16]byte(f[l.dst:l.dst+16])) != hostSMIP {
			return pass("another host")
		}
	}
	if len(f) < l.src+l.sl {
		return drop("short")
	}
	hdr, plen := int(f[c+5])*4, int(fzBe16(f[c+6:]))
	if hdr < 28+l.dl+l.sl || c+hdr+plen > udpEnd {
		return drop("HdrLen or PayloadLen beyond the datagram")
	}
	nh := f[c+4]
	if nh != 6 && nh != 17 && nh != 202 {
		return drop("next header")
	}
	srcIA := addr.IA(binary.BigEndian.Uint64(f[c+20:]))
	var src netip.Addr
	if l.sl == 4 {
		src = netip.AddrFrom4([4]byte(f[l.src : l.src+4]))
	} else {
		src = netip.AddrFrom16([16]byte(f[l.src : l.src+16]))
	}
	from := netip.AddrPortFrom(netip.AddrFrom4([4]byte(f[26:30])), fzBe16(f[l.udp:]))
	if pt == 1 && from != routerAddr && from != farRouter {
		return drop("a standard path not from a router")
	}
	if pt == 0 && (srcIA != localIA || l.sl != 4 || src != from.Addr()) {
		return drop("the empty path not from the local host it names")
	}
	if pt == 0 && anyPort {
		return drop("the empty path on a port only a router delivers to")
	}
	// An IPv6 host is its own SM-IP address, of the AS it is in; one of
	// another form (an IPv4-mapped address too) has none: a reply to the
	// IPv4 host it would map to would not go to the same SCION address.
	smip, err := FromSCION(srcIA, src)
	if err != nil || (l.sl == 16 && src.Is4In6()) || srcIA.ISD() == 0 || srcIA.AS() == 0 {
		return drop("no SM-IP address for the source (ISD 0 and AS 0 are wildcards)")
	}
	l4 := c + hdr
	if plen < 8 || (nh == 6 && plen < 20) {
		return drop("short L4")
	}
	if nh == 202 && f[l4] != 128 && f[l4] != 129 {
		return drop("SCMP other than echo (errors, traceroute replies: the daemon's)")
	}
	return fzInRef{action: fzActRedirect, why: "translated", l: l, plen: plen, nh: nh, srcSMIP: smip}
}

// fzCheckIn checks what tra_in did with f (its routers delivering to the
// packet's own port or not); nil if right.
func fzCheckIn(f []byte, toPort bool, ret uint32, out []byte) *fzFinding {
	r := fzRefIn(f, toPort)
	if ret != r.action && !(r.either && ret == fzActDrop) {
		return fzFindf(fmt.Sprintf("tra_in action %d, want %d (%s)", ret, r.action, r.why), "")
	}
	if ret != fzActRedirect {
		return nil
	}
	l, c := r.l, r.l.sc
	if len(out) != 54+r.plen {
		return fzFindf("tra_in length", "%d bytes out, want %d (Ethernet, IPv6, PayloadLen %d)", len(out), 54+r.plen, r.plen)
	}
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true, SkipDecodeRecovery: true})
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if eth == nil || ip == nil {
		return fzFindf("tra_in decode", "gopacket does not decode Ethernet/IPv6: %v", p.ErrorLayer())
	}
	if !bytes.Equal(eth.DstMAC, hostMAC) || !bytes.Equal(eth.SrcMAC, pairMAC) {
		return fzFindf("tra_in MACs", "%s → %s, want %s → %s", eth.SrcMAC, eth.DstMAC, pairMAC, hostMAC)
	}
	nh6 := r.nh
	if nh6 == 202 {
		nh6 = 58
	}
	qos := f[c]<<4 | f[c+1]>>4
	flow := uint32(f[c+1]&0xf)<<16 | uint32(fzBe16(f[c+2:]))
	if ip.Version != 6 || ip.TrafficClass != qos || ip.FlowLabel != flow || int(ip.Length) != r.plen || uint8(ip.NextHeader) != nh6 || ip.HopLimit != 64 {
		return fzFindf("tra_in IPv6 header", "version %d class %#x flow %#x length %d next %d hops %d, want 6 %#x %#x %d %d 64",
			ip.Version, ip.TrafficClass, ip.FlowLabel, ip.Length, ip.NextHeader, ip.HopLimit, qos, flow, r.plen, nh6)
	}
	if s, _ := netip.AddrFromSlice(ip.SrcIP); s != r.srcSMIP {
		return fzFindf("tra_in source", "from %s, want %s, the SM-IP address of the SCION source", ip.SrcIP, r.srcSMIP)
	}
	if d, _ := netip.AddrFromSlice(ip.DstIP); d != hostSMIP {
		return fzFindf("tra_in destination", "to %s, want the host's %s", ip.DstIP, hostSMIP)
	}
	in4, out4 := f[c+int(f[c+5])*4:][:r.plen], out[54:]
	at := fzL4CsumAt(r.nh)
	if !bytes.Equal(in4[:at], out4[:at]) || !bytes.Equal(in4[at+2:], out4[at+2:]) {
		return fzFindf("tra_in L4 bytes", "the L4 bytes besides the checksum changed")
	}
	validIn := checksum.Fold(checksum.Sum(in4, fzScionPseudo(f, l, r.plen, r.nh))) == 0xffff
	validOut := checksum.Fold(checksum.Sum(out4, fzIpv6Pseudo(ip.SrcIP, ip.DstIP, r.plen, nh6))) == 0xffff
	if validIn != validOut {
		return fzFindf("tra_in L4 checksum", "right for SCION %t, for IPv6 %t", validIn, validOut)
	}
	if r.nh == 17 && fzBe16(out4[6:]) == 0 {
		return fzFindf("tra_in UDP checksum 0", "a UDP checksum of zero to IPv6")
	}
	return nil
}

// fzOutRef is what tra_out must do with a frame.
type fzOutRef struct {
	action uint32
	why    string
	// An ICMPv6 error to the host.
	icmp             bool
	errType, errCode uint8
	errParam         uint32
	errFrom          netip.Addr
	// A SCION packet.
	dstIA   addr.IA
	dstHost netip.Addr
	paths   []Path // nil: the local AS, the empty path
}

// fzIsICMPv6Error says whether an IPv6 packet (from its header on) is an
// ICMPv6 error message, looking through a first fragment's header as
// RFC 4443 2.4 (e) asks: no error answers one.
func fzIsICMPv6Error(ip []byte) bool {
	nh, at := ip[6], 40
	if nh == 44 && len(ip) >= at+8 && fzBe16(ip[at+2:])&0xfff8 == 0 {
		nh, at = ip[at], at+8
	}
	return nh == 58 && len(ip) > at && ip[at] < 128
}

// fzRefOut decides a frame by the rules: a well-formed IPv6 packet from the
// host's SM-IP address to an SM-IP address, not to an IPv6 host of this AS
// (unreachable), with hops left (time exceeded from the host's gateway),
// TCP, UDP or ICMPv6 echo (a first fragment: parameter problem; ICMPv6
// errors: the daemon's), a path to the destination's AS (none: held for
// the daemon), and within the path's MTU (packet too big). No ICMPv6 error
// answers an ICMPv6 error.
func fzRefOut(f []byte, dests map[addr.IA][]Path) fzOutRef {
	shot := func(why string) fzOutRef { return fzOutRef{action: fzActShot, why: why} }
	if len(f) < 54 || fzBe16(f[12:]) != 0x86dd {
		return shot("not IPv6")
	}
	ip := f[14:]
	if ip[0]>>4 != 6 {
		return shot("IP version not 6")
	}
	plen := int(fzBe16(ip[4:]))
	if 40+plen != len(ip) {
		return shot("payload length")
	}
	src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	m, err := ToSCION(dst)
	if err != nil || m.IA == 0 {
		return shot("not to an SM-IP address")
	}
	if src != hostSMIP {
		return shot("not from the host")
	}
	host := m.Host(dst)
	isErr := fzIsICMPv6Error(ip)
	reply := func(why string, typ, code uint8, param uint32, from netip.Addr) fzOutRef {
		if isErr {
			return shot(why + ", but an ICMPv6 error is never answered with one")
		}
		return fzOutRef{action: fzActTCRedir, why: why, icmp: true, errType: typ, errCode: code, errParam: param, errFrom: from}
	}
	if m.IA == localIA && host.Is6() {
		return reply("an IPv6 host of this AS", 1, 3, 0, dst)
	}
	if ip[7] <= 1 {
		return reply("hop limit", 3, 0, 0, fzGwLinkLoc)
	}
	l4 := ip[40:]
	switch ip[6] {
	case 6:
		if plen < 20 {
			return shot("short TCP")
		}
	case 17:
		if plen < 8 {
			return shot("short UDP")
		}
	case 58:
		if plen < 8 {
			return shot("short ICMPv6")
		}
		if l4[0] != 128 && l4[0] != 129 {
			return shot("ICMPv6 other than echo (errors: the daemon's)")
		}
	case 44:
		if plen < 8 || fzBe16(l4[2:])&0xfff8 != 0 {
			return shot("a fragment")
		}
		return reply("a first fragment", 4, 1, 6, dst)
	default:
		return shot("next header")
	}
	r := fzOutRef{action: fzActTCRedir, why: "translated", dstIA: m.IA, dstHost: host}
	if m.IA == localIA {
		return r
	}
	paths := dests[m.IA]
	if len(paths) == 0 {
		return shot("no path: held")
	}
	hdr := 12 + 16 + len(host.AsSlice()) + 4 + len(paths[0].Raw)
	if mtu := int(paths[0].MTU); hdr+plen > mtu {
		return reply("too big for the path", 2, 0, uint32(max(mtu-hdr+40, 1280)), dst)
	}
	r.paths = paths
	return r
}

// fzCheckOut checks what tra_out did with f; nil if right.
func fzCheckOut(f []byte, ret uint32, out []byte, dests map[addr.IA][]Path) *fzFinding {
	r := fzRefOut(f, dests)
	if ret != r.action {
		return fzFindf(fmt.Sprintf("tra_out action %d, want %d (%s)", ret, r.action, r.why), "")
	}
	if ret != fzActTCRedir {
		return nil
	}
	if r.icmp {
		return fzCheckICMPv6Error(f, out, r)
	}
	return fzCheckSCIONOut(f, out, r)
}

// fzCheckICMPv6Error checks an ICMPv6 error tra_out sent the host.
func fzCheckICMPv6Error(f, out []byte, r fzOutRef) *fzFinding {
	quote := min(len(f)-14, 1280-48)
	if len(out) != 14+48+quote {
		return fzFindf("tra_out ICMPv6 length", "%d bytes, want %d (quoting %d)", len(out), 14+48+quote, quote)
	}
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true, SkipDecodeRecovery: true})
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	if ip == nil || icmp == nil {
		return fzFindf("tra_out ICMPv6 decode", "gopacket does not decode Ethernet/IPv6/ICMPv6: %v", p.ErrorLayer())
	}
	if !bytes.Equal(out[0:6], f[6:12]) || !bytes.Equal(out[6:12], f[0:6]) {
		return fzFindf("tra_out ICMPv6 MACs", "not back to the sender's MAC")
	}
	s, _ := netip.AddrFromSlice(ip.SrcIP)
	d, _ := netip.AddrFromSlice(ip.DstIP)
	if s != r.errFrom || d != hostSMIP || ip.HopLimit != 64 || int(ip.Length) != 8+quote {
		return fzFindf("tra_out ICMPv6 header", "%s → %s hops %d length %d, want %s → %s 64 %d", s, d, ip.HopLimit, ip.Length, r.errFrom, hostSMIP, 8+quote)
	}
	msg := out[54:]
	if msg[0] != r.errType || msg[1] != r.errCode || binary.BigEndian.Uint32(msg[4:]) != r.errParam {
		return fzFindf("tra_out ICMPv6 type", "%d/%d param %d, want %d/%d param %d (%s)", msg[0], msg[1], binary.BigEndian.Uint32(msg[4:]), r.errType, r.errCode, r.errParam, r.why)
	}
	if checksum.Fold(checksum.Sum(msg, fzIpv6Pseudo(ip.SrcIP, ip.DstIP, len(msg), 58))) != 0xffff {
		return fzFindf("tra_out ICMPv6 checksum", "ICMPv6 checksum wrong")
	}
	if !bytes.Equal(msg[8:], f[14:14+quote]) {
		return fzFindf("tra_out ICMPv6 quote", "the quote is not the packet's start")
	}
	return nil
}

// fzCheckSCIONOut checks a SCION packet tra_out sent toward the AS.
func fzCheckSCIONOut(f, out []byte, r fzOutRef) *fzFinding {
	ip6 := f[14:]
	plen, nh := int(fzBe16(ip6[4:])), ip6[6]
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true, SkipDecodeRecovery: true})
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if ip == nil || udp == nil {
		return fzFindf("tra_out decode", "gopacket does not decode Ethernet/IPv4/UDP: %v", p.ErrorLayer())
	}
	if ip.IHL != 5 || checksum.Fold(checksum.Sum(out[14:34], 0)) != 0xffff {
		return fzFindf("tra_out IPv4 checksum", "IPv4 header checksum wrong")
	}
	if int(ip.Length) != len(out)-14 || int(udp.Length) != len(out)-34 || ip.TTL != 64 || ip.Flags != layers.IPv4DontFragment || ip.FragOffset != 0 {
		return fzFindf("tra_out IPv4/UDP header", "lengths %d/%d for %d bytes, TTL %d, flags %v", ip.Length, udp.Length, len(out), ip.TTL, ip.Flags)
	}
	if s, _ := netip.AddrFromSlice(ip.SrcIP); s != hostIP4 || udp.SrcPort != 30041 {
		return fzFindf("tra_out underlay source", "from %s:%d, want %s:30041", ip.SrcIP, udp.SrcPort, hostIP4)
	}
	var s slayers.SCION
	if err := s.DecodeFromBytes(udp.Payload, gopacket.NilDecodeFeedback); err != nil {
		return fzFindf("tra_out SCION decode", "scionproto's decoder refuses the SCION header: %v", err)
	}
	scionNH := nh
	if nh == 58 {
		scionNH = 202
	}
	tc := ip6[0]<<4 | ip6[1]>>4
	flow := uint32(ip6[1]&0xf)<<16 | uint32(fzBe16(ip6[2:]))
	if s.Version != 0 || s.DstIA != r.dstIA || s.SrcIA != localIA || uint8(s.NextHdr) != scionNH || int(s.PayloadLen) != plen || len(s.Payload) != plen ||
		s.TrafficClass != tc || (flow != 0 && s.FlowID != flow) {
		return fzFindf("tra_out SCION header", "%s → %s next %d length %d (%d) class %#x flow %#x; want %s → %s %d %d %#x %#x",
			s.SrcIA, s.DstIA, s.NextHdr, s.PayloadLen, len(s.Payload), s.TrafficClass, s.FlowID, localIA, r.dstIA, scionNH, plen, tc, flow)
	}
	dh, err := s.DstAddr()
	sh, err2 := s.SrcAddr()
	if err != nil || err2 != nil || dh.Type() != addr.HostTypeIP || dh.IP() != r.dstHost || sh.Type() != addr.HostTypeIP || sh.IP() != hostIP4 {
		return fzFindf("tra_out SCION hosts", "%v → %v, want %s → %s", sh, dh, hostIP4, r.dstHost)
	}
	dstIP, _ := netip.AddrFromSlice(ip.DstIP)
	to := netip.AddrPortFrom(dstIP, uint16(udp.DstPort))
	if r.paths == nil {
		if s.PathType != empty.PathType || to != netip.AddrPortFrom(r.dstHost, 30041) {
			return fzFindf("tra_out local path", "path type %d to %s, want the empty path to %s:30041", s.PathType, to, r.dstHost)
		}
	} else {
		raw, ok := s.Path.(*scion.Raw)
		var used *Path
		for i := range r.paths {
			if ok && bytes.Equal(raw.Raw, r.paths[i].Raw) {
				used = &r.paths[i]
			}
		}
		if s.PathType != scion.PathType || used == nil {
			return fzFindf("tra_out path", "path type %d, not one of the installed paths to %s", s.PathType, r.dstIA)
		}
		var dec scion.Decoded
		if err := dec.DecodeFromBytes(raw.Raw); err != nil {
			return fzFindf("tra_out path decode", "the path does not decode: %v", err)
		}
		if to != used.NextHop {
			return fzFindf("tra_out next hop", "to %s, the path's first hop is %s", to, used.NextHop)
		}
		if int(s.HdrLen)*4+plen > int(used.MTU) {
			return fzFindf("tra_out MTU", "%d bytes of SCION on a path of MTU %d", int(s.HdrLen)*4+plen, used.MTU)
		}
	}
	in4, out4 := ip6[40:], s.Payload
	at := fzL4CsumAt(nh)
	diff := []int{}
	for i := range in4 {
		if (i < at || i >= at+2) && in4[i] != out4[i] {
			diff = append(diff, i)
		}
	}
	if len(diff) > 0 && !fzMssClamped(in4, out4, diff, nh, r, int(s.HdrLen)*4) {
		return fzFindf("tra_out L4 bytes", "the L4 bytes besides the checksum changed at %v", diff)
	}
	validIn := checksum.Fold(checksum.Sum(in4, fzIpv6Pseudo(ip6[8:24], ip6[24:40], plen, nh))) == 0xffff
	// A UDP datagram without a checksum gets one: SCION's UDP always has.
	validIn = validIn || (nh == 17 && fzBe16(in4[6:]) == 0)
	validOut := checksum.Fold(checksum.Sum(out4, scionPseudoSum(&s, plen, scionNH))) == 0xffff
	if validIn != validOut {
		kind := "tra_out L4 checksum"
		if len(diff) > 0 {
			kind += " after an MSS clamp"
		}
		return fzFindf(kind, "right for IPv6 %t, for SCION %t", validIn, validOut)
	}
	if nh == 17 && fzBe16(out4[6:]) == 0 {
		return fzFindf("tra_out UDP checksum 0", "a UDP checksum of zero into SCION (IPv6 UDP checksum %#04x)", fzBe16(in4[6:]))
	}
	return nil
}

// fzMssClamped says whether the only change to a TCP segment (besides its
// checksum) is a SYN's MSS option lowered to what fits the path.
func fzMssClamped(in4, out4 []byte, diff []int, nh uint8, r fzOutRef, scionHdr int) bool {
	if nh != 6 || in4[13]&0x02 == 0 || r.paths == nil {
		return false
	}
	want := int(r.paths[0].MTU) - scionHdr - 20
	doff := int(in4[12]>>4) * 4
	for i := 20; i+4 <= min(doff, len(in4)); {
		switch in4[i] {
		case 0:
			return false
		case 1:
			i++
			continue
		case 2:
			if in4[i+1] == 4 {
				old, now := int(fzBe16(in4[i+2:])), int(fzBe16(out4[i+2:]))
				for _, d := range diff {
					if d != i+2 && d != i+3 {
						return false
					}
				}
				return old > want && now == want
			}
		}
		if in4[i+1] < 2 {
			return false
		}
		i += int(in4[i+1])
	}
	return false
}

// fzFinding is a run the reference disagrees with.
type fzFinding struct{ kind, detail string }

func fzFindf(kind, format string, a ...any) *fzFinding {
	return &fzFinding{kind: kind, detail: fmt.Sprintf(format, a...)}
}

// ---- Running ----------------------------------------------------------------

// fzLog keeps what a program's runs found: a few inputs of each kind.
type fzLog struct {
	mu       sync.Mutex
	kinds    map[string]int
	examples []string
}

func (fl *fzLog) add(prog, where string, in []byte, fd *fzFinding) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.kinds == nil {
		fl.kinds = map[string]int{}
	}
	fl.kinds[fd.kind]++
	if fl.kinds[fd.kind] <= fzExamples {
		msg := fd.kind
		if fd.detail != "" {
			msg += ": " + fd.detail
		}
		fl.examples = append(fl.examples, fmt.Sprintf("%s: %s: %s\ninput %s", prog, where, msg, hex.EncodeToString(in)))
	}
}

// fzSeed is the run's seed: FASTPATH_FUZZ_SEED, or the time.
func fzSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv(envFuzzSeed); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envFuzzSeed, s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func fzRunCount(t *testing.T) int {
	t.Helper()
	if s := os.Getenv(envFuzzRuns); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("%s=%q: want a positive number", envFuzzRuns, s)
		}
		return v
	}
	return fzRuns
}

func TestFuzzTranslatorPrograms(t *testing.T) {
	fx := newFzFixture(t)
	fxPort := newFzFixture(t)
	fxPort.tr.setRoutersToPort(t, true)
	seed, runs := fzSeed(t), fzRunCount(t)
	t.Logf("seed %d (%s=%d repeats it), %d runs per program", seed, envFuzzSeed, seed, runs)
	inSeeds, outSeeds := fzInSeeds(t), fzOutSeeds(t, fx.dests)
	for _, s := range inSeeds {
		if len(s) > fzFrameMax {
			t.Fatalf("a seed of %d bytes: more than %d", len(s), fzFrameMax)
		}
	}
	type prog struct {
		name  string
		p     *ebpf.Program
		tc    bool
		seeds [][]byte
		gen   func(*fzMutator) []byte
		check func(f []byte, ret uint32, out []byte) *fzFinding
		why   func(f []byte) string
		salt  uint64
	}
	progs := []prog{
		{"tra_in", fx.tr.objs.TraIn, false, inSeeds, (*fzMutator).fuzzIn,
			func(f []byte, ret uint32, out []byte) *fzFinding { return fzCheckIn(f, false, ret, out) },
			func(f []byte) string { return fzRefIn(f, false).why }, 1},
		// The same frames, with routers that deliver to the packet's own
		// port (scionproto v0.14.0 on): a translator of its own.
		{"tra_in routers to port", fxPort.tr.objs.TraIn, false, inSeeds, (*fzMutator).fuzzIn,
			func(f []byte, ret uint32, out []byte) *fzFinding { return fzCheckIn(f, true, ret, out) },
			func(f []byte) string { return fzRefIn(f, true).why }, 3},
		{"tra_out", fx.tr.objs.TraOut, true, outSeeds, (*fzMutator).fuzzOut,
			func(f []byte, ret uint32, out []byte) *fzFinding { return fzCheckOut(f, ret, out, fx.dests) },
			func(f []byte) string { return fzRefOut(f, fx.dests).why }, 2},
	}
	for _, pr := range progs {
		t.Run(pr.name, func(t *testing.T) {
			t.Parallel()
			var found fzLog
			whys := map[string]int{}
			seedWhys := map[string]int{}
			var elapsed time.Duration
			err := netns.Run(fx.ns, func() error {
				opts := ebpf.RunOptions{DataOut: make([]byte, fzFrameMax+1024)}
				if pr.tc {
					opts.Context = skbCtx(0)
				}
				run := func(f []byte) (uint32, []byte, error) {
					opts.Data = f
					opts.DataOut = opts.DataOut[:cap(opts.DataOut)]
					ret, err := pr.p.Run(&opts)
					return ret, opts.DataOut, err
				}
				// The seeds as they are first: the reference must agree
				// with the programs on them too.
				for i, f := range pr.seeds {
					ret, out, err := run(f)
					if err != nil {
						return fmt.Errorf("seed %d: test run: %w", i, err)
					}
					if fd := pr.check(f, ret, out); fd != nil {
						found.add(pr.name, fmt.Sprintf("seed frame %d, unmutated", i), f, fd)
					}
					seedWhys[pr.why(f)]++
				}
				m := &fzMutator{rng: rand.New(rand.NewPCG(seed, pr.salt)), seeds: pr.seeds, dests: fx.dests}
				start := time.Now()
				for i := 0; i < runs; i++ {
					f := pr.gen(m)
					ret, out, err := run(f)
					if err != nil && pr.tc && fzShortL3(f) {
						// A TC test run wants the network header whole;
						// the host's stack sends none shorter.
						whys["refused by the test run (short IPv4 or IPv6 header)"]++
						continue
					}
					if err != nil {
						return fmt.Errorf("seed %d run %d: test run of %x: %w", seed, i, f, err)
					}
					if fd := pr.check(f, ret, out); fd != nil {
						found.add(pr.name, fmt.Sprintf("%s=%d run %d", envFuzzSeed, seed, i), f, fd)
					}
					whys[pr.why(f)]++
				}
				elapsed = time.Since(start)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d runs in %s: %.0f runs/s", runs, elapsed.Round(time.Millisecond), float64(runs)/elapsed.Seconds())
			t.Logf("the seeds' outcomes: %s", fzTally(seedWhys))
			t.Logf("the runs' outcomes by the reference: %s", fzTally(whys))
			// Depth: a fuzzer whose mutations all die in the first
			// check finds nothing.
			if float64(whys["translated"]) < 0.02*float64(runs) {
				t.Errorf("only %d of %d runs reached a translation: the seeds or mutations are too shallow", whys["translated"], runs)
			}
			kinds := make([]string, 0, len(found.kinds))
			for kind := range found.kinds {
				kinds = append(kinds, kind)
			}
			sort.Strings(kinds)
			for _, kind := range kinds {
				t.Errorf("%s: %d runs", kind, found.kinds[kind])
			}
			for _, e := range found.examples {
				t.Error(e)
			}
		})
	}
}

// fzTally lists outcomes by count.
func fzTally(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || (all[i].v == all[j].v && all[i].k < all[j].k) })
	var b strings.Builder
	for i, e := range all {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %d", e.k, e.v)
	}
	return b.String()
}

// fzShortL3 says whether a frame claims IPv4 or IPv6 but is shorter than
// its header, which BPF_PROG_TEST_RUN of a TC program refuses (EINVAL).
func fzShortL3(f []byte) bool {
	return len(f) >= 14 && ((fzBe16(f[12:]) == 0x86dd && len(f) < 54) || (fzBe16(f[12:]) == 0x0800 && len(f) < 34))
}

// ---- The daemon's decoders and error builders (Go native fuzzing) -----------
//
// Seeded from the captures and the shapes the other tests use; `go test`
// runs the seeds, `go test -run '^$' -fuzz FuzzXxx ./internal/tra/`
// searches further. None may panic on any input; where what comes out has
// a property (it decodes, its checksum is right), it is checked.

// fzSCION is the SCION part of a captured frame (nil for another).
func fzSCION(f []byte) []byte {
	if len(f) < 42 || fzBe16(f[12:]) != 0x0800 || f[14+9] != 17 {
		return nil
	}
	return f[fzLayoutIn(f).sc:]
}

// fzSeedSCMP are SCMP messages with their senders: those the lab's host
// received, and an error of each type quoting a packet of the captures.
func fzSeedSCMP(tb testing.TB) (msgs [][]byte, ias []addr.IA, froms []netip.Addr) {
	var quotes [][]byte
	for _, f := range fzReadSeeds(tb, fzSeedsIn) {
		sc := fzSCION(f)
		var s slayers.SCION
		if sc == nil || s.DecodeFromBytes(sc, gopacket.NilDecodeFeedback) != nil {
			continue
		}
		quotes = append(quotes, sc)
		if s.NextHdr == slayers.L4SCMP {
			src, _ := s.SrcAddr()
			msgs, ias, froms = append(msgs, s.Payload), append(ias, s.SrcIA), append(froms, src.IP())
		}
	}
	bodies := []gopacket.SerializableLayer{
		&slayers.SCMPDestinationUnreachable{}, &slayers.SCMPPacketTooBig{MTU: 1300}, &slayers.SCMPParameterProblem{Pointer: 6},
		&slayers.SCMPExternalInterfaceDown{IA: remoteIA, IfID: 2}, &slayers.SCMPInternalConnectivityDown{IA: remoteIA, Ingress: 1, Egress: 2},
	}
	types := []slayers.SCMPType{1, 2, 4, 5, 6}
	for i, body := range bodies {
		b := gopacket.NewSerializeBuffer()
		q := quotes[i%len(quotes)]
		err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{}, &slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(types[i], 4)}, body, gopacket.Payload(q))
		if err != nil {
			tb.Fatal(err)
		}
		msgs, ias, froms = append(msgs, b.Bytes()), append(ias, remoteIA), append(froms, netip.MustParseAddr("10.255.2.1"))
	}
	return msgs, ias, froms
}

func FuzzSCMPToICMPv6(f *testing.F) {
	msgs, ias, froms := fzSeedSCMP(f)
	for i := range msgs {
		f.Add(msgs[i], uint64(ias[i]), froms[i].AsSlice())
	}
	f.Fuzz(func(t *testing.T, msg []byte, ia uint64, from []byte) {
		sender, _ := netip.AddrFromSlice(from)
		pkt, err := scmpToICMPv6(msg, addr.IA(ia), sender, hostSMIP)
		if err != nil || pkt == nil {
			return
		}
		if fd := fzValidICMPv6Error(pkt, hostSMIP); fd != nil {
			t.Fatalf("%s: %s\n%x", fd.kind, fd.detail, pkt)
		}
		if typ := pkt[40]; typ != icmp6DestinationUnreachable && typ != icmp6PacketTooBig && typ != icmp6ParameterProblem {
			t.Fatalf("ICMPv6 type %d for SCMP type %d", typ, msg[0])
		}
		if len(pkt) > 48 && pkt[48]>>4 != 6 {
			t.Fatalf("the quote is not an IPv6 packet: %x", pkt[48:])
		}
	})
}

// fzValidICMPv6Error checks an IPv6 packet with an ICMPv6 error to dst: it
// decodes, fits IPv6's minimum MTU, and its checksum is right.
func fzValidICMPv6Error(pkt []byte, dst netip.Addr) *fzFinding {
	p := gopacket.NewPacket(pkt, layers.LayerTypeIPv6, gopacket.DecodeOptions{NoCopy: true, SkipDecodeRecovery: true})
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	if ip == nil || icmp == nil || len(pkt) < 48 {
		return fzFindf("ICMPv6 decode", "gopacket does not decode IPv6/ICMPv6: %v", p.ErrorLayer())
	}
	if len(pkt) > minIPv6MTU || int(ip.Length) != len(pkt)-40 || ip.NextHeader != layers.IPProtocolICMPv6 {
		return fzFindf("ICMPv6 header", "%d bytes, payload length %d, next header %d", len(pkt), ip.Length, ip.NextHeader)
	}
	if d, _ := netip.AddrFromSlice(ip.DstIP); d != dst {
		return fzFindf("ICMPv6 destination", "to %s, want %s", ip.DstIP, dst)
	}
	if pkt[40] >= 128 {
		return fzFindf("ICMPv6 type", "type %d is no error", pkt[40])
	}
	if checksum.Fold(checksum.Sum(pkt[40:], fzIpv6Pseudo(pkt[8:24], pkt[24:40], len(pkt)-40, 58))) != 0xffff {
		return fzFindf("ICMPv6 checksum", "checksum wrong")
	}
	return nil
}

// fzSeedICMPv6 are ICMPv6 errors as the host sends them: those captured,
// and one of each type quoting what the host received (a captured packet
// the other way round).
func fzSeedICMPv6(tb testing.TB) [][]byte {
	var out [][]byte
	for _, f := range fzReadSeeds(tb, fzSeedsOut) {
		if len(f) < 62 || fzBe16(f[12:]) != 0x86dd {
			continue
		}
		ip := f[14:]
		if ip[6] == 58 && ip[40] < 128 {
			out = append(out, ip)
			continue
		}
		if len(out) > 24 {
			continue
		}
		rcvd := append([]byte(nil), ip...)
		copy(rcvd[8:24], ip[24:40])
		copy(rcvd[24:40], ip[8:24])
		for _, tc := range [][2]uint8{{1, 4}, {2, 0}, {4, 1}, {3, 0}} {
			out = append(out, icmpv6Packet(hostSMIP, netip.AddrFrom16([16]byte(ip[24:40])), tc[0], tc[1], 1300, rcvd))
		}
	}
	return out
}

// fzSeedPaths are raw paths: those the captured SCION packets carry.
func fzSeedPaths(tb testing.TB) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	for _, f := range fzReadSeeds(tb, fzSeedsIn) {
		sc := fzSCION(f)
		var s slayers.SCION
		if sc == nil || s.DecodeFromBytes(sc, gopacket.NilDecodeFeedback) != nil {
			continue
		}
		if raw, ok := s.Path.(*scion.Raw); ok && !seen[string(raw.Raw)] {
			seen[string(raw.Raw)] = true
			out = append(out, raw.Raw)
		}
	}
	return out
}

func FuzzICMPv6ToSCMP(f *testing.F) {
	paths := fzSeedPaths(f)
	for i, pkt := range fzSeedICMPv6(f) {
		f.Add(pkt, paths[i%len(paths)], uint16(1472))
		f.Add(pkt, []byte(nil), uint16(0))
	}
	// A packet too big with an MTU below what SCION's header and IPv6's
	// differ by, to a host of this AS (the empty path).
	local := fzMustSMIP(localIA, fzLocal4)
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: local.AsSlice(), DstIP: hostSMIP.AsSlice()}
	udp := &layers.UDP{SrcPort: 31000, DstPort: 40000}
	udp.SetNetworkLayerForChecksum(ip)
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip, udp, gopacket.Payload("too big")); err != nil {
		f.Fatal(err)
	}
	f.Add(icmpv6Packet(hostSMIP, local, icmp6PacketTooBig, 0, 0, b.Bytes()), []byte(nil), uint16(0))
	f.Fuzz(func(t *testing.T, pkt, raw []byte, mtu uint16) {
		// Apart: the fuzzing engine may hand in slices of one buffer, and
		// serializing a scion.Raw path writes its meta header back into
		// the path's bytes.
		pkt, raw = bytes.Clone(pkt), bytes.Clone(raw)
		// The daemon's paths are path headers whole (snet's dataplane
		// paths): one that decodes is cut to its length, one that does
		// not is kept, for the error it must give.
		var rp scion.Raw
		if rp.DecodeFromBytes(raw) == nil {
			raw = raw[:rp.Len()]
		}
		path := Path{Raw: raw, MTU: mtu, NextHop: routerAddr}
		in := append([]byte(nil), pkt...)
		b, err := icmpv6ToSCMP(pkt, localIA, addr.HostIP(hostIP4), path)
		if !bytes.Equal(in, pkt) {
			t.Fatal("icmpv6ToSCMP changed the packet it was given")
		}
		if err != nil || b == nil {
			return
		}
		var s slayers.SCION
		if err := s.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("scionproto's decoder refuses the SCMP packet: %v\n%x", err, b)
		}
		var scmp slayers.SCMP
		if err := scmp.DecodeFromBytes(s.Payload, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("scionproto's decoder refuses the SCMP message: %v\n%x", err, s.Payload)
		}
		if s.NextHdr != slayers.L4SCMP || s.SrcIA != localIA || int(s.PayloadLen) != len(s.Payload) {
			t.Fatalf("SCION %s → %s next %s length %d (%d)", s.SrcIA, s.DstIA, s.NextHdr, s.PayloadLen, len(s.Payload))
		}
		if m, err := ToSCION(netip.AddrFrom16([16]byte(pkt[24:40]))); err != nil || s.DstIA != m.IA {
			t.Fatalf("to %s, the ICMPv6 error was to %s", s.DstIA, netip.AddrFrom16([16]byte(pkt[24:40])))
		}
		if checksum.Fold(checksum.Sum(s.Payload, scionPseudoSum(&s, len(s.Payload), 202))) != 0xffff {
			t.Fatalf("SCMP checksum wrong for SCION's pseudo-header\n%x", b)
		}
		limit := minIPv6MTU
		if mtu > 0 {
			limit = int(mtu)
		}
		if hdr := int(s.HdrLen) * 4; len(b) > max(limit, hdr+8) {
			t.Fatalf("%d bytes of SCMP on a path of MTU %d", len(b), limit)
		}
		if scmp.TypeCode.Type() == slayers.SCMPTypePacketTooBig {
			// The remote may send what the host's MTU takes, with SCION's
			// header in IPv6's place: never more.
			// IPv6's least MTU is the host's whatever it says.
			hostMTU := max(int(binary.BigEndian.Uint32(pkt[44:48])), minIPv6MTU)
			if got := int(binary.BigEndian.Uint16(s.Payload[6:8])); got > hostMTU-40+int(s.HdrLen)*4 {
				t.Fatalf("SCMP packet too big says %d for a host whose IPv6 MTU is %d (SCION header %d)", got, hostMTU, int(s.HdrLen)*4)
			}
		}
	})
}

func FuzzParseSCMPError(f *testing.F) {
	msgs, _, _ := fzSeedSCMP(f)
	for _, m := range msgs {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		e, err := parseSCMPError(msg)
		if err != nil {
			return
		}
		if e.typ != msg[0] || e.code != msg[1] {
			t.Fatalf("type %d/%d read as %d/%d", msg[0], msg[1], e.typ, e.code)
		}
		if want := map[uint8]int{scmpExternalInterfaceDown: 1, scmpInternalConnectivityDown: 2}[e.typ]; len(e.ifids) != want {
			t.Fatalf("type %d names %d interfaces, want %d", e.typ, len(e.ifids), want)
		}
	})
}

// fzEvent is a record of tra_events or tra_held as a program writes it.
func fzEvent(kind EventKind, ia addr.IA, typ, code uint8, src netip.Addr, data []byte) []byte {
	raw := make([]byte, unsafe.Sizeof(translatorTraEvent{}))
	binary.NativeEndian.PutUint32(raw[evKind:], uint32(kind))
	binary.NativeEndian.PutUint32(raw[evLen:], uint32(len(data)))
	binary.BigEndian.PutUint64(raw[evIA:], uint64(ia))
	raw[evSCMPType], raw[evSCMPCode] = typ, code
	if src.IsValid() {
		raw[evSrcHostLen] = byte(len(src.AsSlice()))
		copy(raw[evSrcHost:], src.AsSlice())
	}
	copy(raw[evData:], data)
	return raw
}

func FuzzDecodeEvent(f *testing.F) {
	msgs, ias, froms := fzSeedSCMP(f)
	for i := range msgs {
		f.Add(fzEvent(EventSCMP, ias[i], msgs[i][0], msgs[i][1], froms[i], msgs[i][:min(len(msgs[i]), 1536)]))
	}
	for _, pkt := range fzSeedICMPv6(f)[:4] {
		f.Add(fzEvent(EventICMP, remoteIA, 0, 0, netip.Addr{}, pkt))
	}
	for _, fr := range fzReadSeeds(f, fzSeedsOut)[:8] {
		f.Add(fzEvent(EventNoPath, remoteIA, 0, 0, netip.Addr{}, fr[14:]))
	}
	f.Add(fzEvent(EventProbe, remoteIA, 131, 0, remote6, make([]byte, 24)))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, err := decodeEvent(raw)
		if err != nil {
			return
		}
		n := int(binary.NativeEndian.Uint32(raw[evLen:]))
		if len(ev.Data) != n || n > len(translatorTraEvent{}.Data) || !bytes.Equal(ev.Data, raw[evData:evData+n]) {
			t.Fatalf("%d bytes of data for a record that says %d", len(ev.Data), n)
		}
		if hl := raw[evSrcHostLen]; ev.SrcHost.IsValid() != (hl == 4 || hl == 16) {
			t.Fatalf("source host %v for a length of %d", ev.SrcHost, hl)
		}
	})
}

func FuzzCompleteL4Checksum(f *testing.F) {
	for _, fr := range fzReadSeeds(f, fzSeedsOut) {
		if len(fr) > 14 {
			pkt := append([]byte(nil), fr[14:]...)
			f.Add(pkt)
			// As a held packet may be: the checksum pending (zero here).
			if len(pkt) >= 48 {
				at := 40 + l4ChecksumAt(pkt[6])
				if at+2 <= len(pkt) {
					p2 := append([]byte(nil), pkt...)
					p2[at], p2[at+1] = 0, 0
					f.Add(p2)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		in := append([]byte(nil), pkt...)
		out := completeL4Checksum(pkt)
		if len(out) != len(in) {
			t.Fatalf("%d bytes in, %d out", len(in), len(out))
		}
		proto := byte(0)
		if len(in) >= 48 {
			proto = in[6]
		}
		well := len(in) >= 48 && in[0]>>4 == 6 && int(fzBe16(in[4:]))+40 == len(in) && (proto == 6 || proto == 17 || proto == 58) &&
			40+l4ChecksumAt(proto)+2 <= len(in)
		if !well {
			if !bytes.Equal(in, out) {
				t.Fatal("a packet it does not know was changed")
			}
			return
		}
		at := 40 + l4ChecksumAt(proto)
		if !bytes.Equal(in[:at], out[:at]) || !bytes.Equal(in[at+2:], out[at+2:]) {
			t.Fatal("bytes besides the checksum changed")
		}
		if checksum.Fold(checksum.Sum(out[40:], fzIpv6Pseudo(out[8:24], out[24:40], len(out)-40, proto))) != 0xffff {
			t.Fatalf("checksum wrong\n%x", out)
		}
		if proto == 17 && fzBe16(out[at:]) == 0 {
			t.Fatal("a UDP checksum of zero")
		}
	})
}

func FuzzUnreachableFor(f *testing.F) {
	for _, fr := range fzReadSeeds(f, fzSeedsOut) {
		if len(fr) > 14 {
			f.Add(fr[14:])
		}
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		out, err := unreachableFor(pkt)
		if err != nil {
			return
		}
		src := netip.AddrFrom16([16]byte(pkt[8:24]))
		if fd := fzValidICMPv6Error(out, src); fd != nil {
			t.Fatalf("%s: %s\n%x", fd.kind, fd.detail, out)
		}
		if q := out[48:]; !bytes.Equal(q, pkt[:len(q)]) {
			t.Fatal("the quote is not the packet's start")
		}
	})
}

func FuzzPathSignature(f *testing.F) {
	for _, raw := range fzSeedPaths(f) {
		f.Add(raw, uint16(1), uint16(1))
	}
	f.Fuzz(func(t *testing.T, raw []byte, id, seq uint16) {
		in := append([]byte(nil), raw...)
		if pathSignature(raw) != pathSignature(in) {
			t.Fatal("a path's signature changes")
		}
		b, _, err := probePacket(localIA, hostIP4, remoteIA, raw, id, seq)
		if !bytes.Equal(in, raw) {
			t.Fatal("probePacket changed the path it was given")
		}
		if err != nil {
			return
		}
		var s slayers.SCION
		if err := s.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("scionproto's decoder refuses the probe: %v\n%x", err, b)
		}
		var scmp slayers.SCMP
		var tr slayers.SCMPTraceroute
		if err := scmp.DecodeFromBytes(s.Payload, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("the probe's SCMP: %v", err)
		}
		if err := tr.DecodeFromBytes(scmp.Payload, gopacket.NilDecodeFeedback); err != nil || scmp.TypeCode.Type() != slayers.SCMPTypeTracerouteRequest || tr.Identifier != id || tr.Sequence != seq {
			t.Fatalf("probe %s id %d seq %d (%v), want a traceroute request %d/%d", scmp.TypeCode, tr.Identifier, tr.Sequence, err, id, seq)
		}
		if checksum.Fold(checksum.Sum(s.Payload, scionPseudoSum(&s, len(s.Payload), 202))) != 0xffff {
			t.Fatal("the probe's SCMP checksum is wrong")
		}
		var dec scion.Decoded
		if err := dec.DecodeFromBytes(raw); err != nil {
			t.Fatalf("a probe on a path that does not decode: %v", err)
		}
		if pathSignature(raw) == "raw:"+string(raw) {
			t.Fatal("a path that decodes signed by its bytes")
		}
	})
}
