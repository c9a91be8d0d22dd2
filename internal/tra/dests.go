package tra

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/daemon"
	"github.com/scionproto/scion/pkg/snet"
	snetpath "github.com/scionproto/scion/pkg/snet/path"
	"github.com/scionproto/scion/private/path/pathpol"
)

// dataPlane is what the daemon keeps in the kernel: the paths, when each
// destination was last used, and its own counters.
type dataPlane interface {
	SetPaths(ia addr.IA, slot uint32, paths []Path) error
	Dests() (map[addr.IA]DestPaths, error)
	UsedAt() ([]uint32, error)
	MarkUsed(slot, at uint32) error
	StoreStats(vals []uint64) error
}

// pinnedPlane is the attached translator's maps.
type pinnedPlane struct{ *Pinned }

func (p pinnedPlane) MarkUsed(slot, at uint32) error { return p.used.Put(slot%uint32(MaxDests), at) }

func (p pinnedPlane) StoreStats(vals []uint64) error {
	for i, v := range vals {
		if err := p.daemon.Put(uint32(i), v); err != nil {
			return err
		}
	}
	return nil
}

// Daemon counters, by enum tra_daemon_counter.
const (
	statHeld               = int(translatorTraDaemonCounterTRA_D_HELD)
	statHeldSent           = int(translatorTraDaemonCounterTRA_D_HELD_SENT)
	statHeldDropped        = int(translatorTraDaemonCounterTRA_D_HELD_DROPPED)
	statUnreachable        = int(translatorTraDaemonCounterTRA_D_UNREACHABLE)
	statUnreachableLimited = int(translatorTraDaemonCounterTRA_D_UNREACHABLE_LIMITED)
	statLookups            = int(translatorTraDaemonCounterTRA_D_LOOKUPS)
	statLookupFailed       = int(translatorTraDaemonCounterTRA_D_LOOKUP_FAILED)
	statLookupRefused      = int(translatorTraDaemonCounterTRA_D_LOOKUP_REFUSED)
	statInstalled          = int(translatorTraDaemonCounterTRA_D_INSTALLED)
	statExpired            = int(translatorTraDaemonCounterTRA_D_EXPIRED)
	statEvicted            = int(translatorTraDaemonCounterTRA_D_EVICTED)
	statIfDown             = int(translatorTraDaemonCounterTRA_D_IF_DOWN)
	statSCMPIgnored        = int(translatorTraDaemonCounterTRA_D_SCMP_IGNORED)
	statSCMPToHost         = int(translatorTraDaemonCounterTRA_D_SCMP_TO_HOST)
	statICMPToSCION        = int(translatorTraDaemonCounterTRA_D_ICMP_TO_SCION)
	statBadEvent           = int(translatorTraDaemonCounterTRA_D_BAD_EVENT)
	statProbes             = int(translatorTraDaemonCounterTRA_D_PROBES)
	statProbeReplies       = int(translatorTraDaemonCounterTRA_D_PROBE_REPLIES)
	statPathDead           = int(translatorTraDaemonCounterTRA_D_PATH_DEAD)
	statOffloadFixed       = int(translatorTraDaemonCounterTRA_D_OFFLOAD_FIXED)
	statReattached         = int(translatorTraDaemonCounterTRA_D_REATTACHED)
	statPanics             = int(translatorTraDaemonCounterTRA_D_PANICS)
	statDests              = int(translatorTraDaemonCounterTRA_D_DESTS)
	statHeldNow            = int(translatorTraDaemonCounterTRA_D_HELD_NOW)
	statLookupsNow         = int(translatorTraDaemonCounterTRA_D_LOOKUPS_NOW)
	statShunnedNow         = int(translatorTraDaemonCounterTRA_D_SHUNNED_NOW)
	statGoroutines         = int(translatorTraDaemonCounterTRA_D_GOROUTINES)
	statRSS                = int(translatorTraDaemonCounterTRA_D_RSS_KB)
	statPairMTUSet         = int(translatorTraDaemonCounterTRA_D_PAIR_MTU_SET)
	statPairMTU            = int(translatorTraDaemonCounterTRA_D_PAIR_MTU)
	statIfDownForged       = int(translatorTraDaemonCounterTRA_D_IF_DOWN_FORGED)
	statIfDownProbed       = int(translatorTraDaemonCounterTRA_D_IF_DOWN_PROBED)
	statProbeRefused       = int(translatorTraDaemonCounterTRA_D_PROBE_REFUSED)
	statOwnerLimited       = int(translatorTraDaemonCounterTRA_D_OWNER_LIMITED)
	statResolveFailed      = int(translatorTraDaemonCounterTRA_D_RESOLVE_FAILED)
	statPathRefused        = int(translatorTraDaemonCounterTRA_D_PATH_REFUSED)
	statCount              = int(translatorTraDaemonCounterTRA_D_MAX)
)

var daemonCounterNames = [statCount]string{
	statHeld: "held", statHeldSent: "held_sent", statHeldDropped: "held_dropped",
	statUnreachable: "unreachable_sent", statUnreachableLimited: "unreachable_limited",
	statLookups: "lookups", statLookupFailed: "lookup_failed", statLookupRefused: "lookup_refused",
	statInstalled: "installed", statExpired: "expired", statEvicted: "evicted",
	statIfDown: "interface_down", statSCMPIgnored: "scmp_ignored", statSCMPToHost: "scmp_to_host",
	statICMPToSCION: "icmp_to_scion", statBadEvent: "bad_event", statProbes: "probes",
	statProbeReplies: "probe_replies", statPathDead: "path_dead", statOffloadFixed: "offload_fixed",
	statReattached: "reattached", statPanics: "panics", statDests: "destinations",
	statHeldNow: "held_now", statLookupsNow: "lookups_now", statShunnedNow: "shunned_now",
	statGoroutines: "goroutines", statRSS: "rss_kib", statPairMTUSet: "pair_mtu_set", statPairMTU: "pair_mtu",
	statIfDownForged: "interface_down_forged", statIfDownProbed: "interface_down_probed",
	statProbeRefused: "probe_refused", statOwnerLimited: "owner_limited",
	statResolveFailed: "resolve_failed",
	statPathRefused:   "path_refused",
}

// daemonStats are the daemon's counters; the ring readers add to them too.
type daemonStats [statCount]atomic.Uint64

func (s *daemonStats) add(i int, n uint64) { s[i].Add(n) }
func (s *daemonStats) set(i int, n uint64) { s[i].Store(n) }
func (s *daemonStats) get(i int) uint64    { return s[i].Load() }

// heldPacket waits for a path: an IPv6 packet the host sent (sent again
// through the data plane), or an ICMPv6 error it sent (sent as SCMP).
type heldPacket struct {
	data []byte
	icmp bool
	uid  uint32 // its socket's owner (uidUnknown: none known)
}

// dest is a destination AS the daemon tracks: waiting for its first paths,
// or with paths in the data plane.
type dest struct {
	ia   addr.IA
	slot uint32
	// dp are the paths in the data plane; paths the same with scionproto's
	// metadata (nil for paths adopted from an earlier daemon); spare the
	// further paths the policy takes, best first, for a failover without
	// a lookup.
	dp    []Path
	paths []snet.Path
	spare []snet.Path
	// recent are the signatures of paths installed lately: an SCMP error
	// may quote a packet sent just before a switch.
	recent  []recentPath
	fetched time.Time // when a lookup last answered with paths
	expires time.Time // the earliest expiry of dp
	used    time.Time // the last packet the data plane saw, or when tracked
	held    []heldPacket
	// The lookup: queued or in flight, not before next, failed so often;
	// stale says one is wanted as soon as next allows.
	queued, inFlight, stale bool
	next                    time.Time
	fails                   int
	// owner is the user whose packet made the destination tracked, while
	// its lookup is queued as a new destination's (ownerQueued).
	owner       uint32
	ownerQueued bool
	// busy scores how steadily the destination is used (busyScore);
	// probedUse is the use its paths were last probed for.
	busy        float64
	probedUse   time.Time
	claimProbed time.Time // when an interface-down claim last had its paths probed
	// urgentRefresh says the next lookup is for an error that condemned
	// what scionproto's daemon has cached (wantFresh): it asks its
	// control service again.
	urgentRefresh bool
}

type recentPath struct {
	sig   string
	path  Path
	md    *snet.PathMetadata
	until time.Time
}

// lookupResult is what a lookup found.
type lookupResult struct {
	ia    addr.IA
	paths []snet.Path
	err   error
}

// pathDaemon is the daemon's state; only its loop touches it (lookups run
// aside and hand back a lookupResult).
type pathDaemon struct {
	ctx     context.Context
	cfg     *Config
	dp      dataPlane
	src     PathSource
	host    hostPort
	scion   scionPort
	log     *slog.Logger
	lim     Limits
	refresh time.Duration
	now     func() time.Time
	usedNow func() uint32
	health  *health
	// gateway gives each first hop's neighbour (gateways.of); nil: the
	// kernel routes each packet.
	gateway func(nh netip.Addr, now time.Time) netip.Addr
	// pair is the host's pair, whose MTU follows what arrives and the paths (nil: left as
	// attach made it).
	pair pairLink

	dests   map[addr.IA]*dest
	free    []uint32 // slots of tra_used not taken
	heldNow int
	// Lookups waiting: urgent ones (refreshes, failovers of destinations
	// in use) before new destinations'.
	urgentQ, newQ []addr.IA
	// staleQ are destinations whose lookup waits for its next time.
	staleQ   []addr.IA
	inflight int
	results  chan lookupResult
	// down are interfaces an SCMP error about a path of ours said are
	// down, until when paths through them are avoided; dead are paths
	// whose probes went unanswered, by signature.
	down   map[ifKey]time.Time
	dead   map[string]time.Time
	noPath map[addr.IA]time.Time
	probes *prober
	// owners are the host's users that asked for new destinations lately,
	// each with its share of the budgets (fairness); returning are the
	// destinations used lately and forgotten since, which come back on a
	// budget of their own.
	owners       map[uint32]*owner
	returning    map[addr.IA]time.Time
	returnTokens float64
	returnAt     time.Time

	stats         daemonStats
	metrics       daemonMetrics
	unreachTokens float64
	unreachAt     time.Time
	newTokens     float64
	newAt         time.Time
	lastProbe     time.Time
	lastHousekeep time.Time
	lastHealth    time.Time
}

type ifKey struct {
	ia   addr.IA
	ifid uint64
}

func newPathDaemon(cfg *Config, dp dataPlane, src PathSource, host hostPort, scion scionPort, log *slog.Logger, lim Limits, refresh time.Duration) *pathDaemon {
	lim = lim.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	d := &pathDaemon{
		ctx: context.Background(), cfg: cfg, dp: dp, src: src, host: host, scion: scion, log: log, lim: lim,
		refresh: refresh, now: time.Now, usedNow: usedClock,
		dests: map[addr.IA]*dest{}, results: make(chan lookupResult, lim.Lookups),
		down: map[ifKey]time.Time{}, dead: map[string]time.Time{}, noPath: map[addr.IA]time.Time{},
		owners: map[uint32]*owner{}, returning: map[addr.IA]time.Time{},
	}
	for s := MaxDests - 1; s >= 0; s-- {
		d.free = append(d.free, uint32(s))
	}
	d.probes = newProber()
	return d
}

// adopt takes over the paths an earlier daemon installed: they stay in the
// data plane, and are refreshed as soon as their destinations are in use.
func (d *pathDaemon) adopt() error {
	have, err := d.dp.Dests()
	if err != nil {
		return err
	}
	taken := map[uint32]bool{}
	now := d.now()
	used, _ := d.dp.UsedAt()
	for ia, dp := range have {
		if len(d.dests) >= d.lim.Dests {
			d.dp.SetPaths(ia, 0, nil)
			continue
		}
		slot := dp.Slot
		if slot >= uint32(MaxDests) || taken[slot] {
			slot = d.takeSlot()
			if err := d.dp.SetPaths(ia, slot, dp.Paths); err != nil {
				d.dp.SetPaths(ia, 0, nil)
				continue
			}
		} else {
			d.takeSlotNumber(slot)
		}
		taken[slot] = true
		x := &dest{ia: ia, slot: slot, dp: dp.Paths, used: now, expires: earliestExpiry(dp.Paths)}
		if used != nil && used[slot] != 0 {
			x.used = d.usedTime(now, used[slot])
		}
		for _, p := range dp.Paths {
			x.recent = append(x.recent, recentPath{sig: pathSignature(p.Raw), path: p, until: now.Add(time.Minute)})
		}
		d.dests[ia] = x
		d.changed(changeAdopted)
	}
	d.fitPair()
	return nil
}

// takeSlot takes a free slot of tra_used.
func (d *pathDaemon) takeSlot() uint32 {
	s := d.free[len(d.free)-1]
	d.free = d.free[:len(d.free)-1]
	return s
}

func (d *pathDaemon) takeSlotNumber(slot uint32) {
	for i, s := range d.free {
		if s == slot {
			d.free = append(d.free[:i], d.free[i+1:]...)
			return
		}
	}
}

// usedTime turns a tra_used value into a time.
func (d *pathDaemon) usedTime(now time.Time, u uint32) time.Time {
	age := time.Duration(d.usedNow()-u) * usedUnit
	if age < 0 {
		age = 0
	}
	return now.Add(-age)
}

// onHeld takes a packet the data plane held for want of a path.
func (d *pathDaemon) onHeld(ev Event) {
	if ev.Kind != EventNoPath {
		d.stats.add(statBadEvent, 1)
		return
	}
	d.stats.add(statHeld, 1)
	d.hold(ev.IA, heldPacket{data: ev.Data, uid: ev.UID})
	d.dispatch()
}

// hold keeps a packet until a path to ia is in, and asks for one; past the
// bounds the oldest of the destination's packets goes (or, past the bound
// of all, this one), and its sender hears the destination is unreachable
// (no route: not an error that ends a connection).
func (d *pathDaemon) hold(ia addr.IA, h heldPacket) {
	now := d.now()
	x := d.dests[ia]
	if x != nil && len(x.dp) > 0 {
		// The path came while the packet was on its way up.
		d.release(x, h)
		return
	}
	if x == nil {
		if until, ok := d.noPath[ia]; ok && now.Before(until) {
			d.refuse(h, heldNoPath)
			return
		}
		if x = d.track(ia, h.uid); x == nil {
			d.stats.add(statLookupRefused, 1)
			d.refuse(h, heldRefused)
			return
		}
	}
	if len(x.held) >= d.lim.HeldPerDest {
		d.refuse(x.held[0], heldOverflow)
		x.held = x.held[1:]
		d.heldNow--
		d.stats.add(statHeldDropped, 1)
	}
	if d.heldNow >= d.lim.Held {
		d.refuse(h, heldOverflow)
		d.stats.add(statHeldDropped, 1)
		return
	}
	x.held = append(x.held, h)
	d.heldNow++
	d.want(x, false)
}

// track starts tracking a new destination, if the bounds allow: room among
// the destinations (an idle one may make way) and in the lookup queue, and
// a lookup within the rate of new destinations — a host that sends to a
// great many ASes (a scan, a broken application) must not load
// scionproto's daemon and control services, which the host's other flows
// need as well. The budgets are shared fairly: one user of the host (the
// packet's socket owner) takes at most half of the rate and of the queue,
// so that another's new destinations still get through; a destination used
// lately that comes back is looked up on a budget of its own.
func (d *pathDaemon) track(ia addr.IA, uid uint32) *dest {
	now := d.now()
	rate := float64(d.lim.NewPerSecond)
	if until, ok := d.returning[ia]; ok && now.Before(until) {
		d.returnTokens = min(rate, d.returnTokens+now.Sub(d.returnAt).Seconds()*rate)
		d.returnAt = now
		if d.returnTokens >= 1 && len(d.newQ) < 2*d.lim.Queued && d.room() {
			d.returnTokens--
			delete(d.returning, ia)
			x := &dest{ia: ia, slot: d.takeSlot(), used: now}
			d.dests[ia] = x
			return x
		}
	}
	if len(d.newQ) >= d.lim.Queued {
		return nil
	}
	d.newTokens = min(rate, d.newTokens+now.Sub(d.newAt).Seconds()*rate)
	d.newAt = now
	if d.newTokens < 1 {
		return nil
	}
	o := d.owner(uid, now)
	if !o.mayAsk(now, d.lim) {
		d.stats.add(statOwnerLimited, 1)
		return nil
	}
	if !d.room() {
		return nil
	}
	d.newTokens--
	o.newTokens--
	x := &dest{ia: ia, slot: d.takeSlot(), used: now, owner: uid}
	d.dests[ia] = x
	return x
}

// room makes room for one more destination if need be: an idle one goes.
func (d *pathDaemon) room() bool {
	if len(d.dests) >= d.lim.Dests && !d.evictOldest() {
		return false
	}
	return len(d.free) > 0
}

// owner is a user of the host as the daemon shares its budgets among them.
type owner struct {
	uid           uint32
	newTokens     float64
	newAt         time.Time
	queued        int // its new destinations' lookups queued
	unreachTokens float64
	unreachAt     time.Time
	seen          time.Time
}

// maxOwners bounds the users the daemon keeps a share for; past it the one
// seen least recently makes way (and starts afresh when it comes back).
const maxOwners = 256

// owner is uid's share, made if need be.
func (d *pathDaemon) owner(uid uint32, now time.Time) *owner {
	o := d.owners[uid]
	if o == nil {
		if len(d.owners) >= maxOwners {
			var old *owner
			for _, v := range d.owners {
				if old == nil || v.seen.Before(old.seen) {
					old = v
				}
			}
			delete(d.owners, old.uid)
		}
		o = &owner{uid: uid, newTokens: max(1, float64(d.lim.NewPerSecond)/2), newAt: now,
			unreachTokens: max(1, float64(d.lim.Unreachable)/10), unreachAt: now}
		d.owners[uid] = o
	}
	o.seen = now
	return o
}

// mayAsk says whether o is within its share of new destinations: half of
// the rate, half of the queue.
func (o *owner) mayAsk(now time.Time, lim Limits) bool {
	rate := max(1, float64(lim.NewPerSecond)/2)
	o.newTokens = min(rate, o.newTokens+now.Sub(o.newAt).Seconds()*rate)
	o.newAt = now
	return o.newTokens >= 1 && o.queued < max(1, lim.Queued/2)
}

// mayBeTold says whether o is within its share of unreachable messages
// (half the rate), and takes one.
func (o *owner) mayBeTold(now time.Time, lim Limits) bool {
	rate := max(1, float64(lim.Unreachable)/2)
	o.unreachTokens = min(rate/5, o.unreachTokens+now.Sub(o.unreachAt).Seconds()*rate)
	o.unreachAt = now
	if o.unreachTokens < 1 {
		return false
	}
	o.unreachTokens--
	return true
}

// returningFor is how long a forgotten destination counts as used lately.
const returningFor = 30 * time.Minute

// remembered notes a destination that had paths as used lately, the
// table bounded by the destinations' bound (the entry that ends first
// makes way).
func (d *pathDaemon) remembered(ia addr.IA, now time.Time) {
	if _, ok := d.returning[ia]; !ok && len(d.returning) >= d.lim.Dests {
		var first addr.IA
		var at time.Time
		for k, t := range d.returning {
			if at.IsZero() || t.Before(at) {
				first, at = k, t
			}
		}
		delete(d.returning, first)
	}
	d.returning[ia] = now.Add(returningFor)
}

// evictOldest forgets the destination used least recently, if it has been
// idle a while: a destination in use is never pushed out by new ones.
func (d *pathDaemon) evictOldest() bool {
	var old *dest
	for _, x := range d.dests {
		if x.inFlight || x.queued || len(x.held) > 0 {
			continue
		}
		if old == nil || x.used.Before(old.used) {
			old = x
		}
	}
	if old == nil || d.now().Sub(old.used) < 10*time.Second {
		return false
	}
	d.forget(old)
	d.stats.add(statEvicted, 1)
	return true
}

// forget stops tracking a destination and removes its paths.
func (d *pathDaemon) forget(x *dest) {
	if len(x.dp) > 0 {
		if err := d.dp.SetPaths(x.ia, x.slot, nil); err != nil {
			d.log.Error("cannot remove the paths of a destination", "isd_as", x.ia, "error", err)
		}
		d.changed(changeRemoved)
		d.remembered(x.ia, d.now())
	}
	d.unqueueOwner(x)
	for _, h := range x.held {
		d.refuse(h, heldNoPath)
	}
	d.heldNow -= len(x.held)
	delete(d.dests, x.ia)
	d.free = append(d.free, x.slot)
	if len(x.dp) > 0 {
		d.fitPair()
	}
	if x.queued {
		d.urgentQ = without(d.urgentQ, x.ia)
		d.newQ = without(d.newQ, x.ia)
	}
}

// unqueueOwner ends x's count in its owner's queue share.
func (d *pathDaemon) unqueueOwner(x *dest) {
	if !x.ownerQueued {
		return
	}
	x.ownerQueued = false
	if o := d.owners[x.owner]; o != nil && o.queued > 0 {
		o.queued--
	}
}

func without(q []addr.IA, ia addr.IA) []addr.IA {
	for i, v := range q {
		if v == ia {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

// want queues a lookup for x unless one is queued or running; an urgent
// one (for a destination in use) goes before new destinations'. Whatever
// asks, a destination is looked up at most once a second (less often after
// failures: x.next): a destination whose every path an error condemns gets
// its packets held and its lookup a moment later, not one per packet.
func (d *pathDaemon) want(x *dest, urgent bool) {
	if x.queued || x.inFlight {
		return
	}
	if d.now().Before(x.next) {
		if !x.stale {
			x.stale = true
			d.staleQ = append(d.staleQ, x.ia)
		}
		return
	}
	x.queued, x.stale = true, false
	if urgent {
		d.urgentQ = append(d.urgentQ, x.ia)
	} else {
		d.newQ = append(d.newQ, x.ia)
		if len(x.dp) == 0 && !x.ownerQueued {
			if o := d.owners[x.owner]; o != nil {
				o.queued++
				x.ownerQueued = true
			}
		}
	}
}

// wantStale queues the lookups deferred by want whose time has come.
func (d *pathDaemon) wantStale(now time.Time) {
	kept := d.staleQ[:0]
	for _, ia := range d.staleQ {
		x := d.dests[ia]
		switch {
		case x == nil || !x.stale:
		case now.Before(x.next):
			kept = append(kept, ia)
		default:
			x.stale = false
			d.want(x, len(x.dp) > 0 || len(x.held) > 0)
		}
	}
	d.staleQ = kept
	d.dispatch()
}

// dispatch starts queued lookups while fewer than the limit run.
func (d *pathDaemon) dispatch() {
	for d.inflight < d.lim.Lookups {
		var ia addr.IA
		switch {
		case len(d.urgentQ) > 0:
			ia, d.urgentQ = d.urgentQ[0], d.urgentQ[1:]
		case len(d.newQ) > 0:
			ia, d.newQ = d.newQ[0], d.newQ[1:]
		default:
			return
		}
		x := d.dests[ia]
		if x == nil || !x.queued {
			continue
		}
		x.queued, x.inFlight = false, true
		d.unqueueOwner(x)
		d.inflight++
		d.stats.add(statLookups, 1)
		// A periodic refresh takes what scionproto's daemon has cached (it
		// asks its control service again at its own query interval): one
		// control-service fetch per destination in use a minute would load
		// it as a scan does. It is asked to fetch afresh only for an error
		// (wantFresh: paths expired, a failover), or when the paths
		// installed expire within MinLife: its cache has nothing fresher.
		fresh := x.urgentRefresh || (len(x.dp) > 0 && !x.expires.IsZero() && x.expires.Sub(d.now()) < d.lim.MinLife)
		x.urgentRefresh = false
		d.lookup(ia, fresh)
	}
}

// wantFresh queues an urgent lookup for x that asks scionproto's daemon to
// ask its control service again (Refresh): for an error that says what it
// cached is broken or gone (paths expired, an interface down, a path found
// dead).
func (d *pathDaemon) wantFresh(x *dest) {
	x.urgentRefresh = true
	d.want(x, true)
}

// lookup asks for paths aside from the loop (refresh: past scionproto's
// daemon's cache); the result comes back on d.results, which has room for
// every lookup in flight.
func (d *pathDaemon) lookup(ia addr.IA, refresh bool) {
	go func() {
		r := lookupResult{ia: ia}
		defer func() {
			if p := recover(); p != nil {
				d.stats.add(statPanics, 1)
				r.paths, r.err = nil, fmt.Errorf("panic in the lookup: %v", p)
			}
			d.results <- r
		}()
		ctx, cancel := context.WithTimeout(d.ctx, d.lim.LookupTime)
		defer cancel()
		r.paths, r.err = d.src.Paths(ctx, ia, d.cfg.IA, daemon.PathReqFlags{Refresh: refresh})
	}()
}

// onResult installs what a lookup found and sends what waited for it.
func (d *pathDaemon) onResult(r lookupResult) {
	d.inflight--
	defer d.dispatch()
	x := d.dests[r.ia]
	if x == nil {
		return
	}
	x.inFlight = false
	now := d.now()
	var inst, spare []snet.Path
	var dp []Path
	err := r.err
	if err == nil {
		inst, spare, dp, err = d.choose(r.ia, r.paths, now)
	}
	d.countRequest(r.err, err)
	if err != nil {
		d.stats.add(statLookupFailed, 1)
		x.fails++
		x.next = now.Add(min(time.Duration(1<<min(x.fails, 5))*time.Second, 30*time.Second))
		switch {
		case errors.Is(r.err, errDaemonUnreachable):
			d.log.Error("scionproto's daemon is unreachable", "daemon", d.cfg.Daemon, "isd_as", r.ia, "error", r.err)
		case len(x.dp) == 0:
			d.log.Warn("destination without paths", "isd_as", r.ia, "error", err)
		default:
			d.log.Warn("path lookup failed; the installed paths stay", "isd_as", r.ia, "error", err)
		}
		if len(x.dp) == 0 {
			// Nothing to send the waiting packets on: their senders hear
			// so now rather than after a timeout.
			if len(d.noPath) < d.lim.NoPath {
				d.noPath[r.ia] = now.Add(d.lim.NoPathFor)
			}
			d.forget(x)
		}
		return
	}
	x.fails = 0
	x.next = now.Add(time.Second)
	x.fetched = now
	d.install(x, inst, spare, dp)
}

// countRequest counts a lookup by how it ended: lookupErr is what
// scionproto's daemon said, err what choosing among its paths did.
func (d *pathDaemon) countRequest(lookupErr, err error) {
	r := requestOK
	switch {
	case lookupErr == nil && err != nil:
		r = requestNoPath
	case errors.Is(lookupErr, errDaemonUnreachable):
		r = requestUnreachable
	case errors.Is(lookupErr, context.DeadlineExceeded):
		r = requestTimeout
	case lookupErr != nil:
		r = requestError
	}
	d.metrics.requests[r].Add(1)
}

// install puts paths into the data plane and sends what waited for them.
func (d *pathDaemon) install(x *dest, inst, spare []snet.Path, dp []Path) {
	now := d.now()
	fresh := len(x.dp) == 0
	wrote, err := d.setPaths(x, dp)
	if err != nil {
		d.log.Error("cannot install paths", "isd_as", x.ia, "error", err)
		return
	}
	d.stats.add(statInstalled, 1)
	switch {
	case fresh:
		// A new destination counts as used from now on, not from
		// whatever the slot held before.
		d.dp.MarkUsed(x.slot, d.usedNow())
		d.changed(changeInstalled)
		d.log.Info("paths installed", "isd_as", x.ia, "paths", len(dp))
	case wrote:
		d.changed(changeRefreshed)
		d.log.Debug("paths refreshed", "isd_as", x.ia, "paths", len(dp))
	}
	x.paths, x.spare = inst, spare
	x.expires = earliestExpiry(dp)
	d.remember(x, inst, dp, now)
	for _, h := range x.held {
		d.release(x, h)
	}
	d.heldNow -= len(x.held)
	x.held = nil
}

// setPaths installs x's paths with each first hop's gateway, and keeps
// them as installed. A set the same as the one installed, gateways and
// all (a refresh that found the same paths, a route change that moved
// another destination's first hop), is not written again; wrote says
// whether it was.
func (d *pathDaemon) setPaths(x *dest, paths []Path) (wrote bool, err error) {
	now := d.now()
	withGW := make([]Path, len(paths))
	for i, p := range paths {
		withGW[i] = p
		if d.gateway != nil {
			withGW[i].Gateway = d.gateway(p.NextHop.Addr(), now)
		}
	}
	if samePaths(withGW, x.dp) {
		return false, nil
	}
	if err := d.dp.SetPaths(x.ia, x.slot, withGW); err != nil {
		return false, err
	}
	x.dp = withGW
	d.fitPair()
	return true, nil
}

// samePaths says whether two sets of paths are the same in every field
// the data plane holds, in the same order.
func samePaths(a, b []Path) bool {
	return slices.EqualFunc(a, b, func(p, q Path) bool {
		return bytes.Equal(p.Raw, q.Raw) && p.MTU == q.MTU && p.NextHop == q.NextHop && p.Expiry == q.Expiry && p.Gateway == q.Gateway
	})
}

// refreshGateways installs again the paths whose first hop's gateway
// changed (a route of the host changed).
func (d *pathDaemon) refreshGateways(now time.Time) {
	if d.gateway == nil {
		return
	}
	for _, x := range d.dests {
		changed := false
		for _, p := range x.dp {
			if d.gateway(p.NextHop.Addr(), now) != p.Gateway {
				changed = true
			}
		}
		if changed {
			if wrote, err := d.setPaths(x, x.dp); err != nil {
				d.log.Error("cannot install paths with their first hops' new gateways", "isd_as", x.ia, "error", err)
			} else if wrote {
				d.changed(changeGatewayChanged)
			}
		}
	}
}

// remember notes the signatures of installed paths for a minute.
func (d *pathDaemon) remember(x *dest, inst []snet.Path, dp []Path, now time.Time) {
	kept := x.recent[:0]
	for _, r := range x.recent {
		if now.Before(r.until) {
			kept = append(kept, r)
		}
	}
	x.recent = kept
	for i, p := range dp {
		sig := pathSignature(p.Raw)
		var md *snet.PathMetadata
		if i < len(inst) {
			md = inst[i].Metadata()
		}
		found := false
		for j := range x.recent {
			if x.recent[j].sig == sig {
				x.recent[j].until, x.recent[j].md, found = now.Add(time.Minute), md, true
			}
		}
		if !found && len(x.recent) < 16 {
			x.recent = append(x.recent, recentPath{sig: sig, path: p, md: md, until: now.Add(time.Minute)})
		}
	}
}

// release sends a held packet now that x has paths.
func (d *pathDaemon) release(x *dest, h heldPacket) {
	if h.icmp {
		d.sendSCMP(x.ia, h.data, x.dp[0])
		return
	}
	if err := d.host.send(completeL4Checksum(h.data)); err != nil {
		d.log.Warn("cannot send a held packet on", "isd_as", x.ia, "error", err)
		return
	}
	d.stats.add(statHeldSent, 1)
}

// refuse drops a held packet for reason (heldNoPath, ...) and answers it
// with ICMPv6 destination unreachable (no route), within the rate limit.
func (d *pathDaemon) refuse(h heldPacket, reason int) {
	d.metrics.drops[reason].Add(1)
	if h.icmp {
		return // no error about an error
	}
	now := d.now()
	d.unreachTokens = min(float64(d.lim.Unreachable)/5, d.unreachTokens+now.Sub(d.unreachAt).Seconds()*float64(d.lim.Unreachable))
	d.unreachAt = now
	if d.unreachTokens < 1 || !d.owner(h.uid, now).mayBeTold(now, d.lim) {
		d.stats.add(statUnreachableLimited, 1)
		return
	}
	d.unreachTokens--
	pkt, err := unreachableFor(h.data)
	if err == nil {
		err = d.host.toHost(pkt)
	}
	if err != nil {
		d.log.Warn("cannot tell the host a destination is unreachable", "error", err)
		return
	}
	d.stats.add(statUnreachable, 1)
}

// choose filters and orders a lookup's paths: none expired or about to
// expire, none through an interface reported down or a path found dead
// (unless nothing else is left), ordered by the destination's policy; the
// first MaxPaths are installed, a few more kept as spares.
func (d *pathDaemon) choose(ia addr.IA, paths []snet.Path, now time.Time) (inst, spare []snet.Path, dp []Path, err error) {
	live := prefer(paths, func(p snet.Path) bool {
		md := p.Metadata()
		return md == nil || md.Expiry.After(now.Add(time.Second))
	}, false)
	live = prefer(live, func(p snet.Path) bool {
		md := p.Metadata()
		return md == nil || md.Expiry.After(now.Add(d.lim.MinLife))
	}, true)
	live = prefer(live, func(p snet.Path) bool { return !d.avoided(p, now) }, true)
	dest, ok := d.cfg.Destinations[ia]
	if !ok {
		dest = Destination{Policy: d.cfg.Policy}
	}
	ordered, err := ChoosePaths(live, dest, len(live))
	if err != nil {
		return nil, nil, nil, err
	}
	ordered = d.byProbes(ordered, now)
	var refused error
	for _, p := range ordered {
		conv, err := toPaths([]snet.Path{p})
		if err != nil {
			if errors.Is(err, ErrPathMTU) {
				d.stats.add(statPathRefused, 1)
				refused = err
			}
			continue
		}
		if len(inst) < d.cfg.MaxPaths {
			inst, dp = append(inst, p), append(dp, conv[0])
		} else if len(spare) < 4 {
			spare = append(spare, p)
		}
	}
	if len(inst) == 0 {
		if refused != nil {
			return nil, nil, nil, refused
		}
		return nil, nil, nil, errors.New("no path the translator can carry")
	}
	if refused != nil {
		d.log.Warn("paths refused: their MTU cannot carry IPv6's minimum", "isd_as", ia, "error", refused)
	}
	return inst, spare, dp, nil
}

// byProbes puts, within the policy's order, the paths whose probes were
// answered lately first and those whose probes go unanswered last: after a
// failover the daemon's fresh paths include others through the same dead
// link, which its probes of the spares already found silent.
func (d *pathDaemon) byProbes(paths []snet.Path, now time.Time) []snet.Path {
	rank := func(p snet.Path) int {
		h := d.probes.paths[pathSignature(rawOf(p))]
		switch {
		case h.answered(now, d.lim.ProbeDead):
			return 0
		case h != nil && h.unanswered >= 2:
			return 2
		}
		return 1
	}
	out := append([]snet.Path(nil), paths...)
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

// prefer keeps the paths for which ok holds; if none does, all of them
// when soft (a path that may do beats none), none otherwise.
func prefer(paths []snet.Path, ok func(snet.Path) bool, soft bool) []snet.Path {
	var out []snet.Path
	for _, p := range paths {
		if ok(p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 && soft {
		return paths
	}
	return out
}

// avoided says whether a path crosses an interface reported down or was
// found dead by its probes.
func (d *pathDaemon) avoided(p snet.Path, now time.Time) bool {
	if until, ok := d.dead[pathSignature(rawOf(p))]; ok && now.Before(until) {
		return true
	}
	if md := p.Metadata(); md != nil {
		for _, i := range md.Interfaces {
			if until, ok := d.down[ifKey{i.IA, uint64(i.ID)}]; ok && now.Before(until) {
				return true
			}
		}
	}
	return false
}

// rawOf is a path's header bytes (nil for the empty path).
func rawOf(p snet.Path) []byte {
	if s, ok := p.Dataplane().(snetpath.SCION); ok {
		return s.Raw
	}
	return nil
}

func earliestExpiry(paths []Path) time.Time {
	var t time.Time
	for _, p := range paths {
		if p.Expiry == 0 {
			continue
		}
		e := time.Unix(int64(p.Expiry), 0)
		if t.IsZero() || e.Before(t) {
			t = e
		}
	}
	return t
}

// housekeep refreshes, expires and forgets, and prunes what it keeps.
func (d *pathDaemon) housekeep(now time.Time) {
	if used, err := d.dp.UsedAt(); err == nil {
		for _, x := range d.dests {
			x.busy *= 0.75
			if u := used[x.slot%uint32(MaxDests)]; u != 0 && len(x.dp) > 0 {
				if t := d.usedTime(now, u); t.After(x.used) {
					x.used = t
					x.busy++
				}
			}
		}
	}
	for _, x := range d.dests {
		if len(x.dp) == 0 {
			continue
		}
		idle := now.Sub(x.used)
		if idle > d.lim.Idle {
			d.forget(x)
			d.stats.add(statEvicted, 1)
			continue
		}
		d.expire(x, now)
		if len(x.dp) == 0 {
			continue
		}
		inUse := idle <= 2*d.refresh
		if inUse && (now.Sub(x.fetched) >= d.refresh || (!x.expires.IsZero() && x.expires.Sub(now) < d.refresh)) {
			d.want(x, true)
		}
	}
	for k, until := range d.down {
		if !now.Before(until) {
			delete(d.down, k)
		}
	}
	for k, until := range d.dead {
		if !now.Before(until) {
			delete(d.dead, k)
		}
	}
	for k, until := range d.noPath {
		if !now.Before(until) {
			delete(d.noPath, k)
		}
	}
	for k, until := range d.returning {
		if !now.Before(until) {
			delete(d.returning, k)
		}
	}
	for uid, o := range d.owners {
		if now.Sub(o.seen) > time.Minute && o.queued == 0 {
			delete(d.owners, uid)
		}
	}
	d.metrics.probes[probeUnanswered].Add(uint64(d.probes.prune(now)))
	d.refreshGateways(now)
	d.stats.set(statDests, uint64(len(d.dests)))
	d.stats.set(statHeldNow, uint64(d.heldNow))
	d.stats.set(statLookupsNow, uint64(d.inflight+len(d.urgentQ)+len(d.newQ)))
	d.stats.set(statShunnedNow, uint64(len(d.down)+len(d.dead)))
	d.stats.set(statGoroutines, uint64(runtime.NumGoroutine()))
	d.stats.set(statRSS, residentKiB())
	d.dispatch()
}

// expire removes paths at their expiry (a second early: routers drop what
// arrives expired); a destination left without any is asked for anew if in
// use, and its packets wait for the answer.
func (d *pathDaemon) expire(x *dest, now time.Time) {
	cut := now.Add(time.Second)
	var keep []Path
	var keepMD []snet.Path
	for i, p := range x.dp {
		if p.Expiry != 0 && !time.Unix(int64(p.Expiry), 0).After(cut) {
			continue
		}
		keep = append(keep, p)
		if i < len(x.paths) {
			keepMD = append(keepMD, x.paths[i])
		}
	}
	if len(keep) == len(x.dp) {
		return
	}
	d.stats.add(statExpired, uint64(len(x.dp)-len(keep)))
	// Spares that live on take the places of those that expired.
	withMD := len(x.paths) == len(x.dp)
	for _, s := range x.spare {
		if !withMD || len(keep) >= d.cfg.MaxPaths {
			break
		}
		if md := s.Metadata(); md != nil && md.Expiry.After(cut) && !d.avoided(s, now) {
			if conv, err := toPaths([]snet.Path{s}); err == nil {
				keep, keepMD = append(keep, conv[0]), append(keepMD, s)
			}
		}
	}
	if _, err := d.setPaths(x, keep); err != nil {
		d.log.Error("cannot remove expired paths", "isd_as", x.ia, "error", err)
	} else {
		d.changed(changeExpired)
	}
	x.paths = nil
	if withMD {
		x.paths = keepMD
	}
	x.expires = earliestExpiry(keep)
	if len(keep) == 0 {
		d.log.Warn("every path to a destination expired: looked up again", "isd_as", x.ia)
	}
	// What scionproto's daemon cached expired with them: ask past it.
	d.wantFresh(x)
}

// residentKiB is this process's resident memory (VmRSS), 0 if unknown.
func residentKiB() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			v, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v
		}
	}
	return 0
}

// flushStats writes the counters to tra_daemon.
func (d *pathDaemon) flushStats() {
	vals := make([]uint64, statCount)
	for i := range vals {
		vals[i] = d.stats.get(i)
	}
	if err := d.dp.StoreStats(vals); err != nil {
		d.log.Error("cannot write the daemon's counters", "error", err)
	}
}

// ChoosePaths orders paths by a policy and keeps the first max: shortest
// (fewest interfaces, then lowest latency), latency (lowest announced
// latency, unknown last), or sequence (those matching a hop-predicate
// sequence, then shortest). Expired paths never count.
func ChoosePaths(paths []snet.Path, dest Destination, max int) ([]snet.Path, error) {
	var live []snet.Path
	now := time.Now()
	for _, p := range paths {
		if md := p.Metadata(); md == nil || md.Expiry.After(now) {
			live = append(live, p)
		}
	}
	if dest.Policy == PolicySequence {
		seq, err := pathpol.NewSequence(dest.Sequence)
		if err != nil {
			return nil, err
		}
		live = seq.Eval(live)
	}
	hops := func(p snet.Path) int {
		if md := p.Metadata(); md != nil {
			return len(md.Interfaces)
		}
		return 1 << 20
	}
	latency := func(p snet.Path) time.Duration {
		var sum time.Duration
		md := p.Metadata()
		if md == nil || len(md.Latency) == 0 {
			return time.Hour
		}
		for _, l := range md.Latency {
			if l < 0 {
				return time.Hour
			}
			sum += l
		}
		return sum
	}
	sort.SliceStable(live, func(i, j int) bool {
		a, b := live[i], live[j]
		if dest.Policy == PolicyLatency && latency(a) != latency(b) {
			return latency(a) < latency(b)
		}
		if hops(a) != hops(b) {
			return hops(a) < hops(b)
		}
		return latency(a) < latency(b)
	})
	if len(live) == 0 {
		return nil, errors.New("no path fits the policy")
	}
	if len(live) > max {
		live = live[:max]
	}
	return live, nil
}

// toPaths converts scionproto's paths for the data plane. A path without
// an MTU, or one too small for a 1,280-byte IPv6 packet with its SCION
// header, is refused (Path.checkMTU): another path is taken, and a
// destination with only such paths has none (ErrPathMTU says why).
func toPaths(sp []snet.Path) ([]Path, error) {
	var out []Path
	var refused []error
	for _, p := range sp {
		dp, ok := p.Dataplane().(snetpath.SCION)
		if !ok {
			continue // an empty path: the local AS needs none
		}
		nh := p.UnderlayNextHop()
		if nh == nil {
			continue
		}
		a, ok := netip.AddrFromSlice(nh.IP)
		if !ok || !a.Unmap().Is4() {
			continue
		}
		md := p.Metadata()
		path := Path{Raw: dp.Raw, NextHop: netip.AddrPortFrom(a.Unmap(), uint16(nh.Port))}
		if md != nil {
			path.MTU, path.Expiry = md.MTU, uint64(md.Expiry.Unix())
		}
		if len(path.Raw) > PathMax || len(path.Raw)%4 != 0 {
			continue
		}
		if err := path.checkMTU(); err != nil {
			refused = append(refused, fmt.Errorf("no path the translator can carry: path through %s: %w", pathInterfaces(md), err))
			continue
		}
		out = append(out, path)
	}
	if len(out) == 0 {
		if len(refused) > 0 {
			return nil, errors.Join(refused...)
		}
		return nil, errors.New("no path the translator can carry")
	}
	return out, nil
}

// pathInterfaces names a path by its interfaces, for a log line.
func pathInterfaces(md *snet.PathMetadata) string {
	if md == nil || len(md.Interfaces) == 0 {
		return "interfaces unknown"
	}
	var b strings.Builder
	for i, f := range md.Interfaces {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s#%d", f.IA, f.ID)
	}
	return b.String()
}
