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
// that does not, the problem, naming the fix, as TxProblem gives it.
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
	peer, err := vethPeer(i, h, l)
	if err != nil {
		return false, "", err
	}
	peerName, fix := "(in a network namespace without a name here)", "turn GRO on there or attach an XDP program to it"
	if peer != nil {
		if peer.link.Attrs().Flags&unix.IFF_UP == 0 {
			return false, fmt.Sprintf("%s's peer %s is down: frames sent to %s are dropped; bring it up (%s)", i, peer.iface, i.Name, inNS(peer.iface.Netns, "ip link set "+peer.iface.Name+" up")), nil
		}
		if x := peer.link.Attrs().Xdp; x != nil && x.Attached {
			return true, fmt.Sprintf("its peer %s runs an XDP program", peer.iface), nil
		}
		peerName = peer.iface.String()
		fix = fmt.Sprintf("turn GRO on there (%s) or attach an XDP program to it", inNS(peer.iface.Netns, "ethtool -K "+peer.iface.Name+" gro on"))
	}
	problem := fmt.Sprintf("frames sent to %s are dropped: its peer %s runs neither an XDP program nor GRO; %s", i, peerName, fix)
	// The kernel says on this side whether the peer runs either: no need
	// to reach the peer, which may live where fastpath cannot look.
	ok, known, err := takesRedirects(i.Netns, a.Index)
	if err != nil {
		return false, "", err
	}
	switch {
	case known && ok && peer != nil:
		return true, fmt.Sprintf("its peer %s has GRO on", peer.iface), nil
	case known && ok:
		return true, "its peer runs an XDP program or GRO (the kernel says so; the peer is in a network namespace without a name here)", nil
	case known:
		return false, problem, nil
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
