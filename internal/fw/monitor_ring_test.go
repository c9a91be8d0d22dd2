package fw

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/gopacket/pcapgo"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/monitor"
	"github.com/fastpath-dev/fastpath/internal/pcap"
)

// genSend sends the frames once from the testbed's generator.
func genSend(t *testing.T, tb lab.Testbed, pkts [][]byte) {
	t.Helper()
	gen, err := lab.NewGenerator(lab.GenOptions{Iface: tb.Gen().Iface(), Packets: pkts, CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	if _, err := gen.Send(context.Background(), lab.SendOptions{Count: uint64(len(pkts))}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
}

// ringEmpty says whether the instance's monitor ring holds nothing, and
// empties it.
func ringEmpty(t *testing.T, name string) bool {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(PinDir(name), "fw_mon_ring"), nil)
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

// openedCtl is the instance's fw_mon_ctl, closed when the test ends.
func openedCtl(t *testing.T, name string) *ebpf.Map {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(PinDir(name), "fw_mon_ctl"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// waitLease waits until a monitor started in another goroutine has set
// its lease.
func waitLease(t *testing.T, until func() (uint64, error)) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if u, err := until(); err != nil {
			t.Fatal(err)
		} else if u != 0 {
			return
		}
	}
	t.Fatal("the monitor set no lease")
}

// TestMonitor: with nobody listening the ring gets nothing; a monitor sees
// each dropped and passed frame with the counters' reason, the rule and
// the flow, and its pcapng holds the frames; a monitor that dies without
// closing stops the copying when its lease runs out.
func TestMonitor(t *testing.T) {
	tb := labtest.Testbed(t)
	rs := &RuleSet{Default: Pass, Rules: []Rule{{Name: "echo", Action: Drop, Src: Prefix{tb.Gen().Addr.Masked()}, Proto: 17, SPort: AnyPort, DPort: Ports{7, 7, true}}}}
	attachLab(t, tb, rs)
	name := tb.Prefix + "fw"
	pkts := twoFlows(t, tb)[:20] // 10 passed (port 9), 10 dropped (port 7)

	genSend(t, tb, pkts)
	if !ringEmpty(t, name) {
		t.Fatal("the ring got events with nobody listening")
	}

	src, err := OpenMonitor(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMonitor(name); !errors.Is(err, monitor.ErrBusy) {
		t.Fatalf("a second monitor: %v, want ErrBusy", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu     sync.Mutex
		events []monitor.Event
		ng     bytes.Buffer
	)
	nw, err := pcap.NewNgWriter(&ng, monitor.SnapMax, "test")
	if err != nil {
		t.Fatal(err)
	}
	out := monitor.Output{Ng: nw}
	done := make(chan error, 1)
	var st monitor.Stats
	go func() {
		var err error
		st, err = monitor.Run(ctx, src, monitor.Options{Want: monitor.WantAll, Count: len(pkts)}, func(e monitor.Event) error {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
			return out.Write(e)
		})
		done <- err
	}()
	waitLease(t, func() (uint64, error) {
		var c fwMonCtl
		err := openedCtl(t, name).Lookup(uint32(0), &c)
		return c.Until, err
	})
	genSend(t, tb, pkts)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatalf("got %d of %d events", len(events), len(pkts))
	}
	cancel()
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if st.Lost != 0 {
		t.Errorf("lost %d", st.Lost)
	}
	var drops, passes int
	for _, e := range events {
		switch {
		case e.Verdict == monitor.Drop && e.Reason == "drop_rule" && e.Rule == "echo" && e.Flow.DstPort == 7 && e.Flow.Proto == 17:
			drops++
		case e.Verdict == monitor.Pass && e.Reason == "pass_default" && e.Flow.DstPort == 9:
			passes++
		default:
			t.Errorf("unexpected event %s", e)
		}
		if e.Flow.Src != tb.Gen().Addr.Addr() || e.Flow.Dst != tb.Sink().Addr.Addr() || e.Device != tb.DUTIn().Dev || e.Len != len(pkts[0]) {
			t.Errorf("event %s: want %s > %s on %s, %d bytes", e, tb.Gen().Addr.Addr(), tb.Sink().Addr.Addr(), tb.DUTIn().Dev, len(pkts[0]))
		}
	}
	if drops != 10 || passes != 10 {
		t.Errorf("%d drops and %d passes, want 10 and 10", drops, passes)
	}
	// The pcapng parses and holds the frames, in order.
	file := bytes.Clone(ng.Bytes())
	r, err := pcapgo.NewNgReader(bytes.NewReader(file), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			if i != len(events) {
				t.Errorf("pcapng holds %d frames, want %d", i, len(events))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i < len(events) && !bytes.Equal(data, events[i].Data) {
			t.Errorf("frame %d differs from its event's", i)
		}
	}
	if !bytes.Contains(file, []byte("fw "+name+" drop drop_rule rule=echo")) {
		t.Error("no packet comment names the reason")
	}
	// Closed: nothing more.
	genSend(t, tb, pkts)
	if !ringEmpty(t, name) {
		t.Fatal("the ring got events after the monitor closed")
	}

	// A monitor killed (never closing): its lease runs out and the
	// firewall stops copying, and clears the stale lease.
	ctl, err := ebpf.LoadPinnedMap(filepath.Join(PinDir(name), "fw_mon_ctl"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if err := ctl.Put(uint32(0), fwMonCtl{Until: monitor.Monotonic() + uint64(time.Second), Flags: uint32(monitor.WantAll), Snaplen: 64}); err != nil {
		t.Fatal(err)
	}
	genSend(t, tb, pkts[:2])
	if ringEmpty(t, name) {
		t.Fatal("no events while the lease lasts")
	}
	time.Sleep(1500 * time.Millisecond)
	genSend(t, tb, pkts)
	if !ringEmpty(t, name) {
		t.Fatal("events after the lease ran out")
	}
	var c fwMonCtl
	if err := ctl.Lookup(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	if c.Until != 0 {
		t.Errorf("the stale lease stays: until %d", c.Until)
	}
}

// BenchmarkMonitorCost is the firewall's pass path (no rules, the default
// passes) through BPF_PROG_TEST_RUN: nobody listening, a monitor listening
// for drops only (the pass path checks and goes on), and one listening for
// passes, each frame copied into the ring while a reader empties it.
func BenchmarkMonitorCost(b *testing.B) {
	tb := labTestbed()
	f, err := Load(LoadOptions{MaxFlows: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Install(LabRules(tb.Gen().Addr.Masked(), tb.Sink().Addr.Masked(), 0)); err != nil {
		b.Fatal(err)
	}
	r, err := ringbuf.NewReader(f.objs.FwMonRing)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	go func() {
		for {
			if _, err := r.Read(); errors.Is(err, ringbuf.ErrClosed) {
				return
			}
		}
	}()
	pkt := packet(b, flow("198.18.0.1", "198.18.1.1", 17, 1024, 9), 96)
	for _, c := range []struct {
		name string
		want monitor.Want
	}{{"none", 0}, {"drops", monitor.WantDrops}, {"passes", monitor.WantPasses}} {
		until := uint64(0)
		if c.want != 0 {
			until = monitor.Monotonic() + uint64(time.Hour)
		}
		if err := f.objs.FwMonCtl.Put(uint32(0), fwMonCtl{Until: until, Flags: uint32(c.want), Snaplen: monitor.SnapMax}); err != nil {
			b.Fatal(err)
		}
		b.Run("listener="+c.name, func(b *testing.B) {
			ret, d, err := f.Program().Benchmark(pkt, b.N, nil)
			if err != nil || ret != xdpPass {
				b.Fatal(ret, err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "kernel-ns/pkt")
		})
	}
}
