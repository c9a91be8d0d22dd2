package lab

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/fastpath-dev/fastpath/internal/checksum"
)

// flowTemplate is a packet prepared for flood mode: its source address moved
// into FlowSrc, and where the generator's program finds the fields it varies.
type flowTemplate struct {
	pkt          []byte
	l3, l4, csum uint16
	family       uint8
	proto        uint8
	hostMask     uint32 // bits of the address's low 32 that vary, host order
	hostBits     int
}

// flowTemplates checks that every packet can be a flood template (UDP or TCP
// over IPv4 or IPv6, no IPv6 extension headers, all of one family) and moves
// its source address into src, with its checksums made right for it.
func flowTemplates(pkts [][]byte, src netip.Prefix) ([]flowTemplate, error) {
	out := make([]flowTemplate, len(pkts))
	for i, p := range pkts {
		t, err := flowTemplateOf(p, src)
		if err != nil {
			return nil, fmt.Errorf("--flows: packet %d: %w", i+1, err)
		}
		if i > 0 && t.family != out[0].family {
			return nil, fmt.Errorf("--flows: packet %d is IPv%d, packet 1 IPv%d: flood templates are of one family", i+1, t.family, out[0].family)
		}
		out[i] = t
	}
	return out, nil
}

func flowTemplateOf(p []byte, src netip.Prefix) (flowTemplate, error) {
	t := flowTemplate{pkt: append([]byte(nil), p...), l3: 14}
	if len(p) < 14 {
		return t, fmt.Errorf("shorter than an Ethernet header")
	}
	var addrOff, addrLen int
	switch binary.BigEndian.Uint16(p[12:]) {
	case 0x0800:
		if len(p) < 34 {
			return t, fmt.Errorf("truncated IPv4 header")
		}
		ihl := int(p[14]&0xf) * 4
		if ihl < 20 || len(p) < 14+ihl {
			return t, fmt.Errorf("bad IPv4 header length %d", ihl)
		}
		if binary.BigEndian.Uint16(p[20:])&0x3fff != 0 {
			return t, fmt.Errorf("an IPv4 fragment cannot be a flood template")
		}
		t.family, t.proto, t.l4 = 4, p[23], uint16(14+ihl)
		addrOff, addrLen = 26, 4
	case 0x86dd:
		if len(p) < 54 {
			return t, fmt.Errorf("truncated IPv6 header")
		}
		t.family, t.proto, t.l4 = 6, p[20], 54
		addrOff, addrLen = 22, 16
	default:
		return t, fmt.Errorf("not IPv4 or IPv6 (EtherType %#04x)", binary.BigEndian.Uint16(p[12:]))
	}
	switch t.proto {
	case 17:
		t.csum = t.l4 + 6
	case 6:
		t.csum = t.l4 + 16
	default:
		return t, fmt.Errorf("protocol %d: flood templates are UDP or TCP", t.proto)
	}
	if len(p) < int(t.csum)+2 {
		return t, fmt.Errorf("truncated L4 header")
	}
	if src.IsValid() {
		if (src.Addr().Is4() && t.family != 4) || (src.Addr().Is6() && t.family != 6) {
			return t, fmt.Errorf("flow source %s is not of the packet's family (IPv%d)", src, t.family)
		}
		src = src.Masked()
		a := src.Addr().AsSlice()
		copy(t.pkt[addrOff:addrOff+addrLen], a)
		// Bits of the low 32 that the prefix leaves free.
		t.hostBits = min(addrLen*8-src.Bits(), 32)
	}
	if t.hostBits == 32 {
		t.hostMask = 0xffffffff
	} else {
		t.hostMask = 1<<t.hostBits - 1
	}
	fixChecksums(t.pkt, t)
	return t, nil
}

// fixChecksums recomputes the IPv4 header checksum and the L4 checksum of a
// template whose address changed. A zero UDP checksum over IPv4 (none) stays.
func fixChecksums(p []byte, t flowTemplate) {
	var pseudo uint32
	l4len := len(p) - int(t.l4)
	if t.family == 4 {
		ihl := int(t.l4) - 14
		l4len = int(binary.BigEndian.Uint16(p[16:])) - ihl
		p[24], p[25] = 0, 0
		binary.BigEndian.PutUint16(p[24:], ^checksum.Fold(checksum.Sum(p[14:14+ihl], 0)))
		pseudo = checksum.Sum(p[26:34], 0)
	} else {
		l4len = int(binary.BigEndian.Uint16(p[18:]))
		pseudo = checksum.Sum(p[22:54], 0)
	}
	if t.family == 4 && t.proto == 17 && binary.BigEndian.Uint16(p[t.csum:]) == 0 {
		return
	}
	if l4len < 0 || int(t.l4)+l4len > len(p) {
		return
	}
	pseudo += uint32(t.proto) + uint32(l4len)
	p[t.csum], p[t.csum+1] = 0, 0
	c := ^checksum.Fold(checksum.Sum(p[t.l4:int(t.l4)+l4len], pseudo))
	if c == 0 && t.proto == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(p[t.csum:], c)
}
