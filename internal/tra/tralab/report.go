package tralab

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fastpath-dev/fastpath/internal/lab"
)

// Report is what a run measured; the tables and the chart come from it.
type Report struct {
	Started time.Time `json:"started"`
	Command string    `json:"command"`
	// Commit is the revision measured (lab.RunCommit); "" when not known,
	// and in reports from before it was recorded.
	Commit string `json:"commit,omitempty"`
	lab.Machine
	Runs       int    `json:"runs"`
	Seconds    int    `json:"seconds_per_iperf3_run"`
	Pings      int    `json:"echoes_per_rtt"`
	UDPLen     int    `json:"udp_payload_bytes"`
	UDPBitrate uint64 `json:"udp_offered_bits_per_second"`
	// X4 says how the ×4 metrics were run, so that a report from before
	// they were four processes is not read as one from after.
	X4 string `json:"x4"`
	// ASes of the SCION network; Client and Server the leaf ASes whose end
	// hosts run the clients and the servers.
	ASes     int    `json:"ases"`
	MTU      int    `json:"link_mtu,omitempty"`
	ClientIA string `json:"client_ia"`
	ServerIA string `json:"server_ia"`
	// Baseline is the row ratios are taken to, if it ran.
	Baseline string `json:"baseline,omitempty"`
	// Fair is the second row ratios are taken to, if it ran: plain IPv6
	// forwarded in XDP on the SCION network's own devices (FairBaseline).
	Fair string      `json:"fair_baseline,omitempty"`
	Rows []RowReport `json:"rows"`
}

// RowReport is one row's figures over the turns.
type RowReport struct {
	Row         string `json:"row"`
	Description string `json:"description"`
	Note        string `json:"note,omitempty"`
	// Figures by metric name (rtt, tcp-1, tcp-4, udp-1, udp-4).
	Figures map[string]*Figure `json:"figures"`
}

// Figure is one metric of one row: a value per turn and what follows.
type Figure struct {
	Unit   string    `json:"unit"`
	Runs   []float64 `json:"runs"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	// LostPercent per turn: UDP datagrams, or echoes for the RTT.
	LostPercent       []float64 `json:"lost_percent_runs,omitempty"`
	MedianLostPercent float64   `json:"median_lost_percent,omitempty"`
	// Ratio is the median over the baseline's median: above 1 is faster
	// for throughput, slower for the RTT.
	Ratio float64 `json:"ratio,omitempty"`
	// FairRatio is the same over the Fair row's median.
	FairRatio float64 `json:"ratio_fair,omitempty"`
}

func (r *Report) finish() {
	for _, row := range r.Rows {
		for _, f := range row.Figures {
			f.Median = lab.Median(f.Runs)
			if len(f.Runs) > 0 {
				f.Min, f.Max = slices.Min(f.Runs), slices.Max(f.Runs)
			}
			f.MedianLostPercent = lab.Median(f.LostPercent)
		}
	}
	base, fair := r.row(r.Baseline), r.row(r.Fair)
	ratio := func(f *Figure, to *RowReport, name string) float64 {
		if to == nil || to.Figures[name] == nil || to.Figures[name].Median == 0 {
			return 0
		}
		return f.Median / to.Figures[name].Median
	}
	for _, row := range r.Rows {
		for name, f := range row.Figures {
			f.Ratio = ratio(f, base, name)
			f.FairRatio = ratio(f, fair, name)
		}
	}
}

func (r *Report) row(name string) *RowReport {
	for i := range r.Rows {
		if r.Rows[i].Row == name {
			return &r.Rows[i]
		}
	}
	return nil
}

// num prints a figure with three significant digits: 21.9, 0.0493.
func num(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// lines are the table's header and one line per row: each metric's median,
// the UDP loss, and the ratio to the baseline.
func (r *Report) lines() ([][]string, []bool) {
	head := []string{"row"}
	right := []bool{false}
	for _, m := range Metrics {
		head = append(head, fmt.Sprintf("%s %s", m.Title, m.Unit))
		right = append(right, true)
	}
	head = append(head, "note")
	right = append(right, false)
	out := [][]string{head}
	for _, row := range r.Rows {
		cells := []string{row.Row}
		for _, m := range Metrics {
			f := row.Figures[m.Name]
			if f == nil || len(f.Runs) == 0 {
				cells = append(cells, "—")
				continue
			}
			c := num(f.Median)
			if m.Name != "rtt" && f.MedianLostPercent > 0 {
				c += fmt.Sprintf(" (%s%% lost)", num(f.MedianLostPercent))
			}
			if f.Ratio > 0 && row.Row != r.Baseline {
				c += fmt.Sprintf(" %s×", num(f.Ratio))
			}
			if f.FairRatio > 0 && row.Row != r.Fair && row.Row != r.Baseline {
				c += fmt.Sprintf(" (%s× %s)", num(f.FairRatio), r.Fair)
			}
			cells = append(cells, c)
		}
		out = append(out, append(cells, row.Note))
	}
	return out, right
}

func (r *Report) legend() string {
	var b strings.Builder
	fmt.Fprintf(&b, "iperf3 between the end hosts of %s and %s, %d s per run; ×4: %s; UDP %d-byte payloads offered at %s; RTT: median of %d UDP echoes; median of %d turns",
		r.ClientIA, r.ServerIA, r.Seconds, r.X4, r.UDPLen, rate(r.UDPBitrate), r.Pings, r.Runs)
	if r.MTU != 0 {
		fmt.Fprintf(&b, "; links of MTU %d", r.MTU)
	}
	if r.Baseline != "" {
		fmt.Fprintf(&b, "; N×: median / median of %s in the same run", r.Baseline)
	}
	if r.Fair != "" {
		fmt.Fprintf(&b, "; (N× %s): median / median of %s, the same hosts' plain IPv6 forwarded in XDP on the same devices", r.Fair, r.Fair)
	}
	return b.String()
}

func rate(bps uint64) string {
	if bps == 0 {
		return "each sender's full speed"
	}
	return fmt.Sprintf("%s Mbit/s in all (×4: a quarter each)", num(float64(bps)/1e6))
}

// Table renders the report for a terminal.
func (r *Report) Table() string {
	lines, right := r.lines()
	return lab.TextTable(lines, right) + r.legend() + "\n"
}

// Markdown renders the report for docs: the table, then every turn's
// figures.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# fastpath lab tra\n\n")
	fmt.Fprintf(&b, "- date: %s\n- command: `%s`\n- kernel: %s\n- CPU: %s (%d CPUs)\n", r.Started.Format(time.RFC3339), r.Command, r.Kernel, r.CPUModel, r.CPUs)
	if r.Commit != "" {
		fmt.Fprintf(&b, "- commit: %s\n", r.Commit)
	}
	fmt.Fprintf(&b, "- the lab's SCION network of %d ASes, fastpath's border router in front of every AS's reference router (hybrid mode)\n", r.ASes)
	fmt.Fprintf(&b, "- %s\n\n", r.legend())
	lines, right := r.lines()
	b.WriteString(lab.MarkdownTable(lines, right))
	b.WriteString("\nEach turn:\n\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "- %s (%s):", row.Row, row.Description)
		for _, m := range Metrics {
			f := row.Figures[m.Name]
			if f == nil {
				continue
			}
			runs := make([]string, len(f.Runs))
			for i, v := range f.Runs {
				runs[i] = num(v)
				if i < len(f.LostPercent) && f.LostPercent[i] > 0 {
					runs[i] += fmt.Sprintf(" (%s%% lost)", num(f.LostPercent[i]))
				}
			}
			fmt.Fprintf(&b, " %s %s: %s;", m.Title, m.Unit, strings.Join(runs, ", "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// WritePNG draws each row's throughput figures as bars of median Gbit/s
// with min–max whiskers; the baseline's bars are grey.
func (r *Report) WritePNG(w io.Writer) error {
	var bars []lab.Bar
	for _, m := range Metrics {
		if m.Unit != "Gbit/s" {
			continue
		}
		for _, row := range r.Rows {
			f := row.Figures[m.Name]
			if f == nil {
				continue
			}
			bars = append(bars, lab.Bar{Label: row.Row + " " + m.Name, Median: f.Median, Min: f.Min, Max: f.Max, Baseline: row.Row == r.Baseline})
		}
	}
	return lab.WriteBars(w, "fastpath lab tra - iperf3 Gbit/s", "Gbit/s received (bar: median, whisker: min-max)", bars)
}
