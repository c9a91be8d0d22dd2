package br

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
	"github.com/scionproto/scion/pkg/addr"
	"golang.org/x/sys/unix"
)

// Verdict is why the router did what it did with a packet (enum br_verdict).
type Verdict = routerBrVerdict

// VerdictCount is the number of verdicts.
const VerdictCount = int(routerBrVerdictBR_VERDICT_MAX)

var verdictNames = map[Verdict]string{
	routerBrVerdictBR_FORWARDED:         "forwarded",
	routerBrVerdictBR_PARSE_ERROR:       "parse_error",
	routerBrVerdictBR_NOT_SCION:         "not_scion",
	routerBrVerdictBR_NOT_IMPLEMENTED:   "not_implemented",
	routerBrVerdictBR_NO_INTERFACE:      "no_interface",
	routerBrVerdictBR_UNDERLAY_MISMATCH: "underlay_mismatch",
	routerBrVerdictBR_ROUTER_ALERT:      "router_alert",
	routerBrVerdictBR_FIB_DROP:          "fib_drop",
	routerBrVerdictBR_FIB_PASS:          "fib_pass",
	routerBrVerdictBR_INVALID_MAC:       "invalid_mac",
	routerBrVerdictBR_EXPIRED:           "expired",
	routerBrVerdictBR_LINK_TYPE:         "link_type",
	routerBrVerdictBR_INGRESS_MISMATCH:  "ingress_mismatch",
	routerBrVerdictBR_BAD_LENGTH:        "bad_length",
	routerBrVerdictBR_BAD_SRC_IA:        "bad_src_ia",
	routerBrVerdictBR_BAD_DST_IA:        "bad_dst_ia",
	routerBrVerdictBR_BAD_HOST_ADDR:     "bad_host_addr",
	routerBrVerdictBR_BFD:               "bfd",
	routerBrVerdictBR_LINK_DOWN:         "link_down",
	routerBrVerdictBR_MULTI_BUFFER:      "multi_buffer",
	routerBrVerdictBR_TOO_BIG:           "too_big",
	routerBrVerdictBR_BAD_CHECKSUM:      "bad_checksum",
	routerBrVerdictBR_LOCAL:             "local",
	routerBrVerdictBR_FWD_DISABLED:      "fwd_disabled",
	routerBrVerdictBR_TX_UNUSABLE:       "tx_unusable",
	routerBrVerdictBR_TX_FAILED:         "tx_failed",
}

// VerdictName is the counter name of a verdict.
func VerdictName(v Verdict) string {
	if n, ok := verdictNames[v]; ok {
		return n
	}
	return fmt.Sprintf("verdict_%d", v)
}

// Counter slots (BR_SLOT_*): 0 is the internal interface, the router's
// external interfaces follow in ID order, the last counts what matched no socket.
const (
	maxSlots      = 64
	slotInternal  = 0
	slotUnmatched = maxSlots - 1
)

// objects are the router's programs and maps, whichever variant is loaded.
type objects struct {
	Router     *ebpf.Program `ebpf:"br_router"`
	Spread     *ebpf.Program `ebpf:"br_spread"`
	Conf       *ebpf.Map     `ebpf:"br_conf"`
	Keys       *ebpf.Map     `ebpf:"br_keys"`
	Sockets    *ebpf.Map     `ebpf:"br_sockets"`
	Ports      *ebpf.Map     `ebpf:"br_ports"`
	Ifaces     *ebpf.Map     `ebpf:"br_ifaces"`
	Counters   *ebpf.Map     `ebpf:"br_counters"`
	TxPorts    *ebpf.Map     `ebpf:"br_tx_ports"`
	Egress     *ebpf.Map     `ebpf:"br_egress"`
	LocalAddrs *ebpf.Map     `ebpf:"br_local_addrs"`
	CPUs       *ebpf.Map     `ebpf:"br_cpus"`
	Next       *ebpf.Map     `ebpf:"br_next"`
	NextCPU    *ebpf.Map     `ebpf:"br_next_cpu"`
	IPCounters *ebpf.Map     `ebpf:"br_ip_counters"`
}

func (o *objects) Close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{o.Router, o.Spread, o.Conf, o.Keys, o.Sockets, o.Ports, o.Ifaces, o.Counters, o.TxPorts, o.Egress, o.LocalAddrs, o.CPUs, o.Next, o.NextCPU, o.IPCounters} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// LoadOptions say which variant to load and where its maps live.
type LoadOptions struct {
	// SkipFIB makes forwarded packets leave by XDP_TX with zero MACs instead
	// of a FIB lookup: for offline runs that must not depend on the host.
	SkipFIB bool
	// PinPath, if set, pins the maps there (or reuses the maps pinned there).
	PinPath string
	// NoMACCache computes every hop-field MAC: for timing the worst case.
	NoMACCache bool
}

// Router is a loaded, configured router program; nothing is attached.
type Router struct {
	cfg      *Config
	opts     LoadOptions
	objs     objects
	coll     *ebpf.Collection // what objs does not hold (.rodata, caches)
	maps     map[string]*ebpf.Map
	mapSpecs map[string]*ebpf.MapSpec
	progs    map[string]*ebpf.ProgramSpec // loaded only when needed: worker-CPU, tracing
	cpuProg  *ebpf.Program                // the worker-CPU router, with cpus only
	generic  *ebpf.Program                // the copy for generic mode, once asked for
	tracing  []*ebpf.Program              // the transmit-failure counters, once asked for
	slots    map[uint16]uint16            // interface ID → counter slot, this router's
}

// tracingProgs count failed transmits; see TracingPrograms.
var tracingProgs = []string{"br_tx_redirect_err", "br_tx_devmap", "br_tx_bulk", "br_tx_exception"}

// lateProgs are loaded on the main collection's maps only when needed.
var lateProgs = append([]string{"br_router_cpu", "br_forward_ip", "br_forward_ip_cpu"}, tracingProgs...)

// Load validates cfg, loads the router variant it asks for and fills its
// maps. The caller attaches Program() or runs it.
func Load(cfg *Config, opts LoadOptions) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec, err := routerSpec(cfg, opts, false)
	if err != nil {
		return nil, err
	}
	// Programs used only by some attachments are loaded when used.
	late := map[string]*ebpf.ProgramSpec{}
	for _, n := range lateProgs {
		late[n] = spec.Programs[n]
		delete(spec.Programs, n)
	}
	var copts ebpf.CollectionOptions
	if opts.PinPath != "" {
		for _, m := range spec.Maps {
			if m.Type != ebpf.CPUMap && m.Name != ".rodata" && m.Name != ".bss" && m.Name != ".data" {
				m.Pinning = ebpf.PinByName
			}
		}
		copts.Maps.PinPath = opts.PinPath
	}
	r := &Router{cfg: cfg, opts: opts, slots: map[uint16]uint16{}, mapSpecs: spec.Maps, progs: late}
	coll, err := ebpf.NewCollectionWithOptions(spec, copts)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel refused the router program: %+v", ve)
		}
		return nil, fmt.Errorf("load router: %w", err)
	}
	// Assign takes the maps it hands out off the collection: keep them all.
	r.maps = make(map[string]*ebpf.Map, len(coll.Maps))
	for n, m := range coll.Maps {
		r.maps[n] = m
	}
	r.coll = coll
	if err := coll.Assign(&r.objs); err != nil {
		coll.Close()
		return nil, err
	}
	if len(cfg.CPUs) > 0 {
		if r.cpuProg, err = r.loadLate("br_router_cpu"); err != nil {
			r.Close()
			return nil, err
		}
	}
	if err := r.configure(); err != nil {
		r.Close()
		return nil, err
	}
	if err := r.setForwardIP(cfg.ForwardIP); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// routerSpec is the router variant cfg asks for, with its load-time
// constants set; generic sets the copy for generic-mode attachments.
func routerSpec(cfg *Config, opts LoadOptions, generic bool) (*ebpf.CollectionSpec, error) {
	load := loadRouter
	if !cfg.MACCheck {
		load = loadRouternomac
	}
	spec, err := load()
	if err != nil {
		return nil, fmt.Errorf("load router spec: %w", err)
	}
	set := map[string]any{}
	if opts.SkipFIB {
		set["br_skip_fib"] = uint32(1)
	}
	if opts.NoMACCache {
		set["br_use_mac_cache"] = uint32(0)
	}
	if generic {
		set["br_generic"] = uint32(1)
	}
	if cfg.UDPChecksum == UDPChecksumVerify {
		set["br_verify_udp_csum"] = uint32(1)
	}
	if n := len(cfg.CPUs); n > 0 {
		var ids [64]uint32
		for i, c := range cfg.CPUs {
			ids[i] = uint32(c)
		}
		set["br_num_cpus"], set["br_cpu_ids"] = uint32(n), ids
	}
	for name, v := range set {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	return spec, nil
}

// loadLate loads one of lateProgs on the maps already loaded.
func (r *Router) loadLate(name string) (*ebpf.Program, error) {
	return r.loadOnMaps(name, r.progs[name], r.maps)
}

// loadOnMaps loads a program of a router spec with the maps it references
// taken from maps.
func (r *Router) loadOnMaps(name string, ps *ebpf.ProgramSpec, maps map[string]*ebpf.Map) (*ebpf.Program, error) {
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{name: ps}, Maps: map[string]*ebpf.MapSpec{}}
	repl := map[string]*ebpf.Map{}
	for _, ins := range ps.Instructions {
		if ref := ins.Reference(); ref != "" {
			if m, ok := maps[ref]; ok {
				repl[ref] = m
				spec.Maps[ref] = r.mapSpecs[ref]
			}
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel refused %s: %+v", name, ve)
		}
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	defer coll.Close()
	return coll.DetachProgram(name), nil
}

// setForwardIP fills the router's next-program slot with the plain-IP
// forwarder (br_forward_ip), or empties it: what is not SCION is then
// forwarded in XDP, or passed up as before. The attached router sees the
// change at once; the slot holds its own reference to the program.
func (r *Router) setForwardIP(on bool) error {
	// The worker-CPU router's slot is filled only when it runs (cpus).
	slots := []struct {
		m    *ebpf.Map
		prog string
		use  bool
	}{{r.objs.Next, "br_forward_ip", on}, {r.objs.NextCPU, "br_forward_ip_cpu", on && len(r.cfg.CPUs) > 0}}
	for _, s := range slots {
		if !s.use {
			if err := s.m.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("forward_ip: empty the next-program slot: %w", err)
			}
			continue
		}
		prog, err := r.loadLate(s.prog)
		if err != nil {
			return fmt.Errorf("forward_ip: %w", err)
		}
		err = s.m.Put(uint32(0), prog)
		prog.Close()
		if err != nil {
			return fmt.Errorf("forward_ip: put %s into the next-program slot: %w", s.prog, err)
		}
	}
	return nil
}

// GenericProgram is the router for devices attached in generic mode: the
// same program, loaded once more with br_generic set, on the same maps but
// its own constants.
func (r *Router) GenericProgram() (*ebpf.Program, error) {
	if r.generic != nil {
		return r.generic, nil
	}
	spec, err := routerSpec(r.cfg, r.opts, true)
	if err != nil {
		return nil, err
	}
	maps := map[string]*ebpf.Map{}
	for n, m := range r.maps {
		if n != ".rodata" {
			maps[n] = m
		}
	}
	// The copy's own .rodata holds br_generic. Generic mode hands a
	// frags-aware program skbs unlinearised, which it would only pass:
	// without the flag the kernel linearises them and the router sees all.
	ps := spec.Programs["br_router"]
	ps.Flags &^= unix.BPF_F_XDP_HAS_FRAGS
	rodata := spec.Maps[".rodata"]
	sp := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"br_router": ps}, Maps: map[string]*ebpf.MapSpec{".rodata": rodata}, Variables: spec.Variables}
	// The plain-IP slot is not shared: a program array takes programs of
	// one kind, and the copy is not frags-aware. A generic attachment
	// passes what is not SCION up, as without forward_ip.
	next := *r.mapSpecs["br_next"]
	next.Pinning = ebpf.PinNone
	sp.Maps["br_next"] = &next
	repl := map[string]*ebpf.Map{}
	for _, ins := range ps.Instructions {
		if ref := ins.Reference(); ref != "" && ref != ".rodata" && ref != "br_next" {
			if m, ok := maps[ref]; ok {
				repl[ref] = m
				sp.Maps[ref] = r.mapSpecs[ref]
			}
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(sp, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return nil, fmt.Errorf("load the generic-mode router: %w", err)
	}
	defer coll.Close()
	r.generic = coll.DetachProgram("br_router")
	return r.generic, nil
}

// TracingPrograms are the programs that count failed transmits, attached
// to the kernel's xdp tracepoints (redirect_err, devmap_xmit, bulk_tx,
// exception), by name.
func (r *Router) TracingPrograms() (map[string]*ebpf.Program, error) {
	out := map[string]*ebpf.Program{}
	for _, n := range tracingProgs {
		p, err := r.loadLate(n)
		if err != nil {
			return nil, err
		}
		r.tracing = append(r.tracing, p)
		out[n] = p
	}
	return out, nil
}

// Close unloads the router (pinned maps stay pinned).
func (r *Router) Close() error {
	err := r.objs.Close()
	for _, p := range append([]*ebpf.Program{r.cpuProg, r.generic}, r.tracing...) {
		if p != nil {
			err = errors.Join(err, p.Close())
		}
	}
	if r.coll != nil {
		r.coll.Close()
	}
	return err
}

// Program is the XDP program to attach: the spreader when packets are
// spread over worker CPUs, else the router itself.
func (r *Router) Program() *ebpf.Program {
	if len(r.cfg.CPUs) > 0 {
		return r.objs.Spread
	}
	return r.objs.Router
}

// beIA is an ISD-AS as the kernel compares it: the header's 8 bytes.
func beIA(ia addr.IA) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(ia))
	return binary.NativeEndian.Uint64(b[:])
}

// htons gives the in-memory form of a port in network byte order.
func htons(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

func ntohs(p uint16) uint16 { return htons(p) }

func brAddr(a netip.AddrPort) routerBrAddr {
	var out routerBrAddr
	ip := a.Addr().Unmap()
	if ip.Is4() {
		out.Family = 4
		b := ip.As4()
		copy(out.Addr[:], b[:])
	} else {
		out.Family = 6
		b := ip.As16()
		copy(out.Addr[:], b[:])
	}
	out.Port = htons(a.Port())
	return out
}

func socketKey(a netip.AddrPort) routerBrSocketKey {
	b := brAddr(a)
	return routerBrSocketKey{Addr: b.Addr, Port: b.Port, Family: b.Family}
}

var linkTypes = map[string]uint8{"core": 1, "parent": 2, "child": 3, "peer": 4}

// monoToUnix is what turns the kernel's monotonic clock into Unix time.
func monoToUnix() (int64, error) {
	var mono, real unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return 0, err
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &real); err != nil {
		return 0, err
	}
	return real.Nano() - mono.Nano(), nil
}

// configure writes the configuration into the maps.
func (r *Router) configure() error {
	cfg := r.cfg
	off, err := monoToUnix()
	if err != nil {
		return fmt.Errorf("read clocks: %w", err)
	}
	conf := routerBrConfig{
		LocalIa:             beIA(cfg.IA),
		Internal:            brAddr(cfg.Internal),
		DispatchedPortStart: cfg.DispatchedPortStart,
		DispatchedPortEnd:   cfg.DispatchedPortEnd,
		MonoToUnixNs:        off,
		LinkTimeoutNs:       uint64(cfg.LinkTimeout),
	}
	if cfg.SCMP == SCMPDrop {
		conf.ScmpAction = 1
	}
	// A reload keeps the key generation counting: cached MACs of the old
	// keys must not match the new generation.
	var old routerBrConfig
	if err := r.objs.Conf.Lookup(uint32(0), &old); err == nil {
		conf.KeyGen = old.KeyGen
		conf.NetnsIno = old.NetnsIno
	}
	if err := r.objs.Conf.Put(uint32(0), &conf); err != nil {
		return fmt.Errorf("write router config: %w", err)
	}
	var k1 []byte
	if cfg.KeyRollover {
		k1 = cfg.Keys[1]
	}
	if err := setKeys(r.objs.Conf, r.objs.Keys, map[int][]byte{0: cfg.Keys[0], 1: k1}); err != nil {
		return err
	}

	// Sockets: internal_addr and each external interface's local address.
	sockets := map[routerBrSocketKey]routerBrSocket{
		socketKey(cfg.Internal): {Ifid: 0, Slot: slotInternal},
	}
	ifaces := make(map[uint32]routerBrIface)
	var ext []Interface
	for _, i := range cfg.Interfaces {
		if i.Kind == External {
			ext = append(ext, i)
		}
	}
	sort.Slice(ext, func(a, b int) bool { return ext[a].ID < ext[b].ID })
	if len(ext) > maxSlots-2 {
		return fmt.Errorf("%s: %d external interfaces; the router counts at most %d", cfg.Path, len(ext), maxSlots-2)
	}
	for n, i := range ext {
		r.slots[i.ID] = uint16(n + 1)
		sockets[socketKey(i.Local)] = routerBrSocket{Ifid: i.ID, Slot: uint16(n + 1)}
	}
	for _, i := range cfg.Interfaces {
		v := routerBrIface{LinkType: linkTypes[i.LinkType], NeighborIa: beIA(i.NeighborIA)}
		switch i.Kind {
		case External:
			v.Kind = 1
			v.Slot = r.slots[i.ID]
			v.Local = brAddr(i.Local)
			v.Remote = brAddr(i.Remote)
		case Sibling:
			v.Kind = 2
			v.Remote = brAddr(i.SiblingAddr)
		}
		ifaces[uint32(i.ID)] = v
	}
	for k, v := range sockets {
		if err := r.objs.Sockets.Put(k, v); err != nil {
			return fmt.Errorf("write socket table: %w", err)
		}
	}
	// Interfaces no longer in the configuration are cleared (a reload).
	var empty routerBrIface
	var key uint32
	var val routerBrIface
	it := r.objs.Ifaces.Iterate()
	var stale []uint32
	for it.Next(&key, &val) {
		if _, ok := ifaces[key]; !ok && val.Kind != 0 {
			stale = append(stale, key)
		}
	}
	for _, k := range stale {
		if err := r.objs.Ifaces.Put(k, &empty); err != nil {
			return err
		}
	}
	for k, v := range ifaces {
		if err := r.objs.Ifaces.Put(k, &v); err != nil {
			return fmt.Errorf("write interface %d: %w", k, err)
		}
	}
	// Sockets of an earlier configuration go too.
	var sk routerBrSocketKey
	var sv routerBrSocket
	var oldSockets []routerBrSocketKey
	sit := r.objs.Sockets.Iterate()
	for sit.Next(&sk, &sv) {
		if _, ok := sockets[sk]; !ok {
			oldSockets = append(oldSockets, sk)
		}
	}
	for _, k := range oldSockets {
		_ = r.objs.Sockets.Delete(k)
	}
	return r.writePorts(sockets, oldSockets)
}

// writePorts fills br_ports, the IPv4 sockets by port, from the socket
// table, and clears the ports only old sockets used.
func (r *Router) writePorts(sockets map[routerBrSocketKey]routerBrSocket, old []routerBrSocketKey) error {
	ports := map[uint16]*routerBrPort{}
	for k, v := range sockets {
		port := ntohs(k.Port)
		bp := ports[port]
		if bp == nil {
			bp = &routerBrPort{}
			ports[port] = bp
		}
		if k.Family != 4 {
			continue
		}
		if int(bp.N) == len(bp.V4) {
			bp.Overflow = 1
			continue
		}
		bp.V4[bp.N].Addr4 = binary.NativeEndian.Uint32(k.Addr[:4])
		bp.V4[bp.N].Ifid = v.Ifid
		bp.V4[bp.N].Slot = v.Slot
		bp.N++
	}
	for _, k := range old {
		if _, used := ports[ntohs(k.Port)]; !used {
			if err := r.objs.Ports.Put(uint32(ntohs(k.Port)), &routerBrPort{}); err != nil {
				return err
			}
		}
	}
	for port, bp := range ports {
		if err := r.objs.Ports.Put(uint32(port), bp); err != nil {
			return fmt.Errorf("write port table: %w", err)
		}
	}
	return nil
}

// SetKey puts a forwarding key (the 16-byte AES key derived from a master
// key) into a slot, or clears the slot for a nil key. Slot 1 is checked only
// after slot 0 fails: it serves key rollovers.
func (r *Router) SetKey(slot int, key []byte) error {
	return setKeys(r.objs.Conf, r.objs.Keys, map[int][]byte{slot: key})
}

// setKeys writes key slots between two bumps of the key generation: before,
// so that no packet checked with an old key is cached as the new generation
// while the keys change; after, so that none checked during the change is.
func setKeys(conf, keys *ebpf.Map, slots map[int][]byte) error {
	vals := map[int]routerBrKey{}
	for slot, key := range slots {
		if slot < 0 || slot > 1 {
			return fmt.Errorf("key slot %d: the router has slots 0 and 1", slot)
		}
		var k routerBrKey
		if key != nil {
			rk, err := CMACRoundKeys(key)
			if err != nil {
				return err
			}
			k.Valid = 1
			k.Rk = rk
		}
		vals[slot] = k
	}
	if err := bumpKeyGen(conf); err != nil {
		return err
	}
	for slot, k := range vals {
		if err := keys.Put(uint32(slot), &k); err != nil {
			return fmt.Errorf("write key slot %d: %w", slot, err)
		}
	}
	return bumpKeyGen(conf)
}

func bumpKeyGen(conf *ebpf.Map) error {
	var c routerBrConfig
	if err := conf.Lookup(uint32(0), &c); err != nil {
		return fmt.Errorf("read router config: %w", err)
	}
	c.KeyGen++
	if err := conf.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("write router config: %w", err)
	}
	return nil
}

// Counts are the router's counters summed over CPUs: [slot][verdict].
type Counts [maxSlots][VerdictCount]struct{ Packets, Bytes uint64 }

func readCounters(m *ebpf.Map) (*Counts, error) {
	var c Counts
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	n := maxSlots * VerdictCount
	keys := make([]uint32, n)
	vals := make([]routerBrCounter, n*ncpu)
	var cursor ebpf.MapBatchCursor
	got, err := m.BatchLookup(&cursor, keys, vals, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	for i := 0; i < got; i++ {
		k := int(keys[i])
		if k >= n {
			continue
		}
		for cpu := 0; cpu < ncpu; cpu++ {
			x := vals[i*ncpu+cpu]
			c[k/VerdictCount][k%VerdictCount].Packets += x.Packets
			c[k/VerdictCount][k%VerdictCount].Bytes += x.Bytes
		}
	}
	return &c, nil
}

// Counters reads the router's counters.
func (r *Router) Counters() (*Counts, error) { return readCounters(r.objs.Counters) }

// IPCounters reads the plain-IP forwarder's counters by verdict name.
func (r *Router) IPCounters() (map[string]Stat, error) { return readIPCounters(r.objs.IPCounters) }

// SetHost tells the router about the host it runs on: the network
// namespace of its devices (the transmit tracepoints see every namespace),
// the addresses there that are the host's own (a next hop there is
// delivered by the kernel), and the devices it may send frames to.
func (r *Router) SetHost(ns string, tx []xdp.Iface) error {
	ino, err := xdp.NetnsInode(ns)
	if err != nil {
		return err
	}
	var conf routerBrConfig
	if err := r.objs.Conf.Lookup(uint32(0), &conf); err != nil {
		return fmt.Errorf("read router config: %w", err)
	}
	conf.NetnsIno = uint32(ino)
	if err := r.objs.Conf.Put(uint32(0), &conf); err != nil {
		return fmt.Errorf("write router config: %w", err)
	}
	m := r.hostMaps()
	local, err := hostAddrs(ns)
	if err != nil {
		return err
	}
	if _, _, err := m.setLocalAddrs(local); err != nil {
		return err
	}
	ports := map[uint32]bool{}
	for _, d := range tx {
		a, err := xdp.Lookup(d)
		if err != nil {
			return err
		}
		ports[uint32(a.Index)] = true
	}
	_, _, err = m.setEgress(ns, ports, r.cfg)
	return err
}

// hostMaps are the maps that hold what the router knows of its host: they
// are written at attach and kept in step by a Keeper.
type hostMaps struct {
	localAddrs, txPorts, egress, nhCache *ebpf.Map
}

func (r *Router) hostMaps() hostMaps {
	return hostMaps{localAddrs: r.objs.LocalAddrs, txPorts: r.objs.TxPorts, egress: r.objs.Egress, nhCache: r.maps["br_nh_cache"]}
}

// hostAddrs are the addresses of the namespace's devices, as
// br_local_addrs keys them.
func hostAddrs(ns string) (map[routerBrAddr]bool, error) {
	local := map[routerBrAddr]bool{}
	err := netns.Run(ns, func() error {
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					local[brAddr(netip.AddrPortFrom(ip.Unmap(), 0))] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", nsName(ns), err)
	}
	return local, nil
}

// setLocalAddrs makes br_local_addrs hold exactly the addresses given and
// says what it added and removed.
func (m hostMaps) setLocalAddrs(want map[routerBrAddr]bool) (added, removed []routerBrAddr, err error) {
	added, removed, err = syncSet(m.localAddrs, want, uint8(1))
	if err != nil {
		return nil, nil, fmt.Errorf("write local addresses: %w", err)
	}
	return added, removed, nil
}

// setEgress makes the devices of ports (by index) the ones frames may be
// redirected to, and says which it added and removed. A device is added
// to the redirect map before br_egress lets a packet choose it, and taken
// out of br_egress before the redirect map, so that no packet is passed
// up for a device that stays usable, and none redirected to a missing
// entry. Next hops the router cached on a removed device (up to half a
// second) are dropped with it, so that its traffic falls back at once
// instead of being sent into a device that drops it.
func (m hostMaps) setEgress(ns string, ports map[uint32]bool, cfg *Config) (added, removed []uint32, err error) {
	// A devmap resolves indexes in the namespace of the thread updating it.
	err = netns.Run(ns, func() error {
		have, err := keys[uint32, uint32](m.txPorts)
		if err != nil {
			return fmt.Errorf("read the redirect map: %w", err)
		}
		for idx := range ports {
			if !have[idx] {
				if err := m.txPorts.Put(idx, idx); err != nil {
					return fmt.Errorf("add device %d to the redirect map: %w", idx, err)
				}
			}
		}
		if added, removed, err = syncSet(m.egress, ports, uint8(1)); err != nil {
			return fmt.Errorf("write the egress devices: %w", err)
		}
		if len(removed) > 0 && m.nhCache != nil {
			if err := clearNextHops(m.nhCache, cfg); err != nil {
				return err
			}
		}
		for idx := range have {
			if !ports[idx] {
				if err := m.txPorts.Delete(idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("remove device %d from the redirect map: %w", idx, err)
				}
			}
		}
		return nil
	})
	return added, removed, err
}

// clearNextHops empties the next-hop cache entries of the configuration's
// interfaces on every CPU: the next packet to each asks the FIB and
// br_egress again.
func clearNextHops(m *ebpf.Map, cfg *Config) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	zero := make([]routerBrNh, ncpu)
	for _, i := range cfg.Interfaces {
		if err := m.Put(uint32(i.ID), zero); err != nil {
			return fmt.Errorf("clear the next hop of interface %d: %w", i.ID, err)
		}
	}
	return nil
}

// syncSet makes a hash map hold exactly the keys of want, each with val:
// new keys first, then stale ones go. It says which keys it added and
// which it removed.
func syncSet[K comparable, V any](m *ebpf.Map, want map[K]bool, val V) (added, removed []K, err error) {
	have, err := keys[K, V](m)
	if err != nil {
		return nil, nil, err
	}
	for k := range want {
		if have[k] {
			continue
		}
		if err := m.Put(k, val); err != nil {
			return added, removed, err
		}
		added = append(added, k)
	}
	for k := range have {
		if want[k] {
			continue
		}
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return added, removed, err
		}
		removed = append(removed, k)
	}
	return added, removed, nil
}

func nsName(ns string) string {
	if ns == "" {
		return "this network namespace"
	}
	return "network namespace " + ns
}
