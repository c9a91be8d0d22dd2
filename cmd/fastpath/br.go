package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
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

// brAttached lists the attached routers, for --name's completion and for
// the read commands that take the only one when none is named.
func brAttached() ([]string, error) { return br.Attached() }

// brRouter is the router a command reads or acts on: --name, else the
// only one attached.
func brRouter(name string) (string, error) {
	return pickInstance(name, "router", "fastpath br attach", brAttached)
}

func brAttachCmd() *cobra.Command {
	var config, ns, name, mode string
	cmd := &cobra.Command{
		Use:   "attach --config FILE [--name BR] [--mode auto|native|generic] [--netns NS] [IFACE...]",
		Short: "attach the router to devices (again: reload the configuration in place)",
		Long: `Attach the router to the named devices, or, without names, to the configuration's
internal_interfaces (or the device holding internal_addr) and the devices holding the
external interfaces' underlay addresses. Maps and links are pinned under
/sys/fs/bpf/fastpath/br/<name>/, the name being --name or the router_id. Running it
again updates the configuration and keys in place and swaps the program without
detaching. --mode overrides the configuration's xdp_mode.`,
		ValidArgsFunction: completeDevices,
		RunE: func(cmd *cobra.Command, args []string) error {
			if config == "" {
				return fmt.Errorf("--config is required")
			}
			mode, err := modeOf(cmd, mode)
			if err != nil {
				return err
			}
			cfg, err := br.LoadConfig(config)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			if err := br.Attach(cfg, br.AttachOptions{Devices: ifaces(ns, args), Netns: ns, Mode: mode, Name: name}); err != nil {
				return err
			}
			if name == "" {
				name = cfg.RouterID
			}
			fmt.Printf("router %s attached; pins in %s\n", name, br.PinDir(name))
			return nil
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "router configuration (TOML; see deploy/examples/br.example.toml) (required)")
	cmd.Flags().StringVar(&ns, "netns", "", "network namespace of the devices")
	registerName(cmd, &name, "", "the router's instance name, its pin directory under /sys/fs/bpf/fastpath/br/ (default: the router_id)", brAttached)
	registerMode(cmd, &mode, "", "the configuration's xdp_mode, else auto")
	return cmd
}

func brServeCmd() *cobra.Command {
	var (
		config, ns, name, mode, metrics string
		interval                        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve --config FILE [--name BR] [--mode auto|native|generic] [--netns NS] [--interval 1s] [--metrics ADDR] [IFACE...]",
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
--metrics serves Prometheus' /metrics there (the unit: 127.0.0.1:30490), read from
the router's maps at each scrape (docs/br.md, Metrics).
Ready for systemd's Type=notify (deploy/systemd/fastpath-br@.service).`,
		ValidArgsFunction: completeDevices,
		RunE: func(cmd *cobra.Command, args []string) error {
			if config == "" {
				return fmt.Errorf("--config is required")
			}
			if interval <= 0 {
				return fmt.Errorf("--interval %s: give a positive duration, such as 1s", interval)
			}
			mode, err := modeOf(cmd, mode)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			var reg *prometheus.Registry
			if metrics != "" {
				// Listen before attaching: a taken port fails the start
				// rather than leaving a router unwatched.
				ln, err := net.Listen("tcp", metrics)
				if err != nil {
					return fmt.Errorf("--metrics %s: %w (give a free address, such as 127.0.0.1:0)", metrics, err)
				}
				reg = obs.NewRegistry("br")
				ctx, cancel := context.WithCancel(cmd.Context())
				served := make(chan error, 1)
				go func() { served <- obs.ServeListener(ctx, ln, reg) }()
				defer func() { cancel(); <-served }()
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
				Attach:   br.AttachOptions{Devices: ifaces(ns, args), Netns: ns, Mode: mode, Name: name},
				Interval: interval,
				Metrics:  registerer(reg),
				Reload:   reload,
				Ready: func() {
					if err := notifyReady(); err != nil {
						slog.Warn("telling the service manager that serve is ready failed", "err", err)
					}
				},
			})
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "router configuration (TOML; see deploy/examples/br.example.toml) (required)")
	cmd.Flags().StringVar(&ns, "netns", "", "network namespace of the devices")
	registerName(cmd, &name, "", "the router's instance name, its pin directory under /sys/fs/bpf/fastpath/br/ (default: the router_id)", brAttached)
	registerMode(cmd, &mode, "", "the configuration's xdp_mode, else auto")
	cmd.Flags().DurationVar(&interval, "interval", br.DefaultKeepInterval, "how often to look at the host when no netlink event comes")
	cmd.Flags().StringVar(&metrics, "metrics", "", "serve Prometheus metrics on this address, such as "+obs.AddrBR+" (default: none)")
	return cmd
}

// registerer is reg as a prometheus.Registerer, nil when there is none
// (a nil *Registry in the interface would not be nil).
func registerer(reg *prometheus.Registry) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return reg
}

// notifyReady tells the service manager that started fastpath with
// NOTIFY_SOCKET set (systemd's Type=notify, or the lab) that it is ready.
func notifyReady() error { return sdNotify("READY=1") }

func brDetachCmd() *cobra.Command {
	var name, ns string
	cmd := &cobra.Command{
		Use:   "detach [--name BR] [--netns NS] [IFACE...]",
		Short: "detach a router from devices (all of its devices unless named); the last detach removes its maps too",
		Long: `With --name, detach that router from the named devices, or from all of its devices.
Without --name, detach whichever router holds each named device; with neither, the only
router attached.`,
		ValidArgsFunction: completeDevices,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			if name == "" && len(args) > 0 {
				return br.DetachDevices(ifaces(ns, args))
			}
			router, err := brRouter(name)
			if err != nil {
				return err
			}
			return br.Detach(router, ifaces(ns, args))
		},
	}
	registerName(cmd, &name, "", "the router to detach", brAttached)
	cmd.Flags().StringVar(&name, "router", "", "router to detach")
	cmd.Flags().MarkDeprecated("router", "use --name")
	cmd.Flags().StringVar(&ns, "netns", "", "network namespace of the devices")
	return cmd
}

// instanceState is an attached instance as `list` shows it, in every
// function: its name and devices (namespace, mode, chain); Rules for the
// firewall.
type instanceState struct {
	Name    string             `json:"name"`
	Devices []xdp.PinnedDevice `json:"devices"`
	Rules   *int               `json:"rules,omitempty"`
}

// describeDevices is a device list as list prints it: "veth0 (native)",
// "ns/veth1 (generic, behind fw default)", "veth2 (gone)".
func describeDevices(devs []xdp.PinnedDevice) string {
	var out []string
	for _, d := range devs {
		state := string(d.Mode)
		if d.Gone {
			state = "gone"
		}
		if d.Behind != "" {
			// The chain: "fw default → br on veth0".
			state += ", behind " + d.Behind
		}
		out = append(out, fmt.Sprintf("%s (%s)", d.Iface, state))
	}
	if len(out) == 0 {
		return "no device"
	}
	return strings.Join(out, ", ")
}

func brListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "the attached routers: name, devices (netns/device) and the mode of each",
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
				out := []instanceState{}
				for _, r := range rs {
					out = append(out, instanceState{Name: r.ID, Devices: r.Devices})
				}
				return printJSON(out)
			}
			if len(rs) == 0 {
				fmt.Fprintln(os.Stderr, "no router is attached")
				return nil
			}
			for _, r := range rs {
				line := fmt.Sprintf("%s  %s", r.ID, describeDevices(r.Devices))
				if r.Gone() {
					line += fmt.Sprintf("  — every device is gone (namespace deleted?): fastpath br detach --name %s removes what is left", r.ID)
				}
				fmt.Println(line)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// readKey reads a forwarding key from a file, or from stdin for "-": the
// base64 of 16 bytes (as scionproto's key files hold keys), or the 16
// bytes themselves.
func readKey(path string, stdin io.Reader) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, 4096))
		path = "stdin"
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	if key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b))); err == nil && len(key) == 16 {
		return key, nil
	}
	if len(b) == 16 {
		return b, nil
	}
	return nil, fmt.Errorf("--key-file %s: want the base64 of 16 bytes, or the 16 bytes (an AES-128 forwarding key, as derived from a master key)", path)
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
	var (
		addName, keyFile string
		addIndex         int
	)
	add := &cobra.Command{
		Use:   "add [--name BR] --index 0|1 --key-file FILE|-",
		Short: "put a pre-derived 16-byte forwarding key into slot --index (0, or 1 during a rollover)",
		Long: `Put a forwarding key, read from --key-file (- reads stdin), into a key slot. The file
holds the base64 of the 16 bytes, or the bytes themselves. A key is never taken from the
command line, where ps and the shell's history would show it.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 3 {
				return fmt.Errorf("a key on the command line is refused: ps and the shell's history show it to anyone; put it in a file readable by root alone and run fastpath br key add --name %s --index %s --key-file FILE (or --key-file - to read stdin)", args[0], args[1])
			}
			if len(args) > 0 {
				return fmt.Errorf("unexpected arguments %q: fastpath br key add --name BR --index 0|1 --key-file FILE", args)
			}
			if !cmd.Flags().Changed("index") {
				return fmt.Errorf("--index is required: the key slot, 0 (or 1 during a rollover)")
			}
			slot, err := parseSlot(strconv.Itoa(addIndex))
			if err != nil {
				return err
			}
			if keyFile == "" {
				return fmt.Errorf("--key-file is required: a file that holds the key (- reads stdin)")
			}
			key, err := readKey(keyFile, cmd.InOrStdin())
			if err != nil {
				return err
			}
			router, err := brRouter(addName)
			if err != nil {
				return err
			}
			return withPinned(router, func(p *br.Pinned) error { return p.SetKey(slot, key) })
		},
	}
	registerName(add, &addName, "", "router", brAttached)
	add.Flags().IntVar(&addIndex, "index", 0, "key slot: 0, or 1 during a rollover (required)")
	add.Flags().StringVar(&keyFile, "key-file", "", "file holding the key, base64 or raw; - reads stdin (required)")
	add.RegisterFlagCompletionFunc("index", cobra.FixedCompletions([]string{"0", "1"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(add)

	var rmName string
	rmIndex := -1
	remove := &cobra.Command{
		Use:   "remove [--name BR] --index 0|1",
		Short: "clear a key slot",
		Args:  cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			index := strconv.Itoa(rmIndex)
			if len(args) > 0 {
				if len(args) != 2 || cmd.Flags().Changed("index") {
					return fmt.Errorf("fastpath br key remove --name BR --index 0|1")
				}
				var err error
				if rmName, args, err = oldPositionalName(cmd, rmName, args, func(n string) string {
					return "fastpath br key remove --name " + n + " --index " + args[1]
				}); err != nil {
					return err
				}
				index = args[0]
			} else if !cmd.Flags().Changed("index") {
				return fmt.Errorf("--index is required: the key slot to clear, 0 or 1")
			}
			slot, err := parseSlot(index)
			if err != nil {
				return err
			}
			router, err := brRouter(rmName)
			if err != nil {
				return err
			}
			return withPinned(router, func(p *br.Pinned) error { return p.SetKey(slot, nil) })
		},
	}
	registerName(remove, &rmName, "", "router", brAttached)
	remove.Flags().IntVar(&rmIndex, "index", -1, "key slot to clear: 0 or 1 (required)")
	remove.RegisterFlagCompletionFunc("index", cobra.FixedCompletions([]string{"0", "1"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(remove)

	var (
		listName string
		asJSON   bool
	)
	list := &cobra.Command{
		Use:   "list [--name BR] [--json]",
		Short: "show which key slots are set",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _, err := oldPositionalName(cmd, listName, args, func(n string) string { return "fastpath br key list --name " + n })
			if err != nil {
				return err
			}
			router, err := brRouter(name)
			if err != nil {
				return err
			}
			p, err := br.OpenPinned(router)
			if err != nil {
				return err
			}
			defer p.Close()
			slots, err := p.KeySlots()
			if err != nil {
				return err
			}
			if asJSON {
				type slot struct {
					Index int  `json:"index"`
					Set   bool `json:"set"`
				}
				out := []slot{}
				for i, set := range slots {
					out = append(out, slot{i, set})
				}
				return printJSON(map[string]any{"name": router, "slots": out})
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
	}
	registerName(list, &listName, "", "router", brAttached)
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(list)
	return cmd
}

func brStatsCmd() *cobra.Command {
	var (
		asJSON        bool
		metrics, name string
	)
	cmd := &cobra.Command{
		Use:   "stats [--name BR] [--json] [--metrics ADDR]",
		Short: "counters per interface and verdict, of one router or every one attached",
		Long: `Counters per interface and verdict, of one router or every one attached.
--metrics (deprecated: br serve --metrics serves the same families, with the keeper's)
serves them to Prometheus until stopped, through br serve's collector.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _, err := oldPositionalName(cmd, name, args, func(n string) string { return "fastpath br stats --name " + n })
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			var routers []string
			if name != "" {
				routers = []string{name}
			} else {
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
				slog.Warn("br stats --metrics is deprecated: br serve --metrics serves the same families, and the keeper's", "metrics", metrics)
				reg := obs.NewRegistry("br")
				reg.MustRegister(br.NewCollector(br.MetricsOptions{Name: name}))
				return obs.Serve(cmd.Context(), metrics, reg)
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
					fmt.Printf("  every device of this router is gone (namespace deleted?): these counters are its last; fastpath br detach --name %s removes them\n", id)
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
	cmd.Flags().StringVar(&metrics, "metrics", "", "deprecated (br serve --metrics): serve Prometheus metrics on this address until stopped")
	registerName(cmd, &name, "", "router (default: every one attached)", brAttached)
	return cmd
}

func brWatchCmd() *cobra.Command {
	var (
		interval time.Duration
		name     string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "watch [--name BR] [--json] [INTERFACE]",
		Short: "refreshing table per verdict: packets, pkts/s, bytes, Mbit/s (--json: one object per line)",
		Long: `INTERFACE is a SCION interface ID, internal, unmatched or all (default). Without --name,
the only router attached. --json prints one JSON object a line per --interval instead
of the table.`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The old form named the router first: watch BR [INTERFACE].
			if name == "" && (len(args) == 2 || len(args) == 1 && isAttachedRouter(args[0])) {
				var err error
				if name, args, err = oldPositionalName(cmd, name, args, func(n string) string {
					return strings.TrimSpace("fastpath br watch --name " + n + " " + strings.Join(args[1:], " "))
				}); err != nil {
					return err
				}
			}
			if len(args) > 1 {
				return fmt.Errorf("one INTERFACE at most: fastpath br watch --name BR [INTERFACE]")
			}
			if interval <= 0 {
				return fmt.Errorf("--interval %s: give a positive duration, such as 1s", interval)
			}
			iface := "all"
			if len(args) == 1 {
				iface = args[0]
			}
			router, err := brRouter(name)
			if err != nil {
				return err
			}
			p, err := br.OpenPinned(router)
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
			enc := json.NewEncoder(os.Stdout)
			for {
				select {
				case <-cmd.Context().Done():
					return nil
				case now := <-tick.C:
					cur, err := read()
					if err != nil {
						return err
					}
					if asJSON {
						err = enc.Encode(watchSample(router, iface, now, cur, prev, now.Sub(last)))
					} else {
						var b strings.Builder
						br.WriteWatch(&b, router, iface, cur, prev, now.Sub(last))
						_, err = fmt.Print("\033[H\033[2J" + b.String())
					}
					if err != nil {
						return err
					}
					prev, last = cur, now
				}
			}
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "refresh interval")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per interval, a line each")
	registerName(cmd, &name, "", "router (default: the only one attached)", brAttached)
	return cmd
}

// isAttachedRouter says a router of that name is attached.
func isAttachedRouter(name string) bool {
	rs, _ := br.Attached()
	return slices.Contains(rs, name)
}

// watchVerdict is one verdict's line of br watch --json.
type watchVerdict struct {
	Packets uint64  `json:"packets"`
	PPS     float64 `json:"pps"`
	Bytes   uint64  `json:"bytes"`
	Mbps    float64 `json:"mbit_s"`
}

// watchSample is one interval of br watch --json: the counters and the
// rates since the interval before, by verdict.
func watchSample(router, iface string, now time.Time, cur, prev [br.VerdictCount]br.Stat, dt time.Duration) any {
	verdicts := map[string]watchVerdict{}
	sec := dt.Seconds()
	for v := range br.VerdictCount {
		c, p := cur[v], prev[v]
		w := watchVerdict{Packets: c.Packets, Bytes: c.Bytes}
		if sec > 0 {
			w.PPS = float64(c.Packets-p.Packets) / sec
			w.Mbps = float64(c.Bytes-p.Bytes) * 8 / sec / 1e6
		}
		verdicts[br.VerdictName(br.Verdict(v))] = w
	}
	return struct {
		Time      time.Time               `json:"time"`
		Name      string                  `json:"name"`
		Interface string                  `json:"interface"`
		Verdicts  map[string]watchVerdict `json:"verdicts"`
	}{now.UTC(), router, iface, verdicts}
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
	f.StringVar(&config, "config", "", "router configuration (TOML) (required)")
	f.StringVar(&in, "in", "", "capture to run (required)")
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
