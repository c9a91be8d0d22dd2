package lab

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// floodTemplate builds one UDP or TCP frame over IPv4 or IPv6 with correct
// checksums (gopacket computes them).
func floodTemplate(t *testing.T, family int, proto layers.IPProtocol) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	var net4 *layers.IPv4
	var net6 *layers.IPv6
	var nl gopacket.NetworkLayer
	if family == 4 {
		eth.EthernetType = layers.EthernetTypeIPv4
		net4 = &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: net.IP{198, 18, 0, 1}, DstIP: net.IP{198, 18, 1, 1}}
		nl = net4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		net6 = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00:1::1")}
		nl = net6
	}
	payload := gopacket.Payload([]byte("fastpath flood template payload"))
	var l4 gopacket.SerializableLayer
	switch proto {
	case layers.IPProtocolUDP:
		u := &layers.UDP{SrcPort: 1234, DstPort: 80}
		u.SetNetworkLayerForChecksum(nl)
		l4 = u
	default:
		tc := &layers.TCP{SrcPort: 1234, DstPort: 80, Seq: 1, SYN: true, Window: 1000}
		tc.SetNetworkLayerForChecksum(nl)
		l4 = tc
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	var err error
	if family == 4 {
		err = gopacket.SerializeLayers(buf, opts, eth, net4, l4, payload)
	} else {
		err = gopacket.SerializeLayers(buf, opts, eth, net6, l4, payload)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// l4ChecksumOK verifies a frame's L4 checksum over its pseudo-header, and the
// IPv4 header checksum, independently of the generator.
func l4ChecksumOK(t *testing.T, f []byte) bool {
	t.Helper()
	var pseudo []byte
	var l4 []byte
	var proto byte
	if binary.BigEndian.Uint16(f[12:]) == 0x0800 {
		if checksum16(f[14:34]) != 0 {
			return false
		}
		proto = f[23]
		l4 = f[34:]
		pseudo = append(append([]byte{}, f[26:34]...), 0, proto, byte(len(l4)>>8), byte(len(l4)))
	} else {
		proto = f[20]
		l4 = f[54:]
		pseudo = append(append([]byte{}, f[22:54]...), 0, 0, byte(len(l4)>>8), byte(len(l4)), 0, 0, 0, proto)
	}
	return checksum16(append(pseudo, l4...)) == 0
}

func TestGenFloodMakesDistinctValidFlows(t *testing.T) {
	cases := map[string]struct {
		templates [][]byte
		src       netip.Prefix
		wantBits  int // host bits of the source that may vary
		keepDport bool
	}{
		"udp4 ports only":     {[][]byte{floodTemplate(t, 4, layers.IPProtocolUDP)}, netip.Prefix{}, 0, false},
		"udp+tcp4 from /8":    {[][]byte{floodTemplate(t, 4, layers.IPProtocolUDP), floodTemplate(t, 4, layers.IPProtocolTCP)}, netip.MustParsePrefix("10.0.0.0/8"), 24, false},
		"tcp6 from /64":       {[][]byte{floodTemplate(t, 6, layers.IPProtocolTCP)}, netip.MustParsePrefix("fd00:aa::/64"), 32, false},
		"udp6 from /120":      {[][]byte{floodTemplate(t, 6, layers.IPProtocolUDP)}, netip.MustParsePrefix("fd00:bb::/120"), 8, false},
		"udp4 from a /30 (4)": {[][]byte{floodTemplate(t, 4, layers.IPProtocolUDP)}, netip.MustParsePrefix("192.0.2.4/30"), 2, false},
		// A SYN flood at one service: source and source port vary, the
		// destination port is the template's (80).
		"tcp4 SYN from /8 to one port":  {[][]byte{floodTemplate(t, 4, layers.IPProtocolTCP)}, netip.MustParsePrefix("10.0.0.0/8"), 24, true},
		"tcp6 SYN from /64 to one port": {[][]byte{floodTemplate(t, 6, layers.IPProtocolTCP)}, netip.MustParsePrefix("fd00:aa::/64"), 32, true},
	}
	const flows = 3000
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			tb := testTestbed(t, LayoutVeth)
			g, err := NewGenerator(GenOptions{Iface: tb.Gen().Iface(), Packets: c.templates, CPU: -1, Flows: flows, FlowSrc: c.src, FlowKeepDport: c.keepDport})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			seen := map[string]int{}
			var srcs = map[netip.Addr]bool{}
			// Two rounds: the second repeats the first's flows in order.
			for run := 0; run < 2*flows; run++ {
				in := make([]byte, g.maxLen)
				ret, out := runXDP(t, g.prog, in)
				if ret != 3 /* XDP_TX */ {
					t.Fatalf("run %d: action %d, want XDP_TX", run, ret)
				}
				if !l4ChecksumOK(t, out) {
					t.Fatalf("run %d: bad checksum in\n%x", run, out)
				}
				p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
				nl, tl := p.NetworkLayer(), p.TransportLayer()
				if nl == nil || tl == nil {
					t.Fatalf("run %d: does not decode: %v", run, p.ErrorLayer())
				}
				src, _ := netip.AddrFromSlice(nl.NetworkFlow().Src().Raw())
				if c.src.IsValid() && !c.src.Contains(src) {
					t.Fatalf("run %d: source %s outside %s", run, src, c.src)
				}
				srcs[src] = true
				if dst := binary.BigEndian.Uint16(tl.TransportFlow().Dst().Raw()); c.keepDport && dst != 80 {
					t.Fatalf("run %d: destination port %d, want the template's 80", run, dst)
				}
				key := nl.NetworkFlow().String() + " " + tl.TransportFlow().String() + " " + tl.LayerType().String()
				if run < flows {
					if prev, dup := seen[key]; dup {
						t.Fatalf("runs %d and %d send the same flow %s", prev, run, key)
					}
					seen[key] = run
				} else if seen[key] != run-flows {
					t.Fatalf("run %d: flow %s, want run %d's again", run, key, run-flows)
				}
			}
			// Random sources spread over the prefix (ports-only keeps one).
			want := min(flows, 1<<c.wantBits)
			if len(srcs) < want*9/10 {
				t.Fatalf("%d distinct sources over %d flows, want about %d", len(srcs), flows, want)
			}
		})
	}
}

func TestGenFloodRejects(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	udp4 := floodTemplate(t, 4, layers.IPProtocolUDP)
	icmp := append([]byte(nil), udp4...)
	icmp[23] = 1
	cases := map[string]struct {
		pkts [][]byte
		src  netip.Prefix
		want string
	}{
		"not udp or tcp": {[][]byte{icmp}, netip.Prefix{}, "packet 1: protocol 1"},
		"mixed families": {[][]byte{udp4, floodTemplate(t, 6, layers.IPProtocolUDP)}, netip.Prefix{}, "packet 2 is IPv6"},
		"wrong family":   {[][]byte{udp4}, netip.MustParsePrefix("fd00::/64"), "not of the packet's family"},
		"not ip":         {[][]byte{make([]byte, 60)}, netip.Prefix{}, "not IPv4 or IPv6"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewGenerator(GenOptions{Iface: tb.Gen().Iface(), Packets: c.pkts, CPU: -1, Flows: 10, FlowSrc: c.src})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestGenFixedSendsTheInputAsItIs(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	pkt := floodTemplate(t, 4, layers.IPProtocolUDP)
	g, err := NewGenerator(GenOptions{Iface: tb.Gen().Iface(), Packets: [][]byte{pkt}, CPU: -1, Fixed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	in := append([]byte(nil), pkt...)
	in[50] ^= 0xff // whatever the frame holds goes out unchanged
	ret, out := runXDP(t, g.prog, in)
	if ret != 3 || string(out) != string(in) {
		t.Fatalf("action %d, frame changed: %x", ret, out)
	}
}

// A test run retried after a signal sends nothing past its last packet:
// runs beyond the marked end are dropped and not counted.
func TestGenStopsAtTheRunsEnd(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	pkt := floodTemplate(t, 4, layers.IPProtocolUDP)
	for _, fixed := range []bool{false, true} {
		g, err := NewGenerator(GenOptions{Iface: tb.Gen().Iface(), Packets: [][]byte{pkt}, CPU: -1, Fixed: fixed})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.markRun(0, 1); err != nil {
			t.Fatal(err)
		}
		for run, want := range []uint32{3, 3, 1, 1} { // XDP_TX twice, then XDP_DROP
			if ret, _ := runXDP(t, g.prog, append([]byte(nil), pkt...)); ret != want {
				t.Fatalf("fixed %v, run %d: action %d, want %d", fixed, run, ret, want)
			}
		}
		if n, _ := g.runs(); n != 2 {
			t.Fatalf("fixed %v: %d runs counted, want 2", fixed, n)
		}
		g.Close()
	}
}
