package lab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// figuresDir is a results directory: reports of an older lab (testdata:
// lab tcp and lab tra without a commit, lab scion check's text, and JSON of
// another kind) beside a lab bench report as this lab writes it.
func figuresDir(t *testing.T, bench *Report) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir("testdata/figures")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("testdata/figures", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := json.Marshal(bench)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func figuresBench() *Report {
	r := &Report{
		Started: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Command: "fastpath lab bench veth xdp-redirect br afxdp-fwd rt-jit routed fw-0 mystery",
		Commit: "0123456789ab", Kernel: "6.8.0", CPUModel: "Test CPU", CPUs: 8, Baseline: "veth",
		Rows: []Row{
			{Scenario: CeilingScenario, Size: 138, Runs: runsAt(5)},
			{Scenario: "veth", Size: 138, Runs: runsAt(4)},
			{Scenario: "xdp-redirect", Size: 138, Runs: runsAt(2, 2.2, 1.8)},
			{Scenario: "br", Size: 138, Anchor: "xdp-redirect", Runs: runsAt(1, 1.1, 0.9)},
			{Scenario: "afxdp-fwd", Size: 138, Anchor: "xdp-redirect", Runs: runsAt(0.5)},
			{Scenario: "rt-jit", Size: 138, Anchor: "afxdp-fwd", Runs: runsAt(0.25)},
			{Scenario: "routed", Size: 138, Runs: runsAt(0.8)},
			{Scenario: "fw-0", Size: 138, Anchor: "routed", Runs: runsAt(0.6)},
			{Scenario: "mystery", Size: 138, Runs: runsAt(0.1)},
		},
		Record: &RecordSummary{Machine: "elsewhere", Compared: 3},
	}
	r.Finish()
	return r
}

// section is the page from a function's heading to the next one.
func section(page, title string) string {
	_, after, ok := strings.Cut(page, "\n## "+title+"\n")
	if !ok {
		return ""
	}
	s, _, _ := strings.Cut(after, "\n## ")
	return s
}

func TestFiguresEveryRowInItsFunction(t *testing.T) {
	bench := figuresBench()
	p, err := ReadFigures(figuresDir(t, bench))
	if err != nil {
		t.Fatal(err)
	}
	page := p.Markdown("fastpath lab figures")
	titles := map[string]string{}
	for _, f := range FigureFunctions {
		titles[f.Key] = f.Title
	}
	// Every bench row, with its figures as the results' own Markdown
	// prints them, in its function's section.
	for _, row := range bench.Rows {
		sec := section(page, titles[FunctionOf(row.Scenario)])
		want := fmt.Sprintf("| %s | %d | %.2f | %.2f–%.2f |", row.Scenario, row.Size, row.MedianMpps, row.MinMpps, row.MaxMpps)
		if !strings.Contains(sec, want) {
			t.Errorf("section %q lacks %q:\n%s", titles[FunctionOf(row.Scenario)], want, page)
		}
	}
	br := section(page, titles["br"])
	if want := fmt.Sprintf("| %.2f× xdp-redirect |", bench.Rows[3].AnchorRatio); !strings.Contains(br, want) {
		t.Errorf("br's row lacks its anchor ratio %q:\n%s", want, br)
	}
	// A row's anchors come with it, down the chain: rt-jit → afxdp-fwd → xdp-redirect.
	rt := section(page, titles["rt"])
	for _, want := range []string{"| rt-jit |", "| afxdp-fwd |", "| xdp-redirect |", "0.50× afxdp-fwd"} {
		if !strings.Contains(rt, want) {
			t.Errorf("rt section lacks %q:\n%s", want, rt)
		}
	}
	if strings.Contains(rt, "| br |") || strings.Contains(br, "| fw-0 |") {
		t.Errorf("a function's table holds another's rows:\n%s", page)
	}
	if strings.Contains(page, "vs record") || strings.Contains(page, "elsewhere") {
		t.Errorf("the page prints the comparison with the record; it is this run's figures only:\n%s", page)
	}

	// The older reports: every row, their ratios, and "unknown" for the
	// commit they did not record.
	var tcp TCPReport
	readJSON(t, "testdata/figures/fw-host.json", &tcp)
	fw := section(page, titles["fw"])
	for _, row := range tcp.Rows {
		if want := fmt.Sprintf("| %s | %.2f | %.2f–%.2f | %.2f× |", row.Scenario, row.MedianGbps, row.MinGbps, row.MaxGbps, row.Ratio); !strings.Contains(fw, want) {
			t.Errorf("fw section lacks %q:\n%s", want, fw)
		}
	}
	var tra traReport
	readJSON(t, "testdata/figures/tra.json", &tra)
	traSec := section(page, titles["tra"])
	for _, row := range tra.Rows {
		// The RTT cell starts with its median; the others' carry their
		// ratio to the baseline but in the baseline's own row.
		want := "| " + row.Row + " | " + sig3(row.Figures["rtt"].Median)
		if tcp1 := row.Figures["tcp-1"]; row.Row != tra.Baseline {
			want = "| " + sig3(tcp1.Median) + " " + sig3(tcp1.Ratio) + "× |"
		}
		if !strings.Contains(traSec, want) {
			t.Errorf("tra section lacks %q:\n%s", want, traSec)
		}
	}
	if !strings.Contains(fw, "- date: "+tcp.Started.UTC().Format(time.RFC3339)) {
		t.Errorf("fw section lacks its report's date:\n%s", fw)
	}
	for name, sec := range map[string]string{"fw": fw, "tra": traSec} {
		if !strings.Contains(sec, "commit: unknown") {
			t.Errorf("%s section: a report without a commit must say unknown:\n%s", name, sec)
		}
		if !strings.Contains(sec, "- machine: AMD EPYC, 2 CPUs, Linux 6.18.44-fc-v782") {
			t.Errorf("%s section lacks its machine:\n%s", name, sec)
		}
	}

	// This lab's report says all of where it comes from.
	for _, want := range []string{
		"- date: 2026-03-01T12:00:00Z; commit: 0123456789ab\n",
		"- machine: Test CPU, 8 CPUs, Linux 6.8.0\n",
		"- command: `" + bench.Command + "`\n",
	} {
		if !strings.Contains(br, want) {
			t.Errorf("br section lacks %q:\n%s", want, br)
		}
	}

	// lab scion check's text: its verdicts, and unknown where it says nothing.
	for _, want := range []string{
		"| pairs of leaf ASes | 55 pairs of leaf ASes: 55 with paths that answer ping and traceroute, 0 failed |",
		"| peering link across ISDs | proved (1-ff00:0:b11 → 2-ff00:0:d11) |",
		"| oracle | 7173 frames forwarded in XDP at 32 routers",
		"- machine: unknown\n- command: unknown\n",
	} {
		if !strings.Contains(br, want) {
			t.Errorf("br section lacks %q from scion-topo.txt:\n%s", want, br)
		}
	}

	if len(p.Skipped) != 1 || p.Skipped[0] != "other.json" {
		t.Errorf("skipped %v, want [other.json]: JSON of another kind is left off, and said so", p.Skipped)
	}
}

func TestFiguresNoReports(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadFigures(dir); err == nil || !strings.Contains(err.Error(), "make demo") {
		t.Errorf("empty results directory: err %v, want one that says to run make demo", err)
	}
	if _, err := ReadFigures(filepath.Join(dir, "absent")); err == nil {
		t.Error("missing results directory: no error")
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), []byte(`{"restore": true, "rows": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFigures(dir); err == nil || !strings.Contains(err.Error(), "bench.json") {
		t.Errorf("truncated report: err %v, want one that names the file", err)
	}
}

func TestFunctionOf(t *testing.T) {
	for scenario, want := range map[string]string{
		"br": "br", "br-cold": "br", "br-fw": "br", "ref-router": "br", "scion-hybrid": "br",
		"fw-100k": "fw", "fw-host": "fw", "iptables-10k": "fw", "nft-host": "fw", "xdp-filter-10k": "fw", "xdp-pass": "fw",
		"rt-jit": "rt", "afxdp-fwd": "rt",
		"veth": "lab", "ceiling": "lab", "xdp-redirect": "lab", "routed": "lab", "bridge": "lab",
		"brand-new": "other", "fwd": "other",
	} {
		if got := FunctionOf(scenario); got != want {
			t.Errorf("FunctionOf(%q) = %q, want %q", scenario, got, want)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

// figuresPlotBench is figuresBench with the firewall's rule-count rows and
// a second report of the router at more frame sizes.
func figuresPlotBench() (*Report, *Report) {
	bench := figuresBench()
	bench.Rows = append(bench.Rows,
		Row{Scenario: "fw-100k", Size: 138, Anchor: "routed", Runs: runsAt(0.58, 0.6, 0.55)},
		Row{Scenario: "fw-100k-generic", Size: 138, Anchor: "routed", Runs: runsAt(0.3)},
		Row{Scenario: "iptables-10k", Size: 138, Anchor: "routed", Runs: runsAt(0.008)},
		Row{Scenario: "nft-10k", Size: 138, Anchor: "routed", Runs: runsAt(0.4)},
	)
	bench.Finish()
	sizes := &Report{
		Started: bench.Started.Add(time.Hour), Command: "fastpath lab bench xdp-redirect br --size 138,1500",
		Commit: "fedcba987654", Restore: true,
		Rows: []Row{
			{Scenario: "xdp-redirect", Size: 138, Runs: runsAt(2)},
			{Scenario: "br", Size: 138, Anchor: "xdp-redirect", Runs: runsAt(1.2)},
			{Scenario: "xdp-redirect", Size: 1500, Runs: runsAt(1.5)},
			{Scenario: "br", Size: 1500, Anchor: "xdp-redirect", Runs: runsAt(0.9)},
		},
	}
	sizes.Finish()
	return bench, sizes
}

// plotsDir is figuresDir with the second bench report.
func plotsDir(t *testing.T) string {
	t.Helper()
	bench, sizes := figuresPlotBench()
	dir := figuresDir(t, bench)
	data, err := json.Marshal(sizes)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "br-sizes.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func plotByFile(p *FiguresPage, file string) *Plot {
	for i := range p.Plots {
		if p.Plots[i].File == file {
			return &p.Plots[i]
		}
	}
	return nil
}

// Every plot draws a PNG of its size with something in its plot area, and
// what it draws is what the reports hold.
func TestFiguresPlots(t *testing.T) {
	p, err := ReadFigures(plotsDir(t))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, pl := range p.Plots {
		files = append(files, pl.File)
	}
	want := []string{"br-xdp-redirect.png", "rt.png", "fw-rules.png", "tra.png", "soak.png"}
	if !slices.Equal(files, want) {
		t.Fatalf("plots %v, want %v", files, want)
	}
	for _, pl := range p.Plots {
		var b bytes.Buffer
		if err := pl.WritePNG(&b); err != nil {
			t.Fatalf("%s: %v", pl.File, err)
		}
		img, err := png.Decode(&b)
		if err != nil {
			t.Fatalf("%s: %v", pl.File, err)
		}
		w, h := pl.Size()
		if got := img.Bounds().Size(); got != image.Pt(w, h) || w != plotWidth || (h != plotHeight && h != soakHeight) {
			t.Errorf("%s: %v, want %dx%d", pl.File, got, w, h)
		}
		// The plot area: right of the y axis' labels, under the legend,
		// over the x axis' labels.
		area := image.Rect(plotLeft+2, 100, w-plotRight, h-70)
		inked, colored := 0, 0
		for y := area.Min.Y; y < area.Max.Y; y++ {
			for x := area.Min.X; x < area.Max.X; x++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				if r != 0xffff || g != 0xffff || bl != 0xffff {
					inked++
				}
				if c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA); slices.Contains(plotColors, c) {
					colored++
				}
			}
		}
		if inked < area.Dx()*area.Dy()/200 || colored < 50 {
			t.Errorf("%s: %d pixels drawn, %d of a series' colour in the plot area %v: nearly empty", pl.File, inked, colored, area)
		}
		if len(pl.Caption) == 0 || !strings.Contains(pl.Caption[len(pl.Caption)-1], "measured ") {
			t.Errorf("%s: caption %q does not say where its figures come from", pl.File, pl.Caption)
		}
	}

	// The router: br at 138 B from the later report, br-cold not run.
	br := plotByFile(p, "br-xdp-redirect.png")
	if got := br.spec.Categories; !slices.Equal(got, []string{"138 B", "1500 B"}) {
		t.Errorf("router's sizes %v", got)
	}
	panel := br.spec.Panels[0]
	if panel.Ref != 1 || len(panel.Series) != 1 || panel.Series[0].Name != "br" {
		t.Fatalf("router's panel: ref %v, series %+v", panel.Ref, panel.Series)
	}
	if got := panel.Series[0].Points; len(got) != 2 || !near(got[0].Y, 0.6) || !near(got[1].Y, 0.6) {
		t.Errorf("br's ratios %+v, want 0.6 at 138 B (the later report's) and 1500 B", got)
	}
	// Its rows all come from the later report, and the caption says so.
	if c := strings.Join(br.Caption, "\n"); !strings.Contains(c, "`br-sizes.json`, measured 2026-03-01T13:00:00Z, commit fedcba987654") || strings.Contains(c, "bench.json") {
		t.Errorf("router's caption names the wrong reports: %q", br.Caption)
	}

	// The firewall: a line per engine over rule counts, on log axes; not
	// the generic row.
	fw := plotByFile(p, "fw-rules.png")
	panel = fw.spec.Panels[0]
	if !panel.LogY {
		t.Error("firewall's ratios span 0.01 to 0.75 but the axis is linear")
	}
	got := map[string][]plotPoint{}
	for _, s := range panel.Series {
		got[s.Name] = s.Points
	}
	if len(got) != 3 || len(got["fastpath fw"]) != 2 || len(got["iptables"]) != 1 || len(got["nftables"]) != 1 {
		t.Errorf("firewall's series %v, want fastpath fw (0, 100k), iptables and nftables (10k)", got)
	}
	if pts := got["fastpath fw"]; len(pts) == 2 && (!near(pts[1].X, 5) || !near(pts[0].X, 3) || !near(pts[0].Y, 0.75)) {
		t.Errorf("fastpath fw's points %+v: want 0 rules a decade left of 10k (x 3) at 0.75, 100k at x 5", pts)
	}
	var ticks []string
	for _, tk := range fw.spec.XTicks {
		ticks = append(ticks, tk.Label)
	}
	if !slices.Equal(ticks, []string{"0", "10k", "100k"}) {
		t.Errorf("firewall's ticks %v", ticks)
	}

	// The translator: the testdata report has no ip-xdp row, so its rows
	// are over its baseline, ip.
	tra := plotByFile(p, "tra.png")
	if tra.spec.Panels[0].RefLabel != "1.0 = ip" || len(tra.spec.Categories) != 4 {
		t.Errorf("translator's plot: ref %q, metrics %v", tra.spec.Panels[0].RefLabel, tra.spec.Categories)
	}

	// The soak: two links down shaded, one restart, three panels.
	soak := plotByFile(p, "soak.png")
	if len(soak.spec.Spans) != 2 || len(soak.spec.VLines) != 1 || len(soak.spec.Panels) != 3 {
		t.Errorf("soak: %d spans, %d restarts, %d panels; want 2, 1, 3", len(soak.spec.Spans), len(soak.spec.VLines), len(soak.spec.Panels))
	}
	if s := soak.spec.Spans; len(s) == 2 && (s[0].From != 30 || s[0].To != 40.1) {
		t.Errorf("first link down %v–%v, want 30–40.1 s", s[0].From, s[0].To)
	}
	if !strings.Contains(strings.Join(soak.Caption, "\n"), "UDP 480 of 12000 lost") {
		t.Errorf("soak's caption lacks its summary: %q", soak.Caption)
	}
	if !strings.Contains(strings.Join(p.Notes["tra"], "\n"), "`sig`") {
		t.Errorf("tra notes %q do not say the SIG is missing", p.Notes["tra"])
	}
}

// The page embeds every plot written beside it, and each image it embeds
// exists; without a soak's report it says so instead of a timeline.
func TestFiguresPageEmbedsPlots(t *testing.T) {
	for _, withSoak := range []bool{true, false} {
		dir := plotsDir(t)
		if !withSoak {
			if err := os.Remove(filepath.Join(dir, "soak.json")); err != nil {
				t.Fatal(err)
			}
		}
		p, err := ReadFigures(dir)
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		if err := os.Mkdir(filepath.Join(out, "figures"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, pl := range p.Plots {
			var b bytes.Buffer
			if err := pl.WritePNG(&b); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(out, "figures", pl.File), b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p.ImageDir = "figures"
		page := p.Markdown("fastpath lab figures")
		embedded := map[string]bool{}
		for _, m := range regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`).FindAllStringSubmatch(page, -1) {
			embedded[m[1]] = true
			if _, err := os.Stat(filepath.Join(out, m[1])); err != nil {
				t.Errorf("the page embeds %s: %v", m[1], err)
			}
		}
		written, _ := filepath.Glob(filepath.Join(out, "figures", "*.png"))
		for _, f := range written {
			if rel := "figures/" + filepath.Base(f); !embedded[rel] {
				t.Errorf("%s is not on the page", rel)
			}
		}
		if len(written) != len(p.Plots) || len(embedded) != len(written) {
			t.Errorf("%d plots, %d written, %d embedded", len(p.Plots), len(written), len(embedded))
		}
		hasSoak := embedded["figures/soak.png"]
		noted := strings.Contains(page, "No soak's report in the results")
		if hasSoak != withSoak || noted == withSoak {
			t.Errorf("soak report %v: timeline on the page %v, note that it is missing %v", withSoak, hasSoak, noted)
		}
		// A plot sits in its function's section.
		if sec := section(page, "XDP firewall (fw)"); !strings.Contains(sec, "](figures/fw-rules.png)") {
			t.Errorf("fw section lacks its plot:\n%s", sec)
		}
	}
	// Without an image directory, the page is the tables alone.
	p, err := ReadFigures(plotsDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if page := p.Markdown("x"); strings.Contains(page, "![") || strings.Contains(page, "No soak") {
		t.Errorf("a page without images embeds or notes plots:\n%s", page)
	}
}

func TestRuleCount(t *testing.T) {
	for name, want := range map[string][2]int{
		"fw-0": {0, 0}, "fw-100k": {0, 100000}, "iptables-10k": {1, 10000}, "nft-1k": {2, 1000},
		"xdp-filter-10k": {3, 10000}, "nft-2m": {2, 2000000}, "fw-250": {0, 250},
	} {
		e, n, ok := ruleCount(name)
		if !ok || e != want[0] || n != want[1] {
			t.Errorf("ruleCount(%q) = %d, %d, %v; want %v", name, e, n, ok, want)
		}
	}
	for _, name := range []string{"fw-100k-generic", "fw-100k-churn", "fw-acl-10k", "fw-host", "nft-", "fw-k", "fw-010", "routed", "nft-host"} {
		if _, _, ok := ruleCount(name); ok {
			t.Errorf("ruleCount(%q): a rule-count row", name)
		}
	}
}

func TestLogTicks(t *testing.T) {
	lo, hi, ticks := logTicks(0.0093, 1)
	if lo > 0.0093 || hi < 1 || lo < 0.001 || hi > 10 {
		t.Errorf("ends %v–%v for 0.0093–1", lo, hi)
	}
	var labels []string
	for _, tk := range ticks {
		labels = append(labels, tk.Label)
	}
	if !slices.Contains(labels, "1") || !slices.Contains(labels, "0.01") || !slices.Contains(labels, "0.5") {
		t.Errorf("ticks %v", labels)
	}
}
