package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
)

func TestRegistryPassesPromtool(t *testing.T) {
	SetBuild(Build{Version: "1.2.3", Commit: "abc"})
	r := NewRegistry("fw")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ServeListener(ctx, ln, r)
	body := obstest.Scrape(t, "http://"+ln.Addr().String()+"/metrics")
	obstest.CheckMetrics(t, body)
	if !strings.Contains(string(body), `fastpath_build_info{commit="abc",function="fw",goversion=`) {
		t.Errorf("no fastpath_build_info with the build's labels in:\n%s", body)
	}
	if _, ok := obstest.Value(body, "process_start_time_seconds"); !ok {
		t.Error("no process_start_time_seconds: an alert cannot see a restart")
	}
}

func TestServeRefusesATakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = Serve(context.Background(), ln.Addr().String(), NewRegistry("br"))
	if err == nil || !strings.Contains(err.Error(), "--metrics") {
		t.Fatalf("serving on a taken port: %v, want an error naming --metrics", err)
	}
}

func tempLog(t *testing.T, o LogOptions) (*slog.Logger, func() string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLogger(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return l, func() string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
}

func TestAutoIsJSONOffATerminal(t *testing.T) {
	t.Setenv("JOURNAL_STREAM", "")
	l, read := tempLog(t, LogOptions{})
	l.Warn("device fell back", "device", "eth0")
	var rec map[string]any
	if err := json.Unmarshal([]byte(read()), &rec); err != nil {
		t.Fatalf("auto log to a file is not JSON: %v", err)
	}
	if rec["level"] != "WARN" || rec["msg"] != "device fell back" || rec["device"] != "eth0" {
		t.Errorf("record %v", rec)
	}
}

func TestJournaldPrefixesPriority(t *testing.T) {
	l, read := tempLog(t, LogOptions{Format: "journald", Level: "debug"})
	l.Error("attach failed", "device", "eth0")
	l.Info("attached")
	l.Debug("looked")
	got := read()
	for _, want := range []string{"<3>msg=\"attach failed\" device=eth0\n", "<6>msg=attached\n", "<7>msg=looked\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("journald log lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "time=") {
		t.Errorf("journald stamps the time itself; the line has one:\n%s", got)
	}
}

func TestLevelFilters(t *testing.T) {
	l, read := tempLog(t, LogOptions{Format: "text", Level: "warn"})
	l.Info("quiet")
	l.Warn("loud")
	if got := read(); strings.Contains(got, "quiet") || !strings.Contains(got, "loud") {
		t.Errorf("--log-level warn wrote:\n%s", got)
	}
	if _, err := NewLogger(os.Stderr, LogOptions{Level: "chatty"}); err == nil {
		t.Error("a bad level was taken")
	}
	if _, err := NewLogger(os.Stderr, LogOptions{Format: "xml"}); err == nil {
		t.Error("a bad format was taken")
	}
}

func TestRepeatsAreLimitedAndCounted(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	st := &limitState{burst: 3, window: 10 * time.Second, now: func() time.Time { return now }, keys: map[limitKey]*limitEntry{}}
	l := slog.New(&limited{next: slog.NewTextHandler(&buf, nil), state: st})
	for i := 0; i < 100; i++ {
		l.Warn("bad packet from peer", "i", i)
	}
	l.Warn("another message")
	if n := strings.Count(buf.String(), "bad packet from peer"); n != 3 {
		t.Errorf("%d lines of a repeated message in one window, want 3:\n%s", n, buf.String())
	}
	now = now.Add(11 * time.Second)
	l.Warn("bad packet from peer", "i", 100)
	if !strings.Contains(buf.String(), "suppressed=97") {
		t.Errorf("the first line of the next window does not say 97 were left out:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "another message") {
		t.Error("another message was limited with the first")
	}
}

func TestLimitTableIsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	st := &limitState{burst: 1, window: time.Second, now: func() time.Time { return now }, keys: map[limitKey]*limitEntry{}}
	for i := 0; i < 3*maxLimitKeys; i++ {
		st.admit(limitKey{slog.LevelInfo, strings.Repeat("x", i%50) + string(rune(i))})
	}
	if len(st.keys) > maxLimitKeys {
		t.Errorf("%d keys, bound is %d", len(st.keys), maxLimitKeys)
	}
}
