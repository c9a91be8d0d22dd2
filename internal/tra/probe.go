package tra

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sort"
	"time"

	"github.com/google/gopacket"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path/scion"
	"github.com/scionproto/scion/pkg/snet"
)

// Path probes: TCP gets no SCMP about a remote link that died (scionproto's
// routers, every release, drop SCMP errors that quote TCP on the way to the
// host, and a silent loss sends none at all), so the daemon probes the paths of
// the destinations in use as scionproto's gateway probes its remotes: an
// SCMP traceroute request with the router alert on the path's last hop,
// which the destination AS's ingress router answers. A path whose probes go
// unanswered while another of the same destination's are answered is dead:
// it is dropped, a spare takes its place, and it is avoided for a while.

// prober keeps the probes in flight and what each path answered. Each
// probe has an identifier and sequence number drawn at random (32 bits in
// all), so that only who saw a probe can answer it; an answer must come,
// through a router of the AS, from the AS and interface the probe was
// aimed at.
type prober struct {
	sent  map[uint32]probeSent   // by identifier << 16 | sequence
	paths map[string]*pathHealth // by path signature
}

type probeSent struct {
	sig  string
	ia   addr.IA // the destination AS, whose router answers
	ifid uint64  // the interface the router alert is on
	at   time.Time
}

// pathHealth is what a path's probes found.
type pathHealth struct {
	first      time.Time // the first probe
	lastSent   time.Time
	lastReply  time.Time
	unanswered int           // probes sent since the last reply
	srtt       time.Duration // smoothed round-trip time of its answers
}

func newProber() *prober {
	return &prober{sent: map[uint32]probeSent{}, paths: map[string]*pathHealth{}}
}

// probeForget is how long a probe waits for its answer before it is
// forgotten (and counted unanswered).
const probeForget = 3 * time.Second

// prune forgets probes older than a few seconds and paths no longer
// probed; it says how many probes it forgot unanswered.
func (pr *prober) prune(now time.Time) (unanswered int) {
	for k, s := range pr.sent {
		if now.Sub(s.at) > probeForget {
			delete(pr.sent, k)
			unanswered++
		}
	}
	for sig, h := range pr.paths {
		if now.Sub(h.lastSent) > 10*time.Second {
			delete(pr.paths, sig)
		}
	}
	return unanswered
}

// neverAnsweredDead is how long a path that never answered is given: its
// round trip is not known (a satellite link takes 600 ms).
const neverAnsweredDead = 2 * time.Second

// silent says whether a path's probes have gone unanswered long enough to
// call it dead: three probes, and longer than dead or three of its round
// trips, whichever is longer.
func (h *pathHealth) silent(now time.Time, dead time.Duration) bool {
	last := h.lastReply
	if last.IsZero() {
		last = h.first
		dead = max(dead, neverAnsweredDead)
	}
	return h.unanswered >= 3 && now.Sub(last) > max(dead, 3*h.srtt)
}

// answered says whether a path answered lately.
func (h *pathHealth) answered(now time.Time, within time.Duration) bool {
	return h != nil && !h.lastReply.IsZero() && now.Sub(h.lastReply) <= max(within, 3*h.srtt)
}

// busyScore is where a destination's busy score (one point per second in
// which the data plane saw it used, decaying by a quarter a second) makes
// it in use all the time: about three seconds of steady traffic.
const busyScore = 2

// probeTick probes the paths (and two spares) of the destinations in use,
// and fails over from the paths that went silent. The destinations busy
// without pause go first (a flow's packets each second), then those used
// most recently; a destination used only now and then is probed once per
// second it was used in, not every interval: a few packets, sent to ASes of
// the sender's choosing, must not buy a hundred times as many probes at
// their routers, nor push the busy destinations out of the probed set.
func (d *pathDaemon) probeTick(now time.Time) {
	var inUse []*dest
	for _, x := range d.dests {
		if len(x.dp) > 0 && now.Sub(x.used) <= 3*usedUnit {
			inUse = append(inUse, x)
		}
	}
	sort.Slice(inUse, func(i, j int) bool {
		bi, bj := inUse[i].busy >= busyScore, inUse[j].busy >= busyScore
		if bi != bj {
			return bi
		}
		return inUse[i].used.After(inUse[j].used)
	})
	if len(inUse) > d.lim.ProbedDests {
		inUse = inUse[:d.lim.ProbedDests]
	}
	for _, x := range inUse {
		if x.busy < busyScore && !x.used.After(x.probedUse) {
			continue
		}
		x.probedUse = x.used
		d.probeDest(x, now)
		d.checkProbed(x, now)
	}
}

// probeDest probes x's installed paths and two of its spares.
func (d *pathDaemon) probeDest(x *dest, now time.Time) {
	for _, p := range x.dp {
		d.probe(x.ia, p, now)
	}
	n := 0
	for _, s := range x.spare {
		if n == 2 || d.avoided(s, now) {
			continue
		}
		if conv, err := toPaths([]snet.Path{s}); err == nil {
			d.probe(x.ia, conv[0], now)
			n++
		}
	}
}

// probe sends one probe on a path.
func (d *pathDaemon) probe(ia addr.IA, p Path, now time.Time) {
	sig := pathSignature(p.Raw)
	// The identifier is the port the reply is delivered to on routers of
	// scionproto v0.14.0 on: 0 is none they can send to.
	key := rand.Uint32()
	for _, taken := d.probes.sent[key]; taken || key>>16 == 0; _, taken = d.probes.sent[key] {
		key = rand.Uint32()
	}
	b, ifid, err := probePacket(d.cfg.IA, d.cfg.Address, ia, p.Raw, uint16(key>>16), uint16(key))
	if err == nil {
		err = d.scion.writeTo(b, p.NextHop)
	}
	if err != nil {
		d.metrics.probes[probeSendFailed].Add(1)
		d.log.Debug("cannot send a path probe", "isd_as", ia, "error", err)
		return
	}
	d.stats.add(statProbes, 1)
	d.probes.sent[key] = probeSent{sig: sig, ia: ia, ifid: uint64(ifid), at: now}
	h := d.probes.paths[sig]
	if h == nil {
		h = &pathHealth{first: now}
		d.probes.paths[sig] = h
	}
	h.lastSent = now
	h.unanswered++
}

// checkProbed drops the installed paths of x that went silent, if another
// path of x was answered lately: when every path is silent the trouble is
// more likely near the host, and no path is better than another.
func (d *pathDaemon) checkProbed(x *dest, now time.Time) {
	var dead []int
	alive := false
	for i, p := range x.dp {
		h := d.probes.paths[pathSignature(p.Raw)]
		if h == nil {
			continue
		}
		if h.silent(now, d.lim.ProbeDead) {
			dead = append(dead, i)
		} else if h.answered(now, d.lim.ProbeDead) {
			alive = true
		}
	}
	for _, s := range x.spare {
		if d.probes.paths[pathSignature(rawOf(s))].answered(now, d.lim.ProbeDead) {
			alive = true
		}
	}
	if len(dead) == 0 || !alive {
		return
	}
	gone := map[int]bool{}
	for _, i := range dead {
		sig := pathSignature(x.dp[i].Raw)
		d.dead[sig] = now.Add(d.lim.ShunFor)
		delete(d.probes.paths, sig)
		gone[i] = true
		d.stats.add(statPathDead, 1)
		if i < len(x.paths) && len(x.paths) == len(x.dp) {
			d.shunSuspects(x, x.paths[i], now)
		}
	}
	n := len(x.dp)
	// Spares that answered first: order them so.
	sort.SliceStable(x.spare, func(i, j int) bool {
		return d.probes.paths[pathSignature(rawOf(x.spare[i]))].answered(now, d.lim.ProbeDead) &&
			!d.probes.paths[pathSignature(rawOf(x.spare[j]))].answered(now, d.lim.ProbeDead)
	})
	d.dropPaths(x, func(i int) bool { return gone[i] }, now)
	d.changed(changeFailover)
	d.log.Warn("paths silent under their probes left: failover", "isd_as", x.ia, "silent", len(gone), "installed", n, "left", len(x.dp))
	d.wantFresh(x)
}

// shunSuspects avoids, for a while, the interfaces of a silent path that no
// answering path of the destination crosses: the dead link is among them.
// The daemon's next paths are made of other segments (new beacons, new
// MACs), so it is the link, not the path, that must be remembered.
func (d *pathDaemon) shunSuspects(x *dest, silent snet.Path, now time.Time) {
	md := silent.Metadata()
	if md == nil {
		return
	}
	alive := map[ifKey]bool{}
	for _, p := range append(append([]snet.Path(nil), x.paths...), x.spare...) {
		pm := p.Metadata()
		if pm == nil || !d.probes.paths[pathSignature(rawOf(p))].answered(now, d.lim.ProbeDead) {
			continue
		}
		for _, i := range pm.Interfaces {
			alive[ifKey{i.IA, uint64(i.ID)}] = true
		}
	}
	for _, i := range md.Interfaces {
		if k := (ifKey{i.IA, uint64(i.ID)}); !alive[k] {
			d.shun(k, now.Add(d.lim.ShunFor))
		}
	}
}

// onProbeReply notes the answer to a probe: one of ours, from a router of
// the AS that handed it over with a standard path, and from the AS and
// interface the probe was aimed at. Anything else is counted and ignored.
func (d *pathDaemon) onProbeReply(ev Event) {
	m := ev.Data
	if len(m) < 24 || m[0] != uint8(slayers.SCMPTypeTracerouteReply) {
		d.stats.add(statBadEvent, 1)
		return
	}
	key := binary.BigEndian.Uint32(m[4:8])
	s, ok := d.probes.sent[key]
	if !ok {
		d.stats.add(statProbeRefused, 1) // another daemon's, too late, or made up
		return
	}
	ia, ifid := addr.IA(binary.BigEndian.Uint64(m[8:16])), binary.BigEndian.Uint64(m[16:24])
	if ev.PathType != scionPathType || ev.IA != s.ia || ia != s.ia || ifid != s.ifid {
		d.stats.add(statProbeRefused, 1)
		return
	}
	delete(d.probes.sent, key)
	d.stats.add(statProbeReplies, 1)
	d.metrics.probes[probeAnswered].Add(1)
	now := d.now()
	if h := d.probes.paths[s.sig]; h != nil {
		rtt := max(now.Sub(s.at), 0)
		if h.srtt == 0 {
			h.srtt = rtt
		} else {
			h.srtt = (7*h.srtt + rtt) / 8
		}
		h.lastReply = now
		h.unanswered = 0
	}
}

// probePacket is an SCMP traceroute request on a path, with the router
// alert on its last hop, so that the destination AS's ingress router
// answers; the destination host is none (the router takes it). ifid is the
// interface the alert is on, which the answer names.
func probePacket(local addr.IA, self netip.Addr, dst addr.IA, raw []byte, id, seq uint16) (b []byte, ifid uint16, err error) {
	var dec scion.Decoded
	if err := dec.DecodeFromBytes(raw); err != nil {
		return nil, 0, err
	}
	if len(dec.InfoFields) == 0 || len(dec.HopFields) == 0 {
		return nil, 0, errors.New("a path without hops")
	}
	last := len(dec.HopFields) - 1
	if dec.InfoFields[len(dec.InfoFields)-1].ConsDir {
		dec.HopFields[last].IngressRouterAlert = true
		ifid = dec.HopFields[last].ConsIngress
	} else {
		dec.HopFields[last].EgressRouterAlert = true
		ifid = dec.HopFields[last].ConsEgress
	}
	s := &slayers.SCION{Version: 0, NextHdr: slayers.L4SCMP, SrcIA: local, DstIA: dst, PathType: scion.PathType, Path: &dec}
	if err := s.SetSrcAddr(addr.HostIP(self)); err != nil {
		return nil, 0, err
	}
	if err := s.SetDstAddr(addr.HostSVC(addr.SvcNone)); err != nil {
		return nil, 0, err
	}
	scmp := &slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeTracerouteRequest, 0)}
	scmp.SetNetworkLayerForChecksum(s)
	buf := gopacket.NewSerializeBuffer()
	err = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		s, scmp, &slayers.SCMPTraceroute{Identifier: id, Sequence: seq})
	return buf.Bytes(), ifid, err
}
