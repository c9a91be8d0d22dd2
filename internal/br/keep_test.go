package br

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// syncBuffer is a log written by a keeper's goroutine and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// textLog is a logger writing slog's text form to w, as tests read it.
func textLog(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// keep runs a keeper for the attached router until the test ends (before
// the namespaces go: its netlink sockets would keep them alive).
func keep(t *testing.T, cfg *Config, name string) (*Keeper, *syncBuffer) {
	t.Helper()
	log := &syncBuffer{}
	k, err := OpenKeeper(cfg, KeepOptions{Name: name, Log: textLog(log)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx, nil, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("keeper: %v", err)
		}
		k.Close()
	})
	return k, log
}

// passProgram is an XDP program that passes every frame: what a neighbour
// runs that makes its veth take redirected frames.
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

// A neighbour whose veth cannot take XDP frames when the router attaches
// (neither an XDP program nor GRO at its end) gains one later, and loses it
// again, without anyone attaching the router again: the keeper moves its
// traffic into XDP within about a second and back to the reference router
// as quickly. Every datagram sent is forwarded (and arrives), passed up as
// tx_unusable, or counted tx_failed while the change is being noticed.
func TestKeeperFollowsTheNeighbour(t *testing.T) {
	cases := map[string]struct {
		why string // what the keeper says makes the device usable
		// peer gives what makes b0 take frames, and what takes it away.
		peer func(t *testing.T, b *hostBed) (gain, lose func())
	}{
		"GRO": {
			why: "its peer %s/b0 has GRO on",
			peer: func(t *testing.T, b *hostBed) (func(), func()) {
				return func() { b.setGRO(t, b.b, "b0", true) }, func() { b.setGRO(t, b.b, "b0", false) }
			},
		},
		"XDP program": {
			why: "its peer %s/b0 runs an XDP program",
			peer: func(t *testing.T, b *hostBed) (func(), func()) {
				var l link.Link
				gain := func() {
					var err error
					if l, err = xdp.Attach(xdp.Iface{Netns: b.b, Name: "b0"}, passProgram(t), xdp.Native); err != nil {
						t.Fatal(err)
					}
				}
				return gain, func() { l.Close() }
			},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b := newHostBed(t, false)
			b.setGRO(t, b.b, "b0", false)
			name, warnings := b.attach(t, XDPModeNative)
			if !strings.Contains(warnings, "`fastpath br serve` picks the fix up within a second") {
				t.Fatalf("attach warned %q; want it to say that br serve picks the fix up", warnings)
			}
			k, log := keep(t, b.cfg, name)
			got := listen(t, b.b, netip.AddrPortFrom(b.bAddr, 50000))
			s := b.sender(t, name, log)
			s.burst(10, "tx_unusable")
			gain, lose := c.peer(t, b)
			gain()
			t.Logf("forwarded in XDP %s after the neighbour could take frames", s.until("forwarded").Round(time.Millisecond))
			s.burst(20, "forwarded")
			lose()
			t.Logf("back to the reference router %s after the neighbour could no longer take frames", s.until("tx_unusable").Round(time.Millisecond))
			s.burst(10, "tx_unusable")

			v := verdicts(t, name)
			if total := v["forwarded"] + v["tx_unusable"] + v["tx_failed"]; total != uint64(s.sent) || len(v) > 3 {
				t.Fatalf("sent %d datagrams; verdicts %v", s.sent, v)
			}
			if arrived := len(got.await(int(v["forwarded"]))); uint64(arrived) != v["forwarded"] {
				t.Fatalf("%d datagrams arrived at B, %d were forwarded", arrived, v["forwarded"])
			}
			want := []string{
				strings.ReplaceAll(c.why, "%s", b.b),
				"device falls back to the reference router",
			}
			for _, w := range want {
				if !strings.Contains(log.String(), w) {
					t.Fatalf("the keeper said:\n%s\nwant a line with %q", log, w)
				}
			}
			checks, mean := k.Stats()
			t.Logf("%d checks, %s each on average; the keeper said:\n%s", checks, mean.Round(time.Microsecond), log)
		})
	}
}

// sender sends transit datagrams from A across the router and watches how
// the router counts them.
type sender struct {
	t      *testing.T
	b      *hostBed
	name   string
	log    fmt.Stringer // the keeper's, shown when a count is wrong
	dgrams [][]byte
	sent   int
}

func (b *hostBed) sender(t *testing.T, name string, log fmt.Stringer) *sender {
	return &sender{t: t, b: b, name: name, log: log, dgrams: b.transit(t, 1)}
}

func (s *sender) one() {
	send(s.t, s.b.a, netip.AddrPortFrom(s.b.aAddr, 50000), netip.AddrPortFrom(s.b.d0Addr, 50000), s.dgrams)
	s.sent++
}

// until sends a datagram every 20 ms until the verdict counts one more
// than before, and says how long that took.
func (s *sender) until(verdict string) time.Duration {
	s.t.Helper()
	before := verdicts(s.t, s.name)[verdict]
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		s.one()
		time.Sleep(20 * time.Millisecond)
		if verdicts(s.t, s.name)[verdict] > before {
			return time.Since(start)
		}
	}
	s.t.Fatalf("no datagram counted %s after 10 s; verdicts %v; the keeper said:\n%s", verdict, verdicts(s.t, s.name), s.log)
	return 0
}

// burst sends n datagrams and wants each counted under verdict.
func (s *sender) burst(n int, verdict string) {
	s.t.Helper()
	before := verdicts(s.t, s.name)
	for i := 0; i < n; i++ {
		s.one()
	}
	time.Sleep(100 * time.Millisecond)
	after := verdicts(s.t, s.name)
	if d := after[verdict] - before[verdict]; d != uint64(n) {
		s.t.Fatalf("%d of %d datagrams counted %s; verdicts before %v, after %v; the keeper said:\n%s", d, n, verdict, before, after, s.log)
	}
}
