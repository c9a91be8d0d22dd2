package xdp

import (
	"encoding/binary"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// The netdev netlink family (include/uapi/linux/netdev.h, Linux 6.3):
// what a device can do with XDP, as the kernel decides it per device.
const (
	netdevFamilyName      = "netdev"
	netdevFamilyVersion   = 1
	netdevGroupMgmt       = "mgmt" // device added, removed, changed
	netdevCmdDevGet       = 1
	netdevADevIfindex     = 1
	netdevADevXDPFeatures = 3
	netdevXDPActNdoXmit   = 1 << 2 // NETDEV_XDP_ACT_NDO_XMIT: takes redirected frames
)

// netdevFamily is the family's ID, asked once: it stays while the kernel runs.
var netdevFamily = sync.OnceValues(func() (*netlink.GenlFamily, error) {
	return netlink.GenlFamilyGet(netdevFamilyName)
})

// takesRedirects says whether the kernel lets the device take redirected
// XDP frames (NETDEV_XDP_ACT_NDO_XMIT: __xdp_enqueue drops frames to a
// device without it). A veth has it exactly while its peer runs an XDP
// program or GRO, wherever the peer lives. known is false when the kernel
// does not say (no netdev family, before Linux 6.3; a request that failed):
// the caller then asks the peer.
func takesRedirects(ns string, ifindex int) (ok, known bool) {
	fam, err := netdevFamily()
	if err != nil {
		return false, false
	}
	var msgs [][]byte
	err = netns.Run(ns, func() error {
		req := nl.NewNetlinkRequest(int(fam.ID), 0)
		req.AddData(&nl.Genlmsg{Command: netdevCmdDevGet, Version: netdevFamilyVersion})
		req.AddData(nl.NewRtAttr(netdevADevIfindex, nl.Uint32Attr(uint32(ifindex))))
		var err error
		msgs, err = req.Execute(unix.NETLINK_GENERIC, 0)
		return err
	})
	if err != nil {
		// Not an answer: the caller asks the peer instead.
		return false, false
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofGenlmsg:])
		if err != nil {
			return false, false
		}
		for _, a := range attrs {
			if a.Attr.Type == netdevADevXDPFeatures && len(a.Value) == 8 {
				return binary.NativeEndian.Uint64(a.Value)&netdevXDPActNdoXmit != 0, true
			}
		}
	}
	return false, false
}
