package fw

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// synproxyLab attaches the firewall to both veths of a new testbed's DUT,
// with synproxy rules for TCP to the sink's ports dports (tracking on,
// with the defaults), adds IPv6 to the testbed, and starts plain Go
// listeners on the sink's port 8080, IPv4 and IPv6, that echo what they
// read after "echo:". It returns their addresses.

func synproxyLab(t *testing.T, dports Ports) (tb lab.Testbed, f *Firewall, server, server6 netip.AddrPort) {
	t.Helper()
	tb = labtest.Testbed(t)
	server = netip.AddrPortFrom(tb.Sink().Addr.Addr(), 8080)
	server6 = netip.MustParseAddrPort("[fd00:19::1]:8080")
	// Full checksums from both stacks, no TSO: what a NIC delivers. (A
	// veth hands on a local stack's partial checksums, which the shift's
	// incremental update would spoil.) And a program on the ends: a veth
	// kicks its peer's NAPI poll for frames sent back with XDP_TX only if
	// the peer has an XDP program (with GRO alone they wait in its ring
	// until other traffic comes).
	pass, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pass.Close() })
	for _, ep := range []lab.Endpoint{tb.Gen(), tb.Sink()} {
		if out, err := exec.Command("ip", "netns", "exec", ep.Netns, "ethtool", "-K", ep.Dev, "tx", "off").CombinedOutput(); err != nil {
			t.Fatalf("ethtool -K %s tx off: %v: %s", ep.Dev, err, out)
		}
		l, err := xdp.Attach(ep.Iface(), pass, xdp.Native)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	// IPv6 beside the testbed's IPv4, which the lab turns off.
	for _, cmd := range [][]string{
		{tb.Gen().Netns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf." + tb.Gen().Dev + ".disable_ipv6=0",
			"net.ipv6.conf." + tb.Gen().Dev + ".accept_dad=0"},
		{tb.Sink().Netns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf." + tb.Sink().Dev + ".disable_ipv6=0",
			"net.ipv6.conf." + tb.Sink().Dev + ".accept_dad=0"},
		{tb.DUTIn().Netns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.all.forwarding=1",
			"net.ipv6.conf." + tb.DUTIn().Dev + ".disable_ipv6=0", "net.ipv6.conf." + tb.DUTIn().Dev + ".accept_dad=0",
			"net.ipv6.conf." + tb.DUTOut().Dev + ".disable_ipv6=0", "net.ipv6.conf." + tb.DUTOut().Dev + ".accept_dad=0"},
		{tb.Gen().Netns, "ip", "addr", "add", "fd00:18::1/64", "dev", tb.Gen().Dev, "nodad"},
		{tb.DUTIn().Netns, "ip", "addr", "add", "fd00:18::2/64", "dev", tb.DUTIn().Dev, "nodad"},
		{tb.DUTOut().Netns, "ip", "addr", "add", "fd00:19::2/64", "dev", tb.DUTOut().Dev, "nodad"},
		{tb.Sink().Netns, "ip", "addr", "add", server6.Addr().String() + "/64", "dev", tb.Sink().Dev, "nodad"},
		{tb.Gen().Netns, "ip", "route", "add", "fd00:19::/64", "via", "fd00:18::2"},
		{tb.Sink().Netns, "ip", "route", "add", "fd00:18::/64", "via", "fd00:19::2"},
	} {
		if out, err := exec.Command("ip", append([]string{"netns", "exec"}, cmd...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}

	name := tb.Prefix + "fw"
	if err := Attach(AttachOptions{Name: name, Devices: []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}, NoFallback: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(PinDir(name)); err == nil {
			if err := Detach(name, nil); err != nil {
				t.Error(err)
			}
		}
	})
	f, err = OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	rs := &RuleSet{Default: Pass, Rules: []Rule{
		{Action: Synproxy, Dst: Prefix{netip.PrefixFrom(server.Addr(), 32)}, Proto: 6, SPort: AnyPort, DPort: dports},
		{Action: Synproxy, Dst: Prefix{netip.PrefixFrom(server6.Addr(), 128)}, Proto: 6, SPort: AnyPort, DPort: dports}}}
	if err := f.Install(rs); err != nil {
		t.Fatal(err)
	}

	for _, at := range []netip.AddrPort{server, server6} {
		var ln net.Listener
		if err := netns.Run(tb.Sink().Netns, func() (err error) {
			ln, err = net.Listen("tcp", at.String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					c.Write([]byte("echo:"))
					io.Copy(c, c)
				}()
			}
		}()
	}
	t.Cleanup(func() {
		if t.Failed() {
			for c := fwFwCounter(0); c < fwFwCounterFW_C_MAX; c++ {
				if n := counter(t, f, c); n != 0 {
					t.Logf("counter %d: %d", c, n)
				}
			}
		}
	})
	return tb, f, server, server6
}

// dialFromGen connects from the generator's namespace.
func dialFromGen(tb lab.Testbed, to netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := netns.Run(tb.Gen().Netns, func() (err error) {
		c, err = net.DialTimeout("tcp", to.String(), 5*time.Second)
		return err
	})
	return c, err
}

// echo sends payload through an echoing connection and checks what comes
// back.
func echo(t *testing.T, c net.Conn, payload []byte, first bool) {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		errc <- err
	}()
	want := payload
	if first {
		want = append([]byte("echo:"), payload...)
	}
	got := make([]byte, len(want))
	if n, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v (after %d bytes)", err, n)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d sent", len(got), len(want))
	}
}

// TestSynproxyThroughRouter opens real connections, IPv4 and IPv6, from the
// generator's namespace to a plain Go listener in the sink's, through the DUT routing
// between them with the firewall on both its veths: the client's handshake
// ends at the synproxy, the listener sees the client's SYN only once the
// cookie ACK checked out, and data flows both ways across the delta.
func TestSynproxyThroughRouter(t *testing.T) {
	tb, f, server, server6 := synproxyLab(t, Ports{8080, 8081, true})
	const conns = 4
	payload := bytes.Repeat([]byte("0123456789abcdef"), 256<<10/16)
	// Connections whose first bytes lost the race below: the client sends
	// its ACK again with them, and the proxy checks that cookie again.
	resent := uint64(0)
	for i := 0; i < conns; i++ {
		start := time.Now()
		to := server
		if i%2 == 1 {
			to = server6
		}
		c, err := dialFromGen(tb, to)
		if err != nil {
			t.Fatal(err)
		}
		// The first bytes race the server's SYN/ACK: sent before it
		// reaches the proxy, they are resent after the client's
		// retransmission timeout (200 ms or more). Through veths the
		// server answers before the client's dial returns.
		echo(t, c, payload[:16], true)
		took := time.Since(start)
		if took >= 150*time.Millisecond {
			resent++
		}
		t.Logf("connection %d to %v: first echo after %v", i, to, took.Round(time.Microsecond))
		echo(t, c, payload, false)
		c.Close()
	}

	// A port nothing listens on: the proxy completes the client's
	// handshake, and the server's RST to the SYN then resets it (before
	// the dial returns, or after).
	c, err := dialFromGen(tb, netip.AddrPortFrom(server.Addr(), server.Port()+1))
	if err == nil {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte("hello"))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a port without listener: %v, want a reset", err)
	}

	for c, want := range map[fwFwCounter]uint64{
		fwFwCounterFW_C_SYNPROXY_SYN:     conns + 1,
		fwFwCounterFW_C_SYNPROXY_ACK_BAD: 0,
		fwFwCounterFW_C_SYNPROXY_OPENED:  conns,
	} {
		if n := counter(t, f, c); n != want {
			t.Errorf("counter %d: %d, want %d", c, n, want)
		}
	}
	// Every cookie ACK checked out once, and a resent one again.
	if n := counter(t, f, fwFwCounterFW_C_SYNPROXY_ACK_OK); n < conns+1 || n > conns+1+resent {
		t.Errorf("cookie ACKs that checked out: %d, want %d to %d (%d connections resent their first bytes)", n, conns+1, conns+1+resent, resent)
	}
}

// TestSynproxyFlood floods the listener's port with SYNs from spoofed
// sources and ports while a connection the proxy opened before carries
// data: every SYN is answered with a cookie and none leaves an entry
// behind, and the connection's data keeps flowing. Its rate with and without the flood
// is logged, not asserted: both share the machine's CPUs with the
// generator, and the client's namespace is the flood's too, so that the
// cookie SYN/ACKs flood the client's veth and stack as well (on a real
// network they go back to the spoofed sources).
func TestSynproxyFlood(t *testing.T) {
	tb, f, server, _ := synproxyLab(t, Ports{8080, 8080, true})
	c, err := dialFromGen(tb, server)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<20/16)
	echo(t, c, payload[:16], true)
	rate := func() float64 {
		start := time.Now()
		echo(t, c, payload, false)
		return float64(2*len(payload)) / time.Since(start).Seconds() / 1e6
	}
	quiet := rate()

	syn := spSeg{src: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.100"), 1), dst: server, seq: 1, syn: true,
		win: 64240, mss: 1460, full: true}.frame(t, tb.Gen().MAC, tb.DUTIn().MAC)
	gen, err := lab.NewGenerator(lab.GenOptions{Iface: tb.Gen().Iface(), Packets: [][]byte{syn}, CPU: -1,
		Flows: 1 << 20, FlowSrc: netip.MustParsePrefix("198.18.0.0/24"), FlowKeepDport: true})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	created := counter(t, f, fwFwCounterFW_C_CT_CREATED)
	answered := counter(t, f, fwFwCounterFW_C_SYNPROXY_SYN)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		st  lab.GenStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := gen.Send(ctx, lab.SendOptions{Duration: 3 * time.Second})
		done <- result{st, err}
	}()
	time.Sleep(200 * time.Millisecond)
	flooded := rate()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	time.Sleep(200 * time.Millisecond)
	answered = counter(t, f, fwFwCounterFW_C_SYNPROXY_SYN) - answered
	t.Logf("flood: %d SYNs sent at %.2f Mpps, %d answered; the connection's echo: %.0f MB/s quiet, %.0f MB/s flooded",
		r.st.Sent, r.st.Mpps(), answered, quiet, flooded)
	// All but a few: a SYN/ACK the generator's veth drops (its ring full)
	// goes back to the generator's page pool with the length the proxy cut
	// it to, which test-run's live mode does not reset (it looks at the
	// frame's data pointer and flags only), so that the next packet sent
	// from that page is cut short and dropped as malformed: some hundreds
	// in a million at the generator's fastest. (A program on that veth
	// that drops the SYN/ACKs instead of passing them up makes it nearly
	// every packet.)
	if arrived := r.st.Sent - r.st.Drops - r.st.Vanished; r.st.Sent == 0 || answered < arrived-arrived/100 {
		t.Errorf("%d SYNs answered of %d sent (%d dropped by the veth)", answered, r.st.Sent, r.st.Drops+r.st.Vanished)
	}
	if n := counter(t, f, fwFwCounterFW_C_CT_CREATED) - created; n != 0 {
		t.Errorf("the flood created %d entries", n)
	}
}
