package fw

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

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
	// CtEmbryonic its connection-tracking tables (LoadOptions).
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
				fmt.Fprintf(o.Warn, "note: %s is a veth: native XDP there halves TCP throughput for any program (the veth copies each TSO packet); --generic keeps TCP at full speed, native gives more packets/s. See docs/fw.md.\n", d)
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
	if err := o.Validate(); err != nil {
		return err
	}
	dir := PinDir(o.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	fresh := len(xdp.Links(dir)) == 0
	lo := LoadOptions{PinPath: dir}
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
