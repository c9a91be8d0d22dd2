package brlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The border router in the lab's SCION network: traffic on a real path of
// the network (captured from scion ping), injected on the first leaf AS's
// link towards the core and counted before the last leaf AS's router,
// through the core AS's reference router alone (scion-ref) and with
// fastpath in front of it (scion-hybrid).

const scionFixture = "scion-network"

// The rows' frames are --size long when the path leaves room (112 bytes
// of SCION header and echo, 154-byte frames, is the least): --size 180
// sends seed 002's 138-byte SCION packets.

// scionBench is the network a bench runs the rows on, and the traffic
// captured on it; set while the fixture is up.
var scionBench struct {
	sync.Mutex
	n       *scionlab.Network
	transit *scionlab.Transit
}

// benchVersion is the scionproto release the scion rows' network runs.
func benchVersion() string {
	if v, err := scionproto.Chosen(); err == nil {
		return v
	}
	return scionproto.Default
}

func init() {
	lab.RegisterFixture(lab.Fixture{
		Name: scionFixture,
		Up: func(o lab.FixtureOptions) (func() error, error) {
			log := o.Log
			n := scionlab.Network{Prefix: o.Prefix + "b", Dir: filepath.Join(os.TempDir(), "fastpath-scion-bench-"+o.Prefix)}
			fmt.Fprintf(log, "bringing up a SCION network of 3 ASes (%sas64512 …), links of MTU %d, for the scion rows\n", n.Prefix, o.MTU)
			st, err := n.Up(context.Background(), scionlab.UpOptions{ASes: 3, MTU: o.MTU, Log: log})
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(log, "first path after %.1f s\n", st.PathsAfter.Seconds())
			tr, err := n.CaptureTransit(context.Background())
			if err != nil {
				return nil, errors.Join(err, n.Down(io.Discard))
			}
			scionBench.Lock()
			scionBench.n, scionBench.transit = &n, tr
			scionBench.Unlock()
			return func() error {
				scionBench.Lock()
				scionBench.n, scionBench.transit = nil, nil
				scionBench.Unlock()
				return n.Down(io.Discard)
			}, nil
		},
	})
	for _, v := range []struct {
		name, desc, anchor string
		hybrid             bool
		order              int
	}{
		{"scion-ref", "SCION network: the core AS's scionproto router alone, transit on a real path", "", false, 33},
		{"scion-hybrid", "SCION network: fastpath in front of the core AS's scionproto router, transit on a real path", "scion-ref", true, 34},
	} {
		v := v
		// The router attached in front of the core's, while the row runs.
		var hybrid string
		lab.Register(lab.Scenario{
			Name: v.name, Description: v.desc, Layout: lab.LayoutNone, Order: v.order, Anchor: v.anchor,
			Fixture: scionFixture, Rewrites: true, SCIONSink: true,
			Note: "echo requests captured from scion ping on a real path of 3 ASes of scionproto " + benchVersion(),
			Setup: func(lab.Testbed) (func() error, error) {
				n, _, err := scionNetwork()
				if err != nil || !v.hybrid {
					return func() error { return nil }, err
				}
				as, _, err := n.ASes()
				if err != nil {
					return nil, err
				}
				name, err := n.AttachHybrid(as[0], io.Discard)
				if err != nil {
					return nil, err
				}
				hybrid = name
				return func() error { hybrid = ""; return br.Detach(name, nil) }, nil
			},
			Describe: func(lab.Testbed) (string, error) {
				if hybrid == "" {
					return "", nil
				}
				return verdictShares(hybrid)
			},
			Ends: func(lab.Testbed) (xdp.Iface, xdp.Iface, error) {
				_, tr, err := scionNetwork()
				if err != nil {
					return xdp.Iface{}, xdp.Iface{}, err
				}
				return tr.Gen, tr.Sink, nil
			},
			Packets: func(_ lab.Testbed, size int) ([][]byte, error) {
				_, tr, err := scionNetwork()
				if err != nil {
					return nil, err
				}
				return tr.Frames(1000, size)
			},
		})
	}
	lab.RegisterGroup("scion", "veth", "br", "scion-ref", "scion-hybrid")
}

func scionNetwork() (*scionlab.Network, *scionlab.Transit, error) {
	scionBench.Lock()
	defer scionBench.Unlock()
	if scionBench.n == nil {
		return nil, nil, fmt.Errorf("the scion rows' network is not up")
	}
	return scionBench.n, scionBench.transit, nil
}

// verdictShares says what fastpath's router did with what it saw, its (up
// to three) most frequent verdicts and their shares: whether the rows'
// frames were forwarded in XDP or passed up to the reference router, and
// why.
func verdictShares(name string) (string, error) {
	p, err := br.OpenPinned(name)
	if err != nil {
		return "", err
	}
	defer p.Close()
	totals, err := p.Totals()
	if err != nil {
		return "", err
	}
	var all uint64
	verdicts := make([]string, 0, len(totals))
	for v, st := range totals {
		if st.Packets > 0 {
			verdicts = append(verdicts, v)
			all += st.Packets
		}
	}
	if all == 0 {
		return "fastpath at the core saw nothing", nil
	}
	sort.Slice(verdicts, func(i, j int) bool { return totals[verdicts[i]].Packets > totals[verdicts[j]].Packets })
	var parts []string
	for i, v := range verdicts[:min(3, len(verdicts))] {
		share := 100 * float64(totals[v].Packets) / float64(all)
		// BFD and beacons are a trace beside the rows' millions.
		if i > 0 && share < 0.1 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f%%", v, share))
	}
	return fmt.Sprintf("fastpath at the core: %s of %d frames", strings.Join(parts, ", "), all), nil
}
