package tra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/google/gopacket"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path/scion"
	"github.com/scionproto/scion/pkg/snet"
)

// How the daemon takes the SCMP errors the data plane hands it. An SCMP
// error is believed only if it quotes a packet this host sent on a path the
// daemon installed: anyone who can reach a router of the AS can send the
// host SCMP, and an unchecked "interface down" would let them steer every
// flow onto the one path they leave alone. An interface down must moreover
// come from where that interface is: one of this AS's from the router that
// has it (topology.json), handed over on the AS's network with a standard
// path — a machine of the AS that sends one with the empty path is no
// router. One of another AS cannot be told from a forgery of any AS on the
// path (SCION does not authenticate SCMP here): it is a reason to probe the
// paths through the interface at once, and the probes decide. No claim
// alone ever leaves a destination without a path.

// onEvent takes an event of tra_events.
func (d *pathDaemon) onEvent(ev Event) {
	switch ev.Kind {
	case EventSCMP:
		d.onSCMP(ev)
	case EventICMP:
		d.onICMP(ev)
	case EventProbe:
		d.onProbeReply(ev)
	default:
		d.stats.add(statBadEvent, 1)
	}
	d.dispatch()
}

// onICMP sends an ICMPv6 error of the host into SCION as SCMP, on a path
// to the AS it is for; without one yet, it waits for one as a packet does.
func (d *pathDaemon) onICMP(ev Event) {
	if ev.IA == d.cfg.IA {
		d.sendSCMP(ev.IA, ev.Data, Path{})
		return
	}
	if x := d.dests[ev.IA]; x != nil && len(x.dp) > 0 {
		d.sendSCMP(ev.IA, ev.Data, x.dp[0])
		return
	}
	d.hold(ev.IA, heldPacket{data: ev.Data, icmp: true, uid: uidUnknown})
}

// sendSCMP sends an ICMPv6 error of the host into SCION as SCMP, on path
// (none: the destination is in this AS).
func (d *pathDaemon) sendSCMP(ia addr.IA, pkt []byte, path Path) {
	self := addr.HostIP(d.cfg.Address)
	if m, err := ToSCION(d.cfg.SMIP); err == nil {
		self = addr.HostIP(m.Host(d.cfg.SMIP))
	}
	b, err := icmpv6ToSCMP(pkt, d.cfg.IA, self, path)
	if err != nil || b == nil {
		if err != nil {
			d.stats.add(statBadEvent, 1)
			d.log.Warn("cannot make the host's ICMPv6 error SCMP", "isd_as", ia, "error", err)
		}
		return
	}
	to := path.NextHop
	if len(path.Raw) == 0 {
		// This AS: straight to the host, at the end-host port.
		_, host, err := scionHost(netip.AddrFrom16([16]byte(pkt[24:40])))
		if err != nil || host.Type() != addr.HostTypeIP || !host.IP().Is4() {
			return
		}
		to = netip.AddrPortFrom(host.IP(), endHostPort)
	}
	if err := d.scion.writeTo(b, to); err != nil {
		d.log.Warn("cannot send SCMP", "isd_as", ia, "next_hop", to, "error", err)
		return
	}
	d.stats.add(statICMPToSCION, 1)
}

// endHostPort is where a router delivers what is not dispatched by port.
const endHostPort = 30041

// scmpError is an SCMP error as the daemon reads it: its type and code, the
// interfaces an interface-down names, and the packet it quotes.
type scmpError struct {
	typ, code uint8
	ia        addr.IA  // interface down: the AS of the interfaces
	ifids     []uint64 // interface down: one (external) or two (internal connectivity)
	quote     slayers.SCION
}

// parseSCMPError reads an SCMP error message: a short or malformed one is
// an error, never a panic.
func parseSCMPError(msg []byte) (*scmpError, error) {
	if len(msg) < 8 {
		return nil, errors.New("SCMP message too short")
	}
	e := &scmpError{typ: msg[0], code: msg[1]}
	at := scmpQuoteAt(e.typ)
	if len(msg) < at {
		return nil, fmt.Errorf("SCMP type %d: %d bytes, want at least %d", e.typ, len(msg), at)
	}
	switch e.typ {
	case scmpExternalInterfaceDown:
		e.ia = addr.IA(binary.BigEndian.Uint64(msg[4:12]))
		e.ifids = []uint64{binary.BigEndian.Uint64(msg[12:20])}
	case scmpInternalConnectivityDown:
		e.ia = addr.IA(binary.BigEndian.Uint64(msg[4:12]))
		e.ifids = []uint64{binary.BigEndian.Uint64(msg[12:20]), binary.BigEndian.Uint64(msg[20:28])}
	}
	if err := e.quote.DecodeFromBytes(msg[at:], gopacket.NilDecodeFeedback); err != nil {
		return nil, fmt.Errorf("SCMP type %d: quoted SCION header: %w", e.typ, err)
	}
	return e, nil
}

// ownQuote says whether a quoted packet is one this host sent.
func (d *pathDaemon) ownQuote(q *slayers.SCION) bool {
	if q.SrcIA != d.cfg.IA {
		return false
	}
	src, err := q.SrcAddr()
	if err != nil || src.Type() != addr.HostTypeIP {
		return false
	}
	ip := src.IP()
	return ip == d.cfg.Address || ip == d.cfg.SMIP
}

// onSCMP takes an SCMP error for the host. One about a packet the host did
// not send is dropped; an interface down is believed only as interfaceDown
// says; the rest go to the host as ICMPv6.
func (d *pathDaemon) onSCMP(ev Event) {
	e, err := parseSCMPError(ev.Data)
	if err != nil {
		d.stats.add(statBadEvent, 1)
		return
	}
	if !d.ownQuote(&e.quote) {
		d.stats.add(statSCMPIgnored, 1)
		return
	}
	if e.typ == scmpExternalInterfaceDown || e.typ == scmpInternalConnectivityDown {
		believed, bereft := d.interfaceDown(ev, e)
		if !believed {
			d.stats.add(statSCMPIgnored, 1)
			return
		}
		if !bereft {
			return
		}
	}
	pkt, err := scmpToICMPv6(ev.Data, ev.IA, ev.SrcHost, d.cfg.SMIP)
	if err != nil {
		d.stats.add(statBadEvent, 1)
		d.log.Warn("cannot make an SCMP error ICMPv6", "scmp_type", ev.SCMPType, "isd_as", ev.IA, "error", err)
		return
	}
	if pkt == nil {
		return
	}
	if err := d.host.toHost(pkt); err != nil {
		d.log.Warn("cannot hand an SCMP error to the host", "scmp_type", ev.SCMPType, "isd_as", ev.IA, "error", err)
		return
	}
	d.stats.add(statSCMPToHost, 1)
}

// interfaceDown checks an interface-down error and acts on it: the quoted
// packet went on a path the daemon installed lately, the interfaces are on
// that path, and the error comes from their AS. An interface of this AS:
// the error must come from its router (ownedBySender); then paths through
// it are dropped for every destination (spares take their places at once),
// the interfaces are avoided for a while, and the destinations hit are
// asked for anew — but a destination that would be left with no path keeps
// its paths until the lookup brings others. An interface of another AS:
// the paths through it are probed at once (claimed). bereft says the quoted
// packet's destination has no path left.
func (d *pathDaemon) interfaceDown(ev Event, e *scmpError) (believed, bereft bool) {
	if ev.IA != e.ia {
		return false, false
	}
	x := d.dests[e.quote.DstIA]
	if x == nil {
		return false, false
	}
	raw, ok := quotedPath(&e.quote)
	if !ok {
		return false, false
	}
	sig := pathSignature(raw)
	now := d.now()
	rp := x.knownPath(sig, now)
	if rp == nil || !onPath(rp, e.ia, e.ifids) {
		return false, false
	}
	if ev.PathType != scionPathType {
		// The empty path: a host of this AS, not a router.
		d.stats.add(statIfDownForged, 1)
		return false, false
	}
	if e.ia == d.cfg.IA {
		if !d.ownedBySender(ev.From, e.ifids) {
			d.stats.add(statIfDownForged, 1)
			return false, false
		}
	} else if d.lim.ProbeEvery > 0 {
		d.claimed(e, now)
		return false, false
	}
	for _, id := range e.ifids {
		d.shun(ifKey{e.ia, id}, now.Add(d.lim.ShunFor))
	}
	d.stats.add(statIfDown, 1)
	for _, y := range d.dests {
		if len(y.dp) == 0 {
			continue
		}
		gone := func(i int) bool {
			if i < len(y.paths) {
				return traverses(y.paths[i], e.ia, e.ifids)
			}
			// Adopted paths carry no metadata: the quoted one is known.
			return y == x && pathSignature(y.dp[i].Raw) == sig
		}
		if d.leftWith(y, gone, now) == 0 {
			d.log.Warn("interface down, but no other path: the paths through it stay until a lookup brings others",
				"scmp_type", e.typ, "interface_isd_as", e.ia, "interfaces", e.ifids, "isd_as", y.ia)
			d.wantFresh(y)
			continue
		}
		if dropped := d.dropPaths(y, gone, now); dropped > 0 {
			d.changed(changeFailover)
			d.log.Warn("interface down: paths through it left, failover",
				"scmp_type", e.typ, "interface_isd_as", e.ia, "interfaces", e.ifids, "isd_as", y.ia, "left", len(y.dp))
			d.wantFresh(y)
		}
	}
	return true, len(x.dp) == 0
}

// scionPathType is SCION's standard path type, as events carry it.
const scionPathType = 1

// ownedBySender says whether the router that sent an interface down (its
// internal address, as the data plane saw it hand the error over) is the
// one whose interfaces it names (topology.json): the first non-zero of them
// (an internal connectivity down names the ingress interface first).
func (d *pathDaemon) ownedBySender(from netip.AddrPort, ifids []uint64) bool {
	for _, id := range ifids {
		if id == 0 {
			continue
		}
		owner, ok := d.cfg.Routers[d.cfg.IfOwners[id]]
		return ok && owner.Addr().Unmap() == from.Addr().Unmap() && owner.Port() == from.Port()
	}
	return false
}

// leftWith is how many paths x would have if those for which gone holds
// were dropped and the spares took their places.
func (d *pathDaemon) leftWith(x *dest, gone func(i int) bool, now time.Time) int {
	n := 0
	for i := range x.dp {
		if !gone(i) {
			n++
		}
	}
	if len(x.paths) == len(x.dp) {
		for _, s := range x.spare {
			if n < d.cfg.MaxPaths && !d.avoided(s, now) {
				if _, err := toPaths([]snet.Path{s}); err == nil {
					n++
				}
			}
		}
	}
	return n
}

// claimed takes an interface down of another AS: the paths through the
// interfaces, of every destination, are probed now, together with the
// destinations' other paths (whose answers tell a dead link from trouble
// near the host); checkProbed drops those that stay silent.
func (d *pathDaemon) claimed(e *scmpError, now time.Time) {
	d.stats.add(statIfDownProbed, 1)
	n := 0
	for _, y := range d.dests {
		if len(y.dp) == 0 || len(y.paths) != len(y.dp) {
			continue
		}
		hit := false
		for _, p := range y.paths {
			hit = hit || traverses(p, e.ia, e.ifids)
		}
		if !hit {
			continue
		}
		if n == d.lim.ProbedDests {
			break
		}
		// A claim repeated (a flood of them) probes no more often than
		// the probes' own interval.
		if now.Sub(y.claimProbed) < d.lim.ProbeEvery {
			continue
		}
		y.claimProbed = now
		n++
		d.probeDest(y, now)
	}
	d.log.Info("interface of another AS said down: the paths through it probed",
		"scmp_type", e.typ, "interface_isd_as", e.ia, "interfaces", e.ifids, "destinations", n)
}

// shun avoids an interface until a time; the table is bounded, the entry
// that would end first making way.
func (d *pathDaemon) shun(k ifKey, until time.Time) {
	if _, ok := d.down[k]; !ok && len(d.down) >= d.lim.Shunned {
		var first ifKey
		var at time.Time
		for kk, t := range d.down {
			if at.IsZero() || t.Before(at) {
				first, at = kk, t
			}
		}
		delete(d.down, first)
	}
	d.down[k] = until
}

// dropPaths removes the installed paths for which gone holds, fills their
// places from the spares that are not avoided, installs the result, and
// says how many it removed.
func (d *pathDaemon) dropPaths(x *dest, gone func(i int) bool, now time.Time) int {
	var keep []Path
	var keepMD []snet.Path
	withMD := len(x.paths) == len(x.dp)
	for i, p := range x.dp {
		if gone(i) {
			continue
		}
		keep = append(keep, p)
		if withMD {
			keepMD = append(keepMD, x.paths[i])
		}
	}
	dropped := len(x.dp) - len(keep)
	if dropped == 0 {
		return 0
	}
	// Spares come with metadata, and only with paths that have it.
	var spare []snet.Path
	for _, s := range x.spare {
		if withMD && len(keep) < d.cfg.MaxPaths && !d.avoided(s, now) {
			if conv, err := toPaths([]snet.Path{s}); err == nil {
				keep, keepMD = append(keep, conv[0]), append(keepMD, s)
				continue
			}
		}
		spare = append(spare, s)
	}
	if _, err := d.setPaths(x, keep); err != nil {
		d.log.Error("cannot install paths", "isd_as", x.ia, "error", err)
	}
	x.spare = spare
	x.paths = nil
	if withMD {
		x.paths = keepMD
	}
	x.expires = earliestExpiry(keep)
	d.remember(x, x.paths, keep, now)
	return dropped
}

// knownPath is the installed or lately installed path of x with the
// signature sig.
func (x *dest) knownPath(sig string, now time.Time) *recentPath {
	for i, p := range x.dp {
		if pathSignature(p.Raw) == sig {
			rp := &recentPath{sig: sig, path: p}
			if i < len(x.paths) && len(x.paths) == len(x.dp) {
				rp.md = x.paths[i].Metadata()
			}
			return rp
		}
	}
	for i := range x.recent {
		if x.recent[i].sig == sig && now.Before(x.recent[i].until) {
			return &x.recent[i]
		}
	}
	return nil
}

// quotedPath is the raw path header of a quoted packet.
func quotedPath(q *slayers.SCION) ([]byte, bool) {
	switch p := q.Path.(type) {
	case *scion.Raw:
		return p.Raw, true
	case *scion.Decoded:
		b := make([]byte, p.Len())
		if err := p.SerializeTo(b); err != nil {
			return nil, false
		}
		return b, true
	}
	return nil, false
}

// onPath says whether the interfaces of ia are on a path: by its metadata,
// or, without metadata (an adopted path), by its hop fields' interfaces.
func onPath(rp *recentPath, ia addr.IA, ifids []uint64) bool {
	if rp.md != nil {
		for _, id := range ifids {
			found := false
			for _, i := range rp.md.Interfaces {
				if i.IA == ia && uint64(i.ID) == id {
					found = true
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
	var dec scion.Decoded
	if err := dec.DecodeFromBytes(rp.path.Raw); err != nil {
		return false
	}
	for _, id := range ifids {
		found := false
		for _, h := range dec.HopFields {
			if uint64(h.ConsIngress) == id || uint64(h.ConsEgress) == id {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func traverses(p snet.Path, ia addr.IA, ifids []uint64) bool {
	md := p.Metadata()
	if md == nil {
		return false
	}
	for _, i := range md.Interfaces {
		for _, id := range ifids {
			if i.IA == ia && uint64(i.ID) == id {
				return true
			}
		}
	}
	return false
}

// pathSignature names a path by what stays the same while a packet crosses
// it: the info fields' timestamps and flags, and every hop field's
// interfaces and MAC (SegID and the current-hop pointers change on the
// way, so a quoted packet's path is compared without them).
func pathSignature(raw []byte) string {
	var dec scion.Decoded
	if err := dec.DecodeFromBytes(raw); err != nil {
		return "raw:" + string(raw)
	}
	var b strings.Builder
	for _, inf := range dec.InfoFields {
		fmt.Fprintf(&b, "i%d/%t/%t;", inf.Timestamp, inf.ConsDir, inf.Peer)
	}
	for _, h := range dec.HopFields {
		fmt.Fprintf(&b, "h%d/%d/%x;", h.ConsIngress, h.ConsEgress, h.Mac)
	}
	return b.String()
}
