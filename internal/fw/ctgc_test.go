package fw

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// floodFirewall is a firewall that tracks every flow, with an embryonic
// table of embryonic entries, and a benchmark program on its maps that
// sends n distinct UDP flows, one a run.
func floodFirewall(t *testing.T, embryonic uint32, n int) (*Firewall, func(repeat int)) {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	f, err := Load(LoadOptions{MaxFlows: 4096, CtEmbryonic: embryonic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	installRules(t, f, "[conntrack]\nenabled = true\n")
	pkts := make([][]byte, n)
	for i := range pkts {
		src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		pkts[i] = packet(t, Flow{Src: src, Dst: netip.MustParseAddr("192.0.2.1"), Proto: 17, SPort: uint16(1024 + i%50000), DPort: 53}, 22) // 64 bytes: the head the benchmark program writes
	}
	prog := benchProgram(t, f, pkts)
	return f, func(repeat int) {
		if _, _, err := prog.Benchmark(pkts[0], repeat, nil); err != nil {
			t.Error(err)
		}
	}
}

// Reading the tables while a flood of new flows churns the embryonic LRU:
// fw ct list, fw ct stats, the metrics and the gc all work. A key-by-key
// walk (cilium/ebpf's map iterator) starts over whenever the key it stands
// on is evicted and gives up after a few tries, so all four failed with
// "iteration aborted" exactly while a flood was on.
func TestCtReadUnderFlood(t *testing.T) {
	f, flood := floodFirewall(t, 2048, 60000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				flood(20000)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i, deadline := 0, time.Now().Add(3*time.Second); time.Now().Before(deadline); i++ {
		if _, err := f.Conns(); err != nil {
			t.Fatalf("fw ct list, read %d under the flood: %v", i, err)
		}
		if _, err := f.ConntrackStats(); err != nil {
			t.Fatalf("fw ct stats, read %d under the flood: %v", i, err)
		}
		if _, err := scrapeCollector(f.Collector("flood", MetricsOptions{Rules: RuleMetricsAll})); err != nil {
			t.Fatalf("metrics, read %d under the flood: %v", i, err)
		}
		if _, err := f.ExpireConns(); err != nil {
			t.Fatalf("gc, sweep %d under the flood: %v", i, err)
		}
	}
	cnt, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt["ct_created"] < 100000 {
		t.Fatalf("the flood created only %d entries: no flood", cnt["ct_created"])
	}
	t.Logf("%d entries created during the reads", cnt["ct_created"])
}
