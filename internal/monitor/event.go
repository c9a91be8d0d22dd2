package monitor

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Event is one frame a function dropped or passed up, as the monitor shows
// it.
type Event struct {
	Time      time.Time `json:"time"`
	Function  string    `json:"function"`
	Name      string    `json:"name"`
	Device    string    `json:"device"`
	Verdict   Verdict   `json:"verdict"`
	Reason    string    `json:"reason"`
	Rule      string    `json:"rule,omitempty"`
	Direction string    `json:"direction,omitempty"`
	Len       int       `json:"len"`
	Flow      Flow      `json:"flow"`
	Data      []byte    `json:"-"` // what was kept of the frame
}

// Flow is what the monitor reads of a frame's headers.
type Flow struct {
	EtherType uint16     `json:"ethertype"`
	Src       netip.Addr `json:"src,omitzero"`
	Dst       netip.Addr `json:"dst,omitzero"`
	Proto     uint8      `json:"proto,omitempty"`
	SrcPort   uint16     `json:"sport,omitempty"`
	DstPort   uint16     `json:"dport,omitempty"`
	// SCION, when the UDP payload is a SCION packet (br, tra).
	SCION *SCION `json:"scion,omitempty"`
}

// SCION is what the monitor reads of a SCION header.
type SCION struct {
	SrcIA    string     `json:"src_ia"`
	DstIA    string     `json:"dst_ia"`
	Src      netip.Addr `json:"src,omitzero"`
	Dst      netip.Addr `json:"dst,omitzero"`
	NextHdr  uint8      `json:"next_hdr"`
	SrcPort  uint16     `json:"sport,omitempty"`
	DstPort  uint16     `json:"dport,omitempty"`
	PathType uint8      `json:"path_type"`
	// The standard path's position: the current info and hop field, and
	// the hop fields in all.
	CurrINF int `json:"curr_inf"`
	CurrHF  int `json:"curr_hf"`
	Hops    int `json:"hops"`
}

// NewEvent makes an Event of a Raw, reading the frame's headers.
func NewEvent(function, name, device string, r Raw, t time.Time) Event {
	return Event{
		Time: t, Function: function, Name: name, Device: device, Verdict: r.Verdict, Reason: r.Reason,
		Rule: r.Rule, Direction: r.Direction, Len: r.Len, Flow: ParseFlow(r.Data, function == "br" || function == "tra"), Data: r.Data,
	}
}

const (
	etherIPv4  = 0x0800
	etherIPv6  = 0x86dd
	etherVLAN  = 0x8100
	etherQinQ  = 0x88a8
	protoTCP   = 6
	protoUDP   = 17
	protoSCTP  = 132
	protoICMP  = 1
	protoICMP6 = 58
)

// ParseFlow reads an Ethernet frame's addresses, protocol and ports, and a
// SCION header inside UDP when scion is set. What is cut short stays zero.
func ParseFlow(b []byte, scion bool) Flow {
	var f Flow
	if len(b) < 14 {
		return f
	}
	et := binary.BigEndian.Uint16(b[12:])
	b = b[14:]
	for i := 0; i < 2 && (et == etherVLAN || et == etherQinQ) && len(b) >= 4; i++ {
		et = binary.BigEndian.Uint16(b[2:])
		b = b[4:]
	}
	f.EtherType = et
	var l4 []byte
	switch et {
	case etherIPv4:
		if len(b) < 20 || b[0]>>4 != 4 {
			return f
		}
		ihl := int(b[0]&0xf) * 4
		f.Src = netip.AddrFrom4([4]byte(b[12:16]))
		f.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		f.Proto = b[9]
		if binary.BigEndian.Uint16(b[6:])&0x1fff != 0 || ihl < 20 || len(b) < ihl {
			return f // a later fragment: no ports
		}
		l4 = b[ihl:]
	case etherIPv6:
		if len(b) < 40 {
			return f
		}
		f.Src = netip.AddrFrom16([16]byte(b[8:24]))
		f.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		f.Proto = b[6]
		l4 = b[40:]
	default:
		return f
	}
	switch f.Proto {
	case protoTCP, protoUDP, protoSCTP:
		if len(l4) >= 4 {
			f.SrcPort = binary.BigEndian.Uint16(l4)
			f.DstPort = binary.BigEndian.Uint16(l4[2:])
		}
	}
	if scion && f.Proto == protoUDP && len(l4) > 8 {
		f.SCION = parseSCION(l4[8:])
	}
	return f
}

// parseSCION reads a SCION common and address header, and a standard path's
// meta header: nil if it is no plausible SCION header.
func parseSCION(b []byte) *SCION {
	if len(b) < 12+16 || b[0]>>4 != 0 {
		return nil
	}
	hdrLen := int(b[5]) * 4
	dl, sl := 4*(int(b[9]>>4&3)+1), 4*(int(b[9]&3)+1)
	if hdrLen < 12+16+dl+sl {
		return nil
	}
	s := &SCION{NextHdr: b[4], PathType: b[8]}
	s.DstIA = FormatIA(binary.BigEndian.Uint64(b[12:]))
	s.SrcIA = FormatIA(binary.BigEndian.Uint64(b[20:]))
	off := 28
	if len(b) >= off+dl+sl {
		s.Dst = hostAddr(b[off : off+dl])
		s.Src = hostAddr(b[off+dl : off+dl+sl])
	}
	off += dl + sl
	if s.PathType == 1 && len(b) >= off+4 {
		m := binary.BigEndian.Uint32(b[off:])
		s.CurrINF = int(m >> 30)
		s.CurrHF = int(m >> 24 & 0x3f)
		s.Hops = int(m>>12&0x3f) + int(m>>6&0x3f) + int(m&0x3f)
	}
	if (s.NextHdr == protoUDP || s.NextHdr == protoTCP) && len(b) >= hdrLen+4 {
		s.SrcPort = binary.BigEndian.Uint16(b[hdrLen:])
		s.DstPort = binary.BigEndian.Uint16(b[hdrLen+2:])
	}
	return s
}

func hostAddr(b []byte) netip.Addr {
	switch len(b) {
	case 4:
		return netip.AddrFrom4([4]byte(b))
	case 16:
		return netip.AddrFrom16([16]byte(b))
	}
	return netip.Addr{}
}

// FormatIA writes an ISD-AS as SCION does: 1-ff00:0:110, or 1-64512 for an
// AS number of BGP's range.
func FormatIA(ia uint64) string {
	isd, as := ia>>48, ia&(1<<48-1)
	if as < 1<<32 {
		return fmt.Sprintf("%d-%d", isd, as)
	}
	return fmt.Sprintf("%d-%x:%x:%x", isd, as>>32, as>>16&0xffff, as&0xffff)
}

// ProtoName names an IP protocol number.
func ProtoName(p uint8) string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case protoICMP:
		return "icmp"
	case protoICMP6:
		return "icmp6"
	case protoSCTP:
		return "sctp"
	case 202:
		return "scmp" // SCION's next header for SCMP
	}
	return fmt.Sprintf("proto-%d", p)
}

func endpoint(a netip.Addr, port uint16) string {
	if port == 0 {
		return a.String()
	}
	return netip.AddrPortFrom(a, port).String()
}

// String is the event's line: time, function, device, verdict, reason, flow,
// length.
func (e Event) String() string {
	var s strings.Builder
	dev := e.Device
	if dev == "" {
		dev = "-"
	}
	fmt.Fprintf(&s, "%s %s %s %s %s", e.Time.Format("15:04:05.000000"), e.Function, dev, e.Verdict, e.Reason)
	if e.Rule != "" && e.Rule != "default" {
		fmt.Fprintf(&s, " rule=%s", e.Rule)
	}
	s.WriteString(" ")
	s.WriteString(e.Flow.String())
	fmt.Fprintf(&s, " len %d", e.Len)
	return s.String()
}

// String writes the flow as tcpdump would, with the SCION header after the
// underlay.
func (f Flow) String() string {
	switch {
	case f.Src.IsValid():
		s := fmt.Sprintf("%s %s > %s", ProtoName(f.Proto), endpoint(f.Src, f.SrcPort), endpoint(f.Dst, f.DstPort))
		if c := f.SCION; c != nil {
			s += fmt.Sprintf(" scion %s,%s > %s,%s %s", c.SrcIA, endpoint(c.Src, c.SrcPort), c.DstIA, endpoint(c.Dst, c.DstPort), ProtoName(c.NextHdr))
			if c.PathType == 1 {
				s += fmt.Sprintf(" hop %d/%d inf %d", c.CurrHF, c.Hops, c.CurrINF)
			} else {
				s += fmt.Sprintf(" path-type %d", c.PathType)
			}
		}
		return s
	case f.EtherType != 0:
		return fmt.Sprintf("ethertype 0x%04x", f.EtherType)
	}
	return "short frame"
}
