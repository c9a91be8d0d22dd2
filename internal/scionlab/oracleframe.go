package scionlab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/fastpath-dev/fastpath/internal/checksum"
)

// The oracle's look at a frame's underlay: what fastpath's router wrote in
// front of the SCION header must be what a kernel would accept and what
// scionproto's router, sending from its socket, would have put there.

// udpFrame is an Ethernet frame's UDP datagram over IPv4 or IPv6: its ends
// and payload, the IP header's fields a sender sets, and what does not add
// up in it.
type udpFrame struct {
	src, dst netip.AddrPort
	payload  []byte
	v6       bool
	ttl      uint8 // TTL, or the hop limit
	tos      uint8 // TOS, or the traffic class
	df       bool  // IPv4's don't fragment
	csum     csumState
	// faults are what a receiving kernel would hold against the headers:
	// the IPv4 header checksum, lengths that disagree with each other or
	// with the frame, a fragment.
	faults []string
}

// csumState is what a datagram's UDP checksum field holds.
type csumState int

const (
	csumRight   csumState = iota // complete and right
	csumNone                     // zero over IPv4: no checksum
	csumPending                  // the pseudo-header's sum only: still owed (CHECKSUM_PARTIAL)
	csumWrong
)

// Kinds of difference between what fastpath sent and what it must send,
// as the oracle counts them.
const (
	faultUDPChecksum = "UDP checksum"
	faultIPHeader    = "IP header" // IPv4 header checksum, lengths, fragments
	faultSource      = "source"
	faultTTL         = "TTL"
	faultDF          = "DF"
	faultTOS         = "TOS"
	faultSCION       = "SCION bytes"
	faultDestination = "destination"
)

// parseUDPFrame reads an Ethernet frame carrying UDP over IPv4 (any
// options) or IPv6 (no extension headers). It fails only on frames that
// are not such a datagram at all; faults and csum say what is wrong with
// one that is.
func parseUDPFrame(f []byte) (udpFrame, error) {
	var u udpFrame
	if len(f) < 14 {
		return u, errors.New("shorter than an Ethernet header")
	}
	ip := f[14:]
	// An Ethernet frame is at least 60 bytes: a shorter datagram is padded.
	padded := func(ipLen int) bool { return len(f) == 60 && 14+ipLen < 60 }
	var l4 []byte
	var pseudo uint32
	switch binary.BigEndian.Uint16(f[12:14]) {
	case 0x0800:
		if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != 17 {
			return u, errors.New("IPv4, not UDP")
		}
		ihl := int(ip[0]&0x0f) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:4]))
		if ihl < 20 || tot < ihl+8 || tot > len(ip) {
			return u, fmt.Errorf("IPv4 lengths wrong (header %d, total %d, %d bytes after the Ethernet header)", ihl, tot, len(ip))
		}
		if tot != len(ip) && !padded(tot) {
			u.faults = append(u.faults, fmt.Sprintf("IPv4 total length %d in a frame of %d B (%d after the Ethernet header)", tot, len(f), len(ip)))
		}
		if c := checksum.Fold(checksum.Sum(ip[:ihl], 0)); c != 0xffff {
			u.faults = append(u.faults, fmt.Sprintf("IPv4 header checksum %#04x wrong (right: %#04x)", binary.BigEndian.Uint16(ip[10:12]), ipv4HeaderChecksum(ip[:ihl])))
		}
		frag := binary.BigEndian.Uint16(ip[6:8])
		if frag&0x3fff != 0 {
			u.faults = append(u.faults, fmt.Sprintf("an IPv4 fragment (flags and offset %#04x)", frag))
		}
		u.df, u.ttl, u.tos = frag&0x4000 != 0, ip[8], ip[1]
		src, dst := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		u.src, u.dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		pseudo = checksum.Sum(ip[12:20], 0)
		l4 = ip[ihl:tot]
	case 0x86dd:
		if len(ip) < 48 || ip[0]>>4 != 6 || ip[6] != 17 {
			return u, errors.New("IPv6, not UDP")
		}
		pl := int(binary.BigEndian.Uint16(ip[4:6]))
		if pl < 8 || 40+pl > len(ip) {
			return u, fmt.Errorf("IPv6 payload length %d wrong (%d bytes after the Ethernet header)", pl, len(ip))
		}
		if 40+pl != len(ip) && !padded(40+pl) {
			u.faults = append(u.faults, fmt.Sprintf("IPv6 payload length %d in a frame of %d B (%d after the Ethernet header)", pl, len(f), len(ip)))
		}
		u.v6, u.ttl = true, ip[7]
		u.tos = uint8(binary.BigEndian.Uint16(ip[0:2]) >> 4)
		src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		u.src, u.dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		pseudo = checksum.Sum(ip[8:40], 0)
		l4 = ip[40 : 40+pl]
	default:
		return u, errors.New("neither IPv4 nor IPv6")
	}
	ul := int(binary.BigEndian.Uint16(l4[4:6]))
	if ul < 8 || ul > len(l4) {
		return u, fmt.Errorf("UDP length %d wrong (%d bytes of IP payload)", ul, len(l4))
	}
	if ul != len(l4) {
		u.faults = append(u.faults, fmt.Sprintf("UDP length %d, IP payload %d B", ul, len(l4)))
	}
	u.src = netip.AddrPortFrom(u.src.Addr(), binary.BigEndian.Uint16(l4[0:2]))
	u.dst = netip.AddrPortFrom(u.dst.Addr(), binary.BigEndian.Uint16(l4[2:4]))
	u.payload = l4[8:ul]
	pseudo += 17 + uint32(ul)
	field := binary.BigEndian.Uint16(l4[6:8])
	switch {
	case field == 0 && !u.v6:
		u.csum = csumNone
	case checksum.Fold(checksum.Sum(l4[:ul], pseudo)) == 0xffff:
		u.csum = csumRight
	case field == checksum.Fold(pseudo):
		u.csum = csumPending
	default:
		u.csum = csumWrong
	}
	return u, nil
}

// ipv4HeaderChecksum is the right checksum of an IPv4 header.
func ipv4HeaderChecksum(h []byte) uint16 {
	c := make([]byte, len(h))
	copy(c, h)
	c[10], c[11] = 0, 0
	return ^checksum.Fold(checksum.Sum(c, 0))
}

// rightUDPChecksum is the right checksum of a frame's datagram.
func rightUDPChecksum(f []byte) uint16 {
	ip := f[14:]
	var pseudo uint32
	var l4 []byte
	if binary.BigEndian.Uint16(f[12:14]) == 0x0800 {
		ihl := int(ip[0]&0x0f) * 4
		pseudo, l4 = checksum.Sum(ip[12:20], 0), ip[ihl:]
	} else {
		pseudo, l4 = checksum.Sum(ip[8:40], 0), ip[40:]
	}
	ul := int(binary.BigEndian.Uint16(l4[4:6]))
	c := make([]byte, ul)
	copy(c, l4)
	c[6], c[7] = 0, 0
	s := ^checksum.Fold(checksum.Sum(c, pseudo+17+uint32(ul)))
	if s == 0 {
		return 0xffff
	}
	return s
}

// kernelTakes says whether a receiving kernel hands the datagram to a
// socket: headers that add up and a UDP checksum that is right, absent
// (IPv4) or still owed by a sender on the same machine.
func (u udpFrame) kernelTakes() bool {
	return len(u.faults) == 0 && u.csum != csumWrong
}

// difference is one way fastpath's frame is not what it must be.
type difference struct {
	kind, text string
}

// outDifferences lists how the frame fastpath sent (raw, parsed as fp)
// falls short: headers and a UDP checksum a receiving kernel would take as
// they are — complete, since a frame forwarded in XDP has no device left
// to finish it, unless the copy attached in generic mode sent it (generic):
// that one's frame is still an skb, whose pending checksum the device
// completes — and the source, TTL (hop limit), DF and TOS that scionproto's
// router sent the same datagram with (ref). SCION bytes and destination
// are compared by the caller.
func outDifferences(raw []byte, fp, ref udpFrame, generic bool) []difference {
	var d []difference
	for _, f := range fp.faults {
		d = append(d, difference{faultIPHeader, f})
	}
	field := uint16(0)
	if off := udpOffset(raw); off > 0 {
		field = binary.BigEndian.Uint16(raw[off+6:])
	}
	switch fp.csum {
	case csumNone:
		d = append(d, difference{faultUDPChecksum, "no UDP checksum (0); the reference's socket sends one"})
	case csumPending:
		if generic {
			break
		}
		d = append(d, difference{faultUDPChecksum, fmt.Sprintf("UDP checksum %#04x is the pseudo-header's sum only: still owed, and no device completes an XDP frame's", field)})
	case csumWrong:
		d = append(d, difference{faultUDPChecksum, fmt.Sprintf("UDP checksum %#04x wrong (right: %#04x)", field, rightUDPChecksum(raw))})
	}
	if fp.src != ref.src {
		d = append(d, difference{faultSource, fmt.Sprintf("sent from %s, the reference from %s", fp.src, ref.src)})
	}
	if fp.ttl != ref.ttl {
		name := "TTL"
		if fp.v6 {
			name = "hop limit"
		}
		d = append(d, difference{faultTTL, fmt.Sprintf("%s %d, the reference's %d", name, fp.ttl, ref.ttl)})
	}
	if !fp.v6 && fp.df != ref.df {
		d = append(d, difference{faultDF, fmt.Sprintf("DF %v, the reference's %v", fp.df, ref.df)})
	}
	if fp.tos != ref.tos {
		d = append(d, difference{faultTOS, fmt.Sprintf("TOS %#02x, the reference's %#02x", fp.tos, ref.tos)})
	}
	return d
}

// udpOffset is where a frame's UDP header starts (0: not IPv4 or IPv6).
func udpOffset(f []byte) int {
	switch {
	case len(f) >= 34 && binary.BigEndian.Uint16(f[12:14]) == 0x0800:
		if off := 14 + int(f[14]&0x0f)*4; len(f) >= off+8 {
			return off
		}
	case len(f) >= 62 && binary.BigEndian.Uint16(f[12:14]) == 0x86dd:
		return 54
	}
	return 0
}
