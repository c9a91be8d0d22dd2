package tra

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/daemon"
	"github.com/scionproto/scion/pkg/snet"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// The translator as an operator runs it: one daemon per translator, its
// service unit, what it takes from topology.json and when.

// syncLog is a log several goroutines write.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runInHost runs the daemon in the host's namespace, in this process, with
// a source of no paths; it ends with the test.
func (a *attachedHost) runInHost(t *testing.T, ctx context.Context, log *syncLog) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- netns.Run(a.host, func() error {
			return Run(ctx, a.cfg, RunOptions{Name: a.name, Log: log, Source: &fakeSource{paths: map[addr.IA][]snet.Path{}}})
		})
	}()
	return done
}

// Item 10: a second daemon on the same translator fails at once, naming
// the first one's PID; the first goes on.
func TestSecondDaemonRefused(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log1 syncLog
	first := a.runInHost(t, ctx, &log1)
	eventually(t, 5*time.Second, "the first daemon's first line", func() bool { return strings.Contains(log1.String(), "paths from") })

	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	var log2 syncLog
	select {
	case err := <-a.runInHost(t, ctx2, &log2):
		if !errors.Is(err, ErrAlreadyRunning) {
			t.Fatalf("the second daemon: %v, want ErrAlreadyRunning", err)
		}
		want := fmt.Sprintf("translator %s is already run by PID %d; stop it first (systemctl stop", a.name, os.Getpid())
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the second daemon: %q, want it to say %q", err, want)
		}
	case <-ctx2.Done():
		t.Fatalf("a second daemon runs the same translator beside the first:\n%s", log2.String())
	}
	select {
	case err := <-first:
		t.Fatalf("the first daemon ended when the second was refused: %v", err)
	case <-time.After(time.Second):
	}
	cancel()
	if err := <-first; err != nil {
		t.Fatalf("the first daemon: %v", err)
	}
	// Its lock is given up with it: a daemon started now runs.
	ctx3, cancel3 := context.WithCancel(context.Background())
	var log3 syncLog
	third := a.runInHost(t, ctx3, &log3)
	eventually(t, 5*time.Second, "a daemon after the first ended", func() bool { return strings.Contains(log3.String(), "paths from") })
	cancel3()
	if err := <-third; err != nil {
		t.Fatal(err)
	}
}

// flagSource records what each lookup asks of scionproto's daemon.
type flagSource struct {
	PathSource
	mu      sync.Mutex
	refresh []bool
}

func (s *flagSource) Paths(ctx context.Context, dst, src addr.IA, f daemon.PathReqFlags) ([]snet.Path, error) {
	s.mu.Lock()
	s.refresh = append(s.refresh, f.Refresh)
	s.mu.Unlock()
	return s.PathSource.Paths(ctx, dst, src, f)
}

func (s *flagSource) take() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.refresh
	s.refresh = nil
	return out
}

// Item 12: a periodic refresh takes scionproto's daemon's cache; only a
// lookup an error asks for (paths expired, wantFresh) makes it ask its
// control service again. Before, every refresh of a destination with paths
// asked with Refresh: a control-service fetch per destination in use a
// minute.
func TestRefreshTakesTheDaemonsCache(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	rec := &flagSource{PathSource: td.src}
	td.pathDaemon.src = rec
	exp := td.clock.Add(time.Hour)
	td.src.paths[remoteIA] = []snet.Path{testSCIONPath(t, remoteIA, viaLink1, 1, exp)}
	// Each housekeeping finds the destination in use.
	housekeep := func() {
		td.plane.MarkUsed(td.dests[remoteIA].slot, td.usedNow())
		td.housekeep(td.clock)
	}
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{"a new destination", func() { td.onHeld(heldUDP(t, remoteIA)) }, false},
		{"the periodic refresh", func() { td.advance(61 * time.Second); housekeep() }, false},
		{"another one", func() { td.advance(61 * time.Second); housekeep() }, false},
		{"the paths expired", func() {
			td.src.paths[remoteIA] = []snet.Path{testSCIONPath(t, remoteIA, viaLink2, 2, exp.Add(time.Hour))}
			td.clock = exp.Add(-500 * time.Millisecond)
			housekeep()
		}, true},
		{"the refresh after", func() { td.advance(61 * time.Second); housekeep() }, false},
		{"wantFresh (a failover)", func() { td.advance(2 * time.Second); td.wantFresh(td.dests[remoteIA]); td.dispatch() }, true},
		{"paths about to expire, the cache's", func() {
			td.src.paths[remoteIA] = []snet.Path{testSCIONPath(t, remoteIA, viaLink2, 2, td.clock.Add(90*time.Second))}
			td.advance(61 * time.Second)
			housekeep()
			td.settle(t)
			rec.take()
			td.advance(70 * time.Second) // 20 s left
			housekeep()
		}, true},
	}
	for _, s := range steps {
		s.do()
		td.settle(t)
		got := rec.take()
		if len(got) != 1 || got[0] != s.want {
			t.Fatalf("%s: lookups with Refresh %v, want one with %v", s.name, got, s.want)
		}
	}
}
