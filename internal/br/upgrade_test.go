package br

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// TestUpgradeRollbackUnderTraffic runs the lab router as an operator would
// across releases: the previous release (a build whose maps have another
// layout: layout_prev.go) attaches and forwards; while SCION traffic flows,
// this release attaches over it (upgrade), then the previous one
// (rollback), then this one again. Every packet must reach the sink (the
// keys that check the hop fields were carried over, or the router would
// drop), and the router's counters must have counted every one (they were
// carried over, not begun anew).
func TestUpgradeRollbackUnderTraffic(t *testing.T) {
	tb := labtest.Testbed(t)
	cfg := labConfig(t)
	prev, cur := labtest.ReleaseBinaries(t)
	// An instance name of the test's own, so that no other test's router
	// of the same router ID is taken over.
	name := "fp-up-" + strconv.Itoa(os.Getpid())
	if _, err := os.Stat(PinDir(name)); err == nil {
		t.Fatalf("router %s is attached already (another test?): detach it first", name)
	}
	t.Cleanup(func() { Detach(name, nil) })
	in, out := tb.DUTIn().Iface(), tb.DUTOut().Iface()
	attach := func(bin string) {
		t.Helper()
		labtest.Run(t, bin, "br", "attach", "--config", cfg.Path, "--name", name, "--netns", in.Netns, "--mode", "native", in.Name, out.Name)
	}
	attach(prev)

	pkts, err := TransitPackets(cfg, TransitOptions{Count: 100, Size: 200, SrcMAC: tb.Gen().MAC, DstMAC: tb.DUTIn().MAC})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := lab.AttachSink(tb.Sink().Iface(), xdp.Native)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	g, err := lab.NewGenerator(lab.GenOptions{Iface: tb.Gen().Iface(), Packets: pkts, CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	// The traffic runs until the last swap is a second behind it; a
	// minute at most.
	traffic := labtest.StartTraffic(g, 50_000, time.Minute)
	localMax := func() uint32 { return labtest.PinnedMaxEntries(t, filepath.Join(PinDir(name), "br_local_addrs")) }
	prevMax := localMax()
	for i, step := range []struct {
		what string
		bin  string
	}{{"upgrade", cur}, {"rollback", prev}, {"upgrade again", cur}} {
		time.Sleep(1500 * time.Millisecond)
		attach(step.bin)
		traffic.Running(t, step.what)
		// The pins hold the maps of the release that runs.
		if got := localMax(); (got == prevMax) != (i == 1) {
			t.Fatalf("after the %s, the pinned br_local_addrs has %d entries (the previous release's: %d)", step.what, got, prevMax)
		}
	}
	time.Sleep(time.Second)
	sent := traffic.Stop(t).Sent
	time.Sleep(200 * time.Millisecond)
	got, err := sink.Total()
	if err != nil {
		t.Fatal(err)
	}
	p, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.ReadCounters()
	p.Close()
	if err != nil {
		t.Fatal(err)
	}
	fwd := c[1][routerBrVerdictBR_FORWARDED].Packets // slot 1: interface 1, the generator side
	if got.Packets != sent || fwd != sent {
		t.Fatalf("sent %d, router counted %d forwarded, sink got %d: want every packet, counted across the releases", sent, fwd, got.Packets)
	}
	t.Logf("%d packets sent across an upgrade, a rollback and an upgrade; none lost", sent)
}
