package scionlab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// scionproto's SCION-IP gateway (SIG) on the end hosts of two ASes: each
// gateway, of the network's release, runs in its AS's end-host namespace,
// owns a TUN device there and carries the IPv4 and IPv6 prefix of its host
// (SIGPrefixes) to the other, over SCION and through the ASes' routers.
// What it takes to run it (../shared/MEASURED.md, found on v0.12.0; the
// gateway's configuration keys are the same in every supported release,
// v0.14.0 adds an optional [rpc] section this file leaves out): a "sigs"
// entry in each AS's topology.json, which the remote gateway learns from
// that AS's control service (it reloads the file on SIGHUP); an explicit
// IP on every listen address; an IP routing policy whose advertise and
// accept lines make it install the remote prefixes; and, with v0.12.0's
// routers only, ports inside dispatched_ports.

// Ports of the gateway, inside DispatchedPorts: a v0.12.0 router hands a
// host a packet for a port outside them (the defaults 30256, 30056 and
// 30856) at 30041 instead, where the gateway does not listen. From v0.14.0
// routers deliver to the packet's own port whatever the range; the ports
// stay the same so that one configuration serves every release.
const (
	SIGCtrlPort  = 31256
	SIGDataPort  = 31056
	SIGProbePort = 31856
	// SIGDev is the gateway's TUN device in the end host's namespace.
	SIGDev = "sig"
)

// sigProcName names an AS's gateway in the record.
func sigProcName(a AS) string { return fmt.Sprintf("gateway-%d", FirstASN+a.Index) }

// SIGID is the AS's gateway in its topology.json.
func (a AS) SIGID() string { return fmt.Sprintf("sig%s-1", a.fileIA()) }

// SIGPrefixes are the IPv4 and IPv6 prefixes the AS's gateway advertises:
// 10.(200+i).0.0/24 and fd00:5c:i::/64 for AS index i, clear of the
// network's own addresses. The end host holds the first address of each
// (SIGAddrs) on lo.
func (a AS) SIGPrefixes() (v4, v6 netip.Prefix) {
	v4 = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + a.Index), 0, 0}), 24)
	v6 = netip.MustParsePrefix(fmt.Sprintf("fd00:5c:%x::/64", a.Index))
	return v4, v6
}

// SIGAddrs are the end host's addresses behind its gateway.
func (a AS) SIGAddrs() (v4, v6 netip.Addr) {
	p4, p6 := a.SIGPrefixes()
	return p4.Addr().Next(), p6.Addr().Next()
}

func (a AS) sigAddr(port int) string {
	return netip.AddrPortFrom(a.Host, uint16(port)).String()
}

// StartSIG starts a gateway on the end host of each of the two ASes, each
// advertising its host's prefixes to the other, and waits until IPv4 and
// IPv6 cross between the hosts both ways (about 9 s on this machine: the
// gateways retry discovery after the first path). The gateways are
// recorded with the network's processes, so status shows them and down
// stops them; StopSIG undoes all of it.
func (n Network) StartSIG(ctx context.Context, a, b AS, timeout time.Duration, log io.Writer) (err error) {
	if log == nil {
		log = io.Discard
	}
	if a.Index == b.Index {
		return fmt.Errorf("the SIG needs two different ASes, got %s twice", a.IA)
	}
	st, err := n.running()
	if err != nil {
		return err
	}
	var running []string
	for _, p := range st.Procs {
		if strings.HasPrefix(p.Name, "gateway-") && p.Alive() {
			running = append(running, p.Name)
		}
	}
	if len(running) > 0 {
		slices.Sort(running)
		want := []string{sigProcName(a), sigProcName(b)}
		slices.Sort(want)
		if slices.Equal(running, want) {
			fmt.Fprintf(log, "the SIG runs already between %s and %s\n", a.IA, b.IA)
			return nil
		}
		return fmt.Errorf("a SIG runs already (%s): stop it first", strings.Join(running, ", "))
	}
	bin, err := scionproto.Binary(n.Version(), "gateway")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.StopSIG(io.Discard))
		}
	}()
	pair := [2][2]AS{{a, b}, {b, a}}
	for _, p := range pair {
		if err := n.writeSIG(p[0], p[1]); err != nil {
			return fmt.Errorf("SIG of %s: %w", p[0].IA, err)
		}
		if err := setSIGTopology(p[0], true); err != nil {
			return err
		}
		if err := n.reloadControl(st, p[0]); err != nil {
			return err
		}
		if err := sigHost(p[0], true); err != nil {
			return err
		}
	}
	for _, p := range pair {
		proc, err := n.start(sigProcName(p[0]), p[0].IA.String(), p[0].HostNetns, bin, "--config", filepath.Join(p[0].Dir, "sig.toml"))
		if err != nil {
			return err
		}
		st.Procs = append(st.Procs, proc)
		if err := n.writeState(st); err != nil {
			return err
		}
	}
	fmt.Fprintf(log, "SIG started on the end hosts of %s and %s; waiting for IPv4 and IPv6 to cross\n", a.IA, b.IA)
	start := time.Now()
	if err := n.waitSIG(ctx, st, a, b, timeout); err != nil {
		return err
	}
	fmt.Fprintf(log, "SIG carries IPv4 and IPv6 after %.1f s\n", time.Since(start).Seconds())
	return nil
}

// StopSIG stops the gateways, takes their entries out of the topologies
// (and has the control services reload them), and removes the hosts'
// addresses behind them. Without a SIG it does nothing.
func (n Network) StopSIG(log io.Writer) error {
	st, err := n.readState()
	if err != nil || st == nil {
		return err
	}
	as, _, err := n.Plan(st.ASes)
	if err != nil {
		return err
	}
	var errs []error
	var stopped []AS
	st.Procs = slices.DeleteFunc(st.Procs, func(p Proc) bool {
		if !strings.HasPrefix(p.Name, "gateway-") {
			return false
		}
		p.stop()
		for _, a := range as {
			if p.Name == sigProcName(a) {
				stopped = append(stopped, a)
			}
		}
		return true
	})
	errs = append(errs, n.writeState(st))
	// Also the ASes a failed start configured before a gateway ran.
	for _, a := range as {
		if has, _ := hasSIGTopology(a); has && !slices.ContainsFunc(stopped, func(s AS) bool { return s.Index == a.Index }) {
			stopped = append(stopped, a)
		}
	}
	for _, a := range stopped {
		errs = append(errs, setSIGTopology(a, false), n.reloadControl(st, a), sigHost(a, false))
		if log != nil {
			fmt.Fprintf(log, "SIG of %s stopped\n", a.IA)
		}
	}
	return errors.Join(errs...)
}

// writeSIG writes the gateway's configuration, its traffic policy (a
// session to the remote AS) and its IP routing policy (advertise the local
// prefixes to the remote AS, accept the remote's) into the AS's directory.
func (n Network) writeSIG(local, remote AS) error {
	l4, l6 := local.SIGPrefixes()
	r4, r6 := remote.SIGPrefixes()
	s4, s6 := local.SIGAddrs()
	toml := fmt.Sprintf(`# scionproto's SCION-IP gateway on the end host of %[1]s.
[gateway]
id = %[2]q
traffic_policy_file = %[3]q
ip_routing_policy_file = %[4]q
ctrl_addr = %[5]q
data_addr = %[6]q
probe_addr = %[7]q

[tunnel]
name = %[8]q
src_ipv4 = %[9]q
src_ipv6 = %[10]q

[sciond_connection]
address = %[11]q

[log.console]
level = "info"
`, local.IA, local.SIGID(), filepath.Join(local.Dir, "sig.json"), filepath.Join(local.Dir, "sig.policy"),
		local.sigAddr(SIGCtrlPort), local.sigAddr(SIGDataPort), local.sigAddr(SIGProbePort),
		SIGDev, s4, s6, local.Daemon())
	policy := fmt.Sprintf("advertise %s %s %s,%s\naccept %s %s %s,%s\n",
		local.IA, remote.IA, l4, l6, remote.IA, local.IA, r4, r6)
	traffic, err := json.MarshalIndent(map[string]any{
		"ConfigVersion": 1,
		"ASes":          map[string]any{remote.IA.String(): map[string]any{"Nets": []string{}}},
	}, "", "  ")
	if err != nil {
		return err
	}
	for name, body := range map[string][]byte{"sig.toml": []byte(toml), "sig.policy": []byte(policy), "sig.json": traffic} {
		if err := os.WriteFile(filepath.Join(local.Dir, name), body, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// setSIGTopology adds the AS's gateway to its topology.json, or removes it.
func setSIGTopology(a AS, on bool) error {
	path := filepath.Join(a.Dir, "topology.json")
	topo, err := readTopology(path)
	if err != nil {
		return err
	}
	if on {
		topo["sigs"] = map[string]any{a.SIGID(): map[string]string{
			"ctrl_addr": a.sigAddr(SIGCtrlPort), "data_addr": a.sigAddr(SIGDataPort), "probe_addr": a.sigAddr(SIGProbePort),
		}}
	} else {
		delete(topo, "sigs")
	}
	b, err := json.MarshalIndent(topo, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func hasSIGTopology(a AS) (bool, error) {
	topo, err := readTopology(filepath.Join(a.Dir, "topology.json"))
	if err != nil {
		return false, err
	}
	_, ok := topo["sigs"]
	return ok, nil
}

func readTopology(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var topo map[string]any
	if err := json.Unmarshal(b, &topo); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return topo, nil
}

// reloadControl has the AS's control service read its topology.json again
// (SIGHUP), so that it answers gateway discovery with what it holds now.
func (n Network) reloadControl(st *State, a AS) error {
	name := fmt.Sprintf("control-%d", FirstASN+a.Index)
	for _, p := range st.Procs {
		if p.Name != name {
			continue
		}
		if !p.Alive() {
			return fmt.Errorf("%s is not running: see %s", name, p.Log)
		}
		proc, err := os.FindProcess(p.PID)
		if err == nil {
			err = proc.Signal(syscall.SIGHUP)
		}
		if err != nil {
			return fmt.Errorf("reload %s: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("the network runs no %s", name)
}

// sigHost gives the end host what the gateway needs (IPv6 on lo and on the
// TUN device the gateway makes, the namespaces being made with IPv6 off)
// and the addresses behind the gateway, on lo; or takes them away.
func sigHost(a AS, on bool) error {
	v4, v6 := a.SIGAddrs()
	ipv6 := "0"
	if !on {
		ipv6 = "1"
	}
	set := func() error {
		for _, k := range []string{"default", "lo"} {
			if err := netns.Sysctl("net/ipv6/conf/"+k+"/disable_ipv6", ipv6); err != nil {
				return err
			}
		}
		return nil
	}
	h, err := netns.Handle(a.HostNetns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	addrs := []*netlink.Addr{
		{IPNet: &net.IPNet{IP: v4.AsSlice(), Mask: net.CIDRMask(32, 32)}},
		{IPNet: &net.IPNet{IP: v6.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: syscall.IFA_F_NODAD},
	}
	if !on {
		for _, ad := range addrs {
			// Gone already with IPv6 switched off, or never added.
			h.AddrDel(lo, ad)
		}
		return netns.Run(a.HostNetns, set)
	}
	if err := netns.Run(a.HostNetns, set); err != nil {
		return err
	}
	for _, ad := range addrs {
		if err := h.AddrReplace(lo, ad); err != nil {
			return fmt.Errorf("address %s on lo of %s: %w", ad.IPNet, a.HostNetns, err)
		}
	}
	return nil
}

// waitSIG waits until both gateways run and a TCP connection attempt from
// each host to the other's IPv4 and IPv6 address behind the gateways is
// refused: the SYN crossed and the RST came back.
func (n Network) waitSIG(ctx context.Context, st *State, a, b AS, timeout time.Duration) error {
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type probe struct {
		from AS
		to   netip.Addr
	}
	a4, a6 := a.SIGAddrs()
	b4, b6 := b.SIGAddrs()
	pending := []probe{{a, b6}, {a, b4}, {b, a6}, {b, a4}}
	for len(pending) > 0 {
		for _, p := range st.Procs {
			if strings.HasPrefix(p.Name, "gateway-") && !p.Alive() {
				return fmt.Errorf("%s exited; its log: %s\n%s", p.Name, p.Log, tail(p.Log, 15))
			}
		}
		pending = slices.DeleteFunc(pending, func(p probe) bool { return SIGReaches(p.from, p.to) })
		if len(pending) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the SIG carried nothing from %s to %s after %s: see the gateways' logs in %s", pending[0].from.IA, pending[0].to, timeout, n.logDir())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// SIGReaches says whether a TCP connection attempt from the AS's end host
// to addr gets an answer (accepted or refused) within half a second.
func SIGReaches(from AS, to netip.Addr) bool {
	var ok bool
	netns.Run(from.HostNetns, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(to, 9).String(), 500*time.Millisecond)
		if err == nil {
			c.Close()
		}
		ok = err == nil || errors.Is(err, syscall.ECONNREFUSED)
		return nil
	})
	return ok
}
