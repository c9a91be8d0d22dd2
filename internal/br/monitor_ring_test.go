package br

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/fastpath-dev/fastpath/internal/monitor"
)

// tapRingEmpty says whether the tap's ring holds nothing, and empties it.
func tapRingEmpty(t *testing.T, name string) bool {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(PinDir(name), "br_capture"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r, err := ringbuf.NewReader(m)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		r.SetDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err = r.Read(); err != nil {
			break
		}
		n++
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
	return n == 0
}

// leaseOf is br_vars' capture_until.
func leaseOf(t *testing.T, name string) uint64 {
	t.Helper()
	p, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	until, err := getVar(p.Vars, varCapture)
	if err != nil {
		t.Fatal(err)
	}
	return until
}

// TestMonitor: on a router attached in native mode, the tap's ring gets
// nothing while nobody listens; a monitor sees what the router drops (a
// datagram from another port than the neighbour's) and what it passes up to
// the reference router (an EPIC path), with the counters' reasons and the
// SCION header, and not what it forwards; a lease that ran out stops the
// copying.
func TestMonitor(t *testing.T) {
	b := newHostBed(t, false)
	name, _ := b.attach(t, XDPModeNative)
	neighbour := netip.AddrPortFrom(b.aAddr, 50000)
	stray := netip.AddrPortFrom(b.aAddr, 50001)
	router := netip.AddrPortFrom(b.d0Addr, 50000)
	epic := b.transit(t, 1)
	epic[0][8] = 3 // path type EPIC: up to the reference router
	sendAll := func() {
		send(t, b.a, neighbour, router, b.transit(t, 2))
		send(t, b.a, stray, router, b.transit(t, 1))
		send(t, b.a, neighbour, router, epic)
		time.Sleep(100 * time.Millisecond)
	}

	sendAll()
	if !tapRingEmpty(t, name) {
		t.Fatal("the ring got records with nobody listening")
	}
	v := verdicts(t, name)
	if v["forwarded"] != 2 || v["underlay_mismatch"] != 1 || v["not_implemented"] != 1 {
		t.Fatalf("verdicts %v: want 2 forwarded, 1 underlay_mismatch, 1 not_implemented", v)
	}

	src, err := OpenMonitor(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan monitor.Event, 16)
	done := make(chan error, 1)
	go func() {
		_, err := monitor.Run(ctx, src, monitor.Options{Want: monitor.WantAll}, func(e monitor.Event) error {
			events <- e
			return nil
		})
		done <- err
	}()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if until := leaseOf(t, name); until != 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the monitor set no lease")
		}
	}
	sendAll()
	want := []struct {
		verdict monitor.Verdict
		reason  string
		from    netip.AddrPort
	}{{monitor.Drop, "underlay_mismatch", stray}, {monitor.Pass, "not_implemented", neighbour}}
	for _, w := range want {
		select {
		case e := <-events:
			f := e.Flow
			if e.Verdict != w.verdict || e.Reason != w.reason || f.Src != w.from.Addr() || f.SrcPort != w.from.Port() ||
				f.Dst != router.Addr() || f.DstPort != router.Port() || f.SCION == nil || f.SCION.SrcIA == "" || f.SCION.DstIA == "" {
				t.Errorf("event %s, want %s %s from %s", e, w.verdict, w.reason, w.from)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", w.reason)
		}
	}
	select {
	case e := <-events:
		t.Fatalf("an event more (a forwarded frame?): %s", e)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	sendAll()
	if !tapRingEmpty(t, name) {
		t.Fatal("the ring got records after the monitor closed")
	}

	// A monitor killed: its lease runs out, and the copying stops.
	p, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := setVar(p.Vars, varCapture, monitor.Monotonic()+uint64(time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	sendAll()
	if !tapRingEmpty(t, name) {
		t.Fatal("records after the lease ran out")
	}
}
