package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"github.com/fastpath-dev/fastpath/internal/tra/tralab"
)

// labTraCmd is `fastpath lab tra`: the translator's lab scenario, seed
// 001's table of ways to carry IP between two SCION ASes' end hosts.
func labTraCmd(prefix *string) *cobra.Command {
	o := tralab.Options{}
	var (
		dir                     string
		jsonOut, mdOut, plotOut string
		list                    bool
	)
	cmd := &cobra.Command{
		Use:   "tra [--json-file FILE] [--md FILE] [--plot FILE] [ROW...]",
		Short: "IP between two SCION ASes' end hosts: plain IPv6, scionproto's SIG (and the translator), iperf3 and RTT",
		Long: `On the lab's SCION network (fastpath lab scion), with fastpath's border router in
front of every AS's reference router, measure each row between the end hosts of the
first and the last leaf AS: iperf3 TCP and UDP with 1 stream and with 4 (four iperf3
processes, one stream each: iperf3 3.12 sends all -P streams from one thread), and the
round-trip time of a UDP echo. The rows run in turns, each set up and taken down in its turn.
Rows: ip (plain IPv6 routing through the ASes' namespaces, TSO on), ip-notso (TSO off,
host MTU 1396: seed 001's IP row), ip-xdp (plain IPv6 on the SCION network's own devices,
forwarded in XDP by each AS's border router: the fair comparison for the translator), sig
(scionproto's SCION-IP gateway), and those the translator registers. Ratios are to ip in
the same run, and to ip-xdp when it ran. The network is brought up if it
is not (and taken down at the end, unless it was up before or --keep).
See docs/scion-lab.md.`,
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var out []string
			for _, r := range tralab.Rows() {
				out = append(out, cobra.CompletionWithDesc(r.Name, r.Description))
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				for _, r := range tralab.Rows() {
					fmt.Printf("%-10s %s\n", r.Name, r.Description)
				}
				return nil
			}
			o.Rows, o.Net = args, scionlab.Network{Prefix: *prefix, Dir: scionDir(dir, *prefix)}
			o.Command, o.Log = "fastpath "+strings.Join(os.Args[1:], " "), os.Stderr
			if _, err := o.Validate(); err != nil {
				return err
			}
			if o.Version != "" {
				if err := scionproto.Check(o.Version); err != nil {
					return fmt.Errorf("--scion-version: %w", err)
				}
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			rep, err := tralab.Bench(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Println(strings.TrimRight(rep.Table(), "\n"))
			return writeReport(rep, jsonOut, mdOut, plotOut)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the SCION network's directory (as lab scion --dir; default by --prefix)")
	f.IntVar(&o.ASes, "ases", scionlab.DefaultASes, "ASes of the SCION network, if it has to be brought up")
	f.BoolVar(&o.Keep, "keep", false, "leave the network up at the end")
	f.IntVar(&o.MTU, "mtu", scionlab.DefaultMTU, fmt.Sprintf("MTU of the network's links if it has to be brought up (as lab scion up --mtu, %d to %d); a network up at another MTU is an error", scionlab.MinMTU, scionlab.MaxMTU))
	f.StringVar(&o.Version, "scion-version", "", "the scionproto release of the network if it has to be brought up (as lab scion up --scion-version; default: the one up, else "+scionproto.Default+"); a network up at another release is an error")
	f.IntVar(&o.Runs, "runs", tralab.DefaultRuns, "turns: each runs every row once")
	f.IntVar(&o.Seconds, "seconds", tralab.DefaultSeconds, "seconds per iperf3 run")
	f.IntVar(&o.Pings, "pings", tralab.DefaultPings, "UDP echoes per round-trip figure")
	f.IntVar(&o.UDPLen, "udp-len", tralab.DefaultUDPLen, "iperf3 UDP payload in bytes")
	f.Uint64Var(&o.UDPBitrate, "udp-rate", 0, "iperf3 UDP offered load in bit/s, in all: ×4 splits it over its four processes (0: each as fast as it can)")
	reportFlags(f, &jsonOut, &mdOut, &plotOut)
	f.BoolVar(&list, "list", false, "list the rows and exit")
	cmd.RegisterFlagCompletionFunc("scion-version", completeVersions)
	return cmd
}

// labTraSoakCmd is `fastpath lab tra-soak`: two translated hosts talk for
// a long time while links flap and services restart (make soak).
func labTraSoakCmd(prefix *string) *cobra.Command {
	o := tralab.SoakOptions{}
	var lr longRun
	cmd := &cobra.Command{
		Use:   "tra-soak [--duration D] [--json-file FILE] [--md FILE]",
		Short: "the translator over time: steady UDP, TCP and ping6 between two translated hosts while links flap, services restart and paths expire",
		Long: `On the lab's SCION network (two links from each leaf to the core, fastpath's
routers in hybrid mode), the first and the last leaf's hosts run fastpath's
translator and talk for --duration: UDP datagrams at --udp-rate (each echoed
back), a TCP stream at --tcp-rate, ping6. Every --flap-every the link a flow
uses goes down for --flap-for (the client's first hop and the server's last,
in turn); every --restart-every scionproto's daemon or control service of an
AS restarts (in turn); --hop-expiry makes paths expire in minutes. Every
--sample it records both daemons' memory, goroutines and tables, the paths
map, and the packets the host sent that no verdict counted; at the end, what
the flows lost and their longest gaps. See docs/tra.md (Long runs).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Net, o.Command, o.Log = lr.network(*prefix), lr.command(), os.Stderr
			return lr.run(func() (longRunReport, error) {
				rep, err := tralab.Soak(cmd.Context(), o)
				if rep == nil {
					return nil, err
				}
				return rep, err
			})
		},
	}
	f := cmd.Flags()
	lr.flags(f, &o.Keep)
	f.DurationVar(&o.Duration, "duration", 30*time.Minute, "how long the hosts talk")
	f.DurationVar(&o.Sample, "sample", 10*time.Second, "how often the daemons and maps are sampled")
	f.DurationVar(&o.FlapEvery, "flap-every", time.Minute, "take a used link down this often (0: never)")
	f.DurationVar(&o.FlapFor, "flap-for", 10*time.Second, "how long a flapped link stays down")
	f.DurationVar(&o.RestartEvery, "restart-every", 5*time.Minute, "restart a scionproto daemon or control service this often (0: never)")
	f.DurationVar(&o.HopExpiry, "hop-expiry", 0, "hop fields' lifetime (0: scionproto's 6 h; 337.5s is the shortest)")
	f.IntVar(&o.UDPRate, "udp-rate", 100, "UDP datagrams a second")
	f.IntVar(&o.UDPLen, "udp-len", 200, "UDP payload bytes")
	f.Uint64Var(&o.TCPRate, "tcp-rate", 20e6, "TCP stream's rate, bit/s")
	f.StringVar(&o.LogDir, "log-dir", "", "copy both tra run logs here at the end")
	return cmd
}

// labTraFloodCmd is `fastpath lab tra-flood`: a host sends to a great
// many destinations; the daemon stays bounded, a steady flow unaffected.
func labTraFloodCmd(prefix *string) *cobra.Command {
	o := tralab.FloodOptions{}
	var lr longRun
	cmd := &cobra.Command{
		Use:   "tra-flood [--destinations N] [--json-file FILE] [--md FILE]",
		Short: "a translated host sends to --destinations distinct SM-IP destinations in random ASes: the daemon's memory, goroutines and maps stay bounded, a steady flow goes on",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Net, o.Command, o.Log = lr.network(*prefix), lr.command(), os.Stderr
			return lr.run(func() (longRunReport, error) {
				rep, err := tralab.Flood(cmd.Context(), o)
				if rep == nil {
					return nil, err
				}
				return rep, err
			})
		},
	}
	f := cmd.Flags()
	lr.flags(f, &o.Keep)
	f.IntVar(&o.Destinations, "destinations", 1_000_000, "distinct SM-IP destinations to send to")
	f.DurationVar(&o.Duration, "duration", time.Minute, "how long the flood lasts")
	f.DurationVar(&o.Quiet, "quiet", 10*time.Second, "how long the steady flow is measured alone first")
	f.IntVar(&o.UDPRate, "udp-rate", 200, "the steady flow's datagrams a second")
	return cmd
}

// completeVersions completes --scion-version: the scionproto releases
// fastpath knows.
func completeVersions(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return scionproto.Versions, cobra.ShellCompDirectiveNoFileComp
}

// longRunReport is what tra-soak and tra-flood report.
type longRunReport interface {
	Markdown() string
	WriteJSON(path string) error
}

// longRun holds what tra-soak and tra-flood share: where the network
// lives and where the report goes.
type longRun struct{ dir, jsonOut, mdOut string }

func (lr *longRun) flags(f *pflag.FlagSet, keep *bool) {
	f.StringVar(&lr.dir, "dir", "", "the SCION network's directory (as lab scion --dir; default by --prefix)")
	f.BoolVar(keep, "keep", false, "leave the network up at the end")
	reportFlags(f, &lr.jsonOut, &lr.mdOut, nil)
}

func (lr *longRun) network(prefix string) scionlab.Network {
	return scionlab.Network{Prefix: prefix, Dir: scionDir(lr.dir, prefix)}
}

// command is the command line the report quotes, so that a reader can run it again.
func (lr *longRun) command() string { return "fastpath " + strings.Join(os.Args[1:], " ") }

// run runs a long run and writes whatever report it made, also when it
// failed part-way: a soak that broke after an hour still says what it saw.
func (lr *longRun) run(do func() (longRunReport, error)) error {
	if err := preflight.BPF(); err != nil {
		return err
	}
	rep, err := do()
	if rep == nil {
		return err
	}
	md := rep.Markdown()
	fmt.Print(md)
	if lr.jsonOut != "" {
		err = errors.Join(err, rep.WriteJSON(lr.jsonOut))
	}
	if lr.mdOut != "" {
		err = errors.Join(err, os.WriteFile(lr.mdOut, []byte(md), 0o644))
	}
	return err
}
