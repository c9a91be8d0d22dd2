package tra

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path/empty"
	"github.com/scionproto/scion/pkg/slayers/path/scion"

	"github.com/fastpath-dev/fastpath/internal/checksum"
	"github.com/fastpath-dev/fastpath/internal/netns"
)

// What the programs do with what an attacker, a careless host or a race
// hands them: each case here failed before its fix.

// inFrame describes a SCION packet arriving on the underlay.
type inFrame struct {
	from     netip.AddrPort // underlay source
	port     uint16         // underlay destination port
	srcIA    addr.IA
	srcHost  netip.Addr
	dstHost  netip.Addr // zero: the host's IPv4 address
	path     []byte     // the standard path; nil: testPath
	emptyRaw bool       // the empty path (a host of this AS)
	l4       []gopacket.SerializableLayer
}

// build makes the frame: IPv4/UDP from from to the host, SCION to the host.
func (f inFrame) build(t testing.TB) []byte {
	t.Helper()
	s := &slayers.SCION{Version: 0, TrafficClass: 0xb8, FlowID: 0x12345, SrcIA: f.srcIA, DstIA: localIA}
	dst := f.dstHost
	if !dst.IsValid() {
		dst = hostIP4
	}
	if err := s.SetDstAddr(addr.HostIP(dst)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSrcAddr(addr.HostIP(f.srcHost)); err != nil {
		t.Fatal(err)
	}
	raw := f.path
	if raw == nil && !f.emptyRaw {
		raw = testPath(t)
	}
	inner := serializeSCION(t, s, raw, f.l4...)
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: f.from.Addr().AsSlice(), DstIP: hostIP4.AsSlice()}
	u := &layers.UDP{SrcPort: layers.UDPPort(f.from.Port()), DstPort: layers.UDPPort(f.port)}
	u.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, u, gopacket.Payload(inner)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decodeIPv6 decodes what tra_in hands the host and checks its L4 checksum.
func decodeIPv6(t *testing.T, out []byte) (*layers.IPv6, []byte) {
	t.Helper()
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if ip == nil {
		t.Fatalf("not IPv6: %v", p)
	}
	l4 := out[14+40 : 14+40+int(ip.Length)]
	if checksum.Fold(checksum.Sum(l4, ipv6PseudoSum(ip.SrcIP, ip.DstIP, len(l4), uint8(ip.NextHeader)))) != 0xffff {
		t.Fatalf("L4 checksum wrong for IPv6's pseudo-header")
	}
	return ip, l4
}

// Defect 2: only the AS's routers hand over SCION with a standard path, and
// the empty path only comes from the local host it names.
func TestIngressChecksSender(t *testing.T) {
	tr := loadTest(t)
	udp := func() []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 31000}, gopacket.Payload("spoof?")}
	}
	local := netip.MustParseAddr("10.101.0.9")
	cases := map[string]ingressCase{
		"from the router":                       {inFrame{from: routerAddr, port: 31000, srcIA: remoteIA, srcHost: remote4, l4: udp()}, xdpRedirect, "translated_in"},
		"from a router behind a gateway":        {inFrame{from: farRouter, port: 31000, srcIA: remoteIA, srcHost: remote4, l4: udp()}, xdpRedirect, "translated_in"},
		"from another machine of the AS":        {inFrame{from: netip.MustParseAddrPort("10.101.0.66:30042"), port: 31000, srcIA: remoteIA, srcHost: remote4, l4: udp()}, xdpDrop, "spoofed"},
		"from the router's address, other port": {inFrame{from: netip.MustParseAddrPort("10.101.0.1:40000"), port: 31000, srcIA: remoteIA, srcHost: remote4, l4: udp()}, xdpDrop, "spoofed"},
		"empty path from the host it names":     {inFrame{from: netip.AddrPortFrom(local, 30041), port: 30041, srcIA: localIA, srcHost: local, emptyRaw: true, l4: udp()}, xdpRedirect, "translated_in"},
		"empty path claiming another AS":        {inFrame{from: netip.AddrPortFrom(local, 30041), port: 30041, srcIA: remoteIA, srcHost: local, emptyRaw: true, l4: udp()}, xdpDrop, "spoofed"},
		"empty path naming another host":        {inFrame{from: netip.AddrPortFrom(local, 30041), port: 30041, srcIA: localIA, srcHost: netip.MustParseAddr("10.101.0.10"), emptyRaw: true, l4: udp()}, xdpDrop, "spoofed"},
		"empty path from the router":            {inFrame{from: routerAddr, port: 30041, srcIA: remoteIA, srcHost: remote4, emptyRaw: true, l4: udp()}, xdpDrop, "spoofed"},
		"SCMP error from another machine": {inFrame{from: netip.MustParseAddrPort("10.101.0.66:30042"), port: 30041, srcIA: remoteIA, srcHost: remote4,
			l4: []gopacket.SerializableLayer{&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeExternalInterfaceDown, 0)}, gopacket.Payload(make([]byte, 64))}}, xdpDrop, "spoofed"},
	}
	runIngressCases(t, tr, cases)
}

// passedUntouched runs each frame through tra_in, which must pass it to the
// kernel as it came and count nothing: the host's own traffic.
func passedUntouched(t *testing.T, tr *Translator, frames map[string][]byte) {
	t.Helper()
	for name, f := range frames {
		t.Run(name, func(t *testing.T) {
			before := tr.total(t)
			ret, out := tr.run(t, tr.objs.TraIn, f, false)
			if ret != xdpPass || !bytes.Equal(out[:len(f)], f) {
				t.Fatalf("action %d (want %d, passed untouched); counters %v", ret, xdpPass, tr.counts(t))
			}
			if after := tr.total(t); after != before {
				t.Fatalf("counted: %d → %d packets; counters %v", before, after, tr.counts(t))
			}
		})
	}
}

// ingressCase is a frame for tra_in, what it must do with it, and the
// counter that must count it once ("": passed as the host's own, nothing
// counted).
type ingressCase struct {
	f       inFrame
	action  uint32
	verdict string
}

func runIngressCases(t *testing.T, tr *Translator, cases map[string]ingressCase) {
	t.Helper()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			before, total := tr.counts(t)[c.verdict].Packets, tr.total(t)
			if ret, _ := tr.run(t, tr.objs.TraIn, c.f.build(t), false); ret != c.action {
				t.Fatalf("action %d, want %d; counters %v", ret, c.action, tr.counts(t))
			}
			if c.verdict == "" {
				if after := tr.total(t); after != total {
					t.Fatalf("passed as the host's own, yet counted: %d → %d packets; counters %v", total, after, tr.counts(t))
				}
				return
			}
			if got := tr.counts(t)[c.verdict].Packets; got != before+1 {
				t.Fatalf("%s %d, want %d; counters %v", c.verdict, got, before+1, tr.counts(t))
			}
		})
	}
}

// Routers that deliver to the packet's own port (scionproto v0.14.0 on):
// SCION arrives from them on the ports the packet names — TCP's, a UDP
// flow's outside dispatched_ports, an echo reply's identifier, the quoted
// datagram's source port — and is taken there from the routers only. The
// host's own UDP on those ports goes to the kernel untouched and uncounted,
// and so does what has SCION's shape from anyone but a router, the empty
// path too (hosts of the AS send to 30041 or a dispatched port): there it
// is the host's traffic, not the translator's, and the host sees its real
// sender. With v0.12.0's routers (TestIngressRefuses) another port is never
// the translator's.
func TestIngressOnTheRoutersPorts(t *testing.T) {
	tr := loadTest(t)
	tr.setRoutersToPort(t, true)
	payload := gopacket.Payload("on its own port")
	udp := func() []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 45000}, payload}
	}
	local := netip.MustParseAddr("10.101.0.9")
	quote := scionPacket(t, localIA, remoteIA, addr.HostIP(hostIP4), addr.HostIP(remote4), testPath(t), &slayers.UDP{SrcPort: 45000, DstPort: 31000})
	runIngressCases(t, tr, map[string]ingressCase{
		"udp outside dispatched_ports":       {inFrame{from: routerAddr, port: 45000, srcIA: remoteIA, srcHost: remote4, l4: udp()}, xdpRedirect, "translated_in"},
		"udp from a router behind a gateway": {inFrame{from: farRouter, port: 45000, srcIA: remoteIA, srcHost: remote4, l4: udp()}, xdpRedirect, "translated_in"},
		"tcp on its port": {inFrame{from: routerAddr, port: 5201, srcIA: remoteIA, srcHost: remote4,
			l4: []gopacket.SerializableLayer{&layers.TCP{SrcPort: 40000, DstPort: 5201, SYN: true, Window: 9}, payload}}, xdpRedirect, "translated_in"},
		"echo reply on its identifier": {inFrame{from: routerAddr, port: 4711, srcIA: remoteIA, srcHost: remote4, l4: []gopacket.SerializableLayer{
			&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeEchoReply, 0)}, &slayers.SCMPEcho{Identifier: 4711, SeqNumber: 1}, payload}}, xdpRedirect, "translated_in"},
		"traceroute reply on its identifier": {inFrame{from: routerAddr, port: 4712, srcIA: remoteIA, srcHost: netip.MustParseAddr("10.102.0.1"), l4: []gopacket.SerializableLayer{
			&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeTracerouteReply, 0)}, &slayers.SCMPTraceroute{Identifier: 4712, Sequence: 1, IA: remoteIA, Interface: 1}}}, xdpDrop, "probe"},
		"SCMP error on the quoted source port": {inFrame{from: routerAddr, port: 45000, srcIA: remoteIA, srcHost: remote4, l4: []gopacket.SerializableLayer{
			&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeDestinationUnreachable, 4)}, &slayers.SCMPDestinationUnreachable{}, gopacket.Payload(quote)}}, xdpDrop, "scmp_error"},
		"udp for another host":                 {inFrame{from: routerAddr, port: 45000, srcIA: remoteIA, srcHost: remote4, dstHost: local, l4: udp()}, xdpPass, "not_ours"},
		"a standard path from another machine": {inFrame{from: netip.MustParseAddrPort("10.101.0.66:30042"), port: 45000, srcIA: remoteIA, srcHost: remote4, l4: udp()}, xdpPass, ""},
		"from the router's address, other port": {inFrame{from: netip.MustParseAddrPort("10.101.0.1:40000"), port: 5201, srcIA: remoteIA, srcHost: remote4,
			l4: []gopacket.SerializableLayer{&layers.TCP{SrcPort: 40000, DstPort: 5201, SYN: true, Window: 9}, payload}}, xdpPass, ""},
		"the empty path from a host of the AS": {inFrame{from: netip.AddrPortFrom(local, 30041), port: 45000, srcIA: localIA, srcHost: local, emptyRaw: true, l4: udp()}, xdpPass, ""},
		"the empty path from the router":       {inFrame{from: routerAddr, port: 45000, srcIA: localIA, srcHost: routerAddr.Addr(), emptyRaw: true, l4: udp()}, xdpDrop, "spoofed"},
		"the empty path to the end-host port":  {inFrame{from: netip.AddrPortFrom(local, 30041), port: 30041, srcIA: localIA, srcHost: local, emptyRaw: true, l4: udp()}, xdpRedirect, "translated_in"},
	})
	dns := []byte{0x0a, 0xbc, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'o', 'r', 'g', 0, 0, 1, 0, 1,
		0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 93, 184, 215, 14}
	passedUntouched(t, tr, map[string][]byte{
		"a DNS reply":                 udpFrame(t, netip.MustParseAddrPort("10.101.0.53:53"), 40000, dns),
		"a DNS reply from the router": udpFrame(t, netip.AddrPortFrom(routerAddr.Addr(), 53), 40001, dns),
		"a datagram from the router's own address and port": udpFrame(t, routerAddr, 40002, []byte("not SCION")),
		"an empty datagram": udpFrame(t, routerAddr, 40003, nil),
	})
}

// Defect 6: a bare ACK, an empty datagram, a small echo between hosts of
// one AS (the empty path and IPv4 hosts: the shortest SCION there is).
func TestShortPacketsInTheLocalAS(t *testing.T) {
	tr := loadTest(t)
	local := netip.MustParseAddr("10.101.0.9")
	localSMIP, err := FromSCION(localIA, local)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]gopacket.SerializableLayer{
		"bare TCP ACK":    {&layers.TCP{SrcPort: 40000, DstPort: 22, ACK: true, Seq: 1, Ack: 2, Window: 100}},
		"empty UDP":       {&layers.UDP{SrcPort: 40000, DstPort: 31000}},
		"ping6 -s 8":      {&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}, &layers.ICMPv6Echo{Identifier: 1, SeqNumber: 1}, gopacket.Payload(make([]byte, 8))},
		"one byte of UDP": {&layers.UDP{SrcPort: 40000, DstPort: 31000}, gopacket.Payload("x")},
	}
	for name, l4 := range out {
		t.Run("out: "+name, func(t *testing.T) {
			in := ipv6Frame(t, hostSMIP, localSMIP, l4...)
			ret, f := tr.run(t, tr.objs.TraOut, in, true)
			if ret != tcActRedirect {
				t.Fatalf("action %d; counters %v", ret, tr.counts(t))
			}
			ip, udp, s, pl := decodeSCION(t, f)
			if ip.DstIP.String() != local.String() || udp.DstPort != 30041 || s.PathType != empty.PathType {
				t.Fatalf("%s:%d path type %d, want %s:30041 on the empty path", ip.DstIP, udp.DstPort, s.PathType, local)
			}
			if checksum.Fold(checksum.Sum(pl, scionPseudoSum(s, len(pl), uint8(s.NextHdr)))) != 0xffff {
				t.Fatal("L4 checksum wrong for SCION's pseudo-header")
			}
		})
	}
	in := map[string][]gopacket.SerializableLayer{
		"bare TCP ACK": {&layers.TCP{SrcPort: 22, DstPort: 40000, ACK: true, Seq: 1, Ack: 2, Window: 100}},
		"empty UDP":    {&slayers.UDP{SrcPort: 31000, DstPort: 31000}},
		"echo reply of ping6 -s 8": {&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeEchoReply, 0)},
			&slayers.SCMPEcho{Identifier: 1, SeqNumber: 1}, gopacket.Payload(make([]byte, 8))},
	}
	for name, l4 := range in {
		t.Run("in: "+name, func(t *testing.T) {
			f := inFrame{from: netip.AddrPortFrom(local, 30041), port: 30041, srcIA: localIA, srcHost: local, emptyRaw: true, l4: l4}.build(t)
			ret, o := tr.run(t, tr.objs.TraIn, f, false)
			if ret != xdpRedirect {
				t.Fatalf("action %d; counters %v", ret, tr.counts(t))
			}
			ip, _ := decodeIPv6(t, o)
			if ip.SrcIP.String() != localSMIP.String() {
				t.Fatalf("from %s, want %s", ip.SrcIP, localSMIP)
			}
		})
	}
}

// Defect 4: an IPv6 host of this AS is not reachable over the IPv4 underlay:
// the host hears so at once, nothing goes to the IPv4 address in the IID.
func TestLocalIPv6HostUnreachable(t *testing.T) {
	tr := loadTest(t)
	dst := netip.MustParseAddr("fc00:10fc:100:1::a65:3")
	if ia, err := ToSCION(dst); err != nil || ia.IA != localIA {
		t.Fatalf("%s is not of %s: %v", dst, localIA, err)
	}
	in := ipv6Frame(t, hostSMIP, dst, &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload("to a local IPv6 host"))
	ret, out := tr.run(t, tr.objs.TraOut, in, true)
	if ret != tcActRedirect {
		t.Fatalf("action %d, want the ICMPv6 error redirected to the host", ret)
	}
	ip, msg := decodeIPv6(t, out)
	if ip.NextHeader != layers.IPProtocolICMPv6 || msg[0] != 1 || msg[1] != 3 || ip.SrcIP.String() != dst.String() || ip.DstIP.String() != hostSMIP.String() {
		t.Fatalf("ICMPv6 %d/%d %s → %s, want destination unreachable (address) from %s", msg[0], msg[1], ip.SrcIP, ip.DstIP, dst)
	}
	if c := tr.counts(t); c["unreachable"].Packets != 1 || c["translated_out"].Packets != 0 {
		t.Fatalf("counters %v", c)
	}
}

// Defect 12: a UDP checksum that sums to zero is sent as 0xffff both ways
// (IPv6 receivers drop a zero UDP checksum).
func TestUDPChecksumNeverZero(t *testing.T) {
	tr := loadTest(t)
	if err := tr.SetPaths(remoteIA, []Path{{Raw: testPath(t), MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	t.Run("out", func(t *testing.T) {
		// The SCION packet's sum without two free payload bytes; those
		// then make the whole sum 0xffff, whose checksum is zero.
		payload := make([]byte, 16)
		frame := func() []byte {
			return ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 40000, DstPort: 31000}, gopacket.Payload(payload))
		}
		_, out := tr.run(t, tr.objs.TraOut, frame(), true)
		_, _, s, l4 := decodeSCION(t, out)
		l4[6], l4[7] = 0, 0
		sum := checksum.Fold(checksum.Sum(l4, scionPseudoSum(s, len(l4), 17)))
		binary.BigEndian.PutUint16(payload, ^sum)
		ret, out := tr.run(t, tr.objs.TraOut, frame(), true)
		if ret != tcActRedirect {
			t.Fatalf("action %d", ret)
		}
		_, _, s, l4 = decodeSCION(t, out)
		if got := binary.BigEndian.Uint16(l4[6:]); got != 0xffff {
			t.Fatalf("UDP checksum %#04x, want 0xffff", got)
		}
		if checksum.Fold(checksum.Sum(l4, scionPseudoSum(s, len(l4), 17))) != 0xffff {
			t.Fatal("checksum wrong")
		}
	})
	t.Run("in", func(t *testing.T) {
		payload := make([]byte, 16)
		frame := func() []byte {
			return inFrame{from: routerAddr, port: 31000, srcIA: remoteIA, srcHost: remote4,
				l4: []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 31000}, gopacket.Payload(payload)}}.build(t)
		}
		_, out := tr.run(t, tr.objs.TraIn, frame(), false)
		ip, l4 := decodeIPv6(t, out)
		l4 = append([]byte(nil), l4...)
		l4[6], l4[7] = 0, 0
		sum := checksum.Fold(checksum.Sum(l4, ipv6PseudoSum(ip.SrcIP, ip.DstIP, len(l4), 17)))
		binary.BigEndian.PutUint16(payload, ^sum)
		ret, out := tr.run(t, tr.objs.TraIn, frame(), false)
		if ret != xdpRedirect {
			t.Fatalf("action %d", ret)
		}
		_, l4 = decodeIPv6(t, out)
		if got := binary.BigEndian.Uint16(l4[6:]); got != 0xffff {
			t.Fatalf("UDP checksum %#04x, want 0xffff", got)
		}
	})
}

// fragmentFrame is an IPv6 fragment of a UDP datagram the host sent.
func fragmentFrame(t *testing.T, offset uint16) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: hostMAC, DstMAC: pairMAC, EthernetType: layers.EthernetTypeIPv6}
	ip := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: hostSMIP.AsSlice(), DstIP: remote4SMIP.AsSlice(), NextHeader: layers.IPProtocolIPv6Fragment}
	frag := make([]byte, 8+8+32)
	frag[0] = 17
	binary.BigEndian.PutUint16(frag[2:], offset<<3|1) // more fragments
	binary.BigEndian.PutUint32(frag[4:], 0xabcd)
	binary.BigEndian.PutUint16(frag[8:], 40000)
	binary.BigEndian.PutUint16(frag[10:], 31000)
	binary.BigEndian.PutUint16(frag[12:], 3000)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, gopacket.Payload(frag)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Defect 8: SCION carries no fragments; the first fragment of a datagram is
// answered with a parameter problem at the header that names the fragment
// header, which the host reports on the socket; the rest go quietly.
func TestFragmentsRefused(t *testing.T) {
	tr := loadTest(t)
	if err := tr.SetPaths(remoteIA, []Path{{Raw: testPath(t), MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	first := fragmentFrame(t, 0)
	ret, out := tr.run(t, tr.objs.TraOut, first, true)
	if ret != tcActRedirect {
		t.Fatalf("first fragment: action %d, want the ICMPv6 error to the host", ret)
	}
	ip, msg := decodeIPv6(t, out)
	if msg[0] != 4 || msg[1] != 1 || binary.BigEndian.Uint32(msg[4:]) != 6 || ip.DstIP.String() != hostSMIP.String() {
		t.Fatalf("ICMPv6 %d/%d pointer %d, want parameter problem 4/1 at 6", msg[0], msg[1], binary.BigEndian.Uint32(msg[4:]))
	}
	if !bytes.Equal(msg[8:8+len(first)-14], first[14:]) {
		t.Fatal("the error does not quote the fragment")
	}
	if ret, _ := tr.run(t, tr.objs.TraOut, fragmentFrame(t, 185), true); ret != tcActShot {
		t.Fatalf("later fragment: action %d, want TC_ACT_SHOT", ret)
	}
	if c := tr.counts(t); c["fragment"].Packets != 2 || c["translated_out"].Packets != 0 {
		t.Fatalf("counters %v", c)
	}
}

// Defect 15 (hop limit): the translator is the host's first hop; a packet
// whose hop limit runs out there is answered as a router answers it.
func TestHopLimit(t *testing.T) {
	tr := loadTest(t)
	if err := tr.SetPaths(remoteIA, []Path{{Raw: testPath(t), MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	for _, hl := range []uint8{0, 1} {
		in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 40000, DstPort: 33434}, gopacket.Payload("traceroute6"))
		in[14+7] = hl
		ret, out := tr.run(t, tr.objs.TraOut, in, true)
		if ret != tcActRedirect {
			t.Fatalf("hop limit %d: action %d", hl, ret)
		}
		ip, msg := decodeIPv6(t, out)
		if msg[0] != 3 || msg[1] != 0 || ip.SrcIP.String() != "fe80::1" {
			t.Fatalf("hop limit %d: ICMPv6 %d/%d from %s, want time exceeded from fe80::1", hl, msg[0], msg[1], ip.SrcIP)
		}
	}
	in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 40000, DstPort: 33434}, gopacket.Payload("traceroute6"))
	in[14+7] = 2
	if ret, _ := tr.run(t, tr.objs.TraOut, in, true); ret != tcActRedirect {
		t.Fatalf("hop limit 2: action %d", ret)
	}
	if c := tr.counts(t); c["hop_limit"].Packets != 2 || c["translated_out"].Packets != 1 {
		t.Fatalf("counters %v", c)
	}
}

// Defect 14: a GSO packet (the pair's offloads turned on again behind the
// translator's back) is not translated as one packet.
func TestGSOPacketRefused(t *testing.T) {
	tr := loadTest(t)
	if err := tr.SetPaths(remoteIA, []Path{{Raw: testPath(t), MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.TCP{SrcPort: 40000, DstPort: 5201, ACK: true}, gopacket.Payload(make([]byte, 1200)))
	ctx := skbCtx(len(in))
	binary.NativeEndian.PutUint32(ctx[164:], 2)   // gso_segs
	binary.NativeEndian.PutUint32(ctx[176:], 600) // gso_size
	ns, _ := testNetns.Load(tr)
	var ret uint32
	if err := netns.Run(ns.(string), func() error {
		var err error
		ret, err = tr.objs.TraOut.Run(&ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+512), Context: ctx})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if ret != tcActShot || tr.counts(t)["offload"].Packets != 1 {
		t.Fatalf("action %d, counters %v", ret, tr.counts(t))
	}
}

// Defect 13: a packet reads one destination's set of paths whole while the
// daemon replaces it and others, never a mix or another AS's.
func TestPathUpdatesAreAtomic(t *testing.T) {
	tr := loadTest(t)
	other := addr.MustParseIA("1-64599")
	short, long := testPath(t), threeSegmentPath(t)
	setA := [][]Path{
		{{Raw: short, MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40}},
		{{Raw: long, MTU: 1472, NextHop: farRouter, Expiry: 1 << 40}},
	}
	if err := tr.SetPaths(remoteIA, setA[0]); err != nil {
		t.Fatal(err)
	}
	// Another AS's paths, of other lengths and next hops, replaced in
	// turn with this one's: a hash element the kernel frees when it
	// replaces one key's value is the next it fills for another key.
	setB := [][]Path{
		{{Raw: long[:len(long)-24], MTU: 1400, NextHop: netip.MustParseAddrPort("10.101.0.99:1"), Expiry: 1 << 40}},
		{{Raw: short[:len(short)-12], MTU: 1400, NextHop: netip.MustParseAddrPort("10.101.0.98:2"), Expiry: 1 << 40}},
	}
	if err := tr.SetPaths(other, setB[0]); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		for i := 0; !stop.Load(); i++ {
			tr.SetPaths(remoteIA, setA[i%2])
			tr.SetPaths(other, setB[i%2])
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 40000, DstPort: 31000}, gopacket.Payload(make([]byte, 64)))
	deadline := time.Now().Add(3 * time.Second)
	runs := 0
	for ; time.Now().Before(deadline); runs++ {
		ret, out := tr.run(t, tr.objs.TraOut, in, true)
		if ret != tcActRedirect {
			t.Fatalf("run %d: action %d; counters %v", runs, ret, tr.counts(t))
		}
		ip, udp, s, _ := decodeSCION(t, out)
		raw := s.Path.(*scion.Raw).Raw
		switch {
		case bytes.Equal(raw, short) && ip.DstIP.Equal(routerAddr.Addr().AsSlice()) && int(udp.DstPort) == int(routerAddr.Port()):
		case bytes.Equal(raw, long) && ip.DstIP.Equal(farRouter.Addr().AsSlice()) && int(udp.DstPort) == int(farRouter.Port()):
		default:
			t.Fatalf("run %d: a path of %d bytes to %s:%d, which was never one set of %s's paths", runs, len(raw), ip.DstIP, udp.DstPort, remoteIA)
		}
	}
	t.Logf("%d runs against replacements", runs)
}

// threeSegmentPath is a path of three segments, longer than testPath.
func threeSegmentPath(t *testing.T) []byte { return pathOfSegments(t, [3]uint8{2, 2, 2}, 9) }
