package systemd_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
)

// checkRtMetrics scrapes an rt instance that runs in namespace ns on the
// unit's default address (obs.AddrRT, the namespace's loopback): promtool
// finds nothing to lint, dev is attached in native mode, and the program
// sent frames back (tx) on its queue 0.
func checkRtMetrics(t *testing.T, ns, dev string) {
	t.Helper()
	var body []byte
	err := netns.Run(ns, func() error {
		c, err := net.DialTimeout("tcp", obs.AddrRT, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: "+obs.AddrRT+"\r\n\r\n"); err != nil {
			return err
		}
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		defer r.Body.Close()
		if body, err = io.ReadAll(r.Body); err == nil && r.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", r.Status, body)
		}
		return err
	})
	if err != nil {
		t.Fatalf("scrape the unit's metrics on %s in %s: %v", obs.AddrRT, ns, err)
	}
	obstest.CheckMetrics(t, body)
	if v, _ := obstest.Value(body, fmt.Sprintf(`fastpath_rt_device_attached{device=%q,mode="native"}`, dev)); v != "1" {
		t.Errorf("%s not attached in the unit's metrics:\n%s", dev, body)
	}
	v, _ := obstest.Value(body, fmt.Sprintf(`fastpath_rt_packets_total{device=%q,queue="0",verdict="tx"}`, dev))
	if n, err := strconv.ParseUint(v, 10, 64); err != nil || n == 0 {
		t.Errorf("the unit's metrics count no frame sent back on %s:\n%s", dev, body)
	}
}
