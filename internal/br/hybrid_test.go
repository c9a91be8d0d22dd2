package br

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scionproto/scion/pkg/addr"

	"github.com/fastpath-dev/fastpath/internal/capture"
	"github.com/fastpath-dev/fastpath/internal/checksum"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The router as it is deployed in front of a reference router: neighbours
// that send from ordinary sockets on veths with their default offloads (the
// checksum left for the device to complete), in either family, attached in
// native or generic mode.

// hostBed is neighbour A ─ router ─ neighbour B, three namespaces joined by
// veths a0–d0 and d1–b0. A is the router's child (interface 1), B its
// parent (interface 2).
type hostBed struct {
	a, dut, b                    string
	v6                           bool
	aAddr, d0Addr, d1Addr, bAddr netip.Addr
	dir                          string
	cfg                          *Config
}

func newHostBed(t *testing.T, v6 bool) *hostBed {
	t.Helper()
	requireKernel(t)
	r := make([]byte, 2)
	rand.Read(r)
	p := "fp-h" + hex.EncodeToString(r) + "-"
	b := &hostBed{a: p + "a", dut: p + "dut", b: p + "b", v6: v6, dir: t.TempDir()}
	if v6 {
		b.aAddr, b.d0Addr = netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("fd00:1::2")
		b.d1Addr, b.bAddr = netip.MustParseAddr("fd00:2::2"), netip.MustParseAddr("fd00:2::1")
	} else {
		b.aAddr, b.d0Addr = netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")
		b.d1Addr, b.bAddr = netip.MustParseAddr("10.2.0.2"), netip.MustParseAddr("10.2.0.1")
	}
	t.Cleanup(func() {
		for _, ns := range []string{b.a, b.dut, b.b} {
			netns.Delete(ns)
		}
	})
	for _, ns := range []string{b.a, b.dut, b.b} {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
		b.ip(t, ns, "link", "set", "lo", "up")
		// Router solicitations and DAD would add packets of their own.
		b.sysctl(t, ns, "net.ipv6.conf.all.accept_ra", "0")
		b.sysctl(t, ns, "net.ipv6.conf.default.accept_ra", "0")
		if !v6 {
			b.sysctl(t, ns, "net.ipv6.conf.all.disable_ipv6", "1")
			b.sysctl(t, ns, "net.ipv6.conf.default.disable_ipv6", "1")
		}
	}
	mustRun(t, "ip", "link", "add", "a0", "netns", b.a, "type", "veth", "peer", "name", "d0", "netns", b.dut)
	mustRun(t, "ip", "link", "add", "d1", "netns", b.dut, "type", "veth", "peer", "name", "b0", "netns", b.b)
	bits := "24"
	if v6 {
		bits = "64"
	}
	for _, e := range []struct {
		ns, dev string
		a       netip.Addr
	}{{b.a, "a0", b.aAddr}, {b.dut, "d0", b.d0Addr}, {b.dut, "d1", b.d1Addr}, {b.b, "b0", b.bAddr}} {
		args := []string{"addr", "add", e.a.String() + "/" + bits, "dev", e.dev}
		if v6 {
			args = append(args, "nodad")
		}
		b.ip(t, e.ns, args...)
		b.ip(t, e.ns, "link", "set", e.dev, "up")
	}
	// The router sends to A and B: GRO lets their veths take XDP frames.
	b.setGRO(t, b.a, "a0", true)
	b.setGRO(t, b.b, "b0", true)
	// Static neighbours, so that no first packet waits for ARP or ND.
	b.ip(t, b.dut, "neigh", "replace", b.aAddr.String(), "lladdr", b.mac(t, b.a, "a0"), "dev", "d0", "nud", "permanent")
	b.ip(t, b.dut, "neigh", "replace", b.bAddr.String(), "lladdr", b.mac(t, b.b, "b0"), "dev", "d1", "nud", "permanent")
	b.ip(t, b.a, "neigh", "replace", b.d0Addr.String(), "lladdr", b.mac(t, b.dut, "d0"), "dev", "a0", "nud", "permanent")
	b.ip(t, b.b, "neigh", "replace", b.d1Addr.String(), "lladdr", b.mac(t, b.dut, "d1"), "dev", "b0", "nud", "permanent")
	// What the FIB lookups need of the host, and nothing more.
	b.sysctl(t, b.dut, "net.ipv4.conf.lo.forwarding", "1")
	b.sysctl(t, b.dut, "net.ipv6.conf.lo.forwarding", "1")

	ap := func(a netip.Addr, port int) string { return netip.AddrPortFrom(a, uint16(port)).String() }
	topo := fmt.Sprintf(`{
  "isd_as": "1-ff00:0:110", "mtu": 1472, "dispatched_ports": "31000-32767", "attributes": [],
  "border_routers": {
    "br1": {
      "internal_addr": %q,
      "interfaces": {
        "1": {"underlay": {"local": %q, "remote": %q}, "isd_as": "1-ff00:0:111", "link_to": "child", "mtu": 1472},
        "2": {"underlay": {"local": %q, "remote": %q}, "isd_as": "1-ff00:0:100", "link_to": "parent", "mtu": 1472}
      }
    }
  }
}`, ap(b.d0Addr, 30042), ap(b.d0Addr, 50000), ap(b.aAddr, 50000), ap(b.d1Addr, 50000), ap(b.bAddr, 50000))
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(b.dir, "keys"), 0o700))
	must(os.WriteFile(filepath.Join(b.dir, "topology.json"), []byte(topo), 0o600))
	must(os.WriteFile(filepath.Join(b.dir, "keys", "master0.key"), []byte("IAOYbTs/CobLFV3T3jt6lQ=="), 0o600))
	must(os.WriteFile(filepath.Join(b.dir, "keys", "master1.key"), []byte("8fiM4fdey8zv/9OaQw8lKg=="), 0o600))
	must(os.WriteFile(filepath.Join(b.dir, "br.toml"), []byte("router_id = \"br1\"\ntopology = \"topology.json\"\nkeys = \"keys\"\nscion_version = \""+scionproto.Default+"\"\n"), 0o600))
	cfg, err := LoadConfig(filepath.Join(b.dir, "br.toml"))
	must(err)
	b.cfg = cfg
	return b
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

func (b *hostBed) ip(t *testing.T, ns string, args ...string) {
	t.Helper()
	mustRun(t, "ip", append([]string{"-n", ns}, args...)...)
}

// sysctl writes inside the namespace only (ip netns exec would remount /sys).
func (b *hostBed) sysctl(t *testing.T, ns, key, val string) {
	t.Helper()
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	if err := netns.Run(ns, func() error { return os.WriteFile(path, []byte(val), 0o644) }); err != nil {
		t.Fatalf("sysctl %s=%s in %s: %v", key, val, ns, err)
	}
}

func (b *hostBed) mac(t *testing.T, ns, dev string) string {
	t.Helper()
	a, err := xdp.Lookup(xdp.Iface{Netns: ns, Name: dev})
	if err != nil {
		t.Fatal(err)
	}
	return a.HardwareAddr.String()
}

func (b *hostBed) setGRO(t *testing.T, ns, dev string, on bool) {
	t.Helper()
	v := "off"
	if on {
		v = "on"
	}
	if err := netns.Run(ns, func() error {
		out, err := exec.Command("ethtool", "-K", dev, "gro", v).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}); err != nil {
		t.Fatalf("ethtool -K %s gro %s: %v", dev, v, err)
	}
}

// attach attaches the router to d0 and d1 in the given mode and returns
// its warnings.
func (b *hostBed) attach(t *testing.T, mode string) (name, warnings string) {
	t.Helper()
	cfg := *b.cfg
	cfg.XDPMode = mode
	name = strings.TrimSuffix(b.dut, "dut") + "br"
	var w bytes.Buffer
	devs := []xdp.Iface{{Netns: b.dut, Name: "d0"}, {Netns: b.dut, Name: "d1"}}
	if err := Attach(&cfg, AttachOptions{Devices: devs, Name: name, NoFallback: true, Log: textLog(&w)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Detach(name, nil) })
	return name, w.String()
}

// verdicts are the router's packet counts by verdict, over its interfaces.
func verdicts(t *testing.T, name string) map[string]uint64 {
	t.Helper()
	p, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	totals, err := p.Totals()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for v, s := range totals {
		out[v] = s.Packets
	}
	return out
}

// transit are n SCION datagrams from A across the router to B, as A's
// socket sends them.
func (b *hostBed) transit(t *testing.T, n int) [][]byte {
	t.Helper()
	return b.transitOfSize(t, n, 200)
}

// transitOfSize are transit datagrams in frames of size bytes.
func (b *hostBed) transitOfSize(t *testing.T, n, size int) [][]byte {
	t.Helper()
	frames, err := TransitPackets(b.cfg, TransitOptions{Count: n, Size: size, SrcMAC: make(net.HardwareAddr, 6), DstMAC: make(net.HardwareAddr, 6)})
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, n)
	for i, f := range frames {
		out[i] = scionPayload(f)
	}
	return out
}

// sendTransit sends n transit datagrams from A's socket to the router and
// returns the router's verdicts after.
func (b *hostBed) sendTransit(t *testing.T, name string, n int) map[string]uint64 {
	t.Helper()
	send(t, b.a, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), b.transit(t, n))
	time.Sleep(100 * time.Millisecond)
	return verdicts(t, name)
}

// listen binds a UDP socket in a namespace and collects what arrives.
type listener struct {
	mu  sync.Mutex
	got [][]byte
	c   *net.UDPConn
}

func listen(t *testing.T, ns string, at netip.AddrPort) *listener {
	t.Helper()
	l := &listener{}
	if err := netns.Run(ns, func() error {
		var err error
		l.c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(at))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.c.Close() })
	go func() {
		buf := make([]byte, 9000)
		for {
			n, _, err := l.c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			l.mu.Lock()
			l.got = append(l.got, append([]byte(nil), buf[:n]...))
			l.mu.Unlock()
		}
	}()
	return l
}

// await waits up to a second for n datagrams and returns what came.
func (l *listener) await(n int) [][]byte {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		k := len(l.got)
		l.mu.Unlock()
		if k >= n {
			break
		}
	}
	time.Sleep(50 * time.Millisecond) // and nothing more
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.got...)
}

// send sends the datagrams from the listener's socket to to.
func (l *listener) send(t *testing.T, to netip.AddrPort, dgrams [][]byte) {
	t.Helper()
	for _, d := range dgrams {
		if _, err := l.c.WriteToUDPAddrPort(d, to); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

// send sends the datagrams from a socket bound at from (in ns) to to.
func send(t *testing.T, ns string, from, to netip.AddrPort, dgrams [][]byte) {
	t.Helper()
	if err := netns.Run(ns, func() error {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(from))
		if err != nil {
			return err
		}
		defer c.Close()
		for _, d := range dgrams {
			if _, err := c.WriteToUDPAddrPort(d, to); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// udpInCsumErrors is the namespace's count of datagrams its kernel dropped
// for a wrong checksum.
func udpInCsumErrors(t *testing.T, ns string) uint64 {
	t.Helper()
	var n uint64
	if err := netns.Run(ns, func() error {
		b, err := os.ReadFile("/proc/net/snmp")
		if err != nil {
			return err
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i+1 < len(lines); i++ {
			if !strings.HasPrefix(lines[i], "Udp: ") || !strings.HasPrefix(lines[i+1], "Udp: ") {
				continue
			}
			keys, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			for k := range keys {
				if keys[k] == "InCsumErrors" {
					n, err = strconv.ParseUint(vals[k], 10, 64)
					return err
				}
			}
		}
		return fmt.Errorf("no Udp InCsumErrors in /proc/net/snmp")
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// udpTo are the captured frames of datagrams to dst.
func udpTo(frames []capture.Frame, dst netip.AddrPort) []capture.Frame {
	var out []capture.Frame
	for _, f := range frames {
		if _, d, ok := underlayEnds(f.Data); ok && d == dst && !f.Outgoing {
			out = append(out, f)
		}
	}
	return out
}

// Datagrams from sockets with checksum offload on (the veth default) cross
// the router and arrive with a right checksum, over IPv4 and IPv6, in
// native mode (the frame leaves as an XDP frame: the checksum must be
// complete) and in generic mode (the frame stays an skb that may still owe
// its checksum: then the field must hold the new pseudo-header's sum).
func TestChecksumOfForwardedDatagrams(t *testing.T) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		for _, mode := range []string{XDPModeNative, XDPModeGeneric} {
			t.Run(fam+"/"+mode, func(t *testing.T) {
				b := newHostBed(t, fam == "ipv6")
				if !txChecksumOffload(t, b.a, "a0") {
					t.Fatal("a0 has no checksum offload: the test needs the veth default")
				}
				name, warnings := b.attach(t, mode)
				if warnings != "" {
					t.Fatalf("unexpected warnings at attach:\n%s", warnings)
				}
				to := netip.AddrPortFrom(b.bAddr, 50000)
				got := listen(t, b.b, to)
				ft, err := capture.Open(xdp.Iface{Netns: b.b, Name: "b0"})
				if err != nil {
					t.Fatal(err)
				}
				defer ft.Close()
				errsBefore := udpInCsumErrors(t, b.b)
				const n = 20
				send(t, b.a, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), b.transit(t, n))
				arrived := got.await(n)
				v := verdicts(t, name)
				if len(arrived) != n || v["forwarded"] != n {
					t.Fatalf("%d of %d datagrams arrived; verdicts %v; UdpInCsumErrors +%d", len(arrived), n, v, udpInCsumErrors(t, b.b)-errsBefore)
				}
				if e := udpInCsumErrors(t, b.b) - errsBefore; e != 0 {
					t.Fatalf("B's kernel dropped %d datagrams for their checksum", e)
				}
				frames := udpTo(ft.Frames(), to)
				if len(frames) != n {
					t.Fatalf("tapped %d frames to %s, want %d", len(frames), to, n)
				}
				for i, f := range frames {
					off, _, pseudo, _ := udpSpan(f.Data)
					field := binary.BigEndian.Uint16(f.Data[off+6:])
					switch {
					case f.Pending && field != checksum.Fold(pseudo):
						t.Fatalf("frame %d: checksum still owed, but the field %#04x is not the pseudo-header's sum %#04x", i, field, checksum.Fold(pseudo))
					case !f.Pending && !udpChecksumOK(f.Data):
						t.Fatalf("frame %d: complete checksum %#04x is wrong", i, field)
					case mode == XDPModeNative && f.Pending:
						t.Fatalf("frame %d: an XDP frame cannot owe its checksum", i)
					}
				}
			})
		}
	}
}

func txChecksumOffload(t *testing.T, ns, dev string) bool {
	t.Helper()
	var on bool
	netns.Run(ns, func() error {
		out, err := exec.Command("ethtool", "-k", dev).CombinedOutput()
		on = err == nil && strings.Contains(string(out), "tx-checksumming: on")
		return nil
	})
	return on
}

// A veth whose peer runs neither XDP nor GRO drops what is redirected into
// it without an error the program could see. Attach says so and names the
// fix, and the router leaves that traffic to the reference router.
func TestUnusableEgressIsLeftToTheStack(t *testing.T) {
	b := newHostBed(t, false)
	b.setGRO(t, b.b, "b0", false)
	name, warnings := b.attach(t, XDPModeNative)
	if !strings.Contains(warnings, "b0") || !strings.Contains(warnings, "ethtool -K b0 gro on") {
		t.Fatalf("attach warned %q; want the peer b0 named with the fix", warnings)
	}
	const n = 10
	v := b.sendTransit(t, name, n)
	if v["tx_unusable"] != n || v["forwarded"] != 0 {
		t.Fatalf("verdicts %v; want %d tx_unusable and nothing forwarded", v, n)
	}
}

// A device that stops taking XDP frames after attach (its peer's GRO
// turned off) drops them; with count_tx_drops the flush tracepoints move
// them from forwarded to tx_failed. Without it their programs are not
// attached (they run at every XDP flush of the machine), and a re-attach
// without it takes them away.
func TestFailedTransmitIsNotForwarded(t *testing.T) {
	b := newHostBed(t, false)
	b.cfg.CountTxDrops = true
	name, _ := b.attach(t, XDPModeNative)
	for _, pin := range flushPins {
		if _, err := os.Stat(filepath.Join(PinDir(name), pin)); err != nil {
			t.Fatalf("count_tx_drops: %v", err)
		}
	}
	b.setGRO(t, b.b, "b0", false)
	const n = 10
	v := b.sendTransit(t, name, n)
	if v["tx_failed"] != n || v["forwarded"] != 0 {
		t.Fatalf("verdicts %v; want %d tx_failed and nothing forwarded", v, n)
	}

	b.cfg.CountTxDrops = false
	b.attach(t, XDPModeNative)
	for _, pin := range flushPins {
		if _, err := os.Stat(filepath.Join(PinDir(name), pin)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after a re-attach without count_tx_drops: %v", pin, err)
		}
	}
	for _, pin := range failurePins {
		if _, err := os.Stat(filepath.Join(PinDir(name), pin)); err != nil {
			t.Fatalf("%s: %v", pin, err)
		}
	}
}

// Packets for a host on the router's own machine (its internal address,
// loopback) are passed up as local, and scionproto's router, running
// behind, delivers them.
func TestLocalHostsAreDelivered(t *testing.T) {
	b := newHostBed(t, false)
	ref, err := StartReferenceRouter(ReferenceVersion, b.dut, "br1", b.dir, netip.AddrPortFrom(b.d0Addr, 30042).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ref.Stop)
	name, _ := b.attach(t, XDPModeNative)
	localIA := addr.MustParseIA("1-ff00:0:110")
	for _, host := range []netip.Addr{b.d0Addr, netip.MustParseAddr("127.0.0.1")} {
		at := netip.AddrPortFrom(host, 31500)
		got := listen(t, b.dut, at)
		p := SCIONPacket{
			Path:  PathSpec{Segments: []Segment{seg(false, 1, hopPair{21, 41}, hopPair{31, 11}, hopPair{0, 1})}, CurrHF: 2},
			Key:   b.cfg.Keys[0],
			SrcIA: addr.MustParseIA("1-ff00:0:111"), DstIA: localIA,
			SrcHost: addr.HostIP(b.aAddr), DstHost: addr.HostIP(host),
			SrcPort: 31500, DstPort: 31500, Payload: []byte("for a host on the router's machine"),
			SrcMAC: make(net.HardwareAddr, 6), DstMAC: make(net.HardwareAddr, 6),
			UnderlaySrc: netip.AddrPortFrom(b.aAddr, 50000), UnderlayDst: netip.AddrPortFrom(b.d0Addr, 50000),
		}
		f, err := p.Frame()
		if err != nil {
			t.Fatal(err)
		}
		before := verdicts(t, name)["local"]
		send(t, b.a, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), [][]byte{scionPayload(f)})
		if arrived := got.await(1); len(arrived) != 1 {
			t.Fatalf("%s: %d datagrams arrived, want 1; verdicts %v; reference router:\n%s", at, len(arrived), verdicts(t, name), ref.Logs.String())
		}
		if v := verdicts(t, name); v["local"] != before+1 {
			t.Fatalf("%s: verdicts %v; want one more local", at, v)
		}
	}
}

// makeEither sets the last payload word so that the datagram's field is
// both a complete, right checksum and the pseudo-header's sum.
func makeEither(f []byte) {
	off, end, pseudo, _ := udpSpan(f)
	// The last whole word of the payload, at an even offset in the datagram.
	w := off + (end-off-2)/2*2
	f[w], f[w+1] = 0, 0
	field := checksum.Fold(pseudo)
	binary.BigEndian.PutUint16(f[off+6:], field)
	need := ^checksum.Fold(checksum.Sum(f[off:end], pseudo))
	binary.BigEndian.PutUint16(f[w:], need)
}

// udpResidual is what a frame's datagram sums to with its pseudo-header:
// 0xffff when the checksum is right, another value by as much as it is off.
func udpResidual(f []byte) uint16 {
	off, end, pseudo, _ := udpSpan(f)
	return checksum.Fold(checksum.Sum(f[off:end], pseudo))
}

// The arriving checksum field decides what leaves: a complete checksum
// always from the native program; from the generic copy, the new
// pseudo-header's sum when the field came pending (the device completes
// it), and the slow path when the field could be either. A wrong checksum
// leaves exactly as wrong (udp_checksum = "update", the default: the next
// host's kernel drops it) or is dropped here ("verify", where the kernel in
// front of the reference router drops it).
func TestChecksumKinds(t *testing.T) {
	verifying := testConfig()
	verifying.UDPChecksum = UDPChecksumVerify
	routers := map[bool]*Router{false: loadTestRouter(t, testConfig()), true: loadTestRouter(t, verifying)}
	good := transitFrame(t)
	off, _, _, _ := udpSpan(good)
	variant := func(edit func(f []byte)) []byte {
		f := append([]byte(nil), good...)
		edit(f)
		return f
	}
	pending := variant(setPendingChecksum)
	none := variant(func(f []byte) { f[off+6], f[off+7] = 0, 0 })
	bad := variant(func(f []byte) { f[off+7] ^= 1 })
	either := variant(makeEither)
	if !udpChecksumOK(either) {
		t.Fatal("makeEither made a wrong checksum")
	}
	type kase struct {
		frame   []byte
		generic bool
		verdict string
		out     string // "complete", "pending" or "as wrong"
	}
	cases := map[string]kase{
		"complete in, native":       {good, false, "forwarded", "complete"},
		"complete in, generic":      {good, true, "forwarded", "complete"},
		"pending in, native":        {pending, false, "forwarded", "complete"},
		"pending in, generic":       {pending, true, "forwarded", "pending"},
		"none (IPv4 zero), native":  {none, false, "forwarded", "complete"},
		"none (IPv4 zero), generic": {none, true, "forwarded", "complete"},
		"either, native":            {either, false, "forwarded", "complete"},
		"either, generic":           {either, true, "not_implemented", ""},
	}
	for _, verify := range []bool{false, true} {
		mode := "update"
		wrong := kase{bad, false, "forwarded", "as wrong"}
		if verify {
			mode = "verify"
			wrong = kase{bad, false, "bad_checksum", ""}
		}
		all := map[string]kase{"wrong, native": wrong}
		wrong.generic = true
		all["wrong, generic"] = wrong
		for name, c := range cases {
			all[name] = c
		}
		for name, c := range all {
			name += ", " + mode
			r := routers[verify]
			t.Run(name, func(t *testing.T) {
				prog := r.objs.Router
				if c.generic {
					var err error
					if prog, err = r.GenericProgram(); err != nil {
						t.Fatal(err)
					}
				}
				res := r.runWith(t, prog, c.frame)
				if res.verdict != c.verdict {
					t.Fatalf("verdict %s, want %s", res.verdict, c.verdict)
				}
				switch c.out {
				case "complete":
					if !udpChecksumOK(res.out) {
						t.Fatalf("checksum of what leaves is wrong:\n%x", res.out)
					}
				case "pending":
					o, _, pseudo, _ := udpSpan(res.out)
					if got := binary.BigEndian.Uint16(res.out[o+6:]); got != checksum.Fold(pseudo) {
						t.Fatalf("field %#04x, want the new pseudo-header's sum %#04x", got, checksum.Fold(pseudo))
					}
				case "as wrong":
					if in, out := udpResidual(c.frame), udpResidual(res.out); out != in || out == 0xffff {
						t.Fatalf("what leaves sums to %#04x, want %#04x: as wrong as what came", out, in)
					}
				}
			})
		}
	}
}

// A veth's XDP program that cannot take frames in several buffers limits
// its peer's MTU to about a page, and attaching it to a veth whose peer has
// a jumbo MTU fails. The router's programs are frags-aware: they attach
// there, and what is not SCION in a frame larger than a page (a jumbo
// datagram to a socket of the host, a TCP segment of a 9000-byte MTU) goes
// whole to the stack and arrives intact.
func TestJumboNeighbour(t *testing.T) {
	b := newHostBed(t, false)
	b.ip(t, b.a, "link", "set", "a0", "mtu", "9000")
	b.ip(t, b.dut, "link", "set", "d0", "mtu", "9000")
	name, _ := b.attach(t, XDPModeNative)

	// One datagram of 8000 bytes, in one frame of three buffers.
	l := listen(t, b.dut, netip.AddrPortFrom(b.d0Addr, 7001))
	send(t, b.a, netip.AddrPortFrom(b.aAddr, 7001), netip.AddrPortFrom(b.d0Addr, 7001), [][]byte{make([]byte, 8000)})
	if got := l.await(1); len(got) != 1 || len(got[0]) != 8000 {
		t.Fatalf("the router's host received %d datagrams; want one of 8000 bytes", len(got))
	}

	// TCP in 9000-byte segments.
	const size = 4 << 20
	var ln net.Listener
	if err := netns.Run(b.dut, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(b.d0Addr, 7000).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	if err := netns.Run(b.a, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(b.d0Addr, 7000).String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(make([]byte, size))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != size {
			t.Fatalf("the router's host received %d bytes of %d", n, size)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the transfer did not finish in 10 s")
	}
	if v := verdicts(t, name); v["not_scion"] < 2 || v["forwarded"] != 0 || v["parse_error"] != 0 {
		t.Fatalf("verdicts %v; want the jumbo datagram and TCP segments passed as not_scion", v)
	}
}

// SCION datagrams of a jumbo MTU arrive in frames of several buffers, sent
// by a socket that leaves the checksum to the device: the router forwards
// them in XDP, whole, with the checksum completed over every buffer, in
// both families.
func TestJumboFramesAreForwarded(t *testing.T) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		t.Run(fam, func(t *testing.T) {
			b := newHostBed(t, fam == "ipv6")
			for _, e := range [][2]string{{b.a, "a0"}, {b.dut, "d0"}, {b.dut, "d1"}, {b.b, "b0"}} {
				b.ip(t, e[0], "link", "set", e[1], "mtu", "9000")
			}
			name, _ := b.attach(t, XDPModeNative)
			to := netip.AddrPortFrom(b.bAddr, 50000)
			got := listen(t, b.b, to)
			errsBefore := udpInCsumErrors(t, b.b)
			const n = 10
			var want []int
			dgrams := b.transitOfSize(t, n, 8000)
			for _, d := range dgrams {
				want = append(want, len(d))
			}
			send(t, b.a, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), dgrams)
			arrived := got.await(n)
			v := verdicts(t, name)
			if len(arrived) != n || v["forwarded"] != n {
				t.Fatalf("%d of %d datagrams arrived; verdicts %v; UdpInCsumErrors +%d", len(arrived), n, v, udpInCsumErrors(t, b.b)-errsBefore)
			}
			for i, d := range arrived {
				if len(d) != want[i] {
					t.Fatalf("datagram %d: %d bytes arrived, %d sent", i, len(d), want[i])
				}
			}
			if e := udpInCsumErrors(t, b.b) - errsBefore; e != 0 {
				t.Fatalf("B's kernel dropped %d datagrams for their checksum", e)
			}
		})
	}
}
