package rt

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/fastpath-dev/fastpath/internal/bench"
)

// CompileOptions choose how fastpath rt compile builds an AOT object.
type CompileOptions struct {
	// Opt is --opt: "none", "all", or a comma list of typed-values,
	// inline-helpers, const-maps; empty for the runtime's default (all).
	Opt string
	// ConstMaps are arrays the programs only read, compiled in with the
	// contents Maps gives them: a run refuses the object when such a map
	// then holds anything else.
	ConstMaps []string
	// Maps are written before compiling (--maps-in).
	Maps     map[string][]Entry
	NoVerify bool
}

// AOTInfo is what test-run reports of an AOT object: the options it was
// compiled with and what they did.
type AOTInfo struct {
	Opts           string   `json:"opts"`
	ElidedChecks   int      `json:"elided_checks"`
	InlinedLookups int      `json:"inlined_lookups"`
	InlinedCsum    int      `json:"inlined_csum"`
	CsumDiff       string   `json:"csum_diff"`
	FoldedLoads    int      `json:"folded_loads"`
	ConstMaps      []string `json:"const_maps"`
}

// CompileWith compiles every program of an ELF object ahead of time into
// out, with the options.
func CompileWith(object, out string, o CompileOptions) error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	args := []string{"compile", object, "-o", out}
	if o.NoVerify {
		args = append(args, "--no-verify")
	}
	if o.Opt != "" {
		args = append(args, "--opt", o.Opt)
	}
	for _, m := range o.ConstMaps {
		args = append(args, "--const-map", m)
	}
	if len(o.Maps) > 0 {
		dir, err := os.MkdirTemp("", "fastpath-rt-maps-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, "maps.json")
		if err := writeMapsFile(p, o.Maps); err != nil {
			return err
		}
		args = append(args, "--maps-in", p)
	}
	if b, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("fastpath-rt: %s", strings.TrimSpace(strings.TrimPrefix(string(b), "fastpath-rt: ")))
	}
	return nil
}

// AOTVariants are the option sets BenchAOTOpts compares: none, each
// option alone, all.
var AOTVariants = []string{"none", "typed-values", "inline-helpers", "const-maps", "all"}

// benchConstMaps are the benchmark programs' configuration arrays, which
// they only read: compiled in (--const-map, with bench.Setup's contents)
// where const-maps is on.
var benchConstMaps = map[string][]string{"xdp_lb": {"lb_config"}}

// AOTOptRow is one program's ns per run as AOT objects compiled with each
// of AOTVariants, and what each compilation did.
type AOTOptRow struct {
	Program string              `json:"program"`
	Ns      map[string]float64  `json:"ns"`
	Info    map[string]*AOTInfo `json:"info"`
}

// BenchAOTOpts times every benchmark program on its sample frame as AOT
// objects compiled with each option set: the same repeat loop as Bench,
// the order of the variants turning each round, the best of rounds.
func BenchAOTOpts(o BenchOptions) ([]AOTOptRow, error) {
	if o.Repeat < 1 {
		o.Repeat = 100_000
	}
	if o.Rounds < 1 {
		o.Rounds = 3
	}
	if o.Tmp == "" {
		dir, err := os.MkdirTemp("", "fastpath-rt-aotopts-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Tmp = dir
	}
	var rows []AOTOptRow
	for _, p := range bench.Programs() {
		pkt := bench.Sample(p.Name)
		init := map[string][]Entry{}
		for m, es := range bench.Setup(p.Name) {
			for _, e := range es {
				init[m] = append(init[m], Entry{Key: e.Key, Value: e.Value})
			}
		}
		row := AOTOptRow{Program: p.Name, Ns: map[string]float64{}, Info: map[string]*AOTInfo{}}
		natives := map[string]string{}
		for i, v := range AOTVariants {
			natives[v] = filepath.Join(o.Tmp, fmt.Sprintf("%s.%s.native", p.Object, v))
			// Compiled once each, outside the timed runs; verified once.
			co := CompileOptions{Opt: v, NoVerify: i > 0}
			if v == "const-maps" || v == "all" {
				co.ConstMaps, co.Maps = benchConstMaps[p.Name], init
			}
			if err := CompileWith(filepath.Join(o.Dir, p.Object), natives[v], co); err != nil {
				return nil, fmt.Errorf("%s --opt %s: %w", p.Name, v, err)
			}
		}
		for r := 0; r < o.Rounds; r++ {
			n := len(AOTVariants)
			order := append(append([]string{}, AOTVariants[r%n:]...), AOTVariants[:r%n]...)
			for _, v := range order {
				res, err := TestRun(TestRunOptions{Object: natives[v], Program: p.Name, Packets: [][]byte{pkt}, Repeat: o.Repeat, Maps: init, NoVerify: true, Engine: "aot"})
				if err != nil {
					return nil, fmt.Errorf("%s --opt %s: %w", p.Name, v, err)
				}
				if cur, ok := row.Ns[v]; !ok || res.NsPerRun < cur {
					row.Ns[v] = res.NsPerRun
				}
				row.Info[v] = res.AOT
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// AOTOptTable renders the rows: ns per run with each option set and its
// ratio to none, then what each option did; markdown selects Markdown.
func AOTOptTable(rows []AOTOptRow, markdown bool) string {
	var b strings.Builder
	head := append([]string{"program"}, AOTVariants...)
	if markdown {
		fmt.Fprintf(&b, "| %s |\n|---|%s\n", strings.Join(head, " | "), strings.Repeat("---:|", len(AOTVariants)))
	} else {
		fmt.Fprintf(&b, "%-16s", head[0])
		for _, h := range head[1:] {
			fmt.Fprintf(&b, " %18s", h)
		}
		b.WriteByte('\n')
	}
	for _, r := range rows {
		cells := []string{r.Program}
		base := r.Ns["none"]
		for _, v := range AOTVariants {
			c := fmt.Sprintf("%.1f", r.Ns[v])
			if v != "none" && base > 0 {
				c += fmt.Sprintf(" (%.2f×)", r.Ns[v]/base)
			}
			cells = append(cells, c)
		}
		if markdown {
			fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
		} else {
			fmt.Fprintf(&b, "%-16s", cells[0])
			for _, c := range cells[1:] {
				fmt.Fprintf(&b, " %18s", c)
			}
			b.WriteByte('\n')
		}
	}
	b.WriteString("\nwhat each option did (with all): checks left out / lookups inline / bpf_csum_diff inline / loads folded\n")
	for _, r := range rows {
		if i := r.Info["all"]; i != nil {
			fmt.Fprintf(&b, "  %-16s %d / %d / %d / %d\n", r.Program, i.ElidedChecks, i.InlinedLookups, i.InlinedCsum, i.FoldedLoads)
		}
	}
	var named []string
	for p, ms := range benchConstMaps {
		named = append(named, p+": "+strings.Join(ms, ", "))
	}
	sort.Strings(named)
	fmt.Fprintf(&b, "ns per run of fastpath-rt's aot engine, best of rounds, per-run overhead included; (×) is the ratio to --opt none; const-maps and all with --const-map %s; %s, %d CPUs\n", strings.Join(named, "; "), runtime.GOARCH, runtime.NumCPU())
	return b.String()
}
