package scionlab

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// devEnd is one end of a veth of the network and the device of its kind
// that holds the end's address: the veth itself, or a bridge, macvlan or
// VXLAN device over it.
type devEnd struct {
	ns, dev string
	kind    DeviceKind
	addr    netip.Prefix
	// With VXLAN: the veth's underlay address, the other ends' (one on a
	// link, every other end on an internal network of several routers)
	// and the VNI.
	underlay netip.Prefix
	remotes  []netip.Addr
	vni      uint32
}

func (e devEnd) veth() string { return vethName(e.dev, e.kind) }

// vethMTU is the MTU of the end's veth when its device has MTU mtu:
// VXLAN's is larger by what the encapsulation adds, so that the VXLAN
// device carries the MTU the plan gives it.
func (e devEnd) vethMTU(mtu int) int {
	if e.kind == VXLAN {
		return mtu + VXLANOverhead
	}
	return mtu
}

// joinEnds makes a veth pair between two ends and each end's device, of
// MTU mtu.
func joinEnds(a, b devEnd, mtu int) error {
	if err := netns.Veth(a.ns, a.veth(), b.ns, b.veth()); err != nil {
		return err
	}
	for _, e := range []devEnd{a, b} {
		if err := e.make(mtu); err != nil {
			return err
		}
	}
	return nil
}

// make sets the end's veth up and makes the device over it, with its
// address, up. The veth keeps GRO on whatever its kind (a frame XDP
// redirects into a veth is taken only if its peer runs XDP or GRO, and the
// peer's end may be a plain veth with fastpath on it); where it holds no
// address it has IPv6 off, and under a macvlan it answers no ARP for the
// macvlan's address (arp_ignore=1: else the veth, seeing the same
// broadcast, answers with its own MAC too, and the peer's traffic would
// reach the address past the macvlan).
func (e devEnd) make(mtu int) error {
	if e.kind == Veth {
		return configure(e.ns, e.dev, e.addr, mtu)
	}
	if e.kind == VXLAN {
		if err := configure(e.ns, e.veth(), e.underlay, e.vethMTU(mtu)); err != nil {
			return err
		}
	} else if err := bareVeth(e.ns, e.veth(), mtu, e.kind == Macvlan); err != nil {
		return err
	}
	h, err := netns.Handle(e.ns)
	if err != nil {
		return err
	}
	defer h.Close()
	veth, err := h.LinkByName(e.veth())
	if err != nil {
		return fmt.Errorf("%s in %s: %w", e.veth(), e.ns, err)
	}
	attrs := netlink.LinkAttrs{Name: e.dev, MTU: mtu}
	var dev netlink.Link
	switch e.kind {
	case Bridge:
		dev = &netlink.Bridge{LinkAttrs: attrs}
	case Macvlan:
		attrs.ParentIndex = veth.Attrs().Index
		dev = &netlink.Macvlan{LinkAttrs: attrs, Mode: netlink.MACVLAN_MODE_BRIDGE}
	case VXLAN:
		// Point to point: the one remote is the default destination, and
		// there is nothing to learn. Several ends: every frame the FDB
		// does not place goes to each (head-end replication), and the
		// device learns where each MAC is from what it receives.
		vx := &netlink.Vxlan{LinkAttrs: attrs, VxlanId: int(e.vni), VtepDevIndex: veth.Attrs().Index,
			SrcAddr: e.underlay.Addr().AsSlice(), Port: VXLANPort, Learning: len(e.remotes) > 1}
		if len(e.remotes) == 1 {
			vx.Group = e.remotes[0].AsSlice()
		}
		dev = vx
	default:
		return fmt.Errorf("%s in %s: no device kind %q (%s)", e.dev, e.ns, e.kind, kindNames())
	}
	if err := h.LinkAdd(dev); err != nil {
		return fmt.Errorf("%s %s over %s in %s: %w", e.kind, e.dev, e.veth(), e.ns, err)
	}
	if e.kind == Bridge {
		if err := h.LinkSetMaster(veth, dev); err != nil {
			return fmt.Errorf("%s/%s a port of bridge %s: %w", e.ns, e.veth(), e.dev, err)
		}
	}
	if e.kind == VXLAN && len(e.remotes) > 1 {
		for _, r := range e.remotes {
			if err := h.NeighAppend(&netlink.Neigh{LinkIndex: dev.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
				State: netlink.NUD_PERMANENT, IP: r.AsSlice(), HardwareAddr: make(net.HardwareAddr, 6)}); err != nil {
				return fmt.Errorf("%s/%s: flood entry to %s: %w", e.ns, e.dev, r, err)
			}
		}
	}
	return addrUp(h, e.ns, dev, e.addr)
}

// bareVeth sets a veth that holds no address up, with the MTU and GRO on
// and IPv6 off; with noARP it answers no ARP for addresses of other
// devices.
func bareVeth(ns, dev string, mtu int, noARP bool) error {
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
	if err := netns.Run(ns, func() error {
		if err := netns.Sysctl("net/ipv6/conf/"+dev+"/disable_ipv6", "1"); err != nil {
			return err
		}
		if noARP {
			return netns.Sysctl("net/ipv4/conf/"+dev+"/arp_ignore", "1")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%s: %w", ns, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("%s/%s up: %w", ns, dev, err)
	}
	return setGRO(ns, dev, true)
}

// addrUp gives a device its address and sets it up.
func addrUp(h *netlink.Handle, ns string, l netlink.Link, a netip.Prefix) error {
	dev := l.Attrs().Name
	na := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
	if a.Addr().Is6() {
		na.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrReplace(l, na); err != nil {
		return fmt.Errorf("address %s on %s/%s: %w", a, ns, dev, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("%s/%s up: %w", ns, dev, err)
	}
	return nil
}
