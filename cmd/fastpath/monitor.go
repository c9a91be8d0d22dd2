package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/monitor"
	"github.com/fastpath-dev/fastpath/internal/pcap"
	"github.com/fastpath-dev/fastpath/internal/tra"
)

func monitorCmd() *cobra.Command {
	var (
		name               string
		drops, passes, all bool
		reasons            []string
		src, dst, proto    string
		port, count, snap  int
		duration           time.Duration
		pcapPath           string
		classic, jsonOut   bool
	)
	c := &cobra.Command{
		Use:   "monitor br|fw|tra [--name N] [--drops|--passes|--all] [--reason R] [--src PREFIX] [--dst PREFIX] [--proto P] [--port N] [--count N] [--duration D] [--pcap FILE|-] [--pcap-classic] [--snaplen N] [--json]",
		Short: "Show, frame by frame, what a function drops or passes up",
		Long: `Streams one line per frame the function drops in XDP (or passes up to the
kernel, with --passes or --all): time, function, device, verdict, reason (as
its counters name it), the flow (addresses, protocol, ports; for SCION the
ISD-ASes, hosts and the path's current hop field) and length. The function
copies frames only while a monitor listens (a lease it renews every second;
killed, it stops the copying within 5 s); filters apply in userspace, to what
the function copied. --pcap writes the frames as pcapng, each with its
verdict and reason as the packet's comment (Wireshark: frame.comment), or as
pcap with --pcap-classic; "-" is stdout (fastpath monitor fw --pcap - |
wireshark -k -i -). Root only: frames may hold user data. One monitor per
instance at a time.`,
		Example: `  fastpath monitor fw --name eth0
  fastpath monitor fw --all --src 198.18.0.0/24 --proto udp --count 10
  fastpath monitor br --name br1-ff00_0_110-1 --reason bad_mac --json
  fastpath monitor tra --passes --duration 30s --pcap tra.pcapng`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"br", "fw", "tra"},
		RunE: func(cmd *cobra.Command, args []string) error {
			o := monitor.Options{Count: count, Duration: duration, Snaplen: snap, Filter: monitor.Filter{Reasons: reasons}}
			switch {
			case all || (drops && passes):
				o.Want = monitor.WantAll
			case passes:
				o.Want = monitor.WantPasses
			default:
				o.Want = monitor.WantDrops
			}
			var err error
			if src != "" {
				if o.Filter.Src, err = monitor.ParsePrefix(src); err != nil {
					return fmt.Errorf("--src: %w", err)
				}
			}
			if dst != "" {
				if o.Filter.Dst, err = monitor.ParsePrefix(dst); err != nil {
					return fmt.Errorf("--dst: %w", err)
				}
			}
			if proto != "" {
				if o.Filter.Proto, err = monitor.ParseProto(proto); err != nil {
					return fmt.Errorf("--proto: %w", err)
				}
			}
			o.Filter.Port = port
			if err := o.Filter.Validate(); err != nil {
				return err
			}
			if snap < 0 || snap > monitor.SnapMax {
				return fmt.Errorf("--snaplen %d: want 1-%d (0: %d)", snap, monitor.SnapMax, monitor.SnapMax)
			}
			var s monitor.Source
			switch args[0] {
			case "fw":
				if name == "" {
					name = fw.DefaultName
				}
				s, err = fw.OpenMonitor(name)
			case "tra":
				if name, err = pickInstance(name, "translator", "fastpath tra attach or tra run", traAttached); err == nil {
					s, err = tra.OpenMonitor(name)
				}
			case "br":
				if name, err = pickInstance(name, "router", "fastpath br attach or br serve", brAttached); err == nil {
					s, err = br.OpenMonitor(name)
				}
			default:
				return fmt.Errorf("monitor %q: want br, fw or tra", args[0])
			}
			if err != nil {
				return err
			}
			out := monitor.Output{Lines: cmd.OutOrStdout(), JSON: jsonOut}
			if pcapPath != "" {
				var w io.Writer = cmd.OutOrStdout()
				if pcapPath == "-" {
					out.Lines = nil // the frames are stdout
				} else {
					f, err := os.OpenFile(pcapPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
					if err != nil {
						s.Close()
						return err
					}
					defer f.Close()
					w = f
				}
				sl := snap
				if sl == 0 {
					sl = monitor.SnapMax
				}
				if args[0] == "br" && snap == 0 {
					sl = br.CaptureMax
				}
				if classic {
					out.Pcap, err = pcap.NewWriter(w, sl)
				} else {
					out.Ng, err = pcap.NewNgWriter(w, sl, "fastpath monitor "+args[0]+" "+name)
				}
				if err != nil {
					s.Close()
					return err
				}
			}
			st, err := monitor.Run(cmd.Context(), s, o, out.Write)
			if cerr := s.Close(); err == nil {
				err = cerr
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d events, %d filtered out, lost %d\n", st.Events, st.Filtered, st.Lost)
			return err
		},
	}
	f := c.Flags()
	f.StringVarP(&name, "name", "n", "", "the instance (fw: "+fw.DefaultName+" if empty; br, tra: the only one attached)")
	f.BoolVar(&drops, "drops", false, "frames dropped (the default)")
	f.BoolVar(&passes, "passes", false, "frames passed up to the kernel (the reference router, the host's stack)")
	f.BoolVar(&all, "all", false, "both")
	f.StringSliceVar(&reasons, "reason", nil, "only these reasons, as the function's counters name them (repeat or comma-separate)")
	f.StringVar(&src, "src", "", "only sources in this prefix (underlay or SCION host)")
	f.StringVar(&dst, "dst", "", "only destinations in this prefix (underlay or SCION host)")
	f.StringVar(&proto, "proto", "", "only this protocol: tcp, udp, icmp, icmp6, sctp or a number")
	f.IntVar(&port, "port", 0, "only frames with this source or destination port")
	f.IntVar(&count, "count", 0, "stop after this many events (0: no limit)")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until interrupted)")
	f.StringVar(&pcapPath, "pcap", "", `write the frames as pcapng to this file ("-": stdout, and no lines)`)
	f.BoolVar(&classic, "pcap-classic", false, "classic pcap rather than pcapng (no per-packet comments)")
	f.IntVar(&snap, "snaplen", 0, fmt.Sprintf("bytes of each frame copied (0: %d, the most)", monitor.SnapMax))
	f.BoolVar(&jsonOut, "json", false, "a JSON object per event")
	c.MarkFlagsMutuallyExclusive("drops", "all")
	c.MarkFlagsMutuallyExclusive("passes", "all")
	return c
}
