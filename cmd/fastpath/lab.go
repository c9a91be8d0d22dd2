package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/pcap"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

func labCmd() *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "veth testbed in network namespaces, traffic generator, sink and benchmarks",
	}
	cmd.PersistentFlags().StringVar(&prefix, "prefix", lab.DefaultPrefix, "prefix of every namespace and interface the lab makes")
	tb := func(layout string) (lab.Testbed, error) {
		l, err := lab.ParseLayout(layout)
		t := lab.Testbed{Prefix: prefix, Layout: l}
		if err == nil {
			err = t.Validate()
		}
		return t, err
	}
	cmd.AddCommand(labUpCmd(tb), labDownCmd(tb), labGenCmd(&prefix), labSinkCmd(&prefix), labPacketsCmd(tb), labBenchCmd(&prefix), labTCPCmd(&prefix), labScionCmd(&prefix), labTraCmd(&prefix), labTraSoakCmd(&prefix), labTraFloodCmd(&prefix))
	cmd.AddCommand(labFiguresCmd())
	return cmd
}

func labUpCmd(tb func(string) (lab.Testbed, error)) *cobra.Command {
	var (
		layout string
		mtu    int
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "build the testbed (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := tb(layout)
			if err != nil {
				return err
			}
			t.MTU = mtu
			if err := t.Validate(); err != nil {
				return err
			}
			if err := preflight.Root(); err != nil {
				return err
			}
			if err := t.Up(); err != nil {
				return err
			}
			for _, ep := range t.Endpoints() {
				fmt.Printf("%-10s %-10s %s  %s\n", ep.Netns, ep.Dev, ep.MAC, ep.Addr)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&layout, "layout", string(lab.LayoutDUT), "veth (generator ↔ sink) or dut (generator ↔ DUT ↔ sink)")
	cmd.Flags().IntVar(&mtu, "mtu", lab.DefaultMTU, fmt.Sprintf("MTU of every veth (up to %d: jumbo frames, which XDP programs there then see in several buffers)", lab.JumboMTU))
	return cmd
}

func labDownCmd(tb func(string) (lab.Testbed, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "remove everything lab up made",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := tb(string(lab.LayoutDUT))
			if err != nil {
				return err
			}
			if err := preflight.Root(); err != nil {
				return err
			}
			return t.Down()
		},
	}
}

// findIface resolves an interface given by name: in the namespace the user
// named, else the caller's namespace, else the lab's namespaces.
func findIface(prefix, ns, dev string) (xdp.Iface, error) {
	if dev == "" {
		return xdp.Iface{}, fmt.Errorf("--dev is required")
	}
	if ns != "" {
		i := xdp.Iface{Netns: ns, Name: dev}
		_, err := xdp.Lookup(i)
		return i, err
	}
	if _, err := net.InterfaceByName(dev); err == nil {
		return xdp.Iface{Name: dev}, nil
	}
	names, _ := netns.List()
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		i := xdp.Iface{Netns: n, Name: dev}
		if _, err := xdp.Lookup(i); err == nil {
			return i, nil
		}
	}
	return xdp.Iface{}, fmt.Errorf("interface %s not found in this namespace nor in the lab's (%s*); is the lab up? (fastpath lab up)", dev, prefix)
}

func labGenCmd(prefix *string) *cobra.Command {
	var (
		dev, ns, capture string
		count, rate      uint64
		duration         time.Duration
		cpu              int
		batch            uint32
		window, fixed    bool
		flood            floodFlags
	)
	cmd := &cobra.Command{
		Use:   "gen --dev IFACE --pcap FILE [--count N | --duration D]",
		Short: "replay a capture at top speed from an interface with live frames (frames over 1536 B: from an AF_PACKET socket)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if capture == "" {
				return fmt.Errorf("--pcap is required")
			}
			if count == 0 && duration == 0 {
				return fmt.Errorf("give --count N or --duration D")
			}
			if count > 0 && duration > 0 {
				return fmt.Errorf("give --count or --duration, not both")
			}
			pkts, err := pcap.Read(capture)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			iface, err := findIface(*prefix, ns, dev)
			if err != nil {
				return err
			}
			src, err := flood.source()
			if err != nil {
				return err
			}
			g, err := lab.NewSender(lab.GenOptions{Iface: iface, Packets: pkts, CPU: cpu, BatchSize: batch, Window: window, Flows: flood.flows, FlowSrc: src, Fixed: fixed})
			if err != nil {
				return err
			}
			defer g.Close()
			if g.Method() != lab.MethodLiveFrames {
				fmt.Printf("frames over %d bytes: sending from an AF_PACKET socket (%s); --batch and --window do not apply\n", lab.LiveMaxFrame, g.Method())
			}
			switch {
			case fixed:
				fmt.Printf("sending the first packet of %d, as it is, from %s\n", len(pkts), iface)
			case flood.flows > 0:
				fmt.Printf("sending %d distinct random flows on %d templates from %s\n", flood.flows, len(pkts), iface)
			default:
				fmt.Printf("sending %d distinct packets from %s\n", len(pkts), iface)
			}
			st, err := g.Send(cmd.Context(), lab.SendOptions{
				Count: count, Duration: duration, Rate: rate,
				Progress: func(el time.Duration, sent uint64, pps float64) {
					fmt.Printf("%7.1fs  %8.3f Mpps  sent %d\n", el.Seconds(), pps/1e6, sent)
				},
			})
			fmt.Printf("sent %d packets in %.3fs from the first to the last (%.3fs in all): %.3f Mpps; drops reported by %s: %d\n", st.Sent, st.Elapsed.Seconds(), st.Wall.Seconds(), st.Mpps(), iface.Name, st.Drops)
			if st.Vanished > 0 {
				fmt.Printf("warning: %d frames vanished without a counter: the peer of %s runs neither XDP nor GRO (ethtool -K PEER gro on)\n", st.Vanished, iface.Name)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dev, "dev", "", "interface to send from (searched in the lab's namespaces too) (required)")
	cmd.RegisterFlagCompletionFunc("dev", completeDevices)
	f.StringVar(&ns, "netns", "", "network namespace of the interface")
	f.StringVar(&capture, "pcap", "", "capture whose packets are sent in turn (required)")
	f.Uint64Var(&count, "count", 0, "packets to send")
	f.DurationVar(&duration, "duration", 0, "how long to send (e.g. 10s)")
	f.Uint64Var(&rate, "rate", 0, "packets per second (0: as fast as possible)")
	f.IntVar(&cpu, "cpu", -1, "pin the generator to this CPU")
	f.Uint32Var(&batch, "batch", 0, "frames per kernel batch (default 64, at most 256)")
	f.BoolVar(&window, "window", false, "write only the bytes where the packets differ: faster, but wrong if the path rewrites frames in place")
	f.BoolVar(&fixed, "fixed", false, "send the first packet as it is, writing nothing: the generator's ceiling")
	flood.register(f)
	return cmd
}

// floodFlags are lab gen's and lab bench's flood options.
type floodFlags struct {
	flows uint32
	src   string
}

func (fl *floodFlags) register(f *pflag.FlagSet) {
	f.Uint32Var(&fl.flows, "flows", 0, "flood: every packet one of N distinct random flows (source address and ports vary; the packets are templates)")
	f.StringVar(&fl.src, "flow-src", "", "flood: prefix the random source addresses come from (default: the packets' own source, ports vary)")
}

func (fl *floodFlags) source() (netip.Prefix, error) {
	if fl.src == "" {
		return netip.Prefix{}, nil
	}
	if fl.flows == 0 {
		return netip.Prefix{}, fmt.Errorf("--flow-src needs --flows N")
	}
	p, err := netip.ParsePrefix(fl.src)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--flow-src %q: want a prefix such as 10.0.0.0/8 or fd00::/64", fl.src)
	}
	return p, nil
}

func labSinkCmd(prefix *string) *cobra.Command {
	var (
		dev, ns, mode string
		duration      time.Duration
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "sink --dev IFACE [--mode auto|native|generic] [--duration D] [--json]",
		Short: "count and drop every packet reaching an interface, per CPU",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := modeOf(cmd, mode)
			if err != nil {
				return err
			}
			m, noFallback := xdpAttach(mode)
			if err := preflight.BPF(); err != nil {
				return err
			}
			iface, err := findIface(*prefix, ns, dev)
			if err != nil {
				return err
			}
			s, err := lab.AttachSink(iface, m)
			if errors.Is(err, xdp.ErrNativeUnsupported) && !noFallback {
				fmt.Fprintf(os.Stderr, "warning: %s has no native XDP; counting in generic mode (slower). --mode native forbids this.\n", iface)
				m = xdp.Generic
				s, err = lab.AttachSink(iface, m)
			}
			if err != nil {
				return err
			}
			defer s.Close()
			if !asJSON {
				fmt.Printf("counting on %s (%s XDP); Ctrl-C to stop\n", iface, m)
			}
			return watchSink(cmd, s, duration, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dev, "dev", "", "interface to count on (searched in the lab's namespaces too) (required)")
	f.StringVar(&ns, "netns", "", "network namespace of the interface")
	registerMode(cmd, &mode, modeAuto, modeAuto)
	cmd.RegisterFlagCompletionFunc("dev", completeDevices)
	f.DurationVar(&duration, "duration", 0, "stop after this long (default: until Ctrl-C)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per second")
	return cmd
}

type sinkSecond struct {
	Time    time.Time `json:"time"`
	PPS     []uint64  `json:"pps_per_cpu"`
	Total   uint64    `json:"pps"`
	Packets uint64    `json:"packets"`
}

func watchSink(cmd *cobra.Command, s *lab.Sink, duration time.Duration, asJSON bool) error {
	ctx := cmd.Context()
	prev, err := s.PerCPU()
	if err != nil {
		return err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var deadline <-chan time.Time
	if duration > 0 {
		deadline = time.After(duration)
	}
	enc := json.NewEncoder(os.Stdout)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			return nil
		case now := <-tick.C:
			cur, err := s.PerCPU()
			if err != nil {
				return err
			}
			sec := sinkSecond{Time: now.UTC(), PPS: make([]uint64, len(cur))}
			for i := range cur {
				sec.PPS[i] = cur[i].Packets - prev[i].Packets
				sec.Total += sec.PPS[i]
				sec.Packets += cur[i].Packets
			}
			prev = cur
			if asJSON {
				if err := enc.Encode(sec); err != nil {
					return err
				}
				continue
			}
			var parts []string
			for i, v := range sec.PPS {
				if v > 0 {
					parts = append(parts, fmt.Sprintf("cpu%d %d pkt/s", i, v))
				}
			}
			if len(parts) == 0 {
				parts = []string{"0 pkt/s"}
			}
			fmt.Printf("%s  %s  (total %d)\n", now.Format("15:04:05"), strings.Join(parts, ", "), sec.Packets)
		}
	}
}

func labPacketsCmd(tb func(string) (lab.Testbed, error)) *cobra.Command {
	var (
		out, srcMAC, dstMAC, src, dst string
		size, count                   int
		dport                         uint16
		scion                         bool
		config                        string
	)
	cmd := &cobra.Command{
		Use:   "packets --out FILE [--size 138] [--count 1000] [--scion [--config FILE]]",
		Short: "write a pcap of UDP/IPv4 test packets addressed across the testbed, or SCION transit packets",
		Long: `Without --scion: UDP/IPv4 packets from the generator's veth to the sink's.
With --scion: SCION/UDP packets with valid hop-field MACs that cross the border router of
--config (default: the lab's own router configuration) from its lowest-numbered external
interface to the next. Their hop fields are valid for 24 hours from now.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			t, err := tb(string(lab.LayoutDUT))
			if err != nil {
				return err
			}
			if scion {
				return writeSCIONPackets(t, out, config, size, count)
			}
			if config != "" {
				return fmt.Errorf("--config is for --scion packets")
			}
			o := t.DefaultUDP()
			o.Size, o.Count, o.DstPort = size, count, dport
			for _, m := range []struct {
				flag, val string
				dst       *net.HardwareAddr
			}{{"--src-mac", srcMAC, &o.SrcMAC}, {"--dst-mac", dstMAC, &o.DstMAC}} {
				if m.val == "" {
					continue
				}
				if *m.dst, err = net.ParseMAC(m.val); err != nil {
					return fmt.Errorf("%s %q: %w", m.flag, m.val, err)
				}
			}
			for _, a := range []struct {
				flag, val string
				dst       *netip.Addr
			}{{"--src", src, &o.Src}, {"--dst", dst, &o.Dst}} {
				if a.val == "" {
					continue
				}
				if *a.dst, err = netip.ParseAddr(a.val); err != nil {
					return fmt.Errorf("%s %q: %w", a.flag, a.val, err)
				}
			}
			pkts, err := lab.UDPPackets(o)
			if err != nil {
				return err
			}
			if dir := filepath.Dir(out); dir != "." {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return err
				}
			}
			if err := pcap.Write(out, pkts); err != nil {
				return err
			}
			fmt.Printf("wrote %d packets of %d bytes to %s (%s → %s)\n", len(pkts), size, out, o.Src, o.Dst)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "pcap file to write (required)")
	f.IntVar(&size, "size", 138, "frame length in bytes, without FCS")
	f.IntVar(&count, "count", 1000, "number of distinct packets (one flow each)")
	f.Uint16Var(&dport, "dport", 9, "UDP destination port")
	f.StringVar(&srcMAC, "src-mac", "", "source MAC (default: the generator's veth0)")
	f.StringVar(&dstMAC, "dst-mac", "", "destination MAC (default: the sink's veth2)")
	f.StringVar(&src, "src", "", "source IPv4 address (default: the generator's)")
	f.StringVar(&dst, "dst", "", "destination IPv4 address (default: the sink's)")
	f.BoolVar(&scion, "scion", false, "SCION transit packets for a border router")
	f.StringVar(&config, "config", "", "border router configuration for --scion (default: the lab's)")
	return cmd
}

func labBenchCmd(prefix *string) *cobra.Command {
	var (
		runs, cpu        int
		size             string
		packets          uint64
		maxSeconds       float64
		jsonOut, mdOut   string
		plotOut          string
		list             bool
		interleave       bool
		noCeiling        bool
		flood            floodFlags
		record           string
		updateRecord     bool
		failOnRegression bool
	)
	cmd := &cobra.Command{
		Use:   "bench [--json-file FILE] [--md FILE] [--plot FILE] [SCENARIO...]",
		Short: "run scenarios on fresh testbeds and print one table",
		Long: `Run scenarios on fresh testbeds and print one table, each row beside its figure in the
record of this machine kind (internal/lab/record/KIND.json, built into the binary too; docs/lab.md).
A row that fell by more than 10% is flagged; the exit status stays 0 unless --fail-on-regression.`,
		ValidArgsFunction: completeScenarios,
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				for _, s := range lab.Scenarios() {
					fmt.Printf("%-14s %s\n", s.Name, s.Description)
				}
				return nil
			}
			if len(args) == 0 {
				args = []string{"veth", "bridge", "xdp-redirect"}
			}
			src, err := flood.source()
			if err != nil {
				return err
			}
			sizes, err := lab.ParseSizes(size)
			if err != nil {
				return err
			}
			o := lab.BenchOptions{
				Scenarios: args, Runs: runs, Packets: packets, MaxSeconds: maxSeconds, Sizes: sizes, Prefix: *prefix, CPU: cpu, Interleave: interleave,
				Flows: flood.flows, FlowSrc: src, NoCeiling: noCeiling,
				Command: "fastpath " + strings.Join(os.Args[1:], " "), Log: os.Stderr,
			}
			if _, err := o.Validate(); err != nil {
				return err
			}
			// The record is found before the bench: a bench of an hour
			// must not end in "nowhere to write the record".
			wd, err := os.Getwd()
			if err != nil {
				return err
			}
			rf, err := lab.FindRecord(record, wd, lab.ThisMachine(), updateRecord)
			if err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			rep, err := lab.Bench(cmd.Context(), o)
			if err != nil {
				return err
			}
			if rep.Commit == "" {
				rep.Commit = lab.CheckoutCommit(wd)
			}
			rep.CompareRecord(rf.Record, rf.From)
			fmt.Println(strings.TrimRight(rep.Table(), "\n"))
			if err := writeReport(rep, jsonOut, mdOut, plotOut); err != nil {
				return err
			}
			if updateRecord {
				if err := writeRecord(rf, rep); err != nil {
					return err
				}
			}
			if failOnRegression && len(rep.Record.Fell) > 0 {
				return fmt.Errorf("--fail-on-regression: fell by more than %.0f%% against the record: %s", lab.FallThreshold*100, strings.Join(rep.Record.Fell, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&runs, "runs", 5, "runs per scenario")
	f.Uint64Var(&packets, "packets", 2_000_000, "packets per run")
	f.Float64Var(&maxSeconds, "max-seconds", 10, "end a run after this long even if not all packets are sent (slow scenarios)")
	f.StringVar(&size, "size", "138", "frame length in bytes, or several separated by commas (138,576,1500): every scenario runs at each")
	f.StringVar(&record, "record", "", "record file to compare with (and --update-record) instead of this machine kind's")
	f.BoolVar(&updateRecord, "update-record", false, "write this run's figures into the record (rows not run keep theirs); commit it when the figures are reported")
	f.BoolVar(&failOnRegression, "fail-on-regression", false, "exit with an error when a row fell by more than 10% against the record")
	f.IntVar(&cpu, "cpu", lastCPU(), "CPU the generator and the whole path run on")
	reportFlags(f, &jsonOut, &mdOut, &plotOut)
	f.BoolVar(&list, "list", false, "list the scenarios and exit")
	f.BoolVar(&interleave, "interleave", false, "run the scenarios in turns, one run each, so that the machine's drift hits every row alike")
	f.BoolVar(&noCeiling, "no-ceiling", false, "leave out the generator's ceiling row (one fixed frame, nothing written)")
	flood.register(f)
	return cmd
}

// report is what bench and tcp print and write.
type report interface {
	Table() string
	Markdown() string
	WritePNG(io.Writer) error
}

func labTCPCmd(prefix *string) *cobra.Command {
	var (
		runs, seconds, cpu      int
		jsonOut, mdOut, plotOut string
	)
	cmd := &cobra.Command{
		Use:   "tcp [--json-file FILE] [--md FILE] [--plot FILE] [SCENARIO|GROUP...]",
		Short: "TCP throughput (iperf3) through routed scenarios, e.g. the group fw-tcp",
		Long: `Run iperf3 from the generator's namespace to a server in the sink's, through the DUT's
kernel routing and what each scenario attaches there, on a fresh testbed per scenario.
Without arguments: routed, xdp-pass and the firewall's TCP rows (group fw-tcp).
Rows named *-synflood measure each run alone and then under a SYN flood from the
generator (group fw-stateful-tcp: the stateful firewall and nftables).`,
		ValidArgsFunction: completeScenarios,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"fw-tcp"}
			}
			o := lab.TCPOptions{Scenarios: args, Runs: runs, Seconds: seconds, Prefix: *prefix, CPU: cpu,
				Command: "fastpath " + strings.Join(os.Args[1:], " "), Log: os.Stderr}
			if _, err := o.Validate(); err != nil {
				return err
			}
			if err := preflight.BPF(); err != nil {
				return err
			}
			rep, err := lab.TCPBench(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Println(strings.TrimRight(rep.Table(), "\n"))
			return writeReport(rep, jsonOut, mdOut, plotOut)
		},
	}
	f := cmd.Flags()
	f.IntVar(&runs, "runs", 3, "runs per scenario")
	f.IntVar(&seconds, "seconds", 5, "seconds per iperf3 run")
	f.IntVar(&cpu, "cpu", lastCPU(), "CPU the SYN flood's generator, and the flood's whole path, run on (*-synflood rows)")
	reportFlags(f, &jsonOut, &mdOut, &plotOut)
	return cmd
}

// reportFlags are where bench, tcp and tra write their report besides the
// table they print: --json-file (--json, its old spelling, took a file
// too), --md, --plot.
func reportFlags(f *pflag.FlagSet, jsonOut, mdOut, plotOut *string) {
	jsonFileFlag(f, jsonOut, "write the report as JSON to this file")
	f.StringVar(mdOut, "md", "", "write the report as Markdown to this file")
	if plotOut != nil {
		f.StringVar(plotOut, "plot", "", "write a PNG bar chart to this file")
	}
}

// jsonFileFlag adds --json-file, and --json FILE as its deprecated old
// spelling: --json is a switch that prints JSON on the read commands.
func jsonFileFlag(f *pflag.FlagSet, p *string, usage string) {
	f.StringVar(p, "json-file", "", usage)
	f.StringVar(p, "json", "", usage)
	f.MarkDeprecated("json", "use --json-file FILE")
}

// completeScenarios completes the lab's scenario names (and lab tcp's groups).
func completeScenarios(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []string
	for _, s := range lab.Scenarios() {
		out = append(out, cobra.CompletionWithDesc(s.Name, s.Description))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func writeReport(rep report, jsonOut, mdOut, plotOut string) error {
	write := func(path string, fill func(*os.File) error) error {
		if path == "" {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fill(f); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		return f.Close()
	}
	if err := write(jsonOut, func(f *os.File) error {
		enc := json.NewEncoder(f)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}); err != nil {
		return err
	}
	if err := write(mdOut, func(f *os.File) error { _, err := f.WriteString(rep.Markdown()); return err }); err != nil {
		return err
	}
	return write(plotOut, func(f *os.File) error { return rep.WritePNG(f) })
}

// writeRecord merges a bench's rows into its record file and says what it
// wrote.
func writeRecord(rf lab.RecordFile, rep *lab.Report) error {
	before := len(rf.Record.Rows)
	skipped := rf.Record.Merge(rep)
	data, err := rf.Record.Marshal()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(rf.Path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(rf.Path, data, 0o644); err != nil {
		return fmt.Errorf("--update-record: %w", err)
	}
	fmt.Printf("record: wrote %d rows of this run to %s (%d rows in all, %d before); commit it with the report of these figures\n",
		len(rep.Rows)-len(skipped), rf.Path, len(rf.Record.Rows), before)
	if len(skipped) > 0 {
		fmt.Printf("record: not written, no packet reached the sink: %s\n", strings.Join(skipped, ", "))
	}
	return nil
}

func writeSCIONPackets(t lab.Testbed, out, config string, size, count int) error {
	var (
		cfg *br.Config
		err error
	)
	if config == "" {
		var cleanup func()
		if cfg, cleanup, err = br.LabConfig(); err != nil {
			return err
		}
		defer cleanup()
	} else if cfg, err = br.LoadConfig(config); err != nil {
		return err
	}
	pkts, err := br.TransitPackets(cfg, br.TransitOptions{Count: count, Size: size, SrcMAC: t.Gen().MAC, DstMAC: t.DUTIn().MAC})
	if err != nil {
		return err
	}
	if err := pcap.Write(out, pkts); err != nil {
		return err
	}
	fmt.Printf("wrote %d SCION packets of %d bytes to %s (router %s of %s)\n", len(pkts), size, out, cfg.RouterID, cfg.IA)
	return nil
}
