package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// The chain: a front network function (the firewall) runs first on a device
// and hands what it passes to the program of a back one (the border router,
// the translator) by a tail call through its program array FrontNext, whose
// slot is the device's ifindex. The device's one XDP link belongs to the
// front and is pinned in its instance directory as link_DEV; the back
// instance pins the same link as behind_DEV, which says "my program runs on
// DEV behind the front whose link this is". Each side finds the other by
// these pins alone (a restarted process, br serve's keeper), so the order of
// attaching and detaching does not matter:
//
//   - a front attached where a back has the link takes the link over: the
//     back's program goes into the slot first, then the link is updated to
//     the front's program (no moment without either), and the back's pin
//     is renamed behind_DEV;
//   - a back attached where a front has the link fills the slot;
//   - a front detached hands the link back (updated to the slot's program,
//     the back's pin renamed link_DEV), a back detached empties the slot.
//
// A tail call needs programs of one kind: both are loaded frags-aware for
// native mode; chains in generic mode are refused.

// FrontNext is the pin name of a front's program array of next programs.
const FrontNext = "fw_next"

// behindPrefix names the pin of a back's program running behind a front.
const behindPrefix = "behind_"

// BehindPinName is the pin name of a device a back runs on behind a front.
func BehindPinName(i Iface) string { return behindPrefix + strings.TrimPrefix(LinkPinName(i), "link_") }

// ErrChain is matched by errors.Is for a chain that cannot be made.
var ErrChain = errors.New("cannot chain")

// DevicePin is the pin that holds the device for the instance in dir: its
// own link (link_DEV) or the front's it runs behind (behind_DEV); "" if none.
func DevicePin(dir string, i Iface) string {
	for _, name := range []string{LinkPinName(i), BehindPinName(i)} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func isBehind(pin string) bool { return strings.HasPrefix(filepath.Base(pin), behindPrefix) }

// base is the directory above every network function's pin root
// (/sys/fs/bpf/fastpath) for an instance directory under one of them.
func base(dir string) string { return filepath.Dir(filepath.Dir(dir)) }

// isFront says an instance directory is a front's.
func isFront(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, FrontNext))
	return err == nil
}

// linkID is the ID of the link a pin holds, and the ifindex of its device
// (0 when the device is gone).
func linkID(pin string) (link.ID, int, error) {
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		return 0, 0, err
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", filepath.Base(pin), err)
	}
	ifindex := 0
	if x := info.XDP(); x != nil {
		ifindex = int(x.Ifindex)
	}
	return info.ID, ifindex, nil
}

// peer finds the other instance's pin named name that holds the link with
// id (any id if 0), other than dir's; "" if none. Defunct links are no
// peers: their devices are gone.
func peer(dir, name string, id link.ID) string {
	pins, _ := filepath.Glob(filepath.Join(base(dir), "*", "*", name))
	for _, p := range pins {
		if filepath.Dir(p) == dir {
			continue
		}
		got, ifindex, err := linkID(p)
		if err != nil || ifindex == 0 || (id != 0 && got != id) {
			continue
		}
		return p
	}
	return ""
}

// describe names an instance directory as "NF NAME" (fw default).
func describe(dir string) string {
	return filepath.Base(filepath.Dir(dir)) + " " + filepath.Base(dir)
}

// nextMap opens a front's program array.
func nextMap(frontDir string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(frontDir, FrontNext), nil)
	if err != nil {
		return nil, fmt.Errorf("open the next-program array of %s: %w", describe(frontDir), err)
	}
	return m, nil
}

// slotFor checks that a device can have a slot in a front's array: its
// ifindex fits, and no device of another namespace with the same ifindex
// holds it (except expect, the program the slot may already hold).
func slotFor(next *ebpf.Map, d Iface, ifindex int, allowTaken bool) error {
	if ifindex <= 0 || uint32(ifindex) >= next.MaxEntries() {
		return fmt.Errorf("%s: %w: its ifindex %d does not fit the firewall's table of %d next programs", d, ErrChain, ifindex, next.MaxEntries())
	}
	if allowTaken {
		return nil
	}
	var id uint32
	if err := next.Lookup(uint32(ifindex), &id); err == nil {
		return fmt.Errorf("%s: %w: a device of another namespace with the same ifindex %d already has a program behind the same firewall instance: use another firewall instance (--name) for one of them", d, ErrChain, ifindex)
	}
	return nil
}

// requireNative refuses a chain on a device attached in generic mode.
func requireNative(d Iface) error {
	mode, err := AttachedMode(d)
	if err != nil {
		return err
	}
	if mode == Generic {
		return fmt.Errorf("%s: %w: it runs XDP in generic mode, and the firewall goes in front of another program in native mode only: attach both in native mode", d, ErrChain)
	}
	return nil
}

// chainBehind makes prog run behind the front that holds frontPin's link
// on d: it fills the front's slot and pins the link in dir as behind_DEV.
// It returns how to undo it.
func chainBehind(dir string, d Iface, frontPin string, prog *ebpf.Program) (func() error, error) {
	if err := requireNative(d); err != nil {
		return nil, err
	}
	a, err := Lookup(d)
	if err != nil {
		return nil, err
	}
	next, err := nextMap(filepath.Dir(frontPin))
	if err != nil {
		return nil, err
	}
	defer next.Close()
	if err := slotFor(next, d, a.Index, false); err != nil {
		return nil, err
	}
	l, err := link.LoadPinnedLink(frontPin, nil)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if err := next.Put(uint32(a.Index), prog); err != nil {
		return nil, fmt.Errorf("%s: put the program behind %s: %w", d, describe(filepath.Dir(frontPin)), err)
	}
	pin := filepath.Join(dir, BehindPinName(d))
	if err := pinAgain(l, pin); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: pin the chain: %w", d, err), next.Delete(uint32(a.Index)))
	}
	undo := func() error {
		next, err := nextMap(filepath.Dir(frontPin))
		if err != nil {
			return err
		}
		defer next.Close()
		return errors.Join(next.Delete(uint32(a.Index)), os.Remove(pin))
	}
	return undo, nil
}

// updateBehind swaps the program a back runs behind a front (pin is its
// behind_DEV), for an attach again; it returns how to undo it.
func updateBehind(pin string, d Iface, prog *ebpf.Program) (func() error, error) {
	id, ifindex, err := linkID(pin)
	if err != nil {
		return nil, err
	}
	front := peer(filepath.Dir(pin), LinkPinName(d), id)
	if front == "" || ifindex == 0 {
		return nil, fmt.Errorf("%s: the firewall this runs behind is gone: detach and attach again", d)
	}
	next, err := nextMap(filepath.Dir(front))
	if err != nil {
		return nil, err
	}
	defer next.Close()
	var old *ebpf.Program
	var oldID uint32
	if err := next.Lookup(uint32(ifindex), &oldID); err == nil {
		old, _ = ebpf.NewProgramFromID(ebpf.ProgramID(oldID))
	}
	if err := next.Put(uint32(ifindex), prog); err != nil {
		if old != nil {
			old.Close()
		}
		return nil, fmt.Errorf("%s: replace the program behind %s: %w", d, describe(filepath.Dir(front)), err)
	}
	return func() error {
		if old == nil {
			return nil
		}
		defer old.Close()
		next, err := nextMap(filepath.Dir(front))
		if err != nil {
			return err
		}
		defer next.Close()
		return next.Put(uint32(ifindex), old)
	}, nil
}

// takeOver puts the front's prog on d where backPin's instance has the link:
// the back's program goes into the front's slot, then the link runs prog,
// then the pins say so. It returns how to undo it.
func takeOver(dir string, d Iface, backPin string, prog *ebpf.Program, next *ebpf.Map) (func() error, error) {
	if err := requireNative(d); err != nil {
		return nil, err
	}
	a, err := Lookup(d)
	if err != nil {
		return nil, err
	}
	if err := slotFor(next, d, a.Index, false); err != nil {
		return nil, err
	}
	back, err := PinnedProgram(backPin)
	if err != nil {
		return nil, err
	}
	defer back.Close()
	l, err := link.LoadPinnedLink(backPin, nil)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if err := next.Put(uint32(a.Index), back); err != nil {
		return nil, fmt.Errorf("%s: put the program of %s behind the firewall: %w", d, describe(filepath.Dir(backPin)), err)
	}
	slot := func() error { return next.Delete(uint32(a.Index)) }
	if err := l.Update(prog); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: put the firewall in front of %s: %w", d, describe(filepath.Dir(backPin)), err), slot())
	}
	restore := func() error { return l.Update(back) }
	pin := filepath.Join(dir, LinkPinName(d))
	if err := pinAgain(l, pin); err != nil {
		return nil, errors.Join(fmt.Errorf("pin the link of %s: %w", d, err), restore(), slot())
	}
	behind := filepath.Join(filepath.Dir(backPin), BehindPinName(d))
	if err := os.Rename(backPin, behind); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: record the chain: %w", d, err), os.Remove(pin), restore(), slot())
	}
	// The handles close on return; the undo opens what it needs again.
	backID, _ := back.Info()
	nextPath := filepath.Join(dir, FrontNext)
	return func() error {
		var errs []error
		if id, ok := backID.ID(); ok {
			if p, err := ebpf.NewProgramFromID(id); err == nil {
				if l, err := link.LoadPinnedLink(pin, nil); err == nil {
					errs = append(errs, l.Update(p))
					l.Close()
				}
				p.Close()
			}
		}
		errs = append(errs, os.Rename(behind, backPin), os.Remove(pin))
		if m, err := ebpf.LoadPinnedMap(nextPath, nil); err == nil {
			errs = append(errs, m.Delete(uint32(a.Index)))
			m.Close()
		}
		return errors.Join(errs...)
	}, nil
}

// detachBehind takes a back's program from behind the front on the device
// of pin (behind_DEV): the slot is emptied, so the front passes to the
// kernel again, and the pin goes.
func detachBehind(pin string) error {
	d, _ := ParseLinkPinName(filepath.Base(pin))
	id, ifindex, err := linkID(pin)
	if err == nil && ifindex != 0 {
		if front := peer(filepath.Dir(pin), LinkPinName(d), id); front != "" {
			next, err := nextMap(filepath.Dir(front))
			if err != nil {
				return err
			}
			err = next.Delete(uint32(ifindex))
			next.Close()
			if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("%s: empty the slot behind %s: %w", d, describe(filepath.Dir(front)), err)
			}
		}
	}
	return os.Remove(pin)
}

// detachFront removes a front's link pin of a device; when a back runs
// behind it there, the link is handed back to the back's program first.
func detachFront(pin string) error {
	d, _ := ParseLinkPinName(filepath.Base(pin))
	id, ifindex, err := linkID(pin)
	if err != nil || ifindex == 0 {
		return os.Remove(pin)
	}
	back := peer(filepath.Dir(pin), BehindPinName(d), id)
	if back == "" {
		return os.Remove(pin)
	}
	next, err := nextMap(filepath.Dir(pin))
	if err != nil {
		return err
	}
	defer next.Close()
	var progID uint32
	if err := next.Lookup(uint32(ifindex), &progID); err != nil {
		return fmt.Errorf("%s: the program of %s behind the firewall is missing: %w", d, describe(filepath.Dir(back)), err)
	}
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(progID))
	if err != nil {
		return err
	}
	defer prog.Close()
	own, err := PinnedProgram(pin)
	if err != nil {
		return err
	}
	defer own.Close()
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		return err
	}
	defer l.Close()
	// The link runs the back's program from here on: no moment without it.
	if err := l.Update(prog); err != nil {
		return fmt.Errorf("%s: hand the device back to %s: %w", d, describe(filepath.Dir(back)), err)
	}
	if err := os.Rename(back, filepath.Join(filepath.Dir(back), LinkPinName(d))); err != nil {
		return errors.Join(fmt.Errorf("%s: record the hand-back: %w", d, err), l.Update(own))
	}
	return errors.Join(os.Remove(pin), ignoreMissing(next.Delete(uint32(ifindex))))
}

// pinAgain pins a link at a second path. A handle loaded from a pin would
// move that pin (cilium/ebpf renames it), so a fresh one from the ID pins.
func pinAgain(l link.Link, path string) error {
	info, err := l.Info()
	if err != nil {
		return err
	}
	fresh, err := link.NewFromID(info.ID)
	if err != nil {
		return err
	}
	defer fresh.Close()
	return fresh.Pin(path)
}

func ignoreMissing(err error) error {
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// Chain says what else runs on an instance's device: the front it runs
// behind, or the back that runs behind it ("fw default", "br 1-ff00_0_110").
func Chain(dir string, i Iface) (front, back string) {
	pin := DevicePin(dir, i)
	if pin == "" {
		return "", ""
	}
	id, _, err := linkID(pin)
	if err != nil {
		return "", ""
	}
	if isBehind(pin) {
		if p := peer(dir, LinkPinName(i), id); p != "" {
			return describe(filepath.Dir(p)), ""
		}
		return "", ""
	}
	if p := peer(dir, BehindPinName(i), id); p != "" {
		return "", describe(filepath.Dir(p))
	}
	return "", ""
}
