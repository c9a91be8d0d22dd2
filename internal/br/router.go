package br

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
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
	routerBrVerdictBR_TX_NO_SG:          "tx_no_sg",
	routerBrVerdictBR_OTHER_HOST:        "other_host",
	routerBrVerdictBR_WRONG_DEVICE:      "wrong_device",
	routerBrVerdictBR_UNKNOWN_DEVICE:    "unknown_device",
	routerBrVerdictBR_STUN:              "stun",
	routerBrVerdictBR_UNKNOWN_L4:        "unknown_l4",
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
	Vars       *ebpf.Map     `ebpf:"br_vars"`
	Devs       *ebpf.Map     `ebpf:"br_devs"`
	DevsMore   *ebpf.Map     `ebpf:"br_devs_more"`
	SlotDevs   *ebpf.Map     `ebpf:"br_slot_devs"`
	LocalAddrs *ebpf.Map     `ebpf:"br_local_addrs"`
	CPUs       *ebpf.Map     `ebpf:"br_cpus"`
	Next       *ebpf.Map     `ebpf:"br_next"`
	NextCPU    *ebpf.Map     `ebpf:"br_next_cpu"`
	IPCounters *ebpf.Map     `ebpf:"br_ip_counters"`
}

func (o *objects) Close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{o.Router, o.Spread, o.Conf, o.Keys, o.Sockets, o.Ports, o.Ifaces, o.Counters, o.TxPorts, o.Vars, o.Devs, o.DevsMore, o.SlotDevs, o.LocalAddrs, o.CPUs, o.Next, o.NextCPU, o.IPCounters} {
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
	// Warn receives what an upgrade does not carry over.
	Warn io.Writer
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
	// migration carries the maps another release pinned into this one's
	// layout; Attach commits it once the program runs on every device.
	migration *xdp.Migration
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
	if opts.PinPath != "" {
		// Maps pinned by another release in another layout are carried
		// into this one's (docs/upgrade.md); one that cannot be is refused
		// here, before anything changed.
		mig, err := xdp.PrepareMigration(spec, opts.PinPath, xdp.MigrateOptions{Counters: map[string]bool{"br_counters": true, "br_ip_counters": true}, Warn: opts.Warn})
		if err != nil {
			return nil, fmt.Errorf("router %s: %w; the running router is left as it is", filepath.Base(opts.PinPath), err)
		}
		r.migration = mig
		copts.MapReplacements = mig.Replacements()
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, copts)
	if err != nil {
		r.migration.Close()
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel refused the router program: %+v", ve)
		}
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("the maps pinned in %s were made by another version of fastpath and do not fit this one (%w): detach the router (`fastpath br detach --router %s`) and attach it again", opts.PinPath, err, filepath.Base(opts.PinPath))
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
	if opts.PinPath == "" {
		// An offline router runs frames that come in by lo (a test run's
		// ingress device), which it must know.
		if err := r.writeHost("", hostView{}, discard); err != nil {
			r.Close()
			return nil, err
		}
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
	layout(spec)
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
	r.migration.Close()
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

// enum br_ref_flags of bpf/br/br_shared.h (no BTF type: the field is a
// __u8); keep in step.
const (
	refRedirectOutsideRange uint8 = 1 << iota
	refTCPToPort
	refKnownL4
	refSTUN
	refSiblingPort
)

// referenceFlags are br_config.reference for a release's router.
func referenceFlags(r scionproto.Router) uint8 {
	var f uint8
	if r.RedirectOutsideRange {
		f |= refRedirectOutsideRange
	}
	if r.TCPToPort {
		f |= refTCPToPort
	}
	if r.KnownL4 {
		f |= refKnownL4
	}
	if r.STUN {
		f |= refSTUN
	}
	if r.SiblingPort {
		f |= refSiblingPort
	}
	return f
}

// configure writes the configuration into the maps.
func (r *Router) configure() error {
	cfg := r.cfg
	conf := routerBrConfig{
		LocalIa:             beIA(cfg.IA),
		Internal:            brAddr(cfg.Internal),
		DispatchedPortStart: cfg.DispatchedPortStart,
		DispatchedPortEnd:   cfg.DispatchedPortEnd,
		LinkTimeoutNs:       uint64(cfg.LinkTimeout),
	}
	if cfg.SCMP == SCMPDrop {
		conf.ScmpAction = 1
	}
	if cfg.ForwardIPExternal {
		conf.IpFromExternal = 1
	}
	ref := scionproto.RouterOf(cfg.Reference())
	conf.Reference = referenceFlags(ref)
	conf.MaxDatagram = uint16(ref.MaxDatagram)
	if err := r.objs.Conf.Put(uint32(0), &conf); err != nil {
		return fmt.Errorf("write router config: %w", err)
	}
	if _, err := setClock(r.objs.Vars); err != nil {
		return err
	}
	var k1 []byte
	if cfg.KeyRollover {
		k1 = cfg.Keys[1]
	}
	if err := setKeys(r.objs.Vars, r.objs.Keys, map[int][]byte{0: cfg.Keys[0], 1: k1}); err != nil {
		return err
	}

	// Sockets: internal_addr and each external interface's local address.
	sockets := map[routerBrSocketKey]routerBrSocket{
		socketKey(cfg.Internal): {Ifid: 0, Slot: slotInternal},
	}
	ifaces := make(map[uint32]routerBrIface)
	r.slots = counterSlots(cfg)
	if len(r.slots) > maxSlots-2 {
		return fmt.Errorf("%s: %d external interfaces; the router counts at most %d", cfg.Path, len(r.slots), maxSlots-2)
	}
	for _, i := range cfg.Interfaces {
		if i.Kind == External {
			sockets[socketKey(i.Local)] = routerBrSocket{Ifid: i.ID, Slot: r.slots[i.ID]}
		}
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
	return setKeys(r.objs.Vars, r.objs.Keys, map[int][]byte{slot: key})
}

// setKeys writes key slots between two changes of the key generation:
// before, so that no packet checked with an old key is cached as the new
// generation while the keys change; after, so that none checked during the
// change is. Each change writes a value never used before
// (newGeneration): two processes changing keys at once (a reload and `br
// key add`) could otherwise write the same generation, one of them after
// the other's keys, and MACs cached under an old key would count again.
func setKeys(vars, keys *ebpf.Map, slots map[int][]byte) error {
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
	if err := newGeneration(vars, varKeyGen); err != nil {
		return err
	}
	for slot, k := range vals {
		if err := keys.Put(uint32(slot), &k); err != nil {
			return fmt.Errorf("write key slot %d: %w", slot, err)
		}
	}
	return newGeneration(vars, varKeyGen)
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
// the devices it is (or would be) attached to, and from them what it looks
// up itself: the devices a next hop leaves by, what each takes of XDP
// frames and whether it faces the AS or a neighbour, and the host's own
// addresses (a next hop there is delivered by the kernel).
func (r *Router) SetHost(ns string, devs []xdp.Iface) error {
	return r.setHost(ns, devs, discard)
}

// discard is the log of an offline router: nobody reads its warnings.
var discard = slog.New(slog.DiscardHandler)

// offlineLo is lo as an offline router knows it: a test run's frames come
// in by it (no Ethernet check: it has no MAC).
var offlineLo = hostDev{
	iface: xdp.Iface{Name: "lo"}, index: 1, tx: xdp.Tx{Frames: true, MultiBuffer: true},
	flags: uint16(routerBrDevFlagsBR_DEV_XMIT | routerBrDevFlagsBR_DEV_XMIT_SG | routerBrDevFlagsBR_DEV_UP | routerBrDevFlagsBR_DEV_INTERNAL),
}

// setHost is SetHost, warning on log (naming the fix) of devices a frame
// may leave by that take no XDP frames, and of addresses left out.
func (r *Router) setHost(ns string, devs []xdp.Iface, log *slog.Logger) error {
	v, err := lookHost(r.cfg, ns, devs, txState)
	if err != nil {
		return err
	}
	warnHost(v, log)
	return r.writeHost(ns, v, log)
}

// writeHost writes a view of the host into the maps.
func (r *Router) writeHost(ns string, v hostView, log *slog.Logger) error {
	ino, err := xdp.NetnsInode(ns)
	if err != nil {
		return err
	}
	if err := setVar(r.objs.Vars, varNetns, ino); err != nil {
		return err
	}
	if r.opts.PinPath == "" {
		// Offline, every frame comes in by lo: no external interface's
		// traffic arrives where its neighbour is reached.
		v.devs = append(v.devs, offlineLo)
		v.slotDevs = nil
	}
	_, _, err = r.hostMaps().write(ns, v)
	if errors.Is(err, errLocalAddrsFull) {
		localAddrsFull(log, ns, err)
		return nil
	}
	return err
}

func (r *Router) hostMaps() hostMaps {
	return hostMaps{localAddrs: r.objs.LocalAddrs, txPorts: r.objs.TxPorts, devs: r.objs.Devs, devsMore: r.objs.DevsMore, slotDevs: r.objs.SlotDevs, vars: r.objs.Vars}
}

func nsName(ns string) string {
	if ns == "" {
		return "this network namespace"
	}
	return "network namespace " + ns
}
