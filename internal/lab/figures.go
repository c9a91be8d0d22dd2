package lab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The figures page (docs/figures.md) is every row of every report in a
// results directory, printed from the reports' JSON, grouped by network
// function, each table with the date, machine, commit and command that made
// it. Docs link to it instead of copying figures that drift apart.

// FunctionSection is one network function's part of the figures page.
type FunctionSection struct {
	Key, Title string
	// Intro says in a sentence what the section's rows measure.
	Intro string
}

// FigureFunctions are the page's sections in the order they are printed.
// Rows are sorted into them by scenario name (FunctionOf); a row of a name
// none of them knows goes to "other", so that no row is left out.
var FigureFunctions = []FunctionSection{
	{"br", "SCION border router (br)", "The border router in XDP against the XDP forwarder it is built like (xdp-redirect), scionproto's own router alone (ref-router, scion-ref) and fastpath in front of it (scion-hybrid)."},
	{"fw", "XDP firewall (fw)", "The firewall against the kernel's routing without a filter (routed), and the same rules in iptables, nftables and xdp-filter."},
	{"tra", "SCION-IP translator (tra)", "Unmodified hosts over SCION through the translator, beside plain IPv6 between the same hosts (ip, and ip-xdp: forwarded in XDP on the same devices)."},
	{"rt", "Userspace runtime (rt)", "The same XDP object run over AF_XDP by fastpath-rt, against AF_XDP forwarding with no program (afxdp-fwd) and the kernel (xdp-redirect)."},
	{"lab", "The testbed's own rows (lab)", "What the testbed does with no network function: the generator's ceiling, veth to veth, a bridge, a minimal XDP forwarder, the kernel's routing. Every other row is judged against these."},
	{"other", "Other rows", "Rows of scenarios this page does not sort into a function."},
}

// FunctionOf says which section of the figures page a scenario's row
// belongs to, by the names the functions give their scenarios.
func FunctionOf(scenario string) string {
	has := func(prefixes ...string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool {
			return scenario == strings.TrimSuffix(p, "-") || strings.HasPrefix(scenario, p)
		})
	}
	switch {
	case slices.Contains([]string{CeilingScenario, "veth", "bridge", "xdp-redirect", "routed"}, scenario):
		return "lab"
	case has("br-", "ref-router", "scion-"):
		return "br"
	case has("fw-", "iptables-", "nft-", "xdp-filter-", "xdp-pass"):
		return "fw"
	case has("rt-", "afxdp-"):
		return "rt"
	}
	return "other"
}

// Provenance is what a table says of where its figures come from.
type Provenance struct {
	Source   string // the file, relative to the results directory
	Started  time.Time
	Command  string
	Commit   string
	Kernel   string
	CPUModel string
	CPUs     int
}

// Lines are the provenance as Markdown list items; a field the report does
// not hold (older reports have no commit) reads "unknown".
func (p Provenance) Lines() []string {
	or := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	date := "unknown"
	if !p.Started.IsZero() {
		date = p.Started.UTC().Format(time.RFC3339)
	}
	cpus := "unknown CPUs"
	if p.CPUs > 0 {
		cpus = fmt.Sprintf("%d CPUs", p.CPUs)
	}
	kernel := "unknown kernel"
	if p.Kernel != "" {
		kernel = "Linux " + p.Kernel
	}
	command := "unknown"
	if p.Command != "" {
		command = "`" + p.Command + "`"
	}
	machine := fmt.Sprintf("%s, %s, %s", or(p.CPUModel), cpus, kernel)
	if p.CPUModel == "" && p.CPUs == 0 && p.Kernel == "" {
		machine = "unknown"
	}
	return []string{
		fmt.Sprintf("date: %s; commit: %s", date, or(p.Commit)),
		"machine: " + machine,
		"command: " + command,
	}
}

// FigureTable is one table of the page: rows of one report for one function.
type FigureTable struct {
	Function string
	Title    string
	Prov     Provenance
	// Legend says what the ratios are taken to.
	Legend []string
	Lines  [][]string // header first
	Right  []bool
}

// FiguresPage is the whole page: its tables and what was not read.
type FiguresPage struct {
	Tables []FigureTable
	// Skipped are files of the results directory that hold no report this
	// page reads, with why.
	Skipped []string
	// Plots are the page's figures, drawn from the same reports (plots.go's
	// part of this file: Plots), and Notes what a function's plots lack.
	Plots []Plot
	Notes map[string][]string
	// ImageDir, if set, is where the page finds the plots' PNGs, relative
	// to the page (figures/); "" leaves them off the page.
	ImageDir string

	benches []namedBench
	tras    []namedTra
	soaks   []namedSoak
}

// ReadFigures reads every report in dir: the JSON of lab bench, lab tcp and
// lab tra, and the text lab scion check leaves (scion-*.txt).
func ReadFigures(dir string) (*FiguresPage, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("results directory: %w (run `make demo` first, or name another with --results)", err)
	}
	page := &FiguresPage{}
	type dated struct {
		started time.Time
		name    string
		tables  []FigureTable
	}
	var files []dated
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".json") || (strings.HasPrefix(name, "scion-") && strings.HasSuffix(name, ".txt"))) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		var tables []FigureTable
		if strings.HasSuffix(name, ".txt") {
			tables = scionCheckTables(name, data)
		} else {
			var rep any
			tables, rep, err = reportTables(name, data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
			}
			switch r := rep.(type) {
			case *Report:
				page.benches = append(page.benches, namedBench{name, r})
			case *traReport:
				page.tras = append(page.tras, namedTra{name, r})
			case *soakReport:
				page.soaks = append(page.soaks, namedSoak{name, r})
				continue
			}
		}
		if len(tables) == 0 {
			page.Skipped = append(page.Skipped, name)
			continue
		}
		files = append(files, dated{tables[0].Prov.Started, name, tables})
	}
	if len(files) == 0 && len(page.soaks) == 0 {
		return nil, fmt.Errorf("%s holds no report of lab bench, lab tcp, lab tra or lab scion check: run `make demo` first", dir)
	}
	// In the order they were measured, as `make demo` runs them.
	slices.SortStableFunc(files, func(a, b dated) int {
		if c := a.started.Compare(b.started); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, f := range files {
		page.Tables = append(page.Tables, f.tables...)
	}
	page.plot()
	return page, nil
}

// reportTables decodes one JSON report by the fields only its kind has,
// into its tables and the report itself; nil for JSON of another kind. A
// soak's report has no table: the page draws it.
func reportTables(name string, data []byte) ([]FigureTable, any, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return nil, nil, fmt.Errorf("not a JSON report: %w", err)
	}
	has := func(k string) bool { _, ok := keys[k]; return ok }
	switch {
	case has("restore") && has("rows"):
		var r Report
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, nil, fmt.Errorf("a lab bench report: %w", err)
		}
		return benchTables(name, &r), &r, nil
	case has("seconds_per_run") && has("rows"):
		var r TCPReport
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, nil, fmt.Errorf("a lab tcp report: %w", err)
		}
		return []FigureTable{tcpTable(name, &r)}, &r, nil
	case has("seconds_per_iperf3_run") && has("rows"):
		var r traReport
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, nil, fmt.Errorf("a lab tra report: %w", err)
		}
		return []FigureTable{r.table(name)}, &r, nil
	case has("samples") && has("summary") && has("events"):
		var r soakReport
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, nil, fmt.Errorf("a lab tra-soak report: %w", err)
		}
		return nil, &r, nil
	}
	return nil, nil, nil
}

// benchTables splits a lab bench report by function. Each function's table
// carries the rows its rows are anchored to, so that it reads on its own.
func benchTables(name string, r *Report) []FigureTable {
	// The record is the lab's memory of other days, not this run's figure.
	rc := *r
	rc.Record = nil
	cols := rc.columns()
	prov := Provenance{Source: name, Started: r.Started, Command: r.Command, Commit: r.Commit, Kernel: r.Kernel, CPUModel: r.CPUModel, CPUs: r.CPUs}
	// The legend says only what the table's own rows need.
	legend := func(rows []Row) []string {
		var l []string
		if r.Baseline != "" {
			l = append(l, fmt.Sprintf("ratio: Mpps / Mpps of %s at the same size in the same run", r.Baseline))
		}
		if slices.ContainsFunc(rows, func(row Row) bool { return row.RatioOtherSize }) {
			l = append(l, fmt.Sprintf("*: frames of another size than %s's, divided by its rate all the same", r.Baseline))
		}
		if slices.ContainsFunc(rows, func(row Row) bool { return row.Anchor != "" }) {
			l = append(l, anchorLine)
		}
		l = append(l, "ns/pkt: the whole path's cost, generator, device under test and sink on one core")
		sub := Report{Rows: rows}
		if line := sub.generatorLine(); line != "" {
			l = append(l, line)
		}
		return l
	}
	var sizes []string
	for _, s := range r.sizes() {
		sizes = append(sizes, strconv.Itoa(s))
	}
	var out []FigureTable
	for _, fn := range FigureFunctions {
		// A row is in the table if it is the function's, or the anchor of
		// one that is (an anchor's anchor too: rt-jit → afxdp-fwd →
		// xdp-redirect).
		in := map[string]bool{}
		for _, row := range r.Rows {
			if FunctionOf(row.Scenario) == fn.Key {
				in[row.Scenario] = true
			}
		}
		if len(in) == 0 {
			continue
		}
		for changed := true; changed; {
			changed = false
			for _, row := range r.Rows {
				if in[row.Scenario] && row.Anchor != "" && !in[row.Anchor] {
					in[row.Anchor], changed = true, true
				}
			}
		}
		t := FigureTable{
			Function: fn.Key,
			Title:    fmt.Sprintf("%s: lab bench at %s B", name, strings.Join(sizes, ", ")),
			Prov:     prov,
		}
		head := make([]string, len(cols))
		t.Right = make([]bool, len(cols))
		for i, c := range cols {
			head[i], t.Right[i] = c.head, c.right
		}
		t.Lines = [][]string{head}
		var rows []Row
		for _, row := range r.Rows {
			if !in[row.Scenario] {
				continue
			}
			rows = append(rows, row)
			cells := make([]string, len(cols))
			for i, c := range cols {
				cells[i] = c.cell(&rc, row)
			}
			t.Lines = append(t.Lines, cells)
		}
		t.Legend = legend(rows)
		out = append(out, t)
	}
	return out
}

// tcpTable is a lab tcp report whole, in the section of its first row that
// is not the baseline.
func tcpTable(name string, r *TCPReport) FigureTable {
	fn := "other"
	for _, row := range r.Rows {
		if row.Scenario != r.Baseline {
			fn = FunctionOf(row.Scenario)
			break
		}
	}
	t := FigureTable{
		Function: fn,
		Title:    name + ": lab tcp, iperf3 through the device under test",
		Prov:     Provenance{Source: name, Started: r.Started, Command: r.Command, Commit: r.Commit, Kernel: r.Kernel, CPUModel: r.CPUModel, CPUs: r.CPUs},
		Legend:   []string{fmt.Sprintf("iperf3, one TCP stream, %d s per run, client and server in their own namespaces, the device under test routing between them", r.Seconds)},
		Lines:    [][]string{tcpColumns},
		Right:    tcpRight,
	}
	if r.Baseline != "" {
		t.Legend = append(t.Legend, fmt.Sprintf("ratio: Gbit/s / Gbit/s of %s in the same run", r.Baseline))
	}
	for _, row := range r.Rows {
		t.Lines = append(t.Lines, r.cells(row))
	}
	return t
}

// traReport is the part of a lab tra report (tralab.Report) the page reads.
// tralab imports this package, so the page decodes the JSON it writes rather
// than naming its type.
type traReport struct {
	Started  time.Time `json:"started"`
	Command  string    `json:"command"`
	Commit   string    `json:"commit"`
	Kernel   string    `json:"kernel"`
	CPUModel string    `json:"cpu_model"`
	CPUs     int       `json:"cpus"`
	Seconds  int       `json:"seconds_per_iperf3_run"`
	X4       string    `json:"x4"`
	ASes     int       `json:"ases"`
	MTU      int       `json:"link_mtu"`
	ClientIA string    `json:"client_ia"`
	ServerIA string    `json:"server_ia"`
	Baseline string    `json:"baseline"`
	Fair     string    `json:"fair_baseline"`
	Rows     []traRow  `json:"rows"`
}

type traRow struct {
	Row     string                `json:"row"`
	Note    string                `json:"note"`
	Figures map[string]*traFigure `json:"figures"`
}

type traFigure struct {
	Unit              string    `json:"unit"`
	Runs              []float64 `json:"runs"`
	Median            float64   `json:"median"`
	Min               float64   `json:"min"`
	Max               float64   `json:"max"`
	MedianLostPercent float64   `json:"median_lost_percent"`
	Ratio             float64   `json:"ratio"`
	FairRatio         float64   `json:"ratio_fair"`
}

// traMetrics are the lab tra metrics in the order its tables print them
// (tralab.Metrics); a metric not named here follows them, by name.
var traMetrics = []struct{ name, title string }{
	{"rtt", "RTT"}, {"tcp-1", "TCP ×1"}, {"tcp-4", "TCP ×4"}, {"udp-1", "UDP ×1"}, {"udp-4", "UDP ×4"},
}

func (r *traReport) table(name string) FigureTable {
	type metric struct{ name, title, unit string }
	var ms []metric
	seen := map[string]bool{}
	unit := func(n string) string {
		for _, row := range r.Rows {
			if f := row.Figures[n]; f != nil {
				return f.Unit
			}
		}
		return ""
	}
	for _, m := range traMetrics {
		if slices.ContainsFunc(r.Rows, func(row traRow) bool { return row.Figures[m.name] != nil }) {
			ms = append(ms, metric{m.name, m.title, unit(m.name)})
			seen[m.name] = true
		}
	}
	var extra []string
	for _, row := range r.Rows {
		for n := range row.Figures {
			if !seen[n] && !slices.Contains(extra, n) {
				extra = append(extra, n)
			}
		}
	}
	slices.Sort(extra)
	for _, n := range extra {
		ms = append(ms, metric{n, n, unit(n)})
	}

	head, right := []string{"row"}, []bool{false}
	for _, m := range ms {
		head = append(head, strings.TrimSpace(m.title+" "+m.unit))
		right = append(right, true)
	}
	t := FigureTable{
		Function: "tra",
		Title:    fmt.Sprintf("%s: lab tra, links of MTU %s", name, mtuOf(r.MTU)),
		Prov:     Provenance{Source: name, Started: r.Started, Command: r.Command, Commit: r.Commit, Kernel: r.Kernel, CPUModel: r.CPUModel, CPUs: r.CPUs},
		Lines:    [][]string{append(head, "note")},
		Right:    append(right, false),
	}
	t.Legend = append(t.Legend, fmt.Sprintf("the lab's SCION network of %d ASes, fastpath's border router in front of every AS's router; iperf3 between the end hosts of %s and %s, %d s per run; ×4: %s; RTT: median of UDP echoes",
		r.ASes, r.ClientIA, r.ServerIA, r.Seconds, r.X4))
	if r.Baseline != "" {
		t.Legend = append(t.Legend, fmt.Sprintf("N×: median / median of %s in the same run (above 1 is faster for throughput, slower for the RTT)", r.Baseline))
	}
	if r.Fair != "" {
		t.Legend = append(t.Legend, fmt.Sprintf("(N× %s): median / median of %s, the same hosts' plain IPv6 forwarded in XDP on the same devices", r.Fair, r.Fair))
	}
	for _, row := range r.Rows {
		cells := []string{row.Row}
		for _, m := range ms {
			f := row.Figures[m.name]
			if f == nil || len(f.Runs) == 0 {
				cells = append(cells, "—")
				continue
			}
			c := sig3(f.Median)
			if m.name != "rtt" && f.MedianLostPercent > 0 {
				c += fmt.Sprintf(" (%s%% lost)", sig3(f.MedianLostPercent))
			}
			if f.Ratio > 0 && row.Row != r.Baseline {
				c += fmt.Sprintf(" %s×", sig3(f.Ratio))
			}
			if f.FairRatio > 0 && row.Row != r.Fair && row.Row != r.Baseline {
				c += fmt.Sprintf(" (%s× %s)", sig3(f.FairRatio), r.Fair)
			}
			cells = append(cells, c)
		}
		t.Lines = append(t.Lines, append(cells, row.Note))
	}
	return t
}

func mtuOf(mtu int) string {
	if mtu == 0 {
		return "unknown"
	}
	return strconv.Itoa(mtu)
}

// sig3 prints a figure with three significant digits (21.9, 0.0493), as
// lab tra's own tables do.
func sig3(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// scionCheckTables reads what `lab scion up` and `lab scion check` print
// (make demo keeps it in scion-topo.txt): the network's one-line summary and
// the check's verdicts, as a two-column table. The text records no command,
// commit or machine; the page says so.
func scionCheckTables(name string, data []byte) []FigureTable {
	var prov = Provenance{Source: name}
	var built string
	var verdicts [][]string
	inSummary := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "SCION network of "):
			if _, after, ok := strings.Cut(line, ", started "); ok {
				when, _, _ := strings.Cut(after, ",")
				if t, err := time.ParseInLocation("2006-01-02 15:04:05", when, time.Local); err == nil {
					prov.Started = t
				}
			}
		case strings.HasPrefix(line, "built from "):
			built = line
		case strings.Contains(line, " pairs of leaf ASes: "):
			inSummary = true
			verdicts = append(verdicts, []string{"pairs of leaf ASes", strings.TrimSpace(line)})
		case inSummary && strings.HasPrefix(line, "  "):
			f := strings.TrimSpace(line)
			if what, rest, ok := strings.Cut(f, ": "); ok && what == "oracle" {
				verdicts = append(verdicts, []string{"oracle", rest})
				continue
			}
			// "up-core-down across ISDs             proved (…)": the
			// path kind, then the verdict after a run of spaces.
			if i := strings.Index(f, "  "); i > 0 {
				verdicts = append(verdicts, []string{f[:i], strings.TrimSpace(f[i:])})
			} else {
				verdicts = append(verdicts, []string{f, ""})
			}
		case inSummary:
			inSummary = false
		}
	}
	if len(verdicts) == 0 {
		return nil
	}
	t := FigureTable{
		Function: "br",
		Title:    name + ": lab scion check on a network in the shape of scionproto's default.topo, fastpath in front of every router",
		Prov:     prov,
		Lines:    append([][]string{{"check", "result"}}, verdicts...),
		Right:    []bool{false, false},
	}
	if built != "" {
		t.Legend = []string{built}
	}
	return []FigureTable{t}
}

// Markdown prints the page. generatedBy is the command line that made it.
func (p *FiguresPage) Markdown(generatedBy string) string {
	var b strings.Builder
	b.WriteString("# Figures\n\n")
	b.WriteString("Every figure fastpath's lab measured in its last full run (`make demo`), row by row, printed from the\n")
	b.WriteString("reports it wrote to `results/`. Each table says when it was measured, on what machine, from which commit and\n")
	b.WriteString("by which command; \"unknown\" where the report does not record it. The other pages link here rather than\n")
	b.WriteString("copy figures.\n\n")
	fmt.Fprintf(&b, "This page is generated: `%s`. Do not edit it by hand.\n\n", generatedBy)
	b.WriteString("How to read the tables: absolute figures (Mpps, Gbit/s, µs) depend on the machine and move by up to ±30% on\n")
	b.WriteString("a shared virtual machine from one run to the next. Ratios to a row of the same run are steadier: \"to anchor\"\n")
	b.WriteString("is a row's rate over its function's natural comparison on the same testbed (the border router's is the\n")
	b.WriteString("minimal XDP forwarder `xdp-redirect`, the firewall's the kernel's routing `routed`), \"ratio\" over the plain\n")
	b.WriteString("`veth` row. \"loss\" above 0 means the device under test was saturated: its figure is its saturation rate.\n")
	b.WriteString("[docs/lab.md](lab.md) says how the lab measures.\n")
	if p.ImageDir != "" {
		b.WriteString("\nEach section opens with its plots, drawn from the same reports: every bar or point is a row's figure over\n")
		b.WriteString("its anchor's in the same run (the dashed line at 1.0 is the anchor itself; below it is slower), with the\n")
		b.WriteString("row's min–max over the anchor's median as a whisker. Axes that span more than a factor of 20 are\n")
		b.WriteString("logarithmic, and their bars grow from 1.0.\n")
	}
	for _, fn := range FigureFunctions {
		var tables []FigureTable
		for _, t := range p.Tables {
			if t.Function == fn.Key {
				tables = append(tables, t)
			}
		}
		var plots []Plot
		for _, pl := range p.Plots {
			if pl.Function == fn.Key {
				plots = append(plots, pl)
			}
		}
		notes := p.Notes[fn.Key]
		if p.ImageDir == "" {
			plots, notes = nil, nil
		}
		if len(tables) == 0 && len(plots) == 0 && len(notes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", fn.Title, fn.Intro)
		for _, pl := range plots {
			fmt.Fprintf(&b, "\n### Plot: %s\n\n", pl.Heading)
			fmt.Fprintf(&b, "![%s](%s)\n\n", pl.Heading, path.Join(p.ImageDir, pl.File))
			for _, l := range pl.Caption {
				fmt.Fprintf(&b, "- %s\n", l)
			}
		}
		for _, n := range notes {
			fmt.Fprintf(&b, "\n%s\n", n)
		}
		for _, t := range tables {
			fmt.Fprintf(&b, "\n### %s\n\n", t.Title)
			for _, l := range t.Prov.Lines() {
				fmt.Fprintf(&b, "- %s\n", l)
			}
			for _, l := range t.Legend {
				fmt.Fprintf(&b, "- %s\n", l)
			}
			b.WriteString("\n")
			b.WriteString(MarkdownTable(escapeCells(t.Lines), t.Right))
		}
	}
	return b.String()
}

// escapeCells keeps a "|" in a note from splitting a Markdown cell.
func escapeCells(lines [][]string) [][]string {
	out := make([][]string, len(lines))
	for i, l := range lines {
		out[i] = make([]string, len(l))
		for j, c := range l {
			out[i][j] = strings.ReplaceAll(c, "|", `\|`)
		}
	}
	return out
}

// ---- Plots -------------------------------------------------------------------

// Plot is one figure of the page: a PNG drawn from one or more reports.
type Plot struct {
	// File is the PNG's name in the page's image directory.
	File     string
	Function string
	Heading  string
	// Caption says how to read it and which reports it comes from.
	Caption []string
	spec    *plotSpec
}

// WritePNG draws the plot.
func (pl *Plot) WritePNG(w io.Writer) error { return pl.spec.WritePNG(w) }

// Size is the PNG's size in pixels.
func (pl *Plot) Size() (w, h int) { return pl.spec.Width, pl.spec.Height }

const (
	plotWidth  = 960
	plotHeight = 540
	soakHeight = 760
	// logSpan is the ratio of the highest to the lowest value above which
	// a ratio axis is logarithmic.
	logSpan = 20
)

type namedBench struct {
	name string
	r    *Report
}

type namedTra struct {
	name string
	r    *traReport
}

type namedSoak struct {
	name string
	r    *soakReport
}

// source is a report a plot draws from, for its caption and stamp.
type source struct {
	name    string
	started time.Time
	commit  string
}

func (s source) line() string {
	c := s.commit
	if c == "" {
		c = "unknown"
	}
	date := "unknown"
	if !s.started.IsZero() {
		date = s.started.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("`%s`, measured %s, commit %s", s.name, date, c)
}

// sourcesCaption is the caption's line of where a plot's figures come from.
func sourcesCaption(srcs []source) string {
	var parts []string
	for _, s := range srcs {
		parts = append(parts, s.line())
	}
	return "from " + strings.Join(parts, "; ")
}

// stamp is the small line in the image: its reports' days and commits.
func stamp(srcs []source) string {
	var days, commits []string
	for _, s := range srcs {
		d := "date unknown"
		if !s.started.IsZero() {
			d = s.started.UTC().Format("2006-01-02")
		}
		c := s.commit
		if c == "" {
			c = "unknown"
		}
		if !slices.Contains(days, d) {
			days = append(days, d)
		}
		if !slices.Contains(commits, c) {
			commits = append(commits, c)
		}
	}
	return fmt.Sprintf("fastpath lab, %s, commit %s", strings.Join(days, ", "), strings.Join(commits, ", "))
}

// plot draws the page's plots from its reports.
func (p *FiguresPage) plot() {
	p.Plots, p.Notes = nil, map[string][]string{}
	// The reports in the order they were measured: a later one's row
	// replaces an earlier one's at the same size.
	slices.SortStableFunc(p.benches, func(a, b namedBench) int { return a.r.Started.Compare(b.r.Started) })
	p.Plots = append(p.Plots, p.brPlots()...)
	if pl := p.rtPlot(); pl != nil {
		p.Plots = append(p.Plots, *pl)
	}
	if pl, note := p.fwPlot(); pl != nil {
		p.Plots = append(p.Plots, *pl)
		if note != "" {
			p.Notes["fw"] = append(p.Notes["fw"], note)
		}
	}
	slices.SortStableFunc(p.tras, func(a, b namedTra) int { return a.r.Started.Compare(b.r.Started) })
	sig := false
	for _, t := range p.tras {
		if pl := traPlot(t); pl != nil {
			p.Plots = append(p.Plots, *pl)
		}
		sig = sig || slices.ContainsFunc(t.r.Rows, func(row traRow) bool { return row.Row == "sig" })
	}
	if len(p.tras) > 0 && !sig {
		p.Notes["tra"] = append(p.Notes["tra"], "The SCION-IP gateway (row `sig`, scionproto's SIG on both hosts) is in none of these reports: `fastpath lab tra ip ip-xdp tra sig` measures it beside the translator.")
	}
	for _, s := range p.soaks {
		p.Plots = append(p.Plots, soakPlot(s))
	}
	if len(p.soaks) == 0 {
		p.Notes["tra"] = append(p.Notes["tra"], "No soak's report in the results (`make soak` writes `results/soak.json`): no timeline of the translator under flapping links and restarts.")
	}
}

// anchoredRow is a bench row's ratio to its anchor, and its report.
type anchoredRow struct {
	row Row
	src source
}

// anchored are the rows of a function that have a ratio to their anchor,
// each (scenario, size) once: from the last report that measured it.
func (p *FiguresPage) anchored(fn string) []anchoredRow {
	var out []anchoredRow
	for _, b := range p.benches {
		src := source{b.name, b.r.Started, b.r.Commit}
		for _, row := range b.r.Rows {
			if FunctionOf(row.Scenario) != fn || row.Anchor == "" || !(row.AnchorRatio > 0) || !(row.AnchorMpps > 0) {
				continue
			}
			i := slices.IndexFunc(out, func(a anchoredRow) bool { return a.row.Scenario == row.Scenario && a.row.Size == row.Size })
			if i >= 0 {
				out[i] = anchoredRow{row, src}
			} else {
				out = append(out, anchoredRow{row, src})
			}
		}
	}
	return out
}

// sourcesOf are the reports of rows, in the order they were measured.
func sourcesOf(rows []anchoredRow) []source {
	var out []source
	for _, a := range rows {
		if !slices.ContainsFunc(out, func(s source) bool { return s.name == a.src.name }) {
			out = append(out, a.src)
		}
	}
	slices.SortStableFunc(out, func(a, b source) int { return a.started.Compare(b.started) })
	return out
}

// ratioPanel is a panel of ratios to an anchor: logarithmic when they span
// more than logSpan.
func ratioPanel(anchor string, series []plotSeries) plotPanel {
	lo, hi := 1.0, 1.0
	for _, s := range series {
		for _, q := range s.Points {
			if q.Y > 0 {
				lo, hi = min(lo, q.Y), max(hi, q.Y)
			}
		}
	}
	p := plotPanel{
		YLabel: "x " + anchor + " (same run)", Ref: 1, RefLabel: "1.0 = " + anchor,
		Series: series, LogY: hi/lo > logSpan,
	}
	if p.LogY {
		p.YLabel += ", log scale"
	}
	return p
}

// brPlots are the border router's rows by frame size, one plot per
// anchor: against xdp-redirect (br, br-cold, ...), and fastpath in front
// of scionproto's router against that router alone (scion-hybrid).
func (p *FiguresPage) brPlots() []Plot {
	rows := p.anchored("br")
	var anchors []string
	for _, a := range rows {
		if !slices.Contains(anchors, a.row.Anchor) {
			anchors = append(anchors, a.row.Anchor)
		}
	}
	var out []Plot
	for _, anchor := range anchors {
		var in []anchoredRow
		for _, a := range rows {
			if a.row.Anchor == anchor {
				in = append(in, a)
			}
		}
		var sizes []int
		var names []string
		for _, a := range in {
			if !slices.Contains(sizes, a.row.Size) {
				sizes = append(sizes, a.row.Size)
			}
			if !slices.Contains(names, a.row.Scenario) {
				names = append(names, a.row.Scenario)
			}
		}
		slices.Sort(sizes)
		cats := make([]string, len(sizes))
		for i, s := range sizes {
			cats[i] = fmt.Sprintf("%d B", s)
		}
		var series []plotSeries
		for i, n := range names {
			se := plotSeries{Name: n, Color: plotColors[i%len(plotColors)]}
			for _, a := range in {
				if a.row.Scenario == n {
					se.Points = append(se.Points, plotPoint{
						X: float64(slices.Index(sizes, a.row.Size)), Y: a.row.AnchorRatio,
						Lo: a.row.MinMpps / a.row.AnchorMpps, Hi: a.row.MaxMpps / a.row.AnchorMpps,
					})
				}
			}
			series = append(series, se)
		}
		srcs := sourcesOf(in)
		title, heading, what := "Border router by frame size, x "+anchor, "the border router by frame size, against "+anchor,
			fmt.Sprintf("Mpps of each row over %s's at the same frame size in the same run.", anchor)
		switch anchor {
		case "xdp-redirect":
			what = "Mpps of each row over `xdp-redirect`'s (the minimal XDP forwarder the router is built like) at the same frame size in the same run: what the router's own work costs."
		case "scion-ref":
			title, heading = "fastpath in front of scionproto's router, x scion-ref", "fastpath in front of scionproto's router by frame size, against that router alone"
			what = "Mpps of `scion-hybrid` (fastpath in XDP in front of scionproto's router) over `scion-ref` (that router alone) on the same SCION path in the same run, by frame size."
		}
		file := "br-" + anchor + ".png"
		out = append(out, Plot{
			File: file, Function: "br", Heading: heading,
			Caption: []string{what, sourcesCaption(srcs)},
			spec: &plotSpec{
				Width: plotWidth, Height: plotHeight, Title: title, Stamp: stamp(srcs),
				XLabel: "frame size (bytes on the wire)", Categories: cats,
				Panels: []plotPanel{ratioPanel(anchor, series)},
			},
		})
	}
	return out
}

// fwEngines are the firewalls of the rule-count rows, by their rows'
// prefix, in the order the plot names them.
var fwEngines = []struct{ prefix, name string }{
	{"fw-", "fastpath fw"}, {"iptables-", "iptables"}, {"nft-", "nftables"}, {"xdp-filter-", "xdp-filter"},
}

// ruleCount reads the rule count of a row named ENGINE-COUNT (fw-0,
// nft-10k, iptables-1m); false for every other name (fw-100k-generic).
func ruleCount(scenario string) (engine int, n int, ok bool) {
	for i, e := range fwEngines {
		rest, found := strings.CutPrefix(scenario, e.prefix)
		if !found {
			continue
		}
		mult := 1
		switch {
		case strings.HasSuffix(rest, "k"):
			mult, rest = 1000, strings.TrimSuffix(rest, "k")
		case strings.HasSuffix(rest, "m"):
			mult, rest = 1000000, strings.TrimSuffix(rest, "m")
		}
		v, err := strconv.Atoi(rest)
		if err != nil || v < 0 || rest != strconv.Itoa(v) {
			return 0, 0, false
		}
		return i, v * mult, true
	}
	return 0, 0, false
}

func countName(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dm", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

// fwPlot is the firewall's cost against its number of rules, a line per
// engine, from whichever rule-count rows the reports hold; the note names
// the rows the lab has that would fill the curves in.
func (p *FiguresPage) fwPlot() (*Plot, string) {
	var in []anchoredRow
	for _, a := range p.anchored("fw") {
		if _, _, ok := ruleCount(a.row.Scenario); ok && a.row.Anchor == "routed" {
			in = append(in, a)
		}
	}
	if len(in) == 0 {
		return nil, ""
	}
	// The frame size most of the rows ran at: a curve is one size's.
	bySize := map[int]int{}
	for _, a := range in {
		bySize[a.row.Size]++
	}
	size := in[0].row.Size
	for s, n := range bySize {
		if n > bySize[size] || (n == bySize[size] && s < size) {
			size = s
		}
	}
	in = slices.DeleteFunc(in, func(a anchoredRow) bool { return a.row.Size != size })

	minN := 0
	counts := map[int]bool{}
	have := map[string]bool{}
	for _, a := range in {
		_, n, _ := ruleCount(a.row.Scenario)
		counts[n] = true
		have[a.row.Scenario] = true
		if n > 0 && (minN == 0 || n < minN) {
			minN = n
		}
	}
	if minN == 0 {
		minN = 1000
	}
	// 0 rules has no place on a log axis: it is drawn a decade left of
	// the fewest.
	zeroAt := math.Log10(float64(minN)) - 1
	xOf := func(n int) float64 {
		if n == 0 {
			return zeroAt
		}
		return math.Log10(float64(n))
	}
	var series []plotSeries
	for i, e := range fwEngines {
		se := plotSeries{Name: e.name, Color: plotColors[i%len(plotColors)]}
		for _, a := range in {
			if ei, n, _ := ruleCount(a.row.Scenario); ei == i {
				se.Points = append(se.Points, plotPoint{X: xOf(n), Y: a.row.AnchorRatio, Lo: a.row.MinMpps / a.row.AnchorMpps, Hi: a.row.MaxMpps / a.row.AnchorMpps})
			}
		}
		if len(se.Points) > 0 {
			series = append(series, se)
		}
	}
	var ticks []plotTick
	if counts[0] {
		ticks = append(ticks, plotTick{zeroAt, "0"})
	}
	maxX := zeroAt
	for n := range counts {
		maxX = max(maxX, xOf(n))
	}
	for e := math.Log10(float64(minN)); e <= maxX+1e-9; e++ {
		ticks = append(ticks, plotTick{e, countName(int(math.Round(math.Pow(10, e))))})
	}
	srcs := sourcesOf(in)
	pl := &Plot{
		File: "fw-rules.png", Function: "fw", Heading: "the firewall's cost by number of rules, beside iptables, nftables and xdp-filter",
		Caption: []string{
			fmt.Sprintf("Mpps of each rule set over `routed`'s (the kernel's routing with no filter) in the same run, %d B frames, by the number of rules (prefixes the lab's flow does not match, then its pass rule); a line per firewall over the rows the reports hold. 0 rules is drawn a decade left of the fewest.", size),
			sourcesCaption(srcs),
		},
		spec: &plotSpec{
			Width: plotWidth, Height: plotHeight, Title: "Firewall cost by number of rules, x routed", Stamp: stamp(srcs),
			XLabel: "rules (log scale)", XTicks: ticks, XMin: zeroAt - 0.3, XMax: maxX + 0.3,
			Panels: []plotPanel{ratioPanel("routed", series)},
		},
	}
	// The lab's rows of rule counts that no report here holds.
	var missing []string
	for _, sc := range Scenarios() {
		if _, _, ok := ruleCount(sc.Name); ok && !have[sc.Name] && sc.Anchor == "routed" {
			missing = append(missing, sc.Name)
		}
	}
	note := ""
	if len(missing) > 0 {
		all := append(slices.Collect(maps.Keys(have)), missing...)
		slices.SortFunc(all, func(a, b string) int {
			ea, na, _ := ruleCount(a)
			eb, nb, _ := ruleCount(b)
			if ea != eb {
				return ea - eb
			}
			return na - nb
		})
		note = fmt.Sprintf("The lab has more rule-count rows than these reports hold (%s): `fastpath lab bench routed %s --interleave` measures every one, and this plot draws each row a report holds.", strings.Join(missing, ", "), strings.Join(all, " "))
	}
	return pl, note
}

// traThroughput are the Gbit/s metrics of lab tra in the plot's order.
var traThroughput = []struct{ name, title string }{
	{"tcp-1", "TCP x1"}, {"tcp-4", "TCP x4"}, {"udp-1", "UDP x1"}, {"udp-4", "UDP x4"},
}

// traPlot is a lab tra report's throughput, each row over the plain IPv6
// row: ip-xdp (forwarded in XDP on the same devices) if it ran, else the
// baseline.
func traPlot(t namedTra) *Plot {
	r := t.r
	anchor := ""
	for _, a := range []string{r.Fair, r.Baseline} {
		if a != "" && slices.ContainsFunc(r.Rows, func(row traRow) bool { return row.Row == a }) {
			anchor = a
			break
		}
	}
	if anchor == "" {
		return nil
	}
	var base traRow
	for _, row := range r.Rows {
		if row.Row == anchor {
			base = row
		}
	}
	var cats []string
	var metrics []string
	for _, m := range traThroughput {
		if f := base.Figures[m.name]; f != nil && f.Median > 0 {
			cats, metrics = append(cats, m.title), append(metrics, m.name)
		}
	}
	if len(metrics) == 0 {
		return nil
	}
	var series []plotSeries
	for _, row := range r.Rows {
		if row.Row == anchor {
			continue
		}
		se := plotSeries{Name: row.Row, Color: plotColors[len(series)%len(plotColors)]}
		for i, m := range metrics {
			f, b := row.Figures[m], base.Figures[m].Median
			if f == nil || !(f.Median > 0) {
				continue
			}
			q := plotPoint{X: float64(i), Y: f.Median / b}
			if f.Min > 0 && f.Max > 0 {
				q.Lo, q.Hi = f.Min/b, f.Max/b
			}
			se.Points = append(se.Points, q)
		}
		series = append(series, se)
	}
	src := source{t.name, r.Started, r.Commit}
	base1 := strings.TrimSuffix(t.name, filepath.Ext(t.name))
	what := fmt.Sprintf("Gbit/s of each row over `%s`'s (plain IPv6 between the same hosts", anchor)
	if anchor == "ip-xdp" {
		what += ", forwarded in XDP on the same devices"
	}
	what += fmt.Sprintf(") in the same run, links of MTU %s; UDP at a fixed offered rate, so its ratios say more of loss than of speed.", mtuOf(r.MTU))
	pl := &Plot{
		File: base1 + ".png", Function: "tra",
		Heading: fmt.Sprintf("the translator against plain IPv6, links of MTU %s", mtuOf(r.MTU)),
		Caption: []string{what, sourcesCaption([]source{src})},
		spec: &plotSpec{
			Width: plotWidth, Height: plotHeight, Title: fmt.Sprintf("Translator, MTU %s: Gbit/s x %s", mtuOf(r.MTU), anchor), Stamp: stamp([]source{src}),
			XLabel: "iperf3 metric (x1: one stream, x4: four processes)", Categories: cats,
			Panels: []plotPanel{ratioPanel(anchor, series)},
		},
	}
	return pl
}

// soakReport is the part of a soak's report (tralab.SoakReport) the page
// draws.
type soakReport struct {
	Started      time.Time `json:"started"`
	Command      string    `json:"command"`
	Commit       string    `json:"commit"`
	Kernel       string    `json:"kernel"`
	Seconds      float64   `json:"seconds"`
	FlapEvery    float64   `json:"flap_every_s"`
	FlapFor      float64   `json:"flap_for_s"`
	RestartEvery float64   `json:"restart_every_s"`
	UDPRate      int       `json:"udp_per_second"`
	TCPRate      uint64    `json:"tcp_bits_per_second"`
	Samples      []struct {
		At      float64   `json:"at_s"`
		RSSKiB  [2]uint64 `json:"rss_kib"`
		UDPSent int       `json:"udp_sent"`
		UDPLost int       `json:"udp_lost"`
		TCPMbps float64   `json:"tcp_mbit_s"`
	} `json:"samples"`
	Events []struct {
		At   float64 `json:"at_s"`
		What string  `json:"what"`
	} `json:"events"`
	Summary struct {
		UDPSent         int     `json:"udp_sent"`
		UDPLost         int     `json:"udp_lost"`
		UDPLongestGap   float64 `json:"udp_longest_gap_s"`
		TCPBytes        uint64  `json:"tcp_bytes"`
		TCPLongestStall float64 `json:"tcp_longest_stall_s"`
		PingSent        int     `json:"ping_sent"`
		PingReceived    int     `json:"ping_received"`
		DaemonsAlive    bool    `json:"daemons_alive"`
	} `json:"summary"`
}

// soakPlot is a soak's timeline: TCP's rate, UDP's loss and the daemons'
// memory over the run, links down shaded, restarts marked.
func soakPlot(s namedSoak) Plot {
	r := s.r
	unit, div := "s", 1.0
	if r.Seconds > 600 {
		unit, div = "min", 60
	}
	var tcp, loss plotSeries
	tcp = plotSeries{Name: "TCP", Color: plotColors[0]}
	loss = plotSeries{Name: "UDP lost", Color: plotColors[3]}
	rss := [2]plotSeries{{Name: "client's daemon", Color: plotColors[2]}, {Name: "server's daemon", Color: plotColors[4]}}
	end := r.Seconds
	for _, x := range r.Samples {
		at := x.At / div
		end = max(end, x.At)
		tcp.Points = append(tcp.Points, plotPoint{X: at, Y: x.TCPMbps})
		if x.UDPSent > 0 {
			loss.Points = append(loss.Points, plotPoint{X: at, Y: 100 * float64(x.UDPLost) / float64(x.UDPSent)})
		}
		for h := range rss {
			if x.RSSKiB[h] > 0 {
				rss[h].Points = append(rss[h].Points, plotPoint{X: at, Y: float64(x.RSSKiB[h]) / 1024})
			}
		}
	}
	// Links down: from "link N of IA down ..." to "link N of IA up".
	var spans, lines []plotSpan
	downAt := map[string]float64{}
	for _, e := range r.Events {
		link, rest, ok := strings.Cut(e.What, " down")
		switch {
		case ok && strings.HasPrefix(link, "link ") && !strings.HasPrefix(rest, ":"):
			downAt[link] = e.At
		case strings.HasPrefix(e.What, "link ") && strings.HasSuffix(e.What, " up"):
			l := strings.TrimSuffix(e.What, " up")
			if from, ok := downAt[l]; ok {
				spans = append(spans, plotSpan{From: from / div, To: e.At / div, Color: colShade})
				delete(downAt, l)
			}
		case strings.Contains(e.What, " restarted"):
			lines = append(lines, plotSpan{From: e.At / div, Color: colVLine})
		}
	}
	for _, from := range downAt {
		spans = append(spans, plotSpan{From: from / div, To: end / div, Color: colShade})
	}
	slices.SortFunc(spans, func(a, b plotSpan) int { return cmpFloat(a.From, b.From) })
	xmax := end / div
	if xmax <= 0 {
		xmax = 1
	}
	_, step := axisScale([]chartBar{{median: xmax}})
	var ticks []plotTick
	for v := 0.0; v <= xmax+step/100; v += step {
		ticks = append(ticks, plotTick{v, trimFloat(v)})
	}
	tcpPanel := plotPanel{YLabel: "TCP Mbit/s", Series: []plotSeries{tcp}, NoValues: true}
	if r.TCPRate > 0 {
		tcpPanel.Ref, tcpPanel.RefLabel = float64(r.TCPRate)/1e6, "TCP offered"
	}
	var rssSeries []plotSeries
	for _, se := range rss {
		if len(se.Points) > 0 {
			rssSeries = append(rssSeries, se)
		}
	}
	panels := []plotPanel{tcpPanel, {YLabel: "UDP lost %", Series: []plotSeries{loss}, NoValues: true}}
	if len(rssSeries) > 0 {
		panels = append(panels, plotPanel{YLabel: "daemon RSS MiB", Series: rssSeries, NoValues: true})
	}
	var marks []plotMark
	if len(spans) > 0 {
		marks = append(marks, plotMark{Name: "a link down", Color: colShade})
	}
	if len(lines) > 0 {
		marks = append(marks, plotMark{Name: "a daemon or control service restarted", Color: colVLine, Line: true})
	}
	src := source{s.name, r.Started, r.Commit}
	sum := r.Summary
	alive := "both daemons alive at the end"
	if !sum.DaemonsAlive {
		alive = "a daemon had exited by the end"
	}
	lost := 0.0
	if sum.UDPSent > 0 {
		lost = 100 * float64(sum.UDPLost) / float64(sum.UDPSent)
	}
	return Plot{
		File: strings.TrimSuffix(s.name, filepath.Ext(s.name)) + ".png", Function: "tra",
		Heading: fmt.Sprintf("the translator over %s under flapping links and restarts", soakDuration(r.Seconds)),
		Caption: []string{
			fmt.Sprintf("Two translated hosts' steady TCP (%s Mbit/s offered) and UDP (%d datagrams a second) at each sample, and both translator daemons' memory; shaded: a link the flows used was down; grey lines: scionproto's daemon or control service of an AS restarted.", trimFloat(float64(r.TCPRate)/1e6), r.UDPRate),
			fmt.Sprintf("over the run: UDP %d of %d lost (%s%%), longest gap %.2f s; TCP %d MB, longest stall %.2f s; ping6 %d of %d answered; %s.",
				sum.UDPLost, sum.UDPSent, sig3(lost), sum.UDPLongestGap, sum.TCPBytes>>20, sum.TCPLongestStall, sum.PingReceived, sum.PingSent, alive),
			sourcesCaption([]source{src}) + "; `" + r.Command + "`",
		},
		spec: &plotSpec{
			Width: plotWidth, Height: soakHeight, Title: "Translator soak: throughput, loss, memory", Stamp: stamp([]source{src}),
			XLabel: unit + " since the flows started", XTicks: ticks, XMin: 0, XMax: xmax,
			Spans: spans, VLines: lines, Marks: marks, Panels: panels,
		},
	}
}

func soakDuration(s float64) string {
	if s >= 120 {
		return fmt.Sprintf("%.0f minutes", s/60)
	}
	return fmt.Sprintf("%.0f s", s)
}

// rtPlot is the userspace runtime's rows, each over its own anchor (the
// runtime over AF_XDP forwarding with no program, that over the kernel's
// XDP forwarder), a bar per row and frame size.
func (p *FiguresPage) rtPlot() *Plot {
	rows := p.anchored("rt")
	if len(rows) == 0 {
		return nil
	}
	var cats []string
	se := plotSeries{Name: "row over its anchor", Color: plotColors[0]}
	several := false
	for _, a := range rows {
		several = several || a.row.Size != rows[0].row.Size
	}
	for _, a := range rows {
		c := a.row.Scenario + " / " + a.row.Anchor
		if several {
			c += fmt.Sprintf(" (%d B)", a.row.Size)
		}
		se.Points = append(se.Points, plotPoint{X: float64(len(cats)), Y: a.row.AnchorRatio, Lo: a.row.MinMpps / a.row.AnchorMpps, Hi: a.row.MaxMpps / a.row.AnchorMpps})
		cats = append(cats, c)
	}
	srcs := sourcesOf(rows)
	panel := ratioPanel("anchor", []plotSeries{se})
	panel.RefLabel = "1.0 = the row's anchor"
	return &Plot{
		File: "rt.png", Function: "rt", Heading: "the userspace runtime, each row against its anchor",
		Caption: []string{
			"Mpps of each row over its anchor's (named after the slash) at the same frame size in the same run: `rt-jit` is the XDP object run over AF_XDP by fastpath-rt against AF_XDP forwarding with no program (`afxdp-fwd`), and that against the kernel's XDP forwarder (`xdp-redirect`).",
			sourcesCaption(srcs),
		},
		spec: &plotSpec{
			Width: plotWidth, Height: plotHeight, Title: "Userspace runtime, x each row's anchor", Stamp: stamp(srcs),
			XLabel: "row / its anchor", Categories: cats,
			Panels: []plotPanel{panel},
		},
	}
}
