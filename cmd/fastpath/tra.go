package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/tra"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

func traCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tra",
		Short: "SCION-IP translator: an unmodified IPv6 host talks over SCION",
		Long: `The host's SCION-mapped IPv6 address (fc00::/8, the current format of scion-cpp's
scion2ip) goes on a device pair of the translator's own; what the host sends to other
SM-IP addresses becomes SCION at TC, what comes back becomes IPv6 in XDP. tra run keeps
its paths. See docs/tra.md.`,
	}
	cmd.AddCommand(traAttachCmd(), traDetachCmd(), traRunCmd(), traListCmd(), traPathsCmd(), traStatsCmd(), traAddrCmd())
	return cmd
}

func traAttachCmd() *cobra.Command {
	var config, ns, mode string
	cmd := &cobra.Command{
		Use:   "attach --config FILE [--mode auto|native|generic] [--netns NS]",
		Short: "make the device pair, load and attach the programs (again: swap them in place)",
		Long: `Make the translator's device pair, load its programs and attach them: tra_in in XDP on
the configuration's device (--mode overrides its xdp_mode), tra_out at TC on the pair.
The translator's name is NETNS:PAIR, or PAIR for a host in this namespace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := modeOf(cmd, mode)
			if err != nil {
				return err
			}
			cfg, err := loadTraConfig(config)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			name, err := tra.Attach(cfg, tra.AttachOptions{Netns: ns, Warn: os.Stderr, Mode: mode})
			if err != nil {
				return err
			}
			fmt.Printf("translator %s attached: the host is %s (%s,%s); paths come with `fastpath tra run`\n", name, cfg.SMIP, cfg.IA, cfg.Address)
			return nil
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "translator configuration (TOML; see deploy/examples/tra.example.toml) (required)")
	cmd.Flags().StringVar(&ns, "netns", "", "the host's network namespace")
	registerMode(cmd, &mode, "", "the configuration's xdp_mode, else auto")
	return cmd
}

// traAttached lists the attached translators.
func traAttached() ([]string, error) { return tra.List() }

// traInstance is the translator a command reads or acts on: --name (or the
// old positional NAME), else the only one attached.
func traInstance(cmd *cobra.Command, name string, args []string) (string, error) {
	name, _, err := oldPositionalName(cmd, name, args, func(n string) string {
		return "fastpath tra " + cmd.Name() + " --name " + n
	})
	if err != nil {
		return "", err
	}
	return pickInstance(name, "translator", "fastpath tra attach or tra run", traAttached)
}

func loadTraConfig(path string) (*tra.Config, error) {
	if path == "" {
		return nil, fmt.Errorf("--config is required")
	}
	return tra.LoadConfig(path)
}

func traDetachCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "detach [--name NAME]",
		Short: "remove the translator: programs, maps, the device pair and its route (NAME as tra list shows it; default: the only one)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			name, err := traInstance(cmd, name, args)
			if err != nil {
				return err
			}
			return tra.Detach(name)
		},
	}
	registerName(cmd, &name, "", "translator, NETNS:PAIR or PAIR as tra list shows it", traAttached)
	return cmd
}

func traListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "the attached translators: name (NETNS:PAIR, or PAIR for a host in this namespace), device and its mode",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			names, err := tra.List()
			if err != nil {
				return err
			}
			out := []instanceState{}
			for _, n := range names {
				devs, err := xdp.PinnedDevices(tra.PinDir(n))
				if err != nil {
					return fmt.Errorf("translator %s: %w", n, err)
				}
				out = append(out, instanceState{Name: n, Devices: devs})
			}
			if asJSON {
				return printJSON(out)
			}
			if len(out) == 0 {
				fmt.Fprintln(os.Stderr, "no translator is attached")
			}
			for _, st := range out {
				fmt.Printf("%s  %s\n", st.Name, describeDevices(st.Devices))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func traRunCmd() *cobra.Command {
	var (
		config, ns, mode, metrics string
		refresh                   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run --config FILE [--mode auto|native|generic] [--netns NS] [--refresh 1m] [--metrics ADDR]",
		Short: "attach if needed and keep the paths: fetch, refresh, probe, fail over, send held packets",
		Long: `Runs until interrupted, in the host's namespace (--netns runs it there). It attaches the
translator (again: the programs are swapped, the maps and paths stay), adopts the paths
installed before, asks the AS's scionproto daemon for paths to each destination AS the
host talks to, installs those the policy picks, sends the packets that waited for them,
refreshes the paths in use before they expire, probes them and fails over from those that
go silent or that an SCMP error about a path of its own says are down. Whatever ends it,
the translator stays attached and the installed paths carry on: run it as a service that
restarts (deploy/systemd/fastpath-tra@.service); tra detach removes the translator.
--metrics serves Prometheus /metrics (fastpath_tra_*; the unit gives 127.0.0.1:30492) on
an address of the namespace tra run is started in, also with --netns: the operator's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := modeOf(cmd, mode)
			if err != nil {
				return err
			}
			cfg, err := loadTraConfig(config)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			if ns != "" {
				// The daemon's sockets must live in the host's namespace:
				// run again there, as a child born inside it. The metrics
				// listener is made here, in the namespace the operator
				// scrapes from, and handed to the child.
				var extra []*os.File
				if metrics != "" {
					f, err := listenFile(metrics)
					if err != nil {
						return err
					}
					extra = append(extra, f)
				}
				return runInNetns(ns, os.Args[1:], extra...)
			}
			ln, err := metricsListener(metrics)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			reg := obs.NewRegistry("tra")
			col := tra.NewCollector("")
			reg.MustRegister(col)
			served := make(chan error, 1)
			if ln != nil {
				go func() {
					err := obs.ServeListener(ctx, ln, reg)
					if err != nil {
						// A daemon that cannot be watched ends, as one
						// whose address is taken does at start.
						cancel()
					}
					served <- err
				}()
			} else {
				served <- nil
			}
			err = tra.AttachAndRun(ctx, cfg, tra.RunOptions{Log: slog.Default(), Refresh: refresh, Mode: mode, Collector: col})
			cancel()
			if serr := <-served; serr != nil && err == nil {
				err = fmt.Errorf("metrics: %w", serr)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "translator configuration (TOML) (required)")
	cmd.Flags().StringVar(&ns, "netns", "", "the host's network namespace")
	registerMode(cmd, &mode, "", "the configuration's xdp_mode, else auto")
	cmd.Flags().DurationVar(&refresh, "refresh", time.Minute, "how often installed paths are asked for again")
	cmd.Flags().StringVar(&metrics, "metrics", "", "serve Prometheus /metrics on this address (the unit gives "+obs.AddrTRA+"); with --netns, an address of this namespace, not NS's")
	return cmd
}

// metricsFDEnv names the descriptor of the metrics listener tra run --netns
// hands the child it starts in the namespace.
const metricsFDEnv = "FASTPATH_TRA_METRICS_FD"

// listenFile listens on addr and gives the socket as a file to hand on.
func listenFile(addr string) (*os.File, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w (give a free address, such as 127.0.0.1:0)", addr, err)
	}
	defer ln.Close()
	return ln.(*net.TCPListener).File()
}

// metricsListener is the listener tra run serves metrics on: the one its
// parent handed it (--netns), else one on addr ("": none).
func metricsListener(addr string) (net.Listener, error) {
	if fd := os.Getenv(metricsFDEnv); fd != "" {
		os.Unsetenv(metricsFDEnv)
		var n uintptr
		if _, err := fmt.Sscan(fd, &n); err != nil {
			return nil, fmt.Errorf("%s=%q: %w", metricsFDEnv, fd, err)
		}
		f := os.NewFile(n, "metrics")
		defer f.Close()
		ln, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("the metrics listener handed over: %w", err)
		}
		return ln, nil
	}
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w (give a free address, such as 127.0.0.1:0)", addr, err)
	}
	return ln, nil
}

// runInNetns runs this command again, without --netns, as a child born in
// the namespace, and passes signals on; extra are files the child gets as
// descriptors 3, 4, ... (the first: the metrics listener, metricsFDEnv).
func runInNetns(ns string, args []string, extra ...*os.File) error {
	var rest []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--netns":
			i++
		case strings.HasPrefix(args[i], "--netns="):
		default:
			rest = append(rest, args[i])
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c := exec.Command(self, rest...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	if len(extra) > 0 {
		c.ExtraFiles = extra
		c.Env = append(os.Environ(), metricsFDEnv+"=3")
	}
	err = netns.Run(ns, c.Start)
	for _, f := range extra {
		f.Close() // the child has them; a copy here would take connections nobody answers once it ends
	}
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sig {
			c.Process.Signal(s)
		}
	}()
	return c.Wait()
}

func traPathsCmd() *cobra.Command {
	var (
		asJSON bool
		name   string
	)
	cmd := &cobra.Command{
		Use:   "paths [--name NAME] [--json]",
		Short: "the paths installed, by destination AS",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			name, err := traInstance(cmd, name, args)
			if err != nil {
				return err
			}
			p, err := tra.OpenPinned(name)
			if err != nil {
				return err
			}
			defer p.Close()
			paths, err := p.Paths()
			if err != nil {
				return err
			}
			if asJSON {
				type jp struct {
					NextHop string `json:"next_hop"`
					MTU     uint16 `json:"mtu"`
					Expiry  string `json:"expiry"`
					Bytes   int    `json:"bytes"`
				}
				out := map[string][]jp{}
				for ia, ps := range paths {
					for _, x := range ps {
						out[ia.String()] = append(out[ia.String()], jp{x.NextHop.String(), x.MTU, time.Unix(int64(x.Expiry), 0).UTC().Format(time.RFC3339), len(x.Raw)})
					}
				}
				return printJSON(out)
			}
			if len(paths) == 0 {
				fmt.Fprintln(os.Stderr, "no paths installed (tra run fetches them as the host talks)")
			}
			for ia, ps := range paths {
				for i, x := range ps {
					fmt.Printf("%-14s [%d] via %-21s MTU %4d, %3d bytes of path, expires %s\n", ia, i, x.NextHop, x.MTU, len(x.Raw), time.Unix(int64(x.Expiry), 0).Format(time.DateTime))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	registerName(cmd, &name, "", "translator, NETNS:PAIR or PAIR as tra list shows it (default: the only one)", traAttached)
	return cmd
}

func traStatsCmd() *cobra.Command {
	var (
		asJSON bool
		name   string
	)
	cmd := &cobra.Command{
		Use:   "stats [--name NAME] [--json]",
		Short: "counters per verdict (translated, held, spoofed, PTB sent, …) and the daemon's (lookups, probes, failovers, …)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			name, err := traInstance(cmd, name, args)
			if err != nil {
				return err
			}
			p, err := tra.OpenPinned(name)
			if err != nil {
				return err
			}
			defer p.Close()
			out, in, err := p.DirCounts()
			if err != nil {
				return err
			}
			dc, err := p.DaemonCounts()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Out    tra.Counts        `json:"out"`
					In     tra.Counts        `json:"in"`
					Daemon map[string]uint64 `json:"daemon"`
				}{out, in, dc})
			}
			fmt.Printf("%-20s %14s %16s %14s %16s\n", "verdict", "out packets", "out bytes", "in packets", "in bytes")
			for _, v := range slices.Sorted(maps.Keys(out)) {
				if out[v].Packets == 0 && in[v].Packets == 0 {
					continue
				}
				fmt.Printf("%-20s %14d %16d %14d %16d\n", v, out[v].Packets, out[v].Bytes, in[v].Packets, in[v].Bytes)
			}
			fmt.Printf("\n%-20s %14s\n", "daemon", "count")
			for _, v := range slices.Sorted(maps.Keys(dc)) {
				fmt.Printf("%-20s %14d\n", v, dc[v])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	registerName(cmd, &name, "", "translator, NETNS:PAIR or PAIR as tra list shows it (default: the only one)", traAttached)
	return cmd
}

func traAddrCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "addr [--json] ADDRESS...",
		Short: "SCION address ↔ SCION-mapped IPv6 address (ISD-AS,HOST or ISD-AS,::IID; or fc00::…)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			type mapping struct {
				SCION string `json:"scion"`
				SMIP  string `json:"smip"`
			}
			out := []mapping{}
			for _, a := range args {
				if ip, err := netip.ParseAddr(a); err == nil {
					m, err := tra.ToSCION(ip)
					if err != nil {
						return err
					}
					scion := fmt.Sprintf("%s,%s", m.IA, m.Host(ip))
					out = append(out, mapping{scion, ip.String()})
					if !asJSON {
						fmt.Println(scion)
					}
					continue
				}
				ia, host, err := tra.ParseSCION(a)
				if err != nil {
					return err
				}
				smip, err := tra.FromSCION(ia, host)
				if err != nil {
					return err
				}
				out = append(out, mapping{a, smip.String()})
				if !asJSON {
					fmt.Println(smip)
				}
			}
			if asJSON {
				return printJSON(out)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: each address's SCION and SM-IP forms")
	return cmd
}
