package lab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
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
	// page reads (a soak's, say), with why.
	Skipped []string
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
			tables, err = reportTables(name, data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
			}
		}
		if len(tables) == 0 {
			page.Skipped = append(page.Skipped, name)
			continue
		}
		files = append(files, dated{tables[0].Prov.Started, name, tables})
	}
	if len(files) == 0 {
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
	return page, nil
}

// reportTables decodes one JSON report by the fields only its kind has; nil
// for JSON of another kind.
func reportTables(name string, data []byte) ([]FigureTable, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return nil, fmt.Errorf("not a JSON report: %w", err)
	}
	has := func(k string) bool { _, ok := keys[k]; return ok }
	switch {
	case has("restore") && has("rows"):
		var r Report
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("a lab bench report: %w", err)
		}
		return benchTables(name, &r), nil
	case has("seconds_per_run") && has("rows"):
		var r TCPReport
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("a lab tcp report: %w", err)
		}
		return []FigureTable{tcpTable(name, &r)}, nil
	case has("seconds_per_iperf3_run") && has("rows"):
		var r traReport
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("a lab tra report: %w", err)
		}
		return []FigureTable{r.table(name)}, nil
	}
	return nil, nil
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
	for _, fn := range FigureFunctions {
		var tables []FigureTable
		for _, t := range p.Tables {
			if t.Function == fn.Key {
				tables = append(tables, t)
			}
		}
		if len(tables) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", fn.Title, fn.Intro)
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
