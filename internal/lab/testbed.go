package lab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// Layout is the shape of a testbed.
type Layout string

const (
	// LayoutVeth joins the generator straight to the sink: gen/veth0 ↔ sink/veth2.
	LayoutVeth Layout = "veth"
	// LayoutDUT puts a device-under-test namespace between them:
	// gen/veth0 ↔ dut/veth1, dut/veth3 ↔ sink/veth2.
	LayoutDUT Layout = "dut"
	// LayoutNone is for scenarios that bring their own network (a fixture)
	// and say where the generator and the sink go (Scenario.Ends).
	LayoutNone Layout = "none"
)

// ParseLayout checks a layout given on the command line.
func ParseLayout(s string) (Layout, error) {
	switch Layout(s) {
	case LayoutVeth, LayoutDUT:
		return Layout(s), nil
	}
	return "", fmt.Errorf("unknown layout %q: use veth or dut", s)
}

// The MTU of every lab veth: Ethernet's, or a jumbo MTU for frames longer
// than Ethernet's (BenchMTU).
const (
	DefaultMTU = 1500
	JumboMTU   = 9000
)

// BenchMTU is the testbed MTU that frames of the given length need:
// Ethernet's up to 1514 bytes, else JumboMTU.
func BenchMTU(frameLen int) int {
	if frameLen <= DefaultMTU+14 {
		return DefaultMTU
	}
	return JumboMTU
}

// DefaultPrefix starts the name of everything the lab creates.
const DefaultPrefix = "fp-"

// Testbed names the namespaces and veths of one lab. Everything it creates
// starts with Prefix, so that Down removes exactly what Up made.
type Testbed struct {
	Prefix string
	Layout Layout
	// MTU of every veth: DefaultMTU if 0, at most JumboMTU. A veth's XDP
	// program must be frags-aware when the veth's peer has an MTU above
	// about a page (the kernel refuses others), and frames longer than a
	// page reach it in several buffers.
	MTU int
}

func (t Testbed) mtu() int {
	if t.MTU == 0 {
		return DefaultMTU
	}
	return t.MTU
}

// Endpoint is one veth of the testbed with its fixed addresses.
type Endpoint struct {
	Netns string
	Dev   string
	MAC   net.HardwareAddr
	Addr  netip.Prefix
}

// Iface names the endpoint for attaching and generating.
func (e Endpoint) Iface() xdp.Iface { return xdp.Iface{Netns: e.Netns, Name: e.Dev} }

// Addresses come from 198.18.0.0/15, the range RFC 2544 sets aside for
// benchmarking, so that no lab address can be someone else's.
func (t Testbed) endpoint(n int) Endpoint {
	addrs := map[int]string{0: "198.18.0.1/24", 1: "198.18.0.2/24", 3: "198.18.1.2/24", 2: "198.18.1.1/24"}
	if t.Layout == LayoutVeth && n == 2 {
		addrs[2] = "198.18.0.2/24"
	}
	ns := map[int]string{0: "gen", 1: "dut", 2: "sink", 3: "dut"}[n]
	return Endpoint{
		Netns: t.Prefix + ns,
		Dev:   fmt.Sprintf("%sveth%d", t.Prefix, n),
		MAC:   net.HardwareAddr{0x02, 0x66, 0x70, 0x00, 0x00, byte(n)},
		Addr:  netip.MustParsePrefix(addrs[n]),
	}
}

// Gen is the generator's veth (veth0).
func (t Testbed) Gen() Endpoint { return t.endpoint(0) }

// Sink is the sink's veth (veth2).
func (t Testbed) Sink() Endpoint { return t.endpoint(2) }

// DUTIn is the device under test's ingress veth (veth1), facing the generator.
func (t Testbed) DUTIn() Endpoint { return t.endpoint(1) }

// DUTOut is the device under test's egress veth (veth3), facing the sink.
func (t Testbed) DUTOut() Endpoint { return t.endpoint(3) }

// Namespaces returns the namespaces of the testbed's layout.
func (t Testbed) Namespaces() []string {
	if t.Layout == LayoutVeth {
		return []string{t.Prefix + "gen", t.Prefix + "sink"}
	}
	return []string{t.Prefix + "gen", t.Prefix + "dut", t.Prefix + "sink"}
}

// allNamespaces is every name any layout uses: what Down removes.
func (t Testbed) allNamespaces() []string {
	return []string{t.Prefix + "gen", t.Prefix + "dut", t.Prefix + "sink"}
}

// pairs returns the veth pairs of the layout.
func (t Testbed) pairs() [][2]Endpoint {
	if t.Layout == LayoutVeth {
		return [][2]Endpoint{{t.Gen(), t.Sink()}}
	}
	return [][2]Endpoint{{t.Gen(), t.DUTIn()}, {t.DUTOut(), t.Sink()}}
}

// Endpoints returns every veth of the layout.
func (t Testbed) Endpoints() []Endpoint {
	var eps []Endpoint
	for _, p := range t.pairs() {
		eps = append(eps, p[0], p[1])
	}
	return eps
}

// Validate checks the names fit the kernel's limits.
func (t Testbed) Validate() error {
	if _, err := ParseLayout(string(t.Layout)); err != nil {
		return err
	}
	if t.Prefix == "" {
		return errors.New("testbed prefix is empty: everything the lab makes must carry a prefix")
	}
	if n := len(t.Prefix) + len("veth0"); n >= 16 {
		return fmt.Errorf("testbed prefix %q too long: interface names would have %d characters, the kernel allows 15", t.Prefix, n)
	}
	if t.MTU != 0 && (t.MTU < 68 || t.MTU > JumboMTU) {
		return fmt.Errorf("testbed MTU %d: give 68 (IPv4's least) to %d", t.MTU, JumboMTU)
	}
	return nil
}

// IsUp reports whether the testbed exists with this layout.
func (t Testbed) IsUp() bool {
	for _, ns := range t.Namespaces() {
		if !netns.Exists(ns) {
			return false
		}
	}
	if t.Layout == LayoutVeth && netns.Exists(t.Prefix+"dut") {
		return false
	}
	for _, ep := range t.Endpoints() {
		h, err := netns.Handle(ep.Netns)
		if err != nil {
			return false
		}
		l, err := h.LinkByName(ep.Dev)
		h.Close()
		if err != nil || l.Attrs().MTU != t.mtu() {
			return false
		}
	}
	return true
}

// Up builds the testbed, or completes one that is partly there. If a testbed
// with the other layout or MTU is up, it is taken down first. On failure nothing of
// the testbed is left behind.
func (t Testbed) Up() (err error) {
	if err := t.Validate(); err != nil {
		return err
	}
	if !t.IsUp() {
		// A partial testbed, or one of another layout or MTU: start from
		// nothing rather than reason about which half survived a crash.
		if err := t.Down(); err != nil {
			return err
		}
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Down())
		}
	}()
	for _, ns := range t.Namespaces() {
		if err := netns.Create(ns); err != nil {
			return err
		}
		// Router solicitations and DAD would add packets the sink counts.
		if err := netns.Run(ns, func() error {
			for _, key := range []string{"all", "default"} {
				if err := netns.Sysctl(filepath.Join("net/ipv6/conf", key, "disable_ipv6"), "1"); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for _, p := range t.pairs() {
		if err := t.ensurePair(p[0], p[1]); err != nil {
			return err
		}
	}
	for _, ep := range t.Endpoints() {
		if err := configure(ep); err != nil {
			return err
		}
	}
	return t.route()
}

// ensurePair creates a veth pair with each end directly in its namespace, so
// that the names never appear (or clash) in the caller's namespace.
func (t Testbed) ensurePair(a, b Endpoint) error {
	h, err := netns.Handle(a.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := h.LinkByName(a.Dev); err == nil {
		return nil
	}
	peerNS, err := netns.FD(b.Netns)
	if err != nil {
		return err
	}
	defer peerNS.Close()
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: a.Dev, HardwareAddr: a.MAC, MTU: t.mtu()},
		PeerName:         b.Dev,
		PeerHardwareAddr: b.MAC,
		PeerNamespace:    netlink.NsFd(int(peerNS)),
	}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth pair %s/%s ↔ %s/%s: %w", a.Netns, a.Dev, b.Netns, b.Dev, err)
	}
	return nil
}

// configure sets address, offloads and state of one veth.
func configure(ep Endpoint) error {
	h, err := netns.Handle(ep.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(ep.Dev)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", ep.Dev, ep.Netns, err)
	}
	addr := &netlink.Addr{IPNet: prefixToIPNet(ep.Addr)}
	if err := h.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("address %s on %s: %w", ep.Addr, ep.Dev, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", ep.Dev, err)
	}
	if lo, err := h.LinkByName("lo"); err == nil {
		_ = h.LinkSetUp(lo)
	}
	// A veth hands XDP_TX'd and redirected frames to its peer only if the peer
	// runs NAPI, which it does with an XDP program or with GRO on; without
	// either the frames vanish without a counter. GRO on every end lets any
	// scenario leave an end without a program.
	return netns.Run(ep.Netns, func() error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return fmt.Errorf("ethtool in %s: %w", ep.Netns, err)
		}
		defer et.Close()
		if err := et.Change(ep.Dev, map[string]bool{"rx-gro": true}); err != nil {
			return fmt.Errorf("enable GRO on %s: %w", ep.Dev, err)
		}
		return nil
	})
}

// route makes the DUT a router between the two subnets, with static
// neighbours so that no ARP exchange adds packets or delays the first ones.
func (t Testbed) route() error {
	if t.Layout != LayoutDUT {
		return nil
	}
	gen, in, out, sink := t.Gen(), t.DUTIn(), t.DUTOut(), t.Sink()
	if err := netns.Run(in.Netns, func() error { return netns.Sysctl("net/ipv4/ip_forward", "1") }); err != nil {
		return err
	}
	steps := []struct {
		ep    Endpoint
		via   Endpoint
		dst   netip.Prefix
		neigh Endpoint
	}{
		{gen, in, sink.Addr.Masked(), in},
		{sink, out, gen.Addr.Masked(), out},
		{in, Endpoint{}, netip.Prefix{}, gen},
		{out, Endpoint{}, netip.Prefix{}, sink},
	}
	for _, s := range steps {
		h, err := netns.Handle(s.ep.Netns)
		if err != nil {
			return err
		}
		l, err := h.LinkByName(s.ep.Dev)
		if err == nil && s.dst.IsValid() {
			err = h.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: prefixToIPNet(s.dst), Gw: s.via.Addr.Addr().AsSlice()})
		}
		if err == nil {
			err = h.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, IP: s.neigh.Addr.Addr().AsSlice(), HardwareAddr: s.neigh.MAC, State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4})
		}
		h.Close()
		if err != nil {
			return fmt.Errorf("routes of %s/%s: %w", s.ep.Netns, s.ep.Dev, err)
		}
	}
	return nil
}

// Down removes the testbed's namespaces, and with them the veths and any
// bridge or program a scenario put inside. Namespaces without the prefix, or
// that the testbed does not name, are never touched.
func (t Testbed) Down() error {
	if t.Prefix == "" {
		return errors.New("testbed prefix is empty: refusing to guess what to remove")
	}
	var errs []error
	for _, c := range cleanups {
		errs = append(errs, c(t))
	}
	for _, ns := range t.allNamespaces() {
		errs = append(errs, netns.Delete(ns))
	}
	return errors.Join(errs...)
}

// cleanups remove what scenarios leave outside the namespaces (bpffs pins)
// when a bench run dies before its teardown.
var cleanups []func(Testbed) error

// RegisterCleanup adds what Down must also remove for a testbed: only what
// carries the testbed's prefix.
func RegisterCleanup(c func(Testbed) error) { cleanups = append(cleanups, c) }

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
