package tra

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
)

// Interface-down messages a machine of the host's AS can send without
// spoofing anything: an empty path, its own address as the source, the
// AS's own uplink named, a packet of the host's on that path quoted (any
// machine of the AS has the same path bytes from scionproto's daemon).
// They come from no router, so none is believed; the host's ping to
// another AS goes on, every echo answered once.
func TestForgedInterfaceDownFromTheAS(t *testing.T) {
	_, as := labNetwork(t)
	a, b := translate(t, as[1], hostOptions{maxPaths: 1}), translate(t, as[2], hostOptions{})
	a.pingOK(t, b.smip, 2)
	installed := a.pathTo(t, b.as.IA)
	w := internalWire(t, a.as)
	machine := netip.MustParseAddr("10.101.0.77")
	if a.as.Internal.Is4() {
		b4 := a.as.Internal.As4()
		b4[3] = 77
		machine = netip.AddrFrom4(b4)
	}
	hostPort := netip.AddrPortFrom(a.as.Host, endHostPort)
	// Each message names the uplink of the path installed at the time (any
	// machine of the AS sees the same paths in scionproto's daemon): the
	// two uplinks in turn once the host fails over.
	forge := func(p Path) []byte {
		quote := scionPacket(t, a.as.IA, b.as.IA, addr.HostIP(a.as.Host), addr.HostIP(b.as.Host), p.Raw, &slayers.UDP{SrcPort: 40000, DstPort: 31000})
		m := make([]byte, 16)
		binary.BigEndian.PutUint64(m[0:], uint64(a.as.IA))
		binary.BigEndian.PutUint64(m[8:], uint64(egressOf(t, p.Raw)))
		return scionPacket(t, a.as.IA, a.as.IA, addr.HostIP(machine), addr.HostIP(a.as.Host), nil,
			&slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeExternalInterfaceDown, 0)}, gopacket.Payload(append(m, quote...)))
	}
	before := a.daemonCounts(t)
	done := make(chan string, 1)
	go func() {
		out, _ := a.command(t, "ping", "-6", "-c", "40", "-i", "0.1", "-W", "2", b.smip.String())
		done <- out
	}()
	p := installed[0]
	for i := 0; i < 31; i++ {
		if now := a.pathTo(t, b.as.IA); len(now) > 0 {
			p = now[0]
		}
		w.send(t, netip.AddrPortFrom(machine, 30041), hostPort, forge(p))
		time.Sleep(100 * time.Millisecond)
	}
	out := <-done
	after := a.daemonCounts(t)
	if got := after["interface_down"] - before["interface_down"]; got != 0 {
		t.Errorf("%d forged interface-down messages believed, want 0", got)
	}
	if n := received(t, out); n != 40 {
		t.Errorf("%d of 40 echo replies:\n%s", n, out)
	}
	if strings.Contains(out, "DUP!") {
		t.Errorf("duplicated echo replies:\n%s", out)
	}
	if slow := slowReplies(out, 200*time.Millisecond); slow > 0 {
		t.Errorf("%d echo replies slower than 200 ms:\n%s", slow, out)
	}
	if got := a.pathTo(t, b.as.IA); len(got) != len(installed) {
		t.Errorf("%d paths to %s after the messages, want %d", len(got), b.as.IA, len(installed))
	}
	t.Logf("daemon: scmp_ignored +%d, interface_down +%d", after["scmp_ignored"]-before["scmp_ignored"], after["interface_down"]-before["interface_down"])
}

var pingTimeRE = regexp.MustCompile(`time=([0-9.]+) ms`)

// slowReplies counts ping's replies slower than d.
func slowReplies(out string, d time.Duration) int {
	n := 0
	for _, m := range pingTimeRE.FindAllStringSubmatch(out, -1) {
		var ms float64
		fmt.Sscan(m[1], &ms)
		if time.Duration(ms*float64(time.Millisecond)) > d {
			n++
		}
	}
	return n
}

// The first packets to a new destination wait for its path in the daemon;
// the sender sent each once, and each arrives once. (Held packets were
// dropped at the host's end of the pair: the sender's send failed with
// ENOBUFS, ping sent the same echo again, and every copy was answered.)
func TestHeldPacketsArriveOnce(t *testing.T) {
	_, as := labNetwork(t)
	a, b := translate(t, as[1], hostOptions{}), translate(t, as[2], hostOptions{})
	out, err := a.command(t, "ping", "-6", "-c", "5", "-i", "0.2", "-W", "2", b.smip.String())
	if n := received(t, out); n != 5 || err != nil {
		t.Fatalf("%d of 5 echo replies (%v):\n%s", n, err, out)
	}
	if strings.Contains(out, "DUP!") || strings.Contains(out, "No buffer space") {
		t.Fatalf("a held echo failed its send and was sent again:\n%s", out)
	}
	if c := a.counts(t); c["no_path"].Packets == 0 {
		t.Fatalf("nothing held (counters %v): the test did not test", c)
	}
}
