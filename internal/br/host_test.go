package br

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

func hashMap(t *testing.T, n uint32, key, val any) *ebpf.Map {
	t.Helper()
	requireKernel(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: uint32(binary.Size(key)), ValueSize: uint32(binary.Size(val)), MaxEntries: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func addrs(from, n int) map[routerBrAddr]bool {
	out := map[routerBrAddr]bool{}
	for i := from; i < from+n; i++ {
		out[brAddr(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 0))] = true
	}
	return out
}

// A map at its limit is brought from one set to another of the same size:
// the stale keys go first (before, new keys went in first, and the update
// failed on a full map, so that an address change near the limit stuck).
// More than fit: as many as fit, and an error that says so.
func TestSyncSetAtTheLimit(t *testing.T) {
	m := hashMap(t, 8, routerBrAddr{}, uint8(0))
	if _, _, err := syncSet(m, addrs(0, 8), uint8(1)); err != nil {
		t.Fatal(err)
	}
	added, removed, err := syncSet(m, addrs(4, 8), uint8(1))
	if err != nil || len(added) != 4 || len(removed) != 4 {
		t.Fatalf("from 8 addresses to 8 with 4 new: added %d, removed %d, %v", len(added), len(removed), err)
	}
	have, err := keys[routerBrAddr, uint8](m)
	if err != nil {
		t.Fatal(err)
	}
	for a := range addrs(4, 8) {
		if !have[a] {
			t.Fatalf("%v missing after the change", a)
		}
	}
	_, _, err = syncSet(m, addrs(100, 9), uint8(1))
	if !errors.Is(err, unix.E2BIG) {
		t.Fatalf("9 addresses into a map of 8: %v, want E2BIG", err)
	}
	if have, _ := keys[routerBrAddr, uint8](m); len(have) != 8 {
		t.Fatalf("%d addresses kept, want the map full (8)", len(have))
	}
}

// A host with more addresses than br_local_addrs holds is attached all the
// same, with a warning: a next hop at an address left out goes up as
// fib_pass instead of local, which is the same action.
func TestManyHostAddresses(t *testing.T) {
	cfg := testConfig()
	r := loadTestRouter(t, cfg)
	m := r.hostMaps()
	m.localAddrs = hashMap(t, 16, routerBrAddr{}, uint8(0))
	_, _, err := m.write("", hostView{local: addrs(0, 20)})
	if !errors.Is(err, errLocalAddrsFull) {
		t.Fatalf("20 addresses into 16: %v, want errLocalAddrsFull", err)
	}
}

// Devices whose indexes share a slot of br_devs (ifindex modulo 256) are
// all found: the lowest in the slot, the others in br_devs_more; and a
// device that moves from one to the other is never missing.
func TestDevicesSharingASlot(t *testing.T) {
	cfg := testConfig()
	r := loadTestRouter(t, cfg)
	m := r.hostMaps()
	dev := func(idx uint32, flags routerBrDevFlags) hostDev {
		return hostDev{iface: xdp.Iface{Name: "x"}, index: idx, flags: uint16(flags)}
	}
	found := func(idx uint32) (routerBrDev, bool) {
		var d routerBrDev
		if m.devs.Lookup(idx%devSlots, &d) == nil && d.Ifindex == idx {
			return d, true
		}
		if m.devsMore.Lookup(idx, &d) == nil {
			return d, true
		}
		return d, false
	}
	for _, set := range [][]uint32{{300, 556}, {44, 300, 556}, {556}, {}} {
		var devs []hostDev
		for _, i := range set {
			devs = append(devs, dev(i, routerBrDevFlagsBR_DEV_UP))
		}
		if _, err := m.writeDevs(devs); err != nil {
			t.Fatal(err)
		}
		for _, i := range set {
			if d, ok := found(i); !ok || d.Flags != uint16(routerBrDevFlagsBR_DEV_UP) {
				t.Fatalf("devices %v: %d not found (%+v)", set, i, d)
			}
		}
		got, err := m.readDevs()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(set) {
			t.Fatalf("devices %v: br_devs holds %+v", set, got)
		}
	}
}

// The key generation is written whole, to a value never used before, by
// whoever changes keys; a tap renewing its lease and the keeper writing
// the clock each write an entry of their own. A MAC checked under a key
// that has since been replaced is refused, whatever else writes meanwhile
// (before, each of them read and wrote the whole br_conf, and a write of a
// stale copy brought an old key generation back: MACs cached under the
// old key counted again).
func TestKeyChangesAmidOtherWriters(t *testing.T) {
	cfg := testConfig()
	r, err := Load(cfg, LoadOptions{SkipFIB: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	routerCases()
	transit := pktCase{
		path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{2, 1}, hopPair{31, 0})}, CurrHF: 1},
		src:  childIA, dst: farIA, in: arrival{ifid: 1},
	}
	p := transit.packet()
	f, err := p.Frame()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, v := range []brVar{varCapture, varClock} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if v == varClock {
					setClock(r.objs.Vars)
				} else {
					setVar(r.objs.Vars, v, uint64(time.Now().UnixNano()))
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	var gens []uint64
	for i := 0; i < 50; i++ {
		// Checked and cached under the test key...
		if res := r.runOne(t, f); res.verdict != "forwarded" {
			t.Fatalf("round %d: %s under the right key", i, res.verdict)
		}
		// ...which is replaced, and put back.
		if err := r.SetKey(0, otherKey); err != nil {
			t.Fatal(err)
		}
		if res := r.runOne(t, f); res.verdict != "invalid_mac" {
			t.Fatalf("round %d: a MAC cached under a replaced key: %s", i, res.verdict)
		}
		if err := r.SetKey(0, testKey); err != nil {
			t.Fatal(err)
		}
		g, err := getVar(r.objs.Vars, varKeyGen)
		if err != nil {
			t.Fatal(err)
		}
		gens = append(gens, g)
	}
	for i := 1; i < len(gens); i++ {
		if gens[i] <= gens[i-1] {
			t.Fatalf("key generation %d after %d", gens[i], gens[i-1])
		}
	}
}
