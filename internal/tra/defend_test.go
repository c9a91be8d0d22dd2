package tra

import (
	"encoding/binary"
	"net/netip"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/snet"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// What an AS on a path, a machine of the host's AS and a user of the host
// can do to the daemon's choices: claims of interfaces down, answers to
// probes, packets that buy probes, new destinations that crowd out others'.

// probed is the destination and path signature of a probe the daemon sent
// (the probe carries the router alert; the path is the same).
func probed(t *testing.T, probe []byte) (addr.IA, string) {
	t.Helper()
	var sc slayers.SCION
	if err := sc.DecodeFromBytes(probe, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	raw, _ := quotedPath(&sc)
	return sc.DstIA, pathSignature(raw)
}

// answerProbes hands the daemon an answer to each probe it sent for which
// answer holds, made by mk.
func (td *testDaemon) answerProbes(t *testing.T, answer func(sig string) bool, mk func(t *testing.T, probe []byte) Event) int {
	t.Helper()
	n := 0
	for _, s := range td.sc.take() {
		_, sig := probed(t, s.b)
		if answer(sig) {
			td.onEvent(mk(t, s.b))
			n++
		}
	}
	return n
}

// An interface of another AS said down (any AS on the path can say so,
// none can be checked): nothing is dropped on the claim, the paths through
// it are probed at once, and only their silence drops them. A flood of
// claims probes no more often than the probes' interval.
func TestRemoteClaimIsProbed(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	p1, p2 := installTwo(t, td)
	sig1, sig2 := pathSignature(rawOf(p1)), pathSignature(rawOf(p2))
	x := td.dests[remoteIA]
	x.used = td.clock
	own := quoteOf(t, p1, hostIP4)
	for i := 0; i < 1000; i++ {
		td.onEvent(ifDown(coreIA, coreIA, 12, own))
	}
	if got := td.plane.paths(remoteIA); len(got) != 1 || pathSignature(got[0].Raw) != sig1 {
		t.Fatal("a claim of another AS dropped the path")
	}
	if n := len(td.sc.take()); n != 2 {
		t.Fatalf("%d probes for 1000 claims at once, want 2 (the path and its spare)", n)
	}
	if td.stats.get(statIfDownProbed) == 0 || td.stats.get(statIfDown) != 0 || len(td.down) != 0 {
		t.Fatalf("probed %d, believed %d, shunned %v", td.stats.get(statIfDownProbed), td.stats.get(statIfDown), td.down)
	}
	// The claim was true: the path stays silent, the spare answers.
	start := td.clock
	for pathSignature(td.plane.paths(remoteIA)[0].Raw) == sig1 {
		if td.clock.Sub(start) > 3*time.Second {
			t.Fatal("a silent path claimed down kept")
		}
		td.advance(td.lim.ProbeEvery)
		x.used = td.clock
		td.onEvent(ifDown(coreIA, coreIA, 12, own))
		td.probeTick(td.clock)
		td.answerProbes(t, func(sig string) bool { return sig == sig2 }, probeReply)
	}
	t.Logf("dropped %s after the claim", td.clock.Sub(start))
}

// Interfaces of this AS said down by their own router: believed, but a
// destination is never left without a path on claims alone. Alternating
// the AS's two uplinks left it with none, its packets held a second each.
func TestLastPathsKept(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	p1, p2 := installTwo(t, td)
	for i := 0; i < 20; i++ {
		for _, p := range []snet.Path{p1, p2} {
			td.onEvent(ifDown(localIA, localIA, uint64(p.Metadata().Interfaces[0].ID), quoteOf(t, p, hostIP4)))
			if len(td.plane.paths(remoteIA)) == 0 {
				t.Fatalf("no path left after %d claims", 2*i+1)
			}
		}
		td.advance(100 * time.Millisecond)
		td.tick()
		td.settle(t)
	}
	if len(td.host.toHst) != 0 {
		t.Fatal("the host was told its destination is unreachable")
	}
}

// Answers to probes must answer a probe of this daemon, come through a
// router, from the probed AS and interface: a router on the path (or a
// machine of the AS) that answers for the destination keeps no dead path
// alive.
func TestProbeRepliesChecked(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	p1, p2 := installTwo(t, td)
	sig1, sig2 := pathSignature(rawOf(p1)), pathSignature(rawOf(p2))
	x := td.dests[remoteIA]
	forgeries := []func(t *testing.T, probe []byte) Event{
		func(t *testing.T, probe []byte) Event { // from the core, on the path
			ev := probeReply(t, probe)
			binary.BigEndian.PutUint64(ev.Data[8:], uint64(coreIA))
			ev.IA = coreIA
			return ev
		},
		func(t *testing.T, probe []byte) Event { // another interface
			ev := probeReply(t, probe)
			binary.BigEndian.PutUint64(ev.Data[16:], 99)
			return ev
		},
		func(t *testing.T, probe []byte) Event { // a machine of the AS
			return withPath(probeReply(t, probe), 0, netip.MustParseAddrPort("10.101.0.77:30041"))
		},
		func(t *testing.T, probe []byte) Event { // a guess
			ev := probeReply(t, probe)
			ev.Data[6]++
			return ev
		},
	}
	start := td.clock
	i := 0
	for pathSignature(td.plane.paths(remoteIA)[0].Raw) == sig1 {
		if td.clock.Sub(start) > 3*time.Second {
			t.Fatal("forged answers kept a silent path")
		}
		td.advance(td.lim.ProbeEvery)
		x.used = td.clock
		td.probeTick(td.clock)
		for _, s := range td.sc.take() {
			_, sig := probed(t, s.b)
			if sig == sig2 {
				td.onEvent(probeReply(t, s.b))
			} else {
				td.onEvent(forgeries[i%len(forgeries)](t, s.b))
				i++
			}
		}
	}
	if td.stats.get(statProbeRefused) == 0 {
		t.Fatal("no forged answer counted")
	}
}

// A path with a round trip of 600 ms (a satellite) answers every probe,
// late: it is not taken for dead because a faster one answers sooner.
func TestSlowPathKept(t *testing.T) {
	td := newTestDaemon(t, 2, Limits{})
	exp := td.clock.Add(time.Hour)
	p1, p2 := testSCIONPath(t, remoteIA, viaLink1, 1, exp), testSCIONPath(t, remoteIA, viaLink2, 2, exp)
	td.src.paths[remoteIA] = []snet.Path{p1, p2}
	td.onHeld(heldUDP(t, remoteIA))
	td.settle(t)
	slow := pathSignature(rawOf(p2))
	x := td.dests[remoteIA]
	type late struct {
		at time.Time
		ev Event
	}
	var queue []late
	for i := 0; i < 100; i++ {
		td.advance(td.lim.ProbeEvery)
		x.used = td.clock
		td.probeTick(td.clock)
		for _, s := range td.sc.take() {
			_, sig := probed(t, s.b)
			delay := time.Duration(0)
			if sig == slow {
				delay = 600 * time.Millisecond
			}
			queue = append(queue, late{td.clock.Add(delay), probeReply(t, s.b)})
		}
		kept := queue[:0]
		for _, q := range queue {
			if !td.clock.Before(q.at) {
				td.onEvent(q.ev)
			} else {
				kept = append(kept, q)
			}
		}
		queue = kept
	}
	if got := td.plane.paths(remoteIA); len(got) != 2 || td.stats.get(statPathDead) != 0 {
		t.Fatalf("%d paths left, %d found dead: the slow path was taken for dead", len(got), td.stats.get(statPathDead))
	}
}

// A destination used now and then (a packet every 3 s, to ASes of the
// sender's choosing) gets one round of probes per second it was used in,
// not one every interval; destinations in steady use go first.
func TestProbesFollowUse(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{ProbedDests: 1})
	installTwo(t, td)
	sporadic := td.dests[remoteIA]
	steadyIA := addr.MustParseIA("1-64515")
	exp := td.clock.Add(time.Hour)
	td.src.paths[steadyIA] = []snet.Path{testSCIONPath(t, steadyIA, viaLink1, 5, exp)}
	td.onHeld(heldUDP(t, steadyIA))
	td.settle(t)
	steady := td.dests[steadyIA]
	td.sc.take()
	probesTo := map[addr.IA]int{}
	for i := 0; i < 60; i++ { // 9 s
		td.advance(td.lim.ProbeEvery)
		if i%20 == 0 {
			td.plane.MarkUsed(sporadic.slot, td.usedNow())
		}
		td.plane.MarkUsed(steady.slot, td.usedNow())
		if td.clock.Sub(td.lastHousekeep) >= time.Second {
			td.lastHousekeep = td.clock
			td.housekeep(td.clock)
		}
		td.probeTick(td.clock)
		for _, s := range td.sc.take() {
			ia, _ := probed(t, s.b)
			probesTo[ia]++
		}
	}
	// 3 packets, each bought at most a round of two probes (the path and
	// its spare) for each second it was seen used in.
	if n := probesTo[remoteIA]; n > 3*2*2 {
		t.Fatalf("%d probes for 3 packets to %s", n, remoteIA)
	}
	if n := probesTo[steadyIA]; n < 30 {
		t.Fatalf("%d probes for a destination in steady use over 9 s", n)
	}
	t.Logf("probes: sporadic %d, steady %d", probesTo[remoteIA], probesTo[steadyIA])
}

// One user of the host that sends to a great many new ASes takes half of
// the new destinations' budget; another's new destination still gets its
// lookup, and a destination used lately comes back on a budget of its own.
func TestFairShares(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{NewPerSecond: 10, Queued: 8, Lookups: 100})
	td.src.gate = make(chan struct{})
	scan := func(from, n int, uid uint32) {
		for i := from; i < from+n; i++ {
			ev := heldUDP(t, addr.MustParseIA("1-65000")+addr.IA(i))
			ev.UID = uid
			td.onHeld(ev)
		}
	}
	scan(0, 100, 1001)
	if n := td.src.calls + len(td.newQ); n > 5 {
		t.Fatalf("one user got %d of 10 lookups", n)
	}
	if td.stats.get(statOwnerLimited) == 0 {
		t.Fatal("the user's excess was not counted")
	}
	ev := heldUDP(t, remoteIA)
	ev.UID = 1002
	td.onHeld(ev)
	if td.dests[remoteIA] == nil {
		t.Fatal("another user's new destination was refused")
	}
	close(td.src.gate)
	td.src.gate = nil
	td.settle(t)

	// remoteIA got no path and is forgotten; a destination with paths
	// that went idle comes back while the budget is spent.
	td.advance(td.lim.NoPathFor + time.Second)
	td.housekeep(td.clock)
	installTwo(t, td)
	td.advance(td.lim.Idle + 2*time.Second)
	td.housekeep(td.clock)
	if td.dests[remoteIA] != nil {
		t.Fatal("the idle destination was not forgotten")
	}
	scan(200, 100, 1001)
	scan(300, 100, 1003)
	ev = heldUDP(t, remoteIA)
	ev.UID = 1001
	td.onHeld(ev)
	if td.dests[remoteIA] == nil {
		t.Fatal("a destination used lately did not come back while new ones spent the budget")
	}
}

// struct tra_event and struct tra_probe_reply as the daemon reads them by
// hand: each offset as the compiler laid the generated types out.
func TestEventLayout(t *testing.T) {
	var e translatorTraEvent
	var r translatorTraProbeReply
	for name, c := range map[string][2]uintptr{
		"kind": {evKind, unsafe.Offsetof(e.Kind)}, "len": {evLen, unsafe.Offsetof(e.Len)}, "ia": {evIA, unsafe.Offsetof(e.Ia)},
		"scmp_type": {evSCMPType, unsafe.Offsetof(e.ScmpType)}, "scmp_code": {evSCMPCode, unsafe.Offsetof(e.ScmpCode)},
		"src_host_len": {evSrcHostLen, unsafe.Offsetof(e.SrcHostLen)}, "path_type": {evPathType, unsafe.Offsetof(e.PathType)},
		"uid": {evUID, unsafe.Offsetof(e.Uid)}, "src_host": {evSrcHost, unsafe.Offsetof(e.SrcHost)},
		"from_addr": {evFromAddr, unsafe.Offsetof(e.FromAddr)}, "from_port": {evFromPort, unsafe.Offsetof(e.FromPort)},
		"data":     {evData, unsafe.Offsetof(e.Data)},
		"probe ia": {prIA, unsafe.Offsetof(r.Ia)}, "probe from_addr": {prFromAddr, unsafe.Offsetof(r.FromAddr)},
		"probe from_port": {prFromPort, unsafe.Offsetof(r.FromPort)}, "probe path_type": {prPathType, unsafe.Offsetof(r.PathType)},
		"probe len": {prLen, unsafe.Offsetof(r.Len)}, "probe msg": {prMsg, unsafe.Offsetof(r.Msg)},
	} {
		if c[0] != c[1] {
			t.Errorf("%s at %d, the type has it at %d", name, c[0], c[1])
		}
	}
	if n := reflect.TypeOf(r.Msg).Len(); n != 24 {
		t.Errorf("probe reply of %d bytes, want 24", n)
	}
}

// At the host's end of the pair a packet without a path is held, and goes
// on into the pair marked (a drop there fails the sender's send); at the
// other end the marked packet is dropped, not held a second time.
func TestHeldAtTheHostsEnd(t *testing.T) {
	tr := loadTest(t)
	rd, err := ringbuf.NewReader(tr.objs.TraHeld)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	in := ipv6Frame(t, hostSMIP, remote4SMIP, &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload("first packet of a flow"))
	run := func(prog *ebpf.Program, mark uint32) (uint32, uint32) {
		ctx := skbCtx(len(in))
		binary.NativeEndian.PutUint32(ctx[8:], mark) // __sk_buff.mark
		out := make([]byte, len(ctx))
		opts := ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+512), Context: ctx, ContextOut: out}
		ns, _ := testNetns.Load(tr)
		var ret uint32
		if err := netns.Run(ns.(string), func() error {
			var err error
			ret, err = prog.Run(&opts)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ret, binary.NativeEndian.Uint32(out[8:])
	}
	ret, mark := run(tr.objs.TraOutEgress, 0)
	if ret != 0 || mark != heldMark {
		t.Fatalf("at the host's end: action %d, mark %#x; want TC_ACT_OK, %#x", ret, mark, heldMark)
	}
	rd.SetDeadline(time.Now().Add(time.Second))
	if _, err := rd.Read(); err != nil {
		t.Fatalf("nothing held: %v", err)
	}
	if ret, _ := run(tr.objs.TraOut, heldMark); ret != tcActShot {
		t.Fatalf("at the far end: action %d, want TC_ACT_SHOT", ret)
	}
	rd.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := rd.Read(); err == nil {
		t.Fatal("held a second time at the far end")
	}
	// Its verdict, no_path; and to_pair, as it crosses the pair (what the
	// host sent, and what crossed the pair not counted to_pair, each have
	// one verdict: the soak's accounting).
	if c := tr.counts(t); c["no_path"].Packets != 1 || c["to_pair"].Packets != 1 {
		t.Fatalf("no_path %d, to_pair %d; want 1, 1", c["no_path"].Packets, c["to_pair"].Packets)
	}
}

// heldMark is TRA_HELD_MARK.
const heldMark = 0x74726168

// Past the bound of packets held for a destination, the oldest goes and its
// sender hears the destination is unreachable (the bounds dropped them
// without a word).
func TestHeldBoundsTellTheSender(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{HeldPerDest: 4, Held: 6})
	td.src.gate = make(chan struct{})
	defer func() { close(td.src.gate); td.src.gate = nil; td.settle(t) }()
	for i := 0; i < 10; i++ {
		td.onHeld(heldUDP(t, remoteIA))
	}
	if got := len(td.host.toHst); got != 6 || td.stats.get(statHeldDropped) != 6 {
		t.Fatalf("%d unreachable, %d dropped; want 6 and 6", got, td.stats.get(statHeldDropped))
	}
}
