package br

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// Config is the configuration file; a reload reads it again.
	Config string
	// Attach says where and how to attach, as for `br attach`; its Log is
	// replaced by Log.
	Attach AttachOptions
	// Interval between the keeper's checks; DefaultKeepInterval if 0.
	Interval time.Duration
	// Log receives attach's warnings and the keeper's records;
	// slog.Default() if nil.
	Log *slog.Logger
	// Metrics, if set, is given the router's collector (NewCollector, with
	// the keeper's view of the devices), fastpath_br_keeper_changes_total
	// and fastpath_br_reloads_total.
	Metrics prometheus.Registerer
	// Reload: each value reads Config again and attaches again in place.
	Reload <-chan struct{}
	// Ready, if set, is called once the router is attached and kept.
	Ready func()
}

// Serve attaches the router exactly as Attach does and then keeps its view
// of the host in step (a Keeper) until ctx ends. A device or address that
// is not there yet (a namespace, an address or a device that comes up
// late at boot) is waited for: the attach is tried again after 1 s, 2 s,
// 4 s … up to a minute, and each new reason is logged; a configuration
// that is wrong ends it at once. A reload that fails leaves the router as
// it was, and says why. A device deleted and created again is attached
// again. Serve never detaches: when it returns, the fast path keeps
// forwarding as the host stood last, and a new Serve attaches again in
// place. When the router is detached (`br detach`) it returns nil: a
// service manager that restarts it on failure must not attach it again.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Interval < 0 {
		return fmt.Errorf("interval %s: give a positive duration, such as 1s", o.Interval)
	}
	if o.Interval == 0 {
		o.Interval = DefaultKeepInterval
	}
	cfg, err := LoadConfig(o.Config)
	if err != nil {
		return err
	}
	opts := o.Attach
	name := opts.Name
	if name == "" {
		name = cfg.RouterID
	}
	log := o.Log.With("name", name)
	opts.Log = log
	// Registered before the attach, which may wait for a late device: the
	// reloads and the process are watched meanwhile; the router's own
	// families appear once it is attached.
	var keeper atomic.Pointer[Keeper]
	changes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "fastpath_br_keeper_changes_total",
		Help:        "Updates br serve's keeper wrote into the router's maps, by kind.",
		ConstLabels: prometheus.Labels{"name": name},
	}, []string{"kind"})
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "fastpath_br_reloads_total",
		Help:        "Reloads of the configuration (SIGHUP), by result: ok, or error (the router goes on with what it had).",
		ConstLabels: prometheus.Labels{"name": name},
	}, []string{"result"})
	for _, kind := range KeeperChanges {
		changes.WithLabelValues(kind)
	}
	reloads.WithLabelValues("ok")
	reloads.WithLabelValues("error")
	if o.Metrics != nil {
		ready := func() map[string]bool {
			if k := keeper.Load(); k != nil {
				return k.Ready()
			}
			return nil
		}
		for _, c := range []prometheus.Collector{NewCollector(MetricsOptions{Name: name, Ready: ready}), changes, reloads} {
			if err := o.Metrics.Register(c); err != nil {
				return fmt.Errorf("router %s: register its metrics: %w", name, err)
			}
			defer o.Metrics.Unregister(c)
		}
	}
	if err := attachWhenReady(ctx, cfg, opts, log); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	k, err := OpenKeeper(cfg, KeepOptions{Name: name, Interval: o.Interval, Log: o.Log,
		Changed:  func(kind string) { changes.WithLabelValues(kind).Inc() },
		Reattach: func() error { return Attach(cfg, opts) }})
	if err != nil {
		return err
	}
	defer k.Close()
	keeper.Store(k)
	defer keeper.Store(nil)
	log.Info("router attached: keeping it in step with the host", "pins", PinDir(name), "interval", o.Interval)
	if o.Ready != nil {
		o.Ready()
	}
	err = k.Run(ctx, o.Reload, func() {
		c, err := LoadConfig(o.Config)
		if err == nil && opts.Name == "" && c.RouterID != cfg.RouterID {
			err = fmt.Errorf("%s: router_id changed from %s to %s, which would attach a second router: stop this one, `fastpath br detach --router %s`, and start again", o.Config, cfg.RouterID, c.RouterID, cfg.RouterID)
		}
		if err == nil {
			err = Attach(c, opts)
		}
		if err != nil {
			reloads.WithLabelValues("error").Inc()
			log.Error("reload failed: the router goes on with the configuration it had", "config", o.Config, "err", err)
			return
		}
		reloads.WithLabelValues("ok").Inc()
		cfg = c
		k.SetConfig(c)
		log.Info("configuration reloaded and attached again in place", "config", o.Config)
	})
	checks, mean := k.Stats()
	if errors.Is(err, ErrNotAttached) {
		log.Info("router detached: serve ends; start it again to attach", "checks", checks, "check_mean", mean.Round(time.Microsecond))
		return nil
	}
	log.Info("serve ends: the router stays attached and forwards as the host stood last", "checks", checks, "check_mean", mean.Round(time.Microsecond),
		"keep", "fastpath br serve", "remove", "fastpath br detach --name "+name)
	return err
}

// attachBackoff is the longest wait between two attaches of a router
// whose host is not ready.
const attachBackoff = time.Minute

// attachWhenReady attaches, and while what fails is the host not being
// ready yet — a device, the device holding an address, or the network
// namespace missing — tries again with a growing wait until ctx ends.
func attachWhenReady(ctx context.Context, cfg *Config, opts AttachOptions, log *slog.Logger) error {
	wait := time.Second
	var last string
	for {
		err := Attach(cfg, opts)
		if err == nil || !(errors.Is(err, xdp.ErrNoDevice) || errors.Is(err, netns.ErrNotExist)) {
			return err
		}
		if err.Error() != last {
			log.Warn("the host is not ready to attach: trying again, less often each time", "err", err, "wait", wait, "max_wait", attachBackoff)
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, attachBackoff)
	}
}
