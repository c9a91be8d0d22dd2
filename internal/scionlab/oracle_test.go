package scionlab

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/checksum"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// underlaySpec is what a sender puts in front of a datagram; frame builds
// it, right in every field it does not set otherwise.
type underlaySpec struct {
	src, dst netip.AddrPort
	ttl, tos uint8
	df       bool
	payload  []byte
	// After the frame is built: the UDP checksum field replaced
	// (csumSet), bytes added after the datagram.
	csum     uint16
	csumSet  bool
	trailing int
}

// rightSpec is a datagram as scionproto's router sends it from a socket
// of the family of src: TTL (hop limit) 64, DF, TOS 0.
func rightSpec(v6 bool) underlaySpec {
	s := underlaySpec{
		src: netip.MustParseAddrPort("10.255.1.1:50000"), dst: netip.MustParseAddrPort("10.255.1.2:50000"),
		ttl: 64, df: true, payload: make([]byte, 333),
	}
	if v6 {
		s.src, s.dst = netip.MustParseAddrPort("[fd00:5c10:1:1::1]:50000"), netip.MustParseAddrPort("[fd00:5c10:1:1::2]:50000")
	}
	for i := range s.payload {
		s.payload[i] = byte(i * 7)
	}
	return s
}

func (s underlaySpec) frame() []byte {
	udp := make([]byte, 8+len(s.payload))
	binary.BigEndian.PutUint16(udp[0:], s.src.Port())
	binary.BigEndian.PutUint16(udp[2:], s.dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], s.payload)
	src, dst := s.src.Addr().AsSlice(), s.dst.Addr().AsSlice()
	pseudo := checksum.Sum(dst, checksum.Sum(src, 0)) + 17 + uint32(len(udp))
	c := ^checksum.Fold(checksum.Sum(udp, pseudo))
	if c == 0 {
		c = 0xffff
	}
	if s.csumSet {
		c = s.csum
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	f := make([]byte, 14)
	if s.src.Addr().Is4() {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip := make([]byte, 20)
		ip[0], ip[1] = 0x45, s.tos
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		if s.df {
			ip[6] = 0x40
		}
		ip[8], ip[9] = s.ttl, 17
		copy(ip[12:], src)
		copy(ip[16:], dst)
		binary.BigEndian.PutUint16(ip[10:], ^checksum.Fold(checksum.Sum(ip, 0)))
		f = append(f, ip...)
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
		ip := make([]byte, 40)
		binary.BigEndian.PutUint16(ip[0:], 0x6000|uint16(s.tos)<<4)
		binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
		ip[6], ip[7] = 17, s.ttl
		copy(ip[8:], src)
		copy(ip[24:], dst)
		f = append(f, ip...)
	}
	return append(append(f, udp...), make([]byte, s.trailing)...)
}

// pseudoSum is the folded pseudo-header sum of the spec's datagram: the
// field of a checksum still owed.
func (s underlaySpec) pseudoSum() uint16 {
	src, dst := s.src.Addr().AsSlice(), s.dst.Addr().AsSlice()
	return checksum.Fold(checksum.Sum(dst, checksum.Sum(src, 0)) + 17 + uint32(8+len(s.payload)))
}

// The oracle checks each frame fastpath sent for what the SCION bytes do
// not show: a UDP checksum a receiving kernel takes as it is, an IP
// header whose checksum and lengths add up with the frame, and the
// source, TTL (hop limit), DF and TOS scionproto's router sends with.
func TestOracleChecksTheUnderlay(t *testing.T) {
	cases := map[string]struct {
		v6      bool
		generic bool                  // sent by the copy attached in generic mode
		edit    func(s *underlaySpec) // fastpath's frame
		raw     func(f []byte)        // its bytes, after the build
		want    []string              // kinds of difference
		text    string                // in the example line
	}{
		"right, IPv4": {},
		"right, IPv6": {v6: true},
		"UDP checksum wrong, IPv4": {
			edit: func(s *underlaySpec) { s.csum, s.csumSet = 0x1234, true },
			want: []string{faultUDPChecksum}, text: "UDP checksum 0x1234 wrong (right: ",
		},
		"UDP checksum wrong, IPv6": {
			v6:   true,
			edit: func(s *underlaySpec) { s.csum, s.csumSet = 0x1234, true },
			want: []string{faultUDPChecksum}, text: "UDP checksum 0x1234 wrong",
		},
		"UDP checksum still owed": {
			edit: func(s *underlaySpec) { s.csum, s.csumSet = s.pseudoSum(), true },
			want: []string{faultUDPChecksum}, text: "pseudo-header's sum only",
		},
		// The generic copy's frame is an skb the device still completes.
		"UDP checksum owed, by the generic copy": {
			generic: true,
			edit:    func(s *underlaySpec) { s.csum, s.csumSet = s.pseudoSum(), true },
		},
		"UDP checksum wrong, by the generic copy": {
			generic: true,
			edit:    func(s *underlaySpec) { s.csum, s.csumSet = 0x1234, true },
			want:    []string{faultUDPChecksum}, text: "UDP checksum 0x1234 wrong",
		},
		"no UDP checksum, IPv4": {
			edit: func(s *underlaySpec) { s.csum, s.csumSet = 0, true },
			want: []string{faultUDPChecksum}, text: "no UDP checksum",
		},
		"IPv4 header checksum wrong": {
			raw:  func(f []byte) { f[14+10] ^= 0x01 },
			want: []string{faultIPHeader}, text: "IPv4 header checksum",
		},
		"frame longer than its IPv4 packet": {
			edit: func(s *underlaySpec) { s.trailing = 4 },
			want: []string{faultIPHeader}, text: "IPv4 total length 361 in a frame of 379 B",
		},
		"frame longer than its IPv6 packet": {
			v6:   true,
			edit: func(s *underlaySpec) { s.trailing = 4 },
			want: []string{faultIPHeader}, text: "IPv6 payload length 341 in a frame of 399 B",
		},
		"UDP length short of the IP payload": {
			raw: func(f []byte) {
				binary.BigEndian.PutUint16(f[34+4:], 8+300)
			},
			want: []string{faultIPHeader, faultUDPChecksum}, text: "UDP length 308, IP payload 341 B",
		},
		"an IPv4 fragment": {
			raw: func(f []byte) {
				f[14+6] |= 0x20 // more fragments
				binary.BigEndian.PutUint16(f[14+10:], 0)
				binary.BigEndian.PutUint16(f[14+10:], ^checksum.Fold(checksum.Sum(f[14:34], 0)))
			},
			want: []string{faultIPHeader}, text: "an IPv4 fragment",
		},
		"another source port": {
			edit: func(s *underlaySpec) { s.src = netip.AddrPortFrom(s.src.Addr(), 50001) },
			want: []string{faultSource}, text: "sent from 10.255.1.1:50001, the reference from 10.255.1.1:50000",
		},
		"another source address, IPv6": {
			v6:   true,
			edit: func(s *underlaySpec) { s.src = netip.MustParseAddrPort("[fd00:5c10:1:1::9]:50000") },
			want: []string{faultSource}, text: "sent from [fd00:5c10:1:1::9]:50000",
		},
		"TTL": {
			edit: func(s *underlaySpec) { s.ttl = 63 },
			want: []string{faultTTL}, text: "TTL 63, the reference's 64",
		},
		"hop limit": {
			v6:   true,
			edit: func(s *underlaySpec) { s.ttl = 1 },
			want: []string{faultTTL}, text: "hop limit 1, the reference's 64",
		},
		"DF clear": {
			edit: func(s *underlaySpec) { s.df = false },
			want: []string{faultDF}, text: "DF false, the reference's true",
		},
		"TOS": {
			edit: func(s *underlaySpec) { s.tos = 0xb8 },
			want: []string{faultTOS}, text: "TOS 0xb8",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ref := rightSpec(c.v6)
			fp := ref
			if c.edit != nil {
				c.edit(&fp)
			}
			raw := fp.frame()
			if c.raw != nil {
				c.raw(raw)
			}
			fpFrame, err := parseUDPFrame(raw)
			if err != nil {
				t.Fatal(err)
			}
			refFrame, err := parseUDPFrame(ref.frame())
			if err != nil {
				t.Fatal(err)
			}
			diffs := outDifferences(raw, fpFrame, refFrame, c.generic)
			var kinds, texts []string
			for _, d := range diffs {
				kinds = append(kinds, d.kind)
				texts = append(texts, d.text)
			}
			slices.Sort(kinds)
			want := slices.Sorted(slices.Values(c.want))
			if !slices.Equal(kinds, want) {
				t.Fatalf("differences %q, want kinds %q", texts, want)
			}
			if c.text != "" && !strings.Contains(strings.Join(texts, "; "), c.text) {
				t.Fatalf("differences %q, want one saying %q", texts, c.text)
			}
		})
	}
}

// A frame fastpath dropped is replayed only if the reference's kernel
// would hand it to a socket: a wrong checksum or broken header is dropped
// before any router sees it, a checksum still owed or absent (IPv4) is
// not.
func TestOracleReplaysOnlyWhatAKernelTakes(t *testing.T) {
	cases := map[string]struct {
		v6    bool
		edit  func(s *underlaySpec)
		raw   func(f []byte)
		takes bool
	}{
		"right":                      {takes: true},
		"right, IPv6":                {v6: true, takes: true},
		"checksum still owed":        {edit: func(s *underlaySpec) { s.csum, s.csumSet = s.pseudoSum(), true }, takes: true},
		"no checksum, IPv4":          {edit: func(s *underlaySpec) { s.csum, s.csumSet = 0, true }, takes: true},
		"zero checksum, IPv6":        {v6: true, edit: func(s *underlaySpec) { s.csum, s.csumSet = 0, true }},
		"checksum wrong":             {edit: func(s *underlaySpec) { s.csum, s.csumSet = 0x1234, true }},
		"IPv4 header checksum wrong": {raw: func(f []byte) { f[14+10] ^= 0x01 }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := rightSpec(c.v6)
			if c.edit != nil {
				c.edit(&s)
			}
			raw := s.frame()
			if c.raw != nil {
				c.raw(raw)
			}
			u, err := parseUDPFrame(raw)
			if err != nil {
				t.Fatal(err)
			}
			if u.kernelTakes() != c.takes {
				t.Fatalf("kernelTakes %v, want %v (checksum state %d, faults %q)", u.kernelTakes(), c.takes, u.csum, u.faults)
			}
		})
	}
}

// replayTampered replays what router k of AS a forwarded, three frames
// changed: one byte of the first's SCION bytes (its checksum no longer
// right either), the second's UDP checksum, and the third turned into a
// frame fastpath dropped. The oracle must report all three and agree on
// the rest.
func replayTampered(t *testing.T, n Network, a AS, k int, links []Link, frames []br.TapFrame) OracleReplay {
	t.Helper()
	var fwd []br.TapFrame
	for _, f := range frames {
		if !f.Dropped() {
			fwd = append(fwd, f)
		}
	}
	if len(fwd) < 3 {
		t.Fatalf("%d frames forwarded in XDP, want at least 3 to change", len(fwd))
	}
	fwd[0].Out = slices.Clone(fwd[0].Out)
	fwd[0].Out[len(fwd[0].Out)-1] ^= 0x01
	fwd[1].Out = slices.Clone(fwd[1].Out)
	off := udpOffset(fwd[1].Out)
	fwd[1].Out[off+6] ^= 0x01
	fwd[2] = br.TapFrame{In: fwd[2].In, Verdict: "parse_error"}
	res, err := n.replay(a, k, links, fwd, br.TapMissed{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if res.Differ != 2 || res.Same != len(fwd)-3 || res.Dropped != 0 || res.Drops != 1 || res.DropsSent != 1 ||
		res.Faults[faultSCION] != 1 || res.Faults[faultUDPChecksum] != 2 || len(res.Faults) != 2 {
		t.Fatalf("three frames changed: %s", res)
	}
	if !strings.Contains(res.String(), "fastpath dropped it (parse_error), the reference sent") ||
		!strings.Contains(res.String(), "UDP checksum 0x") {
		t.Fatalf("the examples do not say what changed: %s", res)
	}
	return res
}

// On a network of MTU 9000 in hybrid mode, check replays what every
// fastpath router forwarded during it — the echoes of the path's MTU in
// jumbo frames of several buffers included, which the tap once left out —
// and scionproto's router agrees on each frame's SCION bytes, destination
// and underlay. Frames changed after the fact, and one turned into a drop,
// are reported. It runs on each release the tests cover: the network's
// routers and the oracle's reference are that release's, and so is what
// fastpath is configured to do (from v0.14.0 the paths say 8,488 bytes, the
// most its router reads whole).
func TestOracleOnAJumboNetwork(t *testing.T) {
	vs, err := scionproto.ToTest()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Run(v, func(t *testing.T) { oracleOnAJumboNetwork(t, v) })
	}
}

func oracleOnAJumboNetwork(t *testing.T, version string) {
	n, as := testNetwork(t, UpOptions{Hybrid: true, MTU: 9000, Version: version})
	st, err := n.running()
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	replays, err := n.checkDefault(context.Background(), st, &log)
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(replays) != len(as) {
		t.Fatalf("%d routers replayed, want %d", len(replays), len(as))
	}
	for _, r := range replays {
		// Three echoes of each size, each request and reply crossing every
		// router once.
		if !r.OK() || r.Frames < 12 || r.Largest <= 8000 || r.Long != 0 || r.Lost != 0 || r.Unseen != 0 {
			t.Fatalf("want every frame the same, at least 12 of them and jumbo ones among them: %s", r)
		}
	}

	_, links, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	leaf := as[1]
	taps, err := openTaps([]AS{leaf})
	if err != nil {
		t.Fatal(err)
	}
	dst := as[len(as)-1]
	n.ping(context.Background(), leaf, fmt.Sprintf("%s,%s", dst.IA, dst.Host), "", 3, 0)
	tap := taps[HybridName(leaf)]
	frames, _ := tap.Frames()
	tap.Close()
	replayTampered(t, n, leaf, 0, links, frames)
}
