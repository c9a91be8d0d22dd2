package tra

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/daemon"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/snet"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// The translator as an operator runs it: one daemon per translator, its
// service unit, what it takes from topology.json and when.

// syncLog is a log several goroutines write.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runInHost runs the daemon in the host's namespace, in this process, with
// a source of no paths; it ends with the test.
func (a *attachedHost) runInHost(t *testing.T, ctx context.Context, log *syncLog) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- netns.Run(a.host, func() error {
			return Run(ctx, a.cfg, RunOptions{Name: a.name, Log: log, Source: &fakeSource{paths: map[addr.IA][]snet.Path{}}})
		})
	}()
	return done
}

// Item 10: a second daemon on the same translator fails at once, naming
// the first one's PID; the first goes on.
func TestSecondDaemonRefused(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log1 syncLog
	first := a.runInHost(t, ctx, &log1)
	eventually(t, 5*time.Second, "the first daemon's first line", func() bool { return strings.Contains(log1.String(), "paths from") })

	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	var log2 syncLog
	select {
	case err := <-a.runInHost(t, ctx2, &log2):
		if !errors.Is(err, ErrAlreadyRunning) {
			t.Fatalf("the second daemon: %v, want ErrAlreadyRunning", err)
		}
		want := fmt.Sprintf("translator %s is already run by PID %d; stop it first (systemctl stop", a.name, os.Getpid())
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the second daemon: %q, want it to say %q", err, want)
		}
	case <-ctx2.Done():
		t.Fatalf("a second daemon runs the same translator beside the first:\n%s", log2.String())
	}
	select {
	case err := <-first:
		t.Fatalf("the first daemon ended when the second was refused: %v", err)
	case <-time.After(time.Second):
	}
	cancel()
	if err := <-first; err != nil {
		t.Fatalf("the first daemon: %v", err)
	}
	// Its lock is given up with it: a daemon started now runs.
	ctx3, cancel3 := context.WithCancel(context.Background())
	var log3 syncLog
	third := a.runInHost(t, ctx3, &log3)
	eventually(t, 5*time.Second, "a daemon after the first ended", func() bool { return strings.Contains(log3.String(), "paths from") })
	cancel3()
	if err := <-third; err != nil {
		t.Fatal(err)
	}
}

// flagSource records what each lookup asks of scionproto's daemon.
type flagSource struct {
	PathSource
	mu      sync.Mutex
	refresh []bool
}

func (s *flagSource) Paths(ctx context.Context, dst, src addr.IA, f daemon.PathReqFlags) ([]snet.Path, error) {
	s.mu.Lock()
	s.refresh = append(s.refresh, f.Refresh)
	s.mu.Unlock()
	return s.PathSource.Paths(ctx, dst, src, f)
}

func (s *flagSource) take() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.refresh
	s.refresh = nil
	return out
}

// Item 12: a periodic refresh takes scionproto's daemon's cache; only a
// lookup an error asks for (paths expired, wantFresh) makes it ask its
// control service again. Before, every refresh of a destination with paths
// asked with Refresh: a control-service fetch per destination in use a
// minute.
func TestRefreshTakesTheDaemonsCache(t *testing.T) {
	td := newTestDaemon(t, 1, Limits{})
	rec := &flagSource{PathSource: td.src}
	td.pathDaemon.src = rec
	exp := td.clock.Add(time.Hour)
	td.src.paths[remoteIA] = []snet.Path{testSCIONPath(t, remoteIA, viaLink1, 1, exp)}
	// Each housekeeping finds the destination in use.
	housekeep := func() {
		td.plane.MarkUsed(td.dests[remoteIA].slot, td.usedNow())
		td.housekeep(td.clock)
	}
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{"a new destination", func() { td.onHeld(heldUDP(t, remoteIA)) }, false},
		{"the periodic refresh", func() { td.advance(61 * time.Second); housekeep() }, false},
		{"another one", func() { td.advance(61 * time.Second); housekeep() }, false},
		{"the paths expired", func() {
			td.src.paths[remoteIA] = []snet.Path{testSCIONPath(t, remoteIA, viaLink2, 2, exp.Add(time.Hour))}
			td.clock = exp.Add(-500 * time.Millisecond)
			housekeep()
		}, true},
		{"the refresh after", func() { td.advance(61 * time.Second); housekeep() }, false},
		{"wantFresh (a failover)", func() { td.advance(2 * time.Second); td.wantFresh(td.dests[remoteIA]); td.dispatch() }, true},
		{"paths about to expire, the cache's", func() {
			td.src.paths[remoteIA] = []snet.Path{testSCIONPath(t, remoteIA, viaLink2, 2, td.clock.Add(90*time.Second))}
			td.advance(61 * time.Second)
			housekeep()
			td.settle(t)
			rec.take()
			td.advance(70 * time.Second) // 20 s left
			housekeep()
		}, true},
	}
	for _, s := range steps {
		s.do()
		td.settle(t)
		got := rec.take()
		if len(got) != 1 || got[0] != s.want {
			t.Fatalf("%s: lookups with Refresh %v, want one with %v", s.name, got, s.want)
		}
	}
}

// udpFrame is plain UDP/IPv4 to the host: Ethernet, IPv4, UDP, payload.
func udpFrame(t *testing.T, from netip.AddrPort, port uint16, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: from.Addr().AsSlice(), DstIP: hostIP4.AsSlice()}
	u := &layers.UDP{SrcPort: layers.UDPPort(from.Port()), DstPort: layers.UDPPort(port)}
	u.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, u, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// setDispatched sets a loaded translator's dispatched ports.
func (tr *Translator) setDispatched(t *testing.T, start, end uint16) {
	t.Helper()
	var c translatorTraConfig
	if err := tr.objs.TraConf.Lookup(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	c.DispatchedStart, c.DispatchedEnd = start, end
	if err := tr.objs.TraConf.Put(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
}

func (tr *Translator) total(t *testing.T) (n uint64) {
	t.Helper()
	for _, c := range tr.counts(t) {
		n += c.Packets
	}
	return n
}

// Item 9 (d): with dispatched_ports = "all" every UDP datagram to the host
// reaches tra_in; the host's ordinary UDP goes to the kernel untouched and
// uncounted (before, one whose first byte had a zero high nibble was
// counted not_ours, or parse_error when its bytes looked like this AS's
// SCION), while SCION is still taken, from whom it was before.
func TestWideDispatchedPassesOrdinaryUDP(t *testing.T) {
	tr := loadTest(t)
	tr.setDispatched(t, 1, 65535)
	// A DNS reply for example.org whose ID begins with a zero nibble, as
	// one in 16 do.
	dns := []byte{0x0a, 0xbc, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'o', 'r', 'g', 0, 0, 1, 0, 1,
		0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 93, 184, 215, 14}
	// An application's datagram whose first bytes read as a SCION header
	// to this AS from a machine that is no router, but whose lengths do not
	// fit it.
	lookalike := make([]byte, 64)
	lookalike[5], lookalike[7], lookalike[8] = 40, 200, 1
	binary.BigEndian.PutUint64(lookalike[12:], uint64(localIA))
	binary.BigEndian.PutUint32(lookalike[28:], binary.BigEndian.Uint32(hostIP4.AsSlice()))
	resolver := netip.MustParseAddrPort("10.101.0.53:53")
	for name, f := range map[string][]byte{
		"a DNS reply":                  udpFrame(t, resolver, 40000, dns),
		"a DNS reply from the router":  udpFrame(t, netip.AddrPortFrom(routerAddr.Addr(), 53), 40001, dns),
		"a DNS reply to 30041":         udpFrame(t, resolver, 30041, dns),
		"an NTP reply":                 udpFrame(t, netip.MustParseAddrPort("10.101.0.123:123"), 123, append([]byte{0x24, 2, 6, 0xe9}, make([]byte, 44)...)),
		"a QUIC short header":          udpFrame(t, netip.MustParseAddrPort("10.101.0.80:443"), 51000, append([]byte{0x41}, make([]byte, 40)...)),
		"an empty datagram":            udpFrame(t, resolver, 40002, nil),
		"SCION's shape, lengths amiss": udpFrame(t, netip.MustParseAddrPort("10.101.0.66:40000"), 31000, lookalike),
	} {
		t.Run(name, func(t *testing.T) {
			before := tr.total(t)
			ret, out := tr.run(t, tr.objs.TraIn, f, false)
			if ret != xdpPass || !bytes.Equal(out[:len(f)], f) {
				t.Fatalf("action %d (want %d, passed untouched); counters %v", ret, xdpPass, tr.counts(t))
			}
			if after := tr.total(t); after != before {
				t.Fatalf("counted: %d → %d packets; counters %v", before, after, tr.counts(t))
			}
		})
	}
	// SCION is taken as before: from a router, the empty path from the
	// host it names; a standard path from another machine is spoofed.
	udp := func() []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 45000}, gopacket.Payload("scion")}
	}
	local := netip.MustParseAddr("10.101.0.9")
	for name, c := range map[string]struct {
		f       inFrame
		action  uint32
		verdict string
	}{
		"from the router, to a dispatched port": {inFrame{from: routerAddr, port: 45000, srcIA: remoteIA, srcHost: remote4, l4: udp()}, xdpRedirect, "translated_in"},
		"the empty path from a host of the AS":  {inFrame{from: netip.AddrPortFrom(local, 30041), port: 30041, srcIA: localIA, srcHost: local, emptyRaw: true, l4: udp()}, xdpRedirect, "translated_in"},
		"a standard path from another machine":  {inFrame{from: netip.MustParseAddrPort("10.101.0.66:30042"), port: 45000, srcIA: remoteIA, srcHost: remote4, l4: udp()}, xdpDrop, "spoofed"},
	} {
		t.Run(name, func(t *testing.T) {
			before := tr.counts(t)[c.verdict].Packets
			if ret, _ := tr.run(t, tr.objs.TraIn, c.f.build(t), false); ret != c.action {
				t.Fatalf("action %d, want %d; counters %v", ret, c.action, tr.counts(t))
			}
			if got := tr.counts(t)[c.verdict].Packets; got != before+1 {
				t.Fatalf("%s %d, want %d", c.verdict, got, before+1)
			}
		})
	}
}

// unitCapabilities are the capabilities the translator's unit bounds its
// daemon to, as setpriv names them ("-all,+bpf,+net_admin,...").
func unitCapabilities(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/fastpath-tra@.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			set := "-all"
			for _, c := range strings.Fields(rest) {
				set += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
			}
			return set
		}
	}
	t.Fatal("the unit bounds no capabilities")
	return ""
}

// Item 11: `tra run` does all it does with no more capabilities than its
// unit leaves it (setpriv bounds them as systemd would): it attaches from
// inside the host's namespace, answers the host by its packet socket, puts
// the pair's offloads back and attaches again to a device made anew.
func TestDaemonRunsWithTheUnitsCapabilities(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv to bound the daemon's capabilities with")
	}
	caps := unitCapabilities(t)
	a := attachHost(t, "127.0.0.1:1")
	var log syncLog
	cmd := exec.Command(setpriv, "--bounding-set", caps, "--inh-caps", "-all", "--no-new-privs", "--", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envDaemon+"="+a.cfg.Path)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := netns.Run(a.host, cmd.Start); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("daemon (capabilities %s):\n%s", caps, log.String())
		}
	})
	eventually(t, 5*time.Second, "the daemon's first line", func() bool { return strings.Contains(log.String(), "paths from") })
	if l := log.String(); strings.Contains(l, "warning") || strings.Contains(l, "not permitted") {
		t.Fatalf("the daemon with the unit's capabilities:\n%s", l)
	}
	c := a.dialUDP(t, netip.AddrPortFrom(netip.MustParseAddr("fc00:10fc:500::ffff:a66:2"), 31000))
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_RECVERR, 1) })
	c.Write([]byte("to an AS without a path"))
	c.SetReadDeadline(time.Now().Add(8 * time.Second))
	if _, err := c.Read(make([]byte, 100)); !errorsIs(err, syscall.ENETUNREACH) {
		t.Fatalf("read: %v, want ENETUNREACH (ICMPv6 no route from the daemon's packet socket)", err)
	}
	setFeatures(t, a.host, a.cfg.Pair+"0", map[string]bool{"tx-checksum-ip-generic": true, "rx-gro": false})
	eventually(t, 5*time.Second, "offload_fixed counted", func() bool { return a.daemonCounts(t)["offload_fixed"] > 0 })
	ipIn(t, a.host, "link", "del", "eth0")
	a.link(t)
	eventually(t, 5*time.Second, "reattached counted", func() bool { return a.daemonCounts(t)["reattached"] > 0 })
	select {
	case err := <-exited:
		t.Fatalf("the daemon ended: %v", err)
	default:
	}
	if l := log.String(); strings.Contains(l, "not permitted") {
		t.Fatalf("the daemon with the unit's capabilities:\n%s", l)
	}
}
