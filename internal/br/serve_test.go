package br

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/labtest"
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

// The service unit in docs is one systemd takes: it runs `br serve` with a
// configuration, is started once the router is attached, reloads on
// SIGHUP and restarts serve when it fails.
func TestServiceUnit(t *testing.T) {
	labtest.CheckServiceUnit(t, "../../docs/fastpath-br@.service",
		"ExecStart=/usr/local/bin/fastpath br serve --config /etc/fastpath/br-%i.toml", "Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure")
}

// serve runs Serve on the bed's router (d0, d1) until the test ends, and
// returns once it is ready: the router's name, its log, the reload
// channel, and stop, which ends Serve (at most once) and returns its error.
func (b *hostBed) serve(t *testing.T) (name string, log *syncBuffer, reload chan<- struct{}, stop func() error) {
	t.Helper()
	name = strings.TrimSuffix(b.dut, "dut") + "br"
	t.Cleanup(func() { Detach(name, nil) })
	log = &syncBuffer{}
	ready := make(chan struct{})
	rl := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeOptions{
			Config: b.cfg.Path,
			Attach: AttachOptions{Devices: []xdp.Iface{{Netns: b.dut, Name: "d0"}, {Netns: b.dut, Name: "d1"}}, Name: name, NoFallback: true},
			Log:    log,
			Reload: rl,
			Ready:  func() { close(ready) },
		})
	}()
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
