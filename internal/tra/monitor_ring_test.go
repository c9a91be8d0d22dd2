package tra

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/gopacket"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"

	"github.com/fastpath-dev/fastpath/internal/monitor"
)

// trRingEmpty says whether the monitor ring holds nothing, and empties it.
func trRingEmpty(t *testing.T, tr *Translator) bool {
	t.Helper()
	r, err := ringbuf.NewReader(tr.objs.TraMonRing)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		r.SetDeadline(time.Now().Add(50 * time.Millisecond))
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

// TestMonitor: tra_in copies nothing while nobody listens; with a monitor
// listening, what it drops and passes up comes with the counters' reason,
// the underlay and the SCION header's ISD-ASes and hosts, and what it
// translates does not come at all; a lease that ran out stops the copying.
func TestMonitor(t *testing.T) {
	tr := loadTest(t)
	udp := func(port uint16) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 1, DstPort: port}, gopacket.Payload("x")}
	}
	other := scionFrame(t, remoteIA, remote4, 31000, udp(31000)...)
	copy(other[14+20+8+12+16:], []byte{10, 101, 0, 99}) // another host of this AS
	unmappable := scionFrame(t, addr.MustParseIA("1-ff00:0:110"), remote4, 31000, udp(31000)...)
	translated := scionFrame(t, remoteIA, remote4, 31000, udp(31000)...)
	frames := [][]byte{other, unmappable, translated}
	runAll := func() {
		for _, f := range frames {
			tr.run(t, tr.objs.TraIn, f, false)
		}
	}

	runAll()
	if !trRingEmpty(t, tr) {
		t.Fatal("the ring got events with nobody listening")
	}

	src, err := monitorRing("test", t.TempDir(), tr.objs.TraMonCtl, tr.objs.TraMonRing, tr.objs.TraMonBuf, func() {})
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
		var c translatorMonCtl
		if err := tr.objs.TraMonCtl.Lookup(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
		if c.Until != 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the monitor set no lease")
		}
	}
	runAll()
	want := []struct {
		verdict monitor.Verdict
		reason  string
		srcIA   string
	}{{monitor.Pass, "not_ours", remoteIA.String()}, {monitor.Drop, "unmappable", "1-ff00:0:110"}}
	for _, w := range want {
		select {
		case e := <-events:
			s := e.Flow.SCION
			if e.Verdict != w.verdict || e.Reason != w.reason || e.Direction != "scion_to_ip" || s == nil || s.SrcIA != w.srcIA ||
				s.DstIA != localIA.String() || s.Src != remote4 || e.Flow.Proto != 17 || e.Len != len(frames[0]) && w.reason == "not_ours" {
				t.Errorf("event %s (%+v), want %s %s from %s", e, s, w.verdict, w.reason, w.srcIA)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", w.reason)
		}
	}
	select {
	case e := <-events:
		t.Fatalf("an event for a translated frame: %s", e)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	runAll()
	if !trRingEmpty(t, tr) {
		t.Fatal("the ring got events after the monitor closed")
	}

	// A lease that ran out (a monitor killed): nothing, and cleared.
	if err := tr.objs.TraMonCtl.Put(uint32(0), translatorMonCtl{Until: monitor.Monotonic() - 1, Flags: uint32(monitor.WantAll), Snaplen: 64}); err != nil {
		t.Fatal(err)
	}
	runAll()
	if !trRingEmpty(t, tr) {
		t.Fatal("events after the lease ran out")
	}
	var c translatorMonCtl
	if err := tr.objs.TraMonCtl.Lookup(uint32(0), &c); err != nil || c.Until != 0 {
		t.Fatalf("the stale lease stays: %+v %v", c, err)
	}
}
