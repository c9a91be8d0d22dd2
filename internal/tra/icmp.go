package tra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path/empty"
	"github.com/scionproto/scion/pkg/slayers/path/scion"

	"github.com/fastpath-dev/fastpath/internal/checksum"
)

// Errors between SCMP and ICMPv6. They are rare and their quotes must be
// rebuilt (a SCION header becomes an IPv6 header and back), so the data
// plane hands them to the daemon, which translates them here.
//
//	SCMP                              ICMPv6
//	1 destination unreachable, code c 1 destination unreachable, code c
//	2 packet too big, MTU m           2 packet too big, m less SCION's header plus IPv6's
//	4 parameter problem               4 parameter problem, erroneous header field
//	5 external interface down         1 destination unreachable, no route (when no other path is left)
//	6 internal connectivity down      1 destination unreachable, no route (likewise)
//	— (no kin)                        3 time exceeded: dropped

// SCMP types (RFC 9473's SCMP, scionproto's slayers).
const (
	scmpDestinationUnreachable   = 1
	scmpPacketTooBig             = 2
	scmpParameterProblem         = 4
	scmpExternalInterfaceDown    = 5
	scmpInternalConnectivityDown = 6
)

// ICMPv6 types (RFC 4443).
const (
	icmp6DestinationUnreachable = 1
	icmp6PacketTooBig           = 2
	icmp6ParameterProblem       = 4
	protoICMPv6                 = 58
	protoSCMP                   = 202
)

// minIPv6MTU is the least MTU IPv6 allows, and the most an ICMPv6 error
// may be.
const minIPv6MTU = 1280

// scmpQuoteAt is where an SCMP error's quoted packet starts: after the
// 4-byte header and the type's fields.
func scmpQuoteAt(typ uint8) int {
	switch typ {
	case scmpExternalInterfaceDown:
		return 4 + 8 + 8 // ISD-AS, interface
	case scmpInternalConnectivityDown:
		return 4 + 8 + 8 + 8 // ISD-AS, ingress and egress interfaces
	default:
		return 8
	}
}

// pseudoSCION is the sum of SCION's pseudo-header for an upper layer.
func pseudoSCION(s *slayers.SCION, proto uint8, length int) (uint32, error) {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], uint64(s.DstIA))
	binary.BigEndian.PutUint64(b[8:], uint64(s.SrcIA))
	sum := checksum.Sum(b[:], 0)
	sum = checksum.Sum(s.RawDstAddr, sum)
	sum = checksum.Sum(s.RawSrcAddr, sum)
	return sum + uint32(length>>16) + uint32(length&0xffff) + uint32(proto), nil
}

// pseudoIPv6 is the sum of IPv6's pseudo-header for an upper layer.
func pseudoIPv6(src, dst netip.Addr, proto uint8, length int) uint32 {
	s, d := src.As16(), dst.As16()
	sum := checksum.Sum(s[:], 0)
	sum = checksum.Sum(d[:], sum)
	return sum + uint32(length>>16) + uint32(length&0xffff) + uint32(proto)
}

// l4ChecksumAt is where an upper layer keeps its checksum.
func l4ChecksumAt(proto uint8) int {
	switch proto {
	case 6: // TCP
		return 16
	case 17: // UDP
		return 6
	default: // ICMPv6, SCMP
		return 2
	}
}

// moveChecksum rewrites a quoted upper layer's checksum from one
// pseudo-header to another (RFC 1624), if the quote holds it.
func moveChecksum(l4 []byte, proto uint8, from, to uint32) {
	at := l4ChecksumAt(proto)
	if len(l4) < at+2 {
		return
	}
	old := binary.BigEndian.Uint16(l4[at:])
	sum := uint32(^old) + uint32(^checksum.Fold(from)) + to
	binary.BigEndian.PutUint16(l4[at:], ^checksum.Fold(sum))
}

func icmpProto(scionProto uint8) uint8 {
	if scionProto == protoSCMP {
		return protoICMPv6
	}
	return scionProto
}

func scionProto(ipProto uint8) uint8 {
	if ipProto == protoICMPv6 {
		return protoSCMP
	}
	return ipProto
}

// scmpToICMPv6 is the ICMPv6 error the host gets for an SCMP error sent to
// it by (ia, from): the quoted SCION packet becomes the IPv6 packet the
// host sent. Nothing (nil) for types without a kin.
func scmpToICMPv6(msg []byte, ia addr.IA, from netip.Addr, host netip.Addr) ([]byte, error) {
	if len(msg) < 8 {
		return nil, errors.New("SCMP message too short")
	}
	typ, code := msg[0], msg[1]
	var icmpType, icmpCode uint8
	var param uint32
	switch typ {
	case scmpDestinationUnreachable:
		icmpType, icmpCode = icmp6DestinationUnreachable, code
		if code > 6 {
			icmpCode = 0
		}
	case scmpPacketTooBig:
		icmpType = icmp6PacketTooBig
	case scmpParameterProblem:
		icmpType = icmp6ParameterProblem
	case scmpExternalInterfaceDown, scmpInternalConnectivityDown:
		icmpType = icmp6DestinationUnreachable
	default:
		return nil, nil
	}
	at := scmpQuoteAt(typ)
	if len(msg) < at {
		return nil, fmt.Errorf("SCMP type %d: %d bytes, want at least %d", typ, len(msg), at)
	}
	var s slayers.SCION
	if err := s.DecodeFromBytes(msg[at:], gopacket.NilDecodeFeedback); err != nil {
		return nil, fmt.Errorf("SCMP type %d: quoted SCION header: %w", typ, err)
	}
	// The quoted hosts are IP addresses for a packet the host sent; a
	// service address (or anything else) has no IPv6 form to quote.
	qsrc, err := s.SrcAddr()
	if err != nil {
		return nil, err
	}
	qdst, err := s.DstAddr()
	if err != nil {
		return nil, err
	}
	if qsrc.Type() != addr.HostTypeIP || qdst.Type() != addr.HostTypeIP {
		return nil, fmt.Errorf("SCMP type %d quotes a packet between %s and %s: not IP hosts", typ, qsrc, qdst)
	}
	innerSrc, err := FromSCION(s.SrcIA, qsrc.IP())
	if err != nil {
		return nil, err
	}
	innerDst, err := FromSCION(s.DstIA, qdst.IP())
	if err != nil {
		return nil, err
	}
	hdrLen := int(s.HdrLen) * 4
	if typ == scmpPacketTooBig {
		mtu := int(binary.BigEndian.Uint16(msg[6:8])) - hdrLen + 40
		param = uint32(max(mtu, minIPv6MTU))
	}
	outerSrc, err := FromSCION(ia, from)
	if err != nil {
		// A router without an SM-IP address: the error speaks for the path.
		outerSrc = innerDst
	}
	proto := icmpProto(uint8(s.NextHdr))
	l4 := append([]byte(nil), s.Payload...)
	if ps, err := pseudoSCION(&s, uint8(s.NextHdr), int(s.PayloadLen)); err == nil {
		moveChecksum(l4, proto, ps, pseudoIPv6(innerSrc, innerDst, proto, int(s.PayloadLen)))
	}

	inner := make([]byte, 40, 40+len(l4))
	inner[0] = 0x60 | s.TrafficClass>>4
	inner[1] = s.TrafficClass<<4 | uint8(s.FlowID>>16&0xf)
	binary.BigEndian.PutUint16(inner[2:], uint16(s.FlowID))
	binary.BigEndian.PutUint16(inner[4:], s.PayloadLen)
	inner[6], inner[7] = proto, 64
	is, id := innerSrc.As16(), innerDst.As16()
	copy(inner[8:], is[:])
	copy(inner[24:], id[:])
	inner = append(inner, l4...)
	return icmpv6Packet(outerSrc, host, icmpType, icmpCode, param, inner), nil
}

// icmpv6Packet is an IPv6 packet with an ICMPv6 error quoting as much of
// quote as fits the minimum MTU.
func icmpv6Packet(src, dst netip.Addr, typ, code uint8, param uint32, quote []byte) []byte {
	quote = quote[:min(len(quote), minIPv6MTU-48)]
	out := make([]byte, 48+len(quote))
	out[0] = 0x60
	binary.BigEndian.PutUint16(out[4:], uint16(8+len(quote)))
	out[6], out[7] = protoICMPv6, 64
	s, d := src.As16(), dst.As16()
	copy(out[8:], s[:])
	copy(out[24:], d[:])
	out[40], out[41] = typ, code
	binary.BigEndian.PutUint32(out[44:], param)
	copy(out[48:], quote)
	sum := checksum.Sum(out[40:], pseudoIPv6(src, dst, protoICMPv6, len(out)-40))
	binary.BigEndian.PutUint16(out[42:], ^checksum.Fold(sum))
	return out
}

// scionHost is a host's SCION address from its SM-IP address.
func scionHost(smip netip.Addr) (addr.IA, addr.Host, error) {
	m, err := ToSCION(smip)
	if err != nil {
		return 0, addr.Host{}, err
	}
	return m.IA, addr.HostIP(m.Host(smip)), nil
}

// icmpv6ToSCMP is the SCMP error for an ICMPv6 error the host sent (pkt,
// IPv6), as a SCION packet on path from the host (local, at its SCION
// address self): the quoted IPv6 packet becomes the SCION packet the host
// received, with an empty path (the one it came by is not known). Nothing
// (nil) for ICMPv6 errors without an SCMP kin.
func icmpv6ToSCMP(pkt []byte, local addr.IA, self addr.Host, path Path) ([]byte, error) {
	if len(pkt) < 48 || pkt[0]>>4 != 6 || pkt[6] != protoICMPv6 {
		return nil, errors.New("not an ICMPv6 packet")
	}
	dst := netip.AddrFrom16([16]byte(pkt[24:40]))
	dstIA, dstHost, err := scionHost(dst)
	if err != nil {
		return nil, err
	}
	typ, code, param := pkt[40], pkt[41], binary.BigEndian.Uint32(pkt[44:48])
	quote := pkt[48:]
	if len(quote) < 40 || quote[0]>>4 != 6 {
		return nil, errors.New("the ICMPv6 error quotes no IPv6 packet")
	}
	qsrc := netip.AddrFrom16([16]byte(quote[8:24]))
	qdst := netip.AddrFrom16([16]byte(quote[24:40]))
	qsrcIA, qsrcHost, err := scionHost(qsrc)
	if err != nil {
		return nil, err
	}
	qproto := quote[6]
	qlen := int(binary.BigEndian.Uint16(quote[4:6]))

	var scmp slayers.SCMP
	var body gopacket.SerializableLayer
	switch typ {
	case icmp6DestinationUnreachable:
		if code > 6 {
			code = 0
		}
		scmp.TypeCode = slayers.CreateSCMPTypeCode(scmpDestinationUnreachable, slayers.SCMPCode(code))
		body = &slayers.SCMPDestinationUnreachable{}
	case icmp6PacketTooBig:
		scmp.TypeCode = slayers.CreateSCMPTypeCode(scmpPacketTooBig, 0)
		// The host's MTU is IPv6's (never below its minimum); SCION's
		// header takes IPv6's place.
		hdr := scionHeaderLen(self, dstHost, path)
		body = &slayers.SCMPPacketTooBig{MTU: uint16(min(max(int(param), minIPv6MTU)-40+hdr, 0xffff))}
	case icmp6ParameterProblem:
		scmp.TypeCode = slayers.CreateSCMPTypeCode(scmpParameterProblem, 0)
		body = &slayers.SCMPParameterProblem{}
	default:
		return nil, nil
	}

	// The quote: the packet as it was in SCION, with the host's address
	// and the sender's, the upper layer's checksum moved back.
	q := &slayers.SCION{
		Version: 0, TrafficClass: quote[0]<<4 | quote[1]>>4,
		FlowID:  uint32(quote[1]&0xf)<<16 | uint32(binary.BigEndian.Uint16(quote[2:4])),
		NextHdr: slayers.L4ProtocolType(scionProto(qproto)), PathType: empty.PathType, Path: empty.Path{},
		SrcIA: qsrcIA, DstIA: local,
	}
	if err := q.SetSrcAddr(qsrcHost); err != nil {
		return nil, err
	}
	if err := q.SetDstAddr(self); err != nil {
		return nil, err
	}
	l4 := append([]byte(nil), quote[40:]...)
	if ps, err := pseudoSCION(q, scionProto(qproto), qlen); err == nil {
		moveChecksum(l4, qproto, pseudoIPv6(qsrc, qdst, qproto, qlen), ps)
	}
	qb := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(qb, gopacket.SerializeOptions{FixLengths: true}, q, gopacket.Payload(l4)); err != nil {
		return nil, err
	}
	quoted := qb.Bytes()
	binary.BigEndian.PutUint16(quoted[6:8], uint16(qlen)) // the length it had, not what is quoted

	s := &slayers.SCION{
		Version: 0, NextHdr: slayers.L4SCMP, SrcIA: local, DstIA: dstIA,
	}
	if err := s.SetSrcAddr(self); err != nil {
		return nil, err
	}
	if err := s.SetDstAddr(dstHost); err != nil {
		return nil, err
	}
	if len(path.Raw) == 0 {
		s.PathType, s.Path = empty.PathType, empty.Path{}
	} else {
		// A copy: serializing writes into the bytes the path holds, which
		// are the daemon's installed path.
		var raw scion.Raw
		if err := raw.DecodeFromBytes(append([]byte(nil), path.Raw...)); err != nil {
			return nil, fmt.Errorf("the path to %s: %w", dstIA, err)
		}
		s.PathType, s.Path = scion.PathType, &raw
	}
	// The error fits the path's MTU, as an ICMPv6 error fits IPv6's least.
	limit := minIPv6MTU
	if path.MTU > 0 {
		limit = int(path.MTU)
	}
	room := limit - scionHeaderLen(self, dstHost, path) - 8
	quoted = quoted[:max(0, min(len(quoted), room))]
	scmp.SetNetworkLayerForChecksum(s)
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		s, &scmp, body, gopacket.Payload(quoted)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// scionHeaderLen is the length of the SCION header of a packet between two
// hosts on path.
func scionHeaderLen(src, dst addr.Host, path Path) int {
	return 12 + 16 + hostLen(src) + hostLen(dst) + len(path.Raw)
}

func hostLen(h addr.Host) int {
	if h.Type() == addr.HostTypeIP && h.IP().Is4() {
		return 4
	}
	return 16
}

// unreachableFor is the ICMPv6 destination unreachable (no route, RFC 4443
// 3.1) that answers a packet the host sent, from its destination.
func unreachableFor(pkt []byte) ([]byte, error) {
	if len(pkt) < 40 || pkt[0]>>4 != 6 {
		return nil, errors.New("not an IPv6 packet")
	}
	src, dst := netip.AddrFrom16([16]byte(pkt[24:40])), netip.AddrFrom16([16]byte(pkt[8:24]))
	return icmpv6Packet(src, dst, icmp6DestinationUnreachable, 0, 0, pkt), nil
}

// completeL4Checksum writes the full upper-layer checksum of an IPv6
// packet the host sent: a held packet may have left the host with its
// checksum pending (the field holds the pseudo-header's sum only), and sent
// again by a packet socket nothing would complete it. Anything it does not
// know is left as it is.
func completeL4Checksum(pkt []byte) []byte {
	if len(pkt) < 48 || pkt[0]>>4 != 6 || int(binary.BigEndian.Uint16(pkt[4:6]))+40 != len(pkt) {
		return pkt
	}
	proto := pkt[6]
	at := 40 + l4ChecksumAt(proto)
	switch proto {
	case 6, 17, protoICMPv6:
	default:
		return pkt
	}
	if len(pkt) < at+2 {
		return pkt
	}
	src, dst := netip.AddrFrom16([16]byte(pkt[8:24])), netip.AddrFrom16([16]byte(pkt[24:40]))
	pkt[at], pkt[at+1] = 0, 0
	c := ^checksum.Fold(checksum.Sum(pkt[40:], pseudoIPv6(src, dst, proto, len(pkt)-40)))
	if c == 0 && proto == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(pkt[at:], c)
	return pkt
}
