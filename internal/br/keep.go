package br

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// What attach finds of the host — which devices take XDP frames, which
// devices the next hops are reached through, the host's own addresses, lo's
// forwarding — changes afterwards: a neighbour attaches its own XDP program
// or turns GRO on, a link goes down, an address is added. A Keeper keeps an
// attached router's view in step: it looks again every interval and soon
// after each netlink event of the router's namespace, and writes what
// changed into the pinned maps. It opens the maps from the pin directory,
// so it may run in another process than the one that attached.

// DefaultKeepInterval is how often a Keeper looks when no event comes.
const DefaultKeepInterval = time.Second

// ErrHostGone is returned by a Keeper whose network namespace was deleted.
var ErrHostGone = errors.New("the router's network namespace is gone")

// KeepOptions configure OpenKeeper.
type KeepOptions struct {
	// Name is the router's pin directory name; the router ID if empty.
	Name string
	// Interval between checks when no event comes; DefaultKeepInterval if 0.
	Interval time.Duration
	// Log receives a line for each change the keeper acts on; nothing is
	// logged while nothing changes.
	Log io.Writer
}

// Keeper keeps an attached router's host state in step with the host.
type Keeper struct {
	cfg      *Config
	name     string
	dir      string
	ns       string
	interval time.Duration
	log      io.Writer
	maps     hostMaps

	// What the last check found, to log changes only.
	tx    map[xdp.Iface]bool // device → takes XDP frames
	loOff []string           // families with forwarding off on lo
	errs  map[string]bool    // errors logged and not seen again since
	first bool

	// Checks and the time they took, for Stats (read while Run runs).
	checks  atomic.Int64
	elapsed atomic.Int64 // ns
}

// OpenKeeper opens the pinned maps of the router attached under
// PinDir(o.Name) (the configuration's router ID if empty). cfg is the
// configuration it was attached with: it names the next hops.
func OpenKeeper(cfg *Config, o KeepOptions) (*Keeper, error) {
	if o.Interval < 0 {
		return nil, fmt.Errorf("keep interval %s: give a positive duration (1s is the default)", o.Interval)
	}
	if o.Interval == 0 {
		o.Interval = DefaultKeepInterval
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Name == "" {
		o.Name = cfg.RouterID
	}
	k := &Keeper{cfg: cfg, name: o.Name, dir: PinDir(o.Name), interval: o.Interval, log: o.Log, tx: map[xdp.Iface]bool{}, errs: map[string]bool{}, first: true}
	devs, err := k.devices()
	if err != nil {
		return nil, err
	}
	k.ns = devs[0].Netns
	for name, dst := range map[string]**ebpf.Map{"br_local_addrs": &k.maps.localAddrs, "br_tx_ports": &k.maps.txPorts, "br_egress": &k.maps.egress, "br_nh_cache": &k.maps.nhCache} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(k.dir, name), nil)
		if err != nil {
			k.Close()
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("router %s: %w (no %s under %s)", k.name, ErrNotAttached, name, k.dir)
			}
			return nil, fmt.Errorf("open %s of router %s: %w", name, k.name, err)
		}
		*dst = m
	}
	return k, nil
}

// Close closes the maps (the pins stay).
func (k *Keeper) Close() {
	for _, m := range []*ebpf.Map{k.maps.localAddrs, k.maps.txPorts, k.maps.egress, k.maps.nhCache} {
		if m != nil {
			m.Close()
		}
	}
}

// SetConfig gives the keeper the configuration the router was attached
// with again (a reload).
func (k *Keeper) SetConfig(cfg *Config) { k.cfg = cfg }

// devices are those the router has a link pin for, in one namespace.
func (k *Keeper) devices() ([]xdp.Iface, error) {
	var devs []xdp.Iface
	for _, pin := range xdp.Links(k.dir) {
		if d, ok := xdp.ParseLinkPinName(filepath.Base(pin)); ok {
			devs = append(devs, d)
		}
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("router %s: %w (no device link under %s): attach it first", k.name, ErrNotAttached, k.dir)
	}
	for _, d := range devs[1:] {
		if d.Netns != devs[0].Netns {
			return nil, fmt.Errorf("router %s is attached in two network namespaces (%s, %s): detach it and attach it again", k.name, devs[0], d)
		}
	}
	return devs, nil
}

// Check looks at the host once and writes what changed into the maps.
func (k *Keeper) Check() error {
	start := time.Now()
	defer func() {
		k.checks.Add(1)
		k.elapsed.Add(int64(time.Since(start)))
		k.first = false
	}()
	if k.ns != "" && !netns.Exists(k.ns) {
		return fmt.Errorf("router %s: %w (%s)", k.name, ErrHostGone, k.ns)
	}
	devs, err := k.devices()
	if err != nil {
		return err
	}
	if err := k.checkEgress(devs); err != nil {
		return err
	}
	if err := k.checkAddrs(); err != nil {
		return err
	}
	k.checkForwarding()
	return nil
}

// checkEgress finds the devices that take XDP frames now and writes them.
func (k *Keeper) checkEgress(devs []xdp.Iface) error {
	cands, err := egressCandidates(k.cfg, k.ns, devs)
	if err != nil {
		return err
	}
	h, err := netns.Handle(k.ns)
	if err != nil {
		return err
	}
	defer h.Close()
	var was map[uint32]bool
	if k.first {
		// Before the first check, what attach (or an earlier keeper)
		// wrote is what the router does.
		if was, err = keys[uint32, uint8](k.maps.egress); err != nil {
			return fmt.Errorf("read the egress devices: %w", err)
		}
	}
	ports := map[uint32]bool{}
	seen := map[xdp.Iface]bool{}
	for _, d := range cands {
		seen[d] = true
		l, err := h.LinkByName(d.Name)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			if ok, known := k.tx[d]; ok || !known {
				detach := fmt.Sprintf("fastpath br detach --router %s %s", k.name, d.Name)
				if d.Netns != "" {
					detach = fmt.Sprintf("fastpath br detach --router %s --netns %s %s", k.name, d.Netns, d.Name)
				}
				fmt.Fprintf(k.log, "%s: %s is gone (deleted, or its namespace was): nothing leaves by it; `%s` drops its link pin\n", k.name, d, detach)
			}
			k.tx[d] = false
			continue
		}
		if err != nil {
			return fmt.Errorf("interface %s: %w", d, err)
		}
		before, known := k.tx[d]
		if k.first {
			before, known = was[uint32(l.Attrs().Index)], true
		}
		// The device's own namespace tells cheaply whether anything
		// changed; the peer is looked for (TxState) only when it did, to
		// say why.
		ok, sure := xdp.TxReadyLink(k.ns, l)
		var why string
		if !sure || !known || ok != before {
			if ok, why, err = xdp.TxState(d); err != nil {
				return err
			}
		}
		switch {
		case ok && (!known || !before):
			fmt.Fprintf(k.log, "%s: %s takes XDP frames now (%s): what leaves by it is forwarded in XDP\n", k.name, d, why)
		case !ok && known && before:
			fmt.Fprintf(k.log, "%s: what leaves by %s falls back to the reference router (verdict tx_unusable): %s. %s\n", k.name, d, why, k.again())
		case !ok && !known:
			// A device a next hop newly leaves by (attach warned of those
			// it knew).
			fmt.Fprintf(k.log, "%s: what leaves by %s goes to the reference router (verdict tx_unusable): %s. %s\n", k.name, d, why, k.again())
		}
		k.tx[d] = ok
		if ok {
			ports[uint32(l.Attrs().Index)] = true
		}
	}
	for d := range k.tx {
		if !seen[d] {
			// No longer a device a next hop is reached through.
			delete(k.tx, d)
		}
	}
	_, _, err = k.maps.setEgress(k.ns, ports, k.cfg)
	return err
}

// again says when the fast path takes a device back.
func (k *Keeper) again() string {
	if k.interval == time.Second {
		return "fastpath forwards it in XDP again within a second of the fix."
	}
	return fmt.Sprintf("fastpath forwards it in XDP again within %s of the fix.", k.interval)
}

// checkAddrs writes the host's addresses when they changed.
func (k *Keeper) checkAddrs() error {
	want, err := hostAddrs(k.ns)
	if err != nil {
		return err
	}
	added, removed, err := k.maps.setLocalAddrs(want)
	if err != nil {
		return err
	}
	if len(added)+len(removed) > 0 && !k.first {
		fmt.Fprintf(k.log, "%s: the host's addresses changed (%s): next hops at its own addresses are left to the kernel\n", k.name, addrChange(added, removed))
	}
	return nil
}

func addrChange(added, removed []routerBrAddr) string {
	var parts []string
	for _, set := range []struct {
		sign  string
		addrs []routerBrAddr
	}{{"+", added}, {"-", removed}} {
		for _, a := range set.addrs {
			ip := netip.AddrFrom16(a.Addr)
			if a.Family == 4 {
				ip = netip.AddrFrom4([4]byte(a.Addr[:4]))
			}
			parts = append(parts, set.sign+ip.String())
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// checkForwarding warns once when lo's forwarding goes off for a family
// the router uses, and says when it is back.
func (k *Keeper) checkForwarding() {
	off := loForwardingOff(k.cfg, k.ns)
	for _, fam := range off {
		if !slices.Contains(k.loOff, fam) && !k.first {
			fmt.Fprintf(k.log, "%s: %s\n", k.name, forwardingWarning(k.ns, fam))
		}
	}
	for _, fam := range k.loOff {
		if !slices.Contains(off, fam) {
			fmt.Fprintf(k.log, "%s: %s forwarding is on again on lo: the fast path's FIB lookups are answered\n", k.name, fam)
		}
	}
	k.loOff = off
}

// keys are the keys of a hash map.
func keys[K comparable, V any](m *ebpf.Map) (map[K]bool, error) {
	out := map[K]bool{}
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[k] = true
	}
	return out, it.Err()
}

// Stats are how many checks the keeper made and the mean time one took.
func (k *Keeper) Stats() (checks int, mean time.Duration) {
	n := k.checks.Load()
	if n == 0 {
		return 0, 0
	}
	return int(n), time.Duration(k.elapsed.Load() / n)
}

// eventDelay is how long a check waits after a netlink event, so that a
// burst of them (a device coming up brings several) is looked at once.
const eventDelay = 20 * time.Millisecond

// Run checks at once, then every interval and soon after each netlink
// event of the router's namespace, until ctx ends (it returns nil) or the
// router is gone: its namespace deleted or its pins removed. A failed
// check is logged (once until it succeeds again) and retried at the next.
// Each value on reload calls onReload between two checks, so that the two
// never write the maps at once.
func (k *Keeper) Run(ctx context.Context, reload <-chan struct{}, onReload func()) error {
	w, err := xdp.WatchHost(k.ns, func(err error) {
		fmt.Fprintf(k.log, "%s: %v; changes are seen by the check every %s only\n", k.name, err, k.interval)
	})
	if err != nil {
		return err
	}
	defer func() { w.Close() }()
	if !w.Features {
		fmt.Fprintf(k.log, "%s: the kernel has no netdev netlink family (Linux 6.3 and later): a neighbour's XDP program or GRO is seen by the check every %s only\n", k.name, k.interval)
	}
	tick := time.NewTicker(k.interval)
	defer tick.Stop()
	soon := time.NewTimer(0) // the first check
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reload:
			onReload()
			soon.Reset(0)
			continue
		case <-w.C:
			soon.Reset(eventDelay)
			continue
		case <-tick.C:
		case <-soon.C:
		}
		err := k.Check()
		if errors.Is(err, ErrHostGone) || errors.Is(err, ErrNotAttached) {
			return err
		}
		if err != nil {
			if !k.errs[err.Error()] {
				fmt.Fprintf(k.log, "%s: %v; trying again\n", k.name, err)
				k.errs[err.Error()] = true
			}
			continue
		}
		clear(k.errs)
	}
}
