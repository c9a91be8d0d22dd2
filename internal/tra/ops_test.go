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
	"slices"
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
			return Run(ctx, a.cfg, RunOptions{Name: a.name, Log: logTo(log), Source: &fakeSource{paths: map[addr.IA][]snet.Path{}}})
		})
	}()
	return done
}

// startDaemon starts `tra run` for the host as a child in its namespace,
// as runDaemonIn does, with a log that may be read while it runs; wrap is a
// command the daemon runs under (setpriv ...). It is stopped when the test
// ends.
func (a *attachedHost) startDaemon(t *testing.T, wrap ...string) (*exec.Cmd, *syncLog, <-chan error) {
	t.Helper()
	var log syncLog
	args := append(append([]string(nil), wrap...), os.Args[0], "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
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
			t.Logf("daemon:\n%s", log.String())
		}
	})
	return cmd, &log, exited
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
func udpFrame(t testing.TB, from netip.AddrPort, port uint16, payload []byte) []byte {
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

// setRoutersToPort tells a loaded translator whether the AS's routers
// deliver to the packet's own port (scionproto v0.14.0 on).
func (tr *Translator) setRoutersToPort(t testing.TB, on bool) {
	t.Helper()
	var c translatorTraConfig
	if err := tr.objs.TraConf.Lookup(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	c.RoutersToPort = 0
	if on {
		c.RoutersToPort = 1
	}
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
	passedUntouched(t, tr, map[string][]byte{
		"a DNS reply":                  udpFrame(t, resolver, 40000, dns),
		"a DNS reply from the router":  udpFrame(t, netip.AddrPortFrom(routerAddr.Addr(), 53), 40001, dns),
		"a DNS reply to 30041":         udpFrame(t, resolver, 30041, dns),
		"an NTP reply":                 udpFrame(t, netip.MustParseAddrPort("10.101.0.123:123"), 123, append([]byte{0x24, 2, 6, 0xe9}, make([]byte, 44)...)),
		"a QUIC short header":          udpFrame(t, netip.MustParseAddrPort("10.101.0.80:443"), 51000, append([]byte{0x41}, make([]byte, 40)...)),
		"an empty datagram":            udpFrame(t, resolver, 40002, nil),
		"SCION's shape, lengths amiss": udpFrame(t, netip.MustParseAddrPort("10.101.0.66:40000"), 31000, lookalike),
	})
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
// daemon to, as setpriv names them ("-all,+bpf,+net_admin,..."): the
// unit's own and, since the tests run the daemon for a host in a
// namespace, those the unit's drop-in for --netns adds.
func unitCapabilities(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/systemd/fastpath-tra@.service")
	if err != nil {
		t.Fatal(err)
	}
	set := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimPrefix(line, "#   ") // the drop-in in the comments
		if rest, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			for _, c := range strings.Fields(rest) {
				set += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
			}
		}
	}
	if set == "" {
		t.Fatal("the unit bounds no capabilities")
	}
	return "-all" + set
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
	_, log, exited := a.startDaemon(t, setpriv, "--bounding-set", caps, "--inh-caps", "-all", "--no-new-privs", "--")
	eventually(t, 5*time.Second, "the daemon's first line", func() bool { return strings.Contains(log.String(), "paths from") })
	if l := log.String(); strings.Contains(l, "level=WARN") || strings.Contains(l, "not permitted") {
		t.Fatalf("the daemon with the unit's capabilities:\n%s", l)
	}
	if err := a.sendToNoPath(t, "to an AS without a path"); !errorsIs(err, syscall.ENETUNREACH) {
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

// fakeDNS answers the routers' names from a table; a name it lacks does
// not resolve. It stands for the resolver until the test ends.
type fakeDNS struct {
	mu    sync.Mutex
	hosts map[string]netip.Addr
	asked int
}

func useFakeDNS(t *testing.T, hosts map[string]netip.Addr) *fakeDNS {
	f := &fakeDNS{hosts: hosts}
	old := lookupHost
	lookupHost = func(_ context.Context, host string) ([]netip.Addr, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.asked++
		if a, ok := f.hosts[host]; ok {
			return []netip.Addr{a}, nil
		}
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	}
	t.Cleanup(func() { lookupHost = old })
	return f
}

func (f *fakeDNS) set(host string, a netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a.IsValid() {
		f.hosts[host] = a
	} else {
		delete(f.hosts, host)
	}
}

// routersJSON is a topology.json of AS 1-64513 with these routers' internal
// addresses (by name) and dispatched ports.
func routersJSON(ports string, routers map[string]string) string {
	var brs []string
	i := 0
	for name, at := range routers {
		i++
		brs = append(brs, fmt.Sprintf(`%q: {"internal_addr": %q, "interfaces": {"%d": {"underlay": {"local": "10.255.%d.2:50000", "remote": "10.255.%d.1:50000"}, "isd_as": "1-64512", "link_to": "parent", "mtu": 1472}}}`,
			name, at, i, i%250, i%250))
	}
	return `{"isd_as": "1-64513", "mtu": 1472, "dispatched_ports": "` + ports + `", "attributes": [],
  "border_routers": {` + strings.Join(brs, ",\n") + `},
  "control_service": {"cs1": {"addr": "cs1.as.test:31000"}}}`
}

// Item 9 (a, b): topology.json's names are not resolved once for all: a
// name that does not resolve at start is named and waited for (before, the
// file was refused, and tra run stopped); IPv6 internal addresses are
// skipped and named, and take none of the translator's 64 routers (before,
// 64 IPv4 routers and one IPv6 one were refused).
func TestTopologyRouters(t *testing.T) {
	dns := useFakeDNS(t, map[string]netip.Addr{})
	base := "topology = \"topology.json\"\ndaemon = \"127.0.0.1:30255\"\ndevice = \"eth0\"\naddress = \"10.101.0.2\"\n"
	load := func(t *testing.T, topo string) (*Config, error) {
		dir := t.TempDir()
		if err := os.WriteFile(dir+"/topology.json", []byte(topo), 0o600); err != nil {
			t.Fatal(err)
		}
		return LoadConfig(writeConfig(t, dir, base))
	}
	many := func(n4, n6 int) map[string]string {
		r := map[string]string{}
		for i := range n4 {
			r[fmt.Sprintf("br4-%d", i)] = fmt.Sprintf("10.101.1.%d:30042", i+1)
		}
		for i := range n6 {
			r[fmt.Sprintf("br6-%d", i)] = fmt.Sprintf("[fd00::%x]:30042", i+1)
		}
		return r
	}
	t.Run("a name that does not resolve", func(t *testing.T) {
		cfg, err := load(t, routersJSON("31000-32767", map[string]string{"br1": "br1.as.test:30042", "br2": "10.101.0.1:30042"}))
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		if _, ok := cfg.Routers["br1"]; ok || cfg.Routers["br2"] != routerAddr || cfg.RouterNames["br1"] != "br1.as.test:30042" {
			t.Fatalf("routers %v, names %v", cfg.Routers, cfg.RouterNames)
		}
		if w := strings.Join(cfg.RouterWarnings(), "\n"); !strings.Contains(w, "border router br1: br1.as.test:30042 does not resolve") {
			t.Fatalf("warnings %q", w)
		}
	})
	t.Run("a name that resolves", func(t *testing.T) {
		dns.set("br1.as.test", netip.MustParseAddr("10.101.0.7"))
		defer dns.set("br1.as.test", netip.Addr{})
		cfg, err := load(t, routersJSON("31000-32767", map[string]string{"br1": "br1.as.test:30042"}))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Routers["br1"] != netip.MustParseAddrPort("10.101.0.7:30042") || len(cfg.RouterWarnings()) != 0 {
			t.Fatalf("routers %v, warnings %v", cfg.Routers, cfg.RouterWarnings())
		}
	})
	t.Run("IPv6 routers take no room", func(t *testing.T) {
		cfg, err := load(t, routersJSON("31000-32767", many(MaxRouters, 2)))
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		w := strings.Join(cfg.RouterWarnings(), "\n")
		for _, name := range []string{"br6-0", "br6-1"} {
			if !strings.Contains(w, "border router "+name+" skipped: internal_addr [fd00::") || !strings.Contains(w, "underlay is IPv4") {
				t.Fatalf("warnings %q do not name %s and why", w, name)
			}
		}
		if len(cfg.Routers) != MaxRouters {
			t.Fatalf("%d routers taken, want %d", len(cfg.Routers), MaxRouters)
		}
	})
	t.Run("one IPv4 router too many", func(t *testing.T) {
		if _, err := load(t, routersJSON("31000-32767", many(MaxRouters+1, 0))); err == nil || !strings.Contains(err.Error(), "at most 64") {
			t.Fatalf("%v, want 65 routers refused", err)
		}
	})
	t.Run("the data plane takes 64 and the IPv6 ones", func(t *testing.T) {
		tr := loadTest(t)
		var all []netip.AddrPort
		for _, at := range many(MaxRouters, 2) {
			all = append(all, netip.MustParseAddrPort(at))
		}
		if err := setRouters(tr.objs.TraRouters, all); err != nil {
			t.Fatal(err)
		}
	})
}

// pinnedRouters are the routers in an attached translator's tra_routers.
func pinnedRouters(t *testing.T, a *attachedHost) []netip.AddrPort {
	t.Helper()
	p := a.pinned(t)
	defer p.Close()
	var k translatorTraAddr4
	var v uint8
	var out []netip.AddrPort
	it := p.routers.Iterate()
	for it.Next(&k, &v) {
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], k.Addr)
		out = append(out, netip.AddrPortFrom(netip.AddrFrom4(b), binary.BigEndian.Uint16(binary.NativeEndian.AppendUint16(nil, k.Port))))
	}
	return out
}

func pinnedDispatched(t *testing.T, a *attachedHost) (uint16, uint16) {
	t.Helper()
	p := a.pinned(t)
	defer p.Close()
	c, err := p.config()
	if err != nil {
		t.Fatal(err)
	}
	return c.DispatchedStart, c.DispatchedEnd
}

// Item 9 (a, c): the daemon resolves the routers' names again, aside from
// its loop: a router's new address is taken, a name that stops resolving
// keeps its last address (counted), a name that did not resolve at start
// is taken once it does; a changed topology.json's dispatched_ports are
// applied (before, never).
func TestTopologyFollowed(t *testing.T) {
	for v, d := range map[*time.Duration]time.Duration{&resolveEvery: 300 * time.Millisecond, &resolveRetry: 200 * time.Millisecond} {
		old := *v
		*v = d
		t.Cleanup(func() { *v = old })
	}
	dns := useFakeDNS(t, map[string]netip.Addr{"br1.as.test": farRouter.Addr()})
	a := attachHost(t, "127.0.0.1:1")
	topo := a.cfg.Topology
	write := func(ports string, routers map[string]string) {
		t.Helper()
		if err := os.WriteFile(topo, []byte(routersJSON(ports, routers)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("31000-32767", map[string]string{"br1": "br1.as.test:30042"})
	cfg, err := LoadConfig(a.cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	a.cfg = cfg
	start := func() (context.CancelFunc, <-chan error, *syncLog) {
		ctx, cancel := context.WithCancel(context.Background())
		var log syncLog
		done := a.runInHost(t, ctx, &log)
		eventually(t, 5*time.Second, "the daemon's first line", func() bool { return strings.Contains(log.String(), "paths from") })
		return cancel, done, &log
	}
	routersAre := func(want ...netip.AddrPort) func() bool {
		return func() bool {
			got := pinnedRouters(t, a)
			slices.SortFunc(got, func(x, y netip.AddrPort) int { return x.Compare(y) })
			return slices.Equal(got, want)
		}
	}
	stop, done, log := start()
	moved := netip.MustParseAddrPort("10.201.0.7:30042")
	dns.set("br1.as.test", moved.Addr())
	eventually(t, 3*time.Second, "the router's new address taken", routersAre(moved))

	dns.set("br1.as.test", netip.Addr{})
	eventually(t, 3*time.Second, "resolve_failed counted", func() bool { return a.daemonCounts(t)["resolve_failed"] >= 2 })
	if !routersAre(moved)() || !strings.Contains(log.String(), "does not resolve") || !strings.Contains(log.String(), "its last address stays") || !strings.Contains(log.String(), "address=10.201.0.7:30042") {
		t.Fatalf("routers %v after the name stopped resolving; log:\n%s", pinnedRouters(t, a), log.String())
	}

	write("1-65535", map[string]string{"br1": "br1.as.test:30042", "br2": "10.201.0.2:30042", "br3": "[fd00::3]:30042"})
	eventually(t, 3*time.Second, "dispatched_ports followed", func() bool { s, e := pinnedDispatched(t, a); return s == 1 && e == 65535 })
	eventually(t, 3*time.Second, "the new router taken, the named one kept", routersAre(netip.MustParseAddrPort("10.201.0.2:30042"), moved))
	if !strings.Contains(log.String(), "border router skipped") || !strings.Contains(log.String(), "router=br3") {
		t.Fatalf("the IPv6 router is not named:\n%s", log.String())
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// DNS down at start: the daemon starts, and takes the name once it
	// resolves.
	write("1-65535", map[string]string{"br1": "br1.as.test:30042"})
	if a.cfg, err = LoadConfig(a.cfg.Path); err != nil {
		t.Fatalf("DNS down: %v", err)
	}
	if _, err := Attach(a.cfg, AttachOptions{Netns: a.host}); err != nil { // as tra run does
		t.Fatal(err)
	}
	stop, done, _ = start()
	defer func() { stop(); <-done }()
	eventually(t, 3*time.Second, "the named router dropped while it does not resolve", routersAre())
	dns.set("br1.as.test", farRouter.Addr())
	eventually(t, 3*time.Second, "the name taken once it resolves", routersAre(farRouter))
}

func pinnedSWCsum(t *testing.T, a *attachedHost) uint32 {
	t.Helper()
	p := a.pinned(t)
	defer p.Close()
	c, err := p.config()
	if err != nil {
		t.Fatal(err)
	}
	return c.UnderlaySwCsum
}

// Item 8: what the daemon learns by netlink instead of asking each second,
// it still follows: the underlay's checksum offload turned off and on (a
// feature change is a link update), a route to the first hop by another
// gateway, the pair deleted and made anew.
func TestDaemonFollowsTheHostByNetlink(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	_, log, _ := a.startDaemon(t)
	eventually(t, 5*time.Second, "the daemon's first line", func() bool { return strings.Contains(log.String(), "paths from") })
	gatewayIs := func(want string) func() bool {
		return func() bool {
			p := a.pinned(t)
			defer p.Close()
			all, _ := p.Paths()
			return len(all[remoteIA]) == 1 && all[remoteIA][0].Gateway == netip.MustParseAddr(want)
		}
	}
	eventually(t, 3*time.Second, "the gateway in the path", gatewayIs("10.101.0.254"))

	t.Run("underlay checksum offload", func(t *testing.T) {
		setFeatures(t, a.host, a.cfg.Device, map[string]bool{"tx-checksum-ip-generic": false})
		eventually(t, 3*time.Second, "underlay_sw_csum on", func() bool { return pinnedSWCsum(t, a) == 1 })
		setFeatures(t, a.host, a.cfg.Device, map[string]bool{"tx-checksum-ip-generic": true})
		eventually(t, 3*time.Second, "underlay_sw_csum off", func() bool { return pinnedSWCsum(t, a) == 0 })
	})
	t.Run("another gateway", func(t *testing.T) {
		ipIn(t, a.host, "route", "replace", "10.201.0.0/24", "via", "10.101.0.253")
		eventually(t, 3*time.Second, "the new gateway in the path", gatewayIs("10.101.0.253"))
		ipIn(t, a.host, "route", "replace", "10.201.0.0/24", "via", "10.101.0.254")
		eventually(t, 3*time.Second, "the gateway back in the path", gatewayIs("10.101.0.254"))
	})
	t.Run("pair made anew", func(t *testing.T) {
		before := a.daemonCounts(t)
		mtu := linkMTU(t, a.host, a.cfg.Pair+"0")
		ipIn(t, a.host, "link", "del", a.cfg.Pair+"0")
		eventually(t, 3*time.Second, "reattached", func() bool { return a.daemonCounts(t)["reattached"] > before["reattached"] })
		// Made at the size attach gives it, or set to it again.
		eventually(t, 3*time.Second, "the pair's MTU as before", func() bool { return linkMTU(t, a.host, a.cfg.Pair+"0") == mtu })
		f := features(t, a.host, a.cfg.Pair+"0")
		if f["tx-checksum-ip-generic"] || !f["rx-gro"] {
			t.Fatalf("the new pair's offloads: %v", f)
		}
	})
}

// Item 8: a subscription the kernel ends (ENOBUFS: more updates than its
// buffer holds) is not ignored: the loop hears the updates were lost, and
// subscribes again.
func TestLostNetlinkUpdatesResync(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	old := watchRcvbuf
	watchRcvbuf = 4096
	t.Cleanup(func() { watchRcvbuf = old })
	var w *hostWatch
	if err := netns.Run(a.host, func() error {
		var err error
		if w, err = newHostWatch(a.cfg); err != nil {
			return err
		}
		return w.subscribe()
	}); err != nil {
		t.Fatal(err)
	}
	defer w.close()
	// A burst of updates larger than the buffer, while the readers are
	// held (as a loop busy elsewhere would hold them: they wait for its
	// lock).
	w.mu.Lock()
	addDevices(t, a.host, 2000)
	w.mu.Unlock()
	var ch hostChanges
	deadline := time.After(10 * time.Second)
	for !ch.resync {
		select {
		case <-w.wake:
			ch = w.take()
		case <-deadline:
			t.Fatal("2,000 devices made at once into a 4 KB buffer, the readers held: no resync")
		}
	}
	if !strings.Contains(fmt.Sprint(ch.err), syscall.ENOBUFS.Error()) {
		t.Fatalf("resync for %v, want ENOBUFS", ch.err)
	}
	eventually(t, 3*time.Second, "the subscription known lost", func() bool { return !w.subscribed() })
	if err := netns.Run(a.host, w.subscribe); err != nil {
		t.Fatal(err)
	}
	w.take()
	ipIn(t, a.host, "link", "set", a.cfg.Pair+"0", "mtu", "1300")
	// A wake may be left from the burst (take empties the changes, not the
	// channel): wait on until the pair's update itself is seen.
	until := time.After(3 * time.Second)
	for seen := false; !seen; {
		select {
		case <-w.wake:
			seen = w.take().links
		case <-until:
			t.Fatal("no update of the pair's device after subscribing again")
		}
	}
}
