package tralab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
)

// The ip-xdp row: plain IPv6 between the same two end hosts as the
// translator's, on the SCION network's own devices (host eth0 ↔ AS int0,
// leaf ↔ core links), forwarded in XDP at every AS by the border router
// already attached there (br's forward_ip: what is not SCION goes on to a
// FIB-lookup forwarder). The hosts' offloads are as the kernel leaves them
// beside an XDP program: TSO off on their eth0, whose peer runs the router,
// as it is for the translator. GRO is on on the hosts' eth0, so that their
// AS's router may redirect frames into it (a veth whose peer has neither
// XDP nor GRO drops them); the translator's own XDP program does that for
// the tra row. And the hosts compute their transmit checksums: a veth
// leaves them pending for the "device", a redirected XDP frame cannot
// complete them, and the far host drops the datagram; on a wire every
// checksum arrives complete (the translator completes them in its TC
// program). This is the fair comparison for the translator;
// the ip row (TSO on, 64 KB super-packets end to end) stays the ceiling.

// IPXDPAddr is an AS's end host's address in the ip-xdp row.
func IPXDPAddr(a scionlab.AS) netip.Addr { return ipXDP.addr(a.Index, 2) }

func init() {
	Register(Row{Name: "ip-xdp", Description: "plain IPv6 on the SCION network's own devices, forwarded in XDP at each AS by its border router (forward_ip), the hosts' offloads as beside the translator", Setup: setupIPXDP})
}

// undoList runs what a setup did backwards.
type undoList []func() error

func (u *undoList) add(f func() error) { *u = append(*u, f) }

func (u undoList) run() error {
	var errs []error
	for i := len(u) - 1; i >= 0; i-- {
		errs = append(errs, u[i]())
	}
	return errors.Join(errs...)
}

func setupIPXDP(ctx context.Context, env Env) (p Path, err error) {
	core := env.ASes[0]
	_, links, err := env.Net.ASes()
	if err != nil {
		return p, err
	}
	var undo undoList
	defer func() {
		if err != nil {
			err = errors.Join(err, undo.run())
		}
	}()
	// Each leaf's first link to the core: its SCION interface 1.
	linkOf := func(leaf scionlab.AS) (scionlab.Link, error) {
		for _, l := range links {
			if l.Child == leaf.Index && l.ChildIf == 1 {
				return l, nil
			}
		}
		return scionlab.Link{}, fmt.Errorf("no link from %s to the core in the network's plan", leaf.IA)
	}
	// Forwarding for the kernel too: the first packets to a neighbour not
	// yet resolved, and whatever else the XDP forwarder passes up, are the
	// kernel's to forward.
	for _, a := range []scionlab.AS{core, env.Client, env.Server} {
		u, err := setSysctl(a.Netns, "net/ipv6/conf/all/forwarding", "1")
		if err != nil {
			return p, err
		}
		undo.add(u)
	}
	for _, leaf := range []scionlab.AS{env.Client, env.Server} {
		l, err := linkOf(leaf)
		if err != nil {
			return p, err
		}
		host := ipEnd{leaf.HostNetns, scionlab.HostDev, ipXDP.addr(leaf.Index, 2)}
		as := ipEnd{leaf.Netns, scionlab.InternalDev, ipXDP.addr(leaf.Index, 1)}
		up := ipEnd{leaf.Netns, l.ChildDev, ipXDP.link(leaf.Index, 2)}
		down := ipEnd{core.Netns, l.ParentDev, ipXDP.link(leaf.Index, 1)}
		for _, e := range []ipEnd{host, as, up, down} {
			u, err := ipv6On(e)
			if err != nil {
				return p, err
			}
			undo.add(u)
		}
		if err := ipXDP.routeLeaf(leaf.Index, host, as, up, down); err != nil {
			return p, err
		}
		// GRO on, and the transmit checksum computed by the host: a veth
		// hands its peer a datagram whose checksum is still pending (the
		// pseudo-header's sum, CHECKSUM_PARTIAL), which stays pending in an
		// XDP frame redirected on and is dropped by the receiving host
		// (Udp6InCsumErrors). A wire delivers complete checksums.
		for _, f := range []struct {
			name string
			on   bool
		}{{"rx-gro", true}, {"tx-checksum-ip-generic", false}} {
			u, err := setFeature(host, f.name, f.on)
			if err != nil {
				return p, err
			}
			undo.add(u)
		}
	}
	for _, a := range []scionlab.AS{core, env.Client, env.Server} {
		if err := env.Net.SetForwardIP(a, true); err != nil {
			return p, err
		}
		undo.add(func() error { return env.Net.SetForwardIP(a, false) })
	}
	ases := []scionlab.AS{env.Client, core, env.Server}
	start, err := awaitXDPForwarding(ctx, env, ases)
	if err != nil {
		return p, err
	}
	fmt.Fprintf(env.Log, "  ip-xdp    every AS forwards the hosts' IPv6 in XDP\n")
	return Path{
		ClientNetns: env.Client.HostNetns, ServerNetns: env.Server.HostNetns, Addr: IPXDPAddr(env.Server),
		Teardown: func() error {
			// The proof first, while the routers still count.
			proof := provedInXDP(env, ases, start)
			return errors.Join(proof, undo.run())
		},
		Note: "on the SCION network's own veths, forwarded in XDP at every AS by its border router (forward_ip); hosts' TSO off (their eth0's peer runs XDP), transmit checksums by the host (a veth leaves them pending, an XDP redirect cannot finish them), GRO on",
	}, nil
}

// ipCounts are each AS's router's plain-IP counts by verdict.
type ipCounts map[string]map[string]uint64

func readIPCounts(ases []scionlab.AS) (ipCounts, error) {
	out := ipCounts{}
	for _, a := range ases {
		pin, err := br.OpenPinned(scionlab.HybridName(a))
		if err != nil {
			return nil, err
		}
		s, err := pin.IPTotals()
		pin.Close()
		if err != nil {
			return nil, err
		}
		out[a.IA.String()] = map[string]uint64{}
		for v, c := range s {
			out[a.IA.String()][v] = c.Packets
		}
	}
	return out, nil
}

// ipPassedUp are the plain-IP verdicts of a packet the forwarder could
// have forwarded but handed to the kernel: what must stay rare in the row.
var ipPassedUp = []string{"no_route", "not_ready", "too_big", "fwd_disabled"}

// awaitXDPForwarding pings the server's host from the client's until
// every AS's router forwards both ways in XDP (a device's readiness, a
// neighbour's resolution take a moment) and returns the counts then.
func awaitXDPForwarding(ctx context.Context, env Env, ases []scionlab.AS) (ipCounts, error) {
	const n = 5
	var last string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		before, err := readIPCounts(ases)
		if err != nil {
			return nil, err
		}
		out, perr := pingBurst(ctx, env.Client.HostNetns, IPXDPAddr(env.Server), n)
		after, err := readIPCounts(ases)
		if err != nil {
			return nil, err
		}
		ok := perr == nil
		var b strings.Builder
		for _, a := range ases {
			ia := a.IA.String()
			fwd := after[ia]["forwarded"] - before[ia]["forwarded"]
			fmt.Fprintf(&b, " %s forwarded %d of %d;", ia, fwd, 2*n)
			if fwd < 2*n {
				ok = false
			}
		}
		if ok {
			return after, nil
		}
		last = fmt.Sprintf("%s ping: %v %s", b.String(), perr, out)
		time.Sleep(200 * time.Millisecond)
	}
	return nil, fmt.Errorf("ip-xdp: the routers do not forward the hosts' IPv6 in XDP after 15 s:%s", last)
}

// provedInXDP says, from each AS's router's counters since start, whether
// the row's packets were forwarded in XDP at every AS; it logs the counts.
func provedInXDP(env Env, ases []scionlab.AS, start ipCounts) error {
	end, err := readIPCounts(ases)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range ases {
		ia := a.IA.String()
		fwd := end[ia]["forwarded"] - start[ia]["forwarded"]
		var up uint64
		var ups []string
		for _, v := range ipPassedUp {
			if d := end[ia][v] - start[ia][v]; d > 0 {
				up += d
				ups = append(ups, fmt.Sprintf("%s %d", v, d))
			}
		}
		fmt.Fprintf(env.Log, "  ip-xdp    %s: %d packets forwarded in XDP, %d passed up %v\n", ia, fwd, up, ups)
		// A handful passed up (a neighbour resolved again) is the kernel's
		// job done right; more than 1 in 1,000 is not this row.
		if fwd == 0 || up*1000 > fwd {
			errs = append(errs, fmt.Errorf("ip-xdp: %s forwarded %d packets in XDP and passed %d up (%s): not the row it claims to be", ia, fwd, up, strings.Join(ups, ", ")))
		}
	}
	return errors.Join(errs...)
}

// pingBurst sends n echoes quickly and says how it went.
func pingBurst(ctx context.Context, ns string, dst netip.Addr, n int) (string, error) {
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+netns.Path(ns), "ping", "-6", "-n", "-q", "-c", fmt.Sprint(n), "-i", "0.05", "-W", "1", dst.String()).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// setSysctl writes a sysctl in a namespace and returns how to put back
// what it held.
func setSysctl(ns, key, val string) (func() error, error) {
	path := filepath.Join("/proc/sys", key)
	var old []byte
	if err := netns.Run(ns, func() error {
		var err error
		if old, err = os.ReadFile(path); err != nil {
			return err
		}
		return netns.Sysctl(key, val)
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", ns, err)
	}
	prev := strings.TrimSpace(string(old))
	return func() error {
		return netns.Run(ns, func() error { return netns.Sysctl(key, prev) })
	}, nil
}

// ipv6On turns IPv6 on on a device of the network (made with it off),
// without duplicate address detection or router advertisements, with
// forwarding as the namespace's all.forwarding says, and gives it the
// address. Undoing turns IPv6 off again, which takes the device's
// addresses, routes and neighbours with it, and puts the switches back.
func ipv6On(e ipEnd) (func() error, error) {
	var undo undoList
	for _, k := range []string{"accept_dad=0", "accept_ra=0", "router_solicitations=0", "disable_ipv6=0"} {
		key, val, _ := strings.Cut(k, "=")
		u, err := setSysctl(e.ns, fmt.Sprintf("net/ipv6/conf/%s/%s", e.dev, key), val)
		if err != nil {
			return nil, errors.Join(err, undo.run())
		}
		undo.add(u)
	}
	h, err := netns.Handle(e.ns)
	if err != nil {
		return nil, errors.Join(err, undo.run())
	}
	defer h.Close()
	l, err := h.LinkByName(e.dev)
	if err == nil {
		err = h.AddrReplace(l, &netlink.Addr{IPNet: &net.IPNet{IP: e.addr.AsSlice(), Mask: net.CIDRMask(64, 128)}, Flags: syscall.IFA_F_NODAD})
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s/%s: %w", e.ns, e.dev, err), undo.run())
	}
	return undo.run, nil
}

// setFeature turns an offload (ethtool -k's name) on or off on a device
// and returns how to put it back.
func setFeature(e ipEnd, name string, on bool) (func() error, error) {
	set := func(v bool) error {
		return netns.Run(e.ns, func() error {
			et, err := ethtool.NewEthtool()
			if err != nil {
				return err
			}
			defer et.Close()
			return et.Change(e.dev, map[string]bool{name: v})
		})
	}
	var was bool
	if err := netns.Run(e.ns, func() error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer et.Close()
		f, err := et.Features(e.dev)
		was = f[name]
		return err
	}); err != nil {
		return nil, fmt.Errorf("offloads of %s/%s: %w", e.ns, e.dev, err)
	}
	if err := set(on); err != nil {
		return nil, fmt.Errorf("%s %v on %s/%s: %w", name, on, e.ns, e.dev, err)
	}
	return func() error { return set(was) }, nil
}
