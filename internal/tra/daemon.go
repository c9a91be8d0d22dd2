package tra

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/daemon"
	"github.com/scionproto/scion/pkg/snet"
	snetpath "github.com/scionproto/scion/pkg/snet/path"
	"github.com/scionproto/scion/private/path/pathpol"
	"golang.org/x/sys/unix"
)

// The daemon (`tra run`) keeps the data plane's paths: it asks scionproto's
// daemon for paths to each destination AS the host talks to, installs those
// its policy picks, sends again the packets that waited for them, refreshes
// paths before they expire, and drops the paths an SCMP error says are
// broken.

// PathSource gives paths to a destination AS; scionproto's daemon is one.
type PathSource interface {
	Paths(ctx context.Context, dst, src addr.IA, f daemon.PathReqFlags) ([]snet.Path, error)
}

// RunOptions configure Run.
type RunOptions struct {
	// Name is the attached translator's name (Name of the pair in this
	// namespace by default).
	Name string
	Log  io.Writer
	// Source overrides the daemon of the configuration (tests).
	Source PathSource
	// Refresh is how often installed paths are asked for again; paths
	// that expire sooner are asked for before they do.
	Refresh time.Duration
}

// Held packets per destination while its paths are fetched; beyond that
// the oldest go.
const maxHeld = 1024

// AttachAndRun is `fastpath tra run`: it attaches the translator in this
// namespace (again, if it is: the maps stay, the programs are swapped, and
// the device's address is found), runs the daemon until ctx is done, and
// detaches on the way out what it attached.
func AttachAndRun(ctx context.Context, cfg *Config, o RunOptions) error {
	_, statErr := os.Stat(PinDir(Name(cfg.Pair, "")))
	name, err := Attach(cfg, AttachOptions{Warn: o.Log})
	if err != nil {
		return err
	}
	o.Name = name
	err = Run(ctx, cfg, o)
	if statErr != nil {
		err = errors.Join(err, Detach(name))
	}
	return err
}

// Run runs the daemon until ctx is done. It must run in the host's network
// namespace (its sockets reach the daemon and the pair), with the
// translator attached.
func Run(ctx context.Context, cfg *Config, o RunOptions) error {
	if o.Name == "" {
		o.Name = Name(cfg.Pair, "")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Refresh == 0 {
		o.Refresh = time.Minute
	}
	p, err := OpenPinned(o.Name)
	if err != nil {
		return err
	}
	defer p.Close()
	src := o.Source
	if src == nil {
		conn, err := daemon.NewService(cfg.Daemon).Connect(ctx)
		if err != nil {
			return fmt.Errorf("connect to scionproto's daemon at %s: %w", cfg.Daemon, err)
		}
		defer conn.Close()
		src = conn
	}
	inj, err := newInjector(cfg.Pair)
	if err != nil {
		return err
	}
	defer inj.Close()
	rd, err := ringbuf.NewReader(p.events)
	if err != nil {
		return fmt.Errorf("read the translator's events: %w", err)
	}
	out, err := net.ListenUDP("udp4", &net.UDPAddr{IP: cfg.Address.AsSlice()})
	if err != nil {
		return fmt.Errorf("a socket for SCMP errors at %s: %w", cfg.Address, err)
	}
	defer out.Close()
	d := &pathDaemon{cfg: cfg, p: p, src: src, inj: inj, out: out, log: o.Log, held: map[addr.IA][]heldPacket{}, pending: map[addr.IA]bool{}, fetched: make(chan fetchResult, 64)}
	events := make(chan Event, 256)
	go func() {
		<-ctx.Done()
		rd.Close()
	}()
	go func() {
		defer close(events)
		for {
			rec, err := rd.Read()
			if err != nil {
				return
			}
			if ev, err := decodeEvent(rec.RawSample); err == nil {
				events <- ev
			}
		}
	}()
	fmt.Fprintf(o.Log, "translator %s: %s as %s, paths from %s\n", o.Name, cfg.Address, cfg.SMIP, cfg.Daemon)
	tick := time.NewTicker(o.Refresh / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			d.event(ctx, ev)
		case r := <-d.fetched:
			d.install(r)
		case <-tick.C:
			d.refresh(ctx, o.Refresh)
		}
	}
}

type fetchResult struct {
	ia    addr.IA
	paths []Path
	err   error
}

// pathDaemon is the daemon's state; only Run's loop touches it.
type pathDaemon struct {
	cfg  *Config
	p    *Pinned
	src  PathSource
	inj  *injector
	log  io.Writer
	held map[addr.IA][]heldPacket
	// out sends what the daemon itself sends into SCION (SCMP errors).
	out     *net.UDPConn
	pending map[addr.IA]bool
	fetched chan fetchResult
	// installed is when each destination's paths were fetched, and when
	// the first of them expires.
	mu        sync.Mutex
	installed map[addr.IA]installed
	// down are interfaces an SCMP error said are down, until when paths
	// through them are shunned: the daemon keeps offering such paths
	// until the beacons that made them expire.
	down map[ifKey]time.Time
}

type ifKey struct {
	ia   addr.IA
	ifid uint64
}

// downFor is how long an interface an SCMP error reported stays shunned.
const downFor = 30 * time.Second

// heldPacket waits for a path: an IPv6 packet the host sent (sent again
// through the data plane), or an ICMPv6 error it sent (sent as SCMP).
type heldPacket struct {
	data []byte
	icmp bool
}

type installed struct {
	at, expires time.Time
	paths       []snet.Path
}

func (d *pathDaemon) event(ctx context.Context, ev Event) {
	switch ev.Kind {
	case EventNoPath:
		d.hold(ctx, ev.IA, heldPacket{data: ev.Data})
	case EventSCMP:
		d.scmp(ctx, ev)
	case EventICMP:
		paths, _ := d.p.Paths()
		if ps := paths[ev.IA]; len(ps) > 0 || ev.IA == d.cfg.IA {
			var path Path
			if len(ps) > 0 {
				path = ps[0]
			}
			d.sendSCMP(ev.IA, ev.Data, path)
			return
		}
		d.hold(ctx, ev.IA, heldPacket{data: ev.Data, icmp: true})
	}
}

// hold keeps a packet until a path to ia is in, and asks for one.
func (d *pathDaemon) hold(ctx context.Context, ia addr.IA, h heldPacket) {
	q := d.held[ia]
	if len(q) >= maxHeld {
		q = q[1:]
	}
	d.held[ia] = append(q, h)
	d.fetch(ctx, ia, false)
}

// sendSCMP sends an ICMPv6 error of the host into SCION as SCMP, on path
// (none: the destination is in this AS).
func (d *pathDaemon) sendSCMP(ia addr.IA, pkt []byte, path Path) {
	self := addr.HostIP(d.cfg.Address)
	if m, err := ToSCION(d.cfg.SMIP); err == nil {
		self = addr.HostIP(m.Host(d.cfg.SMIP))
	}
	b, err := icmpv6ToSCMP(pkt, d.cfg.IA, self, path)
	if err != nil || b == nil {
		if err != nil {
			fmt.Fprintf(d.log, "ICMPv6 error to %s as SCMP: %v\n", ia, err)
		}
		return
	}
	to := path.NextHop
	if len(path.Raw) == 0 {
		// This AS: straight to the host, at the end-host port.
		_, host, err := scionHost(netip.AddrFrom16([16]byte(pkt[24:40])))
		if err != nil || host.Type() != addr.HostTypeIP || !host.IP().Is4() {
			return
		}
		to = netip.AddrPortFrom(host.IP(), endHostPort)
	}
	if _, err := d.out.WriteToUDPAddrPort(b, to); err != nil {
		fmt.Fprintf(d.log, "send SCMP to %s by %s: %v\n", ia, to, err)
	}
}

// endHostPort is where a router delivers what is not dispatched by port.
const endHostPort = 30041

// fetch asks for paths to ia in the background, once at a time.
func (d *pathDaemon) fetch(ctx context.Context, ia addr.IA, refresh bool) {
	if d.pending[ia] {
		return
	}
	d.pending[ia] = true
	go func() {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		sp, err := d.src.Paths(c, ia, d.cfg.IA, daemon.PathReqFlags{Refresh: refresh})
		var paths []Path
		if err == nil {
			sp, err = d.choose(ia, d.avoidDown(sp))
		}
		if err == nil {
			paths, err = toPaths(sp)
		}
		d.mu.Lock()
		if d.installed == nil {
			d.installed = map[addr.IA]installed{}
		}
		if err == nil {
			exp := time.Time{}
			for _, p := range sp {
				if e := p.Metadata().Expiry; exp.IsZero() || e.Before(exp) {
					exp = e
				}
			}
			d.installed[ia] = installed{at: time.Now(), expires: exp, paths: sp}
		}
		d.mu.Unlock()
		d.fetched <- fetchResult{ia: ia, paths: paths, err: err}
	}()
}

// avoidDown leaves out paths through interfaces reported down, unless
// that leaves none: then a path that may have recovered beats no path.
func (d *pathDaemon) avoidDown(paths []snet.Path) []snet.Path {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	var ok []snet.Path
next:
	for _, p := range paths {
		if md := p.Metadata(); md != nil {
			for _, i := range md.Interfaces {
				if until, isDown := d.down[ifKey{i.IA, uint64(i.ID)}]; isDown && now.Before(until) {
					continue next
				}
			}
		}
		ok = append(ok, p)
	}
	if len(ok) == 0 {
		return paths
	}
	return ok
}

// choose applies the destination's policy and keeps at most MaxPaths.
func (d *pathDaemon) choose(ia addr.IA, paths []snet.Path) ([]snet.Path, error) {
	dest, ok := d.cfg.Destinations[ia]
	if !ok {
		dest = Destination{Policy: d.cfg.Policy}
	}
	return ChoosePaths(paths, dest, d.cfg.MaxPaths)
}

// ChoosePaths orders paths by a policy and keeps the first max: shortest
// (fewest interfaces, then lowest latency), latency (lowest announced
// latency, unknown last), or sequence (those matching a hop-predicate
// sequence, then shortest). Expired paths never count.
func ChoosePaths(paths []snet.Path, dest Destination, max int) ([]snet.Path, error) {
	var live []snet.Path
	now := time.Now()
	for _, p := range paths {
		if md := p.Metadata(); md == nil || md.Expiry.After(now) {
			live = append(live, p)
		}
	}
	if dest.Policy == PolicySequence {
		seq, err := pathpol.NewSequence(dest.Sequence)
		if err != nil {
			return nil, err
		}
		live = seq.Eval(live)
	}
	hops := func(p snet.Path) int {
		if md := p.Metadata(); md != nil {
			return len(md.Interfaces)
		}
		return 1 << 20
	}
	latency := func(p snet.Path) time.Duration {
		var sum time.Duration
		md := p.Metadata()
		if md == nil || len(md.Latency) == 0 {
			return time.Hour
		}
		for _, l := range md.Latency {
			if l < 0 {
				return time.Hour
			}
			sum += l
		}
		return sum
	}
	sort.SliceStable(live, func(i, j int) bool {
		a, b := live[i], live[j]
		if dest.Policy == PolicyLatency && latency(a) != latency(b) {
			return latency(a) < latency(b)
		}
		if hops(a) != hops(b) {
			return hops(a) < hops(b)
		}
		return latency(a) < latency(b)
	})
	if len(live) == 0 {
		return nil, errors.New("no path fits the policy")
	}
	if len(live) > max {
		live = live[:max]
	}
	return live, nil
}

// toPaths converts scionproto's paths for the data plane.
func toPaths(sp []snet.Path) ([]Path, error) {
	var out []Path
	for _, p := range sp {
		dp, ok := p.Dataplane().(snetpath.SCION)
		if !ok {
			continue // an empty path: the local AS needs none
		}
		nh := p.UnderlayNextHop()
		if nh == nil {
			continue
		}
		a, ok := netip.AddrFromSlice(nh.IP)
		if !ok {
			continue
		}
		md := p.Metadata()
		path := Path{Raw: dp.Raw, NextHop: netip.AddrPortFrom(a.Unmap(), uint16(nh.Port))}
		if md != nil {
			path.MTU, path.Expiry = md.MTU, uint64(md.Expiry.Unix())
		}
		if len(path.Raw) > PathMax {
			continue
		}
		out = append(out, path)
	}
	if len(out) == 0 {
		return nil, errors.New("no path the translator can carry")
	}
	return out, nil
}

// install puts fetched paths into the map and sends again what waited for
// them; with none to be had, the waiting packets' senders hear so (ICMPv6
// destination unreachable, no route) rather than waiting out a timeout.
func (d *pathDaemon) install(r fetchResult) {
	d.pending[r.ia] = false
	if r.err != nil {
		fmt.Fprintf(d.log, "paths to %s: %v\n", r.ia, r.err)
		for _, h := range d.held[r.ia] {
			if h.icmp {
				continue // no error about an error
			}
			if err := d.inj.unreachable(h.data); err != nil {
				fmt.Fprintf(d.log, "tell the host %s is unreachable: %v\n", r.ia, err)
			}
		}
		delete(d.held, r.ia)
		return
	}
	if err := d.p.SetPaths(r.ia, r.paths); err != nil {
		fmt.Fprintf(d.log, "install paths to %s: %v\n", r.ia, err)
		return
	}
	fmt.Fprintf(d.log, "paths to %s: %d installed\n", r.ia, len(r.paths))
	for _, h := range d.held[r.ia] {
		if h.icmp {
			d.sendSCMP(r.ia, h.data, r.paths[0])
			continue
		}
		if err := d.inj.send(h.data); err != nil {
			fmt.Fprintf(d.log, "send a held packet to %s again: %v\n", r.ia, err)
		}
	}
	delete(d.held, r.ia)
}

// refresh asks again for what was fetched longer than every ago, or
// expires within it.
func (d *pathDaemon) refresh(ctx context.Context, every time.Duration) {
	d.mu.Lock()
	var due []addr.IA
	for ia, in := range d.installed {
		if time.Since(in.at) >= every || time.Until(in.expires) < every {
			due = append(due, ia)
		}
	}
	d.mu.Unlock()
	for _, ia := range due {
		d.fetch(ctx, ia, false)
	}
}

// scmp handles an SCMP error for the host. An interface down (external,
// or a router's internal connectivity) drops the paths through it and asks
// the daemon afresh; the host hears of it only if no path is left to the
// quoted packet's destination. Other errors go to the host as ICMPv6.
func (d *pathDaemon) scmp(ctx context.Context, ev Event) {
	tell := true
	if ev.SCMPType == scmpExternalInterfaceDown || ev.SCMPType == scmpInternalConnectivityDown {
		tell = d.interfaceDown(ctx, ev)
	}
	if !tell {
		return
	}
	pkt, err := scmpToICMPv6(ev.Data, ev.IA, ev.SrcHost, d.cfg.SMIP)
	if err != nil {
		fmt.Fprintf(d.log, "SCMP %d from %s as ICMPv6: %v\n", ev.SCMPType, ev.IA, err)
		return
	}
	if pkt != nil {
		if err := d.inj.toHost(pkt); err != nil {
			fmt.Fprintf(d.log, "SCMP %d from %s to the host: %v\n", ev.SCMPType, ev.IA, err)
		}
	}
}

// interfaceDown drops the paths through the interfaces an SCMP error names,
// and says whether a destination was left without one.
func (d *pathDaemon) interfaceDown(ctx context.Context, ev Event) (bereft bool) {
	m := ev.Data
	if len(m) < scmpQuoteAt(ev.SCMPType) {
		return false
	}
	ia := addr.IA(binary.BigEndian.Uint64(m[4:12]))
	ifids := []uint64{binary.BigEndian.Uint64(m[12:20])}
	if ev.SCMPType == scmpInternalConnectivityDown {
		ifids = append(ifids, binary.BigEndian.Uint64(m[20:28]))
	}
	d.mu.Lock()
	if d.down == nil {
		d.down = map[ifKey]time.Time{}
	}
	for _, id := range ifids {
		d.down[ifKey{ia, id}] = time.Now().Add(downFor)
	}
	var hit []addr.IA
	kept := map[addr.IA][]snet.Path{}
	for dst, in := range d.installed {
		var keep []snet.Path
		for _, p := range in.paths {
			if !traverses(p, ia, ifids) {
				keep = append(keep, p)
			}
		}
		if len(keep) != len(in.paths) {
			hit = append(hit, dst)
			kept[dst] = keep
			in.paths = keep
			d.installed[dst] = in
		}
	}
	d.mu.Unlock()
	for _, dst := range hit {
		fmt.Fprintf(d.log, "SCMP %d from %s: interface %v down; paths to %s through it dropped, %d left\n", ev.SCMPType, ia, ifids, dst, len(kept[dst]))
		paths, err := toPaths(kept[dst])
		if err != nil {
			paths = nil
			bereft = true
		}
		if err := d.p.SetPaths(dst, paths); err != nil {
			fmt.Fprintf(d.log, "paths to %s: %v\n", dst, err)
		}
		d.fetch(ctx, dst, true)
	}
	return bereft
}

func traverses(p snet.Path, ia addr.IA, ifids []uint64) bool {
	md := p.Metadata()
	if md == nil {
		return false
	}
	for _, i := range md.Interfaces {
		for _, id := range ifids {
			if i.IA == ia && uint64(i.ID) == id {
				return true
			}
		}
	}
	return false
}

// injector sends held packets again as the host would: out of the host's
// end of the pair, into tra_out.
type injector struct {
	fd       int
	ifindex  int // the host's end: what is sent there goes into tra_out
	trans    int // the translator's end: what is sent there reaches the host
	src, dst net.HardwareAddr
}

func newInjector(pair string) (*injector, error) {
	host, err := net.InterfaceByName(pair + "0")
	if err != nil {
		return nil, fmt.Errorf("the translator's device %s0: %w (is it attached in this namespace?)", pair, err)
	}
	trans, err := net.InterfaceByName(pair + "1")
	if err != nil {
		return nil, fmt.Errorf("the translator's device %s1: %w", pair, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	return &injector{fd: fd, ifindex: host.Index, trans: trans.Index, src: host.HardwareAddr, dst: trans.HardwareAddr}, nil
}

// send sends a packet the host sent as if it sent it again.
func (i *injector) send(ipv6 []byte) error { return i.sendOn(i.ifindex, i.src, i.dst, ipv6) }

// unreachable answers a packet the host sent with ICMPv6 destination
// unreachable, no route (RFC 4443 3.1), from its destination.
func (i *injector) unreachable(pkt []byte) error {
	if len(pkt) < 40 || pkt[0]>>4 != 6 {
		return errors.New("not an IPv6 packet")
	}
	src, dst := netip.AddrFrom16([16]byte(pkt[24:40])), netip.AddrFrom16([16]byte(pkt[8:24]))
	return i.toHost(icmpv6Packet(src, dst, icmp6DestinationUnreachable, 0, 0, pkt))
}

// toHost hands an IPv6 packet to the host, from the translator's end.
func (i *injector) toHost(pkt []byte) error { return i.sendOn(i.trans, i.dst, i.src, pkt) }

func (i *injector) sendOn(ifindex int, src, dst net.HardwareAddr, ipv6 []byte) error {
	f := make([]byte, 14+len(ipv6))
	copy(f, dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_IPV6)
	copy(f[14:], ipv6)
	return unix.Sendto(i.fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: htons(unix.ETH_P_IPV6), Halen: 6, Addr: [8]byte{dst[0], dst[1], dst[2], dst[3], dst[4], dst[5]}})
}

func (i *injector) Close() error { return unix.Close(i.fd) }
