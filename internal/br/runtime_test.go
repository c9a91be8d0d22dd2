package br

import (
	"bytes"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/bench"
	"github.com/fastpath-dev/fastpath/internal/rt"
)

// TestRuntimeAgrees runs the border router in the kernel and in the
// userspace runtime (both engines) on the table's packets and mutations of
// them, with the maps the control plane filled in the kernel mirrored into
// the runtime: the same verdict and the same output bytes for every packet.
// AES tables, SegID updates, the MAC cache and every verdict path run in
// userspace this way.
func TestRuntimeAgrees(t *testing.T) {
	r := loadTestRouter(t, testConfig())
	cases := routerCases()
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	var frames [][]byte
	for _, n := range names {
		p := cases[n].packet()
		f, err := p.Frame()
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	rng := rand.New(rand.NewPCG(21, 22))
	for i, n := 0, len(frames); i < 400; i++ {
		frames = append(frames, bench.Mutate(rng, frames[rng.IntN(n)]))
	}
	maps, err := rt.MirrorMaps(r.maps)
	if err != nil {
		t.Fatal(err)
	}
	var want []result
	for _, f := range frames {
		want = append(want, r.runOne(t, f))
	}
	actions := map[uint32]int{}
	for _, w := range want {
		actions[w.action]++
	}
	for _, engine := range []string{"interp", "jit"} {
		t.Run(engine, func(t *testing.T) {
			got, err := rt.TestRun(rt.TestRunOptions{Object: "router_bpfel.o", Program: "br_router", Packets: frames, Engine: engine, Maps: maps})
			if err != nil {
				t.Fatal(err)
			}
			for i := range frames {
				g := got.Packets[i]
				if g.Ret != want[i].action || !bytes.Equal(g.Out, want[i].out) {
					t.Fatalf("packet %d: kernel action %d (%s), runtime %d\nkernel  %x\nruntime %x", i, want[i].action, want[i].verdict, g.Ret, want[i].out, g.Out)
				}
			}
			t.Logf("%d packets, actions %v", len(frames), actions)
		})
	}
}
