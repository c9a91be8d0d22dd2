package lab

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMachineKind(t *testing.T) {
	tests := map[string]struct {
		m    Machine
		want string
	}{
		// What a Firecracker VM on an AMD host reports.
		"amd vm":     {Machine{CPUModel: "AMD EPYC", CPUs: 2, Kernel: "6.18.44-fc-v669"}, "2cpu-amd-epyc-linux6.18"},
		"intel vm":   {Machine{CPUModel: "Intel(R) Xeon(R) Processor", CPUs: 2, Kernel: "6.18.44-fc-v669"}, "2cpu-intel-xeon-linux6.18"},
		"full model": {Machine{CPUModel: "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", CPUs: 8, Kernel: "6.8.0-45-generic"}, "8cpu-intel-xeon-platinum-8375c-2.90ghz-linux6.8"},
		"amd model":  {Machine{CPUModel: "AMD EPYC 7B13 64-Core Processor", CPUs: 4, Kernel: "6.1.0"}, "4cpu-amd-epyc-7b13-64-core-linux6.1"},
		"seed form":  {Machine{CPUModel: "AMD EPYC", CPUs: 2, Kernel: "6.18"}, "2cpu-amd-epyc-linux6.18"},
		"unknown":    {Machine{CPUModel: "unknown", CPUs: 1, Kernel: "unknown"}, "1cpu-unknown-linuxunknown"},
		"empty":      {Machine{CPUs: 1}, "1cpu-unknown-linuxunknown"},
		"odd kernel": {Machine{CPUModel: "x", CPUs: 1, Kernel: "6"}, "1cpu-x-linuxunknown"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.m.Kind(); got != tc.want {
				t.Errorf("%+v: kind %q, want %q", tc.m, got, tc.want)
			}
		})
	}
}

// recordOf is a record of the machine of sampleReport with these entries.
func recordOf(rows ...RecordEntry) *Record {
	return &Record{Machine: sampleReport().Machine(), Rows: rows}
}

func TestCompareRow(t *testing.T) {
	// veth 10 Mpps, xdp-redirect 8, br 4 at 138 B: br is 0.4× veth and
	// 0.5× xdp-redirect.
	rep := &Report{Baseline: "veth", Rows: []Row{
		{Scenario: "veth", Size: 138, Runs: runsAt(10)},
		{Scenario: "xdp-redirect", Size: 138, Runs: runsAt(8)},
		{Scenario: "br", Size: 138, Anchor: "xdp-redirect", Runs: runsAt(4)},
		{Scenario: "scion", Size: 154, Runs: runsAt(2)},
		{Scenario: "stuck", Size: 138, Anchor: "xdp-redirect", Runs: runsAt(0)},
		{Scenario: CeilingScenario, Size: 138, Runs: runsAt(12)},
	}}
	rep.Finish()
	entry := func(mpps, ratio, anchor float64) RecordEntry {
		e := RecordEntry{MedianMpps: mpps, Date: "2026-11-25"}
		if ratio > 0 {
			e.Baseline, e.Ratio = "veth", ratio
		}
		if anchor > 0 {
			e.Anchor, e.AnchorRatio = "xdp-redirect", anchor
		}
		return e
	}
	tests := map[string]struct {
		row   int
		entry RecordEntry
		want  Comparison
	}{
		"anchor ratio first, even when Mpps rose": {2, entry(3, 0.4, 0.6),
			Comparison{Figure: FigureAnchorRatio, Against: "xdp-redirect", Now: 0.5, Then: 0.6, Change: 0.5/0.6 - 1, Fell: true}},
		"9% less is no fall": {2, entry(4, 0.4, 0.55),
			Comparison{Figure: FigureAnchorRatio, Against: "xdp-redirect", Now: 0.5, Then: 0.55, Change: 0.5/0.55 - 1}},
		"record without the anchor: ratio to the baseline": {2, entry(4, 0.5, 0),
			Comparison{Figure: FigureRatio, Against: "veth", Now: 0.4, Then: 0.5, Change: 0.4/0.5 - 1, Fell: true}},
		"record to another anchor: ratio to the baseline": {2, func() RecordEntry { e := entry(4, 0.4, 0.5); e.Anchor = "bridge"; return e }(),
			Comparison{Figure: FigureRatio, Against: "veth", Now: 0.4, Then: 0.4, Change: 0}},
		"record to another baseline: Mpps": {2, func() RecordEntry { e := entry(5, 0.3, 0); e.Baseline = "routed"; return e }(),
			Comparison{Figure: FigureMpps, Now: 4, Then: 5, Change: 4.0/5 - 1, Fell: true}},
		"the baseline is compared by Mpps": {0, entry(9, 1, 0),
			Comparison{Figure: FigureMpps, Now: 10, Then: 9, Change: 10.0/9 - 1}},
		"so is the ceiling": {5, entry(13, 1.5, 0),
			Comparison{Figure: FigureMpps, Now: 12, Then: 13, Change: 12.0/13 - 1}},
		"ratio across sizes only with one across sizes": {3, entry(2.5, 0.2, 0),
			Comparison{Figure: FigureMpps, Now: 2, Then: 2.5, Change: 2/2.5 - 1, Fell: true}},
		"ratio across sizes with one across sizes": {3, func() RecordEntry { e := entry(2.5, 0.25, 0); e.RatioOtherSize = true; return e }(),
			Comparison{Figure: FigureRatio, Against: "veth", Now: 0.2, Then: 0.25, Change: 0.2/0.25 - 1, Fell: true}},
		"a row that moved nothing fell all the way": {4, entry(4, 0.4, 0.5),
			Comparison{Figure: FigureAnchorRatio, Against: "xdp-redirect", Now: 0, Then: 0.5, Change: -1, Fell: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.want.Date = "2026-11-25"
			got := rep.compareRow(rep.Rows[tc.row], tc.entry)
			if !near(got.Change, tc.want.Change) {
				t.Errorf("change %v, want %v", got.Change, tc.want.Change)
			}
			got.Change, tc.want.Change = 0, 0
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestComparisonString(t *testing.T) {
	tests := map[string]struct {
		c    *Comparison
		want string
	}{
		"not compared": {nil, "—"},
		"new":          {&Comparison{New: true}, "new"},
		"down a bit":   {&Comparison{Figure: FigureAnchorRatio, Against: "xdp-redirect", Now: 0.49, Then: 0.52, Change: 0.49/0.52 - 1, Date: "2026-11-25"}, "−6% vs 0.52× xdp-redirect on 2026-11-25"},
		"up":           {&Comparison{Figure: FigureRatio, Against: "veth", Now: 0.34, Then: 0.33, Change: 0.34/0.33 - 1, Date: "2026-11-25"}, "+3% vs 0.33× veth on 2026-11-25"},
		"fell, Mpps":   {&Comparison{Figure: FigureMpps, Now: 4.3, Then: 5, Change: 4.3/5 - 1, Fell: true, Date: "2026-11-25"}, "▼ FELL 14% vs 5.00 Mpps on 2026-11-25"},
		"small ratio":  {&Comparison{Figure: FigureAnchorRatio, Against: "routed", Now: 0.0072, Then: 0.0072, Date: "2026-11-25"}, "+0% vs 0.0072× routed on 2026-11-25"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.c.String(); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
}

func TestCompareRecord(t *testing.T) {
	rep := sampleReport() // veth 10 Mpps, br-scion 4.80 at 64 B
	rep.Rows = append(rep.Rows, Row{Scenario: "fw-0", Size: 64, Runs: runsAt(3)})
	rep.Finish()
	rec := recordOf(
		RecordEntry{Scenario: "veth", Size: 64, MedianMpps: 10.5, Baseline: "veth", Ratio: 1, Date: "2026-11-20"},
		// 0.48 now against 0.56: 14% less.
		RecordEntry{Scenario: "br-scion", Size: 64, MedianMpps: 5, Baseline: "veth", Ratio: 0.56, Date: "2026-11-20"},
		// Another size is another row.
		RecordEntry{Scenario: "fw-0", Size: 1500, MedianMpps: 1, Date: "2026-11-20"},
	)
	rep.CompareRecord(rec, "record.json")
	want := &RecordSummary{From: "record.json", Machine: "8cpu-test-linux6.8", This: "8cpu-test-linux6.8", Compared: 2, New: 1,
		Fell: []string{"br-scion 64 B −14% (ratio)"}}
	if !reflect.DeepEqual(rep.Record, want) {
		t.Errorf("summary %+v, want %+v", rep.Record, want)
	}
	table := rep.Table()
	for _, w := range []string{
		"vs record",
		"−5% vs 10.50 Mpps on 2026-11-20",
		"▼ FELL 14% vs 0.56× veth on 2026-11-20",
		"new",
		"vs record (record.json): 2 rows compared, 1 new; 1 fell by more than 10%: br-scion 64 B −14% (ratio)",
	} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, table)
		}
	}
	md := rep.Markdown()
	if !strings.Contains(md, "| vs record |") || !strings.Contains(md, "▼ FELL 14%") {
		t.Errorf("markdown lacks the record's column:\n%s", md)
	}

	// A record of another machine kind says so; a kind without one makes
	// every row new.
	other := recordOf()
	other.Machine.CPUs = 2
	rep.CompareRecord(other, "other.json")
	if s := rep.Record.String(); !strings.Contains(s, "figures of machine kind 2cpu-test-linux6.8; this machine is 8cpu-test-linux6.8") || !strings.Contains(s, "0 rows compared, 3 new") {
		t.Errorf("summary of another kind's record: %s", s)
	}
	rep.CompareRecord(recordOf(), "")
	if s := rep.Record.String(); !strings.Contains(s, "machine kind 8cpu-test-linux6.8 has no record yet") {
		t.Errorf("summary without a record: %s", s)
	}
}

func TestRecordMerge(t *testing.T) {
	rec := recordOf(
		RecordEntry{Scenario: "veth", Size: 64, MedianMpps: 11, Baseline: "veth", Ratio: 1, Date: "2026-11-20", Commit: "old", Command: "make demo"},
		RecordEntry{Scenario: "bridge", Size: 64, MedianMpps: 1.5, Baseline: "veth", Ratio: 0.14, Date: "2026-11-20", Commit: "old", Command: "make demo"},
	)
	rep := &Report{
		Started: time.Date(2026, 11, 26, 23, 30, 0, 0, time.UTC), Command: "fastpath lab bench veth br xdp-redirect", Commit: "abc123",
		Kernel: "6.8.1", CPUModel: "Test CPU", CPUs: 8, Baseline: "veth",
		Rows: []Row{
			{Scenario: "veth", Size: 64, Runs: runsAt(10)},
			{Scenario: "xdp-redirect", Size: 64, Runs: runsAt(9)},
			{Scenario: "br", Size: 64, Anchor: "xdp-redirect", Runs: runsAt(3)},
			{Scenario: "br", Size: 1500, Anchor: "xdp-redirect", Runs: runsAt(1)},
			{Scenario: "dead", Size: 64, Runs: runsAt(0)},
		},
	}
	rep.Finish()
	skipped := rec.Merge(rep)
	if !reflect.DeepEqual(skipped, []string{"dead 64 B"}) {
		t.Errorf("skipped %v, want the row that moved nothing", skipped)
	}
	run := func(s string, size int, mpps, ns, ratio float64) RecordEntry {
		return RecordEntry{Scenario: s, Size: size, MedianMpps: mpps, NsPerPacket: ns, Baseline: "veth", Ratio: ratio,
			Date: "2026-11-26", Commit: "abc123", Command: "fastpath lab bench veth br xdp-redirect"}
	}
	br := run("br", 64, 3, 333.3, 0.3)
	br.Anchor, br.AnchorRatio = "xdp-redirect", 0.3333
	// 1500 B has no veth row: the only baseline is divided across sizes.
	br1500 := run("br", 1500, 1, 1000, 0.1)
	br1500.RatioOtherSize = true
	want := []RecordEntry{
		// Sorted by scenario and size; bridge did not run and keeps its entry.
		br, br1500,
		{Scenario: "bridge", Size: 64, MedianMpps: 1.5, Baseline: "veth", Ratio: 0.14, Date: "2026-11-20", Commit: "old", Command: "make demo"},
		run("veth", 64, 10, 100, 1),
		run("xdp-redirect", 64, 9, 111.1, 0.9),
	}
	if !reflect.DeepEqual(rec.Rows, want) {
		t.Errorf("merged:\n%+v\nwant:\n%+v", rec.Rows, want)
	}
	if rec.Machine != rep.Machine() {
		t.Errorf("machine %+v, want the run's", rec.Machine)
	}
	// What is written reads back the same.
	data, err := rec.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRecord("merged", data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rec) {
		t.Errorf("read back:\n%+v\nwant:\n%+v", back, rec)
	}
	if e, ok := back.Lookup("br", 1500); !ok || e.MedianMpps != 1 {
		t.Errorf("lookup br 1500 B: %+v, %v", e, ok)
	}
	if _, ok := back.Lookup("br", 576); ok {
		t.Error("lookup found a size that never ran")
	}
}

func TestParseRecordRejects(t *testing.T) {
	const machine = `"machine": {"cpu_model": "AMD EPYC", "cpus": 2, "kernel": "6.18"}`
	row := func(fields string) string {
		return `{` + machine + `, "rows": [{"scenario": "br", "size": 138, "median_mpps": 5.58, "date": "2026-11-25", "commit": "c", "command": "make demo"` + fields + `}]}`
	}
	tests := map[string]struct {
		data, want string
	}{
		"unknown field":      {row(`, "mpps": 5`), `unknown field "mpps"`},
		"no machine":         {`{"rows": []}`, "machine: cpu_model, cpus and kernel are all needed"},
		"zero rate":          {strings.Replace(row(""), "5.58", "0", 1), "rows[0] (br at 138 B): median_mpps 0"},
		"no size":            {strings.Replace(row(""), `"size": 138`, `"size": 0`, 1), "rows[0] (br at 0 B): size must be"},
		"bad date":           {strings.Replace(row(""), "2026-11-25", "25.11.2026", 1), `rows[0] (br at 138 B): date "25.11.2026": want YYYY-MM-DD`},
		"ratio, no baseline": {row(`, "ratio": 0.3`), "ratio and baseline go together"},
		"anchor, no ratio":   {row(`, "anchor": "xdp-redirect"`), "anchor_ratio and anchor go together"},
		"no scenario":        {strings.Replace(row(""), `"br"`, `""`, 1), "rows[0]: scenario is empty"},
		"same row twice": {`{` + machine + `, "rows": [{"scenario": "br", "size": 138, "median_mpps": 5, "date": "2026-11-25", "commit": "c", "command": "x"},
			{"scenario": "br", "size": 138, "median_mpps": 4, "date": "2026-11-25", "commit": "c", "command": "x"}]}`, "rows[1] (br at 138 B): the same row as rows[0]"},
		"two objects": {row("") + row(""), "more than one JSON object"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRecord("x.json", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "record x.json: ") {
				t.Fatalf("error %v, want one naming x.json and containing %q", err, tc.want)
			}
		})
	}
	if _, err := ParseRecord("x.json", []byte(row(`, "baseline": "veth", "ratio": 0.33, "anchor": "xdp-redirect", "anchor_ratio": 0.48`))); err != nil {
		t.Fatalf("a good record: %v", err)
	}
}

// The records built into the binary are the committed files: each must
// parse, and be named after the machine kind it holds, or no bench would
// ever find it.
func TestBuiltInRecords(t *testing.T) {
	entries, err := fs.ReadDir(recordFS, "record")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("no record built in")
	}
	for _, e := range entries {
		data, err := recordFS.ReadFile("record/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		rec, err := ParseRecord(e.Name(), data)
		if err != nil {
			t.Fatal(err)
		}
		if want := rec.Machine.Kind() + ".json"; e.Name() != want {
			t.Errorf("%s holds the figures of %s", e.Name(), want)
		}
		// Committed as --update-record writes it, so that an update's
		// diff is the figures that changed and nothing else.
		again, err := rec.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(data) {
			t.Errorf("%s is not in the form --update-record writes:\n%s", e.Name(), again)
		}
	}
}

func TestFindRecord(t *testing.T) {
	amd := Machine{CPUModel: "AMD EPYC", CPUs: 2, Kernel: "6.18.44-fc-v669"}
	other := Machine{CPUModel: "Other CPU", CPUs: 4, Kernel: "6.1.0"}
	intel := Machine{CPUModel: "Intel(R) Xeon(R) Processor", CPUs: 2, Kernel: "6.18.44-fc-v669"}

	checkout := t.TempDir()
	if err := os.WriteFile(filepath.Join(checkout, "go.mod"), []byte("module github.com/fastpath-dev/fastpath\n\ngo 1.25.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(checkout, "internal", "br")
	if err := os.MkdirAll(filepath.Join(checkout, RecordDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	inCheckout := filepath.Join(checkout, RecordDir, amd.Kind()+".json")
	seed := recordOf(RecordEntry{Scenario: "br", Size: 138, MedianMpps: 1, Date: "2026-11-25", Commit: "c", Command: "x"})
	seed.Machine = amd
	data, err := seed.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inCheckout, data, 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	named := filepath.Join(outside, "mine.json")
	if err := os.WriteFile(named, data, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(outside, "none.json")

	tests := map[string]struct {
		named, dir string
		m          Machine
		update     bool
		from, path string
		rows       int
		err        string
	}{
		"checkout, from a subdirectory": {dir: deep, m: amd, from: inCheckout, path: inCheckout, rows: 1},
		"checkout, no record yet":       {dir: checkout, m: other, path: filepath.Join(checkout, RecordDir, other.Kind()+".json")},
		"outside: the built-in copy":    {dir: outside, m: intel, from: "built in: record/2cpu-intel-xeon-linux6.18.json", rows: builtInRows(t, intel)},
		"outside, unknown kind":         {dir: outside, m: other},
		"outside, update":               {dir: outside, m: amd, update: true, err: "is not inside a fastpath checkout"},
		"named":                         {named: named, dir: outside, m: amd, from: named, path: named, rows: 1},
		"named, another kind, read":     {named: named, dir: outside, m: other, from: named, path: named, rows: 1},
		"named, another kind, update":   {named: named, dir: outside, m: other, update: true, err: "holds the figures of machine kind 2cpu-amd-epyc-linux6.18, and this machine is 4cpu-other-linux6.1"},
		"named missing, read":           {named: missing, dir: outside, m: amd, err: "--record: open " + missing},
		"named missing, update":         {named: missing, dir: outside, m: amd, update: true, path: missing},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rf, err := FindRecord(tc.named, tc.dir, tc.m, tc.update)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rf.From != tc.from || rf.Path != tc.path || len(rf.Record.Rows) != tc.rows {
				t.Errorf("from %q, path %q, %d rows; want %q, %q, %d", rf.From, rf.Path, len(rf.Record.Rows), tc.from, tc.path, tc.rows)
			}
			if rf.From == "" && rf.Record.Machine != tc.m {
				t.Errorf("an empty record of machine %+v, want %+v", rf.Record.Machine, tc.m)
			}
		})
	}
}

// builtInRows is how many rows the binary's own record of a machine kind has.
func builtInRows(t *testing.T, m Machine) int {
	t.Helper()
	name := "record/" + m.Kind() + ".json"
	data, err := recordFS.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ParseRecord(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return len(rec.Rows)
}

func TestCheckoutCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed: %v", err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.org"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := CheckoutCommit(dir); got != "" {
		t.Fatalf("outside a checkout: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module github.com/fastpath-dev/fastpath\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("init", "-q")
	git("add", "go.mod")
	git("commit", "-q", "-m", "x")
	head := git("rev-parse", "--short=12", "HEAD")
	sub := filepath.Join(dir, "internal")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// An untracked file is not a change to what was built.
	if err := os.WriteFile(filepath.Join(sub, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := CheckoutCommit(sub); got != head {
		t.Errorf("clean checkout: %q, want %q", got, head)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module github.com/fastpath-dev/fastpath\n\ngo 1.25\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := CheckoutCommit(sub); got != head+"-dirty" {
		t.Errorf("changed checkout: %q, want %q", got, head+"-dirty")
	}
}
