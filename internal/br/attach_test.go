package br

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/rt"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// labConfig is the lab router's configuration, removed when the test ends.
func labConfig(t *testing.T) *Config {
	t.Helper()
	cfg, cleanup, err := LabConfig()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return cfg
}

// attachLab attaches the router to the testbed's DUT veths under a name of
// the testbed's, detached when the test ends.
func attachLab(t *testing.T, tb lab.Testbed, cfg *Config) string {
	t.Helper()
	name := tb.Prefix + "br"
	if err := Attach(cfg, AttachOptions{Devices: []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}, Name: name, NoFallback: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Detach(name, nil) })
	return name
}

// The lab router end to end: attach, forward a fixed count through the
// kernel FIB into the sink, reload in place, detach without a trace.
func TestAttachForwardDetach(t *testing.T) {
	tb := labtest.Testbed(t)
	cfg := labConfig(t)
	name := attachLab(t, tb, cfg)
	devs := []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}
	// Attaching again is a reload: no error, same pins.
	if err := Attach(cfg, AttachOptions{Devices: devs, Name: name, NoFallback: true}); err != nil {
		t.Fatalf("second attach: %v", err)
	}
	if n := len(xdp.Links(PinDir(name))); n != 2 {
		t.Fatalf("%d link pins, want 2", n)
	}

	pkts, err := TransitPackets(cfg, TransitOptions{Count: 100, Size: 200, SrcMAC: tb.Gen().MAC, DstMAC: tb.DUTIn().MAC})
	if err != nil {
		t.Fatal(err)
	}
	const count = 50_000
	st, sink := labtest.Send(t, tb, pkts, count, 200_000)
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
	if st.Sent != count || got.Packets != count || fwd != count {
		t.Fatalf("sent %d, router forwarded %d, sink counted %d; want %d each", st.Sent, fwd, got.Packets, count)
	}

	if err := Detach(name, []xdp.Iface{tb.DUTIn().Iface()}); err != nil {
		t.Fatal(err)
	}
	if n := len(xdp.Links(PinDir(name))); n != 1 {
		t.Fatalf("%d link pins after detaching one device, want 1", n)
	}
	if err := Detach(name, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PinDir(name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin directory left behind: %v", err)
	}
	if err := Detach(name, nil); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("detaching twice: %v, want ErrNotAttached", err)
	}
}

func TestAttachRefusesBeforeChanging(t *testing.T) {
	tb := labtest.Testbed(t)
	cfg := labConfig(t)
	name := tb.Prefix + "br"
	devs := []xdp.Iface{tb.DUTIn().Iface(), {Netns: tb.DUTIn().Netns, Name: "fp-nosuch"}}
	err := Attach(cfg, AttachOptions{Devices: devs, Name: name})
	if err == nil {
		Detach(name, nil)
		t.Fatal("attach to a missing device succeeded")
	}
	if _, serr := os.Stat(filepath.Join(PinRoot, name)); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("a refused attach left %s behind (%v)", filepath.Join(PinRoot, name), err)
	}
}

// With cpus, the spreader hands packets to the router on worker CPUs
// through a CPU map, and every packet still arrives.
func TestAttachSpreadsOverCPUs(t *testing.T) {
	tb := labtest.Testbed(t)
	cfg := labConfig(t)
	cfg.CPUs = []int{0, 1}
	cfg.CountTxDrops = true // the sink's ring may overflow: counted, not forwarded
	name := attachLab(t, tb, cfg)
	pkts, err := TransitPackets(cfg, TransitOptions{Count: 1000, Size: 138, SrcMAC: tb.Gen().MAC, DstMAC: tb.DUTIn().MAC})
	if err != nil {
		t.Fatal(err)
	}
	const count = 20_000
	_, sink := labtest.Send(t, tb, pkts, count, 20_000)
	per, err := sink.PerCPU()
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	busy := 0
	for _, c := range per {
		total += c.Packets
		if c.Packets > 0 {
			busy++
		}
	}
	// Bursts from two worker CPUs may overflow the sink's veth ring: such a
	// frame is counted tx_failed, never forwarded, so each packet is in one
	// of the two.
	v := verdicts(t, name)
	if total+v["tx_failed"] != count || v["forwarded"] != total {
		t.Fatalf("sink counted %d of %d; the router's verdicts: %v", total, count, v)
	}
	if busy < 2 {
		t.Fatalf("all packets went through one CPU: %+v", per)
	}
}

// The kernel FIB decides the next-hop MACs: a resolved neighbour is used,
// a missing one sends the packet up the stack, a blackhole drops it.
func TestFIBVerdicts(t *testing.T) {
	tb := labtest.Testbed(t)
	cfg := labConfig(t)
	pkts, err := TransitPackets(cfg, TransitOptions{Count: 1, Size: 138, SrcMAC: tb.Gen().MAC, DstMAC: tb.DUTIn().MAC})
	if err != nil {
		t.Fatal(err)
	}
	dut := tb.DUTIn().Netns
	run := func() RunResult {
		t.Helper()
		res, maps := runOnTestbed(t, tb, cfg, pkts)
		// Its bpf_fib_lookup asks the same namespace's tables.
		for _, engine := range []string{"interp", "jit"} {
			got, err := rt.TestRun(rt.TestRunOptions{Object: "router_bpfel.o", Program: "br_router", Packets: pkts, Engine: engine, Maps: maps, Netns: dut})
			if err != nil {
				t.Fatal(err)
			}
			if g := got.Packets[0]; actionNames[g.Ret] != res[0].Action || !bytes.Equal(g.Out, res[0].Out) {
				t.Fatalf("%s: runtime %s, kernel %s (%s)\nruntime %x\nkernel  %x", engine, actionNames[g.Ret], res[0].Action, res[0].Verdict, g.Out, res[0].Out)
			}
		}
		return res[0]
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", dut}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}

	res := run()
	if res.Verdict != "forwarded" || res.NextHop != "198.18.1.1:50000" {
		t.Fatalf("resolved neighbour: %+v", res)
	}
	if dst, src := res.Out[0:6], res.Out[6:12]; !bytes.Equal(dst, tb.Sink().MAC) || !bytes.Equal(src, tb.DUTOut().MAC) {
		t.Fatalf("MACs %x → %x, want %s → %s", src, dst, tb.DUTOut().MAC, tb.Sink().MAC)
	}

	ip("neigh", "del", "198.18.1.1", "dev", tb.DUTOut().Dev)
	if res := run(); res.Verdict != "fib_pass" || res.Action != "pass" {
		t.Fatalf("no neighbour entry: %+v", res)
	}
	ip("route", "add", "blackhole", "198.18.1.1/32")
	if res := run(); res.Verdict != "fib_drop" || res.Action != "drop" {
		t.Fatalf("blackhole route: %+v", res)
	}
}

// runOnTestbed loads a router of cfg for the testbed's DUT (not attached),
// runs the frames through it in the DUT's namespace (so that its FIB
// lookups ask the DUT's tables) and returns the results and the maps as
// they were before the run, for the userspace runtime to start from.
func runOnTestbed(t *testing.T, tb lab.Testbed, cfg *Config, pkts [][]byte) ([]RunResult, map[string][]rt.Entry) {
	t.Helper()
	r, err := Load(cfg, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dut := tb.DUTIn().Netns
	if err := r.SetHost(dut, []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}); err != nil {
		t.Fatal(err)
	}
	// The userspace runtime gets the same maps, before the run fills the
	// next-hop cache.
	maps, err := rt.MirrorMaps(r.maps)
	if err != nil {
		t.Fatal(err)
	}
	var res []RunResult
	if err := netns.Run(dut, func() error {
		var err error
		res, err = r.Run(pkts, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return res, maps
}

// A packet longer than the egress device's MTU is passed up (too_big),
// whether the FIB answers for it or a next hop cached from a smaller
// packet does: a veth drops an XDP frame over its MTU without a word, so
// forwarding it would lose what the reference router sends (in underlay
// fragments). The userspace runtime agrees on every packet.
func TestEgressMTU(t *testing.T) {
	tb := labtest.Testbed(t)
	cfg := labConfig(t)
	var pkts [][]byte
	for _, size := range []int{138, 1400, 1400} {
		p, err := TransitPackets(cfg, TransitOptions{Count: 1, Size: size, SrcMAC: tb.Gen().MAC, DstMAC: tb.DUTIn().MAC})
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, p[0])
	}
	dut := tb.DUTIn().Netns
	if out, err := exec.Command("ip", "-n", dut, "link", "set", "dev", tb.DUTOut().Dev, "mtu", "1000").CombinedOutput(); err != nil {
		t.Fatalf("MTU 1000 on %s: %v: %s", tb.DUTOut().Dev, err, out)
	}
	for _, c := range []struct {
		name string
		pkts [][]byte
		want []string
	}{
		{"FIB", pkts[1:2], []string{"too_big"}},
		{"cached next hop", pkts, []string{"forwarded", "too_big", "too_big"}},
	} {
		res, maps := runOnTestbed(t, tb, cfg, c.pkts)
		for i, want := range c.want {
			if res[i].Verdict != want {
				t.Fatalf("%s: packet %d (%d B): %s, want %s", c.name, i, len(c.pkts[i]), res[i].Verdict, want)
			}
			if want == "too_big" && res[i].Action != "pass" {
				t.Fatalf("%s: packet %d: action %s, want pass", c.name, i, res[i].Action)
			}
		}
		got, err := rt.TestRun(rt.TestRunOptions{Object: "router_bpfel.o", Program: "br_router", Packets: c.pkts, Engine: "interp", Maps: maps, Netns: dut})
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.pkts {
			if actionNames[got.Packets[i].Ret] != res[i].Action {
				t.Fatalf("%s: packet %d: runtime %s, kernel %s (%s)", c.name, i, actionNames[got.Packets[i].Ret], res[i].Action, res[i].Verdict)
			}
		}
	}
}

// Deleting the namespace of an attached router leaves its pins, maps and
// counters: br list shows the router as gone, and detach removes the rest.
func TestGoneRouterIsShownAndDetached(t *testing.T) {
	tb := labtest.Testbed(t)
	cfg := labConfig(t)
	name := attachLab(t, tb, cfg)
	state := func() RouterState {
		t.Helper()
		all, err := List()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range all {
			if r.ID == name {
				return r
			}
		}
		t.Fatalf("router %s not listed", name)
		return RouterState{}
	}
	if s := state(); s.Gone() || len(s.Devices) != 2 || s.Devices[0].Mode != xdp.Native {
		t.Fatalf("attached router listed as %+v", s)
	}
	if err := netns.Delete(tb.DUTIn().Netns); err != nil {
		t.Fatal(err)
	}
	if s := state(); !s.Gone() {
		t.Fatalf("router of a deleted namespace listed as %+v", s)
	}
	if err := Detach(name, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PinDir(name)); !os.IsNotExist(err) {
		t.Fatalf("detach left %s (%v)", PinDir(name), err)
	}
}
