package fw

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// PinRoot holds one directory per firewall instance: its maps pinned by
// name and one link per device.
var PinRoot = filepath.Join(preflight.BPFFS, "fastpath", "fw")

// DefaultName is the instance name when none is given.
const DefaultName = "default"

// ErrNotAttached is returned for an instance or device with nothing attached.
var ErrNotAttached = errors.New("not attached")

// PinDir is where an instance's maps and links are pinned.
func PinDir(name string) string { return filepath.Join(PinRoot, name) }

// LoadOptions configure Load.
type LoadOptions struct {
	// PinPath, if set, pins the maps there or reuses those pinned there.
	PinPath string
	// MaxFlows is how many flows the flow table holds per CPU (default
	// DefaultMaxFlows), rounded up to a power of two. Ignored when the
	// maps are reused from pins.
	MaxFlows uint32
	// Warn receives what an upgrade does not carry over.
	Warn io.Writer
	// CtMax and CtEmbryonic size connection tracking's tables: the
	// established one (never evicts) and the embryonic LRU. 0: the
	// defaults. Ignored when the maps are reused from pins.
	CtMax, CtEmbryonic uint32
}

// Connection tracking's table sizes by default: some 20 MB for the
// established table of 131,072 entries (128 bytes each, key and hash
// overhead aside), 5 MB for the embryonic one.
const (
	DefaultCtMax       = 131072
	DefaultCtEmbryonic = 32768
)

// Firewall is a loaded firewall: its program and maps.
type Firewall struct {
	objs  fwObjects
	specs map[string]*ebpf.MapSpec
	// dir is the pin directory, locked while a rule set is installed so
	// that two processes never build into the same slot.
	dir string
	mu  sync.Mutex
	// spec is what was loaded, for the generic-mode copy.
	spec    *ebpf.CollectionSpec
	generic *ebpf.Program
	// pinnedReap is the reaper loaded for an instance opened from pins.
	pinnedReap *ebpf.Program
	// names is the rule names' map (names.go), once opened; namesRW says
	// it was opened to write.
	names   *ebpf.Map
	namesRW bool
	// migration carries the pinned maps of another release into this
	// one's layout (an upgrade or a rollback); Attach commits it once the
	// program runs on every device.
	migration *xdp.Migration
}

// Load loads the program and creates (or reopens) its maps.
func Load(opts LoadOptions) (*Firewall, error) {
	spec, err := loadFwSpec()
	if err != nil {
		return nil, fmt.Errorf("read the firewall program: %w", err)
	}
	if opts.MaxFlows == 0 {
		opts.MaxFlows = DefaultMaxFlows
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	sets := flowSets(opts.MaxFlows)
	spec.Maps["fw_flows"].MaxEntries = sets * uint32(ncpu)
	spec.Maps["fw_tags"].MaxEntries = sets * uint32(ncpu)
	if opts.CtMax > 0 {
		spec.Maps["fw_ct_est"].MaxEntries = opts.CtMax
	}
	if opts.CtEmbryonic > 0 {
		spec.Maps["fw_ct_new"].MaxEntries = opts.CtEmbryonic
	}
	// Two prefixes a source: room for every entry's own.
	spec.Maps["fw_ct_src"].MaxEntries = 2 * spec.Maps["fw_ct_est"].MaxEntries
	// Frags-aware, as the programs it hands frames to (the router, the
	// translator) are: a tail call needs the two of one kind. The flag
	// changes nothing for frames of one buffer; a device whose MTU allows
	// longer ones takes the firewall now, which sees their first buffer.
	spec.Programs["fw_xdp"].Flags |= unix.BPF_F_XDP_HAS_FRAGS
	var copts ebpf.CollectionOptions
	if opts.PinPath != "" {
		pinAll(spec)
		copts.Maps.PinPath = opts.PinPath
		if err := sizeFromPins(spec, opts.PinPath); err != nil {
			return nil, err
		}
	}
	f := &Firewall{specs: spec.Maps, dir: opts.PinPath, spec: spec.Copy()}
	if opts.PinPath != "" {
		// Maps pinned by another release in another layout are carried
		// into this one's (docs/upgrade.md); one that cannot be is refused
		// here, before anything changed.
		mig, err := xdp.PrepareMigration(spec, opts.PinPath, xdp.MigrateOptions{Counters: map[string]bool{"fw_counters": true, "fw_stats": true}, Warn: opts.Warn})
		if err != nil {
			return nil, fmt.Errorf("firewall %q: %w; the running firewall is left as it is", filepath.Base(opts.PinPath), err)
		}
		f.migration = mig
		copts.MapReplacements = mig.Replacements()
	}
	if err := spec.LoadAndAssign(&f.objs, &copts); err != nil {
		f.migration.Close()
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load the firewall program: %+v", ve)
		}
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			// An instance pinned by a fastpath whose maps had another
			// layout (this one added connection tracking to the
			// settings, for one).
			return nil, fmt.Errorf("the maps pinned in %s were made by another version of fastpath and do not fit this one (%w): detach the instance with the fastpath that attached it, or `fastpath fw detach --name %s`, then attach again with your rules file", opts.PinPath, err, filepath.Base(opts.PinPath))
		}
		return nil, fmt.Errorf("load the firewall program: %w", err)
	}
	// The data path finds a flow's set with this mask.
	mask := f.objs.FwFlows.MaxEntries()/uint32(ncpu) - 1
	if err := f.updateConfig(func(c *fwFwConfig) { c.FlowMask = mask }); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// loadFwSpec is the firewall's object as this build loads it (layout.go).
func loadFwSpec() (*ebpf.CollectionSpec, error) {
	spec, err := loadFw()
	if err == nil {
		layout(spec)
	}
	return spec, err
}

// sizeFromPins gives the flow table and the conntrack tables the sizes of
// those pinned in dir, if any: their sizes were chosen when the instance was
// created.
func sizeFromPins(spec *ebpf.CollectionSpec, dir string) error {
	for _, name := range []string{"fw_flows", "fw_tags", "fw_ct_est", "fw_ct_new", "fw_ct_src"} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open the pinned %s: %w", name, err)
		}
		spec.Maps[name].MaxEntries = m.MaxEntries()
		m.Close()
	}
	return nil
}

// flowSets is the number of sets for n flows per CPU: a power of two.
func flowSets(n uint32) uint32 {
	sets := max(n/flowWays, 1)
	if sets&(sets-1) != 0 {
		sets = 1 << bits.Len32(sets)
	}
	return min(sets, 1<<24)
}

// DefaultMaxFlows is the flow table's size per CPU: the flows that come
// back, for fw top and the per-flow counters. Every packet reads its set's
// tags, 4 bytes per flow, so the default keeps them in cache.
const DefaultMaxFlows = 32768

func pinAll(spec *ebpf.CollectionSpec) {
	for _, m := range spec.Maps {
		if m.Name != ".bss" && m.Name != ".data" && m.Name != ".rodata" {
			m.Pinning = ebpf.PinByName
		}
	}
}

// OpenPinned opens the maps of an attached instance (not the program).
func OpenPinned(name string) (*Firewall, error) {
	dir := PinDir(name)
	if _, err := os.Stat(filepath.Join(dir, "fw_gen")); err != nil {
		known, _ := Attached()
		return nil, fmt.Errorf("firewall %q: %w (attached: %v); run fastpath fw attach first", name, ErrNotAttached, known)
	}
	spec, err := loadFwSpec()
	if err != nil {
		return nil, err
	}
	pinAll(spec)
	if err := sizeFromPins(spec, dir); err != nil {
		return nil, err
	}
	f := &Firewall{specs: spec.Maps, dir: dir}
	if err := spec.LoadAndAssign(&f.objs.fwMaps, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: dir}}); err != nil {
		return nil, fmt.Errorf("open the maps of firewall %q: %w", name, err)
	}
	return f, nil
}

// Attached lists the instances with pins.
func Attached() ([]string, error) { return xdp.Instances(PinRoot) }

// Program is the XDP program (nil for an instance opened from pins).
func (f *Firewall) Program() *ebpf.Program { return f.objs.FwXdp }

// GenericProgram is the firewall for devices attached in generic mode: the
// same program on the same pinned maps, with a next-program array of its own
// that stays empty: the chain to another program is made in native mode
// only. It stays frags-aware: the kernel then hands it a GRO packet as it
// is, where for a program that is not it first copies the packet into one
// buffer (host-mode TCP at half the rate, measured with fw-host-generic);
// its length is counted whole all the same (fw_whole_len).
func (f *Firewall) GenericProgram() (*ebpf.Program, error) {
	if f.generic != nil {
		return f.generic, nil
	}
	if f.dir == "" || f.spec == nil {
		return nil, errors.New("the generic-mode firewall needs a pinned instance")
	}
	spec := f.spec.Copy()
	ps := spec.Programs["fw_xdp"]
	if err := spec.Variables["fw_whole_len"].Set(uint8(1)); err != nil {
		return nil, fmt.Errorf("load the generic-mode firewall: %w", err)
	}
	spec.Programs = map[string]*ebpf.ProgramSpec{"fw_xdp": ps}
	spec.Maps[FwNextName].Pinning = ebpf.PinNone
	// Until an upgrade is committed, the pins still hold the old maps.
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: f.dir}, MapReplacements: f.migration.Replacements()})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load the generic-mode firewall: %+v", ve)
		}
		return nil, fmt.Errorf("load the generic-mode firewall: %w", err)
	}
	defer coll.Close()
	f.generic = coll.DetachProgram("fw_xdp")
	return f.generic, nil
}

// FwNextName is the firewall's array of programs that run behind it, by
// ifindex (xdp.FrontNext).
const FwNextName = xdp.FrontNext

// Close releases the handles; pinned maps stay.
func (f *Firewall) Close() error {
	if f.generic != nil {
		f.generic.Close()
	}
	if f.pinnedReap != nil {
		f.pinnedReap.Close()
	}
	if f.names != nil {
		f.names.Close()
	}
	f.migration.Close()
	if f.objs.FwXdp != nil {
		return f.objs.Close()
	}
	return f.objs.fwMaps.Close()
}

// slotMaps are one rule set's maps, in the order of their outer arrays.
type slotMaps struct {
	set, cls4, leaf4, snode4, ivl6, node, wild, pwide, pnarrow, pblock, cand, hull, rule *ebpf.Map
}

func (s *slotMaps) all() []**ebpf.Map {
	return []**ebpf.Map{&s.set, &s.cls4, &s.leaf4, &s.snode4, &s.ivl6, &s.node, &s.wild, &s.pwide, &s.pnarrow, &s.pblock, &s.cand, &s.hull, &s.rule}
}

func (s *slotMaps) close() {
	for _, m := range s.all() {
		if *m != nil {
			(*m).Close()
		}
	}
}

func (f *Firewall) outers() []*ebpf.Map {
	m := &f.objs.fwMaps
	return []*ebpf.Map{m.FwSetSlots, m.FwCls4Slots, m.FwLeaf4Slots, m.FwSnode4Slots, m.FwIvl6Slots, m.FwNodeSlots, m.FwWildSlots, m.FwPwideSlots, m.FwPnarrowSlots, m.FwPblockSlots, m.FwCandSlots, m.FwHullSlots, m.FwRuleSlots}
}

var outerNames = []string{"fw_set_slots", "fw_cls4_slots", "fw_leaf4_slots", "fw_snode4_slots", "fw_ivl6_slots", "fw_node_slots", "fw_wild_slots", "fw_pwide_slots", "fw_pnarrow_slots", "fw_pblock_slots", "fw_cand_slots", "fw_hull_slots", "fw_rule_slots"}

// Generation is the active rule set's generation; 0 before the first Install.
func (f *Firewall) Generation() (uint32, error) {
	var gen uint32
	if err := f.objs.FwGen.Lookup(uint32(0), &gen); err != nil {
		return 0, fmt.Errorf("read the rule-set generation: %w", err)
	}
	return gen, nil
}

// Install validates rs, builds it in the unused slot and then makes it the
// active set with one write. A packet sees the old set or the new one, never
// a mix; flows are classified again on their next packet. On error the
// running rules are untouched.
func (f *Firewall) Install(rs *RuleSet) error {
	if err := rs.Validate(); err != nil {
		return err
	}
	c := compile(rs)
	unlock, err := f.lock()
	if err != nil {
		return err
	}
	defer unlock()
	// Tracking starts before rules that match on its states are active,
	// and stops only after the last of them is gone.
	on := rs.ConntrackOn()
	if rs.Conntrack == nil {
		// A file that says nothing of connection tracking keeps what
		// runs: turning it off would break the connections it follows
		// (those the synproxy opened first), and a later fw add of a
		// ct_state rule would find their windows stale. Only a
		// [conntrack] table turns it off.
		running, err := f.conntrackOn()
		if err != nil {
			return err
		}
		on = on || running
	}
	if on {
		if err := f.setConntrack(true, rs.Conntrack); err != nil {
			return err
		}
	}
	if err := f.install(c, rs); err != nil {
		return err
	}
	if !on {
		return f.setConntrack(false, rs.Conntrack)
	}
	return nil
}

// Connection tracking's defaults: Linux's timeouts (seconds, by enum
// fw_ct_timeout) and the synproxy's MSS and TTL.
var ctTimeouts = map[fwFwCtTimeout]uint32{
	fwFwCtTimeoutFW_CTT_SYN_SENT: 120, fwFwCtTimeoutFW_CTT_SYN_RECV: 60, fwFwCtTimeoutFW_CTT_ESTABLISHED: 432000,
	fwFwCtTimeoutFW_CTT_FIN_WAIT: 120, fwFwCtTimeoutFW_CTT_CLOSE_WAIT: 60, fwFwCtTimeoutFW_CTT_LAST_ACK: 30,
	fwFwCtTimeoutFW_CTT_TIME_WAIT: 120, fwFwCtTimeoutFW_CTT_CLOSE: 10, fwFwCtTimeoutFW_CTT_SYN_SENT2: 120,
	fwFwCtTimeoutFW_CTT_RETRANS: 300, fwFwCtTimeoutFW_CTT_UNACK: 300,
	fwFwCtTimeoutFW_CTT_UDP: 30, fwFwCtTimeoutFW_CTT_UDP_STREAM: 120,
	fwFwCtTimeoutFW_CTT_ICMP: 30, fwFwCtTimeoutFW_CTT_GENERIC: 600,
	fwFwCtTimeoutFW_CTT_GRE: 30, fwFwCtTimeoutFW_CTT_GRE_STREAM: 180,
}

// Flags of fw_config.ct_flags (enum fw_ct_flag), in its field's width.
const (
	ctfOn      = uint32(fwFwCtFlagFW_CTF_ON)
	ctfLoose   = uint32(fwFwCtFlagFW_CTF_LOOSE)
	ctfLiberal = uint32(fwFwCtFlagFW_CTF_LIBERAL)
	ctfStrict  = uint32(fwFwCtFlagFW_CTF_STRICT)
	// ctfGiven is ours, not the program's (which looks at FW_CTF_ON alone
	// to know whether it tracks): the flags beside it are options a file
	// gave, kept while tracking is off. An instance that an earlier
	// fastpath turned off has all flags clear, which would read as
	// no_pickup without it.
	ctfGiven = uint32(1) << 31
)

// setConntrack turns tracking on or off. opts, if given, become the
// instance's options, kept also while tracking is off, so that whatever
// turns it on later (fw add of a ct_state rule, a file without a
// [conntrack] table) tracks as the last file said; nil keeps the
// instance's options, or gives the defaults (Linux's) if it has none.
func (f *Firewall) setConntrack(on bool, opts *Conntrack) error {
	onBit := uint32(0)
	if on {
		onBit = ctfOn
	}
	return f.updateConfig(func(c *fwFwConfig) {
		if opts == nil && c.CtFlags&(ctfOn|ctfGiven) != 0 {
			c.CtFlags = c.CtFlags&^ctfOn | onBit
			return
		}
		if opts == nil {
			opts = &Conntrack{}
		}
		c.CtFlags = ctfGiven | onBit
		if !opts.NoPickup {
			c.CtFlags |= ctfLoose
		}
		if opts.Liberal {
			c.CtFlags |= ctfLiberal
		}
		if opts.Strict {
			c.CtFlags |= ctfStrict
		}
		perSource, perNetwork, net4, net6 := opts.shares(f.objs.FwCtEst.MaxEntries())
		c.CtSrcMax, c.CtSrcWideMax = perSource, perNetwork
		c.CtSrcBits = [2]uint8{sourcePrefix4, sourcePrefix6}
		c.CtSrcWideBits = [2]uint8{net4, net6}
		for i, t := range ctTimeouts {
			c.CtTimeout[i] = t
		}
		if c.SynproxyMss4 == 0 {
			c.SynproxyMss4, c.SynproxyMss6, c.SynproxyTtl = 1460, 1440, 64
		}
	})
}

// conntrackOn says whether the instance tracks connections now.
func (f *Firewall) conntrackOn() (bool, error) {
	var c fwFwConfig
	if err := f.objs.FwConf.Lookup(uint32(0), &c); err != nil {
		return false, fmt.Errorf("read the settings: %w", err)
	}
	return c.CtFlags&ctfOn != 0, nil
}

// ensureConntrack turns tracking on, with the instance's options, unless
// it is on.
func (f *Firewall) ensureConntrack() error {
	var c fwFwConfig
	if err := f.objs.FwConf.Lookup(uint32(0), &c); err != nil {
		return fmt.Errorf("read the settings: %w", err)
	}
	if c.CtFlags&ctfOn != 0 {
		return nil
	}
	return f.setConntrack(true, nil)
}

// install makes rs, compiled, the active set; the caller holds the lock.
func (f *Firewall) install(c *compiled, rs *RuleSet) error {
	gen, ov, err := f.overlay()
	if err != nil {
		return err
	}
	// The active overlay uses one slot of maps and of counters; the new
	// set takes the others, which no packet uses any more.
	base, stats := 1-ov.Base, 1-ov.Stats
	var s slotMaps
	defer s.close()
	if err := f.build(c, &s); err != nil {
		return err
	}
	if err := f.resetStats(stats, 0, len(c.rules)); err != nil {
		return err
	}
	ids := make([]uint32, len(rs.Rules))
	for i := range ids {
		ids[i] = uint32(i + 1)
	}
	if err := f.writeNames(stats, true, ids, rs.Rules); err != nil {
		return err
	}
	for i, outer := range f.outers() {
		if err := outer.Put(base, *s.all()[i]); err != nil {
			return fmt.Errorf("install %s: %w", outerNames[i], err)
		}
	}
	if err := f.setRateLimit(rs.RateLimit); err != nil {
		return err
	}
	n := uint32(len(c.rules) - 1)
	ov = fwFwOverlay{Base: base, Stats: stats, NextId: n + 1, Nbase: n, DefaultAction: uint32(c.set.DefaultAction)}
	return f.activate(gen, ov, nil, make([]uint64, deadWords))
}

// Sizes of the overlays (bpf/fw/fw_shared.h).
const (
	maxAdded  = 4096
	deadWords = 1 << (statsSlotShift - 6)
	prioShift = 12
)

// overlay reads the generation and the active overlay.
func (f *Firewall) overlay() (uint32, fwFwOverlay, error) {
	var ov fwFwOverlay
	gen, err := f.Generation()
	if err != nil {
		return 0, ov, err
	}
	if err := f.objs.FwOverlays.Lookup(gen&1, &ov); err != nil {
		return 0, ov, fmt.Errorf("read the rule-set overlay: %w", err)
	}
	return gen, ov, nil
}

// activate writes an overlay into the one the data path does not use and
// makes it active with one write of fw_gen.
func (f *Firewall) activate(gen uint32, ov fwFwOverlay, added []fwFwRule, dead []uint64) error {
	next := (gen + 1) & 1
	if len(added) > 0 {
		keys := make([]uint32, len(added))
		for i := range keys {
			keys[i] = next*maxAdded + uint32(i)
		}
		if _, err := f.objs.FwAdded.BatchUpdate(keys, added, nil); err != nil {
			return fmt.Errorf("write the added rules: %w", err)
		}
	}
	keys := make([]uint32, len(dead))
	for i := range keys {
		keys[i] = next*deadWords + uint32(i)
	}
	if _, err := f.objs.FwDead.BatchUpdate(keys, dead, nil); err != nil {
		return fmt.Errorf("write the deleted rules: %w", err)
	}
	ov.Nadded = uint32(len(added))
	if err := f.objs.FwOverlays.Put(next, ov); err != nil {
		return fmt.Errorf("write the rule-set overlay: %w", err)
	}
	// The switch: the data path reads fw_gen once per packet.
	if err := f.objs.FwGen.Put(uint32(0), gen+1); err != nil {
		return fmt.Errorf("activate the rule set: %w", err)
	}
	return nil
}

// lock serialises rule-set installs, across processes through an flock on
// the pin directory.
func (f *Firewall) lock() (func(), error) {
	f.mu.Lock()
	if f.dir == "" {
		return f.mu.Unlock, nil
	}
	d, err := os.Open(f.dir)
	if err == nil {
		err = unix.Flock(int(d.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		if d != nil {
			d.Close()
		}
		f.mu.Unlock()
		return nil, fmt.Errorf("lock %s: %w", f.dir, err)
	}
	return func() {
		unix.Flock(int(d.Fd()), unix.LOCK_UN)
		d.Close()
		f.mu.Unlock()
	}, nil
}

// build creates and fills a slot's maps.
func (f *Firewall) build(c *compiled, s *slotMaps) error {
	for i, name := range outerNames {
		in := f.specs[name].InnerMap.Copy()
		if in.Flags&unix.BPF_F_INNER_MAP != 0 {
			// Sized per rule set; the others have their declared size.
			in.MaxEntries = uint32(max([]int{0, 0, 0, len(c.snode4), len(c.ivl6), len(c.nodes), 0, 0, 0, 0, len(c.cands), len(c.hulls), len(c.rules)}[i], 1))
		}
		in.Name = ""
		m, err := ebpf.NewMap(in)
		if err != nil {
			return fmt.Errorf("create a %s map for %d entries: %w", name, in.MaxEntries, err)
		}
		*s.all()[i] = m
	}
	for _, fill := range []func() error{
		func() error { return s.set.Put(uint32(0), c.set) },
		func() error { return putSparse(s.cls4, c.cls4) },
		func() error { return putSparse(s.leaf4, c.leaf4) },
		func() error { return putArray(s.snode4, c.snode4) },
		func() error { return putArray(s.ivl6, c.ivl6) },
		func() error { return putArray(s.node, c.nodes) },
		func() error { return putSparse(s.wild, c.wild) },
		func() error { return putSparse(s.pwide, c.pwide) },
		func() error { return putSparse(s.pnarrow, c.pnarrow) },
		func() error { return putSparse(s.pblock, c.pblock) },
		func() error { return putArray(s.cand, c.cands) },
		func() error { return putArray(s.hull, c.hulls) },
		func() error { return putArray(s.rule, c.rules) },
	} {
		if err := fill(); err != nil {
			return fmt.Errorf("fill the new rule set: %w", err)
		}
	}
	return nil
}

func putArray[V any](m *ebpf.Map, vals []V) error {
	if len(vals) == 0 {
		return nil
	}
	keys := make([]uint32, len(vals))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := m.BatchUpdate(keys, vals, nil); err == nil {
		return nil
	}
	for i, v := range vals {
		if err := m.Put(uint32(i), v); err != nil {
			return err
		}
	}
	return nil
}

// putSparse writes the entries of a new array map that are not zero: the
// kernel created it zeroed, and most of a fixed-size index is empty.
func putSparse[V comparable](m *ebpf.Map, vals []V) error {
	var zero V
	var keys []uint32
	var nz []V
	for i, v := range vals {
		if v != zero {
			keys = append(keys, uint32(i))
			nz = append(nz, v)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if _, err := m.BatchUpdate(keys, nz, nil); err == nil {
		return nil
	}
	for i, k := range keys {
		if err := m.Put(k, nz[i]); err != nil {
			return err
		}
	}
	return nil
}

// readArray reads the first n values of an array map, in batches where the
// kernel has them.
func readArray[V any](m *ebpf.Map, n int) ([]V, error) {
	vals := make([]V, n)
	keys := make([]uint32, n)
	var cur ebpf.MapBatchCursor
	for got := 0; got < n; {
		c, err := m.BatchLookup(&cur, keys[got:], vals[got:], nil)
		got += c
		if errors.Is(err, ebpf.ErrKeyNotExist) || got >= n {
			break
		}
		if err != nil {
			for i := range vals {
				if err := m.Lookup(uint32(i), &vals[i]); err != nil {
					return nil, err
				}
			}
			return vals, nil
		}
	}
	return vals, nil
}

// statsKey is a rule's key in fw_stats.
func statsKey(slot uint32, rule int) uint32 { return slot<<statsSlotShift | uint32(rule) }

// resetStats zeroes a slot's counters of rule ids [first, first+n).
func (f *Firewall) resetStats(slot uint32, first, n int) error {
	m := f.objs.FwStats
	keys := make([]uint32, n)
	for i := range keys {
		keys[i] = statsKey(slot, first+i)
	}
	vals := make([]fwFwRuleStats, n*ebpf.MustPossibleCPU())
	if _, err := m.BatchUpdate(keys, vals, nil); err == nil {
		return nil
	}
	zero := make([]fwFwRuleStats, ebpf.MustPossibleCPU())
	for _, k := range keys {
		if err := m.Put(k, zero); err != nil {
			return fmt.Errorf("clear the rule counters: %w", err)
		}
	}
	return nil
}

func (f *Firewall) setRateLimit(rl *RateLimit) error {
	return f.updateConfig(func(c *fwFwConfig) {
		c.RatePps, c.RateBps, c.RateBlockNs = 0, 0, 0
		if rl != nil && rl.Enabled() {
			c.RatePps, c.RateBps, c.RateBlockNs = rl.PPS, rl.BPS, uint64(rl.BlockFor.Nanoseconds())
		}
	})
}

// updateConfig changes fields of the global settings and keeps the others.
func (f *Firewall) updateConfig(change func(*fwFwConfig)) error {
	var c fwFwConfig
	if err := f.objs.FwConf.Lookup(uint32(0), &c); err != nil {
		return fmt.Errorf("read the settings: %w", err)
	}
	change(&c)
	if err := f.objs.FwConf.Put(uint32(0), c); err != nil {
		return fmt.Errorf("write the settings: %w", err)
	}
	return nil
}

// activeSlot opens the maps of the active rule set.
func (f *Firewall) activeSlot(names ...string) (map[string]*ebpf.Map, uint32, error) {
	gen, ov, err := f.overlay()
	if err != nil {
		return nil, 0, err
	}
	if gen == 0 {
		return nil, gen, nil
	}
	out := map[string]*ebpf.Map{}
	for i, name := range outerNames {
		want := len(names) == 0
		for _, n := range names {
			want = want || n == name
		}
		if !want {
			continue
		}
		var id uint32
		if err := f.outers()[i].Lookup(ov.Base, &id); err != nil {
			for _, m := range out {
				m.Close()
			}
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return nil, gen, nil
			}
			return nil, gen, fmt.Errorf("read %s: %w", name, err)
		}
		m, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			for _, m := range out {
				m.Close()
			}
			return nil, gen, fmt.Errorf("open %s: %w", name, err)
		}
		out[name] = m
	}
	return out, gen, nil
}

// Rules reads the active rule set back from the kernel: what is enforced,
// not what a file says. Names are kept (names.go), comments are not.
func (f *Firewall) Rules() (*RuleSet, error) {
	rs, _, _, err := f.rules()
	return rs, err
}

// rules also returns each rule's kernel id, in rule order, and the counter
// slot the ids key into (statsKey).
func (f *Firewall) rules() (*RuleSet, []uint32, uint32, error) {
	rs := &RuleSet{}
	ord, err := f.order()
	if err != nil || ord.gen == 0 {
		return rs, nil, 0, err
	}
	slot := ord.ov.Stats
	ms, _, err := f.activeSlot("fw_rule_slots", "fw_set_slots")
	if err != nil || ms == nil {
		return rs, nil, slot, err
	}
	defer closeAll(ms)
	var set fwFwSet
	if err := ms["fw_set_slots"].Lookup(uint32(0), &set); err != nil {
		return nil, nil, 0, fmt.Errorf("read the rule-set header: %w", err)
	}
	rs.Default = Action(set.DefaultAction)
	base, err := readArray[fwFwRule](ms["fw_rule_slots"], int(ord.ov.Nbase)+1)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("read the rules: %w", err)
	}
	rs.Rules = make([]Rule, 0, len(ord.rules))
	ids := make([]uint32, 0, len(ord.rules))
	for _, o := range ord.rules {
		k := o.kernel
		if !o.added {
			k = base[o.id]
		}
		rs.Rules = append(rs.Rules, ruleFromKernel(k))
		ids = append(ids, o.id)
	}
	if err := f.readNames(slot, ids, rs.Rules); err != nil {
		return nil, nil, 0, err
	}
	var c fwFwConfig
	if err := f.objs.FwConf.Lookup(uint32(0), &c); err != nil {
		return nil, nil, 0, fmt.Errorf("read the rate limit: %w", err)
	}
	if c.RatePps > 0 || c.RateBps > 0 {
		rs.RateLimit = &RateLimit{PPS: c.RatePps, BPS: c.RateBps, BlockFor: Duration{time.Duration(c.RateBlockNs)}}
	}
	if c.CtFlags&ctfOn != 0 {
		perSource, perNetwork := c.CtSrcMax, c.CtSrcWideMax
		rs.Conntrack = &Conntrack{Enabled: true, NoPickup: c.CtFlags&ctfLoose == 0, Liberal: c.CtFlags&ctfLiberal != 0, Strict: c.CtFlags&ctfStrict != 0,
			PerSource: &perSource, PerNetwork: &perNetwork, NetworkPrefix4: int(c.CtSrcWideBits[0]), NetworkPrefix6: int(c.CtSrcWideBits[1])}
	}
	return rs, ids, slot, nil
}

// ruleStats reads the counters of the rules with these ids (0: the
// default policy) in a counter slot.
func (f *Firewall) ruleStats(slot uint32, ids []uint32) ([]RuleStats, error) {
	out := make([]RuleStats, len(ids))
	var per []fwFwRuleStats
	for i, id := range ids {
		if err := f.objs.FwStats.Lookup(statsKey(slot, int(id)), &per); err != nil {
			return nil, fmt.Errorf("read counters of rule id %d: %w", id, err)
		}
		for _, p := range per {
			out[i].Packets += p.Packets
			out[i].Bytes += p.Bytes
		}
	}
	return out, nil
}

func closeAll(ms map[string]*ebpf.Map) {
	for _, m := range ms {
		m.Close()
	}
}

// RuleStats are a rule's counters in the active set.
type RuleStats struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Stats returns the active set's counters: index 0 is the default policy,
// index i rule i. They start at zero when a set is installed whole; fw add
// and fw del keep the other rules' counters.
func (f *Firewall) Stats() ([]RuleStats, error) {
	ord, err := f.order()
	if err != nil || ord.gen == 0 {
		return nil, err
	}
	out := make([]RuleStats, len(ord.rules)+1)
	var per []fwFwRuleStats
	for i := range out {
		id := uint32(0)
		if i > 0 {
			id = ord.rules[i-1].id
		}
		if err := f.objs.FwStats.Lookup(statsKey(ord.ov.Stats, int(id)), &per); err != nil {
			return nil, fmt.Errorf("read counters of rule %d: %w", i, err)
		}
		for _, p := range per {
			out[i].Packets += p.Packets
			out[i].Bytes += p.Bytes
		}
	}
	return out, nil
}

// Counters are the per-reason packet counts, summed over CPUs.
type Counters map[string]uint64

var counterNames = map[fwFwCounter]string{
	fwFwCounterFW_C_PASS_RULE:         "pass_rule",
	fwFwCounterFW_C_DROP_RULE:         "drop_rule",
	fwFwCounterFW_C_PASS_DEFAULT:      "pass_default",
	fwFwCounterFW_C_DROP_DEFAULT:      "drop_default",
	fwFwCounterFW_C_DROP_BLOCKED:      "drop_blocked",
	fwFwCounterFW_C_DROP_RATE:         "drop_rate_limit",
	fwFwCounterFW_C_RATE_TRIPS:        "rate_limit_trips",
	fwFwCounterFW_C_PASS_NOT_IP:       "pass_not_ip",
	fwFwCounterFW_C_DROP_MALFORMED:    "drop_malformed",
	fwFwCounterFW_C_CLASSIFIED:        "classified",
	fwFwCounterFW_C_FLOW_REPLACED:     "flow_replaced",
	fwFwCounterFW_C_CT_NEW:            "ct_new",
	fwFwCounterFW_C_CT_ESTABLISHED:    "ct_established",
	fwFwCounterFW_C_CT_RELATED:        "ct_related",
	fwFwCounterFW_C_CT_INVALID:        "ct_invalid",
	fwFwCounterFW_C_CT_UNTRACKED:      "ct_untracked",
	fwFwCounterFW_C_CT_CREATED:        "ct_created",
	fwFwCounterFW_C_CT_PROMOTED:       "ct_promoted",
	fwFwCounterFW_C_CT_EST_FULL:       "ct_established_table_full",
	fwFwCounterFW_C_CT_SRC_QUOTA:      "ct_source_quota",
	fwFwCounterFW_C_CT_BUSY:           "ct_busy",
	fwFwCounterFW_C_CT_IGNORED:        "ct_tcp_ignored",
	fwFwCounterFW_C_FRAG_NO_FIRST:     "frag_without_first",
	fwFwCounterFW_C_CT_EGRESS:         "ct_egress",
	fwFwCounterFW_C_CT_EGRESS_INVALID: "ct_egress_invalid",
	fwFwCounterFW_C_SYNPROXY_SYN:      "synproxy_syn",
	fwFwCounterFW_C_SYNPROXY_ACK_OK:   "synproxy_ack_ok",
	fwFwCounterFW_C_SYNPROXY_ACK_BAD:  "synproxy_ack_bad",
	fwFwCounterFW_C_SYNPROXY_OPENED:   "synproxy_opened",
	fwFwCounterFW_C_SYNPROXY_INVALID:  "synproxy_invalid",
}

// Counters reads the per-reason counters. They are read last to first: a
// packet the synproxy answers or drops counts its pass (an earlier
// counter) before its synproxy counter, so a pass read after the synproxy
// counters is never less than they (the verdicts in metrics subtract them).
func (f *Firewall) Counters() (Counters, error) {
	out := Counters{}
	var per []uint64
	for i := int(fwFwCounterFW_C_MAX) - 1; i >= 0; i-- {
		c := fwFwCounter(i)
		if err := f.objs.FwCounters.Lookup(uint32(c), &per); err != nil {
			return nil, fmt.Errorf("read counters: %w", err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		out[counterNames[c]] = sum
	}
	return out, nil
}

// monotonic is the clock of bpf_ktime_get_coarse_ns, to within a tick.
func monotonic() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// wallTime converts a kernel monotonic time to wall-clock time.
func wallTime(ns uint64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Now().Add(-time.Duration(monotonic() - ns))
}

// Flow is a 5-tuple. Ports are 0 for protocols without them; Fragment
// marks the fragments after the first, which carry no ports.
type Flow struct {
	Src      netip.Addr `json:"src"`
	Dst      netip.Addr `json:"dst"`
	Proto    Proto      `json:"proto"`
	SPort    uint16     `json:"sport"`
	DPort    uint16     `json:"dport"`
	Fragment bool       `json:"fragment,omitempty"`
	// CtState is the packet's connection-tracking state, for matching rules
	// in Go (Rule.Matches); 0 while tracking is off.
	CtState CtStates `json:"ct_state,omitempty"`
}

func (fl Flow) String() string {
	if fl.Fragment {
		return fmt.Sprintf("%s %s → %s (fragments)", fl.Proto, fl.Src, fl.Dst)
	}
	if fl.Proto == 6 || fl.Proto == 17 {
		return fmt.Sprintf("%s %s → %s", fl.Proto, netip.AddrPortFrom(fl.Src, fl.SPort), netip.AddrPortFrom(fl.Dst, fl.DPort))
	}
	return fmt.Sprintf("%s %s → %s", fl.Proto, fl.Src, fl.Dst)
}

// Validate checks a flow given on the command line.
func (fl Flow) Validate() error {
	if !fl.Src.IsValid() || !fl.Dst.IsValid() {
		return errors.New("a flow needs both --src and --dst addresses")
	}
	if fl.Src.Is4() != fl.Dst.Is4() {
		return fmt.Errorf("flow %s → %s mixes IPv4 and IPv6", fl.Src, fl.Dst)
	}
	if (fl.SPort != 0 || fl.DPort != 0) && fl.Proto != 6 && fl.Proto != 17 {
		return errors.New("ports need --proto tcp or udp")
	}
	return nil
}

func (fl Flow) key() fwFwFlowKey {
	k := fwFwFlowKey{Proto: uint8(fl.Proto), Sport: fl.SPort, Dport: fl.DPort, Family: 6}
	if fl.Fragment {
		k.Noports = 1
	}
	if fl.Src.Is4() {
		k.Family = 4
	}
	k.Src = words(as16(fl.Src))
	k.Dst = words(as16(fl.Dst))
	return k
}

func as16(a netip.Addr) []byte {
	b := a.As16()
	return b[:]
}

func flowFromKey(k fwFwFlowKey) Flow {
	fl := Flow{Proto: Proto(k.Proto), SPort: k.Sport, DPort: k.Dport, Fragment: k.Noports != 0}
	fl.Src, fl.Dst = netip.AddrFrom16(unwords(k.Src)), netip.AddrFrom16(unwords(k.Dst))
	if k.Family == 4 {
		fl.Src, fl.Dst = fl.Src.Unmap(), fl.Dst.Unmap()
	}
	return fl
}
