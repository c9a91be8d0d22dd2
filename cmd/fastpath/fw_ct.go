package main

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/preflight"
)

func fwCtCmd(open openFunc) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ct",
		Short: "connection tracking: list, flush, stats, gc",
		Long: `Connection tracking gives each packet a state (new, established, related, invalid,
untracked) that rules match with ct_state. It is on while a rule uses ct_state or
synproxy, or the rules file says [conntrack] enabled = true; a file without a
[conntrack] table keeps it as it is, enabled = false turns it off. See docs/fw.md.`,
	}
	cmd.AddCommand(fwCtListCmd(open), fwCtFlushCmd(open), fwCtStatsCmd(open), fwCtGCCmd(open))
	return cmd
}

func fwCtListCmd(open openFunc) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--name NAME] [--json]",
		Short: "the tracked connections, in their original direction",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			conns, err := f.Conns()
			if err != nil {
				return err
			}
			if asJSON {
				if conns == nil {
					conns = []fw.Conn{}
				}
				return printJSON(conns)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PROTO\tORIGINAL\tSTATE\tFLAGS\tTABLE\tEXPIRES IN\tPACKETS\tBYTES")
			for _, c := range conns {
				ends := fmt.Sprintf("%s → %s", netip.AddrPortFrom(c.Src, c.SPort), netip.AddrPortFrom(c.Dst, c.DPort))
				if c.Proto != 6 && c.Proto != 17 {
					ends = fmt.Sprintf("%s → %s id %d", c.Src, c.Dst, c.SPort)
					if c.Proto != 1 && c.Proto != 58 {
						ends = fmt.Sprintf("%s → %s", c.Src, c.Dst)
					}
				}
				flags := ""
				if !c.Replied {
					flags += "[UNREPLIED]"
				}
				if c.Assured {
					flags += "[ASSURED]"
				}
				if c.Synproxy {
					flags += "[SYNPROXY]"
				}
				state := c.State
				if state == "" {
					state = "-"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d/%d\n", c.Proto, ends, state, flags, c.Table,
					time.Until(c.Expires).Round(time.Second), c.Packets[0], c.Packets[1], c.Bytes[0], c.Bytes[1])
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// fwCtSweepCmd is a command that removes connections with remove and says
// how many.
func fwCtSweepCmd(open openFunc, use, short, done string, remove func(*fw.Firewall) (int, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			n, err := remove(f)
			if err != nil {
				return err
			}
			fmt.Printf(done+"\n", n)
			return nil
		},
	}
}

func fwCtFlushCmd(open openFunc) *cobra.Command {
	return fwCtSweepCmd(open, "flush", "forget every tracked connection (their next packets are new)", "flushed %d connections", (*fw.Firewall).FlushConns)
}

func fwCtGCCmd(open openFunc) *cobra.Command {
	return fwCtSweepCmd(open, "gc", "remove expired connections now (fw serve does it every --gc-interval; fw metrics does not)", "removed %d expired connections", (*fw.Firewall).ExpireConns)
}

func fwCtStatsCmd(open openFunc) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [--name NAME] [--json]",
		Short: "packets per ct state, and the tables' fill",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := open()
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.ConntrackStats()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(st)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "tracking\t%s\n", map[bool]string{true: "on", false: "off"}[st.On])
			for _, s := range fw.CtStateNames() {
				fmt.Fprintf(w, "packets %s\t%d\n", s, st.Packets[s])
			}
			// Expired entries take room until removed: shown, a table
			// that looks empty is not taken for one with room.
			fmt.Fprintf(w, "established table\t%d of %d (and %d expired, not yet removed)\n", st.Established, st.EstMax, st.EstablishedExpired)
			fmt.Fprintf(w, "embryonic table\t%d of %d (and %d expired, not yet removed)\n", st.Embryonic, st.EmbryoMax, st.EmbryonicExpired)
			for _, s := range slices.Sorted(maps.Keys(st.ByState)) {
				fmt.Fprintf(w, "tcp %s\t%d\n", s, st.ByState[s])
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func fwMetricsCmd(name *string) *cobra.Command {
	var (
		listen, ruleMetrics string
		gcEvery             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "metrics [--name NAME] [--listen ADDR] [--rule-metrics none|named|all]",
		Short: "serve an instance's Prometheus metrics (read-only: it removes no expired connections)",
		Long: `Serve the Prometheus /metrics of a firewall attached with fw attach, read from its
pinned maps at each scrape: the same families fw serve --metrics serves, without
serve's own (reloads, gc). fw metrics only reads: it does not remove expired
connections, which fw serve does every --gc-interval, or fw ct gc once (from a
timer, for an instance attached without fw serve). Before, fw metrics removed them
every 10 s: an instance that relied on that needs fw serve, or fw ct gc on a
timer, now; fastpath_fw_ct_expired_entries shows expired connections piling up.
See docs/fw.md, Metrics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("gc-interval") && gcEvery > 0 {
				return fmt.Errorf("--gc-interval %s: fw metrics no longer removes expired connections: run fw serve (it does, every --gc-interval), or fw ct gc from a timer", gcEvery)
			}
			rm, err := fw.ParseRuleMetrics(ruleMetrics)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			c := fw.NewCollector(*name, fw.MetricsOptions{Rules: rm})
			defer c.Close()
			reg := obs.NewRegistry("fw")
			reg.MustRegister(c)
			return obs.Serve(cmd.Context(), listen, reg)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", obs.AddrFW, "address for /metrics")
	cmd.Flags().StringVar(&ruleMetrics, "rule-metrics", string(fw.RuleMetricsNamed), "rules with series of their own: none, named (the rules with a name, and the default policy) or all (two series a rule)")
	cmd.Flags().DurationVar(&gcEvery, "gc-interval", 0, "removed: fw metrics only reads; fw serve or fw ct gc remove expired connections")
	cmd.Flags().MarkHidden("gc-interval")
	return cmd
}
