package scionlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// UpOptions configure Up.
type UpOptions struct {
	ASes int
	// Hybrid attaches fastpath's border router in front of every AS's
	// reference router (the same topology.json and keys).
	Hybrid bool
	// Timeout bounds the wait for the first path.
	Timeout time.Duration
	// NoBFD turns BFD off in the reference routers: with it on, a router
	// whose neighbour's reference router died holds that link down.
	NoBFD bool
	// Links is how many links each leaf AS has to the core (1 by default,
	// at most MaxParallel): two give every pair of leaves four paths.
	Links int
	// HopExpiry is how long the hop fields the control services make stay
	// valid, rounded up to scionproto's unit (HopExpiryUnit, 337.5 s; see
	// HopExpTime); 0 leaves scionproto's default (ExpTime 63, 6 h). Short
	// ones show how paths are refreshed before they expire.
	HopExpiry time.Duration
	// MTU is every link's MTU (DefaultMTU if 0, MinMTU to MaxMTU): the
	// veths of the inter-AS links, of the internal networks and the end
	// hosts' devices, and what the topology files say (less the underlay).
	MTU int
	// Topo, if set, is the network to build, read from a .topo file (and
	// renumbered, if Renumber): ASes, Links and MTU do not apply; every
	// device has the MTU its AS's or link's SCION MTU needs.
	Topo     *Topo
	Renumber bool
	// Devices says which kind of device (veth, bridge, macvlan, vxlan)
	// holds each link end's and each internal network's addresses, in
	// ParseDevices' form ("bridge", "veth,1-64512#2=bridge"); "" is every
	// address on a veth.
	Devices string
	// Version is the scionproto release whose programs run the network
	// (one of scionproto.Versions); "" is scionproto.Chosen().
	Version string
	// Log receives progress lines.
	Log io.Writer
}

// Validate checks the names and options before anything is made.
func (n Network) Validate() error {
	if n.Prefix == "" {
		return errors.New("the SCION network's prefix is empty: everything it makes must carry one")
	}
	if strings.ContainsAny(n.Prefix, "/ ") {
		return fmt.Errorf("prefix %q: a namespace name holds no slash or space", n.Prefix)
	}
	if !filepath.IsAbs(n.Dir) {
		return fmt.Errorf("--dir %q: give an absolute path", n.Dir)
	}
	return nil
}

// Up builds the network and starts its services, then waits until the
// first leaf AS has a path to the last. An existing network of the same
// size whose processes all run is left as it is; anything else of ours is
// taken down first. On failure everything made is removed, but the logs.
func (n Network) Up(ctx context.Context, o UpOptions) (st *State, err error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Timeout == 0 {
		o.Timeout = 90 * time.Second
	}
	o.Links = max(o.Links, 1)
	if o.MTU == 0 {
		o.MTU = DefaultMTU
	}
	if err := CheckMTU(o.MTU); err != nil {
		return nil, err
	}
	devices, err := ParseDevices(o.Devices)
	if err != nil {
		return nil, err
	}
	o.Devices = devices.String()
	var as []AS
	var links []Link
	if o.Topo != nil {
		as, links, err = n.PlanTopo(o.Topo)
		o.ASes, o.Links = len(as), 1
	} else {
		as, links, err = n.PlanLinks(o.ASes, o.Links)
	}
	if err != nil {
		return nil, err
	}
	if err := devices.Apply(as, links); err != nil {
		return nil, err
	}
	if o.Version == "" {
		if o.Version, err = scionproto.Chosen(); err != nil {
			return nil, err
		}
	}
	if err := scionproto.Check(o.Version); err != nil {
		return nil, err
	}
	gen := genOptions{bfd: !o.NoBFD, mtu: o.MTU, trust: o.Topo, version: o.Version}
	if o.HopExpiry != 0 {
		e, err := HopExpTime(o.HopExpiry)
		if err != nil {
			return nil, err
		}
		gen.hopExpTime = &e
	}
	if old, err := n.readState(); err == nil && old != nil && old.sameShape(n, o) && allAlive(old) {
		fmt.Fprintf(o.Log, "the network is up already (%d ASes since %s)\n", old.ASes, old.Started.Format(time.TimeOnly))
		return old, nil
	}
	if old, err := n.readState(); err == nil && old != nil && old.Prefix != n.Prefix && anyAlive(old) {
		return nil, fmt.Errorf("%s holds a running network of prefix %q, not %q: take it down (fastpath --prefix %s lab scion down --dir %s) or give this one a --dir of its own",
			n.Dir, old.Prefix, n.Prefix, old.Prefix, n.Dir)
	}
	if err := n.Down(io.Discard); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "scionproto %s's programs from %s\n", o.Version, scionproto.Dir(o.Version))
	bins, err := scionproto.Binaries(o.Version, "router", "control", "daemon", "dispatcher", "scion", "scion-pki")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			logs := n.logDir()
			err = errors.Join(err, n.teardown(st, false))
			err = fmt.Errorf("%w\nthe services' logs stay in %s", err, logs)
		}
	}()
	if err := n.makeDir(); err != nil {
		return nil, err
	}
	st = &State{Version: o.Version, Prefix: n.Prefix, ASes: o.ASes, NoBFD: o.NoBFD, Links: o.Links, HopExpiry: o.HopExpiry, MTU: o.MTU, Devices: o.Devices}
	if o.Topo != nil {
		st.Topo, st.Renumber = o.Topo.Path, o.Renumber
		if err := os.WriteFile(n.topoPath(), o.Topo.Text, 0o644); err != nil {
			return st, err
		}
	}
	if err := n.writeState(st); err != nil {
		return st, err
	}
	fmt.Fprintf(o.Log, "generating crypto and configuration for %d ASes in %s\n", o.ASes, n.Dir)
	if err := n.generate(bins["scion-pki"], as, links, gen); err != nil {
		return st, err
	}
	if err := n.build(as, links, o.MTU); err != nil {
		return st, err
	}
	st.Started = time.Now()
	for _, a := range as {
		ias := a.IA.String()
		type service struct{ name, bin, conf, ns string }
		var svcs []service
		for k, r := range a.Routers {
			svcs = append(svcs, service{routerProcName("router", a, k), bins["router"], routerFile("br", k), r.Netns})
		}
		svcs = append(svcs,
			service{procName("control", a), bins["control"], "cs.toml", a.Netns},
			service{procName("daemon", a), bins["daemon"], "sd.toml", a.Netns},
			service{procName("dispatcher-as", a), bins["dispatcher"], "dispatcher-as.toml", a.Netns},
			service{procName("dispatcher", a), bins["dispatcher"], "dispatcher.toml", a.HostNetns})
		for _, svc := range svcs {
			p, err := n.start(svc.name, ias, svc.ns, svc.bin, "--config", filepath.Join(a.Dir, svc.conf))
			if err != nil {
				return st, err
			}
			st.Procs = append(st.Procs, p)
			if err := n.writeState(st); err != nil {
				return st, err
			}
		}
	}
	fmt.Fprintf(o.Log, "started %d processes; logs in %s\n", len(st.Procs), n.logDir())
	if o.Hybrid {
		// One AS after another, the core first, as an operator would: the
		// core's neighbours run no XDP yet when it attaches, and its
		// `br serve` takes each into XDP as its own attaches.
		for _, core := range []bool{true, false} {
			for _, a := range as {
				if a.Core != core {
					continue
				}
				for k := range a.Routers {
					if err := n.serveHybrid(ctx, st, a, links, k, o.Log); err != nil {
						return st, err
					}
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.Topo == nil {
		// A leaf's control service asks the core for another leaf's down
		// segments once and keeps the answer for 5 minutes (its
		// query_interval): asked before every parallel link's segment is
		// registered, it would give paths over one link only, and a flap
		// of that link would leave a leaf without a path although the
		// network has one.
		if err := n.waitSegments(ctx, st, as, o); err != nil {
			return st, err
		}
	}
	src, dst := firstLastLeaf(as)
	fmt.Fprintf(o.Log, "waiting for a path from %s to %s\n", src.IA, dst.IA)
	if err := n.waitUntil(ctx, st, func() error {
		_, err := n.Scion(ctx, src, "showpaths", dst.IA.String(), "--timeout", "2s")
		return err
	}, func(error) error {
		return fmt.Errorf("no path from %s to %s after %s: see the control services' logs in %s", src.IA, dst.IA, o.Timeout, n.logDir())
	}); err != nil {
		return st, err
	}
	st.PathsAfter = time.Since(st.Started)
	fmt.Fprintf(o.Log, "first path after %.1f s\n", st.PathsAfter.Seconds())
	return st, n.writeState(st)
}

// waitSegments waits until, for every leaf of a planned network (the core
// first, each leaf with o.Links links to it), the core and the leaf each
// have one segment per link between them: the core's down segments and the
// leaf's up segments, asked with --refresh of the AS that holds them.
func (n Network) waitSegments(ctx context.Context, st *State, as []AS, o UpOptions) error {
	fmt.Fprintf(o.Log, "waiting for every leaf's segments at the core and at the leaf\n")
	core, want := as[0], o.Links
	for _, leaf := range as[1:] {
		for _, end := range [][2]AS{{core, leaf}, {leaf, core}} {
			from, to := end[0], end[1]
			got := 0
			if err := n.waitUntil(ctx, st, func() error {
				ps, err := n.showpaths(ctx, from, to, 2*want, "--refresh")
				if got = len(ps); err == nil && got < want {
					err = fmt.Errorf("%d of %d paths", got, want)
				}
				return err
			}, func(last error) error {
				return fmt.Errorf("%s has %d of its %d paths to %s (one per link) after %s (%v): see the control services' logs in %s",
					from.IA, got, want, to.IA, o.Timeout, last, n.logDir())
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitUntil calls try every 200 ms until it succeeds or a process of the
// network exits; when ctx ends first, it says why with timedOut.
func (n Network) waitUntil(ctx context.Context, st *State, try func() error, timedOut func(last error) error) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		for _, p := range st.Procs {
			if !p.Alive() {
				return fmt.Errorf("%s exited; its log: %s\n%s", p.Name, p.Log, tail(p.Log, 15))
			}
		}
		select {
		case <-ctx.Done():
			return timedOut(err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sameShape says whether the recorded network is the one o asks for.
func (s *State) sameShape(n Network, o UpOptions) bool {
	if o.Topo != nil || s.Topo != "" {
		old, err := os.ReadFile(n.topoPath())
		return o.Topo != nil && err == nil && string(old) == string(o.Topo.Text) && s.Renumber == o.Renumber &&
			s.Prefix == n.Prefix && (len(s.Hybrid) > 0) == o.Hybrid && s.NoBFD == o.NoBFD && s.HopExpiry == o.HopExpiry &&
			s.devices() == o.Devices && s.version() == o.Version
	}
	return s.version() == o.Version && s.Prefix == n.Prefix && s.ASes == o.ASes && s.links() == o.Links &&
		(len(s.Hybrid) > 0) == o.Hybrid && s.NoBFD == o.NoBFD && s.HopExpiry == o.HopExpiry &&
		s.mtu() == o.MTU && s.devices() == o.Devices
}

// firstLastLeaf are the first and the last non-core AS of a plan: up waits
// for a path between them.
func firstLastLeaf(as []AS) (AS, AS) {
	var leaves []AS
	for _, a := range as {
		if !a.Core {
			leaves = append(leaves, a)
		}
	}
	if len(leaves) < 2 {
		return as[0], as[len(as)-1]
	}
	return leaves[0], leaves[len(leaves)-1]
}

func anyAlive(s *State) bool {
	for _, p := range s.Procs {
		if p.Alive() {
			return true
		}
	}
	return false
}

func allAlive(s *State) bool {
	if len(s.Procs) == 0 {
		return false
	}
	for _, p := range s.Procs {
		if !p.Alive() {
			return false
		}
	}
	return true
}

// AttachHybrid puts fastpath's router in front of the AS's reference
// router once: lo forwarding on in the AS's namespace (what its FIB lookups
// need), then `br attach` with the AS's own files. It returns the pin name.
// Nothing keeps it in step afterwards (ServeHybrid does): what its
// neighbours' devices could not take when it attached stays with the
// reference router.
func (n Network) AttachHybrid(a AS, log io.Writer) (string, error) {
	_, links, err := n.ASes()
	if err != nil {
		return "", err
	}
	if err := loForwarding(a.Netns); err != nil {
		return "", err
	}
	cfg, err := br.LoadConfig(filepath.Join(a.Dir, "fastpath-br.toml"))
	if err != nil {
		return "", err
	}
	name := HybridName(a)
	if err := br.Attach(cfg, br.AttachOptions{Netns: a.Netns, Name: name, NoFallback: onVeths(a, links, 0), Warn: log}); err != nil {
		return "", fmt.Errorf("attach fastpath in front of %s: %w", a.RouterID(), err)
	}
	fmt.Fprintf(log, "fastpath br %s attached in front of %s\n", name, a.RouterID())
	return name, nil
}

// HybridName is the pin name of fastpath's router in front of an AS's
// (first) router.
func HybridName(a AS) string { return a.Netns + "-br" }

// routerHybridName is the pin name of fastpath's router in front of a
// router of an AS.
func routerHybridName(r Router) string { return r.Netns + "-br" }

// build makes the namespaces, links and internal networks, every device
// that holds an address of the given MTU where the plan names none, each
// of the kind the plan says.
func (n Network) build(as []AS, links []Link, mtu int) error {
	v6 := ipv6Namespaces(as, links)
	for _, ns := range Namespaces(as) {
		if err := netns.Create(ns); err != nil {
			return err
		}
		if err := netns.Run(ns, func() error { return ipv6Settings(v6[ns]) }); err != nil {
			return fmt.Errorf("%s: %w", ns, err)
		}
		if err := linkUp(ns, "lo"); err != nil {
			return err
		}
	}
	for _, a := range as {
		dm := a.DevMTU
		if dm == 0 {
			dm = mtu
		}
		ends := internalEnds(a)
		if a.Switch == "" {
			if err := joinEnds(ends[1], ends[0], dm); err != nil {
				return err
			}
		} else if err := buildSwitch(a, ends, dm); err != nil {
			return err
		}
		// The end host's other traffic (SCION-IP translation later) goes by
		// its AS.
		h, err := netns.Handle(a.HostNetns)
		if err != nil {
			return err
		}
		l, err := h.LinkByName(HostDev)
		if err == nil {
			err = h.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: a.Internal.AsSlice()})
		}
		h.Close()
		if err != nil {
			return fmt.Errorf("default route of %s: %w", a.HostNetns, err)
		}
	}
	for _, l := range links {
		dm := l.DevMTU
		if dm == 0 {
			dm = mtu
		}
		pe, ce := linkEnds(as, l)
		if err := joinEnds(pe, ce, dm); err != nil {
			return err
		}
	}
	return nil
}

// linkEnds are the two ends of an inter-AS link, the parent's first.
func linkEnds(as []AS, l Link) (devEnd, devEnd) {
	p, c := as[l.Parent].Routers[l.ParentRouter], as[l.Child].Routers[l.ChildRouter]
	bits := 30
	if l.ParentAddr.Addr().Is6() {
		bits = 64
	}
	pe := devEnd{ns: p.Netns, dev: l.ParentDev, kind: l.ParentKind, addr: netip.PrefixFrom(l.ParentAddr.Addr(), bits), underlay: l.ParentUnderlay, vni: l.VNI}
	ce := devEnd{ns: c.Netns, dev: l.ChildDev, kind: l.ChildKind, addr: netip.PrefixFrom(l.ChildAddr.Addr(), bits), underlay: l.ChildUnderlay, vni: l.VNI}
	if l.VNI != 0 {
		pe.remotes, ce.remotes = []netip.Addr{l.ChildUnderlay.Addr()}, []netip.Addr{l.ParentUnderlay.Addr()}
	}
	return pe, ce
}

// internalEnds are the ends of an AS's internal network: the end host's
// first, then each router's. With VXLAN each end sends to every other.
func internalEnds(a AS) []devEnd {
	bits := a.Subnet.Bits()
	ends := []devEnd{{ns: a.HostNetns, dev: HostDev, kind: a.HostKind(), addr: netip.PrefixFrom(a.Host, bits), underlay: a.HostUnderlay, vni: a.VNI}}
	for _, r := range a.Routers {
		ends = append(ends, devEnd{ns: r.Netns, dev: InternalDev, kind: a.InternalKind, addr: netip.PrefixFrom(r.Internal, bits), underlay: r.Underlay, vni: a.VNI})
	}
	if a.VNI != 0 {
		for i := range ends {
			for j, o := range ends {
				if j != i {
					ends[i].remotes = append(ends[i].remotes, o.underlay.Addr())
				}
			}
		}
	}
	return ends
}

// switchBridge is the bridge of an AS's internal network in its switch
// namespace; the ports are r1, r2, … (the routers') and h (the host's).
const switchBridge = "br0"

// buildSwitch makes the internal network of an AS with several routers: a
// bridge in the AS's switch namespace, and a veth from each router's
// namespace and from the host's (ends, the host's first) to a port of it.
// The ports have GRO on, so that a router's XDP may redirect frames into
// its own end.
func buildSwitch(a AS, ends []devEnd, mtu int) error {
	h, err := netns.Handle(a.Switch)
	if err != nil {
		return err
	}
	defer h.Close()
	// Under VXLAN the switch carries the underlay.
	swMTU := ends[0].vethMTU(mtu)
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: switchBridge, MTU: swMTU}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("bridge %s in %s: %w", switchBridge, a.Switch, err)
	}
	if err := h.LinkSetUp(br); err != nil {
		return fmt.Errorf("bridge %s in %s up: %w", switchBridge, a.Switch, err)
	}
	for k, e := range ends {
		port := "h"
		if k > 0 {
			port = fmt.Sprintf("r%d", k)
		}
		if err := netns.Veth(e.ns, e.veth(), a.Switch, port); err != nil {
			return err
		}
		if err := e.make(mtu); err != nil {
			return err
		}
		l, err := h.LinkByName(port)
		if err == nil {
			err = h.LinkSetMTU(l, swMTU)
		}
		if err == nil {
			err = h.LinkSetMaster(l, br)
		}
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err == nil {
			err = setGRO(a.Switch, port, true)
		}
		if err != nil {
			return fmt.Errorf("port %s of %s's switch (%s): %w", port, a.IA, a.Switch, err)
		}
	}
	return nil
}

// ipv6Namespaces are the namespaces that hold an IPv6 address: an AS's
// with an IPv6 internal network, a router's with an IPv6 link.
func ipv6Namespaces(as []AS, links []Link) map[string]bool {
	out := map[string]bool{}
	for _, a := range as {
		if a.IPv6() {
			out[a.HostNetns] = true
			for _, r := range a.Routers {
				out[r.Netns] = true
			}
		}
	}
	for _, l := range links {
		if l.ParentAddr.Addr().Is6() {
			out[as[l.Parent].Routers[l.ParentRouter].Netns] = true
			out[as[l.Child].Routers[l.ChildRouter].Netns] = true
		}
	}
	return out
}

// ipv6Settings, in a namespace, turns IPv6 off where the plan gives it no
// address (router solicitations and MLD would be noise in the counters),
// and elsewhere keeps it quiet: no router advertisements taken, no
// solicitations, no duplicate address detection (addresses are usable at
// once), and addresses kept when a device goes down.
func ipv6Settings(on bool) error {
	for _, k := range []string{"all", "default"} {
		set := map[string]string{"disable_ipv6": "1"}
		if on {
			// keep_addr_on_down: without it the kernel removes a device's
			// IPv6 addresses when it goes down, and a link set down and up
			// again (lab scion link) would come back without its underlay.
			set = map[string]string{"disable_ipv6": "0", "accept_ra": "0", "router_solicitations": "0", "accept_dad": "0", "dad_transmits": "0", "keep_addr_on_down": "1"}
		}
		for key, val := range set {
			if err := netns.Sysctl("net/ipv6/conf/"+k+"/"+key, val); err != nil {
				return err
			}
		}
	}
	return nil
}

// configure gives a veth its address and MTU, sets it up and turns GRO on:
// a veth hands frames redirected by XDP to its peer only if the peer runs
// XDP or GRO, and fastpath's router may run on either side.
func configure(ns, dev string, a netip.Prefix, mtu int) error {
	h, err := netns.Handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", dev, ns, err)
	}
	if err := h.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("MTU %d on %s/%s: %w", mtu, ns, dev, err)
	}
	if err := addrUp(h, ns, l, a); err != nil {
		return err
	}
	return setGRO(ns, dev, true)
}

// setGRO turns GRO on or off for a device.
func setGRO(ns, dev string, on bool) error {
	return netns.Run(ns, func() error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer et.Close()
		if err := et.Change(dev, map[string]bool{"rx-gro": on}); err != nil {
			return fmt.Errorf("GRO of %s/%s: %w", ns, dev, err)
		}
		return nil
	})
}

func linkUp(ns, dev string) error {
	h, err := netns.Handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err == nil {
		err = h.LinkSetUp(l)
	}
	if err != nil {
		return fmt.Errorf("%s/%s up: %w", ns, dev, err)
	}
	return nil
}

// SetLink takes the veth of AS a's inter-AS interface ifid down or up, at
// a's end only (the veth under the interface's bridge, macvlan or VXLAN
// device where it has one): its peer loses carrier with it, so both
// routers' BFD sessions time out as they would on a cut cable, and each
// router's metrics show the interface down (router_interface_up). The
// address and any XDP program on the device stay, so setting it up again
// restores the link as it was.
func (n Network) SetLink(a AS, ifid uint16, up bool) error {
	_, links, err := n.ASes()
	if err != nil {
		return err
	}
	ns, dev, err := interfaceDev(a, links, ifid)
	if err != nil {
		return err
	}
	h, err := netns.Handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("interface %d of %s (%s in %s): %w", ifid, a.IA, dev, ns, err)
	}
	set, state := h.LinkSetDown, "down"
	if up {
		set, state = h.LinkSetUp, "up"
	}
	if err := set(l); err != nil {
		return fmt.Errorf("set interface %d of %s (%s in %s) %s: %w", ifid, a.IA, dev, ns, state, err)
	}
	return nil
}

// interfaceDev is the namespace and veth of AS a's interface ifid: the
// device that holds its address, or the veth under it.
func interfaceDev(a AS, links []Link, ifid uint16) (string, string, error) {
	var ids []string
	for _, l := range links {
		switch {
		case l.Parent == a.Index && l.ParentIf == ifid:
			return a.Routers[l.ParentRouter].Netns, l.ParentVeth, nil
		case l.Child == a.Index && l.ChildIf == ifid:
			return a.Routers[l.ChildRouter].Netns, l.ChildVeth, nil
		case l.Parent == a.Index:
			ids = append(ids, fmt.Sprint(l.ParentIf))
		case l.Child == a.Index:
			ids = append(ids, fmt.Sprint(l.ChildIf))
		}
	}
	return "", "", fmt.Errorf("%s has no interface %d: its interfaces are %s", a.IA, ifid, strings.Join(ids, ", "))
}

// Down stops what the network started (by PID, as recorded), detaches
// fastpath's routers from its namespaces, removes the namespaces and
// everything under Dir. It works from the record, and also from the
// namespaces alone when up crashed before writing it; it touches nothing
// without the prefix.
func (n Network) Down(log io.Writer) error {
	if err := n.Validate(); err != nil {
		return err
	}
	if err := n.checkOwnDir(); err != nil {
		return err
	}
	st, err := n.readState()
	if err != nil {
		return err
	}
	return n.teardown(st, true)
}

func (n Network) teardown(st *State, removeLogs bool) error {
	var errs []error
	if st != nil {
		for _, p := range st.Procs {
			p.stop()
		}
	}
	ours := n.namespaces()
	// fastpath's routers with a device in our namespaces.
	if routers, err := br.List(); err == nil {
		for _, r := range routers {
			for _, d := range r.Devices {
				if ours[d.Netns] {
					errs = append(errs, br.Detach(r.ID, nil))
					break
				}
			}
		}
	}
	var names []string
	for ns := range ours {
		names = append(names, ns)
	}
	killInNamespaces(names)
	for _, ns := range names {
		errs = append(errs, netns.Delete(ns))
	}
	if removeLogs {
		errs = append(errs, os.RemoveAll(n.Dir))
	} else {
		errs = append(errs, os.RemoveAll(filepath.Join(n.Dir, "gen")), os.Remove(n.statePath()))
	}
	return errors.Join(errs...)
}

// markerName is the file up writes first into the network's directory:
// down removes a directory only with it, so that a --dir given by mistake
// (a home directory, /etc) is never emptied.
const markerName = ".fastpath-lab-scion"

// makeDir makes the network's directory and marks it as the lab's.
func (n Network) makeDir() error {
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.Dir, markerName), []byte("made by fastpath lab scion up; fastpath lab scion down removes this directory\n"), 0o644)
}

// checkOwnDir refuses a directory that lab scion up did not make: one that
// holds files but neither the marker nor a record of a network (state.json,
// written by up before the marker was).
func (n Network) checkOwnDir() error {
	ents, err := os.ReadDir(n.Dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(ents) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	for _, f := range []string{markerName, "state.json"} {
		if _, err := os.Stat(filepath.Join(n.Dir, f)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s was not made by fastpath lab scion up (it has no %s): down removes the directory it is given, and leaves this one alone; give the --dir of the network, or remove what up left there by hand", n.Dir, markerName)
}

// namespaces are those of ours that exist: <prefix>as<ASN> and
// <prefix>h<ASN> for the ASNs a plan may use.
func (n Network) namespaces() map[string]bool {
	out := map[string]bool{}
	all, _ := netns.List()
	for _, ns := range all {
		rest, ok := strings.CutPrefix(ns, n.Prefix)
		if !ok {
			continue
		}
		if isTopoNetns(rest) || rest == "oracle" {
			out[ns] = true
			continue
		}
		for _, kind := range []string{"as", "h"} {
			num, ok := strings.CutPrefix(rest, kind)
			if !ok {
				continue
			}
			var asn int
			if _, err := fmt.Sscanf(num, "%d", &asn); err == nil && fmt.Sprint(asn) == num && asn >= FirstASN && asn < FirstASN+MaxASes {
				out[ns] = true
			}
		}
	}
	return out
}

// Scion runs scionproto's scion tool on an AS's end host, against its
// daemon, and returns what it printed.
func (n Network) Scion(ctx context.Context, a AS, args ...string) (string, error) {
	bin, err := scionproto.Binary(n.Version(), "scion")
	if err != nil {
		return "", err
	}
	args = append(args, "--sciond", a.Daemon().String())
	var out []byte
	err = netns.Run(a.HostNetns, func() error {
		var err error
		out, err = exec.CommandContext(ctx, bin, args...).CombinedOutput()
		return err
	})
	if err != nil {
		return string(out), fmt.Errorf("scion %s (on %s's host): %v\n%s", strings.Join(args, " "), a.IA, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// detached says whether fastpath's router is still attached in front of an
// AS (for status).
func hybridAttached(name string) bool {
	_, err := os.Stat(br.PinDir(name))
	return err == nil
}

var _ = xdp.Native
