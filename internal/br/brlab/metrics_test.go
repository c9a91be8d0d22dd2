package brlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
)

// ifKey is what one panel sums by: scionproto's router's labels.
type ifKey struct{ ia, iface string }

// In hybrid mode the reference router counts what fastpath passes up and
// fastpath counts what it handles itself, so that on one panel
// router_input_pkts_total + fastpath_br_input_pkts_total, by (isd_as,
// interface), is every packet the router box took in. In the lab's
// network (a core AS between two leaves, BFD off), fastpath in front of
// the core forwards the echo replies in XDP, and passes the requests up
// to the reference router (the second leaf's devices have GRO off, so the
// core's device towards it takes no XDP frames: tx_unusable). For N
// pings, each of the core's two interfaces takes in N echoes: the
// requests by one, counted by the reference router, the replies by the
// other, counted by fastpath; and on each, what fastpath passed up (the
// requests and the control plane's packets) is exactly what the reference
// router took in.
func TestHybridMetricsAddUp(t *testing.T) {
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	b := make([]byte, 2)
	rand.Read(b)
	n := scionlab.Network{Prefix: "fp-m" + hex.EncodeToString(b) + "-", Dir: filepath.Join(t.TempDir(), "scion")}
	t.Cleanup(func() {
		if err := n.Down(io.Discard); err != nil {
			t.Error(err)
		}
	})
	var log strings.Builder
	if _, err := n.Up(context.Background(), scionlab.UpOptions{ASes: 3, NoBFD: true, Log: &log}); err != nil {
		t.Fatalf("up: %v\n%s", err, log.String())
	}
	as, _, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	core, from, to := as[0], as[1], as[2]
	groOff(t, to.Netns)
	name, err := n.AttachHybrid(core, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Detach(name, nil) })

	reg := obs.NewRegistry("br")
	reg.MustRegister(br.NewCollector(br.MetricsOptions{Name: name}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- obs.ServeListener(ctx, ln, reg) }()
	t.Cleanup(func() { cancel(); <-served })
	url := "http://" + ln.Addr().String() + "/metrics"

	dst := to.IA.String() + "," + to.Host.String()
	ping := func(count int) {
		out, err := n.Scion(context.Background(), from, "ping", dst, "-c", strconv.Itoa(count), "--interval", "20ms", "--timeout", "1s")
		if m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(out); m == nil || m[2] != strconv.Itoa(count) {
			t.Fatalf("scion ping: %v\n%s", err, out)
		}
	}
	ping(1) // the path looked up and cached before the count starts
	before := snapshot(t, n, core, url)
	const count = 100
	ping(count)
	// What fastpath passed up the reference router reads a moment later.
	var after counts
	for i := 0; i < 10; i++ {
		after = snapshot(t, n, core, url)
		same := true
		for k := range after.ref {
			same = same && (k.iface == "internal" || after.ref[k]-before.ref[k] == after.passed[k]-before.passed[k])
		}
		if same {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Each echo request comes in by one of the core's interfaces, its
	// reply by the other. The control plane's packets (beacons, segment
	// registrations, path lookups) cross too, all passed up: the echoes
	// on an interface are the sum less those.
	var requests, replies int
	for k := range after.ref {
		ref, fp := after.ref[k]-before.ref[k], after.input[k]-before.input[k]
		passed, unusable := after.passed[k]-before.passed[k], after.unusable[k]-before.unusable[k]
		t.Logf("%s interface %s: reference router %v, fastpath %v; fastpath passed up %v (tx_unusable %v)", k.ia, k.iface, ref, fp, passed, unusable)
		if k.iface == "internal" {
			// The core's control service and daemon share the router's
			// host: what they send the router crosses no device, and no
			// XDP program sees it.
			continue
		}
		if ref != passed {
			t.Errorf("%s interface %s: fastpath passed up %v, the reference router took in %v", k.ia, k.iface, passed, ref)
		}
		if echoes := ref + fp - (passed - unusable); echoes != count {
			t.Errorf("%s interface %s: %v + %v packets in, %v of them the control plane's: %v echoes, want %d", k.ia, k.iface, ref, fp, passed-unusable, echoes, count)
		}
		switch {
		case unusable == count && fp == 0:
			requests++
		case unusable == 0 && fp == count:
			replies++
		}
	}
	if requests != 1 || replies != 1 {
		t.Errorf("want the requests taken in by the reference router on one interface (%d) and the replies by fastpath on the other (%d)", requests, replies)
	}
}

// groOff turns GRO off on every device of a namespace: frames redirected
// in XDP into a veth whose peer is there are dropped, so fastpath leaves
// them to the reference router (tx_unusable).
func groOff(t *testing.T, ns string) {
	t.Helper()
	h, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	links, err := h.LinkList()
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Type() != "veth" {
			continue
		}
		if out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "ethtool", "-K", l.Attrs().Name, "gro", "off").CombinedOutput(); err != nil {
			t.Fatalf("GRO off on %s/%s: %v\n%s", ns, l.Attrs().Name, err, out)
		}
	}
}

// counts are an AS's two routers' counters by (isd_as, interface): the
// reference router's router_input_pkts_total (over its size classes),
// fastpath's input and passed.
type counts struct{ ref, input, passed, unusable map[ifKey]float64 }

// snapshot reads both routers at a moment when nothing crossed between
// the reads: the reference router before and after fastpath, the same.
func snapshot(t *testing.T, n scionlab.Network, a scionlab.AS, url string) counts {
	t.Helper()
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		r1 := reference(t, n, a)
		body := obstest.Scrape(t, url)
		r2 := reference(t, n, a)
		if fmt.Sprint(r1) != fmt.Sprint(r2) {
			last = fmt.Sprintf("%v then %v", r1, r2)
			continue
		}
		obstest.CheckMetrics(t, body)
		c := counts{ref: r1, input: family(t, body, "fastpath_br_input_pkts_total", ""), passed: family(t, body, "fastpath_br_passed_pkts_total", ""),
			unusable: family(t, body, "fastpath_br_passed_pkts_total", "tx_unusable")}
		return c
	}
	t.Fatalf("the reference router's counters never stood still for a read of fastpath's: %s", last)
	return counts{}
}

var seriesRE = regexp.MustCompile(`^router_input_pkts_total\{(.*)\}$`)
var labelRE = regexp.MustCompile(`(\w+)="([^"]*)"`)

func reference(t *testing.T, n scionlab.Network, a scionlab.AS) map[ifKey]float64 {
	t.Helper()
	m, err := n.RouterMetrics(a)
	if err != nil {
		t.Fatal(err)
	}
	out := map[ifKey]float64{}
	for series, v := range m {
		sm := seriesRE.FindStringSubmatch(series)
		if sm == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(sm[1], -1) {
			labels[l[1]] = l[2]
		}
		out[ifKey{labels["isd_as"], labels["interface"]}] += v
	}
	return out
}

// family sums a fastpath family by (isd_as, interface), over the series
// of one reason if reason is set.
func family(t *testing.T, body []byte, name, reason string) map[ifKey]float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[ifKey]float64{}
	for _, m := range fams[name].GetMetric() {
		var k ifKey
		r := ""
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "isd_as":
				k.ia = l.GetValue()
			case "interface":
				k.iface = l.GetValue()
			case "reason":
				r = l.GetValue()
			}
		}
		if reason == "" || r == reason {
			out[k] += m.GetCounter().GetValue()
		}
	}
	return out
}
