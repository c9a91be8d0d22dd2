package tralab

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/lab"
)

// The figures page reads this report's JSON without naming its type (the lab
// cannot import this package): a renamed field would drop out of the page
// silently but for this test.
func TestReportOnFiguresPage(t *testing.T) {
	r := &Report{
		Started: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Command: "fastpath lab tra ip tra", Commit: "0123456789ab",
		Machine: lab.Machine{Kernel: "6.8.0", CPUModel: "Test CPU", CPUs: 8},
		Seconds: 3, X4: "four iperf3 processes", ASes: 3, MTU: 9000, ClientIA: "1-64513", ServerIA: "1-64514",
		Baseline: Baseline,
		Rows: []RowReport{
			{Row: Baseline, Note: "plain", Figures: map[string]*Figure{"tcp-1": {Unit: "Gbit/s", Runs: []float64{10, 12}}, "rtt": {Unit: "µs", Runs: []float64{30}}}},
			{Row: "tra", Note: "translated", Figures: map[string]*Figure{"tcp-1": {Unit: "Gbit/s", Runs: []float64{4, 6}}, "rtt": {Unit: "µs", Runs: []float64{45}}}},
		},
	}
	r.finish()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tra.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := lab.ReadFigures(dir)
	if err != nil {
		t.Fatal(err)
	}
	page := p.Markdown("fastpath lab figures")
	for _, want := range []string{
		"## SCION-IP translator (tra)",
		"links of MTU 9000",
		"- date: 2026-03-01T12:00:00Z; commit: 0123456789ab\n",
		"- machine: Test CPU, 8 CPUs, Linux 6.8.0\n",
		"- command: `fastpath lab tra ip tra`\n",
		"| row | RTT µs | TCP ×1 Gbit/s | note |",
		"| " + Baseline + " | 30 | 11 | plain |",
		"| tra | 45 1.5× | 5 0.455× | translated |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("figures page lacks %q:\n%s", want, page)
		}
	}
}
