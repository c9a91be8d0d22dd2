package tra

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// What `tra run --metrics` exports: the programs' counters and the maps'
// fill, read from the pins at each scrape, and the daemon's own counters
// and state, read from the running daemon. No label carries an address,
// an AS or anything else a sender picks: each takes a fixed set of values.

// Path changes, by what the daemon did to a destination's set of paths;
// each counts one destination's set changed once.
const (
	changeInstalled      = iota // a destination's first paths (a lookup for a new destination, or after it had none)
	changeRefreshed             // a refresh brought another set than the one installed
	changeFailover              // paths left for an interface down or for silence under probes; spares or a lookup replace them
	changeExpired               // paths removed at their expiry
	changeRemoved               // a destination forgotten (idle) with its paths
	changeAdopted               // paths an earlier daemon installed, taken over at start
	changeGatewayChanged        // paths written again for their first hop's new gateway (a route changed)
	changeKinds
)

var changeNames = [changeKinds]string{
	changeInstalled: "installed", changeRefreshed: "refreshed", changeFailover: "failover",
	changeExpired: "expired", changeRemoved: "removed", changeAdopted: "adopted", changeGatewayChanged: "gateway_changed",
}

// Path probes, by what became of each.
const (
	probeAnswered   = iota // answered by the probed path's end
	probeUnanswered        // no answer within probeForget
	probeSendFailed        // could not be made or sent
	probeResults
)

var probeResultNames = [probeResults]string{probeAnswered: "answered", probeUnanswered: "unanswered", probeSendFailed: "send_failed"}

// Path lookups of scionproto's daemon, by how each ended.
const (
	requestOK          = iota // paths the translator takes
	requestNoPath             // the daemon answered, with no path the policy and the translator take
	requestUnreachable        // the daemon could not be reached
	requestTimeout            // no answer within the lookup's deadline
	requestError              // any other failure
	requestResults
)

var requestResultNames = [requestResults]string{
	requestOK: "ok", requestNoPath: "no_path", requestUnreachable: "unreachable", requestTimeout: "timeout", requestError: "error",
}

// Packets the daemon held and then dropped, answering the host (within a
// rate) with ICMPv6 unreachable.
const (
	heldNoPath   = iota // no path to the destination came, or it is known to have none
	heldRefused         // a new destination the daemon's bounds had no room for (rate, queue, table, the user's share)
	heldOverflow        // past the held packets' bounds: the oldest of the destination's, or the newest
	heldDropReasons
)

var heldDropNames = [heldDropReasons]string{heldNoPath: "held_no_path", heldRefused: "held_refused", heldOverflow: "held_overflow"}

// daemonMetrics are what the daemon counts besides tra_daemon (whose
// layout the programs fix), and the state it publishes for a scrape; the
// loop writes them, a scrape reads them from another goroutine.
type daemonMetrics struct {
	changes  [changeKinds]atomic.Uint64
	probes   [probeResults]atomic.Uint64
	requests [requestResults]atomic.Uint64
	drops    [heldDropReasons]atomic.Uint64
	// State as of the loop's last step.
	paths, dests, destsNoPath, held, pending atomic.Int64
}

// publish records the daemon's state for a scrape: paths installed,
// destinations tracked or known without a path, packets held, lookups
// waiting or running. The loop calls it at each tick and lookup result
// (not per held packet: it walks the destinations).
func (d *pathDaemon) publish() {
	paths, without := 0, 0
	for _, x := range d.dests {
		paths += len(x.dp)
		if len(x.dp) == 0 {
			without++
		}
	}
	now := d.now()
	noPath := 0
	for _, until := range d.noPath {
		if now.Before(until) {
			noPath++
		}
	}
	m := &d.metrics
	m.paths.Store(int64(paths))
	m.dests.Store(int64(len(d.dests) + noPath))
	m.destsNoPath.Store(int64(without + noPath))
	m.held.Store(int64(d.heldNow))
	m.pending.Store(int64(d.inflight + len(d.urgentQ) + len(d.newQ)))
}

// changed counts a change of a destination's paths.
func (d *pathDaemon) changed(kind int) { d.metrics.changes[kind].Add(1) }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("fastpath_tra_"+name, help, append([]string{"name"}, labels...), nil)
}

var (
	descPackets = desc("packets_total",
		"Packets the translator's programs handled, each once, by direction (ip_to_scion: tra_out, the host's IPv6 made SCION; scion_to_ip: tra_in) and verdict (translated, held for a path, to_daemon, passed untranslated, dropped).",
		"direction", "verdict")
	descBytes = desc("bytes_total",
		"Bytes of the packets in fastpath_tra_packets_total, as each program saw them.", "direction", "verdict")
	descDropped = desc("dropped_pkts_total",
		"Packets dropped, by reason: a program's verdict (the packet dropped in the kernel, some answered with ICMPv6), or held_* for packets the daemon held and dropped.",
		"reason")
	descEvents = desc("events_total",
		"Events besides the verdicts: mss_clamped (a SYN's MSS lowered, the packet translated), and what the daemon did (held_sent, scmp_to_host, icmp_to_scion, interface_down, ...).",
		"event")
	descPaths       = desc("paths", "Paths installed in the data plane, over all destinations.")
	descDests       = desc("destinations", "Destination ASes the host talks to: tracked by the daemon (with paths or waiting for them) or found without a path in the last seconds.")
	descDestsNoPath = desc("destinations_without_path", "Destination ASes the host sends to that have no path: waiting for a lookup, or whose lookup found none.")
	descHeld        = desc("held_pkts", "Packets the daemon holds until a path to their destination is installed.")
	descPending     = desc("lookups_pending", "Path lookups running or waiting for their turn.")
	descChanges     = desc("path_changes_total",
		"Changes of a destination's set of paths, by kind: installed, refreshed, failover, expired, removed, adopted, gateway_changed.", "kind")
	descProbes = desc("probes_total",
		"Path probes (SCMP traceroute) sent by the daemon, by result: answered, unanswered, send_failed.", "result")
	descRequests = desc("daemon_requests_total",
		"Path lookups asked of scionproto's daemon, by result: ok, no_path, unreachable, timeout, error.", "result")
	descAttached = desc("device_attached",
		"1 for the XDP mode tra_in runs in on the device (native or generic; generic is the slow path).", "device", "mode")
	descEntries    = desc("map_entries", "Entries in a hash map of the translator's that can fill.", "map")
	descMaxEntries = desc("map_max_entries", "The size of a hash map of the translator's that can fill.", "map")
)

// Collector exports an attached translator's counters, read from its pins
// at each scrape, and those of the daemon that runs it (Watch).
type Collector struct {
	mu   sync.Mutex
	name string
	d    *pathDaemon
}

// NewCollector collects the translator name ("": the one a daemon run
// with this collector attaches).
func NewCollector(name string) *Collector { return &Collector{name: name} }

// watch has the collector read the daemon d of the translator name.
func (c *Collector) watch(name string, d *pathDaemon) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.name, c.d = name, d
}

// Describe sends every family's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descBytes, descDropped, descEvents, descPaths, descDests, descDestsNoPath,
		descHeld, descPending, descChanges, descProbes, descRequests, descAttached, descEntries, descMaxEntries} {
		ch <- d
	}
}

// Collect reads the pins and the daemon.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	name, d := c.name, c.d
	c.mu.Unlock()
	if name == "" {
		return
	}
	c.collectPins(ch, name)
	if d != nil {
		collectDaemon(ch, name, d)
	}
}

// verdictClass is the fastpath_tra_packets_total verdict of a program's
// verdict, and whether the packet was dropped; "" for counters that are
// not a packet's final verdict (mss_clamped also counts a packet
// translated; to_pair a packet tra_out gives its verdict).
func verdictClass(v Verdict) (class string, dropped bool) {
	switch v {
	case translatorTraVerdictTRA_OUT, translatorTraVerdictTRA_IN:
		return "translated", false
	case translatorTraVerdictTRA_NO_PATH:
		return "held", false
	case translatorTraVerdictTRA_SCMP_ERROR, translatorTraVerdictTRA_ICMP_ERROR, translatorTraVerdictTRA_PROBE:
		return "to_daemon", false
	case translatorTraVerdictTRA_NOT_OURS, translatorTraVerdictTRA_MULTI_BUFFER:
		return "passed", false
	case translatorTraVerdictTRA_MSS_CLAMPED, translatorTraVerdictTRA_TO_PAIR:
		return "", false
	}
	return "dropped", true
}

// daemonEvents are the tra_daemon counters exported as events; the rest
// are families of their own or are the process's (go_*, process_*).
var daemonEvents = []int{
	statHeldSent, statUnreachable, statUnreachableLimited, statLookupRefused, statOwnerLimited,
	statIfDown, statIfDownForged, statIfDownProbed, statSCMPIgnored, statSCMPToHost, statICMPToSCION,
	statBadEvent, statProbeRefused, statOffloadFixed, statReattached, statPanics, statPairMTUSet,
	statResolveFailed, statPathRefused,
}

func (c *Collector) collectPins(ch chan<- prometheus.Metric, name string) {
	p, err := OpenPinned(name)
	if errors.Is(err, ErrNotAttached) {
		return // detached: nothing to say of the data plane
	}
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descPackets, err)
		return
	}
	defer p.Close()
	out, in, err := p.DirCounts()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descPackets, err)
	} else {
		type key struct{ dir, class string }
		pkts, bytes := map[key]uint64{}, map[key]uint64{}
		drops := map[string]uint64{}
		for v := 0; v < VerdictCount; v++ {
			vn := VerdictName(Verdict(v))
			for dir, counts := range map[string]Counts{"ip_to_scion": out, "scion_to_ip": in} {
				c := counts[vn]
				class, dropped := verdictClass(Verdict(v))
				if class == "" {
					continue
				}
				pkts[key{dir, class}] += c.Packets
				bytes[key{dir, class}] += c.Bytes
				if dropped {
					drops[vn] += c.Packets
				}
			}
		}
		for _, dir := range []string{"ip_to_scion", "scion_to_ip"} {
			for _, class := range []string{"translated", "held", "to_daemon", "passed", "dropped"} {
				k := key{dir, class}
				ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(pkts[k]), name, dir, class)
				ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(bytes[k]), name, dir, class)
			}
		}
		for reason, n := range drops {
			ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(n), name, reason)
		}
		clamped := out["mss_clamped"].Packets + in["mss_clamped"].Packets
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(clamped), name, "mss_clamped")
	}
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{{"tra_dests", p.dests}, {"tra_routers", p.routers}} {
		n, err := countKeys(m.m)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descEntries, fmt.Errorf("%s: %w", m.name, err))
			continue
		}
		ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(n), name, m.name)
		ch <- prometheus.MustNewConstMetric(descMaxEntries, prometheus.GaugeValue, float64(m.m.MaxEntries()), name, m.name)
	}
	devs, err := xdp.PinnedDevices(PinDir(name))
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descAttached, err)
		return
	}
	for _, dv := range devs {
		if dv.Gone || dv.Mode == "" {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descAttached, prometheus.GaugeValue, 1, name, dv.Name, string(dv.Mode))
	}
}

// countKeys counts a hash map's keys (a key deleted while walked may
// restart the walk: the count is capped at the map's size).
func countKeys(m *ebpf.Map) (int, error) {
	key := make([]byte, m.KeySize())
	next := make([]byte, m.KeySize())
	n := 0
	var prev any // nil: the first key
	for n < int(m.MaxEntries()) {
		err := m.NextKey(prev, next)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return 0, err
		}
		n++
		copy(key, next)
		prev = key
	}
	return n, nil
}

func collectDaemon(ch chan<- prometheus.Metric, name string, d *pathDaemon) {
	m := &d.metrics
	for reason := range m.drops {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(m.drops[reason].Load()), name, heldDropNames[reason])
	}
	for _, i := range daemonEvents {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(d.stats.get(i)), name, daemonCounterNames[i])
	}
	gauge := func(desc *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v), name)
	}
	gauge(descPaths, m.paths.Load())
	gauge(descDests, m.dests.Load())
	gauge(descDestsNoPath, m.destsNoPath.Load())
	gauge(descHeld, m.held.Load())
	gauge(descPending, m.pending.Load())
	for k := range m.changes {
		ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(m.changes[k].Load()), name, changeNames[k])
	}
	for r := range m.probes {
		ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(m.probes[r].Load()), name, probeResultNames[r])
	}
	for r := range m.requests {
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(m.requests[r].Load()), name, requestResultNames[r])
	}
}
