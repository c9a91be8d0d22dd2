package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/safchain/ethtool"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// GenMaxFrame is the longest frame the generator sends (GEN_MAX_FRAME).
const GenMaxFrame = len(genGenPacket{}.Data)

// xdpMD mirrors the kernel's struct xdp_md, the context of an XDP test run:
// live frames are sent from the interface named by IngressIfindex, and the
// kernel insists that DataEnd equals the length of the input.
type xdpMD struct {
	Data, DataEnd, DataMeta uint32
	IngressIfindex          uint32
	RxQueueIndex            uint32
	EgressIfindex           uint32
}

// GenOptions configures a generator.
type GenOptions struct {
	Iface   xdp.Iface
	Packets [][]byte
	// BatchSize is how many frames the kernel prepares and sends at once (64
	// if 0, at most 256). Larger batches overflow the peer veth's 256-slot ring.
	BatchSize uint32
	// CPU pins the sending thread to one CPU; -1 leaves it to the scheduler.
	CPU int
	// Window writes only the bytes where the capture's packets differ, instead
	// of the whole packet on every run. It needs packets of one length, and is
	// wrong when anything on the path rewrites frames in place (the kernel
	// recycles live-frame pages without restoring them). Ignored when the
	// packets' lengths differ, and in flood mode.
	Window bool
	// Flows > 0 is flood mode: the packets are templates, and run n sends
	// template n % len(Packets) as flow n % Flows, with its source address
	// (the host bits of FlowSrc) and both ports drawn from a bijection of
	// the flow number: Flows distinct flows that look random. The
	// templates must be UDP or TCP over IPv4 or IPv6.
	Flows uint32
	// FlowSrc is where flood mode's source addresses come from; the zero
	// prefix keeps each template's source and varies only the ports. At
	// most the low 32 bits of an address vary.
	FlowSrc netip.Prefix
	// FlowKeepDport varies only the source port in flood mode: every flow
	// goes to the template's destination port, as a SYN flood at one
	// service does.
	FlowKeepDport bool
	// Fixed sends the first packet as it is on every run, writing nothing:
	// the generator's own ceiling, against which its per-packet cost shows.
	Fixed bool
}

// Generator replays a capture at top speed through BPF_PROG_TEST_RUN in
// live-frames mode: the kernel builds frames and the program sends them with
// XDP_TX out of Iface, so no skb and no socket is involved.
type Generator struct {
	opts    GenOptions
	ifindex int
	maxLen  int
	window  bool
	objs    genObjects
	prog    *ebpf.Program // lab_gen, or lab_gen_fixed
}

// GenStats is what one Send did.
type GenStats struct {
	Sent uint64
	// Elapsed is the time from the first packet sent to the last (the
	// program notes both); set-up between test runs does not count.
	Elapsed time.Duration
	// Wall is the time the whole Send took, set-up included.
	Wall time.Duration
	// Drops is what the interface reported it could not pass to its peer
	// (its peer's ring was full).
	Drops uint64
	// Vanished counts frames the interface neither passed on nor reported as
	// dropped: a veth does that when its peer runs neither XDP nor GRO.
	Vanished uint64
}

// Mpps is the rate the generator sent at.
func (s GenStats) Mpps() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Sent) / s.Elapsed.Seconds() / 1e6
}

// NewGenerator checks the capture against the interface and loads the
// program with the capture in its map. Nothing is attached.
func NewGenerator(opts GenOptions) (*Generator, error) {
	if len(opts.Packets) == 0 {
		return nil, errors.New("no packets to send: the capture is empty")
	}
	if opts.BatchSize > 256 {
		return nil, fmt.Errorf("batch size %d too large: the kernel allows at most 256", opts.BatchSize)
	}
	attrs, err := xdp.Lookup(opts.Iface)
	if err != nil {
		return nil, err
	}
	// A veth passes frames up to MTU + Ethernet header + one VLAN tag.
	limit := min(attrs.MTU+14+4, GenMaxFrame)
	maxLen := 0
	for i, p := range opts.Packets {
		if len(p) < 14 {
			return nil, fmt.Errorf("packet %d is %d bytes, shorter than an Ethernet header", i+1, len(p))
		}
		if len(p) > limit {
			return nil, fmt.Errorf("packet %d is %d bytes, longer than %s allows (MTU %d, at most %d bytes per frame)", i+1, len(p), opts.Iface, attrs.MTU, limit)
		}
		maxLen = max(maxLen, len(p))
	}

	var flows []flowTemplate
	if opts.Flows > 0 {
		if opts.Fixed {
			return nil, errors.New("flood mode varies every packet: it cannot send a fixed one")
		}
		if flows, err = flowTemplates(opts.Packets, opts.FlowSrc); err != nil {
			return nil, err
		}
		opts.Window = false
	} else if opts.FlowKeepDport {
		return nil, errors.New("a fixed destination port is for flood mode: give a flow count")
	}

	spec, err := loadGen()
	if err != nil {
		return nil, fmt.Errorf("load generator spec: %w", err)
	}
	if opts.Flows > 0 {
		if err := spec.Variables["gen_flows"].Set(opts.Flows); err != nil {
			return nil, err
		}
		portBits := 32
		if opts.FlowKeepDport {
			portBits = 16
			if err := spec.Variables["gen_flow_keep_dport"].Set(uint32(1)); err != nil {
				return nil, err
			}
		}
		if err := spec.Variables["gen_flow_bits"].Set(uint32(portBits + flows[0].hostBits)); err != nil {
			return nil, err
		}
	}
	spec.Maps["gen_packets"].MaxEntries = uint32(len(opts.Packets))
	if err := spec.Variables["gen_count"].Set(uint32(len(opts.Packets))); err != nil {
		return nil, err
	}
	lo, hi, window := 0, 0, false
	if opts.Window {
		lo, hi, window = diffWindow(opts.Packets)
	}
	if window {
		if err := spec.Variables["gen_window"].Set(uint32(1)); err != nil {
			return nil, err
		}
		if err := spec.Variables["gen_window_offset"].Set(uint32(lo)); err != nil {
			return nil, err
		}
	} else {
		lo, hi = 0, -1
	}
	// Values as long as the longest packet, not GEN_MAX_FRAME: the map stays
	// in the cache. Without its BTF type the kernel takes the shorter size.
	dataLen := (maxLen + 7) &^ 7
	if err := spec.Variables["gen_max_len"].Set(uint32(dataLen)); err != nil {
		return nil, err
	}
	hdr := int(binary.Size(genGenPacket{})) - GenMaxFrame
	spec.Maps["gen_packets"].ValueSize = uint32(hdr + dataLen)
	spec.Maps["gen_packets"].Value = nil
	g := &Generator{opts: opts, ifindex: attrs.Index, maxLen: maxLen, window: window}
	if err := spec.LoadAndAssign(&g.objs, nil); err != nil {
		return nil, fmt.Errorf("load generator: %w", err)
	}
	g.prog = g.objs.LabGen
	if opts.Fixed {
		g.prog = g.objs.LabGenFixed
	}
	size := hdr + dataLen
	for i, p := range opts.Packets {
		if flows != nil {
			p = flows[i].pkt
		}
		part := p[lo:]
		if hi >= 0 {
			part = p[lo:hi]
		}
		v := genGenPacket{Len: uint32(len(part))}
		if flows != nil {
			f := flows[i]
			v.HostMask, v.L3Off, v.L4Off, v.CsumOff = f.hostMask, f.l3, f.l4, f.csum
			v.Family, v.Proto = f.family, f.proto
		}
		copy(v.Data[:], part)
		b, err := binary.Append(nil, binary.NativeEndian, v)
		if err != nil {
			return nil, err
		}
		if err := g.objs.GenPackets.Put(uint32(i), b[:size]); err != nil {
			g.Close()
			return nil, fmt.Errorf("fill generator map: %w", err)
		}
	}
	return g, nil
}

// diffWindow returns the byte range [lo, hi) outside which all packets equal
// the first, and whether window mode applies (all packets of one length).
// Identical packets get a one-byte window: the program always writes.
func diffWindow(pkts [][]byte) (lo, hi int, ok bool) {
	first := pkts[0]
	lo, hi = len(first), 0
	for _, p := range pkts[1:] {
		if len(p) != len(first) {
			return 0, 0, false
		}
		for i := range p {
			if p[i] != first[i] {
				lo, hi = min(lo, i), max(hi, i+1)
			}
		}
	}
	if lo >= hi {
		return 0, 1, true
	}
	return lo, hi, true
}

// Window reports whether the generator writes only the differing bytes.
func (g *Generator) Window() bool { return g.window }

// Close unloads the generator.
func (g *Generator) Close() error { return g.objs.Close() }

// SendOptions says how much to send and how fast.
type SendOptions struct {
	// Count stops after this many packets; 0 means no limit.
	Count uint64
	// Duration stops after this long; 0 means no limit. One of the two is needed.
	Duration time.Duration
	// Rate paces the generator to about this many packets per second, in
	// bursts every 50 ms; 0 means as fast as the path takes them.
	Rate uint64
	// Progress, if set, is called about once a second with the totals so far.
	Progress func(elapsed time.Duration, sent uint64, pps float64)
}

// done says whether a send that started at start and has sent sent
// packets is over: its count reached, its duration passed or ctx done.
func (o SendOptions) done(ctx context.Context, start time.Time, sent uint64) bool {
	return (o.Count > 0 && sent >= o.Count) || (o.Duration > 0 && time.Since(start) >= o.Duration) || ctx.Err() != nil
}

// Send runs the generator until Count packets are sent, Duration passes or
// ctx is done. It returns what was sent even when it stops early.
func (g *Generator) Send(ctx context.Context, o SendOptions) (GenStats, error) {
	if o.Count == 0 && o.Duration == 0 {
		return GenStats{}, errors.New("send: give a packet count or a duration")
	}
	var stats GenStats
	err := netns.Run(g.opts.Iface.Netns, func() error {
		if g.opts.CPU >= 0 {
			var set unix.CPUSet
			set.Set(g.opts.CPU)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				return fmt.Errorf("pin generator to CPU %d: %w", g.opts.CPU, err)
			}
		}
		before, err := g.xmitStats()
		if err != nil {
			return err
		}
		startRuns, err := g.runs()
		if err != nil {
			return err
		}
		err = g.loop(ctx, o, startRuns, &stats)
		after, serr := g.xmitStats()
		if serr == nil {
			stats.Drops = after.errors - before.errors
			passed := after.xmit - before.xmit
			if passed+stats.Drops < stats.Sent {
				stats.Vanished = stats.Sent - passed - stats.Drops
			}
		}
		return errors.Join(err, serr)
	})
	return stats, err
}

// loop issues test runs. Each run costs milliseconds to set up, so runs are
// long: a whole count at once, or slices of about 100 ms when the generator
// must report progress, stop on time or keep a rate. The time counted is
// the program's own, from each test run's first packet to its last.
func (g *Generator) loop(ctx context.Context, o SendOptions, startRuns uint64, stats *GenStats) error {
	frame := make([]byte, g.maxLen)
	copy(frame, g.opts.Packets[0])
	start := time.Now()
	lastReport, lastSent := start, uint64(0)
	chunk := uint64(1 << 20)
	if o.Rate > 0 {
		chunk = max(1, o.Rate/20)
	} else if o.Duration > 0 || o.Progress != nil {
		// A slow DUT (a long iptables chain forwards a few hundred packets a
		// second) holds the generator for as long as a run lasts: start
		// small and let the next runs grow to ~100 ms.
		chunk = 1 << 10
	}
	defer func() { stats.Wall = time.Since(start) }()
	for {
		if o.done(ctx, start, stats.Sent) {
			return nil
		}
		n := chunk
		if o.Count > 0 {
			n = min(n, o.Count-stats.Sent)
			if o.Progress == nil && o.Duration == 0 && o.Rate == 0 {
				n = min(o.Count-stats.Sent, 1<<31)
			}
		}
		t0 := time.Now()
		first := startRuns + stats.Sent
		if err := g.markRun(first, first+n-1); err != nil {
			return err
		}
		_, err := g.prog.Run(&ebpf.RunOptions{
			Data:      frame,
			Repeat:    uint32(n),
			Flags:     unix.BPF_F_TEST_XDP_LIVE_FRAMES,
			Context:   xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(g.ifindex)},
			BatchSize: g.opts.BatchSize,
		})
		if err != nil {
			return fmt.Errorf("live-frames test run on %s: %w", g.opts.Iface, err)
		}
		runs, err := g.runs()
		if err != nil {
			return err
		}
		sent := runs - first
		stats.Sent = runs - startRuns
		d, err := g.runTime(sent, n)
		if err != nil {
			return err
		}
		if d == 0 {
			// Interrupted before its last packet: the wall clock must do.
			d = time.Since(t0)
		}
		stats.Elapsed += d
		// Size slices to about 100 ms at the rate just seen.
		if o.Rate == 0 {
			if d := time.Since(t0); d > 0 {
				chunk = max(64, uint64(float64(n)*0.1/d.Seconds()))
			}
		} else {
			due := start.Add(time.Duration(float64(stats.Sent) / float64(o.Rate) * float64(time.Second)))
			time.Sleep(time.Until(due))
		}
		if o.Progress != nil && time.Since(lastReport) >= time.Second {
			now := time.Now()
			o.Progress(now.Sub(start), stats.Sent, float64(stats.Sent-lastSent)/now.Sub(lastReport).Seconds())
			lastReport, lastSent = now, stats.Sent
		}
	}
}

// markRun tells the program which runs are the next test run's first and
// last packet, and clears their times.
func (g *Generator) markRun(first, last uint64) error {
	return errors.Join(g.objs.GenFirst.Set(first), g.objs.GenLast.Set(last), g.objs.GenEnd.Set(last+1),
		g.objs.GenFirstNs.Set(uint64(0)), g.objs.GenLastNs.Set(uint64(0)))
}

// runTime is how long a test run of n packets that sent sent of them took,
// from its first packet to its last: n packets span n-1 gaps, so one
// average gap is added. 0 if the run did not reach its last packet.
func (g *Generator) runTime(sent, n uint64) (time.Duration, error) {
	var t0, t1 uint64
	if err := errors.Join(g.objs.GenFirstNs.Get(&t0), g.objs.GenLastNs.Get(&t1)); err != nil {
		return 0, fmt.Errorf("read generator times: %w", err)
	}
	if sent != n || t0 == 0 || t1 < t0 {
		return 0, nil
	}
	d := float64(t1 - t0)
	if n > 1 {
		d *= float64(n) / float64(n-1)
	}
	return time.Duration(d), nil
}

func (g *Generator) runs() (uint64, error) {
	var n uint64
	if err := g.objs.GenRuns.Get(&n); err != nil {
		return 0, fmt.Errorf("read generator counter: %w", err)
	}
	return n, nil
}

type xmitCounters struct{ xmit, errors uint64 }

// xmitStats reads the veth's counters of frames it passed to its peer's ring
// by ndo_xdp_xmit, and of those the full ring refused. Devices without these
// counters report zeros. Call inside the interface's namespace.
func (g *Generator) xmitStats() (xmitCounters, error) {
	et, err := ethtool.NewEthtool()
	if err != nil {
		return xmitCounters{}, fmt.Errorf("ethtool: %w", err)
	}
	defer et.Close()
	st, err := et.Stats(g.opts.Iface.Name)
	if err != nil {
		return xmitCounters{}, nil
	}
	var c xmitCounters
	for k, v := range st {
		switch {
		case strings.HasPrefix(k, "tx_queue_") && strings.HasSuffix(k, "_xdp_xmit"):
			c.xmit += v
		case strings.HasPrefix(k, "tx_queue_") && strings.HasSuffix(k, "_xdp_xmit_errors"):
			c.errors += v
		}
	}
	return c, nil
}
