package rt

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/fastpath-dev/fastpath/internal/bench"
)

// PeerEngines are the columns of the side-by-side table, in order: the JITs
// and AOTs first, then the interpreters.
var PeerEngines = []string{"fastpath-jit", "fastpath-aot", "rbpf-jit", "rbpf-cranelift", "ubpf-jit", "fastpath-interp", "rbpf-interp", "ubpf-interp"}

// PeerRow is one program in every engine.
type PeerRow struct {
	Program string `json:"program"`
	// Set is "empty" (the program that only returns XDP_PASS), "benchmark"
	// or "own" (written for no engine in particular).
	Set string `json:"set"`
	// KernelNs is BPF_PROG_TEST_RUN's time per run with the kernel's JIT;
	// KernelEmptyNs the same for a program that only returns XDP_PASS, on
	// the same frame; KernelNetNs the first less the second: the program's
	// own time, comparable with the userspace engines'.
	KernelNs      float64 `json:"kernel_ns"`
	KernelEmptyNs float64 `json:"kernel_empty_ns"`
	KernelNetNs   float64 `json:"kernel_net_ns"`
	// Engines holds each engine's best ns per run; Notes why an engine has
	// no figure (it could not run the program, or its result differed).
	Engines map[string]float64 `json:"engines"`
	Notes   map[string]string  `json:"notes,omitempty"`
}

// PeersOptions configure BenchPeers.
type PeersOptions struct {
	BenchOptions
	// Src is fastpath's source tree (for the harness's crate).
	Src string
	// UbpfLib replaces the ubpf the lab builds (a newer build, say).
	UbpfLib string
	// Plugins are further engines: name → shared library.
	Plugins map[string]string
	// Programs limits the run to these benchmark programs.
	Programs []string
	// Extra are more programs to run: objects of the caller's own, each
	// with the sample frame and maps to run them on.
	Extra []PeerProgram
}

// PeerProgram is a program outside the benchmark set.
type PeerProgram struct {
	Name, Object string
	// Set names the rows' group in the table ("own" if empty).
	Set    string
	Packet []byte
	Maps   map[string][]Entry
}

// emptyXDP returns XDP_PASS and nothing else: what the kernel's test run
// costs without a program.
func emptyXDP() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
		License:      "GPL",
	})
}

// BenchPeers runs every benchmark program (and o.Extra) in the kernel and
// in every engine of the harness, round after round, the engines' order
// turning each round and the kernel's place with it; the best round counts.
func BenchPeers(o PeersOptions) ([]PeerRow, error) {
	if o.Repeat < 1 {
		o.Repeat = 100_000
	}
	if o.Rounds < 1 {
		o.Rounds = 3
	}
	dir := PeersDir()
	harness, err := Harness(o.Src, dir)
	if err != nil {
		return nil, err
	}
	ubpf := o.UbpfLib
	if ubpf == "" {
		if ubpf, err = UbpfLib(dir); err != nil {
			return nil, err
		}
	}
	if o.Tmp == "" {
		t, err := os.MkdirTemp("", "fastpath-rt-peers-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(t)
		o.Tmp = t
	}
	empty, err := emptyXDP()
	if err != nil {
		return nil, fmt.Errorf("loading an empty XDP program: %w", err)
	}
	defer empty.Close()

	engines := append([]string{}, PeerEngines...)
	names := make([]string, 0, len(o.Plugins))
	for n := range o.Plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		engines = append(engines, n+"-jit", n+"-aot")
	}

	// First, a program that does nothing (the lab's): each engine's fixed
	// cost per run.
	progs := []PeerProgram{{Name: "lab_pass", Set: "empty", Object: filepath.Join(filepath.Dir(o.Dir), "lab", "pass_bpfel.o"), Packet: bench.Sample("xdp_tx")}}
	for _, p := range bench.Programs() {
		if len(o.Programs) > 0 && !slices.Contains(o.Programs, p.Name) {
			continue
		}
		init := map[string][]Entry{}
		for m, es := range bench.Setup(p.Name) {
			for _, e := range es {
				init[m] = append(init[m], Entry{Key: e.Key, Value: e.Value})
			}
		}
		progs = append(progs, PeerProgram{Name: p.Name, Set: "benchmark", Object: filepath.Join(o.Dir, p.Object), Packet: bench.Sample(p.Name), Maps: init})
	}
	progs = append(progs, o.Extra...)

	var rows []PeerRow
	for _, p := range progs {
		row := PeerRow{Program: p.Name, Set: p.Set, Engines: map[string]float64{}, Notes: map[string]string{}}
		if row.Set == "" {
			row.Set = "own"
		}
		kprog, coll, err := loadForKernel(p)
		if err != nil {
			return nil, err
		}
		native := filepath.Join(o.Tmp, filepath.Base(p.Object)+".native")
		if err := Compile(p.Object, native, true); err != nil {
			coll.Close()
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		kernel := func(r int) error {
			_, d, err := kprog.Benchmark(p.Packet, o.Repeat, nil)
			if err != nil {
				return fmt.Errorf("%s: kernel test run: %w", p.Name, err)
			}
			_, e, err := empty.Benchmark(p.Packet, o.Repeat, nil)
			if err != nil {
				return fmt.Errorf("%s: kernel test run of the empty program: %w", p.Name, err)
			}
			ns, en := float64(d.Nanoseconds()), float64(e.Nanoseconds())
			if r == 0 || ns < row.KernelNs {
				row.KernelNs = ns
			}
			if r == 0 || en < row.KernelEmptyNs {
				row.KernelEmptyNs = en
			}
			return nil
		}
		// Each engine runs in a harness process of its own, so that one
		// that crashes on a program is reported, not fatal; the kernel
		// takes its turn among them.
		slots := append([]string{"kernel"}, engines...)
		for r := 0; r < o.Rounds; r++ {
			for k := range slots {
				e := slots[(k+r)%len(slots)]
				if e == "kernel" {
					if err := kernel(r); err != nil {
						coll.Close()
						return nil, err
					}
					continue
				}
				if _, failed := row.Notes[e]; failed {
					continue
				}
				res, err := RunHarness(HarnessOptions{Harness: harness, Object: p.Object, Program: p.Name, Native: native, UbpfLib: ubpf, Packet: p.Packet, Maps: p.Maps, Engines: []string{e}, Plugins: o.Plugins, Repeat: o.Repeat, Rounds: 1})
				if err != nil {
					row.Notes[e] = "crashed: " + err.Error()
					continue
				}
				for _, x := range res {
					switch {
					case x.Error != "":
						row.Notes[x.Engine] = "cannot run it: " + x.Error
					case x.Differs != "":
						row.Notes[x.Engine] = "wrong result: " + x.Differs
					default:
						if cur, ok := row.Engines[x.Engine]; !ok || x.NsPerRun < cur {
							row.Engines[x.Engine] = x.NsPerRun
						}
					}
				}
			}
		}
		coll.Close()
		// An engine with a note in any round has no figure.
		for e := range row.Notes {
			delete(row.Engines, e)
		}
		row.KernelNetNs = max(row.KernelNs-row.KernelEmptyNs, 0)
		rows = append(rows, row)
	}
	return rows, nil
}

// loadForKernel loads a program with its maps filled, for the test run.
func loadForKernel(p PeerProgram) (*ebpf.Program, *ebpf.Collection, error) {
	spec, err := ebpf.LoadCollectionSpec(p.Object)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: loading into the kernel: %w", p.Name, err)
	}
	prog := coll.Programs[p.Name]
	if prog == nil {
		coll.Close()
		return nil, nil, fmt.Errorf("%s: no program %s in %s", p.Name, p.Name, p.Object)
	}
	for m, es := range p.Maps {
		for _, e := range es {
			if err := coll.Maps[m].Put(e.Key, e.Value); err != nil {
				coll.Close()
				return nil, nil, fmt.Errorf("%s: set up %s: %w", p.Name, m, err)
			}
		}
	}
	return prog, coll, nil
}

// peerLabel is a column's heading.
func peerLabel(e string) string {
	return strings.ReplaceAll(e, "-", " ")
}

// PeersTable renders the rows with the goals' counts below; markdown
// selects a Markdown table. An engine without a figure shows a dash and a
// numbered note.
func PeersTable(rows []PeerRow, markdown bool) string {
	var engines []string
	seen := map[string]bool{}
	for _, e := range PeerEngines {
		seen[e] = true
		engines = append(engines, e)
	}
	for _, r := range rows {
		var extra []string
		for e := range r.Engines {
			if !seen[e] {
				extra = append(extra, e)
			}
		}
		for e := range r.Notes {
			if !seen[e] {
				extra = append(extra, e)
			}
		}
		sort.Strings(extra)
		for _, e := range extra {
			if !seen[e] {
				seen[e] = true
				engines = append(engines, e)
			}
		}
	}
	var b strings.Builder
	head := []string{"program", "kernel JIT", "kernel − empty"}
	for _, e := range engines {
		head = append(head, peerLabel(e))
	}
	var notes []string
	noteOf := map[string]int{}
	cell := func(r PeerRow, e string) string {
		if ns, ok := r.Engines[e]; ok {
			return fmt.Sprintf("%.1f", ns)
		}
		why, ok := r.Notes[e]
		if !ok {
			return "–"
		}
		n, ok := noteOf[why]
		if !ok {
			notes = append(notes, why)
			n = len(notes)
			noteOf[why] = n
		}
		return fmt.Sprintf("–[%d]", n)
	}
	if markdown {
		fmt.Fprintf(&b, "| %s |\n|---|%s\n", strings.Join(head, " | "), strings.Repeat("---:|", len(head)-1))
	} else {
		fmt.Fprintf(&b, "%-16s", head[0])
		for _, h := range head[1:] {
			fmt.Fprintf(&b, " %15s", h)
		}
		b.WriteString("\n")
	}
	for _, r := range rows {
		cells := []string{r.Program, fmt.Sprintf("%.1f", r.KernelNs), fmt.Sprintf("%.1f", r.KernelNetNs)}
		for _, e := range engines {
			cells = append(cells, cell(r, e))
		}
		if markdown {
			fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
		} else {
			fmt.Fprintf(&b, "%-16s", cells[0])
			for _, c := range cells[1:] {
				fmt.Fprintf(&b, " %15s", c)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
	for _, line := range PeerGoals(rows, engines) {
		if markdown {
			b.WriteString("- ")
		}
		b.WriteString(line + "\n")
	}
	if len(notes) > 0 {
		b.WriteString("\n")
		for i, n := range notes {
			if markdown {
				fmt.Fprintf(&b, "%d. %s\n", i+1, n)
			} else {
				fmt.Fprintf(&b, "[%d] %s\n", i+1, n)
			}
		}
	}
	fmt.Fprintf(&b, "\nns per run, best of rounds, the engines' order turning each round; kernel: BPF_PROG_TEST_RUN with its JIT, and less the same for a program that only returns XDP_PASS; %s, %d CPUs\n", runtime.GOARCH, runtime.NumCPU())
	return b.String()
}

// PeerGoals counts, per engine and per set of programs (the benchmark
// programs, then those of our own), the programs where fastpath's JIT (its
// AOT against other AOTs, its interpreter against interpreters) is at or
// below the engine's figure, out of those both ran.
func PeerGoals(rows []PeerRow, engines []string) []string {
	var out []string
	for _, set := range []string{"benchmark", "own"} {
		var rs []PeerRow
		for _, r := range rows {
			if r.Set == set {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		what := "the benchmark programs"
		if set == "own" {
			what = "the programs of our own"
		}
		count := func(ours, theirs string) (int, int) {
			at, of := 0, 0
			for _, r := range rs {
				a, ok1 := r.Engines[ours]
				t, ok2 := r.Engines[theirs]
				if ok1 && ok2 {
					of++
					if a <= t {
						at++
					}
				}
			}
			return at, of
		}
		kat, kof := 0, 0
		for _, r := range rs {
			if a, ok := r.Engines["fastpath-jit"]; ok {
				kof++
				if a <= r.KernelNetNs {
					kat++
				}
			}
		}
		out = append(out, fmt.Sprintf("%s: fastpath jit at or below the kernel's JIT less the empty program's run on %d of %d", what, kat, kof))
		// Both less their own empty run: the program's own time in each.
		for _, e := range rows {
			base, ok := e.Engines["fastpath-jit"]
			if e.Set != "empty" || !ok {
				continue
			}
			at, of := 0, 0
			for _, r := range rs {
				if a, ok := r.Engines["fastpath-jit"]; ok {
					of++
					if a-base <= r.KernelNetNs {
						at++
					}
				}
			}
			out = append(out, fmt.Sprintf("%s: fastpath jit less its empty run at or below the kernel's JIT less its empty run on %d of %d", what, at, of))
		}
		for _, e := range engines {
			var ours string
			switch {
			case strings.HasPrefix(e, "fastpath-"):
				continue
			case strings.HasSuffix(e, "-aot"):
				ours = "fastpath-aot"
			case strings.HasSuffix(e, "-interp"):
				ours = "fastpath-interp"
			default:
				ours = "fastpath-jit"
			}
			at, of := count(ours, e)
			out = append(out, fmt.Sprintf("%s: %s at or below %s on %d of the %d it ran", what, peerLabel(ours), peerLabel(e), at, of))
		}
	}
	return out
}
