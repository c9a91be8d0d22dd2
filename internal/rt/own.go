package rt

import (
	"encoding/binary"
	"net"
	"path/filepath"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// OwnProgram is one of the runtime's programs written for no engine in
// particular, with frames that take each of its paths.
type OwnProgram struct {
	Name, Object string
	// Sample is the frame the benchmark times; Frames every frame the
	// differential test runs.
	Sample []byte
	Frames [][]byte
	Maps   map[string][]Entry
}

// Own returns the programs, their objects in dir (internal/rt).
func Own(dir string) []OwnProgram {
	u4 := frame(vlanOf(), ip4Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64)
	limit := make([]byte, 8)
	binary.LittleEndian.PutUint64(limit, 3)
	blocked := []Entry{{Key: u32(53), Value: []byte{1}}}
	return []OwnProgram{
		{
			Name: "ttl_forward", Object: filepath.Join(dir, "ttl_bpfel.o"),
			Sample: frame(nil, ip4Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64),
			Frames: [][]byte{
				u4,
				frame(nil, ip4Of(1, layers.IPProtocolUDP), udpOf(4000, 53), 64),
				frame(nil, ip4Of(2, layers.IPProtocolTCP), udpOf(1, 2), 0),
				frame(nil, ip6Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64),
				frame(vlanOf(), ip6Of(1, layers.IPProtocolUDP), udpOf(4000, 53), 64),
				frame(nil, ip4Of(255, layers.IPProtocolICMPv4), nil, 100),
			},
		},
		{
			Name: "flow_count", Object: filepath.Join(dir, "flows_bpfel.o"),
			Sample: frame(nil, ip4Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64),
			Frames: [][]byte{
				// The same flow five times: inserted, counted, then dropped
				// past the limit of 3.
				frame(nil, ip4Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64),
				frame(nil, ip4Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64),
				frame(nil, ip4Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 100),
				frame(nil, ip4Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64),
				frame(nil, ip4Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64),
				frame(nil, ip4Of(64, layers.IPProtocolTCP), udpOf(4001, 80), 64),
				frame(nil, ip6Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64),
			},
			Maps: map[string][]Entry{"flow_limit": {{Key: u32(0), Value: limit}}},
		},
		{
			Name: "v6_ext_walk", Object: filepath.Join(dir, "v6ext_bpfel.o"),
			Sample: frame(nil, ip6Ext(layers.IPProtocolUDP, 0, 60, 43), udpOf(4000, 53), 64),
			Frames: [][]byte{
				frame(nil, ip6Ext(layers.IPProtocolUDP, 0, 60, 43), udpOf(4000, 53), 64),
				frame(nil, ip6Ext(layers.IPProtocolUDP, 44), udpOf(4000, 54), 64),
				frame(nil, ip6Ext(layers.IPProtocolUDP), udpOf(4000, 53), 64),
				frame(nil, ip6Ext(layers.IPProtocolUDP, 0, 0, 0, 0, 0, 0, 0), udpOf(4000, 53), 64),
				frame(nil, ip6Ext(layers.IPProtocolTCP, 60), udpOf(1, 2), 8),
				frame(nil, ip4Of(64, layers.IPProtocolUDP), udpOf(4000, 53), 64),
			},
			Maps: map[string][]Entry{"blocked_ports": blocked},
		},
	}
}

// OwnPrograms are the runtime's own programs as the peer benchmark takes
// them.
func OwnPrograms(dir string) []PeerProgram {
	var out []PeerProgram
	for _, p := range Own(dir) {
		out = append(out, PeerProgram{Name: p.Name, Object: p.Object, Packet: p.Sample, Maps: p.Maps})
	}
	return out
}

func u32(v uint32) []byte {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, v)
	return b
}

var (
	ownMAC1 = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	ownMAC2 = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

// vlanOf is one 802.1Q tag.
func vlanOf() *layers.Dot1Q { return &layers.Dot1Q{VLANIdentifier: 7} }

func ip4Of(ttl uint8, proto layers.IPProtocol) gopacket.SerializableLayer {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: ttl, Protocol: proto, SrcIP: net.IPv4(10, 0, 0, 1), DstIP: net.IPv4(10, 0, 1, 1)}
}

func ip6Of(hops uint8, next layers.IPProtocol) gopacket.SerializableLayer {
	return &layers.IPv6{Version: 6, HopLimit: hops, NextHeader: next, SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
}

// ip6Ext is an IPv6 header followed by extension headers of the given
// types (8 bytes each; a routing header 16) and then `last`.
type ip6ExtHdrs struct {
	last  layers.IPProtocol
	chain []uint8
}

func ip6Ext(last layers.IPProtocol, chain ...uint8) gopacket.SerializableLayer {
	return &ip6ExtHdrs{last: last, chain: chain}
}

func (h *ip6ExtHdrs) LayerType() gopacket.LayerType { return layers.LayerTypeIPv6 }

func (h *ip6ExtHdrs) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	var ext []byte
	for i, t := range h.chain {
		next := uint8(h.last)
		if i+1 < len(h.chain) {
			next = h.chain[i+1]
		}
		n := 8
		if t == 43 {
			n = 16
		}
		e := make([]byte, n)
		e[0] = next
		if t != 44 {
			e[1] = uint8(n/8 - 1)
		}
		ext = append(ext, e...)
	}
	payload := len(b.Bytes())
	first := uint8(h.last)
	if len(h.chain) > 0 {
		first = h.chain[0]
	}
	hdr, err := b.PrependBytes(40 + len(ext))
	if err != nil {
		return err
	}
	hdr[0] = 0x60
	binary.BigEndian.PutUint16(hdr[4:], uint16(payload+len(ext)))
	hdr[6] = first
	hdr[7] = 64
	copy(hdr[8:], net.ParseIP("fd00::1"))
	copy(hdr[24:], net.ParseIP("fd00::2"))
	copy(hdr[40:], ext)
	return nil
}

func udpOf(src, dst uint16) gopacket.SerializableLayer {
	return &layers.UDP{SrcPort: layers.UDPPort(src), DstPort: layers.UDPPort(dst)}
}

// frame builds Ethernet, an optional VLAN tag, l3, l4 and a payload.
func frame(vlan *layers.Dot1Q, l3, l4 gopacket.SerializableLayer, payload int) []byte {
	eth := &layers.Ethernet{SrcMAC: ownMAC1, DstMAC: ownMAC2, EthernetType: layers.EthernetTypeIPv4}
	typ := layers.EthernetTypeIPv4
	if l3.LayerType() == layers.LayerTypeIPv6 {
		typ = layers.EthernetTypeIPv6
	}
	ls := []gopacket.SerializableLayer{eth}
	if vlan != nil {
		eth.EthernetType = layers.EthernetTypeDot1Q
		vlan.Type = typ
		ls = append(ls, vlan)
	} else {
		eth.EthernetType = typ
	}
	ls = append(ls, l3)
	if l4 != nil {
		if u, ok := l4.(*layers.UDP); ok {
			// The pseudo-header is the same past extension headers.
			switch n := l3.(type) {
			case *layers.IPv4:
				u.SetNetworkLayerForChecksum(n)
			case *layers.IPv6:
				u.SetNetworkLayerForChecksum(n)
			default:
				u.SetNetworkLayerForChecksum(&layers.IPv6{SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2"), NextHeader: layers.IPProtocolUDP})
			}
		}
		ls = append(ls, l4)
	}
	ls = append(ls, gopacket.Payload(make([]byte, payload)))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		panic(err)
	}
	return append([]byte{}, buf.Bytes()...)
}
