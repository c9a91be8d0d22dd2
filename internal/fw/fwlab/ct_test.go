package fwlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
)

// ctPrefix is a testbed prefix of the test's own; the benches bring their
// testbeds up and down under it, and the test fails if anything of it is
// left: namespaces, or the firewall's pins.
func ctPrefix(t *testing.T) string {
	t.Helper()
	labtest.RequireKernel(t)
	b := make([]byte, 2)
	rand.Read(b)
	prefix := "fp-t" + hex.EncodeToString(b) + "-"
	t.Cleanup(func() {
		tb := lab.Testbed{Prefix: prefix, Layout: lab.LayoutDUT}
		for _, ns := range tb.Namespaces() {
			if netns.Exists(ns) {
				t.Errorf("namespace %s left behind", ns)
			}
		}
		if _, err := os.Stat(fw.PinDir(ctInstance(tb))); !os.IsNotExist(err) {
			t.Errorf("firewall pins %s left behind (%v)", fw.PinDir(ctInstance(tb)), err)
		}
		tb.Down()
	})
	return prefix
}

// fw-ct and nft-ct, briefly: each gives a figure, and its Describe found
// every measured packet established after the priming (else the bench
// fails). The firewall's check is not vacuous: the same row flooded with
// flows that were never primed fails it.
func TestCtRows(t *testing.T) {
	prefix := ctPrefix(t)
	o := lab.BenchOptions{Scenarios: []string{"fw-ct", "nft-ct"}, Runs: 1, Packets: 200_000, Sizes: []int{138}, Prefix: prefix, CPU: runtime.NumCPU() - 1, NoCeiling: true}
	rep, err := lab.Bench(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Table())
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rep.Rows))
	}
	established := regexp.MustCompile(`all (\d+) packets established \(1000 flows primed\)`)
	for _, row := range rep.Rows {
		if row.MedianMpps <= 0 {
			t.Errorf("%s: no figure (%v Mpps)", row.Scenario, row.MedianMpps)
		}
		m := established.FindStringSubmatch(row.Note)
		if m == nil {
			t.Errorf("%s: note %q does not say the packets were established", row.Scenario, row.Note)
			continue
		}
		// The warm-up's packets and the run's: at least the run's.
		if n, _ := strconv.ParseUint(m[1], 10, 64); n < row.Runs[0].Received {
			t.Errorf("%s: %d established, fewer than the %d the sink received", row.Scenario, n, row.Runs[0].Received)
		}
	}

	o.Scenarios = []string{"fw-ct"}
	o.Flows, o.FlowSrc = 5000, lab.Testbed{}.Gen().Addr.Masked()
	if _, err := lab.Bench(context.Background(), o); err == nil || !strings.Contains(err.Error(), "must all be established") {
		t.Fatalf("fw-ct with flows never primed: error %v, want the established check's", err)
	}
}

// The SYN-flood rows, briefly: iperf3 gives a figure alone and under the
// flood, the flood was sent, and the firewall tracked it as new
// connections.
func TestCtSYNFloodRows(t *testing.T) {
	prefix := ctPrefix(t)
	rep, err := lab.TCPBench(context.Background(), lab.TCPOptions{
		Scenarios: []string{"fw-ct-synflood", "nft-ct-synflood"}, Runs: 1, Seconds: 1, Prefix: prefix, CPU: runtime.NumCPU() - 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Table())
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rep.Rows))
	}
	for _, row := range rep.Rows {
		if row.MedianGbps <= 0 || row.MedianQuietGbps <= 0 || row.MedianFloodMpps <= 0 || row.FloodRatio <= 0 {
			t.Errorf("%s: %.2f Gbit/s under a flood of %.3f Mpps, %.2f without, ratio %.2f: want every figure", row.Scenario, row.MedianGbps, row.MedianFloodMpps, row.MedianQuietGbps, row.FloodRatio)
		}
	}
	// A second of flood at a tenth of the least rate seen here (0.05 Mpps
	// entered the DUT): the flood's SYNs were new connections to both.
	for i, re := range []string{`fw ct: (\d+) new`, `nft: (\d+) new`} {
		m := regexp.MustCompile(re).FindStringSubmatch(rep.Rows[i].Note)
		if m == nil {
			t.Errorf("%s's note %q does not say what conntrack counted", rep.Rows[i].Scenario, rep.Rows[i].Note)
			continue
		}
		if n, _ := strconv.ParseUint(m[1], 10, 64); n < 5_000 {
			t.Errorf("%s: %d new connections counted, want the flood's (at least 5,000)", rep.Rows[i].Scenario, n)
		}
	}
}
