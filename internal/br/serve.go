package br

import (
	"context"
	"fmt"
	"io"
	"time"
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
// of the host in step (a Keeper) until ctx ends. A reload that fails leaves
// the router as it was, and says why. Serve never detaches: when it
// returns, the fast path keeps forwarding as the host stood last, and a
// new Serve attaches again in place.
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
	if err := Attach(cfg, opts); err != nil {
		return err
	}
	name := opts.Name
	if name == "" {
		name = cfg.RouterID
	}
	k, err := OpenKeeper(cfg, KeepOptions{Name: name, Interval: o.Interval, Log: o.Log})
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
	fmt.Fprintf(o.Log, "router %s stays attached and forwards as the host stood last (%d checks of the host, %s each on average); `fastpath br serve` again keeps it, `fastpath br detach --router %s` removes it\n", name, checks, mean.Round(time.Microsecond), name)
	return err
}
