package fw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fastpath-dev/fastpath/internal/monitor"
)

// monReasonSynproxy is FW_MON_SYNPROXY (fw_shared.h): a frame the
// synproxy dropped or passed; its synproxy_* counters say why.
const monReasonSynproxy = 1000

// OpenMonitor opens the monitor ring (fw_mon_ring) of an attached firewall:
// the frames it drops or passes, while the monitor's lease lasts.
func OpenMonitor(name string) (monitor.Source, error) {
	dir := PinDir(name)
	ms, closeAll, err := monitor.OpenPinned(dir, "fw_mon_ctl", "fw_mon_ring", "fw_mon_buf")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(filepath.Join(dir, "fw_gen")); serr != nil {
				return nil, fmt.Errorf("firewall %q: %w", name, ErrNotAttached)
			}
			return nil, fmt.Errorf("firewall %q was attached by a fastpath without the monitor: attach it again (fw attach or a restart of fw serve)", name)
		}
		return nil, fmt.Errorf("firewall %q: %w", name, err)
	}
	ctl, ring, buf := ms[0], ms[1], ms[2]
	if buf.ValueSize() != uint32(binary.Size(fwMonBuf{})) {
		closeAll()
		return nil, fmt.Errorf("firewall %q: its monitor ring is of another fastpath (fw_mon_buf of %d bytes): attach it again", name, buf.ValueSize())
	}
	return monitor.NewRing(monitor.RingConfig{
		Function: "fw", Name: name, Dir: dir, Ring: ring,
		SetCtl: func(until uint64, flags, snaplen uint32) error {
			return ctl.Put(uint32(0), fwMonCtl{Until: until, Flags: flags, Snaplen: snaplen})
		},
		Lost: func() (uint64, error) {
			var vals []fwMonBuf
			if err := buf.Lookup(uint32(0), &vals); err != nil {
				return 0, fmt.Errorf("read fw_mon_buf: %w", err)
			}
			var n uint64
			for _, v := range vals {
				n += v.Lost
			}
			return n, nil
		},
		Decode: (&ruleIdentities{name: name}).decode,
		Close:  closeAll,
	})
}

// ruleIdentities names the rule of an event as the metrics and fw rules
// do (its name, else h:HASH) rather than by the kernel's id for it, which
// means nothing to an operator and moves when rules are added. The table
// is read again when an event names a rule it does not know (the rules
// changed), at most once a second.
type ruleIdentities struct {
	name string
	ids  map[uint32]string
	read time.Time
}

func (r *ruleIdentities) identity(id uint32) string {
	if id == 0 {
		return "default"
	}
	if s, ok := r.ids[id]; ok {
		return s
	}
	if time.Since(r.read) >= time.Second {
		r.read = time.Now()
		if ids, err := RuleIdentities(r.name); err == nil {
			r.ids = ids
		}
		if s, ok := r.ids[id]; ok {
			return s
		}
	}
	return fmt.Sprintf("id:%d", id)
}

// RuleIdentities maps the kernel's ids of an attached firewall's rules to
// the rules' identities (Rule.ID).
func RuleIdentities(name string) (map[uint32]string, error) {
	f, err := OpenPinned(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rs, ids, _, err := f.rules()
	if err != nil {
		return nil, err
	}
	m := make(map[uint32]string, len(ids))
	for i, id := range ids {
		if i < len(rs.Rules) {
			m[id] = rs.Rules[i].ID()
		}
	}
	return m, nil
}

func (r *ruleIdentities) decode(rec []byte) (monitor.Raw, bool) {
	raw, aux, ok := decodeMonitorEvent(rec)
	switch raw.Reason {
	case "drop_rule", "pass_rule", "drop_default", "pass_default", "synproxy":
		// Only these went through the rules: the others' id is 0 for
		// no rule, not for the default policy.
		raw.Rule = r.identity(aux)
	}
	return raw, ok
}

// decodeMonitorEvent reads one record of fw_mon_ring: a struct mon_event
// and the kept bytes of the frame, and the kernel's id of the rule.
func decodeMonitorEvent(rec []byte) (monitor.Raw, uint32, bool) {
	var b fwMonBuf
	n, err := binary.Decode(rec, binary.NativeEndian, &b.Ev)
	if err != nil || int(b.Ev.Cap) > len(rec)-n {
		return monitor.Raw{}, 0, false
	}
	ev := b.Ev
	return monitor.Raw{
		Mono: ev.TsNs, Ifindex: ev.Ifindex, Len: int(ev.Len),
		Verdict: monitor.XDPVerdict(ev.Action), Reason: MonitorReason(ev.Reason),
		Data: append([]byte(nil), rec[n:n+int(ev.Cap)]...),
	}, ev.Aux, true
}

// MonitorReason names a reason of fw_mon_ring's events as the counters do.
func MonitorReason(r uint32) string {
	if r == monReasonSynproxy {
		return "synproxy"
	}
	if n, ok := counterNames[fwFwCounter(r)]; ok {
		return n
	}
	return fmt.Sprintf("reason_%d", r)
}
