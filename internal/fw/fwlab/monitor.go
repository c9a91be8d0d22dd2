package fwlab

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/monitor"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// monitorDropShare is the share of the lab's 1,000 flows (source ports
// 1024-2023) the monitor rows drop: the first hundred source ports.
const monitorDropShare = 100

// monitorRules are fw-0's rules with a tenth of the flows dropped first.
func monitorRules(tb lab.Testbed) *fw.RuleSet {
	rs := labRules(tb, 0)
	var sport fw.Ports
	if err := sport.UnmarshalText(fmt.Appendf(nil, "1024-%d", 1024+monitorDropShare-1)); err != nil {
		panic(err) // a constant range
	}
	drop := fw.Rule{Action: fw.Drop, Proto: 17, SPort: sport, DPort: fw.AnyPort}
	rs.Rules = append([]fw.Rule{drop}, rs.Rules...)
	rs.File = fmt.Sprintf("lab rules (0), UDP from source ports 1024-%d dropped", 1024+monitorDropShare-1)
	return rs
}

// setupMonitor attaches the firewall with monitorRules and, if listen,
// runs a monitor of its drops in this process, its lines formatted and
// thrown away (what `fastpath monitor fw > /dev/null` costs).
func setupMonitor(listen bool) func(lab.Testbed) (func() error, error) {
	return func(tb lab.Testbed) (func() error, error) {
		name := labInstance(tb, false)
		o := fw.AttachOptions{Name: name, Devices: []xdp.Iface{tb.DUTIn().Iface()}, Rules: monitorRules(tb), NoFallback: true, Mode: xdp.Native}
		if err := fw.Attach(o); err != nil {
			return nil, err
		}
		detach := func() error { return fw.Detach(name, nil) }
		if !listen {
			return detach, nil
		}
		src, err := fw.OpenMonitor(name)
		if err != nil {
			return nil, errors.Join(err, detach())
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		out := monitor.Output{Lines: io.Discard}
		go func() {
			_, err := monitor.Run(ctx, src, monitor.Options{Want: monitor.WantDrops}, out.Write)
			done <- err
		}()
		return func() error {
			cancel()
			err := <-done
			return errors.Join(err, src.Close(), detach())
		}, nil
	}
}

func init() {
	for _, r := range []struct {
		name, desc string
		listen     bool
	}{
		{"fw-0-drops", "fastpath fw, 0 rules + a drop of 1 flow in 10 + 1 pass rule, nobody monitoring", false},
		{"fw-0-monitor", "fw-0-drops with fastpath monitor fw listening: every drop copied to the ring and shown", true},
	} {
		lab.Register(lab.Scenario{
			Name: r.name, Description: r.desc, Layout: lab.LayoutDUT, Order: 46, Anchor: "routed",
			Rewrites: true, Routed: true, Setup: setupMonitor(r.listen), Packets: lab.RoutedUDP,
			Note: "the sink counts the 9 flows in 10 passed: compare fw-0-monitor with fw-0-drops, not with fw-0",
		})
	}
}
