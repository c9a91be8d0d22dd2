package tralab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/scionproto/scion/pkg/addr"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/tra"
)

// The flood: the translated host sends to a great many distinct SM-IP
// destinations in random ASes, as a scan or a broken application would,
// while a steady flow to a real destination goes on. The daemon must stay
// bounded (memory, goroutines, the paths map) and the steady flow
// unaffected. `fastpath lab tra-flood` runs it.

// FloodOptions configure Flood.
type FloodOptions struct {
	Net  scionlab.Network
	Keep bool
	// Destinations distinct SM-IP destinations in Duration.
	Destinations int
	Duration     time.Duration
	// Quiet is how long the steady flow is measured alone before.
	Quiet   time.Duration
	UDPRate int
	Command string
	Log     io.Writer
}

// FloodReport is what a flood did.
type FloodReport struct {
	Started time.Time `json:"started"`
	Command string    `json:"command"`
	lab.Machine
	Destinations int               `json:"destinations"`
	Seconds      float64           `json:"seconds"`
	Sent         int               `json:"flood_sent"`
	Samples      []FloodSample     `json:"samples"`
	Quiet        SteadyFigures     `json:"steady_before"`
	During       SteadyFigures     `json:"steady_during"`
	RSSMaxKiB    uint64            `json:"rss_max_kib"`
	Goroutines   uint64            `json:"goroutines_max"`
	MapMax       int               `json:"paths_map_entries_max"`
	TrackedMax   uint64            `json:"destinations_tracked_max"`
	HeldMax      uint64            `json:"held_max"`
	Daemon       map[string]uint64 `json:"daemon_counters"`
	Verdicts     tra.Counts        `json:"verdicts_out"`
}

// FloodSample is the client's daemon and data plane at one moment.
type FloodSample struct {
	At         float64 `json:"at_s"`
	Sent       int     `json:"flood_sent"`
	RSSKiB     uint64  `json:"rss_kib"`
	Goroutines uint64  `json:"goroutines"`
	Map        int     `json:"paths_map_entries"`
	Tracked    uint64  `json:"destinations_tracked"`
	HeldNow    uint64  `json:"held_now"`
	LookupsNow uint64  `json:"lookups_now"`
}

// SteadyFigures are the steady flow's datagrams in a window.
type SteadyFigures struct {
	Sent      int     `json:"sent"`
	Lost      int     `json:"lost"`
	MedianRTT float64 `json:"median_rtt_us"`
}

// floodDest is the i-th destination: distinct for every i below the number
// of (ISD, AS) pairs with SM-IP addresses, in an order that looks random,
// the lab's own ASes left out by the caller.
func floodDest(i int) (addr.IA, netip.Addr) {
	const ases = 1<<19 - 1 // BGP-style ASNs 1 to 2^19-1
	const space = 4095 * ases
	x := (uint64(i)*2654435761 + 97) % space // coprime multiplier: a bijection
	isd, as := addr.ISD(1+x/ases), addr.AS(1+x%ases)
	ia, _ := addr.IAFrom(isd, as)
	return ia, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

// Flood runs the flood and reports.
func Flood(ctx context.Context, o FloodOptions) (rep *FloodReport, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Destinations < 1 || o.Duration <= 0 {
		return nil, errors.New("a flood needs destinations and a duration")
	}
	if err := o.Net.Validate(); err != nil {
		return nil, err
	}
	lr, down, err := startLongRun(ctx, o.Net, 0, steadyOptions{udpRate: o.UDPRate, udpLen: 200, tcpRate: 10e6}, o.Log)
	if err != nil {
		return nil, errors.Join(err, down())
	}
	if !o.Keep {
		defer func() { err = errors.Join(err, down()) }()
	}
	defer func() { lr.steady.close(); err = errors.Join(err, lr.stop()) }()
	rep = &FloodReport{Started: time.Now().UTC(), Command: o.Command, Machine: lab.ThisMachine(), Destinations: o.Destinations}
	own := map[addr.IA]bool{}
	for _, a := range lr.as {
		own[a.IA] = true
	}
	var sock *net.UDPConn
	if err := netns.Run(lr.ases[0].HostNetns, func() error {
		var err error
		sock, err = net.ListenUDP("udp6", &net.UDPAddr{IP: lr.hosts[0].smip.AsSlice()})
		return err
	}); err != nil {
		return rep, err
	}
	defer sock.Close()

	time.Sleep(o.Quiet)
	quietEnd := time.Now()
	rep.Quiet = lr.steadyFigures(lr.start, quietEnd)
	fmt.Fprintf(o.Log, "steady flow alone: %d sent, %d lost, RTT %.0f µs\n", rep.Quiet.Sent, rep.Quiet.Lost, rep.Quiet.MedianRTT)

	// The flood, paced in 10 ms steps, sampled each second.
	start := time.Now()
	perStep := max(1, o.Destinations/int(o.Duration/(10*time.Millisecond)))
	step := time.NewTicker(10 * time.Millisecond)
	defer step.Stop()
	nextSample := start.Add(time.Second)
	payload := make([]byte, 64)
	for i := 0; i < o.Destinations && ctx.Err() == nil; {
		now := <-step.C
		for k := 0; k < perStep && i < o.Destinations; i++ {
			ia, host := floodDest(i)
			if own[ia] {
				continue
			}
			dst, err := tra.FromSCION(ia, host)
			if err != nil {
				continue
			}
			sock.WriteToUDPAddrPort(payload, netip.AddrPortFrom(dst, 40000+uint16(i%1000)))
			rep.Sent++
			k++
		}
		if !now.Before(nextSample) {
			nextSample = nextSample.Add(time.Second)
			rep.Samples = append(rep.Samples, lr.floodSample(now.Sub(start).Seconds(), rep.Sent))
			s := rep.Samples[len(rep.Samples)-1]
			fmt.Fprintf(o.Log, "%5.0f s  %d sent: rss %d KiB, goroutines %d, paths map %d, tracked %d, held %d, lookups %d\n",
				s.At, s.Sent, s.RSSKiB, s.Goroutines, s.Map, s.Tracked, s.HeldNow, s.LookupsNow)
		}
	}
	floodEnd := time.Now()
	rep.Seconds = floodEnd.Sub(start).Seconds()
	// The last samples, as the daemon drains what is queued.
	for k := 0; k < 5; k++ {
		time.Sleep(time.Second)
		rep.Samples = append(rep.Samples, lr.floodSample(time.Since(start).Seconds(), rep.Sent))
	}
	rep.During = lr.steadyFigures(start, floodEnd)
	fmt.Fprintf(o.Log, "steady flow during the flood: %d sent, %d lost, RTT %.0f µs\n", rep.During.Sent, rep.During.Lost, rep.During.MedianRTT)
	for _, s := range rep.Samples {
		rep.RSSMaxKiB, rep.Goroutines = max(rep.RSSMaxKiB, s.RSSKiB), max(rep.Goroutines, s.Goroutines)
		rep.MapMax, rep.TrackedMax, rep.HeldMax = max(rep.MapMax, s.Map), max(rep.TrackedMax, s.Tracked), max(rep.HeldMax, s.HeldNow)
	}
	if p, perr := tra.OpenPinned(lr.hosts[0].name); perr == nil {
		rep.Daemon, _ = p.DaemonCounts()
		rep.Verdicts, _, _ = p.DirCounts()
		p.Close()
	}
	return rep, nil
}

func (lr *longRun) floodSample(at float64, sent int) FloodSample {
	s := FloodSample{At: at, Sent: sent}
	p, err := tra.OpenPinned(lr.hosts[0].name)
	if err != nil {
		return s
	}
	defer p.Close()
	if dc, err := p.DaemonCounts(); err == nil {
		s.RSSKiB, s.Goroutines, s.Tracked, s.HeldNow, s.LookupsNow = dc["rss_kib"], dc["goroutines"], dc["destinations"], dc["held_now"], dc["lookups_now"]
	}
	if d, err := p.Dests(); err == nil {
		s.Map = len(d)
	}
	return s
}

// steadyFigures are the steady UDP flow's datagrams sent in [from, to).
func (lr *longRun) steadyFigures(from, to time.Time) SteadyFigures {
	sent, lost := lr.steady.udpWindow(from, to)
	rtts := lr.steady.rtts(from, to)
	var med float64
	if len(rtts) > 0 {
		slices.Sort(rtts)
		med = float64(rtts[len(rtts)/2].Microseconds())
	}
	return SteadyFigures{Sent: sent, Lost: lost, MedianRTT: med}
}

// Markdown is the report's summary.
func (r *FloodReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "`%s` (%s, %s)\n\n", r.Command, r.Started.Format(time.RFC3339), r.Machine.Kernel)
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| destinations sent to | %d in %.0f s |\n", r.Sent, r.Seconds)
	fmt.Fprintf(&b, "| tra run: max RSS | %.1f MiB |\n", float64(r.RSSMaxKiB)/1024)
	fmt.Fprintf(&b, "| tra run: max goroutines | %d |\n", r.Goroutines)
	fmt.Fprintf(&b, "| paths map: max entries | %d (of %d) |\n", r.MapMax, tra.MaxDests)
	fmt.Fprintf(&b, "| destinations tracked, packets held: max | %d, %d |\n", r.TrackedMax, r.HeldMax)
	fmt.Fprintf(&b, "| steady flow alone | %d sent, %d lost, RTT %.0f µs |\n", r.Quiet.Sent, r.Quiet.Lost, r.Quiet.MedianRTT)
	fmt.Fprintf(&b, "| steady flow during | %d sent, %d lost, RTT %.0f µs |\n", r.During.Sent, r.During.Lost, r.During.MedianRTT)
	for _, k := range []string{"lookups", "lookup_failed", "lookup_refused", "held_dropped", "unreachable_sent", "unreachable_limited"} {
		fmt.Fprintf(&b, "| daemon: %s | %d |\n", k, r.Daemon[k])
	}
	for _, k := range []string{"no_path", "queue_full"} {
		fmt.Fprintf(&b, "| data plane: %s | %d |\n", k, r.Verdicts[k].Packets)
	}
	return b.String()
}

// WriteJSON writes the report.
func (r *FloodReport) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
