package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/preflight"
)

func fwServeCmd(name *string) *cobra.Command {
	var (
		rules, metrics string
		ruleMetrics    string
		af             attachFlags
		gcEvery        time.Duration
		failClosed     bool
	)
	cmd := &cobra.Command{
		Use:   "serve --rules FILE [--name NAME] [--mode auto|native|generic] [--netns NS] [--metrics ADDR] [--rule-metrics none|named|all] [--gc-interval 10s] [--fail-closed] IFACE...",
		Short: "attach the firewall and keep it: reload on SIGHUP and file changes, remove expired connections",
		Long: `Attach the firewall with the rules of --rules as fw attach does (waiting for devices
that are not there yet), then keep it until SIGINT or SIGTERM: the file is read
again on SIGHUP and when it changes (an edit, or a file renamed over it), and a
valid file replaces the running rules in one step; a bad one changes nothing and
its error is logged with the file and line. Expired connections are removed every
--gc-interval. --metrics serves Prometheus /metrics (the instance's maps, as fw
metrics serves them, and serve's own reloads and gc; the service passes
127.0.0.1:30491); --rule-metrics chooses the rules with series of their own
(named: those with a name, and the default policy). See docs/fw.md, Metrics.

A bad file at start: the instance keeps the rules it runs, if it has any; else,
with --fail-closed, the devices get a rule set that drops every IP packet until
the file is valid, and without it (failing open) nothing is attached until then.

Stopping never detaches: the program keeps filtering with the rules it has, and
serve started again takes over in place. fw detach ends serve, with success.
Ready for systemd's Type=notify (deploy/systemd/fastpath-fw@.service).`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeDevices,
		RunE: func(cmd *cobra.Command, args []string) error {
			if rules == "" {
				return fmt.Errorf("--rules is required: the rules file serve attaches with and watches")
			}
			if gcEvery <= 0 {
				return fmt.Errorf("--gc-interval %s: give a positive duration, such as 10s", gcEvery)
			}
			rm, err := fw.ParseRuleMetrics(ruleMetrics)
			if err != nil {
				return err
			}
			attach, err := af.options(cmd, *name, args)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reload := make(chan struct{})
			go func() {
				for range hup {
					select {
					case reload <- struct{}{}:
					case <-ctx.Done():
						return
					}
				}
			}()
			own := fw.NewServeMetrics(*name)
			metricsErr := make(chan error, 1)
			if metrics != "" {
				reg := obs.NewRegistry("fw")
				c := fw.NewCollector(*name, fw.MetricsOptions{Rules: rm})
				defer c.Close()
				reg.MustRegister(c, own)
				go func() {
					err := obs.Serve(ctx, metrics, reg)
					// A metrics server that cannot listen ends serve
					// with its error rather than serving without it.
					metricsErr <- err
					if err != nil {
						cancel()
					}
				}()
			}
			notify := func(state string) {
				if err := sdNotify(state); err != nil {
					slog.Warn("cannot notify the service manager", "state", state, "error", err)
				}
			}
			err = fw.Serve(ctx, fw.ServeOptions{
				Rules:      rules,
				Attach:     attach,
				FailClosed: failClosed,
				GCInterval: gcEvery,
				Metrics:    own,
				Reload:     reload,
				Ready:      func() { notify("READY=1") },
				Reloading:  func() { notify("RELOADING=1") },
			})
			cancel()
			if metrics != "" {
				if merr := <-metricsErr; merr != nil && err == nil {
					err = merr
				}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&rules, "rules", "", "rules file to attach with and watch (TOML; see deploy/examples/fw.example.toml) (required)")
	af.register(cmd)
	cmd.Flags().StringVar(&metrics, "metrics", "", "serve Prometheus /metrics on this address (the service uses "+obs.AddrFW+")")
	cmd.Flags().StringVar(&ruleMetrics, "rule-metrics", string(fw.RuleMetricsNamed), "rules with series of their own: none, named (the rules with a name, and the default policy) or all (two series a rule)")
	cmd.Flags().DurationVar(&gcEvery, "gc-interval", fw.DefaultGCInterval, "how often to remove expired connections")
	cmd.Flags().BoolVar(&failClosed, "fail-closed", false, "with a bad rules file at start, drop every IP packet until it is valid (default: attach nothing until then)")
	return cmd
}

// sdNotify sends a state (READY=1, RELOADING=1) to the service manager
// that started fastpath with NOTIFY_SOCKET set (systemd's Type=notify).
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	// A leading @ names an abstract socket; Go's net package takes it so.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("tell %s %s: %w", path, state, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("tell %s %s: %w", path, state, err)
	}
	return nil
}
