package tra

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The firewall put in front of an attached translator: what it drops never
// reaches the translator, what it passes is translated; detaching the
// firewall gives the device back to the translator, and detaching that
// leaves nothing.
func TestChainBehindFirewall(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	under := xdp.Iface{Netns: a.host, Name: "eth0"}
	fwName := strings.TrimSuffix(a.host, "-h") + "-fw"
	rules := func(drop bool) *fw.RuleSet {
		s := "default = \"pass\"\n"
		if drop {
			s += "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = 31000\n"
		}
		rs, err := fw.ParseRules("chain.toml", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	if err := fw.Attach(fw.AttachOptions{Name: fwName, Devices: []xdp.Iface{under}, Rules: rules(true), NoFallback: true}); err != nil {
		t.Fatalf("fw attach in front of the translator: %v", err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(fw.PinDir(fwName)); err == nil {
			fw.Detach(fwName, nil)
		}
	})
	if got := fw.Devices(fwName); len(got) != 1 || !strings.Contains(got[0], "→ tra "+a.name) {
		t.Fatalf("fw devices %v, want → tra %s", got, a.name)
	}
	translated := func() uint64 { return a.counts(t)["translated_in"].Packets }
	waitTranslated := func(want uint64) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for translated() < want {
			if time.Now().After(deadline) {
				t.Fatalf("translated_in %d, want %d (counters %v)", translated(), want, a.counts(t))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	const n = 5
	for range n {
		a.injectSCION(t, a.scionIn(t, "dropped by the firewall"))
	}
	time.Sleep(300 * time.Millisecond)
	if got := translated(); got != 0 {
		t.Fatalf("the translator translated %d behind a firewall dropping them", got)
	}
	f, err := fw.OpenPinned(fwName)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Counters()
	if err == nil && c["drop_rule"] != n {
		t.Fatalf("the firewall dropped %d by rule, want %d", c["drop_rule"], n)
	}
	if err == nil {
		err = f.Install(rules(false))
	}
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		a.injectSCION(t, a.scionIn(t, "passed by the firewall"))
	}
	waitTranslated(n)
	if err := fw.Detach(fwName, nil); err != nil {
		t.Fatal(err)
	}
	if m, err := xdp.AttachedMode(under); err != nil || m != xdp.Native {
		t.Fatalf("%s after fw detach: mode %q, %v; want the translator attached", under, m, err)
	}
	for range n {
		a.injectSCION(t, a.scionIn(t, "after the firewall went"))
	}
	waitTranslated(2 * n)
	if _, err := os.Stat(fw.PinDir(fwName)); !os.IsNotExist(err) {
		t.Fatalf("firewall pins left: %v", err)
	}
	if err := Detach(a.name); err != nil {
		t.Fatal(err)
	}
	labtest.RequireDetached(t, under)
}
