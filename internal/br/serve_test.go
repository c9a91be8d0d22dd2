package br

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// Serve attaches, keeps the router in step (a neighbour that turns GRO on
// afterwards is forwarded in XDP), reloads in place, refuses a reload that
// would attach another router and goes on with what it had, and leaves the
// router attached when it ends.
func TestServe(t *testing.T) {
	b := newHostBed(t, false)
	b.setGRO(t, b.b, "b0", false)
	name, log, reload, stop := b.serve(t)
	if !strings.Contains(log.String(), "`fastpath br serve` picks the fix up within a second") {
		t.Fatalf("serve's attach did not warn about b0:\n%s", log)
	}
	s := b.sender(t, name, log)
	s.burst(5, "tx_unusable")
	b.setGRO(t, b.b, "b0", true)
	s.until("forwarded")
	s.burst(5, "forwarded")

	// A reload reads the file again and attaches in place.
	reload <- struct{}{}
	waitFor(t, log, "reloaded and attached again in place")
	s.burst(5, "forwarded")
	// One that would make another router is refused; the router goes on.
	cfgText, err := os.ReadFile(b.cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(string(cfgText), `router_id = "br1"`, `router_id = "br2"`, 1)
	if err := os.WriteFile(b.cfg.Path, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	waitFor(t, log, "the router goes on with the configuration it had")
	s.burst(5, "forwarded")

	if err := stop(); err != nil {
		t.Fatalf("serve: %v\n%s", err, log)
	}
	if n := len(xdp.Links(PinDir(name))); n != 2 {
		t.Fatalf("%d link pins after serve ended, want both devices still attached", n)
	}
	s.burst(5, "forwarded")
	t.Logf("serve said:\n%s", log)
}

// waitFor waits up to 10 s for the log to hold a line with want.
func waitFor(t *testing.T, log *syncBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(log.String(), want) {
			return
		}
	}
	t.Fatalf("no %q after 10 s:\n%s", want, log)
}

// The service unit in deploy/systemd is one systemd takes: it runs `br serve` with a
// configuration, is started once the router is attached (waiting as long as
// that takes: serve itself waits for a late device), after the system clock
// is set, reloads on SIGHUP and restarts serve when it fails.
func TestServiceUnit(t *testing.T) {
	labtest.CheckServiceUnit(t, "../../deploy/systemd/fastpath-br@.service",
		"ExecStart=/usr/bin/fastpath br serve --config /etc/fastpath/br-%i.toml", "Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure",
		"After=network-online.target time-sync.target", "TimeoutStartSec=infinity")
}

// `br detach` while serve runs ends serve with success: a service manager
// restarts serve only when it fails (Restart=on-failure), so the router
// stays detached. Before, serve ended with an error, and the restarted
// serve attached the router again within a second.
func TestServeEndsWhenDetached(t *testing.T) {
	b := newHostBed(t, false)
	name, log, _, stop := b.serve(t)
	if err := Detach(name, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, log, "router detached")
	if err := stop(); err != nil {
		t.Fatalf("serve after a detach: %v, want success\n%s", err, log)
	}
	if _, err := os.Stat(PinDir(name)); !os.IsNotExist(err) {
		t.Fatalf("%s after serve ended: %v", PinDir(name), err)
	}
}

// serve started before the router's devices exist (a namespace or device
// that comes up late at boot) waits for them and attaches when they come,
// where it used to fail at once (and systemd, restarting it every second,
// gave up after ten tries).
func TestServeWaitsForALateDevice(t *testing.T) {
	b := newHostBed(t, false)
	// d1 (with B's link) is not there yet: it goes into a namespace of its
	// own and comes back later.
	park := strings.TrimSuffix(b.dut, "dut") + "park"
	if err := netns.Create(park); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(park) })
	b.ip(t, b.dut, "link", "set", "d1", "netns", park)
	name := strings.TrimSuffix(b.dut, "dut") + "br"
	t.Cleanup(func() { Detach(name, nil) })
	log := &syncBuffer{}
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeOptions{Config: b.cfg.Path, Attach: AttachOptions{Netns: b.dut, Name: name, NoFallback: true}, Log: textLog(log), Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, log, "wait=1s")
	select {
	case err := <-done:
		t.Fatalf("serve ended with the device missing: %v\n%s", err, log)
	case <-ready:
		t.Fatalf("serve was ready with the device missing:\n%s", log)
	case <-time.After(1500 * time.Millisecond):
	}
	b.ip(t, park, "link", "set", "d1", "netns", b.dut)
	b.ip(t, b.dut, "addr", "add", b.d1Addr.String()+"/24", "dev", "d1")
	b.ip(t, b.dut, "link", "set", "d1", "up")
	b.ip(t, b.dut, "neigh", "replace", b.bAddr.String(), "lladdr", b.mac(t, b.b, "b0"), "dev", "d1", "nud", "permanent")
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v\n%s", err, log)
	case <-time.After(10 * time.Second):
		t.Fatalf("serve not ready 10 s after the device came:\n%s", log)
	}
	b.sender(t, name, log).burst(5, "forwarded")
}

// A device the router is attached to is deleted and created again (a
// veth pair made anew, a NIC reset by a driver that unregisters it): its
// link went with the old device, and the new one runs no program. The
// keeper attaches again within a second and says so; before, it went on
// as if nothing happened while nothing ran on the new device.
func TestServeAttachesARecreatedDevice(t *testing.T) {
	b := newHostBed(t, false)
	name, log, _, _ := b.serve(t)
	s := b.sender(t, name, log)
	s.burst(5, "forwarded")
	// A's link made anew: the pair a0–d0 deleted, a new one with the same
	// names and addresses.
	b.ip(t, b.a, "link", "del", "a0")
	mustRun(t, "ip", "link", "add", "a0", "netns", b.a, "type", "veth", "peer", "name", "d0", "netns", b.dut)
	b.ip(t, b.a, "addr", "add", b.aAddr.String()+"/24", "dev", "a0")
	b.ip(t, b.dut, "addr", "add", b.d0Addr.String()+"/24", "dev", "d0")
	b.ip(t, b.a, "link", "set", "a0", "up")
	b.ip(t, b.dut, "link", "set", "d0", "up")
	b.setGRO(t, b.a, "a0", true)
	b.ip(t, b.dut, "neigh", "replace", b.aAddr.String(), "lladdr", b.mac(t, b.a, "a0"), "dev", "d0", "nud", "permanent")
	b.ip(t, b.a, "neigh", "replace", b.d0Addr.String(), "lladdr", b.mac(t, b.dut, "d0"), "dev", "a0", "nud", "permanent")
	waitFor(t, log, "device deleted and created again: router attached again")
	if m, err := xdp.AttachedMode(xdp.Iface{Netns: b.dut, Name: "d0"}); err != nil || m != xdp.Native {
		t.Fatalf("d0 attached %q (%v) after the keeper's look:\n%s", m, err, log)
	}
	s.burst(5, "forwarded")
}

// serve runs Serve on the bed's router (d0, d1) until the test ends, and
// returns once it is ready: the router's name, its log, the reload
// channel, and stop, which ends Serve (at most once) and returns its error.
// Each of more changes the options first.
func (b *hostBed) serve(t *testing.T, more ...func(*ServeOptions)) (name string, log *syncBuffer, reload chan<- struct{}, stop func() error) {
	t.Helper()
	name = strings.TrimSuffix(b.dut, "dut") + "br"
	t.Cleanup(func() { Detach(name, nil) })
	log = &syncBuffer{}
	ready := make(chan struct{})
	rl := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := ServeOptions{
		Config: b.cfg.Path,
		Attach: AttachOptions{Devices: []xdp.Iface{{Netns: b.dut, Name: "d0"}, {Netns: b.dut, Name: "d1"}}, Name: name, NoFallback: true},
		Log:    textLog(log),
		Reload: rl,
		Ready:  func() { close(ready) },
	}
	for _, f := range more {
		f(&o)
	}
	go func() { done <- Serve(ctx, o) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { stop() })
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v\n%s", err, log)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve not ready after 30 s:\n%s", log)
	}
	return name, log, rl, stop
}
