package br

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/scionproto/scion/pkg/addr"
)

// The system clock may be stepped while the router runs (chrony's makestep
// at boot, a virtual machine restored, date -s): hop-field expiry must
// follow it, and nothing else may notice. The tests move the router's
// offset from the monotonic clock to Unix time by hand, as a step leaves
// it, rather than stepping the machine's clock.

// stepClock moves the router's offset from the monotonic clock to Unix
// time by d: the router then reads Unix time as d off.
func stepClock(t *testing.T, vars *ebpf.Map, d time.Duration) {
	t.Helper()
	off, err := getVar(vars, varClock)
	if err != nil {
		t.Fatal(err)
	}
	if err := setVar(vars, varClock, uint64(int64(off)+int64(d))); err != nil {
		t.Fatal(err)
	}
}

// A clock stepped backwards makes no link look silent: BFD's arrival times
// are on the monotonic clock (before, Unix time less a step underflowed
// and every link that carried BFD was link_down), and so are the next-hop
// cache's lifetimes and the tap's lease.
func TestClockStepLeavesLinksUp(t *testing.T) {
	routerCases() // fills the interface addresses
	transit := pktCase{
		path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{2, 1}, hopPair{31, 0})}, CurrHF: 1},
		src:  childIA, dst: farIA, in: arrival{ifid: 1},
	}
	bfd := pktCase{
		path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{2, 1}, hopPair{31, 0})}, CurrHF: 1},
		src:  parentIA, dst: localIA, in: arrival{ifid: 2},
		mutate: func(b []byte) { b[8] = 2; b[4] = 203 },
	}
	frame := func(c pktCase) []byte {
		p := c.packet()
		f, err := p.Frame()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, step := range []time.Duration{-time.Hour, time.Hour} {
		cfg := testConfig()
		cfg.LinkTimeout = time.Second
		r := loadTestRouter(t, cfg)
		if res := r.runOne(t, frame(bfd)); res.verdict != "bfd" {
			t.Fatalf("BFD: %s", res.verdict)
		}
		stepClock(t, r.objs.Vars, step)
		// The hop fields were made 10 minutes ago and live 6 hours: valid
		// an hour either way.
		if res := r.runOne(t, frame(transit)); res.verdict != "forwarded" {
			t.Fatalf("clock stepped by %s right after BFD: %s, want forwarded", step, res.verdict)
		}
	}
}

// A clock stepped after attach: the router judges hop-field expiry by the
// offset attach measured until the keeper measures it again, within a
// second, and logs the step; from then on it agrees with scionproto's
// router behind it, which reads the system clock itself. Before, the
// offset was measured at attach only, and a hop field the reference
// refuses as expired was forwarded in XDP for as long as the router ran.
func TestClockStepIsFollowed(t *testing.T) {
	b := newHostBed(t, false)
	ref, err := StartReferenceRouter(ReferenceVersion, b.dut, "br1", b.dir, netip.AddrPortFrom(b.d0Addr, 30042).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ref.Stop)
	name, _ := b.attach(t, XDPModeNative)
	p, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// Transit from A to B whose hop fields expired a minute ago: made
	// 337.5 s + 60 s ago with the shortest lifetime (ExpTime 0).
	expired := func(n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			s := seg2(false, 2, [2]uint16{0, 11}, [2]uint16{2, 1}, [2]uint16{21, 0})
			s.Timestamp = uint32(time.Now().Add(-(337*time.Second + 500*time.Millisecond + time.Minute)).Unix())
			for h := range s.Hops {
				s.Hops[h].ExpTime = 0
			}
			pkt := SCIONPacket{
				Path: PathSpec{Segments: []Segment{s}, CurrHF: 1}, Key: b.cfg.Keys[0],
				SrcIA: addr.MustParseIA("1-ff00:0:111"), DstIA: addr.MustParseIA("1-ff00:0:100"),
				SrcHost: addr.MustParseHost("198.51.100.1"), DstHost: addr.MustParseHost("203.0.113.1"),
				SrcPort: uint16(30000 + i), DstPort: 9, Payload: []byte("expired a minute ago"),
				SrcMAC: make(net.HardwareAddr, 6), DstMAC: make(net.HardwareAddr, 6),
				UnderlaySrc: netip.AddrPortFrom(b.aAddr, 50000), UnderlayDst: netip.AddrPortFrom(b.d0Addr, 50000),
			}
			f, err := pkt.Frame()
			if err != nil {
				t.Fatal(err)
			}
			out[i] = scionPayload(f)
		}
		return out
	}
	atB := listen(t, b.b, netip.AddrPortFrom(b.bAddr, 50000))
	const n = 5
	sendExpired := func() (arrived int, v map[string]uint64) {
		t.Helper()
		before := len(atB.await(0))
		send(t, b.a, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), expired(n))
		time.Sleep(200 * time.Millisecond)
		return len(atB.await(0)) - before, verdicts(t, name)
	}
	if got, v := sendExpired(); got != 0 || v["expired"] != n {
		t.Fatalf("expired hop fields: %d arrived at B, verdicts %v; want none, %d expired (the reference router refuses them)", got, v, n)
	}

	// The host's clock jumps forward by an hour (as if stepped): the
	// offset attach measured now puts the router an hour in the past.
	stepClock(t, p.Vars, -time.Hour)
	if got, v := sendExpired(); got != n || v["forwarded"] != n {
		t.Fatalf("with the offset of before the step: %d arrived, verdicts %v; want all %d forwarded in XDP (what a router that never measures again does)", got, v, n)
	}
	_, log := keep(t, b.cfg, name)
	waitFor(t, log, "step=1h0m0")
	if got, v := sendExpired(); got != 0 || v["expired"] != 2*n || v["forwarded"] != n {
		t.Fatalf("a second after the keeper measured again: %d arrived, verdicts %v; want none, %d expired in all", got, v, 2*n)
	}
	if !strings.Contains(log.String(), "hop-field expiry follows it") {
		t.Fatalf("keeper's log:\n%s", log)
	}
}
