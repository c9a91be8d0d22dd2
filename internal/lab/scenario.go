package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// Scenario is one row of the benchmark: a device under test set up on a
// testbed. Network functions add their own through Register.
type Scenario struct {
	Name        string
	Description string
	Layout      Layout
	// Order sorts the rows of a report: baselines first.
	Order int
	// Anchor names the scenario this one is judged against: its network
	// function's natural comparison on the same testbed (the border router's
	// is xdp-redirect, the firewall's routed). A row's Mpps over its
	// anchor's, at the same frame size in the same run, is steadier than
	// its ratio to veth: the generator's own speed cancels out of it.
	// Empty for rows that are themselves a comparison.
	Anchor string
	// Rewrites says the DUT changes frames in place (MACs, TTL, path fields),
	// so the generator must restore every packet whole on each run. A bench
	// run restores for all its rows if any row needs it, to keep the ratios fair.
	Rewrites bool
	// Routed says the DUT routes IP between the generator's and the sink's
	// subnets, so TCP can cross it (lab tcp).
	Routed bool
	// Note is printed with the row: what its figure means beyond the table's
	// assumptions.
	Note string
	// Setup makes the testbed's DUT namespace the device under test and
	// returns what undoes it. The testbed is up when it is called.
	Setup func(tb Testbed) (teardown func() error, err error)
	// Packets, if set, builds the packets to send; otherwise the testbed's
	// default UDP packets of the requested size are sent.
	Packets func(tb Testbed, size int) ([][]byte, error)
	// Flows > 0 sends a flood: the packets are templates and every packet
	// is one of Flows distinct random flows (GenOptions.Flows), with source
	// addresses from FlowSrc. `lab bench --flows` sets it for rows without
	// their own.
	Flows   uint32
	FlowSrc netip.Prefix
	// Fixed sends one frame as it is on every run: the generator's ceiling.
	Fixed bool
	// Fixture names a registered Fixture the scenario needs: up before the
	// first scenario that needs it runs, down after the bench.
	Fixture string
	// Ends, for scenarios of LayoutNone, are where the generator sends
	// from and where the sink counts.
	Ends func(tb Testbed) (gen, sink xdp.Iface, err error)
	// Describe, if set, is called after the runs and says in a few words
	// what the DUT did with the frames, for the row's note (a router's
	// verdicts, say).
	Describe func(tb Testbed) (string, error)
	// Detail, if set, is called after the runs, before Describe, and
	// gives what the DUT reported of itself as JSON (fastpath-rt's summary
	// with its stage profile), or nil. Each setup's goes into the row's
	// Details.
	Detail func(tb Testbed) (json.RawMessage, error)
	// SCIONSink counts only SCMP echo requests on a standard path at the sink
	// and passes the rest (AttachSCIONSink): a sink on a SCION router's link
	// must leave its BFD and beacons alone.
	SCIONSink bool
	// SYNFlood makes a row of lab tcp measure each run twice: iperf3
	// alone, then while the generator floods the sink's iperf3 port with
	// SYNs from random sources and source ports (SYNFloodSrc) as fast as
	// the path takes them. Its figure is the throughput under the flood,
	// beside the one without. lab bench's sink would drop iperf3's
	// traffic, so such a row is lab tcp's only.
	SYNFlood bool
}

// Fixture is a set-up that several scenarios share for a whole bench, such
// as a SCION network: too slow to make for every run, and a measurement of
// its own in the making.
type Fixture struct {
	Name string
	// Up makes the fixture for a bench and returns what undoes it.
	Up func(o FixtureOptions) (teardown func() error, err error)
}

// FixtureOptions are what a fixture takes from the bench it is made for.
type FixtureOptions struct {
	// Prefix starts the name of everything it makes.
	Prefix string
	// MTU is what the bench's frames need of every link on their way
	// (BenchMTU of --size): a fixture of Ethernet's MTU cannot carry them.
	MTU int
	Log io.Writer
}

var fixtures = map[string]Fixture{}

// RegisterFixture adds a fixture; names are unique.
func RegisterFixture(f Fixture) {
	if _, dup := fixtures[f.Name]; dup {
		panic("lab: fixture registered twice: " + f.Name)
	}
	fixtures[f.Name] = f
}

var (
	scenarios = map[string]Scenario{}
	groups    = map[string][]string{}
)

// RegisterGroup names a list of scenarios that `lab bench NAME` runs
// together, like the firewall's rows at each rule count.
func RegisterGroup(name string, members ...string) {
	if _, dup := groups[name]; dup {
		panic("lab: group registered twice: " + name)
	}
	groups[name] = members
}

// Register adds a scenario; names are unique.
func Register(s Scenario) {
	if _, dup := scenarios[s.Name]; dup {
		panic("lab: scenario registered twice: " + s.Name)
	}
	scenarios[s.Name] = s
}

// Scenarios returns every registered scenario in report order.
func Scenarios() []Scenario {
	var all []Scenario
	for _, s := range scenarios {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Order != all[j].Order {
			return all[i].Order < all[j].Order
		}
		return all[i].Name < all[j].Name
	})
	return all
}

// LookupScenarios resolves names, failing on the first unknown one with the
// list of known ones.
func LookupScenarios(names []string) ([]Scenario, error) {
	var out []Scenario
	var expanded []string
	seen := map[string]bool{}
	for _, n := range names {
		members := []string{n}
		if g, ok := groups[n]; ok {
			members = g
		}
		// A scenario named twice (by itself and in a group) runs once.
		for _, m := range members {
			if !seen[m] {
				seen[m] = true
				expanded = append(expanded, m)
			}
		}
	}
	for _, n := range expanded {
		s, ok := scenarios[n]
		if !ok {
			var known []string
			for _, s := range Scenarios() {
				known = append(known, s.Name)
			}
			var gs []string
			for g := range groups {
				gs = append(gs, g+" (group)")
			}
			sort.Strings(gs)
			known = append(known, gs...)
			return nil, fmt.Errorf("unknown scenario %q: known are %s", n, strings.Join(known, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

// CeilingScenario is the row every bench reports beside the others: the
// generator alone, sending one fixed frame into an XDP_DROP sink. The veth
// row divided by it is what the generator's own per-packet work costs.
const CeilingScenario = "ceiling"

func init() {
	Register(Scenario{
		Name:        CeilingScenario,
		Description: "the generator's ceiling: one fixed frame sent as it is into the sink, nothing written",
		Layout:      LayoutVeth,
		Order:       -1,
		Fixed:       true,
		Setup:       func(Testbed) (func() error, error) { return func() error { return nil }, nil },
	})
	Register(Scenario{
		Name:        "veth",
		Description: "generator straight into the sink over one veth pair",
		Layout:      LayoutVeth,
		Order:       0,
		Setup:       func(Testbed) (func() error, error) { return func() error { return nil }, nil },
	})
	Register(Scenario{
		Name:        "bridge",
		Description: "Linux bridge joining veth1 and veth3 in the DUT namespace",
		Layout:      LayoutDUT,
		Order:       10,
		Setup:       setupBridge,
	})
	Register(Scenario{
		Name:        "routed",
		Description: "the DUT namespace routes with the kernel, no filter",
		Layout:      LayoutDUT,
		Order:       15,
		// The kernel decrements the TTL in the frame's page.
		Rewrites: true,
		Routed:   true,
		Setup:    func(Testbed) (func() error, error) { return func() error { return nil }, nil },
		Packets:  RoutedUDP,
	})
	Register(Scenario{
		Name:        "xdp-pass",
		Description: "routed DUT with an XDP program that passes everything on its ingress",
		Layout:      LayoutDUT,
		Order:       16,
		Anchor:      "routed",
		Rewrites:    true,
		Routed:      true,
		Setup:       setupPass,
		Packets:     RoutedUDP,
	})
	Register(Scenario{
		Name:        "xdp-redirect",
		Description: "minimal XDP program redirecting veth1 to veth3",
		Layout:      LayoutDUT,
		Order:       20,
		Setup:       setupRedirect,
	})
}

// setupBridge enslaves both DUT veths to a bridge. The packets are addressed
// to the sink's MAC, which the bridge floods to veth3 until it learns it.
func setupBridge(tb Testbed) (func() error, error) {
	in, out := tb.DUTIn(), tb.DUTOut()
	h, err := netns.Handle(in.Netns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	// With multicast snooping on, the bridge joins 224.0.0.106 and sends IGMP
	// reports of its own, which the sink would count as forwarded packets.
	snooping := false
	br := &netlink.Bridge{
		LinkAttrs:         netlink.LinkAttrs{Name: tb.Prefix + "br0", HardwareAddr: net.HardwareAddr{0x02, 0x66, 0x70, 0x00, 0x00, 0xb0}},
		MulticastSnooping: &snooping,
	}
	if err := h.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("create bridge %s: %w", br.Name, err)
	}
	teardown := func() error {
		h, err := netns.Handle(in.Netns)
		if err != nil {
			return err
		}
		defer h.Close()
		return h.LinkDel(br)
	}
	for _, ep := range []Endpoint{in, out} {
		l, err := h.LinkByName(ep.Dev)
		if err == nil {
			err = h.LinkSetMaster(l, br)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("add %s to bridge: %w", ep.Dev, err), teardown())
		}
	}
	if err := h.LinkSetUp(br); err != nil {
		return nil, errors.Join(fmt.Errorf("set bridge up: %w", err), teardown())
	}
	return teardown, nil
}

// setupRedirect attaches the minimal redirect program to veth1.
func setupRedirect(tb Testbed) (func() error, error) {
	in, out := tb.DUTIn(), tb.DUTOut()
	attrs, err := xdp.Lookup(out.Iface())
	if err != nil {
		return nil, err
	}
	var objs redirectObjects
	if err := loadRedirectObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("load redirect program: %w", err)
	}
	// A devmap resolves the index in the namespace of the thread updating it.
	if err := netns.Run(out.Netns, func() error { return objs.RedirectPort.Put(uint32(0), uint32(attrs.Index)) }); err != nil {
		objs.Close()
		return nil, fmt.Errorf("set redirect port: %w", err)
	}
	var l link.Link
	if l, err = xdp.Attach(in.Iface(), objs.LabRedirect, xdp.Native); err != nil {
		objs.Close()
		return nil, err
	}
	return func() error { return errors.Join(l.Close(), objs.Close()) }, nil
}

// setupPass attaches the pass-everything program to veth1.
func setupPass(tb Testbed) (func() error, error) {
	l, err := AttachPass(tb.DUTIn().Iface())
	if err != nil {
		return nil, err
	}
	return l.Close, nil
}

// Attached is a program attached to a device until Close.
type Attached struct {
	l    link.Link
	objs passObjects
}

func (a *Attached) Close() error { return errors.Join(a.l.Close(), a.objs.Close()) }

// AttachPass attaches the pass-everything program to a device in native
// mode: also what a veth needs to deliver promptly the frames its peer
// sends back with XDP_TX.
func AttachPass(dev xdp.Iface) (*Attached, error) {
	a := &Attached{}
	if err := loadPassObjects(&a.objs, nil); err != nil {
		return nil, fmt.Errorf("load pass program: %w", err)
	}
	var err error
	if a.l, err = xdp.Attach(dev, a.objs.LabPass, xdp.Native); err != nil {
		a.objs.Close()
		return nil, err
	}
	return a, nil
}

// RoutedUDP are the default UDP packets addressed to the DUT's MAC, for
// scenarios where the DUT routes them.
func RoutedUDP(tb Testbed, size int) ([][]byte, error) {
	u := tb.DefaultUDP()
	u.Size = size
	u.DstMAC = tb.DUTIn().MAC
	return UDPPackets(u)
}

// RedirectObject is the ELF object of the xdp-redirect scenario's program,
// for runtimes that load objects themselves.
func RedirectObject() []byte { return _RedirectBytes }
