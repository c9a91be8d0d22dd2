package br

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/checksum"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The plain-IP forwarder (forward_ip) behind the router, run with
// BPF_PROG_TEST_RUN in a hostBed's router namespace, as if each frame
// arrived from A on d0: the FIB, the neighbours and the devices are the
// namespace's own.

// xdpMd is struct xdp_md as a test run's context: only the ingress device.
type xdpMd struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

const xdpRedirect = 4

// ipFrame is an Ethernet frame carrying an IP packet (IPv4 without options,
// or IPv6) from src to dst with the given hop limit or TTL and UDP payload.
func ipFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, hops uint8, payload int) []byte {
	udp := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], 9)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	f := append(append([]byte{}, dstMAC...), srcMAC...)
	if src.Is4() {
		f = append(f, 0x08, 0x00)
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		ip[8], ip[9] = hops, 17
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], ^checksum.Fold(checksum.Sum(ip, 0)))
		return append(append(f, ip...), udp...)
	}
	f = append(f, 0x86, 0xdd)
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
	ip[6], ip[7] = 17, hops
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	return append(append(f, ip...), udp...)
}

// ipBed is a hostBed whose router namespace forwards on d0 (the FIB's
// condition for a packet arriving there), with a router loaded, not
// attached, and told its host.
type ipBed struct {
	*hostBed
	r          *Router
	d0, d1     *netlink.LinkAttrs
	aMAC, bMAC net.HardwareAddr
	ipBedOptions
}

// ipBedOptions say how the bed's router is configured.
type ipBedOptions struct {
	v6, forwardIP bool
	txToB         bool // d1 takes XDP frames (b0 has GRO)
	external      bool // forward_ip_external
	// setup, if set, changes the host before the router looks at it.
	setup func(t *testing.T, b *ipBed)
}

func newIPBed(t *testing.T, o ipBedOptions) *ipBed {
	t.Helper()
	v6, forwardIP, txToB := o.v6, o.forwardIP, o.txToB
	b := &ipBed{hostBed: newHostBed(t, v6), ipBedOptions: o}
	if !txToB {
		// d1 takes no XDP frames while its peer runs neither XDP nor GRO.
		b.setGRO(t, b.b, "b0", false)
	}
	fam := "ipv4"
	if v6 {
		fam = "ipv6"
	}
	b.sysctl(t, b.dut, "net."+fam+".conf.d0.forwarding", "1")
	if o.setup != nil {
		o.setup(t, b)
	}
	cfg := *b.cfg
	cfg.ForwardIP = forwardIP
	cfg.ForwardIPExternal = o.external
	r, err := Load(&cfg, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	b.r = r
	if err := r.SetHost(b.dut, []xdp.Iface{{Netns: b.dut, Name: "d0"}, {Netns: b.dut, Name: "d1"}}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		to  **netlink.LinkAttrs
		dev string
	}{{&b.d0, "d0"}, {&b.d1, "d1"}} {
		i, err := xdp.Lookup(xdp.Iface{Netns: b.dut, Name: d.dev})
		if err != nil {
			t.Fatal(err)
		}
		*d.to = i
	}
	b.aMAC, _ = net.ParseMAC(b.mac(t, b.a, "a0"))
	b.bMAC, _ = net.ParseMAC(b.mac(t, b.b, "b0"))
	return b
}

// ipResult is one run of the router on a frame from A (from B with
// runFromB): its action, the frame after, and which of the router's and the
// forwarder's counters moved.
type ipResult struct {
	action   uint32
	out      []byte
	verdict  string // the router's
	ipVerdct string // the forwarder's; "" if none moved
}

func (b *ipBed) run(t *testing.T, frame []byte) ipResult {
	t.Helper()
	return b.runFrom(t, b.d0, frame)
}

func (b *ipBed) runFrom(t *testing.T, in *netlink.LinkAttrs, frame []byte) ipResult {
	t.Helper()
	before, err := b.r.Counters()
	if err != nil {
		t.Fatal(err)
	}
	ipBefore, err := b.r.IPCounters()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(frame)+256)
	opts := ebpf.RunOptions{Data: frame, DataOut: out, Context: xdpMd{DataEnd: uint32(len(frame)), IngressIfindex: uint32(in.Index)}}
	var ret uint32
	if err := netns.Run(b.dut, func() error {
		var err error
		ret, err = b.r.objs.Router.Run(&opts)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	res := ipResult{action: ret, out: opts.DataOut, verdict: "none"}
	after, err := b.r.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for s := range after {
		for v := range after[s] {
			if after[s][v].Packets != before[s][v].Packets {
				res.verdict = VerdictName(Verdict(v))
			}
		}
	}
	ipAfter, err := b.r.IPCounters()
	if err != nil {
		t.Fatal(err)
	}
	for v, s := range ipAfter {
		if s.Packets != ipBefore[v].Packets {
			if res.ipVerdct != "" {
				t.Fatalf("one packet moved two forwarder counters: %s and %s", res.ipVerdct, v)
			}
			res.ipVerdct = v
		}
	}
	return res
}

func TestForwardIP(t *testing.T) {
	type ipCase struct {
		ipBedOptions
		src, dst string // default A's and B's addresses
		fromB    bool   // arrives from B on d1 (to A by default)
		hops     uint8
		payload  int
		// frame, if set, edits the frame before the run.
		frame func(f []byte) []byte

		wantAction uint32
		wantIP     string // the forwarder's verdict; "" none
		wantRouter string // the router's; "not_scion" if empty
		forwarded  bool   // out is the frame forwarded to B, else the frame unchanged
	}
	on := ipBedOptions{forwardIP: true, txToB: true}
	on6 := ipBedOptions{v6: true, forwardIP: true, txToB: true}
	rpFilter := func(v string) ipBedOptions {
		o := on
		o.setup = func(t *testing.T, b *ipBed) {
			b.sysctl(t, b.dut, "net.ipv4.conf.all.rp_filter", v)
			// A route back to sources in 10.2.9.0/24 through d1 (to B).
			b.ip(t, b.dut, "route", "add", "10.2.9.0/24", "via", b.bAddr.String())
		}
		return o
	}
	withIPv4Checksum := func(f []byte) []byte {
		binary.BigEndian.PutUint16(f[24:], 0)
		binary.BigEndian.PutUint16(f[24:], ^checksum.Fold(checksum.Sum(f[14:34], 0)))
		return f
	}
	cases := map[string]ipCase{
		"ipv6 forwarded":       {ipBedOptions: on6, hops: 64, wantAction: xdpRedirect, wantIP: "forwarded", forwarded: true},
		"ipv4 forwarded":       {ipBedOptions: on, hops: 64, wantAction: xdpRedirect, wantIP: "forwarded", forwarded: true},
		"ipv4 ttl 2 forwarded": {ipBedOptions: on, hops: 2, wantAction: xdpRedirect, wantIP: "forwarded", forwarded: true},
		"ipv6 hop limit 1":     {ipBedOptions: on6, hops: 1, wantAction: xdpPass, wantIP: "hop_limit"},
		"ipv4 ttl 1":           {ipBedOptions: on, hops: 1, wantAction: xdpPass, wantIP: "hop_limit"},
		"ipv6 too big":         {ipBedOptions: on6, hops: 64, payload: 1600, wantAction: xdpPass, wantIP: "too_big"},
		"ipv4 too big":         {ipBedOptions: on, hops: 64, payload: 1600, wantAction: xdpPass, wantIP: "too_big"},
		"ipv6 no route at all": {ipBedOptions: on6, dst: "fd00:9::1", hops: 64, wantAction: xdpPass, wantIP: "local"},
		"ipv4 no route at all": {ipBedOptions: on, dst: "10.9.0.1", hops: 64, wantAction: xdpPass, wantIP: "local"},
		"ipv6 unreachable route": {ipBedOptions: ipBedOptions{v6: true, forwardIP: true, txToB: true, setup: func(t *testing.T, b *ipBed) {
			b.ip(t, b.dut, "-6", "route", "add", "unreachable", "fd00:9::/64")
		}}, dst: "fd00:9::1", hops: 64, wantAction: xdpPass, wantIP: "no_route"},
		"ipv4 unreachable route": {ipBedOptions: ipBedOptions{forwardIP: true, txToB: true, setup: func(t *testing.T, b *ipBed) {
			b.ip(t, b.dut, "route", "add", "unreachable", "10.9.0.0/24")
		}}, dst: "10.9.0.1", hops: 64, wantAction: xdpPass, wantIP: "no_route"},
		"ipv6 no neighbour":  {ipBedOptions: on6, dst: "fd00:2::99", hops: 64, wantAction: xdpPass, wantIP: "no_route"},
		"ipv4 no neighbour":  {ipBedOptions: on, dst: "10.2.0.99", hops: 64, wantAction: xdpPass, wantIP: "no_route"},
		"ipv6 for this host": {ipBedOptions: on6, dst: "fd00:1::2", hops: 64, wantAction: xdpPass, wantIP: "local"},
		"ipv6 link-local":    {ipBedOptions: on6, dst: "fe80::1", hops: 64, wantAction: xdpPass, wantIP: "other"},
		"ipv6 not ready":     {ipBedOptions: ipBedOptions{v6: true, forwardIP: true}, hops: 64, wantAction: xdpPass, wantIP: "not_ready"},
		"ipv4 not ready":     {ipBedOptions: ipBedOptions{forwardIP: true}, hops: 64, wantAction: xdpPass, wantIP: "not_ready"},
		"ipv6 forwarding off": {ipBedOptions: ipBedOptions{v6: true, forwardIP: true, txToB: true, setup: func(t *testing.T, b *ipBed) {
			b.sysctl(t, b.dut, "net.ipv6.conf.d0.forwarding", "0")
		}}, hops: 64, wantAction: xdpPass, wantIP: "fwd_disabled"},
		"ipv6 slot empty": {ipBedOptions: ipBedOptions{v6: true, txToB: true}, hops: 64, wantAction: xdpPass},
		"ipv4 slot empty": {ipBedOptions: ipBedOptions{txToB: true}, hops: 64, wantAction: xdpPass},

		// What the kernel's input drops before routing (ip_rcv, ipv6_rcv,
		// ip_route_input) or its forwarding refuses (ip_forward,
		// ip6_forward) goes up unchanged.
		"ipv4 in a broadcast frame": {ipBedOptions: on, hops: 64, wantAction: xdpPass, wantIP: "not_host",
			frame: func(f []byte) []byte { copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}); return f }},
		"ipv6 in a multicast frame": {ipBedOptions: on6, hops: 64, wantAction: xdpPass, wantIP: "not_host",
			frame: func(f []byte) []byte { copy(f, []byte{0x33, 0x33, 0, 0, 0, 1}); return f }},
		"ipv4 for another host's MAC": {ipBedOptions: on, hops: 64, wantAction: xdpPass, wantRouter: "other_host",
			frame: func(f []byte) []byte { copy(f, []byte{0x02, 0, 0, 0, 0xbe, 0xef}); return f }},
		"ipv4 header checksum wrong": {ipBedOptions: on, hops: 64, wantAction: xdpPass, wantIP: "bad_header",
			frame: func(f []byte) []byte { f[24] ^= 0x40; return f }},
		"ipv4 longer than its frame": {ipBedOptions: on, hops: 64, wantAction: xdpPass, wantIP: "bad_header",
			frame: func(f []byte) []byte {
				binary.BigEndian.PutUint16(f[16:], binary.BigEndian.Uint16(f[16:])+1)
				return withIPv4Checksum(f)
			}},
		"ipv4 total length under its header": {ipBedOptions: on, hops: 64, wantAction: xdpPass, wantIP: "bad_header",
			frame: func(f []byte) []byte { binary.BigEndian.PutUint16(f[16:], 19); return withIPv4Checksum(f) }},
		"ipv6 longer than its frame": {ipBedOptions: on6, hops: 64, wantAction: xdpPass, wantIP: "bad_header",
			frame: func(f []byte) []byte { binary.BigEndian.PutUint16(f[18:], binary.BigEndian.Uint16(f[18:])+1); return f }},
		"ipv4 from loopback":          {ipBedOptions: on, src: "127.0.0.1", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv4 from 0/8":               {ipBedOptions: on, src: "0.1.2.3", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv4 from multicast":         {ipBedOptions: on, src: "224.0.0.5", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv4 from limited broadcast": {ipBedOptions: on, src: "255.255.255.255", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv4 from the router itself": {ipBedOptions: on, src: "10.2.0.2", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv4 to 0/8":                 {ipBedOptions: on, dst: "0.0.0.9", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv4 to loopback":            {ipBedOptions: on, dst: "127.0.0.2", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv6 from the unspecified":   {ipBedOptions: on6, src: "::", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv6 from an IPv4-mapped":    {ipBedOptions: on6, src: "::ffff:10.1.0.1", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv6 to loopback":            {ipBedOptions: on6, dst: "::1", hops: 64, wantAction: xdpPass, wantIP: "martian"},
		"ipv4 padded frame is trimmed": {ipBedOptions: on, hops: 64, wantAction: xdpRedirect, wantIP: "forwarded", forwarded: true,
			frame: func(f []byte) []byte { return append(f, make([]byte, 18)...) }},

		// B is the router's parent AS, on d1 alone: its plain IP is the
		// kernel's to forward (or not), unless forward_ip_external.
		"ipv4 from a neighbour AS": {ipBedOptions: on, fromB: true, hops: 64, wantAction: xdpPass, wantIP: "external"},
		"ipv6 from a neighbour AS": {ipBedOptions: on6, fromB: true, hops: 64, wantAction: xdpPass, wantIP: "external"},
		"ipv4 from a neighbour AS too": {ipBedOptions: ipBedOptions{forwardIP: true, txToB: true, external: true, setup: func(t *testing.T, b *ipBed) {
			b.sysctl(t, b.dut, "net.ipv4.conf.d1.forwarding", "1")
		}}, fromB: true, hops: 64, wantAction: xdpRedirect, wantIP: "forwarded", forwarded: true},

		// rp_filter: strict wants the route back to the source through the
		// arrival device; loose, any unicast route back.
		"ipv4 strict rp_filter, source routed back by d0": {ipBedOptions: rpFilter("1"), hops: 64, wantAction: xdpRedirect, wantIP: "forwarded", forwarded: true},
		"ipv4 strict rp_filter, source routed by d1":      {ipBedOptions: rpFilter("1"), src: "10.2.9.7", hops: 64, wantAction: xdpPass, wantIP: "reverse_path"},
		"ipv4 loose rp_filter, source routed by d1":       {ipBedOptions: rpFilter("2"), src: "10.2.9.7", hops: 64, wantAction: xdpRedirect, wantIP: "forwarded", forwarded: true},
		"ipv4 loose rp_filter, no route back":             {ipBedOptions: rpFilter("2"), src: "10.77.0.1", hops: 64, wantAction: xdpPass, wantIP: "reverse_path"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b := newIPBed(t, c.ipBedOptions)
			src, dst := b.aAddr, b.bAddr
			inMAC, srcMAC, in := b.d0.HardwareAddr, b.aMAC, b.d0
			outMAC, toMAC := b.d1.HardwareAddr, b.bMAC
			if c.fromB {
				src, dst = b.bAddr, b.aAddr
				inMAC, srcMAC, in = b.d1.HardwareAddr, b.bMAC, b.d1
				outMAC, toMAC = b.d0.HardwareAddr, b.aMAC
			}
			if c.src != "" {
				src = netip.MustParseAddr(c.src)
			}
			if c.dst != "" {
				dst = netip.MustParseAddr(c.dst)
			}
			in0 := ipFrame(inMAC, srcMAC, src, dst, c.hops, 100+c.payload)
			if c.frame != nil {
				in0 = c.frame(in0)
			}
			res := b.runFrom(t, in, append([]byte(nil), in0...))
			router := c.wantRouter
			if router == "" {
				router = "not_scion"
			}
			if res.action != c.wantAction || res.ipVerdct != c.wantIP || res.verdict != router {
				t.Fatalf("action %d, forwarder's verdict %q, router's %q; want %d, %q, %s", res.action, res.ipVerdct, res.verdict, c.wantAction, c.wantIP, router)
			}
			want := in0
			if c.forwarded {
				want = ipFrame(toMAC, outMAC, src, dst, c.hops-1, 100+c.payload)
			}
			if !bytes.Equal(res.out, want) {
				t.Fatalf("frame after\n%x\nwant\n%x", res.out, want)
			}
			if !c.v6 && c.forwarded && checksum.Fold(checksum.Sum(res.out[14:34], 0)) != 0xffff {
				t.Fatalf("IPv4 header checksum wrong: %x", res.out[14:34])
			}
		})
	}
}

// SCION through the router is the same, byte for byte and verdict for
// verdict, whether the plain-IP slot is filled or not.
func TestForwardIPLeavesSCIONAlone(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		var got [2]ipResult
		var frames [][]byte // one packet for both (its path is made anew each time)
		for i, on := range []bool{false, true} {
			b := newIPBed(t, ipBedOptions{v6: v6, forwardIP: on, txToB: true})
			if frames == nil {
				var err error
				if frames, err = TransitPackets(b.cfg, TransitOptions{Count: 1, Size: 200, SrcMAC: b.aMAC, DstMAC: b.d0.HardwareAddr}); err != nil {
					t.Fatal(err)
				}
			}
			// Each bed's d0 has a MAC of its own.
			f := append([]byte(nil), frames[0]...)
			copy(f, b.d0.HardwareAddr)
			got[i] = b.run(t, f)
			if got[i].verdict != "forwarded" || got[i].ipVerdct != "" {
				t.Fatalf("v6 %v, forward_ip %v: router's verdict %q, forwarder's %q", v6, on, got[i].verdict, got[i].ipVerdct)
			}
		}
		// The two beds' devices have MACs of their own: compare from the
		// Ethernet type on, and the MACs by role.
		if got[0].action != got[1].action || !bytes.Equal(got[0].out[12:], got[1].out[12:]) {
			t.Fatalf("v6 %v: with the slot empty %d %x\nfilled %d %x", v6, got[0].action, got[0].out, got[1].action, got[1].out)
		}
	}
}

// The router with the tail call and the forwarder load on this kernel in
// each way the router is attached: native, for worker CPUs, generic.
func TestForwardIPLoads(t *testing.T) {
	requireKernel(t)
	cfg := testConfig()
	cfg.ForwardIP = true
	cfg.CPUs = []int{0}
	r, err := Load(cfg, LoadOptions{SkipFIB: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.cpuProg == nil {
		t.Fatal("no worker-CPU router loaded")
	}
	if _, err := r.GenericProgram(); err != nil {
		t.Fatal(err)
	}
	var id ebpf.ProgramID
	for _, m := range []*ebpf.Map{r.objs.Next, r.objs.NextCPU} {
		if err := m.Lookup(uint32(0), &id); err != nil || id == 0 {
			t.Fatalf("%v: the slot holds no program (%v)", m, err)
		}
	}
	if err := r.setForwardIP(false); err != nil {
		t.Fatal(err)
	}
	if err := r.objs.Next.Lookup(uint32(0), &id); err == nil {
		t.Fatalf("the slot still holds program %d", id)
	}
}

// ipTotals are an attached router's plain-IP counts by verdict.
func ipTotals(t *testing.T, name string) map[string]uint64 {
	t.Helper()
	p, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s, err := p.IPTotals()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for v, c := range s {
		out[v] = c.Packets
	}
	return out
}

// Pings between A and B, routed through the router's namespace: with
// forward_ip on, `br serve` forwards them in XDP both ways; a reload with it
// off gives them back to the kernel, without detaching; on again, XDP again.
func TestServeForwardIP(t *testing.T) {
	b := newHostBed(t, true)
	b.sysctl(t, b.dut, "net.ipv6.conf.all.forwarding", "1")
	b.ip(t, b.a, "-6", "route", "add", "fd00:2::/64", "via", b.d0Addr.String())
	b.ip(t, b.b, "-6", "route", "add", "fd00:1::/64", "via", b.d1Addr.String())
	setForwardIP := func(on bool) {
		t.Helper()
		// B is the router's parent AS, reached by d1 alone: its plain IP
		// is forwarded in XDP only with forward_ip_external.
		text := fmt.Sprintf("router_id = \"br1\"\ntopology = \"topology.json\"\nkeys = \"keys\"\nforward_ip = %v\nforward_ip_external = %v\n", on, on)
		if err := os.WriteFile(b.cfg.Path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setForwardIP(true)
	name, log, reload, stop := b.serve(t)
	const n = 5
	ping := func() {
		t.Helper()
		mustRun(t, "ip", "netns", "exec", b.a, "ping", "-6", "-n", "-q", "-c", strconv.Itoa(n), "-i", "0.05", "-W", "1", b.bAddr.String())
	}
	check := func(inXDP bool) {
		t.Helper()
		before := ipTotals(t, name)["forwarded"]
		ping()
		got := ipTotals(t, name)["forwarded"] - before
		if inXDP && got < 2*n || !inXDP && got != 0 {
			t.Fatalf("forward_ip %v: %d of %d echo requests and replies forwarded in XDP; counts %v; log:\n%s", inXDP, got, 2*n, ipTotals(t, name), log)
		}
	}
	check(true)
	setForwardIP(false)
	reload <- struct{}{}
	waitFor(t, log, "reloaded and attached again in place")
	check(false)
	setForwardIP(true)
	reload <- struct{}{}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(log.String(), "reloaded and attached again in place") < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no second reload:\n%s", log)
		}
	}
	check(true)
	if n := len(xdp.Links(PinDir(name))); n != 2 {
		t.Fatalf("%d link pins, want both devices attached throughout", n)
	}
	// B stops taking XDP frames: what goes to B is passed up (not_ready)
	// and the kernel forwards it, once the keeper has seen it (a second);
	// B's replies are still forwarded in XDP. No echo is lost.
	b.setGRO(t, b.b, "b0", false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		before := ipTotals(t, name)
		ping()
		after := ipTotals(t, name)
		if after["not_ready"]-before["not_ready"] == n && after["forwarded"]-before["forwarded"] == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B without GRO: counts went from %v to %v; log:\n%s", before, after, log)
		}
	}
	// Detach takes everything, the slot and the forwarder's counters too.
	stop()
	if err := Detach(name, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PinDir(name)); !os.IsNotExist(err) {
		t.Fatalf("%s after detach: %v", PinDir(name), err)
	}
}
