package tralab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
)

// The ip rows: plain IPv6 routing between the same two end hosts, through
// the same three AS namespaces (client's leaf, core, server's leaf) — as
// many kernel forwarding hops as the SCION path has routers — but on veth
// pairs of their own, parallel to the SCION network's. Not on the SCION
// network's own veths: in hybrid mode fastpath's XDP program runs on them,
// and a veth whose peer runs an XDP program without multi-buffer support
// loses TSO and GSO ("tx-tcp-segmentation: off [fixed]" on the host's
// eth0), so "TSO on" could not be had there, and the row would measure
// XDP_PASS rather than plain IPv6.

// Device names of the parallel path, in each namespace.
const (
	ipHostDev = "ip6h" // the end host's side of its link to its AS
	ipASDev   = "ip6a" // the AS's side of it
	ipUpDev   = "ip6u" // a leaf AS's side of its link to the core
	// ipDownDev, with the leaf's AS index, is the core's side of it.
	ipDownDev = "ip6d"
	// NotsoMTU is ip-notso's host MTU, seed 001's.
	NotsoMTU = 1396
)

// ipNet is the address plan of a row of plain IPv6 between the end hosts,
// a /32 of its own: for AS index i, the host is PREFIX:i::2 and its AS
// PREFIX:i::1; the link of leaf i to the core is PREFIX:ff<i>::/64 (core
// ::1, leaf ::2).
type ipNet string

const (
	ipRouted ipNet = "fd00:fa" // the ip rows, on parallel veths
	ipXDP    ipNet = "fd00:fb" // the ip-xdp row, on the SCION network's own
)

func (n ipNet) addr(index, host int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("%s:%x::%x", n, index, host))
}

func (n ipNet) link(index, host int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("%s:ff%02x::%x", n, index, host))
}

// all covers every address of the plan.
func (n ipNet) all() netip.Prefix { return netip.MustParsePrefix(string(n) + "::/32") }

// routeLeaf routes leaf AS index's part of the plan: its host and the
// leaf reach every address of it by the leaf's AS and the core, and the
// core reaches the leaf's /64 by the leaf.
func (n ipNet) routeLeaf(index int, host, as, up, down ipEnd) error {
	for _, r := range []struct {
		end ipEnd
		dst netip.Prefix
		via netip.Addr
	}{
		{host, n.all(), as.addr},
		{up, n.all(), down.addr},
		{down, netip.PrefixFrom(n.addr(index, 0), 64), up.addr},
	} {
		if err := ipRoute(r.end, r.dst, r.via); err != nil {
			return err
		}
	}
	return nil
}

// IPAddr is an AS's end host's address on the ip rows' parallel path.
func IPAddr(a scionlab.AS) netip.Addr { return ipRouted.addr(a.Index, 2) }

func init() {
	Register(Row{Name: "ip", Description: "plain IPv6 routing through the three AS namespaces, TSO on, MTU 1500", Setup: setupIP(false)})
	Register(Row{Name: "ip-notso", Description: fmt.Sprintf("the same with TSO off and host MTU %d (seed 001's IP row)", NotsoMTU), Setup: setupIP(true)})
}

func setupIP(notso bool) func(context.Context, Env) (Path, error) {
	return func(ctx context.Context, env Env) (p Path, err error) {
		core := env.ASes[0]
		var made []func() error
		teardown := func() error {
			var errs []error
			for i := len(made) - 1; i >= 0; i-- {
				errs = append(errs, made[i]())
			}
			return errors.Join(errs...)
		}
		defer func() {
			if err != nil {
				err = errors.Join(err, teardown())
			}
		}()
		undo, err := forwardIPv6(core.Netns)
		if err != nil {
			return p, err
		}
		made = append(made, undo)
		for _, leaf := range []scionlab.AS{env.Client, env.Server} {
			undo, err := forwardIPv6(leaf.Netns)
			if err != nil {
				return p, err
			}
			made = append(made, undo)
			// host ↔ leaf AS
			hostEnd := ipEnd{leaf.HostNetns, ipHostDev, ipRouted.addr(leaf.Index, 2)}
			asEnd := ipEnd{leaf.Netns, ipASDev, ipRouted.addr(leaf.Index, 1)}
			if err := ipVeth(hostEnd, asEnd); err != nil {
				return p, err
			}
			made = append(made, func() error { return deleteLink(leaf.Netns, ipASDev) })
			// leaf AS ↔ core
			up := ipEnd{leaf.Netns, ipUpDev, ipRouted.link(leaf.Index, 2)}
			down := ipEnd{core.Netns, fmt.Sprintf("%s%d", ipDownDev, leaf.Index), ipRouted.link(leaf.Index, 1)}
			if err := ipVeth(up, down); err != nil {
				return p, err
			}
			made = append(made, func() error { return deleteLink(leaf.Netns, ipUpDev) })
			if err := ipRouted.routeLeaf(leaf.Index, hostEnd, asEnd, up, down); err != nil {
				return p, err
			}
			if notso {
				if err := hostNoTSO(hostEnd); err != nil {
					return p, err
				}
			}
		}
		note := "TSO on, MTU 1500"
		if notso {
			note = fmt.Sprintf("TSO off, host MTU %d", NotsoMTU)
		}
		return Path{ClientNetns: env.Client.HostNetns, ServerNetns: env.Server.HostNetns, Addr: IPAddr(env.Server), Teardown: teardown, Note: note}, nil
	}
}

// ipEnd is one end of a veth pair of the parallel path.
type ipEnd struct {
	ns, dev string
	addr    netip.Addr
}

// ipVeth makes a veth pair between two namespaces with IPv6 on (the
// network's namespaces are made with it off), no duplicate address
// detection to wait for, and an address on each end. Offloads stay as a
// new veth has them (TSO on, GRO off).
func ipVeth(a, b ipEnd) error {
	if err := netns.Veth(a.ns, a.dev, b.ns, b.dev); err != nil {
		return err
	}
	for _, e := range []ipEnd{a, b} {
		if err := netns.Run(e.ns, func() error {
			for _, k := range []string{"accept_dad=0", "accept_ra=0", "disable_ipv6=0"} {
				key, val, _ := strings.Cut(k, "=")
				if err := netns.Sysctl(fmt.Sprintf("net/ipv6/conf/%s/%s", e.dev, key), val); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		eh, err := netns.Handle(e.ns)
		if err != nil {
			return err
		}
		l, err := eh.LinkByName(e.dev)
		if err == nil {
			err = eh.AddrReplace(l, &netlink.Addr{IPNet: &net.IPNet{IP: e.addr.AsSlice(), Mask: net.CIDRMask(64, 128)}, Flags: syscall.IFA_F_NODAD})
		}
		if err == nil {
			err = eh.LinkSetUp(l)
		}
		eh.Close()
		if err != nil {
			return fmt.Errorf("%s/%s: %w", e.ns, e.dev, err)
		}
	}
	return nil
}

func ipRoute(e ipEnd, dst netip.Prefix, via netip.Addr) error {
	h, err := netns.Handle(e.ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(e.dev)
	if err != nil {
		return err
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 128)}, Gw: via.AsSlice()}
	if err := h.RouteReplace(r); err != nil {
		return fmt.Errorf("route %s via %s in %s: %w", dst, via, e.ns, err)
	}
	return nil
}

// hostNoTSO turns TSO off on the host's device and sets seed 001's MTU.
func hostNoTSO(e ipEnd) error {
	if err := netns.Run(e.ns, func() error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer et.Close()
		return et.Change(e.dev, map[string]bool{"tx-tcp-segmentation": false, "tx-tcp6-segmentation": false})
	}); err != nil {
		return fmt.Errorf("TSO off on %s/%s: %w", e.ns, e.dev, err)
	}
	h, err := netns.Handle(e.ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(e.dev)
	if err == nil {
		err = h.LinkSetMTU(l, NotsoMTU)
	}
	if err != nil {
		return fmt.Errorf("MTU %d on %s/%s: %w", NotsoMTU, e.ns, e.dev, err)
	}
	return nil
}

// forwardIPv6 turns IPv6 forwarding on in an AS's namespace and returns
// how to turn it back off.
func forwardIPv6(ns string) (func() error, error) {
	set := func(v string) func() error {
		return func() error {
			return netns.Run(ns, func() error { return netns.Sysctl("net/ipv6/conf/all/forwarding", v) })
		}
	}
	if err := set("1")(); err != nil {
		return nil, err
	}
	return set("0"), nil
}

// deleteLink removes a veth (and so its peer) if it is there.
func deleteLink(ns, dev string) error {
	h, err := netns.Handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return nil
	}
	return h.LinkDel(l)
}
