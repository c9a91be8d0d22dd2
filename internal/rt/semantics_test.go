package rt

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/bench"
	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// randomFrames makes n frames of random bytes, their lengths drawn from
// sizes (a length or a range as two values).
func randomFrames(rng *rand.Rand, n int, lengths ...int) [][]byte {
	var out [][]byte
	for i := 0; i < n; i++ {
		l := lengths[rng.IntN(len(lengths))]
		if l < 0 { // a range: -max
			l = 14 + rng.IntN(-l-14)
		}
		f := make([]byte, l)
		for j := range f {
			f[j] = byte(rng.Uint32())
		}
		out = append(out, f)
	}
	return out
}

// TestKernelSemantics runs programs written to show where a userspace
// runtime may differ from the kernel, in the kernel (BPF_PROG_TEST_RUN)
// and in both engines, comparing verdicts, errnos, output bytes and maps:
//   - bpf_csum_diff's raw result, folded as the running kernel folds it;
//   - program arrays and maps of maps filled by `.maps` initialisers;
//   - LPM trie keys as the last update wrote them;
//   - frames shorter than an Ethernet header (EINVAL), 9000-byte frames as
//     multi-buffer frames (bpf_xdp_get_buff_len, load/store_bytes and
//     adjust_tail across pages), frames with too many pages (ENOMEM);
//   - bpf_loop over its limit (-E2BIG, a 32-bit value);
//   - an object whose .text has functions the program never calls, global
//     and static (only what the entry reaches is linked).
func TestKernelSemantics(t *testing.T) {
	labtest.RequireKernel(t)
	rng := rand.New(rand.NewPCG(12, 13))
	// Frame lengths: short, ordinary, around the linear part's end
	// (3520 bytes), jumbo, and more pages than a frame may have.
	big := []int{0, 1, 13, 14, 60, -1500, 3519, 3520, 3521, 4000, 7616, 7617, 9000, 9000, 16000, 73152, 73153, 80000}
	cases := []struct {
		name, object, prog string
		pkts               [][]byte
	}{
		{"csum_diff", "csum_bpfel.o", "csum_diff_raw", randomFrames(rng, 300, 64, -700, 1200)},
		{"prog array and map of maps initialisers", "progarray_bpfel.o", "pa_entry", bench.Corpus()},
		{"lpm keys", "lpm_bpfel.o", "lpm_update", randomFrames(rng, 400, 32, -100)},
		{"multi-buffer frames", "frags_bpfel.o", "frags_mb", randomFrames(rng, 150, big...)},
		{"plain program on big frames", "frags_bpfel.o", "frags_linear", randomFrames(rng, 150, big...)},
		{"bpf_loop limit", "loop_bpfel.o", "loop_ret", randomFrames(rng, 100, 16, 64)},
		{"functions never called", "unused_bpfel.o", "unused_entry", randomFrames(rng, 60, -300)},
		{"short frames", filepath.Join("..", "bench", "xdptx_bpfel.o"), "xdp_tx", randomFrames(rng, 40, 0, 1, 7, 13, 14, 15, 60)},
	}
	for _, c := range cases {
		spec, err := ebpf.LoadCollectionSpec(c.object)
		if err != nil {
			t.Fatal(err)
		}
		for _, engine := range []string{"interp", "jit", "aot"} {
			t.Run(c.name+"/"+engine, func(t *testing.T) {
				coll, err := ebpf.NewCollection(spec)
				if err != nil {
					t.Fatalf("%+v", err)
				}
				defer coll.Close()
				want, wantMaps := runInKernel(t, coll.Programs[c.prog], coll.Maps, c.pkts)
				got, err := TestRun(TestRunOptions{Object: c.object, Program: c.prog, Packets: c.pkts, DumpMaps: true, Engine: engine})
				if err != nil {
					t.Fatal(err)
				}
				requireSame(t, c.pkts, want, wantMaps, got)
			})
		}
	}
}

// TestInitialisersTaken: the `.maps` initialisers are used, not merely
// loaded: the corpus reaches both filled slots and an empty one of the
// program array, and counts through the one inner map the map of maps holds.
func TestInitialisersTaken(t *testing.T) {
	labtest.RequireKernel(t)
	got, err := TestRun(TestRunOptions{Object: "progarray_bpfel.o", Program: "pa_entry", Packets: bench.Corpus(), DumpMaps: true})
	if err != nil {
		t.Fatal(err)
	}
	verdicts := map[uint32]int{}
	for _, p := range got.Packets {
		verdicts[p.Ret]++
	}
	if verdicts[1] == 0 || verdicts[3] == 0 || verdicts[2] == 0 {
		t.Fatalf("verdicts %v: want DROP (slot 0), TX (slot 2) and PASS (empty slots)", verdicts)
	}
	count := func(m string) uint64 { return binary.LittleEndian.Uint64(got.Maps[m].Entries[0].Value) }
	if count("pa_count_a") != 0 || count("pa_count_b") == 0 {
		t.Fatalf("counters a=%d b=%d: only b is in the map of maps", count("pa_count_a"), count("pa_count_b"))
	}
}

// TestCsumDiffSemanticsByVersion: with --kernel the runtime computes
// bpf_csum_diff as that kernel did: the raw 32-bit sum up to 6.12, folded
// to 16 bits from 6.13, as the running kernel (6.13 or later) also does.
func TestCsumDiffSemanticsByVersion(t *testing.T) {
	labtest.RequireKernel(t)
	pkt := make([]byte, 64)
	// to = 12 bytes at 16, from = 0: sizes 0 and 12; seed 0.
	pkt[0], pkt[1] = 0, 3
	copy(pkt[16:], []byte{0x78, 0x56, 0x34, 0x12, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0})
	for _, c := range []struct {
		kernel string
		want   uint64
	}{
		// 0x12345678 + 0xffffffff + 1, end-around carry: 0x12345679.
		{"6.12", 0x12345679},
		// from32to16(0x12345679): 0x1234 + 0x5679 = 0x68ad.
		{"6.13", 0x68ad},
	} {
		got, err := TestRun(TestRunOptions{Object: "csum_bpfel.o", Packets: [][]byte{pkt}, DumpMaps: true, Kernel: c.kernel})
		if err != nil {
			t.Fatal(err)
		}
		first := binary.LittleEndian.Uint64(got.Maps["rt_log"].Entries[0].Value)
		if first != c.want {
			t.Errorf("--kernel %s: bpf_csum_diff gave %#x, want %#x (%s)", c.kernel, first, c.want, got.Semantics)
		}
		if !bytes.Contains([]byte(got.Semantics), []byte("kernel "+c.kernel)) {
			t.Errorf("--kernel %s: semantics %q", c.kernel, got.Semantics)
		}
	}
}

// TestAOTBoundToItsELF: an AOT object runs only with the ELF object it was
// compiled from; a changed ELF at the recorded path is refused by hash, and
// naming another ELF (--elf) is refused too.
func TestAOTBoundToItsELF(t *testing.T) {
	labtest.RequireKernel(t)
	dir := t.TempDir()
	elf, native := filepath.Join(dir, "tx.o"), filepath.Join(dir, "tx.o.native")
	data, err := os.ReadFile(filepath.Join("..", "bench", "xdptx_bpfel.o"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(elf, data, 0o644)
	if err := Compile(elf, native, true); err != nil {
		t.Fatal(err)
	}
	pkts := [][]byte{bench.Sample("xdp_tx")}
	got, err := TestRun(TestRunOptions{Object: native, Packets: pkts, Engine: "aot"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Engine != "aot" || got.Packets[0].Ret != 3 {
		t.Fatalf("engine %s, verdict %d: want aot and XDP_TX", got.Engine, got.Packets[0].Ret)
	}
	other, err := os.ReadFile(filepath.Join("..", "bench", "xdpmap_bpfel.o"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(elf, other, 0o644)
	_, err = TestRun(TestRunOptions{Object: native, Packets: pkts, Engine: "aot"})
	if err == nil || !strings.Contains(err.Error(), "not the ELF object") || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("a changed ELF: error %v, want a refusal by hash", err)
	}
}
