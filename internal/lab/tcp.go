package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// TCPOptions configure a TCP throughput run: iperf3 from the generator's
// namespace to a server in the sink's, through the DUT's routing and
// whatever a scenario attaches there.
type TCPOptions struct {
	Scenarios []string
	Runs      int
	Seconds   int
	Prefix    string
	// CPU the SYN flood's generator is pinned to (rows with
	// Scenario.SYNFlood), which is also where the flood's whole path runs;
	// -1 leaves it to the scheduler.
	CPU     int
	Command string
	Log     io.Writer
}

// Validate checks the options and resolves the scenarios before anything is
// set up.
func (o *TCPOptions) Validate() ([]Scenario, error) {
	scs, err := resolveRuns(o.Scenarios, o.Runs)
	if err != nil {
		return nil, err
	}
	for _, s := range scs {
		if !s.Routed {
			return nil, fmt.Errorf("scenario %s does not route IP through the DUT, so TCP cannot cross it: use routed scenarios (routed, xdp-pass, fw-…, iptables-…, nft-…)", s.Name)
		}
	}
	if o.Seconds < 1 {
		return nil, fmt.Errorf("--seconds %d: at least one second per run", o.Seconds)
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return nil, errors.New("iperf3 not found: apt install iperf3")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return scs, (Testbed{Prefix: o.Prefix, Layout: LayoutDUT}).Validate()
}

// TCPReport is what one TCP run measured; tables and plot come from it.
type TCPReport struct {
	Started time.Time `json:"started"`
	Command string    `json:"command"`
	// Commit is the revision measured (RunCommit); "" when not known, and
	// in reports from before it was recorded.
	Commit   string `json:"commit,omitempty"`
	Kernel   string `json:"kernel"`
	CPUModel string `json:"cpu_model"`
	CPUs     int    `json:"cpus"`
	Seconds  int    `json:"seconds_per_run"`
	// Baseline is the scenario ratios are taken to: routed, if it ran.
	Baseline string   `json:"baseline"`
	Rows     []TCPRow `json:"rows"`
}

// TCPRow is one scenario's throughput over its runs, in Gbit/s received.
type TCPRow struct {
	Scenario    string    `json:"scenario"`
	Description string    `json:"description"`
	Gbps        []float64 `json:"gbps_runs"`
	MedianGbps  float64   `json:"median_gbps"`
	MinGbps     float64   `json:"min_gbps"`
	MaxGbps     float64   `json:"max_gbps"`
	Ratio       float64   `json:"ratio"`
	Note        string    `json:"note,omitempty"`
	// A row with a SYN flood (Scenario.SYNFlood): Gbps are its runs under
	// the flood, QuietGbps its runs without (measured first, on tables the
	// flood has not filled yet), FloodMpps the rate at which each flood
	// entered the DUT (FloodSentMpps: was sent, the rest dropped by the
	// DUT's full veth ring, which iperf3's packets share),
	// and FloodRatio the median under the flood over the median without.
	QuietGbps       []float64 `json:"quiet_gbps_runs,omitempty"`
	MedianQuietGbps float64   `json:"median_quiet_gbps,omitempty"`
	FloodMpps       []float64 `json:"flood_mpps_runs,omitempty"`
	MedianFloodMpps float64   `json:"median_flood_mpps,omitempty"`
	FloodSentMpps   []float64 `json:"flood_sent_mpps_runs,omitempty"`
	FloodRatio      float64   `json:"flood_ratio,omitempty"`
}

const iperfPort = 5201

// TCPBench runs iperf3 through each scenario on a fresh testbed.
func TCPBench(ctx context.Context, o TCPOptions) (*TCPReport, error) {
	scs, err := o.Validate()
	if err != nil {
		return nil, err
	}
	rep := &TCPReport{Started: time.Now().UTC(), Command: o.Command, Commit: RunCommit(), Kernel: kernelRelease(), CPUModel: cpuModel(), CPUs: onlineCPUs(), Seconds: o.Seconds}
	for _, s := range scs {
		if s.Name == "routed" {
			rep.Baseline = "routed"
		}
	}
	for _, s := range scs {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		row, err := tcpScenario(ctx, s, o)
		if err != nil {
			return rep, fmt.Errorf("scenario %s: %w", s.Name, err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	rep.finish()
	return rep, nil
}

func tcpScenario(ctx context.Context, s Scenario, o TCPOptions) (row TCPRow, err error) {
	tb := Testbed{Prefix: o.Prefix, Layout: LayoutDUT}
	if err := tb.Up(); err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, tb.Down()) }()
	teardown, err := s.Setup(tb)
	if err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, teardown()) }()

	servers, err := StartIperfServers(tb.Sink().Netns, 1)
	if err != nil {
		return row, err
	}
	defer servers.Close()
	row = TCPRow{Scenario: s.Name, Description: s.Description}
	if s.SYNFlood {
		err = synFloodRuns(ctx, tb, s, o, &row)
	} else {
		for i := 0; i < o.Runs && err == nil; i++ {
			var gbps float64
			if gbps, err = iperfRun(ctx, tb, o.Seconds); err == nil {
				row.Gbps = append(row.Gbps, gbps)
				fmt.Fprintf(o.Log, "%-16s run %d/%d: %.2f Gbit/s\n", s.Name, i+1, o.Runs, gbps)
			}
		}
	}
	// A SYN-flood row says what the DUT made of the flood. Other rows'
	// Describe speaks of lab bench's frames, which did not come.
	if err == nil && s.SYNFlood && s.Describe != nil {
		var what string
		if what, err = s.Describe(tb); err == nil {
			row.Note = joinNotes(what, row.Note)
		}
	}
	return row, err
}

// synFloodRuns measures a SYN-flood row: its runs without the flood, then
// its runs under it.
func synFloodRuns(ctx context.Context, tb Testbed, s Scenario, o TCPOptions, row *TCPRow) error {
	if err := routeSYNFlood(tb); err != nil {
		return err
	}
	flood, err := newSYNFlood(tb, o.CPU)
	if err != nil {
		return err
	}
	defer flood.Close()
	for i := 0; i < o.Runs; i++ {
		gbps, err := iperfRun(ctx, tb, o.Seconds)
		if err != nil {
			return err
		}
		row.QuietGbps = append(row.QuietGbps, gbps)
		fmt.Fprintf(o.Log, "%-16s run %d/%d without the flood: %.2f Gbit/s\n", s.Name, i+1, o.Runs, gbps)
	}
	for i := 0; i < o.Runs; i++ {
		var gbps float64
		st, err := duringSYNFlood(ctx, flood, func() (err error) {
			gbps, err = iperfRun(ctx, tb, o.Seconds)
			return err
		})
		if err != nil {
			return err
		}
		// The flood's rate is what entered the DUT: the generator sends
		// faster than the DUT's veth takes, and its ring drops the rest.
		var mpps float64
		if in := st.Sent - st.Drops - st.Vanished; st.Elapsed > 0 && in <= st.Sent {
			mpps = float64(in) / st.Elapsed.Seconds() / 1e6
		}
		row.Gbps = append(row.Gbps, gbps)
		row.FloodMpps, row.FloodSentMpps = append(row.FloodMpps, mpps), append(row.FloodSentMpps, st.Mpps())
		fmt.Fprintf(o.Log, "%-16s run %d/%d under a SYN flood of %.2f Mpps (%.2f Mpps sent, %d dropped at the DUT's veth): %.2f Gbit/s\n", s.Name, i+1, o.Runs, mpps, st.Mpps(), st.Drops+st.Vanished, gbps)
	}
	return nil
}

// iperfRun runs one client from the generator to the sink and returns the
// received Gbit/s.
func iperfRun(ctx context.Context, tb Testbed, seconds int) (float64, error) {
	r, err := Iperf(ctx, IperfOptions{Netns: tb.Gen().Netns, Dst: tb.Sink().Addr.Addr(), Seconds: seconds})
	return r.Gbps, err
}

func (r *TCPReport) finish() {
	var base float64
	for i := range r.Rows {
		row := &r.Rows[i]
		row.MedianGbps = median(row.Gbps)
		if len(row.Gbps) > 0 {
			row.MinGbps, row.MaxGbps = slices.Min(row.Gbps), slices.Max(row.Gbps)
		}
		if len(row.QuietGbps) > 0 {
			row.MedianQuietGbps, row.MedianFloodMpps = median(row.QuietGbps), median(row.FloodMpps)
			if row.MedianQuietGbps > 0 {
				row.FloodRatio = row.MedianGbps / row.MedianQuietGbps
			}
			row.Note = joinNotes(fmt.Sprintf("under a SYN flood of %.2f Mpps (%.2f Mpps sent): %.2f× its %.2f Gbit/s without", row.MedianFloodMpps, median(row.FloodSentMpps), row.FloodRatio, row.MedianQuietGbps), row.Note)
		}
		if row.Scenario == r.Baseline {
			base = row.MedianGbps
		}
	}
	for i := range r.Rows {
		if base > 0 {
			r.Rows[i].Ratio = r.Rows[i].MedianGbps / base
		}
	}
}

var tcpColumns = []string{"scenario", "Gbit/s", "min–max", "ratio", "note"}

func (r *TCPReport) cells(row TCPRow) []string {
	ratio := "—"
	if row.Ratio != 0 {
		ratio = fmt.Sprintf("%.2f×", row.Ratio)
	}
	return []string{row.Scenario, fmt.Sprintf("%.2f", row.MedianGbps), fmt.Sprintf("%.2f–%.2f", row.MinGbps, row.MaxGbps), ratio, row.Note}
}

// tcpRight marks the numeric columns.
var tcpRight = []bool{false, true, true, true, false}

// Table renders the report for a terminal.
func (r *TCPReport) Table() string {
	lines := [][]string{tcpColumns}
	for _, row := range r.Rows {
		lines = append(lines, r.cells(row))
	}
	var b strings.Builder
	b.WriteString(TextTable(lines, tcpRight))
	fmt.Fprintf(&b, "iperf3, one TCP stream (one iperf3 process), %d s per run", r.Seconds)
	if r.Baseline != "" {
		fmt.Fprintf(&b, "; ratio: Gbit/s / Gbit/s of %s in the same run", r.Baseline)
	}
	b.WriteString("\n")
	return b.String()
}

// Markdown renders the report for docs.
func (r *TCPReport) Markdown() string {
	var b strings.Builder
	b.WriteString("# fastpath lab tcp\n\n")
	fmt.Fprintf(&b, "- date: %s\n- command: `%s`\n- kernel: %s\n- CPU: %s (%d CPUs)\n", r.Started.Format(time.RFC3339), r.Command, r.Kernel, r.CPUModel, r.CPUs)
	if r.Commit != "" {
		fmt.Fprintf(&b, "- commit: %s\n", r.Commit)
	}
	fmt.Fprintf(&b, "- iperf3, one TCP stream (one iperf3 process), %d s per run, client and server in their own namespaces, the DUT routing between them\n", r.Seconds)
	if r.Baseline != "" {
		fmt.Fprintf(&b, "- ratio: Gbit/s / Gbit/s of %s in the same run\n", r.Baseline)
	}
	b.WriteString("\n")
	lines := [][]string{tcpColumns}
	for _, row := range r.Rows {
		lines = append(lines, r.cells(row))
	}
	b.WriteString(MarkdownTable(lines, tcpRight))
	b.WriteString("\nGbit/s of each run:\n\n")
	for _, row := range r.Rows {
		runs := make([]string, len(row.Gbps))
		for i, g := range row.Gbps {
			runs[i] = fmt.Sprintf("%.2f", g)
		}
		fmt.Fprintf(&b, "- %s: %s\n", row.Scenario, strings.Join(runs, ", "))
	}
	return b.String()
}

// WritePNG draws the rows as bars of median Gbit/s with min–max whiskers.
func (r *TCPReport) WritePNG(w io.Writer) error {
	bars := make([]chartBar, len(r.Rows))
	for i, row := range r.Rows {
		bars[i] = chartBar{row.Scenario, row.MedianGbps, row.MinGbps, row.MaxGbps, row.Scenario == r.Baseline}
	}
	return writeChart(w, "fastpath lab tcp - iperf3 Gbit/s", "Gbit/s received (bar: median, whisker: min-max)", bars)
}
