package tra

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/safchain/ethtool"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/capture"
	"github.com/fastpath-dev/fastpath/internal/checksum"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// A translator attached for real, on a host whose routers are on another
// subnet behind a gateway: what the kernel does with its frames, and what
// the daemon does when the host's devices change under it.
//
//	host namespace                     net namespace
//	apps ─ fp-tra0/1 ─ eth0 10.101.0.2 ─── gw0 10.101.0.254 (the gateway; the
//	                   (tra_in)            routers, 10.201.0.0/24, are beyond)

type attachedHost struct {
	host, net string
	cfg       *Config
	name      string
	gwMAC     net.HardwareAddr
	ethMAC    net.HardwareAddr
}

func ipIn(t *testing.T, ns string, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s %v: %v: %s", ns, args, err, out)
	}
}

func sysctlIn(t *testing.T, ns, key, val string) {
	t.Helper()
	if err := netns.Run(ns, func() error {
		return os.WriteFile(filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/")), []byte(val), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
}

// attachHost makes the two namespaces and attaches a translator to the
// host, with a path to remoteIA through the router 10.201.0.1; everything
// goes when the test ends.
func attachHost(t *testing.T, daemonAddr string) *attachedHost {
	t.Helper()
	a := newHost(t, daemonAddr)
	var err error
	a.name, err = Attach(a.cfg, AttachOptions{Netns: a.host})
	if err != nil {
		t.Fatal(err)
	}
	a.detachAtEnd(t)
	p := a.pinned(t)
	defer p.Close()
	if err := p.SetPaths(remoteIA, 7, []Path{{Raw: testPath(t), MTU: 1472, NextHop: farRouter, Expiry: uint64(time.Now().Add(time.Hour).Unix())}}); err != nil {
		t.Fatal(err)
	}
	return a
}

// detachAtEnd detaches the host's translator when the test ends.
func (a *attachedHost) detachAtEnd(t *testing.T) {
	t.Cleanup(func() {
		if err := Detach(a.name); err != nil && !errors.Is(err, ErrNotAttached) {
			t.Error(err)
		}
		if _, err := os.Stat(PinDir(a.name)); err == nil {
			t.Errorf("%s left behind", PinDir(a.name))
		}
	})
}

// newHost makes the two namespaces and the translator's configuration
// (written in a.cfg.Path); nothing is attached.
func newHost(t *testing.T, daemonAddr string) *attachedHost {
	t.Helper()
	labtest.RequireKernel(t)
	b := make([]byte, 2)
	rand.Read(b)
	a := &attachedHost{host: "fp-t" + hex.EncodeToString(b) + "-h", net: "fp-t" + hex.EncodeToString(b) + "-n"}
	for _, ns := range []string{a.host, a.net} {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netns.Delete(ns) })
		// No router solicitations to count.
		sysctlIn(t, ns, "net.ipv6.conf.all.disable_ipv6", "1")
		sysctlIn(t, ns, "net.ipv6.conf.default.disable_ipv6", "1")
		ipIn(t, ns, "link", "set", "lo", "up")
	}
	a.link(t)
	dir := t.TempDir()
	topo := strings.Replace(topologyJSON("1-64513"), `"internal_addr": "10.101.0.1:30042"`, `"internal_addr": "10.201.0.1:30042"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "topology.json"), []byte(topo), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(writeConfig(t, dir, fmt.Sprintf("topology = \"topology.json\"\ndaemon = %q\ndevice = \"eth0\"\naddress = \"10.101.0.2\"\n", daemonAddr)))
	if err != nil {
		t.Fatal(err)
	}
	a.cfg = cfg
	a.name = Name(cfg.Pair, a.host)
	return a
}

// link makes (again) the veth between the host's eth0 and the gateway.
func (a *attachedHost) link(t *testing.T) {
	t.Helper()
	ipIn(t, a.host, "link", "add", "eth0", "type", "veth", "peer", "name", "gw0", "netns", a.net)
	ipIn(t, a.host, "addr", "add", "10.101.0.2/24", "dev", "eth0")
	ipIn(t, a.host, "link", "set", "eth0", "up")
	ipIn(t, a.net, "addr", "add", "10.101.0.254/24", "dev", "gw0")
	ipIn(t, a.net, "link", "set", "gw0", "up")
	ipIn(t, a.host, "route", "add", "10.201.0.0/24", "via", "10.101.0.254")
	// GRO on the gateway's side, so that it takes frames XDP sends.
	setFeatures(t, a.net, "gw0", map[string]bool{"rx-gro": true})
	gw, err := xdp.Lookup(xdp.Iface{Netns: a.net, Name: "gw0"})
	if err != nil {
		t.Fatal(err)
	}
	eth, err := xdp.Lookup(xdp.Iface{Netns: a.host, Name: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	a.gwMAC, a.ethMAC = gw.HardwareAddr, eth.HardwareAddr
}

func setFeatures(t *testing.T, ns, dev string, f map[string]bool) {
	t.Helper()
	if err := netns.Run(ns, func() error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer et.Close()
		return et.Change(dev, f)
	}); err != nil {
		t.Fatalf("ethtool %s %v: %v", dev, f, err)
	}
}

func features(t *testing.T, ns, dev string) map[string]bool {
	t.Helper()
	var out map[string]bool
	if err := netns.Run(ns, func() error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer et.Close()
		out, err = et.Features(dev)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (a *attachedHost) pinned(t *testing.T) *Pinned {
	t.Helper()
	p, err := OpenPinned(a.name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (a *attachedHost) counts(t *testing.T) Counts {
	t.Helper()
	p := a.pinned(t)
	defer p.Close()
	c, err := p.Counts()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dialUDP is a connected UDP socket of the host to dst.
// sendToNoPath sends a datagram to an AS no path leads to and gives what
// reading the socket then says within 8 s. "No route" is a soft error: a
// UDP socket hears it with IPV6_RECVERR (TCP when its connect times out).
func (a *attachedHost) sendToNoPath(t *testing.T, msg string) error {
	t.Helper()
	c := a.dialUDP(t, netip.AddrPortFrom(netip.MustParseAddr("fc00:10fc:500::ffff:a66:2"), 31000))
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1) })
	c.Write([]byte(msg))
	c.SetReadDeadline(time.Now().Add(8 * time.Second))
	_, err = c.Read(make([]byte, 100))
	return err
}

func (a *attachedHost) dialUDP(t *testing.T, dst netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := netns.Run(a.host, func() error {
		var err error
		c, err = net.DialUDP("udp6", &net.UDPAddr{IP: a.cfg.SMIP.AsSlice()}, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// frames waits for frames on a device that match, up to a deadline.
func waitFrames(t *testing.T, tap *capture.Tap, within time.Duration, match func(capture.Frame) bool) []capture.Frame {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var got []capture.Frame
		for _, f := range tap.Frames() {
			if match(f) {
				got = append(got, f)
			}
		}
		if len(got) > 0 || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scionTo says whether a frame is SCION/UDP/IPv4 to the far router.
func scionTo(f capture.Frame) bool {
	if len(f.Data) < 14+20+8 || binary.BigEndian.Uint16(f.Data[12:]) != 0x0800 {
		return false
	}
	return bytes.Equal(f.Data[14+16:14+20], farRouter.Addr().AsSlice()) && binary.BigEndian.Uint16(f.Data[14+20+2:]) == farRouter.Port()
}

// Defect 5: a router on another subnet is reached through the gateway the
// host's routes name, not looked for on the host's own link: routed by the
// kernel a packet (a path without a gateway yet), or to the gateway the
// daemon wrote into the path.
func TestRouterBehindGateway(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	for name, gw := range map[string]netip.Addr{"routed by the kernel": {}, "the path's gateway": netip.MustParseAddr("10.101.0.254")} {
		t.Run(name, func(t *testing.T) {
			p := a.pinned(t)
			err := p.SetPaths(remoteIA, 7, []Path{{Raw: testPath(t), MTU: 1472, NextHop: farRouter, Expiry: uint64(time.Now().Add(time.Hour).Unix()), Gateway: gw}})
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			tap, err := capture.Open(xdp.Iface{Netns: a.net, Name: "gw0"})
			if err != nil {
				t.Fatal(err)
			}
			defer tap.Close()
			c := a.dialUDP(t, netip.AddrPortFrom(remote4SMIP, 31000))
			if _, err := c.Write([]byte("to a router behind the gateway")); err != nil {
				t.Fatal(err)
			}
			got := waitFrames(t, tap, 3*time.Second, scionTo)
			if len(got) == 0 {
				t.Fatalf("no SCION frame to %s reached the gateway; counters %v", farRouter, a.counts(t))
			}
			if !bytes.Equal(got[0].Data[:6], a.gwMAC) {
				t.Fatalf("frame to MAC %s, want the gateway's %s", net.HardwareAddr(got[0].Data[:6]), a.gwMAC)
			}
		})
	}
}

// Defect 8: a UDP datagram larger than the pair's MTU leaves the host in
// fragments; the application hears of it on its socket.
func TestFragmentedDatagramReported(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	c := a.dialUDP(t, netip.AddrPortFrom(remote4SMIP, 31000))
	if _, err := c.Write(make([]byte, 3000)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err := c.Read(make([]byte, 100))
	if !errorsIs(err, syscall.EPROTO) {
		t.Fatalf("read after a fragmented datagram: %v, want EPROTO (the translator's parameter problem)", err)
	}
	if a.counts(t)["fragment"].Packets < 2 {
		t.Fatalf("counters %v", a.counts(t))
	}
}

func errorsIs(err error, target syscall.Errno) bool {
	var errno syscall.Errno
	for e := err; e != nil; {
		if x, ok := e.(syscall.Errno); ok {
			errno = x
			break
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return errno == target
}

// Defect 14: with the pair's checksum offload turned back on, the host's
// checksums arrive pending; the SCION packet leaves with a checksum that is
// right once the device completes it.
func TestPendingChecksumKeptRight(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	setFeatures(t, a.host, a.cfg.Pair+"0", map[string]bool{"tx-checksum-ip-generic": true})
	tap, err := capture.Open(xdp.Iface{Netns: a.net, Name: "gw0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	c := a.dialUDP(t, netip.AddrPortFrom(remote4SMIP, 31000))
	if _, err := c.Write([]byte("a checksum the device completes")); err != nil {
		t.Fatal(err)
	}
	got := waitFrames(t, tap, 3*time.Second, scionTo)
	if len(got) == 0 {
		t.Fatalf("no SCION frame; counters %v", a.counts(t))
	}
	f := got[0]
	var s slayers.SCION
	if err := s.DecodeFromBytes(f.Data[14+20+8:], gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	l4 := append([]byte(nil), s.Payload...)
	if f.Pending {
		// What the device will do: sum from the L4 header on, with the
		// field as it stands, and store the complement.
		binary.BigEndian.PutUint16(l4[6:], ^checksum.Fold(checksum.Sum(l4, 0)))
	}
	if checksum.Fold(checksum.Sum(l4, scionPseudoSum(&s, len(l4), 17))) != 0xffff {
		t.Fatalf("UDP checksum wrong for SCION (pending %v)", f.Pending)
	}
	t.Logf("checksum pending on the wire: %v", f.Pending)
}

// injectSCION sends a SCION frame to the host's eth0 from the gateway's
// side, as a router would hand it over.
func (a *attachedHost) injectSCION(t *testing.T, frame []byte) {
	t.Helper()
	copy(frame[0:6], a.ethMAC)
	copy(frame[6:12], a.gwMAC)
	gw, err := xdp.Lookup(xdp.Iface{Netns: a.net, Name: "gw0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Run(a.net, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: gw.Index, Halen: 6, Addr: [8]byte{frame[0], frame[1], frame[2], frame[3], frame[4], frame[5]}})
	}); err != nil {
		t.Fatal(err)
	}
}

func (a *attachedHost) scionIn(t *testing.T, payload string) []byte {
	return inFrame{from: farRouter, port: 31000, srcIA: remoteIA, srcHost: remote4,
		l4: []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 31000}, gopacket.Payload(payload)}}.build(t)
}

// Defect 15 (tx_failed): frames tra_in hands the pair that the kernel
// refuses (the pair down) are counted, not passed off as translated.
func TestTxFailedCounted(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	ipIn(t, a.host, "link", "set", a.cfg.Pair+"1", "down")
	for i := 0; i < 5; i++ {
		a.injectSCION(t, a.scionIn(t, "into a pair that is down"))
	}
	deadline := time.Now().Add(3 * time.Second)
	for a.counts(t)["tx_failed"].Packets < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("counters %v, want 5 tx_failed", a.counts(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c := a.counts(t); c["translated_in"].Packets != 0 {
		t.Fatalf("counters %v: frames the kernel refused counted translated", c)
	}
}

// runDaemonIn starts `tra run` for the host as a child in its namespace,
// as the lab does; it is killed when the test ends.
func (a *attachedHost) runDaemonIn(t *testing.T) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envDaemon+"="+a.cfg.Path)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := netns.Run(a.host, cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("daemon:\n%s", log.String())
		}
	})
	return cmd, &log
}

func (a *attachedHost) daemonCounts(t *testing.T) map[string]uint64 {
	t.Helper()
	p := a.pinned(t)
	defer p.Close()
	c, err := p.DaemonCounts()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The daemon keeps what attach set up: it turns the pair's offloads off
// again, attaches again to a device made anew, and answers the host at once
// though scionproto's daemon is down (defect 10). Killed, it takes nothing
// with it; started again, it adopts the installed paths.
func TestDaemonKeepsTheHost(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	cmd, log := a.runDaemonIn(t)
	eventually(t, 5*time.Second, "the daemon's first line", func() bool { return strings.Contains(log.String(), "paths from") })
	if !strings.Contains(log.String(), "adopted=1") {
		t.Fatalf("the installed destination was not adopted:\n%s", log)
	}
	// The adopted path gets its first hop's gateway from the host's routes.
	eventually(t, 3*time.Second, "the gateway in the path", func() bool {
		p := a.pinned(t)
		defer p.Close()
		all, _ := p.Paths()
		return len(all[remoteIA]) == 1 && all[remoteIA][0].Gateway == netip.MustParseAddr("10.101.0.254")
	})

	t.Run("scionproto's daemon down", func(t *testing.T) {
		if err := a.sendToNoPath(t, "to an AS without a path yet"); !errorsIs(err, syscall.ENETUNREACH) {
			t.Fatalf("read: %v, want ENETUNREACH (ICMPv6 no route from the daemon)", err)
		}
	})

	t.Run("offloads turned on again", func(t *testing.T) {
		setFeatures(t, a.host, a.cfg.Pair+"0", map[string]bool{"tx-tcp6-segmentation": true, "tx-checksum-ip-generic": true, "rx-gro": false})
		eventually(t, 5*time.Second, "offloads off again", func() bool {
			f := features(t, a.host, a.cfg.Pair+"0")
			return !f["tx-tcp6-segmentation"] && !f["tx-checksum-ip-generic"] && f["rx-gro"]
		})
		eventually(t, 3*time.Second, "offload_fixed counted", func() bool { return a.daemonCounts(t)["offload_fixed"] > 0 })
	})

	t.Run("device made anew", func(t *testing.T) {
		ipIn(t, a.host, "link", "del", "eth0")
		a.link(t)
		eventually(t, 5*time.Second, "tra_in on the new eth0", func() bool {
			before := a.counts(t)["translated_in"].Packets
			a.injectSCION(t, a.scionIn(t, "after the device came back"))
			time.Sleep(100 * time.Millisecond)
			return a.counts(t)["translated_in"].Packets > before
		})
		eventually(t, 3*time.Second, "reattached counted", func() bool { return a.daemonCounts(t)["reattached"] > 0 })
	})

	var daemon2 *exec.Cmd
	outer := t // the new daemon outlives the subtest
	t.Run("killed and started again", func(t *testing.T) {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		c := a.dialUDP(t, netip.AddrPortFrom(remote4SMIP, 31000))
		before := a.counts(t)["translated_out"].Packets
		for i := 0; i < 10; i++ {
			c.Write([]byte("while no daemon runs"))
		}
		eventually(t, 2*time.Second, "packets translated without a daemon", func() bool {
			return a.counts(t)["translated_out"].Packets >= before+10
		})
		cmd2, log2 := a.runDaemonIn(outer)
		eventually(t, 5*time.Second, "the new daemon's first line", func() bool { return strings.Contains(log2.String(), "paths from") })
		if !strings.Contains(log2.String(), "adopted=1") {
			t.Fatalf("not adopted:\n%s", log2)
		}
		if p := a.pinned(t); p != nil {
			defer p.Close()
			if all, _ := p.Paths(); len(all[remoteIA]) != 1 {
				t.Fatal("the installed path went")
			}
		}
		daemon2 = cmd2
	})

	// An operator detaches the translator: the daemon ends by itself, with
	// status 0, so that a service manager leaves it so.
	t.Run("detached under it", func(t *testing.T) {
		if daemon2 == nil {
			t.Skip("no daemon running")
		}
		if err := Detach(a.name); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- daemon2.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("tra run ended with %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("tra run still runs 5 s after the translator was detached")
		}
	})
}

// linkAttrs are a device's attributes (nil: no such device).
func linkAttrs(t *testing.T, ns, dev string) *netlink.LinkAttrs {
	t.Helper()
	h, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return nil
	}
	return l.Attrs()
}

// linkMTU is a device's MTU (0: no such device).
func linkMTU(t *testing.T, ns, dev string) int {
	if a := linkAttrs(t, ns, dev); a != nil {
		return a.MTU
	}
	return 0
}

// rxPackets is a device's received-packet count.
func rxPackets(t *testing.T, ns, dev string) uint64 {
	t.Helper()
	a := linkAttrs(t, ns, dev)
	if a == nil {
		t.Fatalf("no device %s", dev)
	}
	return a.Statistics.RxPackets
}

// The host's datagrams are translated at its own end of the pair, as it
// sends them, and never cross the pair; a TCP segment, whose checksum the
// kernel completes only as it crosses, crosses and is translated at the
// translator's end. Both leave as SCION, and each is translated once.
func TestTranslatedBeforeThePair(t *testing.T) {
	a := attachHost(t, "127.0.0.1:1")
	tap, err := capture.Open(xdp.Iface{Netns: a.net, Name: "gw0"})
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	trans := a.cfg.Pair + "1"
	before := rxPackets(t, a.host, trans)
	c := a.dialUDP(t, netip.AddrPortFrom(remote4SMIP, 31000))
	const n = 20
	for range n {
		if _, err := c.Write([]byte("translated as it is sent")); err != nil {
			t.Fatal(err)
		}
	}
	isUDP := func(f capture.Frame) bool { return scionTo(f) && len(f.Data) > 14+20+8+4 && f.Data[14+20+8+4] == 17 }
	deadline := time.Now().Add(3 * time.Second)
	for len(waitFrames(t, tap, 0, isUDP)) < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := len(waitFrames(t, tap, 0, isUDP)); got != n {
		t.Fatalf("%d SCION/UDP frames of %d datagrams; counters %v", got, n, a.counts(t))
	}
	if crossed := rxPackets(t, a.host, trans) - before; crossed != 0 {
		t.Fatalf("%d packets crossed the pair for %d datagrams translated at the host's end", crossed, n)
	}

	before = rxPackets(t, a.host, trans)
	netns.Run(a.host, func() error {
		d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: a.cfg.SMIP.AsSlice()}}
		if conn, err := d.Dial("tcp6", netip.AddrPortFrom(remote4SMIP, 31001).String()); err == nil {
			conn.Close()
		}
		return nil
	})
	isTCP := func(f capture.Frame) bool { return scionTo(f) && len(f.Data) > 14+20+8+4 && f.Data[14+20+8+4] == 6 }
	if len(waitFrames(t, tap, 3*time.Second, isTCP)) == 0 {
		t.Fatalf("no SCION/TCP frame for the SYN; counters %v", a.counts(t))
	}
	if crossed := rxPackets(t, a.host, trans) - before; crossed == 0 {
		t.Fatal("the SYN, its checksum pending at the host's end, did not cross the pair")
	}
	if got := a.counts(t)["translated_out"].Packets; got < n+1 {
		t.Fatalf("translated_out %d; want the %d datagrams and the SYN", got, n)
	}

	// An underlay without checksum offload completes a pending checksum in
	// software on the way out: the SYN is translated at the host's end,
	// and leaves with a checksum that is right for SCION.
	setFeatures(t, a.host, a.cfg.Device, map[string]bool{"tx-checksum-ip-generic": false})
	if _, err := Attach(a.cfg, AttachOptions{Netns: a.host}); err != nil {
		t.Fatal(err)
	}
	seen := len(waitFrames(t, tap, 0, isTCP))
	before = rxPackets(t, a.host, trans)
	netns.Run(a.host, func() error {
		d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: a.cfg.SMIP.AsSlice()}}
		if conn, err := d.Dial("tcp6", netip.AddrPortFrom(remote4SMIP, 31002).String()); err == nil {
			conn.Close()
		}
		return nil
	})
	var syn *capture.Frame
	for deadline := time.Now().Add(3 * time.Second); syn == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got := waitFrames(t, tap, 0, isTCP); len(got) > seen {
			syn = &got[seen]
		}
	}
	if syn == nil {
		t.Fatalf("no SCION/TCP frame for the SYN with the underlay's checksum offload off; counters %v", a.counts(t))
	}
	if crossed := rxPackets(t, a.host, trans) - before; crossed != 0 {
		t.Fatalf("%d packets crossed the pair; the underlay completes checksums, so the SYN is translated at the host's end", crossed)
	}
	var sc slayers.SCION
	if err := sc.DecodeFromBytes(syn.Data[14+20+8:], gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	if syn.Pending || checksum.Fold(checksum.Sum(sc.Payload, scionPseudoSum(&sc, len(sc.Payload), 6))) != 0xffff {
		t.Fatalf("the SYN left with a wrong or pending checksum (pending %v)", syn.Pending)
	}
}
