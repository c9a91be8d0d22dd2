package br

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/scrypto"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path"
	"github.com/scionproto/scion/pkg/slayers/path/scion"
)

// Hop is one hop field of a path spec.
type Hop struct {
	ConsIngress, ConsEgress uint16
	ExpTime                 uint8
	IngressAlert            bool
	EgressAlert             bool
	// Key, if set, computes this hop's MAC instead of the path's key (a hop
	// of another AS, or a wrong MAC on purpose).
	Key []byte
}

// Segment is one segment of a path spec, its hops in the order the packet
// traverses them.
type Segment struct {
	ConsDir   bool
	Timestamp uint32
	// SegID is β0, the SegID at the start of construction; βk+1 = βk ⊕ the
	// first two bytes of the MAC of the hop with construction index k.
	SegID uint16
	// Peer marks a peering segment: its hop with construction index 0 is the
	// peering hop, whose MAC uses β1 like its neighbour's (the regular hop it
	// replaces is not in the path; β1 = β0 ⊕ 0x1111 stands for it).
	Peer bool
	Hops []Hop
	// Carried is the index k of the βk the info field carries.
	Carried int
}

// PathSpec describes a standard SCION path and where the packet stands on it.
type PathSpec struct {
	Segments []Segment
	CurrHF   int
	// CurrINF defaults to the segment of CurrHF.
	CurrINF *int
}

// consIndex is the construction index of the hop at traversal position p.
func (s Segment) consIndex(p int) int {
	if s.ConsDir {
		return p
	}
	return len(s.Hops) - 1 - p
}

// hopAt returns the hop with construction index c.
func (s Segment) hopAt(c int) Hop {
	if s.ConsDir {
		return s.Hops[c]
	}
	return s.Hops[len(s.Hops)-1-c]
}

func hopField(h Hop) path.HopField {
	return path.HopField{
		IngressRouterAlert: h.IngressAlert, EgressRouterAlert: h.EgressAlert,
		ExpTime: h.ExpTime, ConsIngress: h.ConsIngress, ConsEgress: h.ConsEgress,
	}
}

// macs returns each hop's MAC by construction index, and β0..βn.
func (s Segment) macs(key []byte) ([][path.MacLen]byte, []uint16, error) {
	n := len(s.Hops)
	macs := make([][path.MacLen]byte, n)
	beta := make([]uint16, n+1)
	beta[0] = s.SegID
	for c := 0; c < n; c++ {
		h := s.hopAt(c)
		k := key
		if h.Key != nil {
			k = h.Key
		}
		mac, err := scrypto.InitMac(k)
		if err != nil {
			return nil, nil, err
		}
		seg := beta[c]
		if s.Peer && c == 0 {
			beta[1] = beta[0] ^ 0x1111
			seg = beta[1]
		}
		macs[c] = path.MAC(mac, path.InfoField{SegID: seg, Timestamp: s.Timestamp}, hopField(h), nil)
		if !(s.Peer && c == 0) {
			beta[c+1] = beta[c] ^ binary.BigEndian.Uint16(macs[c][:2])
		}
	}
	return macs, beta, nil
}

// Beta is βk of the segment under key.
func (s Segment) Beta(key []byte, k int) (uint16, error) {
	_, beta, err := s.macs(key)
	if err != nil {
		return 0, err
	}
	if k < 0 || k >= len(beta) {
		return 0, fmt.Errorf("β%d out of range 0..%d", k, len(beta)-1)
	}
	return beta[k], nil
}

// Path builds the decoded path with MACs computed under key.
func (ps PathSpec) Path(key []byte) (*scion.Decoded, error) {
	d := &scion.Decoded{}
	hf := 0
	for i, s := range ps.Segments {
		macs, beta, err := s.macs(key)
		if err != nil {
			return nil, err
		}
		if s.Carried < 0 || s.Carried >= len(beta) {
			return nil, fmt.Errorf("segment %d carries β%d, out of range", i, s.Carried)
		}
		d.InfoFields = append(d.InfoFields, path.InfoField{
			ConsDir: s.ConsDir, Peer: s.Peer, SegID: beta[s.Carried], Timestamp: s.Timestamp,
		})
		for p, h := range s.Hops {
			f := hopField(h)
			f.Mac = macs[s.consIndex(p)]
			d.HopFields = append(d.HopFields, f)
		}
		d.PathMeta.SegLen[i] = uint8(len(s.Hops))
		if ps.CurrHF >= hf && ps.CurrHF < hf+len(s.Hops) {
			d.PathMeta.CurrINF = uint8(i)
		}
		hf += len(s.Hops)
	}
	if ps.CurrINF != nil {
		d.PathMeta.CurrINF = uint8(*ps.CurrINF)
	}
	d.PathMeta.CurrHF = uint8(ps.CurrHF)
	d.NumINF = len(ps.Segments)
	d.NumHops = hf
	return d, nil
}

// SCIONPacket is a SCION/UDP packet with its underlay.
type SCIONPacket struct {
	Path             PathSpec
	Key              []byte
	SrcIA, DstIA     addr.IA
	SrcHost, DstHost addr.Host
	SrcPort, DstPort uint16 // SCION/UDP ports
	Payload          []byte
	// SCMP, if set, is carried instead of SCION/UDP: the SCMP message as it
	// is, any length (the ports and Payload are not used).
	SCMP []byte
	// Underlay: Ethernet, IPv4 or IPv6 by the address family, UDP.
	SrcMAC, DstMAC           net.HardwareAddr
	UnderlaySrc, UnderlayDst netip.AddrPort
	TrafficClass             uint8
	FlowID                   uint32
	// Mutate, if set, edits the serialized SCION header and payload before
	// the underlay is added (bad lengths, unknown types, …).
	Mutate func(scion []byte)
}

// SCIONBytes is the SCION header and payload, without underlay.
func (p SCIONPacket) SCIONBytes() ([]byte, error) {
	pth, err := p.Path.Path(p.Key)
	if err != nil {
		return nil, err
	}
	s := &slayers.SCION{
		Version: 0, TrafficClass: p.TrafficClass, FlowID: p.FlowID,
		NextHdr: slayers.L4UDP, PathType: scion.PathType, Path: pth,
		DstIA: p.DstIA, SrcIA: p.SrcIA,
	}
	if err := s.SetDstAddr(p.DstHost); err != nil {
		return nil, err
	}
	if err := s.SetSrcAddr(p.SrcHost); err != nil {
		return nil, err
	}
	parts := []gopacket.SerializableLayer{s}
	if p.SCMP != nil {
		s.NextHdr = slayers.L4SCMP
		parts = append(parts, gopacket.Payload(p.SCMP))
	} else {
		u := &slayers.UDP{SrcPort: p.SrcPort, DstPort: p.DstPort}
		u.SetNetworkLayerForChecksum(s)
		parts = append(parts, u, gopacket.Payload(p.Payload))
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, parts...); err != nil {
		return nil, fmt.Errorf("serialize SCION packet: %w", err)
	}
	b := buf.Bytes()
	if p.Mutate != nil {
		p.Mutate(b)
	}
	return b, nil
}

// Frame is the whole Ethernet frame.
func (p SCIONPacket) Frame() ([]byte, error) {
	sc, err := p.SCIONBytes()
	if err != nil {
		return nil, err
	}
	return Underlay(p.SrcMAC, p.DstMAC, p.UnderlaySrc, p.UnderlayDst, sc)
}

// Underlay wraps a SCION packet in Ethernet, IP and UDP, with the IP and UDP
// headers as Linux sends them (TTL 64, DF, checksum computed).
func Underlay(srcMAC, dstMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) ([]byte, error) {
	if srcMAC == nil {
		srcMAC = make(net.HardwareAddr, 6)
	}
	if dstMAC == nil {
		dstMAC = make(net.HardwareAddr, 6)
	}
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC}
	udp := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	var l3 gopacket.SerializableLayer
	if src.Addr().Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
			SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		l3 = ip
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
			SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
			return nil, err
		}
		l3 = ip
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, l3, udp, gopacket.Payload(payload)); err != nil {
		return nil, fmt.Errorf("serialize underlay: %w", err)
	}
	return buf.Bytes(), nil
}

func nowUnix() int64 { return time.Now().Unix() }
