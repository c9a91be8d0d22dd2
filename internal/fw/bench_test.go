package fw

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// newFlowCost runs each packet once, each a flow the flow cache has not
// seen, and returns the median and 99th percentile of the kernel's time
// per run (BPF_PROG_TEST_RUN's own timing, one run each).
func newFlowCost(tb testing.TB, f *Firewall, pkts [][]byte) (median, p99 time.Duration) {
	tb.Helper()
	ds := make([]time.Duration, 0, len(pkts))
	for _, p := range pkts {
		_, d, err := f.Program().Benchmark(p, 1, nil)
		if err != nil {
			tb.Fatal(err)
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100]
}

// BenchmarkNewFlow reports the new-flow path's cost (median and p99 ns, one
// BPF_PROG_TEST_RUN per packet, every packet a flow not seen before) for
// ClassBench-like rule sets, with a flood of random flows and with flows
// that hit the rules; and a cached flow's cost beside them. Run it under
// the bench lock:
//
//	flock /tmp/fastpath-bench.lock go test -run '^$' -bench NewFlow ./internal/fw/
func BenchmarkNewFlow(b *testing.B) {
	const flows = 20000
	rng := rand.New(rand.NewPCG(3, 4))
	counts := []int{0, 1000, 10000, 100000}
	for _, kind := range ClassBenchKinds {
		for _, n := range counts {
			if n == 0 && kind != "acl" {
				continue
			}
			rs, err := ClassBench(kind, n, 1, 0, netip.Prefix{})
			if err != nil {
				b.Fatal(err)
			}
			f, err := Load(LoadOptions{MaxFlows: 1 << 17})
			if err != nil {
				b.Fatal(err)
			}
			if err := f.Install(rs); err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("%s-%d", kind, n)
			if n == 0 {
				name = "rules-0"
			}
			b.Run(name, func(b *testing.B) {
				for range b.N {
					var flood, hit [][]byte
					for range flows {
						flood = append(flood, packet(b, RandomFlow(rng, false), 64))
						if n > 0 {
							hit = append(hit, packet(b, Hitting(rng, rs), 64))
						}
					}
					m, p := newFlowCost(b, f, flood)
					b.ReportMetric(float64(m.Nanoseconds()), "flood-ns")
					b.ReportMetric(float64(p.Nanoseconds()), "flood-p99-ns")
					if n > 0 {
						m, p = newFlowCost(b, f, hit)
						b.ReportMetric(float64(m.Nanoseconds()), "hit-ns")
						b.ReportMetric(float64(p.Nanoseconds()), "hit-p99-ns")
					}
					_, d, err := f.Program().Benchmark(flood[0], 100000, nil)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(d.Nanoseconds()), "cached-ns")
				}
			})
			f.Close()
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

var _ = ebpf.RunOptions{}
