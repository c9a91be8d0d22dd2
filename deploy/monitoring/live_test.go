package monitoring_test

// The "also checked" part: a real Prometheus server scrapes exporters that
// serve the families of the spec, and runs every dashboard query and alert
// expression through its HTTP API. Here the exporters are fakes of this
// test's (obs.NewRegistry plus const metrics of every family); the tests of
// the daemons' own exporters run the same queries against br serve, fw
// serve, tra run and fastpath-rt run (internal/obs/promtest).

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastpath-dev/fastpath/deploy/monitoring"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
	"github.com/fastpath-dev/fastpath/internal/obs/promtest"
)

// fake serves a set of families with made-up label values: counters grow
// with time (so that rate() sees traffic), gauges are fixed, and the values
// that alerts and stat panels look for are there (a device in generic
// mode, one not ready, a destination without a path, a table half full).
type fake struct {
	families map[string][]string
	start    time.Time
}

func (f *fake) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(f, ch) }

// value is what a label gives a series: the first of its values, or all.
var values = map[string][]string{
	"name": {"i1"}, "isd_as": {"1-ff00:0:110"}, "interface": {"1", "internal"}, "neighbor_isd_as": {"1-ff00:0:111"},
	"reason": {"fib_drop", "too_big"}, "verdict": {"pass", "drop", "aborted"}, "device": {"eth0", "veth1"}, "mode": {"native", "generic"},
	"map": {"flows"}, "table": {"established", "embryonic"}, "state": {"new", "established"}, "kind": {"installed"},
	"result": {"ok", "error"}, "event": {"flow_replaced"}, "rule": {"allow-ssh"}, "direction": {"ip_to_scion", "scion_to_ip"},
	"queue": {"0"}, "level": {"info", "warn"}, "sizeclass": {"0_63"},
}

func (f *fake) Collect(ch chan<- prometheus.Metric) {
	elapsed := time.Since(f.start).Seconds()
	names := make([]string, 0, len(f.families))
	for n := range f.families {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		labels := f.families[name]
		desc := prometheus.NewDesc(name, "a fake of "+name, labels, nil)
		for _, lv := range combinations(labels) {
			typ, v := prometheus.GaugeValue, 1.0
			switch {
			case strings.HasSuffix(name, "_total"):
				typ, v = prometheus.CounterValue, 100*elapsed
			case strings.HasSuffix(name, "_device_attached"):
				// eth0 native, veth1 generic.
				if (lv[len(lv)-2] == "eth0") != (lv[len(lv)-1] == "native") {
					v = 0
				}
			case name == "fastpath_br_device_ready" && lv[1] == "veth1":
				v = 0
			case strings.HasSuffix(name, "max_entries"):
				v = 1000
			case strings.HasSuffix(name, "entries"):
				v = 500
			}
			ch <- prometheus.MustNewConstMetric(desc, typ, v, lv...)
		}
	}
}

// combinations is every tuple of values of labels.
func combinations(labels []string) [][]string {
	out := [][]string{{}}
	for _, l := range labels {
		vs := values[l]
		if len(vs) == 0 {
			vs = []string{"x"}
		}
		var next [][]string
		for _, o := range out {
			for _, v := range vs {
				next = append(next, append(append([]string{}, o...), v))
			}
		}
		out = next
	}
	return out
}

// serve runs an exporter of function's families (obs's registry and all)
// on 127.0.0.1 until the test ends; function "router" is scionproto's.
func serve(t *testing.T, function string) string {
	t.Helper()
	fams := map[string][]string{}
	var reg *prometheus.Registry
	if function == "router" {
		reg = prometheus.NewRegistry()
		fams = monitoring.RouterFamilies
	} else {
		reg = obs.NewRegistry(function)
		for n, l := range monitoring.SpecFamilies {
			if monitoring.Function(n) == function {
				fams[n] = l
			}
		}
	}
	reg.MustRegister(&fake{families: fams, start: time.Now().Add(-time.Minute)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { obs.ServeListener(ctx, ln, reg); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// What the fake serves is an exposition promtool accepts, as the real
	// exporters' must be.
	obstest.CheckMetrics(t, obstest.Scrape(t, "http://"+ln.Addr().String()+"/metrics"))
	return ln.Addr().String()
}

func TestQueriesOnPrometheus(t *testing.T) {
	// Log records, and repeats beyond the rate limit, for the log panels
	// (obs counts them for the whole process).
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	logger, err := obs.NewLogger(null, obs.LogOptions{Level: "info", Format: "text"})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		logger.Warn("a warning the test repeats")
	}
	var targets []promtest.Target
	for _, fn := range []string{"br", "fw", "tra", "rt"} {
		targets = append(targets, promtest.Target{Job: "fastpath-" + fn, Addr: serve(t, fn)})
	}
	targets = append(targets, promtest.Target{Job: "scion-router", Addr: serve(t, "router")})
	p := promtest.Start(t, targets...)
	p.WaitScraped(t, 3)
	// The alerts' pending state shows on the overview: wait for the first
	// evaluation of the rules.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := promtest.Query(p.URL, `ALERTS{alertname="FastpathDeviceGeneric"}`)
		if err == nil && len(r.Result) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	res := promtest.RunQueries(t, p.URL)
	n := map[bool]int{}
	for _, r := range res {
		n[r.Alert]++
	}
	t.Logf("%d dashboard queries and %d rule expressions accepted", n[false], n[true])
	// Against exporters that serve every family, every panel shows data.
	promtest.RequireData(t, res, "grafana/")
	promtest.CheckRules(t, p.URL)
	// And the rules see what the fakes hold.
	for _, alert := range []string{"FastpathDeviceGeneric", "FastpathBRDeviceNotReady", "FastpathTranslatorWithoutPath"} {
		r, err := promtest.Query(p.URL, fmt.Sprintf(`ALERTS{alertname=%q}`, alert))
		if err != nil || len(r.Result) == 0 {
			t.Errorf("%s is not pending against the fakes: %v", alert, err)
		}
	}
}
