// Package ctref runs frames through Linux conntrack and nftables' `ct state`
// in a namespace of its own, one at a time, and says what state nftables saw
// each in: the reference the firewall's connection tracking is to agree with
// (issue 25; docs/design/fw-conntrack.md).
//
// The namespace has a veth pair and a dummy device. A frame is sent into one
// end of the pair; it arrives on the other, where a prerouting chain of
// priority -150 (after conntrack, at -200) counts it by `ct state`, and is
// forwarded to the dummy device, which drops it: forwarding is what confirms
// a new conntrack entry (a packet dropped before POSTROUTING leaves none).
package ctref

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// The states nftables' `ct state` tells apart.
const (
	New         = "new"
	Established = "established"
	Related     = "related"
	Invalid     = "invalid"
	Untracked   = "untracked"
)

var states = []string{New, Established, Related, Invalid, Untracked}

// Ref is a namespace with conntrack and the counting chain.
type Ref struct {
	ns    string
	fd    int
	ifidx int
	mac   net.HardwareAddr // the receiving end's
}

const table = "fpct"

// Open makes the namespace (name ns: give it a prefix of the caller's own).
func Open(ns string) (r *Ref, err error) {
	if err := netns.Create(ns); err != nil {
		return nil, err
	}
	r = &Ref{ns: ns, fd: -1}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	// Forwarded packets leave by d0 to a gateway of a static neighbour
	// entry, whose end (d1) lies in a sink namespace that drops them.
	if err := netns.Create(r.sink()); err != nil {
		return r, err
	}
	for _, args := range [][]string{
		{"link", "add", "v0", "type", "veth", "peer", "name", "v1"},
		{"link", "add", "d0", "type", "veth", "peer", "name", "d1", "netns", r.sink()},
		{"link", "set", "lo", "up"}, {"link", "set", "v0", "up"}, {"link", "set", "v1", "up"}, {"link", "set", "d0", "up"},
		{"addr", "add", "10.255.99.1/24", "dev", "d0"},
		{"-6", "addr", "add", "fd00:ffff:99::1/64", "dev", "d0", "nodad"},
		{"neigh", "add", "10.255.99.2", "lladdr", "02:00:00:00:99:02", "dev", "d0", "nud", "permanent"},
		{"-6", "neigh", "add", "fd00:ffff:99::2", "lladdr", "02:00:00:00:99:02", "dev", "d0", "nud", "permanent"},
		{"route", "add", "default", "via", "10.255.99.2", "dev", "d0"},
		{"-6", "route", "add", "default", "via", "fd00:ffff:99::2", "dev", "d0"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			return r, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command("ip", "-n", r.sink(), "link", "set", "d1", "up").CombinedOutput(); err != nil {
		return r, fmt.Errorf("ip link set d1 up: %v: %s", err, out)
	}
	rules := fmt.Sprintf("table inet %s {\n", table)
	for _, s := range states {
		rules += fmt.Sprintf("  counter %s { }\n", s)
	}
	rules += "  counter passed { }\n"
	rules += "  chain pre {\n    type filter hook prerouting priority -150; policy accept;\n"
	// Only what arrives by v1, the frames under test: the sink's end of
	// d0 sends IPv6 of its own now and then (MLD reports), which would be
	// counted in a state, and as passed, in the moment a frame is.
	for _, s := range states {
		rules += fmt.Sprintf("    iifname \"v1\" ct state %s counter name %q\n", s, s)
	}
	rules += "  }\n"
	// Filter (priority -140) holds the rules under test; what it passes
	// is counted after it.
	rules += "  chain filter {\n    type filter hook prerouting priority -140; policy accept;\n  }\n"
	rules += "  chain post {\n    type filter hook prerouting priority -130; policy accept;\n    iifname \"v1\" counter name \"passed\"\n  }\n}\n"
	if err := netns.Run(ns, func() error {
		// Forward everything (to the dummy device), whatever its source;
		// IPv6 on without router advertisements, solicitations or DAD.
		for key, val := range map[string]string{
			"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0",
			"net/ipv4/conf/v1/rp_filter": "0", "net/ipv6/conf/all/forwarding": "1",
			// v0 only sends the frames under test: its own IPv6 (MLD
			// reports, sent again a while after it comes up) would be
			// counted as frames the chains passed.
			"net/ipv6/conf/v0/disable_ipv6": "1",
			"net/ipv6/conf/all/accept_ra":   "0", "net/ipv6/conf/all/router_solicitations": "0",
		} {
			if err := netns.Sysctl(key, val); err != nil {
				return err
			}
		}
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft -f: %v: %s\n%s", err, out, rules)
		}
		// GRO would merge frames: each is to be seen alone.
		if out, err := exec.Command("ethtool", "-K", "v1", "gro", "off").CombinedOutput(); err != nil {
			return fmt.Errorf("ethtool -K v1 gro off: %v: %s", err, out)
		}
		v0, err := net.InterfaceByName("v0")
		if err != nil {
			return err
		}
		v1, err := net.InterfaceByName("v1")
		if err != nil {
			return err
		}
		r.ifidx, r.mac = v0.Index, v1.HardwareAddr
		r.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	}); err != nil {
		return r, err
	}
	return r, nil
}

// Send sends one Ethernet frame (its destination MAC is set to the receiving
// end's) and returns the state nftables counted it in; "" and an error if it
// counted it in none within a second (a frame the stack dropped before
// prerouting: a bad IP header, say).
func (r *Ref) Send(frame []byte) (string, error) {
	st, _, err := r.SendVerdict(frame)
	return st, err
}

// Filter replaces the rules of the filter chain, which sees each frame after
// conntrack and the state count: nft statements, one per line, such as
// "ct state established,related accept". A frame the chain drops leaves no
// conntrack entry, as in a forward chain.
func (r *Ref) Filter(policy string, rules []string) error {
	text := fmt.Sprintf("flush chain inet %s filter\ntable inet %s {\n  chain filter {\n    type filter hook prerouting priority -140; policy %s;\n", table, table, policy)
	for _, l := range rules {
		text += "    " + l + "\n"
	}
	text += "  }\n}\n"
	return netns.Run(r.ns, func() error {
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft -f: %v: %s\n%s", err, out, text)
		}
		return nil
	})
}

// SendVerdict is Send, and also says whether the filter chain passed the
// frame.
func (r *Ref) SendVerdict(frame []byte) (string, bool, error) {
	before, err := r.counts()
	if err != nil {
		return "", false, err
	}
	f := append([]byte(nil), frame...)
	copy(f[0:6], r.mac)
	sa := &unix.SockaddrLinklayer{Ifindex: r.ifidx, Halen: 6}
	copy(sa.Addr[:], r.mac)
	if err := unix.Sendto(r.fd, f, 0, sa); err != nil {
		return "", false, fmt.Errorf("send: %w", err)
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		after, err := r.counts()
		if err != nil {
			return "", false, err
		}
		for _, s := range states {
			if after[s] > before[s] {
				// The chains run in one pass over the frame: by the
				// time its state is counted, so is its verdict.
				return s, after["passed"] > before["passed"], nil
			}
		}
	}
	return "", false, errors.New("nftables counted the frame in no state")
}

// counts reads the counters.
func (r *Ref) counts() (map[string]uint64, error) {
	return Counters(r.ns, "inet", table)
}

// Counters reads the packets of an nftables table's named counters, in
// namespace ns.
func Counters(ns, family, table string) (map[string]uint64, error) {
	var out []byte
	err := netns.Run(ns, func() error {
		var err error
		out, err = exec.Command("nft", "-j", "list", "counters", "table", family, table).Output()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("nft list counters of table %s %s: %w", family, table, err)
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("nft's counters: %w", err)
	}
	m := map[string]uint64{}
	for _, e := range doc.Nftables {
		if e.Counter != nil {
			m[e.Counter.Name] = e.Counter.Packets
		}
	}
	return m, nil
}

// sink is the namespace that takes what the reference forwards.
func (r *Ref) sink() string { return r.ns + "-s" }

// Close removes the namespaces and all in them.
func (r *Ref) Close() error {
	if r.fd >= 0 {
		unix.Close(r.fd)
	}
	return errors.Join(netns.Delete(r.ns), netns.Delete(r.sink()))
}

// Sysctl sets a key of the namespace's /proc/sys (net/netfilter/..., to
// shorten a conntrack timeout for a test).
func (r *Ref) Sysctl(key, val string) error {
	return netns.Run(r.ns, func() error { return netns.Sysctl(key, val) })
}
