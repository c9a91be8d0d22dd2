package fw

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// hostPolicy is what a host firewall starts from: the host's own
// connections and their answers, SSH in, nothing else in.
var hostPolicy = servicePolicy("tcp", 22)

// hostBed is a host (namespace h, device h0, the firewall on it) and a peer
// on the other end of a veth (namespace p, device p0), IPv4 and IPv6, with
// static neighbours (the policy has no rule for neighbour discovery).
type hostBed struct {
	host, peer       string
	host4, peer4     net.IP
	host6, peer6     net.IP
	hostMAC, peerMAC string
}

func newHostBed(t *testing.T) *hostBed {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	id := fmt.Sprintf("%d", os.Getpid()%100000)
	b := &hostBed{host: "fp-h" + id, peer: "fp-p" + id,
		host4: net.ParseIP("10.77.0.1"), peer4: net.ParseIP("10.77.0.2"),
		host6: net.ParseIP("fd77::1"), peer6: net.ParseIP("fd77::2"),
		hostMAC: "02:77:00:00:00:01", peerMAC: "02:77:00:00:00:02"}
	for _, ns := range []string{b.host, b.peer} {
		netns.Delete(ns)
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netns.Delete(ns) })
	}
	if err := netns.Veth(b.host, "h0", b.peer, "p0"); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{b.host, "link", "set", "h0", "address", b.hostMAC},
		{b.peer, "link", "set", "p0", "address", b.peerMAC},
		{b.host, "addr", "add", "10.77.0.1/24", "dev", "h0"},
		{b.peer, "addr", "add", "10.77.0.2/24", "dev", "p0"},
		{b.host, "-6", "addr", "add", "fd77::1/64", "dev", "h0", "nodad"},
		{b.peer, "-6", "addr", "add", "fd77::2/64", "dev", "p0", "nodad"},
		{b.host, "link", "set", "h0", "up"},
		{b.peer, "link", "set", "p0", "up"},
		{b.host, "link", "set", "lo", "up"},
		{b.peer, "link", "set", "lo", "up"},
		{b.host, "neigh", "replace", "10.77.0.2", "lladdr", b.peerMAC, "dev", "h0", "nud", "permanent"},
		{b.peer, "neigh", "replace", "10.77.0.1", "lladdr", b.hostMAC, "dev", "p0", "nud", "permanent"},
		{b.host, "-6", "neigh", "replace", "fd77::2", "lladdr", b.peerMAC, "dev", "h0", "nud", "permanent"},
		{b.peer, "-6", "neigh", "replace", "fd77::1", "lladdr", b.hostMAC, "dev", "p0", "nud", "permanent"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", c[0]}, c[1:]...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(c[1:], " "), err, out)
		}
	}
	// Router solicitations and the like would only add noise.
	for _, ns := range []string{b.host, b.peer} {
		netns.Run(ns, func() error {
			netns.Sysctl("net/ipv6/conf/all/accept_ra", "0")
			netns.Sysctl("net/ipv6/conf/all/router_solicitations", "0")
			return nil
		})
	}
	return b
}

// attach puts the firewall with the rules on the host's device.
func (b *hostBed) attach(t *testing.T, rules string) *Firewall {
	t.Helper()
	rs, err := ParseRules("host.toml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	return attachInstance(t, AttachOptions{Name: b.host + "-fw", Devices: []xdp.Iface{{Netns: b.host, Name: "h0"}}, Rules: rs,
		NoFallback: true, Warn: testWriter{t}})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// in runs fn in namespace ns.
func in(t *testing.T, ns string, fn func() error) error {
	t.Helper()
	return netns.Run(ns, fn)
}

// tcpWorks listens in namespace srv on addr:port and dials it from cli: a
// line goes there and back.
func tcpWorks(t *testing.T, srv, cli string, addr net.IP, port int) error {
	t.Helper()
	var ln net.Listener
	if err := in(t, srv, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(addr.String(), fmt.Sprint(port)))
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		// The server speaks first, as SSH does, then echoes a line.
		fmt.Fprintf(c, "hello\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprint(c, line)
	}()
	return in(t, cli, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addr.String(), fmt.Sprint(port)), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		r := bufio.NewReader(c)
		if _, err := r.ReadString('\n'); err != nil {
			return fmt.Errorf("the server's greeting: %w", err)
		}
		fmt.Fprintf(c, "ping\n")
		if l, err := r.ReadString('\n'); err != nil || l != "ping\n" {
			return fmt.Errorf("the echo: %q, %v", l, err)
		}
		return nil
	})
}

// udpWorks sends a query from cli to srv's addr:port and waits for the
// answer.
func udpWorks(t *testing.T, srv, cli string, addr net.IP, port int) error {
	t.Helper()
	var pc net.PacketConn
	if err := in(t, srv, func() (err error) {
		pc, err = net.ListenPacket("udp", net.JoinHostPort(addr.String(), fmt.Sprint(port)))
		return err
	}); err != nil {
		return err
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	return in(t, cli, func() error {
		c, err := net.Dial("udp", net.JoinHostPort(addr.String(), fmt.Sprint(port)))
		if err != nil {
			return err
		}
		defer c.Close()
		for try := 0; try < 3; try++ {
			c.SetDeadline(time.Now().Add(500 * time.Millisecond))
			c.Write([]byte("query"))
			buf := make([]byte, 64)
			if n, err := c.Read(buf); err == nil && string(buf[:n]) == "query" {
				return nil
			}
		}
		return fmt.Errorf("no answer")
	})
}

// pingWorks pings addr from namespace ns.
func pingWorks(ns string, addr net.IP) error {
	out, err := exec.Command("nsenter", "--net="+netns.Path(ns), "ping", "-c", "1", "-W", "1", addr.String()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// The firewall on a host's own interface with the policy a host firewall
// starts from: SSH in works, and so does everything the host opens (TCP,
// UDP, ping), in both families; what the policy does not let in stays out.
// XDP alone sees only what comes in: the host's SYN/ACK and its own
// connections are tracked at the device's egress, in the same tables.
func TestHostFirewall(t *testing.T) {
	b := newHostBed(t)
	f := b.attach(t, hostPolicy)
	for _, fam := range []struct {
		name       string
		host, peer net.IP
	}{{"ipv4", b.host4, b.peer4}, {"ipv6", b.host6, b.peer6}} {
		checks := []struct {
			what string
			ok   bool
			run  func() error
		}{
			{"SSH in", true, func() error { return tcpWorks(t, b.host, b.peer, fam.host, 22) }},
			{"TCP out", true, func() error { return tcpWorks(t, b.peer, b.host, fam.peer, 8080) }},
			{"UDP out", true, func() error { return udpWorks(t, b.peer, b.host, fam.peer, 5353) }},
			{"ping out", true, func() error { return pingWorks(b.host, fam.peer) }},
			{"telnet in", false, func() error { return tcpWorks(t, b.host, b.peer, fam.host, 23) }},
			{"UDP in", false, func() error { return udpWorks(t, b.host, b.peer, fam.host, 5353) }},
		}
		for _, c := range checks {
			err := c.run()
			if c.ok && err != nil {
				t.Errorf("%s %s: %v", fam.name, c.what, err)
			}
			if !c.ok && err == nil {
				t.Errorf("%s %s: let in", fam.name, c.what)
			}
		}
	}
	cnt, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt["ct_egress"] == 0 {
		t.Error("no packet tracked at egress")
	}
	t.Logf("tracked at egress %d (invalid %d); in: new %d established %d invalid %d", cnt["ct_egress"],
		cnt["ct_egress_invalid"], cnt["ct_new"], cnt["ct_established"], cnt["ct_invalid"])
}
