package br

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// What the router is told of the host it runs on — its devices, what each
// takes of XDP frames and what it faces, the host's addresses — is looked
// at by attach and again by `br serve`'s keeper (keep.go), and written
// into the pinned maps the same way by both.

// hostDev is a device the router may receive from or send to: one it is
// attached to, or one a next hop leaves by.
type hostDev struct {
	iface xdp.Iface
	index uint32
	tx    xdp.Tx
	why   string // what TxState said of tx, when it was asked
	flags uint16 // routerBrDevFlags: roles, rp_filter, tx and up
	mac   [6]byte
}

// hostView is what the router is told of its host.
type hostView struct {
	devs []hostDev
	// slotDevs: the counter slot of each external interface → the device
	// its neighbour is reached by (0: no route now).
	slotDevs map[uint16]uint32
	local    map[routerBrAddr]bool
	// gone are devices the router is attached to, or a next hop left by,
	// that no longer exist.
	gone []xdp.Iface
}

// txFunc says what a device takes of XDP frames: xdp.TxState, which names
// the reason, or the keeper's cheaper look.
type txFunc func(d xdp.Iface, l netlink.Link) (xdp.Tx, string, error)

func txState(d xdp.Iface, _ netlink.Link) (xdp.Tx, string, error) { return xdp.TxState(d) }

// lookHost finds the router's view of the host in ns: the devices it is
// attached to (attached) and those its neighbours and siblings are reached
// by, each with what it takes of XDP frames, whether it faces the AS or a
// neighbour, its rp_filter and MAC; and the host's addresses.
func lookHost(cfg *Config, ns string, attached []xdp.Iface, tx txFunc) (hostView, error) {
	v := hostView{slotDevs: map[uint16]uint32{}}
	cands, err := egressCandidates(cfg, ns, attached)
	if err != nil {
		return v, err
	}
	h, err := netns.Handle(ns)
	if err != nil {
		return v, err
	}
	defer h.Close()
	addrs, err := addrDevices(ns)
	if err != nil {
		return v, err
	}
	rpAll := rpFilter(ns, "all")
	// Which devices face a neighbour: those holding an external
	// interface's address, and those its neighbour is reached by.
	external := map[string]bool{}
	slots := counterSlots(cfg)
	for _, i := range cfg.Interfaces {
		if i.Kind != External {
			continue
		}
		if d, ok := addrs[i.Local.Addr().Unmap()]; ok {
			external[d] = true
		}
		if l := routeDevice(h, i.Remote.Addr()); l != nil {
			external[l.Attrs().Name] = true
			v.slotDevs[slots[i.ID]] = uint32(l.Attrs().Index)
		}
	}
	// Which face the AS: those named so, the one holding internal_addr,
	// those the siblings are reached by, and every device the router is
	// attached to that faces no neighbour.
	internal := map[string]bool{}
	for _, d := range cfg.InternalInterfaces {
		internal[d] = true
	}
	if d, ok := addrs[cfg.Internal.Addr().Unmap()]; ok {
		internal[d] = true
	}
	for _, i := range cfg.Interfaces {
		if i.Kind == Sibling {
			if l := routeDevice(h, i.SiblingAddr.Addr()); l != nil {
				internal[l.Attrs().Name] = true
			}
		}
	}
	for _, d := range attached {
		if !external[d.Name] {
			internal[d.Name] = true
		}
	}
	for _, d := range cands {
		l, err := h.LinkByName(d.Name)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			v.gone = append(v.gone, d)
			continue
		}
		if err != nil {
			return v, fmt.Errorf("interface %s: %w", d, err)
		}
		a := l.Attrs()
		hd := hostDev{iface: d, index: uint32(a.Index)}
		if hd.tx, hd.why, err = tx(d, l); err != nil {
			return v, err
		}
		if hd.tx.Frames {
			hd.flags |= uint16(routerBrDevFlagsBR_DEV_XMIT)
		}
		if hd.tx.MultiBuffer {
			hd.flags |= uint16(routerBrDevFlagsBR_DEV_XMIT_SG)
		}
		if a.Flags&net.FlagUp != 0 {
			hd.flags |= uint16(routerBrDevFlagsBR_DEV_UP)
		}
		if internal[d.Name] {
			hd.flags |= uint16(routerBrDevFlagsBR_DEV_INTERNAL)
		}
		if external[d.Name] {
			hd.flags |= uint16(routerBrDevFlagsBR_DEV_EXTERNAL)
		}
		// The kernel takes the larger of all's and the device's.
		switch max(rpAll, rpFilter(ns, d.Name)) {
		case 1:
			hd.flags |= uint16(routerBrDevFlagsBR_DEV_RPF_STRICT)
		case 2:
			hd.flags |= uint16(routerBrDevFlagsBR_DEV_RPF_LOOSE)
		}
		copy(hd.mac[:], a.HardwareAddr)
		v.devs = append(v.devs, hd)
	}
	if v.local, err = hostAddrs(ns); err != nil {
		return v, err
	}
	return v, nil
}

// counterSlots gives each external interface its counter slot: 1, 2, … in
// ID order (0 is the internal interface's, the last the unmatched one's).
func counterSlots(cfg *Config) map[uint16]uint16 {
	var ids []uint16
	for _, i := range cfg.Interfaces {
		if i.Kind == External {
			ids = append(ids, i.ID)
		}
	}
	slices.Sort(ids)
	out := make(map[uint16]uint16, len(ids))
	for n, id := range ids {
		out[id] = uint16(n + 1)
	}
	return out
}

// routeDevice is the device the namespace's routes send to a, or nil (no
// route now, or by lo: an address of the host).
func routeDevice(h *netlink.Handle, a netip.Addr) netlink.Link {
	routes, err := h.RouteGet(a.AsSlice())
	if err != nil || len(routes) == 0 {
		return nil
	}
	l, err := h.LinkByIndex(routes[0].LinkIndex)
	if err != nil || l.Attrs().Name == "lo" {
		return nil
	}
	return l
}

// addrDevices are the namespace's addresses and the device holding each.
func addrDevices(ns string) (map[netip.Addr]string, error) {
	out := map[netip.Addr]string{}
	err := netns.Run(ns, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, i := range ifs {
			as, _ := i.Addrs()
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						out[ip.Unmap()] = i.Name
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", nsName(ns), err)
	}
	return out, nil
}

// rpFilter is net.ipv4.conf.DEV.rp_filter in ns (0 if it cannot be read).
func rpFilter(ns, dev string) int {
	var v int
	_ = netns.Run(ns, func() error {
		b, err := os.ReadFile(filepath.Join("/proc/sys/net/ipv4/conf", dev, "rp_filter"))
		if err == nil {
			v, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return nil
	})
	return v
}

// hostAddrs are the addresses of the namespace's devices, as
// br_local_addrs keys them.
func hostAddrs(ns string) (map[routerBrAddr]bool, error) {
	addrs, err := addrDevices(ns)
	if err != nil {
		return nil, err
	}
	local := make(map[routerBrAddr]bool, len(addrs))
	for ip := range addrs {
		local[brAddr(netip.AddrPortFrom(ip, 0))] = true
	}
	return local, nil
}

// hostMaps are the maps that hold what the router knows of its host: they
// are written at attach and kept in step by a Keeper.
type hostMaps struct {
	localAddrs, txPorts, devs, devsMore, slotDevs, vars *ebpf.Map
}

// hostMapNames are the pinned names of hostMaps' maps, in its order.
var hostMapNames = []string{"br_local_addrs", "br_tx_ports", "br_devs", "br_devs_more", "br_slot_devs", "br_vars"}

func (m *hostMaps) ptrs() []**ebpf.Map {
	return []**ebpf.Map{&m.localAddrs, &m.txPorts, &m.devs, &m.devsMore, &m.slotDevs, &m.vars}
}

// errLocalAddrsFull says the host has more addresses than br_local_addrs
// holds.
var errLocalAddrsFull = errors.New("more addresses than the router keeps")

// localAddrsFull says that the host's addresses do not all fit.
func localAddrsFull(log *slog.Logger, ns string, err error) {
	log.Warn("the host has more addresses than the router keeps: next hops at the others are left to the kernel (verdict fib_pass)", "netns", nsName(ns), "err", err)
}

// write makes the maps hold the view. Devices are written so that no
// packet is redirected to a device missing from the redirect map: a device
// is put there before br_devs lets a packet choose it, and taken out only
// after br_devs stopped. The redirect map holds every device that is up
// (the generic copy sends skbs, which any of them takes); br_devs says
// which of them the native program may send to. When a device stopped
// taking what it took, or is gone, the devices' generation changes: next
// hops the router cached before ask the FIB and br_devs again. It says
// whether addresses were left out (errLocalAddrsFull, after everything
// else was written).
func (m hostMaps) write(ns string, v hostView) (added, removed []routerBrAddr, err error) {
	err = netns.Run(ns, func() error {
		// A devmap resolves indexes in the namespace of the thread
		// updating it.
		have, err := keys[uint32, uint32](m.txPorts)
		if err != nil {
			return fmt.Errorf("read the redirect map: %w", err)
		}
		// The native program redirects to a device that takes XDP frames,
		// the generic copy to any that is up (br_devs says which is which).
		usable := map[uint32]bool{}
		for _, d := range v.devs {
			if d.tx.Frames || d.flags&uint16(routerBrDevFlagsBR_DEV_UP) != 0 {
				usable[d.index] = true
				if !have[d.index] {
					if err := m.txPorts.Put(d.index, d.index); err != nil {
						return fmt.Errorf("add %s to the redirect map: %w", d.iface, err)
					}
				}
			}
		}
		lost, err := m.writeDevs(v.devs)
		if err != nil {
			return err
		}
		if err := m.writeSlotDevs(v.slotDevs); err != nil {
			return err
		}
		if lost {
			if err := newGeneration(m.vars, varDevsGen); err != nil {
				return err
			}
		}
		for idx := range have {
			if !usable[idx] {
				if err := m.txPorts.Delete(idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("remove device %d from the redirect map: %w", idx, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	added, removed, err = syncSet(m.localAddrs, v.local, uint8(1))
	if errors.Is(err, unix.E2BIG) {
		err = fmt.Errorf("%w (%d of %d): next hops at the others are left to the kernel as fib_pass", errLocalAddrsFull, m.localAddrs.MaxEntries(), len(v.local))
	} else if err != nil {
		err = fmt.Errorf("write local addresses: %w", err)
	}
	return added, removed, err
}

// devSlots is BR_DEV_SLOTS: br_devs' size.
const devSlots = 256

// readDevs are the devices br_devs and br_devs_more hold now.
func (m hostMaps) readDevs() ([]routerBrDev, error) {
	var out []routerBrDev
	for i := uint32(0); i < devSlots; i++ {
		var d routerBrDev
		if err := m.devs.Lookup(i, &d); err != nil {
			return nil, fmt.Errorf("read br_devs: %w", err)
		}
		if d.Ifindex != 0 {
			out = append(out, d)
		}
	}
	var k uint32
	var d routerBrDev
	it := m.devsMore.Iterate()
	for it.Next(&k, &d) {
		out = append(out, d)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read br_devs_more: %w", err)
	}
	return out, nil
}

// writeDevs makes br_devs and br_devs_more hold the devices: each in its
// slot of br_devs (ifindex modulo its size), the lowest ifindex where two
// share one, the others in br_devs_more. It says whether a device that
// took XDP frames (or was up) no longer does (or is not), or is gone.
func (m hostMaps) writeDevs(devs []hostDev) (lost bool, err error) {
	want := map[uint32]routerBrDev{}
	for _, d := range devs {
		want[d.index] = routerBrDev{Ifindex: d.index, Flags: d.flags, Mac: d.mac}
	}
	// What the program sees now, by ifindex.
	var prev []routerBrDev
	slot := make([]routerBrDev, devSlots)
	for i := range slot {
		if err := m.devs.Lookup(uint32(i), &slot[i]); err != nil {
			return false, fmt.Errorf("read br_devs: %w", err)
		}
		if slot[i].Ifindex != 0 {
			prev = append(prev, slot[i])
		}
	}
	more := map[uint32]routerBrDev{}
	var k uint32
	var val routerBrDev
	it := m.devsMore.Iterate()
	for it.Next(&k, &val) {
		more[k] = val
		prev = append(prev, val)
	}
	if err := it.Err(); err != nil {
		return false, fmt.Errorf("read br_devs_more: %w", err)
	}
	sends := uint16(routerBrDevFlagsBR_DEV_XMIT | routerBrDevFlagsBR_DEV_UP)
	for _, p := range prev {
		if w := want[p.Ifindex]; p.Flags&sends&^w.Flags != 0 {
			lost = true
		}
	}
	// The new layout.
	idx := make([]uint32, 0, len(want))
	for i := range want {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	newSlot := make([]routerBrDev, devSlots)
	newMore := map[uint32]routerBrDev{}
	for _, i := range idx {
		s := i % devSlots
		if newSlot[s].Ifindex == 0 {
			newSlot[s] = want[i]
		} else {
			newMore[i] = want[i]
		}
	}
	// br_devs_more first, so that a device moving out of its slot is found
	// there the moment another takes the slot; its stale entries last.
	for i, d := range newMore {
		if more[i] != d {
			if err := m.devsMore.Put(i, d); err != nil {
				return lost, fmt.Errorf("write br_devs_more: %w", err)
			}
		}
	}
	for i := range newSlot {
		if newSlot[i] != slot[i] {
			if err := m.devs.Put(uint32(i), newSlot[i]); err != nil {
				return lost, fmt.Errorf("write br_devs: %w", err)
			}
		}
	}
	for i := range more {
		if _, ok := newMore[i]; !ok {
			if err := m.devsMore.Delete(i); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return lost, fmt.Errorf("write br_devs_more: %w", err)
			}
		}
	}
	return lost, nil
}

// writeSlotDevs writes br_slot_devs where it changed.
func (m hostMaps) writeSlotDevs(devs map[uint16]uint32) error {
	for s := uint32(0); s < m.slotDevs.MaxEntries(); s++ {
		var have uint32
		if err := m.slotDevs.Lookup(s, &have); err != nil {
			return fmt.Errorf("read br_slot_devs: %w", err)
		}
		if want := devs[uint16(s)]; want != have {
			if err := m.slotDevs.Put(s, want); err != nil {
				return fmt.Errorf("write br_slot_devs: %w", err)
			}
		}
	}
	return nil
}

// syncSet makes a hash map hold exactly the keys of want, each with val:
// stale keys go first, so that a map near its limit makes room before new
// keys come. It says which keys it added and which it removed; a map too
// small for want is filled as far as it goes (an error wrapping E2BIG).
func syncSet[K comparable, V any](m *ebpf.Map, want map[K]bool, val V) (added, removed []K, err error) {
	have, err := keys[K, V](m)
	if err != nil {
		return nil, nil, err
	}
	for k := range have {
		if want[k] {
			continue
		}
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return added, removed, err
		}
		removed = append(removed, k)
	}
	for k := range want {
		if have[k] {
			continue
		}
		if err := m.Put(k, val); err != nil {
			return added, removed, err
		}
		added = append(added, k)
	}
	return added, removed, nil
}

// warnHost says, naming the fix, what of the host keeps traffic from the
// fast path: devices a frame may leave by that take no XDP frames, or none
// in several buffers where the MTU allows them.
func warnHost(v hostView, log *slog.Logger) {
	for _, d := range v.devs {
		switch {
		case !d.tx.Frames:
			log.Warn("device takes no XDP frames: what leaves by it goes to the reference router until it is fixed",
				"device", d.iface.String(), "reason", d.why, "verdict", "tx_unusable",
				"fix", "`fastpath br serve` picks the fix up within a second; a one-shot `br attach` must be run again")
		case !d.tx.MultiBuffer && jumboMTU(d.iface):
			log.Warn("device takes XDP frames in one buffer only: jumbo frames leaving by it go to the reference router",
				"device", d.iface.String(), "reason", d.why, "verdict", "tx_no_sg")
		}
	}
}

// jumboMTU says the device's MTU allows frames that come in several
// buffers (longer than about a page).
func jumboMTU(d xdp.Iface) bool {
	a, err := xdp.Lookup(d)
	return err == nil && a.MTU > 3000
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
