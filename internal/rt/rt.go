// Package rt drives fastpath-rt, the userspace XDP runtime (runtime/, in
// Rust): it finds the binary, hands it packets and map contents, and reads
// back verdicts, output frames, ring buffer records and maps.
package rt

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/pcap"
)

// ErrNoBinary is returned when fastpath-rt cannot be found.
var ErrNoBinary = errors.New("fastpath-rt not found: build it with make build (cargo build --release in runtime/)")

// Binary finds fastpath-rt: $FASTPATH_RT, next to the running executable,
// or in runtime/target/release of the source tree.
func Binary() (string, error) {
	if p := os.Getenv("FASTPATH_RT"); p != "" {
		return p, nil
	}
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			dirs = append(dirs, filepath.Join(d, "runtime", "target", "release"), filepath.Join(d, "bin"))
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, "fastpath-rt")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", ErrNoBinary
}

// Entry is a map entry as raw bytes. In a program array, Prog names the
// program instead of Value; in a map of maps, Inner is the inner map.
type Entry struct {
	Key, Value []byte
	Prog       string
	Inner      *Inner
}

// Inner is a map of maps' inner map, made from the outer map's template.
type Inner struct {
	MaxEntries int
	Entries    []Entry
}

// writeMapsFile writes maps in the form fastpath-rt's --maps-in reads.
func writeMapsFile(path string, maps map[string][]Entry) error {
	m := map[string][][2]any{}
	for name, es := range maps {
		m[name] = entriesJSON(es)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// entriesJSON is the --maps-in form of entries.
func entriesJSON(es []Entry) [][2]any {
	out := [][2]any{}
	for _, e := range es {
		var v any = hex.EncodeToString(e.Value)
		switch {
		case e.Prog != "":
			v = "prog:" + e.Prog
		case e.Inner != nil:
			v = map[string]any{"max_entries": e.Inner.MaxEntries, "entries": entriesJSON(e.Inner.Entries)}
		}
		out = append(out, [2]any{hex.EncodeToString(e.Key), v})
	}
	return out
}

// TestRunOptions are a userspace twin of BPF_PROG_TEST_RUN.
type TestRunOptions struct {
	Object  string
	Program string
	Packets [][]byte
	// Repeat runs each packet this many times (timing); 1 if zero.
	Repeat int
	Engine string
	// Maps are written before the first packet.
	Maps     map[string][]Entry
	DumpMaps bool
	// NoVerify skips the kernel's verifier (for objects it already saw).
	NoVerify bool
	// Netns runs the runtime in that network namespace (bpf_fib_lookup
	// asks its routing tables).
	Netns string
	// Kernel makes the runtime behave as that kernel version's helpers
	// ("6.12"), not the running kernel's.
	Kernel string
}

// Record is one ring buffer record.
type Record struct {
	Map  string
	Data []byte
}

// PacketResult is what one packet's run produced. Errno is set, and
// nothing else, when the run refused the frame as the kernel's
// BPF_PROG_TEST_RUN does (EINVAL for a frame shorter than an Ethernet
// header, ENOMEM for more pages than a frame may have).
type PacketResult struct {
	Errno   int
	Ret     uint32
	Out     []byte
	Ringbuf []Record
}

// MapDump is a map's entries after the run, sorted by key.
type MapDump struct {
	Type    string
	PerCPU  bool
	Entries []Entry
}

// Result of a test run.
type Result struct {
	Program string
	Engine  string
	// Semantics says which kernel's helper semantics the runtime used.
	Semantics   string
	Runs        int
	NsPerRun    float64
	InsnsPerRun float64
	NsPerInsn   float64
	Packets     []PacketResult
	Maps        map[string]MapDump
	// AOT is how an AOT object was compiled (Engine "aot" only).
	AOT *AOTInfo
}

// isNative tells an AOT object (from Compile) by its first bytes.
func isNative(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 8)
	_, err = io.ReadFull(f, head)
	return err == nil && string(head) == "FPRTAOT\x00"
}

type hexBytes []byte

func (h *hexBytes) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return err
	}
	v, err := hex.DecodeString(s)
	*h = v
	return err
}

// Compile compiles every program of an ELF object ahead of time into
// out (fastpath rt compile), for Engine "aot", with the runtime's default
// options (all of them; see CompileWith).
func Compile(object, out string, verify bool) error {
	return CompileWith(object, out, CompileOptions{NoVerify: !verify})
}

// TestRun runs the program over the packets in fastpath-rt. With Engine
// "aot" and an ELF object, the object is compiled ahead of time first and
// the run is made with compiling turned off, so that it proves the AOT
// object runs without Cranelift.
func TestRun(o TestRunOptions) (*Result, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fastpath-rt-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var env []string
	if o.Engine == "aot" {
		if !isNative(o.Object) {
			native := filepath.Join(dir, "object.native")
			if err := Compile(o.Object, native, !o.NoVerify); err != nil {
				return nil, err
			}
			o.Object = native
		}
		env = append(os.Environ(), "FASTPATH_RT_NO_CRANELIFT=1")
	}
	in := filepath.Join(dir, "in.pcap")
	if err := pcap.Write(in, o.Packets); err != nil {
		return nil, err
	}
	args := []string{"test-run", o.Object, "--in", in, "--json"}
	if o.Program != "" {
		args = append(args, "--prog", o.Program)
	}
	if o.Repeat > 1 {
		args = append(args, "--repeat", strconv.Itoa(o.Repeat))
	}
	if o.Engine != "" {
		args = append(args, "--engine", o.Engine)
	}
	if o.DumpMaps {
		args = append(args, "--dump-maps")
	}
	if o.NoVerify {
		args = append(args, "--no-verify")
	}
	if o.Kernel != "" {
		args = append(args, "--kernel", o.Kernel)
	}
	if len(o.Maps) > 0 {
		p := filepath.Join(dir, "maps.json")
		if err := writeMapsFile(p, o.Maps); err != nil {
			return nil, err
		}
		args = append(args, "--maps-in", p)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = &stdout, &stderr, env
	if err := netns.Run(o.Netns, cmd.Run); err != nil {
		return nil, fmt.Errorf("fastpath-rt: %s", strings.TrimSpace(strings.TrimPrefix(stderr.String(), "fastpath-rt: ")))
	}
	var raw struct {
		Program     string   `json:"program"`
		Engine      string   `json:"engine"`
		Runs        int      `json:"runs"`
		NsPerRun    float64  `json:"ns_per_run"`
		InsnsPerRun float64  `json:"insns_per_run"`
		NsPerInsn   float64  `json:"ns_per_insn"`
		Semantics   string   `json:"semantics"`
		AOT         *AOTInfo `json:"aot"`
		Packets     []struct {
			Errno   int      `json:"errno"`
			Ret     uint32   `json:"ret"`
			Out     hexBytes `json:"out"`
			Ringbuf []struct {
				Map  string   `json:"map"`
				Data hexBytes `json:"data"`
			} `json:"ringbuf"`
		} `json:"packets"`
		Maps map[string]struct {
			Type    string        `json:"type"`
			PerCPU  bool          `json:"percpu"`
			Entries [][2]hexBytes `json:"entries"`
		} `json:"maps"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &raw); err != nil {
		return nil, fmt.Errorf("read fastpath-rt's output: %w", err)
	}
	r := &Result{Program: raw.Program, Engine: raw.Engine, Semantics: raw.Semantics, Runs: raw.Runs, NsPerRun: raw.NsPerRun, InsnsPerRun: raw.InsnsPerRun, NsPerInsn: raw.NsPerInsn, AOT: raw.AOT, Maps: map[string]MapDump{}}
	for _, p := range raw.Packets {
		pr := PacketResult{Errno: p.Errno, Ret: p.Ret, Out: p.Out}
		for _, rec := range p.Ringbuf {
			pr.Ringbuf = append(pr.Ringbuf, Record{Map: rec.Map, Data: rec.Data})
		}
		r.Packets = append(r.Packets, pr)
	}
	for name, m := range raw.Maps {
		d := MapDump{Type: m.Type, PerCPU: m.PerCPU}
		for _, e := range m.Entries {
			d.Entries = append(d.Entries, Entry{Key: e[0], Value: e[1]})
		}
		sort.Slice(d.Entries, func(i, j int) bool { return bytes.Compare(d.Entries[i].Key, d.Entries[j].Key) < 0 })
		r.Maps[name] = d
	}
	return r, nil
}
