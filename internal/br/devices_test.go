package br

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The router on devices other than veths, as operators deploy it, with
// scionproto's router behind it: B's link behind a Linux bridge, a macvlan
// or a VXLAN device, none of which takes XDP frames; B behind a TAP
// device, which takes them in one buffer only; A and C on one link with
// worker CPUs set, so that what comes in leaves by the same device.

// kind rebuilds the bed's router side towards B (d1 and its address) so
// that the address sits on a device of that kind, and returns its name.
func (b *hostBed) kind(t *testing.T, kind string) string {
	t.Helper()
	bits := "/24"
	b.ip(t, b.dut, "addr", "del", b.d1Addr.String()+bits, "dev", "d1")
	dev := "k1"
	switch kind {
	case "bridge":
		b.ip(t, b.dut, "link", "add", dev, "type", "bridge")
		b.ip(t, b.dut, "link", "set", "d1", "master", dev)
	case "macvlan":
		b.ip(t, b.dut, "link", "add", dev, "link", "d1", "type", "macvlan", "mode", "bridge")
	case "vxlan":
		// The link is the underlay of a VXLAN between the two.
		b.ip(t, b.dut, "addr", "add", "10.20.0.2/24", "dev", "d1")
		b.ip(t, b.b, "addr", "del", b.bAddr.String()+bits, "dev", "b0")
		b.ip(t, b.b, "addr", "add", "10.20.0.1/24", "dev", "b0")
		b.ip(t, b.dut, "link", "add", dev, "type", "vxlan", "id", "42", "local", "10.20.0.2", "remote", "10.20.0.1", "dstport", "4789", "dev", "d1")
		b.ip(t, b.b, "link", "add", "kb", "type", "vxlan", "id", "42", "local", "10.20.0.1", "remote", "10.20.0.2", "dstport", "4789", "dev", "b0")
		b.ip(t, b.b, "addr", "add", b.bAddr.String()+bits, "dev", "kb")
		b.ip(t, b.b, "link", "set", "kb", "up")
		b.ip(t, b.dut, "neigh", "replace", "10.20.0.1", "lladdr", b.mac(t, b.b, "b0"), "dev", "d1", "nud", "permanent")
		b.ip(t, b.b, "neigh", "replace", "10.20.0.2", "lladdr", b.mac(t, b.dut, "d1"), "dev", "b0", "nud", "permanent")
	default:
		t.Fatalf("no device kind %q", kind)
	}
	b.ip(t, b.dut, "addr", "add", b.d1Addr.String()+bits, "dev", dev)
	b.ip(t, b.dut, "link", "set", dev, "up")
	bDev := "b0"
	if kind == "vxlan" {
		bDev = "kb"
	}
	b.ip(t, b.dut, "neigh", "replace", b.bAddr.String(), "lladdr", b.mac(t, b.b, bDev), "dev", dev, "nud", "permanent")
	b.ip(t, b.b, "neigh", "replace", b.d1Addr.String(), "lladdr", b.mac(t, b.dut, dev), "dev", bDev, "nud", "permanent")
	return dev
}

// fromB are n transit datagrams from B across the router to A (parent to
// child, along construction), as B's socket sends them.
func (b *hostBed) fromB(t *testing.T, n int) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		p := SCIONPacket{
			Path:  PathSpec{Segments: []Segment{seg2(true, 1, [2]uint16{0, 21}, [2]uint16{2, 1}, [2]uint16{11, 0})}, CurrHF: 1},
			Key:   b.cfg.Keys[0],
			SrcIA: addr.MustParseIA("1-ff00:0:100"), DstIA: addr.MustParseIA("1-ff00:0:111"),
			SrcHost: addr.MustParseHost("198.51.100.1"), DstHost: addr.MustParseHost("203.0.113.1"),
			SrcPort: uint16(20000 + i), DstPort: 9, Payload: []byte(fmt.Sprintf("from B, %d", i)),
			UnderlaySrc: netip.AddrPortFrom(b.bAddr, 50000), UnderlayDst: netip.AddrPortFrom(b.d1Addr, 50000),
		}
		f, err := p.Frame()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = scionPayload(f)
	}
	return out
}

// attachAsOperator attaches the router as `br serve` does without named
// devices: to the devices holding its addresses, falling back to generic
// mode where native XDP is refused. It returns the pin name and warnings.
func (b *hostBed) attachAsOperator(t *testing.T) (string, string) {
	t.Helper()
	name := strings.TrimSuffix(b.dut, "dut") + "br"
	var w strings.Builder
	if err := Attach(b.cfg, AttachOptions{Netns: b.dut, Name: name, Log: textLog(&w)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Detach(name, nil) })
	return name, w.String()
}

// A frame the native program would redirect into a device without an XDP
// transmit is dropped by the kernel (before: counted forwarded, then
// tx_failed, and lost); the router leaves it to the reference router, which
// sends it, and every datagram arrives. What comes in by the device (its
// program runs in generic mode) leaves by a veth in XDP.
func TestDevicesThatTakeNoXDPFrames(t *testing.T) {
	for _, kind := range []string{"bridge", "macvlan", "vxlan"} {
		t.Run(kind, func(t *testing.T) {
			b := newHostBed(t, false)
			dev := b.kind(t, kind)
			ref, err := StartReferenceRouter(ReferenceVersion, b.dut, "br1", b.dir, netip.AddrPortFrom(b.d0Addr, 30042).String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ref.Stop)
			name, warnings := b.attachAsOperator(t)
			if !strings.Contains(warnings, fmt.Sprintf("%s/%s is a %s device, which takes no XDP frames", b.dut, dev, kind)) {
				t.Fatalf("attach warned:\n%s", warnings)
			}
			if m, err := xdp.AttachedMode(xdp.Iface{Netns: b.dut, Name: dev}); err != nil || m != xdp.Generic {
				t.Fatalf("%s attached %q (%v), want generic", dev, m, err)
			}
			const n = 20
			atB := listen(t, b.b, netip.AddrPortFrom(b.bAddr, 50000))
			before := verdicts(t, name)
			send(t, b.a, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), b.transit(t, n))
			got := atB.await(n)
			v := verdicts(t, name)
			if len(got) != n || v["tx_unusable"]-before["tx_unusable"] != n || v["forwarded"] != before["forwarded"] || v["tx_failed"] != 0 {
				t.Fatalf("A to B through %s: %d of %d arrived; verdicts %v; reference router:\n%s", kind, len(got), n, v, ref.Logs.String())
			}
			// B to A: in by the device (the generic copy), out by d0 in XDP.
			atA := listen(t, b.a, netip.AddrPortFrom(b.aAddr, 50000))
			atB.send(t, netip.AddrPortFrom(b.d1Addr, 50000), b.fromB(t, n))
			got = atA.await(n)
			after := verdicts(t, name)
			if len(got) != n || after["forwarded"]-v["forwarded"] != n || after["tx_failed"] != 0 {
				t.Fatalf("B to A from %s: %d of %d arrived; verdicts %v", kind, len(got), n, after)
			}
		})
	}
}

// openTap creates a TAP device in ns and keeps it open (it has carrier
// while a process holds it): its frames are read from the returned file.
func openTap(t *testing.T, ns, name string) *os.File {
	t.Helper()
	var f *os.File
	if err := netns.Run(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		f = os.NewFile(uintptr(fd), "/dev/net/tun")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// tapFrames reads the UDP payloads sent to port on the TAP device until
// n came or a second passed.
func tapFrames(t *testing.T, f *os.File, port uint16, n int) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]byte, 65536)
	deadline := time.Now().Add(time.Second)
	for len(out) < n {
		f.SetReadDeadline(deadline)
		k, err := f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pkt := gopacket.NewPacket(buf[:k], layers.LayerTypeEthernet, gopacket.NoCopy)
		if u, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && uint16(u.DstPort) == port {
			out = append(out, append([]byte(nil), u.Payload...))
		}
	}
	return out
}

// A TAP device takes XDP frames in one buffer only (no ndo_xdp_xmit
// scatter-gather): a jumbo frame, which arrives in several, redirected
// there is refused by the kernel (before: tx_failed, lost). The router
// forwards what fits in XDP and leaves the jumbo frames to the reference
// router, which sends them.
func TestJumboFramesToADeviceWithoutScatterGather(t *testing.T) {
	b := newHostBed(t, false)
	// B is reached by a TAP device that the test holds open.
	b.ip(t, b.dut, "addr", "del", b.d1Addr.String()+"/24", "dev", "d1")
	tap := openTap(t, b.dut, "t1")
	for _, ns := range []struct{ ns, dev string }{{b.a, "a0"}, {b.dut, "d0"}, {b.dut, "t1"}} {
		b.ip(t, ns.ns, "link", "set", ns.dev, "mtu", "9000")
	}
	b.ip(t, b.dut, "addr", "add", b.d1Addr.String()+"/24", "dev", "t1")
	b.ip(t, b.dut, "link", "set", "t1", "up")
	b.ip(t, b.dut, "neigh", "replace", b.bAddr.String(), "lladdr", "02:00:00:00:0b:0b", "dev", "t1", "nud", "permanent")
	ref, err := StartReferenceRouter(ReferenceVersion, b.dut, "br1", b.dir, netip.AddrPortFrom(b.d0Addr, 30042).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ref.Stop)
	tx, why, err := xdp.TxState(xdp.Iface{Netns: b.dut, Name: "t1"})
	if err != nil || !tx.Frames || tx.MultiBuffer {
		t.Fatalf("the TAP device takes %+v (%s, %v); want frames in one buffer only", tx, why, err)
	}
	name, warnings := b.attachAsOperator(t)
	if !strings.Contains(warnings, "in one buffer only") {
		t.Fatalf("attach warned:\n%s", warnings)
	}
	const n = 10
	for _, size := range []int{200, 8000} {
		before := verdicts(t, name)
		send(t, b.a, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), b.transitOfSize(t, n, size))
		got := tapFrames(t, tap, 50000, n)
		v := verdicts(t, name)
		want := "forwarded"
		if size > 4096 {
			want = "tx_no_sg"
		}
		if len(got) != n || v[want]-before[want] != n || v["tx_failed"] != 0 {
			t.Fatalf("%d-byte frames: %d of %d left by the TAP device; verdicts %v, want %d more %s", size, len(got), n, v, n, want)
		}
	}
}

// lanBed is A and C on one link with the router (one device, d0): what
// the router forwards between them leaves by the device it came in by.
type lanBed struct {
	*hostBed
	lan   string // the link's namespace: a bridge joining l0 (A), l1 (C), l2 (the router's d0)
	cAddr netip.Addr
}

func newLanBed(t *testing.T, cpus []int) *lanBed {
	t.Helper()
	hb := newHostBed(t, false)
	b := &lanBed{hostBed: hb, lan: strings.TrimSuffix(hb.dut, "dut") + "lan", cAddr: netip.MustParseAddr("10.1.0.3")}
	if err := netns.Create(b.lan); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(b.lan) })
	// A (a0) and the router (d0) move onto the bridge; C is B's namespace
	// on it too.
	mustRun(t, "ip", "-n", b.a, "link", "del", "a0")
	mustRun(t, "ip", "-n", b.dut, "link", "del", "d1")
	b.ip(t, b.lan, "link", "add", "lan", "type", "bridge")
	b.ip(t, b.lan, "link", "set", "lan", "up")
	for _, e := range []struct{ ns, dev, port string }{{b.a, "a0", "l0"}, {b.b, "b0", "l1"}, {b.dut, "d0", "l2"}} {
		mustRun(t, "ip", "link", "add", e.dev, "netns", e.ns, "type", "veth", "peer", "name", e.port, "netns", b.lan)
		b.ip(t, b.lan, "link", "set", e.port, "master", "lan")
		b.ip(t, b.lan, "link", "set", e.port, "up")
		b.ip(t, e.ns, "link", "set", e.dev, "up")
	}
	// The router's frames go back into the bridge by l2: its GRO takes them.
	b.setGRO(t, b.lan, "l2", true)
	b.ip(t, b.a, "addr", "add", "10.1.0.1/24", "dev", "a0")
	b.ip(t, b.dut, "addr", "add", "10.1.0.2/24", "dev", "d0")
	b.ip(t, b.b, "addr", "add", "10.1.0.3/24", "dev", "b0")
	// Plain IP for 10.9.0.0/24 (C's loopback) goes from A through the
	// router, which sends it back onto the link to C.
	b.ip(t, b.b, "addr", "add", "10.9.0.5/32", "dev", "lo")
	b.ip(t, b.a, "route", "add", "10.9.0.0/24", "via", "10.1.0.2")
	b.ip(t, b.dut, "route", "add", "10.9.0.0/24", "via", "10.1.0.3")
	b.ip(t, b.b, "route", "add", "10.1.0.0/16", "dev", "b0")
	b.sysctl(t, b.dut, "net.ipv4.conf.all.forwarding", "1")
	b.sysctl(t, b.dut, "net.ipv4.conf.d0.forwarding", "1")
	b.sysctl(t, b.dut, "net.ipv4.conf.all.send_redirects", "0")
	b.sysctl(t, b.dut, "net.ipv4.conf.d0.send_redirects", "0")
	for _, h := range []struct{ ns, dev, ip string }{{b.a, "a0", "10.1.0.1"}, {b.dut, "d0", "10.1.0.2"}, {b.b, "b0", "10.1.0.3"}} {
		for _, o := range []struct{ ns, dev string }{{b.a, "a0"}, {b.dut, "d0"}, {b.b, "b0"}} {
			if o.ns != h.ns {
				b.ip(t, o.ns, "neigh", "replace", h.ip, "lladdr", b.mac(t, h.ns, h.dev), "dev", o.dev, "nud", "permanent")
			}
		}
	}
	b.aAddr, b.d0Addr, b.bAddr = netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), b.cAddr
	// Interface 1 (child A) and 2 (parent C) on the router's one device.
	topo := fmt.Sprintf(`{
  "isd_as": "1-ff00:0:110", "mtu": 1472, "dispatched_ports": "31000-32767", "attributes": [],
  "border_routers": {
    "br1": {
      "internal_addr": "10.1.0.2:30042",
      "interfaces": {
        "1": {"underlay": {"local": "10.1.0.2:50000", "remote": "10.1.0.1:50000"}, "isd_as": "1-ff00:0:111", "link_to": "child", "mtu": 1472},
        "2": {"underlay": {"local": "10.1.0.2:50001", "remote": "10.1.0.3:50000"}, "isd_as": "1-ff00:0:100", "link_to": "parent", "mtu": 1472}
      }
    }
  }
}`)
	if err := os.WriteFile(filepath.Join(b.dir, "topology.json"), []byte(topo), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgText := fmt.Sprintf("router_id = \"br1\"\ntopology = \"topology.json\"\nkeys = \"keys\"\nforward_ip = true\ncpus = %s\n", strings.ReplaceAll(fmt.Sprint(cpus), " ", ", "))
	if err := os.WriteFile(filepath.Join(b.dir, "br.toml"), []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(filepath.Join(b.dir, "br.toml"))
	if err != nil {
		t.Fatal(err)
	}
	b.cfg = cfg
	return b
}

// Worker CPUs run the router in a CPU map, where XDP_TX is no action: a
// frame that leaves by the device it came in by (a one-armed router, hosts
// on the external link's device) was dropped there, and counted forwarded.
// SCION transit and plain IP between two hosts on the router's one link
// arrive, whether the router runs on the receiving CPU or on workers.
func TestLeavingByTheArrivalDevice(t *testing.T) {
	for _, cpus := range [][]int{nil, {0, 1}} {
		t.Run(fmt.Sprintf("cpus %v", cpus), func(t *testing.T) {
			b := newLanBed(t, cpus)
			name := strings.TrimSuffix(b.dut, "dut") + "br"
			if err := Attach(b.cfg, AttachOptions{Devices: []xdp.Iface{{Netns: b.dut, Name: "d0"}}, Name: name, NoFallback: true}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { Detach(name, nil) })
			const n = 20
			atC := listen(t, b.b, netip.AddrPortFrom(b.cAddr, 50000))
			send(t, b.a, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), b.transit(t, n))
			got := atC.await(n)
			if v := verdicts(t, name); len(got) != n || v["forwarded"] != n {
				t.Fatalf("SCION A to C: %d of %d arrived; verdicts %v", len(got), n, v)
			}
			mustRun(t, "ip", "netns", "exec", b.a, "ping", "-n", "-q", "-c", "5", "-i", "0.05", "-W", "1", "10.9.0.5")
			if ip := ipTotals(t, name); ip["forwarded"] < 5 {
				t.Fatalf("plain IP A to C: forwarder's counts %v, want the 5 echo requests forwarded", ip)
			}
		})
	}
}

// A next hop the router cached (for half a second) holds the devices'
// generation it was found usable under: a device that stopped taking XDP
// frames since (the keeper writes br_devs, then a new generation) leaves
// the next packet to the reference router, also one whose CPU looked the
// device up just before the change and cached it after (before, the keeper
// cleared the cache, which such a CPU refilled for half a second of lost
// frames). A device missing from the redirect map (the keeper takes it out
// of br_devs first, then from the map) drops the rewritten frame and counts
// it tx_failed, not forwarded (before: aborted, and counted forwarded).
func TestCachedNextHopFollowsTheDevice(t *testing.T) {
	tb := labtest.Testbed(t)
	cfg := labConfig(t)
	pkts, err := TransitPackets(cfg, TransitOptions{Count: 1, Size: 138, SrcMAC: tb.Gen().MAC, DstMAC: tb.DUTIn().MAC})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Load(cfg, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dut := tb.DUTIn().Netns
	if err := r.SetHost(dut, []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}); err != nil {
		t.Fatal(err)
	}
	out, err := xdp.Lookup(tb.DUTOut().Iface())
	if err != nil {
		t.Fatal(err)
	}
	run := func() result {
		t.Helper()
		var res result
		if err := netns.Run(dut, func() error { res = r.runOne(t, pkts[0]); return nil }); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run(); res.verdict != "forwarded" || res.action != xdpRedirect {
		t.Fatalf("first packet: %s (%d), want forwarded by a redirect", res.verdict, res.action)
	}
	m := r.hostMaps()
	devs, err := m.readDevs()
	if err != nil {
		t.Fatal(err)
	}
	set := func(flags uint16) {
		t.Helper()
		for _, d := range devs {
			if d.Ifindex == uint32(out.Index) {
				d.Flags = flags
				if err := m.devs.Put(d.Ifindex%devSlots, d); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatalf("%s not in br_devs: %+v", tb.DUTOut().Iface(), devs)
	}
	ready := uint16(routerBrDevFlagsBR_DEV_XMIT | routerBrDevFlagsBR_DEV_XMIT_SG | routerBrDevFlagsBR_DEV_UP)
	set(uint16(routerBrDevFlagsBR_DEV_UP))
	if res := run(); res.verdict != "forwarded" {
		t.Fatalf("cached next hop before the new generation: %s, want forwarded (what the cache was told)", res.verdict)
	}
	if err := newGeneration(m.vars, varDevsGen); err != nil {
		t.Fatal(err)
	}
	if res := run(); res.verdict != "tx_unusable" || res.action != xdpPass {
		t.Fatalf("cached next hop on a device that takes no XDP frames now: %s (%d), want tx_unusable", res.verdict, res.action)
	}
	set(ready)
	if err := netns.Run(dut, func() error { return r.objs.TxPorts.Delete(uint32(out.Index)) }); err != nil {
		t.Fatal(err)
	}
	if res := run(); res.verdict != "tx_failed" || res.action != xdpDrop {
		t.Fatalf("device gone from the redirect map: %s (%d), want tx_failed and a drop", res.verdict, res.action)
	}
}

// attachedRouter is the program attached to a device of the router, for
// test runs as if frames came in by any of its devices.
func attachedRouter(t *testing.T, name string, d xdp.Iface) *ebpf.Program {
	t.Helper()
	p, err := xdp.PinnedProgram(filepath.Join(PinDir(name), xdp.LinkPinName(d)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Each socket's traffic arrives by the device it is reached by: internal_addr's
// by a device facing the AS, an external interface's by the device its
// neighbour is reached by. A neighbour that sends to internal_addr over its
// external link (with a sibling's source, say), or to another interface's
// socket with that neighbour's source, is what a strict reverse-path check
// drops: it goes to the kernel, which decides as it would for the reference
// router (before, the router took it as if it had come the right way).
func TestTrafficByAnotherDevice(t *testing.T) {
	b := newHostBed(t, false)
	name, _ := b.attach(t, XDPModeNative)
	prog := attachedRouter(t, name, xdp.Iface{Netns: b.dut, Name: "d1"})
	d0, err := xdp.Lookup(xdp.Iface{Netns: b.dut, Name: "d0"})
	if err != nil {
		t.Fatal(err)
	}
	d1, err := xdp.Lookup(xdp.Iface{Netns: b.dut, Name: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	bMAC, _ := net.ParseMAC(b.mac(t, b.b, "b0"))
	aMAC, _ := net.ParseMAC(b.mac(t, b.a, "a0"))
	frame := func(src, dst netip.AddrPort, srcMAC, dstMAC net.HardwareAddr) []byte {
		f := b.transit(t, 1)[0]
		out, err := Underlay(srcMAC, dstMAC, src, dst, f)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	run := func(in int, f []byte) (uint32, string) {
		t.Helper()
		before := verdicts(t, name)
		var ret uint32
		if err := netns.Run(b.dut, func() error {
			var err error
			ret, err = prog.Run(&ebpf.RunOptions{Data: f, DataOut: make([]byte, len(f)+256), Context: xdpMd{DataEnd: uint32(len(f)), IngressIfindex: uint32(in)}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		after := verdicts(t, name)
		for v, n := range after {
			if n != before[v] {
				return ret, v
			}
		}
		return ret, "none"
	}
	for _, c := range []struct {
		name     string
		in       int // the arrival device's index
		src, dst netip.AddrPort
		srcMAC   net.HardwareAddr
		want     string
	}{
		{"A to interface 1, by d0", d0.Index, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), aMAC, "forwarded"},
		{"A's source to interface 1, by d1 (B's link)", d1.Index, netip.AddrPortFrom(b.aAddr, 50000), netip.AddrPortFrom(b.d0Addr, 50000), bMAC, "wrong_device"},
		{"to internal_addr by d1 (B's link alone)", d1.Index, netip.AddrPortFrom(b.aAddr, 30042), netip.AddrPortFrom(b.d0Addr, 30042), bMAC, "wrong_device"},
	} {
		dstMAC := d0.HardwareAddr
		if c.in == d1.Index {
			dstMAC = d1.HardwareAddr
		}
		if ret, v := run(c.in, frame(c.src, c.dst, c.srcMAC, dstMAC)); v != c.want || (c.want == "wrong_device" && ret != xdpPass) {
			t.Errorf("%s: %s (action %d), want %s", c.name, v, ret, c.want)
		}
	}
}
