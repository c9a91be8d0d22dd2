package tra

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/snet"
)

// Path MTUs the translator cannot use: the daemon refuses them, and the
// programs never compute a Packet Too Big or an MSS from one that wrapped.

// installUnchecked installs paths as they are, past the control plane's
// checks (Path.dataPlane): what another writer of the maps could leave,
// for what the programs do with it.
func (m *pathMaps) installUnchecked(ia addr.IA, slot uint32, paths []Path) error {
	d := translatorTraDest{Ia: beIA(ia), N: uint32(len(paths)), Slot: slot % uint32(MaxDests)}
	for i, p := range paths {
		v, err := p.encode(ia)
		if err != nil {
			return err
		}
		d.Paths[i] = v
	}
	return m.put(ia, d)
}

// A path without an MTU (scionproto's daemon gave no metadata) or with one
// too small for a 1,280-byte IPv6 packet with its SCION header is refused
// when converted, and another taken.
func TestToPathsRefusesUnusableMTU(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	p1 := testSCIONPath(t, remoteIA, viaLink1, 1, exp)
	p2 := testSCIONPath(t, remoteIA, viaLink2, 2, exp)
	need := uint16(minPathMTU(len(rawOf(p1)))) // 1,240 of IPv6 payload, 36 of SCION's common and address headers, the path
	if need != 1280-40+12+16+4+4+uint16(len(rawOf(p1))) {
		t.Fatalf("minPathMTU %d", need)
	}
	cases := map[string]struct {
		in   []snet.Path
		want []uint16 // the MTUs taken; none: refused
	}{
		"MTU 0 (no metadata)":        {[]snet.Path{withMTU(p1, 0)}, nil},
		"MTU 1300":                   {[]snet.Path{withMTU(p1, 1300)}, nil},
		"one byte short":             {[]snet.Path{withMTU(p1, need-1)}, nil},
		"just enough":                {[]snet.Path{withMTU(p1, need)}, []uint16{need}},
		"another path taken":         {[]snet.Path{withMTU(p1, 0), withMTU(p2, 1472)}, []uint16{1472}},
		"the small one left out":     {[]snet.Path{withMTU(p1, 1472), withMTU(p2, 1300)}, []uint16{1472}},
		"both refused, both counted": {[]snet.Path{withMTU(p1, 0), withMTU(p2, 1300)}, nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := toPaths(c.in)
			if c.want == nil {
				if !errors.Is(err, ErrPathMTU) || len(got) != 0 {
					t.Fatalf("paths %+v, error %v; want refused for their MTU", got, err)
				}
				return
			}
			if err != nil || len(got) != len(c.want) {
				t.Fatalf("paths %+v, error %v; want MTUs %v", got, err, c.want)
			}
			for i, p := range got {
				if p.MTU != c.want[i] {
					t.Fatalf("path %d: MTU %d, want %d", i, p.MTU, c.want[i])
				}
			}
		})
	}
	// The data plane refuses them too, whoever installs them.
	for _, mtu := range []uint16{0, 1300} {
		p := Path{Raw: rawOf(p1), MTU: mtu, NextHop: routerAddr}
		if _, err := p.dataPlane(remoteIA); !errors.Is(err, ErrPathMTU) {
			t.Fatalf("a path of MTU %d for the data plane: %v, want refused", mtu, err)
		}
	}
}

// A destination whose every path is such has none: the usual failed
// lookup (the host hears no route at once), the paths counted refused.
func TestOnlyUnusablePathsMeanNoPath(t *testing.T) {
	td := newTestDaemon(t, 2, Limits{})
	exp := td.clock.Add(time.Hour)
	td.src.paths[remoteIA] = []snet.Path{withMTU(testSCIONPath(t, remoteIA, viaLink1, 1, exp), 0), withMTU(testSCIONPath(t, remoteIA, viaLink2, 2, exp), 1300)}
	td.onHeld(heldUDP(t, remoteIA))
	td.settle(t)
	if got := td.plane.paths(remoteIA); len(got) != 0 {
		t.Fatalf("installed %+v", got)
	}
	if td.stats.get(statLookupFailed) != 1 || td.stats.get(statPathRefused) != 2 || td.stats.get(statUnreachable) != 1 {
		t.Fatalf("lookup_failed %d, path_refused %d, unreachable_sent %d; want 1, 2, 1",
			td.stats.get(statLookupFailed), td.stats.get(statPathRefused), td.stats.get(statUnreachable))
	}
}

// A path whose MTU cannot carry its own SCION header (an MTU of 0,
// installed past the daemon) is no path: no Packet Too Big naming an MTU
// that wrapped (Linux ignores one above 2^31: every packet would bounce),
// no MSS that wrapped; a path just large enough for a SYN clamps its MSS
// to what is left.
func TestBadPathMTUNeverWraps(t *testing.T) {
	tr := loadTest(t)
	raw := testPath(t)
	hdr := 12 + 16 + 4 + 4 + len(raw)
	udp := func() []byte {
		return ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 40000, DstPort: 31000}, gopacket.Payload(make([]byte, 200)))
	}
	syn := func() []byte {
		return ipv6Frame(t, hostSMIP, remote4SMIP, &layers.TCP{SrcPort: 40000, DstPort: 5201, SYN: true, Window: 64240, Options: []layers.TCPOption{
			{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0x8c}}}})
	}
	cases := map[string]struct {
		mtu     int
		frame   func() []byte
		verdict string
		mss     int // the SYN's MSS as sent; 0: dropped
	}{
		"MTU 0, UDP":             {0, udp, "bad_path", 0},
		"MTU 0, SYN":             {0, syn, "bad_path", 0},
		"MTU of the header, UDP": {hdr, udp, "bad_path", 0},
		"one byte of room, SYN":  {hdr + 1, syn, "ptb_sent", 0},
		"room for the SYN alone": {hdr + 24, syn, "mss_clamped", 4},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if err := tr.installUnchecked(remoteIA, 1, []Path{{Raw: raw, MTU: uint16(c.mtu), NextHop: routerAddr}}); err != nil {
				t.Fatal(err)
			}
			before := tr.counts(t)
			ret, out := tr.run(t, tr.objs.TraOut, c.frame(), true)
			after := tr.counts(t)
			if after[c.verdict].Packets != before[c.verdict].Packets+1 {
				t.Fatalf("action %d, counters %v; want %s", ret, after, c.verdict)
			}
			switch {
			case c.verdict == "ptb_sent":
				ip, msg := decodeIPv6(t, out)
				if ret != tcActRedirect || msg[0] != 2 || binary.BigEndian.Uint32(msg[4:]) != minIPv6MTU || ip.DstIP.String() != hostSMIP.String() {
					t.Fatalf("action %d, ICMPv6 %d MTU %d; want Packet Too Big naming %d", ret, msg[0], binary.BigEndian.Uint32(msg[4:]), minIPv6MTU)
				}
			case c.mss != 0:
				if ret != tcActRedirect {
					t.Fatalf("action %d", ret)
				}
				_, _, _, l4 := decodeSCION(t, out)
				if got := int(binary.BigEndian.Uint16(l4[22:])); got != c.mss {
					t.Fatalf("MSS %d, want %d", got, c.mss)
				}
			default:
				if ret != tcActShot || after["ptb_sent"].Packets != before["ptb_sent"].Packets || after["mss_clamped"].Packets != before["mss_clamped"].Packets {
					t.Fatalf("action %d, counters %v; want dropped, no Packet Too Big, no MSS", ret, after)
				}
			}
		})
	}
}
