package fw

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
	"github.com/fastpath-dev/fastpath/internal/obs/promtest"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// scrapeCollector is what a scrape of c alone serves, in the text format.
func scrapeCollector(c prometheus.Collector) ([]byte, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// sendFrames writes frames into peer (in its namespace) from an AF_PACKET
// socket: they arrive on its veth partner, where the firewall runs.
func sendFrames(t *testing.T, peer xdp.Iface, frames ...[]byte) {
	t.Helper()
	if err := trySendFrames(peer, frames...); err != nil {
		t.Fatal(err)
	}
}

func trySendFrames(peer xdp.Iface, frames ...[]byte) error {
	attrs, err := xdp.Lookup(peer)
	if err != nil {
		return err
	}
	return netns.Run(peer.Netns, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, f := range frames {
			to := &unix.SockaddrLinklayer{Ifindex: attrs.Index, Halen: 6}
			copy(to.Addr[:], f[0:6])
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return err
			}
		}
		return nil
	})
}

// serveMetrics serves reg on a free loopback port as fw serve --metrics
// does, and returns its /metrics URL.
func serveMetrics(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- obs.ServeListener(ctx, ln, reg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + ln.Addr().String() + "/metrics"
}

// value is a series' value in a scrape, failing the test if it is missing.
func value(t *testing.T, body []byte, series string) float64 {
	t.Helper()
	s, ok := obstest.Value(body, series)
	if !ok {
		t.Fatalf("the scrape has no %s:\n%s", series, body)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

// The exporter of an attached firewall: frames through a veth in a
// namespace of the test's own, passed and dropped, show in a scrape that
// promtool finds clean, each counted once by verdict, dropped by reason,
// on the rule that took them (named rules by name, the default policy),
// with the device in its mode; the series keep their labels when rules
// are added in front, and only named rules have series by default.
func TestMetricsOnVeth(t *testing.T) {
	name, dev, peer := vethBed(t)
	rs, err := ParseRules("m.toml", []byte(`default = "pass"
[conntrack]
enabled = true

[[rule]]
name = "no-dns"
action = "drop"
proto = "udp"
dport = 53

[[rule]]
action = "drop"
proto = "udp"
dport = 9
`))
	if err != nil {
		t.Fatal(err)
	}
	f := attachInstance(t, AttachOptions{Name: name, Devices: []xdp.Iface{dev}, NoFallback: true, Rules: rs})

	reg := obs.NewRegistry("fw")
	c := NewCollector(name, MetricsOptions{})
	defer c.Close()
	own := NewServeMetrics(name)
	reg.MustRegister(c, own)
	url := serveMetrics(t, reg)
	before := obstest.Scrape(t, url)
	obstest.CheckMetrics(t, before)

	lr := func(family, k, v string) string { // a label sorted before name
		return family + `{` + k + `="` + v + `",name="` + name + `"}`
	}
	lrAfter := func(family, k, v string) string { // one sorted after name
		return family + `{name="` + name + `",` + k + `="` + v + `"}`
	}
	// Frames on the wire: 3 dropped by the named rule, 2 by the unnamed
	// one, 4 passed by the default policy.
	var frames [][]byte
	for i := range 3 {
		frames = append(frames, packet(t, flow("192.0.2.1", "198.51.100.1", 17, uint16(2000+i), 53), 10))
	}
	for i := range 2 {
		frames = append(frames, packet(t, flow("192.0.2.1", "198.51.100.1", 17, uint16(3000+i), 9), 10))
	}
	for i := range 4 {
		frames = append(frames, packet(t, flow("192.0.2.1", "198.51.100.1", 17, uint16(4000+i), 7000), 10))
	}
	sendFrames(t, peer, frames...)

	var after []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		after = obstest.Scrape(t, url)
		if v, ok := obstest.Value(after, lrAfter("fastpath_fw_packets_total", "verdict", "pass")); ok && v == "4" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 9 frames are not all counted 10 s later:\n%s", after)
		}
	}
	obstest.CheckMetrics(t, after)
	for series, want := range map[string]float64{
		lrAfter("fastpath_fw_packets_total", "verdict", "pass"):                                             4,
		lrAfter("fastpath_fw_packets_total", "verdict", "drop"):                                             5,
		lrAfter("fastpath_fw_packets_total", "verdict", "tx"):                                               0,
		lrAfter("fastpath_fw_dropped_pkts_total", "reason", "rule"):                                         5,
		lrAfter("fastpath_fw_dropped_pkts_total", "reason", "default"):                                      0,
		lrAfter("fastpath_fw_rule_packets_total", "rule", "no-dns"):                                         3,
		lrAfter("fastpath_fw_rule_packets_total", "rule", "default"):                                        4,
		lrAfter("fastpath_fw_ct_packets_total", "state", "new"):                                             9,
		lrAfter("fastpath_fw_ct_entries", "table", "embryonic"):                                             4,
		lr("fastpath_fw_map_entries", "map", "fw_ct_new"):                                                   4,
		lr("fastpath_fw_map_max_entries", "map", "fw_ct_new"):                                               DefaultCtEmbryonic,
		`fastpath_fw_rules{name="` + name + `"}`:                                                            2,
		`fastpath_fw_device_attached{device="` + deviceLabel(dev) + `",mode="native",name="` + name + `"}`:  1,
		`fastpath_fw_device_attached{device="` + deviceLabel(dev) + `",mode="generic",name="` + name + `"}`: 0,
	} {
		if got := value(t, after, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if v := value(t, after, lrAfter("fastpath_fw_rule_bytes_total", "rule", "no-dns")); v < 3*10 {
		t.Errorf("no-dns took %v bytes, want at least the 3 frames' payloads", v)
	}
	if v := value(t, after, lr("fastpath_fw_events_total", "event", "classified")); v < 1 {
		t.Errorf("no classification counted")
	}
	// Opt-in: the unnamed rule has no series of its own by default.
	unnamed := rs.Rules[1].ID()
	if !strings.HasPrefix(unnamed, "h:") {
		t.Fatalf("the unnamed rule's identity is %q, want a hash", unnamed)
	}
	if _, ok := obstest.Value(after, lrAfter("fastpath_fw_rule_packets_total", "rule", unnamed)); ok {
		t.Errorf("an unnamed rule has a series with --rule-metrics named:\n%s", after)
	}
	// Each verdict once: the verdicts add up to what the drops and the
	// rules say, and nothing else counts packets.
	if strings.Contains(string(after), `fastpath_fw_packets_total{name="`+name+`",verdict="classified"`) {
		t.Errorf("an event is counted as a verdict")
	}

	// A rule added in front renames nothing: the series keep their
	// labels and their counts; with every rule exported, the unnamed one
	// has its hash, the same as before the insert.
	added, err := ParseRules("cli", []byte("[[rule]]\naction = \"drop\"\nproto = \"tcp\"\ndport = 22\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Insert(1, added.Rules[0]); err != nil {
		t.Fatal(err)
	}
	all := f.Collector(name, MetricsOptions{Rules: RuleMetricsAll})
	got, err := scrapeCollector(all)
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		lrAfter("fastpath_fw_rule_packets_total", "rule", "no-dns"):            3,
		lrAfter("fastpath_fw_rule_packets_total", "rule", unnamed):             2,
		lrAfter("fastpath_fw_rule_packets_total", "rule", added.Rules[0].ID()): 0,
		lrAfter("fastpath_fw_rule_packets_total", "rule", "default"):           4,
	} {
		if v := value(t, got, series); v != want {
			t.Errorf("after fw add --at 1: %s = %v, want %v", series, v, want)
		}
	}
	obstest.CheckMetrics(t, got)

	// The firewall's dashboard and the alert rules, run by a real
	// Prometheus that scrapes this exporter while frames pass and drop:
	// every query is accepted and every panel has data, but for the logs'
	// (this test's process does not log through obs, whose counts
	// internal/obs tests).
	p := promtest.Start(t, promtest.Target{Job: "fastpath-fw", Addr: strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")})
	stop := make(chan struct{})
	flowing := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				flowing <- nil
				return
			case <-time.After(50 * time.Millisecond):
				if err := trySendFrames(peer, frames...); err != nil {
					flowing <- err
					return
				}
			}
		}
	}()
	p.WaitScraped(t, 4)
	res := promtest.RunQueries(t, p.URL)
	close(stop)
	if err := <-flowing; err != nil {
		t.Fatal(err)
	}
	promtest.RequireData(t, res, "grafana/fastpath-fw.json", "Log messages")
	promtest.CheckRules(t, p.URL)
}

// Every counter of the program is exported, in a family for what it is: a
// counter added to enum fw_counter and left out of them would be served
// by fw stats alone.
func TestEveryCounterExported(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range dropReasons {
		seen[d.counter] = true
	}
	for _, list := range [][]string{passCounters, eventCounters} {
		for _, c := range list {
			seen[c] = true
		}
	}
	for _, s := range CtStateNames() {
		seen["ct_"+s] = true
	}
	for c := fwFwCounter(0); c < fwFwCounterFW_C_MAX; c++ {
		name, ok := counterNames[c]
		if !ok || !seen[name] {
			t.Errorf("counter %d (%q) is in no metrics family", c, name)
		}
	}
}
