package tra

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/daemon"
	"github.com/scionproto/scion/pkg/segment/iface"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path"
	"github.com/scionproto/scion/pkg/slayers/path/scion"
	"github.com/scionproto/scion/pkg/snet"
	snetpath "github.com/scionproto/scion/pkg/snet/path"
)

// The daemon's logic against fakes of what it reaches: the data plane, the
// host, SCION and scionproto's daemon. Each test drives it as its loop
// would, with a clock of its own.

type fakePlane struct {
	mu    sync.Mutex
	dests map[addr.IA]DestPaths
	used  []uint32
	sets  int
	stats []uint64
}

func newFakePlane() *fakePlane {
	return &fakePlane{dests: map[addr.IA]DestPaths{}, used: make([]uint32, MaxDests)}
}

func (f *fakePlane) SetPaths(ia addr.IA, slot uint32, paths []Path) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets++
	if len(paths) == 0 {
		delete(f.dests, ia)
		return nil
	}
	f.dests[ia] = DestPaths{Slot: slot, Paths: append([]Path(nil), paths...)}
	return nil
}

func (f *fakePlane) Dests() (map[addr.IA]DestPaths, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[addr.IA]DestPaths{}
	for k, v := range f.dests {
		out[k] = v
	}
	return out, nil
}

func (f *fakePlane) UsedAt() ([]uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint32(nil), f.used...), nil
}

func (f *fakePlane) MarkUsed(slot, at uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.used[slot%uint32(MaxDests)] = at
	return nil
}

func (f *fakePlane) StoreStats(v []uint64) error { f.stats = v; return nil }

func (f *fakePlane) paths(ia addr.IA) []Path {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dests[ia].Paths
}

type fakeHost struct {
	mu          sync.Mutex
	sent, toHst [][]byte
}

func (h *fakeHost) send(p []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent = append(h.sent, append([]byte(nil), p...))
	return nil
}

func (h *fakeHost) toHost(p []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.toHst = append(h.toHst, append([]byte(nil), p...))
	return nil
}

type sentSCION struct {
	b  []byte
	to netip.AddrPort
}

type fakeSCION struct {
	mu   sync.Mutex
	sent []sentSCION
}

func (s *fakeSCION) writeTo(b []byte, to netip.AddrPort) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, sentSCION{append([]byte(nil), b...), to})
	return nil
}

func (s *fakeSCION) take() []sentSCION {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sent
	s.sent = nil
	return out
}

// fakeSource answers lookups from a table; gate, when set, holds every
// lookup until it is closed.
type fakeSource struct {
	mu      sync.Mutex
	paths   map[addr.IA][]snet.Path
	calls   int
	running int
	most    int
	gate    chan struct{}
}

func (s *fakeSource) Paths(ctx context.Context, dst, _ addr.IA, _ daemon.PathReqFlags) ([]snet.Path, error) {
	s.mu.Lock()
	s.calls++
	s.running++
	s.most = max(s.most, s.running)
	gate := s.gate
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.running--; s.mu.Unlock() }()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.paths[dst]; ok {
		return p, nil
	}
	return nil, errors.New("no path")
}

type testDaemon struct {
	*pathDaemon
	plane *fakePlane
	host  *fakeHost
	sc    *fakeSCION
	src   *fakeSource
	clock time.Time
}

func newTestDaemon(t *testing.T, maxPaths int, lim Limits) *testDaemon {
	t.Helper()
	cfg := &Config{IA: localIA, Address: hostIP4, SMIP: hostSMIP, Policy: PolicyShortest, MaxPaths: maxPaths, Destinations: map[addr.IA]Destination{},
		Routers: map[string]netip.AddrPort{"br1": routerAddr}, IfOwners: map[uint64]string{1: "br1", 2: "br1"}}
	td := &testDaemon{plane: newFakePlane(), host: &fakeHost{}, sc: &fakeSCION{}, src: &fakeSource{paths: map[addr.IA][]snet.Path{}},
		clock: time.Unix(1_800_000_000, 0)}
	td.pathDaemon = newPathDaemon(cfg, td.plane, td.src, td.host, td.sc, logTo(testLog{t}), lim, time.Minute)
	td.now = func() time.Time { return td.clock }
	td.usedNow = func() uint32 { return uint32(td.clock.UnixNano() >> 30) }
	return td
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) { l.t.Logf("daemon: %s", b); return len(b), nil }

// logTo is a logger of every level that writes text to w.
func logTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// settle hands the loop the results of every lookup in flight.
func (td *testDaemon) settle(t *testing.T) {
	t.Helper()
	for td.inflight > 0 {
		select {
		case r := <-td.results:
			td.onResult(r)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d lookups never answered", td.inflight)
		}
	}
}

func (td *testDaemon) advance(d time.Duration) { td.clock = td.clock.Add(d) }

// testSCIONPath is a path to dst crossing the given interfaces (as pairs of
// AS and interface ID, in order), its hop fields made from them, with mac
// telling paths with the same interfaces apart.
func testSCIONPath(t *testing.T, dst addr.IA, hops []ifKey, mac byte, expiry time.Time) snet.Path {
	t.Helper()
	d := scion.Decoded{Base: scion.Base{PathMeta: scion.MetaHdr{SegLen: [3]uint8{uint8(len(hops)/2 + 1), 0, 0}}, NumINF: 1, NumHops: len(hops)/2 + 1},
		InfoFields: []path.InfoField{{ConsDir: true, SegID: 7, Timestamp: uint32(expiry.Unix() - 3600)}}}
	var meta []snet.PathInterface
	for _, h := range hops {
		meta = append(meta, snet.PathInterface{IA: h.ia, ID: iface.ID(h.ifid)})
	}
	// Egress of the first, ingress and egress pairs of the middle, ingress
	// of the last: as many hop fields as ASes.
	for i := 0; i < len(hops)/2+1; i++ {
		var in, eg uint16
		if i > 0 {
			in = uint16(hops[2*i-1].ifid)
		}
		if 2*i < len(hops) {
			eg = uint16(hops[2*i].ifid)
		}
		d.HopFields = append(d.HopFields, path.HopField{ExpTime: 63, ConsIngress: in, ConsEgress: eg, Mac: [6]byte{mac, byte(i), 1, 2, 3, 4}})
	}
	raw := make([]byte, d.Len())
	if err := d.SerializeTo(raw); err != nil {
		t.Fatal(err)
	}
	return snetpath.Path{Src: localIA, Dst: dst, DataplanePath: snetpath.SCION{Raw: raw},
		NextHop: &net.UDPAddr{IP: routerAddr.Addr().AsSlice(), Port: int(routerAddr.Port())},
		Meta:    snet.PathMetadata{Interfaces: meta, MTU: 1472, Expiry: expiry}}
}

// heldUDP is a held packet the host sent to a remote IPv4 host of dst.
func heldUDP(t *testing.T, dst addr.IA) Event {
	t.Helper()
	to, err := FromSCION(dst, remote4)
	if err != nil {
		t.Fatal(err)
	}
	f := ipv6Frame(t, hostSMIP, to, &layers.UDP{SrcPort: 40000, DstPort: 31000}, gopacket.Payload("held"))
	return Event{Kind: EventNoPath, IA: dst, Data: f[14:]}
}

// quoteOf is the SCION packet the host sent on p, as an SCMP error quotes it
// (on its way: SegID and the current hop changed).
func quoteOf(t *testing.T, p snet.Path, srcHost netip.Addr) []byte {
	t.Helper()
	var dec scion.Decoded
	if err := dec.DecodeFromBytes(rawOf(p)); err != nil {
		t.Fatal(err)
	}
	dec.InfoFields[0].SegID ^= 0x5555
	dec.PathMeta.CurrHF = 1
	s := &slayers.SCION{Version: 0, NextHdr: slayers.L4UDP, SrcIA: localIA, DstIA: p.Destination(), PathType: scion.PathType, Path: &dec}
	if err := s.SetSrcAddr(addr.HostIP(srcHost)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetDstAddr(addr.HostIP(remote4)); err != nil {
		t.Fatal(err)
	}
	u := &slayers.UDP{SrcPort: 40000, DstPort: 31000}
	u.SetNetworkLayerForChecksum(s)
	b := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, s, u, gopacket.Payload("payload")); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// ifDown is an SCMP external interface down from (ia, ifid) about quote, as
// the data plane hands it up (from says who sent it).
func ifDown(from addr.IA, ia addr.IA, ifid uint64, quote []byte) Event {
	m := make([]byte, 20, 20+len(quote))
	m[0] = scmpExternalInterfaceDown
	binary.BigEndian.PutUint64(m[4:], uint64(ia))
	binary.BigEndian.PutUint64(m[12:], ifid)
	return Event{Kind: EventSCMP, IA: from, SCMPType: scmpExternalInterfaceDown, SrcHost: netip.MustParseAddr("10.255.1.1"),
		PathType: scionPathType, From: routerAddr, Data: append(m, quote...)}
}

// Two paths from the local AS to remoteIA through the core 1-64512: over
// the local AS's interface 1 or 2.
var (
	coreIA   = addr.MustParseIA("1-64512")
	viaLink1 = []ifKey{{localIA, 1}, {coreIA, 11}, {coreIA, 12}, {remoteIA, 1}}
	viaLink2 = []ifKey{{localIA, 2}, {coreIA, 21}, {coreIA, 22}, {remoteIA, 2}}
)

// installTwo makes remoteIA's lookup answer both paths, holds a packet for
// it, and lets the daemon install them (max paths 1: one installed, one
// spare).
func installTwo(t *testing.T, td *testDaemon) (p1, p2 snet.Path) {
	t.Helper()
	exp := td.clock.Add(time.Hour)
	p1, p2 = testSCIONPath(t, remoteIA, viaLink1, 1, exp), testSCIONPath(t, remoteIA, viaLink2, 2, exp)
	td.src.paths[remoteIA] = []snet.Path{p1, p2}
	td.onHeld(heldUDP(t, remoteIA))
	td.settle(t)
	if got := td.plane.paths(remoteIA); len(got) != 1 || pathSignature(got[0].Raw) != pathSignature(rawOf(p1)) {
		t.Fatalf("installed %v, want the first path", got)
	}
	if len(td.host.sent) != 1 {
		t.Fatalf("%d held packets sent, want 1", len(td.host.sent))
	}
	return p1, p2
}

// Defect 1: an SCMP error quoting a packet with service addresses stops
// nothing (scionproto's addr.Host.IP panics for them).
func TestSCMPQuotingServiceAddresses(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	q := &slayers.SCION{Version: 0, NextHdr: slayers.L4UDP, SrcIA: localIA, DstIA: remoteIA, PathType: scion.PathType}
	var raw scion.Raw
	if err := raw.DecodeFromBytes(testPath(t)); err != nil {
		t.Fatal(err)
	}
	q.Path = &raw
	for name, hosts := range map[string][2]addr.Host{
		"service destination": {addr.HostIP(hostIP4), addr.HostSVC(addr.SvcCS)},
		"service source":      {addr.HostSVC(addr.SvcDS), addr.HostIP(remote4)},
		"both":                {addr.HostSVC(addr.SvcCS), addr.HostSVC(addr.SvcWildcard)},
	} {
		t.Run(name, func(t *testing.T) {
			q.SetSrcAddr(hosts[0])
			q.SetDstAddr(hosts[1])
			b := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true}, q, gopacket.Payload(make([]byte, 16))); err != nil {
				t.Fatal(err)
			}
			msg := append([]byte{scmpDestinationUnreachable, 0, 0, 0, 0, 0, 0, 0}, b.Bytes()...)
			if _, err := scmpToICMPv6(msg, remoteIA, netip.MustParseAddr("10.255.1.1"), hostSMIP); err == nil {
				t.Fatal("translated a quote of service addresses")
			}
			// As the daemon's loop takes it, unprotected.
			td.onEvent(Event{Kind: EventSCMP, IA: remoteIA, SCMPType: scmpDestinationUnreachable, SrcHost: netip.MustParseAddr("10.255.1.1"), Data: msg})
		})
	}
	if td.stats.get(statPanics) != 0 {
		t.Fatal("panics counted")
	}
}

// Defect 3: interface down is believed only about a path of the daemon's
// own, carrying a packet of the host's, from the AS of the interface.
func TestInterfaceDownChecked(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	p1, p2 := installTwo(t, td)
	own := quoteOf(t, p1, hostIP4)
	stranger := testSCIONPath(t, remoteIA, viaLink1, 9, td.clock.Add(time.Hour))
	for name, ev := range map[string]Event{
		"about another host's packet":     ifDown(coreIA, coreIA, 12, quoteOf(t, p1, netip.MustParseAddr("10.101.0.66"))),
		"about a path not installed":      ifDown(coreIA, coreIA, 12, quoteOf(t, stranger, hostIP4)),
		"an interface not on the path":    ifDown(coreIA, coreIA, 22, own),
		"sent by another AS":              ifDown(remoteIA, coreIA, 12, own),
		"a truncated quote":               ifDown(coreIA, coreIA, 12, own[:30]),
		"from a machine of the AS":        withPath(ifDown(localIA, localIA, 1, own), 0, netip.MustParseAddrPort("10.101.0.77:30041")),
		"from another router":             withPath(ifDown(localIA, localIA, 1, own), scionPathType, netip.MustParseAddrPort("10.101.0.9:30042")),
		"a local interface no router has": ifDown(localIA, localIA, 7, quoteOf(t, testSCIONPath(t, remoteIA, []ifKey{{localIA, 7}}, 1, td.clock.Add(time.Hour)), hostIP4)),
	} {
		t.Run(name, func(t *testing.T) {
			ignored := td.stats.get(statSCMPIgnored) + td.stats.get(statBadEvent)
			td.onEvent(ev)
			if got := td.plane.paths(remoteIA); len(got) != 1 || pathSignature(got[0].Raw) != pathSignature(rawOf(p1)) {
				t.Fatal("the path was dropped")
			}
			if td.stats.get(statSCMPIgnored)+td.stats.get(statBadEvent) != ignored+1 || len(td.down) != 0 {
				t.Fatalf("not ignored: down %v", td.down)
			}
		})
	}
	// The real thing, from the router of the interface: the spare takes
	// over at once, a lookup is asked for, the host hears nothing (a path
	// is left).
	before := td.src.calls
	for i := 0; i < 1000; i++ {
		td.onEvent(ifDown(localIA, localIA, 1, own))
	}
	if got := td.plane.paths(remoteIA); len(got) != 1 || pathSignature(got[0].Raw) != pathSignature(rawOf(p2)) {
		t.Fatal("the spare did not take over")
	}
	// At most one lookup a second for a destination.
	td.settle(t)
	td.advance(time.Second)
	td.tick()
	td.settle(t)
	if n := td.src.calls - before; n != 1 {
		t.Fatalf("%d lookups for 1000 interface-down messages, want 1", n)
	}
	if len(td.host.toHst) != 0 {
		t.Fatal("the host heard of an interface down with a path left")
	}
	if got := td.plane.paths(remoteIA); len(got) != 1 || pathSignature(got[0].Raw) != pathSignature(rawOf(p2)) {
		t.Fatal("the lookup put the path through the dead interface back")
	}
	// Shunned for a while, then forgotten.
	if len(td.down) != 1 {
		t.Fatalf("down %v", td.down)
	}
	td.advance(td.lim.ShunFor + time.Second)
	td.housekeep(td.clock)
	if len(td.down) != 0 {
		t.Fatalf("down %v after %s", td.down, td.lim.ShunFor)
	}
	// The table of shunned interfaces is bounded.
	for i := 0; i < 3*td.lim.Shunned; i++ {
		td.shun(ifKey{coreIA, uint64(1000 + i)}, td.clock.Add(time.Minute))
	}
	if len(td.down) > td.lim.Shunned {
		t.Fatalf("%d interfaces shunned, bound %d", len(td.down), td.lim.Shunned)
	}
}

// Defect 7: a lookup that was on its way when an interface went down does
// not put the paths through it back.
func TestRefreshAfterInterfaceDown(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	p1, p2 := installTwo(t, td)
	td.src.gate = make(chan struct{})
	x := td.dests[remoteIA]
	x.next = time.Time{}
	td.want(x, true)
	td.dispatch()
	td.onEvent(ifDown(localIA, localIA, 1, quoteOf(t, p1, hostIP4)))
	close(td.src.gate)
	td.settle(t)
	if got := td.plane.paths(remoteIA); len(got) != 1 || pathSignature(got[0].Raw) != pathSignature(rawOf(p2)) {
		t.Fatal("the refresh installed the path through the interface reported down")
	}
}

// Defect 9: every table is bounded, and an idle destination is forgotten.
func TestStateIsBounded(t *testing.T) {
	lim := Limits{HeldPerDest: 4, Held: 10, Lookups: 2, Queued: 3, Dests: 6}
	td := newTestDaemon(t, 1, lim)
	td.src.gate = make(chan struct{})
	// Held packets per destination and in all.
	for i := 0; i < 10; i++ {
		td.onHeld(heldUDP(t, remoteIA))
	}
	if n := len(td.dests[remoteIA].held); n != 4 {
		t.Fatalf("%d packets held for one destination, bound 4", n)
	}
	// Destinations: lookups in flight, then queued, then refused with an
	// ICMPv6 unreachable each.
	for i := 0; i < 20; i++ {
		ev := heldUDP(t, addr.MustParseIA("1-65000")+addr.IA(i))
		ev.UID = uint32(1000 + i) // users of their own: no share stops them first
		td.onHeld(ev)
	}
	if td.inflight != 2 || len(td.newQ) != 3 || len(td.dests) > lim.Dests {
		t.Fatalf("%d lookups in flight, %d queued, %d destinations", td.inflight, len(td.newQ), len(td.dests))
	}
	if td.heldNow > lim.Held {
		t.Fatalf("%d packets held, bound %d", td.heldNow, lim.Held)
	}
	if len(td.host.toHst) == 0 || td.stats.get(statLookupRefused) == 0 {
		t.Fatal("refused destinations were not answered")
	}
	close(td.src.gate)
	td.src.gate = nil
	td.settle(t)
	if td.src.most > lim.Lookups {
		t.Fatalf("%d lookups at once, bound %d", td.src.most, lim.Lookups)
	}
	// None of them had a path: all forgotten, remembered as without one.
	if len(td.dests) != 0 || td.heldNow != 0 {
		t.Fatalf("%d destinations, %d packets held after every lookup failed", len(td.dests), td.heldNow)
	}
	calls := td.src.calls
	td.onHeld(heldUDP(t, remoteIA))
	if td.src.calls != calls || td.inflight != 0 {
		t.Fatal("a destination just found without a path was looked up again at once")
	}
	// An installed destination that goes idle is forgotten, its paths
	// removed from the data plane and its slot freed.
	td.advance(td.lim.NoPathFor + time.Second)
	td.housekeep(td.clock)
	installTwo(t, td)
	free := len(td.free)
	td.advance(td.lim.Idle + 2*time.Second)
	td.housekeep(td.clock)
	if len(td.dests) != 0 || len(td.plane.paths(remoteIA)) != 0 || len(td.free) != free+1 {
		t.Fatalf("an idle destination kept: %d destinations, paths %v", len(td.dests), td.plane.paths(remoteIA))
	}
}

// Defect 11: paths leave the data plane at their expiry, even when a
// refresh failed; paths about to expire are not chosen over others.
func TestPathsExpire(t *testing.T) {
	td := newTestDaemon(t, 2, Limits{})
	soon := testSCIONPath(t, remoteIA, viaLink1, 1, td.clock.Add(10*time.Second))
	later := testSCIONPath(t, remoteIA, viaLink2, 2, td.clock.Add(20*time.Minute))
	td.src.paths[remoteIA] = []snet.Path{soon, later}
	td.onHeld(heldUDP(t, remoteIA))
	td.settle(t)
	if got := td.plane.paths(remoteIA); len(got) != 1 || pathSignature(got[0].Raw) != pathSignature(rawOf(later)) {
		t.Fatalf("installed %d paths, want only the one that lives on", len(got))
	}
	// Only paths about to expire: they are taken, and removed at expiry
	// though the refresh fails.
	td.src.paths[remoteIA] = []snet.Path{testSCIONPath(t, remoteIA, viaLink1, 3, td.clock.Add(5*time.Second))}
	td.forget(td.dests[remoteIA])
	td.onHeld(heldUDP(t, remoteIA))
	td.settle(t)
	if len(td.plane.paths(remoteIA)) != 1 {
		t.Fatal("no path installed")
	}
	delete(td.src.paths, remoteIA)
	td.advance(4500 * time.Millisecond)
	td.housekeep(td.clock)
	td.settle(t)
	if got := td.plane.paths(remoteIA); len(got) != 0 {
		t.Fatalf("%d paths left in the data plane at their expiry", len(got))
	}
	if td.stats.get(statExpired) == 0 {
		t.Fatal("expiry not counted")
	}
}

// Defect 10: scionproto's daemon down costs lookups a short deadline, never
// the translator's loop.
func TestDaemonDownAtStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	at := l.Addr().String()
	l.Close() // nothing listens there now
	src := &lazySource{addr: at, timeout: time.Second}
	start := time.Now()
	_, err = src.Paths(context.Background(), remoteIA, localIA, daemon.PathReqFlags{})
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("lookup against a dead daemon: %v after %s", err, time.Since(start))
	}
	td := newTestDaemon(t, 1, Limits{})
	td.src = nil
	td.pathDaemon.src = src
	td.onHeld(heldUDP(t, remoteIA))
	td.settle(t)
	if len(td.host.toHst) != 1 {
		t.Fatalf("%d messages to the host, want one ICMPv6 unreachable", len(td.host.toHst))
	}
	if m := td.host.toHst[0]; m[40] != icmp6DestinationUnreachable {
		t.Fatalf("ICMPv6 type %d", m[40])
	}
}

// A daemon started again adopts the paths in the data plane: nothing is
// removed or rewritten, and destinations in use are refreshed.
func TestAdoptsInstalledPaths(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	p1, _ := installTwo(t, td)
	td.plane.MarkUsed(td.dests[remoteIA].slot, td.usedNow())
	sets := td.plane.sets

	again := newTestDaemon(t, 1, Limits{})
	again.plane, again.pathDaemon.dp = td.plane, td.plane
	again.clock = td.clock
	if err := again.adopt(); err != nil {
		t.Fatal(err)
	}
	x := again.dests[remoteIA]
	if x == nil || len(x.dp) != 1 || pathSignature(x.dp[0].Raw) != pathSignature(rawOf(p1)) || td.plane.sets != sets {
		t.Fatalf("adopted %+v; the data plane was written %d times", x, td.plane.sets-sets)
	}
	again.src.paths[remoteIA] = td.src.paths[remoteIA]
	again.housekeep(again.clock)
	if again.inflight != 1 {
		t.Fatal("an adopted destination in use is not refreshed")
	}
	again.settle(t)
	if len(again.dests[remoteIA].paths) != 1 {
		t.Fatal("the refresh did not bring metadata")
	}
}

// withPath is ev as handed over with another path type by another sender.
func withPath(ev Event, pathType uint8, from netip.AddrPort) Event {
	ev.PathType, ev.From = pathType, from
	return ev
}

// probeReply answers a probe packet as the destination's ingress router
// does.
func probeReply(t *testing.T, probe []byte) Event {
	t.Helper()
	var s slayers.SCION
	if err := s.DecodeFromBytes(probe, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	pl := s.Payload
	if pl[0] != byte(slayers.SCMPTypeTracerouteRequest) {
		t.Fatalf("probe of SCMP type %d", pl[0])
	}
	raw, _ := quotedPath(&s)
	var dec scion.Decoded
	if err := dec.DecodeFromBytes(raw); err != nil {
		t.Fatal(err)
	}
	last := dec.HopFields[len(dec.HopFields)-1]
	ifid := last.ConsEgress
	if last.IngressRouterAlert {
		ifid = last.ConsIngress
	}
	m := make([]byte, 24)
	m[0] = byte(slayers.SCMPTypeTracerouteReply)
	copy(m[4:8], pl[4:8])
	binary.BigEndian.PutUint64(m[8:], uint64(s.DstIA))
	binary.BigEndian.PutUint64(m[16:], uint64(ifid))
	return Event{Kind: EventProbe, IA: s.DstIA, SCMPType: m[0], PathType: scionPathType, From: routerAddr, Data: m}
}

// Failover without SCMP: the installed path's probes go unanswered while a
// spare's are answered; the spare takes over within a second. When no path
// answers at all, nothing moves.
func TestProbesFailOver(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	p1, p2 := installTwo(t, td)
	x := td.dests[remoteIA]
	x.used = td.clock
	sig1, sig2 := pathSignature(rawOf(p1)), pathSignature(rawOf(p2))
	step := func(answer func(sig string) bool) {
		td.advance(td.lim.ProbeEvery)
		x.used = td.clock
		td.probeTick(td.clock)
		for _, s := range td.sc.take() {
			if _, sig := probed(t, s.b); answer(sig) {
				td.onEvent(probeReply(t, s.b))
			}
		}
	}
	// Both answer: nothing moves.
	for i := 0; i < 10; i++ {
		step(func(string) bool { return true })
	}
	if td.stats.get(statProbes) == 0 || td.stats.get(statProbeReplies) == 0 {
		t.Fatal("no probes sent or answered")
	}
	// Only the spare answers: it takes over within a second.
	start := td.clock
	for pathSignature(td.plane.paths(remoteIA)[0].Raw) == sig1 {
		if td.clock.Sub(start) > time.Second {
			t.Fatal("no failover within a second of the loss")
		}
		step(func(sig string) bool { return sig == sig2 })
	}
	t.Logf("failover %s after the loss", td.clock.Sub(start))
	if td.stats.get(statPathDead) != 1 {
		t.Fatalf("path_dead %d", td.stats.get(statPathDead))
	}
	// Nothing answers (trouble near the host): nothing moves.
	for i := 0; i < 20; i++ {
		step(func(string) bool { return false })
	}
	if got := td.plane.paths(remoteIA); pathSignature(got[0].Raw) != sig2 || td.stats.get(statPathDead) != 1 {
		t.Fatal("failed over while no path answered")
	}
}

// Packets held while the host's checksums were pending leave complete.
func TestHeldPacketsCompleted(t *testing.T) {
	in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 40000, DstPort: 31000}, gopacket.Payload("pending"))[14:]
	want := append([]byte(nil), in...)
	binary.BigEndian.PutUint16(in[46:], 0x1234) // the pseudo-header's sum, say
	if got := completeL4Checksum(in); string(got) != string(want) {
		t.Fatalf("checksum %#x, want %#x", binary.BigEndian.Uint16(got[46:]), binary.BigEndian.Uint16(want[46:]))
	}
}

// A host that sends to a great many ASes at once gets as many lookups a
// second as the limit says; the rest of the new destinations are answered
// unreachable at once.
func TestNewDestinationRate(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{NewPerSecond: 10, Queued: 1000, Lookups: 1000})
	for i := 0; i < 50; i++ {
		ev := heldUDP(t, addr.MustParseIA("1-65000")+addr.IA(i))
		ev.UID = uint32(1000 + i%2) // two users, each within its half
		td.onHeld(ev)
	}
	td.settle(t)
	if td.src.calls != 10 || td.stats.get(statLookupRefused) != 40 || len(td.host.toHst) != 50 {
		t.Fatalf("%d lookups, %d refused, %d unreachable: want 10, 40, 50 (the 10 found no path either)", td.src.calls, td.stats.get(statLookupRefused), len(td.host.toHst))
	}
	td.advance(time.Second)
	for i := 50; i < 100; i++ {
		ev := heldUDP(t, addr.MustParseIA("1-65000")+addr.IA(i))
		ev.UID = uint32(1000 + i%2)
		td.onHeld(ev)
	}
	td.settle(t)
	if td.src.calls != 20 {
		t.Fatalf("%d lookups after another second, want 20", td.src.calls)
	}
}

// Every path condemned (both of the host's links reported down) and the
// host sending on: its packets wait for the next lookup, a second later, not
// one lookup per packet (a router's errors and the host's packets kept the
// daemon looking up every few milliseconds).
func TestNoLookupStorm(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	p1, p2 := installTwo(t, td)
	before := td.src.calls
	td.onEvent(ifDown(localIA, localIA, 1, quoteOf(t, p1, hostIP4)))
	td.onEvent(ifDown(localIA, localIA, 2, quoteOf(t, p2, hostIP4)))
	for i := 0; i < 100; i++ {
		td.onHeld(heldUDP(t, remoteIA))
		td.settle(t)
		if d := td.dests[remoteIA]; d != nil && len(d.dp) > 0 {
			td.onEvent(ifDown(localIA, localIA, 1, quoteOf(t, p1, hostIP4)))
			td.onEvent(ifDown(localIA, localIA, 2, quoteOf(t, p2, hostIP4)))
		}
		td.advance(5 * time.Millisecond)
		td.tick()
	}
	if n := td.src.calls - before; n > 1 {
		t.Fatalf("%d lookups in half a second", n)
	}
}

// Each installed path carries its first hop's gateway as the host's routes
// say, and is installed again when a route changes.
func TestPathsCarryTheirGateway(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	gw := netip.MustParseAddr("10.101.0.254")
	td.gateway = func(nh netip.Addr, _ time.Time) netip.Addr { return gw }
	installTwo(t, td)
	if got := td.plane.paths(remoteIA)[0].Gateway; got != gw {
		t.Fatalf("gateway %s, want %s", got, gw)
	}
	gw = netip.MustParseAddr("10.101.0.253")
	td.housekeep(td.clock)
	if got := td.plane.paths(remoteIA)[0].Gateway; got != gw {
		t.Fatalf("gateway %s after the route changed, want %s", got, gw)
	}
}
