package lab

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// LiveMaxFrame is the longest frame the live-frames generator sends: its
// map's slots (GEN_MAX_FRAME). The kernel's own limit is a little under a
// page (bpf_prog_test_run_xdp refuses live frames longer than a page less
// XDP's headroom and the shared info: 3,520 bytes on x86-64).
const LiveMaxFrame = GenMaxFrame

// PacketMaxFrame is the longest frame the packet-socket generator sends: a
// jumbo frame (JumboMTU and an Ethernet header).
const PacketMaxFrame = JumboMTU + 14

// PacketGenerator replays a capture through an AF_PACKET socket bound to
// the interface, for frames longer than live frames take. The frames are
// skbs the interface transmits, as a host's would be: a veth whose peer runs
// XDP hands one longer than a page to the program in several buffers.
//
// Each sendmmsg(2) hands packetBatch frames of the capture, in turn, to the
// interface's driver (PACKET_QDISC_BYPASS). A PACKET_TX_RING cost the same
// CPU per frame here (docs/lab.md, Jumbo frames: the kernel copies each
// frame twice either way), with a ring to size, pin and wait on besides.
type PacketGenerator struct {
	opts GenOptions
	fd   int
	// msgs are the capture's frames as messages, one each, in order: a
	// batch is a window of them.
	msgs []mmsghdr
	iovs []unix.Iovec
}

// mmsghdr is struct mmsghdr: a message, and how much of it the kernel sent.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// packetBatch is how many frames one sendmmsg(2) hands over: enough that
// the system call's cost vanishes, few enough that a slow path does not
// hold the generator long past a deadline.
const packetBatch = 256

// NewPacketGenerator checks the capture against the interface and opens
// the socket. Of the options, Window and BatchSize do not apply (the kernel
// copies every frame from the capture, which nothing on the path can
// change), and flood mode (Flows) is the live generator's alone.
func NewPacketGenerator(opts GenOptions) (*PacketGenerator, error) {
	if len(opts.Packets) == 0 {
		return nil, errors.New("no packets to send: the capture is empty")
	}
	if opts.Flows > 0 {
		return nil, fmt.Errorf("flood mode (--flows) rewrites packets in the live-frames generator only, which sends frames of up to %d bytes", LiveMaxFrame)
	}
	attrs, err := xdp.Lookup(opts.Iface)
	if err != nil {
		return nil, err
	}
	limit := min(attrs.MTU+14, PacketMaxFrame)
	for i, p := range opts.Packets {
		if len(p) < 14 {
			return nil, fmt.Errorf("packet %d is %d bytes, shorter than an Ethernet header", i+1, len(p))
		}
		if len(p) > limit {
			return nil, fmt.Errorf("packet %d is %d bytes, longer than %s allows (MTU %d, at most %d bytes per frame)", i+1, len(p), opts.Iface, attrs.MTU, limit)
		}
	}
	if opts.Fixed {
		opts.Packets = opts.Packets[:1]
	}
	// The messages point at the capture's own bytes, which the generator
	// keeps; Go's collector moves no heap object.
	g := &PacketGenerator{opts: opts, fd: -1, msgs: make([]mmsghdr, len(opts.Packets)), iovs: make([]unix.Iovec, len(opts.Packets))}
	for i, p := range opts.Packets {
		g.iovs[i].Base = &p[0]
		g.iovs[i].SetLen(len(p))
		g.msgs[i].hdr.Iov = &g.iovs[i]
		g.msgs[i].hdr.SetIovlen(1)
	}
	err = netns.Run(opts.Iface.Netns, func() error {
		// Protocol 0: the socket receives nothing, it only sends.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		g.fd = fd
		// Straight to the driver: a veth has no queue to bypass, but the
		// queueing layer's locks and checks cost all the same.
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return fmt.Errorf("PACKET_QDISC_BYPASS: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: attrs.Index}); err != nil {
			return fmt.Errorf("bind to %s: %w", opts.Iface, err)
		}
		return nil
	})
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("packet generator on %s: %w", opts.Iface, err)
	}
	return g, nil
}

// Close closes the socket.
func (g *PacketGenerator) Close() error {
	if g.fd < 0 {
		return nil
	}
	err := unix.Close(g.fd)
	g.fd = -1
	return err
}

// Send sends until Count packets are sent, Duration passes or ctx is done,
// like the live generator. Sent counts the frames the interface passed on;
// one it dropped (its peer's ring full) counts in Drops instead and is sent
// again: the kernel reports the drop for that frame, and sendmmsg(2)
// stops there.
func (g *PacketGenerator) Send(ctx context.Context, o SendOptions) (GenStats, error) {
	if o.Count == 0 && o.Duration == 0 {
		return GenStats{}, errors.New("send: give a packet count or a duration")
	}
	var stats GenStats
	start := time.Now()
	err := netns.Run(g.opts.Iface.Netns, func() error {
		// netns.Run locks the thread only to switch; pinning needs it too.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if g.opts.CPU >= 0 {
			var old, set unix.CPUSet
			if err := unix.SchedGetaffinity(0, &old); err != nil {
				return err
			}
			set.Set(g.opts.CPU)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				return fmt.Errorf("pin generator to CPU %d: %w", g.opts.CPU, err)
			}
			defer unix.SchedSetaffinity(0, &old)
		}
		before, err := linkCounters(g.opts.Iface)
		if err != nil {
			return err
		}
		err = g.loop(ctx, o, &stats)
		after, serr := linkCounters(g.opts.Iface)
		if serr == nil {
			stats.Drops = after.dropped - before.dropped
			if passed := after.packets - before.packets; passed+stats.Drops < stats.Sent {
				stats.Vanished = stats.Sent - passed - stats.Drops
			}
		}
		return errors.Join(err, serr)
	})
	stats.Wall = time.Since(start)
	return stats, err
}

func (g *PacketGenerator) loop(ctx context.Context, o SendOptions, stats *GenStats) error {
	start := time.Now()
	lastReport, lastSent := start, uint64(0)
	defer func() { stats.Elapsed = time.Since(start) }()
	for {
		if o.done(ctx, start, stats.Sent) {
			return nil
		}
		n := uint64(packetBatch)
		if o.Count > 0 {
			n = min(n, o.Count-stats.Sent)
		}
		if o.Rate > 0 {
			n = min(n, max(1, o.Rate/20))
		}
		sent, err := g.sendBatch(int(n), stats.Sent)
		stats.Sent += uint64(sent)
		if err != nil {
			return err
		}
		if o.Rate > 0 {
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

// sendBatch sends up to n frames, packet first (mod the capture's length)
// on, and returns how many the interface took.
func (g *PacketGenerator) sendBatch(n int, first uint64) (int, error) {
	total := 0
	for total < n {
		i := int((first + uint64(total)) % uint64(len(g.msgs)))
		k := min(n-total, len(g.msgs)-i)
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(g.fd), uintptr(unsafe.Pointer(&g.msgs[i])), uintptr(k), 0, 0, 0)
		switch {
		case errno == unix.ENOBUFS || errno == unix.EAGAIN:
			// The device dropped the first frame (counted by it), or
			// the socket's send buffer is full: try again.
			return total, nil
		case errno != 0:
			return total, fmt.Errorf("sendmmsg on %s: %w", g.opts.Iface, errno)
		}
		total += int(r)
		if int(r) < k {
			// Stopped at a frame the device dropped.
			return total, nil
		}
	}
	return total, nil
}

type linkStats struct{ packets, dropped uint64 }

// linkCounters reads the interface's transmit counters (rtnetlink's
// stats64): a veth counts what it passed to its peer, and what it dropped
// (its peer's ring full).
func linkCounters(i xdp.Iface) (linkStats, error) {
	h, err := netns.Handle(i.Netns)
	if err != nil {
		return linkStats{}, err
	}
	defer h.Close()
	l, err := h.LinkByName(i.Name)
	if err != nil {
		return linkStats{}, fmt.Errorf("counters of %s: %w", i, err)
	}
	s := l.Attrs().Statistics
	if s == nil {
		return linkStats{}, fmt.Errorf("%s reports no counters", i)
	}
	return linkStats{packets: s.TxPackets, dropped: s.TxDropped}, nil
}

// Sender sends a capture: the live-frames Generator, or the
// PacketGenerator for frames longer than live frames take.
type Sender interface {
	Send(ctx context.Context, o SendOptions) (GenStats, error)
	Close() error
	// Method names how it sends (MethodLiveFrames, MethodPacket).
	Method() string
}

// The generators' methods, as reports name them.
const (
	MethodLiveFrames = "live-frames"
	MethodPacket     = "af-packet"
)

// Method is MethodLiveFrames.
func (g *Generator) Method() string { return MethodLiveFrames }

// Method is MethodPacket.
func (g *PacketGenerator) Method() string { return MethodPacket }

// NewSender picks the generator for the capture: live frames when every
// packet fits (LiveMaxFrame), being the faster by far, else the packet
// socket's.
func NewSender(opts GenOptions) (Sender, error) {
	for _, p := range opts.Packets {
		if len(p) > LiveMaxFrame {
			return NewPacketGenerator(opts)
		}
	}
	return NewGenerator(opts)
}
