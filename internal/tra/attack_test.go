package tra

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path/scion"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The translator in the lab's SCION network against what a machine on the
// AS's internal network can send it, the router's own address included,
// and against a remote link that dies under TCP.

// wire is the AS's internal network as seen from its router's namespace:
// frames sent there reach the translated host's device.
type wire struct {
	ns       string
	ifindex  int
	src, dst net.HardwareAddr
}

func internalWire(t *testing.T, a scionlab.AS) wire {
	t.Helper()
	in, err := xdp.Lookup(xdp.Iface{Netns: a.Netns, Name: scionlab.InternalDev})
	if err != nil {
		t.Fatal(err)
	}
	host, err := xdp.Lookup(xdp.Iface{Netns: a.HostNetns, Name: scionlab.HostDev})
	if err != nil {
		t.Fatal(err)
	}
	return wire{ns: a.Netns, ifindex: in.Index, src: in.HardwareAddr, dst: host.HardwareAddr}
}

// send sends SCION bytes in UDP/IPv4 from an address of the caller's
// choosing, as a machine that lies about its address can.
func (w wire) send(t *testing.T, from, to netip.AddrPort, scionBytes ...[]byte) {
	t.Helper()
	if err := netns.Run(w.ns, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, b := range scionBytes {
			eth := &layers.Ethernet{SrcMAC: w.src, DstMAC: w.dst, EthernetType: layers.EthernetTypeIPv4}
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: from.Addr().AsSlice(), DstIP: to.Addr().AsSlice()}
			u := &layers.UDP{SrcPort: layers.UDPPort(from.Port()), DstPort: layers.UDPPort(to.Port())}
			u.SetNetworkLayerForChecksum(ip)
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, u, gopacket.Payload(b)); err != nil {
				return err
			}
			f := buf.Bytes()
			if err := unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: w.ifindex, Halen: 6, Addr: [8]byte{f[0], f[1], f[2], f[3], f[4], f[5]}}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// scionPacket serializes a SCION packet with the given hosts, path and L4.
func scionPacket(t *testing.T, srcIA, dstIA addr.IA, src, dst addr.Host, raw []byte, l4 ...gopacket.SerializableLayer) []byte {
	t.Helper()
	s := &slayers.SCION{Version: 0, SrcIA: srcIA, DstIA: dstIA}
	if err := s.SetSrcAddr(src); err != nil {
		t.Fatal(err)
	}
	if err := s.SetDstAddr(dst); err != nil {
		t.Fatal(err)
	}
	return serializeSCION(t, s, raw, l4...)
}

func (h *host) alive(t *testing.T) bool {
	t.Helper()
	return h.cmd.ProcessState == nil && h.cmd.Process.Signal(syscall.Signal(0)) == nil
}

func (h *host) pingOK(t *testing.T, to netip.Addr, n int) {
	t.Helper()
	out, err := h.command(t, "ping", "-6", "-c", fmt.Sprint(n), "-i", "0.2", "-W", "2", to.String())
	if got := received(t, out); got != n || err != nil {
		t.Fatalf("%d of %d echo replies (%v):\n%s", got, n, err, out)
	}
}

// Crafted packets from the AS's internal network: a quote of service
// addresses (the packet that stopped tra run), an empty path claiming
// another AS, a burst of interface-down messages about paths not in use.
// Nothing ends the daemon, nothing spoofed reaches the host, new flows go on.
func TestCraftedPacketsFromTheAS(t *testing.T) {
	n, as := labNetwork(t)
	a, b := translate(t, as[1], hostOptions{}), translate(t, as[2], hostOptions{})
	a.pingOK(t, b.smip, 2)
	w := internalWire(t, a.as)
	router := a.as.RouterInternal()
	hostPort := netip.AddrPortFrom(a.as.Host, 30041)
	raw := a.pathTo(t, b.as.IA)[0].Raw

	// The 104-byte packet: an SCMP destination unreachable whose quote has
	// service addresses, from a machine of the AS and from the router's own
	// address with a standard path, as a router delivers it.
	quote := scionPacket(t, b.as.IA, a.as.IA, addr.HostSVC(addr.SvcCS), addr.HostSVC(addr.SvcDS), nil, &slayers.UDP{SrcPort: 1, DstPort: 2})
	svc := scionPacket(t, b.as.IA, a.as.IA, addr.HostIP(b.as.Host), addr.HostIP(a.as.Host), raw,
		&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeDestinationUnreachable, 0)}, &slayers.SCMPDestinationUnreachable{}, gopacket.Payload(quote))
	spoofedBefore := a.counts(t)["spoofed"].Packets
	w.send(t, netip.MustParseAddrPort("10.101.0.77:30042"), hostPort, svc)
	w.send(t, router, hostPort, svc)
	time.Sleep(500 * time.Millisecond)
	if !a.alive(t) {
		t.Fatal("tra run ended on a crafted SCMP error")
	}
	if got := a.counts(t)["spoofed"].Packets; got != spoofedBefore+1 {
		t.Fatalf("spoofed %d, want %d (the copy from 10.101.0.77)", got, spoofedBefore+1)
	}

	// An empty path from a machine of the AS, claiming to be a host of
	// another AS: nothing reaches the host's socket.
	srv := a.udpListen(t, 31900)
	fake := scionPacket(t, b.as.IA, a.as.IA, addr.HostIP(b.as.Host), addr.HostIP(a.as.Host), nil, &slayers.UDP{SrcPort: 31900, DstPort: 31900}, gopacket.Payload("from another AS, trust me"))
	w.send(t, netip.MustParseAddrPort("10.101.0.77:30041"), netip.AddrPortFrom(a.as.Host, 31900), fake)
	w.send(t, router, netip.AddrPortFrom(a.as.Host, 31900), fake)
	srv.SetReadDeadline(time.Now().Add(time.Second))
	if k, from, err := srv.ReadFromUDP(make([]byte, 100)); err == nil {
		t.Fatalf("a spoofed datagram of %d bytes reached the host from %s", k, from)
	}

	// A port outside dispatched_ports: from v0.14.0 a router delivers
	// there, and the translator takes SCION there from the router alone;
	// the same datagram from another machine, or with the empty path from
	// a host of the AS, is the host's own UDP: the kernel's, untranslated,
	// from its real sender — never as if from the far host. With v0.12.0
	// routers nothing is taken there.
	toPort := !scionproto.RouterOf(n.Version()).RedirectOutsideRange
	far := a.udpListen(t, 5005)
	genuine := scionPacket(t, b.as.IA, a.as.IA, addr.HostIP(b.as.Host), addr.HostIP(a.as.Host), raw, &slayers.UDP{SrcPort: 5005, DstPort: 5005}, gopacket.Payload("from the router"))
	local := scionPacket(t, a.as.IA, a.as.IA, addr.HostIP(a.as.Internal), addr.HostIP(a.as.Host), nil, &slayers.UDP{SrcPort: 5005, DstPort: 5005}, gopacket.Payload("from a host of the AS"))
	spoofedBefore = a.counts(t)["spoofed"].Packets
	w.send(t, netip.MustParseAddrPort("10.101.0.77:30042"), netip.AddrPortFrom(a.as.Host, 5005), genuine)
	w.send(t, netip.AddrPortFrom(a.as.Internal, 30041), netip.AddrPortFrom(a.as.Host, 5005), local)
	w.send(t, router, netip.AddrPortFrom(a.as.Host, 5005), genuine)
	buf := make([]byte, 100)
	far.SetReadDeadline(time.Now().Add(time.Second))
	k, from, err := far.ReadFromUDP(buf)
	switch {
	case toPort && (err != nil || string(buf[:k]) != "from the router" || !from.IP.Equal(b.smip.AsSlice())):
		t.Fatalf("scionproto %s: from the router to port 5005: %q from %v (%v), want the datagram from %s", n.Version(), buf[:k], from, err, b.smip)
	case !toPort && err == nil:
		t.Fatalf("scionproto %s: a datagram of %d bytes taken on port 5005 from %s", n.Version(), k, from)
	}
	for {
		far.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		k, from, err := far.ReadFromUDP(buf)
		if err != nil {
			break
		}
		if from.IP.Equal(b.smip.AsSlice()) {
			t.Fatalf("a forged datagram %q reached the host's port 5005 as if from %s", buf[:k], from)
		}
	}
	if got := a.counts(t)["spoofed"].Packets; got != spoofedBefore {
		t.Fatalf("spoofed %d, want %d: what another machine sends to a port that is not SCION's is the host's own", got, spoofedBefore)
	}

	// 2,000 interface-down messages from the router's address: about a
	// path the host never used, and about the path in use but another
	// AS's interface. Believed: none. A new flow's first packets: all kept.
	own := scionPacket(t, a.as.IA, b.as.IA, addr.HostIP(a.as.Host), addr.HostIP(b.as.Host), raw, &slayers.UDP{SrcPort: 40000, DstPort: 31000})
	other := append([]byte(nil), raw...)
	other[len(other)-1] ^= 0xff // another MAC: another path
	alien := scionPacket(t, a.as.IA, b.as.IA, addr.HostIP(a.as.Host), addr.HostIP(b.as.Host), other, &slayers.UDP{SrcPort: 40000, DstPort: 31000})
	var burst [][]byte
	for i := 0; i < 2000; i++ {
		q, ifid := alien, uint64(1)
		if i%2 == 1 {
			q, ifid = own, 999
		}
		m := make([]byte, 16)
		binary.BigEndian.PutUint64(m[0:], uint64(as[0].IA))
		binary.BigEndian.PutUint64(m[8:], ifid)
		burst = append(burst, scionPacket(t, as[0].IA, a.as.IA, addr.HostIP(as[0].Internal), addr.HostIP(a.as.Host), raw,
			&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeExternalInterfaceDown, 0)}, gopacket.Payload(append(m, q...))))
	}
	before := a.counts(t)
	pathsBefore := a.pathTo(t, b.as.IA)
	w.send(t, router, hostPort, burst...)
	// A new destination during the burst: the core AS's host.
	core, err := FromSCION(as[0].IA, as[0].Host)
	if err != nil {
		t.Fatal(err)
	}
	a.pingOK(t, core, 3)
	time.Sleep(time.Second)
	after := a.counts(t)
	if after["queue_full"].Packets != before["queue_full"].Packets && after["no_path"].Packets == before["no_path"].Packets {
		t.Fatalf("held packets lost to the burst: %v", after)
	}
	now := a.pathTo(t, b.as.IA)
	if len(now) != len(pathsBefore) || pathSignature(now[0].Raw) != pathSignature(pathsBefore[0].Raw) {
		t.Fatal("spoofed interface-down messages moved the paths")
	}
	if !a.alive(t) {
		t.Fatal("tra run ended")
	}
	dc := a.daemonCounts(t)
	if dc["interface_down"] != 0 || dc["scmp_ignored"] == 0 || dc["panics"] != 0 {
		t.Fatalf("daemon counters %v: want every interface down ignored, no panic", dc)
	}
	t.Logf("burst: scmp_error %d, queue_full %d; daemon: scmp_ignored %d, bad_event %d", after["scmp_error"].Packets-before["scmp_error"].Packets,
		after["queue_full"].Packets-before["queue_full"].Packets, dc["scmp_ignored"], dc["bad_event"])
	a.pingOK(t, b.smip, 3)
}

func (h *host) daemonCounts(t *testing.T) map[string]uint64 {
	t.Helper()
	p, err := OpenPinned(h.name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	time.Sleep(1200 * time.Millisecond) // the daemon writes them each second
	c, err := p.DaemonCounts()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// iperfIntervals are the bytes a client sent in each interval of its run.
type iperfResult struct {
	Intervals []struct {
		Sum struct {
			Start, End float64
			Bytes      uint64
		} `json:"sum"`
	} `json:"intervals"`
	End struct {
		SumReceived struct {
			Bytes uint64 `json:"bytes"`
		} `json:"sum_received"`
	} `json:"end"`
}

// TCP fails over without any SCMP: the remote link a TCP flow's path
// crosses goes down in the middle of an iperf3 transfer (scionproto's
// routers, every release, drop the SCMP errors that quote TCP on their way
// to the host);
// the translators' probes find the path dead and move the flow. The
// transfer completes, with a gap of at most 2 s.
func TestTCPFailoverWithoutSCMP(t *testing.T) {
	n, as := labNetwork(t)
	a, b := translate(t, as[1], hostOptions{maxPaths: 1}), translate(t, as[2], hostOptions{maxPaths: 1})
	a.pingOK(t, b.smip, 2)
	b.pingOK(t, a.smip, 2)
	paths := a.pathTo(t, b.as.IA)
	if len(paths) != 1 {
		t.Fatalf("%d paths", len(paths))
	}
	var dec scion.Decoded
	if err := dec.DecodeFromBytes(paths[0].Raw); err != nil {
		t.Fatal(err)
	}
	// The last hop is b's: its ingress interface is the link the core
	// sends the flow on. Failover needs the other link known both ways.
	last := dec.HopFields[len(dec.HopFields)-1]
	ifid := last.ConsIngress
	if !dec.InfoFields[len(dec.InfoFields)-1].ConsDir {
		ifid = last.ConsEgress
	}
	awaitAlternative(t, n, a.as, b.as, fmt.Sprintf("%d %s]", ifid, b.as.IA))
	awaitAlternative(t, n, b.as, a.as, fmt.Sprintf("[%s %d>", b.as.IA, ifid))

	srv := exec.Command("iperf3", "-s", "-1", "-B", b.smip.String(), "-p", "5301")
	if err := netns.Run(b.ns, srv.Start); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	time.Sleep(300 * time.Millisecond)
	cli := exec.Command("iperf3", "-c", b.smip.String(), "-p", "5301", "-t", "8", "-i", "0.1", "-J")
	var out strings.Builder
	cli.Stdout = &out
	if err := netns.Run(a.ns, cli.Start); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	dev := fmt.Sprintf("if%d", ifid)
	downAt := time.Now()
	if o, err := exec.Command("ip", "-n", b.as.Netns, "link", "set", dev, "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s down: %v: %s", dev, err, o)
	}
	t.Cleanup(func() { exec.Command("ip", "-n", b.as.Netns, "link", "set", dev, "up").Run() })
	err := cli.Wait()
	var r iperfResult
	if jerr := json.Unmarshal([]byte(out.String()), &r); jerr != nil || err != nil {
		t.Fatalf("iperf3: %v %v\n%s", err, jerr, out.String())
	}
	// The gap: the longest run of intervals in which the sender moved
	// next to nothing, from the link's going down on.
	var peak uint64
	for _, iv := range r.Intervals {
		peak = max(peak, iv.Sum.Bytes)
	}
	var gap, run float64
	for _, iv := range r.Intervals {
		if iv.Sum.Bytes < peak/20 {
			run += iv.Sum.End - iv.Sum.Start
			gap = max(gap, run)
		} else {
			run = 0
		}
	}
	after := a.pathTo(t, b.as.IA)
	t.Logf("link %s of %s down 3 s into 8: transfer of %d MB completed, longest stall %.1f s; a's daemon %v; b's %v",
		dev, b.as.IA, r.End.SumReceived.Bytes>>20, gap, a.daemonCounts(t), b.daemonCounts(t))
	for _, h := range []*host{a, b} {
		if log, err := os.ReadFile(h.log); err == nil {
			t.Logf("daemon of %s:\n%s", h.as.IA, log)
		}
	}
	t.Logf("link down at %s", downAt.Format("15:04:05.000"))
	if r.End.SumReceived.Bytes == 0 || gap > 2.0 {
		t.Fatalf("stall of %.1f s (at most 2 s), %d bytes received", gap, r.End.SumReceived.Bytes)
	}
	if len(after) != 1 || pathSignature(after[0].Raw) == pathSignature(paths[0].Raw) {
		t.Fatal("a's path still crosses the link that went down")
	}
}
