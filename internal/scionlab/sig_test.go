package scionlab

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// scionproto's gateway between the end hosts of the two leaf ASes, with
// fastpath in front of every router: ping6 and IPv4 ping cross, a TCP
// transfer over IPv6 arrives whole, and StopSIG leaves the network as it
// was (no gateway, no "sigs" in the topologies, nothing crosses).
func TestSIGCarriesIPv6AndIPv4(t *testing.T) {
	n, as := testNetwork(t, UpOptions{Hybrid: true})
	a, b := as[1], as[len(as)-1]
	var log strings.Builder
	if err := n.StartSIG(context.Background(), a, b, 60*time.Second, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Log(strings.TrimSpace(log.String()))
	b4, b6 := b.SIGAddrs()
	for _, dst := range []netip.Addr{b6, b4} {
		var out []byte
		err := netns.Run(a.HostNetns, func() error {
			var err error
			out, err = exec.Command("ping", "-c", "3", "-i", "0.2", "-W", "2", dst.String()).CombinedOutput()
			return err
		})
		if err != nil || !strings.Contains(string(out), " 0% packet loss") {
			t.Fatalf("ping %s through the SIG: %v\n%s", dst, err, out)
		}
	}

	// 2 MiB over IPv6 from the first leaf's host to the last's.
	payload := make([]byte, 2<<20)
	rand.Read(payload)
	var ln net.Listener
	if err := netns.Run(b.HostNetns, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(b6, 5301).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		data, _ := io.ReadAll(c)
		got <- data
	}()
	if err := netns.Run(a.HostNetns, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(b6, 5301).String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		_, err = c.Write(payload)
		return err
	}); err != nil {
		t.Fatalf("TCP through the SIG: %v", err)
	}
	if data := <-got; !bytes.Equal(data, payload) {
		t.Fatalf("TCP through the SIG: %d bytes arrived, want the %d sent", len(data), len(payload))
	}

	if err := n.StopSIG(io.Discard); err != nil {
		t.Fatal(err)
	}
	st, err := n.readState()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Procs {
		if strings.HasPrefix(p.Name, "gateway-") {
			t.Fatalf("%s still recorded after StopSIG", p.Name)
		}
	}
	for _, x := range []AS{a, b} {
		if has, err := hasSIGTopology(x); err != nil || has {
			t.Fatalf("%s's topology.json still has sigs (%v)", x.IA, err)
		}
	}
	if SIGReaches(a, b6) {
		t.Fatalf("%s reachable from %s after StopSIG", b6, a.IA)
	}
}
