package br

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
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
	// NoFallback forbids falling back to generic XDP where native fails.
	NoFallback bool
	// Warn receives warnings (a fallback to generic mode).
	Warn io.Writer
	// Name is the pin directory's name; the router ID if empty.
	Name string
}

// Attach loads the router for cfg and attaches it to the devices, pinning
// maps and links under PinDir. Attaching again with the same or a changed
// configuration updates the maps and swaps the program in place on devices
// that already have it; nothing is detached. Everything is validated before
// the first change.
func Attach(cfg *Config, opts AttachOptions) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if opts.Warn == nil {
		opts.Warn = io.Discard
	}
	devs := opts.Devices
	if len(devs) == 0 {
		var err error
		if devs, err = configDevices(cfg, opts.Netns); err != nil {
			return err
		}
	}
	mode := xdp.Native
	if cfg.XDPMode == XDPModeGeneric {
		mode = xdp.Generic
	}
	ifindex := map[xdp.Iface]int{}
	for _, d := range devs {
		attrs, err := xdp.Lookup(d)
		if err != nil {
			return err
		}
		ifindex[d] = attrs.Index
		warnForwarding(d, opts.Warn)
	}
	name := opts.Name
	if name == "" {
		name = cfg.RouterID
	}
	dir := PinDir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	r, err := Load(cfg, LoadOptions{PinPath: dir})
	if err != nil {
		xdp.RemoveIfEmpty(dir)
		return err
	}
	defer r.Close()
	if err := r.fillCPUs(); err != nil {
		return err
	}
	for _, d := range devs {
		// A devmap resolves indexes in the namespace of the thread updating it.
		if err := netns.Run(d.Netns, func() error {
			return r.objs.TxPorts.Put(uint32(ifindex[d]), uint32(ifindex[d]))
		}); err != nil {
			return fmt.Errorf("add %s to the redirect map: %w", d, err)
		}
	}
	return xdp.AttachPinned(dir, devs, r.Program(), xdp.PinOptions{Mode: mode, NoFallback: opts.NoFallback, Warn: opts.Warn})
}

// fillCPUs points the CPU map at the router program on each worker CPU.
func (r *Router) fillCPUs() error {
	for _, cpu := range r.cfg.CPUs {
		v := struct {
			Qsize  uint32
			ProgFD uint32
		}{Qsize: 2048, ProgFD: uint32(r.cpuProg.FD())}
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
	addrs := map[string]string{} // IP → device
	err := netns.Run(ns, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, i := range ifs {
			as, _ := i.Addrs()
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok {
					addrs[n.IP.String()] = i.Name
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(cfg.InternalInterfaces) == 0 {
		d, ok := addrs[cfg.Internal.Addr().String()]
		if !ok {
			return nil, fmt.Errorf("%s: no device holds internal_addr %s; name the devices on the command line or in internal_interfaces", cfg.Path, cfg.Internal.Addr())
		}
		add(d)
	}
	for _, i := range cfg.Interfaces {
		if i.Kind != External {
			continue
		}
		d, ok := addrs[i.Local.Addr().String()]
		if !ok {
			return nil, fmt.Errorf("%s: interface %d: no device holds its underlay local address %s; name the devices on the command line", cfg.Path, i.ID, i.Local.Addr())
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
	Conf     *ebpf.Map
}

// OpenPinned opens the pinned maps of an attached router.
func OpenPinned(routerID string) (*Pinned, error) {
	dir := PinDir(routerID)
	p := &Pinned{ID: routerID}
	for name, dst := range map[string]**ebpf.Map{"br_counters": &p.Counters, "br_keys": &p.Keys, "br_sockets": &p.Sockets, "br_conf": &p.Conf} {
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
	return p, nil
}

// Close closes the maps (the pins stay).
func (p *Pinned) Close() {
	for _, m := range []*ebpf.Map{p.Counters, p.Keys, p.Sockets, p.Conf} {
		if m != nil {
			m.Close()
		}
	}
}

// SetKey writes a pre-derived forwarding key into a slot, or clears it.
func (p *Pinned) SetKey(slot int, key []byte) error {
	return setKeys(p.Conf, p.Keys, map[int][]byte{slot: key})
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

// Counters reads the pinned counters.
func (p *Pinned) ReadCounters() (*Counts, error) { return readCounters(p.Counters) }

// warnForwarding says when a device has IP forwarding off: the kernel then
// answers the router's FIB lookups with FWD_DISABLED, and every packet that
// arrives there takes the slow path.
func warnForwarding(d xdp.Iface, w io.Writer) {
	_ = netns.Run(d.Netns, func() error {
		for _, fam := range []string{"ipv4", "ipv6"} {
			b, err := os.ReadFile(filepath.Join("/proc/sys/net", fam, "conf", d.Name, "forwarding"))
			if err == nil && strings.TrimSpace(string(b)) == "0" && fam == "ipv4" {
				fmt.Fprintf(w, "warning: %s: IPv4 forwarding is off, so the fast path's FIB lookups fail and packets arriving there go to the slow path; enable it with sysctl net.ipv4.conf.%s.forwarding=1\n", d, d.Name)
			}
		}
		return nil
	})
}
