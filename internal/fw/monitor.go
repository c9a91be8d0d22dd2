package fw

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Block drops a flow until the duration passes (0: until Unblock). Blocking
// a blocked flow again sets its new expiry and keeps its counters.
func (f *Firewall) Block(fl Flow, d time.Duration) error {
	if err := fl.Validate(); err != nil {
		return err
	}
	if d < 0 {
		return fmt.Errorf("block duration %s is negative", d)
	}
	var b fwFwBlock
	k := fl.key()
	if err := f.objs.FwBlocked.Lookup(k, &b); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("read block of %s: %w", fl, err)
	}
	b.ExpiresNs = 0
	if d > 0 {
		b.ExpiresNs = monotonic() + uint64(d.Nanoseconds())
	}
	if err := f.objs.FwBlocked.Put(k, b); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("block %s: the block list is full (%d flows): unblock some first", fl, f.objs.FwBlocked.MaxEntries())
		}
		return fmt.Errorf("block %s: %w", fl, err)
	}
	return f.countBlocked()
}

// countBlocked tells the data path how many flows are blocked; with none it
// skips the lookup.
func (f *Firewall) countBlocked() error {
	var (
		k fwFwFlowKey
		v fwFwBlock
		n uint32
	)
	it := f.objs.FwBlocked.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("count the block list: %w", err)
	}
	return f.updateConfig(func(c *fwFwConfig) { c.Blocked = n })
}

// Unblock removes a flow from the block list.
func (f *Firewall) Unblock(fl Flow) error {
	if err := fl.Validate(); err != nil {
		return err
	}
	if err := f.objs.FwBlocked.Delete(fl.key()); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("flow %s is not blocked", fl)
		}
		return fmt.Errorf("unblock %s: %w", fl, err)
	}
	return f.countBlocked()
}

// BlockedFlow is an entry of the block list.
type BlockedFlow struct {
	Flow    Flow      `json:"flow"`
	Expires time.Time `json:"expires,omitzero"`
	Packets uint64    `json:"packets"`
	Bytes   uint64    `json:"bytes"`
}

// Blocked lists the block list, removing entries that have expired.
func (f *Firewall) Blocked() ([]BlockedFlow, error) {
	var (
		k   fwFwFlowKey
		v   fwFwBlock
		out []BlockedFlow
		old []fwFwFlowKey
	)
	now := monotonic()
	it := f.objs.FwBlocked.Iterate()
	for it.Next(&k, &v) {
		if v.ExpiresNs != 0 && v.ExpiresNs <= now {
			old = append(old, k)
			continue
		}
		out = append(out, BlockedFlow{Flow: flowFromKey(k), Expires: wallTime(v.ExpiresNs), Packets: v.Packets, Bytes: v.Bytes})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the block list: %w", err)
	}
	for _, k := range old {
		_ = f.objs.FwBlocked.Delete(k)
	}
	if len(old) > 0 {
		if err := f.countBlocked(); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Flow.String() < out[j].Flow.String() })
	return out, nil
}

// FlowStats is a flow table entry.
type FlowStats struct {
	Flow      Flow      `json:"flow"`
	Packets   uint64    `json:"packets"`
	Bytes     uint64    `json:"bytes"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Rule is the rule that decided the flow (0: the default policy), as of
	// its last packet; Action what it did.
	Rule   uint32 `json:"rule"`
	Action Action `json:"action"`
	// Current says the verdict is from the active rule set.
	Current bool `json:"current"`
}

// Flows reads the flow tables of every CPU: the flows that came back (a
// flow takes a way at its second packet and counts from there). A flow
// seen on several CPUs is one entry: its counters summed, its verdict the
// latest.
func (f *Firewall) Flows() ([]FlowStats, error) {
	ord, err := f.order()
	if err != nil {
		return nil, err
	}
	gen := ord.gen
	// Verdicts hold rule ids; a rule's number is its position, which is
	// its id until fw add or fw del changed the set.
	number := func(id uint32) uint32 { return id }
	if ord.ov.Nadded > 0 || len(ord.rules) != int(ord.ov.Nbase) {
		pos := make(map[uint32]uint32, len(ord.rules))
		for i, r := range ord.rules {
			pos[r.id] = uint32(i + 1)
		}
		number = func(id uint32) uint32 { return pos[id] }
	}
	byFlow := map[Flow]int{}
	var out []FlowStats
	add := func(fl Flow, v fwFwFlow) {
		if v.Packets == 0 {
			return
		}
		s := FlowStats{
			Flow: fl, Packets: v.Packets, Bytes: v.Bytes,
			FirstSeen: wallTime(v.FirstNs), LastSeen: wallTime(v.LastNs),
			Rule: number(uint32(v.Verdict) >> actBits), Action: Action(v.Verdict & actMask), Current: uint32(v.Verdict>>32) == gen,
		}
		i, ok := byFlow[fl]
		if !ok {
			byFlow[fl] = len(out)
			out = append(out, s)
			return
		}
		o := &out[i]
		o.Packets += s.Packets
		o.Bytes += s.Bytes
		if s.FirstSeen.Before(o.FirstSeen) {
			o.FirstSeen = s.FirstSeen
		}
		if s.LastSeen.After(o.LastSeen) {
			o.LastSeen, o.Rule, o.Action, o.Current = s.LastSeen, s.Rule, s.Action, s.Current
		}
	}
	sets, err := readArray[fwFwFlowSet](f.objs.FwFlows, int(f.objs.FwFlows.MaxEntries()))
	if err != nil {
		return nil, fmt.Errorf("read the flow table: %w", err)
	}
	for _, set := range sets {
		for _, w := range set.Way {
			add(flowFromKey(w.Key), w.F)
		}
	}
	return out, nil
}

// TopFlow is a flow's rate between two reads of the flow table.
type TopFlow struct {
	FlowStats
	PPS float64 `json:"pps"`
	BPS float64 `json:"bps"`
}

// Top returns the n busiest flows of the interval between two flow-table
// reads, by packets per second. A flow that was new in the interval counts
// from zero.
func Top(before, after []FlowStats, interval time.Duration, n int) []TopFlow {
	prev := make(map[Flow]FlowStats, len(before))
	for _, f := range before {
		prev[f.Flow] = f
	}
	secs := interval.Seconds()
	var out []TopFlow
	for _, f := range after {
		p := prev[f.Flow]
		if f.Packets < p.Packets { // evicted and re-added meanwhile
			p = FlowStats{}
		}
		dp, db := f.Packets-p.Packets, f.Bytes-p.Bytes
		if dp == 0 {
			continue
		}
		out = append(out, TopFlow{FlowStats: f, PPS: float64(dp) / secs, BPS: float64(db) * 8 / secs})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PPS != out[j].PPS {
			return out[i].PPS > out[j].PPS
		}
		return out[i].Flow.String() < out[j].Flow.String()
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// RateSource is a source the rate limiter tracks.
type RateSource struct {
	Src          netip.Addr `json:"src"`
	BlockedUntil time.Time  `json:"blocked_until,omitzero"`
	Trips        uint32     `json:"trips"`
	Dropped      uint64     `json:"dropped"`
}

// RateSources lists the sources with rate-limit state that were ever
// blocked.
func (f *Firewall) RateSources() ([]RateSource, error) {
	var (
		k   [4]uint32
		v   fwFwRate
		out []RateSource
	)
	now := monotonic()
	it := f.objs.FwRates.Iterate()
	for it.Next(&k, &v) {
		if v.Trips == 0 {
			continue
		}
		s := RateSource{Src: netip.AddrFrom16(unwords(k)).Unmap(), Trips: v.Trips, Dropped: v.Dropped}
		if v.BlockedUntil > now {
			s.BlockedUntil = wallTime(v.BlockedUntil)
		}
		out = append(out, s)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the rate-limit table: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Src.Less(out[j].Src) })
	return out, nil
}
