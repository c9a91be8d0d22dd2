package tra

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/daemon"
	"github.com/scionproto/scion/pkg/snet"
	snetpath "github.com/scionproto/scion/pkg/snet/path"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
	"github.com/fastpath-dev/fastpath/internal/obs/promtest"
)

// What `tra run --metrics` serves: the families promtool takes without a
// word, the programs' verdicts by direction, and what the daemon did to
// the paths (installed, failed over, ...), counted as it did it.

// serveMetrics serves g on a free loopback port until the test ends and
// gives the URL of /metrics.
func serveMetrics(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- obs.ServeListener(ctx, ln, g) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String() + "/metrics"
}

// sample is a series' value in an exposition (the test fails without it).
func sample(t *testing.T, body []byte, series string) float64 {
	t.Helper()
	v, ok := obstest.Value(body, series)
	if !ok {
		t.Fatalf("no %s in:\n%s", series, body)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s %q: %v", series, v, err)
	}
	return f
}

// The daemon counts what it does to the paths as it does it: against its
// fakes, a path installed, a failover for an interface down, a lookup
// that finds no path and the destination left without one.
func TestDaemonMetrics(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	p1, _ := installTwo(t, td)
	td.onEvent(ifDown(localIA, localIA, 1, quoteOf(t, p1, hostIP4)))
	td.settle(t)
	lonely := addr.MustParseIA("1-64599")
	td.onHeld(heldUDP(t, lonely))
	td.settle(t)
	td.publish()

	reg := obs.NewRegistry("tra")
	c := NewCollector("")
	c.watch("fp-metrics-test", td.pathDaemon) // no such pins: the daemon's families alone
	reg.MustRegister(c)
	body := obstest.Scrape(t, serveMetrics(t, reg))
	obstest.CheckMetrics(t, body)
	const n = `name="fp-metrics-test"`
	for series, want := range map[string]float64{
		`fastpath_tra_path_changes_total{kind="installed",` + n + `}`:      1,
		`fastpath_tra_path_changes_total{kind="failover",` + n + `}`:       1,
		`fastpath_tra_path_changes_total{kind="expired",` + n + `}`:        0,
		`fastpath_tra_paths{` + n + `}`:                                    1,
		`fastpath_tra_destinations{` + n + `}`:                             2,
		`fastpath_tra_destinations_without_path{` + n + `}`:                1,
		`fastpath_tra_held_pkts{` + n + `}`:                                0,
		`fastpath_tra_daemon_requests_total{` + n + `,result="error"}`:     1,
		`fastpath_tra_dropped_pkts_total{` + n + `,reason="held_no_path"}`: 1,
		`fastpath_tra_events_total{event="interface_down",` + n + `}`:      1,
		`fastpath_tra_events_total{event="held_sent",` + n + `}`:           1,
	} {
		if got := sample(t, body, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// The first lookup and the one after the failover.
	if got := sample(t, body, `fastpath_tra_daemon_requests_total{`+n+`,result="ok"}`); got < 1 {
		t.Errorf("daemon requests ok = %v", got)
	}
	if strings.Contains(string(body), lonely.String()) || strings.Contains(string(body), remoteIA.String()) {
		t.Errorf("a destination AS in a label:\n%s", body)
	}
}

// A daemon that cannot be reached is told from one that answers badly:
// the connection is made lazily, so it shows on the lookup.
func TestUnreachableDaemonCounted(t *testing.T) {
	s := &lazySource{addr: "127.0.0.1:1", timeout: 2 * time.Second}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.Paths(ctx, remoteIA, localIA, daemon.PathReqFlags{})
	if !errors.Is(err, errDaemonUnreachable) {
		t.Fatalf("lookup at a closed port: %v, want errDaemonUnreachable", err)
	}
	td := newTestDaemon(t, 1, Limits{})
	td.countRequest(err, err)
	if td.metrics.requests[requestUnreachable].Load() != 1 {
		t.Fatal("not counted unreachable")
	}
}

// The translator attached in a test namespace with the daemon running:
// the host's packets to an AS without a path are held, the daemon installs
// the path its source gives and sends them on; a scrape says so, with the
// device's XDP mode and the maps' fill.
func TestMetricsOfARunningTranslator(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1") // a path to remoteIA installed before the daemon runs
	newIA := addr.MustParseIA("1-64515")
	dst, err := FromSCION(newIA, remote4)
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{paths: map[addr.IA][]snet.Path{newIA: {snetpath.Path{
		Src: localIA, Dst: newIA, DataplanePath: snetpath.SCION{Raw: testPath(t)},
		NextHop: net.UDPAddrFromAddrPort(farRouter),
		Meta:    snet.PathMetadata{MTU: 1472, Expiry: time.Now().Add(time.Hour)},
	}}}}
	reg := obs.NewRegistry("tra")
	col := NewCollector("")
	reg.MustRegister(col)
	url := serveMetrics(t, reg)

	ctx, cancel := context.WithCancel(context.Background())
	var log syncLog
	done := make(chan error, 1)
	go func() {
		done <- netns.Run(a.host, func() error {
			return Run(ctx, a.cfg, RunOptions{Name: a.name, Log: logTo(&log), Source: src, Collector: col})
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("daemon:\n%s", log.String())
		}
	}()
	eventually(t, 5*time.Second, "the daemon's first line", func() bool { return strings.Contains(log.String(), "paths from") })

	c := a.dialUDP(t, netip.AddrPortFrom(dst, 31000))
	name := `name="` + a.name + `"`
	var body []byte
	eventually(t, 10*time.Second, "the held packets sent on, translated", func() bool {
		c.Write([]byte("to an AS whose path the daemon fetches"))
		body = obstest.Scrape(t, url)
		v, _ := obstest.Value(body, `fastpath_tra_packets_total{direction="ip_to_scion",`+name+`,verdict="translated"}`)
		f, _ := strconv.ParseFloat(v, 64)
		return f >= 2
	})
	// The loop publishes its state at its next tick.
	eventually(t, 5*time.Second, "the paths published", func() bool {
		body = obstest.Scrape(t, url)
		v, _ := obstest.Value(body, `fastpath_tra_paths{`+name+`}`)
		return v == "2"
	})
	obstest.CheckMetrics(t, body)
	if os.Getenv("FP_DUMP") != "" {
		t.Logf("%s", body)
	}
	for series, want := range map[string]float64{
		`fastpath_tra_path_changes_total{kind="installed",` + name + `}`: 1,
		`fastpath_tra_path_changes_total{kind="adopted",` + name + `}`:   1,
		`fastpath_tra_daemon_requests_total{` + name + `,result="ok"}`:   1,
		`fastpath_tra_destinations{` + name + `}`:                        2,
		`fastpath_tra_destinations_without_path{` + name + `}`:           0,
		`fastpath_tra_map_entries{map="tra_dests",` + name + `}`:         2,
		`fastpath_tra_map_max_entries{map="tra_dests",` + name + `}`:     MaxDests,
		`fastpath_tra_map_max_entries{map="tra_routers",` + name + `}`:   MaxRouters,
	} {
		if got := sample(t, body, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for _, series := range []string{
		`fastpath_tra_packets_total{direction="ip_to_scion",` + name + `,verdict="held"}`,
		`fastpath_tra_events_total{event="held_sent",` + name + `}`,
	} {
		if got := sample(t, body, series); got < 1 {
			t.Errorf("%s = %v, want at least 1", series, got)
		}
	}
	native := sample(t, body, `fastpath_tra_device_attached{device="eth0",mode="native",`+name+`}`)
	if native != 1 {
		t.Errorf("eth0 (a veth) not attached native:\n%s", body)
	}
	if strings.Contains(string(body), dst.String()) || strings.Contains(string(body), newIA.String()) {
		t.Errorf("an address or AS in a label:\n%s", body)
	}

	// The translator's dashboard and the alert rules, run by a real
	// Prometheus that scrapes this exporter while the host sends: every
	// query is accepted and every panel has data, but for those that wait
	// for what this bed does not have (drops, probes, SCION traffic back
	// to the host, logs: this daemon logs into the test's buffer, not
	// through obs, whose counts internal/obs tests).
	p := promtest.Start(t, promtest.Target{Job: "fastpath-tra", Addr: strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")})
	stop := make(chan struct{})
	flowing := make(chan struct{})
	go func() {
		defer close(flowing)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				c.Write([]byte("while Prometheus scrapes"))
			}
		}
	}()
	p.WaitScraped(t, 4)
	res := promtest.RunQueries(t, p.URL)
	close(stop)
	<-flowing
	promtest.RequireData(t, res, "grafana/fastpath-tra.json", "Log messages", "suppressed")
	promtest.CheckRules(t, p.URL)
}
