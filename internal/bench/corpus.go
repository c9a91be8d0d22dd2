package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Program is one benchmark program: its function name, which is also its
// file's name in bpf/bench/, and its object.
type Program struct {
	Name string
	// Object is the path of the program's ELF object relative to
	// internal/bench, as bpf2go writes it.
	Object string
	spec   func() (*ebpf.CollectionSpec, error)
}

// ErrUnknownProgram is returned by Load for a name Programs does not list.
var ErrUnknownProgram = errors.New("unknown benchmark program")

// Programs lists the benchmark programs, simplest first.
func Programs() []Program {
	return []Program{
		{"xdp_tx", "xdptx_bpfel.o", loadXdptx},
		{"xdp_map_access", "xdpmapaccess_bpfel.o", loadXdpmapaccess},
		{"xdp_csum", "xdpcsum_bpfel.o", loadXdpcsum},
		{"xdp_hash_sum", "xdphashsum_bpfel.o", loadXdphashsum},
		{"xdping", "xdping_bpfel.o", loadXdping},
		{"xdp_map", "xdpmap_bpfel.o", loadXdpmap},
		{"xdp_firewall", "xdpfirewall_bpfel.o", loadXdpfirewall},
		{"xdp_adjust_tail", "xdpadjusttail_bpfel.o", loadXdpadjusttail},
		{"xdp_lb", "xdplb_bpfel.o", loadXdplb},
		{"xdp_observer", "xdpobserver_bpfel.o", loadXdpobserver},
		{"xdp_tcpclassify", "xdptcpclassify_bpfel.o", loadXdptcpclassify},
	}
}

// Load loads the named program and its maps into the kernel. Closing the
// collection closes the program too. A verifier rejection is returned whole
// (print it with %+v).
func Load(name string) (*ebpf.Program, *ebpf.Collection, error) {
	var p *Program
	for _, q := range Programs() {
		if q.Name == name {
			p = &q
			break
		}
	}
	if p == nil {
		return nil, nil, fmt.Errorf("%w: %q", ErrUnknownProgram, name)
	}
	spec, err := p.spec()
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", name, err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", name, err)
	}
	prog := coll.Programs[name]
	if prog == nil {
		coll.Close()
		return nil, nil, fmt.Errorf("load %s: object %s has no program %s", name, p.Object, name)
	}
	return prog, coll, nil
}

// Frame lengths without FCS: the Ethernet minimum (60) to a 1500-byte frame,
// with lengths around the 64 bytes some programs cut or sum at, and odd ones.
var corpusSizes = []int{60, 63, 64, 65, 96, 128, 200, 256, 333, 512, 777, 1024, 1400, 1499, 1500}

// The corpus's endpoints: a few sources, so that per-source programs see
// repeated keys.
var (
	corpusSrcMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
	corpusDstMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}
	corpusSrc4   = []net.IP{{10, 0, 0, 1}, {10, 0, 0, 2}, {10, 0, 0, 3}, {192, 168, 1, 7}}
	corpusDst4   = net.IP{10, 0, 1, 1}
	corpusSrc6   = []net.IP{net.ParseIP("fd00::1"), net.ParseIP("fd00::2")}
	corpusDst6   = net.ParseIP("fd00:1::1")
)

// TCP flag combinations, by name.
var corpusTCPFlags = []struct {
	name                         string
	syn, ack, fin, rst, psh, urg bool
}{
	{name: "SYN", syn: true},
	{name: "SYN-ACK", syn: true, ack: true},
	{name: "FIN-ACK", fin: true, ack: true},
	{name: "FIN", fin: true},
	{name: "RST", rst: true},
	{name: "RST-ACK", rst: true, ack: true},
	{name: "ACK", ack: true},
	{name: "PSH-ACK", psh: true, ack: true},
	{name: "URG", urg: true},
	{name: "none"},
}

// corpus builds frames from one deterministic source of payload bytes.
type corpus struct {
	rng    *rand.Rand
	frames [][]byte
}

// add serializes layers into a frame, lengths and checksums filled in.
func (c *corpus) add(ls ...gopacket.SerializableLayer) []byte {
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		// The layers below are fixed: a failure is a bug in this file.
		panic(fmt.Sprintf("bench corpus: %v", err))
	}
	f := buf.Bytes()
	c.frames = append(c.frames, f)
	return f
}

// payload returns random bytes that bring a frame of hdr header bytes to
// size bytes (none if the headers alone are as long).
func (c *corpus) payload(size, hdr int) gopacket.Payload {
	n := max(size-hdr, 0)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(c.rng.Uint32())
	}
	return b
}

func (c *corpus) port() layers.UDPPort { return layers.UDPPort(1024 + c.rng.IntN(60000)) }

func eth(t layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: corpusSrcMAC, DstMAC: corpusDstMAC, EthernetType: t}
}

func ip4(src, dst net.IP, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, TTL: 64, Id: 0x1234, Protocol: proto, SrcIP: src, DstIP: dst}
}

func ip6(src, dst net.IP, next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: src, DstIP: dst}
}

func (c *corpus) udp4(size int, src net.IP, opts []layers.IPv4Option) []byte {
	ip := ip4(src, corpusDst4, layers.IPProtocolUDP)
	ip.Options = opts
	udp := &layers.UDP{SrcPort: c.port(), DstPort: c.port()}
	udp.SetNetworkLayerForChecksum(ip)
	return c.add(eth(layers.EthernetTypeIPv4), ip, udp, c.payload(size, 14+20+optLen(opts)+8))
}

func (c *corpus) tcp4(size int, src net.IP, f int, opts []layers.IPv4Option) []byte {
	ip := ip4(src, corpusDst4, layers.IPProtocolTCP)
	ip.Options = opts
	tcp := c.tcpHeader(f)
	tcp.SetNetworkLayerForChecksum(ip)
	return c.add(eth(layers.EthernetTypeIPv4), ip, tcp, c.payload(size, 14+20+optLen(opts)+20))
}

func (c *corpus) tcpHeader(f int) *layers.TCP {
	fl := corpusTCPFlags[f]
	return &layers.TCP{
		SrcPort: layers.TCPPort(c.port()), DstPort: []layers.TCPPort{80, 443, 22, 8080}[f%4],
		Seq: c.rng.Uint32(), Ack: c.rng.Uint32(), Window: 65535,
		SYN: fl.syn, ACK: fl.ack, FIN: fl.fin, RST: fl.rst, PSH: fl.psh, URG: fl.urg,
	}
}

func (c *corpus) icmp4(size int, typ uint8, opts []layers.IPv4Option) []byte {
	ip := ip4(corpusSrc4[0], corpusDst4, layers.IPProtocolICMPv4)
	ip.Options = opts
	icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: 0x4242, Seq: uint16(size)}
	return c.add(eth(layers.EthernetTypeIPv4), ip, icmp, c.payload(size, 14+20+optLen(opts)+8))
}

func (c *corpus) icmp6(size int, typ uint8) []byte {
	ip := ip6(corpusSrc6[0], corpusDst6, layers.IPProtocolICMPv6)
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	icmp.SetNetworkLayerForChecksum(ip)
	echo := &layers.ICMPv6Echo{Identifier: 0x4242, SeqNumber: uint16(size)}
	return c.add(eth(layers.EthernetTypeIPv6), ip, icmp, echo, c.payload(size, 14+40+8))
}

func optLen(opts []layers.IPv4Option) int {
	n := 0
	for _, o := range opts {
		n += max(int(o.OptionLength), 1)
	}
	return (n + 3) &^ 3
}

// IPv4 options that make 24-, 32- and 60-byte headers: router alert, a
// timestamp, a record route that fills the header.
var corpusIPv4Options = [][]layers.IPv4Option{
	{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}},
	{{OptionType: 68, OptionLength: 12, OptionData: []byte{5, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
	{{OptionType: 7, OptionLength: 39, OptionData: append([]byte{4}, make([]byte, 36)...)}, {OptionType: 0}},
}

// Corpus returns about 200 Ethernet frames, the same on every call: IPv4 and
// IPv6 UDP at every size in corpusSizes, TCP with each flag combination,
// ICMP and ICMPv6 echo requests and replies, and odd frames (ARP, truncated
// IPv4, IPv4 with options, fragments, unknown protocols). Every frame is at
// least 14 bytes, which BPF_PROG_TEST_RUN wants of an XDP frame.
func Corpus() [][]byte {
	c := &corpus{rng: rand.New(rand.NewPCG(0xfa57, 0xbe7c))}
	for i, size := range corpusSizes {
		c.udp4(size, corpusSrc4[i%len(corpusSrc4)], nil)
		c.udp4(size, corpusSrc4[(i+1)%len(corpusSrc4)], nil)
		ip := ip6(corpusSrc6[i%len(corpusSrc6)], corpusDst6, layers.IPProtocolUDP)
		udp := &layers.UDP{SrcPort: c.port(), DstPort: c.port()}
		udp.SetNetworkLayerForChecksum(ip)
		c.add(eth(layers.EthernetTypeIPv6), ip, udp, c.payload(size, 14+40+8))
	}
	for f := range corpusTCPFlags {
		for i, size := range []int{60, 64, 66, 128, 333, 576, 1500} {
			c.tcp4(size, corpusSrc4[(f+i)%len(corpusSrc4)], f, nil)
		}
		for i, size := range []int{74, 512, 1500} {
			ip := ip6(corpusSrc6[i%len(corpusSrc6)], corpusDst6, layers.IPProtocolTCP)
			tcp := c.tcpHeader(f)
			tcp.SetNetworkLayerForChecksum(ip)
			c.add(eth(layers.EthernetTypeIPv6), ip, tcp, c.payload(size, 14+40+20))
		}
	}
	for _, size := range []int{60, 64, 98, 128, 256, 512, 1024, 1500} {
		c.icmp4(size, layers.ICMPv4TypeEchoRequest, nil)
		c.icmp4(size, layers.ICMPv4TypeEchoReply, nil)
	}
	for _, size := range []int{70, 118, 1500} {
		c.icmp6(size, layers.ICMPv6TypeEchoRequest)
		c.icmp6(size, layers.ICMPv6TypeEchoReply)
	}
	for i, opts := range corpusIPv4Options {
		c.udp4(128, corpusSrc4[i], opts)
		c.tcp4(128, corpusSrc4[i], i, opts)
		c.icmp4(128, layers.ICMPv4TypeEchoRequest, opts)
	}
	c.odd()
	return c.frames
}

// odd adds frames a parser must turn down.
func (c *corpus) odd() {
	for _, op := range []uint16{layers.ARPRequest, layers.ARPReply} {
		c.add(eth(layers.EthernetTypeARP), &layers.ARP{
			AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: op,
			SourceHwAddress: corpusSrcMAC, SourceProtAddress: corpusSrc4[0],
			DstHwAddress: corpusDstMAC, DstProtAddress: corpusDst4,
		})
	}

	// Truncated: the Ethernet header alone, cut inside the IPv4 header,
	// inside the UDP and TCP headers, and an IPv4 total length longer than
	// the frame.
	full := c.udp4(512, corpusSrc4[0], nil)
	tcp := c.tcp4(512, corpusSrc4[1], 0, nil)
	icmp := c.icmp4(512, layers.ICMPv4TypeEchoRequest, nil)
	c.frames = append(c.frames, full[:14], full[:14+12], full[:14+20+4], tcp[:14+20+12], icmp[:14+20+4], full[:100])
	withOpts := c.udp4(256, corpusSrc4[2], corpusIPv4Options[2])
	c.frames = append(c.frames, withOpts[:14+40])

	// Fragments: a first one (MF, offset 0) and a later one.
	for _, frag := range []struct {
		flags  layers.IPv4Flag
		offset uint16
	}{{layers.IPv4MoreFragments, 0}, {0, 64}} {
		ip := ip4(corpusSrc4[3], corpusDst4, layers.IPProtocolUDP)
		ip.Flags, ip.FragOffset = frag.flags, frag.offset
		c.add(eth(layers.EthernetTypeIPv4), ip, c.payload(600, 14+20))
	}

	// An IHL below 5, a protocol no program knows (GRE), IPv4 in a VLAN
	// tag, and an unknown EtherType.
	bad := append([]byte(nil), c.udp4(128, corpusSrc4[0], nil)...)
	bad[14] = 0x44
	c.frames = append(c.frames, bad)
	c.add(eth(layers.EthernetTypeIPv4), ip4(corpusSrc4[1], corpusDst4, layers.IPProtocolGRE), c.payload(200, 14+20))
	ip := ip4(corpusSrc4[0], corpusDst4, layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: 9, DstPort: 9}
	udp.SetNetworkLayerForChecksum(ip)
	c.add(eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 7, Type: layers.EthernetTypeIPv4}, ip, udp, c.payload(128, 14+4+20+8))
	c.add(eth(0x88b5), c.payload(80, 14))
}

// Frame lengths Mutate keeps to: BPF_PROG_TEST_RUN rejects XDP frames
// shorter than an Ethernet header, and a frame longer than an MTU of 1500
// is no frame a driver hands XDP.
const (
	mutateMinLen = 14
	mutateMaxLen = 1514
)

// Mutate returns a mutated copy of pkt for differential fuzzing: random
// bytes flipped (mostly in the first 64, where the headers are), the frame
// truncated, or extended with random bytes. pkt is left as it is.
func Mutate(rng *rand.Rand, pkt []byte) []byte {
	out := append([]byte(nil), pkt...)
	for n := 1 + rng.IntN(3); n > 0; n-- {
		switch rng.IntN(4) {
		case 0, 1: // flip bits of a few bytes
			for k := 1 + rng.IntN(4); k > 0 && len(out) > 0; k-- {
				i := rng.IntN(len(out))
				if rng.IntN(4) != 0 {
					i = rng.IntN(min(len(out), 64))
				}
				out[i] ^= byte(1 + rng.IntN(255))
			}
		case 2: // truncate
			if len(out) > mutateMinLen {
				out = out[:mutateMinLen+rng.IntN(len(out)-mutateMinLen)]
			}
		case 3: // extend
			for k := rng.IntN(128); k > 0 && len(out) < mutateMaxLen; k-- {
				out = append(out, byte(rng.Uint32()))
			}
		}
	}
	for len(out) < mutateMinLen {
		out = append(out, byte(rng.Uint32()))
	}
	return out
}

// Sample is the frame a program is timed with: one that takes its main
// path (an echo request for xdping, a SYN for the TCP classifier, UDP for
// the rest, which the load balancer's setup addresses to its virtual IP).
func Sample(name string) []byte {
	c := &corpus{rng: rand.New(rand.NewPCG(1, 1))}
	switch name {
	case "xdping":
		return c.icmp4(98, layers.ICMPv4TypeEchoRequest, nil)
	case "xdp_tcpclassify":
		return c.tcp4(74, corpusSrc4[0], 0, nil)
	}
	return c.udp4(138, corpusSrc4[0], nil)
}
