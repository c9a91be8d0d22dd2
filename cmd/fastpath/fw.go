package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

func fwCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fw",
		Short: "XDP firewall: prefix and port rules, flow blocking, rate limits, flow monitoring",
		Long: `An XDP firewall. Rules AND their fields (src, dst, proto, sport, dport); the first
rule that matches decides, else the default policy. Rules files are TOML (see
docs/fw.md and deploy/examples/fw.example.toml) and are validated whole before they replace the
running rules in one step. Maps and links are pinned under /sys/fs/bpf/fastpath/fw/<name>/;
--name (default "default") selects the instance every command acts on.`,
	}
	// A rule set's file, its parse and its compiled maps are garbage as
	// soon as the maps are written: collecting at half the live heap
	// rather than all of it keeps fw load of 100,000 rules near 100 MB of
	// RSS instead of 160, at no cost in time that we could measure.
	cmd.PersistentPreRun = func(*cobra.Command, []string) {
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(50)
		}
	}
	var name string
	cmd.PersistentFlags().StringVarP(&name, "name", "n", fw.DefaultName, "firewall instance")
	cmd.RegisterFlagCompletionFunc("name", completeInstances(fw.Attached))
	open := func() (*fw.Firewall, error) {
		if err := preflight.BPF(); err != nil {
			return nil, err
		}
		return fw.OpenPinned(name)
	}
	cmd.AddCommand(fwAttachCmd(&name), fwServeCmd(&name), fwDetachCmd(&name), fwLoadCmd(open), fwCheckCmd(), fwAddCmd(open), fwDelCmd(open),
		fwListCmd(), fwRulesCmd(open), fwClassBenchCmd(), fwBlockCmd(open), fwUnblockCmd(open), fwListBlockedCmd(open), fwTopCmd(open), fwStatsCmd(&name, open),
		fwCtCmd(open), fwMetricsCmd(&name))
	return cmd
}

type openFunc func() (*fw.Firewall, error)

// attachFlags are fw attach's flags, which fw serve shares.
type attachFlags struct {
	ns, mode                  string
	maxFlows, ctMax, ctEmbryo uint32
}

func (a *attachFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&a.ns, "netns", "", "network namespace of the devices")
	registerMode(cmd, &a.mode, modeAuto, modeAuto)
	fs.Uint32Var(&a.maxFlows, "max-flows", fw.DefaultMaxFlows, "flows each CPU's flow table tracks (both families), in a new instance (rounded up to a power of two; an existing instance keeps its own: another value is refused)")
	fs.Uint32Var(&a.ctMax, "ct-max", fw.DefaultCtMax, "connections the established table holds (never evicted), in a new instance (an existing instance keeps its own: another value is refused)")
	fs.Uint32Var(&a.ctEmbryo, "ct-embryonic", fw.DefaultCtEmbryonic, "connections the embryonic table (an LRU: handshakes, unanswered flows) holds, in a new instance (an existing instance keeps its own: another value is refused)")
}

// options are the attach options of the flags. A table size goes in only
// when its flag is given: attaching again to an instance with other sizes
// is then refused (its maps keep theirs), rather than with every attach
// that leaves the flag at its default.
func (a *attachFlags) options(cmd *cobra.Command, name string, args []string) (fw.AttachOptions, error) {
	mode, err := modeOf(cmd, a.mode)
	if err != nil {
		return fw.AttachOptions{}, err
	}
	o := fw.AttachOptions{Name: name, Devices: ifaces(a.ns, args), Warn: obs.Writer(slog.Default(), slog.LevelWarn)}
	o.Mode, o.NoFallback = xdpAttach(mode)
	fs := cmd.Flags()
	for _, s := range []struct {
		flag     string
		val, opt *uint32
	}{{"max-flows", &a.maxFlows, &o.MaxFlows}, {"ct-max", &a.ctMax, &o.CtMax}, {"ct-embryonic", &a.ctEmbryo, &o.CtEmbryonic}} {
		if fs.Changed(s.flag) {
			*s.opt = *s.val
		}
	}
	return o, nil
}

func fwAttachCmd(name *string) *cobra.Command {
	var (
		rules string
		af    attachFlags
	)
	cmd := &cobra.Command{
		Use:               "attach [--name NAME] [--rules FILE] [--mode auto|native|generic] [--netns NS] IFACE...",
		Short:             "attach the firewall to devices (again: swap the program, keep rules and flows)",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeDevices,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := af.options(cmd, *name, args)
			if err != nil {
				return err
			}
			if rules != "" {
				rs, err := fw.LoadRules(rules)
				if err != nil {
					return err
				}
				o.Rules = rs
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			if err := fw.Attach(o); err != nil {
				return err
			}
			fmt.Printf("firewall %s attached to %s; pins in %s\n", o.Name, strings.Join(args, ", "), fw.PinDir(o.Name))
			return nil
		},
	}
	cmd.Flags().StringVar(&rules, "rules", "", "rules file to install (TOML)")
	af.register(cmd)
	return cmd
}

func fwDetachCmd(name *string) *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:               "detach [--name NAME] [--netns NS] [IFACE...]",
		Short:             "detach from the devices (all without names); the last detach removes the maps",
		ValidArgsFunction: completeDevices,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			return fw.Detach(*name, ifaces(ns, args))
		},
	}
	cmd.Flags().StringVar(&ns, "netns", "", "network namespace of the devices")
	return cmd
}

func fwLoadCmd(open openFunc) *cobra.Command {
	return &cobra.Command{
		Use:   "load [--name NAME] FILE",
		Short: "validate a rules file and make it the running rule set in one step",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rs, err := fw.LoadRules(args[0])
			if err != nil {
				return err
			}
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			return install(f, rs)
		},
	}
}

func install(f *fw.Firewall, rs *fw.RuleSet) error {
	start := time.Now()
	if err := f.Install(rs); err != nil {
		return err
	}
	gen, _ := f.Generation()
	fmt.Printf("%d rules installed, default %s (generation %d, %s)\n", len(rs.Rules), rs.Default, gen, time.Since(start).Round(time.Millisecond))
	return nil
}

func fwClassBenchCmd() *cobra.Command {
	var (
		seed uint64
		v6   int
	)
	cmd := &cobra.Command{
		Use:   "classbench acl|fw|ipc N",
		Short: "print a ClassBench-like rules file of N rules (nested prefixes, port ranges, protocol-only rules)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 0 || n > fw.MaxRules {
				return fmt.Errorf("N %q: a number of rules from 0 to %d", args[1], fw.MaxRules)
			}
			if v6 < 0 || v6 > 100 {
				return fmt.Errorf("--ipv6 %d: a share from 0 to 100", v6)
			}
			rs, err := fw.ClassBench(args[0], n, seed, v6, netip.Prefix{})
			if err != nil {
				return err
			}
			return rs.WriteTOML(os.Stdout)
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "the same seed gives the same rules")
	cmd.Flags().IntVar(&v6, "ipv6", 0, "share of IPv6 rules, 0-100")
	return cmd
}

func fwCheckCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check [--json] FILE",
		Short: "validate a rules file without installing it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rs, err := fw.LoadRules(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(struct {
					File    string    `json:"file"`
					Rules   int       `json:"rules"`
					Default fw.Action `json:"default"`
					Valid   bool      `json:"valid"`
				}{args[0], len(rs.Rules), rs.Default, true})
			}
			fmt.Printf("%s: %d rules, default %s: valid\n", args[0], len(rs.Rules), rs.Default)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (an invalid file is an error all the same)")
	return cmd
}

// ruleFlags are the match fields of fw add.
type ruleFlags struct{ action, name, src, dst, proto, sport, dport, ctState string }

func (r *ruleFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&r.action, "action", "", "drop, pass or synproxy (required)")
	fs.StringVar(&r.src, "src", "", "source address or prefix")
	fs.StringVar(&r.dst, "dst", "", "destination address or prefix")
	fs.StringVar(&r.proto, "proto", "", "tcp, udp, icmp, icmpv6, any or a number")
	fs.StringVar(&r.sport, "sport", "", "source port or range lo-hi (tcp/udp)")
	fs.StringVar(&r.dport, "dport", "", "destination port or range lo-hi (tcp/udp)")
	fs.StringVar(&r.ctState, "ct-state", "", "connection-tracking states, e.g. established,related")
	fs.StringVar(&r.name, "rule-name", "", "the rule's name: its identity in metrics and fw rules, unique in the set (letters, digits, '_', '.', '-')")
}

// rule parses the flags the way a rules file is parsed.
func (r *ruleFlags) rule() (fw.Rule, error) {
	if r.action == "" {
		return fw.Rule{}, errors.New("--action drop, --action pass or --action synproxy is required")
	}
	var b strings.Builder
	b.WriteString("[[rule]]\n")
	for _, kv := range [][2]string{{"action", r.action}, {"name", r.name}, {"src", r.src}, {"dst", r.dst}, {"proto", r.proto}, {"sport", r.sport}, {"dport", r.dport}, {"ct_state", r.ctState}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "%s = %s\n", kv[0], strconv.Quote(kv[1]))
		}
	}
	rs, err := fw.ParseRules("command line", []byte(b.String()))
	if err != nil {
		return fw.Rule{}, err
	}
	rs.Rules[0].Line = 0
	return rs.Rules[0], nil
}

func fwAddCmd(open openFunc) *cobra.Command {
	var (
		rf ruleFlags
		at int
	)
	cmd := &cobra.Command{
		Use:   "add [--name NAME] --action drop|pass|synproxy [--rule-name RULE] [--src P] [--dst P] [--proto P] [--sport R] [--dport R] [--ct-state S] [--at N]",
		Short: "add one rule (at the end, or as rule N) and swap the rule set",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := rf.rule()
			if err != nil {
				return err
			}
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			n, err := f.Len()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("at") {
				at = n + 1
			}
			if at < 1 || at > n+1 {
				return fmt.Errorf("--at %d: the set has %d rules, use 1 to %d", at, n, n+1)
			}
			start := time.Now()
			if err := f.Insert(at, r); err != nil {
				return err
			}
			fmt.Printf("rule %d (%s): %s (%s)\n", at, r.ID(), r, time.Since(start).Round(time.Microsecond))
			return nil
		},
	}
	rf.register(cmd.Flags())
	cmd.Flags().IntVar(&at, "at", 0, "position of the new rule (1 = first); default last")
	return cmd
}

func fwDelCmd(open openFunc) *cobra.Command {
	return &cobra.Command{
		Use:   "del [--name NAME] N...",
		Short: "delete rules by number (as fw rules shows them) and swap the rule set",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			var positions []int
			for _, a := range args {
				n, err := strconv.Atoi(a)
				if err != nil {
					return fmt.Errorf("rule %q: give rule numbers as fw rules shows them", a)
				}
				positions = append(positions, n)
			}
			start := time.Now()
			if err := f.Delete(positions...); err != nil {
				return err
			}
			noun := "rules"
			if len(positions) == 1 {
				noun = "rule"
			}
			fmt.Printf("%d %s deleted (%s)\n", len(positions), noun, time.Since(start).Round(time.Microsecond))
			return nil
		},
	}
}

func fwListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "the firewall instances: name, devices (netns/device) with the mode of each, and the number of rules",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := preflight.BPF(); err != nil {
				return err
			}
			names, err := fw.Attached()
			if err != nil {
				return err
			}
			out := []instanceState{}
			for _, n := range names {
				devs, err := xdp.PinnedDevices(fw.PinDir(n))
				if err != nil {
					return fmt.Errorf("firewall %s: %w", n, err)
				}
				st := instanceState{Name: n, Devices: devs}
				if f, err := fw.OpenPinned(n); err == nil {
					if rules, err := f.Len(); err == nil {
						st.Rules = &rules
					}
					f.Close()
				}
				out = append(out, st)
			}
			if asJSON {
				return printJSON(out)
			}
			if len(out) == 0 {
				fmt.Fprintln(os.Stderr, "no firewall is attached")
				return nil
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tRULES\tDEVICES")
			for _, st := range out {
				rules := "?"
				if st.Rules != nil {
					rules = strconv.Itoa(*st.Rules)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", st.Name, rules, describeDevices(st.Devices))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func fwRulesCmd(open openFunc) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rules [--name NAME] [--json]",
		Short: "the running rules of an instance with their identity (RULE: the metrics' rule label) and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			rs, err := f.Rules()
			if err != nil {
				return err
			}
			st, err := f.Stats()
			if err != nil {
				return err
			}
			stat := func(i int) fw.RuleStats {
				if i < len(st) {
					return st[i]
				}
				return fw.RuleStats{}
			}
			if asJSON {
				// rule is the identity the per-rule metrics use as their
				// rule label (the name, or a hash of the fields).
				type row struct {
					N  int    `json:"n"`
					ID string `json:"rule"`
					fw.Rule
					fw.RuleStats
				}
				out := struct {
					Default      fw.Action     `json:"default"`
					DefaultID    string        `json:"default_rule"`
					DefaultStats fw.RuleStats  `json:"default_stats"`
					RateLimit    *fw.RateLimit `json:"rate_limit,omitempty"`
					Rules        []row         `json:"rules"`
				}{Default: rs.Default, DefaultID: fw.DefaultRuleID, DefaultStats: stat(0), RateLimit: rs.RateLimit, Rules: []row{}}
				for i, r := range rs.Rules {
					out.Rules = append(out.Rules, row{i + 1, r.ID(), r, stat(i + 1)})
				}
				return printJSON(out)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "#\tRULE\tACTION\tSRC\tDST\tPROTO\tSPORT\tDPORT\tPACKETS\tBYTES")
			for i, r := range rs.Rules {
				s := stat(i + 1)
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", i+1, r.ID(), r.Action, r.Src, r.Dst, r.Proto, r.SPort, r.DPort, s.Packets, s.Bytes)
			}
			s := stat(0)
			fmt.Fprintf(w, "-\t%s\t%s\t(default policy)\t\t\t\t\t%d\t%d\n", fw.DefaultRuleID, rs.Default, s.Packets, s.Bytes)
			if rl := rs.RateLimit; rl != nil {
				fmt.Fprintf(w, "rate limit: %d pps, %d bit/s per source, block for %s\n", rl.PPS, rl.BPS, rl.BlockFor)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// flowFlags name one 5-tuple.
type flowFlags struct{ src, dst, proto, sport, dport string }

func (ff *flowFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&ff.src, "src", "", "source address (required)")
	fs.StringVar(&ff.dst, "dst", "", "destination address (required)")
	fs.StringVar(&ff.proto, "proto", "", "tcp, udp, icmp, icmpv6 or a number (required)")
	fs.StringVar(&ff.sport, "sport", "0", "source port (tcp/udp)")
	fs.StringVar(&ff.dport, "dport", "0", "destination port (tcp/udp)")
}

func (ff *flowFlags) flow() (fw.Flow, error) {
	var fl fw.Flow
	var err error
	if fl.Src, err = netip.ParseAddr(ff.src); err != nil {
		return fl, fmt.Errorf("--src %q: an IPv4 or IPv6 address is needed", ff.src)
	}
	if fl.Dst, err = netip.ParseAddr(ff.dst); err != nil {
		return fl, fmt.Errorf("--dst %q: an IPv4 or IPv6 address is needed", ff.dst)
	}
	if ff.proto == "" {
		return fl, errors.New("--proto is required: tcp, udp, icmp, icmpv6 or a number")
	}
	if err := fl.Proto.UnmarshalText([]byte(ff.proto)); err != nil {
		return fl, fmt.Errorf("--proto: %w", err)
	}
	for _, p := range []struct {
		s   string
		dst *uint16
		n   string
	}{{ff.sport, &fl.SPort, "--sport"}, {ff.dport, &fl.DPort, "--dport"}} {
		v, err := strconv.ParseUint(p.s, 10, 16)
		if err != nil {
			return fl, fmt.Errorf("%s %q: a port 0-65535 is needed", p.n, p.s)
		}
		*p.dst = uint16(v)
	}
	return fl, fl.Validate()
}

func fwBlockCmd(open openFunc) *cobra.Command {
	var (
		ff  flowFlags
		dur time.Duration
	)
	cmd := &cobra.Command{
		Use:   "block [--name NAME] --src A --dst B --proto P [--sport N] [--dport N] [--for DURATION]",
		Short: "drop one flow (exact 5-tuple), for a time or until unblocked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl, err := ff.flow()
			if err != nil {
				return err
			}
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			if err := f.Block(fl, dur); err != nil {
				return err
			}
			until := "until unblocked"
			if dur > 0 {
				until = "for " + dur.String()
			}
			fmt.Printf("blocked %s %s\n", fl, until)
			return nil
		},
	}
	ff.register(cmd.Flags())
	cmd.Flags().DurationVar(&dur, "for", 0, "how long (e.g. 10m); default until unblocked")
	return cmd
}

func fwUnblockCmd(open openFunc) *cobra.Command {
	var ff flowFlags
	cmd := &cobra.Command{
		Use:   "unblock [--name NAME] --src A --dst B --proto P [--sport N] [--dport N]",
		Short: "remove a flow from the block list",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl, err := ff.flow()
			if err != nil {
				return err
			}
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Unblock(fl)
		},
	}
	ff.register(cmd.Flags())
	return cmd
}

func fwListBlockedCmd(open openFunc) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list-blocked [--name NAME] [--json]",
		Short: "the block list with each flow's expiry and dropped packets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			bl, err := f.Blocked()
			if err != nil {
				return err
			}
			if asJSON {
				if bl == nil {
					bl = []fw.BlockedFlow{}
				}
				return printJSON(bl)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "FLOW\tEXPIRES\tPACKETS\tBYTES")
			for _, b := range bl {
				exp := "never"
				if !b.Expires.IsZero() {
					exp = b.Expires.Format(time.DateTime) + " (in " + time.Until(b.Expires).Round(time.Second).String() + ")"
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", b.Flow, exp, b.Packets, b.Bytes)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func fwTopCmd(open openFunc) *cobra.Command {
	var (
		interval time.Duration
		n        int
		once     bool
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "top [--name NAME] [--flows 20] [--interval 1s] [--json] [--once]",
		Short: "the busiest flows, live, with packets/s and bit/s",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return fmt.Errorf("--interval %s: must be positive", interval)
			}
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			before, err := f.Flows()
			if err != nil {
				return err
			}
			t0 := time.Now()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-cmd.Context().Done():
					return nil
				case <-tick.C:
				}
				after, err := f.Flows()
				if err != nil {
					return err
				}
				now := time.Now()
				top := fw.Top(before, after, now.Sub(t0), n)
				before, t0 = after, now
				if asJSON {
					if top == nil {
						top = []fw.TopFlow{}
					}
					if err := json.NewEncoder(os.Stdout).Encode(map[string]any{"time": now.UTC(), "flows": top, "tracked": len(after)}); err != nil {
						return err
					}
				} else {
					if !once {
						fmt.Print("\033[H\033[2J")
					}
					fmt.Printf("%s  %d flows tracked, top %d by packets/s\n", now.Format(time.TimeOnly), len(after), n)
					w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
					fmt.Fprintln(w, "PPS\tBIT/S\tPACKETS\tRULE\tACTION\t FLOW\t")
					for _, t := range top {
						rule := "default"
						if t.Rule > 0 {
							rule = strconv.Itoa(int(t.Rule))
						}
						fmt.Fprintf(w, "%.0f\t%s\t%d\t%s\t%s\t %s\t\n", t.PPS, siBits(t.BPS), t.Packets, rule, t.Action, t.Flow)
					}
					w.Flush()
				}
				if once {
					return nil
				}
			}
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between samples")
	cmd.Flags().IntVar(&n, "flows", 20, "flows to show")
	// -n was the number of flows; it is --name now, as in every command.
	cmd.Flags().IntVar(&n, "n", 20, "flows to show")
	cmd.Flags().MarkDeprecated("n", "use --flows")
	cmd.Flags().BoolVar(&once, "once", false, "print one sample and exit")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per sample")
	return cmd
}

func siBits(v float64) string {
	for _, u := range []struct {
		f float64
		s string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= u.f {
			return fmt.Sprintf("%.2f%s", v/u.f, u.s)
		}
	}
	return fmt.Sprintf("%.0f", v)
}

func fwStatsCmd(name *string, open openFunc) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [--name NAME] [--json]",
		Short: "packets per verdict reason, and the sources the rate limit blocked",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			c, err := f.Counters()
			if err != nil {
				return err
			}
			srcs, err := f.RateSources()
			if err != nil {
				return err
			}
			gen, _ := f.Generation()
			if asJSON {
				if srcs == nil {
					srcs = []fw.RateSource{}
				}
				return printJSON(map[string]any{"counters": c, "rate_limited": srcs, "generation": gen, "devices": fw.Devices(*name)})
			}
			var names []string
			for k := range c {
				names = append(names, k)
			}
			sort.Strings(names)
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			for _, k := range names {
				fmt.Fprintf(w, "%s\t%d\n", k, c[k])
			}
			fmt.Fprintf(w, "rule set generation\t%d\n", gen)
			fmt.Fprintf(w, "attached to\t%s\n", strings.Join(fw.Devices(*name), ", "))
			w.Flush()
			if len(srcs) > 0 {
				fmt.Println("\nrate-limited sources:")
				w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "SOURCE\tTRIPS\tDROPPED\tBLOCKED UNTIL")
				for _, s := range srcs {
					until := "-"
					if !s.BlockedUntil.IsZero() {
						until = s.BlockedUntil.Format(time.TimeOnly)
					}
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", s.Src, s.Trips, s.Dropped, until)
				}
				w.Flush()
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
