package fw

import (
	"net"

	"errors"
	"fmt"
	"github.com/google/gopacket/layers"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// benchProgram loads the benchmark variant of the program (fw_bench.c) on
// the firewall's maps, to run over pkts, one packet per run.
func benchProgram(tb testing.TB, f *Firewall, pkts [][]byte) *ebpf.Program {
	tb.Helper()
	spec, err := loadFwBench()
	if err != nil {
		tb.Fatal(err)
	}
	spec.Maps["fw_bench_pkts"].MaxEntries = uint32(len(pkts))
	if err := spec.Variables["fw_bench_count"].Set(uint32(len(pkts))); err != nil {
		tb.Fatal(err)
	}
	// Frags-aware as the firewall is: the two share the array of programs
	// behind it, which takes programs of one kind.
	spec.Programs["fw_xdp"].Flags |= unix.BPF_F_XDP_HAS_FRAGS
	repl := map[string]*ebpf.Map{}
	v := reflect.ValueOf(f.objs.fwMaps)
	for i := range v.NumField() {
		name, m := v.Type().Field(i).Tag.Get("ebpf"), v.Field(i).Interface().(*ebpf.Map)
		repl[name] = m
		spec.Maps[name].MaxEntries = m.MaxEntries()
	}
	var objs fwBenchObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			tb.Fatalf("load the benchmark program: %+v", ve)
		}
		tb.Fatal(err)
	}
	tb.Cleanup(func() { objs.Close() })
	heads := make([]fwBenchFwBenchPkt, len(pkts))
	for i, p := range pkts {
		copy(heads[i].Head[:], p)
	}
	if err := putArray(objs.FwBenchPkts, heads); err != nil {
		tb.Fatal(err)
	}
	return objs.FwXdp
}

// costRun times the benchmark variant over its packets, one batch of
// consecutive packets per BPF_PROG_TEST_RUN, each packet written over the
// frame before its run: every packet a flow the flow table has not seen
// when the packets are distinct.
type costRun struct {
	prog  *ebpf.Program
	frame []byte
	ds    []time.Duration
}

func newCostRun(tb testing.TB, f *Firewall, pkts [][]byte) *costRun {
	return &costRun{prog: benchProgram(tb, f, pkts), frame: pkts[0]}
}

func (c *costRun) batch(tb testing.TB, per int) {
	tb.Helper()
	_, d, err := c.prog.Benchmark(c.frame, per, nil)
	if err != nil {
		tb.Fatal(err)
	}
	c.ds = append(c.ds, d)
}

// median is the median of the batches' times per packet.
func (c *costRun) median() float64 {
	ds := slices.Clone(c.ds)
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds())
}

// installed is a firewall with the default flow table, as the lab
// attaches it, running rs; closed when the benchmark ends.
func installed(b *testing.B, rs *RuleSet) *Firewall {
	b.Helper()
	f, err := Load(LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	if err := f.Install(rs); err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkNewFlow reports the new-flow path's cost per packet for
// ClassBench-like rule sets, each packet a flow not seen before: with a
// flood of random flows (flood-ns) and with flows that hit the rules
// (hit-ns); and a cached flow's cost beside them (cached-ns, one packet
// repeated). The firewall has the default flow table, as the lab attaches
// it. Each figure is the median of 45 batches of 2,000 packets, taken in 9
// rounds that alternate the three, so that the machine's drift over seconds
// hits them alike. Run it under the bench lock:
//
//	flock /tmp/fastpath-bench.lock go test -run '^$' -bench NewFlow -benchtime 1x ./internal/fw/
func BenchmarkNewFlow(b *testing.B) {
	const rounds, batches, per = 9, 5, 2000
	for ki, kind := range ClassBenchKinds {
		for _, n := range []int{0, 1000, 10000, 100000} {
			if n == 0 && kind != "acl" {
				continue
			}
			name := fmt.Sprintf("%s-%d", kind, n)
			if n == 0 {
				name = "rules-0"
			}
			// The set is made inside the sub-benchmark, so that -bench
			// NewFlow/ipc-100000 builds only what it measures.
			b.Run(name, func(b *testing.B) {
				rng := rand.New(rand.NewPCG(3, uint64(ki<<20|n))) // the same flows however filtered
				rs, err := ClassBench(kind, n, 1, 0, netip.Prefix{})
				if err != nil {
					b.Fatal(err)
				}
				f := installed(b, rs)
				for range b.N {
					total := rounds * batches * per
					flood, hit, same := make([][]byte, total), make([][]byte, total), make([][]byte, total)
					for i := range total {
						flood[i] = packet(b, RandomFlow(rng, false), 64)
						hit[i] = flood[i]
						if n > 0 {
							hit[i] = packet(b, Hitting(rng, rs), 64)
						}
						same[i] = flood[0]
					}
					runs := map[string]*costRun{"flood-ns": newCostRun(b, f, flood), "cached-ns": newCostRun(b, f, same)}
					if n > 0 {
						runs["hit-ns"] = newCostRun(b, f, hit)
					}
					for range rounds {
						for _, r := range runs {
							for range batches {
								r.batch(b, per)
							}
						}
					}
					for unit, r := range runs {
						b.ReportMetric(r.median(), unit)
					}
				}
			})
		}
	}
}

// TestClassBenchAgainstOracle compares the kernel's verdicts with a plain
// first-match walk on ClassBench-like sets of each kind, IPv4 and IPv6, with
// flows that hit rules and random ones.
func TestClassBenchAgainstOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kind := range ClassBenchKinds {
		for _, n := range []int{300, 3000} {
			rs, err := ClassBench(kind, n, uint64(n), 20, netip.Prefix{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range rs.Rules {
				rs.Rules[i].Action = Action(rng.IntN(2))
			}
			rs.Default = Action(rng.IntN(2))
			f := newFirewall(t, "")
			if err := f.Install(rs); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3000; i++ {
				fl := Hitting(rng, rs)
				if i%4 == 0 {
					fl = RandomFlow(rng, i%8 == 0)
				}
				id, want := rs.Match(fl)
				got := run(t, f, packet(t, fl, 8))
				if verdictName(got) != want.String() {
					t.Fatalf("%s-%d: %s: kernel %s, oracle %s (rule %d: %v)", kind, n, fl, verdictName(got), want, id, ruleAt(rs, id))
				}
			}
		}
	}
}

// TestIncrementalAgainstOracle adds and deletes rules on a running
// ClassBench-like set, through the overlay and, when it runs out of room
// between two rules, by installing the set whole; after each change the
// kernel's verdicts, the rules read back and the rule numbers of the flow
// cache agree with the same changes made to a plain list.
func TestIncrementalAgainstOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	rs, err := ClassBench("fw", 2000, 9, 20, netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rs.Rules {
		rs.Rules[i].Action = Action(rng.IntN(2))
	}
	f := newFirewall(t, "")
	if err := f.Install(rs); err != nil {
		t.Fatal(err)
	}
	model := slices.Clone(rs.Rules)
	for step := 0; step < 40; step++ {
		switch {
		case step%3 == 2 && len(model) > 1:
			a, b := rng.IntN(len(model))+1, rng.IntN(len(model))+1
			if err := f.Delete(a, b); err != nil {
				t.Fatal(err)
			}
			model = slices.DeleteFunc(model, func(r Rule) bool { return false })
			var keep []Rule
			for i, r := range model {
				if i+1 != a && i+1 != b {
					keep = append(keep, r)
				}
			}
			model = keep
		default:
			at := rng.IntN(len(model)+1) + 1
			if step < 16 {
				at = 1 // 14 halvings exhaust the room before rule 1: installed whole
			}
			r := rs.Rules[rng.IntN(len(rs.Rules))]
			r.Action = Action(rng.IntN(2))
			if err := f.Insert(at, r); err != nil {
				t.Fatal(err)
			}
			model = slices.Insert(model, at-1, r)
		}
		want := &RuleSet{Default: rs.Default, Rules: model}
		got, err := f.Rules()
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Rules) != len(model) {
			t.Fatalf("step %d: %d rules read back, want %d", step, len(got.Rules), len(model))
		}
		for i := range model {
			if got.Rules[i].String() != model[i].String() {
				t.Fatalf("step %d: rule %d read back %q, want %q", step, i+1, got.Rules[i], model[i])
			}
		}
		for i := 0; i < 200; i++ {
			fl := Hitting(rng, want)
			id, act := want.Match(fl)
			if got := verdictName(run(t, f, packet(t, fl, 8))); got != act.String() {
				t.Fatalf("step %d: %s: kernel %s, oracle %s (rule %d: %v)", step, fl, got, act, id, ruleAt(want, id))
			}
		}
	}
	// The flow cache's verdicts name rules by their numbers after the
	// changes too. A flow is tracked at its second packet on the same
	// CPU: a few flows, twice each, on one CPU.
	want0 := &RuleSet{Default: rs.Default, Rules: model}
	onOneCPU(t, func() {
		for i := 0; i < 50; i++ {
			pkt := packet(t, Hitting(rng, want0), 8)
			run(t, f, pkt)
			run(t, f, pkt)
		}
	})
	flows, err := f.Flows()
	if err != nil {
		t.Fatal(err)
	}
	want := &RuleSet{Default: rs.Default, Rules: model}
	checked := 0
	for _, fs := range flows {
		if !fs.Current {
			continue
		}
		if id, _ := want.Match(fs.Flow); int(fs.Rule) != id {
			t.Fatalf("flow %s: rule %d in the flow cache, %d by the oracle", fs.Flow, fs.Rule, id)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no current flow in the flow cache")
	}
}

// TestLabClassBenchMisses: the lab's ClassBench-like sets let every flood
// packet through to the last rule, as the flood rows assume.
func TestLabClassBenchMisses(t *testing.T) {
	tb := labTestbed()
	src, dst := tb.Gen().Addr.Masked(), tb.Sink().Addr.Masked()
	rng := rand.New(rand.NewPCG(9, 9))
	for _, kind := range ClassBenchKinds {
		rs, err := LabClassBench(kind, 20000, src, dst)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2000; i++ {
			b := src.Addr().As4()
			b[3] = byte(rng.IntN(256))
			fl := Flow{Src: netip.AddrFrom4(b), Dst: tb.Sink().Addr.Addr(), Proto: 17, SPort: uint16(rng.IntN(65536)), DPort: uint16(rng.IntN(65536))}
			if id, act := rs.Match(fl); id != len(rs.Rules) || act != Pass {
				t.Fatalf("%s: %s matches rule %d (%v), not the last", kind, fl, id, ruleAt(rs, id))
			}
		}
	}
}

// BenchmarkLabFlood reports the new-flow cost of the lab's flood rows in
// BPF_PROG_TEST_RUN: UDP from random sources of the generator's subnet and
// random ports to the sink, against the lab's ClassBench-like sets (which
// every flood packet misses up to the last rule, the pass rule, so that
// nothing is pruned) and against that pass rule alone (rules-1). The
// median of 45 batches of 2,000 packets, each a flow not seen before.
func BenchmarkLabFlood(b *testing.B) {
	tb := labTestbed()
	src, dst := tb.Gen().Addr.Masked(), tb.Sink().Addr.Masked()
	for _, name := range []string{"rules-1", "acl-100000", "fw-100000", "ipc-100000"} {
		b.Run(name, func(b *testing.B) {
			rs := &RuleSet{Default: Drop, Rules: []Rule{{Action: Pass, Src: Prefix{src}, Dst: Prefix{dst}, SPort: AnyPort, DPort: AnyPort}}}
			if kind, _, ok := strings.Cut(name, "-"); ok && kind != "rules" {
				var err error
				if rs, err = LabClassBench(kind, 100000, src, dst); err != nil {
					b.Fatal(err)
				}
			}
			f := installed(b, rs)
			rng := rand.New(rand.NewPCG(3, 4))
			for range b.N {
				pkts := make([][]byte, 45*2000)
				for i := range pkts {
					a := src.Addr().As4()
					a[3] = byte(rng.IntN(256))
					fl := Flow{Src: netip.AddrFrom4(a), Dst: tb.Sink().Addr.Addr(), Proto: 17, SPort: uint16(rng.IntN(65536)), DPort: uint16(rng.IntN(65536))}
					pkts[i] = packet(b, fl, 64)
				}
				c := newCostRun(b, f, pkts)
				for range 45 {
					c.batch(b, 2000)
				}
				b.ReportMetric(c.median(), "flood-ns")
			}
		})
	}
}

// BenchmarkNestedRanges reports a new flow's cost against a set whose
// lists the packet cannot cut short: n rules `src 10.0.0.0/8, tcp, dport
// 0-i`, hit from another network on port 0, which lies in every range, so
// that no rule matches and none can be skipped by its number; only the
// hulls of the lists' blocks (all of 10.0.0.0/8) keep it from reading each
// rule.
func BenchmarkNestedRanges(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			rs := &RuleSet{Default: Pass}
			for i := range n {
				rs.Rules = append(rs.Rules, Rule{Action: Drop, Src: Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Proto: 6,
					SPort: AnyPort, DPort: Ports{0, uint16((i + 1) % 65536), true}})
			}
			f := installed(b, rs)
			for range b.N {
				pkts := make([][]byte, 20000)
				for i := range pkts {
					pkts[i] = packet(b, flow(fmt.Sprintf("11.%d.%d.%d", i>>16&255, i>>8&255, i&255), "192.0.2.2", 6, uint16(i), 0), 64)
				}
				c := newCostRun(b, f, pkts)
				for range 10 {
					c.batch(b, 2000)
				}
				b.ReportMetric(c.median(), "ns")
			}
		})
	}
}

// BenchmarkConntrack reports connection tracking's costs per packet: a
// packet of an established TCP connection through a `ct_state established`
// rule (est-ns) beside the same packet with tracking off (off-ns), and a new
// connection's three handshake packets (handshake-ns: SYN, SYN/ACK and ACK
// of connections not seen before, their sum). Medians of 45 batches, in
// rounds that alternate the three. Run it under the bench lock:
//
//	flock /tmp/fastpath-bench.lock go test -run '^$' -bench Conntrack -benchtime 1x ./internal/fw/
func BenchmarkConntrack(b *testing.B) {
	const rounds, batches, per = 9, 5, 1998
	c, s := net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4()
	frame := func(from, to net.IP, sg seg) []byte {
		sg.noOpts = true
		f := ctFrame(b, from, to, layers.IPProtocolTCP, sg.layers()...)
		return append(f, make([]byte, 64-len(f))...)
	}
	ctRules, err := ParseRules("ct.toml", []byte("default = \"drop\"\n[[rule]]\naction = \"pass\"\nct_state = [\"established\", \"related\"]\n[[rule]]\naction = \"pass\"\nct_state = \"new\"\nproto = \"tcp\"\ndport = 80\n"))
	if err != nil {
		b.Fatal(err)
	}
	on, off := installed(b, ctRules), installed(b, &RuleSet{})
	for range b.N {
		total := rounds * batches * per
		hs := make([][]byte, total)
		for i := 0; i < total; i += 3 {
			sp := uint16(1024 + i/3%60000)
			src := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).To4()
			hs[i] = frame(src, s, seg{sport: sp, dport: 80, seq: 1, flags: "S"})
			hs[i+1] = frame(s, src, seg{sport: 80, dport: sp, seq: 100, ack: 2, flags: "SA"})
			hs[i+2] = frame(src, s, seg{sport: sp, dport: 80, seq: 2, ack: 101, flags: "A"})
		}
		for _, p := range [][]byte{hs[0], hs[1], hs[2]} {
			run(b, on, p)
		}
		data := frame(c, s, seg{sport: 40000, dport: 80, seq: 2, ack: 101, flags: "A"})
		for _, p := range [][]byte{frame(c, s, seg{sport: 40000, dport: 80, seq: 1, flags: "S"}), frame(s, c, seg{sport: 80, dport: 40000, seq: 100, ack: 2, flags: "SA"}), data} {
			run(b, on, p)
		}
		same := make([][]byte, total)
		for i := range same {
			same[i] = data
		}
		runs := map[string]*costRun{"est-ns": newCostRun(b, on, same), "off-ns": newCostRun(b, off, same), "handshake-ns": newCostRun(b, on, hs)}
		for range rounds {
			for _, r := range runs {
				for range batches {
					r.batch(b, per)
				}
			}
		}
		for unit, r := range runs {
			m := r.median()
			if unit == "handshake-ns" {
				m *= 3
			}
			b.ReportMetric(m, unit)
		}
	}
}
