package xdp

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// HostWatch tells when something changed in a network namespace that may
// change which of its devices take XDP frames, where its next hops lead or
// which addresses are its own: a device added, removed, up, down or losing
// carrier (a veth does when its peer goes down), an address, a route, a
// device's forwarding setting, and the XDP features of a device. The last
// is how a change at a veth's peer shows on this side: the kernel gives a
// veth the feature of taking redirected frames (NETDEV_XDP_ACT_NDO_XMIT)
// while its peer runs an XDP program or GRO, and tells the veth's own
// namespace when that changes, wherever the peer lives.
//
// It says only that something changed, never what: the caller looks again.
// The sockets it holds keep the namespace alive; close it when the
// namespace goes.
type HostWatch struct {
	// C receives a value after one or more changes; values are not queued
	// beyond one.
	C <-chan struct{}
	// Features says whether XDP feature changes are seen (the kernel's
	// netdev netlink family, Linux 6.3 and later).
	Features bool

	c      chan struct{}
	socks  []*nl.NetlinkSocket
	closed atomic.Bool
	wg     sync.WaitGroup
}

// rtnlGroups are the rtnetlink groups HostWatch listens to.
var rtnlGroups = []uint{
	unix.RTNLGRP_LINK,
	unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR,
	unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE,
	unix.RTNLGRP_IPV4_NETCONF, unix.RTNLGRP_IPV6_NETCONF,
}

// WatchHost starts watching a namespace ("" is the caller's). A socket
// that fails after the start is reported to onErr (if set) and no longer
// read; what it would have told must then be found by looking again
// periodically.
func WatchHost(ns string, onErr func(error)) (*HostWatch, error) {
	c := make(chan struct{}, 1)
	w := &HostWatch{C: c, c: c}
	fam, ferr := netdevFamily()
	err := netns.Run(ns, func() error {
		s, err := nl.Subscribe(unix.NETLINK_ROUTE, rtnlGroups...)
		if err != nil {
			return fmt.Errorf("listen to rtnetlink: %w", err)
		}
		w.socks = append(w.socks, s)
		if ferr != nil {
			return nil // no netdev family: feature changes go unseen
		}
		for _, g := range fam.Groups {
			if g.Name != netdevGroupMgmt {
				continue
			}
			s, err := nl.Subscribe(unix.NETLINK_GENERIC)
			if err != nil {
				return fmt.Errorf("listen to the netdev netlink family: %w", err)
			}
			w.socks = append(w.socks, s)
			if err := unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, int(g.ID)); err != nil {
				return fmt.Errorf("join the netdev family's mgmt group: %w", err)
			}
			w.Features = true
		}
		return nil
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("watch %s: %w", nsLabel(ns), err)
	}
	for _, s := range w.socks {
		w.wg.Add(1)
		go w.read(s, onErr)
	}
	return w, nil
}

func (w *HostWatch) read(s *nl.NetlinkSocket, onErr func(error)) {
	defer w.wg.Done()
	for {
		_, _, err := s.Receive()
		if w.closed.Load() {
			return
		}
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOBUFS):
			// The socket's queue overflowed: changes were lost, so
			// look again, as for any change.
		default:
			if onErr != nil {
				onErr(fmt.Errorf("netlink events: %w", err))
			}
			return
		}
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}

// Close stops the watch and releases the namespace.
func (w *HostWatch) Close() {
	if w.closed.Swap(true) {
		return
	}
	for _, s := range w.socks {
		s.Close()
	}
	w.wg.Wait()
}

func nsLabel(ns string) string {
	if ns == "" {
		return "this network namespace"
	}
	return "network namespace " + ns
}
