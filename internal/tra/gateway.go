package tra

import (
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// Each path's first hop is reached by the host's routes: on the device's
// link, or through a gateway. The daemon looks the route up per first hop
// when a path is installed and writes the neighbour into the path, so that
// tra_out redirects to it without a route lookup a packet; a path without
// one (not known yet, or a route by another device) is routed by the
// kernel each packet. A looked-up route is kept until an IPv4 route or the
// device changes (netlink says so: health.gatewaysChanged), and at most
// fullCheckEvery.

type gatewayEntry struct {
	gw netip.Addr
	at time.Time
}

// gateways are the routes to the first hops, as the host's FIB gives them.
type gateways struct {
	device string
	// watch gives the device's index and the netlink handle (nil: looked
	// up by name each time).
	watch *hostWatch
	cache map[netip.Addr]gatewayEntry
}

func newGateways(device string, w *hostWatch) *gateways {
	return &gateways{device: device, watch: w, cache: map[netip.Addr]gatewayEntry{}}
}

// invalidate forgets every route: a route or the device changed.
func (g *gateways) invalidate() { clear(g.cache) }

// of is the neighbour that takes what goes to nh: nh itself on the
// device's link, its route's gateway otherwise; invalid if the route does
// not leave by the device, or there is none. Called in the host's
// namespace.
func (g *gateways) of(nh netip.Addr, now time.Time) netip.Addr {
	if e, ok := g.cache[nh]; ok && now.Sub(e.at) < fullCheckEvery {
		return e.gw
	}
	var gw netip.Addr
	var index int
	var routes []netlink.Route
	var err error
	if g.watch != nil {
		index = g.watch.index(g.device)
		routes, err = g.watch.h.RouteGet(nh.AsSlice())
	} else if l, lerr := netlink.LinkByName(g.device); lerr == nil {
		index = l.Attrs().Index
		routes, err = netlink.RouteGet(nh.AsSlice())
	}
	if index > 0 && err == nil && len(routes) > 0 && routes[0].LinkIndex == index {
		gw = nh
		if a, ok := netip.AddrFromSlice(routes[0].Gw); ok && routes[0].Gw != nil {
			gw = a.Unmap()
		}
	}
	if len(g.cache) >= 256 {
		clear(g.cache)
	}
	g.cache[nh] = gatewayEntry{gw: gw, at: now}
	return gw
}
