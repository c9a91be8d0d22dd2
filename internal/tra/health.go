package tra

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// What attach set up can change under a running translator: an operator or
// a network manager turns the pair's offloads back on (GSO packets and
// pending checksums reach tra_out; without GRO the pair drops what tra_in
// hands it), the underlay device is removed and made again (its XDP link is
// left defunct), the pair is deleted, topology.json gets another router,
// the underlay device's checksum offload is turned on or off.
// The daemon checks each second and puts things right, counting what it did.

type health struct {
	cfg  *Config
	name string
	p    *Pinned
	inj  *injector
	log  io.Writer
	// res resolves the routers given by name, aside; failing are those
	// whose last resolution failed (logged once until they resolve).
	res     *routerResolver
	failing map[string]bool

	topoMod time.Time
	// gone says the translator was detached under the daemon.
	gone bool
}

func newHealth(cfg *Config, name string, p *Pinned, inj *injector, log io.Writer, res *routerResolver) *health {
	h := &health{cfg: cfg, name: name, p: p, inj: inj, log: log, res: res, failing: map[string]bool{}}
	if st, err := os.Stat(cfg.Topology); err == nil {
		h.topoMod = st.ModTime()
	}
	for name := range cfg.Unresolved {
		h.failing[name] = true // said at start (RouterWarnings)
	}
	return h
}

// check looks at the pair, the underlay link and topology.json.
func (h *health) check(d *pathDaemon) {
	if _, err := os.Stat(PinDir(h.name)); err != nil {
		h.gone = true
		return
	}
	if h.needsAttach() {
		if _, err := Attach(h.cfg, AttachOptions{Warn: h.log}); err != nil {
			d.logf("attach %s again: %v", h.name, err)
			return
		}
		d.stats.add(statReattached, 1)
		d.logf("translator %s: attached again (its device or pair had been made anew)", h.name)
		if err := h.inj.lookup(); err != nil {
			d.logf("%v", err)
		}
	}
	changed, err := setPairOffloads(h.cfg.Pair + "0")
	if err != nil {
		d.logf("%v", err)
	} else if changed {
		d.stats.add(statOffloadFixed, 1)
		d.logf("the offloads of %s0 had changed: segmentation and checksum offload off, GRO on again", h.cfg.Pair)
	}
	if sw, err := underlaySWCsum(h.cfg.Device); err == nil {
		if changed, err := h.p.SetUnderlaySWCsum(sw); err != nil {
			d.logf("%v", err)
		} else if changed {
			how := "TCP segments are translated at the pair's far end, after the kernel completes their checksums there"
			if sw {
				how = "TCP segments are translated as the host sends them, the kernel completing their checksums on the way out of it"
			}
			d.logf("the checksum offload of %s changed: %s", h.cfg.Device, how)
		}
	}
	h.checkTopology(d)
}

// needsAttach says whether the pair or the underlay device's link is gone.
func (h *health) needsAttach() bool {
	if _, err := net.InterfaceByName(h.cfg.Pair + "0"); err != nil {
		return true
	}
	under := xdp.Iface{Netns: netns.Current(), Name: h.cfg.Device}
	if _, err := net.InterfaceByName(h.cfg.Device); err != nil {
		return false // nothing to attach to until it is back
	}
	err := xdp.PinnedLinkState(filepath.Join(PinDir(h.name), xdp.LinkPinName(under)))
	return errors.Is(err, xdp.ErrLinkGone) || errors.Is(err, os.ErrNotExist)
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
		d.logf("topology changed, but: %v; the routers stay as they were", err)
		return
	}
	if cfg.IA != h.cfg.IA {
		d.logf("%s now names AS %s, not %s: restart the translator to change ASes", h.cfg.Topology, cfg.IA, h.cfg.IA)
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
			d.logf("%s: border router %s skipped: %s (SCION from it is refused as spoofed)", h.cfg.Topology, name, cfg.Skipped[name])
		}
	}
	if err := h.setRouters(d, cfg.Routers); err != nil {
		return
	}
	h.cfg.RouterNames, h.cfg.Skipped = cfg.RouterNames, cfg.Skipped
	if changed, err := h.p.SetDispatched(cfg.DispatchedPortStart, cfg.DispatchedPortEnd); err != nil {
		d.logf("dispatched ports of %s: %v", h.cfg.Topology, err)
	} else {
		h.cfg.DispatchedPortStart, h.cfg.DispatchedPortEnd = cfg.DispatchedPortStart, cfg.DispatchedPortEnd
		if changed {
			d.logf("%s changed: SCION taken on port %d and the dispatched ports %d-%d", h.cfg.Topology, endHostPort, cfg.DispatchedPortStart, cfg.DispatchedPortEnd)
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
	d.logf("%s changed: %d border routers taken, %d names to resolve", h.cfg.Topology, len(cfg.Routers), pending)
}

// setRouters puts the routers the host takes SCION from into the data
// plane, and keeps them as the configuration's (an attach again takes
// them from there).
func (h *health) setRouters(d *pathDaemon, routers map[string]netip.AddrPort) error {
	if maps.Equal(routers, h.cfg.Routers) {
		return nil
	}
	if err := h.p.SetRouters(slices.Collect(maps.Values(routers))); err != nil {
		d.logf("routers of %s: %v; they stay as they were", h.cfg.Topology, err)
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
				d.logf("border router %s: %s does not resolve (%v); its last address %s stays", name, hp, r.errs[name], old)
			} else {
				h.cfg.Unresolved[name] = fmt.Sprintf("%s does not resolve: %v", hp, r.errs[name])
				d.logf("border router %s: %s does not resolve (%v); SCION from it is refused as spoofed until it does", name, hp, r.errs[name])
			}
			continue
		}
		delete(h.failing, name)
		delete(h.cfg.Unresolved, name)
		if !a.Addr().Is4() {
			if _, was := h.cfg.Skipped[name]; !was {
				h.cfg.Skipped[name] = fmt.Sprintf("%s resolves to IPv6 %s only, and the translator's underlay is IPv4", hp, a.Addr())
				d.logf("border router %s skipped: %s (SCION from it is refused as spoofed)", name, h.cfg.Skipped[name])
			}
			delete(routers, name)
			continue
		}
		delete(h.cfg.Skipped, name)
		if old, had := routers[name]; !had || old != a {
			d.logf("border router %s: %s is %s", name, hp, a)
		}
		routers[name] = a
	}
	h.setRouters(d, routers)
}
