package br

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
)

// RunResult is what the router did with one packet of an offline run.
type RunResult struct {
	Index      int    `json:"index"`
	Action     string `json:"action"` // forward, drop or pass
	Verdict    string `json:"verdict"`
	EgressIfid int    `json:"egress_ifid"` // 0: internal or local host
	NextHop    string `json:"next_hop"`    // ip:port the packet was sent to, "" unless forwarded
	// Ns is the program's time per packet, measured by the kernel over
	// repeat runs, with the timing harness's own cost taken off.
	Ns  float64 `json:"ns_per_packet,omitempty"`
	Out []byte  `json:"-"`
}

var actionNames = map[uint32]string{0: "drop", 1: "drop", 2: "pass", 3: "forward", 4: "forward"}

// Run runs every frame through the router program with BPF_PROG_TEST_RUN,
// one at a time, in the caller's network namespace; nothing is attached.
// With repeat > 0 each frame is also timed over repeat runs in the timing
// harness, which restores the frame before each run so that a router
// rewriting the path does not time a different packet the next round.
func (r *Router) Run(frames [][]byte, repeat int) ([]RunResult, error) {
	var err error
	locals := map[netip.AddrPort]int{r.cfg.Internal: 0}
	for _, i := range r.cfg.Interfaces {
		if i.Kind == External {
			locals[i.Local] = int(i.ID)
		}
	}
	var tm *timer
	if repeat > 0 {
		if tm, err = newTimer(); err != nil {
			return nil, err
		}
		defer tm.Close()
	}
	out := make([]RunResult, len(frames))
	for i, f := range frames {
		before, err := r.Counters()
		if err != nil {
			return nil, err
		}
		buf := make([]byte, len(f)+256)
		opts := ebpf.RunOptions{Data: f, DataOut: buf}
		ret, err := r.objs.Router.Run(&opts)
		if err != nil {
			return nil, fmt.Errorf("packet %d: test run: %w", i+1, err)
		}
		after, err := r.Counters()
		if err != nil {
			return nil, err
		}
		res := RunResult{Index: i, Action: actionNames[ret], Verdict: "none", Out: opts.DataOut}
		for s := range after {
			for v := range after[s] {
				if after[s][v].Packets != before[s][v].Packets {
					res.Verdict = VerdictName(Verdict(v))
				}
			}
		}
		if res.Action == "forward" {
			src, dst, ok := underlayEnds(res.Out)
			if ok {
				res.NextHop = dst.String()
				res.EgressIfid = locals[src]
			}
		}
		if repeat > 0 {
			ns, err := tm.time(r.objs.Router, f, repeat)
			if err != nil {
				return nil, err
			}
			res.Ns = max(0, ns)
		}
		out[i] = res
	}
	return out, nil
}

// timer times a program on a frame with the bench harness: restore the
// frame, tail-call the program, repeat; minus the harness around an empty
// program. Frames whose head or tail the program moves cannot be restored
// in place; they are timed over single runs instead, which carry more noise.
type timer struct {
	objs benchObjects
}

func newTimer() (*timer, error) {
	t := &timer{}
	if err := loadBenchObjects(&t.objs, nil); err != nil {
		return nil, fmt.Errorf("load timing harness: %w", err)
	}
	return t, nil
}

func (t *timer) Close() error { return t.objs.Close() }

// harness returns the mean time per run of the harness around prog.
func (t *timer) harness(prog *ebpf.Program, frame []byte, repeat int) (time.Duration, bool, error) {
	var f benchBenchFrame
	if len(frame) > len(f.Data) {
		return 0, false, fmt.Errorf("frame of %d bytes: the timing harness takes at most %d", len(frame), len(f.Data))
	}
	f.Len = uint32(len(frame))
	copy(f.Data[:], frame)
	if err := t.objs.BenchFrames.Put(uint32(0), &f); err != nil {
		return 0, false, err
	}
	if err := t.objs.BenchTarget.Put(uint32(0), prog); err != nil {
		return 0, false, fmt.Errorf("put the program under test into the harness: %w", err)
	}
	// One run first: a program that moves head or tail shows it at once.
	ret, _, err := t.objs.BrBench.Benchmark(frame, 2, nil)
	if err != nil {
		return 0, false, err
	}
	if ret == 0 {
		return 0, false, nil
	}
	_, d, err := t.objs.BrBench.Benchmark(frame, repeat, nil)
	return d, true, err
}

// time returns the program's ns per run on frame: the least of five rounds
// of repeat/5 runs each, minus the least of the empty program's, since a
// shared machine only ever adds time.
func (t *timer) time(prog *ebpf.Program, frame []byte, repeat int) (float64, error) {
	const rounds = 5
	per := max(1, repeat/rounds)
	best, bestEmpty := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	ok := true
	for i := 0; i < rounds && ok; i++ {
		d, fits, err := t.harness(prog, frame, per)
		if err != nil {
			return 0, err
		}
		if !fits {
			ok = false
			break
		}
		e, _, err := t.harness(t.objs.BrBenchEmpty, frame, per)
		if err != nil {
			return 0, err
		}
		best, bestEmpty = min(best, d), min(bestEmpty, e)
	}
	if ok {
		return float64(best - bestEmpty), nil
	}
	// Single runs, each from a fresh copy of the frame.
	var total, empty time.Duration
	for i := 0; i < repeat; i++ {
		_, d, err := prog.Benchmark(frame, 1, nil)
		if err != nil {
			return 0, err
		}
		_, e, err := t.objs.BrBenchEmpty.Benchmark(frame, 1, nil)
		if err != nil {
			return 0, err
		}
		total, empty = total+d, empty+e
	}
	return float64(total-empty) / float64(repeat), nil
}

// underlayEnds reads source and destination IP:port of an Ethernet/IP/UDP frame.
func underlayEnds(f []byte) (src, dst netip.AddrPort, ok bool) {
	if len(f) < 14 {
		return
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		if len(f) < 14+20+8 {
			return
		}
		ihl := int(f[14]&0xf) * 4
		if len(f) < 14+ihl+8 {
			return
		}
		s, _ := netip.AddrFromSlice(f[26:30])
		d, _ := netip.AddrFromSlice(f[30:34])
		u := f[14+ihl:]
		return netip.AddrPortFrom(s, binary.BigEndian.Uint16(u)), netip.AddrPortFrom(d, binary.BigEndian.Uint16(u[2:])), true
	case 0x86dd:
		if len(f) < 14+40+8 {
			return
		}
		s, _ := netip.AddrFromSlice(f[22:38])
		d, _ := netip.AddrFromSlice(f[38:54])
		u := f[54:]
		return netip.AddrPortFrom(s, binary.BigEndian.Uint16(u)), netip.AddrPortFrom(d, binary.BigEndian.Uint16(u[2:])), true
	}
	return
}
