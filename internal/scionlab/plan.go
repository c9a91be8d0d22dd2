// Package scionlab runs a real SCION network in the lab: scionproto's own
// router, control service and daemon for each AS, each AS in a network
// namespace of its own, joined to its neighbours by veth pairs, with an
// internal network on a veth to an end host in a namespace of its own.
// One core AS and its child leaf ASes, with BGP-style AS numbers
// (1-64512, 1-64513, …) that have SCION-mapped IPv6 addresses.
package scionlab

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"github.com/scionproto/scion/pkg/addr"
)

// DirFor is the directory of the network of a namespace prefix when the
// command line names none: DefaultDir for the default prefix, a directory of
// its own for any other, so that two networks of different prefixes (two
// engineers, a test beside a demo) never share a record, and bringing one up
// cannot take the other down.
func DirFor(prefix string) string {
	if prefix == DefaultPrefix {
		return DefaultDir
	}
	return DefaultDir + "-" + filepath.Base(filepath.Clean("/"+prefix))
}

// Defaults.
const (
	DefaultPrefix = "fp-"
	DefaultDir    = "/var/lib/fastpath/scion"
	DefaultASes   = 3
	// MaxASes keeps the addresses and interface IDs of the plan simple.
	MaxASes = 50
	// FirstASN is the core AS's number; leaves count up from it.
	FirstASN = 64512
	// ISD is the network's one isolation domain.
	ISD = 1
)

// Ports the services use, as scionproto's own topology generator does.
const (
	RouterInternalPort = 30042
	ControlPort        = 30252
	DaemonPort         = 30255
	RouterMetricsPort  = 30442
	LinkPort           = 50000
	// DispatchedPorts is the topology's dispatched_ports: the control
	// service takes its QUIC ports from it; v0.12.0's router delivers
	// SCION/UDP there straight to the host's port (elsewhere to 30041),
	// later releases deliver every port as it is.
	DispatchedPorts = "31000-32767"
)

// The links' MTU: every veth of the network (inter-AS links, internal
// networks, the end hosts' devices) has the one up is given.
const (
	// DefaultMTU is Ethernet's.
	DefaultMTU = 1500
	// MinMTU leaves a SCION MTU of 1280, the least scionproto allows a
	// path (MinMTU in its pkg/private/common).
	MinMTU = 1280 + UnderlayOverhead
	// MaxMTU is the largest link MTU whose SCION packets reach v0.12.0's
	// router whole: it reads each datagram into a 9000-byte buffer
	// (bufSize in router/dataplane.go) and would see a longer one cut
	// short. From v0.14.0 it reads 8,488 bytes, and TopoMTU caps what the
	// paths say.
	MaxMTU = 9000 + UnderlayOverhead
	// UnderlayOverhead is what the IPv4/UDP underlay takes of a link's MTU.
	UnderlayOverhead = 20 + 8
)

// SCIONMTU is the SCION MTU of a link of the given (IP) MTU.
func SCIONMTU(linkMTU int) int { return linkMTU - UnderlayOverhead }

// TopoMTU is what the topology files say of a link of SCION MTU
// scionMTU, for the AS and each interface, on a network of scionproto
// release version: no more than the release's router reads whole (8,488
// bytes from v0.14.0, 9,000 before), so that no path promises packets its
// routers would see cut short.
func TopoMTU(version string, scionMTU int) int {
	return min(scionMTU, scionproto.RouterOf(version).MaxDatagram)
}

// CheckMTU refuses an MTU the network cannot run with.
func CheckMTU(mtu int) error {
	if mtu < MinMTU || mtu > MaxMTU {
		return fmt.Errorf("--mtu %d: the links' MTU must be %d to %d bytes (9000 for jumbo frames): a SCION MTU of 1280, scionproto's least, to 9000, the most its router reads whole, plus the %d-byte IPv4/UDP underlay",
			mtu, MinMTU, MaxMTU, UnderlayOverhead)
	}
	return nil
}

// Device names inside the namespaces (they are per namespace, so they need
// no prefix).
const (
	InternalDev = "int0" // the AS's side of its internal network
	HostDev     = "eth0" // the end host's side
)

// Network is the lab's SCION network: its namespaces carry Prefix, and
// everything else it makes (configuration, crypto, databases, logs, the
// record of what runs) lives under Dir.
type Network struct {
	Prefix string
	Dir    string
}

// AS is one AS of the plan.
type AS struct {
	Index int
	IA    addr.IA
	Core  bool
	// Netns runs the AS's router, control service and daemon; HostNetns its
	// end host (the dispatcher shim that answers SCMP echo, applications).
	Netns, HostNetns string
	// Internal is the AS's address on its internal network: the router's
	// internal_addr, the control service and the daemon all use it. Host is
	// the end host's.
	Internal, Host netip.Addr
	Subnet         netip.Prefix
	// Dir holds the AS's topology.json, keys, certificates and services'
	// configuration.
	Dir string
	// Tag names the AS's processes and logs (control-64513, say): its
	// number in the default network, its ISD-AS in file form in a .topo one.
	Tag string
	// Routers are the AS's border routers; the first runs in Netns beside
	// the control service and daemon, at Internal. A plan of the default
	// network has one.
	Routers []Router
	// Switch, when the AS has several routers, is the namespace of the
	// bridge that is its internal network: every router's InternalDev and
	// the host's HostDev are ports of it.
	Switch string
	// MTU is the AS's SCION MTU (its internal network's), and DevMTU the
	// MTU of the internal network's devices; 0 in the default network,
	// where up's --mtu gives both.
	MTU, DevMTU int
	// InternalKind is the kind of device that holds each router's
	// Internal address (InternalDev, over a veth InternalDev+"v" unless it
	// is the veth); the end host's is HostKind. With VXLAN, VNI is the
	// internal network's and HostUnderlay the host's underlay address (on
	// HostDev+"v"), each router's in its Underlay.
	InternalKind DeviceKind
	VNI          uint32
	HostUnderlay netip.Prefix
}

// Router is a border router of an AS: its name in topology.json, the
// namespace it runs in and its address on the AS's internal network.
type Router struct {
	ID       string
	Netns    string
	Internal netip.Addr
	// Underlay is the router's VXLAN underlay address on the internal
	// network (on InternalDev+"v"), where the AS's InternalKind is VXLAN.
	Underlay netip.Prefix
}

// RouterInternal is the router's internal_addr.
func (r Router) RouterInternal() netip.AddrPort {
	return netip.AddrPortFrom(r.Internal, RouterInternalPort)
}

// RouterID is the AS's (first) router in its topology.json.
func (a AS) RouterID() string { return fmt.Sprintf("br%s-1", a.fileIA()) }

// IPv6 says whether the AS's internal network is IPv6.
func (a AS) IPv6() bool { return a.Internal.Is6() }

// ControlID is the AS's control service.
func (a AS) ControlID() string { return fmt.Sprintf("cs%s-1", a.fileIA()) }

func (a AS) fileIA() string { return addr.FormatIA(a.IA, addr.WithFileSeparator()) }

// Daemon is where the AS's daemon (sciond) answers.
func (a AS) Daemon() netip.AddrPort { return netip.AddrPortFrom(a.Internal, DaemonPort) }

// RouterMetrics is where the AS's reference router serves its Prometheus
// metrics (router_interface_up: what BFD says of each interface).
func (a AS) RouterMetrics() netip.AddrPort {
	return netip.AddrPortFrom(a.Internal, RouterMetricsPort)
}

// RouterInternal is the router's internal_addr.
func (a AS) RouterInternal() netip.AddrPort {
	return netip.AddrPortFrom(a.Internal, RouterInternalPort)
}

// Link is an inter-AS link: a veth pair between the parent's namespace and
// the child's, each end an interface of its AS's router, on the veth
// itself or on a device over it (ParentKind, ChildKind). In a .topo
// network "parent" is the link's first end (a), "child" its second (b),
// whatever its type.
type Link struct {
	Parent, Child       int    // AS indexes
	ParentIf, ChildIf   uint16 // SCION interface IDs
	ParentDev, ChildDev string
	ParentAddr          netip.AddrPort
	ChildAddr           netip.AddrPort
	// Type is LinkChild (the child link of the default network), LinkCore
	// or LinkPeer.
	Type string
	// ParentRouter and ChildRouter index each end's router in its AS's
	// Routers.
	ParentRouter, ChildRouter int
	// SCIONMTU is the interfaces' MTU in topology.json and DevMTU the
	// MTU of the devices that hold the addresses; 0 in the default
	// network, where up's --mtu gives both.
	SCIONMTU, DevMTU int
	// ParentKind and ChildKind are the kinds of device that hold each
	// end's address (ParentDev, ChildDev), and ParentVeth and ChildVeth
	// the veth pair under them: the devices themselves where they are
	// veths. Devices.Apply sets them; the plans put every end on a veth.
	ParentKind, ChildKind DeviceKind
	ParentVeth, ChildVeth string
	// With VXLAN (at both ends), VNI is the link's and ParentUnderlay and
	// ChildUnderlay the veths' addresses.
	VNI                           uint32
	ParentUnderlay, ChildUnderlay netip.Prefix
}

// Plan is the network of n ASes: AS 0 the core, the others its children,
// each on one link.
func (n Network) Plan(ases int) ([]AS, []Link, error) { return n.PlanLinks(ases, 1) }

// MaxParallel is the most links a leaf AS may have to the core.
const MaxParallel = 2

// PlanLinks is the network of n ASes with parallel links between the core
// and each leaf: with two, every leaf reaches every other over four paths,
// and a path survives the loss of one link (failover). Link k of leaf i is
// interface 1+k of the leaf and i+k*MaxASes of the core, on
// 10.(255-k).i.0/30.
func (n Network) PlanLinks(ases, parallel int) ([]AS, []Link, error) {
	if ases < 3 || ases > MaxASes {
		return nil, nil, fmt.Errorf("--ases %d: the lab's SCION network has one core AS and at least two leaf ASes, at most %d ASes in all", ases, MaxASes)
	}
	if parallel < 1 || parallel > MaxParallel {
		return nil, nil, fmt.Errorf("--links %d: each leaf has 1 to %d links to the core", parallel, MaxParallel)
	}
	var as []AS
	for i := 0; i < ases; i++ {
		asn := FirstASN + i
		ia, err := addr.ParseIA(fmt.Sprintf("%d-%d", ISD, asn))
		if err != nil {
			return nil, nil, err
		}
		subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + i), 0, 0}), 24)
		a := AS{
			Index: i, IA: ia, Core: i == 0,
			Netns:     fmt.Sprintf("%sas%d", n.Prefix, asn),
			HostNetns: fmt.Sprintf("%sh%d", n.Prefix, asn),
			Subnet:    subnet,
			Internal:  netip.AddrFrom4([4]byte{10, byte(100 + i), 0, 1}),
			Host:      netip.AddrFrom4([4]byte{10, byte(100 + i), 0, 2}),
			Dir:       filepath.Join(n.Dir, "gen", fmt.Sprintf("AS%d", asn)),
			Tag:       fmt.Sprint(asn),
		}
		a.Routers = []Router{{ID: a.RouterID(), Netns: a.Netns, Internal: a.Internal}}
		a.InternalKind = Veth
		as = append(as, a)
	}
	var links []Link
	for k := 0; k < parallel; k++ {
		for i := 1; i < ases; i++ {
			parentIf := uint16(i + k*MaxASes)
			links = append(links, Link{
				Parent: 0, Child: i,
				ParentIf: parentIf, ChildIf: uint16(1 + k),
				ParentDev: fmt.Sprintf("if%d", parentIf), ChildDev: fmt.Sprintf("if%d", 1+k),
				ParentAddr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(255 - k), byte(i), 1}), LinkPort),
				ChildAddr:  netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(255 - k), byte(i), 2}), LinkPort),
				Type:       LinkChild,
				ParentKind: Veth, ChildKind: Veth,
				ParentVeth: fmt.Sprintf("if%d", parentIf), ChildVeth: fmt.Sprintf("if%d", 1+k),
			})
		}
	}
	return as, links, nil
}

// Namespaces are every namespace of a plan, in the order they are made.
func Namespaces(as []AS) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Netns, a.HostNetns)
		for i, r := range a.Routers {
			if i > 0 {
				out = append(out, r.Netns)
			}
		}
		if a.Switch != "" {
			out = append(out, a.Switch)
		}
	}
	return out
}
