package rt

import (
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/bench"
	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// TestOwnPrograms runs the programs written for no engine in particular in
// the kernel and in each of the runtime's engines: on the frames that take
// their paths, on the benchmark corpus and on mutations of both. Verdicts,
// output frames and maps must be the kernel's.
func TestOwnPrograms(t *testing.T) {
	labtest.RequireKernel(t)
	if _, err := Binary(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, p := range Own(".") {
		pkts := append([][]byte{}, p.Frames...)
		pkts = append(pkts, bench.Corpus()...)
		for i := 0; i < 200; i++ {
			pkts = append(pkts, bench.Mutate(rng, pkts[rng.IntN(len(p.Frames))]))
		}
		for _, engine := range []string{"interp", "jit", "aot"} {
			t.Run(p.Name+"/"+engine, func(t *testing.T) {
				spec, err := ebpf.LoadCollectionSpec(p.Object)
				if err != nil {
					t.Fatal(err)
				}
				coll, err := ebpf.NewCollection(spec)
				if err != nil {
					t.Fatal(err)
				}
				defer coll.Close()
				for m, es := range p.Maps {
					for _, e := range es {
						if err := coll.Maps[m].Put(e.Key, e.Value); err != nil {
							t.Fatal(err)
						}
					}
				}
				want, wantMaps := runInKernel(t, coll.Programs[p.Name], coll.Maps, pkts)
				got, err := TestRun(TestRunOptions{Object: p.Object, Program: p.Name, Packets: pkts, Maps: p.Maps, DumpMaps: true, Engine: engine})
				if err != nil {
					t.Fatal(err)
				}
				requireSame(t, pkts, want, wantMaps, got)
				verdicts := map[uint32]bool{}
				for _, w := range want[:len(p.Frames)] {
					verdicts[w.Ret] = true
				}
				if len(verdicts) < 2 {
					t.Fatalf("the program's own frames all got one verdict (%v): they take none of its other paths", verdicts)
				}
			})
		}
	}
}
