package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
)

// An upgrade (or a rollback) loads another release's programs over an
// instance whose maps are pinned. Maps whose layout both releases share are
// reused as they are. A map whose pin no longer fits the new spec (its value
// grew or shrank, its max_entries changed, its key changed) is migrated:
//
//  1. PrepareMigration reads every such pinned map, converts each entry to
//     the new layout and checks it fits, before anything is made: a map that
//     cannot be carried over is refused by name, and nothing has changed;
//  2. it makes the new maps, unpinned, and fills them; the caller loads its
//     collection with Replacements() instead of the pins and swaps the
//     program on every device (link.Update: the old program runs until the
//     swap, on the old maps);
//  3. Commit copies again, for hash maps, the entries the old program added
//     between the first copy and the swap (new connections, flows), then
//     renames the new maps' pins (made beside the old ones in step 2) over
//     the old ones. Close without Commit leaves the pins
//     as they were: the old program goes on with its maps.
//
// What is lost: updates of entries that existed at the first copy, made by
// the old program before the swap (a connection's state change), and
// entries it deleted then (they come back and expire as usual). Arrays are
// copied once: after the swap the new program owns them. Maps of counters
// (MigrateOptions.Counters) lose nothing of the kind: the commit adds what
// the old program counted since the copy; only what the new program counts
// while the commit rewrites an entry (microseconds) can be lost.
//
// Per map type:
//   - hashes, LRU hashes, arrays, LPM tries and their per-CPU kinds: entry by
//     entry, the value converted (per CPU for per-CPU maps);
//   - maps of maps and program arrays: the inner maps and programs are put
//     into the new map (an inner map of another layout is refused by the
//     kernel, and so the migration);
//   - device maps with bare ifindexes: copied; device maps with programs,
//     CPU maps, XSK and socket maps, ring buffers and perf event arrays are
//     made empty: they hold what the function's attach fills again, or
//     nothing to copy.

// ErrMigration is matched by errors.Is for pinned maps that cannot be
// carried into the layout of the programs being loaded.
var ErrMigration = errors.New("the pinned maps cannot be carried over")

// KeyConversion turns one entry of a map whose key size changed into the
// new layout; keep false drops it.
type KeyConversion func(key, value []byte) (newKey, newValue []byte, keep bool, err error)

// MigrateOptions configure PrepareMigration.
type MigrateOptions struct {
	// Convert holds the conversions of maps whose key changed, by name.
	Convert map[string]KeyConversion
	// Afresh names maps made empty, rather than refused, when their
	// entries cannot be carried over: those the function fills again.
	Afresh map[string]bool
	// Counters names maps whose values are 64-bit counters, nothing else,
	// that only grow: at the commit, what the old program added to them
	// since the copy is added to the new map, so that no count is lost.
	Counters map[string]bool
	// Warn receives what is not carried over.
	Warn io.Writer
}

// Migration is a prepared move of an instance's pinned maps to a new
// layout; see PrepareMigration.
type Migration struct {
	dir       string
	moves     []*move
	warn      io.Writer
	committed bool
}

// move is one pinned map being carried into a new one.
type move struct {
	name     string
	old, new *ebpf.Map
	kind     copyKind
	convert  func(k, v []byte) ([]byte, []byte, bool, error)
	perCPU   bool
	ncpu     int
	isHash   bool
	oldValue int
	// snapshot holds, for a map of counters, each entry's old values as
	// copied (by key; one per CPU), to add what came since at the commit.
	snapshot map[string][][]byte
}

type copyKind int

const (
	copyBytes copyKind = iota
	copyMaps
	copyPrograms
	copyNothing
)

// entry is one converted entry: raw bytes, or a held map or program.
type entry struct {
	key   []byte
	value []byte   // copyBytes, not per-CPU
	cpus  [][]byte // copyBytes, per-CPU
	fd    interface{ Close() error }
}

// PrepareMigration checks every map of spec pinned by name in dir against
// its pin and prepares the migration of those that no longer fit (nil if
// none). It changes nothing that a program or a pin sees; Close releases
// what it made.
func PrepareMigration(spec *ebpf.CollectionSpec, dir string, o MigrateOptions) (*Migration, error) {
	if o.Warn == nil {
		o.Warn = io.Discard
	}
	names := make([]string, 0, len(spec.Maps))
	for name, ms := range spec.Maps {
		if ms.Pinning == ebpf.PinByName {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	mig := &Migration{dir: dir, warn: o.Warn}
	type planned struct {
		mv      *move
		spec    *ebpf.MapSpec
		entries []entry
	}
	var plans []planned
	fail := func(err error) (*Migration, error) {
		for _, p := range plans {
			p.mv.old.Close()
			for _, e := range p.entries {
				if e.fd != nil {
					e.fd.Close()
				}
			}
		}
		return nil, err
	}
	for _, name := range names {
		ms := spec.Maps[name]
		pin := filepath.Join(dir, name)
		old, err := ebpf.LoadPinnedMap(pin, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("open the pinned map %s: %w", pin, err))
		}
		cerr := ms.Compatible(old)
		if cerr == nil {
			old.Close()
			continue
		}
		mv, err := planMove(name, ms, old, o)
		if err == nil {
			var entries []entry
			entries, err = mv.read(old, ms)
			if err == nil {
				fmt.Fprintf(o.Warn, "%s: carried into this release's layout (%v)\n", pin, cerr)
				plans = append(plans, planned{mv, ms, entries})
				continue
			}
		}
		if o.Afresh[name] {
			fmt.Fprintf(o.Warn, "%s: made empty in the new layout (%v); it is filled again\n", pin, err)
			mv = &move{name: name, old: old, kind: copyNothing}
			plans = append(plans, planned{mv, ms, nil})
			continue
		}
		old.Close()
		return fail(fmt.Errorf("%w: %s (%v): %w", ErrMigration, pin, cerr, err))
	}
	// Everything read and checked: make the new maps.
	for i, p := range plans {
		s := p.spec.Copy()
		s.Pinning = ebpf.PinNone
		m, err := ebpf.NewMap(s)
		if err == nil {
			p.mv.new = m
			err = p.mv.write(m, p.entries)
		}
		if err != nil {
			for _, q := range plans[:i+1] {
				if q.mv.new != nil {
					q.mv.new.Close()
				}
			}
			return fail(fmt.Errorf("%w: fill the new %s: %w", ErrMigration, p.mv.name, err))
		}
		for _, e := range p.entries {
			if e.fd != nil {
				e.fd.Close()
			}
		}
		plans[i].entries = nil
		mig.moves = append(mig.moves, p.mv)
	}
	if len(mig.moves) == 0 {
		return nil, nil
	}
	// Pinned beside the old ones now, so that after the swap only renames
	// are left to do.
	for _, mv := range mig.moves {
		if err := pinBeside(dir, mv.name, mv.new); err != nil {
			mig.Close()
			return nil, fmt.Errorf("%w: %w", ErrMigration, err)
		}
	}
	return mig, nil
}

// planMove decides how a pinned map that does not fit ms is carried over.
func planMove(name string, ms *ebpf.MapSpec, old *ebpf.Map, o MigrateOptions) (*move, error) {
	mv := &move{name: name, old: old, oldValue: int(old.ValueSize())}
	if old.Type() != ms.Type {
		return nil, fmt.Errorf("its type changed from %s to %s", old.Type(), ms.Type)
	}
	switch ms.Type {
	case ebpf.ArrayOfMaps, ebpf.HashOfMaps:
		mv.kind = copyMaps
	case ebpf.ProgramArray:
		mv.kind = copyPrograms
	case ebpf.DevMap, ebpf.DevMapHash:
		if old.ValueSize() != 4 || ms.ValueSize != 4 || old.KeySize() != ms.KeySize {
			mv.kind = copyNothing
		}
	case ebpf.Hash, ebpf.LRUHash, ebpf.Array, ebpf.LPMTrie, ebpf.PerCPUHash, ebpf.LRUCPUHash, ebpf.PerCPUArray:
	default:
		mv.kind = copyNothing
	}
	switch ms.Type {
	case ebpf.PerCPUHash, ebpf.LRUCPUHash, ebpf.PerCPUArray:
		n, err := ebpf.PossibleCPU()
		if err != nil {
			return nil, err
		}
		mv.perCPU, mv.ncpu = true, n
	}
	switch ms.Type {
	case ebpf.Array, ebpf.PerCPUArray, ebpf.ArrayOfMaps, ebpf.ProgramArray, ebpf.DevMap:
	default:
		mv.isHash = true
	}
	if mv.kind == copyNothing {
		return mv, nil
	}
	newValue := int(ms.ValueSize)
	if old.KeySize() != ms.KeySize {
		conv, ok := o.Convert[name]
		if !ok || mv.kind != copyBytes {
			return nil, fmt.Errorf("its key changed from %d to %d bytes, and this release has no conversion for it", old.KeySize(), ms.KeySize)
		}
		mv.convert = func(k, v []byte) ([]byte, []byte, bool, error) {
			nk, nv, keep, err := conv(k, v)
			if err == nil && keep && (len(nk) != int(ms.KeySize) || len(nv) != newValue) {
				err = fmt.Errorf("the conversion made a %d-byte key and a %d-byte value, want %d and %d", len(nk), len(nv), ms.KeySize, newValue)
			}
			return nk, nv, keep, err
		}
		return mv, nil
	}
	mv.convert = func(k, v []byte) ([]byte, []byte, bool, error) {
		nv, err := resizeValue(v, newValue)
		return k, nv, true, err
	}
	if o.Counters[name] && mv.kind == copyBytes {
		mv.snapshot = map[string][][]byte{}
	}
	return mv, nil
}

// resizeValue zero-extends a value that grew, and cuts one that shrank if
// only zeros are cut.
func resizeValue(v []byte, size int) ([]byte, error) {
	if len(v) <= size {
		return append(v, make([]byte, size-len(v))...), nil
	}
	for i, b := range v[size:] {
		if b != 0 {
			return nil, fmt.Errorf("its value shrank to %d bytes, and an entry holds data at byte %d that would be cut", size, size+i)
		}
	}
	return v[:size], nil
}

// zero says a value holds only zeros.
func zero(v []byte) bool {
	for _, b := range v {
		if b != 0 {
			return false
		}
	}
	return true
}

// read reads and converts the old map's entries, checking they fit ms.
func (mv *move) read(old *ebpf.Map, ms *ebpf.MapSpec) ([]entry, error) {
	if mv.kind == copyNothing {
		return nil, nil
	}
	var out []entry
	closeAll := func() {
		for _, e := range out {
			if e.fd != nil {
				e.fd.Close()
			}
		}
	}
	var key []byte
	it := old.Iterate()
	switch mv.kind {
	case copyMaps:
		var inner *ebpf.Map
		for it.Next(&key, &inner) {
			out = append(out, entry{key: key, fd: inner})
			key, inner = nil, nil
		}
	case copyPrograms:
		var prog *ebpf.Program
		for it.Next(&key, &prog) {
			out = append(out, entry{key: key, fd: prog})
			key, prog = nil, nil
		}
	case copyBytes:
		if mv.perCPU {
			cpus := make([][]byte, mv.ncpu)
			for it.Next(&key, cpus) {
				e, keep, err := mv.convertPerCPU(key, cpus)
				if err != nil {
					return nil, err
				}
				if keep {
					out = append(out, e)
				}
				if mv.snapshot != nil {
					mv.snapshot[string(key)] = cpus
				}
				key, cpus = nil, make([][]byte, mv.ncpu)
			}
		} else {
			var value []byte
			for it.Next(&key, &value) {
				k, v, keep, err := mv.convert(key, value)
				if err != nil {
					return nil, err
				}
				if keep && (mv.isHash || !zero(v)) {
					out = append(out, entry{key: k, value: v})
				}
				if mv.snapshot != nil {
					mv.snapshot[string(key)] = [][]byte{value}
				}
				// A slice of the value's size would be read into in
				// place: each entry gets its own.
				key, value = nil, nil
			}
		}
	}
	if err := it.Err(); err != nil {
		closeAll()
		return nil, fmt.Errorf("read its entries: %w", err)
	}
	if mv.isHash {
		if n := len(out); n > int(ms.MaxEntries) {
			closeAll()
			return nil, fmt.Errorf("it holds %d entries, and the new layout has room for %d", n, ms.MaxEntries)
		}
		return out, nil
	}
	// An array's index must fit; past the new end only zeros may be left.
	kept := out[:0]
	for _, e := range out {
		idx := nativeUint32(e.key)
		if idx < ms.MaxEntries {
			kept = append(kept, e)
			continue
		}
		if e.fd != nil {
			closeAll()
			return nil, fmt.Errorf("its entry %d is past the new size of %d entries", idx, ms.MaxEntries)
		}
		if !zero(e.value) || !allZero(e.cpus) {
			closeAll()
			return nil, fmt.Errorf("it has %d entries in the new layout, and entry %d holds data", ms.MaxEntries, idx)
		}
	}
	return kept, nil
}

func allZero(cpus [][]byte) bool {
	for _, c := range cpus {
		if !zero(c) {
			return false
		}
	}
	return true
}

// convertPerCPU converts a per-CPU entry, each CPU's value alike; an array
// entry zero on every CPU is left out (the new array starts zeroed).
func (mv *move) convertPerCPU(key []byte, cpus [][]byte) (entry, bool, error) {
	e := entry{cpus: make([][]byte, len(cpus))}
	for i, v := range cpus {
		k, nv, keep, err := mv.convert(key, v)
		if err != nil || !keep {
			return entry{}, false, err
		}
		e.key, e.cpus[i] = k, nv
	}
	if !mv.isHash && allZero(e.cpus) {
		return entry{}, false, nil
	}
	return e, true, nil
}

// nativeUint32 is an array's index from its key, in the host's order.
func nativeUint32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.NativeEndian.Uint32(b)
}

// write puts the converted entries into the new map.
func (mv *move) write(m *ebpf.Map, entries []entry) error {
	for _, e := range entries {
		var err error
		switch {
		case e.fd != nil:
			err = m.Put(e.key, e.fd)
		case e.cpus != nil:
			err = m.Put(e.key, e.cpus)
		default:
			err = m.Put(e.key, e.value)
		}
		if err != nil {
			return fmt.Errorf("put an entry: %w", err)
		}
	}
	return nil
}

// Replacements are the new maps, for CollectionOptions.MapReplacements
// (nil for no migration).
func (mig *Migration) Replacements() map[string]*ebpf.Map {
	if mig == nil {
		return nil
	}
	out := map[string]*ebpf.Map{}
	for _, mv := range mig.moves {
		out[mv.name] = mv.new
	}
	return out
}

// Names are the maps being migrated.
func (mig *Migration) Names() []string {
	if mig == nil {
		return nil
	}
	var out []string
	for _, mv := range mig.moves {
		out = append(out, mv.name)
	}
	return out
}

// Commit, called once the new program runs on every device, copies what
// the old program added to hash maps since the first copy, and points the
// pins at the new maps. Nothing to do for a nil Migration.
func (mig *Migration) Commit() error {
	if mig == nil || mig.committed {
		return nil
	}
	mig.committed = true
	var errs []error
	for _, mv := range mig.moves {
		if mv.snapshot != nil {
			if err := mv.addIncrements(); err != nil {
				fmt.Fprintf(mig.warn, "%s: what the old program counted during the upgrade is lost: %v\n", mv.name, err)
			}
		}
		if mv.kind == copyBytes && mv.isHash {
			if n, err := mv.catchUp(); err != nil {
				fmt.Fprintf(mig.warn, "%s: %d entries the old program added during the upgrade are lost: %v\n", mv.name, n, err)
			}
		}
		errs = append(errs, repin(mig.dir, mv.name, mv.new))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("the new program runs, but its maps could not all be pinned in %s (attach again to retry): %w", mig.dir, err)
	}
	return nil
}

// catchUp copies the old map's entries the new one lacks; it returns how
// many it could not.
func (mv *move) catchUp() (int, error) {
	var key []byte
	var lost int
	var first error
	it := mv.old.Iterate()
	try := func(k, v any) {
		err := mv.new.Update(k, v, ebpf.UpdateNoExist)
		if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			lost++
			if first == nil {
				first = err
			}
		}
	}
	if mv.perCPU {
		cpus := make([][]byte, mv.ncpu)
		for it.Next(&key, cpus) {
			e, keep, err := mv.convertPerCPU(key, cpus)
			if err == nil && keep {
				try(e.key, e.cpus)
			}
			key, cpus = nil, make([][]byte, mv.ncpu)
		}
	} else {
		var value []byte
		for it.Next(&key, &value) {
			k, v, keep, err := mv.convert(key, value)
			if err == nil && keep {
				try(k, v)
			}
			key, value = nil, nil
		}
	}
	if err := it.Err(); err != nil && first == nil {
		first = err
	}
	return lost, first
}

// newPin is where a new map is pinned until the commit. bpffs refuses
// names with a dot.
func newPin(dir, name string) string { return filepath.Join(dir, "upgrade_"+name) }

// pinBeside pins m at newPin.
func pinBeside(dir, name string, m *ebpf.Map) error {
	tmp := newPin(dir, name)
	os.Remove(tmp)
	fresh, err := m.Clone()
	if err != nil {
		return err
	}
	defer fresh.Close()
	if err := fresh.Pin(tmp); err != nil {
		return fmt.Errorf("pin the new %s: %w", name, err)
	}
	return nil
}

// addIncrements adds to the new map of counters what the old program
// counted since the copy: each 64-bit word's growth, per CPU. Entries the
// new map lacks are left to catchUp, which copies them whole.
func (mv *move) addIncrements() error {
	var key []byte
	cur := make([][]byte, max(mv.ncpu, 1))
	it := mv.old.Iterate()
	next := func() bool {
		if mv.perCPU {
			return it.Next(&key, cur)
		}
		var v []byte
		ok := it.Next(&key, &v)
		cur = [][]byte{v}
		return ok
	}
	for next() {
		snap := mv.snapshot[string(key)]
		var grew bool
		deltas := make([][]uint64, len(cur))
		for c, v := range cur {
			deltas[c] = make([]uint64, len(v)/8)
			for w := range deltas[c] {
				now := binary.NativeEndian.Uint64(v[w*8:])
				var then uint64
				if c < len(snap) && len(snap[c]) >= w*8+8 {
					then = binary.NativeEndian.Uint64(snap[c][w*8:])
				}
				if now > then {
					deltas[c][w] = now - then
					grew = true
				}
			}
		}
		if grew {
			if err := mv.addTo(key, deltas); err != nil {
				return err
			}
		}
		key, cur = nil, make([][]byte, max(mv.ncpu, 1))
	}
	return it.Err()
}

// addTo adds deltas (per CPU, per 64-bit word) to the new map's entry key.
func (mv *move) addTo(key []byte, deltas [][]uint64) error {
	var vals [][]byte
	if mv.perCPU {
		vals = make([][]byte, mv.ncpu)
		if err := mv.new.Lookup(key, vals); err != nil {
			return ignoreMissing(err)
		}
	} else {
		var v []byte
		if err := mv.new.Lookup(key, &v); err != nil {
			return ignoreMissing(err)
		}
		vals = [][]byte{v}
	}
	for c, v := range vals {
		for w := 0; w < len(deltas[c]) && w*8+8 <= len(v); w++ {
			binary.NativeEndian.PutUint64(v[w*8:], binary.NativeEndian.Uint64(v[w*8:])+deltas[c][w])
		}
	}
	if mv.perCPU {
		return mv.new.Put(key, vals)
	}
	return mv.new.Put(key, vals[0])
}

// repin renames the new map's pin over the old one, so that the name always
// holds one of the two maps.
func repin(dir, name string, m *ebpf.Map) error {
	final := filepath.Join(dir, name)
	tmp := newPin(dir, name)
	if err := os.Rename(tmp, final); err != nil {
		// bpffs renames since Linux 4.10; without, a moment with no pin.
		os.Remove(final)
		if err2 := os.Rename(tmp, final); err2 != nil {
			return fmt.Errorf("pin the new %s: %w", name, errors.Join(err, err2))
		}
	}
	return nil
}

// Close releases the old maps and this process's handles of the new ones;
// without Commit the pins stay as they were, and the new maps go with the
// last program that holds them.
func (mig *Migration) Close() {
	if mig == nil {
		return
	}
	for _, mv := range mig.moves {
		mv.old.Close()
		if mv.new != nil {
			mv.new.Close()
		}
		if !mig.committed {
			os.Remove(newPin(mig.dir, mv.name))
		}
	}
	mig.moves = nil
}

// String says what the migration carries over: "fw_blocked, fw_stats".
func (mig *Migration) String() string { return strings.Join(mig.Names(), ", ") }
