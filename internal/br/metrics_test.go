package br

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
	"github.com/fastpath-dev/fastpath/internal/obs/promtest"
)

// br serve --metrics: what the router does is read from its maps at each
// scrape, under scionproto's router's labels (the interface the packets
// arrived on, the local and the neighbour's ISD-AS), and the exposition
// passes promtool. Datagrams that leave by a device that takes no XDP
// frames are passed up (reason tx_unusable) and not counted as input;
// once the keeper sees the device take frames, it says the device is
// ready, counts the change, and the datagrams are input and output.
func TestServeMetrics(t *testing.T) {
	b := newHostBed(t, false)
	b.setGRO(t, b.b, "b0", false)
	reg := obs.NewRegistry("br")
	name, log, reload, _ := b.serve(t, func(o *ServeOptions) { o.Metrics = reg })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- obs.ServeListener(ctx, ln, reg) }()
	t.Cleanup(func() { cancel(); <-served })
	url := "http://" + ln.Addr().String() + "/metrics"

	// Interface 1 of 1-ff00:0:110, towards 1-ff00:0:111: where A's
	// datagrams arrive.
	if1 := map[string]string{"name": name, "isd_as": "1-ff00:0:110", "interface": "1", "neighbor_isd_as": "1-ff00:0:111"}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range m {
			out[a] = b
		}
		return out
	}
	s := b.sender(t, name, log)
	s.burst(5, "tx_unusable")
	body := obstest.Scrape(t, url)
	obstest.CheckMetrics(t, body)
	want := []struct {
		family string
		labels map[string]string
		value  float64
	}{
		{"fastpath_br_passed_pkts_total", with(if1, "reason", "tx_unusable"), 5},
		{"fastpath_br_input_pkts_total", if1, 0},
		{"fastpath_br_output_pkts_total", if1, 0},
		{"fastpath_br_input_pkts_total", map[string]string{"name": name, "isd_as": "1-ff00:0:110", "interface": "internal", "neighbor_isd_as": "1-ff00:0:110"}, 0},
		{"fastpath_br_device_ready", map[string]string{"name": name, "device": "d1"}, 0},
		{"fastpath_br_device_attached", map[string]string{"name": name, "device": "d0", "mode": "native"}, 1},
		{"fastpath_br_device_attached", map[string]string{"name": name, "device": "d1", "mode": "native"}, 1},
		{"fastpath_br_map_entries", map[string]string{"name": name, "map": "br_sockets"}, 3},
		{"fastpath_br_map_max_entries", map[string]string{"name": name, "map": "br_sockets"}, maxSlots},
		{"fastpath_br_reloads_total", map[string]string{"name": name, "result": "ok"}, 0},
		{"fastpath_build_info", map[string]string{"function": "br"}, 1},
	}
	for _, w := range want {
		if got, ok := sample(t, body, w.family, w.labels); !ok || got != w.value {
			t.Errorf("%s%v = %v (there: %v), want %v", w.family, w.labels, got, ok, w.value)
		}
	}
	if t.Failed() {
		t.Fatalf("scrape:\n%s", body)
	}

	b.setGRO(t, b.b, "b0", true)
	s.until("forwarded")
	body = obstest.Scrape(t, url)
	in, _ := sample(t, body, "fastpath_br_input_pkts_total", if1)
	fwd := float64(verdicts(t, name)["forwarded"])
	s.burst(7, "forwarded")
	reload <- struct{}{}
	waitFor(t, log, "configuration reloaded")
	body = obstest.Scrape(t, url)
	obstest.CheckMetrics(t, body)
	for _, w := range []struct {
		family string
		labels map[string]string
		value  float64
	}{
		{"fastpath_br_input_pkts_total", if1, in + 7},
		{"fastpath_br_output_pkts_total", if1, fwd + 7},
		{"fastpath_br_passed_pkts_total", with(if1, "reason", "tx_unusable"), float64(verdicts(t, name)["tx_unusable"])},
		{"fastpath_br_device_ready", map[string]string{"name": name, "device": "d1"}, 1},
		{"fastpath_br_keeper_changes_total", map[string]string{"name": name, "kind": "device_ready"}, 1},
		{"fastpath_br_reloads_total", map[string]string{"name": name, "result": "ok"}, 1},
		{"fastpath_br_reloads_total", map[string]string{"name": name, "result": "error"}, 0},
	} {
		if got, ok := sample(t, body, w.family, w.labels); !ok || got != w.value {
			t.Errorf("%s%v = %v (there: %v), want %v", w.family, w.labels, got, ok, w.value)
		}
	}
	// Bytes move with the packets.
	if got, _ := sample(t, body, "fastpath_br_input_bytes_total", if1); got < 7*64 {
		t.Errorf("fastpath_br_input_bytes_total%v = %v, want at least 7 frames' worth", if1, got)
	}
	if t.Failed() {
		t.Fatalf("scrape:\n%s", body)
	}

	// The router's dashboard and the alert rules, run by a real Prometheus
	// that scrapes this exporter while the datagrams flow: every query is
	// accepted and every panel has data, but for those that wait for what
	// this bed does not have (scionproto's router beside it, a drop, IP
	// forwarding, logs: this router logs into the test's buffer, not
	// through obs, whose counts internal/obs tests).
	p := promtest.Start(t, promtest.Target{Job: "fastpath-br", Addr: ln.Addr().String()})
	stop := make(chan struct{})
	flowing := make(chan struct{})
	go func() {
		defer close(flowing)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				s.one()
			}
		}
	}()
	p.WaitScraped(t, 4)
	res := promtest.RunQueries(t, p.URL)
	close(stop)
	<-flowing
	promtest.RequireData(t, res, "grafana/fastpath-br.json", "scionproto's router", "Dropped in XDP", "Log messages", "Plain IP")
	promtest.CheckRules(t, p.URL)
}

// sample is the value of the series of family with exactly these labels
// in an exposition, and whether there is one.
func sample(t *testing.T, body []byte, family string, labels map[string]string) (float64, bool) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	f, ok := fams[family]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		match := true
		for k, v := range labels {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k {
					found = l.GetValue() == v
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}
