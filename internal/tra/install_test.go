package tra

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/snet"

	"github.com/fastpath-dev/fastpath/internal/capture"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// Installing paths: what it costs through the pinned maps the daemon
// writes, and that nothing is written for a set that did not change.

// pinnedTest loads the translator's maps pinned under a name of its own, as
// attach does (no programs attached), and opens them as the daemon does.
func pinnedTest(t testing.TB) *Pinned {
	t.Helper()
	labtest.RequireKernel(t)
	b := make([]byte, 3)
	rand.Read(b)
	name := "fp-test-install-" + hex.EncodeToString(b)
	dir := PinDir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		xdp.RemoveIfEmpty(PinRoot)
		xdp.RemoveIfEmpty(PinDir(".."))
	})
	tr, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	p, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// installIA is the i-th destination of an install run.
func installIA(i int) addr.IA { return addr.MustIAFrom(1, addr.AS(70000+i)) }

// installPaths is a set of two paths whose first hops' gateway is gw.
func installPaths(t testing.TB, gw netip.Addr) []Path {
	raw := testPath(t)
	exp := uint64(time.Now().Add(time.Hour).Unix())
	return []Path{
		{Raw: raw, MTU: 1472, NextHop: routerAddr, Expiry: exp, Gateway: gw},
		{Raw: raw, MTU: 1472, NextHop: farRouter, Expiry: exp, Gateway: gw},
	}
}

// installAll installs n destinations' paths through p, and says how long
// it took.
func installAll(t testing.TB, p *Pinned, n int, gw netip.Addr) time.Duration {
	t.Helper()
	paths := installPaths(t, gw)
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := p.SetPaths(installIA(i), uint32(i), paths); err != nil {
			t.Fatalf("install %d: %v", i, err)
		}
	}
	return time.Since(start)
}

// What 1,000 installs cost through the pinned maps: new destinations, then
// the same destinations again with another gateway (a default route that
// changed). A measurement, logged: go test -run TestInstallTime -v.
func TestInstallTime(t *testing.T) {
	p := pinnedTest(t)
	first := installAll(t, p, 1000, gateway)
	again := installAll(t, p, 1000, netip.MustParseAddr("10.101.0.253"))
	t.Logf("1,000 installs: %v new (%v each), %v again with another gateway (%v each)", first, first/1000, again, again/1000)
	got, err := p.Dests()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1000 {
		t.Fatalf("%d destinations listed, want 1000", len(got))
	}
}

// BenchmarkInstall is one install through the pinned maps, 1,000
// destinations again and again with a gateway that changes each round:
// go test -run '^$' -bench Install ./internal/tra/. Sustained, it measures
// the rate set-aside entries come back at (some 7,000 free entries each
// 250 ms with 1,000 in use: about 35 µs an install); a burst of up to that
// many costs what TestInstallTime logs, some 10 µs each.
func BenchmarkInstall(b *testing.B) {
	p := pinnedTest(b)
	gws := []netip.Addr{gateway, netip.MustParseAddr("10.101.0.253")}
	sets := [][]Path{installPaths(b, gws[0]), installPaths(b, gws[1])}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.SetPaths(installIA(i%1000), uint32(i%1000), sets[(i/1000)%2]); err != nil {
			b.Fatal(err)
		}
	}
}

// A default-route change moves every destination's first hop: the daemon
// installs all 4,096 destinations' paths again, within a bound the map of
// maps missed by far (each of its updates waited for an RCU grace period:
// 4,096 of some 10-14 ms each, about a minute; now some 10 µs each). A
// refresh that finds the same paths and gateways writes nothing.
func TestReinstallAllDestinations(t *testing.T) {
	p := pinnedTest(t)
	td := newTestDaemon(t, 2, Limits{})
	plane := &countingPlane{dataPlane: pinnedPlane{p}}
	td.pathDaemon.dp = plane
	gw := gateway
	td.gateway = func(netip.Addr, time.Time) netip.Addr { return gw }
	paths := installPaths(t, netip.Addr{})
	start := time.Now()
	for i := 0; i < MaxDests; i++ {
		ia := installIA(i)
		x := &dest{ia: ia, slot: td.takeSlot(), used: td.clock}
		td.dests[ia] = x
		if _, err := td.setPaths(x, paths); err != nil {
			t.Fatalf("install %d: %v", i, err)
		}
	}
	first := time.Since(start)
	gw = netip.MustParseAddr("10.101.0.253")
	start = time.Now()
	td.refreshGateways(td.clock)
	again := time.Since(start)
	t.Logf("%d destinations: installed in %v, installed again with another gateway in %v", MaxDests, first, again)
	if plane.sets != 2*MaxDests {
		t.Fatalf("%d sets written, want %d", plane.sets, 2*MaxDests)
	}
	if again > 2*time.Second {
		t.Fatalf("installing %d destinations again took %v, want less than 2 s", MaxDests, again)
	}
	got, err := p.Dests()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != MaxDests {
		t.Fatalf("%d destinations listed, want %d", len(got), MaxDests)
	}
	for ia, d := range got {
		if len(d.Paths) != 2 || d.Paths[0].Gateway != gw || d.Paths[1].Gateway != gw || d.Slot != td.dests[ia].slot {
			t.Fatalf("%s: %+v, want 2 paths by %s in slot %d", ia, d, gw, td.dests[ia].slot)
		}
	}
	td.refreshGateways(td.clock)
	if plane.sets != 2*MaxDests {
		t.Fatalf("the same gateways again: %d sets written, want none", plane.sets-2*MaxDests)
	}
}

// countingPlane counts the sets written to a data plane.
type countingPlane struct {
	dataPlane
	sets int
}

func (c *countingPlane) SetPaths(ia addr.IA, slot uint32, paths []Path) error {
	c.sets++
	return c.dataPlane.SetPaths(ia, slot, paths)
}

// A refresh that finds the paths installed, with the same gateways, writes
// nothing; one that finds another gateway or other paths writes the set.
func TestUnchangedSetsNotWritten(t *testing.T) {
	td := newTestDaemon(t, 2, Limits{})
	exp := td.clock.Add(time.Hour)
	td.src.paths[remoteIA] = []snet.Path{testSCIONPath(t, remoteIA, viaLink1, 1, exp), testSCIONPath(t, remoteIA, viaLink2, 2, exp)}
	gw := gateway
	td.gateway = func(netip.Addr, time.Time) netip.Addr { return gw }
	td.onHeld(heldUDP(t, remoteIA))
	td.settle(t)
	if len(td.plane.paths(remoteIA)) != 2 {
		t.Fatal("no paths installed")
	}
	refresh := func() {
		t.Helper()
		td.dp.MarkUsed(td.dests[remoteIA].slot, td.usedNow())
		td.advance(time.Minute + time.Second)
		td.dp.MarkUsed(td.dests[remoteIA].slot, td.usedNow())
		lookups := td.stats.get(statLookups)
		td.housekeep(td.clock)
		td.settle(t)
		if td.stats.get(statLookups) != lookups+1 {
			t.Fatal("no refresh")
		}
	}
	sets := td.plane.sets
	refresh()
	if td.plane.sets != sets {
		t.Fatalf("a refresh that found the same paths wrote %d sets", td.plane.sets-sets)
	}
	td.refreshGateways(td.clock)
	if td.plane.sets != sets {
		t.Fatalf("gateways unchanged: %d sets written", td.plane.sets-sets)
	}
	gw = netip.MustParseAddr("10.101.0.253")
	td.refreshGateways(td.clock)
	if td.plane.sets != sets+1 || td.plane.paths(remoteIA)[0].Gateway != gw {
		t.Fatalf("another gateway: %d sets written, gateway %s", td.plane.sets-sets, td.plane.paths(remoteIA)[0].Gateway)
	}
	td.src.paths[remoteIA] = td.src.paths[remoteIA][:1]
	refresh()
	if td.plane.sets != sets+2 || len(td.plane.paths(remoteIA)) != 1 {
		t.Fatalf("other paths: %d sets written, %d paths", td.plane.sets-sets-1, len(td.plane.paths(remoteIA)))
	}
}

// An entry of tra_sets a destination left is not written again until it
// has been set aside setAside long, by this writer or by another (one that
// opens the maps anew finds every entry ever written set aside), and an
// entry a destination points to is never written, even by a writer whose
// own account says it is free.
func TestSetsReusedOnlyAfterSetAside(t *testing.T) {
	p := pinnedTest(t)
	clock := time.Unix(1_800_000_000, 0)
	slept := time.Duration(0)
	fake := func(a *setAlloc) {
		a.now = func() time.Time { return clock }
		a.sleep = func(d time.Duration) { slept += d; clock = clock.Add(d) }
	}
	fake(p.alloc)
	left := map[uint32]time.Time{} // when the destination left each entry
	var at translatorTraSetRef
	entry := func(p *Pinned, ia addr.IA) translatorTraSetRef {
		t.Helper()
		var ref translatorTraSetRef
		if err := p.dests.Lookup(beIA(ia), &ref); err != nil {
			t.Fatal(err)
		}
		return ref
	}
	paths := installPaths(t, netip.Addr{})
	sets := int(p.sets.MaxEntries())
	for i := 0; i < sets+100; i++ {
		if err := p.SetPaths(remoteIA, 1, paths); err != nil {
			t.Fatal(err)
		}
		ref := entry(p, remoteIA)
		if since, ok := left[ref.Set]; ok && clock.Sub(since) < setAside {
			t.Fatalf("install %d: entry %d written %v after the destination left it", i, ref.Set, clock.Sub(since))
		}
		if i > 0 {
			left[at.Set] = clock
		}
		at = ref
		clock = clock.Add(time.Microsecond)
	}
	if slept < setAside-time.Duration(sets)*time.Microsecond {
		t.Fatalf("slept %v for %d installs of one destination into %d entries", slept, sets+100, sets)
	}
	// Another writer of the same maps, opened now: every entry written
	// and left is set aside from its first write on.
	q, err := OpenPinned(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	fake(q.alloc)
	slept = 0
	other := addr.MustParseIA("1-64599")
	if err := q.SetPaths(other, 2, paths); err != nil {
		t.Fatal(err)
	}
	if slept < setAside {
		t.Fatalf("a new writer took entry %d after waiting %v", entry(q, other).Set, slept)
	}
	// The first writer believes free what the second took: it takes
	// another.
	for i := 0; i < 8; i++ {
		clock = clock.Add(setAside)
		if err := p.SetPaths(addr.MustIAFrom(1, addr.AS(64600+i)), 3, paths); err != nil {
			t.Fatal(err)
		}
	}
	got, err := p.Dests()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 || len(got[other].Paths) != 2 || len(got[remoteIA].Paths) != 2 {
		t.Fatalf("%d destinations listed (%v), want 10 whole", len(got), got)
	}
}

// An attach over an earlier translator's pins replaces what changed: the
// map of maps tra_paths goes, a configuration of another layout is carried
// into this one's, and the translator works: paths installed, a datagram
// translated.
func TestAttachOverOldPins(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	dir := PinDir(a.name)
	// tra_conf and tra_paths as the version before this one had them.
	oldConf, err := ebpf.NewMap(&ebpf.MapSpec{Name: "tra_conf", Type: ebpf.Array, KeySize: 4, ValueSize: 72, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer oldConf.Close()
	oldPaths, err := ebpf.NewMap(&ebpf.MapSpec{Name: "tra_paths", Type: ebpf.HashOfMaps, KeySize: 8, MaxEntries: MaxDests,
		InnerMap: &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 1136, MaxEntries: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer oldPaths.Close()
	os.Remove(filepath.Join(dir, "tra_conf"))
	for _, m := range []struct {
		m    *ebpf.Map
		name string
	}{{oldConf, "tra_conf"}, {oldPaths, "tra_paths"}} {
		if err := m.m.Pin(filepath.Join(dir, m.name)); err != nil {
			t.Fatal(err)
		}
	}
	var warn bytes.Buffer
	if _, err := Attach(a.cfg, AttachOptions{Netns: a.host, Warn: &warn}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"tra_conf: carried into this release's layout", "tra_paths of an earlier version removed"} {
		if !strings.Contains(warn.String(), w) {
			t.Errorf("attach said %q, want %q", warn.String(), w)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tra_paths")); err == nil {
		t.Fatal("tra_paths still pinned")
	}
	p := a.pinned(t)
	defer p.Close()
	if c, err := p.config(); err != nil || c.HostIp4 == 0 || c.PairMtu == 0 {
		t.Fatalf("configuration %+v, %v", c, err)
	}
	if err := p.SetPaths(remoteIA, 7, []Path{{Raw: testPath(t), MTU: 1472, NextHop: farRouter, Expiry: uint64(time.Now().Add(time.Hour).Unix()), Gateway: gateway}}); err != nil {
		t.Fatal(err)
	}
	tap, err := capture.Open(xdp.Iface{Netns: a.net, Name: "gw0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	c := a.dialUDP(t, netip.AddrPortFrom(remote4SMIP, 31000))
	if _, err := c.Write([]byte("after an upgrade")); err != nil {
		t.Fatal(err)
	}
	if got := waitFrames(t, tap, 3*time.Second, scionTo); len(got) == 0 {
		t.Fatalf("no SCION frame left; counters %v", a.counts(t))
	}
}
