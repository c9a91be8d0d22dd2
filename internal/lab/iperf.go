package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// What the lab's scenarios that run iperf3 share: the server, one client
// run, the machine a report was made on, and the table and chart of a
// report. Other packages' benchmarks (the translator's rows) use them too.

// IperfPort is where the lab's iperf3 servers listen: the first on
// IperfPort, the others of a run with more streams on the ports above.
const IperfPort = iperfPort

// IperfServers are iperf3 servers in one namespace, one for each client
// process of a run (iperf3 serves one test at a time).
type IperfServers struct {
	procs []*iperfServer
}

// iperfServer is one server process; done closes when it has exited and
// been waited for.
type iperfServer struct {
	cmd    *exec.Cmd
	port   int
	stderr *bytes.Buffer
	done   chan struct{}
}

// StartIperfServers starts n iperf3 servers (at least one) in a namespace,
// on IperfPort, IperfPort+1, …, and returns once each listens, so that no
// client is refused for being early. Close stops them all; on an error the
// ones already started are stopped before it returns.
func StartIperfServers(ns string, n int) (*IperfServers, error) {
	s := &IperfServers{}
	for i := range max(n, 1) {
		srv, err := startIperfServer(ns, IperfPort+i)
		if err == nil {
			s.procs = append(s.procs, srv)
			err = srv.waitListening(5 * time.Second)
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("iperf3 servers in %s: %w", ns, err)
		}
	}
	return s, nil
}

// startIperfServer starts one server; the child keeps the namespace of the
// thread that started it.
func startIperfServer(ns string, port int) (*iperfServer, error) {
	srv := &iperfServer{
		cmd:    exec.Command("iperf3", "-s", "-p", strconv.Itoa(port)),
		port:   port,
		stderr: new(bytes.Buffer),
		done:   make(chan struct{}),
	}
	srv.cmd.Stderr = srv.stderr
	if err := netns.Run(ns, srv.cmd.Start); err != nil {
		return nil, fmt.Errorf("start iperf3 server on port %d: %w", port, err)
	}
	// One waiter per process, from the start: it reaps the child however
	// it ends, and tells waitListening if the server died (a port in use).
	go func() {
		srv.cmd.Wait()
		close(srv.done)
	}()
	return srv, nil
}

// waitListening waits until the server's TCP port is in LISTEN state. It
// reads the socket tables of the server's own namespace through /proc, so
// the check neither enters the namespace nor connects (a probe connection
// would count as a failed test at the server).
func (srv *iperfServer) waitListening(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-srv.done:
			return fmt.Errorf("iperf3 server on port %d exited: %s", srv.port, strings.ReplaceAll(strings.TrimSpace(srv.stderr.String()), "\n", "; "))
		default:
		}
		if listening(srv.cmd.Process.Pid, srv.port) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("iperf3 server on port %d not listening after %s", srv.port, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listening says whether process pid has a TCP socket (IPv4 or IPv6:
// iperf3 takes IPv6 where it can) listening on port. /proc/PID/net/tcp
// lists every socket of the process's namespace, so the socket must also be
// one of the process's own open files: another listener on the port (which
// makes iperf3 exit) does not count.
func listening(pid, port int) bool {
	own := socketInodes(pid)
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st … inode; st 0A is LISTEN.
			fs := strings.Fields(line)
			if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" && own[fs[9]] {
				return true
			}
		}
	}
	return false
}

// socketInodes are the inode numbers of the sockets process pid has open.
func socketInodes(pid int) map[string]bool {
	out := map[string]bool{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		target, err := os.Readlink(dir + "/" + e.Name())
		if err == nil && strings.HasPrefix(target, "socket:[") && strings.HasSuffix(target, "]") {
			out[target[len("socket:["):len(target)-1]] = true
		}
	}
	return out
}

// Close kills every server and waits for each to be reaped.
func (s *IperfServers) Close() {
	for _, srv := range s.procs {
		srv.cmd.Process.Kill()
	}
	for _, srv := range s.procs {
		<-srv.done
	}
	s.procs = nil
}

// IperfOptions are one iperf3 run.
type IperfOptions struct {
	// Netns runs the clients; Dst is the servers' address.
	Netns string
	Dst   netip.Addr
	// Seconds of the run (at least 1). Streams (at least 1) run as that
	// many iperf3 client processes at once, one stream each, against the
	// servers on IperfPort, IperfPort+1, …: iperf3 3.12 sends all of its
	// -P streams from one thread, which would measure one sender.
	Seconds, Streams int
	// UDP instead of TCP, Len bytes of payload per datagram (-l; 0: iperf3's
	// default), sent at Bitrate bits/s in all, split evenly over the
	// processes (0: each as fast as it can).
	UDP     bool
	Len     int
	Bitrate uint64
}

// IperfResult is what the servers received.
type IperfResult struct {
	// Gbps is the sum over the processes; StreamGbps each one's share.
	Gbps       float64   `json:"gbps"`
	StreamGbps []float64 `json:"stream_gbps,omitempty"`
	// LostPercent of the UDP datagrams sent, over all processes (0 for
	// TCP).
	LostPercent float64 `json:"lost_percent,omitempty"`
}

// iperfStream is what one client process's JSON says.
type iperfStream struct {
	bitsPerSecond        float64
	lostPackets, packets int64
}

// parseIperf reads one client's JSON (-J): what its server received and,
// for UDP, the datagrams lost and sent. An error iperf3 reports in the JSON
// is returned as is.
func parseIperf(out []byte) (iperfStream, error) {
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			// Sum is there for UDP only.
			Sum struct {
				LostPackets int64 `json:"lost_packets"`
				Packets     int64 `json:"packets"`
			} `json:"sum"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return iperfStream{}, fmt.Errorf("iperf3's JSON: %w", err)
	}
	if res.Error != "" {
		return iperfStream{}, errors.New(res.Error)
	}
	return iperfStream{res.End.SumReceived.BitsPerSecond, res.End.Sum.LostPackets, res.End.Sum.Packets}, nil
}

// sumIperf adds up the processes of one run. Loss is datagrams lost over
// datagrams sent in all processes, so a process that sent more weighs more
// (an average of percentages would not).
func sumIperf(streams []iperfStream, udp bool) IperfResult {
	var r IperfResult
	var lost, sent int64
	for _, s := range streams {
		r.Gbps += s.bitsPerSecond / 1e9
		r.StreamGbps = append(r.StreamGbps, s.bitsPerSecond/1e9)
		lost += s.lostPackets
		sent += s.packets
	}
	if udp && sent > 0 {
		r.LostPercent = 100 * float64(lost) / float64(sent)
	}
	return r
}

// bitrateShare is process i's part of a bitrate split over n: even, the
// remainder going one bit each to the first processes, so that the parts
// add up to the whole.
func bitrateShare(total uint64, i, n int) uint64 {
	share := total / uint64(n)
	if uint64(i) < total%uint64(n) {
		share++
	}
	return share
}

// Iperf runs o.Streams iperf3 clients at once and returns what their
// servers received. If one fails, the others are stopped and the error
// names the failing stream.
func Iperf(ctx context.Context, o IperfOptions) (IperfResult, error) {
	n := max(o.Streams, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]iperfStream, n)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := iperfClient(ctx, o, i, n)
			if err != nil {
				// The first failure is the cause; the others it stops
				// fail too, and would only hide it.
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
				return
			}
			streams[i] = s
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return IperfResult{}, firstErr
	}
	return sumIperf(streams, o.UDP), nil
}

// iperfClient runs stream i of n: one client process with one stream
// against the server on IperfPort+i. A server that is not listening yet,
// or still finishing the previous test, is tried again for a few seconds;
// any other failure ends the run, since a late restart would not overlap
// the other streams.
func iperfClient(ctx context.Context, o IperfOptions, i, n int) (iperfStream, error) {
	args := []string{"-c", o.Dst.String(), "-p", strconv.Itoa(IperfPort + i), "-t", strconv.Itoa(max(o.Seconds, 1)), "-P", "1", "-J"}
	if o.UDP {
		args = append(args, "-u", "-b", strconv.FormatUint(bitrateShare(o.Bitrate, i, n), 10))
	}
	if o.Len > 0 {
		args = append(args, "-l", strconv.Itoa(o.Len))
	}
	what := "iperf3 " + strings.Join(args, " ")
	if n > 1 {
		what = fmt.Sprintf("stream %d of %d (%s)", i+1, n, what)
	}
	var err error
	for try := 0; try < 20; try++ {
		var out []byte
		var runErr error
		if err = netns.Run(o.Netns, func() error {
			out, runErr = exec.CommandContext(ctx, "iperf3", args...).Output()
			return nil
		}); err != nil {
			return iperfStream{}, fmt.Errorf("%s: %w", what, err)
		}
		if ctx.Err() != nil {
			return iperfStream{}, fmt.Errorf("%s: %w", what, ctx.Err())
		}
		var s iperfStream
		s, err = parseIperf(out)
		if err == nil && runErr == nil {
			return s, nil
		}
		if err == nil {
			err = runErr
		}
		if !transientIperf(err, o.UDP) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	return iperfStream{}, fmt.Errorf("%s: %w", what, err)
}

// transientIperf says whether iperf3 failed before a test began, so that
// trying again measures the same thing. A UDP stream begins with one
// datagram each way; on a path that loses most of a full-speed run (the
// SIG's), that exchange is lost now and then, and iperf3 gives up with
// "unable to read from stream socket" before sending anything.
func transientIperf(err error, udp bool) bool {
	msg := err.Error()
	return strings.Contains(msg, "unable to connect") || strings.Contains(msg, "server is busy") ||
		(udp && strings.Contains(msg, "unable to read from stream socket"))
}

// Machine is what a report says of the machine it was made on.
type Machine struct {
	Kernel   string `json:"kernel"`
	CPUModel string `json:"cpu_model"`
	CPUs     int    `json:"cpus"`
}

// ThisMachine describes the machine this runs on.
func ThisMachine() Machine {
	return Machine{Kernel: kernelRelease(), CPUModel: cpuModel(), CPUs: onlineCPUs()}
}

// Median of xs without reordering them; 0 for none.
func Median(xs []float64) float64 { return median(xs) }

// TextTable renders lines (the first the header) as a fixed-width table
// for a terminal, a rule under the header; right marks the columns to
// align right (numbers). Widths count runes: "–" and "×" take one column.
func TextTable(lines [][]string, right []bool) string {
	if len(lines) == 0 {
		return ""
	}
	widths := make([]int, len(lines[0]))
	for _, l := range lines {
		for i, c := range l {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	rule := make([]string, len(widths))
	for i, w := range widths {
		rule[i] = strings.Repeat("-", w)
	}
	var b strings.Builder
	for _, l := range append([][]string{lines[0], rule}, lines[1:]...) {
		var line strings.Builder
		for i, c := range l {
			if i > 0 {
				line.WriteString("  ")
			}
			if i < len(right) && right[i] {
				fmt.Fprintf(&line, "%*s", widths[i], c)
			} else {
				fmt.Fprintf(&line, "%-*s", widths[i], c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// MarkdownTable renders lines (the first the header) as a Markdown table;
// right marks the columns to align right.
func MarkdownTable(lines [][]string, right []bool) string {
	if len(lines) == 0 {
		return ""
	}
	var b strings.Builder
	mdRow(&b, lines[0])
	for i := range lines[0] {
		if i < len(right) && right[i] {
			b.WriteString("|---:")
		} else {
			b.WriteString("|---")
		}
	}
	b.WriteString("|\n")
	for _, l := range lines[1:] {
		mdRow(&b, l)
	}
	return b.String()
}

// Bar is one bar of a chart: a median with a min–max whisker; a baseline's
// bar is grey.
type Bar struct {
	Label            string
	Median, Min, Max float64
	Baseline         bool
}

// WriteBars draws horizontal bars with min–max whiskers as PNG, as the
// lab's reports do.
func WriteBars(w io.Writer, title, axis string, bars []Bar) error {
	cb := make([]chartBar, len(bars))
	for i, b := range bars {
		cb[i] = chartBar{b.Label, b.Median, b.Min, b.Max, b.Baseline}
	}
	return writeChart(w, title, axis, cb)
}
