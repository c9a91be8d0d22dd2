package scionlab

import (
	"fmt"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// --devices reads rules into the form the record keeps, and refuses what
// names no kind, AS or interface, naming the form it takes.
func TestParseDevices(t *testing.T) {
	cases := map[string]struct {
		in, want string
		kinds    []DeviceKind
		err      string
	}{
		"empty is veth":           {in: "", want: "veth", kinds: []DeviceKind{Veth}},
		"one kind":                {in: "bridge", want: "bridge", kinds: []DeviceKind{Bridge}},
		"one end behind a bridge": {in: "veth, 1-64512#2=bridge", want: "veth,1-64512#2=bridge", kinds: []DeviceKind{Veth, Bridge}},
		"one AS":                  {in: "1-64513=macvlan", want: "1-64513=macvlan", kinds: []DeviceKind{Macvlan}},
		"an internal network":     {in: "1-64513#internal=vxlan", want: "1-64513#internal=vxlan", kinds: []DeviceKind{VXLAN}},
		"a .topo AS":              {in: "macvlan,1-ff00:0:110#3=vxlan", want: "macvlan,1-ff00:0:110#3=vxlan", kinds: []DeviceKind{Macvlan, VXLAN}},
		"no such kind":            {in: "ethernet", err: `"ethernet" has no device kind "ethernet"`},
		"VLAN":                    {in: "vlan", err: "veth, bridge, macvlan, vxlan"},
		"an end without kind":     {in: "1-64512#2", err: `has no device kind "1-64512#2"`},
		"not an AS":               {in: "core=bridge", err: `names no AS ("core"`},
		"wildcard AS":             {in: "1-0=bridge", err: "names no AS"},
		"not an interface":        {in: "1-64512#if2=bridge", err: `names no interface ("if2"`},
		"interface zero":          {in: "1-64512#0=bridge", err: `names no interface ("0"`},
		"a kind of no name":       {in: "1-64512#2=", err: `has no device kind ""`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := ParseDevices(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--devices") {
					t.Fatalf("ParseDevices(%q) = %v, %v; want an error naming --devices and containing %q", c.in, d, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.String() != c.want || !slices.Equal(d.Kinds(), c.kinds) {
				t.Fatalf("ParseDevices(%q) = %q of kinds %v, want %q of %v", c.in, d, d.Kinds(), c.want, c.kinds)
			}
			again, err := ParseDevices(d.String())
			if err != nil || again.String() != d.String() {
				t.Fatalf("%q read again: %q, %v", d, again, err)
			}
		})
	}
}

// endWant is what a test expects of one end of a veth: the namespace, the
// device that holds the address and its kind, the veth and its MTU, and
// with VXLAN the underlay, the VNI and the remotes.
type endWant struct {
	ns, dev, veth string
	kind          DeviceKind
	addr          string
	vethMTU       int
	underlay      string
	vni           uint32
	remotes       []string
}

func checkEnd(t *testing.T, what string, e devEnd, mtu int, w endWant) {
	t.Helper()
	var remotes []string
	for _, r := range e.remotes {
		remotes = append(remotes, r.String())
	}
	under := ""
	if e.underlay.IsValid() {
		under = e.underlay.String()
	}
	got := endWant{ns: e.ns, dev: e.dev, veth: e.veth(), kind: e.kind, addr: e.addr.String(), vethMTU: e.vethMTU(mtu), underlay: under, vni: e.vni, remotes: remotes}
	if fmt.Sprint(got) != fmt.Sprint(w) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, w)
	}
}

// On the default network, each kind puts every address where an operator
// would: on the veth, on a bridge whose port is the veth, on a macvlan over
// it, or on a VXLAN device whose underlay is the veth (the end host's side
// of the internal network too); the veth under a VXLAN device is 50 bytes
// larger, so that the SCION MTU stays the link's.
func TestDevicesOnTheDefaultNetwork(t *testing.T) {
	n := Network{Prefix: "fp-x-", Dir: "/nowhere"}
	cases := map[string]struct {
		devices string
		mtu     int
		// the core's end of its link to 1-64514, 1-64514's end, the
		// core's internal end and its host's
		coreEnd, leafEnd, coreInt, coreHost endWant
		// whether the core's and the leaves' fastpath must attach in
		// native XDP
		coreNative, leafNative bool
	}{
		"veth": {
			devices: "veth", mtu: 1500,
			coreEnd:    endWant{"fp-x-as64512", "if2", "if2", Veth, "10.255.2.1/30", 1500, "", 0, nil},
			leafEnd:    endWant{"fp-x-as64514", "if1", "if1", Veth, "10.255.2.2/30", 1500, "", 0, nil},
			coreInt:    endWant{"fp-x-as64512", "int0", "int0", Veth, "10.100.0.1/24", 1500, "", 0, nil},
			coreHost:   endWant{"fp-x-h64512", "eth0", "eth0", Veth, "10.100.0.2/24", 1500, "", 0, nil},
			coreNative: true, leafNative: true,
		},
		"bridge": {
			devices: "bridge", mtu: 1500,
			coreEnd:  endWant{"fp-x-as64512", "if2", "if2v", Bridge, "10.255.2.1/30", 1500, "", 0, nil},
			leafEnd:  endWant{"fp-x-as64514", "if1", "if1v", Bridge, "10.255.2.2/30", 1500, "", 0, nil},
			coreInt:  endWant{"fp-x-as64512", "int0", "int0v", Bridge, "10.100.0.1/24", 1500, "", 0, nil},
			coreHost: endWant{"fp-x-h64512", "eth0", "eth0", Veth, "10.100.0.2/24", 1500, "", 0, nil},
		},
		"macvlan at jumbo MTU": {
			devices: "macvlan", mtu: 9000,
			coreEnd:  endWant{"fp-x-as64512", "if2", "if2v", Macvlan, "10.255.2.1/30", 9000, "", 0, nil},
			leafEnd:  endWant{"fp-x-as64514", "if1", "if1v", Macvlan, "10.255.2.2/30", 9000, "", 0, nil},
			coreInt:  endWant{"fp-x-as64512", "int0", "int0v", Macvlan, "10.100.0.1/24", 9000, "", 0, nil},
			coreHost: endWant{"fp-x-h64512", "eth0", "eth0", Veth, "10.100.0.2/24", 9000, "", 0, nil},
		},
		"vxlan": {
			devices: "vxlan", mtu: 1500,
			coreEnd:  endWant{"fp-x-as64512", "if2", "if2v", VXLAN, "10.255.2.1/30", 1550, "172.16.0.5/30", 2, []string{"172.16.0.6"}},
			leafEnd:  endWant{"fp-x-as64514", "if1", "if1v", VXLAN, "10.255.2.2/30", 1550, "172.16.0.6/30", 2, []string{"172.16.0.5"}},
			coreInt:  endWant{"fp-x-as64512", "int0", "int0v", VXLAN, "10.100.0.1/24", 1550, "172.17.0.1/24", 100000, []string{"172.17.0.2"}},
			coreHost: endWant{"fp-x-h64512", "eth0", "eth0v", VXLAN, "10.100.0.2/24", 1550, "172.17.0.2/24", 100000, []string{"172.17.0.1"}},
		},
		"vxlan at the largest MTU": {
			devices: "vxlan", mtu: MaxMTU,
			coreEnd:  endWant{"fp-x-as64512", "if2", "if2v", VXLAN, "10.255.2.1/30", MaxMTU + 50, "172.16.0.5/30", 2, []string{"172.16.0.6"}},
			leafEnd:  endWant{"fp-x-as64514", "if1", "if1v", VXLAN, "10.255.2.2/30", MaxMTU + 50, "172.16.0.6/30", 2, []string{"172.16.0.5"}},
			coreInt:  endWant{"fp-x-as64512", "int0", "int0v", VXLAN, "10.100.0.1/24", MaxMTU + 50, "172.17.0.1/24", 100000, []string{"172.17.0.2"}},
			coreHost: endWant{"fp-x-h64512", "eth0", "eth0v", VXLAN, "10.100.0.2/24", MaxMTU + 50, "172.17.0.2/24", 100000, []string{"172.17.0.1"}},
		},
		"the core's end towards 1-64514 behind a bridge": {
			devices: "veth,1-64512#2=bridge", mtu: 1500,
			coreEnd:  endWant{"fp-x-as64512", "if2", "if2v", Bridge, "10.255.2.1/30", 1500, "", 0, nil},
			leafEnd:  endWant{"fp-x-as64514", "if1", "if1", Veth, "10.255.2.2/30", 1500, "", 0, nil},
			coreInt:  endWant{"fp-x-as64512", "int0", "int0", Veth, "10.100.0.1/24", 1500, "", 0, nil},
			coreHost: endWant{"fp-x-h64512", "eth0", "eth0", Veth, "10.100.0.2/24", 1500, "", 0, nil},
			// the leaves are all veths
			leafNative: true,
		},
		"one end of a link VXLAN makes both": {
			devices: "1-64512#2=vxlan", mtu: 1500,
			coreEnd:    endWant{"fp-x-as64512", "if2", "if2v", VXLAN, "10.255.2.1/30", 1550, "172.16.0.5/30", 2, []string{"172.16.0.6"}},
			leafEnd:    endWant{"fp-x-as64514", "if1", "if1v", VXLAN, "10.255.2.2/30", 1550, "172.16.0.6/30", 2, []string{"172.16.0.5"}},
			coreInt:    endWant{"fp-x-as64512", "int0", "int0", Veth, "10.100.0.1/24", 1500, "", 0, nil},
			coreHost:   endWant{"fp-x-h64512", "eth0", "eth0", Veth, "10.100.0.2/24", 1500, "", 0, nil},
			leafNative: false,
		},
		"an internal network alone": {
			devices: "1-64512#internal=macvlan", mtu: 1500,
			coreEnd:    endWant{"fp-x-as64512", "if2", "if2", Veth, "10.255.2.1/30", 1500, "", 0, nil},
			leafEnd:    endWant{"fp-x-as64514", "if1", "if1", Veth, "10.255.2.2/30", 1500, "", 0, nil},
			coreInt:    endWant{"fp-x-as64512", "int0", "int0v", Macvlan, "10.100.0.1/24", 1500, "", 0, nil},
			coreHost:   endWant{"fp-x-h64512", "eth0", "eth0", Veth, "10.100.0.2/24", 1500, "", 0, nil},
			leafNative: true,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			as, links, err := n.Plan(3)
			if err != nil {
				t.Fatal(err)
			}
			d, err := ParseDevices(c.devices)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Apply(as, links); err != nil {
				t.Fatal(err)
			}
			core, leaf := as[0], as[2]
			l := links[1]
			if l.Parent != 0 || l.Child != 2 {
				t.Fatalf("link 1 joins %d and %d", l.Parent, l.Child)
			}
			p, ch := linkEnds(as, l)
			checkEnd(t, "the core's end of its link to 1-64514", p, c.mtu, c.coreEnd)
			checkEnd(t, "1-64514's end", ch, c.mtu, c.leafEnd)
			ends := internalEnds(core)
			checkEnd(t, "the core's end of its internal network", ends[1], c.mtu, c.coreInt)
			checkEnd(t, "the core's host", ends[0], c.mtu, c.coreHost)
			if got := onVeths(core, links, 0); got != c.coreNative {
				t.Errorf("the core's fastpath must attach natively: %v, want %v", got, c.coreNative)
			}
			if got := onVeths(leaf, links, 0); got != c.leafNative {
				t.Errorf("1-64514's fastpath must attach natively: %v, want %v", got, c.leafNative)
			}
			// SetLink cuts the veth, under whatever holds the address.
			if ns, dev, err := interfaceDev(core, links, l.ParentIf); err != nil || ns != c.coreEnd.ns || dev != c.coreEnd.veth {
				t.Errorf("the core's interface %d is cut at %s/%s (%v), want %s/%s", l.ParentIf, ns, dev, err, c.coreEnd.ns, c.coreEnd.veth)
			}
			// The topology files say the same SCION MTU whatever the kind.
			topo := topology(core, as, links, c.mtu, scionproto.Default)
			if want := TopoMTU(scionproto.Default, c.mtu-UnderlayOverhead); topo["mtu"] != want {
				t.Errorf("topology.json of the core says MTU %v, want %d", topo["mtu"], want)
			}
		})
	}
}

// Rules that name what the network lacks, or a link VXLAN at one end only,
// are refused before anything is made.
func TestDevicesRefused(t *testing.T) {
	n := Network{Prefix: "fp-x-", Dir: "/nowhere"}
	cases := map[string]struct{ devices, err string }{
		"no such AS":                {"1-64599=bridge", "the network has no AS 1-64599 (it has 1-64512 to 1-64514)"},
		"no such interface":         {"1-64512#7=bridge", "1-64512 has no interface 7: its interfaces are 1, 2"},
		"VXLAN at one end only":     {"vxlan,1-64514#1=bridge", "the link 1-64512#2–1-64514#1 would be vxlan at one end and bridge at the other"},
		"VXLAN against an AS's say": {"1-64512=vxlan,1-64513=macvlan", "the link 1-64512#1–1-64513#1 would be vxlan at one end and macvlan at the other"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			as, links, err := n.Plan(3)
			if err != nil {
				t.Fatal(err)
			}
			d, err := ParseDevices(c.devices)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Apply(as, links); err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--devices") {
				t.Fatalf("Apply(%s) = %v, want an error naming --devices and containing %q", c.devices, err, c.err)
			}
		})
	}
}

// A .topo network takes every kind: several routers per AS (a VXLAN
// internal network then reaches every other end through the switch, which
// carries the underlay), IPv6 overlays on the IPv4 underlay, each device
// sized for its SCION MTU; VNIs never repeat.
func TestDevicesOnATopoNetwork(t *testing.T) {
	topo, err := ReadTopo(filepath.Join("testdata", "two-isds.topo"))
	if err != nil {
		t.Fatal(err)
	}
	n := Network{Prefix: "fp-x-", Dir: "/nowhere"}
	for _, kind := range DeviceKinds {
		t.Run(string(kind), func(t *testing.T) {
			as, links, err := n.PlanTopo(topo)
			if err != nil {
				t.Fatal(err)
			}
			d, err := ParseDevices(string(kind))
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Apply(as, links); err != nil {
				t.Fatal(err)
			}
			vnis := map[uint32]bool{}
			for _, a := range as {
				ends := internalEnds(a)
				if len(ends) != 1+len(a.Routers) {
					t.Fatalf("%s: %d ends of its internal network", a.IA, len(ends))
				}
				wantMTU := a.DevMTU
				if kind == VXLAN {
					wantMTU += VXLANOverhead
				}
				for k, e := range ends {
					want := kind
					if k == 0 && kind != VXLAN {
						want = Veth // the host stays on its veth
					}
					if e.kind != want || e.vethMTU(a.DevMTU) != wantMTU {
						t.Errorf("%s: end %d is %s with a veth of MTU %d", a.IA, k, e.kind, e.vethMTU(a.DevMTU))
					}
					if kind == VXLAN && (len(e.remotes) != len(a.Routers) || !VXLANUnderlay.Contains(e.underlay.Addr()) || e.underlay.Bits() != 24) {
						t.Errorf("%s: end %d's underlay %s, remotes %v", a.IA, k, e.underlay, e.remotes)
					}
				}
				if kind == VXLAN {
					if vnis[a.VNI] {
						t.Errorf("VNI %d twice", a.VNI)
					}
					vnis[a.VNI] = true
				}
			}
			for j, l := range links {
				p, c := linkEnds(as, l)
				for _, e := range []devEnd{p, c} {
					if e.kind != kind || (e.veth() == e.dev) != (kind == Veth) {
						t.Errorf("link %d: end %s/%s is %s over %s", j, e.ns, e.dev, e.kind, e.veth())
					}
				}
				if kind == VXLAN {
					if vnis[l.VNI] {
						t.Errorf("VNI %d twice", l.VNI)
					}
					vnis[l.VNI] = true
					want := netip.AddrFrom4([4]byte{172, 16, byte((4*j + 1) >> 8), byte(4*j + 1)})
					if p.underlay.Addr() != want || c.remotes[0] != want || p.vethMTU(l.DevMTU) != l.DevMTU+VXLANOverhead {
						t.Errorf("link %d: underlay %s, the far end sends to %v, veth MTU %d", j, p.underlay, c.remotes, p.vethMTU(l.DevMTU))
					}
				}
			}
			// An IPv6 AS with two routers (1-ff00:0:111, TestPlanTopo).
			a := as[1]
			if kind == VXLAN && (!a.Internal.Is6() || a.Routers[1].Underlay.String() != "172.17.1.11/24" || a.HostUnderlay.String() != "172.17.1.2/24") {
				t.Errorf("1-ff00:0:111's underlays: routers %v, host %s", a.Routers, a.HostUnderlay)
			}
		})
	}
}

// The record keeps --devices; a network is rebuilt when it changes, and
// every command that reads the record (status, link, check) sees the
// devices it was built with.
func TestDevicesRecorded(t *testing.T) {
	n := Network{Prefix: "fp-x-", Dir: t.TempDir()}
	st := &State{Version: scionproto.Default, Prefix: n.Prefix, ASes: 3, Devices: "veth,1-64512#2=bridge"}
	as, links, err := n.plan(st)
	if err != nil {
		t.Fatal(err)
	}
	if links[1].ParentKind != Bridge || links[1].ParentVeth != "if2v" || links[0].ParentKind != Veth || as[0].InternalKind != Veth {
		t.Fatalf("the recorded network's links: %+v", links)
	}
	o := UpOptions{Version: scionproto.Default, ASes: 3, Links: 1, MTU: DefaultMTU, Devices: "veth,1-64512#2=bridge"}
	if !st.sameShape(n, o) {
		t.Fatal("the same devices taken for another network")
	}
	o.Devices = "bridge"
	if st.sameShape(n, o) {
		t.Fatal("other devices taken for the same network")
	}
	o.Version = "v0.14.0"
	if st.sameShape(n, o) {
		t.Fatal("another release taken for the same network")
	}
	// A record of before --devices is also one of before --scion-version:
	// its network runs v0.12.0.
	old := &State{Prefix: n.Prefix, ASes: 3}
	if o.Devices, o.Version = "veth", "v0.12.0"; !old.sameShape(n, o) {
		t.Fatal("a record of before --devices is not the veth network it is")
	}
	if _, _, err := n.plan(&State{Prefix: n.Prefix, ASes: 3, Devices: "token ring"}); err == nil || !strings.Contains(err.Error(), n.statePath()) {
		t.Fatalf("a record of unknown devices: %v", err)
	}
	sd := deviceStatus(as[0], as, links)
	if len(sd) != 1 || sd[0].String() != "fp-x-as64512/if2 10.255.2.1/30: bridge, port if2v" {
		t.Fatalf("status of the core's devices: %v", sd)
	}
}
