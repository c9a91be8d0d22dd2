package scionlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/slayers/path"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/netns"
)

// ErrNotUp is returned when there is no network to look at.
var ErrNotUp = errors.New("the lab's SCION network is not up (fastpath lab scion up)")

// Status is the network as it stands.
type Status struct {
	Dir        string        `json:"dir"`
	ASes       []ASStatus    `json:"ases"`
	Started    time.Time     `json:"started"`
	PathsAfter time.Duration `json:"paths_after_ns"`
	Logs       string        `json:"logs"`
	// Hops is how long the control services make hop fields live.
	Hops HopExpiry `json:"hop_expiry"`
	// MTU is every link's MTU, and SCIONMTU what the topology files say:
	// the largest SCION packet a path of the network carries.
	MTU      int `json:"mtu"`
	SCIONMTU int `json:"scion_mtu"`
	// Version is the scionproto release the network runs.
	Version string `json:"scion_version"`
	// Topo is the .topo file the network was built from, if any.
	Topo string `json:"topo,omitempty"`
	// Routers counts the border routers; MemKiB is the memory of every
	// process the network runs (scionproto's services, fastpath's br
	// serve), each its proportional set size, summed.
	Routers int    `json:"routers"`
	MemKiB  uint64 `json:"mem_kib"`
	// Devices is up's --devices: which kind of device holds each link
	// end's and internal network's address.
	Devices string `json:"devices"`
}

// HopExpiry is the network's hop-field lifetime: what up was asked for
// (0: scionproto's default), the ExpTime the control services use, and
// the lifetime that gives.
type HopExpiry struct {
	Asked    time.Duration `json:"asked_ns"`
	ExpTime  uint8         `json:"exp_time"`
	Lifetime time.Duration `json:"lifetime_ns"`
}

func hopExpiry(asked time.Duration) HopExpiry {
	e := uint8(defaultHopExpTime)
	if asked != 0 {
		// up refused any other; a hand-edited record falls back to the
		// default, which is what the services would then run with.
		if v, err := HopExpTime(asked); err == nil {
			e = v
		}
	}
	return HopExpiry{Asked: asked, ExpTime: e, Lifetime: path.ExpTimeToDuration(e)}
}

func (h HopExpiry) String() string {
	if h.Asked == 0 {
		return fmt.Sprintf("hop fields live %s (ExpTime %d, scionproto's default)", h.Lifetime, h.ExpTime)
	}
	return fmt.Sprintf("hop fields live %s (ExpTime %d, --hop-expiry %s)", h.Lifetime, h.ExpTime, h.Asked)
}

// ASStatus is one AS: its addresses and processes.
type ASStatus struct {
	IA        string       `json:"ia"`
	Core      bool         `json:"core"`
	Netns     string       `json:"netns"`
	HostNetns string       `json:"host_netns"`
	Internal  string       `json:"internal"`
	Host      string       `json:"host"`
	Daemon    string       `json:"daemon"`
	Config    string       `json:"config"`
	Procs     []ProcStatus `json:"procs"`
	// Hybrid names fastpath's router in front of the AS's, if attached.
	Hybrid string `json:"hybrid,omitempty"`
	// Devices are the AS's devices that hold an address and are not
	// veths: its ends of links, its routers' and its host's devices on
	// the internal network.
	Devices []DeviceStatus `json:"devices,omitempty"`
}

// DeviceStatus is a device of the network that holds an address over a
// veth of its own.
type DeviceStatus struct {
	Netns string     `json:"netns"`
	Dev   string     `json:"dev"`
	Kind  DeviceKind `json:"kind"`
	Veth  string     `json:"veth"`
	Addr  string     `json:"addr"`
	// Underlay is the veth's address under a VXLAN device, and VNI the
	// device's.
	Underlay string `json:"underlay,omitempty"`
	VNI      uint32 `json:"vni,omitempty"`
}

func (d DeviceStatus) String() string {
	s := fmt.Sprintf("%s/%s %s: ", d.Netns, d.Dev, d.Addr)
	switch d.Kind {
	case Bridge:
		return s + fmt.Sprintf("bridge, port %s", d.Veth)
	case Macvlan:
		return s + fmt.Sprintf("macvlan (bridge mode) over %s", d.Veth)
	case VXLAN:
		return s + fmt.Sprintf("VXLAN, VNI %d, over %s %s", d.VNI, d.Veth, d.Underlay)
	}
	return s + string(d.Kind)
}

// ProcStatus is one process.
type ProcStatus struct {
	Name   string `json:"name"`
	PID    int    `json:"pid"`
	Alive  bool   `json:"alive"`
	Log    string `json:"log"`
	MemKiB uint64 `json:"mem_kib,omitempty"` // proportional set size
}

// Healthy says every process runs.
func (s *Status) Healthy() bool {
	for _, a := range s.ASes {
		for _, p := range a.Procs {
			if !p.Alive {
				return false
			}
		}
	}
	return true
}

// Status reads the record and checks each process.
func (n Network) Status() (*Status, error) {
	st, err := n.running()
	if err != nil {
		return nil, err
	}
	as, links, err := n.plan(st)
	if err != nil {
		return nil, err
	}
	out := &Status{Dir: n.Dir, Started: st.Started, PathsAfter: st.PathsAfter, Logs: n.logDir(), Hops: hopExpiry(st.HopExpiry),
		MTU: st.mtu(), SCIONMTU: TopoMTU(st.version(), SCIONMTU(st.mtu())), Version: st.version(), Topo: st.Topo, Devices: st.devices()}
	hybrid := map[string]bool{}
	for _, h := range st.Hybrid {
		hybrid[h] = hybridAttached(h)
	}
	for _, a := range as {
		s := ASStatus{
			IA: a.IA.String(), Core: a.Core, Netns: a.Netns, HostNetns: a.HostNetns,
			Internal: a.Internal.String(), Host: a.Host.String(), Daemon: a.Daemon().String(), Config: a.Dir,
		}
		if hybrid[HybridName(a)] {
			s.Hybrid = HybridName(a)
		}
		for _, p := range st.Procs {
			if p.AS == s.IA {
				ps := ProcStatus{Name: p.Name, PID: p.PID, Alive: p.Alive(), Log: p.Log}
				if ps.Alive {
					ps.MemKiB = pssKiB(p.PID)
				}
				out.MemKiB += ps.MemKiB
				s.Procs = append(s.Procs, ps)
			}
		}
		s.Devices = deviceStatus(a, as, links)
		out.Routers += len(a.Routers)
		out.ASes = append(out.ASes, s)
	}
	return out, nil
}

// Write prints the status for a terminal.
func (s *Status) Write(w io.Writer) {
	fmt.Fprintf(w, "SCION network of scionproto %s in %s, started %s", s.Version, s.Dir, s.Started.Format(time.DateTime))
	if s.PathsAfter > 0 {
		fmt.Fprintf(w, ", first path after %.1f s", s.PathsAfter.Seconds())
	}
	if s.Topo != "" {
		fmt.Fprintf(w, "\nbuilt from %s: %d ASes, %d border routers; links' MTUs as the file gives them", s.Topo, len(s.ASes), s.Routers)
	} else {
		fmt.Fprintf(w, "\nlinks of MTU %d (SCION MTU %d)", s.MTU, s.SCIONMTU)
	}
	fmt.Fprintf(w, "; addresses on devices %q", s.Devices)
	fmt.Fprintf(w, "; its processes hold %.0f MiB\n%s\n%-9s %-5s %-13s %-12s %-11s %-11s %s\n", float64(s.MemKiB)/1024, s.Hops, "AS", "core", "namespace", "host ns", "internal", "host", "processes")
	for _, a := range s.ASes {
		var ps []string
		for _, p := range a.Procs {
			state := "up"
			if !p.Alive {
				state = "DOWN"
			}
			ps = append(ps, fmt.Sprintf("%s %s", p.Name, state))
		}
		if a.Hybrid != "" {
			ps = append(ps, "fastpath "+a.Hybrid)
		}
		core := ""
		if a.Core {
			core = "yes"
		}
		fmt.Fprintf(w, "%-9s %-5s %-13s %-12s %-11s %-11s %s\n", a.IA, core, a.Netns, a.HostNetns, a.Internal, a.Host, strings.Join(ps, ", "))
	}
	for _, a := range s.ASes {
		for _, d := range a.Devices {
			fmt.Fprintf(w, "%-9s %s\n", a.IA, d)
		}
	}
	fmt.Fprintf(w, "logs: %s\n", s.Logs)
}

// deviceStatus are the devices of an AS that are not veths, in the order
// build makes them: its internal network's, then its ends of links.
func deviceStatus(a AS, as []AS, links []Link) []DeviceStatus {
	var out []DeviceStatus
	add := func(e devEnd) {
		if e.kind == Veth {
			return
		}
		d := DeviceStatus{Netns: e.ns, Dev: e.dev, Kind: e.kind, Veth: e.veth(), Addr: e.addr.String(), VNI: e.vni}
		if e.underlay.IsValid() {
			d.Underlay = e.underlay.String()
		}
		out = append(out, d)
	}
	for _, e := range internalEnds(a) {
		add(e)
	}
	for _, l := range links {
		p, c := linkEnds(as, l)
		if l.Parent == a.Index {
			add(p)
		}
		if l.Child == a.Index {
			add(c)
		}
	}
	return out
}

// Check runs scionproto's showpaths, ping (also at the path's MTU: jumbo
// frames with --mtu 9000) and traceroute from the end host of the first
// leaf AS to that of the last, and fails on the first that fails. In
// hybrid mode it taps every fastpath router meanwhile and replays what each
// forwarded or dropped in XDP through scionproto's router of the same ID
// (the oracle), and fails if the reference disagrees. Their output goes to
// w.
func (n Network) Check(ctx context.Context, w io.Writer) error {
	st, err := n.running()
	if err != nil {
		return err
	}
	if st.Topo != "" {
		c, err := n.CheckTopo(ctx, TopoCheckOptions{Oracle: len(st.Hybrid) > 0}, w)
		if err != nil {
			return err
		}
		c.WriteSummary(w)
		if !c.OK() {
			return fmt.Errorf("the check of %s failed: see above, and the logs in %s", st.Topo, n.logDir())
		}
		return nil
	}
	_, err = n.checkDefault(ctx, st, w)
	return err
}

// checkDefault is Check on the default network; it returns the oracle's
// replays in hybrid mode.
func (n Network) checkDefault(ctx context.Context, st *State, w io.Writer) ([]OracleReplay, error) {
	as, links, err := n.plan(st)
	if err != nil {
		return nil, err
	}
	var taps map[string]*br.Tap
	if len(st.Hybrid) > 0 {
		if taps, err = openTaps(as); err != nil {
			return nil, err
		}
		defer func() {
			for _, t := range taps {
				t.Close()
			}
		}()
	}
	src, dst := as[1], as[len(as)-1]
	host := fmt.Sprintf("%s,%s", dst.IA, dst.Host)
	for _, c := range [][]string{
		{"showpaths", dst.IA.String(), "--timeout", "5s"},
		{"ping", host, "-c", "3", "--timeout", "2s"},
		{"ping", host, "-c", "3", "--max-mtu", "--interval", "50ms", "--timeout", "2s"},
		{"traceroute", host, "--timeout", "2s"},
	} {
		fmt.Fprintf(w, "$ scion %s   (on %s's host)\n", strings.Join(c, " "), src.IA)
		out, err := n.Scion(ctx, src, c...)
		fmt.Fprintln(w, strings.TrimRight(out, "\n"))
		if err != nil {
			return nil, fmt.Errorf("scion %s from %s to %s failed: see the output above and the logs in %s", c[0], src.IA, dst.IA, n.logDir())
		}
	}
	if taps == nil {
		return nil, nil
	}
	fmt.Fprintf(w, "the oracle: what each fastpath router forwarded or dropped in XDP during the check, replayed through scionproto's router of the same ID\n")
	replays, err := n.replayAll(as, links, taps)
	for _, r := range replays {
		fmt.Fprintf(w, "  %s\n", r)
	}
	if err != nil {
		return replays, err
	}
	writeOracleSummary(w, replays)
	for _, r := range replays {
		if !r.OK() {
			return replays, fmt.Errorf("scionproto's router disagrees with fastpath's %s: see above", r.Router)
		}
	}
	return replays, nil
}

// ASes is the plan of the running network.
func (n Network) ASes() ([]AS, []Link, error) {
	st, err := n.running()
	if err != nil {
		return nil, nil, err
	}
	return n.plan(st)
}

// FindAS is the running network's AS of the given ISD-AS (1-64513, say).
func (n Network) FindAS(ia string) (AS, error) {
	want, err := addr.ParseIA(ia)
	if err != nil {
		return AS{}, fmt.Errorf("AS %q: write it as ISD-AS, like %d-%d", ia, ISD, FirstASN+1)
	}
	as, _, err := n.ASes()
	if err != nil {
		return AS{}, err
	}
	for _, a := range as {
		if a.IA == want {
			return a, nil
		}
	}
	return AS{}, fmt.Errorf("AS %s is not in the network: it has %s to %s", want, as[0].IA, as[len(as)-1].IA)
}

// Stop ends one of the network's processes by name (router-64512, say):
// what a test or an operator does to see what survives its loss.
func (n Network) Stop(name string) error {
	st, err := n.running()
	if err != nil {
		return err
	}
	for _, p := range st.Procs {
		if p.Name == name {
			p.stop()
			return nil
		}
	}
	return fmt.Errorf("the network runs no process %q", name)
}

// RouterMetrics reads the Prometheus metrics of an AS's reference router,
// from inside its namespace, as name{labels} → value.
func (n Network) RouterMetrics(a AS) (map[string]float64, error) {
	var body []byte
	err := netns.Run(a.Netns, func() error {
		c, err := net.DialTimeout("tcp", a.RouterMetrics().String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", a.RouterMetrics()); err != nil {
			return err
		}
		body, err = io.ReadAll(c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("metrics of %s's router: %w", a.IA, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		var v float64
		if _, err := fmt.Sscanf(line[i+1:], "%g", &v); err == nil {
			out[line[:i]] = v
		}
	}
	return out, nil
}

// pssKiB is a process's proportional share of memory (Pss of
// smaps_rollup: a page shared by n processes counts 1/n to each, so that
// the sum over the network is what it holds), VmRSS where the kernel has
// no rollup; 0 if neither can be read.
func pssKiB(pid int) uint64 {
	for _, f := range []struct{ file, key string }{{"smaps_rollup", "Pss:"}, {"status", "VmRSS:"}} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f.file))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, f.key); ok {
				var kib uint64
				fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
				return kib
			}
		}
	}
	return 0
}
