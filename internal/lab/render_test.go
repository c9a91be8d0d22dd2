package lab

import (
	"bytes"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"
)

// runsAt builds one run per Mpps figure with no loss.
func runsAt(mpps ...float64) []Run {
	rs := make([]Run, len(mpps))
	for i, m := range mpps {
		rs[i] = Run{Sent: 1000, Received: 1000, Mpps: m}
	}
	return rs
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestFinish(t *testing.T) {
	type want struct {
		median, min, max, ns, ratio, loss float64
		otherSize                         bool
	}
	tests := map[string]struct {
		baseline string
		rows     []Row
		want     []want
	}{
		"odd count": {
			rows: []Row{{Scenario: "veth", Runs: runsAt(4.93, 4.61, 4.80)}},
			want: []want{{median: 4.80, min: 4.61, max: 4.93, ns: 1e3 / 4.80}},
		},
		"even count takes the mean of the middle two": {
			rows: []Row{{Scenario: "veth", Runs: runsAt(4, 1, 3, 2)}},
			want: []want{{median: 2.5, min: 1, max: 4, ns: 400}},
		},
		"ratio to baseline": {
			baseline: "veth",
			rows: []Row{
				{Scenario: "br", Size: 64, Runs: runsAt(2, 2, 2)},
				{Scenario: "veth", Size: 64, Runs: runsAt(4, 4, 4)},
			},
			want: []want{
				{median: 2, min: 2, max: 2, ns: 500, ratio: 0.5},
				{median: 4, min: 4, max: 4, ns: 250, ratio: 1},
			},
		},
		"a baseline of one size divides a row of another, flagged": {
			baseline: "veth",
			rows: []Row{
				{Scenario: "veth", Size: 64, Runs: runsAt(4)},
				{Scenario: "br", Size: 1500, Runs: runsAt(2)},
			},
			want: []want{
				{median: 4, min: 4, max: 4, ns: 250, ratio: 1},
				{median: 2, min: 2, max: 2, ns: 500, ratio: 0.5, otherSize: true},
			},
		},
		"a sweep's baseline is not used at a size it did not run": {
			baseline: "veth",
			rows: []Row{
				{Scenario: "veth", Size: 64, Runs: runsAt(4)},
				{Scenario: "veth", Size: 128, Runs: runsAt(3)},
				{Scenario: "br", Size: 1500, Runs: runsAt(2)},
			},
			want: []want{
				{median: 4, min: 4, max: 4, ns: 250, ratio: 1},
				{median: 3, min: 3, max: 3, ns: 1e3 / 3.0, ratio: 1},
				{median: 2, min: 2, max: 2, ns: 500},
			},
		},
		"no baseline set": {
			rows: []Row{{Scenario: "veth", Runs: runsAt(4)}},
			want: []want{{median: 4, min: 4, max: 4, ns: 250}},
		},
		"baseline absent from rows": {
			baseline: "veth",
			rows:     []Row{{Scenario: "br", Runs: runsAt(4)}},
			want:     []want{{median: 4, min: 4, max: 4, ns: 250}},
		},
		"baseline at zero Mpps": {
			baseline: "veth",
			rows: []Row{
				{Scenario: "veth", Runs: runsAt(0)},
				{Scenario: "br", Runs: runsAt(3)},
			},
			want: []want{{}, {median: 3, min: 3, max: 3, ns: 1e3 / 3.0}},
		},
		"loss is the median fraction, clamped and safe at zero sent": {
			rows: []Row{{Scenario: "fw", Runs: []Run{
				{Sent: 1000, Received: 900, Mpps: 1},  // 0.10
				{Sent: 1000, Received: 980, Mpps: 1},  // 0.02
				{Sent: 1000, Received: 1010, Mpps: 1}, // −0.01 → 0
				{Sent: 0, Received: 0, Mpps: 1},       // 0
				{Sent: 1000, Received: 950, Mpps: 1},  // 0.05
			}}},
			want: []want{{median: 1, min: 1, max: 1, ns: 1000, loss: 0.02}},
		},
		"no runs": {
			rows: []Row{{Scenario: "veth"}},
			want: []want{{}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := Report{Baseline: tc.baseline, Rows: tc.rows}
			for i := range r.Rows {
				r.Rows[i].Description, r.Rows[i].Note = "desc", "note"
			}
			r.Finish()
			for i, w := range tc.want {
				row := r.Rows[i]
				got := want{row.MedianMpps, row.MinMpps, row.MaxMpps, row.NsPerPacket, row.Ratio, row.Loss, row.RatioOtherSize}
				if !near(got.median, w.median) || !near(got.min, w.min) || !near(got.max, w.max) ||
					!near(got.ns, w.ns) || !near(got.ratio, w.ratio) || !near(got.loss, w.loss) || got.otherSize != w.otherSize {
					t.Errorf("row %d (%s): got %+v, want %+v", i, row.Scenario, got, w)
				}
				if row.Description != "desc" || row.Note != "note" {
					t.Errorf("row %d: Finish changed Description/Note to %q/%q", i, row.Description, row.Note)
				}
			}
		})
	}
}

// sampleReport is a finished two-row report with a baseline.
func sampleReport() *Report {
	r := &Report{
		Started:  time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Command:  "fastpath lab bench --size 64",
		Kernel:   "6.8.0",
		CPUModel: "Test CPU",
		CPUs:     8,
		Baseline: "veth",
		Rows: []Row{
			{Scenario: "veth", Size: 64, Runs: runsAt(10.0, 9.8, 10.2)},
			{Scenario: "br-scion", Size: 64, Runs: []Run{
				{Sent: 1000, Received: 988, Mpps: 4.61},
				{Sent: 1000, Received: 988, Mpps: 4.80},
				{Sent: 1000, Received: 988, Mpps: 4.93},
			}, Note: "sink saturated"},
		},
	}
	r.Finish()
	return r
}

func TestTable(t *testing.T) {
	tests := map[string]struct {
		baseline string
		want     []string
		not      []string
	}{
		"with baseline": {
			baseline: "veth",
			want: []string{
				"scenario", "size (B)", "ns/pkt",
				"veth", "10.00", "9.80–10.20", "100.0", "1.00×", "0.0%",
				"br-scion", "4.80", "4.61–4.93", "208.3", "0.48×", "1.2%", "sink saturated",
				"ratio: Mpps / Mpps of veth at the same size in the same run; ns/pkt: whole path on one core",
			},
		},
		"without baseline": {
			want: []string{"veth", "br-scion", "4.61–4.93", "—", "\nns/pkt: whole path on one core\n"},
			not:  []string{"×", "ratio: Mpps"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := sampleReport()
			r.Baseline = tc.baseline
			r.Finish()
			got := r.Table()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("table lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("table has %q:\n%s", n, got)
				}
			}
		})
	}
}

func TestTableAligned(t *testing.T) {
	lines := strings.Split(sampleReport().Table(), "\n")
	// Header, rule, two rows: the right-aligned Mpps column must end in the
	// same rune column on each, whatever the bytes of "–" and "×" before it.
	end := func(l, s string) int {
		i := strings.Index(l, s)
		if i < 0 {
			t.Fatalf("%q not in %q", s, l)
		}
		return len([]rune(l[:i+len(s)]))
	}
	if a, b, c := end(lines[0], "Mpps"), end(lines[2], "10.00"), end(lines[3], "4.80"); a != b || b != c {
		t.Errorf("Mpps column ends at %d, %d, %d:\n%s", a, b, c, strings.Join(lines, "\n"))
	}
}

func TestMarkdown(t *testing.T) {
	got := sampleReport().Markdown()
	for _, w := range []string{
		"# fastpath lab bench\n",
		"- date: 2026-03-01T12:00:00Z\n",
		"- command: `fastpath lab bench --size 64`\n",
		"- kernel: 6.8.0\n",
		"- CPU: Test CPU (8 CPUs)\n",
		"| scenario | size (B) | Mpps | min–max | ns/pkt | ratio | loss | note |\n",
		"|---|---:|---:|---:|---:|---:|---:|---|\n",
		"| br-scion | 64 | 4.80 | 4.61–4.93 | 208.3 | 0.48× | 1.2% | sink saturated |\n",
		"- br-scion (64 B) runs: 4.61, 4.80, 4.93\n",
		"- veth (64 B) runs: 10.00, 9.80, 10.20\n",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("markdown lacks %q:\n%s", w, got)
		}
	}
}

func TestWritePNG(t *testing.T) {
	tests := map[string]*Report{
		"no rows":  {},
		"two rows": sampleReport(),
		"zero Mpps": {Rows: []Row{
			{Scenario: "dead", Size: 64, Runs: runsAt(0, 0)},
			{Scenario: "none", Size: 64},
		}},
		"long non-ASCII name": {Rows: []Row{
			{Scenario: strings.Repeat("très—long ", 10), Size: 1500, Runs: runsAt(1)},
		}},
	}
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			r.Finish()
			var buf bytes.Buffer
			if err := r.WritePNG(&buf); err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(&buf)
			if err != nil {
				t.Fatal(err)
			}
			b := img.Bounds()
			if b.Dx() != 900 || b.Dy() != 120+60*len(r.Rows) {
				t.Errorf("size %dx%d, want 900x%d", b.Dx(), b.Dy(), 120+60*len(r.Rows))
			}
			cr, cg, cb, _ := img.At(0, 0).RGBA()
			if cr != 0xffff || cg != 0xffff || cb != 0xffff {
				t.Errorf("background at (0,0) is not white")
			}
			// Every row with traffic gets a bar in one of the bar colours.
			bars := 0
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					c := img.At(x, y)
					if c == colBar || c == colBaseline {
						bars++
					}
				}
			}
			hasTraffic := false
			for _, row := range r.Rows {
				hasTraffic = hasTraffic || row.MedianMpps > 0
			}
			if hasTraffic != (bars > 0) {
				t.Errorf("%d bar pixels, rows with traffic: %v", bars, hasTraffic)
			}
		})
	}
}

func TestFinishAnchors(t *testing.T) {
	r := Report{Baseline: "veth", Rows: []Row{
		{Scenario: "veth", Size: 138, Runs: runsAt(10)},
		{Scenario: "xdp-redirect", Size: 138, Runs: runsAt(8)},
		{Scenario: "br", Size: 138, Anchor: "xdp-redirect", Runs: runsAt(4)},
		{Scenario: "veth", Size: 1500, Runs: runsAt(5)},
		{Scenario: "xdp-redirect", Size: 1500, Runs: runsAt(2)},
		{Scenario: "br", Size: 1500, Anchor: "xdp-redirect", Runs: runsAt(1.5)},
		// The anchor did not run at this size: no ratio, however close
		// another size is.
		{Scenario: "br", Size: 576, Anchor: "xdp-redirect", Runs: runsAt(3)},
		// An anchor that moved nothing divides nothing.
		{Scenario: "dead", Size: 138, Runs: runsAt(0)},
		{Scenario: "fw", Size: 138, Anchor: "dead", Runs: runsAt(1)},
	}}
	r.Finish()
	want := []struct{ anchorMpps, anchorRatio, ratio float64 }{
		{0, 0, 1}, {0, 0, 0.8}, {8, 0.5, 0.4},
		{0, 0, 1}, {0, 0, 0.4}, {2, 0.75, 0.3},
		{0, 0, 0}, {0, 0, 0}, {0, 0, 0.1},
	}
	for i, w := range want {
		row := r.Rows[i]
		if !near(row.AnchorMpps, w.anchorMpps) || !near(row.AnchorRatio, w.anchorRatio) || !near(row.Ratio, w.ratio) {
			t.Errorf("row %d (%s %d B): anchor %v Mpps, anchor ratio %v, ratio %v; want %+v", i, row.Scenario, row.Size, row.AnchorMpps, row.AnchorRatio, row.Ratio, w)
		}
	}
	if r.CeilingMpps != 0 {
		t.Errorf("ceiling %v without a ceiling row", r.CeilingMpps)
	}
}

func TestCeilingAtEachSize(t *testing.T) {
	r := Report{Baseline: "veth", Rows: []Row{
		{Scenario: CeilingScenario, Size: 138, Runs: runsAt(20)},
		{Scenario: "veth", Size: 138, Runs: runsAt(15)},
		{Scenario: CeilingScenario, Size: 1500, Runs: runsAt(10)},
		{Scenario: "veth", Size: 1500, Runs: runsAt(4)},
	}}
	r.Finish()
	// The report's own fields are the first size's.
	if !near(r.CeilingMpps, 20) || !near(r.VethOfCeiling, 0.75) {
		t.Errorf("ceiling %v, veth of it %v; want 20 and 0.75", r.CeilingMpps, r.VethOfCeiling)
	}
	table := r.Table()
	for _, w := range []string{"ceiling (one fixed frame, nothing written) at 138 B: 20.00 Mpps; the veth row reaches 0.75 of it",
		"at 1500 B: 10.00 Mpps; the veth row reaches 0.40 of it"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, table)
		}
	}
}

func TestTableAnchorColumn(t *testing.T) {
	r := &Report{Baseline: "veth", Rows: []Row{
		{Scenario: "veth", Size: 138, Runs: runsAt(10)},
		{Scenario: "xdp-redirect", Size: 138, Runs: runsAt(8)},
		{Scenario: "br", Size: 138, Anchor: "xdp-redirect", Runs: runsAt(3.92)},
		{Scenario: "fw-0", Size: 138, Anchor: "routed", Runs: runsAt(3)},
	}}
	r.Finish()
	table := r.Table()
	for _, w := range []string{"to anchor", "0.49× xdp-redirect", "routed not run", "to anchor: Mpps / Mpps of the row's own comparison"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, table)
		}
	}
	// Without anchors and without a record, the table is as it was.
	if plain := sampleReport().Table(); strings.Contains(plain, "to anchor") || strings.Contains(plain, "vs record") {
		t.Errorf("columns of nothing:\n%s", plain)
	}
}

// The table says at which sizes frames came from the packet socket, once
// per size, and says nothing when all came as live frames.
func TestGeneratorLine(t *testing.T) {
	r := &Report{Rows: []Row{
		{Scenario: "ceiling", Size: 138, Generator: MethodLiveFrames},
		{Scenario: "ceiling", Size: 8000, Generator: MethodPacket},
		{Scenario: "veth", Size: 8000, Generator: MethodPacket},
	}}
	r.Finish()
	want := "generator at 8000 B: an AF_PACKET socket on one core"
	if got := r.Table(); strings.Count(got, want) != 1 {
		t.Fatalf("table:\n%s\nwant one line with %q", got, want)
	}
	if got := r.Markdown(); !strings.Contains(got, "- "+want) {
		t.Fatalf("markdown:\n%s\nwant a line with %q", got, want)
	}
	r.Rows = r.Rows[:1]
	if got := r.Table(); strings.Contains(got, "AF_PACKET") {
		t.Fatalf("all live frames, yet the table says:\n%s", got)
	}
}
