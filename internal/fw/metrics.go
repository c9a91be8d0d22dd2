package fw

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The firewall's metrics are read from the instance's pinned maps at each
// scrape (Collector): the program's counters are the truth, and any
// process that can open the pins — fw serve, fw metrics — serves the same
// figures. Only what a serving process itself does (reloads, its gc) is
// counted in Go (ServeMetrics).

// RuleMetrics chooses which rules get series of their own
// (fastpath_fw_rule_packets_total, fastpath_fw_rule_bytes_total): two
// series a rule, and a rule set may hold 100,000 rules.
type RuleMetrics string

const (
	// RuleMetricsNone exports no per-rule series.
	RuleMetricsNone RuleMetrics = "none"
	// RuleMetricsNamed exports the rules with a name, and the default
	// policy (rule="default"): the default.
	RuleMetricsNamed RuleMetrics = "named"
	// RuleMetricsAll exports every rule, by its ID.
	RuleMetricsAll RuleMetrics = "all"
)

// ParseRuleMetrics reads a --rule-metrics value.
func ParseRuleMetrics(s string) (RuleMetrics, error) {
	switch m := RuleMetrics(strings.ToLower(s)); m {
	case RuleMetricsNone, RuleMetricsNamed, RuleMetricsAll:
		return m, nil
	case "":
		return RuleMetricsNamed, nil
	}
	return "", fmt.Errorf("--rule-metrics %q: give none, named (the rules with a name, and the default policy) or all", s)
}

// MetricsOptions configure a Collector.
type MetricsOptions struct {
	// Rules chooses the per-rule series; RuleMetricsNamed if empty.
	Rules RuleMetrics
}

// Counters by the family and label value they are exported under. Every
// counter of the program is in exactly one family.
var (
	// dropReasons are the drops, by reason: together they are
	// packets_total{verdict="drop"}.
	dropReasons = []struct{ counter, reason string }{
		{"drop_rule", "rule"}, {"drop_default", "default"}, {"drop_blocked", "blocked"},
		{"drop_rate_limit", "rate_limit"}, {"drop_malformed", "malformed"},
		{"synproxy_ack_bad", "synproxy_bad_cookie"}, {"synproxy_invalid", "synproxy_invalid"},
	}
	// passCounters count packets the rules (or the parser) passed; the
	// synproxy's answers and drops among them are taken out (synproxyOut).
	passCounters = []string{"pass_rule", "pass_default", "pass_not_ip"}
	// synproxyOut are packets a rule passed that the synproxy then
	// answered (XDP_TX) or dropped.
	synproxyOut = []string{"synproxy_syn", "synproxy_opened", "synproxy_ack_bad", "synproxy_invalid"}
	// txCounters are the synproxy's answers: a SYN/ACK for a client's
	// SYN, an ACK for the server's SYN/ACK.
	txCounters = []string{"synproxy_syn", "synproxy_opened"}
	// eventCounters are what is not a verdict.
	eventCounters = []string{"classified", "flow_replaced", "rate_limit_trips", "ct_created", "ct_promoted",
		"ct_established_table_full", "ct_source_quota", "ct_busy", "ct_tcp_ignored", "frag_without_first",
		"ct_egress", "ct_egress_invalid", "synproxy_syn", "synproxy_ack_ok", "synproxy_opened"}
)

// fillMaps are the hash and LRU maps that can fill, for map_entries and
// map_max_entries: connection tracking's tables and source shares, the
// block list, the rate limit's sources, the fragments awaited.
var fillMaps = []string{"fw_ct_est", "fw_ct_new", "fw_ct_src", "fw_blocked", "fw_rates", "fw_frags"}

// tcpStates are the TCP states ct_tcp_connections always has a series
// for (0 when none); the others appear when an entry has them.
var tcpStates = []string{"SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT", "LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2", "SYNPROXY_SYN"}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("fastpath_fw_"+name, help, append([]string{"name"}, labels...), nil)
}

var (
	descPackets = desc("packets_total", "Packets the firewall's XDP program decided, each once, by verdict: pass (to the stack, or to the program behind the firewall), drop, tx (answered by the synproxy). A few packets the synproxy refuses after a rule passed them (malformed, or of a connection that expired meanwhile) are counted as passed.", "verdict")
	descDropped = desc("dropped_pkts_total", "Packets dropped, by reason (rule, default, blocked, rate_limit, malformed, synproxy_bad_cookie, synproxy_invalid).", "reason")
	descEvents  = desc("events_total", "Events that are not verdicts: classifications, flow-table replacements, rate-limit trips, connection tracking's and the synproxy's steps.", "event")
	descCtPkts  = desc("ct_packets_total", "Packets by connection-tracking state.", "state")
	descCtLive  = desc("ct_entries", "Live tracked connections, by table (established: never evicted; embryonic: an LRU).", "table")
	descCtMax   = desc("ct_max_entries", "Room of each connection-tracking table.", "table")
	descCtExp   = desc("ct_expired_entries", "Expired connections not yet removed (fw serve's gc, fw ct gc), which still take room in their table.", "table")
	descCtTCP   = desc("ct_tcp_connections", "Live tracked TCP connections, by state (lower case, as conntrack -L names them).", "state")
	descDevice  = desc("device_attached", "1 for the XDP mode the firewall runs in on the device (native, or generic: the slow path), 0 for the other; 0 for both when the device is gone.", "device", "mode")
	descEntries = desc("map_entries", "Entries of each map that can fill.", "map")
	descMax     = desc("map_max_entries", "Room of each map that can fill.", "map")
	descRules   = desc("rules", "Rules in the running set (the default policy aside).")
	descRulePkt = desc("rule_packets_total", "Packets per rule, by the rule's identity (its name, or h: and a hash of what it matches and does; default: the default policy). Opt-in: --rule-metrics. Starts again at 0 when a rules file is installed whole.", "rule")
	descRuleB   = desc("rule_bytes_total", "Bytes per rule, by the rule's identity, as fastpath_fw_rule_packets_total.", "rule")
)

// Collector is a prometheus.Collector of one firewall instance's maps, read
// at each scrape. It opens the pins at the first scrape and again when the
// instance was made anew (a detach and an attach); until the instance
// exists its families are missing and the scrape says why.
type Collector struct {
	name string
	o    MetricsOptions

	mu sync.Mutex
	f  *Firewall
	// fixed: f was given (a test's firewall), never opened again.
	fixed bool
	// ino is the inode of the instance's fw_gen pin when f was opened.
	ino uint64
	// verdicts are the values last exported: one verdict is a difference
	// of counters read one after another, which a packet between the two
	// reads can make step back by one; exported, it never does.
	verdicts map[string]float64
}

// NewCollector collects the instance name's metrics.
func NewCollector(name string, o MetricsOptions) *Collector {
	if o.Rules == "" {
		o.Rules = RuleMetricsNamed
	}
	return &Collector{name: name, o: o, verdicts: map[string]float64{}}
}

// Collector is a Collector of this firewall (one loaded without pins, in
// tests), under the instance name given.
func (f *Firewall) Collector(name string, o MetricsOptions) *Collector {
	c := NewCollector(name, o)
	c.f, c.fixed = f, true
	return c
}

// Close releases the maps the collector opened.
func (c *Collector) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil && !c.fixed {
		c.f.Close()
		c.f = nil
	}
}

// Describe sends every family's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descDropped, descEvents, descCtPkts, descCtLive, descCtMax, descCtExp, descCtTCP,
		descDevice, descEntries, descMax, descRules, descRulePkt, descRuleB} {
		ch <- d
	}
}

// firewall is the instance's maps, opened again when its pins are new.
func (c *Collector) firewall() (*Firewall, error) {
	if c.fixed {
		return c.f, nil
	}
	ino, err := pinInode(filepath.Join(PinDir(c.name), "fw_gen"))
	if err != nil {
		if c.f != nil {
			c.f.Close()
			c.f = nil
		}
		if errors.Is(err, os.ErrNotExist) {
			known, _ := Attached()
			return nil, fmt.Errorf("firewall %q: %w (attached: %v)", c.name, ErrNotAttached, known)
		}
		return nil, err
	}
	if c.f != nil && ino == c.ino {
		return c.f, nil
	}
	if c.f != nil {
		c.f.Close()
		c.f = nil
		c.verdicts = map[string]float64{}
	}
	f, err := OpenPinned(c.name)
	if err != nil {
		return nil, err
	}
	c.f, c.ino = f, ino
	return f, nil
}

// Collect reads the maps. A part that cannot be read fails its families
// alone.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := c.firewall()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descPackets, err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{c.name}, labels...)...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{c.name}, labels...)...)
	}

	cnt, err := f.Counters()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descPackets, err)
	} else {
		c.collectCounters(cnt, counter)
		if err := c.collectConntrack(f, cnt, gauge, counter); err != nil {
			ch <- prometheus.NewInvalidMetric(descCtLive, err)
		}
	}
	if f.dir != "" {
		devs, err := xdp.PinnedDevices(f.dir)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descDevice, err)
		}
		for _, d := range devs {
			for _, m := range []xdp.Mode{xdp.Native, xdp.Generic} {
				v := 0.0
				if !d.Gone && d.Mode == m {
					v = 1
				}
				gauge(descDevice, v, deviceLabel(d.Iface), string(m))
			}
		}
	}
	for _, name := range fillMaps {
		m := f.mapNamed(name)
		if m == nil {
			continue
		}
		n, err := countEntries(m)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descEntries, fmt.Errorf("count %s: %w", name, err))
			continue
		}
		gauge(descEntries, float64(n), name)
		gauge(descMax, float64(m.MaxEntries()), name)
	}
	if err := c.collectRules(f, gauge, counter); err != nil {
		ch <- prometheus.NewInvalidMetric(descRules, err)
	}
}

// deviceLabel is a device's name, with its namespace before a colon when
// it is in a named one (as its link pin is named).
func deviceLabel(i xdp.Iface) string {
	if i.Netns == "" {
		return i.Name
	}
	return i.Netns + ":" + i.Name
}

func (c *Collector) collectCounters(cnt Counters, counter func(*prometheus.Desc, float64, ...string)) {
	sum := func(names []string) float64 {
		var v uint64
		for _, n := range names {
			v += cnt[n]
		}
		return float64(v)
	}
	var drop float64
	for _, d := range dropReasons {
		counter(descDropped, float64(cnt[d.counter]), d.reason)
		drop += float64(cnt[d.counter])
	}
	pass := sum(passCounters) - sum(synproxyOut)
	for _, v := range []struct {
		verdict string
		n       float64
	}{{"pass", pass}, {"drop", drop}, {"tx", sum(txCounters)}} {
		n := max(v.n, c.verdicts[v.verdict])
		c.verdicts[v.verdict] = n
		counter(descPackets, n, v.verdict)
	}
	for _, e := range eventCounters {
		counter(descEvents, float64(cnt[e]), e)
	}
}

func (c *Collector) collectConntrack(f *Firewall, cnt Counters, gauge, counter func(*prometheus.Desc, float64, ...string)) error {
	ct, err := f.ctStats(cnt)
	if err != nil {
		return err
	}
	for _, s := range CtStateNames() {
		counter(descCtPkts, float64(ct.Packets[s]), s)
	}
	for _, t := range []struct {
		table              string
		live, expired, max float64
	}{
		{"established", float64(ct.Established), float64(ct.EstablishedExpired), float64(ct.EstMax)},
		{"embryonic", float64(ct.Embryonic), float64(ct.EmbryonicExpired), float64(ct.EmbryoMax)},
	} {
		gauge(descCtLive, t.live, t.table)
		gauge(descCtExp, t.expired, t.table)
		gauge(descCtMax, t.max, t.table)
	}
	for _, s := range tcpStates {
		gauge(descCtTCP, float64(ct.ByState[s]), strings.ToLower(s))
	}
	for s, n := range ct.ByState {
		if !contains(tcpStates, s) {
			gauge(descCtTCP, float64(n), strings.ToLower(s))
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func (c *Collector) collectRules(f *Firewall, gauge, counter func(*prometheus.Desc, float64, ...string)) error {
	ord, err := f.order()
	if err != nil {
		return err
	}
	gauge(descRules, float64(len(ord.rules)))
	if c.o.Rules == RuleMetricsNone || ord.gen == 0 {
		return nil
	}
	// The default policy, then the rules chosen, by identity.
	want := []uint32{0}
	ids := []string{DefaultRuleID}
	slot := ord.ov.Stats
	if c.o.Rules == RuleMetricsNamed {
		// From the names alone: the rules themselves are in maps of the
		// running set that only an id opens, which takes CAP_SYS_ADMIN
		// (the service runs without it).
		names, err := f.slotNames(slot)
		if err != nil {
			return err
		}
		for _, o := range ord.rules {
			if n := names[o.id]; n != "" {
				want, ids = append(want, o.id), append(ids, n)
			}
		}
	} else {
		rs, rids, s, err := f.rules()
		if err != nil {
			return fmt.Errorf("%w (--rule-metrics all reads the rules, which takes CAP_SYS_ADMIN)", err)
		}
		slot = s
		for i, r := range rs.Rules {
			want, ids = append(want, rids[i]), append(ids, r.ID())
		}
	}
	st, err := f.ruleStats(slot, want)
	if err != nil {
		return err
	}
	// Two rules the same in every field share an identity (the second
	// never matches): their counters are summed.
	sums := map[string]RuleStats{}
	order := make([]string, 0, len(ids))
	for i, id := range ids {
		s, seen := sums[id]
		if !seen {
			order = append(order, id)
		}
		s.Packets += st[i].Packets
		s.Bytes += st[i].Bytes
		sums[id] = s
	}
	for _, id := range order {
		counter(descRulePkt, float64(sums[id].Packets), id)
		counter(descRuleB, float64(sums[id].Bytes), id)
	}
	return nil
}

// mapNamed is one of the maps fillMaps names.
func (f *Firewall) mapNamed(name string) *ebpf.Map {
	m := &f.objs.fwMaps
	return map[string]*ebpf.Map{"fw_ct_est": m.FwCtEst, "fw_ct_new": m.FwCtNew, "fw_ct_src": m.FwCtSrc,
		"fw_blocked": m.FwBlocked, "fw_rates": m.FwRates, "fw_frags": m.FwFrags}[name]
}

// countEntries counts a hash map's entries, a batch at a time (ctWalk
// says why by batches), as slices of byte arrays of the map's key and
// value sizes.
func countEntries(m *ebpf.Map) (int, error) {
	const batch = 4096
	vsize := int(m.ValueSize())
	if m.Type() == ebpf.PerCPUHash || m.Type() == ebpf.LRUCPUHash {
		vsize *= ebpf.MustPossibleCPU()
	}
	bytesOf := func(size int) any {
		return reflect.MakeSlice(reflect.SliceOf(reflect.ArrayOf(size, reflect.TypeFor[byte]())), batch, batch).Interface()
	}
	keys, vals := bytesOf(int(m.KeySize())), bytesOf(vsize)
	var cur ebpf.MapBatchCursor
	n := 0
	for {
		c, err := m.BatchLookup(&cur, keys, vals, nil)
		n += c
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// pinInode is the inode of a pin: another one is another map.
func pinInode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino, nil
	}
	return 0, nil
}
