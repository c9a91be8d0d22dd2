package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// Tx is what a device takes of the XDP frames a natively attached program
// sends it (XDP_TX, a redirect): frames it would drop, or lose without an
// error reaching the program, are not taken.
type Tx struct {
	// Frames: frames in one buffer (the device has an XDP transmit,
	// ndo_xdp_xmit, and is up with carrier).
	Frames bool `json:"frames"`
	// MultiBuffer: frames in several buffers too (jumbo frames;
	// ndo_xdp_xmit with scatter-gather).
	MultiBuffer bool `json:"multi_buffer"`
}

// TxProblem says why XDP frames sent to the device would be dropped, or
// "" if nothing is known to stop them; the answer names the fix. Frames
// in several buffers are not asked about (TxState).
func TxProblem(i Iface) (string, error) {
	tx, why, err := TxState(i)
	if tx.Frames || err != nil {
		return "", err
	}
	return why, nil
}

// TxState says what the device takes of XDP frames, and why: for a device
// that takes them, what makes it (for a log line when that changes), and
// whether frames in several buffers are refused; for one that does not,
// the problem, naming the fix, as TxProblem gives it. The answer is
// TxReadyLink's where that knows; the peer of a veth is looked for only to
// name it.
func TxState(i Iface) (tx Tx, why string, err error) {
	h, err := netns.Handle(i.Netns)
	if err != nil {
		return Tx{}, "", err
	}
	defer h.Close()
	l, err := h.LinkByName(i.Name)
	if err != nil {
		return Tx{}, "", fmt.Errorf("interface %s: %w", i, err)
	}
	a := l.Attrs()
	if a.Flags&unix.IFF_UP == 0 {
		return Tx{}, fmt.Sprintf("%s is down: frames sent to it are dropped; bring it up (ip link set %s up)", i, i.Name), nil
	}
	if l.Type() == "veth" {
		return vethTxState(i, h, l)
	}
	tx, _ = TxReadyLink(i.Netns, l)
	switch {
	case a.RawFlags&unix.IFF_LOWER_UP == 0:
		return Tx{}, fmt.Sprintf("%s has no carrier: frames sent to it are lost", i), nil
	case !tx.Frames:
		return Tx{}, noXmit(i, l.Type()), nil
	case !tx.MultiBuffer:
		return tx, fmt.Sprintf("the kernel says %s takes XDP frames, in one buffer only: frames longer than a page (jumbo frames) that leave by it go to the reference router (verdict tx_no_sg)", i), nil
	}
	return tx, fmt.Sprintf("the kernel says %s takes XDP frames, in one buffer or several", i), nil
}

// noXmit names why a device that is not a veth has no XDP transmit, and
// what to do.
func noXmit(i Iface, kind string) string {
	switch kind {
	case "device":
		return fmt.Sprintf("%s takes no XDP frames: its driver has no XDP transmit, or offers it only while an XDP program is attached to the device itself; attach fastpath to %s too (name it among the devices), or what leaves by it goes to the reference router", i, i.Name)
	default:
		return fmt.Sprintf("%s is a %s device, which takes no XDP frames (it has no XDP transmit): what leaves by it goes to the reference router; to forward it in XDP, put the address on the device beneath it (a bridge's port, a macvlan's parent) and attach there", i, kind)
	}
}

// vethTxState is TxState for a veth: it takes XDP frames while its peer is
// up and runs an XDP program or GRO (a veth hands XDP frames to its peer's
// NAPI poll, which only those two turn on), and then in several buffers
// too.
func vethTxState(i Iface, h *netlink.Handle, l netlink.Link) (Tx, string, error) {
	a := l.Attrs()
	tx, known := TxReadyLink(i.Netns, l)
	peer, err := vethPeer(i, h, l)
	if err != nil {
		return Tx{}, "", err
	}
	peerName, up, fix := "(in a network namespace without a name here)", "bring it up", "turn GRO on there or attach an XDP program to it"
	if peer != nil {
		peerName = peer.iface.String()
		up = fmt.Sprintf("bring it up (%s)", inNS(peer.iface.Netns, "ip link set "+peer.iface.Name+" up"))
		fix = fmt.Sprintf("turn GRO on there (%s) or attach an XDP program to it", inNS(peer.iface.Netns, "ethtool -K "+peer.iface.Name+" gro on"))
	}
	if a.RawFlags&unix.IFF_LOWER_UP == 0 {
		// A veth has carrier exactly while its peer is up too.
		return Tx{}, fmt.Sprintf("%s's peer %s is down: frames sent to %s are dropped; %s", i, peerName, i.Name, up), nil
	}
	problem := fmt.Sprintf("frames sent to %s are dropped: its peer %s runs neither an XDP program nor GRO; %s", i, peerName, fix)
	peerXDP := peer != nil && peer.link.Attrs().Xdp != nil && peer.link.Attrs().Xdp.Attached
	both := Tx{Frames: true, MultiBuffer: true}
	switch {
	case known && !tx.Frames:
		return Tx{}, problem, nil
	case known && peerXDP:
		return tx, fmt.Sprintf("its peer %s runs an XDP program", peer.iface), nil
	case known && peer != nil:
		return tx, fmt.Sprintf("its peer %s has GRO on", peer.iface), nil
	case known:
		return tx, "its peer runs an XDP program or GRO (the kernel says so; the peer is in a network namespace without a name here)", nil
	case peerXDP:
		return both, fmt.Sprintf("its peer %s runs an XDP program", peer.iface), nil
	case peer == nil:
		return both, "its peer lives in a network namespace without a name here, so fastpath cannot look: assumed to take them", nil
	}
	// A kernel without the netdev family (before 6.3): ask the peer.
	gro, err := groOn(peer.iface)
	if err != nil {
		return Tx{}, "", err
	}
	if gro {
		return both, fmt.Sprintf("its peer %s has GRO on", peer.iface), nil
	}
	return Tx{}, problem, nil
}

// TxReadyLink gives TxState's answer, without its reason, from what the
// device's own namespace knows: the device is up with carrier (a veth has
// it while its peer is up) and the kernel's XDP features say it has an XDP
// transmit (a veth: while its peer runs an XDP program or GRO), and one
// for several buffers. No peer is looked for, so it is cheap enough to ask
// every second. known is false for a veth whose kernel does not say (no
// netdev netlink family, before 6.3): TxState then asks the peer. On such
// a kernel a device with a driver of its own is taken to take frames in one
// buffer, and virtual devices other than veths (bridge, macvlan, VXLAN, …)
// none.
func TxReadyLink(ns string, l netlink.Link) (tx Tx, known bool) {
	a := l.Attrs()
	if a.Flags&unix.IFF_UP == 0 || a.RawFlags&unix.IFF_LOWER_UP == 0 {
		return Tx{}, true
	}
	if feat, ok := xdpFeatures(ns, a.Index); ok {
		frames := feat&netdevXDPActNdoXmit != 0
		return Tx{Frames: frames, MultiBuffer: frames && feat&netdevXDPActNdoXmitSG != 0}, true
	}
	switch l.Type() {
	case "veth":
		return Tx{}, false
	case "device":
		return Tx{Frames: true}, true
	}
	return Tx{}, true
}

func inNS(ns, cmd string) string {
	if ns == "" {
		return cmd
	}
	return "ip netns exec " + ns + " " + cmd
}

type vethEnd struct {
	iface Iface
	link  netlink.Link
}

// vethPeer finds the other end of a veth: in the same namespace, or in one
// of the named namespaces under /run/netns or the init namespace, matched
// by the namespace ID the device's namespace gives it.
func vethPeer(i Iface, h *netlink.Handle, l netlink.Link) (*vethEnd, error) {
	a := l.Attrs()
	peerIdx := a.ParentIndex
	if peerIdx == 0 {
		idx, err := netlink.VethPeerIndex(&netlink.Veth{LinkAttrs: *a})
		if err != nil {
			return nil, nil
		}
		peerIdx = idx
	}
	if a.NetNsID < 0 {
		p, err := h.LinkByIndex(peerIdx)
		if err != nil {
			return nil, nil
		}
		return &vethEnd{Iface{Netns: i.Netns, Name: p.Attrs().Name}, p}, nil
	}
	// Which named namespace has that ID, as seen from the device's?
	names, _ := netns.List()
	candidates := append([]string{""}, names...)
	for _, n := range candidates {
		path := netns.Path(n)
		if n == "" {
			path = "/proc/1/ns/net"
		}
		id, err := nsidOf(i.Netns, path)
		if err != nil || id != a.NetNsID {
			continue
		}
		ph, err := netns.Handle(n)
		if err != nil {
			continue
		}
		p, err := ph.LinkByIndex(peerIdx)
		ph.Close()
		if err != nil {
			continue
		}
		return &vethEnd{Iface{Netns: n, Name: p.Attrs().Name}, p}, nil
	}
	return nil, nil
}

// nsidOf is the ID the namespace ns gives the namespace bind-mounted at path.
func nsidOf(ns, path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return -1, err
	}
	defer f.Close()
	id := -1
	err = netns.Run(ns, func() error {
		var err error
		id, err = netlink.GetNetNsIdByFd(int(f.Fd()))
		return err
	})
	return id, err
}

func groOn(i Iface) (bool, error) {
	var on bool
	err := netns.Run(i.Netns, func() error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer et.Close()
		f, err := et.Features(i.Name)
		if err != nil {
			return err
		}
		on = f["rx-gro"]
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("read GRO of %s: %w", i, err)
	}
	return on, nil
}

// AttachedMode is how an XDP program is attached to the device now, or ""
// if none is.
func AttachedMode(i Iface) (Mode, error) {
	a, err := Lookup(i)
	if err != nil {
		return "", err
	}
	if a.Xdp == nil || !a.Xdp.Attached {
		return "", nil
	}
	switch a.Xdp.AttachMode {
	case 2: // XDP_ATTACHED_SKB
		return Generic, nil
	default:
		return Native, nil
	}
}

// NetnsInode is the inode of a network namespace ("" is the caller's): how
// the kernel's own structures name it.
func NetnsInode(ns string) (uint64, error) {
	path := "/proc/self/ns/net"
	if ns != "" {
		path = netns.Path(ns)
		if !netns.Exists(ns) {
			return 0, fmt.Errorf("%s: %w", ns, netns.ErrNotExist)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Ino, nil
}

// ErrLinkGone is returned for a link pin whose device no longer exists.
var ErrLinkGone = errors.New("the device is gone")

// PinnedLinkState says where a device link pin is attached: ok, or
// ErrLinkGone when its device (or the device's namespace) was removed
// while the program was attached, which leaves the link defunct.
func PinnedLinkState(pin string) error {
	l, err := loadPinnedLink(pin)
	if err != nil {
		return err
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(pin), err)
	}
	if x := info.XDP(); x != nil && x.Ifindex == 0 {
		return ErrLinkGone
	}
	return nil
}

// Devices are the devices of a namespace but lo.
func Devices(ns string) ([]Iface, error) {
	h, err := netns.Handle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, err
	}
	var out []Iface
	for _, l := range links {
		if l.Attrs().Name != "lo" {
			out = append(out, Iface{Netns: ns, Name: l.Attrs().Name})
		}
	}
	return out, nil
}
