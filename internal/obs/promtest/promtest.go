// Package promtest runs a real Prometheus server (the one scripts/deps.sh
// unpacks into obstest.Dir) against exporters a test starts, with
// fastpath's alert rules loaded, and runs every dashboard query and alert
// expression of deploy/monitoring through its HTTP API: what a query
// names, the server must accept, and what a dashboard shows, the exporters
// must serve.
//
// A test of a daemon's exporter does, with the daemon serving on addr:
//
//	p := promtest.Start(t, promtest.Target{Job: "fastpath-br", Addr: addr})
//	p.WaitScraped(t, 3)
//	res := promtest.RunQueries(t, p.URL)              // every query accepted
//	promtest.RequireData(t, res, "grafana/fastpath-br.json") // and br's dashboard shows data
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/deploy/monitoring"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
)

// Binary is the Prometheus server the tests run (v2.42, Debian's).
const Binary = obstest.Dir + "/prometheus"

// Target is one scrape target: a job name (the rules' FastpathExporterDown
// expects fastpath jobs to be named fastpath-…) and a host:port serving
// /metrics.
type Target struct {
	Job  string
	Addr string
}

// Server is a Prometheus server a test started.
type Server struct {
	// URL is its base URL, http://127.0.0.1:PORT.
	URL     string
	targets []Target
	cmd     *exec.Cmd
	out     *syncBuffer
	done    chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Config is the prometheus.yml Start writes: every target scraped each
// second, rules evaluated each second, the alert rules at rules.
func Config(rules string, targets []Target) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %q\nscrape_configs:\n", rules)
	jobs := map[string][]string{}
	var order []string
	for _, t := range targets {
		if _, ok := jobs[t.Job]; !ok {
			order = append(order, t.Job)
		}
		jobs[t.Job] = append(jobs[t.Job], t.Addr)
	}
	for _, j := range order {
		fmt.Fprintf(&b, "  - job_name: %q\n    static_configs:\n      - targets:\n", j)
		for _, a := range jobs[j] {
			fmt.Fprintf(&b, "          - %q\n", a)
		}
	}
	return b.String()
}

// Start runs Prometheus on 127.0.0.1 with a storage directory of the
// test's, scraping targets every second, with deploy/monitoring's alert
// rules loaded; it is stopped when the test ends. The test fails if the
// server is missing (scripts/deps.sh puts it in place) or does not start.
func Start(t testing.TB, targets ...Target) *Server {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Fatalf("no Prometheus server at %s: run scripts/deps.sh (make test does)", Binary)
	}
	dir := t.TempDir()
	rules := filepath.Join(dir, "fastpath-alerts.yml")
	if err := os.WriteFile(rules, monitoring.Alerts(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(Config(rules, targets)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The port is found free, then given to Prometheus: another process may
	// take it in between, so a start that fails to listen is tried again.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := start(t, dir, cfg, targets)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("prometheus did not start: %v", lastErr)
	return nil
}

func start(t testing.TB, dir, cfg string, targets []Target) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	data, err := os.MkdirTemp(dir, "data-")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + addr, targets: targets, out: &syncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(Binary, "--config.file="+cfg, "--storage.tsdb.path="+data,
		"--web.listen-address="+addr, "--log.level=warn", "--storage.tsdb.retention.time=1h")
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("prometheus exited: %s", s.out.String())
		default:
		}
		if resp, err := http.Get(s.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("prometheus not ready after 30 s: %s", s.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("prometheus said:\n%s", s.out.String())
		}
	})
	return s, nil
}

func (s *Server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// WaitScraped waits until every target has been scraped successfully at
// least n times (rate() needs two samples), for up to a minute.
func (s *Server) WaitScraped(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		missing := []string{}
		for _, tg := range s.targets {
			r, err := Query(s.URL, fmt.Sprintf(`sum_over_time(up{job=%q,instance=%q}[1m])`, tg.Job, tg.Addr))
			if err != nil || len(r.Result) == 0 || r.Result[0].Value() < float64(n) {
				missing = append(missing, tg.Job+" "+tg.Addr)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not scrape %s %d times in a minute (see %s/targets)", strings.Join(missing, ", "), n, s.URL)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Response is the data of an /api/v1/query answer.
type Response struct {
	ResultType string   `json:"resultType"`
	Result     []Sample `json:"result"`
}

// Sample is one series of an instant vector (or the one value of a scalar).
type Sample struct {
	Metric map[string]string `json:"metric"`
	V      [2]any            `json:"value"`
}

// Value is the sample's value.
func (s Sample) Value() float64 {
	str, _ := s.V[1].(string)
	var f float64
	fmt.Sscan(str, &f)
	return f
}

// Query runs an instant query through promURL's /api/v1/query; the error
// is Prometheus' own when it does not accept the query.
func Query(promURL, expr string) (Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, promURL+"/api/v1/query", strings.NewReader(url.Values{"query": {expr}}.Encode()))
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	var r struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return Response{}, fmt.Errorf("%s: %s", resp.Status, body)
	}
	if r.Status != "success" {
		return Response{}, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil {
		return Response{}, err
	}
	out := Response{ResultType: d.ResultType}
	switch d.ResultType {
	case "vector":
		err = json.Unmarshal(d.Result, &out.Result)
	case "scalar", "string":
		var v [2]any
		err = json.Unmarshal(d.Result, &v)
		out.Result = []Sample{{V: v}}
	default:
		return out, fmt.Errorf("result type %s from an instant query", d.ResultType)
	}
	return out, err
}

// Result is what one of deploy/monitoring's queries returned.
type Result struct {
	monitoring.Query
	Series int
}

// RunQueries runs every dashboard query and alert expression of
// deploy/monitoring against the server at promURL and fails the test for
// each one the server does not accept. It returns how many series each
// returned.
func RunQueries(t testing.TB, promURL string) []Result {
	t.Helper()
	qs, err := monitoring.Queries()
	if err != nil {
		t.Fatal(err)
	}
	var out []Result
	for _, q := range qs {
		r, err := Query(promURL, q.Expr)
		if err != nil {
			t.Errorf("%s: %s\n    %v", q.Source, q.Expr, err)
			continue
		}
		out = append(out, Result{Query: q, Series: len(r.Result)})
	}
	return out
}

// RequireData fails the test for each dashboard panel query and variable
// (not alerts, not annotations) of the files whose source begins with
// prefix (such as "grafana/fastpath-br.json") that returned no series,
// but for those whose source contains one of except.
func RequireData(t testing.TB, results []Result, prefix string, except ...string) {
	t.Helper()
next:
	for _, r := range results {
		if r.Alert || r.Series > 0 || !strings.HasPrefix(r.Source, prefix) || strings.Contains(r.Source, ": annotation ") {
			continue
		}
		for _, e := range except {
			if strings.Contains(r.Source, e) {
				continue next
			}
		}
		t.Errorf("%s returned no series: %s", r.Source, r.Expr)
	}
}

// CheckRules fails the test for each rule the server at promURL evaluated
// with an error (a rule not yet evaluated is not one).
func CheckRules(t testing.TB, promURL string) {
	t.Helper()
	resp, err := http.Get(promURL + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			n++
			if rule.Health == "err" {
				t.Errorf("rule %s of group %s: %s", rule.Name, g.Name, rule.LastError)
			}
		}
	}
	if n == 0 {
		t.Errorf("prometheus at %s loaded no rules", promURL)
	}
}
