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
	netdevXDPActNdoXmitSG = 1 << 6 // NETDEV_XDP_ACT_NDO_XMIT_SG: also in several buffers
)

// netdevFamily is the family's ID, asked once: it stays while the kernel runs.
var netdevFamily = sync.OnceValues(func() (*netlink.GenlFamily, error) {
	return netlink.GenlFamilyGet(netdevFamilyName)
})

// xdpFeatures are the device's XDP features (NETDEV_XDP_ACT_*) as the
// kernel states them: among them whether it takes redirected XDP frames
// (NDO_XMIT: __xdp_enqueue drops frames to a device without it) and frames
// in several buffers (NDO_XMIT_SG). A veth has both exactly while its peer
// runs an XDP program or GRO, wherever the peer lives; a bridge, macvlan or
// VXLAN device never; a NIC driver as its driver says (some only while an
// XDP program of their own is attached). known is false when the kernel
// does not say (no netdev family, before Linux 6.3; a request that failed).
func xdpFeatures(ns string, ifindex int) (feat uint64, known bool) {
	fam, err := netdevFamily()
	if err != nil {
		return 0, false
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
		return 0, false
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofGenlmsg:])
		if err != nil {
			return 0, false
		}
		for _, a := range attrs {
			if a.Attr.Type == netdevADevXDPFeatures && len(a.Value) == 8 {
				return binary.NativeEndian.Uint64(a.Value), true
			}
		}
	}
	return 0, false
}
