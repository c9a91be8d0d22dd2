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

	"github.com/fastpath-dev/fastpath/internal/checksum"
)

// readEvent reads the one event a run sent the daemon.
func readEvent(t *testing.T, rd *ringbuf.Reader) Event {
	t.Helper()
	rec, err := rd.Read()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := decodeEvent(rec.RawSample)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// The UDP datagram the host sent (as the host's IPv6 packet, and as it
// went out in SCION) that the errors below are about.
func sentDatagram(t *testing.T) (ipv6, scionPkt []byte) {
	t.Helper()
	payload := gopacket.Payload("the datagram the error is about")
	in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 40000, DstPort: 31000}, payload)
	// A flow label, as Linux gives a socket's packets: it is SCION's FlowID.
	in[14+1] |= 0x0a
	in[14+2], in[14+3] = 0xbc, 0xde
	tr := loadTest(t)
	if err := tr.SetPaths(remoteIA, []Path{{Raw: testPath(t), MTU: 1472, NextHop: routerAddr, Expiry: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	ret, out := tr.run(t, tr.objs.TraOut, in, true)
	if ret != tcActRedirect {
		t.Fatalf("action %d", ret)
	}
	if _, _, s, _ := decodeSCION(t, out); s.FlowID != 0xabcde {
		t.Fatalf("FlowID %#x, want the host's flow label 0xabcde", s.FlowID)
	}
	return in[14:], out[14+20+8:]
}

// SCMP errors reach the daemon whole, with the sender's address; ICMPv6
// errors of the host reach it whole too. Neither goes on.
func TestErrorsGoToTheDaemon(t *testing.T) {
	tr := loadTest(t)
	rd, err := ringbuf.NewReader(tr.objs.TraEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	_, quote := sentDatagram(t)
	router := netip.MustParseAddr("10.255.2.1")
	s := &slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypePacketTooBig, 0)}
	in := scionFrame(t, remoteIA, router, 30041, s, &slayers.SCMPPacketTooBig{MTU: 1300}, gopacket.Payload(quote))
	if ret, _ := tr.run(t, tr.objs.TraIn, in, false); ret != xdpDrop {
		t.Fatalf("SCMP error: action %d, want XDP_DROP", ret)
	}
	ev := readEvent(t, rd)
	if ev.Kind != EventSCMP || ev.IA != remoteIA || ev.SrcHost != router || ev.SCMPType != 2 || !bytes.Equal(ev.Data[8:], quote) {
		t.Fatalf("event %+v, want the SCMP message from %s,%s", ev, remoteIA, router)
	}

	icmp := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, layers.ICMPv6CodePortUnreachable)},
		gopacket.Payload(make([]byte, 4+48)))
	if ret, _ := tr.run(t, tr.objs.TraOut, icmp, true); ret != tcActShot {
		t.Fatalf("ICMPv6 error: action %d, want TC_ACT_SHOT", ret)
	}
	ev = readEvent(t, rd)
	if ev.Kind != EventICMP || ev.IA != remoteIA || !bytes.Equal(ev.Data, icmp[14:]) {
		t.Fatalf("event %+v, want the host's ICMPv6 packet for %s", ev, remoteIA)
	}
	c := tr.counts(t)
	if c["scmp_error"].Packets != 1 || c["icmp_error"].Packets != 1 {
		t.Fatalf("counters %v", c)
	}
	// Time exceeded has no kin in SCMP.
	te := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeTimeExceeded, 0)}, gopacket.Payload(make([]byte, 52)))
	if ret, _ := tr.run(t, tr.objs.TraOut, te, true); ret != tcActShot || tr.counts(t)["unsupported"].Packets != 1 {
		t.Fatalf("time exceeded: action %d, counters %v", ret, tr.counts(t))
	}
}

// An SCMP error becomes the ICMPv6 error the host's stack matches to its
// socket: from the SM-IP address of the router that sent it, quoting the
// IPv6 packet the host sent (addresses, ports, length, checksum as the host
// made it).
func TestSCMPErrorsBecomeICMPv6(t *testing.T) {
	sent, quote := sentDatagram(t)
	router := netip.MustParseAddr("10.255.2.1")
	routerSMIP, _ := FromSCION(remoteIA, router)
	for name, c := range map[string]struct {
		scmp     []gopacket.SerializableLayer
		typ      layers.ICMPv6TypeCode
		param    uint32
		nothing  bool
		quoteLen int
	}{
		"port unreachable": {
			scmp: []gopacket.SerializableLayer{&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeDestinationUnreachable, 4)}, &slayers.SCMPDestinationUnreachable{}},
			typ:  layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, 4),
		},
		"packet too big": {
			scmp: []gopacket.SerializableLayer{&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypePacketTooBig, 0)}, &slayers.SCMPPacketTooBig{MTU: 1400}},
			// The SCION header of the quote takes IPv6's place.
			typ: layers.CreateICMPv6TypeCode(layers.ICMPv6TypePacketTooBig, 0), param: uint32(1400 - (len(quote) - (len(sent) - 40)) + 40),
		},
		"external interface down": {
			scmp: []gopacket.SerializableLayer{&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeExternalInterfaceDown, 0)}, &slayers.SCMPExternalInterfaceDown{IA: remoteIA, IfID: 2}},
			typ:  layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, 0),
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{}, append(c.scmp, gopacket.Payload(quote))...); err != nil {
				t.Fatal(err)
			}
			pkt, err := scmpToICMPv6(b.Bytes(), remoteIA, router, hostSMIP)
			if err != nil {
				t.Fatal(err)
			}
			p := gopacket.NewPacket(pkt, layers.LayerTypeIPv6, gopacket.Default)
			ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
			if ip == nil || icmp == nil {
				t.Fatalf("not ICMPv6: %v", p)
			}
			if ip.SrcIP.String() != routerSMIP.String() || ip.DstIP.String() != hostSMIP.String() || icmp.TypeCode != c.typ {
				t.Fatalf("%s → %s %s, want %s → %s %s", ip.SrcIP, ip.DstIP, icmp.TypeCode, routerSMIP, hostSMIP, c.typ)
			}
			if checksum.Fold(checksum.Sum(pkt[40:], ipv6PseudoSum(ip.SrcIP, ip.DstIP, len(pkt)-40, 58))) != 0xffff {
				t.Fatal("ICMPv6 checksum wrong")
			}
			if got := binary.BigEndian.Uint32(pkt[44:48]); got != c.param {
				t.Fatalf("parameter %d, want %d", got, c.param)
			}
			if q := pkt[48:]; !bytes.Equal(q, sent) {
				t.Fatalf("quote\n%x\nwant what the host sent\n%x", q, sent)
			}
		})
	}
}

// The host's ICMPv6 error becomes SCMP on the path: from the host's SCION
// address to the sender's, the quote the SCION packet the host received.
func TestICMPv6ErrorsBecomeSCMP(t *testing.T) {
	// What the host received from the remote (its stack quotes it).
	received := ipv6Frame(t, remote4SMIP, hostSMIP, &layers.UDP{SrcPort: 31000, DstPort: 40000}, gopacket.Payload("to a closed port"))[14:]
	for name, c := range map[string]struct {
		icmp layers.ICMPv6TypeCode
		typ  slayers.SCMPTypeCode
	}{
		"port unreachable": {layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, 4), slayers.CreateSCMPTypeCode(slayers.SCMPTypeDestinationUnreachable, 4)},
		"packet too big":   {layers.CreateICMPv6TypeCode(layers.ICMPv6TypePacketTooBig, 0), slayers.CreateSCMPTypeCode(slayers.SCMPTypePacketTooBig, 0)},
	} {
		t.Run(name, func(t *testing.T) {
			pkt := icmpv6Packet(hostSMIP, remote4SMIP, uint8(c.icmp>>8), uint8(c.icmp), 1300, received)
			path := Path{Raw: testPath(t), MTU: 1472, NextHop: routerAddr}
			b, err := icmpv6ToSCMP(pkt, localIA, addr.HostIP(hostIP4), path)
			if err != nil {
				t.Fatal(err)
			}
			var s slayers.SCION
			var scmp slayers.SCMP
			if err := s.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			if err := scmp.DecodeFromBytes(s.Payload, gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			dst, _ := s.DstAddr()
			if s.SrcIA != localIA || s.DstIA != remoteIA || dst.IP() != remote4 || s.NextHdr != slayers.L4SCMP || scmp.TypeCode != c.typ {
				t.Fatalf("%s → %s,%s %s, want %s → %s,%s %s", s.SrcIA, s.DstIA, dst, scmp.TypeCode, localIA, remoteIA, remote4, c.typ)
			}
			if checksum.Fold(checksum.Sum(s.Payload, scionPseudoSum(&s, len(s.Payload), 202))) != 0xffff {
				t.Fatal("SCMP checksum wrong for SCION's pseudo-header")
			}
			// The quote: the SCION packet the host received, its UDP
			// checksum right for SCION again.
			var q slayers.SCION
			if err := q.DecodeFromBytes(s.Payload[8:], gopacket.NilDecodeFeedback); err != nil {
				t.Fatal(err)
			}
			qs, _ := q.SrcAddr()
			qd, _ := q.DstAddr()
			if q.SrcIA != remoteIA || qs.IP() != remote4 || q.DstIA != localIA || qd.IP() != hostIP4 || q.NextHdr != slayers.L4UDP || int(q.PayloadLen) != len(received)-40 {
				t.Fatalf("quote %s,%s → %s,%s next %s length %d", q.SrcIA, qs, q.DstIA, qd, q.NextHdr, q.PayloadLen)
			}
			if checksum.Fold(checksum.Sum(q.Payload, scionPseudoSum(&q, len(q.Payload), 17))) != 0xffff {
				t.Fatal("quoted UDP checksum not moved back to SCION's pseudo-header")
			}
			if c.typ.Type() == slayers.SCMPTypePacketTooBig {
				hdr := len(b) - len(s.Payload)
				if mtu := binary.BigEndian.Uint16(s.Payload[6:8]); int(mtu) != 1300-40+hdr {
					t.Fatalf("MTU %d, want %d", mtu, 1300-40+hdr)
				}
			}
		})
	}
}
