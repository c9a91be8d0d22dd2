package fw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
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
	// Log receives attach's warnings and serve's lines.
	Log io.Writer
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
		o.Log = io.Discard
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
	o.Attach.Warn = o.Log
	if o.Attach.Name == "" {
		o.Attach.Name = DefaultName
	}
	if !validName.MatchString(o.Attach.Name) || o.Attach.Name == "." || o.Attach.Name == ".." {
		return fmt.Errorf("instance name %q: use letters, digits, '.', '_' or '-'", o.Attach.Name)
	}
	if len(o.Attach.Devices) == 0 {
		return errors.New("no device given: name at least one")
	}
	s := &server{o: o, name: o.Attach.Name, dir: PinDir(o.Attach.Name)}
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

func (s *server) logf(format string, args ...any) { fmt.Fprintf(s.o.Log, format+"\n", args...) }

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
			if err := s.reload("reload asked for"); err != nil {
				return err
			}
		case <-s.retry.C:
			if err := s.attach(); err != nil {
				return err
			}
		case <-poll.C:
			if s.f != nil && s.detached() {
				s.logf("firewall %s was detached (its pins in %s are gone): serve ends; start it again to attach", s.name, s.dir)
				return nil
			}
			if s.changed() {
				if err := s.reload(s.o.Rules + " changed"); err != nil {
					return err
				}
			}
		case <-gc.C:
			if s.f == nil {
				continue
			}
			if _, err := s.f.ExpireConns(); err != nil {
				if err.Error() != s.lastGC {
					s.logf("remove expired connections: %v; trying again every %s", err, s.o.GCInterval)
				}
				s.lastGC = err.Error()
			} else {
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
	switch {
	case err == nil:
		s.rules = rs
	case s.hasRules():
		s.logf("%v\nthe firewall keeps the rules it runs, and serve reads %s again when it changes or on SIGHUP", err, s.o.Rules)
		s.rules = nil
	case s.o.FailClosed:
		s.logf("%v\nfailing closed (--fail-closed): %s is attached with a rule set that drops every IP packet until %s is valid", err, s.devices(), s.o.Rules)
		s.rules = dropAll()
	default:
		s.logf("%v\nfailing open: nothing is attached to %s until %s is valid (serve reads it again when it changes or on SIGHUP; --fail-closed drops every packet instead)", err, s.devices(), s.o.Rules)
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
			s.logf("attach: %v; trying again in %s, and less often after (at most every %s)", err, s.wait, attachBackoff)
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
	what := "the rules it had"
	if s.rules != nil {
		what = fmt.Sprintf("%d rules of %s, default %s", len(s.rules.Rules), s.rules.File, s.rules.Default)
	}
	s.logf("firewall %s attached to %s with %s; pins in %s; reading %s again when it changes or on SIGHUP, removing expired connections every %s",
		s.name, s.devices(), what, s.dir, s.o.Rules, s.o.GCInterval)
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
		switch {
		case s.f != nil:
			s.logf("%s: %v\nthe firewall goes on with the rules it has", why, err)
		case s.pending:
			s.logf("%s: %v\nthe attach that waits for the devices keeps the rules it had", why, err)
		default:
			s.logf("%s: %v\nnothing is attached until the file is valid", why, err)
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
		s.logf("%s: valid, %d rules; attaching", why, len(rs.Rules))
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
		s.logf("%s: install %s: %v\nthe firewall goes on with the rules it has", why, s.o.Rules, err)
		return nil
	}
	gen, _ := s.f.Generation()
	s.logf("%s: %d rules of %s installed in place, default %s (generation %d, %s)", why, len(rs.Rules), s.o.Rules, rs.Default, gen, time.Since(start).Round(time.Millisecond))
	return nil
}

// stop says what stays when serve ends.
func (s *server) stop() {
	if s.f == nil {
		s.logf("serve ends; nothing was attached")
		return
	}
	s.logf("serve ends; firewall %s stays attached to %s and filters with the rules it has; `fastpath fw serve` again takes over, `fastpath fw detach --name %s` removes it", s.name, s.devices(), s.name)
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
