package obs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// LogOptions choose the level and form of a process's logs.
type LogOptions struct {
	// Level: debug, info, warn or error.
	Level string
	// Format: auto (text on a terminal, journald's form under systemd,
	// JSON otherwise), text, json or journald.
	Format string
	// Burst and Window bound repeats: at most Burst records with the same
	// level and message per Window; the rest are counted, and the next
	// record let through says how many were left out (suppressed=N).
	Burst  int
	Window time.Duration
}

// Log formats LogOptions.Format takes, and levels Level takes.
var (
	LogFormats = []string{"auto", "text", "json", "journald"}
	LogLevels  = []string{"debug", "info", "warn", "error"}
)

var (
	logMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fastpath_log_messages_total",
		Help: "Log records this process wrote, by level.",
	}, []string{"level"})
	logSuppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fastpath_log_messages_suppressed_total",
		Help: "Log records left out because the same message repeated faster than the rate limit allows, by level.",
	}, []string{"level"})
)

// ParseLevel reads a --log-level value.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: give one of %s", s, strings.Join(LogLevels, ", "))
}

// NewLogger makes the logger a process writes to w (its stderr) with.
func NewLogger(w *os.File, o LogOptions) (*slog.Logger, error) {
	level, err := ParseLevel(o.Level)
	if err != nil {
		return nil, err
	}
	format := strings.ToLower(o.Format)
	if format == "" || format == "auto" {
		format = autoFormat(w)
	}
	var h slog.Handler
	ho := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		h = slog.NewTextHandler(w, ho)
	case "json":
		h = slog.NewJSONHandler(w, ho)
	case "journald":
		h = newJournald(w, level)
	default:
		return nil, fmt.Errorf("--log-format %q: give one of %s", o.Format, strings.Join(LogFormats, ", "))
	}
	if o.Burst <= 0 {
		o.Burst = 10
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	return slog.New(&limited{next: h, state: &limitState{burst: o.Burst, window: o.Window, now: time.Now, keys: map[limitKey]*limitEntry{}}}), nil
}

// autoFormat: a terminal reads text; journald, which a service's stderr is
// connected to when JOURNAL_STREAM names it, reads priorities as "<N>"
// prefixes and stamps the time itself; anything else gets JSON lines.
func autoFormat(w *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(w.Fd()), &st); err == nil {
		if js := os.Getenv("JOURNAL_STREAM"); js != "" {
			dev, ino, ok := strings.Cut(js, ":")
			if ok && dev == strconv.FormatUint(st.Dev, 10) && ino == strconv.FormatUint(st.Ino, 10) {
				return "journald"
			}
		}
	}
	if _, err := unix.IoctlGetTermios(int(w.Fd()), unix.TCGETS); err == nil {
		return "text"
	}
	return "json"
}

// journald writes one line per record, "<P>msg key=value ...", with P
// the syslog priority journald files the line under (3 error, 4 warning,
// 6 info, 7 debug): `journalctl -p err` then finds a daemon's errors.
type journald struct {
	mu    *sync.Mutex
	w     io.Writer
	level slog.Leveler
	// build applies the attributes and groups added so far to a text
	// handler writing to a record's own buffer.
	build func(io.Writer) slog.Handler
}

func newJournald(w io.Writer, level slog.Leveler) *journald {
	drop := func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
			return slog.Attr{}
		}
		return a
	}
	return &journald{mu: &sync.Mutex{}, w: w, level: level, build: func(b io.Writer) slog.Handler {
		return slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: drop})
	}}
}

func (j *journald) Enabled(_ context.Context, l slog.Level) bool { return l >= j.level.Level() }

func (j *journald) Handle(ctx context.Context, r slog.Record) error {
	var b bytes.Buffer
	prio := 6
	switch {
	case r.Level >= slog.LevelError:
		prio = 3
	case r.Level >= slog.LevelWarn:
		prio = 4
	case r.Level < slog.LevelInfo:
		prio = 7
	}
	fmt.Fprintf(&b, "<%d>", prio)
	if err := j.build(&b).Handle(ctx, r); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err := j.w.Write(b.Bytes())
	return err
}

func (j *journald) WithAttrs(as []slog.Attr) slog.Handler {
	prev := j.build
	return &journald{mu: j.mu, w: j.w, level: j.level, build: func(b io.Writer) slog.Handler { return prev(b).WithAttrs(as) }}
}

func (j *journald) WithGroup(name string) slog.Handler {
	prev := j.build
	return &journald{mu: j.mu, w: j.w, level: j.level, build: func(b io.Writer) slog.Handler { return prev(b).WithGroup(name) }}
}

// limited lets through at most burst records of one level and message per
// window: a device that flaps, or a peer that sends garbage every
// millisecond, costs a line now and then and a counter, not the disk.
type limited struct {
	next  slog.Handler
	state *limitState
}

type limitKey struct {
	level slog.Level
	msg   string
}

type limitEntry struct {
	start      time.Time
	n          int
	suppressed int
}

type limitState struct {
	mu     sync.Mutex
	burst  int
	window time.Duration
	now    func() time.Time
	keys   map[limitKey]*limitEntry
}

// maxLimitKeys bounds the table: messages are constants of the code, but
// a message built from input must not grow it without end.
const maxLimitKeys = 4096

// admit says whether a record goes out and, if so, how many like it were
// left out before it.
func (s *limitState) admit(k limitKey) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.keys[k]
	if e == nil {
		if len(s.keys) >= maxLimitKeys {
			for old, oe := range s.keys {
				if now.Sub(oe.start) >= s.window {
					delete(s.keys, old)
				}
			}
			if len(s.keys) >= maxLimitKeys {
				return false, 0
			}
		}
		e = &limitEntry{start: now}
		s.keys[k] = e
	}
	if now.Sub(e.start) >= s.window {
		e.start, e.n = now, 0
	}
	if e.n >= s.burst {
		e.suppressed++
		return false, 0
	}
	e.n++
	sup := e.suppressed
	e.suppressed = 0
	return true, sup
}

func (l *limited) Enabled(ctx context.Context, lv slog.Level) bool { return l.next.Enabled(ctx, lv) }

func (l *limited) Handle(ctx context.Context, r slog.Record) error {
	lv := levelName(r.Level)
	ok, sup := l.state.admit(limitKey{r.Level, r.Message})
	if !ok {
		logSuppressed.WithLabelValues(lv).Inc()
		return nil
	}
	logMessages.WithLabelValues(lv).Inc()
	if sup > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", sup))
	}
	return l.next.Handle(ctx, r)
}

func (l *limited) WithAttrs(as []slog.Attr) slog.Handler {
	return &limited{next: l.next.WithAttrs(as), state: l.state}
}

func (l *limited) WithGroup(name string) slog.Handler {
	return &limited{next: l.next.WithGroup(name), state: l.state}
}

func levelName(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warn"
	case l >= slog.LevelInfo:
		return "info"
	}
	return "debug"
}

// Writer is an io.Writer that logs each line written to it at level:
// for code that still reports through an io.Writer.
func Writer(l *slog.Logger, level slog.Level) io.Writer { return &lineWriter{l: l, level: level} }

type lineWriter struct {
	mu    sync.Mutex
	l     *slog.Logger
	level slog.Level
	buf   []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
		if line != "" {
			w.l.Log(context.Background(), w.level, line)
		}
	}
	return len(p), nil
}
