package tra

import (
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// Each path's first hop is reached by the host's routes: on the device's
// link, or through a gateway. The daemon looks the route up once a second
// per first hop and writes the neighbour into the path, so that tra_out
// redirects to it without a route lookup a packet; a path without one (not
// known yet, or a route by another device) is routed by the kernel each
// packet.

// gatewayTTL is how long a looked-up route is taken as it is.
const gatewayTTL = time.Second

type gatewayEntry struct {
	gw netip.Addr
	at time.Time
}

// gateways are the routes to the first hops, as the host's FIB gives them.
type gateways struct {
	device string
	cache  map[netip.Addr]gatewayEntry
}

func newGateways(device string) *gateways {
	return &gateways{device: device, cache: map[netip.Addr]gatewayEntry{}}
}

// of is the neighbour that takes what goes to nh: nh itself on the
// device's link, its route's gateway otherwise; invalid if the route does
// not leave by the device, or there is none. Called in the host's
// namespace.
func (g *gateways) of(nh netip.Addr, now time.Time) netip.Addr {
	if e, ok := g.cache[nh]; ok && now.Sub(e.at) < gatewayTTL {
		return e.gw
	}
	var gw netip.Addr
	dev, err := net.InterfaceByName(g.device)
	routes, rerr := netlink.RouteGet(nh.AsSlice())
	if err == nil && rerr == nil && len(routes) > 0 && routes[0].LinkIndex == dev.Index {
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
