package tra

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
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

	topoMod time.Time
	// gone says the translator was detached under the daemon.
	gone bool
}

func newHealth(cfg *Config, name string, p *Pinned, inj *injector, log io.Writer) *health {
	h := &health{cfg: cfg, name: name, p: p, inj: inj, log: log}
	if st, err := os.Stat(cfg.Topology); err == nil {
		h.topoMod = st.ModTime()
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

// checkTopology takes a changed topology.json's routers: validated whole
// first, and only if it is still this AS.
func (h *health) checkTopology(d *pathDaemon) {
	st, err := os.Stat(h.cfg.Topology)
	if err != nil || st.ModTime().Equal(h.topoMod) {
		return
	}
	h.topoMod = st.ModTime()
	cfg, err := LoadConfig(h.cfg.Path)
	if err != nil {
		d.logf("topology changed, but: %v; the routers stay as they were", err)
		return
	}
	if cfg.IA != h.cfg.IA {
		d.logf("%s now names AS %s, not %s: restart the translator to change ASes", h.cfg.Topology, cfg.IA, h.cfg.IA)
		return
	}
	routers := make([]netip.AddrPort, 0, len(cfg.Routers))
	for _, r := range cfg.Routers {
		routers = append(routers, r)
	}
	if err := h.p.SetRouters(routers); err != nil {
		d.logf("routers of %s: %v", h.cfg.Topology, err)
		return
	}
	h.cfg.Routers, h.cfg.IfOwners = cfg.Routers, cfg.IfOwners
	d.logf("%s changed: %d border routers", h.cfg.Topology, len(routers))
}
