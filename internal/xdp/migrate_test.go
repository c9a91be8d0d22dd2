package xdp

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// pinDir is a directory on bpffs of the test's own, removed when it ends.
func pinDir(t *testing.T) string {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	dir := filepath.Join(preflight.BPFFS, "fp-migrate-"+hex.EncodeToString(b))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// pinned makes a map of spec pinned in dir under its name, with entries.
func pinned(t *testing.T, dir string, spec *ebpf.MapSpec, entries map[uint32][]byte) ebpf.MapID {
	t.Helper()
	unpinned := spec.Copy()
	unpinned.Pinning = ebpf.PinNone
	m, err := ebpf.NewMap(unpinned)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for k, v := range entries {
		if err := m.Put(key(t, spec.KeySize, k), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Pin(filepath.Join(dir, spec.Name)); err != nil {
		t.Fatal(err)
	}
	return mapID(t, m)
}

func key(t *testing.T, size uint32, k uint32) []byte {
	b := make([]byte, size)
	binary.NativeEndian.PutUint32(b, k)
	return b
}

func mapID(t *testing.T, m *ebpf.Map) ebpf.MapID {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

func pinnedID(t *testing.T, dir, name string) (ebpf.MapID, *ebpf.Map) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return mapID(t, m), m
}

func hashSpec(name string, keySize, valueSize, max uint32) *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: name, Type: ebpf.Hash, KeySize: keySize, ValueSize: valueSize, MaxEntries: max, Pinning: ebpf.PinByName}
}

func collection(ms ...*ebpf.MapSpec) *ebpf.CollectionSpec {
	c := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}}
	for _, m := range ms {
		c.Maps[m.Name] = m
	}
	return c
}

// TestMigrateCarriesEntries: values that grew are zero-extended, per CPU
// too; the pins move to the new maps only at the commit; a map that fits
// is left alone, a new one is not touched, a pin the spec lacks stays.
func TestMigrateCarriesEntries(t *testing.T) {
	dir := pinDir(t)
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	grown := pinned(t, dir, hashSpec("grows", 4, 8, 16), map[uint32][]byte{1: {1, 2, 3, 4, 5, 6, 7, 8}, 2: {9, 0, 0, 0, 0, 0, 0, 9}})
	same := pinned(t, dir, hashSpec("same", 4, 8, 16), map[uint32][]byte{3: make([]byte, 8)})
	pinned(t, dir, hashSpec("gone", 4, 8, 16), nil)
	pcpu := &ebpf.MapSpec{Name: "percpu", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 4, Pinning: ebpf.PinByName}
	unpinned := pcpu.Copy()
	unpinned.Pinning = ebpf.PinNone
	old, err := ebpf.NewMap(unpinned)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([][]byte, ncpu)
	for i := range vals {
		vals[i] = []byte{byte(i + 1), 0, 0, 0, 0, 0, 0, 7}
	}
	if err := old.Put(uint32(2), vals); err != nil {
		t.Fatal(err)
	}
	if err := old.Pin(filepath.Join(dir, "percpu")); err != nil {
		t.Fatal(err)
	}
	old.Close()

	pcpu2 := *pcpu
	pcpu2.ValueSize, pcpu2.MaxEntries = 16, 8
	spec := collection(hashSpec("grows", 4, 16, 32), hashSpec("same", 4, 8, 16), hashSpec("new", 4, 8, 16), &pcpu2)
	mig, err := PrepareMigration(spec, dir, MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer mig.Close()
	if got := mig.String(); got != "grows, percpu" {
		t.Fatalf("migrating %q, want grows and percpu", got)
	}
	if id, _ := pinnedID(t, dir, "grows"); id != grown {
		t.Fatal("the pin moved before the commit")
	}
	if err := mig.Commit(); err != nil {
		t.Fatal(err)
	}
	id, m := pinnedID(t, dir, "grows")
	if id == grown || m.ValueSize() != 16 || m.MaxEntries() != 32 {
		t.Fatalf("after the commit the pin holds map %d (was %d) of %d-byte values, %d entries", id, grown, m.ValueSize(), m.MaxEntries())
	}
	var v []byte
	if err := m.Lookup(uint32(2), &v); err != nil || !bytes.Equal(v, []byte{9, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("entry 2: %x, %v", v, err)
	}
	if id, _ := pinnedID(t, dir, "same"); id != same {
		t.Fatal("a map that fits was replaced")
	}
	_, pm := pinnedID(t, dir, "percpu")
	got := make([][]byte, ncpu)
	if err := pm.Lookup(uint32(2), got); err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if want := append([]byte{byte(i + 1), 0, 0, 0, 0, 0, 0, 7}, make([]byte, 8)...); !bytes.Equal(g, want) {
			t.Fatalf("CPU %d: %x, want %x", i, g, want)
		}
	}
	for _, name := range []string{"gone"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("the pin of a map the new release lacks went: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a map with no pin was made by the migration: %v", err)
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "upgrade_*")); len(ents) != 0 {
		t.Fatalf("pins left behind: %v", ents)
	}
}

// TestMigrateRefuses: what cannot be carried over is refused by name,
// before anything changes.
func TestMigrateRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		old     *ebpf.MapSpec
		entries map[uint32][]byte
		new     *ebpf.MapSpec
		convert map[string]KeyConversion
		want    string
	}{
		"cut data": {hashSpec("m", 4, 8, 4), map[uint32][]byte{1: {1, 2, 3, 4, 5, 0, 0, 0}}, hashSpec("m", 4, 4, 4), nil, "would be cut"},
		"too many": {hashSpec("m", 4, 4, 4), map[uint32][]byte{1: {1, 0, 0, 0}, 2: {2, 0, 0, 0}, 3: {3, 0, 0, 0}}, hashSpec("m", 4, 4, 2), nil, "holds 3 entries"},
		"array cut": {&ebpf.MapSpec{Name: "m", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 8, Pinning: ebpf.PinByName}, map[uint32][]byte{6: {1, 0, 0, 0}},
			&ebpf.MapSpec{Name: "m", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 4, Pinning: ebpf.PinByName}, nil, "entry 6 holds data"},
		"key changed":  {hashSpec("m", 4, 4, 4), map[uint32][]byte{1: {1, 0, 0, 0}}, hashSpec("m", 8, 4, 4), nil, "no conversion"},
		"type changed": {hashSpec("m", 4, 4, 4), nil, &ebpf.MapSpec{Name: "m", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 4, MaxEntries: 4, Pinning: ebpf.PinByName}, nil, "type changed"},
		"bad conversion": {hashSpec("m", 4, 4, 4), map[uint32][]byte{1: {1, 0, 0, 0}}, hashSpec("m", 8, 4, 4),
			map[string]KeyConversion{"m": func(k, v []byte) ([]byte, []byte, bool, error) { return k, v, true, nil }}, "4-byte key"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := pinDir(t)
			before := pinned(t, dir, c.old, c.entries)
			fits := pinned(t, dir, hashSpec("fits", 4, 4, 4), nil)
			_, err := PrepareMigration(collection(c.new, hashSpec("fits", 4, 4, 4)), dir, MigrateOptions{Convert: c.convert})
			if !errors.Is(err, ErrMigration) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Join(dir, "m")) {
				t.Fatalf("got %v, want ErrMigration naming the map and saying %q", err, c.want)
			}
			if id, _ := pinnedID(t, dir, "m"); id != before {
				t.Fatal("the refused map's pin changed")
			}
			if id, _ := pinnedID(t, dir, "fits"); id != fits {
				t.Fatal("another pin changed")
			}
			if ents, _ := filepath.Glob(filepath.Join(dir, "upgrade_*")); len(ents) != 0 {
				t.Fatalf("pins left behind: %v", ents)
			}
		})
	}
}

// TestMigrateConvertsKeys: a map whose key changed is carried over by the
// conversion the function registers for it; Close without Commit leaves
// the old pin.
func TestMigrateConvertsKeys(t *testing.T) {
	dir := pinDir(t)
	pinned(t, dir, hashSpec("m", 4, 4, 8), map[uint32][]byte{1: {10, 0, 0, 0}, 2: {20, 0, 0, 0}, 3: {30, 0, 0, 0}})
	widen := func(k, v []byte) ([]byte, []byte, bool, error) {
		if k[0] == 3 {
			return nil, nil, false, nil // dropped
		}
		return append(k, 0, 0, 0, 0), v, true, nil
	}
	spec := collection(hashSpec("m", 8, 4, 8))
	aborted, err := PrepareMigration(spec, dir, MigrateOptions{Convert: map[string]KeyConversion{"m": widen}})
	if err != nil {
		t.Fatal(err)
	}
	aborted.Close()
	if _, m := pinnedID(t, dir, "m"); m.KeySize() != 4 {
		t.Fatal("an aborted migration moved the pin")
	}
	mig, err := PrepareMigration(spec, dir, MigrateOptions{Convert: map[string]KeyConversion{"m": widen}})
	if err != nil {
		t.Fatal(err)
	}
	defer mig.Close()
	if err := mig.Commit(); err != nil {
		t.Fatal(err)
	}
	_, m := pinnedID(t, dir, "m")
	var n int
	var k []byte
	var v uint32
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
		if len(k) != 8 || uint32(k[0])*10 != v {
			t.Fatalf("entry %x = %d", k, v)
		}
	}
	if it.Err() != nil || n != 2 {
		t.Fatalf("%d entries (%v), want 2", n, it.Err())
	}
}

// TestMigrateAddsCounts: what the old program counts between the copy and
// the commit is added to the new map of counters, per CPU and per word.
func TestMigrateAddsCounts(t *testing.T) {
	dir := pinDir(t)
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	spec := &ebpf.MapSpec{Name: "counters", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 16, MaxEntries: 4}
	old, err := ebpf.NewMap(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	put := func(packets uint64) {
		vals := make([][]byte, ncpu)
		for c := range vals {
			vals[c] = make([]byte, 16)
			binary.NativeEndian.PutUint64(vals[c], packets+uint64(c))
			binary.NativeEndian.PutUint64(vals[c][8:], 100*(packets+uint64(c)))
		}
		if err := old.Put(uint32(1), vals); err != nil {
			t.Fatal(err)
		}
	}
	put(10)
	if err := old.Pin(filepath.Join(dir, "counters")); err != nil {
		t.Fatal(err)
	}
	grown := *spec
	grown.ValueSize, grown.Pinning = 24, ebpf.PinByName
	mig, err := PrepareMigration(collection(&grown), dir, MigrateOptions{Counters: map[string]bool{"counters": true}})
	if err != nil {
		t.Fatal(err)
	}
	defer mig.Close()
	put(15) // the old program counts on until the swap
	if err := mig.Commit(); err != nil {
		t.Fatal(err)
	}
	_, m := pinnedID(t, dir, "counters")
	got := make([][]byte, ncpu)
	if err := m.Lookup(uint32(1), got); err != nil {
		t.Fatal(err)
	}
	for c, v := range got {
		p, b := binary.NativeEndian.Uint64(v), binary.NativeEndian.Uint64(v[8:])
		if p != 15+uint64(c) || b != 100*(15+uint64(c)) || !zero(v[16:]) {
			t.Fatalf("CPU %d: %d packets, %d bytes (%x), want %d and %d", c, p, b, v, 15+c, 100*(15+c))
		}
	}
}
