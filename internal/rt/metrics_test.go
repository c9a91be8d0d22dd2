package rt

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
	"github.com/fastpath-dev/fastpath/internal/obs/promtest"
)

// TestRunServesMetrics runs xdp_tx over AF_XDP with --metrics on a free
// port of the DUT's namespace: before traffic the device is attached and
// every counter is 0; after 20,000 frames the tx counters of the device's
// queue 0 say 20,000 frames and their bytes, which is what the run's own
// summary says at the end. promtool finds nothing to lint, and requests
// that are not HTTP are answered 400 without stopping the exporter.
func TestRunServesMetrics(t *testing.T) {
	if _, err := Binary(); err != nil {
		t.Fatal(err)
	}
	tb := labtest.Testbed(t)
	ns, dev := tb.DUTIn().Netns, tb.DUTIn().Dev
	args := []string{"run", filepath.Join("..", "bench", "xdptx_bpfel.o"), "--dev", dev, "--engine", "jit", "--duration", "20", "--json", "--metrics", "127.0.0.1:0"}
	var out bytes.Buffer
	cmd, errText, url := startRunMetrics(t, tb, args, &out)
	attached := fmt.Sprintf(`fastpath_rt_device_attached{device=%q,mode="native"}`, dev)
	series := func(family, verdict string) string {
		return fmt.Sprintf(`%s{device=%q,queue="0",verdict=%q}`, family, dev, verdict)
	}
	value := func(body []byte, s string) uint64 {
		t.Helper()
		v, ok := obstest.Value(body, s)
		if !ok {
			t.Fatalf("no %s in\n%s", s, body)
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", s, v, err)
		}
		return uint64(n)
	}

	body := scrapeIn(t, ns, url)
	obstest.CheckMetrics(t, body)
	if value(body, attached) != 1 || value(body, series("fastpath_rt_packets_total", "tx")) != 0 {
		t.Fatalf("before traffic:\n%s", body)
	}
	for _, want := range []string{`function="rt"`, `process_start_time_seconds `, fmt.Sprintf(`fastpath_rt_errors_total{device=%q,kind="fill_ring_empty"} `, dev), fmt.Sprintf(`fastpath_rt_errors_total{device=%q,kind="tx_ring_full"} `, dev)} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("no %s in\n%s", want, body)
		}
	}
	if h := getIn(t, ns, url, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); h.StatusCode != 200 {
		t.Errorf("/healthz: %s", h.Status)
	}

	// A real Prometheus scrapes the runtime (through a relay from this
	// namespace into the DUT's) from before the frames until after them.
	prom := promtest.Start(t, promtest.Target{Job: "fastpath-rt", Addr: relayInto(t, ns, strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics"))})
	prom.WaitScraped(t, 2)

	u := tb.DefaultUDP()
	const frames = 20000
	sent := sendUDP(t, tb, frames)
	// The queue's thread publishes its counts after each pass over its
	// rings: once the frames are in, they are all counted.
	var tx, bytesTx uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		body = scrapeIn(t, ns, url)
		tx, bytesTx = value(body, series("fastpath_rt_packets_total", "tx")), value(body, series("fastpath_rt_bytes_total", "tx"))
		if tx == frames || time.Now().After(deadline) {
			break
		}
	}
	obstest.CheckMetrics(t, body)
	if sent != frames || tx != frames || bytesTx != frames*uint64(u.Size) {
		t.Fatalf("sent %d frames of %d bytes; the exporter says %d frames and %d bytes sent back:\n%s", sent, u.Size, tx, bytesTx, body)
	}
	for _, v := range []string{"drop", "pass", "aborted", "redirect"} {
		if n := value(body, series("fastpath_rt_packets_total", v)); n != 0 {
			t.Errorf("%s: %d, want 0", v, n)
		}
	}

	// Garbage, a request too long, a wrong method and path: answered, and
	// the exporter goes on.
	for req, want := range map[string]int{
		"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n":      400,
		"GET /metrics\r\n\r\n":                                      400,
		"GET /metrics HTTP/1.1\r\nX: " + strings.Repeat("a", 1<<16): 431,
		"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n":       405,
		"GET /nothing HTTP/1.1\r\n\r\n":                             404,
	} {
		if r := getIn(t, ns, url, req); r.StatusCode != want {
			t.Errorf("%q: %s, want %d", req[:min(len(req), 30)], r.Status, want)
		}
	}
	body = scrapeIn(t, ns, url)
	if value(body, series("fastpath_rt_packets_total", "tx")) != frames {
		t.Fatalf("after the garbage:\n%s", body)
	}

	// The runtime's dashboard and the alert rules against what it served:
	// every query accepted, every panel with data, but for those that wait
	// for what this run has not (drops and aborts: xdp_tx sends every
	// frame back; logs: the runtime counts none).
	prom.WaitScraped(t, 4)
	res := promtest.RunQueries(t, prom.URL)
	promtest.RequireData(t, res, "grafana/fastpath-rt.json", "Aborted", "Dropped", "drop")
	promtest.CheckRules(t, prom.URL)

	_, num, _ := waitSummary(t, cmd, errText, &out)
	if num("tx") != tx || num("packets") != frames {
		t.Fatalf("the summary says tx %d of %d packets, the exporter said %d", num("tx"), num("packets"), tx)
	}
	labtest.RequireDetached(t, tb.DUTIn().Iface())
}

// TestMetricsAddressRefused: a taken address and one that is no address
// fail the start at once, saying which, and nothing is attached.
func TestMetricsAddressRefused(t *testing.T) {
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	tb := labtest.Testbed(t)
	ns, dev := tb.DUTIn().Netns, tb.DUTIn().Dev
	var taken net.Listener
	if err := netns.Run(ns, func() (err error) {
		taken, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for addr, want := range map[string]string{
		taken.Addr().String(): "another process listens there",
		"127.0.0.1":           "give HOST:PORT",
		":http-alt-x":         "not a port",
	} {
		var out []byte
		err := netns.Run(ns, func() (err error) {
			out, err = exec.Command(bin, "forward", "--dev", dev, "--metrics", addr).CombinedOutput()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "--metrics") || !strings.Contains(string(out), want) {
			t.Errorf("--metrics %s: %s; want an error with %q", addr, out, want)
		}
		labtest.RequireDetached(t, tb.DUTIn().Iface())
	}
	// Only run and forward serve metrics.
	out, err := exec.Command(bin, "list", filepath.Join("..", "bench", "xdptx_bpfel.o"), "--metrics", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--metrics is for run and forward") {
		t.Errorf("list --metrics: %v: %s", err, out)
	}
}

// startRunMetrics is startRun for a run with --metrics: it also returns
// the URL the runtime said it serves metrics on.
func startRunMetrics(t *testing.T, tb lab.Testbed, args []string, out *bytes.Buffer) (*exec.Cmd, chan string, string) {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Run(tb.DUTIn().Netns, cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	serving := regexp.MustCompile(`serving metrics on (http://\S+)`)
	urls, errText := make(chan string, 1), make(chan string, 1)
	go func() {
		var all []string
		url := ""
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			all = append(all, sc.Text())
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				url = m[1]
			}
			if strings.Contains(sc.Text(), "queue 0") && url != "" {
				urls <- url
			}
		}
		errText <- strings.Join(all, "\n")
	}()
	select {
	case url := <-urls:
		return cmd, errText, url
	case <-time.After(10 * time.Second):
		t.Fatalf("the runtime did not start: %s", <-errText)
	}
	return nil, nil, ""
}

// getIn sends one raw request to the exporter at url from inside the
// namespace (its 127.0.0.1 is the namespace's) and reads the answer.
func getIn(t *testing.T, ns, url, request string) *http.Response {
	t.Helper()
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")
	var conn net.Conn
	if err := netns.Run(ns, func() (err error) {
		conn, err = net.DialTimeout("tcp", host, 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	// A request longer than the exporter reads may be cut off by its
	// answer: what matters is that answer.
	conn.Write([]byte(request))
	r, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", request[:min(len(request), 30)], err)
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return r
}

// scrapeIn is one scrape of url from inside the namespace.
func scrapeIn(t *testing.T, ns, url string) []byte {
	t.Helper()
	r := getIn(t, ns, url, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("scrape %s: %s %s\n%s", url, r.Status, r.Header.Get("Content-Type"), b)
	}
	return b
}

// relayInto relays connections to a loopback address of this namespace
// on to target in namespace ns, until the test ends: how a Prometheus of
// the host's namespace scrapes an exporter that listens in a test's.
func relayInto(t *testing.T, ns, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var d net.Conn
				if err := netns.Run(ns, func() (err error) {
					d, err = net.Dial("tcp", target)
					return err
				}); err != nil {
					return
				}
				defer d.Close()
				go io.Copy(d, c)
				io.Copy(c, d)
			}()
		}
	}()
	return ln.Addr().String()
}
