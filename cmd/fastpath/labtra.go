package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
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
		Use:   "tra [ROW...]",
		Short: "IP between two SCION ASes' end hosts: plain IPv6, scionproto's SIG (and the translator), iperf3 and RTT",
		Long: `On the lab's SCION network (fastpath lab scion), with fastpath's border router in
front of every AS's reference router, measure each row between the end hosts of the
first and the last leaf AS: iperf3 TCP and UDP with 1 and 4 streams, and the round-trip
time of a UDP echo. The rows run in turns, each set up and taken down in its turn.
Rows: ip (plain IPv6 routing through the ASes' namespaces, TSO on), ip-notso (TSO off,
host MTU 1396: seed 001's IP row), sig (scionproto's SCION-IP gateway), and those the
translator registers. Ratios are to ip in the same run. The network is brought up if it
is not (and taken down at the end, unless it was up before or --keep).
See docs/scion-lab.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				for _, r := range tralab.Rows() {
					fmt.Printf("%-10s %s\n", r.Name, r.Description)
				}
				return nil
			}
			o.Rows, o.Net = args, scionlab.Network{Prefix: *prefix, Dir: dir}
			o.Command, o.Log = "fastpath "+strings.Join(os.Args[1:], " "), os.Stderr
			if _, err := o.Validate(); err != nil {
				return err
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
	f.StringVar(&dir, "dir", scionlab.DefaultDir, "the SCION network's directory (as lab scion --dir)")
	f.IntVar(&o.ASes, "ases", scionlab.DefaultASes, "ASes of the SCION network, if it has to be brought up")
	f.BoolVar(&o.Keep, "keep", false, "leave the network up at the end")
	f.IntVar(&o.Runs, "runs", tralab.DefaultRuns, "turns: each runs every row once")
	f.IntVar(&o.Seconds, "seconds", tralab.DefaultSeconds, "seconds per iperf3 run")
	f.IntVar(&o.Pings, "pings", tralab.DefaultPings, "UDP echoes per round-trip figure")
	f.IntVar(&o.UDPLen, "udp-len", tralab.DefaultUDPLen, "iperf3 UDP payload in bytes")
	f.Uint64Var(&o.UDPBitrate, "udp-rate", 0, "iperf3 UDP offered load in bit/s per stream (0: as fast as the sender can)")
	f.StringVar(&jsonOut, "json", "", "write the report as JSON")
	f.StringVar(&mdOut, "md", "", "write the report as Markdown")
	f.StringVar(&plotOut, "plot", "", "write a PNG bar chart")
	f.BoolVar(&list, "list", false, "list the rows and exit")
	return cmd
}
