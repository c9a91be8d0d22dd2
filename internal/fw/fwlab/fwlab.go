// Package fwlab holds the firewall's lab rows: the same rule sets in
// fastpath fw, iptables (a linear chain), nftables (an interval set) and
// xdp-filter (addresses only), each on the routed DUT's ingress; and the
// stateful rows (ct.go), fastpath fw's connection tracking beside
// nftables'.
package fwlab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The churn row's flows and flow-table size.
const (
	churnFlows = 65536
	churnTable = 4096
)

// labCounts are the rule counts of the rows.
var labCounts = []struct {
	n    int
	name string
}{{0, "0"}, {1000, "1k"}, {10000, "10k"}, {100000, "100k"}}

// labFlow are the prefixes of the lab's generator and sink.
func labFlow(tb lab.Testbed) (src, dst netip.Prefix) {
	return tb.Gen().Addr.Masked(), tb.Sink().Addr.Masked()
}

func labRules(tb lab.Testbed, n int) *fw.RuleSet {
	src, dst := labFlow(tb)
	return fw.LabRules(src, dst, n)
}

func labInstance(tb lab.Testbed, generic bool) string {
	if generic {
		return tb.Prefix + "fw-generic"
	}
	return tb.Prefix + "fw"
}

func setupFirewall(n int, generic bool, maxFlows uint32) func(lab.Testbed) (func() error, error) {
	return setupRules(func(tb lab.Testbed) (*fw.RuleSet, error) { return labRules(tb, n), nil }, generic, maxFlows)
}

// setupClassBench attaches the firewall with a ClassBench-like set that
// misses the lab's flows, then passes them.
func setupClassBench(kind string, n int) func(lab.Testbed) (func() error, error) {
	return setupRules(func(tb lab.Testbed) (*fw.RuleSet, error) {
		src, dst := labFlow(tb)
		return fw.LabClassBench(kind, n, src, dst)
	}, false, 0)
}

func setupRules(rules func(lab.Testbed) (*fw.RuleSet, error), generic bool, maxFlows uint32) func(lab.Testbed) (func() error, error) {
	return func(tb lab.Testbed) (func() error, error) {
		rs, err := rules(tb)
		if err != nil {
			return nil, err
		}
		name := labInstance(tb, generic)
		o := fw.AttachOptions{Name: name, Devices: []xdp.Iface{tb.DUTIn().Iface()}, Rules: rs, NoFallback: true, Mode: xdp.Native, MaxFlows: maxFlows}
		if generic {
			o.Mode = xdp.Generic
		}
		if err := fw.Attach(o); err != nil {
			return nil, err
		}
		return func() error { return fw.Detach(name, nil) }, nil
	}
}

// inNetns runs a command in the DUT's network namespace only: the mount
// namespace, and with it /sys/fs/bpf, stays ours.
func inNetns(ns string, stdin string, name string, args ...string) error {
	return netns.Run(ns, func() error {
		cmd := exec.Command(name, args...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

func setupIptables(n int) func(lab.Testbed) (func() error, error) {
	return func(tb lab.Testbed) (func() error, error) {
		if _, err := exec.LookPath("iptables-restore"); err != nil {
			return nil, errors.New("iptables-restore not found: apt install iptables")
		}
		src, dst := labFlow(tb)
		in := tb.DUTIn()
		var b strings.Builder
		b.WriteString("*filter\n:fpfw - [0:0]\n")
		for _, p := range fw.MissPrefixes(n, fw.LabAvoid) {
			fmt.Fprintf(&b, "-A fpfw -s %s -j DROP\n", p)
		}
		fmt.Fprintf(&b, "-A fpfw -s %s -d %s -j ACCEPT\n-A fpfw -j DROP\n", src, dst)
		fmt.Fprintf(&b, "-A FORWARD -i %s -j fpfw\nCOMMIT\n", in.Dev)
		if err := inNetns(in.Netns, b.String(), "iptables-restore"); err != nil {
			return nil, err
		}
		// A restore without --noflush replaces the whole filter table.
		return func() error {
			return inNetns(in.Netns, "*filter\n:FORWARD ACCEPT [0:0]\nCOMMIT\n", "iptables-restore")
		}, nil
	}
}

func setupNft(n int) func(lab.Testbed) (func() error, error) {
	return func(tb lab.Testbed) (func() error, error) {
		if _, err := exec.LookPath("nft"); err != nil {
			return nil, errors.New("nft not found: apt install nftables")
		}
		src, dst := labFlow(tb)
		in := tb.DUTIn()
		var b strings.Builder
		b.WriteString("table ip fpfw {\n\tset miss {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\tauto-merge\n")
		if ps := fw.MissPrefixes(n, fw.LabAvoid); len(ps) > 0 {
			b.WriteString("\t\telements = { ")
			for i, p := range ps {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(p.String())
			}
			b.WriteString(" }\n")
		}
		b.WriteString("\t}\n")
		fmt.Fprintf(&b, "\tchain forward {\n\t\ttype filter hook forward priority 0; policy accept;\n")
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr @miss drop\n", in.Dev)
		fmt.Fprintf(&b, "\t\tiifname %q ip saddr %s ip daddr %s accept\n", in.Dev, src, dst)
		fmt.Fprintf(&b, "\t\tiifname %q drop\n\t}\n}\n", in.Dev)
		if err := inNetns(in.Netns, b.String(), "nft", "-f", "-"); err != nil {
			return nil, err
		}
		return func() error { return inNetns(in.Netns, "", "nft", "delete", "table", "ip", "fpfw") }, nil
	}
}

// xdp-filter matches single addresses, so its rows take each prefix's
// first address; it holds at most 10,000.
const (
	xdpFilterPins = "/sys/fs/bpf/xdp-filter"
	libxdpPins    = "/sys/fs/bpf/xdp"
)

func setupXDPFilter(n int) func(lab.Testbed) (func() error, error) {
	return func(tb lab.Testbed) (func() error, error) {
		if _, err := exec.LookPath("xdp-filter"); err != nil {
			return nil, errors.New("xdp-filter not found: apt install xdp-tools")
		}
		if _, err := os.Stat(xdpFilterPins); err == nil {
			return nil, fmt.Errorf("xdp-filter is already loaded somewhere (%s exists): unload it first", xdpFilterPins)
		}
		in := tb.DUTIn()
		// libxdp makes its directory of dispatchers on first use and
		// leaves it, empty, after the unload: the row removes it if it
		// made it and it is empty (os.Remove fails on one in use).
		_, err := os.Stat(libxdpPins)
		madeDir := os.IsNotExist(err)
		if err := inNetns(in.Netns, "", "xdp-filter", "load", "-m", "native", "-p", "allow", in.Dev); err != nil {
			return nil, err
		}
		teardown := func() error {
			err := inNetns(in.Netns, "", "xdp-filter", "unload", in.Dev)
			if madeDir {
				os.Remove(libxdpPins)
			}
			return err
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(xdpFilterPins, "filter_ipv4"), nil)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open xdp-filter's address map: %w", err), teardown())
		}
		defer m.Close()
		if n > int(m.MaxEntries()) {
			return nil, errors.Join(fmt.Errorf("xdp-filter holds at most %d addresses, not %d", m.MaxEntries(), n), teardown())
		}
		// Values are per-CPU flags; 1 is "match as source".
		flags := make([]uint64, ebpf.MustPossibleCPU())
		for i := range flags {
			flags[i] = 1
		}
		for _, p := range fw.MissPrefixes(n, fw.LabAvoid) {
			a := p.Addr().As4()
			if err := m.Put(binary.LittleEndian.Uint32(a[:]), flags); err != nil {
				return nil, errors.Join(fmt.Errorf("add %s to xdp-filter: %w", p.Addr(), err), teardown())
			}
		}
		return teardown, nil
	}
}

func init() {
	lab.RegisterCleanup(func(tb lab.Testbed) error {
		var errs []error
		for _, name := range []string{labInstance(tb, false), labInstance(tb, true), ctInstance(tb)} {
			if _, err := os.Stat(fw.PinDir(name)); err == nil {
				errs = append(errs, fw.Detach(name, nil))
			}
		}
		return errors.Join(errs...)
	})
	register := func(name, desc string, order int, setup func(lab.Testbed) (func() error, error)) {
		lab.Register(lab.Scenario{
			Name: name, Description: desc, Layout: lab.LayoutDUT, Order: order, Anchor: "routed",
			Rewrites: true, Routed: true, Setup: setup, Packets: lab.RoutedUDP,
		})
	}
	group := []string{"routed"}
	tcp := []string{"routed", "xdp-pass"}
	for i, c := range labCounts {
		register("fw-"+c.name, fmt.Sprintf("fastpath fw, %d random prefix rules + 1 pass rule, native XDP", c.n), 40+i, setupFirewall(c.n, false, 0))
		group = append(group, "fw-"+c.name)
		tcp = append(tcp, "fw-"+c.name)
	}
	register("fw-100k-generic", "fastpath fw, 100,000 rules + 1, generic XDP", 44, setupFirewall(100000, true, 0))
	// The worst case: no packet finds its flow, so every one is classified
	// and evicts another flow.
	lab.Register(lab.Scenario{
		Name: "fw-100k-churn", Description: fmt.Sprintf("fastpath fw, 100,000 rules + 1; %d flows cycling through a %d-entry flow table: every packet classified", churnFlows, churnTable),
		Layout: lab.LayoutDUT, Order: 45, Rewrites: true, Routed: true, Anchor: "routed",
		Setup: setupFirewall(100000, false, churnTable),
		Packets: func(tb lab.Testbed, size int) ([][]byte, error) {
			u := tb.DefaultUDP()
			u.Size, u.DstMAC, u.Count = size, tb.DUTIn().MAC, churnFlows
			return lab.UDPPackets(u)
		},
	})
	group = append(group, "fw-100k-churn")
	group = append(group, "fw-100k-generic")
	tcp = append(tcp, "fw-100k-generic")
	var ipt, nft, xf []string
	for i, c := range labCounts[1:] {
		register("iptables-"+c.name, fmt.Sprintf("iptables chain of %d source prefixes + 1 accept", c.n), 50+i, setupIptables(c.n))
		register("nft-"+c.name, fmt.Sprintf("nftables interval set of %d source prefixes + 1 accept", c.n), 55+i, setupNft(c.n))
		ipt, nft = append(ipt, "iptables-"+c.name), append(nft, "nft-"+c.name)
		if c.n <= 10000 {
			register("xdp-filter-"+c.name, fmt.Sprintf("xdp-filter, %d source addresses (it has no prefixes)", c.n), 60+i, setupXDPFilter(c.n))
			xf = append(xf, "xdp-filter-"+c.name)
		}
	}
	group = append(append(append(group, ipt...), nft...), xf...)
	tcp = append(append(tcp, ipt...), nft...)
	lab.RegisterGroup("fw", group...)
	lab.RegisterGroup("fw-tcp", tcp...)
	registerFloods(nft, xf)
	registerCt()
	registerHost()
}

// The flood rows: a flood of new flows (every packet a flow not seen
// before, random source addresses in the generator's subnet and random
// ports), and beside them the same rule sets with few flows, all cached.
const (
	floodFlows  = 200_000
	cachedFlows = 1_000
)

// registerFloods adds the ClassBench-like rows and the group fw-flood:
// `lab bench --flows 200000 fw-flood` floods the rows that have no flow
// count of their own (routed, fw-0, the prefix sets, nft, xdp-filter) as
// well.
func registerFloods(nft, xf []string) {
	genNet := lab.Testbed{}.Gen().Addr.Masked()
	group := []string{"routed", "fw-0", "fw-10k", "fw-100k"}
	var cached []string
	order := 70
	for _, kind := range fw.ClassBenchKinds {
		for _, c := range labCounts[2:] {
			name := fmt.Sprintf("fw-%s-%s", kind, c.name)
			lab.Register(lab.Scenario{
				Name:        name,
				Description: fmt.Sprintf("fastpath fw, ClassBench-like %s set of %d rules + 1 pass rule; %d new flows", kind, c.n, floodFlows),
				Layout:      lab.LayoutDUT, Order: order, Rewrites: true, Routed: true, Anchor: "routed",
				Setup: setupClassBench(kind, c.n), Packets: lab.RoutedUDP,
				Flows: floodFlows, FlowSrc: genNet,
			})
			group = append(group, name)
			order++
		}
		name := fmt.Sprintf("fw-%s-100k-cached", kind)
		lab.Register(lab.Scenario{
			Name:        name,
			Description: fmt.Sprintf("fastpath fw, ClassBench-like %s set of 100,000 rules + 1; %d flows cycling, all cached", kind, cachedFlows),
			Layout:      lab.LayoutDUT, Order: 80 + len(cached), Rewrites: true, Routed: true, Anchor: "routed",
			Setup: setupClassBench(kind, 100000), Packets: lab.RoutedUDP,
			Flows: cachedFlows, FlowSrc: genNet,
		})
		cached = append(cached, name)
	}
	group = append(append(append(group, nft...), xf...), cached...)
	lab.RegisterGroup("fw-flood", group...)
}
