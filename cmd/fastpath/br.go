package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/pcap"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

func brCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "br",
		Short: "SCION border router in XDP",
	}
	cmd.AddCommand(brAttachCmd(), brServeCmd(), brDetachCmd(), brKeyCmd(), brStatsCmd(), brWatchCmd(), brRunCmd(), brListCmd())
	return cmd
}

func ifaces(ns string, names []string) []xdp.Iface {
	var out []xdp.Iface
	for _, n := range names {
		out = append(out, xdp.Iface{Netns: ns, Name: n})
	}
	return out
}

func brAttachCmd() *cobra.Command {
	var (
		config, ns string
		noFallback bool
	)
	cmd := &cobra.Command{
		Use:   "attach --config FILE [IFACE...]",
		Short: "attach the router to devices (again: reload the configuration in place)",
		Long: `Attach the router to the named devices, or, without names, to the configuration's
internal_interfaces (or the device holding internal_addr) and the devices holding the
external interfaces' underlay addresses. Maps and links are pinned under
/sys/fs/bpf/fastpath/br/<router_id>/. Running it again updates the configuration and
keys in place and swaps the program without detaching.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if config == "" {
				return fmt.Errorf("--config is required")
			}
			cfg, err := br.LoadConfig(config)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			if err := br.Attach(cfg, br.AttachOptions{Devices: ifaces(ns, args), Netns: ns, NoFallback: noFallback, Warn: os.Stderr}); err != nil {
				return err
			}
			fmt.Printf("router %s attached; pins in %s\n", cfg.RouterID, br.PinDir(cfg.RouterID))
			return nil
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "router configuration (TOML; see deploy/examples/br.example.toml)")
	cmd.Flags().StringVar(&ns, "netns", "", "network namespace of the devices")
	cmd.Flags().BoolVar(&noFallback, "no-fallback", false, "fail instead of falling back to generic XDP on devices without native XDP")
	return cmd
}

func brServeCmd() *cobra.Command {
	var (
		config, ns, name string
		noFallback       bool
		interval         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve --config FILE [IFACE...] [--netns NS] [--interval 1s]",
		Short: "attach the router and keep it in step with the host until stopped (SIGHUP reloads)",
		Long: `Attach the router as br attach does, then keep what it knows of the host in step
until SIGINT or SIGTERM: every --interval, and at once on the namespace's netlink
events, it looks again at which devices take XDP frames (a neighbour's veth gains or
loses an XDP program or GRO, a device goes down or up), which devices the next hops
are reached through, the host's addresses and lo's forwarding, and updates the
router's maps. A device that could not take frames is forwarded in XDP within a
second of it becoming able to; one that stops falls back to the reference router as
quickly. SIGHUP reads the configuration again and attaches again in place. Stopping
never detaches: the fast path keeps forwarding, and serve started again takes over.
Ready for systemd's Type=notify (docs/fastpath-br@.service).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if config == "" {
				return fmt.Errorf("--config is required")
			}
			if interval <= 0 {
				return fmt.Errorf("--interval %s: give a positive duration, such as 1s", interval)
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reload := make(chan struct{})
			go func() {
				for range hup {
					select {
					case reload <- struct{}{}:
					case <-cmd.Context().Done():
						return
					}
				}
			}()
			return br.Serve(cmd.Context(), br.ServeOptions{
				Config:   config,
				Attach:   br.AttachOptions{Devices: ifaces(ns, args), Netns: ns, NoFallback: noFallback, Name: name},
				Interval: interval,
				Log:      os.Stderr,
				Reload:   reload,
				Ready: func() {
					if err := notifyReady(); err != nil {
						fmt.Fprintf(os.Stderr, "warning: %v\n", err)
					}
				},
			})
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "router configuration (TOML; see deploy/examples/br.example.toml)")
	cmd.Flags().StringVar(&ns, "netns", "", "network namespace of the devices")
	cmd.Flags().StringVar(&name, "name", "", "pin directory name under /sys/fs/bpf/fastpath/br/ (default: the router_id)")
	cmd.Flags().BoolVar(&noFallback, "no-fallback", false, "fail instead of falling back to generic XDP on devices without native XDP")
	cmd.Flags().DurationVar(&interval, "interval", br.DefaultKeepInterval, "how often to look at the host when no netlink event comes")
	return cmd
}

// notifyReady tells the service manager that started fastpath with
// NOTIFY_SOCKET set (systemd's Type=notify, or the lab) that it is ready.
func notifyReady() error { return sdNotify("READY=1") }

func brDetachCmd() *cobra.Command {
	var router, ns string
	cmd := &cobra.Command{
		Use:   "detach IFACE... | --router BR",
		Short: "detach the router from devices; the last detach removes its maps too",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			switch {
			case router != "" && len(args) > 0:
				return br.Detach(router, ifaces(ns, args))
			case router != "":
				return br.Detach(router, nil)
			case len(args) > 0:
				return br.DetachDevices(ifaces(ns, args))
			}
			return fmt.Errorf("name the devices to detach from, or --router BR for all of its devices")
		},
	}
	cmd.Flags().StringVar(&router, "router", "", "router ID (all of its devices unless devices are named)")
	cmd.Flags().StringVar(&ns, "netns", "", "network namespace of the devices")
	return cmd
}

func brListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list attached routers and the state of their devices",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			rs, err := br.List()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rs)
			}
			if len(rs) == 0 {
				fmt.Fprintln(os.Stderr, "no router is attached")
				return nil
			}
			for _, r := range rs {
				var devs []string
				for _, d := range r.Devices {
					state := string(d.Mode)
					if d.Gone {
						state = "gone"
					}
					if d.Behind != "" {
						// The chain: "fw default → br on veth0".
						state += ", behind " + d.Behind
					}
					devs = append(devs, fmt.Sprintf("%s (%s)", d.Iface, state))
				}
				line := fmt.Sprintf("%s  %s", r.ID, strings.Join(devs, ", "))
				if r.Gone() {
					line += fmt.Sprintf("  — every device is gone (namespace deleted?): fastpath br detach --router %s removes what is left", r.ID)
				}
				fmt.Println(line)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func brKeyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "key", Short: "hop-field keys of an attached router (never printed)"}
	parseSlot := func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 1 {
			return 0, fmt.Errorf("key index %q: use 0 or 1", s)
		}
		return n, nil
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "add BR INDEX BASE64-KEY",
		Short: "put a pre-derived 16-byte forwarding key into slot INDEX (0, or 1 during a rollover)",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			slot, err := parseSlot(args[1])
			if err != nil {
				return err
			}
			key, err := base64.StdEncoding.DecodeString(args[2])
			if err != nil || len(key) != 16 {
				return fmt.Errorf("key: want the base64 of 16 bytes (an AES-128 forwarding key, as derived from a master key)")
			}
			return withPinned(args[0], func(p *br.Pinned) error { return p.SetKey(slot, key) })
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "remove BR INDEX",
		Short: "clear a key slot",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			slot, err := parseSlot(args[1])
			if err != nil {
				return err
			}
			return withPinned(args[0], func(p *br.Pinned) error { return p.SetKey(slot, nil) })
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "list BR",
		Short: "show which key slots are set",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := br.OpenPinned(args[0])
			if err != nil {
				return err
			}
			defer p.Close()
			slots, err := p.KeySlots()
			if err != nil {
				return err
			}
			for i, set := range slots {
				state := "empty"
				if set {
					state = "set"
				}
				fmt.Printf("slot %d: %s\n", i, state)
			}
			return nil
		},
	})
	return cmd
}

func brStatsCmd() *cobra.Command {
	var (
		asJSON  bool
		metrics string
	)
	cmd := &cobra.Command{
		Use:   "stats [BR]",
		Short: "counters per interface and verdict; --metrics serves them to Prometheus",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			routers := args
			if len(routers) == 0 {
				var err error
				if routers, err = br.Attached(); err != nil {
					return err
				}
				if len(routers) == 0 {
					return fmt.Errorf("no router is attached (fastpath br attach)")
				}
			}
			gone := map[string]bool{}
			if states, err := br.List(); err == nil {
				for _, r := range states {
					gone[r.ID] = r.Gone()
				}
			}
			if metrics != "" {
				return serveRouterMetrics(cmd, metrics, routers)
			}
			all := map[string]map[string]map[string]br.Stat{}
			for _, id := range routers {
				p, err := br.OpenPinned(id)
				if err != nil {
					return err
				}
				byIf, err := p.ByInterface()
				var ip map[string]br.Stat
				if err == nil {
					ip, err = p.IPTotals()
				}
				p.Close()
				if err != nil {
					return err
				}
				all[id] = byIf
				if len(ip) > 0 {
					all[id][br.IPInterface] = ip
				}
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(all)
			}
			for _, id := range slices.Sorted(maps.Keys(all)) {
				ifs := all[id]
				fmt.Printf("router %s\n", id)
				if gone[id] {
					fmt.Printf("  every device of this router is gone (namespace deleted?): these counters are its last; fastpath br detach --router %s removes them\n", id)
				}
				fmt.Printf("  %-10s %-18s %14s %16s\n", "interface", "verdict", "packets", "bytes")
				for _, ifn := range slices.Sorted(maps.Keys(ifs)) {
					for _, v := range slices.Sorted(maps.Keys(ifs[ifn])) {
						s := ifs[ifn][v]
						fmt.Printf("  %-10s %-18s %14d %16d\n", ifn, v, s.Packets, s.Bytes)
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&metrics, "metrics", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9120) until stopped")
	return cmd
}

// serveRouterMetrics serves the routers' counters until fastpath is stopped.
func serveRouterMetrics(cmd *cobra.Command, addr string, routers []string) error {
	return serveMetrics(cmd.Context(), addr, func(w http.ResponseWriter, _ *http.Request) {
		for _, id := range routers {
			p, err := br.OpenPinned(id)
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			c, err := p.ReadCounters()
			var slots map[int]int
			if err == nil {
				slots, err = p.Slots()
			}
			var ip map[string]br.Stat
			if err == nil {
				ip, err = p.IPTotals()
			}
			p.Close()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			c.WriteMetrics(w, id, slots)
			if len(ip) > 0 {
				br.WriteIPMetrics(w, id, ip)
			}
		}
	})
}

func brWatchCmd() *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "watch BR [INTERFACE]",
		Short: "refreshing table per verdict: packets, pkts/s, bytes, Mbit/s",
		Long:  "INTERFACE is a SCION interface ID, internal, unmatched or all (default).",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			iface := "all"
			if len(args) == 2 {
				iface = args[1]
			}
			p, err := br.OpenPinned(args[0])
			if err != nil {
				return err
			}
			defer p.Close()
			slots, err := p.Slots()
			if err != nil {
				return err
			}
			read := func() ([br.VerdictCount]br.Stat, error) {
				c, err := p.ReadCounters()
				if err != nil {
					return [br.VerdictCount]br.Stat{}, err
				}
				return c.Verdicts(slots, iface)
			}
			prev, err := read()
			if err != nil {
				return err
			}
			last := time.Now()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-cmd.Context().Done():
					return nil
				case now := <-tick.C:
					cur, err := read()
					if err != nil {
						return err
					}
					var b strings.Builder
					br.WriteWatch(&b, args[0], iface, cur, prev, now.Sub(last))
					fmt.Print("\033[H\033[2J" + b.String())
					prev, last = cur, now
				}
			}
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "refresh interval")
	return cmd
}

func brRunCmd() *cobra.Command {
	var (
		config, in, out, ns string
		asJSON, noFIB, cold bool
		repeat              int
	)
	cmd := &cobra.Command{
		Use:   "run --config FILE --in IN.pcap [--out OUT.pcap] [--json] [--repeat N]",
		Short: "run a capture through the router offline (BPF_PROG_TEST_RUN, nothing attached)",
		Long: `Every packet of the capture goes through the kernel program once, in the current
network namespace (--netns: another), whose routes, neighbours and addresses the FIB
lookups see, and out of whose devices any frame may leave; --no-fib skips them. Prints per packet the action, the verdict, the egress interface and
the next hop; --out writes the frames the router emitted; --repeat N times each packet
over N runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" || in == "" {
				return fmt.Errorf("--config and --in are required")
			}
			if repeat < 0 {
				return fmt.Errorf("--repeat %d: give a positive count", repeat)
			}
			cfg, err := br.LoadConfig(config)
			if err != nil {
				return err
			}
			frames, err := pcap.Read(in)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			r, err := br.Load(cfg, br.LoadOptions{SkipFIB: noFIB, NoMACCache: cold})
			if err != nil {
				return err
			}
			defer r.Close()
			if !noFIB {
				// Offline, a frame may leave by any device of the namespace;
				// attach decides that device by device.
				devs, err := xdp.Devices(ns)
				if err == nil {
					err = r.SetHost(ns, devs)
				}
				if err != nil {
					return err
				}
			}
			var res []br.RunResult
			if err := netns.Run(ns, func() error {
				var err error
				res, err = r.Run(frames, repeat)
				return err
			}); err != nil {
				return err
			}
			enc := json.NewEncoder(os.Stdout)
			var emitted [][]byte
			for _, x := range res {
				if x.Action == "forward" {
					emitted = append(emitted, x.Out)
				}
				if asJSON {
					if err := enc.Encode(x); err != nil {
						return err
					}
					continue
				}
				line := fmt.Sprintf("%5d  %-7s %-17s", x.Index, x.Action, x.Verdict)
				if x.Action == "forward" {
					line += fmt.Sprintf(" egress %d → %s", x.EgressIfid, x.NextHop)
				}
				if repeat > 0 {
					line += fmt.Sprintf("  %.0f ns", x.Ns)
				}
				fmt.Println(line)
			}
			if out != "" {
				if err := pcap.Write(out, emitted); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "router configuration (TOML)")
	f.StringVar(&in, "in", "", "capture to run")
	f.StringVar(&out, "out", "", "write the emitted frames here")
	f.StringVar(&ns, "netns", "", "network namespace whose FIB the lookups see")
	f.BoolVar(&asJSON, "json", false, "one JSON object per packet")
	f.BoolVar(&noFIB, "no-fib", false, "skip FIB lookups: forwarded frames keep zero MACs")
	f.IntVar(&repeat, "repeat", 0, "time each packet over this many runs (ns per packet)")
	f.BoolVar(&cold, "cold", false, "compute every hop-field MAC, bypassing the per-CPU MAC cache (worst-case timing)")
	return cmd
}

// withPinned runs fn on the pinned maps of an attached router.
func withPinned(router string, fn func(*br.Pinned) error) error {
	p, err := br.OpenPinned(router)
	if err != nil {
		return err
	}
	defer p.Close()
	return fn(p)
}
