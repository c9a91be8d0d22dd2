package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

	if len(p.Skipped) != 1 || p.Skipped[0] != "soak.json" {
		t.Errorf("skipped %v, want [soak.json]: JSON of another kind is left off, and said so", p.Skipped)
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
