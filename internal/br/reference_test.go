package br

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// The AS of the differential test: the test AS without its core links,
// which a non-core AS may not have.
const refTopology = `{
  "isd_as": "1-ff00:0:110", "mtu": 1472, "dispatched_ports": "31000-32767", "attributes": [],
  "control_service": {"cs1": {"addr": "198.18.0.10:30254"}},
  "discovery_service": {"cs1": {"addr": "198.18.0.10:30254"}},
  "border_routers": {
    "br1": {
      "internal_addr": "198.18.0.1:30042",
      "interfaces": {
        "1": {"underlay": {"local": "198.18.1.1:50000", "remote": "198.18.1.2:50000"}, "isd_as": "1-ff00:0:111", "link_to": "child", "mtu": 1472},
        "2": {"underlay": {"local": "198.18.2.1:50000", "remote": "198.18.2.2:50000"}, "isd_as": "1-ff00:0:100", "link_to": "parent", "mtu": 1472},
        "4": {"underlay": {"local": "198.18.4.1:50000", "remote": "198.18.4.2:50000"}, "isd_as": "2-ff00:0:210", "link_to": "peer", "remote_interface_id": 9, "mtu": 1472},
        "7": {"underlay": {"local": "[2001:2::1]:50000", "remote": "[2001:2::2]:50000"}, "isd_as": "1-ff00:0:113", "link_to": "child", "mtu": 1472}
      }
    },
    "br2": {
      "internal_addr": "198.18.0.2:30042",
      "interfaces": {
        "5": {"underlay": {"local": "198.18.5.1:50000", "remote": "198.18.5.2:50000"}, "isd_as": "1-ff00:0:112", "link_to": "child", "mtu": 1472}
      }
    }
  }
}`

// refBed is a network namespace with the reference router running and a
// socket at every address it may send to.
type refBed struct {
	version string // scionproto's release
	ns      string
	dir     string
	sockets map[netip.AddrPort]*net.UDPConn
	arrived chan datagram
	router  *ReferenceRouter
}

func (b *refBed) start(t *testing.T) {
	t.Helper()
	r, err := StartReferenceRouter(b.version, b.ns, "br1", b.dir, "198.18.0.1:30042")
	if err != nil {
		t.Fatal(err)
	}
	b.router = r
}

func startReference(t *testing.T, version string) *refBed {
	t.Helper()
	requireKernel(t)
	b := make([]byte, 2)
	rand.Read(b)
	bed := &refBed{version: version, ns: "fp-tref" + hex.EncodeToString(b), sockets: map[netip.AddrPort]*net.UDPConn{}, arrived: make(chan datagram, 1024)}
	if err := netns.Create(bed.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range bed.sockets {
			s.Close()
		}
		netns.Delete(bed.ns)
	})
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", bed.ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("link", "set", "lo", "up")
	for _, a := range []string{"198.18.0.1", "198.18.0.2", "198.18.0.100", "198.18.1.1", "198.18.1.2", "198.18.2.1", "198.18.2.2", "198.18.4.1", "198.18.4.2", "198.18.5.1", "198.18.5.2"} {
		ip("addr", "add", a+"/32", "dev", "lo")
	}
	for _, a := range []string{"198.18.0.10"} {
		ip("addr", "add", a+"/32", "dev", "lo")
	}
	for _, a := range []string{"2001:2::1", "2001:2::2"} {
		ip("addr", "add", a+"/128", "dev", "lo", "nodad")
	}

	dir := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "keys"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "topology.json"), []byte(refTopology), 0o600))
	must(os.WriteFile(filepath.Join(dir, "keys", "master0.key"), []byte("IAOYbTs/CobLFV3T3jt6lQ=="), 0o600))
	must(os.WriteFile(filepath.Join(dir, "keys", "master1.key"), []byte("8fiM4fdey8zv/9OaQw8lKg=="), 0o600))
	must(os.WriteFile(filepath.Join(dir, "br.toml"), []byte("router_id = \"br1\"\ntopology = \"topology.json\"\nkeys = \"keys\"\n"), 0o600))

	bed.dir = dir
	t.Cleanup(func() {
		if bed.router == nil {
			return
		}
		bed.router.Stop()
		if t.Failed() {
			t.Logf("reference router output:\n%s", bed.router.Logs.String())
		}
	})

	// Sockets at the neighbours' ends, the sibling and the local host.
	ends := []string{"198.18.1.2:50000", "198.18.2.2:50000", "198.18.4.2:50000", "[2001:2::2]:50000",
		"198.18.0.2:30042", "198.18.0.100:30041", "198.18.0.100:31500", "198.18.0.100:31001", "198.18.0.100:40000",
		"198.18.0.10:30254"}
	must(netns.Run(bed.ns, func() error {
		for _, e := range ends {
			a := netip.MustParseAddrPort(e)
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(a))
			if err != nil {
				return err
			}
			bed.sockets[a] = c
			go func() {
				buf := make([]byte, 9000)
				for {
					n, src, err := c.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					bed.arrived <- datagram{at: a, from: src, payload: append([]byte(nil), buf[:n]...)}
				}
			}()
		}
		return nil
	}))
	bed.start(t)
	return bed
}

type datagram struct {
	at      netip.AddrPort
	from    netip.AddrPort
	payload []byte
}

// exchange sends payload from one socket to the router and collects what
// arrives anywhere: up to wait for the first datagram, then until 30 ms
// pass without one. Leftovers of earlier exchanges are dropped first.
func (b *refBed) exchange(t *testing.T, from, to netip.AddrPort, payload []byte, wait time.Duration) []datagram {
	t.Helper()
	s, ok := b.sockets[from]
	if !ok {
		t.Fatalf("no socket at %s", from)
	}
	for drained := false; !drained; {
		select {
		case <-b.arrived:
		case <-time.After(50 * time.Millisecond):
			drained = true
		}
	}
	if _, err := s.WriteToUDPAddrPort(payload, to); err != nil {
		return nil
	}
	var got []datagram
	timeout := time.After(wait)
	for {
		select {
		case d := <-b.arrived:
			got = append(got, d)
			timeout = time.After(30 * time.Millisecond)
		case <-timeout:
			return got
		}
	}
}

// The XDP router and the reference agree: what the XDP program forwards,
// the reference forwards to the same place with the same SCION bytes; what
// it drops or passes as needing an SCMP error, the reference does not
// forward. Packets the fast path leaves to the slow path are not compared.
//
// It runs against each release of scionproto's router the tests cover
// (scionproto.ToTest), fastpath configured for that release; where the
// releases differ, versionCases say what each must do.
func TestAgreesWithReferenceRouter(t *testing.T) {
	for _, v := range testedVersions(t) {
		t.Run(v, func(t *testing.T) { agreesWithReference(t, v) })
	}
}

// testedVersions are the scionproto releases a version-sensitive test
// runs against.
func testedVersions(t *testing.T) []string {
	t.Helper()
	vs, err := scionproto.ToTest()
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// versionCase is a packet the releases of scionproto's router deliver
// differently: to where each release sends it ("" for dropped).
type versionCase struct {
	name  string
	pkt   SCIONPacket
	want  map[string]string // release → underlay destination
	xdpOK bool              // fastpath forwards it in XDP (else drops it)
}

// asTCP makes a SCION/UDP packet SCION/TCP, as a Mutate does: NextHdr 6;
// the UDP header's ports are where TCP's are, and the data offset (5 words)
// lies in the payload, if it is long enough.
func asTCP(b []byte) {
	b[4] = 6
	if l4 := b[int(b[5])*4:]; len(l4) > 12 {
		l4[12] = 5 << 4
	}
}

func versionCases() []versionCase {
	inbound := PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2}
	pkt := func(port uint16, mutate func([]byte)) SCIONPacket {
		p := pktCase{path: inbound, src: farIA, dst: localIA, dstHost: hostA, dstPort: port, in: arrival{ifid: 2}}.packet()
		p.Mutate = mutate
		return p
	}
	// 8 bytes of UDP header and 11 of payload: a TCP header of 19.
	short := pkt(31500, asTCP)
	short.Payload = short.Payload[:11]
	return []versionCase{
		{name: "UDP to a port outside dispatched_ports", pkt: pkt(40000, nil), xdpOK: true,
			want: map[string]string{"v0.12.0": "198.18.0.100:30041", "v0.14.0": "198.18.0.100:40000", "v0.15.1": "198.18.0.100:40000"}},
		{name: "UDP to a port inside dispatched_ports", pkt: pkt(31500, nil), xdpOK: true,
			want: map[string]string{"v0.12.0": "198.18.0.100:31500", "v0.14.0": "198.18.0.100:31500", "v0.15.1": "198.18.0.100:31500"}},
		{name: "TCP to a port inside dispatched_ports", pkt: pkt(31500, asTCP), xdpOK: true,
			want: map[string]string{"v0.12.0": "198.18.0.100:30041", "v0.14.0": "198.18.0.100:31500", "v0.15.1": "198.18.0.100:31500"}},
		{name: "TCP to a port outside dispatched_ports", pkt: pkt(40000, asTCP), xdpOK: true,
			want: map[string]string{"v0.12.0": "198.18.0.100:30041", "v0.14.0": "198.18.0.100:40000", "v0.15.1": "198.18.0.100:40000"}},
		{name: "TCP header of 19 bytes", pkt: short,
			want: map[string]string{"v0.12.0": "198.18.0.100:30041", "v0.14.0": "", "v0.15.1": ""}},
		{name: "NextHdr 99, unknown to the router", pkt: pkt(31500, func(b []byte) { b[4] = 99 }),
			want: map[string]string{"v0.12.0": "198.18.0.100:30041", "v0.14.0": "198.18.0.100:30041", "v0.15.1": ""}},
	}
}

func agreesWithReference(t *testing.T, version string) {
	bed := startReference(t, version)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "keys"), 0o700)
	os.WriteFile(filepath.Join(dir, "topology.json"), []byte(refTopology), 0o600)
	os.WriteFile(filepath.Join(dir, "keys", "master0.key"), []byte("IAOYbTs/CobLFV3T3jt6lQ=="), 0o600)
	os.WriteFile(filepath.Join(dir, "br.toml"), []byte("router_id = \"br1\"\ntopology = \"topology.json\"\nkeys = \"keys\"\nscion_version = \""+version+"\"\n"), 0o600)
	xcfg, err := LoadConfig(filepath.Join(dir, "br.toml"))
	if err != nil {
		t.Fatal(err)
	}
	r := loadTestRouter(t, xcfg)

	usable := func(c pktCase) bool {
		if c.cfg != nil || c.frame != nil || c.in.ifid == 3 || c.in.ifid == 6 {
			return false
		}
		for _, s := range c.path.Segments {
			for _, h := range s.Hops {
				for _, id := range []uint16{h.ConsIngress, h.ConsEgress} {
					if id == 3 || id == 6 {
						return false
					}
				}
			}
		}
		return true
	}
	type input struct {
		name  string
		frame []byte
	}
	var inputs []input
	for name, c := range routerCases() {
		if !usable(c) {
			continue
		}
		f, err := c.packet().Frame()
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, input{name, f})
	}
	// Map order would make the mutations differ from run to run.
	sort.Slice(inputs, func(i, j int) bool { return inputs[i].name < inputs[j].name })
	// Where the releases differ: each must do what its release does, and
	// fastpath what the release it is configured for does.
	for _, c := range versionCases() {
		f, err := c.pkt.Frame()
		if err != nil {
			t.Fatal(err)
		}
		want, ok := c.want[version]
		if !ok {
			t.Fatalf("%s: no expectation for %s", c.name, version)
		}
		res := r.runOne(t, f)
		switch {
		case want == "" && res.action != xdpDrop:
			t.Errorf("%s: %s drops it; XDP %s", c.name, version, res.verdict)
		case want != "" && c.xdpOK && (res.action != xdpTX || mustNextHop(res.out) != want):
			t.Errorf("%s: %s delivers to %s; XDP %s to %s", c.name, version, want, res.verdict, mustNextHop(res.out))
		}
		from, to, _ := underlayEnds(f)
		got := bed.exchange(t, from, to, scionPayload(f), 2*time.Second)
		var at []string
		for _, d := range got {
			if d.at != from {
				at = append(at, d.at.String())
			}
		}
		switch {
		case want == "" && len(at) != 0:
			t.Errorf("%s: scionproto %s was expected to drop it; it sent it to %v", c.name, version, at)
		case want != "" && !slices.Contains(at, want):
			t.Errorf("%s: scionproto %s was expected to deliver it to %s; it sent it to %v", c.name, version, want, at)
		}
		inputs = append(inputs, input{c.name, f})
	}
	// Mutations of the fixtures, in the SCION header and path.
	rng := mrand.New(mrand.NewSource(7))
	base := len(inputs)
	for i := 0; i < 300; i++ {
		src := inputs[rng.Intn(base)]
		f := append([]byte(nil), src.frame...)
		for n := rng.Intn(3) + 1; n > 0; n-- {
			off := 42 + rng.Intn(min(len(f)-42, 100))
			f[off] ^= byte(1 << rng.Intn(8))
		}
		// A mutation is another packet, sent with a right checksum as the
		// reference's sender sends it; a wrong checksum is the kernel's.
		setUDPChecksum(f)
		inputs = append(inputs, input{fmt.Sprintf("mutation %d of %s", i, src.name), f})
	}

	compared, forwarded, crashes := 0, 0, 0
	for _, in := range inputs {
		res := r.runOne(t, in.frame)
		from, to, ok := underlayEnds(in.frame)
		if !ok {
			continue
		}
		if _, ok := bed.sockets[from]; !ok {
			// Arrivals from hosts we keep no socket for (transit from a fake sibling).
			continue
		}
		sc := scionPayload(in.frame)
		// Wait long for what should come, briefly for what should not: a
		// late datagram would only be drained before the next exchange.
		wait := 200 * time.Millisecond
		if res.action == xdpTX {
			wait = 2 * time.Second
		}
		got := bed.exchange(t, from, to, sc, wait)
		if bed.router.Exited() {
			// scionproto's router panics on some inputs (an SVC source address from the
			// local AS, an SVC destination without services): nothing to
			// compare with; start it again.
			crashes++
			t.Logf("%s: the reference router crashed (XDP: %s)", in.name, res.verdict)
			bed.start(t)
			continue
		}
		var elsewhere []datagram
		for _, d := range got {
			if d.at != from {
				elsewhere = append(elsewhere, d)
			}
		}
		switch {
		case res.action == xdpTX:
			want := netip.MustParseAddrPort(mustNextHop(res.out))
			if _, ok := bed.sockets[want]; !ok {
				continue // a mutated host address or port we keep no socket for
			}
			forwarded++
			wantPayload := scionPayload(res.out)
			match := false
			for _, d := range elsewhere {
				match = match || (d.at == want && bytes.Equal(d.payload, wantPayload))
			}
			if !match {
				t.Errorf("%s: XDP forwards to %s (%s); the reference sent %s", in.name, want, res.verdict, describe(elsewhere, wantPayload))
			}
		case res.action == xdpDrop || isSCMPVerdict(res.verdict):
			if len(elsewhere) != 0 {
				t.Errorf("%s: XDP says %s; the reference forwarded %s", in.name, res.verdict, describe(elsewhere, nil))
			}
		default:
			continue
		}
		compared++
	}
	t.Logf("%d packets compared with the reference router, %d of them forwarded; the reference crashed on %d", compared, forwarded, crashes)
	if forwarded < 10 {
		t.Fatalf("only %d forwarded packets compared", forwarded)
	}
}

func isSCMPVerdict(v string) bool {
	switch v {
	case "no_interface", "invalid_mac", "expired", "link_type", "ingress_mismatch", "bad_length", "bad_src_ia", "bad_dst_ia", "bad_host_addr":
		return true
	}
	return false
}

func scionPayload(frame []byte) []byte {
	off := 14 + 20
	if frame[12] == 0x86 && frame[13] == 0xdd {
		off = 14 + 40
	} else {
		off = 14 + int(frame[14]&0xf)*4
	}
	udpLen := int(frame[off+4])<<8 | int(frame[off+5])
	end := min(off+udpLen, len(frame))
	return frame[off+8 : end]
}

func mustNextHop(frame []byte) string {
	_, dst, ok := underlayEnds(frame)
	if !ok {
		return "0.0.0.0:0"
	}
	return dst.String()
}

func describe(ds []datagram, want []byte) string {
	if len(ds) == 0 {
		return "nothing"
	}
	var parts []string
	for _, d := range ds {
		s := fmt.Sprintf("%d bytes to %s", len(d.payload), d.at)
		if want != nil && !bytes.Equal(d.payload, want) {
			s += fmt.Sprintf(" (differs: got %x want %x)", d.payload[:min(64, len(d.payload))], want[:min(64, len(want))])
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
