package netns

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// Veth makes a veth pair: devA in namespace nsA, its peer devB in nsB.
// Addresses, offloads and state are the caller's to set.
func Veth(nsA, devA, nsB, devB string) error {
	h, err := Handle(nsA)
	if err != nil {
		return err
	}
	defer h.Close()
	peer, err := FD(nsB)
	if err != nil {
		return err
	}
	defer peer.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: devA}, PeerName: devB, PeerNamespace: netlink.NsFd(int(peer))}
	if err := h.LinkAdd(v); err != nil {
		return fmt.Errorf("veth %s/%s ↔ %s/%s: %w", nsA, devA, nsB, devB, err)
	}
	return nil
}
