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

// TxProblem says why XDP frames sent to the device (XDP_TX, or a redirect)
// would be dropped without an error reaching the program, or "" if nothing
// is known to stop them: the device is down, or it is a veth whose peer
// runs neither an XDP program nor GRO (a veth hands XDP frames to its
// peer's NAPI poll, which only those two turn on). The answer names the
// fix.
func TxProblem(i Iface) (string, error) {
	ok, why, err := TxState(i)
	if ok || err != nil {
		return "", err
	}
	return why, nil
}

// TxState says whether the device takes XDP frames, and why: for a device
// that does, what makes it (for a log line when that changes); for one
// that does not, the problem, naming the fix, as TxProblem gives it. The
// answer is TxReady's where that knows; the peer of a veth is looked for
// only to name it.
func TxState(i Iface) (ok bool, why string, err error) {
	h, err := netns.Handle(i.Netns)
	if err != nil {
		return false, "", err
	}
	defer h.Close()
	l, err := h.LinkByName(i.Name)
	if err != nil {
		return false, "", fmt.Errorf("interface %s: %w", i, err)
	}
	a := l.Attrs()
	if a.Flags&unix.IFF_UP == 0 {
		return false, fmt.Sprintf("%s is down: frames sent to it are dropped; bring it up (ip link set %s up)", i, i.Name), nil
	}
	if l.Type() != "veth" {
		return true, "it is up and not a veth", nil
	}
	ready, known := TxReadyLink(i.Netns, l)
	peer, err := vethPeer(i, h, l)
	if err != nil {
		return false, "", err
	}
	peerName, up, fix := "(in a network namespace without a name here)", "bring it up", "turn GRO on there or attach an XDP program to it"
	if peer != nil {
		peerName = peer.iface.String()
		up = fmt.Sprintf("bring it up (%s)", inNS(peer.iface.Netns, "ip link set "+peer.iface.Name+" up"))
		fix = fmt.Sprintf("turn GRO on there (%s) or attach an XDP program to it", inNS(peer.iface.Netns, "ethtool -K "+peer.iface.Name+" gro on"))
	}
	if a.RawFlags&unix.IFF_LOWER_UP == 0 {
		// A veth has carrier exactly while its peer is up too.
		return false, fmt.Sprintf("%s's peer %s is down: frames sent to %s are dropped; %s", i, peerName, i.Name, up), nil
	}
	problem := fmt.Sprintf("frames sent to %s are dropped: its peer %s runs neither an XDP program nor GRO; %s", i, peerName, fix)
	peerXDP := peer != nil && peer.link.Attrs().Xdp != nil && peer.link.Attrs().Xdp.Attached
	switch {
	case known && !ready:
		return false, problem, nil
	case known && peerXDP:
		return true, fmt.Sprintf("its peer %s runs an XDP program", peer.iface), nil
	case known && peer != nil:
		return true, fmt.Sprintf("its peer %s has GRO on", peer.iface), nil
	case known:
		return true, "its peer runs an XDP program or GRO (the kernel says so; the peer is in a network namespace without a name here)", nil
	case peerXDP:
		return true, fmt.Sprintf("its peer %s runs an XDP program", peer.iface), nil
	case peer == nil:
		return true, "its peer lives in a network namespace without a name here, so fastpath cannot look: assumed to take them", nil
	}
	// A kernel without the netdev family (before 6.3): ask the peer.
	gro, err := groOn(peer.iface)
	if err != nil {
		return false, "", err
	}
	if gro {
		return true, fmt.Sprintf("its peer %s has GRO on", peer.iface), nil
	}
	return false, problem, nil
}

// TxReadyLink gives TxState's answer, without its reason, from what the
// device's own namespace knows: the device is up and, for a veth, has
// carrier (its peer is up) and the kernel's NDO_XMIT feature (its peer runs
// an XDP program or GRO). No peer is looked for, so it is cheap enough to
// ask every second. known is false for a veth whose kernel does not say
// (no netdev netlink family, before 6.3): TxState then asks the peer.
func TxReadyLink(ns string, l netlink.Link) (ok, known bool) {
	a := l.Attrs()
	if a.Flags&unix.IFF_UP == 0 {
		return false, true
	}
	if l.Type() != "veth" {
		return true, true
	}
	if a.RawFlags&unix.IFF_LOWER_UP == 0 {
		return false, true
	}
	return takesRedirects(ns, a.Index)
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
