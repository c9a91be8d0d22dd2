package tralab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/netns"
)

// Metric is one figure every row gets in every turn.
type Metric struct {
	Name, Title, Unit string
	// Higher says whether more is better (throughput) or less (latency).
	Higher bool
}

// Metrics in the order they are measured and shown. Latency goes first,
// on an idle path; the UDP floods go last (through the SIG they overrun
// the routers, and BFD may flap the links for a second).
var Metrics = []Metric{
	{"rtt", "RTT", "µs", false},
	{"tcp-1", "TCP ×1", "Gbit/s", true},
	{"tcp-4", "TCP ×4", "Gbit/s", true},
	{"udp-1", "UDP ×1", "Gbit/s", true},
	{"udp-4", "UDP ×4", "Gbit/s", true},
}

func metricByName(name string) Metric {
	i := slices.IndexFunc(Metrics, func(m Metric) bool { return m.Name == name })
	return Metrics[i]
}

// EchoPort is where the UDP echo server listens: below lab.IperfPort,
// since the ×4 metrics' iperf3 servers take the ports from IperfPort up
// (and a UDP test binds its server's port number for UDP too).
const EchoPort = lab.IperfPort - 1

// parallel is the streams of the ×4 metrics: as many iperf3 client
// processes, one stream each, against as many servers (iperf3 3.12 sends
// all -P streams from one thread, so -P 4 measured one sender).
const parallel = 4

// x4 is how the report describes the ×4 metrics.
const x4 = "four iperf3 processes, one stream each"

// figure is one measurement of one metric.
type figure struct {
	metric string
	value  float64
	// lost is the percentage lost: UDP datagrams, or echoes.
	lost  float64
	lossy bool
}

// measure runs the servers in the path's server namespace and every metric
// once from its client namespace.
func measure(ctx context.Context, p Path, o Options, logf func(string, ...any)) ([]figure, error) {
	echo, err := startEcho(p.ServerNetns, p.Addr)
	if err != nil {
		return nil, err
	}
	defer echo.Close()
	servers, err := lab.StartIperfServers(p.ServerNetns, parallel)
	if err != nil {
		return nil, err
	}
	defer servers.Close()
	// The first echo answered says the path is ready (neighbours resolved,
	// the gateways' sessions up).
	if err := waitEcho(ctx, p.ClientNetns, p.Addr, 30*time.Second); err != nil {
		return nil, err
	}
	logf("%s", ping6(ctx, p.ClientNetns, p.Addr))
	var out []figure
	rtts, lost, err := echoRTTs(ctx, p.ClientNetns, p.Addr, o.Pings)
	if err != nil {
		return nil, err
	}
	us := make([]float64, len(rtts))
	for i, d := range rtts {
		us[i] = float64(d.Nanoseconds()) / 1e3
	}
	rtt := figure{metric: "rtt", value: lab.Median(us), lost: 100 * float64(lost) / float64(o.Pings), lossy: true}
	out = append(out, rtt)
	logf("RTT %.0f µs (median of %d echoes, %d lost)", rtt.value, len(rtts), lost)
	for _, m := range Metrics[1:] {
		opt := lab.IperfOptions{Netns: p.ClientNetns, Dst: p.Addr, Seconds: o.Seconds, Streams: 1}
		switch m.Name {
		case "tcp-4":
			opt.Streams = parallel
		case "udp-1", "udp-4":
			opt.UDP, opt.Len, opt.Bitrate = true, o.UDPLen, o.UDPBitrate
			if m.Name == "udp-4" {
				// o.UDPBitrate is the row's offered load; lab.Iperf splits
				// it over the processes, so ×1 and ×4 offer the same.
				opt.Streams = parallel
			}
		}
		r, err := lab.Iperf(ctx, opt)
		if err != nil {
			return out, fmt.Errorf("%s: %w", m.Title, err)
		}
		f := figure{metric: m.Name, value: r.Gbps, lost: r.LostPercent, lossy: opt.UDP}
		out = append(out, f)
		if opt.UDP {
			logf("%s %.3f Gbit/s received, %.1f%% lost", m.Title, f.value, f.lost)
		} else {
			logf("%s %.3f Gbit/s", m.Title, f.value)
		}
	}
	return out, nil
}

// ping6 runs the system's ping on the path, as a user would, and says how
// it went: every row must carry an unmodified ping6 between the hosts.
func ping6(ctx context.Context, ns string, dst netip.Addr) string {
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+netns.Path(ns), "ping", "-6", "-n", "-c", "3", "-i", "0.2", "-W", "2", dst.String()).CombinedOutput()
	var summary []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "transmitted") || strings.HasPrefix(line, "rtt") {
			summary = append(summary, strings.TrimSpace(line))
		}
	}
	if len(summary) == 0 {
		return fmt.Sprintf("ping6 %s: %v: %s", dst, err, strings.TrimSpace(string(out)))
	}
	return fmt.Sprintf("ping6 %s: %s", dst, strings.Join(summary, "; "))
}

// startEcho listens for UDP on addr:EchoPort in the namespace and sends
// every datagram back.
func startEcho(ns string, addr netip.Addr) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := netns.Run(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, EchoPort)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("UDP echo server on %s in %s: %w", addr, ns, err)
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return c, nil
}

// dialEcho opens the client's socket in the namespace.
func dialEcho(ns string, dst netip.Addr) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := netns.Run(ns, func() error {
		var err error
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, EchoPort)))
		return err
	})
	return c, err
}

// echo sends one 64-byte datagram carrying seq and waits for it to come
// back; false if it did not within wait.
func echo(c *net.UDPConn, seq uint64, wait time.Duration) (time.Duration, bool) {
	msg := make([]byte, 64)
	binary.BigEndian.PutUint64(msg, seq)
	buf := make([]byte, 2048)
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		return 0, false
	}
	c.SetReadDeadline(start.Add(wait))
	for {
		n, err := c.Read(buf)
		if err != nil {
			return 0, false
		}
		if n >= 8 && binary.BigEndian.Uint64(buf) == seq {
			return time.Since(start), true
		}
	}
}

// waitEcho sends echoes until one comes back.
func waitEcho(ctx context.Context, ns string, dst netip.Addr, timeout time.Duration) error {
	c, err := dialEcho(ns, dst)
	if err != nil {
		return fmt.Errorf("UDP echo client in %s to %s: %w", ns, dst, err)
	}
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for seq := uint64(1 << 32); time.Now().Before(deadline); seq++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, ok := echo(c, seq, 250*time.Millisecond); ok {
			return nil
		}
	}
	return fmt.Errorf("no UDP echo came back from %s to %s in %s", dst, ns, timeout)
}

// echoRTTs sends count echoes one after the other and returns the round
// trips of those that came back within a second, and how many did not.
func echoRTTs(ctx context.Context, ns string, dst netip.Addr, count int) ([]time.Duration, int, error) {
	c, err := dialEcho(ns, dst)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	var rtts []time.Duration
	lost := 0
	for seq := range uint64(count) {
		if ctx.Err() != nil {
			return rtts, lost, ctx.Err()
		}
		if d, ok := echo(c, seq, time.Second); ok {
			rtts = append(rtts, d)
		} else {
			lost++
		}
	}
	if len(rtts) == 0 {
		return nil, lost, errors.New("no UDP echo came back")
	}
	return rtts, lost, nil
}
