package tra

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path"
	"github.com/scionproto/scion/pkg/slayers/path/empty"
	"github.com/scionproto/scion/pkg/slayers/path/scion"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/checksum"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
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
func testPath(t testing.TB) []byte {
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

// The packet tests' underlay: a namespace with a device eth0 at the host's
// address, its router's MAC a permanent neighbour, and a network beyond a
// gateway, so that tra_out's route lookups find what a real host's would.
var (
	routerMAC  = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	gatewayMAC = net.HardwareAddr{2, 0, 0, 0, 0, 0xfe}
	gateway    = netip.MustParseAddr("10.101.0.254")
	// farRouter is a router of the AS on another subnet, reached through
	// the gateway.
	farRouter = netip.MustParseAddrPort("10.201.0.1:30042")
	// unresolved is a router on the host's subnet whose MAC is not known
	// yet: the kernel resolves it.
	unresolved = netip.MustParseAddrPort("10.101.0.7:30042")
	testNetns  sync.Map // *Translator → its namespace
)

// underlayNetns makes the test's namespace, removed when the test ends.
func underlayNetns(t testing.TB) (string, int) {
	t.Helper()
	b := make([]byte, 2)
	rand.Read(b)
	ns := "fp-t" + hex.EncodeToString(b) + "-tra"
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Delete(ns); err != nil {
			t.Error(err)
		}
	})
	h, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	// A veth whose peer stays in the namespace: it only has to be up.
	dev := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 2}}, PeerName: "peer0"}
	if err := h.LinkAdd(dev); err != nil {
		t.Fatal(err)
	}
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := h.LinkByName("peer0")
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []error{
		h.LinkSetUp(lo), h.LinkSetUp(l), h.LinkSetUp(peer),
		h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: hostIP4.AsSlice(), Mask: net.CIDRMask(24, 32)}}),
		h.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, IP: routerAddr.Addr().AsSlice(), HardwareAddr: routerMAC, State: netlink.NUD_PERMANENT}),
		h.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, IP: gateway.AsSlice(), HardwareAddr: gatewayMAC, State: netlink.NUD_PERMANENT}),
		h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.IP{10, 201, 0, 0}, Mask: net.CIDRMask(24, 32)}, Gw: gateway.AsSlice()}),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	return ns, l.Attrs().Index
}

// loadTest loads the programs unpinned, configured for the test host in a
// namespace of its own, with lo standing in for the pair (a test run sends
// nothing).
func loadTest(t testing.TB) *Translator {
	t.Helper()
	labtest.RequireKernel(t)
	ns, ifindex := underlayNetns(t)
	tr, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close(); testNetns.Delete(tr) })
	if err := netns.Run(ns, func() error {
		return tr.Configure(HostConfig{
			IA: localIA, SMIP: hostSMIP, Address: hostIP4, UnderlayIfindex: ifindex, PairIfindex: 1,
			HostMAC: hostMAC, PairMAC: pairMAC, DispatchedStart: 31000, DispatchedEnd: 32767,
			Routers: []netip.AddrPort{routerAddr, farRouter},
		})
	}); err != nil {
		t.Fatal(err)
	}
	testNetns.Store(tr, ns)
	return tr
}

// run runs a program of the translator once on a frame, in its namespace.
func (tr *Translator) run(t *testing.T, prog *ebpf.Program, frame []byte, tc bool) (uint32, []byte) {
	t.Helper()
	ns, _ := testNetns.Load(tr)
	opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+512)}
	if tc {
		// A TC test run wants an __sk_buff context for its length.
		opts.Context = skbCtx(len(frame))
	}
	var ret uint32
	err := netns.Run(ns.(string), func() error {
		var err error
		ret, err = prog.Run(&opts)
		return err
	})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

// skbCtx is struct __sk_buff as BPF_PROG_TEST_RUN takes it: zero but for
// the fields it allows; len is ignored (the data's length counts).
func skbCtx(int) []byte { return make([]byte, 192) }

// ipv6Frame builds an Ethernet/IPv6 frame the host sends into the pair.
func ipv6Frame(t testing.TB, src, dst netip.Addr, l4 ...gopacket.SerializableLayer) []byte {
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

// serializeSCION serializes a SCION header (its addresses set) on a path
// (raw; nil: the empty path) with its L4, the next header taken from the
// L4's first layer; a TCP segment's checksum is made here for SCION's
// pseudo-header, scionproto having no TCP layer.
func serializeSCION(t testing.TB, s *slayers.SCION, raw []byte, l4 ...gopacket.SerializableLayer) []byte {
	t.Helper()
	if raw == nil {
		s.PathType, s.Path = empty.PathType, empty.Path{}
	} else {
		var p scion.Raw
		if err := p.DecodeFromBytes(raw); err != nil {
			t.Fatal(err)
		}
		s.PathType, s.Path = scion.PathType, &p
	}
	switch l := l4[0].(type) {
	case *slayers.UDP:
		s.NextHdr = slayers.L4UDP
		l.SetNetworkLayerForChecksum(s)
	case *slayers.SCMP:
		s.NextHdr = slayers.L4SCMP
		l.SetNetworkLayerForChecksum(s)
	case *layers.TCP:
		s.NextHdr = slayers.L4TCP
		seg := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(seg, gopacket.SerializeOptions{FixLengths: true}, l4...); err != nil {
			t.Fatal(err)
		}
		b := seg.Bytes()
		binary.BigEndian.PutUint16(b[16:], ^checksum.Fold(checksum.Sum(b, scionPseudoSum(s, len(b), 6))))
		l4 = []gopacket.SerializableLayer{gopacket.Payload(b)}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, append([]gopacket.SerializableLayer{s}, l4...)...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pathOfSegments is a path of up to three segments with the given numbers of
// hop fields (the last segment in construction direction), MACs made from
// mac: its bytes are opaque to the translator, their length is what counts.
func pathOfSegments(t testing.TB, segs [3]uint8, mac byte) []byte {
	t.Helper()
	var d scion.Decoded
	d.PathMeta.SegLen = segs
	for i, n := range segs {
		if n == 0 {
			break
		}
		d.NumINF++
		d.NumHops += int(n)
		d.InfoFields = append(d.InfoFields, path.InfoField{SegID: uint16(i + 1), Timestamp: 1700000000})
	}
	d.InfoFields[d.NumINF-1].ConsDir = true
	for i := 0; i < d.NumHops; i++ {
		d.HopFields = append(d.HopFields, path.HopField{ExpTime: 63, ConsIngress: uint16(i), ConsEgress: uint16(i + 1), Mac: [6]byte{byte(i), mac, mac, mac, mac, mac}})
	}
	raw := make([]byte, d.Len())
	if err := d.SerializeTo(raw); err != nil {
		t.Fatal(err)
	}
	return raw
}
