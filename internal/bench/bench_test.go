package bench

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/labtest"
)

const (
	xdpAborted = 0
	xdpDrop    = 1
	xdpPass    = 2
	xdpTX      = 3
)

// load loads a benchmark program for one test, or fails it.
func load(t *testing.T, name string) (*ebpf.Program, *ebpf.Collection) {
	t.Helper()
	labtest.RequireKernel(t)
	prog, coll, err := Load(name)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Cleanup(func() { coll.Close() })
	return prog, coll
}

// run runs prog once on in with BPF_PROG_TEST_RUN and returns the action and
// the frame as the program left it.
func run(t *testing.T, prog *ebpf.Program, in []byte) (uint32, []byte) {
	t.Helper()
	opts := ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256)}
	ret, err := prog.Run(&opts)
	if err != nil {
		t.Fatalf("test run on a %d-byte frame: %v", len(in), err)
	}
	return ret, opts.DataOut
}

// frame describes a test frame. A case builds its input and its expected
// output from the same description, changing only what the program should.
type frame struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       net.IP // IPv4 or IPv6
	proto          layers.IPProtocol
	icmpType       uint8  // ICMP and ICMPv6
	sport, dport   uint16 // TCP and UDP
	tcpFlags       string // of S, A, F, R, P, U
	ipOpts         []layers.IPv4Option
	fragOffset     uint16
	noUDPCsum      bool // send UDP without a checksum
	size           int  // frame length, at least the headers
}

func udpFrame(size int) frame {
	return frame{
		srcMAC: net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}, dstMAC: net.HardwareAddr{0x02, 0xbb, 0, 0, 0, 2},
		src: net.IP{10, 0, 0, 1}, dst: net.IP{10, 0, 1, 1}, proto: layers.IPProtocolUDP,
		sport: 40000, dport: 4789, size: size,
	}
}

func (f frame) with(change func(*frame)) frame {
	change(&f)
	return f
}

func (f frame) bytes(t *testing.T) []byte {
	t.Helper()
	ls := []gopacket.SerializableLayer{}
	e := &layers.Ethernet{SrcMAC: f.srcMAC, DstMAC: f.dstMAC}
	var netl gopacket.NetworkLayer
	hdr := 14
	if f.src.To4() != nil {
		e.EthernetType = layers.EthernetTypeIPv4
		ip := ip4(f.src, f.dst, f.proto)
		ip.Options, ip.FragOffset = f.ipOpts, f.fragOffset
		netl, hdr = ip, hdr+20+optLen(f.ipOpts)
		ls = append(ls, e, ip)
	} else {
		e.EthernetType = layers.EthernetTypeIPv6
		ip := ip6(f.src, f.dst, f.proto)
		netl, hdr = ip, hdr+40
		ls = append(ls, e, ip)
	}
	l4 := hdr
	switch f.proto {
	case layers.IPProtocolUDP:
		udp := &layers.UDP{SrcPort: layers.UDPPort(f.sport), DstPort: layers.UDPPort(f.dport)}
		udp.SetNetworkLayerForChecksum(netl)
		ls, hdr = append(ls, udp), hdr+8
	case layers.IPProtocolTCP:
		has := func(c string) bool { return strings.Contains(f.tcpFlags, c) }
		tcp := &layers.TCP{
			SrcPort: layers.TCPPort(f.sport), DstPort: layers.TCPPort(f.dport), Seq: 1000, Ack: 2000, Window: 1024,
			SYN: has("S"), ACK: has("A"), FIN: has("F"), RST: has("R"), PSH: has("P"), URG: has("U"),
		}
		tcp.SetNetworkLayerForChecksum(netl)
		ls, hdr = append(ls, tcp), hdr+20
	case layers.IPProtocolICMPv4:
		ls, hdr = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(f.icmpType, 0), Id: 7, Seq: 9}), hdr+8
	case layers.IPProtocolICMPv6:
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(f.icmpType, 0)}
		icmp.SetNetworkLayerForChecksum(netl)
		ls, hdr = append(ls, icmp, &layers.ICMPv6Echo{Identifier: 7, SeqNumber: 9}), hdr+8
	}
	payload := make([]byte, max(f.size-hdr, 0))
	for i := range payload {
		payload[i] = byte(i*31 + 7)
	}
	ls = append(ls, gopacket.Payload(payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if f.noUDPCsum {
		b[l4+6], b[l4+7] = 0, 0
	}
	return b
}

// swapMACs returns a copy of b with the Ethernet addresses swapped.
func swapMACs(b []byte) []byte {
	out := slices.Clone(b)
	copy(out[0:6], b[6:12])
	copy(out[6:12], b[0:6])
	return out
}

// onesSum adds b to sum as RFC 1071 big-endian 16-bit words, an odd last
// byte padded with zero.
func onesSum(b []byte, sum uint32) uint32 {
	for ; len(b) >= 2; b = b[2:] {
		sum += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum
}

// checkChecksums decodes an IPv4 frame with gopacket and fails the test
// unless the IPv4 header checksum and the TCP, UDP or ICMP checksum verify,
// summed afresh here rather than trusting any serializer.
func checkChecksums(t *testing.T, b []byte) {
	t.Helper()
	// Errors past the IPv4 layer are gopacket guessing at payloads.
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
	ip, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if !ok {
		t.Fatal("no IPv4 header")
	}
	if s := onesSum(ip.Contents, 0); s != 0xffff {
		t.Errorf("IPv4 header checksum %#04x does not verify (sum %#04x)", ip.Checksum, s)
	}
	l4 := ip.Payload
	var sum uint32
	switch ip.Protocol {
	case layers.IPProtocolICMPv4:
	case layers.IPProtocolUDP, layers.IPProtocolTCP:
		if ip.Protocol == layers.IPProtocolUDP && binary.BigEndian.Uint16(l4[6:8]) == 0 {
			return // sent without a checksum
		}
		sum = onesSum(ip.SrcIP.To4(), 0)
		sum = onesSum(ip.DstIP.To4(), sum)
		sum = onesSum([]byte{0, byte(ip.Protocol), byte(len(l4) >> 8), byte(len(l4))}, sum)
	default:
		t.Fatalf("no checksum to verify for protocol %v", ip.Protocol)
	}
	if s := onesSum(l4, sum); s != 0xffff {
		t.Errorf("%v checksum does not verify (sum %#04x)", ip.Protocol, s)
	}
}

// allowedActions is what each program may return on any frame, mutated or
// not; XDP_ABORTED is never among them.
var allowedActions = map[string][]uint32{
	"xdp_tx":          {xdpTX},
	"xdp_map_access":  {xdpTX},
	"xdp_csum":        {xdpTX},
	"xdp_hash_sum":    {xdpPass},
	"xdping":          {xdpPass, xdpTX},
	"xdp_map":         {xdpPass},
	"xdp_firewall":    {xdpPass, xdpDrop},
	"xdp_adjust_tail": {xdpTX},
	"xdp_lb":          {xdpPass, xdpTX},
	"xdp_observer":    {xdpPass},
	"xdp_tcpclassify": {xdpPass},
}

// TestProgramsRunCorpus loads every program and runs it on the corpus and on
// mutations of it: no run may fail or abort, and a frame a program passes or
// drops must come back as it went in.
func TestProgramsRunCorpus(t *testing.T) {
	corpus := Corpus()
	if len(corpus) < 150 {
		t.Fatalf("corpus has %d frames", len(corpus))
	}
	if !slices.EqualFunc(corpus, Corpus(), bytes.Equal) {
		t.Fatal("corpus differs between calls")
	}
	progs := Programs()
	if len(progs) != len(allowedActions) {
		t.Fatalf("%d programs, %d in allowedActions", len(progs), len(allowedActions))
	}
	for _, p := range progs {
		t.Run(p.Name, func(t *testing.T) {
			prog, coll := load(t, p.Name)
			if p.Name == "xdp_lb" {
				// Balance the corpus's destination, so that rewrites run too.
				setLB(t, coll, corpusDst4, lbBackends)
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(p.Name))))
			frames := slices.Clone(corpus)
			for i := 0; i < 2000; i++ {
				frames = append(frames, Mutate(rng, corpus[rng.IntN(len(corpus))]))
			}
			for i, in := range frames {
				ret, out := run(t, prog, in)
				if !slices.Contains(allowedActions[p.Name], ret) {
					t.Fatalf("frame %d (% x): action %d, want one of %v", i, in, ret, allowedActions[p.Name])
				}
				if ret != xdpTX && !bytes.Equal(out, in) {
					t.Fatalf("frame %d: action %d but the frame changed:\n in % x\nout % x", i, ret, in, out)
				}
			}
		})
	}
}

func TestProgramsKnowTheirObjects(t *testing.T) {
	for _, p := range Programs() {
		if want := strings.ReplaceAll(p.Name, "_", "") + "_bpfel.o"; p.Object != want {
			t.Errorf("%s: object %s, want %s", p.Name, p.Object, want)
		}
	}
	if _, _, err := Load("xdp_nothing"); err == nil || !strings.Contains(err.Error(), ErrUnknownProgram.Error()) {
		t.Errorf("Load of an unknown name: %v, want %v", err, ErrUnknownProgram)
	}
}

// TestMutate checks that mutations stay within what BPF_PROG_TEST_RUN takes
// and leave their input alone.
func TestMutate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	corpus := Corpus()
	changed := 0
	for i := 0; i < 5000; i++ {
		in := corpus[i%len(corpus)]
		keep := slices.Clone(in)
		out := Mutate(rng, in)
		if !bytes.Equal(in, keep) {
			t.Fatal("Mutate changed its input")
		}
		if len(out) < mutateMinLen || len(out) > mutateMaxLen {
			t.Fatalf("mutated frame of %d bytes", len(out))
		}
		if !bytes.Equal(out, in) {
			changed++
		}
	}
	if changed < 4500 {
		t.Errorf("only %d of 5000 mutations changed the frame", changed)
	}
}

// TestSwapPrograms: the programs that only look at a frame send it back with
// the MACs swapped, on any frame that has an Ethernet header.
func TestSwapPrograms(t *testing.T) {
	frames := map[string][]byte{
		"UDP 60":        udpFrame(60).bytes(t),
		"UDP 1500":      udpFrame(1500).bytes(t),
		"TCP over v6":   udpFrame(200).with(func(f *frame) { f.src, f.dst, f.proto = corpusSrc6[0], corpusDst6, layers.IPProtocolTCP }).bytes(t),
		"Ethernet only": udpFrame(60).bytes(t)[:14],
	}
	for _, name := range []string{"xdp_tx", "xdp_map_access", "xdp_csum"} {
		t.Run(name, func(t *testing.T) {
			prog, _ := load(t, name)
			for fname, in := range frames {
				ret, out := run(t, prog, in)
				if ret != xdpTX || !bytes.Equal(out, swapMACs(in)) {
					t.Errorf("%s: action %d, frame\n% x\nwant XDP_TX and\n% x", fname, ret, out, swapMACs(in))
				}
			}
		})
	}
}

// TestCounters runs the corpus through the programs that keep a sum or a
// count, and compares the map with the same figure computed here.
func TestCounters(t *testing.T) {
	corpus := Corpus()
	t.Run("xdp_map_access", func(t *testing.T) {
		prog, coll := load(t, "xdp_map_access")
		for _, in := range corpus {
			run(t, prog, in)
		}
		var n uint64
		if err := coll.Maps["access_count"].Lookup(uint32(0), &n); err != nil {
			t.Fatal(err)
		}
		if n != uint64(len(corpus)) {
			t.Errorf("count %d, want %d", n, len(corpus))
		}
	})
	t.Run("xdp_csum", func(t *testing.T) {
		prog, coll := load(t, "xdp_csum")
		for i, in := range corpus {
			run(t, prog, in)
			var got uint16
			if err := coll.Maps["csum_result"].Lookup(uint32(0), &got); err != nil {
				t.Fatal(err)
			}
			// The map holds the checksum as a header field would: its
			// bytes in network order, here read as a little-endian value.
			var field [2]byte
			binary.BigEndian.PutUint16(field[:], ^uint16(onesSum(in[:min(len(in), 64)], 0)))
			if want := binary.LittleEndian.Uint16(field[:]); got != want {
				t.Errorf("frame %d (%d bytes): checksum %#04x, want %#04x", i, len(in), got, want)
			}
		}
	})
	t.Run("xdp_hash_sum", func(t *testing.T) {
		prog, coll := load(t, "xdp_hash_sum")
		var want uint64
		for _, in := range corpus {
			run(t, prog, in)
			h := uint64(0xcbf29ce484222325)
			for _, b := range in[:min(len(in), 128)] {
				h = (h ^ uint64(b)) * 0x100000001b3
			}
			want += h
		}
		var got uint64
		if err := coll.Maps["hash_sum"].Lookup(uint32(0), &got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("hash sum %#x, want %#x", got, want)
		}
	})
	t.Run("xdp_map", func(t *testing.T) {
		prog, coll := load(t, "xdp_map")
		want := map[[4]byte]xdpmapSrcStats{}
		for _, in := range corpus {
			run(t, prog, in)
			if len(in) >= 14+20 && binary.BigEndian.Uint16(in[12:14]) == 0x0800 {
				st := want[[4]byte(in[26:30])]
				st.Packets++
				st.Bytes += uint64(len(in))
				want[[4]byte(in[26:30])] = st
			}
		}
		got := map[[4]byte]xdpmapSrcStats{}
		var k [4]byte
		var v xdpmapSrcStats
		for it := coll.Maps["src_stats"].Iterate(); it.Next(&k, &v); {
			got[k] = v
		}
		if len(got) != len(want) {
			t.Errorf("%d sources, want %d", len(got), len(want))
		}
		for src, w := range want {
			if g := got[src]; g.Packets != w.Packets || g.Bytes != w.Bytes {
				t.Errorf("source %v: %d packets %d bytes, want %d and %d", net.IP(src[:]), g.Packets, g.Bytes, w.Packets, w.Bytes)
			}
		}
	})
}

func TestPing(t *testing.T) {
	echo := udpFrame(98).with(func(f *frame) { f.proto, f.icmpType = layers.IPProtocolICMPv4, layers.ICMPv4TypeEchoRequest })
	// reply is what xdping should make of a request.
	reply := func(f frame) frame {
		f.srcMAC, f.dstMAC, f.src, f.dst = f.dstMAC, f.srcMAC, f.dst, f.src
		f.icmpType = layers.ICMPv4TypeEchoReply
		return f
	}
	cases := map[string]struct {
		in     frame
		cut    int // keep only this many bytes of the input
		action uint32
	}{
		"echo request":              {in: echo, action: xdpTX},
		"echo request, 60 bytes":    {in: echo.with(func(f *frame) { f.size = 60 }), action: xdpTX},
		"echo request, 1500 bytes":  {in: echo.with(func(f *frame) { f.size = 1500 }), action: xdpTX},
		"echo request, IP options":  {in: echo.with(func(f *frame) { f.ipOpts = corpusIPv4Options[1] }), action: xdpTX},
		"echo request, max options": {in: echo.with(func(f *frame) { f.ipOpts = corpusIPv4Options[2] }), action: xdpTX},
		"echo reply":                {in: reply(echo), action: xdpPass},
		"echo request, fragment":    {in: echo.with(func(f *frame) { f.fragOffset = 8 }), action: xdpPass},
		"echo request, truncated":   {in: echo, cut: 14 + 20 + 4, action: xdpPass},
		"ICMPv6 echo request": {in: echo.with(func(f *frame) {
			f.src, f.dst, f.proto, f.icmpType = corpusSrc6[0], corpusDst6, layers.IPProtocolICMPv6, layers.ICMPv6TypeEchoRequest
		}), action: xdpPass},
		"UDP": {in: udpFrame(98), action: xdpPass},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			prog, coll := load(t, "xdping")
			in := c.in.bytes(t)
			if c.cut > 0 {
				in = in[:c.cut]
			}
			want, replies := in, uint64(0)
			if c.action == xdpTX {
				want, replies = reply(c.in).bytes(t), 1
			}
			ret, out := run(t, prog, in)
			if ret != c.action {
				t.Fatalf("action %d, want %d", ret, c.action)
			}
			if c.action == xdpTX {
				checkChecksums(t, out)
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("frame\n% x\nwant\n% x", out, want)
			}
			var n uint64
			if err := coll.Maps["ping_replies"].Lookup(uint32(0), &n); err != nil {
				t.Fatal(err)
			}
			if n != replies {
				t.Errorf("%d replies counted, want %d", n, replies)
			}
		})
	}
}

func TestAdjustTail(t *testing.T) {
	prog, _ := load(t, "xdp_adjust_tail")
	frames := map[string][]byte{
		"Ethernet only":    udpFrame(60).bytes(t)[:14],
		"IPv6, 1500 bytes": udpFrame(1500).with(func(f *frame) { f.src, f.dst = corpusSrc6[0], corpusDst6 }).bytes(t),
	}
	for _, size := range []int{60, 63, 64, 65, 128, 1500} {
		frames[fmt.Sprintf("%d bytes", size)] = udpFrame(size).bytes(t)
	}
	for name, in := range frames {
		t.Run(name, func(t *testing.T) {
			ret, out := run(t, prog, in)
			want := swapMACs(in[:min(len(in), 64)])
			if ret != xdpTX || !bytes.Equal(out, want) {
				t.Errorf("action %d, %d-byte frame\n% x\nwant XDP_TX and %d bytes\n% x", ret, len(out), out, len(want), want)
			}
		})
	}
}

func TestFirewall(t *testing.T) {
	blocked := net.IP{10, 9, 9, 9}
	base := udpFrame(128)
	from := func(src net.IP, proto layers.IPProtocol, dport uint16) frame {
		return base.with(func(f *frame) { f.src, f.proto, f.dport, f.icmpType = src, proto, dport, layers.ICMPv4TypeEchoRequest })
	}
	other := base.src
	cases := map[string]struct {
		in     frame
		action uint32
		drops  uint64 // counted for the blocked source
	}{
		"blocked source, UDP":              {from(blocked, layers.IPProtocolUDP, 4789), xdpDrop, 1},
		"blocked source, ICMP":             {from(blocked, layers.IPProtocolICMPv4, 0), xdpDrop, 1},
		"UDP to a blocked port":            {from(other, layers.IPProtocolUDP, 53), xdpDrop, 0},
		"TCP to a blocked port":            {from(other, layers.IPProtocolTCP, 22), xdpDrop, 0},
		"UDP to a blocked port, options":   {from(other, layers.IPProtocolUDP, 53).with(func(f *frame) { f.ipOpts = corpusIPv4Options[0] }), xdpDrop, 0},
		"TCP to an open port":              {from(other, layers.IPProtocolTCP, 80), xdpPass, 0},
		"UDP to an open port":              {from(other, layers.IPProtocolUDP, 4789), xdpPass, 0},
		"ICMP":                             {from(other, layers.IPProtocolICMPv4, 0), xdpPass, 0},
		"later fragment to a blocked port": {from(other, layers.IPProtocolUDP, 53).with(func(f *frame) { f.fragOffset = 8 }), xdpPass, 0},
		"IPv6 UDP to a blocked port":       {from(other, layers.IPProtocolUDP, 53).with(func(f *frame) { f.src, f.dst = corpusSrc6[0], corpusDst6 }), xdpPass, 0},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			prog, coll := load(t, "xdp_firewall")
			if err := coll.Maps["blocked_src"].Put([4]byte(blocked), uint64(0)); err != nil {
				t.Fatal(err)
			}
			for _, port := range []uint32{22, 53} {
				if err := coll.Maps["blocked_port"].Put(port, uint8(1)); err != nil {
					t.Fatal(err)
				}
			}
			in := c.in.bytes(t)
			if ret, out := run(t, prog, in); ret != c.action || !bytes.Equal(out, in) {
				t.Errorf("action %d, want %d; frame changed: %v", ret, c.action, !bytes.Equal(out, in))
			}
			var drops uint64
			if err := coll.Maps["blocked_src"].Lookup([4]byte(blocked), &drops); err != nil {
				t.Fatal(err)
			}
			if drops != c.drops {
				t.Errorf("blocked source drops %d, want %d", drops, c.drops)
			}
		})
	}
}

// The load balancer's virtual IP and backends in the tests.
var (
	lbVIP      = net.IP{10, 0, 100, 1}
	lbBackends = []xdplbLbBackend{
		{Addr: addr4(10, 0, 200, 1), Mac: [6]byte{0x02, 0xbe, 0, 0, 0, 1}},
		{Addr: addr4(10, 0, 200, 2), Mac: [6]byte{0x02, 0xbe, 0, 0, 0, 2}},
		{Addr: addr4(10, 0, 200, 3), Mac: [6]byte{0x02, 0xbe, 0, 0, 0, 3}},
		{Addr: addr4(172, 16, 0, 9), Mac: [6]byte{0x02, 0xbe, 0, 0, 0, 4}},
	}
)

// addr4 is an IPv4 address as a __u32 in network byte order holds it.
func addr4(a, b, c, d byte) uint32 { return binary.NativeEndian.Uint32([]byte{a, b, c, d}) }

func setLB(t *testing.T, coll *ebpf.Collection, vip net.IP, backends []xdplbLbBackend) {
	t.Helper()
	cfg := xdplbLbConfig{Vip: binary.NativeEndian.Uint32(vip.To4()), Backends: uint32(len(backends))}
	if err := coll.Maps["lb_config"].Put(uint32(0), cfg); err != nil {
		t.Fatal(err)
	}
	for i, b := range backends {
		if err := coll.Maps["lb_backends"].Put(uint32(i), b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLB(t *testing.T) {
	toVIP := udpFrame(200).with(func(f *frame) { f.dst = lbVIP })
	tcp := func(flags string, size int) frame {
		return toVIP.with(func(f *frame) { f.proto, f.tcpFlags, f.dport, f.size = layers.IPProtocolTCP, flags, 443, size })
	}
	// rewritten is what xdp_lb should make of f for backend b.
	rewritten := func(f frame, b xdplbLbBackend) frame {
		f.srcMAC, f.dstMAC, f.dst = f.dstMAC, net.HardwareAddr(b.Mac[:]), binary.NativeEndian.AppendUint32(nil, b.Addr)
		return f
	}
	cases := map[string]struct {
		in     frame
		action uint32
	}{
		"UDP":                    {toVIP, xdpTX},
		"UDP, 60 bytes":          {toVIP.with(func(f *frame) { f.size = 60 }), xdpTX},
		"UDP, no checksum":       {toVIP.with(func(f *frame) { f.noUDPCsum = true }), xdpTX},
		"UDP, IP options":        {toVIP.with(func(f *frame) { f.ipOpts = corpusIPv4Options[1] }), xdpTX},
		"TCP SYN":                {tcp("S", 60), xdpTX},
		"TCP ACK, 1500 bytes":    {tcp("PA", 1500), xdpTX},
		"TCP FIN, other flow":    {tcp("FA", 100).with(func(f *frame) { f.src, f.sport = net.IP{192, 0, 2, 77}, 1234 }), xdpTX},
		"UDP to another address": {udpFrame(200), xdpPass},
		"ICMP to the VIP":        {toVIP.with(func(f *frame) { f.proto, f.icmpType = layers.IPProtocolICMPv4, 8 }), xdpPass},
		"fragment to the VIP":    {toVIP.with(func(f *frame) { f.fragOffset = 8 }), xdpPass},
		"IPv6 UDP":               {toVIP.with(func(f *frame) { f.src, f.dst = corpusSrc6[0], corpusDst6 }), xdpPass},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			prog, coll := load(t, "xdp_lb")
			setLB(t, coll, lbVIP, lbBackends)
			in := c.in.bytes(t)
			ret, out := run(t, prog, in)
			if ret != c.action {
				t.Fatalf("action %d, want %d", ret, c.action)
			}
			if c.action != xdpTX {
				if !bytes.Equal(out, in) {
					t.Fatalf("frame changed:\n% x\nwant\n% x", out, in)
				}
				return
			}
			checkChecksums(t, out)
			for _, b := range lbBackends {
				if bytes.Equal(out, rewritten(c.in, b).bytes(t)) {
					return
				}
			}
			t.Fatalf("frame\n% x\nis no rewrite of\n% x\nto a backend", out, in)
		})
	}

	t.Run("flows spread, a flow sticks", func(t *testing.T) {
		prog, coll := load(t, "xdp_lb")
		setLB(t, coll, lbVIP, lbBackends)
		used := map[[6]byte]bool{}
		for sport := uint16(1000); sport < 1064; sport++ {
			in := toVIP.with(func(f *frame) { f.sport = sport }).bytes(t)
			_, first := run(t, prog, in)
			_, again := run(t, prog, in)
			if !bytes.Equal(first, again) {
				t.Fatalf("source port %d went to two backends", sport)
			}
			used[[6]byte(first[0:6])] = true
		}
		if len(used) != len(lbBackends) {
			t.Errorf("64 flows went to %d of %d backends", len(used), len(lbBackends))
		}
	})
}

func TestObserver(t *testing.T) {
	udp := udpFrame(333)
	cases := []struct {
		name string
		in   frame
		cut  int
		want xdpobserverObsRecord
	}{
		{"UDP", udp, 0, xdpobserverObsRecord{Len: 333, EthProto: 0x0800, IpProto: 17,
			Saddr: [4]byte{10, 0, 0, 1}, Daddr: [4]byte{10, 0, 1, 1}, Sport: 40000, Dport: 4789}},
		{"TCP, IP options", udp.with(func(f *frame) {
			f.proto, f.dport, f.ipOpts, f.size = layers.IPProtocolTCP, 443, corpusIPv4Options[2], 1500
		}), 0,
			xdpobserverObsRecord{Len: 1500, EthProto: 0x0800, IpProto: 6, Saddr: [4]byte{10, 0, 0, 1}, Daddr: [4]byte{10, 0, 1, 1}, Sport: 40000, Dport: 443}},
		{"ICMP", udp.with(func(f *frame) { f.proto, f.icmpType, f.size = layers.IPProtocolICMPv4, 8, 60 }), 0,
			xdpobserverObsRecord{Len: 60, EthProto: 0x0800, IpProto: 1, Saddr: [4]byte{10, 0, 0, 1}, Daddr: [4]byte{10, 0, 1, 1}}},
		{"UDP, cut in the ports", udp, 14 + 20 + 2,
			xdpobserverObsRecord{Len: 36, EthProto: 0x0800, IpProto: 17, Saddr: [4]byte{10, 0, 0, 1}, Daddr: [4]byte{10, 0, 1, 1}}},
		{"IPv6", udp.with(func(f *frame) { f.src, f.dst = corpusSrc6[0], corpusDst6 }), 0, xdpobserverObsRecord{Len: 333, EthProto: 0x86dd}},
		{"Ethernet only", udp, 14, xdpobserverObsRecord{Len: 14, EthProto: 0x0800}},
	}
	prog, coll := load(t, "xdp_observer")
	rd, err := ringbuf.NewReader(coll.Maps["obs_ring"])
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	read := func(t *testing.T) xdpobserverObsRecord {
		t.Helper()
		rd.SetDeadline(time.Now().Add(time.Second))
		rec, err := rd.Read()
		if err != nil {
			t.Fatalf("ring buffer: %v", err)
		}
		var r xdpobserverObsRecord
		if err := binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &r); err != nil {
			t.Fatalf("record of %d bytes: %v", len(rec.RawSample), err)
		}
		return r
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in.bytes(t)
			if c.cut > 0 {
				in = in[:c.cut]
			}
			if ret, _ := run(t, prog, in); ret != xdpPass {
				t.Fatalf("action %d, want XDP_PASS", ret)
			}
			if got := read(t); got != c.want {
				t.Errorf("record %+v, want %+v", got, c.want)
			}
		})
	}
	t.Run("corpus", func(t *testing.T) {
		for i, in := range Corpus() {
			run(t, prog, in)
			if got := read(t); got.Len != uint32(len(in)) {
				t.Fatalf("frame %d: length %d, want %d", i, got.Len, len(in))
			}
		}
		var lost uint64
		if err := coll.Maps["obs_lost"].Lookup(uint32(0), &lost); err != nil {
			t.Fatal(err)
		}
		if lost != 0 {
			t.Errorf("%d records lost", lost)
		}
	})
}

func TestTCPClassify(t *testing.T) {
	none := xdptcpclassifyTcpClassTCP_CLASS_MAX
	tcp := udpFrame(100).with(func(f *frame) { f.proto, f.dport = layers.IPProtocolTCP, 443 })
	flags := func(fl string) frame { return tcp.with(func(f *frame) { f.tcpFlags = fl }) }
	cases := map[string]struct {
		in    frame
		class xdptcpclassifyTcpClass // none: nothing counted
	}{
		"SYN":             {flags("S"), xdptcpclassifyTcpClassTCP_CLASS_SYN},
		"SYN-ACK":         {flags("SA"), xdptcpclassifyTcpClassTCP_CLASS_SYN_ACK},
		"FIN":             {flags("F"), xdptcpclassifyTcpClassTCP_CLASS_FIN},
		"FIN-ACK":         {flags("FA"), xdptcpclassifyTcpClassTCP_CLASS_FIN},
		"RST":             {flags("R"), xdptcpclassifyTcpClassTCP_CLASS_RST},
		"RST-ACK":         {flags("RA"), xdptcpclassifyTcpClassTCP_CLASS_RST},
		"ACK":             {flags("A"), xdptcpclassifyTcpClassTCP_CLASS_ACK},
		"PSH-ACK":         {flags("PA"), xdptcpclassifyTcpClassTCP_CLASS_ACK},
		"URG":             {flags("U"), xdptcpclassifyTcpClassTCP_CLASS_OTHER},
		"no flags":        {flags(""), xdptcpclassifyTcpClassTCP_CLASS_OTHER},
		"SYN, IP options": {flags("S").with(func(f *frame) { f.ipOpts = corpusIPv4Options[2] }), xdptcpclassifyTcpClassTCP_CLASS_SYN},
		"SYN over IPv6":   {flags("S").with(func(f *frame) { f.src, f.dst = corpusSrc6[0], corpusDst6 }), none},
		"UDP":             {udpFrame(100), none},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			prog, coll := load(t, "xdp_tcpclassify")
			if ret, _ := run(t, prog, c.in.bytes(t)); ret != xdpPass {
				t.Fatalf("action %d, want XDP_PASS", ret)
			}
			for class := range none {
				var perCPU []uint64
				if err := coll.Maps["tcp_classes"].Lookup(class, &perCPU); err != nil {
					t.Fatal(err)
				}
				var n, want uint64
				for _, v := range perCPU {
					n += v
				}
				if class == c.class {
					want = 1
				}
				if n != want {
					t.Errorf("class %d counted %d, want %d", class, n, want)
				}
			}
			var n, want uint64
			if err := coll.Maps["tcp_ports"].Lookup(c.in.dport, &n); err != nil && c.class != none {
				t.Fatal(err)
			}
			if c.class != none {
				want = 1
			}
			if n != want {
				t.Errorf("port %d counted %d, want %d", c.in.dport, n, want)
			}
		})
	}
}
