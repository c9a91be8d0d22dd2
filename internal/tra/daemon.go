package tra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/obs"
)

// The daemon (`tra run`) keeps the data plane's paths: it asks scionproto's
// daemon for paths to each destination AS the host talks to, installs those
// its policy picks, sends again the packets that waited for them, refreshes
// paths of destinations in use before they expire, removes them at expiry
// and forgets destinations gone idle, fails over when an SCMP error about a
// path of its own says an interface is down or when its probes of the paths
// in use go unanswered, and turns SCMP errors into ICMPv6 for the host and
// back. Everything it keeps is bounded (Limits); past a bound the host hears
// ICMPv6 unreachable, and a counter says so.
//
// The daemon is not in the packets' way: whatever ends it (a bug, a kill,
// an upgrade), the programs stay attached and the installed paths carry on,
// and a daemon started again adopts them.

// RunOptions configure Run.
type RunOptions struct {
	// Name is the attached translator's name (Name of the pair in this
	// namespace by default).
	Name string
	// Log takes the daemon's messages (nil: slog.Default()); each carries
	// the translator's name.
	Log *slog.Logger
	// Collector, if set, exports the daemon's counters and state with the
	// translator's (tra run --metrics).
	Collector *Collector
	// Source overrides the daemon of the configuration (tests).
	Source PathSource
	// Refresh is how often the paths of a destination in use are asked
	// for again; paths that expire sooner are asked for before they do.
	Refresh time.Duration
	// Limits bound what the daemon keeps; zero fields take the defaults.
	Limits Limits
	// Mode overrides the configuration's xdp_mode at attach ("" keeps it).
	Mode string
}

// Limits bound the daemon's state.
type Limits struct {
	HeldPerDest    int           // packets held for one destination (the oldest go first)
	Held           int           // packets held in all
	Lookups        int           // lookups in flight at once
	Queued         int           // lookups of new destinations waiting for their turn
	NewPerSecond   int           // new destinations looked up a second (more are answered unreachable)
	Dests          int           // destinations tracked (pending and installed)
	Shunned        int           // interfaces shunned after an SCMP interface down
	NoPath         int           // destinations remembered as without a path
	Unreachable    int           // ICMPv6 unreachable messages a second to the host
	LookupTime     time.Duration // a lookup's deadline
	Idle           time.Duration // a destination without packets that long is forgotten
	MinLife        time.Duration // paths that expire sooner are chosen only if nothing else is left
	NoPathFor      time.Duration // how long a destination without a path is answered at once
	ProbeEvery     time.Duration // how often the paths in use are probed (< 0: never)
	ProbeDead      time.Duration // a probed path silent that long, with 3 probes unanswered, is dead
	ProbedDests    int           // destinations probed at once (the most recently used)
	ShunFor        time.Duration // how long an interface reported down or a dead path is avoided
	HealthEvery    time.Duration // how often the pair, the device and topology.json are checked
	HousekeepEvery time.Duration
}

// DefaultLimits are what `tra run` uses.
var DefaultLimits = Limits{
	HeldPerDest: 64, Held: 4096, Lookups: 8, Queued: 256, NewPerSecond: 100, Dests: MaxDests, Shunned: 1024, NoPath: 4096,
	Unreachable: 1000, LookupTime: 5 * time.Second, Idle: 5 * time.Minute, MinLife: 30 * time.Second,
	NoPathFor: 5 * time.Second, ProbeEvery: 150 * time.Millisecond, ProbeDead: 500 * time.Millisecond,
	ProbedDests: 64, ShunFor: 30 * time.Second, HealthEvery: time.Second, HousekeepEvery: time.Second,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	set := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&l.HeldPerDest, d.HeldPerDest)
	set(&l.Held, d.Held)
	set(&l.Lookups, d.Lookups)
	set(&l.Queued, d.Queued)
	set(&l.NewPerSecond, d.NewPerSecond)
	set(&l.Dests, d.Dests)
	set(&l.Shunned, d.Shunned)
	set(&l.NoPath, d.NoPath)
	set(&l.Unreachable, d.Unreachable)
	set(&l.ProbedDests, d.ProbedDests)
	setD(&l.LookupTime, d.LookupTime)
	setD(&l.Idle, d.Idle)
	setD(&l.MinLife, d.MinLife)
	setD(&l.NoPathFor, d.NoPathFor)
	setD(&l.ProbeEvery, d.ProbeEvery)
	setD(&l.ProbeDead, d.ProbeDead)
	setD(&l.ShunFor, d.ShunFor)
	setD(&l.HealthEvery, d.HealthEvery)
	setD(&l.HousekeepEvery, d.HousekeepEvery)
	l.Dests = min(l.Dests, MaxDests)
	return l
}

// AttachAndRun is `fastpath tra run`: it attaches the translator in this
// namespace (again, if it is: the maps stay, the programs are swapped, and
// the device's address is found) and runs the daemon until ctx is done. It
// leaves the translator attached: `tra detach` removes it.
func AttachAndRun(ctx context.Context, cfg *Config, o RunOptions) error {
	// A second daemon stops before it swaps the first one's programs.
	lock, err := lockInstance(Name(cfg.Pair, ""), cfg.Path)
	if err != nil {
		return err
	}
	defer lock.release()
	if o.Log == nil {
		o.Log = slog.Default()
	}
	name, err := Attach(cfg, AttachOptions{Warn: obs.Writer(o.Log, slog.LevelWarn), Mode: o.Mode})
	if err != nil {
		return err
	}
	o.Name = name
	for _, w := range cfg.RouterWarnings() {
		o.Log.Warn("border router not taken", "translator", name, "why", w)
	}
	return run(ctx, cfg, o)
}

// Run runs the daemon until ctx is done. It must run in the host's network
// namespace (its sockets reach the daemon and the pair), with the
// translator attached. One daemon runs a translator: a second one fails
// at once (ErrAlreadyRunning), naming the first one's PID.
func Run(ctx context.Context, cfg *Config, o RunOptions) error {
	if o.Name == "" {
		o.Name = Name(cfg.Pair, "")
	}
	lock, err := lockInstance(o.Name, cfg.Path)
	if err != nil {
		return err
	}
	defer lock.release()
	return run(ctx, cfg, o)
}

func run(ctx context.Context, cfg *Config, o RunOptions) error {
	// What runs aside from the loop ends with it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.Log == nil {
		o.Log = slog.Default()
	}
	log := o.Log.With("translator", o.Name)
	if o.Refresh == 0 {
		o.Refresh = time.Minute
	}
	lim := o.Limits.withDefaults()
	switch {
	case cfg.ProbeEvery < 0:
		lim.ProbeEvery = -1
	case cfg.ProbeEvery > 0:
		// probe_interval sets the dead timeout too: 10/3 of it, 500 ms
		// at the default 150 ms (deploy/examples/tra.example.toml).
		lim.ProbeEvery, lim.ProbeDead = cfg.ProbeEvery, cfg.ProbeEvery*10/3
	}
	if cfg.IdleTimeout != 0 {
		lim.Idle = cfg.IdleTimeout
	}
	p, err := OpenPinned(o.Name)
	if err != nil {
		return err
	}
	defer p.Close()
	src := o.Source
	if src == nil {
		ls := &lazySource{addr: cfg.Daemon, timeout: 2 * time.Second}
		defer ls.Close()
		src = ls
	}
	inj, err := newInjector(cfg.Pair)
	if err != nil {
		return err
	}
	defer inj.Close()
	held, err := ringbuf.NewReader(p.held)
	if err != nil {
		return fmt.Errorf("read the translator's held packets: %w", err)
	}
	defer held.Close()
	events, err := ringbuf.NewReader(p.events)
	if err != nil {
		return fmt.Errorf("read the translator's events: %w", err)
	}
	defer events.Close()
	probes, err := ringbuf.NewReader(p.probes)
	if err != nil {
		return fmt.Errorf("read the translator's probe replies: %w", err)
	}
	defer probes.Close()
	out, err := net.ListenUDP("udp4", &net.UDPAddr{IP: cfg.Address.AsSlice()})
	if err != nil {
		return fmt.Errorf("a socket for SCMP at %s: %w", cfg.Address, err)
	}
	defer out.Close()

	d := newPathDaemon(cfg, pinnedPlane{p}, src, inj, udpPort{out}, log, lim, o.Refresh)
	res := newRouterResolver()
	resolving := make(chan struct{})
	go func() {
		defer close(resolving)
		res.run(ctx, cfg.RouterNames, len(cfg.Unresolved) > 0)
	}()
	defer func() { cancel(); <-resolving }()
	// The host's changes come by netlink, subscribed to from this thread
	// (the host's namespace) before anything is looked up.
	watch, err := newHostWatch(cfg)
	if err != nil {
		return err
	}
	defer watch.close()
	if err := watch.subscribe(); err != nil {
		log.Warn("no netlink updates: the host is looked at each second", "error", err)
	}
	watch.lookup()
	gw := newGateways(cfg.Device, watch)
	d.health = newHealth(cfg, o.Name, p, inj, log, res, watch, gw)
	d.gateway = gw.of
	d.pair = watch.pair()
	if err := d.adopt(); err != nil {
		log.Error("cannot adopt the installed paths", "error", err)
	}
	d.publish()
	if o.Collector != nil {
		o.Collector.watch(o.Name, d)
		defer o.Collector.watch(o.Name, nil)
	}
	heldCh := make(chan Event, 1024)
	evCh := make(chan Event, 1024)
	probeCh := make(chan Event, 1024)
	go readRing(held, heldCh, d, decodeEvent)
	go readRing(events, evCh, d, decodeEvent)
	go readRing(probes, probeCh, d, decodeProbeReply)
	go func() {
		<-ctx.Done()
		held.Close()
		events.Close()
		probes.Close()
	}()
	log.Info("translator running, paths from scionproto's daemon", "address", cfg.Address, "smip", cfg.SMIP, "daemon", cfg.Daemon, "adopted", len(d.dests))
	// Which ports SCION is taken on follows the routers' release: a
	// scion_version that does not match them loses traffic silently.
	log.Info("SCION taken on the ports the AS's routers' release sends it to", "scion_version", cfg.release(), "taken_on", takenOn(cfg))
	every := lim.HousekeepEvery
	if lim.ProbeEvery > 0 {
		every = min(every, lim.ProbeEvery)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			d.flushStats()
			log.Info("daemon ends; the translator stays attached, `fastpath tra detach` removes it", "destinations_installed", d.installedCount())
			return nil
		case ev, ok := <-heldCh:
			if !ok {
				return nil
			}
			d.safely("held packet", func() { d.onHeld(ev) })
		case ev, ok := <-evCh:
			if !ok {
				return nil
			}
			d.safely("event", func() { d.onEvent(ev) })
		case ev, ok := <-probeCh:
			if !ok {
				return nil
			}
			d.safely("probe reply", func() { d.onProbeReply(ev) })
		case r := <-d.results:
			d.safely("lookup result", func() { d.onResult(r) })
			d.publish()
		case r := <-res.out:
			d.safely("router names", func() { d.health.onResolved(d, r) })
		case <-watch.wake:
			d.safely("host", func() { d.health.onHost(d) })
		case <-tick.C:
			d.safely("tick", d.tick)
			d.publish()
			if d.health != nil && d.health.gone {
				// An operator's tra detach: the daemon ends as asked, not
				// as a failure a service manager would restart.
				log.Info("translator detached: the daemon ends")
				return nil
			}
		}
	}
}

// readRing decodes a ring buffer's records until it is closed; what does
// not decode is counted.
func readRing(rd *ringbuf.Reader, out chan<- Event, d *pathDaemon, decode func([]byte) (Event, error)) {
	defer close(out)
	for {
		rec, err := rd.Read()
		if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		ev, err := decode(rec.RawSample)
		if err != nil {
			d.stats.add(statBadEvent, 1)
			continue
		}
		out <- ev
	}
}

// safely runs one step of the loop; a panic is logged with its stack and
// counted, and the daemon goes on with its next input.
func (d *pathDaemon) safely(what string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			d.stats.add(statPanics, 1)
			d.log.Error("panic in the daemon, recovered", "step", what, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	f()
}

// tick runs what is due: probes, housekeeping, the health check.
func (d *pathDaemon) tick() {
	d.beat()
	now := d.now()
	d.wantStale(now)
	if d.lim.ProbeEvery > 0 && now.Sub(d.lastProbe) >= d.lim.ProbeEvery {
		d.lastProbe = now
		d.probeTick(now)
	}
	if now.Sub(d.lastHousekeep) >= d.lim.HousekeepEvery {
		d.lastHousekeep = now
		d.housekeep(now)
		d.flushStats()
	}
	if d.health != nil && now.Sub(d.lastHealth) >= d.lim.HealthEvery {
		d.lastHealth = now
		d.health.check(d)
		d.fitPair()
	}
}

// usedClock is the data plane's clock: coarse monotonic time in units of
// 2^30 ns (about 1.07 s).
func usedClock() uint32 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0
	}
	return uint32(uint64(ts.Nano()) >> 30)
}

// usedUnit is one step of usedClock.
const usedUnit = time.Duration(1 << 30)

// installedCount is how many destinations have paths in the data plane.
func (d *pathDaemon) installedCount() int {
	n := 0
	for _, x := range d.dests {
		if len(x.dp) > 0 {
			n++
		}
	}
	return n
}
