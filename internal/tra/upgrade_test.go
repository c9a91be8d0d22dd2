package tra

import (
	"encoding/binary"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
)

// TestUpgradeRollbackUnderTraffic runs a translator as an operator would
// across releases: the previous release (a build whose maps have another
// layout: layout_prev.go) attaches, a path to remoteIA is installed, and
// an application on the host sends a numbered UDP stream there, which the
// translator carries as SCION to the router 10.201.0.1, where a socket
// counts it. While the stream flows, this release attaches over it
// (upgrade), then the previous one (rollback), then this one again. Every
// datagram must arrive (the pair, the host's configuration and the paths
// were carried over), and the counters must have counted every one.
func TestUpgradeRollbackUnderTraffic(t *testing.T) {
	a := newHost(t, "127.0.0.1:1")
	prev, cur := labtest.ReleaseBinaries(t)
	attach := func(bin string) {
		t.Helper()
		labtest.Run(t, bin, "tra", "attach", "--config", a.cfg.Path, "--netns", a.host)
	}
	a.detachAtEnd(t)
	attach(prev)
	p := a.pinned(t)
	if err := p.SetPaths(remoteIA, 7, []Path{{Raw: testPath(t), MTU: 1472, NextHop: farRouter, Expiry: uint64(time.Now().Add(time.Hour).Unix())}}); err != nil {
		t.Fatal(err)
	}
	p.Close()

	// The router: a socket on its address in the gateway's namespace.
	ipIn(t, a.net, "addr", "add", farRouter.Addr().String()+"/32", "dev", "lo")
	var rc *net.UDPConn
	if err := netns.Run(a.net, func() error {
		var err error
		rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(farRouter))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rc.SetReadBuffer(8 << 20)
	seen := map[uint64]bool{}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		buf := make([]byte, 2048)
		for {
			rc.SetReadDeadline(time.Now().Add(3 * time.Second))
			n, err := rc.Read(buf)
			if err != nil {
				return
			}
			if n >= 8 {
				seen[binary.BigEndian.Uint64(buf[n-8:n])] = true
			}
		}
	}()

	// The application: 20,000 datagrams a second, in bursts of 20 a
	// millisecond, until the last swap is a second behind.
	c := a.dialUDP(t, netip.AddrPortFrom(remote4SMIP, 31000))
	stop := make(chan struct{})
	sent := make(chan uint64, 1)
	go func() {
		var seq uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		msg := make([]byte, 64)
		for {
			select {
			case <-stop:
				sent <- seq
				return
			case <-tick.C:
			}
			for range 20 {
				binary.BigEndian.PutUint64(msg[len(msg)-8:], seq)
				if _, err := c.Write(msg); err != nil {
					t.Errorf("datagram %d: %v", seq, err)
					sent <- seq
					return
				}
				seq++
			}
		}
	}()
	eventsMax := func() uint32 {
		m, err := ebpf.LoadPinnedMap(filepath.Join(PinDir(a.name), "tra_events"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		return m.MaxEntries()
	}
	prevMax := eventsMax()
	for i, step := range []struct {
		what string
		bin  string
	}{{"upgrade", cur}, {"rollback", prev}, {"upgrade again", cur}} {
		time.Sleep(1500 * time.Millisecond)
		attach(step.bin)
		// The pins hold the maps of the release that runs.
		if got := eventsMax(); (got == prevMax) != (i == 1) {
			t.Fatalf("after the %s, the pinned tra_events has %d bytes (the previous release's: %d)", step.what, got, prevMax)
		}
	}
	time.Sleep(time.Second)
	close(stop)
	n := <-sent
	<-recvDone
	if n == 0 || uint64(len(seen)) != n {
		var missing []uint64
		for s := uint64(0); s < n && len(missing) < 10; s++ {
			if !seen[s] {
				missing = append(missing, s)
			}
		}
		t.Fatalf("sent %d datagrams, the router got %d; the first missing: %v", n, len(seen), missing)
	}
	// The counters are migrated: what the old programs counted up to the
	// swap is added at the commit, which rewrites each entry while the new
	// ones count; a packet counted in that microsecond can be lost
	// (docs/upgrade.md), no more.
	if got := a.counts(t)["translated_out"].Packets; got > n || n-got > n/10000 {
		t.Fatalf("the translator counted %d translated out, want %d (counted across the releases)", got, n)
	}
	t.Logf("%d datagrams translated across an upgrade, a rollback and an upgrade; none lost", n)
}
