package fw

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// AttachOptions configure Attach.
type AttachOptions struct {
	// Name of the instance (its pin directory); DefaultName if empty.
	Name    string
	Devices []xdp.Iface
	Mode    xdp.Mode
	// NoFallback forbids generic mode where native XDP fails.
	NoFallback bool
	Warn       io.Writer
	// Rules to install; nil keeps the instance's rules, or for a new
	// instance installs an empty set that passes everything.
	Rules *RuleSet
	// MaxFlows sizes the flow table of a new instance; CtMax and
	// CtEmbryonic its connection-tracking tables (LoadOptions). 0: the
	// defaults. An instance keeps the sizes it was created with: a size
	// given for one whose maps are pinned must be the one it has.
	MaxFlows, CtMax, CtEmbryonic uint32
}

var validName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Validate checks the options and the rules before anything is changed.
func (o *AttachOptions) Validate() error {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if !validName.MatchString(o.Name) || o.Name == "." || o.Name == ".." {
		return fmt.Errorf("instance name %q: use letters, digits, '.', '_' or '-'", o.Name)
	}
	if len(o.Devices) == 0 {
		return errors.New("no device given: name at least one with --dev")
	}
	for _, d := range o.Devices {
		if _, err := xdp.Lookup(d); err != nil {
			return err
		}
	}
	if o.Mode == "" {
		o.Mode = xdp.Native
	}
	if o.Mode == xdp.Native && o.Warn != nil {
		for _, d := range o.Devices {
			if xdp.IsVeth(d) {
				fmt.Fprintf(o.Warn, "note: %s is a veth: native XDP there halves TCP throughput for any program (the veth copies each TSO packet); --mode generic keeps TCP at full speed, native gives more packets/s. See docs/fw.md.\n", d)
			}
		}
	}
	if o.Rules != nil {
		if err := o.Rules.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Attach loads the firewall (or reuses the instance's pinned maps), installs
// the rules and attaches it to the devices. Attaching again swaps the program
// in place; rules, flows and block list stay unless new rules are given.
func Attach(o AttachOptions) error {
	// The egress tracker (TCX) is optional: attachEgress warns without it.
	if err := preflight.Kernel(preflight.FW); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	dir := PinDir(o.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	if err := checkSizes(o, dir); err != nil {
		return err
	}
	fresh := len(xdp.Links(dir)) == 0
	lo := LoadOptions{PinPath: dir, Warn: o.Warn}
	if fresh {
		lo.MaxFlows, lo.CtMax, lo.CtEmbryonic = o.MaxFlows, o.CtMax, o.CtEmbryonic
	}
	f, err := Load(lo)
	if err != nil {
		if fresh {
			os.RemoveAll(dir)
		}
		return err
	}
	defer f.Close()
	gen, err := f.Generation()
	if err == nil && (o.Rules != nil || gen == 0) {
		rs := o.Rules
		if rs == nil {
			rs = &RuleSet{Default: Pass}
		}
		err = f.Install(rs)
	}
	if err == nil {
		// With Next, a device the router or the translator holds gets the
		// firewall put in front of it (docs/fw.md).
		err = xdp.AttachPinned(dir, o.Devices, f.Program(), xdp.PinOptions{Mode: o.Mode, NoFallback: o.NoFallback, Warn: o.Warn, Generic: f.GenericProgram, Next: f.objs.FwNext})
	}
	if err == nil {
		// The new program runs on every device: the pins follow it.
		err = f.migration.Commit()
	}
	if err == nil {
		// Without it the firewall still filters, but conntrack does not
		// see the host's own packets (a kernel without TCX, before 6.6).
		if eerr := f.attachEgress(dir, o.Devices); eerr != nil && o.Warn != nil {
			fmt.Fprintf(o.Warn, "warning: %v: connection tracking will not see what this host sends (its answers and its own connections); a firewall in front of other hosts is not affected\n", eerr)
		}
	}
	if err != nil && fresh && len(xdp.Links(dir)) == 0 {
		os.RemoveAll(dir)
	}
	return err
}

// checkSizes refuses table sizes that differ from those of the instance's
// pinned maps: the maps are reused as they are (they hold the rules, flows
// and connections), so a new size would be ignored while the operator
// believes it applied.
func checkSizes(o AttachOptions, dir string) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	// Each flag's value, the max_entries a new instance would get for it,
	// and how to say a pinned map's max_entries in the flag's terms.
	flows := func(entries uint32) uint32 { return entries / uint32(ncpu) * flowWays }
	same := func(entries uint32) uint32 { return entries }
	for _, s := range []struct {
		pin, flag, what string
		given, want     uint32
		in              func(uint32) uint32
	}{
		{"fw_flows", "--max-flows", "flows per CPU in its flow table", o.MaxFlows, flowSets(o.MaxFlows) * uint32(ncpu), flows},
		{"fw_ct_est", "--ct-max", "connections in its established table", o.CtMax, o.CtMax, same},
		{"fw_ct_new", "--ct-embryonic", "connections in its embryonic table", o.CtEmbryonic, o.CtEmbryonic, same},
	} {
		if s.given == 0 {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, s.pin), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open the pinned %s: %w", s.pin, err)
		}
		have := m.MaxEntries()
		m.Close()
		if have != s.want {
			return fmt.Errorf("%s %d: firewall %q exists with room for %d %s, set when it was created, and attaching again keeps its maps; to change the size, `fastpath fw detach --name %s` (which forgets its flows, connections and block list) and attach again with %s, or leave %s out to attach with the size it has",
				s.flag, s.given, o.Name, s.in(have), s.what, o.Name, s.flag, s.flag)
		}
	}
	return nil
}

// Detach detaches the instance from the devices (all if none given). The
// last detach removes the instance's pins.
func Detach(name string, devs []xdp.Iface) error {
	if name == "" {
		name = DefaultName
	}
	dir := PinDir(name)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("firewall %q: %w (nothing under %s)", name, ErrNotAttached, dir)
	}
	if err := detachEgress(dir, devs); err != nil {
		return err
	}
	err := xdp.DetachPinned(dir, PinRoot, devs)
	if errors.Is(err, xdp.ErrNotPinned) {
		return fmt.Errorf("firewall %q is not attached to %w: %w", name, err, ErrNotAttached)
	}
	return err
}

// Devices lists the devices an instance is attached to, by link pin name
// (NAME, or NETNS:NAME), each with what runs behind the firewall there:
// "veth0 (→ br 1-ff00_0_110)".
func Devices(name string) []string {
	var out []string
	for _, p := range xdp.Links(PinDir(name)) {
		d, ok := xdp.ParseLinkPinName(filepath.Base(p))
		if !ok {
			continue
		}
		s := strings.TrimPrefix(filepath.Base(p), "link_")
		if _, next := xdp.Chain(PinDir(name), d); next != "" {
			s += " (→ " + next + ")"
		}
		out = append(out, s)
	}
	return out
}
