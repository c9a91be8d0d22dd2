// Package obs is what every fastpath daemon shares to be watched: one
// Prometheus registry per process with fastpath_build_info, an HTTP
// server for /metrics, and levelled, structured logs (log.go).
package obs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Default metrics addresses, one port per function, in a block next to
// scionproto's own (its router serves on 30442, the control service on
// 30452, the daemon on 30455, the gateway on 30456). Loopback: an operator
// who scrapes from another host says so with --metrics.
const (
	AddrBR  = "127.0.0.1:30490"
	AddrFW  = "127.0.0.1:30491"
	AddrTRA = "127.0.0.1:30492"
	AddrRT  = "127.0.0.1:30493"
)

// Build identifies the running binary in fastpath_build_info.
type Build struct {
	Version, Commit string
}

var build = Build{Version: "unknown"}

// SetBuild records the binary's version and commit (main does, at start).
func SetBuild(b Build) {
	if b.Version == "" {
		b.Version = "unknown"
	}
	build = b
}

// NewRegistry makes the registry a daemon of function (br, fw, tra, rt)
// serves: fastpath_build_info, the log counters of this process, and the
// Go runtime's and the process's standard collectors (process_start_time_seconds
// is how an alert sees a daemon restart).
func NewRegistry(function string) *prometheus.Registry {
	r := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fastpath_build_info",
		Help: "Always 1; the labels say which fastpath build serves these metrics and for which function.",
		ConstLabels: prometheus.Labels{
			"version": build.Version, "commit": build.Commit,
			"goversion": runtime.Version(), "function": function,
		},
	})
	info.Set(1)
	r.MustRegister(info, logMessages, logSuppressed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Serve serves /metrics from g on addr until ctx ends; it returns at once
// with an error when addr cannot be listened on, so that a daemon started
// with a taken port fails rather than runs unwatched. /healthz answers 200
// while the process serves.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics %s: %w (give a free address, such as 127.0.0.1:0)", addr, err)
	}
	return ServeListener(ctx, ln, g)
}

// ServeListener is Serve on a listener the caller made.
func ServeListener(ctx context.Context, ln net.Listener, g prometheus.Gatherer) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		// A map that cannot be read fails only its own families: the
		// rest of the scrape still says what it can.
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	slog.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
