package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

func TestTestbedUpDown(t *testing.T) {
	for _, layout := range []Layout{LayoutVeth, LayoutDUT} {
		t.Run(string(layout), func(t *testing.T) {
			tb := testTestbed(t, layout)
			// A namespace that merely shares the prefix is not the lab's.
			decoy := tb.Prefix + "other"
			if err := netns.Create(decoy); err != nil {
				t.Fatal(err)
			}
			defer netns.Delete(decoy)

			if !tb.IsUp() {
				t.Fatal("testbed not up after Up")
			}
			for _, ep := range tb.Endpoints() {
				h, err := netns.Handle(ep.Netns)
				if err != nil {
					t.Fatal(err)
				}
				l, err := h.LinkByName(ep.Dev)
				h.Close()
				if err != nil {
					t.Fatalf("%s/%s: %v", ep.Netns, ep.Dev, err)
				}
				if !bytes.Equal(l.Attrs().HardwareAddr, ep.MAC) {
					t.Errorf("%s MAC %s, want %s", ep.Dev, l.Attrs().HardwareAddr, ep.MAC)
				}
				if l.Attrs().OperState != 6 /* IF_OPER_UP */ && l.Attrs().OperState != 0 {
					t.Errorf("%s not up: %s", ep.Dev, l.Attrs().OperState)
				}
			}
			// Up again is a no-op that keeps the testbed.
			if err := tb.Up(); err != nil {
				t.Fatalf("second up: %v", err)
			}
			if !tb.IsUp() {
				t.Fatal("testbed gone after a second Up")
			}
			if err := tb.Down(); err != nil {
				t.Fatal(err)
			}
			for _, ns := range tb.allNamespaces() {
				if netns.Exists(ns) {
					t.Errorf("%s still exists after Down", ns)
				}
			}
			if !netns.Exists(decoy) {
				t.Error("Down removed a namespace it did not make")
			}
			if err := tb.Down(); err != nil {
				t.Fatalf("second down: %v", err)
			}
		})
	}
}

func TestTestbedSwitchesLayout(t *testing.T) {
	tb := testTestbed(t, LayoutDUT)
	tb.Layout = LayoutVeth
	if err := tb.Up(); err != nil {
		t.Fatal(err)
	}
	if !tb.IsUp() || netns.Exists(tb.Prefix+"dut") {
		t.Fatal("switching to the veth layout left the DUT namespace or did not build the pair")
	}
}

func TestTestbedValidate(t *testing.T) {
	cases := map[string]struct {
		tb   Testbed
		want string
	}{
		"empty prefix":  {Testbed{Layout: LayoutDUT}, "prefix is empty"},
		"long prefix":   {Testbed{Prefix: "fp-much-too-long-", Layout: LayoutDUT}, "too long"},
		"unknown shape": {Testbed{Prefix: "fp-", Layout: "ring"}, `unknown layout "ring"`},
		"MTU too large": {Testbed{Prefix: "fp-", Layout: LayoutVeth, MTU: 9001}, "testbed MTU 9001: give 68"},
		"MTU too small": {Testbed{Prefix: "fp-", Layout: LayoutVeth, MTU: 67}, "testbed MTU 67"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if err := c.tb.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if err := c.tb.Up(); err == nil {
				t.Fatal("Up accepted an invalid testbed")
			}
		})
	}
}

// sendExact sends count packets at a rate the path takes without loss and
// checks that the sink counted exactly that many.
func sendExact(t *testing.T, tb Testbed, pkts [][]byte, count, rate uint64) {
	t.Helper()
	sink, err := AttachSink(tb.Sink().Iface(), xdp.Native)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	g, err := NewGenerator(GenOptions{Iface: tb.Gen().Iface(), Packets: pkts, CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	st, err := g.Send(context.Background(), SendOptions{Count: count, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	got, err := settle(sink)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != count || got.Packets != count {
		t.Fatalf("sent %d, sink counted %d; want exactly %d (interface drops %d, vanished %d)", st.Sent, got.Packets, count, st.Drops, st.Vanished)
	}
	// Paced sends sleep between test runs: the program's first-to-last time
	// is well inside the wall time.
	if st.Elapsed <= 0 || st.Elapsed > st.Wall {
		t.Fatalf("first-to-last time %v, wall %v: want 0 < first-to-last <= wall", st.Elapsed, st.Wall)
	}
	var wantBytes uint64
	for i := uint64(0); i < count; i++ {
		wantBytes += uint64(len(pkts[i%uint64(len(pkts))]))
	}
	if got.Bytes != wantBytes {
		t.Fatalf("sink counted %d bytes, want %d", got.Bytes, wantBytes)
	}
}

func TestSinkCountsExactlyWhatWasSent(t *testing.T) {
	for _, name := range []string{"veth", "bridge", "xdp-redirect"} {
		t.Run(name, func(t *testing.T) {
			s := scenarios[name]
			tb := testTestbed(t, s.Layout)
			teardown, err := s.Setup(tb)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := teardown(); err != nil {
					t.Error(err)
				}
			}()
			u := tb.DefaultUDP()
			u.Count = 1000
			pkts, err := UDPPackets(u)
			if err != nil {
				t.Fatal(err)
			}
			// Mixed lengths exercise the generator's shrinking path too.
			u.Size, u.Count = 300, 10
			long, _ := UDPPackets(u)
			pkts = append(pkts, long...)
			// 200,000 packets at 200 kpps: well inside what every path here takes.
			sendExact(t, tb, pkts, 200_000, 200_000)
		})
	}
}

func TestGeneratorRejects(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	u := tb.DefaultUDP()
	u.Size = 1514
	big, _ := UDPPackets(u)
	jumbo := append(append([]byte(nil), big[0]...), make([]byte, 10)...)
	cases := map[string]struct {
		opts GenOptions
		want string
	}{
		"no packets":   {GenOptions{Iface: tb.Gen().Iface()}, "capture is empty"},
		"over the MTU": {GenOptions{Iface: tb.Gen().Iface(), Packets: [][]byte{big[0], jumbo}}, "packet 2 is 1524 bytes, longer than"},
		"runt":         {GenOptions{Iface: tb.Gen().Iface(), Packets: [][]byte{make([]byte, 10)}}, "shorter than an Ethernet header"},
		"no such dev":  {GenOptions{Iface: xdp.Iface{Netns: tb.Gen().Netns, Name: "fp-nope"}, Packets: big}, "interface fp-nope not found in network namespace " + tb.Gen().Netns},
		"no such ns":   {GenOptions{Iface: xdp.Iface{Netns: "fp-no-such-ns", Name: "x"}, Packets: big}, "network namespace does not exist"},
		"batch":        {GenOptions{Iface: tb.Gen().Iface(), Packets: big, BatchSize: 1000}, "batch size 1000"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := NewGenerator(c.opts)
			if err == nil {
				g.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want one containing %q", err, c.want)
			}
		})
	}
}

func TestSendNeedsALimit(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	g, err := NewGenerator(GenOptions{Iface: tb.Gen().Iface(), Packets: [][]byte{make([]byte, 60)}, CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Send(context.Background(), SendOptions{}); err == nil {
		t.Fatal("Send without count or duration accepted")
	}
	st, err := g.Send(context.Background(), SendOptions{Duration: 300 * time.Millisecond, Rate: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	// Paced at 10 kpps for 0.3 s: a few thousand, never the unpaced millions.
	if st.Sent < 1000 || st.Sent > 10_000 {
		t.Fatalf("paced send for 300 ms at 10 kpps sent %d", st.Sent)
	}
}

func TestSinkNativeModeUnsupported(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	// A bridge device has no native XDP: the error must say so and suggest
	// generic mode, and generic mode must work.
	h, err := netns.Handle(tb.Sink().Netns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(bridgeLink(tb.Prefix + "nx")); err != nil {
		t.Fatal(err)
	}
	iface := xdp.Iface{Netns: tb.Sink().Netns, Name: tb.Prefix + "nx"}
	_, err = AttachSink(iface, xdp.Native)
	if !errors.Is(err, xdp.ErrNativeUnsupported) || !strings.Contains(err.Error(), "generic") {
		t.Fatalf("native attach to a bridge: %v", err)
	}
	s, err := AttachSink(iface, xdp.Generic)
	if err != nil {
		t.Fatalf("generic attach: %v", err)
	}
	s.Close()
}

func TestBenchRejectsBeforeSetup(t *testing.T) {
	cases := map[string]struct {
		opts BenchOptions
		want string
	}{
		"unknown scenario": {BenchOptions{Scenarios: []string{"veth", "warp-drive"}, Runs: 1, Packets: 1e6, Sizes: []int{138}}, `unknown scenario "warp-drive": known are ceiling, veth, bridge, routed, xdp-pass, xdp-redirect`},
		"no runs":          {BenchOptions{Scenarios: []string{"veth"}, Runs: 0, Packets: 1e6, Sizes: []int{138}}, "--runs 0"},
		"no size":          {BenchOptions{Scenarios: []string{"veth"}, Runs: 1, Packets: 1e6}, "no frame size given"},
		"tiny size":        {BenchOptions{Scenarios: []string{"veth"}, Runs: 1, Packets: 1e6, Sizes: []int{20}}, "--size 20: packet size 20"},
		"over jumbo":       {BenchOptions{Scenarios: []string{"veth"}, Runs: 1, Packets: 1e6, Sizes: []int{9015}}, "--size 9015: longer than the lab's jumbo veths take"},
		// The last size is wrong: nothing of the first may run.
		"last of several over jumbo": {BenchOptions{Scenarios: []string{"veth"}, Runs: 1, Packets: 1e6, Sizes: []int{138, 1500, 9015}}, "--size 9015: longer than the lab's jumbo veths take"},
		"jumbo flood":                {BenchOptions{Scenarios: []string{"veth"}, Runs: 1, Packets: 1e6, Sizes: []int{138, 8000}, Flows: 1000}, "--flows with --size 8000: flood mode is the live-frames generator's"},
		"size twice":                 {BenchOptions{Scenarios: []string{"veth"}, Runs: 1, Packets: 1e6, Sizes: []int{138, 576, 138}}, "--size 138 given twice"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			c.opts.Prefix = "fp-tbad-"
			_, err := Bench(context.Background(), c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if netns.Exists("fp-tbad-gen") || netns.Exists("fp-tbad-dut") {
				t.Fatal("a rejected bench set something up")
			}
		})
	}
}

func bridgeLink(name string) *netlink.Bridge {
	return &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
}

// A bench at two sizes makes a row of every scenario at each, in turns with
// --interleave, frames of 1,500 bytes through the generator and a routed
// DUT included, and divides each row by its baseline and anchor at its own
// size.
func TestBenchAtTwoSizes(t *testing.T) {
	requireKernel(t)
	b := make([]byte, 2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	prefix := "fp-t" + hex.EncodeToString(b) + "-"
	var log bytes.Buffer
	rep, err := Bench(context.Background(), BenchOptions{
		Scenarios: []string{"veth", "routed", "xdp-pass"}, Runs: 2, Interleave: true, Packets: 1000,
		Sizes: []int{138, 1500}, NoCeiling: true, Prefix: prefix, CPU: -1, Log: &log,
	})
	for _, l := range []Layout{LayoutVeth, LayoutDUT} {
		for _, ns := range (Testbed{Prefix: prefix, Layout: l}).allNamespaces() {
			if netns.Exists(ns) {
				t.Errorf("namespace %s left behind", ns)
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		scenario string
		size     int
	}{{"veth", 138}, {"routed", 138}, {"xdp-pass", 138}, {"veth", 1500}, {"routed", 1500}, {"xdp-pass", 1500}}
	if len(rep.Rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rep.Rows), len(want), rep.Table())
	}
	for i, w := range want {
		row := rep.Rows[i]
		if row.Scenario != w.scenario || row.Size != w.size {
			t.Errorf("row %d is %s at %d B, want %s at %d B", i, row.Scenario, row.Size, w.scenario, w.size)
			continue
		}
		if len(row.Runs) != 2 {
			t.Errorf("%s %d B: %d runs, want 2", row.Scenario, row.Size, len(row.Runs))
		}
		for _, run := range row.Runs {
			if run.Sent < 1000 || run.Received == 0 {
				t.Errorf("%s %d B: a run sent %d, the sink counted %d", row.Scenario, row.Size, run.Sent, run.Received)
			}
		}
		veth, routed := rep.Rows[i-i%3], rep.Rows[i-i%3+1]
		if !near(row.Ratio, row.MedianMpps/veth.MedianMpps) || row.RatioOtherSize {
			t.Errorf("%s %d B: ratio %v, want %v over veth at its size", row.Scenario, row.Size, row.Ratio, row.MedianMpps/veth.MedianMpps)
		}
		if row.Scenario == "xdp-pass" && (row.Anchor != "routed" || row.AnchorMpps != routed.MedianMpps) {
			t.Errorf("xdp-pass %d B: anchor %s at %v Mpps, want routed at %v", row.Size, row.Anchor, row.AnchorMpps, routed.MedianMpps)
		}
	}
	// Interleaved: every row's first run before any row's second.
	if first, second := strings.Index(log.String(), "run 1/2"), strings.LastIndex(log.String(), "run 1/2"); first < 0 || second > strings.Index(log.String(), "run 2/2") {
		t.Errorf("runs not in turns:\n%s", log.String())
	}
}
