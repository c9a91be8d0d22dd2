package scionlab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/scionproto/scion/pkg/addr"

	"github.com/fastpath-dev/fastpath/internal/br"
)

// The kinds of path a .topo network's check looks for, each proved on one
// path forwarded in XDP end to end.
const (
	KindCoreAcrossISDs = "up-core-down across ISDs"
	KindCoreInISD      = "core link within an ISD"
	KindPeering        = "peering link within an ISD"
	KindPeeringAcross  = "peering link across ISDs"
	KindShortcut       = "shortcut (no core AS)"
	KindSibling        = "AS-internal, router to router"
	KindIPv6Link       = "IPv6 underlay on a link"
	KindIPv6AS         = "IPv6 internal network"
	KindMTU            = "path narrower than its ASes (MTU)"
)

var pathKinds = []string{KindCoreAcrossISDs, KindCoreInISD, KindPeering, KindPeeringAcross, KindShortcut, KindSibling, KindIPv6Link, KindIPv6AS, KindMTU}

// TopoCheckOptions tune CheckTopo.
type TopoCheckOptions struct {
	// Pings is how many echo requests prove a kind of path (default 5).
	Pings int
	// MaxPaths is how many paths showpaths lists per pair (default 40).
	MaxPaths int
	// Oracle taps every fastpath router while the kinds are proved and
	// replays what each forwarded in XDP through scionproto's router of the
	// same ID (hybrid mode).
	Oracle bool
}

// scionPath is a path as `scion showpaths --format json` gives it.
type scionPath struct {
	Hops []struct {
		IfID uint16  `json:"interface"`
		IA   addr.IA `json:"isd_as"`
	} `json:"hops"`
	Sequence string `json:"sequence"`
	MTU      int    `json:"mtu"`
	Status   string `json:"status"`
}

// PairCheck is what the check found between two leaf ASes.
type PairCheck struct {
	Src, Dst   addr.IA
	Paths      int // listed by showpaths
	Alive      int // of them, answering showpaths' probe
	Pinged     int // echo replies of the pair's ping (of 2)
	Traceroute bool
	Err        string
}

// Arrival is where a proved path's packets arrive at fastpath's router:
// the router (its pin name), the interface ("internal" or an ID), how
// many packets the path should add there, and what the counters moved.
type Arrival struct {
	Router    string
	Interface string
	Want      int
	Forwarded uint64
	Other     map[string]uint64 // other verdicts that moved
}

// KindProof is one kind of path, proved on one path by pinging along it.
type KindProof struct {
	Kind     string
	Src, Dst addr.IA
	Path     string // its hop sequence
	MTU      int
	Size     int // SCION packet size sent
	Sent     int
	Received int
	Arrivals []Arrival
	OK       bool
	Note     string
}

// TopoCheck is a .topo network's check.
type TopoCheck struct {
	Pairs  []PairCheck
	Proofs []KindProof
	// Missing are the kinds no listed path has.
	Missing []string
	// Oracle is each router's replay (with TopoCheckOptions.Oracle).
	Oracle []OracleReplay
}

// OK says every pair has paths that answer and every kind found was
// proved.
func (c *TopoCheck) OK() bool {
	for _, p := range c.Pairs {
		if p.Err != "" {
			return false
		}
	}
	for _, p := range c.Proofs {
		if !p.OK {
			return false
		}
	}
	for _, r := range c.Oracle {
		if !r.OK() {
			return false
		}
	}
	return true
}

// ifOwner is an interface of the plan: its AS, router and link.
type ifOwner struct {
	as     AS
	router int
	link   Link
}

type ifKey struct {
	ia   addr.IA
	ifid uint16
}

func interfaceOwners(as []AS, links []Link) map[ifKey]ifOwner {
	out := map[ifKey]ifOwner{}
	for _, l := range links {
		out[ifKey{as[l.Parent].IA, l.ParentIf}] = ifOwner{as[l.Parent], l.ParentRouter, l}
		out[ifKey{as[l.Child].IA, l.ChildIf}] = ifOwner{as[l.Child], l.ChildRouter, l}
	}
	return out
}

// CheckTopo runs scionproto's showpaths, ping and traceroute between the
// end hosts of every pair of leaf ASes of a .topo network, then, in hybrid
// mode, proves each kind of path the network has (pathKinds) on one path of
// it: echo requests of the path's full MTU pinned to it, and the counters
// of fastpath's router at every point where they and their replies arrive
// must have counted them forwarded in XDP. A kind whose path MTU is set by
// a link also gets packets a little larger than the path's MTU: scionproto's
// router (every release) sends no SCMP packet-too-big (its data plane checks no
// MTU); the router where they no longer fit must pass them up (too_big)
// rather than forward them. Progress goes to w.
func (n Network) CheckTopo(ctx context.Context, o TopoCheckOptions, w io.Writer) (*TopoCheck, error) {
	if o.Pings == 0 {
		o.Pings = 5
	}
	if o.MaxPaths == 0 {
		o.MaxPaths = 40
	}
	st, err := n.running()
	if err != nil {
		return nil, err
	}
	as, links, err := n.plan(st)
	if err != nil {
		return nil, err
	}
	owners := interfaceOwners(as, links)
	var leaves []AS
	for _, a := range as {
		if !a.Core {
			leaves = append(leaves, a)
		}
	}
	res := &TopoCheck{}
	type candidate struct {
		src, dst AS
		p        scionPath
	}
	found := map[string][]candidate{}
	for i, src := range leaves {
		for _, dst := range leaves[i+1:] {
			pc := PairCheck{Src: src.IA, Dst: dst.IA}
			paths, err := n.showpaths(ctx, src, dst, o.MaxPaths)
			if err != nil {
				pc.Err = err.Error()
			}
			pc.Paths = len(paths)
			for _, p := range paths {
				if p.Status == "alive" {
					pc.Alive++
				}
				for _, k := range pathKindsOf(p, src, dst, owners) {
					found[k] = append(found[k], candidate{src, dst, p})
				}
			}
			host := fmt.Sprintf("%s,%s", dst.IA, dst.Host)
			if pc.Err == "" {
				pr, err := n.ping(ctx, src, host, "", 2, 0)
				pc.Pinged = pr.Received
				if err != nil || pr.Received == 0 {
					pc.Err = fmt.Sprintf("ping: %d of 2 answered %v", pr.Received, errText(err))
				}
			}
			if pc.Err == "" {
				_, err := n.Scion(ctx, src, "traceroute", host, "--timeout", "2s")
				pc.Traceroute = err == nil
				if err != nil {
					pc.Err = "traceroute: " + err.Error()
				}
			}
			fmt.Fprintf(w, "%-14s → %-14s %2d paths (%d alive), ping %d/2, traceroute %v%s\n",
				src.IA, dst.IA, pc.Paths, pc.Alive, pc.Pinged, pc.Traceroute, errSuffix(pc.Err))
			res.Pairs = append(res.Pairs, pc)
		}
	}
	hybrid := len(st.Hybrid) > 0
	var taps map[string]*br.Tap
	if o.Oracle && hybrid {
		if taps, err = openTaps(as); err != nil {
			return res, err
		}
	}
	for _, k := range pathKinds {
		cands := found[k]
		if len(cands) == 0 {
			res.Missing = append(res.Missing, k)
			continue
		}
		// The shortest path of the kind, so that what it proves is plain.
		c := slices.MinFunc(cands, func(a, b candidate) int { return len(a.p.Hops) - len(b.p.Hops) })
		if !hybrid {
			res.Proofs = append(res.Proofs, KindProof{Kind: k, Src: c.src.IA, Dst: c.dst.IA, Path: c.p.Sequence, MTU: c.p.MTU, OK: true,
				Note: "not in hybrid mode: nothing to prove in XDP"})
			continue
		}
		proof := n.proveKind(ctx, k, c.src, c.dst, c.p, as, owners, o.Pings)
		fmt.Fprintf(w, "%s: %s\n", k, formatProof(proof))
		res.Proofs = append(res.Proofs, proof)
	}
	if taps != nil {
		fmt.Fprintf(w, "the oracle: what each fastpath router forwarded or dropped in XDP during the proofs, replayed through scionproto's router of the same ID\n")
		res.Oracle, err = n.replayAll(as, links, taps)
		for _, r := range res.Oracle {
			fmt.Fprintf(w, "  %s\n", r)
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return "  FAILED: " + firstLine(s)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// pathKindsOf are the kinds of a path from src to dst.
func pathKindsOf(p scionPath, src, dst AS, owners map[ifKey]ifOwner) []string {
	kinds := map[string]bool{}
	core := false
	narrowest := 1 << 30
	for i := 0; i+1 < len(p.Hops); i += 2 {
		a, b := p.Hops[i], p.Hops[i+1]
		oa, ok := owners[ifKey{a.IA, a.IfID}]
		if !ok {
			return nil
		}
		l := oa.link
		switch l.Type {
		case LinkPeer:
			if a.IA.ISD() != b.IA.ISD() {
				kinds[KindPeeringAcross] = true
			} else {
				kinds[KindPeering] = true
			}
		case LinkCore:
			if a.IA.ISD() != b.IA.ISD() {
				kinds[KindCoreAcrossISDs] = true
			} else {
				kinds[KindCoreInISD] = true
			}
		}
		if l.ParentAddr.Addr().Is6() {
			kinds[KindIPv6Link] = true
		}
		narrowest = min(narrowest, l.SCIONMTU)
	}
	for i := 1; i+1 < len(p.Hops); i += 2 {
		in, out := owners[ifKey{p.Hops[i].IA, p.Hops[i].IfID}], owners[ifKey{p.Hops[i+1].IA, p.Hops[i+1].IfID}]
		if in.as.Core {
			core = true
		}
		if in.router != out.router {
			kinds[KindSibling] = true
		}
	}
	if !core && !kinds[KindPeering] && !kinds[KindPeeringAcross] {
		kinds[KindShortcut] = true
	}
	if src.IPv6() || dst.IPv6() {
		kinds[KindIPv6AS] = true
	}
	// A path whose MTU a link sets, with room for larger packets at the
	// source: those packets leave the source AS whole and meet the link.
	if p.MTU == narrowest && narrowest < src.MTU {
		kinds[KindMTU] = true
	}
	if kinds[KindCoreAcrossISDs] && src.IA.ISD() == dst.IA.ISD() {
		// A core link across ISDs on a path within one ISD is still a
		// core link; up-core-down across ISDs joins leaves of two.
		delete(kinds, KindCoreAcrossISDs)
		kinds[KindCoreInISD] = true
	}
	var out []string
	for _, k := range pathKinds {
		if kinds[k] {
			out = append(out, k)
		}
	}
	return out
}

// arrivals are the points where a path's echo requests and their replies
// arrive at a border router: the source's router from the host, each
// link's far end, the egress router of an AS crossed from a sibling; and
// the same backwards.
func arrivals(p scionPath, owners map[ifKey]ifOwner) map[[2]string]int {
	out := map[[2]string]int{}
	at := func(ia addr.IA, ifid uint16, slot string) {
		o := owners[ifKey{ia, ifid}]
		out[[2]string{routerHybridName(o.as.Routers[o.router]), slot}]++
	}
	h := p.Hops
	if len(h) < 2 {
		return out
	}
	at(h[0].IA, h[0].IfID, "internal")               // requests from the source host
	at(h[len(h)-1].IA, h[len(h)-1].IfID, "internal") // replies from the destination host
	for i := 0; i+1 < len(h); i += 2 {
		at(h[i+1].IA, h[i+1].IfID, br.InterfaceName(int(h[i+1].IfID))) // requests over the link
		at(h[i].IA, h[i].IfID, br.InterfaceName(int(h[i].IfID)))       // replies over it
	}
	for i := 1; i+1 < len(h); i += 2 {
		in, out2 := owners[ifKey{h[i].IA, h[i].IfID}], owners[ifKey{h[i+1].IA, h[i+1].IfID}]
		if in.router != out2.router {
			at(h[i+1].IA, h[i+1].IfID, "internal") // requests from the ingress sibling
			at(h[i].IA, h[i].IfID, "internal")     // replies from the egress sibling
		}
	}
	return out
}

// routerCounts reads every fastpath router of the network: pin name →
// interface → verdict → packets.
func routerCounts(as []AS) map[string]map[string]map[string]uint64 {
	out := map[string]map[string]map[string]uint64{}
	for _, a := range as {
		for _, r := range a.Routers {
			name := routerHybridName(r)
			p, err := br.OpenPinned(name)
			if err != nil {
				continue
			}
			byIf, err := p.ByInterface()
			p.Close()
			if err != nil {
				continue
			}
			m := map[string]map[string]uint64{}
			for ifn, vs := range byIf {
				m[ifn] = map[string]uint64{}
				for v, s := range vs {
					m[ifn][v] = s.Packets
				}
			}
			out[name] = m
		}
	}
	return out
}

// proveKind pings along one path with packets of its MTU and reads what
// fastpath's routers counted where they arrive; for KindMTU it sends
// packets 8 bytes larger than the path's MTU and looks for them passed up
// where the narrow link begins.
func (n Network) proveKind(ctx context.Context, kind string, src, dst AS, p scionPath, as []AS, owners map[ifKey]ifOwner, pings int) KindProof {
	proof := KindProof{Kind: kind, Src: src.IA, Dst: dst.IA, Path: p.Sequence, MTU: p.MTU}
	host := fmt.Sprintf("%s,%s", dst.IA, dst.Host)
	size := -1 // the path's MTU
	if kind == KindMTU {
		size = p.MTU + 8
	}
	// One echo first, not counted: a router's first packet to a neighbour
	// it has not resolved yet is the kernel's (fib_pass) by design.
	n.ping(ctx, src, host, p.Sequence, 1, size)
	before := routerCounts(as)
	pr, err := n.ping(ctx, src, host, p.Sequence, pings, size)
	// The last replies' counters are written before the ping has them.
	after := routerCounts(as)
	proof.Sent, proof.Received, proof.Size = pr.Sent, pr.Received, pr.Size
	if err != nil && pr.Sent == 0 {
		proof.Note = "ping: " + firstLine(err.Error())
		return proof
	}
	want := arrivals(p, owners)
	ok := proof.Received == pings
	if kind == KindMTU {
		ok = true
	}
	tooBigSeen := false
	for _, k := range sortedKeys(want) {
		a := Arrival{Router: k[0], Interface: k[1], Want: want[k] * pings, Other: map[string]uint64{}}
		b, c := before[k[0]][k[1]], after[k[0]][k[1]]
		for v, x := range c {
			d := x - b[v]
			if d == 0 {
				continue
			}
			if v == "forwarded" {
				a.Forwarded = d
			} else {
				a.Other[v] = d
			}
		}
		if _, seen := after[k[0]]; !seen {
			proof.Note = fmt.Sprintf("fastpath's router %s is not attached", k[0])
			ok = false
		}
		if kind != KindMTU && a.Forwarded < uint64(a.Want) {
			ok = false
		}
		if a.Other["too_big"] >= uint64(pings) {
			tooBigSeen = true
		}
		proof.Arrivals = append(proof.Arrivals, a)
	}
	if kind == KindMTU {
		// scionproto's router sends what fastpath passed up: every echo
		// is still answered.
		ok = tooBigSeen && proof.Received == pings
		if !tooBigSeen {
			proof.Note = fmt.Sprintf("no router passed up the %d packets %d bytes larger than the path's MTU", pings, 8)
		} else {
			proof.Note = fmt.Sprintf("packets of %d B on a path of MTU %d: passed up (too_big) where they no longer fit, forwarded by scionproto's router in underlay fragments (it sends no SCMP packet-too-big); %d of %d answered", pr.Size, p.MTU, pr.Received, pr.Sent)
		}
	}
	proof.OK = ok
	return proof
}

func sortedKeys(m map[[2]string]int) [][2]string {
	var out [][2]string
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0]+" "+a[1], b[0]+" "+b[1]) })
	return out
}

func formatProof(p KindProof) string {
	var b strings.Builder
	verdict := "PROVED"
	if !p.OK {
		verdict = "NOT PROVED"
	}
	fmt.Fprintf(&b, "%s — %s → %s over %s (MTU %d), %d of %d echoes of %d B answered", verdict, p.Src, p.Dst, p.Path, p.MTU, p.Received, p.Sent, p.Size)
	for _, a := range p.Arrivals {
		fmt.Fprintf(&b, "\n    %-28s %-9s forwarded in XDP +%d (want ≥ %d)", a.Router, a.Interface, a.Forwarded, a.Want)
		for _, v := range slices.Sorted(maps.Keys(a.Other)) {
			fmt.Fprintf(&b, ", %s +%d", v, a.Other[v])
		}
	}
	if p.Note != "" {
		fmt.Fprintf(&b, "\n    %s", p.Note)
	}
	return b.String()
}

// showpaths lists paths from src's host to dst, probed.
func (n Network) showpaths(ctx context.Context, src, dst AS, max int, flags ...string) ([]scionPath, error) {
	out, err := n.Scion(ctx, src, append([]string{"showpaths", dst.IA.String(), "--format", "json", "--maxpaths", fmt.Sprint(max), "--timeout", "5s"}, flags...)...)
	if err != nil {
		return nil, err
	}
	var res struct {
		Paths []scionPath `json:"paths"`
	}
	if err := json.Unmarshal([]byte(jsonPart(out)), &res); err != nil {
		return nil, fmt.Errorf("showpaths from %s to %s: %w: %s", src.IA, dst.IA, err, out)
	}
	if len(res.Paths) == 0 {
		return nil, fmt.Errorf("showpaths from %s to %s: no path", src.IA, dst.IA)
	}
	return res.Paths, nil
}

// pingResult is what `scion ping --format json` says of a run.
type pingResult struct {
	Size       int `json:"scion_packet_size"`
	Statistics struct {
		Sent     int `json:"sent"`
		Received int `json:"received"`
	} `json:"statistics"`
	Sent, Received int `json:"-"`
}

// ping sends count echo requests from src's host to host, along the path
// of a sequence if one is given, of the SCION packet size size (0: no
// payload, -1: the path's MTU).
func (n Network) ping(ctx context.Context, src AS, host, sequence string, count, size int) (pingResult, error) {
	args := []string{"ping", host, "-c", fmt.Sprint(count), "--interval", "50ms", "--timeout", "1s", "--format", "json"}
	if sequence != "" {
		args = append(args, "--sequence", sequence)
	}
	switch {
	case size < 0:
		args = append(args, "--max-mtu")
	case size > 0:
		args = append(args, "--packet-size", fmt.Sprint(size))
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(count)*time.Second+10*time.Second)
	defer cancel()
	out, err := n.Scion(ctx, src, args...)
	var r pingResult
	if jerr := json.Unmarshal([]byte(jsonPart(out)), &r); jerr != nil && err == nil {
		err = fmt.Errorf("ping's output: %w", jerr)
	}
	r.Sent, r.Received = r.Statistics.Sent, r.Statistics.Received
	return r, err
}

// jsonPart is the JSON object in a tool's output, without what it logged
// before it.
func jsonPart(s string) string {
	if i := strings.IndexByte(s, '{'); i >= 0 {
		if j := strings.LastIndexByte(s, '}'); j > i {
			return s[i : j+1]
		}
	}
	return s
}

// WriteSummary says in a few lines what the check found.
func (c *TopoCheck) WriteSummary(w io.Writer) {
	failed := 0
	for _, p := range c.Pairs {
		if p.Err != "" {
			failed++
		}
	}
	fmt.Fprintf(w, "%d pairs of leaf ASes: %d with paths that answer ping and traceroute, %d failed\n", len(c.Pairs), len(c.Pairs)-failed, failed)
	for _, p := range c.Proofs {
		verdict := "proved"
		if !p.OK {
			verdict = "NOT proved"
		}
		fmt.Fprintf(w, "  %-36s %s (%s → %s)\n", p.Kind, verdict, p.Src, p.Dst)
	}
	for _, k := range c.Missing {
		fmt.Fprintf(w, "  %-36s no path of this kind in the network\n", k)
	}
	if len(c.Oracle) > 0 {
		writeOracleSummary(w, c.Oracle)
	}
}
