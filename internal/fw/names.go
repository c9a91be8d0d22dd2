package fw

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Rule names live in a map of their own, beside the rules: the program
// never reads them, so they are no part of its object (and cost the data
// path nothing), but they are pinned with the instance, so that every
// command and every exporter reads the names the running rules have, and a
// detach removes them with the rest. A rule's name is keyed as its
// counters are: its set's counter slot and its id (statsKey), so that a
// set built beside the running one names its rules without touching the
// running set's names.

// namesPin is the names map's pin in the instance's directory.
const namesPin = "fw_rule_names"

// ruleNameLen is a name's room: validRuleName allows 64 characters.
const ruleNameLen = 64

func namesSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{
		Name: namesPin, Type: ebpf.Hash, KeySize: 4, ValueSize: ruleNameLen,
		// Both slots' worth; without preallocation a set without names
		// costs nothing.
		MaxEntries: 2 << statsSlotShift, Flags: unix.BPF_F_NO_PREALLOC,
	}
}

// namesMap is the names map: created (and pinned) when create is set, else
// nil when the instance has none yet (no rule was ever named).
func (f *Firewall) namesMap(create bool) (*ebpf.Map, error) {
	if f.names != nil && (f.namesRW || !create) {
		return f.names, nil
	}
	if f.names != nil {
		f.names.Close() // read-only: opened again to write
		f.names = nil
	}
	var (
		m   *ebpf.Map
		err error
	)
	switch {
	case f.dir == "" && !create:
		return nil, nil
	case f.dir == "":
		m, err = ebpf.NewMap(namesSpec())
	case create:
		spec := namesSpec()
		spec.Pinning = ebpf.PinByName
		m, err = ebpf.NewMapWithOptions(spec, ebpf.MapOptions{PinPath: f.dir})
	default:
		m, err = ebpf.LoadPinnedMap(filepath.Join(f.dir, namesPin), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open the rule names: %w", err)
	}
	f.names, f.namesRW = m, create || f.dir == ""
	return m, nil
}

// writeNames gives a counter slot's rules their names: ids[i] is rules[i]'s
// id. With clear, the slot's other names go first (a set installed whole
// into it); otherwise they stay (rules added to the running set).
func (f *Firewall) writeNames(slot uint32, clear bool, ids []uint32, rules []Rule) error {
	need := f.names != nil
	if f.dir != "" {
		_, err := os.Stat(filepath.Join(f.dir, namesPin))
		need = need || err == nil
	}
	for _, r := range rules {
		need = need || r.Name != ""
	}
	if !need {
		return nil // no names, none to clear
	}
	m, err := f.namesMap(true)
	if err != nil {
		return err
	}
	if clear {
		var stale []uint32
		var k uint32
		var v [ruleNameLen]byte
		it := m.Iterate()
		for it.Next(&k, &v) {
			if k>>statsSlotShift == slot {
				stale = append(stale, k)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("read the rule names: %w", err)
		}
		for _, k := range stale {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("clear the rule names: %w", err)
			}
		}
	}
	for i, r := range rules {
		if r.Name == "" {
			continue
		}
		var v [ruleNameLen]byte
		copy(v[:], r.Name)
		if err := m.Put(statsKey(slot, int(ids[i])), v); err != nil {
			return fmt.Errorf("write rule name %q: %w", r.Name, err)
		}
	}
	return nil
}

// slotNames are the names of a counter slot, by rule id.
func (f *Firewall) slotNames(slot uint32) (map[uint32]string, error) {
	m, err := f.namesMap(false)
	if err != nil || m == nil {
		return nil, err
	}
	names := map[uint32]string{}
	var k uint32
	var v [ruleNameLen]byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		if k>>statsSlotShift != slot {
			continue
		}
		n := bytes.IndexByte(v[:], 0)
		if n < 0 {
			n = len(v)
		}
		names[k&(1<<statsSlotShift-1)] = string(v[:n])
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the rule names: %w", err)
	}
	return names, nil
}

// readNames fills in the names of rules of a counter slot, ids[i] being
// rules[i]'s id. The map holds the named rules alone: it is read whole
// rather than looked up for each of maybe 100,000 rules.
func (f *Firewall) readNames(slot uint32, ids []uint32, rules []Rule) error {
	names, err := f.slotNames(slot)
	if err != nil || len(names) == 0 {
		return err
	}
	for i := range rules {
		rules[i].Name = names[ids[i]]
	}
	return nil
}
