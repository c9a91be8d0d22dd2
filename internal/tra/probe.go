package tra

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sort"
	"time"

	"github.com/google/gopacket"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path/scion"
	"github.com/scionproto/scion/pkg/snet"
)

// Path probes: TCP gets no SCMP about a remote link that died (scionproto
// v0.12's routers drop SCMP errors that quote TCP on the way to the host,
// and a silent loss sends none at all), so the daemon probes the paths of
// the destinations in use as scionproto's gateway probes its remotes: an
// SCMP traceroute request with the router alert on the path's last hop,
// which the destination AS's ingress router answers. A path whose probes go
// unanswered while another of the same destination's are answered is dead:
// it is dropped, a spare takes its place, and it is avoided for a while.

// prober keeps the probes in flight and what each path answered.
type prober struct {
	id    uint16 // the SCMP identifier of this daemon's probes
	seq   uint16
	sent  map[uint16]probeSent
	paths map[string]*pathHealth // by path signature
}

type probeSent struct {
	sig string
	at  time.Time
}

// pathHealth is what a path's probes found.
type pathHealth struct {
	first      time.Time // the first probe
	lastSent   time.Time
	lastReply  time.Time
	unanswered int // probes sent since the last reply
}

func newProber(id uint16) *prober {
	return &prober{id: id, sent: map[uint16]probeSent{}, paths: map[string]*pathHealth{}}
}

// prune forgets probes older than a few seconds and paths no longer probed.
func (pr *prober) prune(now time.Time) {
	for seq, s := range pr.sent {
		if now.Sub(s.at) > 3*time.Second {
			delete(pr.sent, seq)
		}
	}
	for sig, h := range pr.paths {
		if now.Sub(h.lastSent) > 10*time.Second {
			delete(pr.paths, sig)
		}
	}
}

// silent says whether a path's probes have gone unanswered long enough to
// call it dead.
func (h *pathHealth) silent(now time.Time, dead time.Duration) bool {
	last := h.lastReply
	if last.IsZero() {
		last = h.first
	}
	return h.unanswered >= 3 && now.Sub(last) > dead
}

// answered says whether a path answered lately.
func (h *pathHealth) answered(now time.Time, within time.Duration) bool {
	return h != nil && !h.lastReply.IsZero() && now.Sub(h.lastReply) <= within
}

// probeTick probes the paths (and two spares) of the destinations in use,
// and fails over from the paths that went silent.
func (d *pathDaemon) probeTick(now time.Time) {
	var inUse []*dest
	for _, x := range d.dests {
		if len(x.dp) > 0 && now.Sub(x.used) <= 3*usedUnit {
			inUse = append(inUse, x)
		}
	}
	sort.Slice(inUse, func(i, j int) bool { return inUse[i].used.After(inUse[j].used) })
	if len(inUse) > d.lim.ProbedDests {
		inUse = inUse[:d.lim.ProbedDests]
	}
	for _, x := range inUse {
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
		d.checkProbed(x, now)
	}
}

// probe sends one probe on a path.
func (d *pathDaemon) probe(ia addr.IA, p Path, now time.Time) {
	sig := pathSignature(p.Raw)
	d.probes.seq++
	b, err := probePacket(d.cfg.IA, d.cfg.Address, ia, p.Raw, d.probes.id, d.probes.seq)
	if err != nil {
		return
	}
	if err := d.scion.writeTo(b, p.NextHop); err != nil {
		return
	}
	d.stats.add(statProbes, 1)
	d.probes.sent[d.probes.seq] = probeSent{sig: sig, at: now}
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
	d.logf("paths to %s: %d of %d unanswered by their probes, dropped; %d left", x.ia, len(gone), n, len(x.dp))
	d.want(x, true)
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

// onProbeReply notes the answer to a probe.
func (d *pathDaemon) onProbeReply(ev Event) {
	m := ev.Data
	if len(m) < 8 || m[0] != uint8(slayers.SCMPTypeTracerouteReply) {
		d.stats.add(statBadEvent, 1)
		return
	}
	id, seq := binary.BigEndian.Uint16(m[4:6]), binary.BigEndian.Uint16(m[6:8])
	s, ok := d.probes.sent[seq]
	if id != d.probes.id || !ok {
		return // another daemon's, or too late
	}
	delete(d.probes.sent, seq)
	d.stats.add(statProbeReplies, 1)
	if h := d.probes.paths[s.sig]; h != nil {
		h.lastReply = d.now()
		h.unanswered = 0
	}
}

// probePacket is an SCMP traceroute request on a path, with the router
// alert on its last hop, so that the destination AS's ingress router
// answers; the destination host is none (the router takes it).
func probePacket(local addr.IA, self netip.Addr, dst addr.IA, raw []byte, id, seq uint16) ([]byte, error) {
	var dec scion.Decoded
	if err := dec.DecodeFromBytes(raw); err != nil {
		return nil, err
	}
	if len(dec.InfoFields) == 0 || len(dec.HopFields) == 0 {
		return nil, errors.New("a path without hops")
	}
	last := len(dec.HopFields) - 1
	if dec.InfoFields[len(dec.InfoFields)-1].ConsDir {
		dec.HopFields[last].IngressRouterAlert = true
	} else {
		dec.HopFields[last].EgressRouterAlert = true
	}
	s := &slayers.SCION{Version: 0, NextHdr: slayers.L4SCMP, SrcIA: local, DstIA: dst, PathType: scion.PathType, Path: &dec}
	if err := s.SetSrcAddr(addr.HostIP(self)); err != nil {
		return nil, err
	}
	if err := s.SetDstAddr(addr.HostSVC(addr.SvcNone)); err != nil {
		return nil, err
	}
	scmp := &slayers.SCMP{TypeCode: slayers.CreateSCMPTypeCode(slayers.SCMPTypeTracerouteRequest, 0)}
	scmp.SetNetworkLayerForChecksum(s)
	b := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		s, scmp, &slayers.SCMPTraceroute{Identifier: id, Sequence: seq})
	return b.Bytes(), err
}
