package fw

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// onOneCPU runs fn on CPU 0 only: the flow table is per CPU, and a test
// that counts what it holds must not have its packets spread over CPUs.
func onOneCPU(t *testing.T, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &old)
	fn()
}

// TestFlowTableUnderFlood: flows that come back are tracked with every
// packet counted, a flood of one-packet flows writes no flow state (it
// neither takes ways nor pushes the busy flows out), and a table filled to
// its size holds most of it (4 ways a set: about 80% with random hashes,
// the rest in sets that got more than 4 flows).
func TestFlowTableUnderFlood(t *testing.T) {
	const maxFlows = 4096
	f, err := Load(LoadOptions{MaxFlows: maxFlows})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := ParseRules("t.toml", []byte("default = \"pass\"\n[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/8\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Install(rs); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	tracked := func() (map[Flow]FlowStats, int) {
		t.Helper()
		flows, err := f.Flows()
		if err != nil {
			t.Fatal(err)
		}
		m := map[Flow]FlowStats{}
		for _, fs := range flows {
			m[fs.Flow] = fs
		}
		return m, len(flows)
	}
	busy := make([]Flow, maxFlows/4)
	for i := range busy {
		busy[i] = RandomFlow(rng, i%2 == 1)
	}
	flood := make([][]byte, 50000)
	for i := range flood {
		flood[i] = packet(t, RandomFlow(rng, i%2 == 1), 64)
	}
	prog := benchProgram(t, f, flood)
	onOneCPU(t, func() {
		for range 3 {
			for _, fl := range busy {
				run(t, f, packet(t, fl, 64))
			}
		}
		m, n := tracked()
		held := 0
		for _, fl := range busy {
			if fs, ok := m[fl]; ok {
				held++
				if want := uint64(len(packet(t, fl, 64))); fs.Packets != 3 || fs.Bytes != 3*want {
					t.Fatalf("flow %s: %d packets, %d bytes; want 3 and %d (the first counted when it came back)", fl, fs.Packets, fs.Bytes, 3*want)
				}
			}
		}
		// A quarter of the size in random sets: about 2% of the flows
		// land in a set that got more than its 4 ways' worth.
		if held < len(busy)*95/100 || n != held {
			t.Fatalf("%d of %d busy flows tracked, %d flows in the table", held, len(busy), n)
		}
		// The flood, one run on this CPU: 50,000 flows of one packet.
		if _, _, err := prog.Benchmark(flood[0], len(flood), nil); err != nil {
			t.Fatal(err)
		}
		m, n = tracked()
		still := 0
		for _, fl := range busy {
			if _, ok := m[fl]; ok {
				still++
			}
		}
		// A flood flow is tracked only when its 15-bit tag equals the one
		// left in its seen slot: about one in 32,768.
		if still != held || n-still > len(flood)/1000 {
			t.Fatalf("after the flood: %d of %d busy flows still tracked, %d flood flows tracked", still, held, n-still)
		}
	})
	// Filled to its size: ways left empty only where a set got fewer
	// than 4 of the flows, and none beyond the size.
	g, err := Load(LoadOptions{MaxFlows: maxFlows})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Install(rs); err != nil {
		t.Fatal(err)
	}
	onOneCPU(t, func() {
		// Each flow 4 times, in random order, as flows interleave.
		var order []int
		for i := range maxFlows {
			order = append(order, i, i, i, i)
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			run(t, g, packet(t, RandomFlow(rand.New(rand.NewPCG(uint64(i), 1)), false), 64))
		}
		flows, err := g.Flows()
		if err != nil {
			t.Fatal(err)
		}
		if len(flows) < maxFlows*3/4 || len(flows) > maxFlows {
			t.Fatalf("%d flows tracked of %d, want 75%%–100%% of the table's %d", len(flows), maxFlows, maxFlows)
		}
		t.Logf("%d of %d flows held (%.0f%%)", len(flows), maxFlows, 100*float64(len(flows))/maxFlows)
	})
}
