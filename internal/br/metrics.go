package br

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/scionproto/scion/pkg/addr"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// What the router's counters mean to Prometheus. The kernel program
// counts per ingress counter slot and verdict (br_counters); a scrape
// reads them and sorts each verdict by what XDP did with the packet:
// forwarded, dropped, or passed up the stack, where the reference router
// (scionproto's) takes it and counts it in its own router_input_pkts_total.
// Labels are scionproto's router's (interfaceLabels in its router/metrics.go),
// so that one panel adds the two routers' figures.

// verdictAction is what XDP did with a packet of a verdict.
type verdictAction int

const (
	actPassed verdictAction = iota
	actForwarded
	actDropped
	// actSCMP: the slow path's, passed or dropped as scmp says.
	actSCMP
	// actNotSCION: not for the router's sockets; offered to the plain-IP
	// forwarder or the kernel, never the reference router's.
	actNotSCION
)

// verdictActions are the verdicts that are not passed (what br.c returns
// with them); every other verdict passes the packet up.
var verdictActions = map[Verdict]verdictAction{
	routerBrVerdictBR_FORWARDED:         actForwarded,
	routerBrVerdictBR_PARSE_ERROR:       actDropped,
	routerBrVerdictBR_UNDERLAY_MISMATCH: actDropped,
	routerBrVerdictBR_FIB_DROP:          actDropped,
	routerBrVerdictBR_BAD_CHECKSUM:      actDropped,
	routerBrVerdictBR_UNKNOWN_L4:        actDropped,
	routerBrVerdictBR_TX_FAILED:         actDropped,
	routerBrVerdictBR_NO_INTERFACE:      actSCMP,
	routerBrVerdictBR_INVALID_MAC:       actSCMP,
	routerBrVerdictBR_EXPIRED:           actSCMP,
	routerBrVerdictBR_LINK_TYPE:         actSCMP,
	routerBrVerdictBR_INGRESS_MISMATCH:  actSCMP,
	routerBrVerdictBR_BAD_LENGTH:        actSCMP,
	routerBrVerdictBR_BAD_SRC_IA:        actSCMP,
	routerBrVerdictBR_BAD_DST_IA:        actSCMP,
	routerBrVerdictBR_BAD_HOST_ADDR:     actSCMP,
	routerBrVerdictBR_NOT_SCION:         actNotSCION,
}

// Interface labels as scionproto's router writes them: the interface ID
// in decimal, or "internal"; the unmatched slot (a packet that matched
// none of the router's sockets) is "unmatched", with the zero ISD-AS
// scionproto writes for a neighbour it does not know.
const (
	labelInternal  = "internal"
	labelUnmatched = "unmatched"
)

var (
	ifLabels   = []string{"name", "isd_as", "interface", "neighbor_isd_as"}
	withReason = append(ifLabels[:len(ifLabels):len(ifLabels)], "reason")

	descInputPkts = prometheus.NewDesc("fastpath_br_input_pkts_total",
		"SCION packets the XDP border router handled itself (forwarded or dropped in XDP), by ingress interface; those passed up are counted by the reference router's router_input_pkts_total.", ifLabels, nil)
	descInputBytes = prometheus.NewDesc("fastpath_br_input_bytes_total",
		"Bytes (Ethernet frames) of fastpath_br_input_pkts_total.", ifLabels, nil)
	descOutputPkts = prometheus.NewDesc("fastpath_br_output_pkts_total",
		"SCION packets the XDP border router forwarded, by the interface they arrived on (not the one they left by).", ifLabels, nil)
	descOutputBytes = prometheus.NewDesc("fastpath_br_output_bytes_total",
		"Bytes (Ethernet frames, as they arrived) of fastpath_br_output_pkts_total.", ifLabels, nil)
	descDropped = prometheus.NewDesc("fastpath_br_dropped_pkts_total",
		"SCION packets the XDP border router dropped, by ingress interface and reason (its verdict).", withReason, nil)
	descPassed = prometheus.NewDesc("fastpath_br_passed_pkts_total",
		"SCION packets the XDP border router passed up the stack to the reference router, by ingress interface and reason (its verdict).", withReason, nil)
	descNotSCION = prometheus.NewDesc("fastpath_br_not_scion_pkts_total",
		"Packets that were not SCION for one of the router's sockets: left to the plain-IP forwarder (fastpath_br_ip_pkts_total) or the kernel.", ifLabels, nil)
	descIPPkts = prometheus.NewDesc("fastpath_br_ip_pkts_total",
		"Plain IP packets the border router's forwarder handled, by verdict (forwarded in XDP; every other verdict is passed to the kernel).", []string{"name", "verdict"}, nil)
	descIPBytes = prometheus.NewDesc("fastpath_br_ip_bytes_total",
		"Bytes (Ethernet frames) of fastpath_br_ip_pkts_total.", []string{"name", "verdict"}, nil)
	descAttached = prometheus.NewDesc("fastpath_br_device_attached",
		"1 for the XDP mode the router runs in on the device (native, or generic: the slow path).", []string{"name", "device", "mode"}, nil)
	descReady = prometheus.NewDesc("fastpath_br_device_ready",
		"1 when what leaves by the device is forwarded in XDP, 0 when it falls back to the reference router (br serve's keeper's view).", []string{"name", "device"}, nil)
	descMapEntries = prometheus.NewDesc("fastpath_br_map_entries",
		"Entries in the router's hash maps that can fill.", []string{"name", "map"}, nil)
	descMapMax = prometheus.NewDesc("fastpath_br_map_max_entries",
		"The size of the router's hash maps that can fill.", []string{"name", "map"}, nil)
)

// fillableMaps are the router's hash maps that can fill: sockets (one per
// interface of this router and its siblings), the host's addresses, the
// devices beyond br_devs' direct slots, and the devices frames leave by.
var fillableMaps = []string{"br_sockets", "br_local_addrs", "br_devs_more", "br_tx_ports"}

// MetricsOptions configure NewCollector.
type MetricsOptions struct {
	// Name is the router whose pinned maps are read; empty: every router
	// attached at the time of the scrape.
	Name string
	// Ready, if set, is the keeper's view of the devices frames leave by:
	// device → forwarded in XDP (fastpath_br_device_ready).
	Ready func() map[string]bool
}

// Collector is a prometheus.Collector of attached routers' counters and
// state, read from their pinned maps at each scrape: nothing is mirrored
// in Go, and a scrape sees what the kernel counted until then.
type Collector struct{ o MetricsOptions }

// NewCollector makes a Collector.
func NewCollector(o MetricsOptions) *Collector { return &Collector{o: o} }

// Describe sends the descriptors of every family.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInputPkts, descInputBytes, descOutputPkts, descOutputBytes, descDropped, descPassed, descNotSCION, descIPPkts, descIPBytes, descAttached, descReady, descMapEntries, descMapMax} {
		ch <- d
	}
}

// Collect reads the maps. A router that is not attached (yet: br serve
// waits for a late device) has no series; a map that cannot be read
// fails the scrape's families of that router alone.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	names := []string{c.o.Name}
	if c.o.Name == "" {
		var err error
		if names, err = Attached(); err != nil {
			ch <- prometheus.NewInvalidMetric(descInputPkts, err)
			return
		}
	}
	for _, name := range names {
		if err := c.collect(ch, name); err != nil && !errors.Is(err, ErrNotAttached) {
			ch <- prometheus.NewInvalidMetric(descInputPkts, fmt.Errorf("router %s: %w", name, err))
		}
	}
	if c.o.Ready != nil && c.o.Name != "" {
		for dev, ok := range c.o.Ready() {
			v := 0.0
			if ok {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, v, c.o.Name, dev)
		}
	}
}

func (c *Collector) collect(ch chan<- prometheus.Metric, name string) error {
	p, err := OpenPinned(name)
	if err != nil {
		return err
	}
	defer p.Close()
	dir := PinDir(name)
	conf, err := ebpf.LoadPinnedMap(filepath.Join(dir, "br_conf"), nil)
	if err != nil {
		return err
	}
	defer conf.Close()
	var cfg routerBrConfig
	if err := conf.Lookup(uint32(0), &cfg); err != nil {
		return fmt.Errorf("read br_conf: %w", err)
	}
	local := iaOf(cfg.LocalIa)
	scmp := actPassed
	if cfg.ScmpAction == 1 {
		scmp = actDropped
	}
	slots, err := p.Slots()
	if err != nil {
		return fmt.Errorf("read br_sockets: %w", err)
	}
	neighbors, err := neighborIAs(dir, slots)
	if err != nil {
		return err
	}
	counts, err := p.ReadCounters()
	if err != nil {
		return fmt.Errorf("read br_counters: %w", err)
	}
	for slot, ifid := range slots {
		if slot < 0 || slot >= maxSlots {
			continue
		}
		labels := []string{name, local.String(), "", ""}
		switch ifid {
		case 0:
			labels[2], labels[3] = labelInternal, local.String()
		case -1:
			labels[2], labels[3] = labelUnmatched, addr.IA(0).String()
		default:
			labels[2], labels[3] = strconv.Itoa(ifid), neighbors[ifid].String()
		}
		var in, out Stat
		var notSCION uint64
		for v := range VerdictCount {
			s := counts[slot][v]
			act, ok := verdictActions[Verdict(v)]
			if !ok {
				act = actPassed
			}
			if act == actSCMP {
				act = scmp
			}
			reason := append(labels[:4:4], VerdictName(Verdict(v)))
			switch act {
			case actForwarded:
				out.Packets += s.Packets
				out.Bytes += s.Bytes
				in.Packets += s.Packets
				in.Bytes += s.Bytes
			case actDropped:
				in.Packets += s.Packets
				in.Bytes += s.Bytes
				if s.Packets > 0 {
					ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.Packets), reason...)
				}
			case actPassed:
				if s.Packets > 0 {
					ch <- prometheus.MustNewConstMetric(descPassed, prometheus.CounterValue, float64(s.Packets), reason...)
				}
			case actNotSCION:
				notSCION += s.Packets
			}
		}
		// The unmatched slot's series are there only when it counted:
		// scionproto has no such interface.
		if ifid == -1 && in.Packets == 0 && notSCION == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descInputPkts, prometheus.CounterValue, float64(in.Packets), labels...)
		ch <- prometheus.MustNewConstMetric(descInputBytes, prometheus.CounterValue, float64(in.Bytes), labels...)
		ch <- prometheus.MustNewConstMetric(descOutputPkts, prometheus.CounterValue, float64(out.Packets), labels...)
		ch <- prometheus.MustNewConstMetric(descOutputBytes, prometheus.CounterValue, float64(out.Bytes), labels...)
		ch <- prometheus.MustNewConstMetric(descNotSCION, prometheus.CounterValue, float64(notSCION), labels...)
	}
	if p.IPCounters != nil {
		ip, err := readIPCounters(p.IPCounters)
		if err != nil {
			return err
		}
		for v, s := range ip {
			ch <- prometheus.MustNewConstMetric(descIPPkts, prometheus.CounterValue, float64(s.Packets), name, v)
			ch <- prometheus.MustNewConstMetric(descIPBytes, prometheus.CounterValue, float64(s.Bytes), name, v)
		}
	}
	devs, err := xdp.PinnedDevices(dir)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if d.Gone || d.Mode == "" {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descAttached, prometheus.GaugeValue, 1, name, d.Name, string(d.Mode))
	}
	for _, m := range fillableMaps {
		pin := filepath.Join(dir, m)
		if _, err := os.Stat(pin); err != nil {
			continue // a router attached by a fastpath that had no such map
		}
		n, max, err := mapFill(pin)
		if err != nil {
			return err
		}
		ch <- prometheus.MustNewConstMetric(descMapEntries, prometheus.GaugeValue, float64(n), name, m)
		ch <- prometheus.MustNewConstMetric(descMapMax, prometheus.GaugeValue, float64(max), name, m)
	}
	return nil
}

// iaOf reads an ISD-AS in network byte order, as the maps hold it.
func iaOf(be uint64) addr.IA {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], be)
	return addr.IA(binary.BigEndian.Uint64(b[:]))
}

// neighborIAs are the ISD-ASes across the external interfaces the counter
// slots count (br_ifaces).
func neighborIAs(dir string, slots map[int]int) (map[int]addr.IA, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "br_ifaces"), nil)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	out := map[int]addr.IA{}
	for _, ifid := range slots {
		if ifid <= 0 {
			continue
		}
		var v routerBrIface
		if err := m.Lookup(uint32(ifid), &v); err != nil {
			return nil, fmt.Errorf("read br_ifaces: %w", err)
		}
		out[ifid] = iaOf(v.NeighborIa)
	}
	return out, nil
}

// mapFill counts a pinned hash map's entries by walking its keys (no
// value is read: a devmap's are not for userspace), and says its size.
func mapFill(pin string) (n, max int, err error) {
	m, err := ebpf.LoadPinnedMap(pin, nil)
	if err != nil {
		return 0, 0, err
	}
	defer m.Close()
	key := make([]byte, m.KeySize())
	next := make([]byte, m.KeySize())
	var cur any // nil: the first key
	for n <= int(m.MaxEntries()) {
		if err := m.NextKey(cur, next); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			}
			return 0, 0, fmt.Errorf("%s: %w", filepath.Base(pin), err)
		}
		n++
		copy(key, next)
		cur = key
	}
	return n, int(m.MaxEntries()), nil
}
