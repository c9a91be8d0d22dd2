package fw

import (
	"errors"
	"fmt"
	"slices"
)

// fw add and fw del change the running set through its overlay (see struct
// fw_overlay): a deleted rule's bit is set, an added rule joins the added
// list with a prio between its neighbours'. Only the overlay is written,
// so a change costs the same on 100 rules as on 100,000, and it becomes
// active with the same single write as a whole set. When the overlay is
// full (FW_MAX_ADDED added rules, or no prio left between two
// neighbours), the set is installed whole instead.

// ordered is one rule of the running set, in rule order.
type ordered struct {
	id, prio uint32
	added    bool
	kernel   fwFwRule // the rule, for added ones
}

// ordering is the running set's rules in order, from the overlay alone:
// the installed set's rules are ids 1 to nbase at prio id << prioShift.
type ordering struct {
	gen   uint32
	ov    fwFwOverlay
	rules []ordered
	added []fwFwRule
	dead  []uint64
}

func (f *Firewall) order() (*ordering, error) {
	gen, ov, err := f.overlay()
	if err != nil {
		return nil, err
	}
	o := &ordering{gen: gen, ov: ov}
	if gen == 0 {
		return o, nil
	}
	slot := gen & 1
	if ov.Nadded > 0 {
		keys := make([]uint32, ov.Nadded)
		o.added = make([]fwFwRule, ov.Nadded)
		for i := range keys {
			keys[i] = slot*maxAdded + uint32(i)
		}
		for i, k := range keys {
			if err := f.objs.FwAdded.Lookup(k, &o.added[i]); err != nil {
				return nil, fmt.Errorf("read the added rules: %w", err)
			}
		}
	}
	o.dead = make([]uint64, deadWords)
	for i := range usedWords(ov.Nbase) {
		if err := f.objs.FwDead.Lookup(slot*deadWords+uint32(i), &o.dead[i]); err != nil {
			return nil, fmt.Errorf("read the deleted rules: %w", err)
		}
	}
	o.rules = make([]ordered, 0, int(ov.Nbase)+len(o.added))
	// An heir (see Delete) is an added rule with an id of the installed set.
	heirs := map[uint32]bool{}
	for _, k := range o.added {
		if k.Id <= ov.Nbase {
			heirs[k.Id] = true
		}
	}
	a := 0
	for id := uint32(1); id <= ov.Nbase; id++ {
		prio := id << prioShift
		for ; a < len(o.added) && o.added[a].Prio < prio; a++ {
			o.rules = append(o.rules, ordered{id: o.added[a].Id, prio: o.added[a].Prio, added: true, kernel: o.added[a]})
		}
		if o.dead[id/64]&(1<<(id%64)) == 0 && !heirs[id] {
			o.rules = append(o.rules, ordered{id: id, prio: prio})
		}
	}
	for ; a < len(o.added); a++ {
		o.rules = append(o.rules, ordered{id: o.added[a].Id, prio: o.added[a].Prio, added: true, kernel: o.added[a]})
	}
	return o, nil
}

// Len is the number of rules in the running set.
func (f *Firewall) Len() (int, error) {
	o, err := f.order()
	if err != nil {
		return 0, err
	}
	return len(o.rules), nil
}

// lockedOrder takes the install lock and reads the running set's order.
func (f *Firewall) lockedOrder() (*ordering, func(), error) {
	unlock, err := f.lock()
	if err != nil {
		return nil, nil, err
	}
	o, err := f.order()
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return o, unlock, nil
}

// errRebuild says a change does not fit the overlay.
var errRebuild = errors.New("the overlay is full")

// Insert adds a rule at position at (1 is first; len+1 appends).
func (f *Firewall) Insert(at int, r Rule) error {
	one := &RuleSet{Rules: []Rule{r}}
	if err := one.Validate(); err != nil {
		return err
	}
	r = one.Rules[0]
	o, unlock, err := f.lockedOrder()
	if err != nil {
		return err
	}
	defer unlock()
	if at < 1 || at > len(o.rules)+1 {
		return fmt.Errorf("position %d: the set has %d rules, use 1 to %d", at, len(o.rules), len(o.rules)+1)
	}
	if r.Name != "" {
		// Names are unique in a set: they name the rules' series.
		rs, _, _, err := f.rules()
		if err != nil {
			return err
		}
		for i, have := range rs.Rules {
			if have.Name == r.Name {
				return fmt.Errorf("%w: rule name %q is rule %d's already: give the new rule its own", ErrInvalid, r.Name, i+1)
			}
		}
	}
	// A rule on ct states needs tracking on before it is active.
	if r.CtState != 0 || r.Action == Synproxy {
		if err := f.ensureConntrack(); err != nil {
			return err
		}
	}
	err = f.insert(o, at, r)
	if errors.Is(err, errRebuild) {
		return f.rebuild(func(rs *RuleSet) error {
			rs.Rules = slices.Insert(rs.Rules, at-1, r)
			return nil
		})
	}
	return err
}

func (f *Firewall) insert(o *ordering, at int, r Rule) error {
	if o.gen == 0 || len(o.added) >= maxAdded || o.ov.NextId >= 1<<statsSlotShift {
		return errRebuild
	}
	lo, hi := uint32(0), uint32(0xffffffff)
	if at > 1 {
		lo = o.rules[at-2].prio
	}
	if at <= len(o.rules) {
		hi = o.rules[at-1].prio
	}
	if hi-lo < 2 {
		return errRebuild
	}
	k := kernelRule(r, o.ov.NextId)
	k.Prio = lo + (hi-lo)/2
	// Its counters start at zero, and its name is there, before any
	// packet can find it.
	if err := f.resetStats(o.ov.Stats, int(k.Id), 1); err != nil {
		return err
	}
	if err := f.writeNames(o.ov.Stats, false, []uint32{k.Id}, []Rule{r}); err != nil {
		return err
	}
	i, _ := slices.BinarySearchFunc(o.added, k.Prio, func(a fwFwRule, p uint32) int { return int(int64(a.Prio) - int64(p)) })
	added := slices.Insert(slices.Clone(o.added), i, k)
	ov := o.ov
	ov.NextId++
	return f.activate(o.gen, ov, added, o.dead[:usedWords(ov.Nbase)])
}

// usedWords is the words of the dead bitmap that ids 1 to n use.
func usedWords(n uint32) int { return int(n/64) + 1 }

// Delete removes the rules at the given positions (1 is first).
func (f *Firewall) Delete(positions ...int) error {
	o, unlock, err := f.lockedOrder()
	if err != nil {
		return err
	}
	defer unlock()
	del := map[int]bool{}
	for _, p := range positions {
		if p < 1 || p > len(o.rules) {
			return fmt.Errorf("rule %d: the set has rules 1 to %d", p, len(o.rules))
		}
		del[p-1] = true
	}
	dead := slices.Clone(o.dead[:usedWords(o.ov.Nbase)])
	isDead := func(id uint32) bool { return id <= o.ov.Nbase && dead[id/64]&(1<<(id%64)) != 0 }
	var added []fwFwRule
	// Where to look for a rule's heir: from an added rule's next repeat,
	// from a deleted rule of the installed set if the indexes held it.
	type heir struct {
		id   uint32
		head bool
	}
	var heirs []heir
	for i, r := range o.rules {
		switch {
		case r.added && !del[i]:
			added = append(added, r.kernel)
		case r.added && del[i]:
			if r.id <= o.ov.Nbase {
				dead[r.id/64] |= 1 << (r.id % 64) // an heir of the installed set
			}
			heirs = append(heirs, heir{r.kernel.DupNext, false})
		case !r.added && del[i]:
			dead[r.id/64] |= 1 << (r.id % 64)
			heirs = append(heirs, heir{r.id, true})
		}
	}
	// A deleted rule that the indexes held leaves its place to the next
	// live rule that repeats its fields, which no index holds: it joins the
	// added rules with its own id and prio.
	if len(heirs) > 0 {
		ms, _, err := f.activeSlot("fw_rule_slots")
		if err != nil {
			return err
		}
		defer closeAll(ms)
		read := func(id uint32) (fwFwRule, error) {
			var k fwFwRule
			err := ms["fw_rule_slots"].Lookup(id, &k)
			return k, err
		}
		have := map[uint32]bool{}
		for _, a := range added {
			have[a.Id] = true
		}
		for _, h := range heirs {
			id := h.id
			if h.head {
				k, err := read(id)
				if err != nil {
					return fmt.Errorf("read rule %d: %w", id, err)
				}
				if k.Flags&ruleFlagDup != 0 {
					continue // a repeat itself: no index held it
				}
				id = k.DupNext
			}
			for id != 0 && id <= o.ov.Nbase {
				k, err := read(id)
				if err != nil {
					return fmt.Errorf("read rule %d: %w", id, err)
				}
				if !isDead(id) && !have[id] {
					added = append(added, k)
					have[id] = true
					break
				}
				id = k.DupNext
			}
		}
		slices.SortFunc(added, func(a, b fwFwRule) int { return int(int64(a.Prio) - int64(b.Prio)) })
		if len(added) > maxAdded {
			return f.rebuild(func(rs *RuleSet) error {
				var keep []Rule
				for i, r := range rs.Rules {
					if !del[i] {
						keep = append(keep, r)
					}
				}
				rs.Rules = keep
				return nil
			})
		}
	}
	return f.activate(o.gen, o.ov, added, dead)
}

// rebuild installs the running set whole after a change.
func (f *Firewall) rebuild(change func(*RuleSet) error) error {
	rs, err := f.Rules()
	if err != nil {
		return err
	}
	if err := change(rs); err != nil {
		return err
	}
	if err := rs.Validate(); err != nil {
		return err
	}
	return f.install(compile(rs), rs)
}
