package fwlab

import (
	"errors"
	"fmt"
	"os/exec"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/fw/ctref"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// fw-host and nft-host are lab tcp rows: the firewall where a host firewall
// lives, on the protected host's own interface (the sink, which serves
// iperf3), with the policy every host firewall starts from: what the host
// opened and its answers pass, new TCP to the iperf3 port passes, the rest
// is dropped. The host's ACKs leave through the same interface: conntrack
// sees them at its egress, or the client's next segment would be invalid.

// hostRules is the host policy as a rules file.
func hostRules() (*fw.RuleSet, error) {
	return fw.ParseRules("lab host rules", []byte(fmt.Sprintf(`default = "drop"

[[rule]]
action = "pass"
ct_state = ["established", "related"]

[[rule]]
action = "pass"
ct_state = "new"
proto = "tcp"
dport = %d
`, lab.IperfPort)))
}

func hostInstance(tb lab.Testbed) string { return tb.Prefix + "fw-host" }

func setupFwHost(mode xdp.Mode) func(lab.Testbed) (func() error, error) {
	return func(tb lab.Testbed) (func() error, error) {
		rs, err := hostRules()
		if err != nil {
			return nil, err
		}
		name := hostInstance(tb)
		o := fw.AttachOptions{Name: name, Devices: []xdp.Iface{tb.Sink().Iface()}, Rules: rs, NoFallback: true, Mode: mode}
		if err := fw.Attach(o); err != nil {
			return nil, err
		}
		return func() error { return fw.Detach(name, nil) }, nil
	}
}

func describeFwHost(tb lab.Testbed) (string, error) {
	f, err := fw.OpenPinned(hostInstance(tb))
	if err != nil {
		return "", err
	}
	defer f.Close()
	c, err := f.Counters()
	if err != nil {
		return "", err
	}
	if c["ct_egress"] == 0 {
		return "", errors.New("the host's own packets were not tracked at egress")
	}
	return fmt.Sprintf("fw ct: %d new, %d established, %d invalid in; %d tracked out", c["ct_new"], c["ct_established"], c["ct_invalid"], c["ct_egress"]), nil
}

// nftHostTable is the same policy as an nftables input chain on the host.
func nftHostTable() string {
	return fmt.Sprintf(`table inet fphost {
	chain input {
		type filter hook input priority 0; policy drop;
		ct state established,related counter name ct_est accept
		ct state new tcp dport %d counter name ct_new accept
		counter name dropped
	}
	counter ct_est {}
	counter ct_new {}
	counter dropped {}
}
`, lab.IperfPort)
}

func setupNftHost(tb lab.Testbed) (func() error, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, errors.New("nft not found: apt install nftables")
	}
	ns := tb.Sink().Netns
	if err := inNetns(ns, nftHostTable(), "nft", "-f", "-"); err != nil {
		return nil, err
	}
	return func() error { return inNetns(ns, "", "nft", "delete", "table", "inet", "fphost") }, nil
}

func describeNftHost(tb lab.Testbed) (string, error) {
	c, err := ctref.Counters(tb.Sink().Netns, "inet", "fphost")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("nft: %d new, %d established, %d dropped", c["ct_new"], c["ct_est"], c["dropped"]), nil
}

func registerHost() {
	lab.Register(lab.Scenario{
		Name:        "fw-host",
		Description: "fastpath fw on the protected host's own interface (the iperf3 server's), host policy: established/related, new TCP to the iperf3 port, drop; the host's packets tracked at egress",
		Layout:      lab.LayoutDUT, Order: 49, Routed: true,
		Setup: setupFwHost(xdp.Native), Describe: describeFwHost,
	})
	// A veth copies every TSO packet for a native XDP program on it; in
	// generic mode the program sees the stack's GRO packets, as nftables
	// does.
	lab.Register(lab.Scenario{
		Name:        "fw-host-generic",
		Description: "fw-host with the firewall in generic XDP",
		Layout:      lab.LayoutDUT, Order: 49, Routed: true,
		Setup: setupFwHost(xdp.Generic), Describe: describeFwHost,
	})
	lab.Register(lab.Scenario{
		Name:        "nft-host",
		Description: "nftables, the same host policy as an input chain on the protected host",
		Layout:      lab.LayoutDUT, Order: 59, Routed: true,
		Setup: setupNftHost, Describe: describeNftHost,
	})
	lab.RegisterGroup("fw-host-tcp", "routed", "fw-host", "fw-host-generic", "nft-host")
}
