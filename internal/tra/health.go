package tra

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// What attach set up can change under a running translator: an operator or
// a network manager turns the pair's offloads back on (GSO packets and
// pending checksums reach tra_out; without GRO the pair drops what tra_in
// hands it), the underlay device is removed and made again (its XDP link is
// left defunct), the pair is deleted, topology.json gets another router,
// the underlay device's checksum offload is turned on or off. The daemon
// puts things right, counting what it did.
//
// It learns of the host's changes from netlink, not by asking each second:
// on a host of thousands of devices a link dump a second, a route lookup
// per first hop and two ethtool sessions cost a core's tenth (2,000
// devices: TestIdleDaemonCostWithManyDevices). Link updates of the pair's
// ends and the underlay device (a feature change is one: ethtool -K) have
// their offloads, XDP link and MTUs looked at again; IPv4 route updates
// have the first hops' gateways looked up again (an address added or gone
// comes with its prefix route). A subscription that fails (ENOBUFS: events
// were lost) is made again and everything is looked at; without one the
// daemon looks each second, as it did; and everything is looked at every
// fullCheckEvery in any case. Neighbours need no watch: the gateway is an
// address, and tra_out takes its MAC from the neighbour table per packet.

// fullCheckEvery is how often everything is looked at whatever netlink
// said: a safety net under the subscriptions.
var fullCheckEvery = 30 * time.Second

// watchRcvbuf is the subscriptions' socket buffer: room for a burst
// (thousands of devices made at once; the kernel caps it at rmem_max);
// past it the kernel says ENOBUFS, and the loop looks at everything.
var watchRcvbuf = 1 << 20

type health struct {
	cfg  *Config
	name string
	p    *Pinned
	inj  *injector
	log  *slog.Logger
	// res resolves the routers given by name, aside; failing are those
	// whose last resolution failed (logged once until they resolve).
	res     *routerResolver
	failing map[string]bool
	// watch says what changed on the host; gw are the first hops'
	// gateways, looked up again when a route or the device changes.
	watch *hostWatch
	gw    *gateways

	topoMod  time.Time
	lastFull time.Time
	// linksChanged says netlink told of a change of the pair or the device
	// since they were last looked at.
	linksChanged bool
	// gone says the translator was detached under the daemon.
	gone bool
}

func newHealth(cfg *Config, name string, p *Pinned, inj *injector, log *slog.Logger, res *routerResolver, watch *hostWatch, gw *gateways) *health {
	h := &health{cfg: cfg, name: name, p: p, inj: inj, log: log, res: res, failing: map[string]bool{}, watch: watch, gw: gw}
	if st, err := os.Stat(cfg.Topology); err == nil {
		h.topoMod = st.ModTime()
	}
	for name := range cfg.Unresolved {
		h.failing[name] = true // said at start (RouterWarnings)
	}
	return h
}

// check runs each second: whether the translator is still attached, and
// topology.json; the links when netlink said they changed (at this tick,
// not at once: a tra detach or a device made anew is a burst of updates,
// done when the tick comes), when they were not looked at for
// fullCheckEvery, and each time while netlink says nothing (no
// subscription).
func (h *health) check(d *pathDaemon) {
	if h.detached() {
		return
	}
	now := d.now()
	switch {
	case h.watch == nil || !h.watch.subscribed() || now.Sub(h.lastFull) >= fullCheckEvery:
		h.full(d)
	case h.linksChanged:
		h.checkLinks(d)
	}
	h.checkTopology(d)
}

// full looks at everything: the links, their offloads and MTUs, the
// gateways, and subscribes again if a subscription was lost.
func (h *health) full(d *pathDaemon) {
	h.lastFull = d.now()
	if h.watch != nil && !h.watch.subscribed() {
		if err := h.watch.subscribe(); err != nil {
			d.log.Warn("no netlink updates: the host is looked at each second", "error", err)
		}
	}
	h.checkLinks(d)
	h.gatewaysChanged(d)
}

// onHost takes what netlink said changed: routes have the gateways looked
// up again at once, links are looked at at the next tick, and lost
// updates have everything looked at then.
func (h *health) onHost(d *pathDaemon) {
	ch := h.watch.take()
	if ch.resync {
		d.log.Warn("netlink updates lost: the host is looked at again", "error", ch.err)
		h.lastFull = time.Time{}
	}
	h.linksChanged = h.linksChanged || ch.links
	if ch.routes {
		h.gatewaysChanged(d)
	}
}

// gatewaysChanged has the installed paths' gateways looked up again.
func (h *health) gatewaysChanged(d *pathDaemon) {
	if h.gw == nil {
		return
	}
	h.gw.invalidate()
	d.refreshGateways(d.now())
}

// detached says whether the translator was detached under the daemon (tra
// detach: the pins went, and the pair), which then ends; nothing is put
// back.
func (h *health) detached() bool {
	if _, err := os.Stat(PinDir(h.name)); err != nil {
		h.gone = true
	}
	return h.gone
}

// checkLinks looks at the pair and the underlay device: attached, the
// pair's offloads, the device's checksum offload, the pair's MTU.
func (h *health) checkLinks(d *pathDaemon) {
	if h.detached() {
		return
	}
	h.linksChanged = false
	device := 0
	if h.watch != nil {
		device = h.watch.index(h.cfg.Device)
		h.watch.lookup()
	}
	if h.needsAttach() {
		if _, err := Attach(h.cfg, AttachOptions{Warn: obs.Writer(h.log, slog.LevelWarn)}); err != nil {
			d.log.Error("cannot attach the translator again", "error", err)
			return
		}
		d.stats.add(statReattached, 1)
		d.log.Warn("translator attached again: its device or pair had been made anew")
		if err := h.inj.lookup(); err != nil {
			d.log.Error("cannot find the pair to send packets into", "error", err)
		}
		if h.watch != nil {
			h.watch.lookup()
		}
	}
	changed, err := setPairOffloads(h.cfg.Pair + "0")
	if err != nil {
		d.log.Error("cannot set the pair's offloads", "device", h.cfg.Pair+"0", "error", err)
	} else if changed {
		d.stats.add(statOffloadFixed, 1)
		d.log.Warn("the pair's offloads had changed: segmentation and checksum offload off, GRO on again", "device", h.cfg.Pair+"0")
	}
	if sw, err := underlaySWCsum(h.cfg.Device); err == nil {
		if changed, err := h.p.SetUnderlaySWCsum(sw); err != nil {
			d.log.Error("cannot tell the programs the device's checksum offload", "device", h.cfg.Device, "error", err)
		} else if changed {
			how := "TCP segments are translated at the pair's far end, after the kernel completes their checksums there"
			if sw {
				how = "TCP segments are translated as the host sends them, the kernel completing their checksums on the way out of it"
			}
			d.log.Info("the device's checksum offload changed", "device", h.cfg.Device, "so", how)
		}
	}
	d.fitPair()
	if h.watch != nil && h.watch.index(h.cfg.Device) != device {
		h.gatewaysChanged(d) // the device is another (or gone): its routes with it
	}
}

// needsAttach says whether the pair or the underlay device's link is gone.
func (h *health) needsAttach() bool {
	exists := func(name string) bool {
		if h.watch != nil {
			return h.watch.index(name) > 0 // looked up just before
		}
		_, err := netlink.LinkByName(name)
		return err == nil
	}
	if !exists(h.cfg.Pair + "0") {
		return true
	}
	if !exists(h.cfg.Device) {
		return false // nothing to attach to until it is back
	}
	under := xdp.Iface{Netns: netns.Current(), Name: h.cfg.Device}
	err := xdp.PinnedLinkState(filepath.Join(PinDir(h.name), xdp.LinkPinName(under)))
	return errors.Is(err, xdp.ErrLinkGone) || errors.Is(err, os.ErrNotExist)
}

// hostWatch follows, by netlink, the links the translator needs (the
// pair's ends, the underlay device) and the host's IPv4 routes. Its
// readers note what changed and wake the daemon's loop, which takes it
// (take) and alone asks the kernel anything (by its handle: lookups by
// index, not dumps).
type hostWatch struct {
	names [3]string // PAIR0, PAIR1, the underlay device
	h     *netlink.Handle
	// The loop's: each link's index and MTU (0: not there), the
	// subscriptions' end.
	links map[string]netlink.LinkAttrs
	done  chan struct{}

	wake chan struct{}
	mu   sync.Mutex
	// What the readers noted since the loop last took it.
	ch hostChanges
	// lost says a subscription ended: the loop subscribes again.
	lost bool
	// indexes are the watched links' indexes, so that a link renamed away
	// is noticed too.
	indexes map[int]bool
}

// hostChanges is what changed since the loop last looked.
type hostChanges struct {
	links, routes, resync bool
	err                   error
}

func newHostWatch(cfg *Config) (*hostWatch, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	w := &hostWatch{names: [3]string{cfg.Pair + "0", cfg.Pair + "1", cfg.Device}, h: h, links: map[string]netlink.LinkAttrs{},
		wake: make(chan struct{}, 1), lost: true, indexes: map[int]bool{}}
	return w, nil
}

// subscribe subscribes (again) to link and IPv4 route updates, in the
// calling thread's namespace: the host's, where the loop runs.
func (w *hostWatch) subscribe() error {
	if w.done != nil {
		close(w.done)
	}
	w.done = make(chan struct{})
	onErr := func(err error) { w.note(hostChanges{resync: true, err: err}) }
	links := make(chan netlink.LinkUpdate, 64)
	routes := make(chan netlink.RouteUpdate, 64)
	rcvbuf := watchRcvbuf
	if err := netlink.LinkSubscribeWithOptions(links, w.done, netlink.LinkSubscribeOptions{ErrorCallback: onErr, ReceiveBufferSize: rcvbuf}); err != nil {
		return fmt.Errorf("subscribe to link updates: %w", err)
	}
	if err := netlink.RouteSubscribeWithOptions(routes, w.done, netlink.RouteSubscribeOptions{ErrorCallback: onErr, ReceiveBufferSize: rcvbuf}); err != nil {
		close(w.done)
		w.done = nil
		return fmt.Errorf("subscribe to route updates: %w", err)
	}
	w.mu.Lock()
	w.lost = false
	w.mu.Unlock()
	go w.readLinks(links)
	go w.readRoutes(routes)
	return nil
}

// subscribed says whether both subscriptions run.
func (w *hostWatch) subscribed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.lost
}

func (w *hostWatch) close() {
	if w.done != nil {
		close(w.done)
		w.done = nil
	}
	w.h.Close()
}

// note adds to what changed and wakes the loop.
func (w *hostWatch) note(c hostChanges) {
	w.mu.Lock()
	w.ch.links = w.ch.links || c.links
	w.ch.routes = w.ch.routes || c.routes
	if c.resync && !w.ch.resync {
		w.ch.resync, w.ch.err = true, c.err // the first error says why
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take is what changed since the loop last took it.
func (w *hostWatch) take() hostChanges {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.ch
	w.ch = hostChanges{}
	return c
}

// readLinks notes updates of the watched links, by name or by the index
// they had (one renamed away).
func (w *hostWatch) readLinks(ch <-chan netlink.LinkUpdate) {
	for u := range ch {
		a := u.Attrs()
		w.mu.Lock()
		mine := w.indexes[a.Index]
		w.mu.Unlock()
		for _, n := range w.names {
			mine = mine || a.Name == n
		}
		if mine {
			w.note(hostChanges{links: true})
		}
	}
	w.mu.Lock()
	w.lost = true
	w.mu.Unlock()
	w.note(hostChanges{resync: true, err: errors.New("link updates ended")})
}

func (w *hostWatch) readRoutes(ch <-chan netlink.RouteUpdate) {
	for u := range ch {
		if u.Family == netlink.FAMILY_V4 {
			w.note(hostChanges{routes: true})
		}
	}
	w.mu.Lock()
	w.lost = true
	w.mu.Unlock()
	w.note(hostChanges{resync: true, err: errors.New("route updates ended")})
}

// lookup looks the watched links up again (a request each: by index where
// one is known, by name otherwise; never a dump).
func (w *hostWatch) lookup() {
	for _, n := range w.names {
		w.link(n)
	}
	w.mu.Lock()
	clear(w.indexes)
	for _, a := range w.links {
		w.indexes[a.Index] = true
	}
	w.mu.Unlock()
}

// link looks a watched link up, and keeps its index and MTU.
func (w *hostWatch) link(name string) (netlink.Link, error) {
	var l netlink.Link
	var err error
	if a, ok := w.links[name]; ok && a.Index > 0 {
		if l, err = w.h.LinkByIndex(a.Index); err == nil && l.Attrs().Name != name {
			l, err = nil, errors.New("renamed")
		}
	}
	if l == nil {
		l, err = w.h.LinkByName(name)
	}
	if err != nil {
		delete(w.links, name)
		return nil, err
	}
	w.links[name] = *l.Attrs()
	return l, nil
}

// index is a watched link's index as last looked up (0: not there).
func (w *hostWatch) index(name string) int { return w.links[name].Index }

// pair is the pair as fitPair sets its MTU: from what the loop last looked
// up (on a link update, or the full check), set by index.
func (w *hostWatch) pair() pairLink { return watchedPair{w} }

type watchedPair struct{ w *hostWatch }

func (p watchedPair) MTU() (int, error) { return p.w.links[p.w.names[0]].MTU, nil }

func (p watchedPair) UnderlayMTU() (int, error) {
	if mtu := p.w.links[p.w.names[2]].MTU; mtu > 0 {
		return mtu, nil
	}
	return 0, errors.New("the underlay device is not there")
}

// SetMTU sets the translator's end first when raising (tra_in redirects
// into it, and the host's end takes what fits it), the host's first when
// lowering: neither end ever takes more than the other passes.
func (p watchedPair) SetMTU(mtu int) error {
	host, trans := p.w.links[p.w.names[0]], p.w.links[p.w.names[1]]
	if host.Index == 0 || trans.Index == 0 {
		return errors.New("the pair is not there")
	}
	order := []netlink.LinkAttrs{trans, host}
	if mtu < host.MTU {
		order = []netlink.LinkAttrs{host, trans}
	}
	for _, a := range order {
		if err := p.w.h.LinkSetMTU(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: a.Index}}, mtu); err != nil {
			return fmt.Errorf("%s: %w", a.Name, err)
		}
		a.MTU = mtu
		p.w.links[a.Name] = a
	}
	return nil
}

// checkTopology takes a changed topology.json's routers and dispatched
// ports: validated whole first, and only if it is still this AS. Nothing
// is resolved here: a router still named as before keeps its address, and
// the resolver is handed the names at once.
func (h *health) checkTopology(d *pathDaemon) {
	st, err := os.Stat(h.cfg.Topology)
	if err != nil || st.ModTime().Equal(h.topoMod) {
		return
	}
	h.topoMod = st.ModTime()
	cfg, err := loadConfig(h.cfg.Path, false)
	if err != nil {
		d.log.Error("topology.json changed but is refused: the routers stay as they were", "topology", h.cfg.Topology, "error", err)
		return
	}
	if cfg.IA != h.cfg.IA {
		d.log.Error("topology.json names another AS: restart the translator to change ASes", "topology", h.cfg.Topology, "isd_as", cfg.IA, "was", h.cfg.IA)
		return
	}
	for name, hp := range cfg.RouterNames {
		if h.cfg.RouterNames[name] != hp {
			delete(h.failing, name)
			continue
		}
		if a, ok := h.cfg.Routers[name]; ok {
			cfg.Routers[name] = a
		}
		if why, ok := h.cfg.Skipped[name]; ok {
			cfg.Skipped[name] = why
		}
	}
	if !maps.Equal(cfg.RouterNames, h.cfg.RouterNames) && h.res != nil {
		h.res.set(cfg.RouterNames)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Skipped)) {
		if _, was := h.cfg.Skipped[name]; !was {
			d.log.Warn("border router skipped: SCION from it is refused as spoofed", "topology", h.cfg.Topology, "router", name, "why", cfg.Skipped[name])
		}
	}
	if err := h.setRouters(d, cfg.Routers); err != nil {
		return
	}
	h.cfg.RouterNames, h.cfg.Skipped, h.cfg.IfOwners = cfg.RouterNames, cfg.Skipped, cfg.IfOwners
	if changed, err := h.p.SetDispatched(cfg.DispatchedPortStart, cfg.DispatchedPortEnd); err != nil {
		d.log.Error("cannot set the dispatched ports", "topology", h.cfg.Topology, "error", err)
	} else {
		h.cfg.DispatchedPortStart, h.cfg.DispatchedPortEnd = cfg.DispatchedPortStart, cfg.DispatchedPortEnd
		if changed {
			d.log.Info("topology.json changed the ports SCION is taken on", "topology", h.cfg.Topology, "taken_on", takenOn(h.cfg))
		}
	}
	pending := 0
	for name := range cfg.RouterNames {
		_, taken := cfg.Routers[name]
		_, skipped := cfg.Skipped[name]
		if !taken && !skipped {
			pending++
		}
	}
	d.log.Info("topology.json changed", "topology", h.cfg.Topology, "routers", len(cfg.Routers), "names_to_resolve", pending)
}

// setRouters puts the routers the host takes SCION from into the data
// plane, and keeps them as the configuration's (an attach again takes
// them from there).
func (h *health) setRouters(d *pathDaemon, routers map[string]netip.AddrPort) error {
	if maps.Equal(routers, h.cfg.Routers) {
		return nil
	}
	if err := h.p.SetRouters(slices.Collect(maps.Values(routers))); err != nil {
		d.log.Error("cannot set the border routers: they stay as they were", "topology", h.cfg.Topology, "error", err)
		return err
	}
	h.cfg.Routers = routers
	return nil
}

// onResolved takes what the resolver found for the routers' names: a new
// address replaces the old one, a name that does not resolve keeps its
// last address (counted, and logged once until it resolves again).
func (h *health) onResolved(d *pathDaemon, r resolvedRouters) {
	if !maps.Equal(r.names, h.cfg.RouterNames) {
		return // for names topology.json no longer gives
	}
	routers := maps.Clone(h.cfg.Routers)
	for _, name := range slices.Sorted(maps.Keys(h.cfg.RouterNames)) {
		hp := h.cfg.RouterNames[name]
		a, ok := r.addrs[name]
		if !ok {
			d.stats.add(statResolveFailed, 1)
			if h.failing[name] {
				continue
			}
			h.failing[name] = true
			if old, had := routers[name]; had {
				d.log.Warn("border router's name does not resolve: its last address stays", "router", name, "host", hp, "address", old, "error", r.errs[name])
			} else {
				h.cfg.Unresolved[name] = fmt.Sprintf("%s does not resolve: %v", hp, r.errs[name])
				d.log.Warn("border router's name does not resolve: SCION from it is refused as spoofed until it does", "router", name, "host", hp, "error", r.errs[name])
			}
			continue
		}
		delete(h.failing, name)
		delete(h.cfg.Unresolved, name)
		if !a.Addr().Is4() {
			if _, was := h.cfg.Skipped[name]; !was {
				h.cfg.Skipped[name] = fmt.Sprintf("%s resolves to IPv6 %s only, and the translator's underlay is IPv4", hp, a.Addr())
				d.log.Warn("border router skipped: SCION from it is refused as spoofed", "topology", h.cfg.Topology, "router", name, "why", h.cfg.Skipped[name])
			}
			delete(routers, name)
			continue
		}
		delete(h.cfg.Skipped, name)
		if old, had := routers[name]; !had || old != a {
			d.log.Info("border router resolved", "router", name, "host", hp, "address", a)
		}
		routers[name] = a
	}
	h.setRouters(d, routers)
}
