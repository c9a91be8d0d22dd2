package br

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// Config is the configuration file; a reload reads it again.
	Config string
	// Attach says where and how to attach, as for `br attach`; its Warn is
	// replaced by Log.
	Attach AttachOptions
	// Interval between the keeper's checks; DefaultKeepInterval if 0.
	Interval time.Duration
	// Log receives attach's warnings and the keeper's lines.
	Log io.Writer
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
		o.Log = io.Discard
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
	opts.Warn = o.Log
	if err := attachWhenReady(ctx, cfg, opts, o.Log); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	name := opts.Name
	if name == "" {
		name = cfg.RouterID
	}
	k, err := OpenKeeper(cfg, KeepOptions{Name: name, Interval: o.Interval, Log: o.Log, Reattach: func() error { return Attach(cfg, opts) }})
	if err != nil {
		return err
	}
	defer k.Close()
	fmt.Fprintf(o.Log, "router %s attached; pins in %s; keeping it in step with the host (every %s and on netlink events)\n", name, PinDir(name), o.Interval)
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
			fmt.Fprintf(o.Log, "reload: %v\nthe router goes on with the configuration it had\n", err)
			return
		}
		cfg = c
		k.SetConfig(c)
		fmt.Fprintf(o.Log, "router %s: %s reloaded and attached again in place\n", name, o.Config)
	})
	checks, mean := k.Stats()
	if errors.Is(err, ErrNotAttached) {
		fmt.Fprintf(o.Log, "router %s was detached (%d checks of the host, %s each on average): serve ends; start it again to attach\n", name, checks, mean.Round(time.Microsecond))
		return nil
	}
	fmt.Fprintf(o.Log, "router %s stays attached and forwards as the host stood last (%d checks of the host, %s each on average); `fastpath br serve` again keeps it, `fastpath br detach --router %s` removes it\n", name, checks, mean.Round(time.Microsecond), name)
	return err
}

// attachBackoff is the longest wait between two attaches of a router
// whose host is not ready.
const attachBackoff = time.Minute

// attachWhenReady attaches, and while what fails is the host not being
// ready yet — a device, the device holding an address, or the network
// namespace missing — tries again with a growing wait until ctx ends.
func attachWhenReady(ctx context.Context, cfg *Config, opts AttachOptions, log io.Writer) error {
	wait := time.Second
	var last string
	for {
		err := Attach(cfg, opts)
		if err == nil || !(errors.Is(err, xdp.ErrNoDevice) || errors.Is(err, netns.ErrNotExist)) {
			return err
		}
		if err.Error() != last {
			fmt.Fprintf(log, "attach: %v; trying again in %s, and less often after (at most every %s)\n", err, wait, attachBackoff)
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
