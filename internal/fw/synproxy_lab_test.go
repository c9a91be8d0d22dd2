package fw

import (
	"bytes"
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

// TestSynproxyThroughRouter opens real connections from the generator's
// namespace to a plain Go listener in the sink's, through the DUT routing
// between them with the firewall on both its veths: the client's handshake
// ends at the synproxy, the listener sees the client's SYN only once the
// cookie ACK checked out, and data flows both ways across the delta.
func TestSynproxyThroughRouter(t *testing.T) {
	tb := labtest.Testbed(t)
	// Full checksums from both stacks, no TSO: what a NIC delivers. (A
	// veth hands on a local stack's partial checksums, which the shift's
	// incremental update would spoil.)
	// And a program on the ends too: a veth kicks its peer's NAPI poll for
	// frames sent back with XDP_TX only if the peer has an XDP program
	// (GRO alone leaves them in its ring until other traffic comes).
	pass, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer pass.Close()
	for _, ep := range []lab.Endpoint{tb.Gen(), tb.Sink()} {
		if out, err := exec.Command("ip", "netns", "exec", ep.Netns, "ethtool", "-K", ep.Dev, "tx", "off").CombinedOutput(); err != nil {
			t.Fatalf("ethtool -K %s tx off: %v: %s", ep.Dev, err, out)
		}
		l, err := xdp.Attach(ep.Iface(), pass, xdp.Native)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
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
	f, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	server := netip.AddrPortFrom(tb.Sink().Addr.Addr(), 8080)
	rs := &RuleSet{Default: Pass, Rules: []Rule{{Action: Synproxy, Dst: Prefix{netip.PrefixFrom(server.Addr(), 32)}, Proto: 6,
		SPort: AnyPort, DPort: Ports{server.Port(), server.Port() + 1, true}}}}
	if err := f.Install(rs); err != nil {
		t.Fatal(err)
	}
	if err := f.updateConfig(func(c *fwFwConfig) {
		c.CtFlags = uint32(fwFwCtFlagFW_CTF_ON | fwFwCtFlagFW_CTF_LOOSE)
		for i := range c.CtTimeout {
			c.CtTimeout[i] = 300
		}
		c.SynproxyMss4, c.SynproxyTtl = 1460, 64
	}); err != nil {
		t.Fatal(err)
	}

	var ln net.Listener
	if err := netns.Run(tb.Sink().Netns, func() (err error) {
		ln, err = net.Listen("tcp4", server.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The server echoes what it reads, prefixed.
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

	t.Cleanup(func() {
		if t.Failed() {
			for c := fwFwCounter(0); c < fwFwCounterFW_C_MAX; c++ {
				if n := counter(t, f, c); n != 0 {
					t.Logf("counter %d: %d", c, n)
				}
			}
		}
	})

	const conns = 3
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16*4) // 256 KiB
	for i := 0; i < conns; i++ {
		var c net.Conn
		if err := netns.Run(tb.Gen().Netns, func() (err error) {
			c, err = net.DialTimeout("tcp4", server.String(), 5*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(payload)
			if err == nil {
				err = c.(*net.TCPConn).CloseWrite()
			}
			errc <- err
		}()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatalf("connection %d: read: %v (after %d bytes)", i, err, len(got))
		}
		if err := <-errc; err != nil {
			t.Fatalf("connection %d: write: %v", i, err)
		}
		if want := append([]byte("echo:"), payload...); !bytes.Equal(got, want) {
			t.Fatalf("connection %d: read %d bytes, not the %d sent back", i, len(got), len(want))
		}
	}

	// A port nothing listens on: the proxy completes the client's
	// handshake, and the server's RST to the SYN then resets it (before
	// the dial returns, or after).
	var c net.Conn
	closed := netip.AddrPortFrom(server.Addr(), server.Port()+1)
	err = netns.Run(tb.Gen().Netns, func() (err error) {
		c, err = net.DialTimeout("tcp4", closed.String(), 5*time.Second)
		return err
	})
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
		fwFwCounterFW_C_SYNPROXY_ACK_OK:  conns + 1,
		fwFwCounterFW_C_SYNPROXY_ACK_BAD: 0,
		fwFwCounterFW_C_SYNPROXY_OPENED:  conns,
	} {
		if n := counter(t, f, c); n < want || (want == 0 && n != 0) {
			t.Errorf("counter %d: %d, want %d", c, n, want)
		}
	}
}
