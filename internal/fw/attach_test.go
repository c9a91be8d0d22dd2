package fw

import (
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// attachLab attaches an instance named after the testbed to its DUT ingress,
// detached when the test ends.
func attachLab(t *testing.T, tb lab.Testbed, rs *RuleSet) *Firewall {
	t.Helper()
	return attachInstance(t, AttachOptions{Name: tb.Prefix + "fw", Devices: []xdp.Iface{tb.DUTIn().Iface()}, Rules: rs, NoFallback: true})
}

// attachInstance attaches an instance and opens it; it is detached when the
// test ends.
func attachInstance(t *testing.T, o AttachOptions) *Firewall {
	t.Helper()
	if err := Attach(o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(PinDir(o.Name)); err == nil {
			if err := Detach(o.Name, nil); err != nil {
				t.Error(err)
			}
		}
	})
	f, err := OpenPinned(o.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// twoFlows alternates packets of a flow the rules pass (UDP to port 9) and
// one they drop (UDP to port 7), from the generator to the sink via the DUT.
func twoFlows(t *testing.T, tb lab.Testbed) [][]byte {
	t.Helper()
	u := tb.DefaultUDP()
	u.DstMAC = tb.DUTIn().MAC
	u.Count = 500
	pass, err := lab.UDPPackets(u)
	if err != nil {
		t.Fatal(err)
	}
	u.DstPort = 7
	drop, err := lab.UDPPackets(u)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for i := range pass {
		out = append(out, pass[i], drop[i])
	}
	return out
}

// replaceSets are rule sets that all pass port 9 and drop port 7 from the
// generator, each in a different way, with noise rules around.
func replaceSets(tb lab.Testbed, rng *rand.Rand) []*RuleSet {
	gen, sink := Prefix{tb.Gen().Addr.Masked()}, Prefix{tb.Sink().Addr.Masked()}
	port := func(p uint16) Ports { return Ports{p, p, true} }
	noise := func(n int) []Rule {
		var rs []Rule
		for _, p := range MissPrefixes(n, LabAvoid) {
			rs = append(rs, Rule{Action: Action(rng.IntN(2)), Src: Prefix{p}, SPort: AnyPort, DPort: AnyPort})
		}
		return rs
	}
	a := &RuleSet{Default: Drop, Rules: append(noise(50),
		Rule{Action: Pass, Src: gen, Dst: sink, Proto: 17, SPort: AnyPort, DPort: port(9)})}
	b := &RuleSet{Default: Pass, Rules: append([]Rule{
		{Action: Drop, Src: gen, Proto: 17, SPort: AnyPort, DPort: port(7)}}, noise(500)...)}
	c := &RuleSet{Default: Pass, Rules: append(noise(300),
		Rule{Action: Pass, Proto: 17, SPort: AnyPort, DPort: port(9)},
		Rule{Action: Drop, Dst: sink, Proto: 17, SPort: AnyPort, DPort: Ports{1, 8, true}},
		Rule{Action: Pass, Src: gen, SPort: AnyPort, DPort: AnyPort})}
	return []*RuleSet{a, b, c}
}

// TestReplaceUnderTraffic swaps rule sets as fast as it can while traffic
// flows, whole and by fw add and fw del: every set drops one flow and
// passes the other, so the sink must see exactly the passed flow's packets,
// whatever set each packet met.
func TestReplaceUnderTraffic(t *testing.T) {
	tb := labtest.Testbed(t)
	rng := rand.New(rand.NewPCG(7, 7))
	sets := replaceSets(tb, rng)
	for i, rs := range sets {
		for _, fl := range []Flow{
			{Src: tb.Gen().Addr.Addr(), Dst: tb.Sink().Addr.Addr(), Proto: 17, SPort: 1024, DPort: 9},
			{Src: tb.Gen().Addr.Addr(), Dst: tb.Sink().Addr.Addr(), Proto: 17, SPort: 1024, DPort: 7},
		} {
			if _, act := rs.Match(fl); (act == Pass) != (fl.DPort == 9) {
				t.Fatalf("set %d does not pass port 9 and drop port 7: %s %s", i, fl, act)
			}
		}
	}
	f := attachLab(t, tb, sets[0])

	var (
		stop     atomic.Bool
		installs atomic.Int64
		wg       sync.WaitGroup
		errc     = make(chan error, 1)
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		noise := Rule{Action: Drop, Src: Prefix{netip.MustParsePrefix("203.0.113.0/24")}, SPort: AnyPort, DPort: AnyPort}
		for i := 1; !stop.Load(); i++ {
			if err := f.Install(sets[i%len(sets)]); err != nil {
				errc <- err
				return
			}
			installs.Add(1)
			// fw add and fw del switch through the overlay: a rule that
			// no test packet matches comes and goes at the top.
			if err := f.Insert(1, noise); err != nil {
				errc <- err
				return
			}
			if err := f.Delete(1); err != nil {
				errc <- err
				return
			}
		}
	}()
	const count = 400_000
	st, sink := labtest.Send(t, tb, twoFlows(t, tb), count, 200_000)
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	got, err := sink.Total()
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != count || got.Packets != count/2 {
		t.Fatalf("sent %d, sink got %d, want exactly %d (the passed flow's packets)", st.Sent, got.Packets, count/2)
	}
	// Each install builds a whole rule set; a loaded machine manages fewer.
	if installs.Load() < 2 {
		t.Fatalf("only %d rule sets installed during the traffic", installs.Load())
	}
	c, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if drops := c["drop_rule"] + c["drop_default"]; drops != count/2 {
		t.Fatalf("firewall dropped %d, want %d: %v", drops, count/2, c)
	}
	t.Logf("%d rule sets installed during %d packets", installs.Load(), count)
}

// TestAttachDetach: pins appear under the instance's directory, a second
// attach keeps rules, flows and blocks, detach leaves nothing.
func TestAttachDetach(t *testing.T) {
	tb := labtest.Testbed(t)
	name := tb.Prefix + "fw"
	rs, err := ParseRules("t.toml", []byte("default = \"pass\"\n[[rule]]\naction = \"drop\"\nsrc = \"192.0.2.0/24\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := attachLab(t, tb, rs)
	fl := Flow{Src: tb.Gen().Addr.Addr(), Dst: tb.Sink().Addr.Addr(), Proto: 17, SPort: 1, DPort: 2}
	if err := f.Block(fl, 0); err != nil {
		t.Fatal(err)
	}
	gen, _ := f.Generation()
	// Again, without rules: the program is swapped, the state stays.
	if err := Attach(AttachOptions{Name: name, Devices: []xdp.Iface{tb.DUTIn().Iface()}, NoFallback: true}); err != nil {
		t.Fatal(err)
	}
	if g, _ := f.Generation(); g != gen {
		t.Fatalf("reattach changed the rule set: generation %d → %d", gen, g)
	}
	if bl, _ := f.Blocked(); len(bl) != 1 {
		t.Fatalf("reattach lost the block list: %v", bl)
	}
	if got := Devices(name); len(got) != 1 || !strings.HasSuffix(got[0], tb.DUTIn().Dev) {
		t.Fatalf("devices %v", got)
	}
	// A bad rule file leaves everything as it was.
	bad := &RuleSet{Rules: []Rule{{Action: Drop, Src: Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Dst: Prefix{netip.MustParsePrefix("2001:db8::/32")}}}}
	if err := Attach(AttachOptions{Name: name, Devices: []xdp.Iface{tb.DUTIn().Iface()}, Rules: bad}); err == nil {
		t.Fatal("attach with a bad rule set succeeded")
	}
	if g, _ := f.Generation(); g != gen {
		t.Fatalf("a refused attach changed the rules")
	}
	if err := Detach(name, []xdp.Iface{tb.DUTOut().Iface()}); err == nil {
		t.Fatal("detach from a device without the firewall succeeded")
	}
	if err := Detach(name, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PinDir(name)); !os.IsNotExist(err) {
		t.Fatalf("pins left behind: %v", err)
	}
	labtest.RequireDetached(t, tb.DUTIn().Iface())
	if _, err := OpenPinned(name); err == nil {
		t.Fatal("opened a detached instance")
	}
}

// vethBed is a network namespace of the test's own (IPv6 off) holding a
// veth pair, fw0 and fw1, both up, and a name for a firewall instance; the
// instance is detached and the namespace removed when the test ends, also
// when it fails.
func vethBed(t *testing.T) (name string, dev, peer xdp.Iface) {
	t.Helper()
	labtest.RequireKernel(t)
	b := make([]byte, 3)
	crand.Read(b)
	ns := "fp-fw" + hex.EncodeToString(b)
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Delete(ns); err != nil {
			t.Error(err)
		}
	})
	name = ns
	t.Cleanup(func() {
		if _, err := os.Stat(PinDir(name)); err == nil {
			if err := Detach(name, nil); err != nil {
				t.Error(err)
			}
		}
	})
	err := netns.Run(ns, func() error {
		for _, k := range []string{"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"} {
			if err := netns.Sysctl(k, "1"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	vethPair(t, ns, "fw0", "fw1")
	return name, xdp.Iface{Netns: ns, Name: "fw0"}, xdp.Iface{Netns: ns, Name: "fw1"}
}

// vethPair makes a veth pair a ↔ b in the namespace ns, both up.
func vethPair(t *testing.T, ns, a, b string) {
	t.Helper()
	if err := netns.Veth(ns, a, ns, b); err != nil {
		t.Fatal(err)
	}
	h, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, d := range []string{a, b} {
		l, err := h.LinkByName(d)
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Attaching again with other table sizes than the instance has is refused,
// saying what it has and how to change it. Before, the pinned maps were
// reused as they were and the new sizes silently ignored.
func TestAttachRefusesOtherSizes(t *testing.T) {
	name, dev, _ := vethBed(t)
	o := AttachOptions{Name: name, Devices: []xdp.Iface{dev}, NoFallback: true, MaxFlows: 1024, CtMax: 1024, CtEmbryonic: 512}
	if err := Attach(o); err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string]struct {
		change func(*AttachOptions)
		want   string
	}{
		"ct-max":       {func(o *AttachOptions) { o.CtMax = 4096 }, `--ct-max 4096: firewall "` + name + `" exists with room for 1024 connections in its established table`},
		"ct-embryonic": {func(o *AttachOptions) { o.CtEmbryonic = 256 }, "--ct-embryonic 256: firewall \"" + name + "\" exists with room for 512 connections in its embryonic table"},
		"max-flows":    {func(o *AttachOptions) { o.MaxFlows = 8192 }, "--max-flows 8192: firewall \"" + name + "\" exists with room for 1024 flows per CPU"},
	} {
		t.Run(what, func(t *testing.T) {
			again := o
			c.change(&again)
			err := Attach(again)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "fastpath fw detach --name "+name) {
				t.Fatalf("attach again with another size: %v, want an error saying %q and how to change it", err, c.want)
			}
		})
	}
	// The same sizes, or none, attach again in place.
	if err := Attach(o); err != nil {
		t.Fatalf("attach again with the same sizes: %v", err)
	}
}
