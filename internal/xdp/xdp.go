// Package xdp attaches XDP programs to interfaces in any network namespace
// through bpf links, so that a crashed process leaves nothing attached.
package xdp

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// Mode is how a program is attached.
type Mode string

const (
	// Native runs the program in the driver, before an skb exists.
	Native Mode = "native"
	// Generic runs it on skbs in the stack: works everywhere, slower.
	Generic Mode = "generic"
)

// ErrNoDevice is matched by errors.Is for a device that does not exist (a
// name looked up, or the device holding an address): a device that may yet
// appear, unlike a wrong configuration.
var ErrNoDevice = errors.New("no device")

// ErrNativeUnsupported is returned when the driver refuses native XDP.
var ErrNativeUnsupported = errors.New("native XDP not supported by the device")

// ErrDeviceHeld is returned when another XDP program holds the device.
var ErrDeviceHeld = errors.New("the device has another XDP program")

// ParseMode checks a mode given on the command line.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case Native, Generic:
		return Mode(s), nil
	}
	return "", fmt.Errorf("unknown XDP mode %q: use native or generic", s)
}

// Iface is an interface in a network namespace ("" is the caller's).
type Iface struct {
	Netns string `json:"netns,omitempty"`
	Name  string `json:"name"`
}

func (i Iface) String() string {
	if i.Netns == "" {
		return i.Name
	}
	return i.Netns + "/" + i.Name
}

// Lookup returns the interface's link attributes, or an error that names the
// interface and the namespace it was looked for in.
func Lookup(i Iface) (*netlink.LinkAttrs, error) {
	h, err := netns.Handle(i.Netns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(i.Name)
	if err != nil {
		where := "the current network namespace"
		if i.Netns != "" {
			where = "network namespace " + i.Netns
		}
		return nil, fmt.Errorf("interface %s not found in %s: %w", i.Name, where, ErrNoDevice)
	}
	return l.Attrs(), nil
}

// Attach attaches prog to the interface through a bpf link. The link lives as
// long as the returned handle (or its pin): close it to detach.
func Attach(i Iface, prog *ebpf.Program, mode Mode) (link.Link, error) {
	attrs, err := Lookup(i)
	if err != nil {
		return nil, err
	}
	flags := link.XDPDriverMode
	if mode == Generic {
		flags = link.XDPGenericMode
	}
	var l link.Link
	err = netns.Run(i.Netns, func() error {
		var err error
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: attrs.Index, Flags: flags})
		return err
	})
	if err != nil {
		if mode == Native && (errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EOPNOTSUPP)) {
			return nil, fmt.Errorf("attach XDP to %s: %w; attach in generic mode (--mode generic), or let fastpath fall back to it (--mode auto, xdp_mode = \"auto\"; xdp_mode = \"native\" falls back no more)", i, ErrNativeUnsupported)
		}
		// What a veth says when its peer's MTU allows frames longer than a
		// page (they come in several buffers) and the program cannot take
		// them ("Peer MTU is too large to set XDP", in the extack the link
		// API does not return).
		if mode == Native && errors.Is(err, unix.ERANGE) {
			return nil, fmt.Errorf("attach XDP to %s: %w: the MTU of its peer allows frames longer than a page, and only a frags-aware program (SEC(\"xdp.frags\")) takes those: lower the MTU or load such a program", i, err)
		}
		// EBUSY: a program is there already in this mode; EEXIST: one is
		// there in the other mode (native and generic exclude each other).
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			if h, herr := HolderOf(i); herr == nil && h != nil {
				return nil, fmt.Errorf("attach XDP (%s mode) to %s: %w (%w): %s", mode, i, ErrDeviceHeld, err, h.describe(i))
			}
		}
		return nil, fmt.Errorf("attach XDP (%s mode) to %s: %w", mode, i, err)
	}
	return l, nil
}

// IsVeth says the interface is one end of a veth pair.
func IsVeth(i Iface) bool {
	h, err := netns.Handle(i.Netns)
	if err != nil {
		return false
	}
	defer h.Close()
	l, err := h.LinkByName(i.Name)
	return err == nil && l.Type() == "veth"
}
