package tra

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/scionproto/scion/pkg/slayers"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// What an idle `tra run` costs a host with many devices: nothing it does
// each second may dump every link, ask a route, or open an ethtool
// session; those follow the host's netlink events (and a slow re-check).

// manyDevices is how many devices the host of the cost test has.
const manyDevices = 2000

// addDevices adds n devices to a namespace, in one batch: veth pairs (this
// kernel has no dummy devices built in).
func addDevices(t *testing.T, ns string, n int) {
	t.Helper()
	var b strings.Builder
	for i := range n / 2 {
		fmt.Fprintf(&b, "link add fpd%d type veth peer name fpe%d\n", i, i)
	}
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -batch: %v: %s", err, out)
	}
}

// netlinkWork is what a process asked of the kernel in a window, as strace
// decodes it.
type netlinkWork struct {
	linkDumps, linkGets, routeGets, ethtool, netlinkSends int
}

func (w netlinkWork) String() string {
	return fmt.Sprintf("%d link dumps, %d link lookups, %d route lookups, %d ethtool ioctls, %d netlink requests in all",
		w.linkDumps, w.linkGets, w.routeGets, w.ethtool, w.netlinkSends)
}

// traceNetlink counts the netlink requests and ethtool ioctls of a process
// (all its threads) for a while.
func traceNetlink(t *testing.T, pid int, d time.Duration) netlinkWork {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("no strace to count the daemon's requests with")
	}
	out := filepath.Join(t.TempDir(), "strace")
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, strace, "-f", "-qq", "-e", "trace=sendto,sendmsg,ioctl", "-o", out, "-p", strconv.Itoa(pid))
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.Run()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("FASTPATH_TRA_STRACE") != "" {
		t.Logf("%s", b)
	}
	var w netlinkWork
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(line, "SIOCETHTOOL"):
			w.ethtool++
		case strings.Contains(line, "nlmsg_type="):
			// strace names the types when it knows the socket's protocol,
			// and gives numbers when it does not (a socket of another
			// namespace): RTM_GETLINK is 18, RTM_GETROUTE 26, a dump 0x300.
			w.netlinkSends++
			getLink := strings.Contains(line, "nlmsg_type=RTM_GETLINK") || strings.Contains(line, "nlmsg_type=0x12 ")
			dump := strings.Contains(line, "NLM_F_DUMP") || strings.Contains(line, "|0x300")
			switch {
			case getLink && dump:
				w.linkDumps++
			case getLink:
				w.linkGets++
			case strings.Contains(line, "nlmsg_type=RTM_GETROUTE") || strings.Contains(line, "nlmsg_type=0x1a "):
				w.routeGets++
			}
		}
	}
	return w
}

// cpuTicks is a process's user and system time, in clock ticks.
func cpuTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// After the command's name in parentheses: utime and stime are the
	// 12th and 13th fields.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s
}

// Item 8: on a host of 2,000 devices, an idle daemon with an installed
// path (whose gateway it keeps) dumps no link, asks no route and opens no
// ethtool session in a 5-second window; before, it did all three each
// second. FASTPATH_TRA_MEASURE=1 also measures its CPU time over 20 s
// without strace.
func TestIdleDaemonCostWithManyDevices(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	addDevices(t, a.host, manyDevices)
	cmd, log, _ := a.startDaemon(t)
	eventually(t, 10*time.Second, "the daemon's first line", func() bool { return strings.Contains(log.String(), "paths from") })
	// Past the first checks, before the slow re-check.
	time.Sleep(3 * time.Second)
	pid := cmd.Process.Pid
	if os.Getenv("FASTPATH_TRA_MEASURE") != "" {
		const window = 20 * time.Second
		before := cpuTicks(t, pid)
		time.Sleep(window)
		ticks := cpuTicks(t, pid) - before
		t.Logf("%d devices: the idle daemon used %d clock ticks (1/100 s) of CPU in %s: %.1f ms a second",
			manyDevices, ticks, window, float64(ticks)*10/window.Seconds())
	}
	w := traceNetlink(t, pid, 5*time.Second)
	t.Logf("%d devices, an idle daemon in 5 s: %s", manyDevices, w)
	if w.linkDumps > 0 || w.routeGets > 0 || w.ethtool > 0 {
		t.Fatalf("the idle daemon polls the host: %s in 5 s", w)
	}
}

// BenchmarkOrdinaryUDP times tra_in on what a wide dispatched range brings
// it (BPF_PROG_TEST_RUN, the mean of a million runs): the host's DNS reply
// passed at the port with the usual range, and with "all"; and SCION from
// the router with "all", which pays the shape check too; and the same with
// routers that deliver to the packet's own port (scionproto v0.14.0 on),
// where every port of the host is looked at:
// go test -run '^$' -bench OrdinaryUDP ./internal/tra/
func BenchmarkOrdinaryUDP(b *testing.B) {
	dns := []byte{0x0a, 0xbc, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'o', 'r', 'g', 0, 0, 1, 0, 1,
		0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 93, 184, 215, 14}
	scion := func(port uint16) func(t testing.TB) []byte {
		return func(t testing.TB) []byte {
			return inFrame{from: routerAddr, port: port, srcIA: remoteIA, srcHost: remote4,
				l4: []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: port}, gopacket.Payload(make([]byte, 100))}}.build(t)
		}
	}
	for _, c := range []struct {
		name       string
		start, end uint16
		toPort     bool // routers deliver to the packet's own port (scionproto v0.14.0 on)
		frame      func(t testing.TB) []byte
	}{
		{"a DNS reply, dispatched 31000-32767", 31000, 32767, false, func(t testing.TB) []byte { return udpFrame(t, netip.MustParseAddrPort("10.101.0.53:53"), 40000, dns) }},
		{"a DNS reply, dispatched all", 1, 65535, false, func(t testing.TB) []byte { return udpFrame(t, netip.MustParseAddrPort("10.101.0.53:53"), 40000, dns) }},
		{"a DNS reply of ID 0x8abc, dispatched all", 1, 65535, false, func(t testing.TB) []byte {
			return udpFrame(t, netip.MustParseAddrPort("10.101.0.53:53"), 40000, append([]byte{0x8a}, dns[1:]...))
		}},
		{"SCION from the router, dispatched all", 1, 65535, false, scion(31000)},
		{"a DNS reply, routers to port", 31000, 32767, true, func(t testing.TB) []byte { return udpFrame(t, netip.MustParseAddrPort("10.101.0.53:53"), 40000, dns) }},
		{"SCION from the router to a dispatched port, routers to port", 31000, 32767, true, scion(31000)},
		{"SCION from the router to another port, routers to port", 31000, 32767, true, scion(40000)},
	} {
		b.Run(c.name, func(b *testing.B) {
			tr := loadTest(b)
			var conf translatorTraConfig
			if err := tr.objs.TraConf.Lookup(uint32(0), &conf); err != nil {
				b.Fatal(err)
			}
			conf.DispatchedStart, conf.DispatchedEnd = c.start, c.end
			conf.RoutersToPort = 0
			if c.toPort {
				conf.RoutersToPort = 1
			}
			if err := tr.objs.TraConf.Put(uint32(0), &conf); err != nil {
				b.Fatal(err)
			}
			f := c.frame(b)
			ns, _ := testNetns.Load(tr)
			var mean time.Duration
			b.ResetTimer()
			if err := netns.Run(ns.(string), func() error {
				var err error
				_, mean, err = tr.objs.TraIn.Benchmark(f, 1_000_000, nil)
				return err
			}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(mean.Nanoseconds()), "ns/run")
		})
	}
}
