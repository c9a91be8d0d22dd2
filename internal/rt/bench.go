package rt

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/fastpath-dev/fastpath/internal/bench"
)

// BenchRow is one program's time per execution in the kernel (its JIT,
// through BPF_PROG_TEST_RUN) and in each of the runtime's engines.
type BenchRow struct {
	Program string `json:"program"`
	// KernelNs is the kernel's reported time per run, JIT on.
	KernelNs float64 `json:"kernel_ns"`
	// InterpNs, JitNs and AotNs are the runtime's engines' times per run.
	InterpNs float64 `json:"interp_ns"`
	JitNs    float64 `json:"jit_ns"`
	AotNs    float64 `json:"aot_ns"`
	// Insns are the instructions one run executes.
	Insns float64 `json:"insns"`
	// InterpNsPerInsn is InterpNs over Insns, per-run overhead included.
	InterpNsPerInsn float64 `json:"interp_ns_per_insn"`
}

// BenchOptions configure Bench.
type BenchOptions struct {
	// Repeat is the runs per measurement; the best of Rounds counts.
	Repeat int
	Rounds int
	// Dir holds the benchmark objects (internal/bench).
	Dir string
	// Tmp receives the AOT objects; a temporary directory if empty.
	Tmp string
}

// Bench times every benchmark program on its sample frame, in the kernel
// and in the runtime, in one run.
func Bench(o BenchOptions) ([]BenchRow, error) {
	if o.Repeat < 1 {
		o.Repeat = 100_000
	}
	if o.Rounds < 1 {
		o.Rounds = 3
	}
	if o.Tmp == "" {
		dir, err := os.MkdirTemp("", "fastpath-rt-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Tmp = dir
	}
	var rows []BenchRow
	for _, p := range bench.Programs() {
		pkt := bench.Sample(p.Name)
		prog, coll, err := bench.Load(p.Name)
		if err != nil {
			return nil, err
		}
		var init map[string][]Entry
		for m, es := range bench.Setup(p.Name) {
			for _, e := range es {
				if err := coll.Maps[m].Put(e.Key, e.Value); err != nil {
					coll.Close()
					return nil, fmt.Errorf("%s: set up %s: %w", p.Name, m, err)
				}
				if init == nil {
					init = map[string][]Entry{}
				}
				init[m] = append(init[m], Entry{Key: e.Key, Value: e.Value})
			}
		}
		row := BenchRow{Program: p.Name}
		for r := 0; r < o.Rounds; r++ {
			_, d, err := prog.Benchmark(pkt, o.Repeat, nil)
			if err != nil {
				coll.Close()
				return nil, fmt.Errorf("%s: kernel test run: %w", p.Name, err)
			}
			if ns := float64(d.Nanoseconds()); r == 0 || ns < row.KernelNs {
				row.KernelNs = ns
			}
		}
		coll.Close()
		// The AOT object is compiled once, outside the timed runs.
		native := filepath.Join(o.Tmp, p.Object+".native")
		if err := Compile(filepath.Join(o.Dir, p.Object), native, true); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		best := func(cur *float64, ns float64, r int) {
			if r == 0 || ns < *cur {
				*cur = ns
			}
		}
		for r := 0; r < o.Rounds; r++ {
			// The order turns each round, so that no engine always runs
			// first (or last) on a machine whose speed drifts.
			engines := []string{"interp", "jit", "aot"}
			engines = append(engines[r%3:], engines[:r%3]...)
			for _, engine := range engines {
				obj := filepath.Join(o.Dir, p.Object)
				if engine == "aot" {
					obj = native
				}
				res, err := TestRun(TestRunOptions{Object: obj, Program: p.Name, Packets: [][]byte{pkt}, Repeat: o.Repeat, Maps: init, NoVerify: r > 0, Engine: engine})
				if err != nil {
					return nil, fmt.Errorf("%s: %w", p.Name, err)
				}
				switch engine {
				case "jit":
					best(&row.JitNs, res.NsPerRun, r)
				case "aot":
					best(&row.AotNs, res.NsPerRun, r)
				default:
					if r == 0 || res.NsPerRun < row.InterpNs {
						row.InterpNs, row.Insns = res.NsPerRun, res.InsnsPerRun
					}
				}
			}
		}
		if row.Insns > 0 {
			row.InterpNsPerInsn = row.InterpNs / row.Insns
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// BenchTable renders the rows; markdown selects a Markdown table.
func BenchTable(rows []BenchRow, markdown bool) string {
	var b strings.Builder
	head := []string{"program", "kernel JIT ns", "jit ns", "jit/kernel", "aot ns", "aot/jit", "interp ns", "insns/run", "interp ns/insn"}
	if markdown {
		fmt.Fprintf(&b, "| %s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", strings.Join(head, " | "))
	} else {
		fmt.Fprintf(&b, "%-16s %14s %8s %11s %8s %8s %10s %10s %14s\n", head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7], head[8])
	}
	atOrBelow, aotAtOrBelow := 0, 0
	for _, r := range rows {
		ratio, aot := 0.0, 0.0
		if r.KernelNs > 0 {
			ratio = r.JitNs / r.KernelNs
		}
		if r.JitNs > 0 {
			aot = r.AotNs / r.JitNs
		}
		if ratio <= 1 {
			atOrBelow++
		}
		if aot <= 1 {
			aotAtOrBelow++
		}
		if markdown {
			fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.2f× | %.1f | %.2f× | %.1f | %.0f | %.2f |\n", r.Program, r.KernelNs, r.JitNs, ratio, r.AotNs, aot, r.InterpNs, r.Insns, r.InterpNsPerInsn)
		} else {
			fmt.Fprintf(&b, "%-16s %14.1f %8.1f %10.2f× %8.1f %7.2f× %10.1f %10.0f %14.2f\n", r.Program, r.KernelNs, r.JitNs, ratio, r.AotNs, aot, r.InterpNs, r.Insns, r.InterpNsPerInsn)
		}
	}
	fmt.Fprintf(&b, "\njit at or below the kernel's JIT on %d of %d programs; aot at or below the jit on %d of %d\n", atOrBelow, len(rows), aotAtOrBelow, len(rows))
	fmt.Fprintf(&b, "best of rounds; kernel: BPF_PROG_TEST_RUN with its JIT; jit, aot and interp: fastpath-rt's engines, per-run overhead included; %s, %d CPUs\n", runtime.GOARCH, runtime.NumCPU())
	return b.String()
}
