package scionlab

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/capture"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// OracleReplay is what scionproto's router made of the frames fastpath's
// router in front of it forwarded or dropped in XDP during a check: each
// frame as it arrived, sent to a reference router of the same AS and router
// ID (the same topology.json and keys, BFD off) in a namespace of its own,
// and what it sent compared with what fastpath sent.
type OracleReplay struct {
	Router  string // fastpath's pin name
	RefID   string // the reference router's ID
	Frames  int    // forwarded in XDP and replayed
	Largest int    // the longest of them as it arrived, in bytes
	// Same: the reference sent the same SCION bytes to the same address,
	// and fastpath's underlay was right and as the reference's.
	Same int
	// Differ: it sent other bytes, to another address, or fastpath's
	// frame had a wrong UDP checksum, IP header, source, TTL, DF or TOS
	// (Faults counts each kind); Dropped: it sent nothing within a second.
	Differ, Dropped int
	// Drops are the frames fastpath dropped in XDP. DropsAgreed: the
	// reference sent nothing either, or a receiving kernel would have
	// dropped the frame before any socket (KernelDrops of them: not
	// replayed); DropsSent: it sent something — fastpath dropped what the
	// reference forwards.
	Drops, DropsAgreed, KernelDrops, DropsSent int
	// Faults counts the differences by kind (faultUDPChecksum, …).
	Faults map[string]int
	// Unseen are frames of the reference whose underlay the capture on
	// the replay's lo missed: only their source was compared.
	Unseen int
	// Long are frames longer than the tap keeps (br.CaptureMax), Lost the
	// records its ring had no room for: neither is replayed.
	Long int
	Lost uint64
	// Examples describe the first frames that differ.
	Examples []string
}

// OK says the reference agreed on every frame.
func (r OracleReplay) OK() bool { return r.Differ == 0 && r.Dropped == 0 && r.DropsSent == 0 }

func (r OracleReplay) String() string {
	s := fmt.Sprintf("%-28s %4d forwarded in XDP (up to %d B), replayed through %s: %d the same, %d differ, %d dropped", r.Router, r.Frames, r.Largest, r.RefID, r.Same, r.Differ, r.Dropped)
	s += fmt.Sprintf("; %d dropped in XDP by fastpath", r.Drops)
	if r.Drops > 0 {
		s += fmt.Sprintf(": %d by the reference too (%d by a kernel before any socket), %d sent by it", r.DropsAgreed, r.KernelDrops, r.DropsSent)
	}
	if len(r.Faults) > 0 {
		var k []string
		for _, f := range slices.Sorted(maps.Keys(r.Faults)) {
			k = append(k, fmt.Sprintf("%s %d", f, r.Faults[f]))
		}
		s += " (differences: " + strings.Join(k, ", ") + ")"
	}
	if r.Long > 0 {
		s += fmt.Sprintf(" (%d longer than the tap keeps, not replayed)", r.Long)
	}
	if r.Lost > 0 {
		s += fmt.Sprintf(" (%d lost by the tap: its ring was full)", r.Lost)
	}
	if r.Unseen > 0 {
		s += fmt.Sprintf(" (%d of the reference's frames not captured: their TTL, DF and TOS not compared)", r.Unseen)
	}
	for _, e := range r.Examples {
		s += "\n      " + e
	}
	return s
}

// oracleNetns is the namespace replays run in, one at a time.
func (n Network) oracleNetns() string { return n.Prefix + "oracle" }

// replay sends what router k of AS a forwarded or dropped in XDP through
// scionproto's router of the same ID, and compares.
func (n Network) replay(a AS, k int, links []Link, frames []br.TapFrame, missed br.TapMissed) (OracleReplay, error) {
	r := a.Routers[k]
	res := OracleReplay{Router: routerHybridName(r), RefID: r.ID, Long: missed.Long, Lost: missed.Lost, Faults: map[string]int{}}
	type pair struct {
		in, out udpFrame
		rawOut  []byte
		generic bool // by the copy in generic mode: a pending checksum is its device's to complete
		dropped bool
		verdict string
	}
	var pairs []pair
	// Every address the reference binds or connects to (its interfaces'
	// sockets are connected to the neighbours'), and those of the siblings.
	addrs := map[netip.Addr]bool{}
	for _, s := range a.Routers {
		addrs[s.Internal] = true
	}
	for _, l := range links {
		if (l.Parent == a.Index && l.ParentRouter == k) || (l.Child == a.Index && l.ChildRouter == k) {
			addrs[l.ParentAddr.Addr()], addrs[l.ChildAddr.Addr()] = true, true
		}
	}
	for _, f := range frames {
		in, err := parseUDPFrame(f.In)
		if f.Dropped() {
			res.Drops++
			// The reference's kernel would not hand it to a socket: both
			// drop it, and there is nothing to replay through a socket.
			if err != nil || !in.kernelTakes() {
				res.DropsAgreed++
				res.KernelDrops++
				continue
			}
			pairs = append(pairs, pair{in: in, dropped: true, verdict: f.Verdict})
			addrs[in.src.Addr()], addrs[in.dst.Addr()] = true, true
			continue
		}
		out, err2 := parseUDPFrame(f.Out)
		if err := errors.Join(err, err2); err != nil {
			return res, fmt.Errorf("%s: a frame it forwarded: %w", res.Router, err)
		}
		pairs = append(pairs, pair{in: in, out: out, rawOut: f.Out, verdict: f.Verdict, generic: f.Generic})
		res.Largest = max(res.Largest, len(f.In))
		addrs[in.src.Addr()], addrs[in.dst.Addr()], addrs[out.dst.Addr()] = true, true, true
		res.Frames++
	}
	if len(pairs) == 0 {
		return res, nil
	}
	ns := n.oracleNetns()
	netns.Delete(ns)
	if err := netns.Create(ns); err != nil {
		return res, err
	}
	defer netns.Delete(ns)
	if err := netns.Run(ns, func() error { return ipv6Settings(true) }); err != nil {
		return res, err
	}
	if err := linkUp(ns, "lo"); err != nil {
		return res, err
	}
	for ad := range addrs {
		args := []string{"-n", ns, "addr", "add", netip.PrefixFrom(ad, ad.BitLen()).String(), "dev", "lo"}
		if ad.Is6() {
			args = append(args, "nodad")
		}
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return res, fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
	}
	// The AS's topology.json and keys, in a directory of the replay's own.
	dir, err := os.MkdirTemp("", "fastpath-oracle-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o700); err != nil {
		return res, err
	}
	for _, f := range []string{"topology.json", "keys/master0.key", "keys/master1.key"} {
		b, err := os.ReadFile(filepath.Join(a.Dir, f))
		if err != nil {
			return res, err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			return res, err
		}
	}
	ref, err := br.StartReferenceRouter(n.Version(), ns, r.ID, dir, r.RouterInternal().String())
	if err != nil {
		return res, err
	}
	defer ref.Stop()
	// Every frame the reference sends, with the underlay its kernel gave
	// it: the sockets below get only the datagrams.
	wire, err := capture.Open(xdp.Iface{Netns: ns, Name: "lo"})
	if err != nil {
		return res, err
	}
	defer wire.Close()

	type arrival struct {
		at, from netip.AddrPort
		payload  []byte
	}
	arrived := make(chan arrival, 256)
	socks := map[netip.AddrPort]*net.UDPConn{}
	defer func() {
		for _, s := range socks {
			s.Close()
		}
	}()
	var ends []netip.AddrPort
	for _, p := range pairs {
		ends = append(ends, p.in.src)
		if !p.dropped {
			ends = append(ends, p.out.dst)
		}
	}
	if err := netns.Run(ns, func() error {
		for _, e := range ends {
			if socks[e] != nil {
				continue
			}
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(e))
			if err != nil {
				return fmt.Errorf("a socket at %s: %w", e, err)
			}
			socks[e] = c
			go func(e netip.AddrPort, c *net.UDPConn) {
				buf := make([]byte, 9100)
				for {
					k, from, err := c.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					arrived <- arrival{e, from, append([]byte(nil), buf[:k]...)}
				}
			}(e, c)
		}
		return nil
	}); err != nil {
		return res, err
	}
	note := func(s string) {
		if len(res.Examples) < 5 {
			res.Examples = append(res.Examples, s)
		}
	}
	for i, p := range pairs {
		// What is left of the previous frame is not this one's.
		for drained := false; !drained; {
			select {
			case <-arrived:
			default:
				drained = true
			}
		}
		if _, err := socks[p.in.src].WriteToUDPAddrPort(p.in.payload, p.in.dst); err != nil {
			return res, fmt.Errorf("replay frame %d from %s to %s: %w", i, p.in.src, p.in.dst, err)
		}
		var got *arrival
		select {
		case g := <-arrived:
			got = &g
		case <-time.After(time.Second):
		}
		if ref.Exited() {
			return res, fmt.Errorf("scionproto's router %s exited on frame %d:\n%s", r.ID, i, ref.Logs.String())
		}
		if p.dropped {
			if got == nil {
				res.DropsAgreed++
				continue
			}
			res.DropsSent++
			note(fmt.Sprintf("frame %d (%s → %s, %d B): fastpath dropped it (%s), the reference sent %d B to %s", i, p.in.src, p.in.dst, len(p.in.payload), p.verdict, len(got.payload), got.at))
			continue
		}
		if got == nil {
			res.Dropped++
			note(fmt.Sprintf("frame %d (%s → %s): fastpath sent %d B to %s, the reference nothing", i, p.in.src, p.in.dst, len(p.out.payload), p.out.dst))
			continue
		}
		var diffs []difference
		if got.at != p.out.dst {
			diffs = append(diffs, difference{faultDestination, fmt.Sprintf("fastpath sent to %s, the reference to %s", p.out.dst, got.at)})
		}
		if !bytes.Equal(got.payload, p.out.payload) {
			diffs = append(diffs, difference{faultSCION, fmt.Sprintf("fastpath sent %d B of SCION, the reference %d B%s", len(p.out.payload), len(got.payload), firstDiff(p.out.payload, got.payload))})
		}
		refFrame, ok := referenceFrame(wire, got.from, got.at, got.payload)
		if !ok {
			// Only the datagram: its source is what the socket says.
			res.Unseen++
			refFrame = p.out
			refFrame.src = got.from
		}
		diffs = append(diffs, outDifferences(p.rawOut, p.out, refFrame, p.generic)...)
		if len(diffs) == 0 {
			res.Same++
			continue
		}
		res.Differ++
		var texts []string
		for _, d := range diffs {
			res.Faults[d.kind]++
			texts = append(texts, d.text)
		}
		note(fmt.Sprintf("frame %d (%s → %s): %s", i, p.in.src, p.in.dst, strings.Join(texts, "; ")))
	}
	return res, nil
}

// referenceFrame finds, among the frames sent on the oracle's lo, the one
// that carried the reference's datagram, waiting a moment for the capture
// to read it.
func referenceFrame(wire *capture.Tap, from, to netip.AddrPort, payload []byte) (udpFrame, bool) {
	for deadline := time.Now().Add(500 * time.Millisecond); ; time.Sleep(5 * time.Millisecond) {
		frames := wire.Frames()
		for _, f := range slices.Backward(frames) {
			if !f.Outgoing {
				continue
			}
			u, err := parseUDPFrame(f.Data)
			if err == nil && u.src == from && u.dst == to && bytes.Equal(u.payload, payload) {
				return u, true
			}
		}
		if time.Now().After(deadline) {
			return udpFrame{}, false
		}
	}
}

// firstDiff names the first byte where a and b differ ("" if one is a
// prefix of the other: the lengths, printed beside it, tell).
func firstDiff(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf(", first different byte at %d (%#02x against %#02x)", i, a[i], b[i])
		}
	}
	return ""
}

// openTaps starts a tap on every fastpath router of the network.
func openTaps(as []AS) (map[string]*br.Tap, error) {
	taps := map[string]*br.Tap{}
	for _, a := range as {
		for _, r := range a.Routers {
			t, err := br.OpenTap(routerHybridName(r))
			if err != nil {
				for _, t := range taps {
					t.Close()
				}
				return nil, err
			}
			taps[routerHybridName(r)] = t
		}
	}
	return taps, nil
}

// replayAll closes the taps and replays what each router forwarded or
// dropped.
func (n Network) replayAll(as []AS, links []Link, taps map[string]*br.Tap) ([]OracleReplay, error) {
	var out []OracleReplay
	var errs []error
	for _, a := range as {
		for k, r := range a.Routers {
			t := taps[routerHybridName(r)]
			if t == nil {
				continue
			}
			frames, missed := t.Frames()
			errs = append(errs, t.Close())
			res, err := n.replay(a, k, links, frames, missed)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, res)
		}
	}
	slices.SortFunc(out, func(x, y OracleReplay) int { return y.Frames - x.Frames })
	return out, errors.Join(errs...)
}

// writeOracleSummary says in a line what the replays found.
func writeOracleSummary(w io.Writer, replays []OracleReplay) {
	var frames, same, differ, dropped, routers, drops, dropsSent int
	for _, r := range replays {
		frames, same, differ, dropped = frames+r.Frames, same+r.Same, differ+r.Differ, dropped+r.Dropped
		drops, dropsSent = drops+r.Drops, dropsSent+r.DropsSent
		if r.Frames+r.Drops > 0 {
			routers++
		}
	}
	fmt.Fprintf(w, "  oracle: %d frames forwarded in XDP at %d routers, replayed through scionproto's router: %d the same, %d differ, %d dropped; %d dropped in XDP by fastpath, %d of them sent by the reference\n",
		frames, routers, same, differ, dropped, drops, dropsSent)
}
