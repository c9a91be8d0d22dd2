package br

import (
	"fmt"

	"github.com/cilium/ebpf"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stat is one interface's count of one verdict.
type Stat struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// IPInterface is the name `br stats` shows the plain-IP forwarder's
// counters under, beside the SCION interfaces.
const IPInterface = "ip"

// ipVerdictNames name enum br_ip_verdict's counters.
var ipVerdictNames = map[routerBrIpVerdict]string{
	routerBrIpVerdictBR_IP_FORWARDED:    "forwarded",
	routerBrIpVerdictBR_IP_LOCAL:        "local",
	routerBrIpVerdictBR_IP_NO_ROUTE:     "no_route",
	routerBrIpVerdictBR_IP_HOP_LIMIT:    "hop_limit",
	routerBrIpVerdictBR_IP_TOO_BIG:      "too_big",
	routerBrIpVerdictBR_IP_NOT_READY:    "not_ready",
	routerBrIpVerdictBR_IP_FWD_DISABLED: "fwd_disabled",
	routerBrIpVerdictBR_IP_OTHER:        "other",
	routerBrIpVerdictBR_IP_NOT_HOST:     "not_host",
	routerBrIpVerdictBR_IP_BAD_HEADER:   "bad_header",
	routerBrIpVerdictBR_IP_MARTIAN:      "martian",
	routerBrIpVerdictBR_IP_REVERSE_PATH: "reverse_path",
	routerBrIpVerdictBR_IP_EXTERNAL:     "external",
}

// readIPCounters sums br_ip_counters over CPUs by verdict name, leaving
// out zeros.
func readIPCounters(m *ebpf.Map) (map[string]Stat, error) {
	out := map[string]Stat{}
	for v := range routerBrIpVerdictBR_IP_VERDICT_MAX {
		var per []routerBrCounter
		if err := m.Lookup(uint32(v), &per); err != nil {
			return nil, fmt.Errorf("read the plain-IP counters: %w", err)
		}
		var s Stat
		for _, c := range per {
			s.Packets += c.Packets
			s.Bytes += c.Bytes
		}
		if s.Packets > 0 {
			name, ok := ipVerdictNames[v]
			if !ok {
				name = fmt.Sprintf("verdict_%d", v)
			}
			out[name] = s
		}
	}
	return out, nil
}

// InterfaceName names a counter slot: an interface ID, "internal" or "unmatched".
func InterfaceName(ifid int) string {
	switch ifid {
	case 0:
		return "internal"
	case -1:
		return "unmatched"
	}
	return strconv.Itoa(ifid)
}

// ByInterface arranges counts as interface → verdict → figures, leaving out
// zeros. Interfaces are named by InterfaceName.
func (c *Counts) ByInterface(slots map[int]int) map[string]map[string]Stat {
	out := map[string]map[string]Stat{}
	for slot, ifid := range slots {
		if slot < 0 || slot >= maxSlots {
			continue
		}
		for v := 0; v < VerdictCount; v++ {
			s := c[slot][v]
			if s.Packets == 0 {
				continue
			}
			name := InterfaceName(ifid)
			if out[name] == nil {
				out[name] = map[string]Stat{}
			}
			out[name][VerdictName(Verdict(v))] = Stat{Packets: s.Packets, Bytes: s.Bytes}
		}
	}
	return out
}

// Verdicts sums the counts of the interfaces selected by want (an
// InterfaceName, or "all") per verdict.
func (c *Counts) Verdicts(slots map[int]int, want string) ([VerdictCount]Stat, error) {
	var out [VerdictCount]Stat
	found := want == "all"
	for slot, ifid := range slots {
		if want != "all" && InterfaceName(ifid) != want {
			continue
		}
		found = true
		for v := 0; v < VerdictCount; v++ {
			out[v].Packets += c[slot][v].Packets
			out[v].Bytes += c[slot][v].Bytes
		}
	}
	if !found {
		var names []string
		for _, ifid := range slots {
			names = append(names, InterfaceName(ifid))
		}
		sort.Strings(names)
		return out, fmt.Errorf("interface %q: the router counts %s, or all", want, strings.Join(names, ", "))
	}
	return out, nil
}

// WriteWatch writes one refresh of `br watch`: per verdict the totals and
// the rates since prev, dt ago.
func WriteWatch(w io.Writer, router, iface string, cur, prev [VerdictCount]Stat, dt time.Duration) {
	fmt.Fprintf(w, "router %s, interface %s   %s\n\n", router, iface, time.Now().Format("15:04:05"))
	fmt.Fprintf(w, "%-18s %14s %12s %16s %10s\n", "verdict", "packets", "pkts/s", "bytes", "Mbit/s")
	sec := dt.Seconds()
	for v := 0; v < VerdictCount; v++ {
		c, p := cur[v], prev[v]
		pps, mbps := 0.0, 0.0
		if sec > 0 {
			pps = float64(c.Packets-p.Packets) / sec
			mbps = float64(c.Bytes-p.Bytes) * 8 / sec / 1e6
		}
		fmt.Fprintf(w, "%-18s %14d %12.0f %16d %10.2f\n", VerdictName(Verdict(v)), c.Packets, pps, c.Bytes, mbps)
	}
}
