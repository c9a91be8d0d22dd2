package tra

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path/scion"

	"github.com/fastpath-dev/fastpath/internal/checksum"
)

const (
	tcActShot     = 2
	tcActRedirect = 7
	xdpDrop       = 1
	xdpPass       = 2
	xdpRedirect   = 4
)

func (tr *Translator) counts(t *testing.T) Counts {
	t.Helper()
	c, err := tr.Counts()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// IPv6 packets to SM-IP addresses leave as SCION packets that scionproto's
// decoder reads: the destination ISD-AS and host from the address (IPv4
// form or the SM-IP itself), the source from the host's, the installed
// path, the underlay to the first router, and an L4 checksum that is right
// for SCION's pseudo-header.
func TestEgressTranslates(t *testing.T) {
	tr := loadTest(t)
	raw := testPath(t)
	if err := tr.SetPaths(remoteIA, []Path{{Raw: raw, MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	payload := gopacket.Payload(bytes.Repeat([]byte("fastpath"), 20))
	cases := map[string]struct {
		dst      netip.Addr
		l4       []gopacket.SerializableLayer
		proto    slayers.L4ProtocolType
		dstHost  netip.Addr
		l4csumAt int
	}{
		"udp to an IPv4 host": {remote4SMIP, []gopacket.SerializableLayer{&layers.UDP{SrcPort: 40000, DstPort: 31000}, payload}, slayers.L4UDP, remote4, 6},
		"tcp to an IPv4 host": {remote4SMIP, []gopacket.SerializableLayer{&layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: 7, ACK: true, Window: 500}, payload}, slayers.L4TCP, remote4, 16},
		"udp to an IPv6 host": {remote6, []gopacket.SerializableLayer{&layers.UDP{SrcPort: 40000, DstPort: 31000}, payload}, slayers.L4UDP, remote6, 6},
		"icmpv6 echo to SCMP echo": {remote4SMIP, []gopacket.SerializableLayer{
			&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)},
			&layers.ICMPv6Echo{Identifier: 0x4242, SeqNumber: 3}, payload}, slayers.L4SCMP, remote4, 2},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			in := ipv6Frame(t, hostSMIP, c.dst, c.l4...)
			ret, out := tr.run(t, tr.objs.TraOut, in, true)
			if ret != tcActRedirect {
				t.Fatalf("action %d, want TC_ACT_REDIRECT; counters %v", ret, tr.counts(t))
			}
			ip, udp, s, l4 := decodeSCION(t, out)
			if ip.DstIP.String() != routerAddr.Addr().String() || int(udp.DstPort) != int(routerAddr.Port()) || ip.SrcIP.String() != hostIP4.String() {
				t.Fatalf("underlay %s → %s:%d, want %s → %s", ip.SrcIP, ip.DstIP, udp.DstPort, hostIP4, routerAddr)
			}
			if s.DstIA != remoteIA || s.SrcIA != localIA || s.NextHdr != c.proto {
				t.Fatalf("SCION %s → %s next %s", s.SrcIA, s.DstIA, s.NextHdr)
			}
			dstHost, err := s.DstAddr()
			if err != nil || dstHost.IP() != c.dstHost {
				t.Fatalf("destination host %v (%v), want %s", dstHost, err, c.dstHost)
			}
			srcHost, _ := s.SrcAddr()
			if srcHost.IP() != hostIP4 {
				t.Fatalf("source host %v, want the host's IPv4 %s", srcHost, hostIP4)
			}
			if p, ok := s.Path.(*scion.Raw); !ok || !bytes.Equal(p.Raw, raw) {
				t.Fatalf("path %T differs from the installed one", s.Path)
			}
			if s.TrafficClass != 0x28 {
				t.Fatalf("QoS %#x, want the IPv6 traffic class 0x28", s.TrafficClass)
			}
			if checksum.Fold(checksum.Sum(l4, scionPseudoSum(s, len(l4), uint8(c.proto)))) != 0xffff {
				t.Fatalf("L4 checksum %#04x wrong for SCION's pseudo-header", binary.BigEndian.Uint16(l4[c.l4csumAt:]))
			}
			// Everything but the checksum is the host's L4 as it sent it.
			orig := append([]byte(nil), in[len(in)-len(l4):]...)
			got := append([]byte(nil), l4...)
			orig[c.l4csumAt], orig[c.l4csumAt+1], got[c.l4csumAt], got[c.l4csumAt+1] = 0, 0, 0, 0
			if !bytes.Equal(got, orig) {
				t.Fatalf("L4 bytes besides the checksum changed")
			}
		})
	}
	if got := tr.counts(t)["translated_out"].Packets; got != uint64(len(cases)) {
		t.Fatalf("translated_out %d, want %d", got, len(cases))
	}
}

// A destination without a path yet: the packet goes to the daemon whole,
// nothing is sent.
func TestEgressHoldsWithoutPath(t *testing.T) {
	tr := loadTest(t)
	rd, err := ringbuf.NewReader(tr.objs.TraHeld)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload("first packet of a flow"))
	if ret, _ := tr.run(t, tr.objs.TraOut, in, true); ret != tcActShot {
		t.Fatalf("action %d, want TC_ACT_SHOT", ret)
	}
	rec, err := rd.Read()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := decodeEvent(rec.RawSample)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Kind != EventNoPath || ev.IA != remoteIA || !bytes.Equal(ev.Data, in[14:]) {
		t.Fatalf("event %+v, want the whole IPv6 packet for %s", ev, remoteIA)
	}
	if tr.counts(t)["no_path"].Packets != 1 {
		t.Fatalf("counters %v", tr.counts(t))
	}
}

// A TCP SYN asks for what fits the path, with its checksum kept right.
func TestEgressClampsMSS(t *testing.T) {
	tr := loadTest(t)
	raw := testPath(t)
	if err := tr.SetPaths(remoteIA, []Path{{Raw: raw, MTU: 1350, NextHop: routerAddr}}); err != nil {
		t.Fatal(err)
	}
	syn := &layers.TCP{SrcPort: 40000, DstPort: 5201, SYN: true, Window: 64240, Options: []layers.TCPOption{
		{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0x8c}}, // 1420
		{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
	}}
	ret, out := tr.run(t, tr.objs.TraOut, ipv6Frame(t, hostSMIP, remote4SMIP, syn), true)
	if ret != tcActRedirect {
		t.Fatalf("action %d", ret)
	}
	_, _, s, l4 := decodeSCION(t, out)
	scionHdr := 12 + 16 + 4 + 4 + len(raw)
	want := 1350 - scionHdr - 20
	if got := int(binary.BigEndian.Uint16(l4[22:])); got != want {
		t.Fatalf("MSS %d, want %d (path MTU 1350 less %d of SCION header and 20 of TCP)", got, want, scionHdr)
	}
	if checksum.Fold(checksum.Sum(l4, scionPseudoSum(s, len(l4), 6))) != 0xffff {
		t.Fatal("TCP checksum wrong after the clamp")
	}
	if tr.counts(t)["mss_clamped"].Packets != 1 {
		t.Fatalf("counters %v", tr.counts(t))
	}
}

// Too big for the path: an ICMPv6 Packet Too Big goes back to the host with
// the IPv6 MTU that fits, quoting the packet, with a right checksum.
func TestEgressSendsPacketTooBig(t *testing.T) {
	tr := loadTest(t)
	raw := testPath(t)
	if err := tr.SetPaths(remoteIA, []Path{{Raw: raw, MTU: 1400, NextHop: routerAddr}}); err != nil {
		t.Fatal(err)
	}
	in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload(make([]byte, 1390)))
	ret, out := tr.run(t, tr.objs.TraOut, in, true)
	if ret != tcActRedirect {
		t.Fatalf("action %d; counters %v", ret, tr.counts(t))
	}
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	if ip == nil || icmp == nil || icmp.TypeCode.Type() != layers.ICMPv6TypePacketTooBig {
		t.Fatalf("not an ICMPv6 Packet Too Big: %v", p)
	}
	if ip.DstIP.String() != hostSMIP.String() || ip.SrcIP.String() != remote4SMIP.String() {
		t.Fatalf("PTB %s → %s", ip.SrcIP, ip.DstIP)
	}
	msg := out[14+40:]
	scionHdr := 12 + 16 + 4 + 4 + len(raw)
	if mtu := int(binary.BigEndian.Uint32(msg[4:])); mtu != 1400-scionHdr+40 {
		t.Fatalf("MTU %d, want %d", mtu, 1400-scionHdr+40)
	}
	if len(out) != 14+1280 {
		t.Fatalf("PTB of %d bytes, want the 1280 of IPv6's minimum MTU", len(out)-14)
	}
	if !bytes.Equal(msg[8:48], in[14:54]) {
		t.Fatal("the quoted packet is not the original's start")
	}
	if checksum.Fold(checksum.Sum(msg, ipv6PseudoSum(ip.SrcIP, ip.DstIP, len(msg), 58))) != 0xffff {
		t.Fatal("ICMPv6 checksum wrong")
	}
}

// What the host sends elsewhere than SCION-mapped addresses, or from
// another address than its own, is not translated.
func TestEgressRefuses(t *testing.T) {
	tr := loadTest(t)
	for name, c := range map[string]struct{ src, dst netip.Addr }{
		"not SM-IP":      {hostSMIP, netip.MustParseAddr("2001:db8::1")},
		"reserved form":  {hostSMIP, netip.MustParseAddr("fc00:1800::ffff:a00:1")},
		"another source": {netip.MustParseAddr("fc00:10fc:100::99"), remote4SMIP},
	} {
		t.Run(name, func(t *testing.T) {
			before := tr.counts(t)["not_smip"].Packets
			if ret, _ := tr.run(t, tr.objs.TraOut, ipv6Frame(t, c.src, c.dst, &layers.UDP{SrcPort: 1, DstPort: 2}), true); ret != tcActShot {
				t.Fatalf("action %d, want TC_ACT_SHOT", ret)
			}
			if tr.counts(t)["not_smip"].Packets != before+1 {
				t.Fatalf("counters %v", tr.counts(t))
			}
		})
	}
}

// scionFrame builds a SCION packet as a router delivers it to the host:
// IPv4/UDP to the host's port, SCION with L4 from remote to this host.
func scionFrame(t *testing.T, srcIA addr.IA, srcHost netip.Addr, port uint16, l4 ...gopacket.SerializableLayer) []byte {
	t.Helper()
	return inFrame{from: routerAddr, port: port, srcIA: srcIA, srcHost: srcHost, l4: l4}.build(t)
}

// SCION packets for the host arrive as IPv6 from the sender's SM-IP address
// to the host's, with an L4 checksum right for IPv6, SCMP echo as ICMPv6.
func TestIngressTranslates(t *testing.T) {
	tr := loadTest(t)
	payload := gopacket.Payload(bytes.Repeat([]byte("scion in"), 16))
	cases := map[string]struct {
		srcHost netip.Addr
		srcSMIP netip.Addr
		port    uint16
		l4      []gopacket.SerializableLayer
		proto   layers.IPProtocol
	}{
		"udp from an IPv4 host, dispatched port": {remote4, remote4SMIP, 31000, []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 31000}, payload}, layers.IPProtocolUDP},
		"tcp on the end-host port":               {remote4, remote4SMIP, 30041, []gopacket.SerializableLayer{&layers.TCP{SrcPort: 5201, DstPort: 40000, ACK: true, Window: 9}, payload}, layers.IPProtocolTCP},
		"udp from an IPv6 host":                  {remote6, remote6, 30041, []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 9, DstPort: 40000}, payload}, layers.IPProtocolUDP},
		"SCMP echo request": {remote4, remote4SMIP, 30041, []gopacket.SerializableLayer{
			&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeEchoRequest, 0)},
			&slayers.SCMPEcho{Identifier: 7, SeqNumber: 1}, payload}, layers.IPProtocolICMPv6},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			in := scionFrame(t, remoteIA, c.srcHost, c.port, c.l4...)
			ret, out := tr.run(t, tr.objs.TraIn, in, false)
			if ret != xdpRedirect {
				t.Fatalf("action %d, want XDP_REDIRECT; counters %v", ret, tr.counts(t))
			}
			p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
			eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			if eth == nil || ip == nil || !bytes.Equal(eth.DstMAC, hostMAC) || !bytes.Equal(eth.SrcMAC, pairMAC) {
				t.Fatalf("not Ethernet/IPv6 to the host's end of the pair: %v", p)
			}
			if ip.SrcIP.String() != c.srcSMIP.String() || ip.DstIP.String() != hostSMIP.String() || ip.NextHeader != c.proto {
				t.Fatalf("IPv6 %s → %s next %s, want %s → %s %s", ip.SrcIP, ip.DstIP, ip.NextHeader, c.srcSMIP, hostSMIP, c.proto)
			}
			if ip.TrafficClass != 0xb8 || ip.FlowLabel != 0x12345 {
				t.Fatalf("traffic class %#x, flow label %#x: want SCION's QoS and FlowID", ip.TrafficClass, ip.FlowLabel)
			}
			l4 := out[14+40:]
			if int(ip.Length) != len(l4) {
				t.Fatalf("payload length %d, frame carries %d", ip.Length, len(l4))
			}
			if checksum.Fold(checksum.Sum(l4, ipv6PseudoSum(ip.SrcIP, ip.DstIP, len(l4), uint8(c.proto)))) != 0xffff {
				t.Fatal("L4 checksum wrong for IPv6's pseudo-header")
			}
		})
	}
	if got := tr.counts(t)["translated_in"].Packets; got != uint64(len(cases)) {
		t.Fatalf("translated_in %d, want %d", got, len(cases))
	}
}

// SCION for others, or from an AS without SM-IP addresses, is not the
// host's; SCMP informational messages other than echo mean nothing to it.
func TestIngressRefuses(t *testing.T) {
	tr := loadTest(t)
	udp := func() []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 1, DstPort: 31000}, gopacket.Payload("x")}
	}
	other := scionFrame(t, remoteIA, remote4, 31000, udp()...)
	// Another host of this AS.
	copy(other[14+20+8+12+16:], []byte{10, 101, 0, 99})
	cases := map[string]struct {
		frame   []byte
		action  uint32
		verdict string
	}{
		"for another host":  {other, xdpPass, "not_ours"},
		"unmappable source": {scionFrame(t, addr.MustParseIA("1-ff00:0:110"), remote4, 31000, udp()...), xdpDrop, "unmappable"},
		"SCMP traceroute": {scionFrame(t, remoteIA, remote4, 30041, &slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeTracerouteRequest, 0)},
			gopacket.Payload(make([]byte, 24))), xdpDrop, "unsupported"},
		"not to the host's ports": {scionFrame(t, remoteIA, remote4, 8080, udp()...), xdpPass, ""},
		// Frames in several buffers: TestIngressJumboFrames.
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			before := tr.counts(t)
			if ret, _ := tr.run(t, tr.objs.TraIn, c.frame, false); ret != c.action {
				t.Fatalf("action %d, want %d", ret, c.action)
			}
			if c.verdict != "" && tr.counts(t)[c.verdict].Packets != before[c.verdict].Packets+1 {
				t.Fatalf("counters %v, want one more %s", tr.counts(t), c.verdict)
			}
		})
	}
}
