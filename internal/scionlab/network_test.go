package scionlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/capture"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// testNetwork brings up a network of three ASes under names no other test
// or lab uses, and takes it down when the test ends, also when it fails.
func testNetwork(t *testing.T, o UpOptions) (Network, []AS) {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	b := make([]byte, 2)
	rand.Read(b)
	n := Network{Prefix: "fp-s" + hex.EncodeToString(b) + "-", Dir: filepath.Join(t.TempDir(), "scion")}
	t.Cleanup(func() {
		if t.Failed() {
			if st, err := n.Status(); err == nil {
				var sb strings.Builder
				st.Write(&sb)
				t.Log(sb.String())
			}
		}
		if err := n.Down(io.Discard); err != nil {
			t.Error(err)
		}
		for ns := range n.namespaces() {
			t.Errorf("namespace %s left behind", ns)
		}
	})
	if o.Hybrid {
		labtest.Fastpath(t) // hybrid mode runs `fastpath br serve`
	}
	o.ASes = 3
	var log strings.Builder
	o.Log = &log
	st, err := n.Up(context.Background(), o)
	if err != nil {
		t.Fatalf("up: %v\n%s", err, log.String())
	}
	t.Logf("first path after %.1f s", st.PathsAfter.Seconds())
	as, _, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	return n, as
}

var lossRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// ping sends count SCMP echo requests from the first leaf's host to the
// last's and returns how many replies came back.
func ping(t *testing.T, n Network, as []AS, count int) int {
	t.Helper()
	dst := as[len(as)-1]
	out, err := n.Scion(context.Background(), as[1], "ping", dst.IA.String()+","+dst.Host.String(), "-c", strconv.Itoa(count), "--interval", "50ms", "--timeout", "1s")
	m := lossRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("scion ping: %v\n%s", err, out)
	}
	got, _ := strconv.Atoi(m[2])
	return got
}

func forwarded(t *testing.T, name string) uint64 { return counts(t, name)["forwarded"] }

// counts are a router's packet counts by verdict.
func counts(t *testing.T, name string) map[string]uint64 {
	t.Helper()
	p, err := br.OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	totals, err := p.Totals()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for v, s := range totals {
		out[v] = s.Packets
	}
	return out
}

// bfdState sums, over an AS's reference router's interfaces, how many are
// up and how often BFD changed their state.
func bfdState(t *testing.T, n Network, a AS) (up, changes float64) {
	t.Helper()
	m, err := n.RouterMetrics(a)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		switch {
		case strings.HasPrefix(k, "router_interface_up{"):
			up += v
		case strings.HasPrefix(k, "router_bfd_state_changes_total{"):
			changes += v
		}
	}
	return up, changes
}

// fastpath in front of the reference routers of the core AS and a leaf AS,
// in a network of scionproto's own services: paths are found, pings cross,
// fastpath's routers count them as forwarded in XDP, and the reference
// routers' BFD sessions stay up.
func TestHybridInARealNetwork(t *testing.T) {
	n, as := testNetwork(t, UpOptions{})
	core, leaf := as[0], as[1]
	var names []string
	for _, a := range []AS{core, leaf} {
		name, err := n.AttachHybrid(a, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	upBefore, changesBefore := bfdState(t, n, core)
	if upBefore != 2 {
		t.Fatalf("the core's reference router has %v interfaces up, want 2", upBefore)
	}
	if out, err := n.Scion(context.Background(), leaf, "showpaths", as[2].IA.String(), "--timeout", "5s"); err != nil || !strings.Contains(out, "alive") {
		t.Fatalf("showpaths: %v\n%s", err, out)
	}
	fwdCore, fwdLeaf := forwarded(t, names[0]), forwarded(t, names[1])
	const count = 50
	if got := ping(t, n, as, count); got != count {
		t.Fatalf("%d of %d pings answered", got, count)
	}
	// Each echo crosses the core twice (request, reply) and the leaf's
	// router twice (out, in); BFD and beacons go up the stack.
	if d := forwarded(t, names[0]) - fwdCore; d < 2*count {
		t.Fatalf("the core's fastpath forwarded %d packets for %d pings, want at least %d", d, count, 2*count)
	}
	if d := forwarded(t, names[1]) - fwdLeaf; d < 2*count {
		t.Fatalf("the leaf's fastpath forwarded %d packets for %d pings, want at least %d", d, count, 2*count)
	}
	for _, a := range []AS{core, leaf} {
		up, changes := bfdState(t, n, a)
		want := 2.0
		if !a.Core {
			want = 1
		}
		if up != want {
			t.Fatalf("%s: %v interfaces up after the pings, want %v", a.IA, up, want)
		}
		if a.Core && changes != changesBefore {
			t.Fatalf("%s: BFD changed state %v times during the test", a.IA, changes-changesBefore)
		}
	}
}

// With BFD off (else the neighbours would hold the links down), the core
// AS's reference router can die: fastpath in front of it carries on.
func TestHybridOutlivesTheReferenceRouter(t *testing.T) {
	n, as := testNetwork(t, UpOptions{NoBFD: true})
	if _, err := n.AttachHybrid(as[0], io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := ping(t, n, as, 10); got != 10 {
		t.Fatalf("before: %d of 10 pings answered", got)
	}
	if err := n.Stop("router-64512"); err != nil {
		t.Fatal(err)
	}
	if got := ping(t, n, as, 50); got != 50 {
		t.Fatalf("with the core's reference router gone: %d of 50 pings answered", got)
	}
}

// down finds what a crashed up left, from the namespaces alone: processes
// inside are killed and the namespaces go.
func TestDownAfterACrash(t *testing.T) {
	n, as := testNetwork(t, UpOptions{})
	st, err := n.readState()
	if err != nil || st == nil {
		t.Fatalf("no record of the network: %v", err)
	}
	if err := os.Remove(n.statePath()); err != nil {
		t.Fatal(err)
	}
	if err := n.Down(io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, ns := range Namespaces(as) {
		if netns.Exists(ns) {
			t.Fatalf("namespace %s survived down", ns)
		}
	}
	for _, p := range st.Procs {
		if p.Alive() {
			t.Fatalf("%s (pid %d) survived down", p.Name, p.PID)
		}
	}
	if _, err := os.Stat(n.Dir); !os.IsNotExist(err) {
		t.Fatalf("down left %s", n.Dir)
	}
}

// A SCION packet of 8,000 bytes crosses the network through scionproto's
// routers at --mtu 9000 in one frame per link: every device takes it, and
// the topology files give paths a SCION MTU of 8972. At the default MTU the
// same ping crosses too, but only in IP fragments, and paths say 1472.
func TestJumboPing(t *testing.T) {
	cases := map[string]struct {
		mtu, pathMTU int
		whole        bool
	}{
		// 8,972 bytes of SCION fit a link of 9,000; a path says no more
		// than the release's router reads whole (TopoMTU: 8,488 from v0.14.0).
		"jumbo":   {mtu: 9000, pathMTU: 8972, whole: true},
		"default": {mtu: 0, pathMTU: 1472, whole: false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			n, as := testNetwork(t, UpOptions{MTU: c.mtu})
			src, dst := as[1], as[len(as)-1]
			linkMTU := max(c.mtu, DefaultMTU)
			_, links, err := n.ASes()
			if err != nil {
				t.Fatal(err)
			}
			devs := []xdp.Iface{}
			for _, a := range as {
				devs = append(devs, xdp.Iface{Netns: a.Netns, Name: InternalDev}, xdp.Iface{Netns: a.HostNetns, Name: HostDev})
			}
			for _, l := range links {
				devs = append(devs, xdp.Iface{Netns: as[l.Parent].Netns, Name: l.ParentDev}, xdp.Iface{Netns: as[l.Child].Netns, Name: l.ChildDev})
			}
			for _, d := range devs {
				attrs, err := xdp.Lookup(d)
				if err != nil {
					t.Fatal(err)
				}
				if attrs.MTU != linkMTU {
					t.Fatalf("%s has MTU %d, want %d", d, attrs.MTU, linkMTU)
				}
			}
			out, err := n.Scion(context.Background(), src, "showpaths", dst.IA.String(), "--format", "json", "--timeout", "5s")
			if err != nil {
				t.Fatal(err)
			}
			var sp struct {
				Paths []struct {
					MTU int `json:"mtu"`
				} `json:"paths"`
			}
			if err := json.Unmarshal([]byte(out), &sp); err != nil || len(sp.Paths) == 0 {
				t.Fatalf("showpaths: %v\n%s", err, out)
			}
			for _, p := range sp.Paths {
				if want := TopoMTU(n.Version(), c.pathMTU); p.MTU != want {
					t.Fatalf("a path of MTU %d, want %d:\n%s", p.MTU, want, out)
				}
			}

			// The first leaf's link to the core (PlanLinks puts it first),
			// where its router sends.
			up := links[0]
			tap, err := capture.Open(xdp.Iface{Netns: src.Netns, Name: up.ChildDev})
			if err != nil {
				t.Fatal(err)
			}
			defer tap.Close()
			const count = 5
			out, err = n.Scion(context.Background(), src, "ping", dst.IA.String()+","+dst.Host.String(), "-c", strconv.Itoa(count), "-s", "8000", "--interval", "50ms", "--timeout", "1s")
			if m := lossRE.FindStringSubmatch(out); m == nil || m[2] != strconv.Itoa(count) {
				t.Fatalf("scion ping -s 8000: %v\n%s", err, out)
			}
			time.Sleep(50 * time.Millisecond)
			whole, fragments := 0, 0
			for _, f := range tap.Frames() {
				p := gopacket.NewPacket(f.Data, layers.LayerTypeEthernet, gopacket.Default)
				ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
				if !f.Outgoing || ip == nil || !ip.DstIP.Equal(up.ParentAddr.Addr().AsSlice()) {
					continue
				}
				switch {
				case ip.Flags&layers.IPv4MoreFragments != 0 || ip.FragOffset != 0:
					fragments++
				case len(f.Data) > 8000:
					whole++
				}
			}
			if c.whole && (whole != count || fragments != 0) {
				t.Fatalf("%d echo requests left for the core in one frame each and %d IP fragments; want %d and none", whole, fragments, count)
			}
			if !c.whole && (whole != 0 || fragments < 6*count) {
				t.Fatalf("%d echo requests left for the core in one frame each and %d IP fragments; want none and at least %d", whole, fragments, 6*count)
			}
		})
	}
}

// As an operator attaches a real network, one AS after another, the core
// first: when the core's fastpath attaches, its neighbours' ends of their
// links run neither XDP nor GRO, so it leaves transit to the reference
// router (tx_unusable). Its `br serve` then sees each leaf attach, and
// transit between the leaves' hosts crosses the core in XDP, without the
// core being attached again. A restart of the core's serve keeps it so;
// down stops every serve and detaches.
func TestHybridHealsCoreFirst(t *testing.T) {
	labtest.Fastpath(t)
	n, as := testNetwork(t, UpOptions{})
	core, leaves := as[0], as[1:]
	_, links, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if err := setGRO(as[l.Child].Netns, l.ChildDev, false); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	var log strings.Builder
	if err := n.ServeHybrid(ctx, core, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	name := HybridName(core)
	const count = 20
	// delta pings count times between the leaves' hosts and returns what
	// the core's fastpath counted meanwhile.
	delta := func() (fwd, unusable uint64, answered int) {
		t.Helper()
		before := counts(t, name)
		answered = ping(t, n, as, count)
		after := counts(t, name)
		return after["forwarded"] - before["forwarded"], after["tx_unusable"] - before["tx_unusable"], answered
	}
	// Each echo crosses the core twice (request, reply).
	if fwd, unusable, answered := delta(); answered != count || fwd != 0 || unusable < 2*count {
		t.Fatalf("core alone: %d of %d pings answered; the core forwarded %d in XDP and passed %d up as tx_unusable, want 0 and at least %d", answered, count, fwd, unusable, 2*count)
	}
	for _, a := range leaves {
		if err := n.ServeHybrid(ctx, a, &log); err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
	}
	healed := func(when string) {
		t.Helper()
		// Within a second of the leaves' attach, and for every ping.
		var fwd, unusable uint64
		var answered int
		for try := 0; try < 3; try++ {
			if fwd, unusable, answered = delta(); answered == count && fwd >= 2*count && unusable == 0 {
				return
			}
			time.Sleep(time.Second)
		}
		t.Fatalf("%s: %d of %d pings answered; the core forwarded %d in XDP and passed %d up as tx_unusable, want at least %d and 0; its serve said:\n%s", when, answered, count, fwd, unusable, 2*count, tail(recorded(t, n, procName(ServeService, core)).Log, 20))
	}
	healed("leaves attached after the core")
	serveLog, err := os.ReadFile(recorded(t, n, procName(ServeService, core)).Log)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		// One record: the message, the device and why (serve's log is
		// structured: text or JSON).
		want := []string{"takes XDP frames now", core.Netns + "/" + l.ParentDev, fmt.Sprintf("its peer %s/%s runs an XDP program", as[l.Child].Netns, l.ChildDev)}
		found := false
		for _, line := range strings.Split(string(serveLog), "\n") {
			found = found || strings.Contains(line, want[0]) && strings.Contains(line, want[1]) && strings.Contains(line, want[2])
		}
		if !found {
			t.Fatalf("the core's serve said:\n%s\nwant a record with %q", serveLog, want)
		}
	}

	st, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.ASes {
		i := slices.IndexFunc(a.Procs, func(p ProcStatus) bool { return strings.HasPrefix(p.Name, ServeService+"-") })
		if i < 0 || !a.Procs[i].Alive || a.Hybrid != HybridName(as[slices.IndexFunc(as, func(x AS) bool { return x.IA.String() == a.IA })]) {
			t.Fatalf("status of %s: %+v, want its fastpath-br alive and its router attached", a.IA, a)
		}
	}

	before := recorded(t, n, procName(ServeService, core))
	if err := n.Restart(ctx, core, ServeService, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if after := recorded(t, n, procName(ServeService, core)); after.PID == before.PID || !after.Alive() || before.Alive() {
		t.Fatalf("pid %d (alive %v) before, %d (alive %v) after the restart", before.PID, before.Alive(), after.PID, after.Alive())
	}
	healed("after the core's serve restarted")

	rec, err := n.readState()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Down(io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, p := range rec.Procs {
		if p.Alive() {
			t.Fatalf("%s (pid %d) survived down", p.Name, p.PID)
		}
	}
	for _, h := range rec.Hybrid {
		if hybridAttached(h) {
			t.Fatalf("fastpath %s still attached after down", h)
		}
	}
}

// One network on every kind of device but the plain veth, without
// fastpath: the core's end of its link to the first leaf on a bridge, the
// leaf's end on a macvlan, the link to the last leaf VXLAN, the first
// leaf's internal network on a bridge and the last's on a macvlan. Each
// device is of its kind, holds its address and MTU over a veth that holds
// none (VXLAN's underlay but), and is what the neighbour reaches (its MAC
// in the peer's neighbour table: a macvlan's veth must not answer ARP in
// its place); status lists them, the check passes across all of them, and
// a link cut under a bridge cuts the cable (the far end loses carrier).
func TestNetworkOnOtherDevices(t *testing.T) {
	const devices = "veth,1-64512#1=bridge,1-64513#1=macvlan,1-64514#1=vxlan,1-64513#internal=bridge,1-64514#internal=macvlan"
	n, as := testNetwork(t, UpOptions{Devices: devices})
	_, links, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	type end struct {
		e, peer devEnd
		mac     string // of e.dev
	}
	var ends []end
	for _, l := range links {
		p, c := linkEnds(as, l)
		ends = append(ends, end{e: p, peer: c}, end{e: c, peer: p})
	}
	for _, a := range as[1:] {
		ie := internalEnds(a)
		ends = append(ends, end{e: ie[1], peer: ie[0]}, end{e: ie[0], peer: ie[1]})
	}
	kinds := map[DeviceKind]int{}
	for i := range ends {
		e := ends[i].e
		h, err := netns.Handle(e.ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		dev, err := h.LinkByName(e.dev)
		if err != nil {
			t.Fatalf("%s/%s: %v", e.ns, e.dev, err)
		}
		veth, err := h.LinkByName(e.veth())
		if err != nil {
			t.Fatalf("%s/%s: %v", e.ns, e.veth(), err)
		}
		kinds[e.kind]++
		wantType := map[DeviceKind]string{Veth: "veth", Bridge: "bridge", Macvlan: "macvlan", VXLAN: "vxlan"}[e.kind]
		if dev.Type() != wantType || veth.Type() != "veth" || dev.Attrs().MTU != DefaultMTU || veth.Attrs().MTU != e.vethMTU(DefaultMTU) {
			t.Fatalf("%s/%s is a %s of MTU %d over %s, a %s of MTU %d; want a %s of MTU %d over a veth of MTU %d",
				e.ns, e.dev, dev.Type(), dev.Attrs().MTU, e.veth(), veth.Type(), veth.Attrs().MTU, wantType, DefaultMTU, e.vethMTU(DefaultMTU))
		}
		addrs := func(l netlink.Link) []string {
			t.Helper()
			as, err := h.AddrList(l, netlink.FAMILY_ALL)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, a := range as {
				out = append(out, a.IPNet.String())
			}
			return out
		}
		if got := addrs(dev); !slices.Equal(got, []string{e.addr.String()}) {
			t.Fatalf("%s/%s has addresses %v, want %s", e.ns, e.dev, got, e.addr)
		}
		if e.kind != Veth {
			want := []string{}
			if e.kind == VXLAN {
				want = []string{e.underlay.String()}
			}
			if got := addrs(veth); !slices.Equal(got, want) {
				t.Fatalf("%s/%s under the %s has addresses %v, want %v", e.ns, e.veth(), e.kind, got, want)
			}
		}
		if e.kind == Bridge && veth.Attrs().MasterIndex != dev.Attrs().Index {
			t.Fatalf("%s/%s is no port of bridge %s", e.ns, e.veth(), e.dev)
		}
		if e.kind == Macvlan && dev.Attrs().ParentIndex != veth.Attrs().Index {
			t.Fatalf("macvlan %s/%s is not over %s", e.ns, e.dev, e.veth())
		}
		ends[i].mac = dev.Attrs().HardwareAddr.String()
	}
	if kinds[Bridge] != 2 || kinds[Macvlan] != 2 || kinds[VXLAN] != 2 {
		t.Fatalf("devices by kind: %v; the rules %s make 2 bridges, 2 macvlans, 2 VXLAN devices", kinds, devices)
	}

	var out strings.Builder
	if err := n.Check(context.Background(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// The check's traffic found each device by ARP: the peer has its MAC.
	// Every end of the check's path, both ways, was asked.
	for _, x := range ends {
		h, err := netns.Handle(x.peer.ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		peerDev, err := h.LinkByName(x.peer.dev)
		if err != nil {
			t.Fatal(err)
		}
		neigh, err := h.NeighList(peerDev.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(neigh, func(nb netlink.Neigh) bool { return nb.IP.Equal(x.e.addr.Addr().AsSlice()) })
		if i < 0 {
			t.Fatalf("%s/%s has no neighbour entry for %s/%s's %s after the check", x.peer.ns, x.peer.dev, x.e.ns, x.e.dev, x.e.addr.Addr())
		}
		if got := neigh[i].HardwareAddr.String(); got != x.mac {
			t.Fatalf("%s/%s reaches %s at %s, want %s/%s's %s", x.peer.ns, x.peer.dev, x.e.addr.Addr(), got, x.e.ns, x.e.dev, x.mac)
		}
	}

	st, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	st.Write(&sb)
	for _, want := range []string{
		fmt.Sprintf("addresses on devices %q", devices),
		fmt.Sprintf("%s/if1 10.255.1.1/30: bridge, port if1v", as[0].Netns),
		fmt.Sprintf("%s/if1 10.255.1.2/30: macvlan (bridge mode) over if1v", as[1].Netns),
		fmt.Sprintf("%s/if2 10.255.2.1/30: VXLAN, VNI 2, over if2v 172.16.0.5/30", as[0].Netns),
		fmt.Sprintf("%s/int0 10.102.0.1/24: macvlan (bridge mode) over int0v", as[2].Netns),
	} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("status says\n%s\nwant %q in it", sb.String(), want)
		}
	}

	// A cut at the veth under the core's bridge, as at a veth: the
	// leaf's end loses carrier.
	if err := n.SetLink(as[0], 1, false); err != nil {
		t.Fatal(err)
	}
	peer, err := xdp.Lookup(xdp.Iface{Netns: as[1].Netns, Name: links[0].ChildVeth})
	if err != nil {
		t.Fatal(err)
	}
	if peer.OperState == netlink.OperUp {
		t.Fatalf("%s/%s still up with its peer under the core's bridge down", as[1].Netns, links[0].ChildVeth)
	}
	if err := n.SetLink(as[0], 1, true); err != nil {
		t.Fatal(err)
	}
}
