package tra

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
)

// The pair takes what can arrive: the largest IPv6 packet tra_in makes of
// a frame the underlay device takes, whatever the paths installed; what
// would not fit is dropped by tra_in and counted, never dropped unseen by
// the pair after tra_in counted it translated.

// The pair's MTU for what arrives and what the paths carry.
func TestWantPairMTU(t *testing.T) {
	path := func(mtu uint16) map[addr.IA]*dest {
		return map[addr.IA]*dest{remoteIA: {dp: []Path{{Raw: make([]byte, 48), MTU: mtu}}}}
	}
	cases := []struct {
		name           string
		dests          map[addr.IA]*dest
		hostLen, under int
		want           int
	}{
		// 1500 - IPv4 20 - UDP 8 - SCION 36 (common 12, ISD-ASes 16, two
		// IPv4 hosts, the empty path) + IPv6 40.
		{"IPv4 host, 1500-byte underlay, no path", nil, 4, 1500, 1476},
		{"IPv4 host, 1500-byte underlay, a path of MTU 1472", path(1472), 4, 1500, 1476},
		{"IPv6 host: its address in each packet in", nil, 16, 1500, 1464},
		{"jumbo underlay", path(1472), 4, 9000, 8976},
		{"a small underlay: IPv6's minimum", nil, 4, 1300, minIPv6MTU},
		{"underlay unknown, no path", nil, 4, 0, pairMTU},
		{"underlay unknown: the paths", path(8972), 4, 0, 8972 - (36 + 48) + 40},
	}
	for _, c := range cases {
		if got := wantPairMTU(c.dests, c.hostLen, c.under); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// tra_in learns the pair's MTU no later than the pair takes more, and
// before it takes less: it never believes the pair takes more than it
// does.
func TestFitPairTellsTraIn(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	pair := &fakePair{mtu: pairMTU, under: 9000}
	plane := &pairMTUFake{fakePlane: td.plane, pair: pair}
	td.pathDaemon.dp, td.pair = plane, pair
	for _, under := range []int{9000, 1500, 9000, 1500} {
		pair.under = under
		td.fitPair()
		if want := inPacketMTU(4, under); pair.get() != want || plane.told != want {
			t.Fatalf("underlay %d: pair %d, tra_in told %d; want %d", under, pair.get(), plane.told, want)
		}
	}
	if plane.bad != "" {
		t.Fatal(plane.bad)
	}
}

// pairMTUFake is a data plane that records what tra_in is told of the
// pair's MTU, and any time it is told more than the pair takes.
type pairMTUFake struct {
	*fakePlane
	pair *fakePair
	told int
	bad  string
}

func (p *pairMTUFake) SetPairMTU(mtu int) error {
	if mtu > p.pair.get() {
		p.bad = fmt.Sprintf("tra_in told %d while the pair takes %d", mtu, p.pair.get())
	}
	p.told = mtu
	return nil
}

// setConf changes the loaded programs' configuration.
func (tr *Translator) setConf(t *testing.T, change func(*translatorTraConfig)) {
	t.Helper()
	var c translatorTraConfig
	if err := tr.objs.TraConf.Lookup(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	change(&c)
	if err := tr.objs.TraConf.Put(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
}

// A host of the AS on a 1500-byte underlay sends the largest datagram
// there is on the empty path: 1,476 bytes of IPv6 for the host. A pair of
// 1,400 would drop it after the redirect; tra_in drops it itself, counted
// too_big_in, and hands over what fits.
func TestPairTooBigIn(t *testing.T) {
	tr := loadTest(t)
	tr.setConf(t, func(c *translatorTraConfig) { c.PairMtu = 1400 })
	local := netip.MustParseAddr("10.101.0.9")
	frame := func(ipv6Len int) []byte {
		return inFrame{from: netip.AddrPortFrom(local, 30041), port: 30041, srcIA: localIA, srcHost: local, emptyRaw: true,
			l4: []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 31000}, gopacket.Payload(make([]byte, ipv6Len-40-8))}}.build(t)
	}
	if f := frame(1476); len(f) != 14+1500 {
		t.Fatalf("a frame of %d bytes, want the 1514 of a 1500-byte underlay", len(f))
	}
	cases := []struct {
		ipv6Len int
		action  uint32
		verdict string
	}{
		{1476, xdpDrop, "too_big_in"},
		{1401, xdpDrop, "too_big_in"},
		{1400, xdpRedirect, "translated_in"},
	}
	for _, c := range cases {
		before := tr.counts(t)[c.verdict].Packets
		ret, out := tr.run(t, tr.objs.TraIn, frame(c.ipv6Len), false)
		if ret != c.action || tr.counts(t)[c.verdict].Packets != before+1 {
			t.Fatalf("IPv6 packet of %d bytes for a pair of 1400: action %d, counters %v; want %d, %s", c.ipv6Len, ret, tr.counts(t), c.action, c.verdict)
		}
		if ret == xdpRedirect {
			if ip, _ := decodeIPv6(t, out); 40+int(ip.Length) != c.ipv6Len {
				t.Fatalf("IPv6 packet of %d bytes, want %d", 40+int(ip.Length), c.ipv6Len)
			}
		}
	}
}

// A pair larger than a path carries is safe: the host's larger packet gets
// Packet Too Big naming what the path carries, and a SYN's MSS asks for
// what fits the path, not the pair.
func TestLargerPairIsSafe(t *testing.T) {
	tr := loadTest(t)
	raw := testPath(t)
	path := Path{Raw: raw, MTU: 1472, NextHop: routerAddr}
	if err := tr.SetPaths(remoteIA, []Path{path}); err != nil {
		t.Fatal(err)
	}
	pair := wantPairMTU(map[addr.IA]*dest{remoteIA: {dp: []Path{path}}}, 4, 1500)
	carries := hostPacketMTU(path, 4, 1500)
	if pair <= carries {
		t.Fatalf("pair %d, path %d: the test wants a pair larger than the path", pair, carries)
	}
	in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload(make([]byte, pair-40-8)))
	ret, out := tr.run(t, tr.objs.TraOut, in, true)
	if ret != tcActRedirect {
		t.Fatalf("a packet of the pair's MTU %d: action %d", pair, ret)
	}
	if _, msg := decodeIPv6(t, out); msg[0] != 2 || int(binary.BigEndian.Uint32(msg[4:])) != carries {
		t.Fatalf("ICMPv6 %d naming %d, want Packet Too Big naming %d", msg[0], binary.BigEndian.Uint32(msg[4:]), carries)
	}
	mss := pair - 40 - 20
	syn := &layers.TCP{SrcPort: 40000, DstPort: 5201, SYN: true, Window: 64240, Options: []layers.TCPOption{
		{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{byte(mss >> 8), byte(mss)}}}}
	ret, out = tr.run(t, tr.objs.TraOut, ipv6Frame(t, hostSMIP, remote4SMIP, syn), true)
	if ret != tcActRedirect {
		t.Fatalf("SYN: action %d", ret)
	}
	_, _, _, l4 := decodeSCION(t, out)
	if got, want := int(binary.BigEndian.Uint16(l4[22:])), carries-40-20; got != want {
		t.Fatalf("MSS %d for a pair of %d, want %d for the path", got, pair, want)
	}
}
