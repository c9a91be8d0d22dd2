package fw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// Serve's intervals by default.
const (
	// DefaultGCInterval is how often Serve removes expired connections.
	DefaultGCInterval = 10 * time.Second
	// DefaultPoll is how often Serve looks at the rules file and the pins.
	DefaultPoll = time.Second
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// Rules is the rules file. Serve reads it at start, on Reload, and
	// whenever it changes (an edit in place, or a file renamed over it).
	Rules string
	// Attach says where and how to attach, as for `fw attach`; its Rules
	// and Warn are Serve's to set.
	Attach AttachOptions
	// FailClosed gives the devices a rule set that drops every IP packet while the file cannot be read
	// or is invalid at start and the instance has no rules yet. Without
	// it, nothing is attached until the file is valid.
	FailClosed bool
	// GCInterval is the time between two removals of expired connections;
	// DefaultGCInterval if 0.
	GCInterval time.Duration
	// Poll is how often the file and the pins are looked at; DefaultPoll
	// if 0.
	Poll time.Duration
	// Log receives serve's records and attach's warnings; slog.Default()
	// if nil. Every record carries the instance's name.
	Log *slog.Logger
	// Metrics, if set, gets serve's own counters (NewServeMetrics): the
	// rules file's reloads and the connections its gc removed. The maps'
	// figures are a Collector's.
	Metrics *ServeMetrics
	// Reload: each value reads the file again, changed or not.
	Reload <-chan struct{}
	// Ready, if set, is called when serve has done what it can at start
	// (attached, or, failing open, waiting for a valid file), and after
	// each reload.
	Ready func()
	// Reloading, if set, is called before a reload.
	Reloading func()
}

// dropAll is the rule set a firewall serving with FailClosed runs while its
// rules file is bad: every IP packet is dropped. It has no [conntrack]
// table, so a new instance tracks nothing.
func dropAll() *RuleSet {
	return &RuleSet{Default: Drop, File: "the fail-closed rule set (drop every IP packet)"}
}

// Serve attaches the firewall with the rules of a file, and keeps it: it
// reads the file again on Reload and when it changes, replacing the
// running rules in one step, and removes expired connections every
// GCInterval (nothing else does, and dead connections would fill the
// established table, which never evicts). A file that cannot be read or is
// invalid is never half-applied: the running rules stay, and the error is
// logged with the file and line. At start, a device or namespace that is
// not there yet is waited for (tried again after 1 s, 2 s, 4 s … up to a
// minute, each new reason logged). Serve never detaches: when ctx ends it
// returns nil and the program keeps filtering with the rules it has; a new
// Serve attaches again in place. When the firewall is detached (`fw
// detach`) Serve returns nil too: a service manager that restarts it on
// failure must not attach it again.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Rules == "" {
		return errors.New("no rules file: name one with --rules")
	}
	for _, d := range []struct {
		flag string
		v    *time.Duration
		def  time.Duration
	}{{"--gc-interval", &o.GCInterval, DefaultGCInterval}, {"poll interval", &o.Poll, DefaultPoll}} {
		if *d.v < 0 {
			return fmt.Errorf("%s %s: give a positive duration, such as %s", d.flag, *d.v, d.def)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.Attach.Name == "" {
		o.Attach.Name = DefaultName
	}
	o.Log = o.Log.With("name", o.Attach.Name)
	o.Attach.Warn = obs.Writer(o.Log, slog.LevelWarn)
	if !validName.MatchString(o.Attach.Name) || o.Attach.Name == "." || o.Attach.Name == ".." {
		return fmt.Errorf("instance name %q: use letters, digits, '.', '_' or '-'", o.Attach.Name)
	}
	if len(o.Attach.Devices) == 0 {
		return errors.New("no device given: name at least one")
	}
	s := &server{o: o, log: o.Log, name: o.Attach.Name, dir: PinDir(o.Attach.Name), m: o.Metrics}
	if s.m == nil {
		s.m = NewServeMetrics(o.Attach.Name)
	}
	defer func() {
		if s.f != nil {
			s.f.Close()
		}
	}()
	return s.run(ctx)
}

// server is one Serve's state.
type server struct {
	o         ServeOptions
	log       *slog.Logger
	m         *ServeMetrics
	name, dir string
	// f is the attached instance's maps; nil until attached.
	f *Firewall
	// pending says an attach waits (for a device), with rules (nil: the
	// instance's own), tried again at retry, wait after the last try.
	pending bool
	rules   *RuleSet
	retry   *time.Timer
	wait    time.Duration
	// seen is the file as last read; next as last looked at, not yet
	// read (see changed).
	seen, next fileStamp
	ready      bool
	// lastErr is the last attach or gc error logged, each said once.
	lastAttach, lastGC string
}

func (s *server) run(ctx context.Context) error {
	s.retry = time.NewTimer(time.Hour)
	s.retry.Stop()
	defer s.retry.Stop()
	if err := s.start(); err != nil {
		return err
	}
	poll := time.NewTicker(s.o.Poll)
	defer poll.Stop()
	gc := time.NewTicker(s.o.GCInterval)
	defer gc.Stop()
	for {
		select {
		case <-ctx.Done():
			s.stop()
			return nil
		case <-s.o.Reload:
			if err := s.reload("reload"); err != nil {
				return err
			}
		case <-s.retry.C:
			if err := s.attach(); err != nil {
				return err
			}
		case <-poll.C:
			if s.f != nil && s.detached() {
				s.log.Info("firewall was detached, serve ends; start it again to attach", "pins", s.dir)
				return nil
			}
			if s.changed() {
				if err := s.reload("file_changed"); err != nil {
					return err
				}
			}
		case <-gc.C:
			if s.f == nil {
				continue
			}
			n, err := s.f.ExpireConns()
			s.m.gcRemoved.Add(float64(n))
			if err != nil {
				if err.Error() != s.lastGC {
					s.log.Warn("cannot remove expired connections, trying again each interval", "error", err, "interval", s.o.GCInterval.String())
				}
				s.lastGC = err.Error()
			} else {
				if n > 0 {
					s.log.Debug("expired connections removed", "removed", n)
				}
				s.lastGC = ""
			}
		}
	}
}

// start reads the file and attaches with what it can.
func (s *server) start() error {
	s.seen = stampOf(s.o.Rules)
	s.next = s.seen
	rs, err := LoadRules(s.o.Rules)
	s.m.reloaded(err)
	switch {
	case err == nil:
		s.rules = rs
	case s.hasRules():
		s.log.Error("rules file invalid at start: the firewall keeps the rules it runs; serve reads the file again when it changes or on SIGHUP", s.rulesErr(err)...)
		s.rules = nil
	case s.o.FailClosed:
		s.log.Error("rules file invalid at start: failing closed (--fail-closed), the devices drop every IP packet until the file is valid", append(s.rulesErr(err), "devices", s.devices())...)
		s.rules = dropAll()
	default:
		s.log.Error("rules file invalid at start: failing open, nothing is attached until the file is valid (serve reads it again when it changes or on SIGHUP; --fail-closed drops every packet instead)", append(s.rulesErr(err), "devices", s.devices())...)
		s.setReady()
		return nil
	}
	s.pending, s.wait = true, time.Second
	return s.attach()
}

// hasRules says whether the instance exists and runs a rule set.
func (s *server) hasRules() bool {
	f, err := OpenPinned(s.name)
	if err != nil {
		return false
	}
	defer f.Close()
	gen, err := f.Generation()
	return err == nil && gen > 0
}

func (s *server) devices() string {
	var ds []string
	for _, d := range s.o.Attach.Devices {
		ds = append(ds, d.String())
	}
	return strings.Join(ds, ", ")
}

// attach tries the pending attach. While what fails is the host not being
// ready — a device or its namespace missing — it tries again later, with a
// growing wait; any other failure ends serve.
func (s *server) attach() error {
	if !s.pending {
		return nil
	}
	o := s.o.Attach
	o.Rules = s.rules
	err := Attach(o)
	if errors.Is(err, xdp.ErrNoDevice) || errors.Is(err, netns.ErrNotExist) {
		if err.Error() != s.lastAttach {
			s.log.Warn("cannot attach yet, trying again later and less often", "error", err, "retry_in", s.wait.String(), "max_wait", attachBackoff.String())
			s.lastAttach = err.Error()
		}
		s.retry.Reset(s.wait)
		s.wait = min(2*s.wait, attachBackoff)
		return nil
	}
	if err != nil {
		return err
	}
	f, err := OpenPinned(s.name)
	if err != nil {
		return err
	}
	s.f, s.pending, s.lastAttach = f, false, ""
	attrs := []any{"devices", s.devices(), "pins", s.dir, "file", s.o.Rules, "gc_interval", s.o.GCInterval.String()}
	if s.rules != nil {
		attrs = append(attrs, "rules", len(s.rules.Rules), "rules_from", s.rules.File, "default", s.rules.Default.String())
	} else {
		attrs = append(attrs, "rules_from", "the instance (the rules it had)")
	}
	s.log.Info("firewall attached", attrs...)
	s.setReady()
	return nil
}

// attachBackoff is the longest wait between two attaches while the host is
// not ready.
const attachBackoff = time.Minute

func (s *server) setReady() {
	if !s.ready && s.o.Ready != nil {
		s.o.Ready()
	}
	s.ready = true
}

// reload reads the file again and, if it is valid, makes it the running
// rule set in one step; otherwise everything stays as it is.
func (s *server) reload(why string) error {
	s.seen = stampOf(s.o.Rules)
	s.next = s.seen
	rs, err := LoadRules(s.o.Rules)
	if err != nil {
		s.m.reloaded(err)
		attrs := append(s.rulesErr(err), "trigger", why)
		switch {
		case s.f != nil:
			s.log.Error("rules file invalid: the firewall goes on with the rules it has", attrs...)
		case s.pending:
			s.log.Error("rules file invalid: the attach that waits for the devices keeps the rules it had", attrs...)
		default:
			s.log.Error("rules file invalid: nothing is attached until the file is valid", attrs...)
		}
		return nil
	}
	if s.f == nil {
		// Not attached yet: the attach, waiting or failed open, takes
		// these rules, and is tried at once.
		s.rules = rs
		if !s.pending {
			s.pending, s.wait = true, time.Second
		}
		s.retry.Stop()
		s.m.reloaded(nil)
		s.log.Info("rules file valid, attaching", "trigger", why, "file", s.o.Rules, "rules", len(rs.Rules))
		return s.attach()
	}
	if s.o.Reloading != nil {
		s.o.Reloading()
	}
	defer func() {
		if s.o.Ready != nil {
			s.o.Ready()
		}
	}()
	start := time.Now()
	if err := s.f.Install(rs); err != nil {
		s.m.reloaded(err)
		s.log.Error("cannot install the rules file: the firewall goes on with the rules it has", "trigger", why, "file", s.o.Rules, "error", err)
		return nil
	}
	s.m.reloaded(nil)
	gen, _ := s.f.Generation()
	s.log.Info("rules installed in place", "trigger", why, "file", s.o.Rules, "rules", len(rs.Rules), "default", rs.Default.String(),
		"generation", gen, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// stop says what stays when serve ends.
func (s *server) stop() {
	if s.f == nil {
		s.log.Info("serve ends; nothing was attached")
		return
	}
	s.log.Info("serve ends; the firewall stays attached and filters with the rules it has (fw serve again takes over, fw detach removes it)", "devices", s.devices())
}

// rulesErr are a rules file error's attributes: the file, the line when
// the error names one, and what is wrong.
func (s *server) rulesErr(err error) []any {
	var re *RulesError
	if errors.As(err, &re) {
		attrs := []any{"file", re.File}
		if re.Line > 0 {
			attrs = append(attrs, "line", re.Line)
		}
		return append(attrs, "error", re.Msg)
	}
	return []any{"file", s.o.Rules, "error", err}
}

// ServeMetrics are what Serve itself counts, for its /metrics beside a
// Collector of the instance's maps.
type ServeMetrics struct {
	reloads    *prometheus.CounterVec
	lastReload prometheus.Gauge
	gcRemoved  prometheus.Counter
}

// NewServeMetrics makes serve's counters for the instance name; Register
// them with the registry serve's /metrics serves.
func NewServeMetrics(name string) *ServeMetrics {
	labels := prometheus.Labels{"name": name}
	m := &ServeMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fastpath_fw_reloads_total", ConstLabels: labels,
			Help: "Reads of the rules file by fw serve (at start, on SIGHUP, when it changed), by result: ok (valid, and installed or attached with), error (invalid or not installed: the running rules stay).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fastpath_fw_last_reload_successful", ConstLabels: labels,
			Help: "1 if fw serve's last read of the rules file was valid and installed, 0 if the firewall runs older rules (or none) than the file says.",
		}),
		gcRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastpath_fw_ct_gc_removed_total", ConstLabels: labels,
			Help: "Expired connections fw serve's gc removed.",
		}),
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	return m
}

// Describe and Collect make ServeMetrics a prometheus.Collector.
func (m *ServeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.reloads.Describe(ch)
	m.lastReload.Describe(ch)
	m.gcRemoved.Describe(ch)
}

func (m *ServeMetrics) Collect(ch chan<- prometheus.Metric) {
	m.reloads.Collect(ch)
	m.lastReload.Collect(ch)
	m.gcRemoved.Collect(ch)
}

func (m *ServeMetrics) reloaded(err error) {
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		m.lastReload.Set(0)
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
	m.lastReload.Set(1)
}

// detached says the instance's pins are gone: `fw detach` removed it.
func (s *server) detached() bool {
	_, err := os.Stat(filepath.Join(s.dir, "fw_gen"))
	return errors.Is(err, os.ErrNotExist)
}

// fileStamp is what tells a file changed: a new inode (a file renamed over
// it), another size or time of change, or its coming or going.
type fileStamp struct {
	ok         bool
	dev, ino   uint64
	size       int64
	mtime, ctm int64
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	st := fileStamp{ok: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino = uint64(sys.Dev), sys.Ino
		st.ctm = sys.Ctim.Nano()
	}
	return st
}

// changed says the file changed since it was read and has stayed as it is
// for one poll since: a file written in place is read once its writer is
// done, not half-written (a cut that parses would be installed as the
// whole). A file renamed into place is complete at once, but waits the
// same poll.
func (s *server) changed() bool {
	now := stampOf(s.o.Rules)
	if now == s.seen {
		s.next = now
		return false
	}
	settled := now == s.next
	s.next = now
	return settled
}
