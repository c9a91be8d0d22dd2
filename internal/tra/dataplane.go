package tra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/scionproto/scion/pkg/addr"
)

// The data plane's paths: tra_paths maps each destination ISD-AS to an
// inner array of one struct tra_dest. A set of paths is written into a new
// inner map and swapped in with one update of tra_paths, so that a packet
// reads the old set or the new one, never one half-written; the kernel
// frees the old inner map once no program can still hold it.

// MaxDests is how many destinations the data plane holds (TRA_MAX_DESTS;
// Load checks that the object agrees).
const MaxDests = 4096

// MaxRouters is how many border routers an AS may have for the translator
// (TRA_MAX_ROUTERS).
const MaxRouters = 64

// pathMaps are the maps the daemon keeps paths in.
type pathMaps struct {
	paths *ebpf.Map // tra_paths (hash of maps)
	used  *ebpf.Map // tra_used
	inner *ebpf.MapSpec
}

// innerSpec is the template of tra_paths' inner maps.
func innerSpec() (*ebpf.MapSpec, error) {
	spec, err := loadTranslator()
	if err != nil {
		return nil, err
	}
	m, ok := spec.Maps["tra_paths"]
	if !ok || m.InnerMap == nil {
		return nil, errors.New("the translator's object has no inner map for tra_paths")
	}
	return m.InnerMap.Copy(), nil
}

// DestPaths is a destination's installed paths and the slot its use is
// recorded in.
type DestPaths struct {
	Slot  uint32
	Paths []Path
}

// set installs the paths to ia (at most MaxPaths) in a new inner map and
// swaps it in; none removes the destination.
func (m *pathMaps) set(ia addr.IA, slot uint32, paths []Path) error {
	key := beIA(ia)
	if len(paths) == 0 {
		if err := m.paths.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove paths to %s: %w", ia, err)
		}
		return nil
	}
	if len(paths) > MaxPaths {
		paths = paths[:MaxPaths]
	}
	d := translatorTraDest{Ia: key, N: uint32(len(paths)), Slot: slot % uint32(MaxDests)}
	for i, p := range paths {
		v, err := p.dataPlane(ia)
		if err != nil {
			return err
		}
		d.Paths[i] = v
	}
	inner, err := ebpf.NewMap(m.inner)
	if err != nil {
		return fmt.Errorf("a map for the paths to %s: %w", ia, err)
	}
	defer inner.Close()
	if err := inner.Put(uint32(0), &d); err != nil {
		return fmt.Errorf("write the paths to %s: %w", ia, err)
	}
	if err := m.paths.Put(key, inner); err != nil {
		return fmt.Errorf("install paths to %s: %w", ia, err)
	}
	return nil
}

// dataPlane is a path as struct tra_path holds it.
func (p Path) dataPlane(ia addr.IA) (translatorTraPath, error) {
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
	var inner *ebpf.Map
	it := m.paths.Iterate()
	for it.Next(&k, &inner) {
		var d translatorTraDest
		err := inner.Lookup(uint32(0), &d)
		inner.Close()
		if err != nil {
			continue // replaced while read
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], k)
		ia := addr.IA(binary.BigEndian.Uint64(b[:]))
		dp := DestPaths{Slot: d.Slot}
		for i := 0; i < int(d.N) && i < MaxPaths; i++ {
			v := d.Paths[i]
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
			dp.Paths = append(dp.Paths, path)
		}
		out[ia] = dp
	}
	return out, it.Err()
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
