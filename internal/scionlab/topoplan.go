package scionlab

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"

	"github.com/scionproto/scion/pkg/addr"
)

// TopoDefaultMTU is the SCION MTU scionproto's generator gives an AS or an
// interface whose .topo entry names none (DEFAULT_MTU in its
// tools/topology/defines.py: Ethernet's 1500 less an IPv4/UDP underlay).
const TopoDefaultMTU = 1500 - UnderlayOverhead

// UnderlayOverhead6 is what an IPv6/UDP underlay takes of a link's MTU.
const UnderlayOverhead6 = 40 + 8

// devMTU is the MTU a device needs to carry SCION packets of scionMTU over
// an underlay of the family of an address.
func devMTU(scionMTU int, ipv6 bool) int {
	if ipv6 {
		return scionMTU + UnderlayOverhead6
	}
	return scionMTU + UnderlayOverhead
}

// The addresses of a .topo network. AS i's internal network is
// 10.(100+i).0.0/24 or fd00:5c10:0:i::/64 (its underlay's family): the
// first router at .1 (::1), the others at .11, .12, … and the end host at
// .2. Link j (the file's order) is 10.(240+j/256).(j%256).0/30 or
// fd00:5c10:1:j::/64, its first end (a) at .1, its second (b) at .2.
func topoInternal(i, k int, ipv6 bool) netip.Addr {
	host := byte(1)
	if k > 0 {
		host = byte(10 + k)
	}
	if ipv6 {
		return netip.AddrFrom16([16]byte{0xfd, 0, 0x5c, 0x10, 0, 0, byte(i >> 8), byte(i), 15: host})
	}
	return netip.AddrFrom4([4]byte{10, byte(100 + i), 0, host})
}

func topoHost(i int, ipv6 bool) netip.Addr {
	if ipv6 {
		return netip.AddrFrom16([16]byte{0xfd, 0, 0x5c, 0x10, 0, 0, byte(i >> 8), byte(i), 15: 2})
	}
	return netip.AddrFrom4([4]byte{10, byte(100 + i), 0, 2})
}

func topoLinkAddr(j, end int, ipv6 bool) netip.Addr {
	if ipv6 {
		return netip.AddrFrom16([16]byte{0xfd, 0, 0x5c, 0x10, 0, 1, byte(j >> 8), byte(j), 15: byte(end)})
	}
	return netip.AddrFrom4([4]byte{10, byte(240 + j/256), byte(j % 256), byte(end)})
}

// MaxTopoLinks keeps link addresses in 10.240.0.0/12.
const MaxTopoLinks = 16 * 256

// MaxTopoInterfaces is the most interfaces an AS may have: fastpath's
// router keeps a counter slot for each interface of its AS (BR_MAX_IFACES
// less the internal and unmatched slots), which also bounds its routers'
// addresses (.1, .11, …).
const MaxTopoInterfaces = 62

// PlanTopo lays a .topo network out as scionproto's generator would (its
// routers, interface IDs, MTUs and underlays) on the lab's namespaces: one
// per router, the first holding the AS's control service and daemon too,
// one for the end host, and a switch where an AS has several routers.
func (n Network) PlanTopo(t *Topo) ([]AS, []Link, error) {
	if len(t.ASes) > MaxASes {
		return nil, nil, fmt.Errorf("%s: %d ASes; the lab runs at most %d", t.Path, len(t.ASes), MaxASes)
	}
	if len(t.Links) > MaxTopoLinks {
		return nil, nil, fmt.Errorf("%s: %d links; the lab runs at most %d", t.Path, len(t.Links), MaxTopoLinks)
	}
	routers, laid := t.layout()
	index := map[addr.IA]int{}
	var as []AS
	for i, ta := range t.ASes {
		if len(routers[ta.IA]) == 0 {
			return nil, nil, fmt.Errorf("%s:%d: AS %s has no link: it would have no border router and no path; link it or leave it out", t.Path, ta.Line, ta.IA)
		}
		index[ta.IA] = i
		file := addr.FormatIA(ta.IA, addr.WithFileSeparator())
		v6 := ta.Underlay == UnderlayIPv6
		mtu := ta.MTU
		if mtu == 0 {
			mtu = TopoDefaultMTU
		}
		a := AS{
			Index: i, IA: ta.IA, Core: ta.Core,
			Netns:        n.Prefix + "as" + file,
			HostNetns:    n.Prefix + "h" + file,
			Internal:     topoInternal(i, 0, v6),
			Host:         topoHost(i, v6),
			Dir:          filepath.Join(n.Dir, "gen", "AS"+addr.FormatAS(ta.IA.AS(), addr.WithFileSeparator())),
			Tag:          file,
			MTU:          mtu,
			DevMTU:       devMTU(mtu, v6),
			InternalKind: Veth,
		}
		a.Subnet = netip.PrefixFrom(a.Internal, 24).Masked()
		if v6 {
			a.Subnet = netip.PrefixFrom(a.Internal, 64).Masked()
		}
		ifs := 0
		for _, r := range routers[ta.IA] {
			ifs += len(r.Interfaces)
		}
		if ifs > MaxTopoInterfaces {
			return nil, nil, fmt.Errorf("%s:%d: AS %s has %d interfaces; fastpath's router counts at most %d per AS (its own and its siblings'): split it or leave links out", t.Path, ta.Line, ta.IA, ifs, MaxTopoInterfaces)
		}
		for k, r := range routers[ta.IA] {
			ns := a.Netns
			if k > 0 {
				ns = fmt.Sprintf("%s-%d", a.Netns, k+1)
			}
			a.Routers = append(a.Routers, Router{ID: r.Name, Netns: ns, Internal: topoInternal(i, k, v6)})
		}
		if len(a.Routers) > 1 {
			a.Switch = n.Prefix + "sw" + file
		}
		as = append(as, a)
	}
	var links []Link
	for j, l := range laid {
		v6 := l.Underlay == UnderlayIPv6
		mtu := l.MTU
		if mtu == 0 {
			mtu = TopoDefaultMTU
		}
		links = append(links, Link{
			Parent: index[l.A.IA], Child: index[l.B.IA],
			ParentIf: l.A.IfID, ChildIf: l.B.IfID,
			ParentDev: fmt.Sprintf("if%d", l.A.IfID), ChildDev: fmt.Sprintf("if%d", l.B.IfID),
			ParentKind: Veth, ChildKind: Veth,
			ParentVeth: fmt.Sprintf("if%d", l.A.IfID), ChildVeth: fmt.Sprintf("if%d", l.B.IfID),
			ParentAddr:   netip.AddrPortFrom(topoLinkAddr(j, 1, v6), LinkPort),
			ChildAddr:    netip.AddrPortFrom(topoLinkAddr(j, 2, v6), LinkPort),
			Type:         l.Type,
			ParentRouter: l.RouterA, ChildRouter: l.RouterB,
			SCIONMTU: mtu, DevMTU: devMTU(mtu, v6),
		})
	}
	return as, links, nil
}

// topoNetns matches the namespaces of a .topo network after the prefix:
// as<ISD-AS>[-<router>], h<ISD-AS> and sw<ISD-AS>, the ISD-AS in file form.
var topoNetns = regexp.MustCompile(`^(as|h|sw)([0-9]+-[0-9a-f_]+)(-[0-9]+)?$`)

// isTopoNetns says whether a name (without the prefix) is one a .topo
// network makes.
func isTopoNetns(rest string) bool {
	m := topoNetns.FindStringSubmatch(rest)
	if m == nil || (m[1] != "as" && m[3] != "") {
		return false
	}
	_, err := addr.ParseFormattedIA(m[2], addr.WithFileSeparator())
	return err == nil
}
