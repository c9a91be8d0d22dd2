package br

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// clockSlack is how far the measured offset from the monotonic clock to
// Unix time may move before the keeper writes it again: far more than its
// measurement's jitter (microseconds), far less than anything hop-field
// expiry (337.5 s steps) could notice.
const clockSlack = time.Millisecond

// ErrHostGone is returned by a Keeper whose network namespace was deleted.
var ErrHostGone = errors.New("the router's network namespace is gone")

// KeepOptions configure OpenKeeper.
type KeepOptions struct {
	// Name is the router's pin directory name; the router ID if empty.
	Name string
	// Interval between checks when no event comes; DefaultKeepInterval if 0.
	Interval time.Duration
	// Log receives a record for each change the keeper acts on; nothing
	// is logged while nothing changes. slog.Default() if nil.
	Log *slog.Logger
	// Changed, if set, is told of each kind of update the keeper writes
	// into the maps (one of KeeperChanges), as it writes it.
	Changed func(kind string)
	// Reattach, if set, attaches the router again in place (Serve: as it
	// attached first): the keeper calls it when a device the router was
	// attached to was deleted and created again, which leaves its link
	// defunct and the new device without the program. Without it, the
	// keeper says so in an error at each check.
	Reattach func() error
}

// KeeperChanges are the kinds of update a Keeper writes into the maps:
// a device created again and attached again, the clock's offset, the
// host's addresses, a device that now takes XDP frames, one that falls
// back to the reference router, one that is gone, one whose taking of
// frames in several buffers changed.
var KeeperChanges = []string{"reattach", "clock", "addresses", "device_ready", "device_fallback", "device_gone", "device_buffers"}

// Keeper keeps an attached router's host state in step with the host.
type Keeper struct {
	cfg      *Config
	name     string
	dir      string
	ns       string
	interval time.Duration
	log      *slog.Logger
	changed  func(kind string)
	reattach func() error
	maps     hostMaps

	// What the last check found, to log changes only.
	tx    map[xdp.Iface]xdp.Tx // device → what it takes of XDP frames
	prev  map[uint32]xdp.Tx    // on the first check: what attach wrote, by ifindex
	gone  map[xdp.Iface]bool   // devices found deleted (said once)
	loOff []string             // families with forwarding off on lo
	// Devices created again that an attach failed on, by their index then:
	// tried again only when the device is made anew once more (an attach
	// loads the program, too costly to repeat every second).
	failed    map[xdp.Iface]int
	localFull bool            // said that the host's addresses do not all fit
	errs      map[string]bool // errors logged and not seen again since
	first     bool

	// Checks and the time they took, for Stats (read while Run runs).
	checks  atomic.Int64
	elapsed atomic.Int64 // ns
	// ready is what Ready says: each device frames leave by, and whether
	// they leave by it in XDP, after the last check.
	ready atomic.Pointer[map[string]bool]
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
		o.Log = slog.Default()
	}
	if o.Changed == nil {
		o.Changed = func(string) {}
	}
	if o.Name == "" {
		o.Name = cfg.RouterID
	}
	k := &Keeper{cfg: cfg, name: o.Name, dir: PinDir(o.Name), interval: o.Interval, log: o.Log.With("name", o.Name), changed: o.Changed, reattach: o.Reattach,
		tx: map[xdp.Iface]xdp.Tx{}, gone: map[xdp.Iface]bool{}, failed: map[xdp.Iface]int{}, errs: map[string]bool{}, first: true}
	devs, err := k.devices()
	if err != nil {
		return nil, err
	}
	k.ns = devs[0].Netns
	dsts := k.maps.ptrs()
	for i, name := range hostMapNames {
		m, err := ebpf.LoadPinnedMap(filepath.Join(k.dir, name), nil)
		if err != nil {
			k.Close()
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("router %s: %w (no %s under %s)", k.name, ErrNotAttached, name, k.dir)
			}
			return nil, fmt.Errorf("open %s of router %s: %w", name, k.name, err)
		}
		*dsts[i] = m
	}
	return k, nil
}

// Close closes the maps (the pins stay).
func (k *Keeper) Close() {
	for _, m := range k.maps.ptrs() {
		if *m != nil {
			(*m).Close()
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
	if err := k.checkLinks(devs); err != nil {
		return err
	}
	if err := k.checkClock(); err != nil {
		return err
	}
	if err := k.checkHost(devs); err != nil {
		return err
	}
	k.checkForwarding()
	return nil
}

// checkLinks finds devices that were deleted and created again while the
// router was attached: the link the pin holds went with the old device,
// and the new one runs nothing. It attaches again, or says what to do.
func (k *Keeper) checkLinks(devs []xdp.Iface) error {
	var again []xdp.Iface
	index := map[xdp.Iface]int{}
	for _, d := range devs {
		if !errors.Is(xdp.PinnedLinkState(filepath.Join(k.dir, xdp.LinkPinName(d))), xdp.ErrLinkGone) {
			delete(k.failed, d)
			continue
		}
		a, err := xdp.Lookup(d)
		if err != nil {
			continue
		}
		index[d] = a.Index
		if i, ok := k.failed[d]; !ok || i != a.Index {
			again = append(again, d)
		}
	}
	if len(again) == 0 {
		return nil
	}
	if k.reattach == nil {
		return fmt.Errorf("router %s: %v deleted and created again since the router was attached: nothing runs there; attach it again (`fastpath br attach`)", k.name, again)
	}
	if err := k.reattach(); err != nil {
		for _, d := range again {
			k.failed[d] = index[d]
		}
		return fmt.Errorf("router %s: %v deleted and created again; attaching again failed (tried again when it is made anew, or `fastpath br attach`): %w", k.name, again, err)
	}
	k.log.Info("device deleted and created again: router attached again", "devices", fmt.Sprint(again))
	k.changed("reattach")
	return nil
}

// checkClock measures the offset from the monotonic clock to Unix time
// and writes it when it moved: the system clock was stepped (chrony's
// makestep at boot, a virtual machine restored, date -s). Hop-field
// expiry reads it; nothing else does.
func (k *Keeper) checkClock() error {
	have, err := getVar(k.maps.vars, varClock)
	if err != nil {
		return err
	}
	now, err := monoToUnix()
	if err != nil {
		return err
	}
	step := time.Duration(now - int64(have))
	if step.Abs() < clockSlack {
		return nil
	}
	if _, err := setClock(k.maps.vars); err != nil {
		return err
	}
	k.log.Info("system clock moved against the monotonic one: hop-field expiry follows it", "step", step.Round(time.Millisecond))
	k.changed("clock")
	return nil
}

// checkHost looks at the devices and addresses again and writes the view.
func (k *Keeper) checkHost(devs []xdp.Iface) error {
	if k.first {
		// Before the first check, what attach (or an earlier keeper)
		// wrote is what the router does.
		prev, err := k.maps.readDevs()
		if err != nil {
			return err
		}
		k.prev = map[uint32]xdp.Tx{}
		for _, d := range prev {
			k.prev[d.Ifindex] = devTx(d.Flags)
		}
	}
	v, err := lookHost(k.cfg, k.ns, devs, k.txLook)
	if err != nil {
		return err
	}
	k.logChanges(v)
	added, removed, err := k.maps.write(k.ns, v)
	if errors.Is(err, errLocalAddrsFull) {
		if !k.localFull {
			localAddrsFull(k.log, k.ns, err)
		}
		k.localFull = true
	} else if err != nil {
		return err
	} else {
		k.localFull = false
	}
	if len(added)+len(removed) > 0 {
		k.changed("addresses")
		if !k.first {
			k.log.Info("host addresses changed: next hops at its own addresses are left to the kernel", "change", addrChange(added, removed))
		}
	}
	return nil
}

// devTx is what br_devs' flags say a device takes.
func devTx(flags uint16) xdp.Tx {
	return xdp.Tx{Frames: flags&uint16(routerBrDevFlagsBR_DEV_XMIT) != 0, MultiBuffer: flags&uint16(routerBrDevFlagsBR_DEV_XMIT_SG) != 0}
}

// txLook is lookHost's look at what a device takes: the device's own
// namespace tells cheaply whether anything changed; the peer of a veth is
// looked for (TxState) only when it did, to say why.
func (k *Keeper) txLook(d xdp.Iface, l netlink.Link) (xdp.Tx, string, error) {
	tx, sure := xdp.TxReadyLink(k.ns, l)
	before, known := k.before(d, uint32(l.Attrs().Index))
	if sure && known && tx == before {
		return tx, "", nil
	}
	return xdp.TxState(d)
}

// before is what the keeper last knew a device to take.
func (k *Keeper) before(d xdp.Iface, index uint32) (xdp.Tx, bool) {
	if k.first {
		tx, ok := k.prev[index]
		return tx, ok
	}
	tx, ok := k.tx[d]
	return tx, ok
}

// logChanges says what changed in what the devices take, and which are
// gone, a line each.
func (k *Keeper) logChanges(v hostView) {
	seen := map[xdp.Iface]bool{}
	for _, d := range v.gone {
		if !k.gone[d] {
			detach := fmt.Sprintf("fastpath br detach --router %s %s", k.name, d.Name)
			if d.Netns != "" {
				detach = fmt.Sprintf("fastpath br detach --router %s --netns %s %s", k.name, d.Netns, d.Name)
			}
			k.log.Warn("device gone (deleted, or its namespace was): nothing leaves by it", "device", d.String(), "fix", detach)
			k.changed("device_gone")
		}
		seen[d] = true
	}
	k.gone = seen
	now := map[xdp.Iface]xdp.Tx{}
	ready := map[string]bool{}
	for _, d := range v.devs {
		before, known := k.before(d.iface, d.index)
		tx := d.tx
		dev := d.iface.String()
		switch {
		case tx.Frames && (!known || !before.Frames):
			k.log.Info("device takes XDP frames now: what leaves by it is forwarded in XDP", "device", dev, "reason", d.why)
			k.changed("device_ready")
		case !tx.Frames && known && before.Frames:
			k.log.Warn("device falls back to the reference router: what leaves by it is passed up", "device", dev, "reason", d.why, "verdict", "tx_unusable", "recheck", k.interval)
			k.changed("device_fallback")
		case !tx.Frames && !known:
			// A device a next hop newly leaves by (attach warned of those
			// it knew).
			k.log.Warn("device takes no XDP frames: what leaves by it goes to the reference router", "device", dev, "reason", d.why, "verdict", "tx_unusable", "recheck", k.interval)
			k.changed("device_fallback")
		case tx.Frames && known && before.Frames && tx.MultiBuffer != before.MultiBuffer:
			if tx.MultiBuffer {
				k.log.Info("device takes XDP frames in several buffers now: jumbo frames leaving by it are forwarded in XDP", "device", dev, "reason", d.why)
			} else {
				k.log.Warn("device takes XDP frames in one buffer only now: jumbo frames leaving by it go to the reference router", "device", dev, "reason", d.why, "verdict", "tx_no_sg")
			}
			k.changed("device_buffers")
		}
		now[d.iface] = tx
		ready[d.iface.Name] = tx.Frames
	}
	k.tx = now
	k.ready.Store(&ready)
}

// Ready is the keeper's view after its last check: each device a frame
// may leave by, by name, and whether what leaves by it is forwarded in
// XDP (false: it falls back to the reference router). Nil before the
// first check.
func (k *Keeper) Ready() map[string]bool {
	if r := k.ready.Load(); r != nil {
		return *r
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
			forwardingWarning(k.log, k.ns, fam)
		}
	}
	for _, fam := range k.loOff {
		if !slices.Contains(off, fam) {
			k.log.Info("forwarding is on again on lo: the fast path's FIB lookups are answered", "netns", nsName(k.ns), "family", fam)
		}
	}
	k.loOff = off
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
		k.log.Warn("watching the host's netlink events failed: changes are seen by the periodic check only", "err", err, "interval", k.interval)
	})
	if err != nil {
		return err
	}
	defer func() { w.Close() }()
	if !w.Features {
		k.log.Warn("the kernel has no netdev netlink family (Linux 6.3 and later): a neighbour's XDP program or GRO is seen by the periodic check only", "interval", k.interval)
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
				k.log.Error("checking the host failed: trying again at the next check", "err", err)
				k.errs[err.Error()] = true
			}
			continue
		}
		clear(k.errs)
	}
}
