package tra

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path"
	"github.com/scionproto/scion/pkg/slayers/path/scion"

	"github.com/fastpath-dev/fastpath/internal/checksum"
	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// The test host: 10.101.0.2 in 1-64513, talking to hosts of 1-64514.
var (
	localIA  = addr.MustParseIA("1-64513")
	remoteIA = addr.MustParseIA("1-64514")
	hostIP4  = netip.MustParseAddr("10.101.0.2")
	hostSMIP = netip.MustParseAddr("fc00:10fc:100::ffff:a65:2")
	// A remote IPv4 host and a remote IPv6 host (its SM-IP is its SCION
	// address).
	remote4     = netip.MustParseAddr("10.102.0.2")
	remote4SMIP = netip.MustParseAddr("fc00:10fc:200::ffff:a66:2")
	remote6     = netip.MustParseAddr("fc00:10fc:200::42")
	routerAddr  = netip.MustParseAddrPort("10.101.0.1:30042")
	hostMAC     = net.HardwareAddr{2, 0, 0, 0, 0, 0xa0}
	pairMAC     = net.HardwareAddr{2, 0, 0, 0, 0, 0xa1}
)

// testPath is a two-segment path header (up, down) as a daemon would give
// it: its bytes are opaque to the translator.
func testPath(t *testing.T) []byte {
	t.Helper()
	d := scion.Decoded{
		Base:       scion.Base{PathMeta: scion.MetaHdr{SegLen: [3]uint8{2, 2, 0}}, NumINF: 2, NumHops: 4},
		InfoFields: []path.InfoField{{SegID: 0x1111, Timestamp: 1700000000}, {ConsDir: true, SegID: 0x2222, Timestamp: 1700000000}},
		HopFields: []path.HopField{
			{ExpTime: 63, ConsIngress: 0, ConsEgress: 1, Mac: [6]byte{1, 2, 3, 4, 5, 6}},
			{ExpTime: 63, ConsIngress: 1, ConsEgress: 0, Mac: [6]byte{7, 8, 9, 10, 11, 12}},
			{ExpTime: 63, ConsIngress: 0, ConsEgress: 2, Mac: [6]byte{13, 14, 15, 16, 17, 18}},
			{ExpTime: 63, ConsIngress: 1, ConsEgress: 0, Mac: [6]byte{19, 20, 21, 22, 23, 24}},
		},
	}
	raw := make([]byte, d.Len())
	if err := d.SerializeTo(raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

// loadTest loads the programs unpinned, configured for the test host, with
// lo standing in for the pair (a test run sends nothing).
func loadTest(t *testing.T) *Translator {
	t.Helper()
	labtest.RequireKernel(t)
	tr, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.Configure(HostConfig{
		IA: localIA, SMIP: hostSMIP, Address: hostIP4, UnderlayIfindex: 1, PairIfindex: 1,
		HostMAC: hostMAC, PairMAC: pairMAC, DispatchedStart: 31000, DispatchedEnd: 32767,
	}); err != nil {
		t.Fatal(err)
	}
	return tr
}

func run(t *testing.T, prog *ebpf.Program, frame []byte, tc bool) (uint32, []byte) {
	t.Helper()
	opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+512)}
	if tc {
		// A TC test run wants an __sk_buff context for its length.
		opts.Context = skbCtx(len(frame))
	}
	ret, err := prog.Run(&opts)
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

// skbCtx is struct __sk_buff as BPF_PROG_TEST_RUN takes it: zero but for
// the fields it allows; len is ignored (the data's length counts).
func skbCtx(int) []byte { return make([]byte, 192) }

// ipv6Frame builds an Ethernet/IPv6 frame the host sends into the pair.
func ipv6Frame(t *testing.T, src, dst netip.Addr, l4 ...gopacket.SerializableLayer) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: hostMAC, DstMAC: pairMAC, EthernetType: layers.EthernetTypeIPv6}
	ip := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), TrafficClass: 0x28}
	switch l := l4[0].(type) {
	case *layers.TCP:
		ip.NextHeader = layers.IPProtocolTCP
		l.SetNetworkLayerForChecksum(ip)
	case *layers.UDP:
		ip.NextHeader = layers.IPProtocolUDP
		l.SetNetworkLayerForChecksum(ip)
	case *layers.ICMPv6:
		ip.NextHeader = layers.IPProtocolICMPv6
		l.SetNetworkLayerForChecksum(ip)
	}
	buf := gopacket.NewSerializeBuffer()
	all := append([]gopacket.SerializableLayer{eth, ip}, l4...)
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, all...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// scionPseudoSum is the SCION pseudo-header's sum (dataplane spec: ISD-ASes,
// host addresses, upper-layer length, next header), computed here
// independently of the programs.
func scionPseudoSum(s *slayers.SCION, l4len int, proto uint8) uint32 {
	var b [8]byte
	var sum uint32
	binary.BigEndian.PutUint64(b[:], uint64(s.DstIA))
	sum = checksum.Sum(b[:], sum)
	binary.BigEndian.PutUint64(b[:], uint64(s.SrcIA))
	sum = checksum.Sum(b[:], sum)
	sum = checksum.Sum(s.RawDstAddr, sum)
	sum = checksum.Sum(s.RawSrcAddr, sum)
	return sum + uint32(l4len>>16) + uint32(l4len&0xffff) + uint32(proto)
}

// ipv6PseudoSum is IPv6's.
func ipv6PseudoSum(src, dst net.IP, l4len int, proto uint8) uint32 {
	sum := checksum.Sum(src.To16(), 0)
	sum = checksum.Sum(dst.To16(), sum)
	return sum + uint32(l4len>>16) + uint32(l4len&0xffff) + uint32(proto)
}

// decodeSCION decodes the frame the egress program made: Ethernet, IPv4,
// UDP and SCION (with scionproto's own decoder), and its L4 bytes.
func decodeSCION(t *testing.T, f []byte) (*layers.IPv4, *layers.UDP, *slayers.SCION, []byte) {
	t.Helper()
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if ip == nil || udp == nil {
		t.Fatalf("not IPv4/UDP: %v\n%x", p.ErrorLayer(), f)
	}
	if checksum.Fold(checksum.Sum(f[14:34], 0)) != 0xffff {
		t.Fatalf("IPv4 header checksum wrong")
	}
	var s slayers.SCION
	if err := s.DecodeFromBytes(udp.Payload, gopacket.NilDecodeFeedback); err != nil {
		t.Fatalf("scionproto's decoder refuses the SCION header: %v\n%x", err, udp.Payload)
	}
	if int(s.PayloadLen) != len(s.Payload) {
		t.Fatalf("PayloadLen %d, payload %d bytes", s.PayloadLen, len(s.Payload))
	}
	return ip, udp, &s, s.Payload
}
