package rt

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/bench"
	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// TestFirewallConformance runs our firewall's object (no rules loaded: the
// data path parses, tracks and counts every frame and passes it) on the
// corpus and its mutations, in the kernel and in both engines: same verdicts
// and output. Its maps hold timestamps, so they are not compared.
func TestFirewallConformance(t *testing.T) {
	labtest.RequireKernel(t)
	f, err := fw.Load(fw.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(8, 9))
	corpus := bench.Corpus()
	pkts := append([][]byte{}, corpus...)
	for i := 0; i < 300; i++ {
		pkts = append(pkts, bench.Mutate(rng, corpus[rng.IntN(len(corpus))]))
	}
	var want []PacketResult
	for _, p := range pkts {
		opts := &ebpf.RunOptions{Data: p, DataOut: make([]byte, 4096)}
		ret, err := f.Program().Run(opts)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, PacketResult{Ret: ret, Out: opts.DataOut})
	}
	verdicts := map[uint32]int{}
	for _, w := range want {
		verdicts[w.Ret]++
	}
	if len(verdicts) < 2 {
		t.Fatalf("the corpus takes one path only: %v", verdicts)
	}
	for _, engine := range []string{"interp", "jit", "aot"} {
		t.Run(engine, func(t *testing.T) {
			got, err := TestRun(TestRunOptions{Object: "../fw/fw_bpfel.o", Program: "fw_xdp", Packets: pkts, Engine: engine})
			if err != nil {
				t.Fatal(err)
			}
			for i := range pkts {
				if got.Packets[i].Ret != want[i].Ret || !bytes.Equal(got.Packets[i].Out, want[i].Out) {
					t.Fatalf("packet %d: verdict %d in the kernel, %d in the runtime", i, want[i].Ret, got.Packets[i].Ret)
				}
			}
			t.Logf("%d packets, verdicts %v", len(pkts), verdicts)
		})
	}
}
