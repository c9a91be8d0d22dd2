package tra

import (
	"fmt"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/vishvananda/netlink"
)

// The pair's MTU takes the largest IPv6 packet either way: what tra_in makes
// of the largest frame the underlay device takes (the shortest SCION header
// to this host: the empty path from a host of the AS), and what the paths
// installed carry of the host's (on links of jumbo frames the host sends
// jumbo packets). A pair smaller than what arrives would drop it after
// tra_in counted it translated, unseen; a host packet larger than its path
// takes gets Packet Too Big from tra_out (check_path_mtu), and a TCP SYN
// has its MSS clamped to its path (clamp_mss): the host learns each
// destination's by its path MTU discovery. tra_in drops what would not fit
// the pair all the same, and counts it (too_big_in).

// pairMTU is the pair's MTU while the underlay device's is unknown and no
// path is installed: room for a SCION header of a few segments within a
// 1500-byte underlay.
const pairMTU = 1400

// maxPairMTU is the most a veth takes.
const maxPairMTU = 65535

// pairLink is the host's pair as the daemon sets its MTU.
type pairLink interface {
	// MTU is the host end's MTU now (0: the pair is not there).
	MTU() (int, error)
	// SetMTU sets both ends' MTU.
	SetMTU(mtu int) error
	// UnderlayMTU is the underlay device's MTU.
	UnderlayMTU() (int, error)
}

// hostPacketMTU is the largest IPv6 packet of the host that p carries, as
// tra_out counts (check_path_mtu: the SCION header, common, address and
// path, plus the IPv6 payload fit the path's MTU; the IPv4 and UDP
// underlay headers in front fit the underlay device's). The destination's
// host is taken as IPv4, the shorter: a destination with an IPv6 host is
// told Packet Too Big 12 bytes sooner. 0: the path has no MTU.
func hostPacketMTU(p Path, srcHostLen, underlayMTU int) int {
	if p.MTU == 0 {
		return 0
	}
	mtu := int(p.MTU)
	if underlayMTU > 0 {
		mtu = min(mtu, underlayMTU-outHdrs)
	}
	scion := scionCommonLen + 2*scionIALen + 4 + srcHostLen + len(p.Raw)
	return mtu - scion + ipv6HdrLen
}

// Header lengths as tra.c has them.
const (
	scionCommonLen = 12
	scionIALen     = 8
	ipv6HdrLen     = 40
	outHdrs        = 20 + 8 // IPv4 and UDP in front of the SCION header
)

// inPacketMTU is the largest IPv6 packet tra_in makes of a frame the
// underlay device takes: IPv4 and UDP, and the shortest SCION header to
// this host (common, ISD-ASes, this host's address, and the IPv4 address of
// a host of the AS on the empty path, the only sender that needs none)
// give way to IPv6's 40 bytes. 0: the underlay's MTU is unknown.
func inPacketMTU(srcHostLen, underlayMTU int) int {
	if underlayMTU <= 0 {
		return 0
	}
	return underlayMTU - outHdrs - (scionCommonLen + 2*scionIALen + srcHostLen + 4) + ipv6HdrLen
}

// wantPairMTU is the pair's MTU: the largest of what can arrive
// (inPacketMTU) and the largest host packet a path installed carries, at
// least IPv6's minimum; pairMTU while neither is known.
func wantPairMTU(dests map[addr.IA]*dest, srcHostLen, underlayMTU int) int {
	best := inPacketMTU(srcHostLen, underlayMTU)
	for _, x := range dests {
		for _, p := range x.dp {
			best = max(best, hostPacketMTU(p, srcHostLen, underlayMTU))
		}
	}
	if best == 0 {
		best = pairMTU
	}
	return min(max(best, minIPv6MTU), maxPairMTU)
}

// srcHostLen is the length of this host's SCION address: 4 for an IPv4
// host, 16 otherwise (tra_config.host_is4).
func srcHostLen(cfg *Config) int {
	if m, err := ToSCION(cfg.SMIP); err == nil && m.Host(cfg.SMIP).Is4() {
		return 4
	}
	return 16
}

// fitPair sets the pair's MTU to what wantPairMTU says, at once when a path
// raises or lowers it; the health check calls it too, so that a pair made
// anew or an underlay device of another MTU gets it right. tra_in learns
// the MTU before the pair takes less, and after it takes more: it never
// hands the pair what it would drop.
func (d *pathDaemon) fitPair() {
	if d.pair == nil {
		return
	}
	under, err := d.pair.UnderlayMTU()
	if err != nil {
		under = 0
	}
	have, err := d.pair.MTU()
	if err != nil || have == 0 {
		return
	}
	want := wantPairMTU(d.dests, srcHostLen(d.cfg), under)
	d.stats.set(statPairMTU, uint64(have))
	if want == have {
		d.tellPairMTU(have)
		return
	}
	if want < have {
		d.tellPairMTU(want)
	}
	if err := d.pair.SetMTU(want); err != nil {
		d.log.Error("cannot set the pair's MTU", "pair", d.cfg.Pair, "mtu", want, "error", err)
		d.tellPairMTU(have)
		return
	}
	d.tellPairMTU(want)
	d.stats.add(statPairMTUSet, 1)
	d.stats.set(statPairMTU, uint64(want))
	d.log.Info("pair MTU set to the largest packet the underlay brings or the paths installed carry", "pair", d.cfg.Pair, "mtu", want, "was", have)
}

// pairMTUPlane is a data plane whose tra_in checks packets against the
// pair's MTU (the pinned maps; the tests' fakes do not).
type pairMTUPlane interface{ SetPairMTU(mtu int) error }

// tellPairMTU tells tra_in the pair's MTU.
func (d *pathDaemon) tellPairMTU(mtu int) {
	if p, ok := d.dp.(pairMTUPlane); ok {
		if err := p.SetPairMTU(mtu); err != nil {
			d.log.Error("cannot tell tra_in the pair's MTU", "error", err)
		}
	}
}

// netlinkPair is the pair and the underlay device in a namespace.
type netlinkPair struct {
	ns, pair, device string
}

func (n netlinkPair) MTU() (int, error) {
	h, err := netns.Handle(n.ns)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	l, err := h.LinkByName(n.pair + "0")
	if err != nil {
		return 0, nil
	}
	return l.Attrs().MTU, nil
}

func (n netlinkPair) UnderlayMTU() (int, error) {
	h, err := netns.Handle(n.ns)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	l, err := h.LinkByName(n.device)
	if err != nil {
		return 0, err
	}
	return l.Attrs().MTU, nil
}

// SetMTU sets the translator's end first when raising (tra_in redirects
// into it, and the host's end takes what fits it), the host's first when
// lowering: neither end ever takes more than the other passes.
func (n netlinkPair) SetMTU(mtu int) error {
	h, err := netns.Handle(n.ns)
	if err != nil {
		return err
	}
	defer h.Close()
	host, err := h.LinkByName(n.pair + "0")
	if err != nil {
		return err
	}
	trans, err := h.LinkByName(n.pair + "1")
	if err != nil {
		return err
	}
	order := []netlink.Link{trans, host}
	if mtu < host.Attrs().MTU {
		order = []netlink.Link{host, trans}
	}
	for _, l := range order {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("%s: %w", l.Attrs().Name, err)
		}
	}
	return nil
}
