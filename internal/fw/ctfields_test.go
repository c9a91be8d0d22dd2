package fw

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"net"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/fw/ctref"
	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// A frame whose state the kernel's conntrack is known to give, and ours.
type fieldStep struct {
	what  string
	frame []byte
	// The state nftables counts it in; "none" for a frame the kernel
	// drops before conntrack sees it.
	kernel string
	// Ours, where it differs from the kernel's by design (the table in
	// docs/design/fw-conntrack.md, "Where it differs from the kernel's
	// conntrack"); "" for the kernel's.
	ours string
	// Before the frame: ours skewed by this much, the kernel's clock
	// waited on by sleep, 1.5 s unless set (its timeouts are shortened:
	// 1 s unanswered, 5 s for a GRE stream).
	skew, sleep time.Duration
}

// A field case: a short trace between a client c and a server s (r: a
// router that sends errors), on ports of its own.
type fieldCase struct {
	name   string
	family int // 4 or 6; 0 for both
	steps  func(c, s, r net.IP, p uint16) []fieldStep
}

// inetSum is the Internet checksum of b, with the pseudo-header of src,
// dst, proto and length n unless proto is 0 (ICMPv4 has none).
func inetSum(src, dst net.IP, proto uint8, n int, b []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	if proto != 0 {
		if v4 := src.To4(); v4 != nil {
			add(v4)
			add(dst.To4())
		} else {
			add(src.To16())
			add(dst.To16())
		}
		sum += uint32(proto) + uint32(n)
	}
	add(b)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// l4Frame is a frame of protocol proto carrying l4, its checksum at
// offset sumAt (-1: none) made over all of it with the pseudo-header of
// pseudo (0: none).
func l4Frame(t testing.TB, src, dst net.IP, proto layers.IPProtocol, pseudo uint8, sumAt int, l4 []byte) []byte {
	l4 = append([]byte(nil), l4...)
	if sumAt >= 0 {
		l4[sumAt], l4[sumAt+1] = 0, 0
		binary.BigEndian.PutUint16(l4[sumAt:], inetSum(src, dst, pseudo, len(l4), l4))
	}
	return ctFrame(t, src, dst, proto, gopacket.Payload(l4))
}

// udpSeg is a UDP header and payload with the length field ulen (0: the
// right one) and no checksum.
func udpSeg(sport, dport uint16, ulen int, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	if ulen == 0 {
		ulen = 8 + len(payload)
	}
	binary.BigEndian.PutUint16(b[4:], uint16(ulen))
	return append(b, payload...)
}

// udpFrame is a UDP datagram with a correct checksum.
func udpFrame(t testing.TB, src, dst net.IP, sport, dport uint16) []byte {
	return l4Frame(t, src, dst, layers.IPProtocolUDP, 17, 6, udpSeg(sport, dport, 0, []byte("hello")))
}

// icmpFrame is an ICMP (IPv4) or ICMPv6 message of type, code and the
// four bytes rest, then body, with its checksum.
func icmpFrame(t testing.TB, src, dst net.IP, typ, code uint8, rest uint32, body []byte) []byte {
	b := make([]byte, 8, 8+len(body))
	b[0], b[1] = typ, code
	binary.BigEndian.PutUint32(b[4:], rest)
	b = append(b, body...)
	if src.To4() != nil {
		return l4Frame(t, src, dst, layers.IPProtocolICMPv4, 0, 2, b)
	}
	return l4Frame(t, src, dst, layers.IPProtocolICMPv6, 58, 2, b)
}

// sctpChunk is a chunk of type and flags with value v, padded.
func sctpChunk(typ, flags uint8, v []byte) []byte {
	b := []byte{typ, flags, 0, 0}
	binary.BigEndian.PutUint16(b[2:], uint16(4+len(v)))
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// sctpInit is an INIT (or INIT ACK) chunk with initiate tag tag.
func sctpInit(typ uint8, tag uint32) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint32(v[0:], tag)
	binary.BigEndian.PutUint32(v[4:], 65536)  // a_rwnd
	binary.BigEndian.PutUint16(v[8:], 10)     // outbound streams
	binary.BigEndian.PutUint16(v[10:], 10)    // inbound streams
	binary.BigEndian.PutUint32(v[12:], tag+1) // initial TSN
	return sctpChunk(typ, 0, v)
}

// sctpData is a DATA chunk of a few bytes.
func sctpData(tsn uint32) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint32(v[0:], tsn)
	copy(v[12:], "data")
	return sctpChunk(0, 3, v)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sctpFrame is an SCTP packet with verification tag vtag and chunks, its
// CRC32c right unless badCRC.
func sctpFrame(t testing.TB, src, dst net.IP, sport, dport uint16, vtag uint32, badCRC bool, chunks ...[]byte) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], vtag)
	for _, c := range chunks {
		b = append(b, c...)
	}
	crc := crc32.Checksum(b, castagnoli)
	if badCRC {
		crc ^= 1
	}
	binary.LittleEndian.PutUint32(b[8:], crc)
	return ctFrame(t, src, dst, layers.IPProtocolSCTP, gopacket.Payload(b))
}

// greFrame is a GRE packet: version 0 with an IPv4 payload's type, or
// version 1 (PPTP's) with protocol proto and call ID call.
func greFrame(t testing.TB, src, dst net.IP, version uint8, proto, call uint16) []byte {
	b := []byte{0, version, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}
	if version == 1 {
		b[0] = 0x20                          // key present, as PPTP's header always has
		binary.BigEndian.PutUint16(b[4:], 4) // payload length
		binary.BigEndian.PutUint16(b[6:], call)
	}
	binary.BigEndian.PutUint16(b[2:], proto)
	return ctFrame(t, src, dst, layers.IPProtocolGRE, gopacket.Payload(b))
}

// ipOf is the IP packet in an Ethernet frame.
func ipOf(f []byte) []byte { return f[14:] }

// fixIPv4 sets an IPv4 frame's total length to n and its header checksum.
func fixIPv4(f []byte, n int) {
	ip := f[14:]
	binary.BigEndian.PutUint16(ip[2:], uint16(n))
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], inetSum(nil, nil, 0, 0, ip[:20]))
}

// fieldCases: per protocol, the fields Linux's trackers check.
func fieldCases(t testing.TB) []fieldCase {
	return []fieldCase{
		{name: "UDP length field", steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			u := func(what string, sport uint16, ulen int, kernel string) fieldStep {
				return fieldStep{what: what, kernel: kernel,
					frame: l4Frame(t, c, s, layers.IPProtocolUDP, 0, -1, udpSeg(sport, 53, ulen, []byte("hello")))}
			}
			return []fieldStep{
				u("length right", p, 0, ctref.New),
				u("length past the IP payload", p+1, 8+5+1, ctref.Invalid),
				u("length under the header's", p+2, 7, ctref.Invalid),
				u("length short of the IP payload (trailing bytes)", p+3, 8+2, ctref.New),
			}
		}},
		{name: "UDP-Lite coverage and checksum", steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			// The kernel checks UDP-Lite's checksum with UDP's
			// pseudo-header (protocol 17); a frame the kernel is to
			// take for good is summed so.
			u := func(what string, sport uint16, cov int, sum bool, kernel string) fieldStep {
				b := udpSeg(sport, 53, 0, []byte("hello"))
				binary.BigEndian.PutUint16(b[4:], uint16(cov))
				at := 6
				if !sum {
					at = -1
				}
				return fieldStep{what: what, kernel: kernel, frame: l4Frame(t, c, s, layers.IPProtocolUDPLite, 17, at, b)}
			}
			return []fieldStep{
				u("coverage 0 (all)", p, 0, true, ctref.New),
				u("coverage past the packet", p+1, 8+5+1, true, ctref.Invalid),
				u("coverage under the header's", p+2, 4, true, ctref.Invalid),
				u("no checksum", p+3, 0, false, ctref.Invalid),
			}
		}},
		{name: "ICMP code, and ICMP in the other family", steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			req, rep, other := uint8(8), uint8(0), layers.IPProtocolICMPv6
			if c.To4() == nil {
				req, rep, other = 128, 129, layers.IPProtocolICMPv4
			}
			echo := func(what string, from, to net.IP, typ, code uint8, id uint16, kernel string) fieldStep {
				return fieldStep{what: what, kernel: kernel, frame: icmpFrame(t, from, to, typ, code, uint32(id)<<16|1, []byte("ping"))}
			}
			// An echo request under the other family's protocol number.
			wrong := ctFrame(t, c, s, other, gopacket.Payload([]byte{8 + 120*byte(len(c.To4())/4), 0, 0, 0, byte(p >> 8), byte(p), 0, 1}))
			return []fieldStep{
				echo("echo request, code 0", c, s, req, 0, p, ctref.New),
				echo("its reply, code 0", s, c, rep, 0, p, ctref.Established),
				echo("echo request, code 1", c, s, req, 1, p+1, ctref.New),
				echo("a reply of code 0 to it (conntrack keys the code)", s, c, rep, 0, p+1, ctref.Invalid),
				{what: "the other family's ICMP echo request", frame: wrong, kernel: ctref.Invalid},
			}
		}},
		{name: "ICMPv6 multicast router discovery", family: 6, steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			mrd := func(typ uint8, kernel string) fieldStep {
				f := icmpFrame(t, c, net.ParseIP("ff02::6a"), typ, 0, 0, nil)
				f[14+7] = 1 // hop limit 1, as RFC 4286 sends them
				return fieldStep{what: fmt.Sprintf("type %d", typ), frame: f, kernel: kernel}
			}
			return []fieldStep{mrd(151, ctref.Untracked), mrd(152, ctref.Untracked), mrd(153, ctref.Invalid)}
		}},
		{name: "ICMP errors: what they quote", steps: func(c, s, r net.IP, p uint16) []fieldStep {
			v4 := c.To4() != nil
			unreach := func(to net.IP, quoted []byte) []byte {
				if v4 {
					return icmpFrame(t, r, to, 3, 1, 0, quoted)
				}
				return icmpFrame(t, r, to, 1, 3, 0, quoted)
			}
			flow := udpFrame(t, c, s, p, 53)
			q := ipOf(flow)
			noVersion := append([]byte(nil), q...)
			noVersion[0] &= 0x0f
			steps := []fieldStep{
				{what: "a UDP flow", frame: flow, kernel: ctref.New},
				{what: "an error quoting it", frame: unreach(c, q), kernel: ctref.Related},
				{what: "an error quoting it with IP version 0", frame: unreach(c, noVersion), kernel: ctref.Related},
			}
			if v4 {
				// The quoted header says: a later fragment.
				later := append([]byte(nil), q...)
				later[6], later[7] = 0, 1 // offset 8 bytes
				// Quoting the ports alone, and (the outer IP length cut)
				// less than the ports, the bytes left in the frame.
				short := unreach(c, q[:20+4])
				cut := unreach(c, q[:20+8])
				fixIPv4(cut, 20+8+20+2)
				binary.BigEndian.PutUint16(cut[14+20+2:], 0)
				binary.BigEndian.PutUint16(cut[14+20+2:], inetSum(nil, nil, 0, 0, cut[14+20:14+20+8+20+2]))
				steps = append(steps,
					fieldStep{what: "an error quoting a later fragment of it", frame: unreach(c, later), kernel: ctref.Invalid},
					fieldStep{what: "an error quoting its ports alone", frame: short, kernel: ctref.Related},
					fieldStep{what: "an error whose IP length cuts the quoted ports", frame: cut, kernel: ctref.Invalid},
				)
				return steps
			}
			// IPv6: the quoted packet with extension headers before UDP.
			withExt := func(ext ...[]byte) []byte {
				b := append([]byte(nil), q[:40]...)
				b[6] = ext[0][0]
				for i, e := range ext {
					e = append([]byte(nil), e...)
					if i+1 < len(ext) {
						e[0] = ext[i+1][0]
					} else {
						e[0] = 17
					}
					b = append(b, e...)
				}
				b = append(b, q[40:]...)
				binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
				return b
			}
			// The first byte of each is its own protocol number, replaced
			// by the next header's.
			frag0 := []byte{44, 0, 0, 1, 0, 0, 0, 7}    // offset 0, more fragments
			fragN := []byte{44, 0, 0, 0x10, 0, 0, 0, 7} // offset 2 (16 bytes)
			hop := []byte{0, 0, 1, 4, 0, 0, 0, 0}       // hop-by-hop: PadN
			steps = append(steps,
				fieldStep{what: "an error quoting it as a first fragment", frame: unreach(c, withExt(frag0)), kernel: ctref.Related},
				fieldStep{what: "an error quoting it with hop-by-hop options and a fragment header", frame: unreach(c, withExt(hop, frag0)), kernel: ctref.Related},
				fieldStep{what: "an error quoting a later fragment", frame: unreach(c, withExt(fragN)), kernel: ctref.Invalid},
			)
			return steps
		}},
		{name: "IPv6 with no next header", family: 6, steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			return []fieldStep{{what: "next header 59", frame: ctFrame(t, c, s, layers.IPProtocolNoNextHeader, gopacket.Payload([]byte("x"))), kernel: ctref.Invalid}}
		}},
		{name: "GRE: PPTP's keyed by call ID, plain GRE by addresses", steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			return []fieldStep{
				{what: "version 1, not PPP", frame: greFrame(t, c, s, 1, 0x0800, p), kernel: ctref.Invalid},
				{what: "PPTP, call ID p", frame: greFrame(t, c, s, 1, 0x880b, p), kernel: ctref.New},
				{what: "the peer's, call ID p+1", frame: greFrame(t, s, c, 1, 0x880b, p+1), kernel: ctref.New},
				{what: "PPTP again", frame: greFrame(t, c, s, 1, 0x880b, p), kernel: ctref.New},
				{what: "plain GRE", frame: greFrame(t, c, s, 0, 0x0800, 0), kernel: ctref.New},
				{what: "its reply", frame: greFrame(t, s, c, 0, 0x0800, 0), kernel: ctref.Established},
				{what: "plain GRE once its unanswered timeout passed (the reply's)", frame: greFrame(t, c, s, 0, 0x0800, 0), kernel: ctref.New, skew: 31 * time.Second},
				{what: "its reply", frame: greFrame(t, s, c, 0, 0x0800, 0), kernel: ctref.Established},
				{what: "GRE at once: a stream now", frame: greFrame(t, c, s, 0, 0x0800, 0), kernel: ctref.Established},
				{what: "GRE after more than the unanswered timeout", frame: greFrame(t, c, s, 0, 0x0800, 0), kernel: ctref.Established, skew: 60 * time.Second},
				{what: "GRE after the stream timeout", frame: greFrame(t, c, s, 0, 0x0800, 0), kernel: ctref.New, skew: 181 * time.Second, sleep: 5500 * time.Millisecond},
			}
		}},
		{name: "DCCP: no tracker of its own, by addresses alone", steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			d := func(what string, from, to net.IP, sport, dport uint16, kernel string) fieldStep {
				b := make([]byte, 16)
				binary.BigEndian.PutUint16(b[0:], sport)
				binary.BigEndian.PutUint16(b[2:], dport)
				b[4] = 4
				return fieldStep{what: what, frame: ctFrame(t, from, to, layers.IPProtocol(33), gopacket.Payload(b)), kernel: kernel}
			}
			return []fieldStep{
				d("a request", c, s, p, 5001, ctref.New),
				d("its answer", s, c, 5001, p, ctref.Established),
				d("another port pair between the same hosts", c, s, p+1, 5002, ctref.Established),
			}
		}},
		{name: "SCTP chunks and verification tags", steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			f := func(what string, from, to net.IP, sport, dport uint16, vtag uint32, kernel string, chunks ...[]byte) fieldStep {
				return fieldStep{what: what, frame: sctpFrame(t, from, to, sport, dport, vtag, false, chunks...), kernel: kernel}
			}
			const ct, st = 0x11111111, 0x22222222 // the client's and server's tags
			return []fieldStep{
				f("INIT", c, s, p, 9, 0, ctref.New, sctpInit(1, ct)),
				f("INIT ACK", s, c, 9, p, ct, ctref.Established, sctpInit(2, st)),
				f("COOKIE ECHO", c, s, p, 9, st, ctref.Established, sctpChunk(10, 0, []byte("cookie!!"))),
				f("COOKIE ACK", s, c, 9, p, ct, ctref.Established, sctpChunk(11, 0, nil)),
				f("DATA", c, s, p, 9, st, ctref.Established, sctpData(ct+1)),
				f("DATA of no association", c, s, p+1, 9, st, ctref.Invalid, sctpData(1)),
				f("INIT with a verification tag", c, s, p+2, 9, 5, ctref.Invalid, sctpInit(1, ct)),
				f("ABORT of no association", c, s, p+3, 9, st, ctref.Invalid, sctpChunk(6, 0, nil)),
				f("no chunks", c, s, p+4, 9, 0, ctref.Invalid),
				f("INIT bundled with DATA", c, s, p+5, 9, 0, ctref.Invalid, sctpInit(1, ct), sctpData(1)),
				f("a chunk of length 0", c, s, p+6, 9, 0, ctref.Invalid, []byte{1, 0, 0, 0}),
				f("COOKIE ECHO not first", c, s, p, 9, st, ctref.Invalid, sctpData(ct+2), sctpChunk(10, 0, []byte("cookie!!"))),
				{what: "DATA with a wrong tag", frame: sctpFrame(t, c, s, p, 9, 0x33333333, false, sctpData(ct+3)), kernel: ctref.Invalid, ours: ctref.Established},
				{what: "DATA with a bad CRC", frame: sctpFrame(t, c, s, p, 9, st, true, sctpData(ct+4)), kernel: ctref.Invalid, ours: ctref.Established},
			}
		}},
		{name: "checksums", steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			bad := func(f []byte, at int) []byte {
				f[at] ^= 0xff
				return f
			}
			l4 := 14 + 20
			if c.To4() == nil {
				l4 = 14 + 40
			}
			typ := uint8(8)
			if c.To4() == nil {
				typ = 128
			}
			return []fieldStep{
				{what: "UDP", frame: bad(udpFrame(t, c, s, p, 53), l4+6), kernel: ctref.Invalid, ours: ctref.New},
				{what: "TCP SYN", frame: bad(ctFrame(t, c, s, layers.IPProtocolTCP, seg{sport: p, dport: 80, seq: 1, flags: "S"}.layers()...), l4+16), kernel: ctref.Invalid, ours: ctref.New},
				{what: "ICMP echo request", frame: bad(icmpFrame(t, c, s, typ, 0, uint32(p)<<16|1, []byte("ping")), l4+2), kernel: ctref.Invalid, ours: ctref.New},
			}
		}},
		{name: "headers cut short", steps: func(c, s, _ net.IP, p uint16) []fieldStep {
			return []fieldStep{
				// Ethernet pads the frame: its ports would be read from the pad.
				{what: "UDP of 2 bytes", frame: ctFrame(t, c, s, layers.IPProtocolUDP, gopacket.Payload([]byte{0x10, 0x00})), kernel: ctref.Invalid},
				{what: "TCP of 16 bytes", frame: ctFrame(t, c, s, layers.IPProtocolTCP, gopacket.Payload(make([]byte, 16))), kernel: ctref.Invalid},
				{what: "ICMP of 4 bytes", frame: ctFrame(t, c, s, map[bool]layers.IPProtocol{true: layers.IPProtocolICMPv4, false: layers.IPProtocolICMPv6}[c.To4() != nil], gopacket.Payload([]byte{8, 0, 0, 0})), kernel: ctref.Invalid},
			}
		}},
	}
}

// TestCtFieldsAgainstKernel sends each field case through the kernel's
// conntrack (ctref) and the firewall: the kernel's state must be the one
// the case says, and ours the kernel's, or the documented one where ours
// differs by design.
func TestCtFieldsAgainstKernel(t *testing.T) {
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	b := make([]byte, 2)
	rand.Read(b)
	ref, err := ctref.Open("fp-ctf" + hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for k, v := range map[string]string{
		"net/netfilter/nf_conntrack_gre_timeout":        "1",
		"net/netfilter/nf_conntrack_gre_timeout_stream": "5",
	} {
		if err := ref.Sysctl(k, v); err != nil {
			t.Fatal(err)
		}
	}
	f := ctFirewall(t, "[conntrack]\nenabled = true\n")
	fams := traceFamilies
	port := uint16(30000)
	for _, fc := range fieldCases(t) {
		for _, fm := range fams {
			if fc.family != 0 && fc.family != fm.fam {
				continue
			}
			port += 100
			for i, st := range fc.steps(fm.c, fm.s, fm.r, port) {
				if st.skew != 0 {
					if st.sleep == 0 {
						st.sleep = 1500 * time.Millisecond
					}
					time.Sleep(st.sleep)
					skewClock(t, f, st.skew)
				}
				kernel, err := ref.Send(st.frame)
				if err != nil {
					kernel = "none"
				}
				if kernel != st.kernel {
					t.Errorf("IPv%d %s, step %d (%s): the kernel says %s, the case %s", fm.fam, fc.name, i+1, st.what, kernel, st.kernel)
				}
				want := st.ours
				if want == "" {
					want = st.kernel
				}
				if got, _ := ctStateOf(t, f, st.frame); got != want {
					t.Errorf("IPv%d %s, step %d (%s): %s, want %s (the kernel: %s)", fm.fam, fc.name, i+1, st.what, got, want, kernel)
				}
			}
		}
	}
}
