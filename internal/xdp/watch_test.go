package xdp

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// pair is a veth pair between two namespaces of the test's own: a0 in a,
// b0 in b, both up, GRO off on b0; both namespaces go when the test ends.
func pair(t *testing.T) (a, b Iface) {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	r := make([]byte, 2)
	rand.Read(r)
	p := "fp-x" + hex.EncodeToString(r) + "-"
	a, b = Iface{Netns: p + "a", Name: "a0"}, Iface{Netns: p + "b", Name: "b0"}
	t.Cleanup(func() {
		for _, ns := range []string{a.Netns, b.Netns} {
			if err := netns.Delete(ns); err != nil {
				t.Error(err)
			}
		}
	})
	for _, ns := range []string{a.Netns, b.Netns} {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
		if err := netns.Run(ns, func() error {
			return os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0o644)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := netns.Veth(a.Netns, a.Name, b.Netns, b.Name); err != nil {
		t.Fatal(err)
	}
	for _, i := range []Iface{a, b} {
		run(t, i.Netns, "ip", "link", "set", i.Name, "up")
	}
	setGRO(t, b, false)
	return a, b
}

func run(t *testing.T, ns string, name string, args ...string) {
	t.Helper()
	if err := netns.Run(ns, func() error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %v: %v: %s", name, args, err, out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func setGRO(t *testing.T, i Iface, on bool) {
	t.Helper()
	v := "off"
	if on {
		v = "on"
	}
	run(t, i.Netns, "ethtool", "-K", i.Name, "gro", v)
}

// passProgram is an XDP program that passes every frame.
func passProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// What happens at a veth's peer, in another namespace, shows in the veth's
// own: a watch there hears of the peer gaining and losing GRO and an XDP
// program, and of it going down; and TxState follows each.
func TestWatchHearsThePeer(t *testing.T) {
	a, b := pair(t)
	w, err := WatchHost(a.Netns, func(err error) { t.Error(err) })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Features {
		t.Skip("the kernel has no netdev netlink family (Linux 6.3 and later): a peer's change is heard by the periodic check only")
	}
	prog := passProgram(t)
	var detach func()
	steps := []struct {
		name   string
		do     func()
		usable bool
	}{
		{"peer's GRO on", func() { setGRO(t, b, true) }, true},
		{"peer's GRO off", func() { setGRO(t, b, false) }, false},
		{"XDP on the peer", func() {
			l, err := Attach(b, prog, Native)
			if err != nil {
				t.Fatal(err)
			}
			detach = func() { l.Close() }
		}, true},
		{"peer's XDP gone", func() { detach() }, false},
		{"peer's GRO on again", func() { setGRO(t, b, true) }, true},
		{"peer down", func() { run(t, b.Netns, "ip", "link", "set", b.Name, "down") }, false},
		{"peer up", func() { run(t, b.Netns, "ip", "link", "set", b.Name, "up") }, true},
	}
	for _, s := range steps {
		// What the steps before left queued is not this step's.
		select {
		case <-w.C:
		case <-time.After(50 * time.Millisecond):
		}
		s.do()
		// A carrier change reaches the namespace by the kernel's link
		// watch, which defers it up to a second, more on a loaded
		// machine (CI runs the packages side by side).
		select {
		case <-w.C:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no event in %s's namespace", s.name, a)
		}
		tx, why, err := TxState(a)
		if err != nil {
			t.Fatal(err)
		}
		if ok := tx.Frames && tx.MultiBuffer; ok != s.usable {
			t.Fatalf("%s: TxState says %+v (%s), want frames in one and several buffers %v", s.name, tx, why, s.usable)
		}
	}
}
