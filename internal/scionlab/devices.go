package scionlab

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/scionproto/scion/pkg/addr"
)

// DeviceKind is the kind of device that holds an address of the network:
// an inter-AS interface's underlay address at one end of a link, or an
// AS's address on its internal network. Every kind but Veth sits over a
// veth (the wire between two namespaces) that holds no SCION address
// itself.
type DeviceKind string

// The device kinds, as operators deploy them.
const (
	// Veth: the address on the veth itself (the lab's default).
	Veth DeviceKind = "veth"
	// Bridge: the address on a Linux bridge, the veth a port of it.
	Bridge DeviceKind = "bridge"
	// Macvlan: the address on a macvlan (bridge mode) over the veth, the
	// veth without an address.
	Macvlan DeviceKind = "macvlan"
	// VXLAN: the address on a VXLAN device whose underlay is the veth,
	// which has a subnet of its own (VXLANUnderlay): both ends of a link,
	// or every end of an internal network (the end host's too), are VXLAN.
	VXLAN DeviceKind = "vxlan"
)

// DeviceKinds are the kinds --devices takes.
var DeviceKinds = []DeviceKind{Veth, Bridge, Macvlan, VXLAN}

func (k DeviceKind) valid() bool { return slices.Contains(DeviceKinds, k) }

func kindNames() string {
	var s []string
	for _, k := range DeviceKinds {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

// VXLAN's framing and addresses.
const (
	// VXLANOverhead is what a VXLAN device over an IPv4 underlay adds to
	// each frame (outer IPv4, UDP, VXLAN header, inner Ethernet): the
	// lab gives the veth under it that much more MTU, so that the VXLAN
	// device, and with it every SCION MTU, stays what the plan says.
	VXLANOverhead = 20 + 8 + 8 + 14
	// VXLANPort is IANA's VXLAN port (Linux's own default is 8472).
	VXLANPort = 4789
	// vniLinks + j is the VNI of link j, vniInternal + i that of AS i's
	// internal network: unique in every namespace, whose VXLAN devices
	// share one UDP socket.
	vniLinks    = 1
	vniInternal = 100000
)

// VXLANUnderlay is the range of every VXLAN underlay address, apart from
// the overlay addresses of both network shapes (10/8, fd00::/8) and from
// the translator's and the SIG's: link j's veths hold 172.16.0.0 + 4j /30
// (first end .1, second .2; j < MaxTopoLinks keeps it in 172.16.0.0/18),
// AS i's internal network 172.17.i.0/24, each end at its overlay address's
// last byte. The underlay is IPv4 also where the overlay is IPv6.
var VXLANUnderlay = netip.MustParsePrefix("172.16.0.0/12")

func vxlanLinkUnderlay(j, end int) netip.Prefix {
	v := 4*j + end
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16, byte(v >> 8), byte(v)}), 30)
}

func vxlanInternalUnderlay(i int, overlay netip.Addr) netip.Prefix {
	b := overlay.As16()
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 17, byte(i), b[15]}), 24)
}

// vethName is the veth under a device of a kind: the device itself when
// it is a veth, else its name with a "v" (if1 → if1v, int0 → int0v).
func vethName(dev string, k DeviceKind) string {
	if k == Veth {
		return dev
	}
	return dev + "v"
}

// Devices says which kind of device each end of each inter-AS link and
// each AS's internal network sits behind. It is a list of rules, later
// ones overriding earlier ones, separated by commas:
//
//	KIND              every link end and internal network
//	IA=KIND           every device of one AS: its ends of its links, its internal network
//	IA#IFID=KIND      one AS's end of the link of its interface IFID
//	IA#internal=KIND  one AS's internal network
//
// KIND is veth, bridge, macvlan or vxlan. "veth" alone is the lab's
// default, and "veth,1-64512#2=bridge" the core AS's end of its link to
// 1-64514 behind a bridge. A VXLAN tunnel ends at both ends of a link: an
// end of a link that is VXLAN at its other end is VXLAN too, unless a rule
// naming its AS says otherwise, which is refused. An internal network has
// one kind; the end host's device is a VXLAN device too where the AS's is.
type Devices struct {
	rules []deviceRule
}

type deviceRule struct {
	ia       addr.IA // 0: every AS
	internal bool
	ifid     uint16 // 0: every interface (and the internal network unless internal)
	kind     DeviceKind
}

// DefaultDevices is the lab's network on veths alone.
var DefaultDevices = Devices{rules: []deviceRule{{kind: Veth}}}

// ParseDevices reads --devices (Devices' form); "" is DefaultDevices.
func ParseDevices(s string) (Devices, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultDevices, nil
	}
	var d Devices
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		bad := func(why string) error {
			return fmt.Errorf("--devices %q: %q %s; give KIND, IA=KIND, IA#IFID=KIND or IA#internal=KIND, KIND one of %s (e.g. veth,1-64512#2=bridge)", s, item, why, kindNames())
		}
		where, kind, named := strings.Cut(item, "=")
		if !named {
			kind, where = where, ""
		}
		r := deviceRule{kind: DeviceKind(strings.TrimSpace(kind))}
		if !r.kind.valid() {
			return Devices{}, bad(fmt.Sprintf("has no device kind %q", r.kind))
		}
		if named {
			ia, end, hasEnd := strings.Cut(strings.TrimSpace(where), "#")
			var err error
			if r.ia, err = addr.ParseIA(ia); err != nil || r.ia.IsWildcard() {
				return Devices{}, bad(fmt.Sprintf("names no AS (%q: write it ISD-AS, like %d-%d)", ia, ISD, FirstASN))
			}
			switch {
			case !hasEnd:
			case end == "internal":
				r.internal = true
			default:
				id, err := strconv.ParseUint(end, 10, 16)
				if err != nil || id == 0 {
					return Devices{}, bad(fmt.Sprintf("names no interface (%q: an interface ID is 1 to 65535, or say internal)", end))
				}
				r.ifid = uint16(id)
			}
		}
		d.rules = append(d.rules, r)
	}
	return d, nil
}

// String is the rules in ParseDevices' form, as the record keeps them.
func (d Devices) String() string {
	var s []string
	for _, r := range d.rules {
		switch {
		case r.ia == 0:
			s = append(s, string(r.kind))
		case r.internal:
			s = append(s, fmt.Sprintf("%s#internal=%s", r.ia, r.kind))
		case r.ifid != 0:
			s = append(s, fmt.Sprintf("%s#%d=%s", r.ia, r.ifid, r.kind))
		default:
			s = append(s, fmt.Sprintf("%s=%s", r.ia, r.kind))
		}
	}
	return strings.Join(s, ",")
}

// Kinds are the device kinds the rules name, each once, in DeviceKinds'
// order (veth included only where a rule says it).
func (d Devices) Kinds() []DeviceKind {
	var out []DeviceKind
	for _, k := range DeviceKinds {
		if slices.ContainsFunc(d.rules, func(r deviceRule) bool { return r.kind == k }) {
			out = append(out, k)
		}
	}
	return out
}

// kindOf is the kind of an AS's end of a link (ifid) or, with internal,
// of its internal network, and whether a rule naming the AS decided it.
func (d Devices) kindOf(ia addr.IA, ifid uint16, internal bool) (DeviceKind, bool) {
	kind, named := Veth, false
	for _, r := range d.rules {
		if r.matches(ia, ifid, internal) {
			kind, named = r.kind, r.ia != 0
		}
	}
	return kind, named
}

func (r deviceRule) matches(ia addr.IA, ifid uint16, internal bool) bool {
	switch {
	case r.ia == 0:
		return true
	case r.ia != ia:
		return false
	case r.internal:
		return internal
	case r.ifid != 0:
		return !internal && r.ifid == ifid
	}
	return true
}

// Apply lays the devices out on a plan: each link end's and internal
// network's kind, the veths under them, and the VXLAN underlays and
// VNIs. It refuses rules that name an AS or interface the plan lacks, and
// a link that would be VXLAN at one end only.
func (d Devices) Apply(as []AS, links []Link) error {
	for _, r := range d.rules {
		if r.ia == 0 {
			continue
		}
		i := slices.IndexFunc(as, func(a AS) bool { return a.IA == r.ia })
		if i < 0 {
			return fmt.Errorf("--devices %s: the network has no AS %s (it has %s to %s)", d, r.ia, as[0].IA, as[len(as)-1].IA)
		}
		if r.ifid != 0 {
			if _, _, err := interfaceDev(as[i], links, r.ifid); err != nil {
				return fmt.Errorf("--devices %s: %w", d, err)
			}
		}
	}
	for i := range as {
		a := &as[i]
		a.InternalKind, _ = d.kindOf(a.IA, 0, true)
		a.VNI, a.HostUnderlay = 0, netip.Prefix{}
		for k := range a.Routers {
			a.Routers[k].Underlay = netip.Prefix{}
		}
		if a.InternalKind == VXLAN {
			a.VNI = vniInternal + uint32(a.Index)
			a.HostUnderlay = vxlanInternalUnderlay(a.Index, a.Host)
			for k := range a.Routers {
				a.Routers[k].Underlay = vxlanInternalUnderlay(a.Index, a.Routers[k].Internal)
			}
		}
	}
	for j := range links {
		l := &links[j]
		p, c := as[l.Parent], as[l.Child]
		pk, pNamed := d.kindOf(p.IA, l.ParentIf, false)
		ck, cNamed := d.kindOf(c.IA, l.ChildIf, false)
		if (pk == VXLAN) != (ck == VXLAN) {
			if (pk == VXLAN && cNamed) || (ck == VXLAN && pNamed) {
				return fmt.Errorf("--devices %s: the link %s#%d–%s#%d would be %s at one end and %s at the other: a VXLAN tunnel ends at both, so make both ends vxlan or neither", d, p.IA, l.ParentIf, c.IA, l.ChildIf, pk, ck)
			}
			pk, ck = VXLAN, VXLAN
		}
		l.ParentKind, l.ChildKind = pk, ck
		l.ParentVeth, l.ChildVeth = vethName(l.ParentDev, pk), vethName(l.ChildDev, ck)
		l.VNI, l.ParentUnderlay, l.ChildUnderlay = 0, netip.Prefix{}, netip.Prefix{}
		if pk == VXLAN {
			l.VNI = vniLinks + uint32(j)
			l.ParentUnderlay, l.ChildUnderlay = vxlanLinkUnderlay(j, 1), vxlanLinkUnderlay(j, 2)
		}
	}
	return nil
}

// HostKind is the kind of the end host's device on the AS's internal
// network: a VXLAN device where the AS's is (the tunnel ends there too),
// else the veth, as in the default network.
func (a AS) HostKind() DeviceKind {
	if a.InternalKind == VXLAN {
		return VXLAN
	}
	return Veth
}
