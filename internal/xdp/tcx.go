package xdp

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// AttachTCX attaches prog at a device's TCX hook (ingress or egress, by at)
// through a link pinned at pin; a link already pinned there gets the
// program swapped in place. ifindex is the device's, in its namespace.
func AttachTCX(pin string, i Iface, ifindex int, prog *ebpf.Program, at ebpf.AttachType) error {
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		err = l.Update(prog)
		l.Close()
		if err != nil {
			return fmt.Errorf("swap %s on %s (%s): %w", prog, i, at, err)
		}
		return nil
	}
	var l link.Link
	err := netns.Run(i.Netns, func() error {
		var err error
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: at})
		return err
	})
	if err != nil {
		return fmt.Errorf("attach %s to %s (%s): %w", prog, i, at, err)
	}
	defer l.Close()
	if err := l.Pin(pin); err != nil {
		return fmt.Errorf("pin %s's link on %s: %w", prog, i, err)
	}
	return nil
}
