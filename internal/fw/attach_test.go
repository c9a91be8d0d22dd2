package fw

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// attachLab attaches an instance named after the testbed to its DUT ingress,
// detached when the test ends.
func attachLab(t *testing.T, tb lab.Testbed, rs *RuleSet) *Firewall {
	t.Helper()
	name := tb.Prefix + "fw"
	if err := Attach(AttachOptions{Name: name, Devices: []xdp.Iface{tb.DUTIn().Iface()}, Rules: rs, NoFallback: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(PinDir(name)); err == nil {
			if err := Detach(name, nil); err != nil {
				t.Error(err)
			}
		}
	})
	f, err := OpenPinned(name)
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
