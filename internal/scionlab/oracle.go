package scionlab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/netns"
)

// OracleReplay is what scionproto's router made of the frames fastpath's
// router in front of it forwarded in XDP during a check: each frame as it
// arrived, sent to a reference router of the same AS and router ID (the
// same topology.json and keys, BFD off) in a namespace of its own, and what
// it sent compared with what fastpath sent.
type OracleReplay struct {
	Router string // fastpath's pin name
	RefID  string // the reference router's ID
	Frames int    // forwarded in XDP and replayed
	Same   int    // the reference sent the same SCION bytes to the same address
	// Differ: it sent other bytes, or to another address; Dropped: it sent
	// nothing within a second.
	Differ, Dropped int
	// Long are frames longer than the tap keeps (br.CaptureMax).
	Long int
	// Examples describe the first frames that differ or were dropped.
	Examples []string
}

// OK says the reference agreed on every frame.
func (r OracleReplay) OK() bool { return r.Differ == 0 && r.Dropped == 0 }

func (r OracleReplay) String() string {
	s := fmt.Sprintf("%-28s %4d forwarded in XDP, replayed through %s: %d the same, %d differ, %d dropped", r.Router, r.Frames, r.RefID, r.Same, r.Differ, r.Dropped)
	if r.Long > 0 {
		s += fmt.Sprintf(" (%d longer than the tap keeps, not replayed)", r.Long)
	}
	for _, e := range r.Examples {
		s += "\n      " + e
	}
	return s
}

// udpFrame is an Ethernet frame's UDP datagram: its ends and payload.
type udpFrame struct {
	src, dst netip.AddrPort
	payload  []byte
}

// parseUDPFrame reads an Ethernet frame carrying UDP over IPv4 (any
// options) or IPv6 (no extension headers).
func parseUDPFrame(f []byte) (udpFrame, error) {
	if len(f) < 14 {
		return udpFrame{}, errors.New("shorter than an Ethernet header")
	}
	var src, dst netip.Addr
	var l4 []byte
	switch binary.BigEndian.Uint16(f[12:14]) {
	case 0x0800:
		ip := f[14:]
		if len(ip) < 20 || ip[9] != 17 {
			return udpFrame{}, errors.New("IPv4, not UDP")
		}
		ihl := int(ip[0]&0x0f) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:4]))
		if ihl < 20 || tot < ihl+8 || tot > len(ip) {
			return udpFrame{}, errors.New("IPv4 lengths wrong")
		}
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		l4 = ip[ihl:tot]
	case 0x86dd:
		ip := f[14:]
		if len(ip) < 48 || ip[6] != 17 {
			return udpFrame{}, errors.New("IPv6, not UDP")
		}
		pl := int(binary.BigEndian.Uint16(ip[4:6]))
		if pl < 8 || 40+pl > len(ip) {
			return udpFrame{}, errors.New("IPv6 payload length wrong")
		}
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		l4 = ip[40 : 40+pl]
	default:
		return udpFrame{}, errors.New("neither IPv4 nor IPv6")
	}
	ul := int(binary.BigEndian.Uint16(l4[4:6]))
	if ul < 8 || ul > len(l4) {
		return udpFrame{}, errors.New("UDP length wrong")
	}
	return udpFrame{
		src:     netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4[0:2])),
		dst:     netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:4])),
		payload: l4[8:ul],
	}, nil
}

// oracleNetns is the namespace replays run in, one at a time.
func (n Network) oracleNetns() string { return n.Prefix + "oracle" }

// replay sends what router k of AS a forwarded in XDP through scionproto's
// router of the same ID, and compares.
func (n Network) replay(a AS, k int, links []Link, frames []br.TapFrame, long int) (OracleReplay, error) {
	r := a.Routers[k]
	res := OracleReplay{Router: routerHybridName(r), RefID: r.ID, Long: long}
	type pair struct{ in, out udpFrame }
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
		in, err1 := parseUDPFrame(f.In)
		out, err2 := parseUDPFrame(f.Out)
		if err := errors.Join(err1, err2); err != nil {
			return res, fmt.Errorf("%s: a frame it forwarded: %w", res.Router, err)
		}
		pairs = append(pairs, pair{in, out})
		addrs[in.src.Addr()], addrs[in.dst.Addr()], addrs[out.dst.Addr()] = true, true, true
	}
	res.Frames = len(pairs)
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
	ref, err := br.StartReferenceRouter(ns, r.ID, dir, r.RouterInternal().String())
	if err != nil {
		return res, err
	}
	defer ref.Stop()

	type arrival struct {
		at      netip.AddrPort
		payload []byte
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
		ends = append(ends, p.in.src, p.out.dst)
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
					k, _, err := c.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					arrived <- arrival{e, append([]byte(nil), buf[:k]...)}
				}
			}(e, c)
		}
		return nil
	}); err != nil {
		return res, err
	}
	note := func(s string) {
		if len(res.Examples) < 3 {
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
		select {
		case got := <-arrived:
			switch {
			case got.at == p.out.dst && bytes.Equal(got.payload, p.out.payload):
				res.Same++
			default:
				res.Differ++
				note(fmt.Sprintf("frame %d (%s → %s): fastpath sent %d B to %s, the reference %d B to %s%s", i, p.in.src, p.in.dst,
					len(p.out.payload), p.out.dst, len(got.payload), got.at, firstDiff(p.out.payload, got.payload)))
			}
		case <-time.After(time.Second):
			res.Dropped++
			note(fmt.Sprintf("frame %d (%s → %s): fastpath sent %d B to %s, the reference nothing", i, p.in.src, p.in.dst, len(p.out.payload), p.out.dst))
		}
		if ref.Exited() {
			return res, fmt.Errorf("scionproto's router %s exited on frame %d:\n%s", r.ID, i, ref.Logs.String())
		}
	}
	return res, nil
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

// replayAll closes the taps and replays what each router forwarded.
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
			// What it dropped is not replayed yet.
			frames = slices.DeleteFunc(frames, br.TapFrame.Dropped)
			res, err := n.replay(a, k, links, frames, missed.Long)
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
