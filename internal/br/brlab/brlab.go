// Package brlab holds the border router's lab rows: the router on the
// DUT testbed with and without MAC checks, and scionproto's own router
// beside it.
package brlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

func init() {
	registerReference()
	// A bench run that dies leaves the router's pins; lab down removes them.
	lab.RegisterCleanup(func(tb lab.Testbed) error {
		var errs []error
		if _, err := os.Stat(fw.PinDir(tb.Prefix + "br-fw")); err == nil {
			errs = append(errs, fw.Detach(tb.Prefix+"br-fw", nil))
		}
		for _, n := range []string{"br", "br-cold", "br-nomac", "br-fw"} {
			if _, err := os.Stat(br.PinDir(tb.Prefix + n)); err == nil {
				errs = append(errs, br.Detach(tb.Prefix+n, nil))
			}
		}
		return errors.Join(errs...)
	})
	registerBehindFirewall()
	for _, v := range []struct {
		name, desc string
		mac, cold  bool
		order      int
	}{
		{"br", "SCION border router in XDP, hop-field MAC checks on", true, false, 30},
		// Every packet's MAC computed: a flood of new flows, the worst case.
		{"br-cold", "SCION border router in XDP, every hop-field MAC computed (MAC cache off)", true, true, 30},
		{"br-nomac", "SCION border router in XDP, MAC checks off", false, false, 31},
	} {
		v := v
		lab.Register(lab.Scenario{
			Name: v.name, Description: v.desc, Layout: lab.LayoutDUT, Order: v.order,
			Rewrites: true, Anchor: "xdp-redirect",
			Setup: func(tb lab.Testbed) (func() error, error) {
				cfg, cleanup, err := br.LabConfig()
				if err != nil {
					return nil, err
				}
				defer cleanup()
				cfg.MACCheck = v.mac
				name := tb.Prefix + v.name
				devs := []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}
				if err := br.Attach(cfg, br.AttachOptions{Devices: devs, Name: name, NoFallback: true, NoMACCache: v.cold}); err != nil {
					return nil, err
				}
				return func() error { return br.Detach(name, nil) }, nil
			},
			Packets: labTransitPackets,
		})
	}
}

// fwRuleCount is how many rules the firewall holds in front of the router
// in the br-fw row: a realistic operator's set, none matching the transit
// traffic, so every packet is looked up and passed.
const fwRuleCount = 40

// registerBehindFirewall adds br-fw: the br row with the firewall in front
// of the router on the ingress device (rules, no connection tracking).
func registerBehindFirewall() {
	lab.Register(lab.Scenario{
		Name: "br-fw", Description: fmt.Sprintf("SCION border router in XDP behind fastpath fw (%d rules, conntrack off) on the ingress device", fwRuleCount),
		Layout: lab.LayoutDUT, Order: 30, Rewrites: true, Anchor: "xdp-redirect",
		Setup: func(tb lab.Testbed) (func() error, error) {
			cfg, cleanup, err := br.LabConfig()
			if err != nil {
				return nil, err
			}
			defer cleanup()
			name := tb.Prefix + "br-fw"
			devs := []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}
			if err := br.Attach(cfg, br.AttachOptions{Devices: devs, Name: name, NoFallback: true}); err != nil {
				return nil, err
			}
			var b strings.Builder
			b.WriteString("default = \"pass\"\n")
			for i := range fwRuleCount {
				fmt.Fprintf(&b, "[[rule]]\naction = \"drop\"\nsrc = \"198.51.%d.0/24\"\nproto = \"tcp\"\ndport = %d\n", i, 1000+i)
			}
			rs, err := fw.ParseRules("br-fw.toml", []byte(b.String()))
			if err == nil {
				err = fw.Attach(fw.AttachOptions{Name: name, Devices: devs[:1], Rules: rs, NoFallback: true})
			}
			if err != nil {
				return nil, errors.Join(err, br.Detach(name, nil))
			}
			return func() error { return errors.Join(fw.Detach(name, nil), br.Detach(name, nil)) }, nil
		},
		Packets: labTransitPackets,
	})
}

// labTransitPackets are 1,000 transit packets through the lab's router,
// from the generator's veth to the DUT's.
func labTransitPackets(tb lab.Testbed, size int) ([][]byte, error) {
	cfg, cleanup, err := br.LabConfig()
	if err != nil {
		return nil, err
	}
	defer cleanup()
	return br.TransitPackets(cfg, br.TransitOptions{Count: 1000, Size: size, SrcMAC: tb.Gen().MAC, DstMAC: tb.DUTIn().MAC})
}

func registerReference() {
	lab.Register(lab.Scenario{
		Name: "ref-router", Description: "scionproto " + benchVersion() + "'s router (UDP sockets) in the DUT namespace",
		Layout: lab.LayoutDUT, Order: 32, Rewrites: true, Anchor: "xdp-redirect",
		Note: "a userspace router on both cores, beside the generator",
		Setup: func(tb lab.Testbed) (func() error, error) {
			dir, err := os.MkdirTemp("", "fastpath-ref-")
			if err != nil {
				return nil, err
			}
			if _, err := br.WriteLabConfig(dir); err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
			// The reference insists on both master keys.
			if err := os.WriteFile(filepath.Join(dir, "keys", "master1.key"), []byte("8fiM4fdey8zv/9OaQw8lKg=="), 0o600); err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
			r, err := br.StartReferenceRouter(benchVersion(), tb.DUTIn().Netns, "br1-ff00_0_110-1", dir, "198.18.0.2:30042")
			if err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
			return func() error { r.Stop(); return os.RemoveAll(dir) }, nil
		},
		Packets: labTransitPackets,
	})
}
