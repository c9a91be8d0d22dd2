package tra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/scionproto/scion/pkg/addr"
)

// The data plane's paths: tra_sets holds the destinations' sets of paths
// (struct tra_dest), in more entries than there are destinations, and
// tra_dests points each destination ISD-AS to its entry and the generation
// the entry was written with. A set is written whole into an entry no
// destination points to, then one update of tra_dests swaps it in, so that a
// packet reads the old set or the new one, never one half-written. The
// entry the destination leaves is set aside for longer than any program
// can still be reading it (setAside) before it is written again.
//
// Neither update waits for anything. A map of maps (what this replaced)
// waits for an RCU grace period on every update and delete from userspace,
// some 10 ms each: a default-route change that installs 4,096 destinations'
// paths again kept the daemon's loop busy for a minute.

// MaxDests is how many destinations the data plane holds (TRA_MAX_DESTS;
// Load checks that the object agrees).
const MaxDests = 4096

// MaxRouters is how many border routers an AS may have for the translator
// (TRA_MAX_ROUTERS).
const MaxRouters = 64

// setAside is how long an entry of tra_sets that a destination left stays
// unwritten: a program reads a set for a microsecond or so, and even one a
// busy machine preempts (BPF_PROG_TEST_RUN, PREEMPT_RT) is done long before.
// At most every entry but the destinations' is set aside at once, so that
// a writer waits for one only when it replaces more than MaxDests sets
// within this time.
const setAside = 250 * time.Millisecond

// pathMaps are the maps the daemon keeps paths in.
type pathMaps struct {
	dests *ebpf.Map // tra_dests: ISD-AS → struct tra_set_ref
	sets  *ebpf.Map // tra_sets: struct tra_dest
	used  *ebpf.Map // tra_used
	alloc *setAlloc
}

// setAlloc is what a writer knows of tra_sets' entries: those it may write
// (free) and those set aside, oldest first. Any other entry is in use. It
// is rebuilt from the maps at the first write through a handle, so that a
// daemon started again, or another process that writes paths, finds its
// way; an entry a destination points to is never written, whatever the
// writer believes (take checks it in the maps).
type setAlloc struct {
	mu     sync.Mutex
	loaded bool
	free   []uint32
	aside  []asideSet
	now    func() time.Time
	sleep  func(time.Duration)
}

type asideSet struct {
	set   uint32
	since time.Time
}

func newSetAlloc() *setAlloc { return &setAlloc{now: time.Now, sleep: time.Sleep} }

// DestPaths is a destination's installed paths and the slot its use is
// recorded in.
type DestPaths struct {
	Slot  uint32
	Paths []Path
}

// set installs the paths to ia (at most MaxPaths): written into a free
// entry of tra_sets and swapped in; none removes the destination.
func (m *pathMaps) set(ia addr.IA, slot uint32, paths []Path) error {
	if len(paths) > MaxPaths {
		paths = paths[:MaxPaths]
	}
	d := translatorTraDest{Ia: beIA(ia), N: uint32(len(paths)), Slot: slot % uint32(MaxDests)}
	for i, p := range paths {
		v, err := p.dataPlane(ia)
		if err != nil {
			return err
		}
		d.Paths[i] = v
	}
	return m.put(ia, d)
}

// put installs a set of paths as struct tra_dest holds it (N 0: removes
// the destination).
func (m *pathMaps) put(ia addr.IA, d translatorTraDest) error {
	key := d.Ia
	a := m.alloc
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := m.load(); err != nil {
		return err
	}
	var old translatorTraSetRef
	hadOld := true
	if err := m.dests.Lookup(key, &old); errors.Is(err, ebpf.ErrKeyNotExist) {
		hadOld = false
	} else if err != nil {
		return fmt.Errorf("paths to %s: %w", ia, err)
	}
	if d.N == 0 {
		if !hadOld {
			return nil
		}
		if err := m.dests.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove paths to %s: %w", ia, err)
		}
		a.putAside(old.Set)
		return nil
	}
	set, gen, err := m.take()
	if err != nil {
		return fmt.Errorf("install paths to %s: %w", ia, err)
	}
	d.Gen = gen
	if err := m.sets.Put(set, &d); err != nil {
		a.free = append(a.free, set) // no destination points to it
		return fmt.Errorf("write the paths to %s: %w", ia, err)
	}
	if err := m.dests.Put(key, translatorTraSetRef{Set: set, Gen: gen}); err != nil {
		a.free = append(a.free, set)
		return fmt.Errorf("install paths to %s: %w", ia, err)
	}
	if hadOld && old.Set != set {
		a.putAside(old.Set)
	}
	return nil
}

// take finds an entry of tra_sets to write and the generation to write it
// with: a free one, else the one set aside longest, once its time is up.
func (m *pathMaps) take() (set, gen uint32, err error) {
	a := m.alloc
	rebuilt := false
	for {
		a.reclaim()
		if len(a.free) == 0 {
			if len(a.aside) == 0 {
				// Every entry believed in use: another writer's
				// leftovers, found again in the maps.
				if rebuilt {
					return 0, 0, errors.New("no free entry in tra_sets")
				}
				if err := m.rebuild(); err != nil {
					return 0, 0, err
				}
				rebuilt = true
				continue
			}
			a.sleep(a.aside[0].since.Add(setAside).Sub(a.now()))
			continue
		}
		set = a.free[len(a.free)-1]
		a.free = a.free[:len(a.free)-1]
		var d translatorTraDest
		if err := m.sets.Lookup(set, &d); err != nil {
			return 0, 0, fmt.Errorf("read tra_sets: %w", err)
		}
		// Another process writing paths (a second handle on the pins)
		// may have taken it: a destination points to it.
		if d.Gen != 0 {
			var ref translatorTraSetRef
			if err := m.dests.Lookup(d.Ia, &ref); err == nil && ref.Set == set {
				continue
			}
		}
		gen = d.Gen + 1
		if gen == 0 {
			gen = 1
		}
		return set, gen, nil
	}
}

// putAside sets an entry aside from now on.
func (a *setAlloc) putAside(set uint32) {
	a.aside = append(a.aside, asideSet{set: set, since: a.now()})
}

// reclaim frees the entries set aside long enough.
func (a *setAlloc) reclaim() {
	now := a.now()
	n := 0
	for n < len(a.aside) && now.Sub(a.aside[n].since) >= setAside {
		a.free = append(a.free, a.aside[n].set)
		n++
	}
	a.aside = a.aside[n:]
}

// load rebuilds what the writer knows of tra_sets at its first write.
func (m *pathMaps) load() error {
	if m.alloc.loaded {
		return nil
	}
	if err := m.rebuild(); err != nil {
		return err
	}
	m.alloc.loaded = true
	return nil
}

// rebuild reads tra_sets' entries back from the maps: those a destination
// points to are in use; one never written (generation 0) is free; any
// other is set aside from now on, since a program may have read it just
// before its destination left it.
func (m *pathMaps) rebuild() error {
	a := m.alloc
	live := map[uint32]bool{}
	var k uint64
	var ref translatorTraSetRef
	it := m.dests.Iterate()
	for it.Next(&k, &ref) {
		live[ref.Set] = true
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read tra_dests: %w", err)
	}
	gens, err := m.generations()
	if err != nil {
		return err
	}
	a.free, a.aside = a.free[:0], a.aside[:0]
	now := a.now()
	// Free entries are taken from the end: the lowest first.
	for s := len(gens) - 1; s >= 0; s-- {
		switch {
		case live[uint32(s)]:
		case gens[s] == 0:
			a.free = append(a.free, uint32(s))
		default:
			a.aside = append(a.aside, asideSet{set: uint32(s), since: now})
		}
	}
	return nil
}

// generations reads the generation of every entry of tra_sets.
func (m *pathMaps) generations() ([]uint32, error) {
	n := int(m.sets.MaxEntries())
	out := make([]uint32, n)
	const chunk = 256
	keys := make([]uint32, chunk)
	vals := make([]translatorTraDest, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		c, err := m.sets.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < c; i++ {
			if int(keys[i]) < n {
				out[keys[i]] = vals[i].Gen
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			break
		}
	}
	// Batch lookups of arrays came in 5.6; read one by one otherwise.
	var d translatorTraDest
	for i := range out {
		if err := m.sets.Lookup(uint32(i), &d); err != nil {
			return nil, fmt.Errorf("read tra_sets: %w", err)
		}
		out[i] = d.Gen
	}
	return out, nil
}

// ErrPathMTU says a path's MTU cannot carry IPv6's minimum MTU, or that
// the path names none.
var ErrPathMTU = errors.New("path MTU")

// minPathMTU is the smallest MTU of a path whose header is pathLen bytes
// that the translator takes: one that carries an IPv6 packet of 1,280 bytes
// (IPv6's minimum MTU, which a host may send without asking, and QUIC's
// first packets fill) as SCION, with the shortest SCION header (IPv4
// hosts). On a smaller one such a packet would be answered Packet Too Big
// naming 1,280 again and again.
func minPathMTU(pathLen int) int {
	return minIPv6MTU - ipv6HdrLen + scionCommonLen + 2*scionIALen + 4 + 4 + pathLen
}

// checkMTU refuses a path without an MTU (metadata missing: Packet Too Big
// and the MSS clamp would be computed from 0) or with one too small for
// IPv6's minimum.
func (p Path) checkMTU() error {
	if p.MTU == 0 {
		return fmt.Errorf("%w: none given", ErrPathMTU)
	}
	if need := minPathMTU(len(p.Raw)); int(p.MTU) < need {
		return fmt.Errorf("%w %d: a 1280-byte IPv6 packet takes %d as SCION on this %d-byte path", ErrPathMTU, p.MTU, need, len(p.Raw))
	}
	return nil
}

// dataPlane is a path as struct tra_path holds it, if the translator
// takes it.
func (p Path) dataPlane(ia addr.IA) (translatorTraPath, error) {
	if err := p.checkMTU(); err != nil {
		return translatorTraPath{}, fmt.Errorf("path to %s: %w", ia, err)
	}
	return p.encode(ia)
}

// encode is a path as struct tra_path holds it.
func (p Path) encode(ia addr.IA) (translatorTraPath, error) {
	var v translatorTraPath
	if len(p.Raw) > PathMax || len(p.Raw)%4 != 0 {
		return v, fmt.Errorf("path to %s: %d bytes; the translator takes whole 4-byte lines up to %d", ia, len(p.Raw), PathMax)
	}
	if !p.NextHop.Addr().Unmap().Is4() {
		return v, fmt.Errorf("path to %s: next hop %s: the translator's underlay is IPv4", ia, p.NextHop)
	}
	v.Len = uint16(len(p.Raw))
	v.Mtu = p.MTU
	v.Type = 1
	v.NextPort = htons(p.NextHop.Port())
	nh := p.NextHop.Addr().Unmap().As4()
	v.NextHop = binary.NativeEndian.Uint32(nh[:])
	v.Expiry = p.Expiry
	if g := p.Gateway.Unmap(); g.Is4() {
		b := g.As4()
		v.Gateway = binary.NativeEndian.Uint32(b[:])
	}
	copy(v.Raw[:], p.Raw)
	return v, nil
}

// list reads every installed destination.
func (m *pathMaps) list() (map[addr.IA]DestPaths, error) {
	out := map[addr.IA]DestPaths{}
	var k uint64
	var ref translatorTraSetRef
	it := m.dests.Iterate()
	for it.Next(&k, &ref) {
		d, ok, err := m.read(k, ref)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // removed while read
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], k)
		ia := addr.IA(binary.BigEndian.Uint64(b[:]))
		dp := DestPaths{Slot: d.Slot}
		for i := 0; i < int(d.N) && i < MaxPaths; i++ {
			dp.Paths = append(dp.Paths, fromDataPlane(d.Paths[i]))
		}
		out[ia] = dp
	}
	return out, it.Err()
}

// read reads the set a destination points to; a set replaced while read
// (its entry names another destination or generation than ref) is read
// again where the destination points now.
func (m *pathMaps) read(key uint64, ref translatorTraSetRef) (translatorTraDest, bool, error) {
	var d translatorTraDest
	for try := 0; try < 3; try++ {
		if err := m.sets.Lookup(ref.Set, &d); err != nil {
			return d, false, fmt.Errorf("read tra_sets: %w", err)
		}
		if d.Ia == key && d.Gen == ref.Gen {
			return d, true, nil
		}
		if err := m.dests.Lookup(key, &ref); err != nil {
			return d, false, nil
		}
	}
	return d, false, nil
}

// fromDataPlane is a path as struct tra_path holds it, for Go.
func fromDataPlane(v translatorTraPath) Path {
	var nh, gw [4]byte
	binary.NativeEndian.PutUint32(nh[:], v.NextHop)
	binary.NativeEndian.PutUint32(gw[:], v.Gateway)
	path := Path{
		Raw: append([]byte(nil), v.Raw[:min(int(v.Len), PathMax)]...), MTU: v.Mtu, Expiry: v.Expiry,
		NextHop: netip.AddrPortFrom(netip.AddrFrom4(nh), htons(v.NextPort)),
	}
	if v.Gateway != 0 {
		path.Gateway = netip.AddrFrom4(gw)
	}
	return path
}

// usedAt reads when each slot's destination last had a packet, in the
// programs' clock (coarse monotonic time >> 30).
func (m *pathMaps) usedAt() ([]uint32, error) {
	out := make([]uint32, MaxDests)
	keys := make([]uint32, MaxDests)
	var cursor ebpf.MapBatchCursor
	n, err := m.used.BatchLookup(&cursor, keys, out, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		// Batch lookups of arrays came in 5.6; read one by one otherwise.
		for i := range out {
			if err := m.used.Lookup(uint32(i), &out[i]); err != nil {
				return nil, fmt.Errorf("read tra_used: %w", err)
			}
		}
		return out, nil
	}
	res := make([]uint32, MaxDests)
	for i := 0; i < n; i++ {
		if keys[i] < uint32(MaxDests) {
			res[keys[i]] = out[i]
		}
	}
	return res, nil
}
