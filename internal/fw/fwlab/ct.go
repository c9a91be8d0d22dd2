package fwlab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/fw/ctref"
	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The stateful rows (issue 25): one policy, in fastpath fw with connection
// tracking and in nftables, that passes established and related packets
// and new connections from the generator's subnet, and drops the rest.
//
// fw-ct and nft-ct are lab bench rows: the generator's UDP flows, each made
// established before the measurement by one reply from the sink's side, so
// that what they measure is the established path, every packet looked up
// in the connection table. Their Describe proves it from the DUT's own
// counters, and fails the row if a measured packet was anything else.
//
// fw-ct-synflood and nft-ct-synflood are lab tcp rows: iperf3 through the
// same policy, which also passes new TCP connections to the iperf3 port,
// alone and then under a SYN flood to that port (lab.Scenario.SYNFlood).

// ctRules is the policy as a rules file, in the syntax a user writes.
// tcp adds the rule that lets any source open a connection to the sink's
// iperf3 port, which is what a SYN flood aims at.
func ctRules(tb lab.Testbed, tcp bool) (*fw.RuleSet, error) {
	return ctRulesAction(tb, tcp, fw.Pass)
}

// ctRulesAction is ctRules whose rule for the iperf3 port has action act:
// pass, or synproxy (then before the generator's rule, which would pass
// the iperf3 client's own SYNs first).
func ctRulesAction(tb lab.Testbed, tcp bool, act fw.Action) (*fw.RuleSet, error) {
	src, _ := labFlow(tb)
	var b strings.Builder
	b.WriteString("default = \"drop\"\n\n[[rule]]\naction = \"pass\"\nct_state = [\"established\", \"related\"]\n\n")
	if tcp && act == fw.Synproxy {
		fmt.Fprintf(&b, "[[rule]]\naction = \"synproxy\"\nct_state = \"new\"\nproto = \"tcp\"\ndst = %q\ndport = %d\n\n", tb.Sink().Addr.Addr(), lab.IperfPort)
	}
	fmt.Fprintf(&b, "[[rule]]\naction = \"pass\"\nct_state = \"new\"\nsrc = %q\n", src)
	if tcp && act != fw.Synproxy {
		fmt.Fprintf(&b, "\n[[rule]]\naction = \"pass\"\nct_state = \"new\"\nproto = \"tcp\"\ndst = %q\ndport = %d\n", tb.Sink().Addr.Addr(), lab.IperfPort)
	}
	name := "lab ct rules"
	if tcp {
		name = "lab ct rules with iperf3"
	}
	return fw.ParseRules(name, []byte(b.String()))
}

func ctInstance(tb lab.Testbed) string { return tb.Prefix + "fw-ct" }

// ctCounters are the counters a row checks: the packets by ct state, under
// the names fw stats gives them, and the default policy's drops.
func ctCounters() []string {
	var names []string
	for _, s := range fw.CtStateNames() {
		names = append(names, "ct_"+s)
	}
	return append(names, "drop_default")
}

// ctRow is one stateful row's state between its set-up and its Describe:
// what the DUT had counted once the flows were primed.
type ctRow struct {
	flows  int
	primed map[string]uint64
}

// setupFwCt attaches one firewall instance to both DUT veths, so that the
// sink's replies are tracked as the generator's packets are, and for a
// bench row makes the row's flows established.
func (r *ctRow) setupFwCt(tcp bool, mode xdp.Mode) func(lab.Testbed) (func() error, error) {
	return func(tb lab.Testbed) (func() error, error) {
		rs, err := ctRules(tb, tcp)
		if err != nil {
			return nil, err
		}
		name := ctInstance(tb)
		o := fw.AttachOptions{Name: name, Devices: []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}, Rules: rs, NoFallback: true, Mode: mode}
		if err := fw.Attach(o); err != nil {
			return nil, err
		}
		teardown := func() error { return fw.Detach(name, nil) }
		if tcp {
			return teardown, nil
		}
		return r.prime(tb, fwCtCounts, "ct_established", teardown)
	}
}

// prime makes the row's flows established and keeps what the DUT counted
// (by count, whose established counter is est): one packet each way per
// flow, new from the generator, then the reply that makes it established.
// On failure it tears down.
func (r *ctRow) prime(tb lab.Testbed, count func(lab.Testbed) (map[string]uint64, error), est string, teardown func() error) (func() error, error) {
	var err error
	if r.flows, err = primeFlows(tb); err != nil {
		return nil, errors.Join(err, teardown())
	}
	if r.primed, err = count(tb); err != nil {
		return nil, errors.Join(err, teardown())
	}
	if n := uint64(r.flows); r.primed["ct_new"] != n || r.primed[est] != n {
		return nil, errors.Join(fmt.Errorf("priming %d flows counted %v: want %d new and %d established", r.flows, r.primed, n, n), teardown())
	}
	return teardown, nil
}

// fwCtCounts reads the firewall's packets by ct state.
func fwCtCounts(tb lab.Testbed) (map[string]uint64, error) {
	f, err := fw.OpenPinned(ctInstance(tb))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := f.Counters()
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, k := range ctCounters() {
		v, ok := c[k]
		if !ok {
			return nil, fmt.Errorf("the firewall's counters have no %q", k)
		}
		out[k] = v
	}
	return out, nil
}

// describeFwCt checks that every packet the firewall saw after the priming
// was established, and says how many there were.
func (r *ctRow) describeFwCt(tb lab.Testbed) (string, error) {
	now, err := fwCtCounts(tb)
	if err != nil {
		return "", err
	}
	var others []string
	for _, k := range ctCounters() {
		if d := now[k] - r.primed[k]; d > 0 && k != "ct_established" {
			others = append(others, fmt.Sprintf("%d %s", d, k))
		}
	}
	est := now["ct_established"] - r.primed["ct_established"]
	if len(others) > 0 || est == 0 {
		return "", fmt.Errorf("after priming %d flows the firewall counted %d established and %s: the measured packets must all be established", r.flows, est, strings.Join(others, ", "))
	}
	return fmt.Sprintf("all %d packets established (%d flows primed)", est, r.flows), nil
}

// nftCtTable is the policy in nftables, with a named counter on each
// verdict so that the row can check what the measured packets were.
func nftCtTable(tb lab.Testbed, tcp bool) string {
	src, _ := labFlow(tb)
	var b strings.Builder
	b.WriteString("table ip fpct {\n\tcounter ct_est {}\n\tcounter ct_new {}\n\tcounter dropped {}\n")
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority 0; policy drop;\n")
	b.WriteString("\t\tct state established,related counter name \"ct_est\" accept\n")
	fmt.Fprintf(&b, "\t\tct state new ip saddr %s counter name \"ct_new\" accept\n", src)
	if tcp {
		fmt.Fprintf(&b, "\t\tct state new ip daddr %s tcp dport %d counter name \"ct_new\" accept\n", tb.Sink().Addr.Addr(), lab.IperfPort)
	}
	b.WriteString("\t\tcounter name \"dropped\" drop\n\t}\n}\n")
	return b.String()
}

func (r *ctRow) setupNftCt(tcp bool) func(lab.Testbed) (func() error, error) {
	return func(tb lab.Testbed) (func() error, error) {
		if _, err := exec.LookPath("nft"); err != nil {
			return nil, errors.New("nft not found: apt install nftables")
		}
		in := tb.DUTIn()
		if err := inNetns(in.Netns, nftCtTable(tb, tcp), "nft", "-f", "-"); err != nil {
			return nil, err
		}
		teardown := func() error { return inNetns(in.Netns, "", "nft", "delete", "table", "ip", "fpct") }
		if tcp {
			return teardown, nil
		}
		return r.prime(tb, nftCtCounts, "ct_est", teardown)
	}
}

// nftCtCounts reads the table's named counters (packets).
func nftCtCounts(tb lab.Testbed) (map[string]uint64, error) {
	counts, err := ctref.Counters(tb.DUTIn().Netns, "ip", "fpct")
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"ct_est", "ct_new", "dropped"} {
		if _, ok := counts[k]; !ok {
			return nil, fmt.Errorf("nft lists no counter %s in table fpct", k)
		}
	}
	return counts, nil
}

func (r *ctRow) describeNftCt(tb lab.Testbed) (string, error) {
	now, err := nftCtCounts(tb)
	if err != nil {
		return "", err
	}
	est := now["ct_est"] - r.primed["ct_est"]
	if d := now["ct_new"] - r.primed["ct_new"]; d > 0 || now["dropped"] > r.primed["dropped"] || est == 0 {
		return "", fmt.Errorf("after priming %d flows nftables counted %d established, %d new and %d dropped: the measured packets must all be established", r.flows, est, d, now["dropped"]-r.primed["dropped"])
	}
	return fmt.Sprintf("all %d packets established (%d flows primed)", est, r.flows), nil
}

// describeFwFlood says what the firewall's connection tracking made of a
// SYN-flood row.
func describeFwFlood(tb lab.Testbed) (string, error) {
	c, err := fwCtCounts(tb)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("fw ct: %d new, %d established, %d invalid", c["ct_new"], c["ct_established"], c["ct_invalid"]), nil
}

// describeNftFlood says what nftables' rules counted in a SYN-flood row.
func describeNftFlood(tb lab.Testbed) (string, error) {
	c, err := nftCtCounts(tb)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("nft: %d new, %d established, %d dropped", c["ct_new"], c["ct_est"], c["dropped"]), nil
}

// udpFlow is one flow of the generator's UDP packets.
type udpFlow struct{ src, dst netip.AddrPort }

// benchFlows are the distinct UDP flows of the packets a bench row sends.
func benchFlows(tb lab.Testbed) ([]udpFlow, error) {
	pkts, err := lab.RoutedUDP(tb, 138)
	if err != nil {
		return nil, err
	}
	seen := map[udpFlow]bool{}
	var out []udpFlow
	for i, p := range pkts {
		if len(p) < 34 || binary.BigEndian.Uint16(p[12:]) != 0x0800 || p[23] != 17 {
			return nil, fmt.Errorf("packet %d is not UDP over IPv4", i+1)
		}
		l4 := 14 + int(p[14]&0xf)*4
		if len(p) < l4+8 {
			return nil, fmt.Errorf("packet %d: truncated UDP header", i+1)
		}
		src, _ := netip.AddrFromSlice(p[26:30])
		dst, _ := netip.AddrFromSlice(p[30:34])
		f := udpFlow{netip.AddrPortFrom(src, binary.BigEndian.Uint16(p[l4:])), netip.AddrPortFrom(dst, binary.BigEndian.Uint16(p[l4+2:]))}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out, nil
}

// primeFlows makes each of the bench's flows established in the DUT: one
// datagram from a socket on the flow's source in the generator's namespace
// to a socket on its destination in the sink's, which answers it. The
// answer reaching the generator proves both crossed the DUT. It runs before
// the bench attaches its sink, while the sink's namespace still receives.
func primeFlows(tb lab.Testbed) (int, error) {
	flows, err := benchFlows(tb)
	if err != nil {
		return 0, err
	}
	servers := map[netip.AddrPort]*net.UDPConn{}
	defer func() {
		for _, c := range servers {
			c.Close()
		}
	}()
	for _, f := range flows {
		if servers[f.dst] != nil {
			continue
		}
		// A socket belongs to the namespace it was made in.
		if err := netns.Run(tb.Sink().Netns, func() error {
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(f.dst))
			servers[f.dst] = c
			return err
		}); err != nil {
			return 0, fmt.Errorf("prime flows: listen on %s in %s: %w", f.dst, tb.Sink().Netns, err)
		}
	}
	buf := make([]byte, 64)
	for _, f := range flows {
		var c *net.UDPConn
		if err := netns.Run(tb.Gen().Netns, func() (err error) {
			c, err = net.DialUDP("udp4", net.UDPAddrFromAddrPort(f.src), net.UDPAddrFromAddrPort(f.dst))
			return err
		}); err != nil {
			return 0, fmt.Errorf("prime flows: socket on %s in %s: %w", f.src, tb.Gen().Netns, err)
		}
		err := primeFlow(c, servers[f.dst], f, buf)
		c.Close()
		if err != nil {
			return 0, fmt.Errorf("prime flow %s → %s: %w", f.src, f.dst, err)
		}
	}
	return len(flows), nil
}

func primeFlow(c, srv *net.UDPConn, f udpFlow, buf []byte) error {
	deadline := time.Now().Add(time.Second)
	if _, err := c.Write([]byte("prime")); err != nil {
		return err
	}
	srv.SetReadDeadline(deadline)
	n, from, err := srv.ReadFromUDPAddrPort(buf)
	if err != nil {
		return fmt.Errorf("the sink did not receive it (did the DUT drop a new flow?): %w", err)
	}
	if from != f.src {
		return fmt.Errorf("the sink received a datagram from %s instead", from)
	}
	if _, err := srv.WriteToUDPAddrPort(buf[:n], from); err != nil {
		return err
	}
	c.SetReadDeadline(deadline)
	if _, err := c.Read(buf); err != nil {
		return fmt.Errorf("the generator did not receive the answer (did the DUT drop the reply?): %w", err)
	}
	return nil
}

// registerCt adds the stateful rows and their groups: fw-stateful for lab bench,
// fw-stateful-tcp for lab tcp.
func registerCt() {
	fwCt, nftCt := &ctRow{}, &ctRow{}
	lab.Register(lab.Scenario{
		Name:        "fw-ct",
		Description: "fastpath fw with conntrack on both DUT veths: pass established/related, new from the generator's subnet, drop; every flow primed established",
		Layout:      lab.LayoutDUT, Order: 48, Anchor: "fw-0", Rewrites: true, Routed: true,
		Setup: fwCt.setupFwCt(false, xdp.Native), Describe: fwCt.describeFwCt, Packets: lab.RoutedUDP,
	})
	lab.Register(lab.Scenario{
		Name:        "nft-ct",
		Description: "nftables, the same policy: ct state established,related accept; ct state new from the generator's subnet accept; drop",
		Layout:      lab.LayoutDUT, Order: 59, Anchor: "routed", Rewrites: true, Routed: true,
		Setup: nftCt.setupNftCt(false), Describe: nftCt.describeNftCt, Packets: lab.RoutedUDP,
	})
	lab.Register(lab.Scenario{
		Name:        "fw-ct-synflood",
		Description: "fw-ct's policy + new TCP to the iperf3 port: iperf3 alone, then under a SYN flood to that port",
		Layout:      lab.LayoutDUT, Order: 49, Routed: true, SYNFlood: true,
		Setup: (&ctRow{}).setupFwCt(true, xdp.Native), Describe: describeFwFlood,
	})
	// Native XDP on a veth takes frames through the veth's own ring, which
	// the flood's frames and iperf3's packets then share and the generator
	// overfills; in generic mode the veth's ingress is the kernel's, as for
	// nftables, and TSO packets are not copied.
	lab.Register(lab.Scenario{
		Name:        "fw-ct-generic-synflood",
		Description: "fw-ct-synflood with the firewall in generic XDP, the veths' ingress as nft-ct-synflood has it",
		Layout:      lab.LayoutDUT, Order: 49, Routed: true, SYNFlood: true,
		Setup: (&ctRow{}).setupFwCt(true, xdp.Generic), Describe: describeFwFlood,
	})
	lab.Register(lab.Scenario{
		Name:        "nft-ct-synflood",
		Description: "nft-ct's policy + new TCP to the iperf3 port: iperf3 alone, then under a SYN flood to that port",
		Layout:      lab.LayoutDUT, Order: 59, Routed: true, SYNFlood: true,
		Setup: (&ctRow{}).setupNftCt(true), Describe: describeNftFlood,
	})
	lab.Register(lab.Scenario{
		Name:        "fw-ct-synproxy-synflood",
		Description: "fw-ct-synflood with action synproxy on the iperf3 port: SYNs answered with cookies in XDP; full checksums from the ends (tx offload off), as the synproxy needs",
		Layout:      lab.LayoutDUT, Order: 49, Routed: true, SYNFlood: true,
		Setup: setupSynproxy, Describe: describeFwFlood,
	})
	lab.RegisterGroup("fw-stateful", "routed", "fw-0", "fw-ct", "nft-ct")
	lab.RegisterGroup("fw-stateful-tcp", "routed", "fw-ct-synflood", "fw-ct-generic-synflood", "fw-ct-synproxy-synflood", "nft-ct-synflood")
}

// setupSynproxy attaches the firewall with a synproxy rule for the iperf3
// port to both DUT veths. The ends send full checksums (a veth hands on a
// local stack's partial ones, which the synproxy's shift of seq/ack would
// spoil: a NIC delivers full ones) and carry a program that passes all, for
// a veth delivers the frames its peer sends back with XDP_TX (the cookies,
// the ACK to the server) promptly only to a peer with an XDP program.
func setupSynproxy(tb lab.Testbed) (func() error, error) {
	rs, err := ctRulesAction(tb, true, fw.Synproxy)
	if err != nil {
		return nil, err
	}
	var undo []func() error
	teardown := func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	}
	for _, ep := range []lab.Endpoint{tb.Gen(), tb.Sink()} {
		if err := ethtoolTx(ep, "off"); err != nil {
			return nil, errors.Join(err, teardown())
		}
		undo = append(undo, func() error { return ethtoolTx(ep, "on") })
		l, err := lab.AttachPass(ep.Iface())
		if err != nil {
			return nil, errors.Join(err, teardown())
		}
		undo = append(undo, l.Close)
	}
	name := ctInstance(tb)
	o := fw.AttachOptions{Name: name, Devices: []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}, Rules: rs, NoFallback: true, Mode: xdp.Native}
	if err := fw.Attach(o); err != nil {
		return nil, errors.Join(err, teardown())
	}
	undo = append(undo, func() error { return fw.Detach(name, nil) })
	return teardown, nil
}

// ethtoolTx turns an end's tx checksum offload on or off.
func ethtoolTx(ep lab.Endpoint, state string) error {
	var out []byte
	err := netns.Run(ep.Netns, func() error {
		var err error
		out, err = exec.Command("ethtool", "-K", ep.Dev, "tx", state).CombinedOutput()
		return err
	})
	if err != nil {
		return fmt.Errorf("ethtool -K %s tx %s in %s: %v: %s", ep.Dev, state, ep.Netns, err, out)
	}
	return nil
}
