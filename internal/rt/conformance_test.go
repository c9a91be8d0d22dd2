package rt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/fastpath-dev/fastpath/internal/bench"
	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// kernelRun is what the kernel did with the same packets: per packet the
// verdict, output and ring buffer records; after all of them, the maps.
func kernelRun(t *testing.T, name string, pkts [][]byte) ([]PacketResult, map[string]MapDump) {
	t.Helper()
	prog, coll, err := bench.Load(name)
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer coll.Close()
	for m, es := range bench.Setup(name) {
		for _, e := range es {
			if err := coll.Maps[m].Put(e.Key, e.Value); err != nil {
				t.Fatalf("%s: %v", m, err)
			}
		}
	}
	return runInKernel(t, prog, coll.Maps, pkts)
}

// runInKernel runs the packets through BPF_PROG_TEST_RUN: per packet the
// verdict and output, or the errno of a frame the kernel refuses, and the
// ring buffer records; after all of them, every map that holds values (not
// program arrays or maps of maps, whose values are kernel ids).
func runInKernel(t *testing.T, prog *ebpf.Program, maps map[string]*ebpf.Map, pkts [][]byte) ([]PacketResult, map[string]MapDump) {
	t.Helper()
	readers := map[string]*ringbuf.Reader{}
	for n, m := range maps {
		if m.Type() == ebpf.RingBuf {
			rd, err := ringbuf.NewReader(m)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			readers[n] = rd
		}
	}
	var out []PacketResult
	for _, p := range pkts {
		// Room for a multi-buffer frame's pages.
		opts := &ebpf.RunOptions{Data: p, DataOut: make([]byte, len(p)+64<<10)}
		ret, err := prog.Run(opts)
		var errno syscall.Errno
		switch {
		case errors.As(err, &errno):
			out = append(out, PacketResult{Errno: int(errno)})
			continue
		case err != nil:
			t.Fatalf("kernel test run: %v", err)
		}
		r := PacketResult{Ret: ret, Out: opts.DataOut}
		for n, rd := range readers {
			for {
				rd.SetDeadline(time.Now().Add(time.Millisecond))
				rec, err := rd.Read()
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatal(err)
					}
					break
				}
				r.Ringbuf = append(r.Ringbuf, Record{Map: n, Data: rec.RawSample})
			}
		}
		out = append(out, r)
	}
	dumps := map[string]MapDump{}
	for n, m := range maps {
		switch m.Type() {
		case ebpf.RingBuf, ebpf.ProgramArray, ebpf.ArrayOfMaps, ebpf.HashOfMaps:
			continue
		}
		d := MapDump{PerCPU: m.Type() == ebpf.PerCPUArray || m.Type() == ebpf.PerCPUHash || m.Type() == ebpf.LRUCPUHash}
		it := m.Iterate()
		var k []byte
		var v any = new([]byte)
		if d.PerCPU {
			v = new([][]byte)
		}
		for it.Next(&k, v) {
			var val []byte
			if d.PerCPU {
				val = sumPerCPU(*v.(*[][]byte))
			} else {
				val = append([]byte(nil), *v.(*[]byte)...)
			}
			d.Entries = append(d.Entries, Entry{Key: append([]byte(nil), k...), Value: val})
		}
		if err := it.Err(); err != nil {
			t.Fatalf("dump %s: %v", n, err)
		}
		sort.Slice(d.Entries, func(i, j int) bool { return bytes.Compare(d.Entries[i].Key, d.Entries[j].Key) < 0 })
		dumps[n] = d
	}
	return out, dumps
}

// sumPerCPU adds per-CPU values word by word: a test run counts on one CPU,
// whichever it was, and the runtime on its only one.
func sumPerCPU(vals [][]byte) []byte {
	if len(vals) == 0 {
		return nil
	}
	out := make([]byte, len(vals[0]))
	step := 8
	if len(out)%8 != 0 {
		step = 4
	}
	for _, v := range vals {
		for i := 0; i+step <= len(out); i += step {
			if step == 8 {
				binary.LittleEndian.PutUint64(out[i:], binary.LittleEndian.Uint64(out[i:])+binary.LittleEndian.Uint64(v[i:]))
			} else {
				binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(out[i:])+binary.LittleEndian.Uint32(v[i:]))
			}
		}
	}
	return out
}

// TestConformance runs every benchmark program on the corpus and on
// mutations of it, in the kernel and in the runtime: same verdicts, same
// output bytes, same ring buffer records, same maps afterwards.
func TestConformance(t *testing.T) {
	labtest.RequireKernel(t)
	if _, err := Binary(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 5))
	corpus := bench.Corpus()
	pkts := append([][]byte{}, corpus...)
	for i := 0; i < 300; i++ {
		pkts = append(pkts, bench.Mutate(rng, corpus[rng.IntN(len(corpus))]))
	}
	for _, p := range bench.Programs() {
		for _, engine := range []string{"interp", "jit", "aot"} {
			t.Run(p.Name+"/"+engine, func(t *testing.T) {
				conform(t, p, engine, pkts)
			})
		}
	}
}

// conform compares one program's runs in the kernel and in one engine.
func conform(t *testing.T, p bench.Program, engine string, pkts [][]byte) {
	want, wantMaps := kernelRun(t, p.Name, pkts)
	init := map[string][]Entry{}
	for m, es := range bench.Setup(p.Name) {
		for _, e := range es {
			init[m] = append(init[m], Entry{Key: e.Key, Value: e.Value})
		}
	}
	got, err := TestRun(TestRunOptions{Object: filepath.Join("..", "bench", p.Object), Program: p.Name, Packets: pkts, Maps: init, DumpMaps: true, Engine: engine})
	if err != nil {
		t.Fatal(err)
	}
	requireSame(t, pkts, want, wantMaps, got)
}

// requireSame fails the test with every difference between the kernel's
// results and the runtime's: verdicts, errnos, output bytes, ring buffer
// records, and the maps afterwards.
func requireSame(t *testing.T, pkts [][]byte, want []PacketResult, wantMaps map[string]MapDump, got *Result) {
	t.Helper()
	var diffs []string
	for i := range pkts {
		w, g := want[i], got.Packets[i]
		switch {
		case w.Errno != g.Errno:
			diffs = append(diffs, fmt.Sprintf("packet %d (%d bytes): error %d in the kernel, %d in the runtime", i, len(pkts[i]), w.Errno, g.Errno))
		case w.Ret != g.Ret:
			diffs = append(diffs, fmt.Sprintf("packet %d (%d bytes): verdict %d in the kernel, %d in the runtime", i, len(pkts[i]), w.Ret, g.Ret))
		case !bytes.Equal(w.Out, g.Out):
			diffs = append(diffs, fmt.Sprintf("packet %d (%d bytes): output differs\nkernel  %x\nruntime %x", i, len(pkts[i]), short(w.Out), short(g.Out)))
		case fmt.Sprint(w.Ringbuf) != fmt.Sprint(g.Ringbuf):
			diffs = append(diffs, fmt.Sprintf("packet %d: ring buffer records differ: kernel %x, runtime %x", i, w.Ringbuf, g.Ringbuf))
		}
	}
	for name, wm := range wantMaps {
		gm, ok := got.Maps[name]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("map %s: not in the runtime's dump", name))
			continue
		}
		if len(wm.Entries) != len(gm.Entries) {
			diffs = append(diffs, fmt.Sprintf("map %s: %d entries in the kernel, %d in the runtime", name, len(wm.Entries), len(gm.Entries)))
			continue
		}
		for i, we := range wm.Entries {
			ge := gm.Entries[i]
			gv := ge.Value
			if len(gv) > len(we.Value) {
				gv = gv[:len(we.Value)] // a per-CPU value is padded to 8 bytes
			}
			if !bytes.Equal(we.Key, ge.Key) || !bytes.Equal(we.Value, gv) {
				diffs = append(diffs, fmt.Sprintf("map %s: entry %x=%x in the kernel, %x=%x in the runtime", name, we.Key, we.Value, ge.Key, gv))
				break
			}
		}
	}
	verdicts, records, entries := map[string]int{}, 0, 0
	for _, w := range want {
		if w.Errno != 0 {
			verdicts[fmt.Sprintf("errno %d", w.Errno)]++
		} else {
			verdicts[fmt.Sprintf("verdict %d", w.Ret)]++
		}
		records += len(w.Ringbuf)
	}
	for _, m := range wantMaps {
		entries += len(m.Entries)
	}
	t.Logf("%d packets, %v, %d ring buffer records, %d map entries compared", len(pkts), verdicts, records, entries)
	if len(diffs) > 0 {
		if len(diffs) > 10 {
			diffs = append(diffs[:10], fmt.Sprintf("… and %d more", len(diffs)-10))
		}
		t.Fatalf("%d differences on %d packets:\n%s", len(diffs), len(pkts), joinLines(diffs))
	}
}

// short cuts a long frame for a message.
func short(b []byte) []byte {
	if len(b) > 96 {
		return b[:96]
	}
	return b
}

func joinLines(s []string) string {
	var b bytes.Buffer
	for _, l := range s {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}
