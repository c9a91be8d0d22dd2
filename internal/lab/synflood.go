package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// The SYN flood of lab tcp's rows that set Scenario.SYNFlood: TCP SYNs to
// the sink's iperf3 port from random sources in SYNFloodSrc and random
// source ports, sent by the live-frames generator as fast as the path takes
// them, while iperf3 measures one connection through the same DUT.

// SYNFloodSrc is where the flood's sources come from: a network the lab
// does not use, so that no rule for the generator's subnet passes the flood
// by its address. The sink routes it back through the DUT, and the DUT on
// to the generator's namespace, which drops what comes (it does not
// forward): the sink's SYN/ACKs cross the DUT's egress as an attack's
// would, replies to connections the DUT tracks.
var SYNFloodSrc = netip.MustParsePrefix("10.0.0.0/8")

// synFloodFlows is how many distinct (source, source port) pairs the flood
// cycles through: far more than any connection table holds, so that every
// SYN is a new connection to the DUT.
const synFloodFlows = 1 << 30

// routeSYNFlood routes SYNFloodSrc from the sink through the DUT to the
// generator's namespace.
func routeSYNFlood(tb Testbed) error {
	for _, s := range []struct {
		ep  Endpoint
		via Endpoint
	}{{tb.Sink(), tb.DUTOut()}, {tb.DUTIn(), tb.Gen()}} {
		h, err := netns.Handle(s.ep.Netns)
		if err != nil {
			return err
		}
		l, err := h.LinkByName(s.ep.Dev)
		if err == nil {
			err = h.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: prefixToIPNet(SYNFloodSrc), Gw: s.via.Addr.Addr().AsSlice()})
		}
		h.Close()
		if err != nil {
			return fmt.Errorf("route %s from %s: %w", SYNFloodSrc, s.ep.Netns, err)
		}
	}
	return nil
}

// newSYNFlood loads a generator of SYNs to the sink's iperf3 port.
func newSYNFlood(tb Testbed, cpu int) (*Generator, error) {
	syn, err := SYNPacket(tb.Gen().MAC, tb.DUTIn().MAC, tb.Gen().Addr.Addr(), tb.Sink().Addr.Addr(), IperfPort)
	if err != nil {
		return nil, err
	}
	return NewGenerator(GenOptions{Iface: tb.Gen().Iface(), Packets: [][]byte{syn}, CPU: cpu, Flows: synFloodFlows, FlowSrc: SYNFloodSrc, FlowKeepDport: true})
}

// synFloodLead is how long the flood runs before iperf3 starts: the
// connection is opened under attack, as a client's would be, once the
// DUT's tables are full of it.
const synFloodLead = 500 * time.Millisecond

// duringSYNFlood runs measure while the generator floods, and returns what
// the flood sent. The flood stops when measure returns.
func duringSYNFlood(ctx context.Context, g *Generator, measure func() error) (GenStats, error) {
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	type result struct {
		st  GenStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		// A duration bounds it should measure never return; stop ends it
		// first.
		st, err := g.Send(fctx, SendOptions{Duration: time.Hour})
		done <- result{st, err}
	}()
	select {
	case r := <-done:
		return r.st, fmt.Errorf("SYN flood stopped before the measurement: %w", errors.Join(r.err, ctx.Err()))
	case <-time.After(synFloodLead):
	}
	err := measure()
	stop()
	r := <-done
	if r.err != nil && ctx.Err() == nil {
		err = fmt.Errorf("SYN flood: %w", r.err)
	}
	return r.st, err
}
