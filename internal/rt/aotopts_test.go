package rt

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/bench"
)

// TestAOTOptsConform runs every benchmark program as AOT objects compiled
// with each option set on the conformance corpus, and compares verdicts,
// output frames, ring buffer records and maps with the JIT's. Each
// option must have fired somewhere in the benchmark set.
func TestAOTOptsConform(t *testing.T) {
	if _, err := Binary(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 5))
	corpus := bench.Corpus()
	pkts := append([][]byte{}, corpus...)
	for i := 0; i < 300; i++ {
		pkts = append(pkts, bench.Mutate(rng, corpus[rng.IntN(len(corpus))]))
	}
	dir := t.TempDir()
	fired := AOTInfo{}
	for _, p := range bench.Programs() {
		init := setupEntries(p.Name)
		obj := filepath.Join("..", "bench", p.Object)
		jit, err := TestRun(TestRunOptions{Object: obj, Program: p.Name, Packets: pkts, Maps: init, DumpMaps: true, Engine: "jit"})
		if err != nil {
			t.Fatalf("%s jit: %v", p.Name, err)
		}
		for _, v := range AOTVariants {
			t.Run(p.Name+"/"+v, func(t *testing.T) {
				native := filepath.Join(dir, p.Object+"."+v+".native")
				if err := CompileWith(obj, native, CompileOptions{Opt: v, NoVerify: true}); err != nil {
					t.Fatal(err)
				}
				got, err := TestRun(TestRunOptions{Object: native, Program: p.Name, Packets: pkts, Maps: init, DumpMaps: true, Engine: "aot", NoVerify: true})
				if err != nil {
					t.Fatal(err)
				}
				want := v
				if v == "all" {
					want = "typed-values,inline-helpers,const-maps"
				}
				if got.AOT == nil || got.AOT.Opts != want {
					t.Fatalf("test-run reports %+v for --opt %s", got.AOT, v)
				}
				fired.ElidedChecks += got.AOT.ElidedChecks
				fired.InlinedLookups += got.AOT.InlinedLookups
				fired.InlinedCsum += got.AOT.InlinedCsum
				if v == "none" && got.AOT.ElidedChecks+got.AOT.InlinedLookups+got.AOT.InlinedCsum+got.AOT.FoldedLoads != 0 {
					t.Fatalf("--opt none did something: %+v", got.AOT)
				}
				requireSame(t, pkts, jit.Packets, jit.Maps, got)
			})
		}
	}
	if fired.ElidedChecks == 0 || fired.InlinedLookups == 0 || fired.InlinedCsum == 0 {
		t.Fatalf("an option never fired on the benchmark programs: %+v", fired)
	}
}

// setupEntries is a benchmark program's map setup, as test-run takes it.
func setupEntries(name string) map[string][]Entry {
	init := map[string][]Entry{}
	for m, es := range bench.Setup(name) {
		for _, e := range es {
			init[m] = append(init[m], Entry{Key: e.Key, Value: e.Value})
		}
	}
	return init
}

// TestAOTConstMap compiles xdp_lb with its config array compiled in: the
// same results as the JIT on the corpus while the map holds what it was
// compiled with, and a refused run once it holds anything else.
func TestAOTConstMap(t *testing.T) {
	if _, err := Binary(); err != nil {
		t.Fatal(err)
	}
	const name = "xdp_lb"
	var obj string
	for _, p := range bench.Programs() {
		if p.Name == name {
			obj = filepath.Join("..", "bench", p.Object)
		}
	}
	init := setupEntries(name)
	native := filepath.Join(t.TempDir(), "lb.native")
	if err := CompileWith(obj, native, CompileOptions{ConstMaps: []string{"lb_config"}, Maps: init, NoVerify: true}); err != nil {
		t.Fatal(err)
	}
	pkts := bench.Corpus()
	jit, err := TestRun(TestRunOptions{Object: obj, Program: name, Packets: pkts, Maps: init, DumpMaps: true, Engine: "jit", NoVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := TestRun(TestRunOptions{Object: native, Program: name, Packets: pkts, Maps: init, DumpMaps: true, Engine: "aot", NoVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.AOT.FoldedLoads == 0 || strings.Join(got.AOT.ConstMaps, ",") != "lb_config" {
		t.Fatalf("lb_config not compiled in: %+v", got.AOT)
	}
	requireSame(t, pkts, jit.Packets, jit.Maps, got)
	// The VIP changed after compiling: the object must not run.
	changed := map[string][]Entry{}
	for m, es := range init {
		changed[m] = es
	}
	cfg := append([]byte{}, init["lb_config"][0].Value...)
	cfg[0] ^= 1
	changed["lb_config"] = []Entry{{Key: init["lb_config"][0].Key, Value: cfg}}
	_, err = TestRun(TestRunOptions{Object: native, Program: name, Packets: pkts, Maps: changed, Engine: "aot", NoVerify: true})
	if err == nil || !strings.Contains(err.Error(), "map lb_config is compiled in as a constant") {
		t.Fatalf("a changed constant map ran: %v", err)
	}
	// Not at all given (zeros): refused too.
	delete(changed, "lb_config")
	if _, err := TestRun(TestRunOptions{Object: native, Program: name, Packets: pkts, Maps: changed, Engine: "aot", NoVerify: true}); err == nil {
		t.Fatal("an empty constant map ran")
	}
}
