package monitor

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Filter picks events in userspace: the function copies every frame of
// the verdicts asked for (Options.Want), and the monitor leaves out those
// that do not match. Fields left zero match everything; a SCION frame
// matches an address, protocol or port by its underlay or by its SCION
// header.
type Filter struct {
	Reasons []string     // any of these reasons
	Src     netip.Prefix // source address in this prefix
	Dst     netip.Prefix // destination address in this prefix
	Proto   int          // IP protocol (or SCION next header); -1 or 0: any
	Port    int          // either port; 0: any
}

// ParseProto reads tcp, udp, icmp, icmp6, sctp or a protocol number.
func ParseProto(s string) (int, error) {
	switch strings.ToLower(s) {
	case "tcp":
		return protoTCP, nil
	case "udp":
		return protoUDP, nil
	case "icmp":
		return protoICMP, nil
	case "icmp6", "icmpv6":
		return protoICMP6, nil
	case "sctp":
		return protoSCTP, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 255 {
		return 0, fmt.Errorf("protocol %q: want tcp, udp, icmp, icmp6, sctp or a number 0-255", s)
	}
	return n, nil
}

// ParsePrefix reads a prefix or a single address.
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither an address nor a prefix", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Validate checks the port's range.
func (f Filter) Validate() error {
	if f.Port < 0 || f.Port > 65535 {
		return fmt.Errorf("port %d: want 1-65535", f.Port)
	}
	if f.Proto > 255 {
		return fmt.Errorf("protocol %d: want 0-255", f.Proto)
	}
	return nil
}

// inPrefix matches an address, IPv4 in IPv4-mapped IPv6 too.
func inPrefix(p netip.Prefix, a netip.Addr) bool {
	return a.IsValid() && (p.Contains(a) || p.Contains(a.Unmap()))
}

// Match says whether the event passes the filter.
func (f Filter) Match(e Event) bool {
	if len(f.Reasons) > 0 && !slices.Contains(f.Reasons, e.Reason) {
		return false
	}
	fl, s := e.Flow, e.Flow.SCION
	if f.Src.IsValid() && !inPrefix(f.Src, fl.Src) && (s == nil || !inPrefix(f.Src, s.Src)) {
		return false
	}
	if f.Dst.IsValid() && !inPrefix(f.Dst, fl.Dst) && (s == nil || !inPrefix(f.Dst, s.Dst)) {
		return false
	}
	if f.Proto > 0 && int(fl.Proto) != f.Proto && (s == nil || int(s.NextHdr) != f.Proto) {
		return false
	}
	if f.Port > 0 {
		p := uint16(f.Port)
		if fl.SrcPort != p && fl.DstPort != p && (s == nil || (s.SrcPort != p && s.DstPort != p)) {
			return false
		}
	}
	return true
}
