package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// What the lab's scenarios that run iperf3 share: the server, one client
// run, the machine a report was made on, and the table and chart of a
// report. Other packages' benchmarks (the translator's rows) use them too.

// IperfPort is where the lab's iperf3 servers listen.
const IperfPort = iperfPort

// StartIperfServer starts an iperf3 server on IperfPort in a namespace;
// kill it (Process.Kill, Wait) when done.
func StartIperfServer(ns string) (*exec.Cmd, error) { return startIperfServer(ns) }

// IperfOptions are one iperf3 client run.
type IperfOptions struct {
	// Netns runs the client; Dst is the server's address.
	Netns string
	Dst   netip.Addr
	// Seconds of the run (at least 1); Streams in parallel (-P, at least 1).
	Seconds, Streams int
	// UDP instead of TCP, Len bytes of payload per datagram (-l; 0: iperf3's
	// default), sent at Bitrate bits/s in all (0: as fast as it can).
	UDP     bool
	Len     int
	Bitrate uint64
}

// IperfResult is what the server received.
type IperfResult struct {
	Gbps float64 `json:"gbps"`
	// LostPercent of the UDP datagrams sent (0 for TCP).
	LostPercent float64 `json:"lost_percent,omitempty"`
}

// Iperf runs one iperf3 client and returns what the server received. The
// server may need a moment to listen, so a failed first connection is
// retried for a few seconds.
func Iperf(ctx context.Context, o IperfOptions) (IperfResult, error) {
	args := []string{"-c", o.Dst.String(), "-p", strconv.Itoa(iperfPort), "-t", strconv.Itoa(max(o.Seconds, 1)), "-P", strconv.Itoa(max(o.Streams, 1)), "-J"}
	if o.UDP {
		args = append(args, "-u", "-b", strconv.FormatUint(o.Bitrate, 10))
	}
	if o.Len > 0 {
		args = append(args, "-l", strconv.Itoa(o.Len))
	}
	var last error
	for try := 0; try < 20; try++ {
		var out []byte
		err := netns.Run(o.Netns, func() error {
			var err error
			out, err = exec.CommandContext(ctx, "iperf3", args...).Output()
			return err
		})
		var res struct {
			End struct {
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
				Sum struct {
					LostPercent float64 `json:"lost_percent"`
				} `json:"sum"`
			} `json:"end"`
			Error string `json:"error"`
		}
		jerr := json.Unmarshal(out, &res)
		switch {
		case jerr == nil && res.Error == "" && err == nil:
			r := IperfResult{Gbps: res.End.SumReceived.BitsPerSecond / 1e9}
			if o.UDP {
				r.LostPercent = res.End.Sum.LostPercent
			}
			return r, nil
		case res.Error != "":
			last = errors.New(res.Error)
		default:
			last = errors.Join(err, jerr)
		}
		if ctx.Err() != nil {
			return IperfResult{}, ctx.Err()
		}
		time.Sleep(250 * time.Millisecond)
	}
	return IperfResult{}, fmt.Errorf("iperf3 %s: %w", strings.Join(args, " "), last)
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
