// Package obstest checks what fastpath's exporters serve with promtool,
// Prometheus' own linter (scripts/deps.sh puts it in place).
package obstest

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// PromtoolCache is where scripts/deps.sh unpacks promtool from Debian's
// prometheus package, without installing (or starting) the server.
const PromtoolCache = Dir + "/promtool"

// Dir is where scripts/deps.sh unpacks Debian's prometheus package's
// promtool and prometheus.
const Dir = "/usr/local/lib/fastpath/test"

// Promtool is the path of promtool; the test fails without it (make test
// installs it).
func Promtool(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if _, err := os.Stat(PromtoolCache); err == nil {
		return PromtoolCache
	}
	t.Fatalf("promtool not found in PATH or at %s: run scripts/deps.sh (make test does)", PromtoolCache)
	return ""
}

// CheckMetrics runs `promtool check metrics` over an exposition and fails
// the test with what it says, if anything.
func CheckMetrics(t testing.TB, exposition []byte) {
	t.Helper()
	cmd := exec.Command(Promtool(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// Scrape fetches url (an exporter's /metrics), retrying for a few seconds
// while the daemon starts.
func Scrape(t testing.TB, url string) []byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				return b
			}
			err = rerr
			if err == nil {
				err = &statusError{resp.Status, string(b)}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("scrape %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type statusError struct{ status, body string }

func (e *statusError) Error() string { return e.status + ": " + strings.TrimSpace(e.body) }

// Value is the value of the first sample whose line starts with series
// (a family name with its labels, as the exposition writes them), and
// whether there was one.
func Value(exposition []byte, series string) (string, bool) {
	for _, line := range strings.Split(string(exposition), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimSpace(strings.TrimPrefix(line, series)), true
		}
	}
	return "", false
}
