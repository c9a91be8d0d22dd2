package lab

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The record is the last reported figure of every row, one file per kind
// of machine, committed beside the code: a row that slips shows the day it
// slips instead of at the next hand-made comparison. `lab bench` compares
// each row with it; `lab bench --update-record` writes a run into it, and
// the run's figures are committed when they are reported.

// RecordDir is where the records live in a fastpath checkout, one
// KIND.json per machine kind. The binary carries a copy (recordFS), so a
// bench run outside the checkout still finds them.
const RecordDir = "internal/lab/record"

//go:embed record
var recordFS embed.FS

// FallThreshold is how far a row's figure may fall below its record before
// the row is flagged: more than the 10% a ratio taken in one run moves by on
// the shared machines the lab runs on.
const FallThreshold = 0.10

// Machine is the machine the report was measured on.
func (r *Report) Machine() Machine {
	return Machine{Kernel: r.Kernel, CPUModel: r.CPUModel, CPUs: r.CPUs}
}

// Kind names the machines whose figures compare, in a file name: the same
// CPU model, as many CPUs and the same kernel series (major.minor), e.g.
// "2cpu-amd-epyc-linux6.18".
func (m Machine) Kind() string {
	return fmt.Sprintf("%dcpu-%s-linux%s", m.CPUs, cpuSlug(m.CPUModel), kernelSeries(m.Kernel))
}

// cpuSlug lowers a /proc/cpuinfo model name to the words that tell CPUs
// apart: "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz" becomes
// "intel-xeon-platinum-8375c-2.90ghz". Trademark signs and the words
// "CPU" and "Processor" say nothing.
func cpuSlug(model string) string {
	s := strings.ToLower(model)
	for _, mark := range []string{"(r)", "(tm)", "(c)"} {
		s = strings.ReplaceAll(s, mark, " ")
	}
	words := strings.FieldsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.')
	})
	var keep []string
	for _, w := range words {
		w = strings.Trim(w, ".")
		if w != "" && w != "cpu" && w != "processor" {
			keep = append(keep, w)
		}
	}
	if len(keep) == 0 {
		return "unknown"
	}
	return strings.Join(keep, "-")
}

// kernelSeries is a kernel release's major.minor: "6.18.44-fc" is "6.18".
func kernelSeries(release string) string {
	major, rest, ok := strings.Cut(release, ".")
	if !ok || !allDigits(major) {
		return "unknown"
	}
	minor := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = rest[:i]
	}
	if minor == "" {
		return "unknown"
	}
	return major + "." + minor
}

func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// Record holds the last reported figures of one machine kind.
type Record struct {
	Machine Machine       `json:"machine"`
	Rows    []RecordEntry `json:"rows"`
}

// RecordEntry is one row's last reported figures: a scenario at a frame
// size, and where the figures come from.
type RecordEntry struct {
	Scenario    string  `json:"scenario"`
	Size        int     `json:"size"`
	MedianMpps  float64 `json:"median_mpps"`
	NsPerPacket float64 `json:"ns_per_packet"`
	// Ratio to Baseline at the same size, as in the report; absent when the
	// baseline did not run. RatioOtherSize as in Row.
	Baseline       string  `json:"baseline,omitempty"`
	Ratio          float64 `json:"ratio,omitempty"`
	RatioOtherSize bool    `json:"ratio_other_size,omitempty"`
	// AnchorRatio to Anchor at the same size; absent when the anchor did
	// not run.
	Anchor      string  `json:"anchor,omitempty"`
	AnchorRatio float64 `json:"anchor_ratio,omitempty"`
	// Date (YYYY-MM-DD), Commit and Command of the run the figures come from.
	Date    string `json:"date"`
	Commit  string `json:"commit"`
	Command string `json:"command"`
}

// ParseRecord decodes and checks a record; name says where it came from in
// errors.
func ParseRecord(name string, data []byte) (*Record, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var rec Record
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("record %s: %w", name, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("record %s: more than one JSON object", name)
	}
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("record %s: %w", name, err)
	}
	return &rec, nil
}

// Validate checks that every entry can be compared with: a row, a rate it
// reached, ratios with what they are to, and a date.
func (rec *Record) Validate() error {
	m := rec.Machine
	if m.CPUModel == "" || m.CPUs < 1 || m.Kernel == "" {
		return fmt.Errorf("machine: cpu_model, cpus and kernel are all needed (got %q, %d, %q)", m.CPUModel, m.CPUs, m.Kernel)
	}
	type key struct {
		s    string
		size int
	}
	seen := map[key]int{}
	for i, e := range rec.Rows {
		at := fmt.Sprintf("rows[%d]", i)
		if e.Scenario == "" {
			return fmt.Errorf("%s: scenario is empty", at)
		}
		at += fmt.Sprintf(" (%s at %d B)", e.Scenario, e.Size)
		if e.Size <= 0 {
			return fmt.Errorf("%s: size must be a frame length in bytes", at)
		}
		if j, dup := seen[key{e.Scenario, e.Size}]; dup {
			return fmt.Errorf("%s: the same row as rows[%d]; keep one", at, j)
		}
		seen[key{e.Scenario, e.Size}] = i
		if !(e.MedianMpps > 0) || math.IsInf(e.MedianMpps, 0) {
			return fmt.Errorf("%s: median_mpps %v: a recorded figure is a rate the row reached, above 0", at, e.MedianMpps)
		}
		if e.Ratio < 0 || e.AnchorRatio < 0 {
			return fmt.Errorf("%s: negative ratio", at)
		}
		if (e.Ratio > 0) != (e.Baseline != "") {
			return fmt.Errorf("%s: ratio and baseline go together (ratio %v, baseline %q)", at, e.Ratio, e.Baseline)
		}
		if (e.AnchorRatio > 0) != (e.Anchor != "") {
			return fmt.Errorf("%s: anchor_ratio and anchor go together (anchor_ratio %v, anchor %q)", at, e.AnchorRatio, e.Anchor)
		}
		if _, err := time.Parse(time.DateOnly, e.Date); err != nil {
			return fmt.Errorf("%s: date %q: want YYYY-MM-DD", at, e.Date)
		}
	}
	return nil
}

// Lookup finds the entry of a scenario at a frame size.
func (rec *Record) Lookup(scenario string, size int) (RecordEntry, bool) {
	for _, e := range rec.Rows {
		if e.Scenario == scenario && e.Size == size {
			return e, true
		}
	}
	return RecordEntry{}, false
}

// Merge writes the report's rows into the record, replacing their entries
// and keeping those of rows the report did not run. Rows that moved no
// packet are not recorded (a rate of 0 compares with nothing); their names
// are returned.
func (rec *Record) Merge(rep *Report) (skipped []string) {
	rec.Machine = rep.Machine()
	for _, row := range rep.Rows {
		if row.MedianMpps <= 0 {
			skipped = append(skipped, fmt.Sprintf("%s %d B", row.Scenario, row.Size))
			continue
		}
		e := RecordEntry{
			Scenario:    row.Scenario,
			Size:        row.Size,
			MedianMpps:  roundSig(row.MedianMpps),
			NsPerPacket: math.Round(row.NsPerPacket*10) / 10,
			Date:        rep.Started.UTC().Format(time.DateOnly),
			Commit:      rep.Commit,
			Command:     rep.Command,
		}
		if e.Commit == "" {
			e.Commit = "unknown"
		}
		if rep.hasRatio(row) && row.Ratio > 0 {
			e.Baseline, e.Ratio, e.RatioOtherSize = rep.Baseline, roundSig(row.Ratio), row.RatioOtherSize
		}
		if row.AnchorRatio > 0 {
			e.Anchor, e.AnchorRatio = row.Anchor, roundSig(row.AnchorRatio)
		}
		if i := slices.IndexFunc(rec.Rows, func(o RecordEntry) bool { return o.Scenario == row.Scenario && o.Size == row.Size }); i >= 0 {
			rec.Rows[i] = e
		} else {
			rec.Rows = append(rec.Rows, e)
		}
	}
	// Sorted, so that an update's diff shows only the rows that changed.
	slices.SortFunc(rec.Rows, func(a, b RecordEntry) int {
		if c := strings.Compare(a.Scenario, b.Scenario); c != 0 {
			return c
		}
		return a.Size - b.Size
	})
	return skipped
}

// roundSig keeps four significant digits: more than any run repeats, and a
// ratio of 0.0003 keeps its digits where rounding to decimals would not.
func roundSig(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	return r
}

// Marshal is the record as it is committed: indented JSON, one entry per
// block, ending in a newline.
func (rec *Record) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// RecordFile is a machine kind's record and where it came from.
type RecordFile struct {
	Record *Record
	// From is where it was read: a file, "built in: record/KIND.json" for
	// the binary's copy, or "" when the machine kind has no record yet.
	From string
	// Path is where --update-record writes it; "" outside a fastpath
	// checkout when no file was named.
	Path string
}

// FindRecord finds the record to compare a bench of machine m with: the file
// named (--record), else the one of m's kind in the fastpath checkout that
// holds workDir, else the binary's copy, else an empty record. An empty
// record is no error: every row is then new. forUpdate asks for a place to
// write it too, and fails before any bench when there is none, or when the
// named file holds another machine kind.
func FindRecord(named, workDir string, m Machine, forUpdate bool) (RecordFile, error) {
	kind := m.Kind()
	empty := &Record{Machine: m}
	if named != "" {
		data, err := os.ReadFile(named)
		switch {
		case errors.Is(err, fs.ErrNotExist) && forUpdate:
			return RecordFile{Record: empty, Path: named}, nil
		case err != nil:
			return RecordFile{}, fmt.Errorf("--record: %w", err)
		}
		rec, err := ParseRecord(named, data)
		if err != nil {
			return RecordFile{}, err
		}
		if k := rec.Machine.Kind(); forUpdate && k != kind {
			return RecordFile{}, fmt.Errorf("--update-record: %s holds the figures of machine kind %s, and this machine is %s: leave --record out to update %s.json", named, k, kind, kind)
		}
		return RecordFile{Record: rec, From: named, Path: named}, nil
	}
	if root := checkoutRoot(workDir); root != "" {
		path := filepath.Join(root, RecordDir, kind+".json")
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return RecordFile{Record: empty, Path: path}, nil
		case err != nil:
			return RecordFile{}, err
		}
		rec, err := ParseRecord(path, data)
		if err != nil {
			return RecordFile{}, err
		}
		return RecordFile{Record: rec, From: path, Path: path}, nil
	}
	if forUpdate {
		return RecordFile{}, fmt.Errorf("--update-record: %s is not inside a fastpath checkout, where %s/%s.json is: run from the checkout, or name the file with --record", workDir, RecordDir, kind)
	}
	name := "record/" + kind + ".json"
	data, err := recordFS.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return RecordFile{Record: empty}, nil
	}
	if err != nil {
		return RecordFile{}, err
	}
	rec, err := ParseRecord("built in: "+name, data)
	if err != nil {
		return RecordFile{}, err
	}
	return RecordFile{Record: rec, From: "built in: " + name}, nil
}

// checkoutRoot is the directory at or above dir that holds fastpath's
// go.mod, or "".
func checkoutRoot(dir string) string {
	for dir != "" {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			first, _, _ := strings.Cut(string(data), "\n")
			if strings.TrimSpace(first) == "module github.com/fastpath-dev/fastpath" {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
	return ""
}

// CheckoutCommit is the HEAD of the fastpath checkout that holds dir, with
// "-dirty" when tracked files differ from it; "" outside a checkout or
// without git. It stands in for the binary's own revision when the build
// did not stamp one: go build does not under GOFLAGS=-buildvcs=false, nor
// in a git worktree, whose .git is a file.
func CheckoutCommit(dir string) string {
	root := checkoutRoot(dir)
	if root == "" {
		return ""
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(string(head))
	changed, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return ""
	}
	if len(bytes.TrimSpace(changed)) > 0 {
		commit += "-dirty"
	}
	return commit
}

// The figures a row is compared by, steadiest first.
const (
	FigureAnchorRatio = "anchor ratio"
	FigureRatio       = "ratio"
	FigureMpps        = "Mpps"
)

// Comparison is a row beside its record entry.
type Comparison struct {
	// New says the record has no entry of the row's scenario at its size.
	New bool `json:"new,omitempty"`
	// Figure is what was compared: the anchor ratio when this run and the
	// record both have it (to the same anchor), else the ratio to the
	// baseline (the same baseline), else Mpps. Against names the anchor or
	// the baseline.
	Figure  string  `json:"figure,omitempty"`
	Against string  `json:"against,omitempty"`
	Now     float64 `json:"now,omitempty"`
	Then    float64 `json:"then,omitempty"`
	Date    string  `json:"date,omitempty"`
	// Change is Now/Then − 1: −0.14 is 14% below the record.
	Change float64 `json:"change,omitempty"`
	// Fell says Change is below −FallThreshold.
	Fell bool `json:"fell,omitempty"`
}

// compareRow picks the steadiest figure the row and its entry share and
// compares them. Ratios taken in one run cancel the machine's drift, which
// moves absolute rates by ±30% on a shared VM; Mpps is the last resort.
func (r *Report) compareRow(row Row, e RecordEntry) Comparison {
	c := Comparison{Date: e.Date}
	switch {
	case row.Anchor != "" && row.AnchorMpps > 0 && e.Anchor == row.Anchor && e.AnchorRatio > 0:
		c.Figure, c.Against, c.Now, c.Then = FigureAnchorRatio, row.Anchor, row.AnchorRatio, e.AnchorRatio
	// The baseline's own ratio is 1 whatever happens, and the ceiling's
	// falls when veth gains: both are compared by Mpps.
	case row.Scenario != r.Baseline && row.Scenario != CeilingScenario && r.hasRatio(row) &&
		e.Baseline == r.Baseline && e.Ratio > 0 && e.RatioOtherSize == row.RatioOtherSize:
		c.Figure, c.Against, c.Now, c.Then = FigureRatio, r.Baseline, row.Ratio, e.Ratio
	default:
		c.Figure, c.Now, c.Then = FigureMpps, row.MedianMpps, e.MedianMpps
	}
	c.Change = c.Now/c.Then - 1
	c.Fell = c.Change < -FallThreshold
	return c
}

// String is the comparison as the table prints it beside the ratios:
// "−6% vs 0.52× xdp-redirect on 2026-11-25", with "▼ FELL" in front of a
// row that fell by more than FallThreshold.
func (c *Comparison) String() string {
	if c == nil {
		return "—"
	}
	if c.New {
		return "new"
	}
	then := figure(c.Then) + " Mpps"
	if c.Figure != FigureMpps {
		then = figure(c.Then) + "× " + c.Against
	}
	pct := int(math.Round(c.Change * 100))
	if c.Fell {
		return fmt.Sprintf("▼ FELL %d%% vs %s on %s", -pct, then, c.Date)
	}
	sign := "+"
	if pct < 0 {
		sign, pct = "−", -pct
	}
	return fmt.Sprintf("%s%d%% vs %s on %s", sign, pct, then, c.Date)
}

// RecordSummary is what a report's comparison with a record found.
type RecordSummary struct {
	// From is where the record was read ("" when the machine kind had none).
	From string `json:"from,omitempty"`
	// Machine is the record's machine kind, This the report's.
	Machine string `json:"machine"`
	This    string `json:"this_machine"`
	// Compared counts the rows the record had an entry for, New the rest.
	Compared int `json:"compared"`
	New      int `json:"new"`
	// Fell lists the rows that fell by more than FallThreshold, e.g.
	// "br 138 B −14% (anchor ratio)".
	Fell []string `json:"fell,omitempty"`
}

// CompareRecord sets each row's VsRecord and the report's Record summary.
// from says where the record was read ("" for a machine kind without one).
func (r *Report) CompareRecord(rec *Record, from string) {
	sum := &RecordSummary{From: from, Machine: rec.Machine.Kind(), This: r.Machine().Kind()}
	for i := range r.Rows {
		row := &r.Rows[i]
		e, ok := rec.Lookup(row.Scenario, row.Size)
		if !ok {
			row.VsRecord = &Comparison{New: true}
			sum.New++
			continue
		}
		c := r.compareRow(*row, e)
		row.VsRecord = &c
		sum.Compared++
		if c.Fell {
			sum.Fell = append(sum.Fell, fmt.Sprintf("%s %d B −%d%% (%s)", row.Scenario, row.Size, int(math.Round(-c.Change*100)), c.Figure))
		}
	}
	r.Record = sum
}

// String is the line printed after the table: what was compared, with
// what, and which rows fell.
func (s *RecordSummary) String() string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	if s.From == "" {
		fmt.Fprintf(&b, "vs record: machine kind %s has no record yet (%s/%s.json; --update-record starts it): every row is new", s.This, RecordDir, s.This)
		return b.String()
	}
	fmt.Fprintf(&b, "vs record (%s", s.From)
	if s.Machine != s.This {
		fmt.Fprintf(&b, ", figures of machine kind %s; this machine is %s", s.Machine, s.This)
	}
	fmt.Fprintf(&b, "): %d rows compared, %d new; ", s.Compared, s.New)
	if len(s.Fell) == 0 {
		fmt.Fprintf(&b, "none fell by more than %.0f%%", FallThreshold*100)
	} else {
		fmt.Fprintf(&b, "%d fell by more than %.0f%%: %s", len(s.Fell), FallThreshold*100, strings.Join(s.Fell, ", "))
	}
	b.WriteString(". Compared: the anchor ratio where both have it, else the ratio to the baseline, else Mpps")
	return b.String()
}
