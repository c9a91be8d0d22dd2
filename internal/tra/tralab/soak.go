package tralab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/scionproto/scion/pkg/slayers/path/scion"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/tra"
)

// The soak: two translated hosts talk for a long time (steady UDP, TCP and
// ping6) while the network around them breaks in the ways an operator sees
// over weeks: inter-AS links flap, scionproto's daemons and control
// services restart, paths expire. It samples the daemons' memory, their
// tables and the data plane's, and says whether a flow got stuck, whether
// every packet the host sent ended in a verdict, and whether anything grew.
// `fastpath lab tra-soak` runs it; `make soak` runs the 30-minute one.

// SoakOptions configure Soak.
type SoakOptions struct {
	Net  scionlab.Network
	Keep bool
	// Duration of the run; a sample every Sample.
	Duration, Sample time.Duration
	// FlapEvery takes a link a flow uses down for FlapFor (0: never).
	FlapEvery, FlapFor time.Duration
	// RestartEvery restarts, in turn, scionproto's daemon and control
	// service of each AS (0: never).
	RestartEvery time.Duration
	// HopExpiry makes the network's hop fields short-lived (0: 6 h).
	HopExpiry time.Duration
	// UDPRate datagrams a second of UDPLen bytes; TCPRate bits a second.
	UDPRate, UDPLen int
	TCPRate         uint64
	Command         string
	Log             io.Writer
	// LogDir, if set, receives both daemons' logs at the end.
	LogDir string
}

// SoakReport is what a soak saw.
type SoakReport struct {
	Started time.Time `json:"started"`
	Command string    `json:"command"`
	lab.Machine
	Seconds      float64      `json:"seconds"`
	FlapEvery    float64      `json:"flap_every_s,omitempty"`
	FlapFor      float64      `json:"flap_for_s,omitempty"`
	RestartEvery float64      `json:"restart_every_s,omitempty"`
	HopExpiry    float64      `json:"hop_expiry_s,omitempty"`
	UDPRate      int          `json:"udp_per_second"`
	TCPRate      uint64       `json:"tcp_bits_per_second"`
	Hosts        [2]string    `json:"hosts"`
	Samples      []SoakSample `json:"samples"`
	Events       []SoakEvent  `json:"events"`
	Summary      SoakSummary  `json:"summary"`
}

// SoakSample is the state at one moment, for each host (client first).
type SoakSample struct {
	At         float64   `json:"at_s"`
	RSSKiB     [2]uint64 `json:"rss_kib"`
	Goroutines [2]uint64 `json:"goroutines"`
	Dests      [2]int    `json:"paths_map_entries"`
	// ExpiresIn is how long the first installed path has left: renewed
	// paths show as a saw, never reaching 0.
	ExpiresIn [2]float64 `json:"first_expiry_in_s"`
	Tracked   [2]uint64  `json:"destinations_tracked"`
	HeldNow   [2]uint64  `json:"held_now"`
	Shunned   [2]uint64  `json:"shunned_now"`
	// Unaccounted are packets the host sent into the pair that no verdict
	// of tra_out counted (packets in flight at the moment aside).
	Unaccounted [2]int64 `json:"unaccounted_out"`
	UDPSent     int      `json:"udp_sent"`
	UDPLost     int      `json:"udp_lost"`
	TCPMbps     float64  `json:"tcp_mbit_s"`
}

// SoakEvent is what the soak did to the network, and when.
type SoakEvent struct {
	At   float64 `json:"at_s"`
	What string  `json:"what"`
}

// SoakSummary is the verdict.
type SoakSummary struct {
	UDPSent         int       `json:"udp_sent"`
	UDPLost         int       `json:"udp_lost"`
	UDPLongestGap   float64   `json:"udp_longest_gap_s"`
	TCPBytes        uint64    `json:"tcp_bytes"`
	TCPLongestStall float64   `json:"tcp_longest_stall_s"`
	TCPError        string    `json:"tcp_error,omitempty"`
	PingSent        int       `json:"ping_sent"`
	PingReceived    int       `json:"ping_received"`
	RSSFirst        [2]uint64 `json:"rss_first_kib"`
	RSSLast         [2]uint64 `json:"rss_last_kib"`
	RSSMax          [2]uint64 `json:"rss_max_kib"`
	GoroutinesMax   [2]uint64 `json:"goroutines_max"`
	DestsMax        [2]int    `json:"paths_map_entries_max"`
	// UnaccountedMax is the most seen at a sample, while packets flow (the
	// counters and the device's statistics are read a moment apart);
	// UnaccountedEnd what is left once the traffic has stopped.
	UnaccountedMax int64     `json:"unaccounted_out_max"`
	UnaccountedEnd [2]int64  `json:"unaccounted_out_end"`
	Panics         [2]uint64 `json:"daemon_panics"`
	// Daemon are both daemons' counters at the end.
	Daemon [2]map[string]uint64 `json:"daemon_counters"`
	// ExpiresInMin is the least time a path had left at any sample.
	ExpiresInMin float64 `json:"first_expiry_in_min_s"`
	DaemonsAlive bool    `json:"daemons_alive"`
}

// longRun is what Soak and Flood share: the network, the two translated
// hosts, the steady traffic between them.
type longRun struct {
	net    scionlab.Network
	as     []scionlab.AS
	links  []scionlab.Link
	hosts  [2]*translated
	ases   [2]scionlab.AS
	steady *steady
	start  time.Time
	log    io.Writer
	// unaccounted0 are the packets the pair took before tra_out was on it
	// (the host's end comes up with IPv6 before attach ends): the soak
	// counts from there.
	unaccounted0 [2]int64
}

// up brings the network (hybrid, two links a leaf) up if need be,
// translates the first and the last leaf's hosts and starts the traffic.
func startLongRun(ctx context.Context, n scionlab.Network, hop time.Duration, o steadyOptions, log io.Writer) (lr *longRun, down func() error, err error) {
	down = func() error { return nil }
	before := time.Now()
	st, err := n.Up(ctx, scionlab.UpOptions{ASes: scionlab.DefaultASes, Links: scionlab.MaxParallel, Hybrid: true, HopExpiry: hop, Log: log})
	if err != nil {
		return nil, down, err
	}
	if st.Started.After(before) {
		down = func() error { return n.Down(io.Discard) }
	}
	lr = &longRun{net: n, log: log}
	if lr.as, lr.links, err = n.ASes(); err != nil {
		return nil, down, err
	}
	bin, err := scionlab.FastpathBinary("the soak runs `fastpath tra run`")
	if err != nil {
		return nil, down, err
	}
	lr.ases = [2]scionlab.AS{lr.as[1], lr.as[len(lr.as)-1]}
	for i, a := range lr.ases {
		if lr.hosts[i], err = translate(bin, n, a, log); err != nil {
			return nil, down, errors.Join(err, lr.stop())
		}
	}
	var s0 SoakSample
	if err := lr.sample(&s0); err != nil {
		return nil, down, errors.Join(err, lr.stop())
	}
	lr.unaccounted0 = s0.Unaccounted
	lr.steady, err = startSteady(lr.ases[0].HostNetns, lr.ases[1].HostNetns, lr.hosts[1].smip, o.udpRate, o.udpLen, o.tcpRate)
	if err != nil {
		return nil, down, errors.Join(err, lr.stop())
	}
	// A young network finds its paths one segment at a time: the run
	// starts once both flows come through, and is measured from a few
	// seconds later.
	deadline := time.Now().Add(time.Minute)
	for !lr.steady.flowing() {
		if time.Now().After(deadline) {
			lr.steady.close()
			return nil, down, errors.Join(errors.New("the steady flows did not come through within a minute"), lr.stop())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(5 * time.Second)
	lr.start = time.Now()
	lr.steady.countFrom(lr.start)
	return lr, down, nil
}

type steadyOptions struct {
	udpRate, udpLen int
	tcpRate         uint64
}

func (lr *longRun) stop() error {
	var errs []error
	for _, h := range lr.hosts {
		if h != nil {
			errs = append(errs, h.stop())
		}
	}
	return errors.Join(errs...)
}

func (lr *longRun) since() float64 { return time.Since(lr.start).Seconds() }

// sample reads both hosts' daemons and data planes.
func (lr *longRun) sample(s *SoakSample) error {
	for i, h := range lr.hosts {
		p, err := tra.OpenPinned(h.name)
		if err != nil {
			return err
		}
		dc, err := p.DaemonCounts()
		if err == nil {
			s.RSSKiB[i], s.Goroutines[i], s.Tracked[i], s.HeldNow[i], s.Shunned[i] = dc["rss_kib"], dc["goroutines"], dc["destinations"], dc["held_now"], dc["shunned_now"]
		}
		if d, err := p.Dests(); err == nil {
			s.Dests[i] = len(d)
			var first time.Time
			for _, dp := range d {
				for _, x := range dp.Paths {
					if e := time.Unix(int64(x.Expiry), 0); x.Expiry != 0 && (first.IsZero() || e.Before(first)) {
						first = e
					}
				}
			}
			if !first.IsZero() {
				s.ExpiresIn[i] = time.Until(first).Seconds()
			}
		}
		out, _, err := p.DirCounts()
		p.Close()
		if err != nil {
			return err
		}
		// What the host sent (its IPv6 output: the translator is its only
		// IPv6 device) and what crossed the pair without passing the
		// host's end (the daemon's held packets, sent past it) are each
		// one verdict; what the host's end handed on to the pair crosses
		// it too and is counted there.
		var counted uint64
		for name, c := range out {
			if name != "mss_clamped" && name != "to_pair" {
				counted += c.Packets
			}
		}
		rx, err := pairRx(lr.ases[i].HostNetns, h.pair+"1")
		if err != nil {
			return err
		}
		sent, err := ip6OutRequests(lr.ases[i].HostNetns)
		if err != nil {
			return err
		}
		s.Unaccounted[i] = int64(sent) + int64(rx) - int64(out["to_pair"].Packets) - int64(counted) - lr.unaccounted0[i]
	}
	return nil
}

// ip6OutRequests is how many IPv6 packets the host's own stack has sent
// (Ip6OutRequests of its namespace).
func ip6OutRequests(ns string) (uint64, error) {
	var n uint64
	err := netns.Run(ns, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp6")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "Ip6OutRequests" {
				n, err = strconv.ParseUint(f[1], 10, 64)
				return err
			}
		}
		return errors.New("no Ip6OutRequests in snmp6")
	})
	if err != nil {
		return 0, fmt.Errorf("IPv6 output of %s: %w", ns, err)
	}
	return n, nil
}

// pairRx is how many packets the translator's end of the pair received:
// every one of them went through tra_out.
func pairRx(ns, dev string) (uint64, error) {
	h, err := netns.Handle(ns)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return 0, err
	}
	if st := l.Attrs().Statistics; st != nil {
		return st.RxPackets, nil
	}
	return 0, fmt.Errorf("%s: no statistics", dev)
}

// usedLink is the interface by which the client's path to the server
// leaves the client's AS (first) or enters the server's (last hop).
func (lr *longRun) usedLink(last bool) (scionlab.AS, uint16, error) {
	p, err := tra.OpenPinned(lr.hosts[0].name)
	if err != nil {
		return scionlab.AS{}, 0, err
	}
	defer p.Close()
	all, err := p.Paths()
	if err != nil {
		return scionlab.AS{}, 0, err
	}
	ps := all[lr.ases[1].IA]
	if len(ps) == 0 {
		return scionlab.AS{}, 0, errors.New("no path installed")
	}
	var dec scion.Decoded
	if err := dec.DecodeFromBytes(ps[0].Raw); err != nil {
		return scionlab.AS{}, 0, err
	}
	hop, inf := dec.HopFields[0], dec.InfoFields[0]
	a := lr.ases[0]
	if last {
		hop, inf, a = dec.HopFields[len(dec.HopFields)-1], dec.InfoFields[len(dec.InfoFields)-1], lr.ases[1]
		if inf.ConsDir {
			return a, hop.ConsIngress, nil
		}
		return a, hop.ConsEgress, nil
	}
	if inf.ConsDir {
		return a, hop.ConsEgress, nil
	}
	return a, hop.ConsIngress, nil
}

// Soak runs the soak and reports.
func Soak(ctx context.Context, o SoakOptions) (rep *SoakReport, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Duration <= 0 || o.Sample <= 0 {
		return nil, errors.New("a soak needs a duration and a sample interval")
	}
	if o.FlapEvery > 0 && (o.FlapFor <= 0 || o.FlapFor >= o.FlapEvery) {
		return nil, fmt.Errorf("--flap-for %s: more than 0 and less than --flap-every %s", o.FlapFor, o.FlapEvery)
	}
	if err := o.Net.Validate(); err != nil {
		return nil, err
	}
	lr, down, err := startLongRun(ctx, o.Net, o.HopExpiry, steadyOptions{o.UDPRate, o.UDPLen, o.TCPRate}, o.Log)
	if err != nil {
		return nil, errors.Join(err, down())
	}
	if !o.Keep {
		defer func() { err = errors.Join(err, down()) }()
	}
	rep = &SoakReport{
		Started: time.Now().UTC(), Command: o.Command, Machine: lab.ThisMachine(), FlapEvery: o.FlapEvery.Seconds(),
		FlapFor: o.FlapFor.Seconds(), RestartEvery: o.RestartEvery.Seconds(), HopExpiry: o.HopExpiry.Seconds(),
		UDPRate: o.UDPRate, TCPRate: o.TCPRate, Hosts: [2]string{lr.hosts[0].smip.String(), lr.hosts[1].smip.String()},
	}
	event := func(format string, args ...any) {
		e := SoakEvent{At: lr.since(), What: fmt.Sprintf(format, args...)}
		rep.Events = append(rep.Events, e)
		fmt.Fprintf(o.Log, "%7.1f s  %s\n", e.At, e.What)
	}
	sampleTick := time.NewTicker(o.Sample)
	defer sampleTick.Stop()
	var flapTick, restartTick <-chan time.Time
	if o.FlapEvery > 0 {
		t := time.NewTicker(o.FlapEvery)
		defer t.Stop()
		flapTick = t.C
	}
	if o.RestartEvery > 0 {
		t := time.NewTicker(o.RestartEvery)
		defer t.Stop()
		restartTick = t.C
	}
	// What restarts, in turn: each leaf's and the core's daemon and
	// control service.
	var restarts []struct {
		a       scionlab.AS
		service string
	}
	for _, svc := range []string{"daemon", "control"} {
		for _, a := range []scionlab.AS{lr.ases[0], lr.as[0], lr.ases[1]} {
			restarts = append(restarts, struct {
				a       scionlab.AS
				service string
			}{a, svc})
		}
	}
	end := time.After(o.Duration)
	prev := time.Now()
	var tcpPrev uint64
	flaps, nrestart := 0, 0
	// Links down now, and when each is to come up.
	type downLink struct {
		a     scionlab.AS
		ifid  uint16
		until time.Time
	}
	var downLinks []downLink
	upTick := time.NewTicker(time.Second)
	defer upTick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		case <-end:
			break loop
		case <-flapTick:
			a, ifid, ferr := lr.usedLink(flaps%2 == 1)
			flaps++
			if ferr != nil {
				event("no link to flap: %v", ferr)
				continue
			}
			if ferr := lr.net.SetLink(a, ifid, false); ferr != nil {
				event("link %d of %s down: %v", ifid, a.IA, ferr)
				continue
			}
			downLinks = append(downLinks, downLink{a, ifid, time.Now().Add(o.FlapFor)})
			event("link %d of %s down for %s", ifid, a.IA, o.FlapFor)
		case now := <-upTick.C:
			still := downLinks[:0]
			for _, l := range downLinks {
				if now.Before(l.until) {
					still = append(still, l)
					continue
				}
				if ferr := lr.net.SetLink(l.a, l.ifid, true); ferr != nil {
					event("link %d of %s up: %v", l.ifid, l.a.IA, ferr)
				} else {
					event("link %d of %s up", l.ifid, l.a.IA)
				}
			}
			downLinks = still
		case <-restartTick:
			r := restarts[nrestart%len(restarts)]
			nrestart++
			if rerr := lr.net.Restart(ctx, r.a, r.service, io.Discard); rerr != nil {
				event("restart %s of %s: %v", r.service, r.a.IA, rerr)
			} else {
				event("%s of %s restarted", r.service, r.a.IA)
			}
		case now := <-sampleTick.C:
			s := SoakSample{At: lr.since()}
			if serr := lr.sample(&s); serr != nil {
				event("sample: %v", serr)
			}
			// Datagrams of the interval before the last 3 s: what is
			// still on its way is not lost yet.
			s.UDPSent, s.UDPLost = lr.steady.udpWindow(prev.Add(-3*time.Second), now.Add(-3*time.Second))
			b := lr.steady.tcpBytes.Load()
			s.TCPMbps = float64(b-tcpPrev) * 8 / now.Sub(prev).Seconds() / 1e6
			tcpPrev, prev = b, now
			rep.Samples = append(rep.Samples, s)
			fmt.Fprintf(o.Log, "%7.1f s  rss %d/%d KiB, goroutines %d/%d, paths map %d/%d, udp lost %d of %d, tcp %.1f Mbit/s, unaccounted %d/%d\n",
				s.At, s.RSSKiB[0], s.RSSKiB[1], s.Goroutines[0], s.Goroutines[1], s.Dests[0], s.Dests[1], s.UDPLost, s.UDPSent, s.TCPMbps, s.Unaccounted[0], s.Unaccounted[1])
		}
	}
	// Links left down come up before the last datagrams are counted.
	for _, l := range downLinks {
		lr.net.SetLink(l.a, l.ifid, true)
	}
	time.Sleep(4 * time.Second)
	stopAt := time.Now()
	sum := &rep.Summary
	sum.UDPSent, sum.UDPLost = lr.steady.udpWindow(lr.start, stopAt.Add(-3*time.Second))
	sum.UDPLongestGap = lr.steady.udpGap(lr.start, stopAt.Add(-3*time.Second)).Seconds()
	stall, terr := lr.steady.tcpState()
	sum.TCPLongestStall, sum.TCPBytes = stall.Seconds(), lr.steady.tcpBytes.Load()
	if terr != nil {
		sum.TCPError = terr.Error()
	}
	sum.PingSent, sum.PingReceived = lr.steady.close()
	time.Sleep(time.Second)
	var last SoakSample
	if serr := lr.sample(&last); serr == nil {
		sum.UnaccountedEnd = last.Unaccounted
	}
	sum.DaemonsAlive = true
	for i, h := range lr.hosts {
		select {
		case <-h.exited:
			sum.DaemonsAlive = false
		default:
		}
		if p, perr := tra.OpenPinned(h.name); perr == nil {
			if dc, derr := p.DaemonCounts(); derr == nil {
				sum.Panics[i], sum.Daemon[i] = dc["panics"], dc
			}
			p.Close()
		}
	}
	for i, s := range rep.Samples {
		for h := 0; h < 2; h++ {
			if i == 0 {
				sum.RSSFirst[h] = s.RSSKiB[h]
			}
			sum.RSSLast[h] = s.RSSKiB[h]
			sum.RSSMax[h] = max(sum.RSSMax[h], s.RSSKiB[h])
			sum.GoroutinesMax[h] = max(sum.GoroutinesMax[h], s.Goroutines[h])
			sum.DestsMax[h] = max(sum.DestsMax[h], s.Dests[h])
			sum.UnaccountedMax = max(sum.UnaccountedMax, abs64(s.Unaccounted[h]))
			if s.ExpiresIn[h] != 0 && (sum.ExpiresInMin == 0 || s.ExpiresIn[h] < sum.ExpiresInMin) {
				sum.ExpiresInMin = s.ExpiresIn[h]
			}
		}
	}
	rep.Seconds = stopAt.Sub(lr.start).Seconds()
	if o.LogDir != "" {
		err = errors.Join(err, lr.keepLogs(o.LogDir))
	}
	return rep, errors.Join(err, lr.stop())
}

// keepLogs copies both daemons' logs into dir, named by their ASes.
func (lr *longRun) keepLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, h := range lr.hosts {
		b, err := os.ReadFile(h.log.Name())
		if err != nil {
			return err
		}
		name := fmt.Sprintf("tra-run-%s.log", strings.ReplaceAll(lr.ases[i].IA.String(), ":", "_"))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// Markdown is the report as a table of the summary and the curve (one row
// a minute, or every sample for short runs).
func (r *SoakReport) Markdown() string {
	var b strings.Builder
	s := r.Summary
	fmt.Fprintf(&b, "`%s` (%s, %s; %.0f s)\n\n", r.Command, r.Started.Format(time.RFC3339), r.Machine.Kernel, r.Seconds)
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| UDP (%d/s) | %d sent, %d lost, longest gap %.2f s |\n", r.UDPRate, s.UDPSent, s.UDPLost, s.UDPLongestGap)
	fmt.Fprintf(&b, "| TCP (%.0f Mbit/s) | %d MB, longest stall %.2f s%s |\n", float64(r.TCPRate)/1e6, s.TCPBytes>>20, s.TCPLongestStall, errNote(s.TCPError))
	fmt.Fprintf(&b, "| ping6 | %d of %d answered |\n", s.PingReceived, s.PingSent)
	fmt.Fprintf(&b, "| daemons' RSS (KiB) | first %d / %d, last %d / %d, max %d / %d |\n", s.RSSFirst[0], s.RSSFirst[1], s.RSSLast[0], s.RSSLast[1], s.RSSMax[0], s.RSSMax[1])
	fmt.Fprintf(&b, "| goroutines, max | %d / %d |\n", s.GoroutinesMax[0], s.GoroutinesMax[1])
	fmt.Fprintf(&b, "| paths map entries, max | %d / %d |\n", s.DestsMax[0], s.DestsMax[1])
	fmt.Fprintf(&b, "| packets without a verdict: at the end / most at a sample | %d, %d / %d |\n", s.UnaccountedEnd[0], s.UnaccountedEnd[1], s.UnaccountedMax)
	fmt.Fprintf(&b, "| daemons alive, panics | %v, %d / %d |\n", s.DaemonsAlive, s.Panics[0], s.Panics[1])
	fmt.Fprintf(&b, "| paths installed, expired, evicted | %d, %d, %d / %d, %d, %d |\n", s.Daemon[0]["installed"], s.Daemon[0]["expired"], s.Daemon[0]["evicted"],
		s.Daemon[1]["installed"], s.Daemon[1]["expired"], s.Daemon[1]["evicted"])
	fmt.Fprintf(&b, "| failovers: interface down, silent path | %d, %d / %d, %d |\n", s.Daemon[0]["interface_down"], s.Daemon[0]["path_dead"], s.Daemon[1]["interface_down"], s.Daemon[1]["path_dead"])
	fmt.Fprintf(&b, "| least time a path had left | %.0f s |\n\n", s.ExpiresInMin)
	fmt.Fprintf(&b, "| s | RSS KiB | goroutines | map | first expiry in (s) | UDP lost/sent | TCP Mbit/s | events |\n|---:|---|---|---|---|---|---:|---|\n")
	every := 1
	if len(r.Samples) > 40 {
		every = len(r.Samples) / 30
	}
	ei := 0
	for i, x := range r.Samples {
		var evs []string
		for ei < len(r.Events) && r.Events[ei].At <= x.At {
			evs = append(evs, r.Events[ei].What)
			ei++
		}
		if i%every != 0 && len(evs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %.0f | %d / %d | %d / %d | %d / %d | %.0f / %.0f | %d/%d | %.1f | %s |\n", x.At, x.RSSKiB[0], x.RSSKiB[1], x.Goroutines[0], x.Goroutines[1],
			x.Dests[0], x.Dests[1], x.ExpiresIn[0], x.ExpiresIn[1], x.UDPLost, x.UDPSent, x.TCPMbps, strings.Join(evs, "; "))
	}
	return b.String()
}

func errNote(e string) string {
	if e == "" {
		return ""
	}
	return ", " + e
}

// WriteJSON writes the report.
func (r *SoakReport) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
