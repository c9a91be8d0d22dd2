package tra

import (
	"bytes"
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

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
)

// Scitra-TUN (scion-cpp's SCION-IP translator, the other implementation of
// the current SM-IP format) is not part of this repository and is built
// outside it: it needs C++23 that Debian 12's GCC lacks, so it lives in a
// root directory of a newer Debian (FASTPATH_SCITRA_ROOT) with its build at
// scitraBin. The test runs it there, chrooted, in the end host's namespace,
// and skips where no such build exists.
const scitraBin = "/opt/scion-cpp/build/scitra/scitra-tun"

func scitraRoot() string {
	if r := os.Getenv("FASTPATH_SCITRA_ROOT"); r != "" {
		return r
	}
	return "/var/lib/fastpath-scitra/root"
}

// TestScitraInterop: a host behind Scitra-TUN in one leaf AS and a host
// behind fastpath's translator in the other talk by their SM-IP addresses:
// UDP and ping6 both ways.
func TestScitraInterop(t *testing.T) {
	root := scitraRoot()
	if _, err := os.Stat(filepath.Join(root, scitraBin)); err != nil {
		t.Skipf("no Scitra-TUN build in %s (set FASTPATH_SCITRA_ROOT to a root holding %s): %v", root, scitraBin, err)
	}
	_, as := labNetwork(t)
	sa, b := as[1], translate(t, as[2], hostOptions{})
	// Scitra-TUN takes SCMP (echo requests, and with v0.12.0's routers
	// replies whose identifier lies outside dispatched_ports) by binding
	// UDP port 30041 of its address (--scmp). On the host's own address the lab's dispatcher shim
	// holds that port, so Scitra-TUN gets a second address of the host's
	// subnet: a SCION host of its own, as on a machine without the shim.
	scitraIP := sa.Host.Next()
	addHostAddr(t, sa.HostNetns, scitraIP, sa.Subnet.Bits())
	smip, err := FromSCION(sa.IA, scitraIP)
	if err != nil {
		t.Fatal(err)
	}
	a := &host{as: sa, ns: sa.HostNetns, smip: smip, name: "scitra"}

	// The lab's hosts have IPv6 off on new devices (router solicitations
	// would skew counts); Scitra-TUN's device needs it for its address.
	const v6 = "/proc/sys/net/ipv6/conf/default/disable_ipv6"
	if err := netns.Run(sa.HostNetns, func() error { return os.WriteFile(v6, []byte("0"), 0o644) }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		netns.Run(sa.HostNetns, func() error { return os.WriteFile(v6, []byte("1"), 0o644) })
	})
	// Scitra-TUN receives on the flow's own port: a v0.12.0 router hands a
	// host only ports inside dispatched_ports, the rest go to 30041 (later
	// releases deliver to any port; the range does no harm there).
	const ports = "/proc/sys/net/ipv4/ip_local_port_range"
	if err := netns.Run(sa.HostNetns, func() error { return os.WriteFile(ports, []byte("31000 32000"), 0o644) }); err != nil {
		t.Fatal(err)
	}
	// Scitra-TUN opens /dev/net/tun and reads /proc: the root gets them
	// for the run, unless they are mounted there already.
	mountForChroot(t, root)
	var log bytes.Buffer
	cmd := exec.Command("chroot", root, scitraBin, scionlab.HostDev, scitraIP.String(),
		"-d", sa.Daemon().String(), "-n", "scitra", "-l", "info", "-p", "31601", "--scmp")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := netns.Run(sa.HostNetns, cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("scitra-tun:\n%s", log.String())
		}
	})
	// Scitra-TUN gives its device the host's SM-IP address when it is
	// ready.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := a.command(t, "ip", "-6", "addr", "show", "dev", "scitra")
		if strings.Contains(out, smip.String()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scitra-tun did not put %s on its device:\n%s\n%s", smip, out, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	ping := func(t *testing.T, from, to *host) {
		out, err := from.command(t, "ping", "-6", "-c", "5", "-i", "0.2", "-W", "3", to.smip.String())
		if got := received(t, out); got < 4 || err != nil && got == 0 {
			t.Fatalf("%d of 5 echo replies (%v):\n%s", got, err, out)
		}
	}
	t.Run("ping6 from fastpath to scitra", func(t *testing.T) { ping(t, b, a) })
	t.Run("ping6 from scitra to fastpath", func(t *testing.T) { ping(t, a, b) })
	udp := func(t *testing.T, from, to *host, port int) {
		srv := to.udpListen(t, port)
		go echo(srv)
		var cli *net.UDPConn
		if err := netns.Run(from.ns, func() error {
			var err error
			cli, err = net.DialUDP("udp6", nil, &net.UDPAddr{IP: to.smip.AsSlice(), Port: port})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		buf := make([]byte, 2048)
		for i := range 20 {
			msg := []byte(fmt.Sprintf("datagram %d from %s", i, from.smip))
			var err error
			// The first may wait for a path: sent again on a timeout.
			for try := 0; try < 5; try++ {
				if _, err = cli.Write(msg); err != nil {
					t.Fatal(err)
				}
				cli.SetReadDeadline(time.Now().Add(2 * time.Second))
				var n int
				if n, err = cli.Read(buf); err == nil {
					if !bytes.Equal(buf[:n], msg) {
						t.Fatalf("echo %q, want %q", buf[:n], msg)
					}
					break
				}
			}
			if err != nil {
				t.Fatalf("datagram %d: no echo from %s: %v", i, to.smip, err)
			}
		}
	}
	t.Run("udp from scitra to fastpath", func(t *testing.T) { udp(t, a, b, 31600) })
	t.Run("udp from fastpath to scitra", func(t *testing.T) { udp(t, b, a, 31601) })
}

// addHostAddr gives the host's device one more address, removed when the
// test ends.
func addHostAddr(t *testing.T, ns string, ip netip.Addr, bits int) {
	t.Helper()
	h, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	l, err := h.LinkByName(scionlab.HostDev)
	if err != nil {
		t.Fatalf("%s in %s: %v", scionlab.HostDev, ns, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(bits, 32)}}
	if err := h.AddrAdd(l, a); err != nil {
		t.Fatalf("address %s on %s/%s: %v", ip, ns, scionlab.HostDev, err)
	}
	t.Cleanup(func() { h.AddrDel(l, a) })
}

// mountForChroot mounts /dev (a bind, for /dev/net/tun) and a proc file
// system into a chroot's root for the test, and unmounts them after; what
// is mounted there already stays as it is.
func mountForChroot(t *testing.T, root string) {
	t.Helper()
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mounted := map[string]bool{}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			mounted[f[4]] = true
		}
	}
	for _, m := range []struct {
		dir, src, fstype string
		flags            uintptr
	}{
		{"dev", "/dev", "", unix.MS_BIND | unix.MS_REC},
		{"proc", "proc", "proc", 0},
	} {
		target := filepath.Join(root, m.dir)
		if mounted[target] {
			continue
		}
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(m.src, target, m.fstype, m.flags, ""); err != nil {
			t.Fatalf("mount %s on %s: %v", m.src, target, err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", target, err)
			}
		})
	}
}
