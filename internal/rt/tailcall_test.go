package rt

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/bench"
	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// TestTailCalls: taken to DROP, taken to TX, and not taken (an empty slot),
// in the kernel and in both engines, with the per-program run counts.
func TestTailCalls(t *testing.T) {
	labtest.RequireKernel(t)
	pkts := bench.Corpus()
	var objs tailcallObjects
	if err := loadTailcallObjects(&objs, nil); err != nil {
		t.Fatalf("%+v", err)
	}
	defer objs.Close()
	for i, p := range []*ebpf.Program{objs.TcDrop, objs.TcTx} {
		if err := objs.Jump.Put(uint32(i), p); err != nil {
			t.Fatal(err)
		}
	}
	var want []uint32
	for _, p := range pkts {
		ret, err := objs.TcEntry.Run(&ebpf.RunOptions{Data: p})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ret)
	}
	var wantRuns []uint64
	for i := uint32(0); i < 3; i++ {
		var n uint64
		if err := objs.Runs.Lookup(i, &n); err != nil {
			t.Fatal(err)
		}
		wantRuns = append(wantRuns, n)
	}
	if wantRuns[1] == 0 || wantRuns[2] == 0 || wantRuns[0] == wantRuns[1]+wantRuns[2] {
		t.Fatalf("the corpus does not take every path: runs %v", wantRuns)
	}
	key := func(i uint32) []byte { return binary.LittleEndian.AppendUint32(nil, i) }
	for _, engine := range []string{"interp", "jit", "aot"} {
		t.Run(engine, func(t *testing.T) {
			got, err := TestRun(TestRunOptions{
				Object: "tailcall_bpfel.o", Program: "tc_entry", Packets: pkts, Engine: engine, DumpMaps: true,
				Maps: map[string][]Entry{"jump": {{Key: key(0), Prog: "tc_drop"}, {Key: key(1), Prog: "tc_tx"}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range got.Packets {
				if p.Ret != want[i] {
					t.Fatalf("packet %d (%d bytes): verdict %d, the kernel's %d", i, len(pkts[i]), p.Ret, want[i])
				}
			}
			var runs []uint64
			for _, e := range got.Maps["runs"].Entries {
				runs = append(runs, binary.LittleEndian.Uint64(e.Value))
			}
			if fmt.Sprint(runs) != fmt.Sprint(wantRuns) {
				t.Fatalf("runs per program %v, the kernel's %v", runs, wantRuns)
			}
		})
		// Repeated runs on each frame: a run after a taken tail call starts
		// at the entry again, with a fresh count of tail calls.
		t.Run(engine+"/repeat", func(t *testing.T) {
			// More runs than the 33 tail calls a run may take.
			const repeat = 40
			got, err := TestRun(TestRunOptions{
				Object: "tailcall_bpfel.o", Program: "tc_entry", Packets: pkts, Engine: engine, DumpMaps: true, Repeat: repeat,
				Maps: map[string][]Entry{"jump": {{Key: key(0), Prog: "tc_drop"}, {Key: key(1), Prog: "tc_tx"}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range got.Packets {
				if p.Ret != want[i] {
					t.Fatalf("packet %d (%d bytes): verdict %d after %d runs, the kernel's %d", i, len(pkts[i]), p.Ret, repeat, want[i])
				}
			}
			var runs []uint64
			for _, e := range got.Maps["runs"].Entries {
				runs = append(runs, binary.LittleEndian.Uint64(e.Value)/repeat)
			}
			if fmt.Sprint(runs) != fmt.Sprint(wantRuns) {
				t.Fatalf("runs per program, over %d runs, %v, the kernel's %v", repeat, runs, wantRuns)
			}
		})
	}
}
