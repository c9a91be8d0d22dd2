package br

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// chainRules are a firewall's rules in front of the lab router: a few dozen
// that match nothing of the transit traffic and a default that passes it,
// or (drop) the same with the router's underlay UDP dropped first.
func chainRules(t *testing.T, drop bool) *fw.RuleSet {
	t.Helper()
	var b strings.Builder
	b.WriteString("default = \"pass\"\n")
	if drop {
		b.WriteString("[[rule]]\naction = \"drop\"\nproto = \"udp\"\n")
	}
	for i := range 40 {
		fmt.Fprintf(&b, "[[rule]]\naction = \"drop\"\nsrc = \"198.18.%d.0/24\"\nproto = \"tcp\"\ndport = %d\n", i, 1000+i)
	}
	rs, err := fw.ParseRules("chain.toml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// brTotal is every packet the router counted, whatever its verdict.
func brTotal(t *testing.T, name string) (total, forwarded uint64) {
	t.Helper()
	p, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := p.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	for s := range c {
		for v := range c[s] {
			total += c[s][v].Packets
		}
		forwarded += c[s][routerBrVerdictBR_FORWARDED].Packets
	}
	return total, forwarded
}

// The firewall in front of the router on the ingress device, attached in
// either order and detached in either order: what the firewall drops never
// reaches the router, what it passes is forwarded as without it, and
// detaching both leaves nothing.
func TestChainBehindFirewall(t *testing.T) {
	for _, c := range []struct{ fwFirst, fwDetachFirst bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
		t.Run(fmt.Sprintf("fw-first=%v/fw-detached-first=%v", c.fwFirst, c.fwDetachFirst), func(t *testing.T) {
			testChain(t, c.fwFirst, c.fwDetachFirst)
		})
	}
}

func testChain(t *testing.T, fwFirst, fwDetachFirst bool) {
	tb := labtest.Testbed(t)
	cfg := labConfig(t)
	in, out := tb.DUTIn().Iface(), tb.DUTOut().Iface()
	fwName, brName := tb.Prefix+"fw", tb.Prefix+"br"
	attachFw := func() {
		if err := fw.Attach(fw.AttachOptions{Name: fwName, Devices: []xdp.Iface{in}, Rules: chainRules(t, false), NoFallback: true}); err != nil {
			t.Fatalf("fw attach: %v", err)
		}
	}
	attachBr := func() {
		if err := Attach(cfg, AttachOptions{Devices: []xdp.Iface{in, out}, Name: brName, NoFallback: true}); err != nil {
			t.Fatalf("br attach: %v", err)
		}
	}
	t.Cleanup(func() {
		Detach(brName, nil)
		fw.Detach(fwName, nil)
	})
	if fwFirst {
		attachFw()
		attachBr()
	} else {
		attachBr()
		attachFw()
	}
	// The pins say who holds the device and who runs behind.
	if _, err := os.Stat(filepath.Join(fw.PinDir(fwName), xdp.LinkPinName(in))); err != nil {
		t.Fatalf("the firewall holds no link on %s: %v", in, err)
	}
	rs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	behind := map[string]string{}
	for _, r := range rs {
		if r.ID == brName {
			for _, d := range r.Devices {
				behind[d.Name] = d.Behind
			}
		}
	}
	if want := "fw " + fwName; behind[in.Name] != want || behind[out.Name] != "" {
		t.Fatalf("br list: behind %v, want %s on %s only", behind, want, in)
	}
	if got := fw.Devices(fwName); len(got) != 1 || !strings.Contains(got[0], "→ br "+brName) {
		t.Fatalf("fw devices %v, want %s → br %s", got, in.Name, brName)
	}
	// Attaching again (a reload) keeps the chain.
	attachBr()
	attachFw()

	pkts, err := TransitPackets(cfg, TransitOptions{Count: 100, Size: 200, SrcMAC: tb.Gen().MAC, DstMAC: tb.DUTIn().MAC})
	if err != nil {
		t.Fatal(err)
	}
	const count = 20_000
	sink, err := lab.AttachSink(tb.Sink().Iface(), xdp.Native)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	var sunkBefore uint64
	// send sends count frames and returns how many the sink got.
	send := func() uint64 {
		t.Helper()
		gen, err := lab.NewGenerator(lab.GenOptions{Iface: tb.Gen().Iface(), Packets: pkts, CPU: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer gen.Close()
		st, err := gen.Send(context.Background(), lab.SendOptions{Count: count, Rate: 200_000})
		if err != nil {
			t.Fatal(err)
		}
		if st.Sent != count {
			t.Fatalf("sent %d of %d", st.Sent, count)
		}
		// The veths finish their NAPI polls shortly after the last run.
		time.Sleep(200 * time.Millisecond)
		got, err := sink.Total()
		if err != nil {
			t.Fatal(err)
		}
		n := got.Packets - sunkBefore
		sunkBefore = got.Packets
		return n
	}
	// Passed by the firewall: forwarded by the router, every one.
	if sunk := send(); sunk != count {
		t.Fatalf("the sink counted %d of %d passed by the firewall", sunk, count)
	}
	total, fwd := brTotal(t, brName)
	if fwd != count || total != count {
		t.Fatalf("router counted %d, forwarded %d; want %d", total, fwd, count)
	}
	f, err := fw.OpenPinned(fwName)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Dropped by the firewall: the router never sees them.
	if err := f.Install(chainRules(t, true)); err != nil {
		t.Fatal(err)
	}
	if sunk := send(); sunk != 0 {
		t.Fatalf("the sink counted %d behind a firewall dropping them", sunk)
	}
	if t2, _ := brTotal(t, brName); t2 != total {
		t.Fatalf("the router counted %d packets the firewall dropped", t2-total)
	}
	fc, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if fc["drop_rule"] != count {
		t.Fatalf("firewall dropped %d by rule, want %d", fc["drop_rule"], count)
	}
	f.Close()

	if fwDetachFirst {
		// The device goes back to the router, which forwards as before.
		if err := fw.Detach(fwName, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(PinDir(brName), xdp.LinkPinName(in))); err != nil {
			t.Fatalf("the router did not get %s back: %v", in, err)
		}
		if sunk := send(); sunk != count {
			t.Fatalf("after fw detach the sink counted %d of %d", sunk, count)
		}
		if err := Detach(brName, nil); err != nil {
			t.Fatal(err)
		}
	} else {
		// The firewall keeps filtering; what it passes goes to the kernel.
		if err := Detach(brName, nil); err != nil {
			t.Fatal(err)
		}
		if m, err := xdp.AttachedMode(in); err != nil || m != xdp.Native {
			t.Fatalf("%s after br detach: mode %q, %v; want the firewall still attached", in, m, err)
		}
		if got := fw.Devices(fwName); len(got) != 1 || strings.Contains(got[0], "→") {
			t.Fatalf("fw devices after br detach: %v", got)
		}
		if sunk := send(); sunk != 0 {
			t.Fatalf("after br detach the sink counted %d the firewall drops", sunk)
		}
		if err := fw.Detach(fwName, nil); err != nil {
			t.Fatal(err)
		}
	}
	requireNothingLeft(t, []string{fw.PinDir(fwName), PinDir(brName)}, in, out)
}

// requireNothingLeft checks that no pin directory and no program is left.
func requireNothingLeft(t *testing.T, dirs []string, devs ...xdp.Iface) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			ents, _ := os.ReadDir(d)
			t.Errorf("%s left behind (%v): %v", d, err, ents)
		}
	}
	for _, d := range devs {
		labtest.RequireDetached(t, d)
	}
}
