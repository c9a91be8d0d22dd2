package fw

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// TestUpgradeRollbackUnderTraffic runs a firewall as an operator would
// across releases: the previous release (a build whose maps have another
// layout: layout_prev.go) attaches with a rule set that tracks connections,
// blocks one flow, and forwards; while traffic flows, this release attaches
// over it (upgrade), then the previous one (rollback), then this one again.
func TestUpgradeRollbackUnderTraffic(t *testing.T) {
	tb := labtest.Testbed(t)
	prev, cur := labtest.ReleaseBinaries(t)
	upgradeUnderTraffic(t, tb, prev, []releaseStep{{"upgrade", cur, false}, {"rollback", prev, true}, {"upgrade again", cur, false}})
}

// previousRelease is the last commit before attaching again carried maps
// of another layout over: a real release to upgrade from.
const previousRelease = "88a4105"

// TestUpgradeFromPreviousRelease upgrades under traffic from fastpath as
// it was at previousRelease (its maps have the same layout: a swap in
// place) to this release.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	old := labtest.CommitBinary(t, previousRelease)
	tb := labtest.Testbed(t)
	_, cur := labtest.ReleaseBinaries(t)
	upgradeUnderTraffic(t, tb, old, []releaseStep{{"upgrade", cur, true}})
}

// releaseStep is one attach over the running instance: what it is, the
// binary, and whether the maps then pinned have the first release's layout.
type releaseStep struct {
	what, bin   string
	firstLayout bool
}

// upgradeUnderTraffic attaches first, then each step's binary while traffic
// flows. No packet of the passed flow may be lost, none of the blocked one
// pass, and the connection tracked from the start must have counted every
// packet (it was never lost and made anew).
func upgradeUnderTraffic(t *testing.T, tb lab.Testbed, first string, steps []releaseStep) {
	name := tb.Prefix + "fw"
	dev := tb.DUTIn().Iface()
	t.Cleanup(func() {
		if _, err := os.Stat(PinDir(name)); err == nil {
			if err := Detach(name, nil); err != nil {
				t.Error(err)
			}
		}
	})
	gen, sinkAddr := tb.Gen().Addr.Addr(), tb.Sink().Addr.Addr()
	rs := &RuleSet{Default: Drop, Conntrack: &Conntrack{Enabled: true}, Rules: []Rule{
		{Action: Pass, Src: Prefix{tb.Gen().Addr.Masked()}, Proto: 17, SPort: AnyPort, DPort: Ports{7, 9, true}, CtState: CtNew | CtEstablished},
	}}
	rules := filepath.Join(t.TempDir(), "rules.toml")
	w, err := os.Create(rules)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.WriteTOML(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	attach := func(bin string, args ...string) {
		t.Helper()
		labtest.Run(t, bin, append([]string{"fw", "--name", name, "attach", "--netns", dev.Netns, "--no-fallback"}, append(args, dev.Name)...)...)
	}
	attach(first, "--rules", rules)
	blocked := Flow{Src: gen, Dst: sinkAddr, Proto: 17, SPort: 1024, DPort: 7}
	labtest.Run(t, first, "fw", "--name", name, "block", "--src", gen.String(), "--dst", sinkAddr.String(), "--proto", "udp", "--sport", "1024", "--dport", "7")

	sink, err := lab.AttachSink(tb.Sink().Iface(), xdp.Native)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	// One packet of each flow in turn: the passed one first.
	u := tb.DefaultUDP()
	u.DstMAC, u.Count = tb.DUTIn().MAC, 1
	pass, err := lab.UDPPackets(u)
	if err != nil {
		t.Fatal(err)
	}
	u.DstPort = 7
	drop, err := lab.UDPPackets(u)
	if err != nil {
		t.Fatal(err)
	}
	g, err := lab.NewGenerator(lab.GenOptions{Iface: tb.Gen().Iface(), Packets: [][]byte{pass[0], drop[0]}, CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	// The traffic runs until the last swap is a second behind it; a
	// minute at most.
	traffic := labtest.StartTraffic(g, 50_000, time.Minute)
	blockedMax := func() uint32 { return labtest.PinnedMaxEntries(t, filepath.Join(PinDir(name), "fw_blocked")) }
	firstMax := blockedMax()
	for _, step := range steps {
		time.Sleep(1500 * time.Millisecond)
		attach(step.bin)
		traffic.Running(t, step.what)
		// The pins hold the maps of the release that runs.
		if got := blockedMax(); (got == firstMax) != step.firstLayout {
			t.Fatalf("after the %s, the pinned block list has room for %d entries (the first release's: %d)", step.what, got, firstMax)
		}
	}
	time.Sleep(time.Second)
	sent := traffic.Stop(t).Sent
	time.Sleep(200 * time.Millisecond)
	got, err := sink.Total()
	if err != nil {
		t.Fatal(err)
	}
	// The packets alternate, the passed flow's first.
	passedWant := (sent + 1) / 2
	if got.Packets != passedWant {
		t.Fatalf("sent %d, sink got %d, want exactly %d (every packet of the passed flow, none of the blocked one)", sent, got.Packets, passedWant)
	}
	f, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bl, err := f.Blocked()
	if err != nil {
		t.Fatal(err)
	}
	if len(bl) != 1 || bl[0].Flow != blocked {
		t.Fatalf("block list after the upgrades: %+v, want %s", bl, blocked)
	}
	conns, err := f.Conns()
	if err != nil {
		t.Fatal(err)
	}
	var passed *Conn
	for i, c := range conns {
		if c.Src == gen && c.Dst == sinkAddr && c.DPort == 9 {
			passed = &conns[i]
		}
	}
	if passed == nil {
		t.Fatalf("the connection of the passed flow is gone: %+v", conns)
	}
	if passed.Packets[0] != passedWant {
		t.Fatalf("the passed flow's connection counted %d packets, want %d: it was lost and made anew on the way", passed.Packets[0], passedWant)
	}
	t.Logf("%d packets sent across %d releases' attaches; %d passed, none lost", sent, len(steps), got.Packets)
}
