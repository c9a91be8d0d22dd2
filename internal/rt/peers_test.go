package rt

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/bench"
	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// TestPeerHarness builds the peer harness and ubpf (cached per machine) and
// runs every engine on a benchmark program and on the programs of our own:
// each gives fastpath-rt's interpreter's verdict, frame and maps, or says
// why it cannot run the program. An engine that differs fails the test.
func TestPeerHarness(t *testing.T) {
	if os.Getenv("FASTPATH_PEERS") == "" {
		t.Skip("the peer harness and the peers are built on demand, not for make test: make test-peers runs this")
	}
	labtest.RequireKernel(t)
	src, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := PeersDir()
	harness, err := Harness(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	ubpf, err := UbpfLib(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	progs := []PeerProgram{{Name: "xdp_tx", Object: filepath.Join("..", "bench", "xdptx_bpfel.o"), Packet: bench.Sample("xdp_tx")}}
	progs = append(progs, OwnPrograms(".")...)
	engines := []string{"fastpath-interp", "fastpath-jit", "fastpath-aot", "rbpf-interp", "rbpf-jit", "ubpf-interp", "ubpf-jit"}
	ran := map[string]int{}
	for _, p := range progs {
		native := filepath.Join(tmp, p.Name+".native")
		if err := Compile(p.Object, native, true); err != nil {
			t.Fatal(err)
		}
		for _, e := range engines {
			res, err := RunHarness(HarnessOptions{Harness: harness, Object: p.Object, Program: p.Name, Native: native, UbpfLib: ubpf, Packet: p.Packet, Maps: p.Maps, Engines: []string{e}, Repeat: 100, Rounds: 2})
			switch {
			case err != nil && strings.HasPrefix(e, "fastpath-"):
				t.Fatalf("%s on %s: %v", e, p.Name, err)
			case err != nil:
				// A peer that crashes is reported so in the table (rbpf's
				// JIT calls host functions with the stack misaligned).
				t.Logf("%s crashed on %s: %v", e, p.Name, err)
				continue
			}
			if len(res) != 1 {
				t.Fatalf("%s on %s: %d results", e, p.Name, len(res))
			}
			r := res[0]
			switch {
			case r.Differs != "":
				t.Errorf("%s on %s: %s", e, p.Name, r.Differs)
			case r.Error != "":
				t.Logf("%s cannot run %s: %s", e, p.Name, r.Error)
			case r.NsPerRun <= 0:
				t.Errorf("%s on %s: %v ns per run", e, p.Name, r.NsPerRun)
			default:
				ran[e]++
			}
		}
	}
	// Every engine of ours runs everything; each peer runs something.
	for _, e := range engines {
		want := 1
		if strings.HasPrefix(e, "fastpath-") {
			want = len(progs)
		}
		if ran[e] < want {
			t.Errorf("%s ran %d of %d programs", e, ran[e], len(progs))
		}
	}
}

func TestPeersTable(t *testing.T) {
	rows := []PeerRow{
		{Program: "a", Set: "benchmark", KernelNs: 40, KernelEmptyNs: 30, KernelNetNs: 10, Engines: map[string]float64{"fastpath-jit": 8, "rbpf-jit": 9, "ubpf-jit": 7}, Notes: map[string]string{"rbpf-cranelift": "crashed: the harness signal: illegal instruction"}},
		{Program: "b", Set: "benchmark", KernelNs: 50, KernelEmptyNs: 30, KernelNetNs: 20, Engines: map[string]float64{"fastpath-jit": 15, "ubpf-jit": 16}, Notes: map[string]string{"rbpf-jit": "cannot run it: XADD", "rbpf-cranelift": "crashed: the harness signal: illegal instruction"}},
		{Program: "c", Set: "own", Engines: map[string]float64{"fastpath-jit": 5, "x-jit": 4, "x-aot": 3, "fastpath-aot": 3}},
	}
	out := PeersTable(rows, true)
	for _, want := range []string{
		"| a | 40.0 | 10.0 | 8.0 |",
		"–[1]",
		"1. crashed: the harness signal: illegal instruction",
		"2. cannot run it: XADD",
		"the benchmark programs: fastpath jit at or below the kernel's JIT less the empty program's run on 2 of 2",
		"the benchmark programs: fastpath jit at or below rbpf jit on 1 of the 1 it ran",
		"the benchmark programs: fastpath jit at or below ubpf jit on 1 of the 2 it ran",
		"the programs of our own: fastpath aot at or below x aot on 1 of the 1 it ran",
		"the programs of our own: fastpath jit at or below x jit on 0 of the 1 it ran",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// A crate's archive may hold paths that climb out: none is written.
func TestUntarPrefixStaysInside(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range []string{"c-1/lib/x.c", "c-1/lib/../../escape.c", "c-1/other.c"} {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
		tw.Write([]byte("x"))
	}
	tw.Close()
	zw.Close()
	dir := t.TempDir()
	if err := untarPrefix(buf.Bytes(), "c-1/lib/", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "x.c")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escape.c")); err == nil {
		t.Fatal("a path with .. was written")
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "other.c")); err == nil {
		t.Fatal("a file outside the prefix was written")
	}
}
