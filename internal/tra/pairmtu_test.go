package tra

import (
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/snet"
	snetpath "github.com/scionproto/scion/pkg/snet/path"
)

type fakePair struct {
	mu         sync.Mutex
	mtu, under int
	sets       []int
}

func (f *fakePair) MTU() (int, error) { f.mu.Lock(); defer f.mu.Unlock(); return f.mtu, nil }

func (f *fakePair) UnderlayMTU() (int, error) { f.mu.Lock(); defer f.mu.Unlock(); return f.under, nil }

func (f *fakePair) SetMTU(m int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mtu = m
	f.sets = append(f.sets, m)
	return nil
}

func (f *fakePair) get() int { f.mu.Lock(); defer f.mu.Unlock(); return f.mtu }

// withMTU is p with another MTU in its metadata.
func withMTU(p snet.Path, mtu uint16) snet.Path {
	sp := p.(snetpath.Path)
	sp.Meta.MTU = mtu
	return sp
}

// While the underlay device's MTU is unknown, the pair's MTU is the largest
// host packet a path installed carries: it rises when a destination with a
// large path is installed, falls when that destination goes, and comes
// back on a pair made anew and to a daemon started again. Once the
// underlay's MTU is known, what can arrive sizes it (TestPairMTUTakesWhatArrives).
func TestPairMTUFollowsPaths(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	pair := &fakePair{mtu: pairMTU}
	td.pair = pair
	if srcHostLen(td.cfg) != 4 {
		t.Fatal("the test host is meant to be an IPv4 host")
	}
	exp := td.clock.Add(time.Hour)
	bigIA, smallIA, tinyIA := remoteIA, addr.MustParseIA("1-64520"), addr.MustParseIA("1-64521")
	big := withMTU(testSCIONPath(t, bigIA, viaLink1, 1, exp), 8972)
	small := withMTU(testSCIONPath(t, smallIA, []ifKey{{localIA, 2}, {smallIA, 5}}, 2, exp), 1472)
	tiny := withMTU(testSCIONPath(t, tinyIA, []ifKey{{localIA, 3}, {tinyIA, 6}}, 3, exp), 1320)
	td.src.paths[bigIA], td.src.paths[smallIA], td.src.paths[tinyIA] = []snet.Path{big}, []snet.Path{small}, []snet.Path{tiny}
	// A host packet on a path: its SCION header (common 12, ISD-ASes 16,
	// two IPv4 hosts, the path) instead of IPv6's 40 bytes.
	hostMTU := func(p snet.Path, mtu int) int { return mtu - (12 + 16 + 4 + 4 + len(rawOf(p))) + 40 }
	install := func(ia addr.IA) {
		t.Helper()
		td.onHeld(heldUDP(t, ia))
		td.settle(t)
		if len(td.plane.paths(ia)) != 1 {
			t.Fatalf("no path to %s installed", ia)
		}
	}

	td.fitPair()
	if pair.get() != pairMTU || len(pair.sets) != 0 {
		t.Fatalf("pair MTU %d without paths (set %v), want %d as made", pair.get(), pair.sets, pairMTU)
	}
	// The least path the daemon takes carries IPv6's minimum.
	install(tinyIA)
	if want := hostMTU(tiny, 1320); pair.get() != want || want < minIPv6MTU {
		t.Fatalf("pair MTU %d with a path of MTU 1320, want %d", pair.get(), want)
	}
	install(smallIA)
	if want := hostMTU(small, 1472); pair.get() != want {
		t.Fatalf("pair MTU %d with paths of MTU 1320 and 1472, want %d", pair.get(), want)
	}
	td.advance(4 * time.Minute)
	install(bigIA)
	if want := hostMTU(big, 8972); pair.get() != want {
		t.Fatalf("pair MTU %d with a path of MTU 8972, want %d", pair.get(), want)
	}
	if td.stats.get(statPairMTUSet) != 3 || td.stats.get(statPairMTU) != uint64(pair.get()) {
		t.Fatalf("pair_mtu_set %d, pair_mtu %d", td.stats.get(statPairMTUSet), td.stats.get(statPairMTU))
	}

	// A daemon started again adopts the paths, and the pair's MTU with
	// them, without writing it.
	again := newTestDaemon(t, 1, Limits{})
	again.plane, again.pathDaemon.dp = td.plane, td.plane
	again.pair = pair
	sets := len(pair.sets)
	if err := again.adopt(); err != nil {
		t.Fatal(err)
	}
	if len(pair.sets) != sets || again.stats.get(statPairMTU) != uint64(pair.get()) {
		t.Fatalf("adopting set the pair's MTU again (%v)", pair.sets[sets:])
	}
	// A pair made anew (attach again makes it at pairMTU) gets it back at
	// the next health check.
	pair.mtu = pairMTU
	td.fitPair()
	if want := hostMTU(big, 8972); pair.get() != want {
		t.Fatalf("pair made anew: MTU %d, want %d", pair.get(), want)
	}

	// The large path's destination idle past its limit goes, and the
	// pair's MTU falls to the largest left: bigger packets on the small
	// paths get Packet Too Big from tra_out.
	td.dp.MarkUsed(td.dests[tinyIA].slot, td.usedNow())
	td.dp.MarkUsed(td.dests[smallIA].slot, td.usedNow())
	td.advance(3 * time.Minute) // the big one was used 3 minutes ago, the others now
	td.dp.MarkUsed(td.dests[tinyIA].slot, td.usedNow())
	td.dp.MarkUsed(td.dests[smallIA].slot, td.usedNow())
	td.advance(3 * time.Minute)
	td.housekeep(td.clock)
	td.settle(t)
	if _, ok := td.dests[bigIA]; ok {
		t.Fatal("the idle destination is still there")
	}
	if want := hostMTU(small, 1472); pair.get() != want {
		t.Fatalf("pair MTU %d once the big path went, want %d", pair.get(), want)
	}

	// The underlay device's MTU known, what it can bring sizes the pair:
	// no path carries more.
	pair.under = 1450
	install(bigIA)
	if want := 1450 - 20 - 8 - (12 + 16 + 4 + 4) + 40; pair.get() != want {
		t.Fatalf("pair MTU %d on a 1450-byte underlay, want %d", pair.get(), want)
	}
}

// What a path carries of the host's, as the pair's MTU counts it, agrees
// with tra_out: a host packet of that size on the path is translated, one
// byte more is answered Packet Too Big with that MTU.
func TestPairMTUFitsTraOut(t *testing.T) {
	tr := loadTest(t)
	raw := testPath(t)
	// BPF_PROG_TEST_RUN takes an skb of at most a page: a path MTU of 3000.
	path := Path{Raw: raw, MTU: 3000, NextHop: routerAddr, Expiry: 1 << 40}
	if err := tr.SetPaths(remoteIA, []Path{path}); err != nil {
		t.Fatal(err)
	}
	mtu := wantPairMTU(map[addr.IA]*dest{remoteIA: {dp: []Path{path}}}, 4, 0)
	udp := func(size int) []byte {
		return ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload(make([]byte, size-40-8)))
	}
	ret, out := tr.run(t, tr.objs.TraOut, udp(mtu), true)
	if ret != tcActRedirect {
		t.Fatalf("a packet of the pair's MTU %d: action %d; counters %v", mtu, ret, tr.counts(t))
	}
	if _, _, s, l4 := decodeSCION(t, out); s == nil || len(l4) != mtu-40 {
		t.Fatalf("a packet of the pair's MTU %d not translated whole", mtu)
	}
	if got := tr.counts(t)["translated_out"].Packets; got != 1 {
		t.Fatalf("translated_out %d", got)
	}
	ret, out = tr.run(t, tr.objs.TraOut, udp(mtu+1), true)
	p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	if ret != tcActRedirect || icmp == nil || icmp.TypeCode.Type() != layers.ICMPv6TypePacketTooBig {
		t.Fatalf("one byte more than the pair's MTU: action %d, %v", ret, p)
	}
	if got := int(uint32(out[14+40+4])<<24 | uint32(out[14+40+5])<<16 | uint32(out[14+40+6])<<8 | uint32(out[14+40+7])); got != mtu {
		t.Fatalf("Packet Too Big names MTU %d, the pair has %d", got, mtu)
	}
}
