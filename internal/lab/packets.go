package lab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// UDPOptions describes a set of UDP/IPv4 test packets.
type UDPOptions struct {
	// Size is the frame length without FCS; 42 bytes of headers, the rest payload.
	Size           int
	Count          int
	SrcMAC, DstMAC net.HardwareAddr
	Src, Dst       netip.Addr
	// DstPort is fixed; source ports count up from 1024 so that every packet
	// is its own flow, like the seed's 1,000 distinct packets.
	DstPort uint16
}

const udpHeaders = 14 + 20 + 8

// DefaultUDP returns 138-byte packets from the testbed's generator to its sink.
func (t Testbed) DefaultUDP() UDPOptions {
	return UDPOptions{
		Size: 138, Count: 1000,
		SrcMAC: t.Gen().MAC, DstMAC: t.Sink().MAC,
		Src: t.Gen().Addr.Addr(), Dst: t.Sink().Addr.Addr(),
		DstPort: 9,
	}
}

// Validate checks the options before any packet is built.
func (o UDPOptions) Validate() error {
	// 60 bytes is Ethernet's minimum frame without FCS; it also leaves room
	// for the 8-byte sequence number in the payload.
	if o.Size < 60 || o.Size > PacketMaxFrame {
		return fmt.Errorf("packet size %d out of range: UDP/IPv4 test packets are 60 to %d bytes (a jumbo frame)", o.Size, PacketMaxFrame)
	}
	if o.Count < 1 || o.Count > 1<<16 {
		return fmt.Errorf("packet count %d out of range: 1 to 65536", o.Count)
	}
	if !o.Src.Is4() || !o.Dst.Is4() {
		return fmt.Errorf("addresses %s → %s: UDP test packets are IPv4", o.Src, o.Dst)
	}
	if len(o.SrcMAC) != 6 || len(o.DstMAC) != 6 {
		return errors.New("source and destination MAC are needed")
	}
	return nil
}

// UDPPackets builds the packets with correct IPv4 and UDP checksums. Each
// payload starts with the packet's sequence number.
func UDPPackets(o UDPOptions) ([][]byte, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	pkts := make([][]byte, o.Count)
	for i := range pkts {
		eth := &layers.Ethernet{SrcMAC: o.SrcMAC, DstMAC: o.DstMAC, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: o.Src.AsSlice(), DstIP: o.Dst.AsSlice(), Id: uint16(i)}
		udp := &layers.UDP{SrcPort: layers.UDPPort(1024 + i), DstPort: layers.UDPPort(o.DstPort)}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		payload := make([]byte, o.Size-udpHeaders)
		binary.BigEndian.PutUint64(payload, uint64(i))
		for j := 8; j < len(payload); j++ {
			payload[j] = byte(j)
		}
		buf := gopacket.NewSerializeBuffer()
		opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
		if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, gopacket.Payload(payload)); err != nil {
			return nil, fmt.Errorf("build packet %d: %w", i, err)
		}
		pkts[i] = buf.Bytes()
	}
	return pkts, nil
}

// SYNPacket is a TCP SYN from src to dst:dport, addressed to dstMAC, with
// the options a Linux client sends (MSS, SACK permitted, timestamps, window
// scale): the template of a SYN flood, whose sources and source ports the
// generator varies (GenOptions.Flows, FlowKeepDport).
func SYNPacket(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, dport uint16) ([]byte, error) {
	if !src.Is4() || !dst.Is4() {
		return nil, fmt.Errorf("addresses %s → %s: SYN templates are IPv4", src, dst)
	}
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Flags: layers.IPv4DontFragment}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: layers.TCPPort(dport), Seq: 0x5eed5eed, SYN: true, Window: 64240, Options: []layers.TCPOption{
		{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0xb4}},
		{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
		{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: []byte{0, 0, 0, 1, 0, 0, 0, 0}},
		{OptionType: layers.TCPOptionKindNop},
		{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}},
	}}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		return nil, err
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		return nil, fmt.Errorf("build SYN: %w", err)
	}
	return buf.Bytes(), nil
}
