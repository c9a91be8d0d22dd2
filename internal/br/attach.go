package br

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// PinRoot holds one directory per attached router, named by its router ID:
// the maps, pinned by name, and one link per device.
var PinRoot = filepath.Join(preflight.BPFFS, "fastpath", "br")

// ErrNotAttached is returned for a router or device with nothing attached.
var ErrNotAttached = errors.New("not attached")

// PinDir is where a router's maps and links are pinned.
func PinDir(routerID string) string { return filepath.Join(PinRoot, routerID) }

// AttachOptions configure Attach.
type AttachOptions struct {
	// Devices to attach to; empty: the configuration's internal interfaces
	// and the devices that hold its external interfaces' local addresses.
	Devices []xdp.Iface
	// Netns is where devices found from the configuration are looked for.
	Netns string
	// Mode overrides the configuration's xdp_mode (XDPModeAuto,
	// XDPModeNative or XDPModeGeneric); "" keeps it.
	Mode string
	// NoFallback forbids falling back to generic XDP where native fails
	// (as XDPModeNative does).
	NoFallback bool
	// Log receives warnings (a fallback to generic mode, a device that
	// takes no XDP frames); slog.Default() if nil.
	Log *slog.Logger
	// Warn, when Log is nil, receives those records in slog's text form:
	// for callers that keep a plain log.
	Warn io.Writer
	// Name is the pin directory's name; the router ID if empty.
	Name string
	// NoMACCache computes every hop-field MAC (the lab's br-cold row: the
	// worst case, a new flow on every packet).
	NoMACCache bool
}

// Attach loads the router for cfg and attaches it to the devices, pinning
// maps and links under PinDir. Attaching again with the same or a changed
// configuration updates the maps and swaps the program in place on devices
// that already have it; nothing is detached. Everything is validated before
// the first change.
//
// Attach checks what the host must give the fast path and warns, naming
// the fix, where it falls short: each device a frame may leave by must take
// XDP frames (it is left out, and its traffic goes to the reference router,
// until it does), and lo must have forwarding on for the FIB lookups.
func Attach(cfg *Config, opts AttachOptions) error {
	if err := preflight.Kernel(preflight.BR); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := opts.Log
	switch {
	case log != nil:
	case opts.Warn != nil:
		log = slog.New(slog.NewTextHandler(opts.Warn, nil))
	default:
		log = slog.Default()
	}
	// What the packages below still say in prose, a line a record.
	warn := obs.Writer(log, slog.LevelWarn)
	xdpMode := cfg.XDPMode
	switch opts.Mode {
	case "":
	case XDPModeAuto, XDPModeNative, XDPModeGeneric:
		xdpMode = opts.Mode
	default:
		return fmt.Errorf("XDP mode %q: use %q, %q or %q", opts.Mode, XDPModeAuto, XDPModeNative, XDPModeGeneric)
	}
	if len(cfg.CPUs) > 0 && xdpMode == XDPModeGeneric {
		return fmt.Errorf("%s: cpus needs native XDP (xdp_mode = %q or %q): generic mode runs on skbs, which a CPU map does not hand on as frames; drop one of the two", cfg.Path, XDPModeAuto, XDPModeNative)
	}
	if cfg.ForwardIP && xdpMode == XDPModeGeneric {
		return fmt.Errorf("%s: forward_ip needs native XDP: in generic mode plain IP would go up to the kernel all the same; attach in another mode, or drop forward_ip", cfg.Path)
	}
	devs := opts.Devices
	if len(devs) == 0 {
		var err error
		if devs, err = configDevices(cfg, opts.Netns); err != nil {
			return err
		}
	}
	mode, noFallback := xdp.Native, opts.NoFallback || xdpMode == XDPModeNative
	if xdpMode == XDPModeGeneric {
		mode = xdp.Generic
	}
	for _, d := range devs {
		if d.Netns != opts.Netns && opts.Netns != "" {
			return fmt.Errorf("device %s is not in network namespace %s: a router's devices share one namespace", d, opts.Netns)
		}
		if _, err := xdp.Lookup(d); err != nil {
			return err
		}
	}
	ns := opts.Netns
	if len(devs) > 0 {
		ns = devs[0].Netns
	}
	warnForwarding(cfg, ns, log)
	if cfg.SCIONVersion == "" {
		log.Warn("configuration sets no scion_version: fastpath delivers and drops as the default release's router does; set scion_version to the release the router behind runs",
			"config", cfg.Path, "default", scionproto.Default, "others", strings.Join(scionproto.Versions[1:], ", "))
	}
	name := opts.Name
	if name == "" {
		name = cfg.RouterID
	}
	dir := PinDir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	// A first attach that fails leaves nothing: not the maps it pinned
	// either. A reload that fails leaves the router as it was.
	first := len(xdp.Links(dir)) == 0
	undo := func(err error) error {
		if first {
			err = errors.Join(err, xdp.DetachPinned(dir, PinRoot, nil))
		}
		return err
	}
	r, err := Load(cfg, LoadOptions{PinPath: dir, NoMACCache: opts.NoMACCache, Warn: warn})
	if err != nil {
		return undo(err)
	}
	defer r.Close()
	if err := r.setHost(ns, devs, log); err != nil {
		return undo(err)
	}
	if err := r.fillCPUs(); err != nil {
		return undo(err)
	}
	if err := xdp.AttachPinned(dir, devs, r.Program(), xdp.PinOptions{Mode: mode, NoFallback: noFallback, Warn: warn, Generic: r.GenericProgram}); err != nil {
		return undo(err)
	}
	// The new program runs on every device: the pins follow it.
	if err := r.migration.Commit(); err != nil {
		return err
	}
	if err := r.attachTracing(dir, cfg.CountTxDrops); err != nil {
		return errors.Join(err, xdp.DetachPinned(dir, PinRoot, nil))
	}
	return nil
}

// Tracing link pins: not device links (xdp.Links ignores them), and gone
// with the directory when the last device is detached. The failure
// tracepoints fire only when a transmit fails; the flush tracepoints fire
// at every flush of every XDP redirect and XDP_TX of the machine, so their
// programs are attached only with count_tx_drops.
var (
	failurePins = map[string]string{"br_tx_redirect_err": "trace_redirect_err", "br_tx_exception": "trace_exception"}
	flushPins   = map[string]string{"br_tx_devmap": "trace_devmap", "br_tx_bulk": "trace_bulk"}
)

// attachTracing attaches the transmit-failure counters and pins their
// links, replacing those of an earlier attach; without flushes, the flush
// counters of an earlier attach go.
func (r *Router) attachTracing(dir string, flushes bool) error {
	progs, err := r.TracingPrograms()
	if err != nil {
		return err
	}
	pins := maps.Clone(failurePins)
	for prog, pin := range flushPins {
		if flushes {
			pins[prog] = pin
		} else if err := os.Remove(filepath.Join(dir, pin)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	for prog, pin := range pins {
		l, err := link.AttachTracing(link.TracingOptions{Program: progs[prog]})
		if err != nil {
			return fmt.Errorf("attach %s to its tracepoint: %w", prog, err)
		}
		path := filepath.Join(dir, pin)
		os.Remove(path)
		err = l.Pin(path)
		l.Close()
		if err != nil {
			return fmt.Errorf("pin %s: %w", pin, err)
		}
	}
	return nil
}

// egressCandidates are the devices a forwarded frame may leave by: those
// the router is attached to and those its configured next hops
// (neighbours, siblings) are reached through now.
func egressCandidates(cfg *Config, ns string, devs []xdp.Iface) ([]xdp.Iface, error) {
	seen := map[xdp.Iface]bool{}
	var all []xdp.Iface
	add := func(d xdp.Iface) {
		if !seen[d] {
			seen[d] = true
			all = append(all, d)
		}
	}
	for _, d := range devs {
		add(d)
	}
	h, err := netns.Handle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	for _, hop := range nextHops(cfg) {
		routes, err := h.RouteGet(hop.AsSlice())
		if err != nil || len(routes) == 0 {
			continue // no route yet: the FIB decides per packet
		}
		l, err := h.LinkByIndex(routes[0].LinkIndex)
		if err != nil || l.Attrs().Name == "lo" {
			continue
		}
		add(xdp.Iface{Netns: ns, Name: l.Attrs().Name})
	}
	return all, nil
}

// nextHops are the underlay addresses the router forwards to: each
// external interface's neighbour and each sibling router.
func nextHops(cfg *Config) []netip.Addr {
	var hops []netip.Addr
	for _, i := range cfg.Interfaces {
		switch i.Kind {
		case External:
			hops = append(hops, i.Remote.Addr())
		case Sibling:
			hops = append(hops, i.SiblingAddr.Addr())
		}
	}
	return hops
}

// fillCPUs points the CPU map at the router program on each worker CPU.
func (r *Router) fillCPUs() error {
	for _, cpu := range r.cfg.CPUs {
		// A queue of 8192 frames rides out a worker CPU kept busy by
		// something else for a few hundred milliseconds at a moderate rate
		// (2048 dropped frames under the tests' load).
		v := struct {
			Qsize  uint32
			ProgFD uint32
		}{Qsize: 8192, ProgFD: uint32(r.cpuProg.FD())}
		// A CPU map is keyed by CPU number.
		if err := r.objs.CPUs.Put(uint32(cpu), v); err != nil {
			return fmt.Errorf("cpus: set up worker CPU %d: %w", cpu, err)
		}
	}
	return nil
}

// configDevices finds the devices the configuration implies.
func configDevices(cfg *Config, ns string) ([]xdp.Iface, error) {
	seen := map[string]bool{}
	var devs []xdp.Iface
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			devs = append(devs, xdp.Iface{Netns: ns, Name: name})
		}
	}
	for _, d := range cfg.InternalInterfaces {
		add(d)
	}
	addrs, err := addrDevices(ns)
	if err != nil {
		return nil, err
	}
	if len(cfg.InternalInterfaces) == 0 {
		d, ok := addrs[cfg.Internal.Addr().Unmap()]
		if !ok {
			return nil, fmt.Errorf("%s: %w holds internal_addr %s; name the devices on the command line or in internal_interfaces", cfg.Path, xdp.ErrNoDevice, cfg.Internal.Addr())
		}
		add(d)
	}
	for _, i := range cfg.Interfaces {
		if i.Kind != External {
			continue
		}
		d, ok := addrs[i.Local.Addr().Unmap()]
		if !ok {
			return nil, fmt.Errorf("%s: interface %d: %w holds its underlay local address %s; name the devices on the command line", cfg.Path, i.ID, xdp.ErrNoDevice, i.Local.Addr())
		}
		add(d)
	}
	return devs, nil
}

// Detach removes the router from the devices; with no devices, from all.
// When no device is left, the router's maps and directory go too.
func Detach(routerID string, devs []xdp.Iface) error {
	dir := PinDir(routerID)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("router %s: %w (nothing under %s)", routerID, ErrNotAttached, dir)
	}
	err := xdp.DetachPinned(dir, PinRoot, devs)
	if errors.Is(err, xdp.ErrNotPinned) {
		return fmt.Errorf("router %s is not attached to %w: %w", routerID, err, ErrNotAttached)
	}
	return err
}

// DetachDevices finds which routers are attached to the devices and detaches them.
func DetachDevices(devs []xdp.Iface) error {
	routers, _ := Attached()
	var errs []error
	for _, d := range devs {
		found := false
		for _, r := range routers {
			if _, err := os.Stat(filepath.Join(PinDir(r), xdp.LinkPinName(d))); err == nil {
				found = true
				errs = append(errs, Detach(r, []xdp.Iface{d}))
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("no router is attached to %s: %w", d, ErrNotAttached))
		}
	}
	return errors.Join(errs...)
}

// Attached lists the routers with pins.
func Attached() ([]string, error) { return xdp.Instances(PinRoot) }

// Pinned opens an attached router's maps.
type Pinned struct {
	ID       string
	Counters *ebpf.Map
	Keys     *ebpf.Map
	Sockets  *ebpf.Map
	Vars     *ebpf.Map
	// IPCounters are the plain-IP forwarder's (forward_ip); nil for a
	// router attached by a fastpath that had none.
	IPCounters *ebpf.Map
}

// OpenPinned opens the pinned maps of an attached router.
func OpenPinned(routerID string) (*Pinned, error) {
	dir := PinDir(routerID)
	p := &Pinned{ID: routerID}
	for name, dst := range map[string]**ebpf.Map{"br_counters": &p.Counters, "br_keys": &p.Keys, "br_sockets": &p.Sockets, "br_vars": &p.Vars} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			p.Close()
			if errors.Is(err, os.ErrNotExist) {
				known, _ := Attached()
				return nil, fmt.Errorf("router %s: %w (attached: %s)", routerID, ErrNotAttached, strings.Join(known, ", "))
			}
			return nil, fmt.Errorf("open %s of router %s: %w", name, routerID, err)
		}
		*dst = m
	}
	if m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "br_ip_counters"), nil); err == nil {
		p.IPCounters = m
	}
	return p, nil
}

// Close closes the maps (the pins stay).
func (p *Pinned) Close() {
	for _, m := range []*ebpf.Map{p.Counters, p.Keys, p.Sockets, p.Vars, p.IPCounters} {
		if m != nil {
			m.Close()
		}
	}
}

// SetKey writes a pre-derived forwarding key into a slot, or clears it.
func (p *Pinned) SetKey(slot int, key []byte) error {
	return setKeys(p.Vars, p.Keys, map[int][]byte{slot: key})
}

// KeySlots reports which slots hold a key; key material is never read out.
func (p *Pinned) KeySlots() ([2]bool, error) {
	var out [2]bool
	for i := range out {
		var k routerBrKey
		if err := p.Keys.Lookup(uint32(i), &k); err != nil {
			return out, err
		}
		out[i] = k.Valid != 0
	}
	return out, nil
}

// Slots maps counter slots to interface IDs; -1 for the unmatched slot.
func (p *Pinned) Slots() (map[int]int, error) { return slotsOf(p.Sockets) }

func slotsOf(m *ebpf.Map) (map[int]int, error) {
	out := map[int]int{slotUnmatched: -1}
	var k routerBrSocketKey
	var v routerBrSocket
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[int(v.Slot)] = int(v.Ifid)
	}
	return out, it.Err()
}

// IPTotals are the plain-IP forwarder's counts by verdict name (forwarded,
// local, no_route, …), leaving out zeros; empty when it never ran.
func (p *Pinned) IPTotals() (map[string]Stat, error) {
	if p.IPCounters == nil {
		return map[string]Stat{}, nil
	}
	return readIPCounters(p.IPCounters)
}

// Counters reads the pinned counters.
func (p *Pinned) ReadCounters() (*Counts, error) { return readCounters(p.Counters) }

// warnForwarding says when lo has forwarding off for a family the router
// uses: the kernel then refuses the fast path's FIB lookups, which name lo,
// and every packet goes to the reference router.
func warnForwarding(cfg *Config, ns string, log *slog.Logger) {
	for _, fam := range loForwardingOff(cfg, ns) {
		forwardingWarning(log, ns, fam)
	}
}

// forwardingWarning: the kernel refuses the fast path's FIB lookups (they
// name lo, as the host's own traffic does); turning forwarding on for lo
// alone forwards nothing the host did not before.
func forwardingWarning(log *slog.Logger, ns, fam string) {
	log.Warn("forwarding is off on lo: the kernel refuses the fast path's FIB lookups and every packet goes to the reference router",
		"netns", nsName(ns), "family", fam, "verdict", "fwd_disabled", "fix", fmt.Sprintf("sysctl -w net.%s.conf.lo.forwarding=1", fam))
}

// loForwardingOff are the families the router uses ("ipv4", "ipv6": the
// sysctl directories) that have forwarding off on lo in ns.
func loForwardingOff(cfg *Config, ns string) []string {
	fams := map[string]bool{}
	sysctlDir := func(a netip.Addr) string {
		if a.Unmap().Is4() {
			return "ipv4"
		}
		return "ipv6"
	}
	fams[sysctlDir(cfg.Internal.Addr())] = true
	for _, i := range cfg.Interfaces {
		if i.Kind == External {
			fams[sysctlDir(i.Remote.Addr())] = true
		}
	}
	var off []string
	_ = netns.Run(ns, func() error {
		for _, fam := range []string{"ipv4", "ipv6"} {
			if !fams[fam] {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc/sys/net", fam, "conf/lo/forwarding"))
			if err == nil && strings.TrimSpace(string(b)) == "0" {
				off = append(off, fam)
			}
		}
		return nil
	})
	return off
}

// RouterState is an attached router as `br list` shows it.
type RouterState struct {
	ID      string             `json:"id"`
	Devices []xdp.PinnedDevice `json:"devices"`
}

// Gone says every device of the router was removed (its namespace deleted,
// say): what is left are pins, maps and counters; `br detach --router`
// removes them.
func (s RouterState) Gone() bool {
	for _, d := range s.Devices {
		if !d.Gone {
			return false
		}
	}
	return true
}

// List describes every attached router and the state of its devices.
func List() ([]RouterState, error) {
	ids, err := Attached()
	if err != nil {
		return nil, err
	}
	out := make([]RouterState, 0, len(ids))
	for _, id := range ids {
		devs, err := xdp.PinnedDevices(PinDir(id))
		if err != nil {
			return nil, fmt.Errorf("router %s: %w", id, err)
		}
		out = append(out, RouterState{ID: id, Devices: devs})
	}
	return out, nil
}

// ByInterface are a router's counts as interface → verdict → figures,
// leaving out zeros (Counts.ByInterface over the router's own slots).
func (p *Pinned) ByInterface() (map[string]map[string]Stat, error) {
	c, err := p.ReadCounters()
	if err != nil {
		return nil, err
	}
	slots, err := p.Slots()
	if err != nil {
		return nil, err
	}
	return c.ByInterface(slots), nil
}

// Totals are a router's counts by verdict name, summed over its interfaces;
// verdicts that counted nothing are left out.
func (p *Pinned) Totals() (map[string]Stat, error) {
	c, err := p.ReadCounters()
	if err != nil {
		return nil, err
	}
	slots, err := p.Slots()
	if err != nil {
		return nil, err
	}
	all, err := c.Verdicts(slots, "all")
	if err != nil {
		return nil, err
	}
	out := map[string]Stat{}
	for v, s := range all {
		if s.Packets > 0 {
			out[VerdictName(Verdict(v))] = s
		}
	}
	return out, nil
}
