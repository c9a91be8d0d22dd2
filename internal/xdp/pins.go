package xdp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/fastpath-dev/fastpath/internal/netns"
)

// A network function instance keeps its maps and one link per device in a
// pin directory; the link pins are what keep the program attached.

// LinkPinName is the file name of a device's link pin: link_NAME, or
// link_NETNS:NAME for a device in a named namespace. Device names never hold
// a colon, so the last one splits the two (ParseLinkPinName).
func LinkPinName(i Iface) string {
	if i.Netns == "" {
		return "link_" + i.Name
	}
	return "link_" + i.Netns + ":" + i.Name
}

// ParseLinkPinName is the device a device pin name (link_ or behind_)
// stands for.
func ParseLinkPinName(name string) (Iface, bool) {
	rest, ok := strings.CutPrefix(name, "link_")
	if !ok {
		rest, ok = strings.CutPrefix(name, behindPrefix)
	}
	if !ok {
		return Iface{}, false
	}
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		return Iface{Netns: rest[:i], Name: rest[i+1:]}, true
	}
	return Iface{Name: rest}, true
}

// Links returns the device pins in a pin directory: the instance's own
// links (link_DEV) and those of the front it runs behind (behind_DEV).
func Links(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "link_") || strings.HasPrefix(e.Name(), behindPrefix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// PinOptions configure AttachPinned.
type PinOptions struct {
	Mode Mode
	// NoFallback forbids generic mode where native fails.
	NoFallback bool
	// Warn receives the fallback warning.
	Warn io.Writer
	// Generic, if set, gives the program for devices attached in generic
	// mode (chosen or fallen back to), where prog is for native mode: a
	// program on skbs may have to leave some things as the skb has them.
	Generic func() (*ebpf.Program, error)
	// Next, set by a front (the firewall), is its program array of next
	// programs by ifindex (pinned as FrontNext): where the front finds a
	// device held by another instance, it goes in front of it.
	Next *ebpf.Map
}

// progFor is the program for a device in the given mode.
func (o PinOptions) progFor(mode Mode, prog *ebpf.Program) (*ebpf.Program, error) {
	if mode != Generic || o.Generic == nil {
		return prog, nil
	}
	return o.Generic()
}

// AttachPinned attaches prog to each device and pins the links in dir. A
// device that already has a link there gets the program swapped in place,
// without a moment unattached; one whose link is defunct (the device was
// deleted and one of its name made since) is attached anew. A device that
// a front (the firewall) holds gets prog behind it; one that another
// instance holds, when this is a front (o.Next), gets the front put before
// it (see the chain in chain.go). On error what this call did is undone:
// the links it made are removed; the directory too if it holds no other.
func AttachPinned(dir string, devs []Iface, prog *ebpf.Program, o PinOptions) error {
	if o.Warn == nil {
		o.Warn = io.Discard
	}
	if o.Mode == "" {
		o.Mode = Native
	}
	var made []string
	var undo []func() error
	rollback := func(dir string, made []string) error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(append(errs, rollback(dir, made))...)
	}
	for _, d := range devs {
		pin := filepath.Join(dir, LinkPinName(d))
		for _, p := range []string{pin, filepath.Join(dir, BehindPinName(d))} {
			if errors.Is(PinnedLinkState(p), ErrLinkGone) {
				// The device was deleted (and this one made since): its link
				// went with it, and only the pin is left.
				if err := os.Remove(p); err != nil {
					return errors.Join(fmt.Errorf("remove the defunct link pin of %s: %w", d, err), rollback(dir, made))
				}
			}
		}
		if behind := filepath.Join(dir, BehindPinName(d)); fileExists(behind) {
			u, err := updateBehind(behind, d, prog)
			if err != nil {
				return errors.Join(err, rollback(dir, made))
			}
			undo = append(undo, u)
			continue
		}
		if !fileExists(pin) {
			if other := peer(dir, LinkPinName(d), 0); other != "" {
				var u func() error
				var err error
				switch {
				case o.Next == nil && isFront(filepath.Dir(other)):
					u, err = chainBehind(dir, d, other, prog)
				case o.Next != nil && !isFront(filepath.Dir(other)):
					u, err = takeOver(dir, d, other, prog, o.Next)
				default:
					err = fmt.Errorf("%s: %w: %s is attached there; detach it first", d, ErrChain, describe(filepath.Dir(other)))
				}
				if err != nil {
					return errors.Join(err, rollback(dir, made))
				}
				undo = append(undo, u)
				continue
			}
		}
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			u, release, err := updateLink(l, pin, d, prog, o)
			l.Close()
			if err != nil {
				return errors.Join(err, rollback(dir, made))
			}
			undo = append(undo, u)
			defer release()
			continue
		}
		if o.Next != nil {
			// A slot left filled for a device of another namespace with
			// this ifindex would hand this device's traffic to its program.
			a, err := Lookup(d)
			if err == nil {
				err = slotFor(o.Next, d, a.Index, false)
			}
			if err != nil {
				return errors.Join(err, rollback(dir, made))
			}
		}
		p, err := o.progFor(o.Mode, prog)
		if err != nil {
			return errors.Join(err, rollback(dir, made))
		}
		l, err := Attach(d, p, o.Mode)
		if errors.Is(err, ErrNativeUnsupported) && !o.NoFallback {
			fmt.Fprintf(o.Warn, "warning: %s has no native XDP; attaching in generic mode (slower). --mode native (xdp_mode = \"native\") forbids this.\n", d)
			if p, err = o.progFor(Generic, prog); err == nil {
				l, err = Attach(d, p, Generic)
			}
		}
		if err != nil {
			return errors.Join(err, rollback(dir, made))
		}
		err = l.Pin(pin)
		l.Close()
		if err != nil {
			return errors.Join(fmt.Errorf("pin the link of %s: %w", d, err), rollback(dir, made))
		}
		made = append(made, pin)
	}
	return nil
}

// updateLink swaps the program of a device's pinned link in place; it
// returns how to put the program it ran back, so that an attach failing on
// a later device leaves every device as it was (an upgrade whose maps are
// not yet pinned must not stay half done).
func updateLink(l link.Link, pin string, d Iface, prog *ebpf.Program, o PinOptions) (undo func() error, release func(), err error) {
	mode, err := AttachedMode(d)
	var p *ebpf.Program
	if err == nil {
		p, err = o.progFor(mode, prog)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("replace the program on %s: %w", d, err)
	}
	old, err := PinnedProgram(pin)
	if err != nil {
		return nil, nil, fmt.Errorf("replace the program on %s: %w", d, err)
	}
	if err := l.Update(p); err != nil {
		old.Close()
		return nil, nil, fmt.Errorf("replace the program on %s: %w", d, err)
	}
	// The old program's handle is kept for the undo, and let go when the
	// attach is done (closing twice is harmless).
	return func() error {
		l, err := link.LoadPinnedLink(pin, nil)
		if err != nil {
			return err
		}
		defer l.Close()
		return l.Update(old)
	}, func() { old.Close() }, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func rollback(dir string, pins []string) error {
	var errs []error
	for _, p := range pins {
		errs = append(errs, os.Remove(p))
	}
	if len(Links(dir)) == 0 {
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// DetachPinned removes the devices' link pins from dir (all of them if devs
// is empty), which detaches the program. In a chain, a front hands the
// device back to the program behind it and a back empties its slot behind
// the front. When no link is left, the whole directory goes, maps included,
// and so do root and its parent if empty. It returns ErrNotPinned for a
// device without a link in dir.
func DetachPinned(dir, root string, devs []Iface) error {
	var pins []string
	if len(devs) == 0 {
		pins = Links(dir)
	}
	for _, d := range devs {
		p := DevicePin(dir, d)
		if p == "" {
			return fmt.Errorf("%s: %w", d, ErrNotPinned)
		}
		pins = append(pins, p)
	}
	var errs []error
	for _, p := range pins {
		switch {
		case isBehind(p):
			errs = append(errs, detachBehind(p))
		case isFront(dir):
			errs = append(errs, detachFront(p))
		default:
			// Unpinning drops the last reference: the kernel detaches the program.
			errs = append(errs, os.Remove(p))
		}
	}
	if len(Links(dir)) == 0 {
		errs = append(errs, os.RemoveAll(dir))
		// The function's folder goes when empty; /sys/fs/bpf/fastpath above
		// stays: the services' sandboxes make it writable when they start
		// (ReadWritePaths=), and a service started before it was removed would
		// go on writing into a removed folder.
		RemoveIfEmpty(root)
	}
	return errors.Join(errs...)
}

// ErrNotPinned is returned for a device without a link pin.
var ErrNotPinned = errors.New("no link pinned for the device")

// RemoveIfEmpty removes a directory that holds nothing.
func RemoveIfEmpty(dir string) {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) == 0 {
		os.Remove(dir)
	}
}

// Instances lists the instance directories under a network function's pin
// root, sorted; none if the root does not exist.
func Instances(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, err
}

func loadPinnedLink(pin string) (link.Link, error) { return link.LoadPinnedLink(pin, nil) }

// PinnedProgram is the program a device's link pin holds attached, for
// test runs of what runs on the device; the caller closes it.
func PinnedProgram(pin string) (*ebpf.Program, error) {
	l, err := loadPinnedLink(pin)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(pin), err)
	}
	return ebpf.NewProgramFromID(info.Program)
}

// PinnedDevice is a device an instance has a link pin for, as it stands.
type PinnedDevice struct {
	Iface
	Mode Mode `json:"mode,omitempty"`
	// Gone says the device (or its namespace) was removed while attached:
	// the link is defunct, and only its pin and the maps are left.
	Gone bool `json:"gone,omitempty"`
	// Behind is the front this instance runs behind on the device ("fw
	// default"); Next the instance that runs behind this one there.
	Behind string `json:"behind,omitempty"`
	Next   string `json:"next,omitempty"`
}

// PinnedDevices lists the devices an instance directory has links for.
func PinnedDevices(dir string) ([]PinnedDevice, error) {
	var out []PinnedDevice
	for _, pin := range Links(dir) {
		i, ok := ParseLinkPinName(filepath.Base(pin))
		if !ok {
			continue
		}
		d := PinnedDevice{Iface: i}
		err := PinnedLinkState(pin)
		switch {
		case errors.Is(err, ErrLinkGone):
			d.Gone = true
		case err != nil:
			return nil, err
		case i.Netns != "" && !netns.Exists(i.Netns):
			d.Gone = true
		default:
			if m, err := AttachedMode(i); err == nil {
				d.Mode = m
			} else {
				d.Gone = true
			}
			d.Behind, d.Next = Chain(dir, i)
		}
		out = append(out, d)
	}
	return out, nil
}
