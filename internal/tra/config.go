// Package tra is the SCION-IP translator: an unmodified IPv6 host talks to
// SCION hosts (and to hosts behind other translators) through its
// SCION-mapped IPv6 address. The data plane is bpf/tra; this package loads
// and attaches it, keeps its paths (the daemon, `tra run`), and reads its
// counters.
package tra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/private/path/pathpol"
	"github.com/scionproto/scion/private/topology"
	jsontopo "github.com/scionproto/scion/private/topology/json"

	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// Policies a destination's paths are chosen by.
const (
	PolicyShortest = "shortest" // fewest hops first
	PolicyLatency  = "latency"  // lowest latency the daemon's metadata gives first
	PolicySequence = "sequence" // only paths matching a hop-predicate sequence
)

// ErrInvalidConfig is matched by every error of LoadConfig and Validate.
var ErrInvalidConfig = errors.New("invalid translator configuration")

// Values of Config.XDPMode.
const (
	// XDPModeAuto is native mode, and generic mode (with a warning) where
	// the device's driver has no native XDP.
	XDPModeAuto    = "auto"
	XDPModeNative  = "native"  // native mode, or attach fails
	XDPModeGeneric = "generic" // generic (skb) mode
)

// Config is a translator's configuration: the TOML file and what it names.
type Config struct {
	Path string // the TOML file

	Topology string // toml "topology": the AS's topology.json (resolved against the file's directory)
	Daemon   string // toml "daemon": scionproto's daemon (sciond), ip:port
	Device   string // toml "device": the host's device towards the AS's routers
	// XDPMode is how tra_in attaches to Device (toml "xdp_mode"):
	// XDPModeAuto (default), XDPModeNative or XDPModeGeneric.
	XDPMode string
	// Address is the host's underlay IPv4 address: toml "address", or the
	// device's when empty.
	Address netip.Addr
	// Pair names the translator's device pair: Pair+"0" is the host's end
	// (the SM-IP address, the route to fc00::/8), Pair+"1" the translator's.
	Pair string
	// Policy is how paths are chosen (toml "policy"), with overrides per
	// destination AS.
	Policy       string
	Destinations map[addr.IA]Destination
	// MaxPaths is how many paths of a destination flows spread over.
	MaxPaths int
	// ProbeEvery is how often the daemon probes the paths in use (toml
	// "probe_interval"; < 0: never, 0: the default).
	ProbeEvery time.Duration
	// IdleTimeout is how long a destination without packets keeps its
	// paths (toml "idle_timeout"; 0: the default).
	IdleTimeout time.Duration
	// SCIONVersion (toml "scion_version", default scionproto.Default) is
	// the release of the AS's routers: it decides on which ports SCION
	// for the host arrives (RoutersToPort).
	SCIONVersion string

	// Resolved:
	IA addr.IA
	// Routers are the AS's border routers' internal IPv4 addresses by
	// name, those given as addresses and those whose names resolved: the
	// senders of SCION with a standard path the host takes.
	Routers map[string]netip.AddrPort
	// RouterNames are the routers whose internal_addr names a host, as
	// topology.json gives it (host:port): tra run resolves them again
	// every resolveEvery, aside from its loop, and keeps the last address
	// that resolved.
	RouterNames map[string]string
	// Skipped are the routers the translator takes nothing from, and why
	// (an IPv6 internal address: the underlay is IPv4); Unresolved the
	// routers whose names did not resolve when the file was read.
	Skipped    map[string]string
	Unresolved map[string]string
	// IfOwners name the router of each of the AS's interfaces: the only
	// sender (its address in Routers) whose SCMP may say one is down.
	IfOwners            map[uint64]string
	DispatchedPortStart uint16
	DispatchedPortEnd   uint16
	// SMIP is the host's SCION-mapped IPv6 address: the IPv4 form of
	// Address in the AS.
	SMIP netip.Addr
}

// Destination is a per-AS override of the policy.
type Destination struct {
	Policy   string
	Sequence string // for PolicySequence: scionproto's hop-predicate sequence
}

type tomlFile struct {
	Topology    string `toml:"topology"`
	Daemon      string `toml:"daemon"`
	Device      string `toml:"device"`
	XDPMode     string `toml:"xdp_mode"`
	Address     string `toml:"address"`
	Pair        string `toml:"pair"`
	Policy      string `toml:"policy"`
	MaxPaths    int    `toml:"max_paths"`
	Probe       string `toml:"probe_interval"`
	Idle        string `toml:"idle_timeout"`
	Version     string `toml:"scion_version"`
	Destination []struct {
		IA       string `toml:"ia"`
		Policy   string `toml:"policy"`
		Sequence string `toml:"sequence"`
	} `toml:"destination"`
}

type configError struct{ file, key, msg string }

func (e *configError) Error() string {
	var parts []string
	for _, s := range []string{e.file, e.key, e.msg} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

func (e *configError) Is(target error) bool { return target == ErrInvalidConfig }

func errorf(file, key, format string, args ...any) error {
	return &configError{file: file, key: key, msg: fmt.Sprintf(format, args...)}
}

// LoadConfig reads the TOML file and the topology.json it names, and
// resolves the routers given by name (for resolveTimeout: what does not
// resolve is named in Unresolved, not refused). The address may still be
// unknown (the device's, found at attach).
func LoadConfig(path string) (*Config, error) { return loadConfig(path, true) }

// loadConfig is LoadConfig, with or without resolving the routers' names
// (the daemon's loop resolves none: its resolver does, aside).
func loadConfig(path string, resolve bool) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errorf(path, "", "%v; give the translator's TOML file", err)
	}
	raw := tomlFile{Pair: "fp-tra", XDPMode: XDPModeAuto, Policy: PolicyShortest, MaxPaths: 2, Version: scionproto.Default}
	md, err := toml.Decode(string(b), &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, errorf(path, fmt.Sprintf("line %d", pe.Position.Line), "%s", pe.Message)
		}
		return nil, errorf(path, "", "%v", err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		return nil, errorf(path, u[0].String(), "unknown key; the keys are topology, daemon, device, xdp_mode, address, pair, policy, max_paths, probe_interval, idle_timeout, scion_version and [[destination]] (ia, policy, sequence)")
	}
	if !slices.Contains([]string{XDPModeAuto, XDPModeNative, XDPModeGeneric}, raw.XDPMode) {
		return nil, errorf(path, "xdp_mode", "%q is not valid; use %q (default), %q or %q", raw.XDPMode, XDPModeAuto, XDPModeNative, XDPModeGeneric)
	}
	c := &Config{Path: path, Daemon: raw.Daemon, Device: raw.Device, XDPMode: raw.XDPMode, Pair: raw.Pair, Policy: raw.Policy, MaxPaths: raw.MaxPaths, SCIONVersion: raw.Version, Destinations: map[addr.IA]Destination{}}
	if raw.Probe != "" {
		v, err := time.ParseDuration(raw.Probe)
		if err != nil || v < 0 || (v > 0 && (v < 10*time.Millisecond || v > time.Minute)) {
			return nil, errorf(path, "probe_interval", "%q: a duration from 10ms to 1m (e.g. \"150ms\"), or \"0s\" for no probes", raw.Probe)
		}
		c.ProbeEvery = v
		if v == 0 {
			c.ProbeEvery = -1
		}
	}
	if raw.Idle != "" {
		v, err := time.ParseDuration(raw.Idle)
		if err != nil || v < 10*time.Second {
			return nil, errorf(path, "idle_timeout", "%q: a duration of 10s or more (e.g. \"5m\")", raw.Idle)
		}
		c.IdleTimeout = v
	}
	if raw.Topology == "" {
		return nil, errorf(path, "topology", "missing: name the AS's topology.json")
	}
	c.Topology = raw.Topology
	if !filepath.IsAbs(c.Topology) {
		c.Topology = filepath.Join(filepath.Dir(path), c.Topology)
	}
	if raw.Address != "" {
		a, err := netip.ParseAddr(raw.Address)
		if err != nil || !a.Is4() {
			return nil, errorf(path, "address", "%q is not an IPv4 address: give the host's underlay IPv4 address, or leave it out to take the device's", raw.Address)
		}
		c.Address = a
	}
	for i, d := range raw.Destination {
		key := fmt.Sprintf("destination[%d]", i)
		ia, err := addr.ParseIA(d.IA)
		if err != nil {
			return nil, errorf(path, key+".ia", "%q: %v", d.IA, err)
		}
		if _, dup := c.Destinations[ia]; dup {
			return nil, errorf(path, key+".ia", "%s is given twice", ia)
		}
		c.Destinations[ia] = Destination{Policy: d.Policy, Sequence: d.Sequence}
	}
	topo, err := readTopology(c.Topology)
	if err != nil {
		return nil, errorf(path, "topology", "%s: %v", c.Topology, err)
	}
	if err := c.takeTopology(topo); err != nil {
		return nil, err
	}
	if resolve {
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		c.takeResolved(resolveRouters(ctx, c.RouterNames))
		cancel()
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks every field that is set, and derives the SM-IP address
// once the underlay address is known.
func (c *Config) Validate() error {
	if c.Daemon == "" {
		return errorf(c.Path, "daemon", "missing: give scionproto's daemon of the AS (ip:port, e.g. 10.101.0.1:30255)")
	}
	if _, err := netip.ParseAddrPort(c.Daemon); err != nil {
		return errorf(c.Path, "daemon", "%q: want ip:port", c.Daemon)
	}
	if c.Device == "" {
		return errorf(c.Path, "device", "missing: name the host's device towards the AS's routers")
	}
	if len(c.Pair) == 0 || len(c.Pair)+1 > 15 {
		return errorf(c.Path, "pair", "%q: the pair's devices are PAIR0 and PAIR1, at most 15 characters", c.Pair)
	}
	if c.SCIONVersion == "" {
		c.SCIONVersion = scionproto.Default
	}
	if err := scionproto.Check(c.SCIONVersion); err != nil {
		return errorf(c.Path, "scion_version", "%v: give the release the AS's border routers run", err)
	}
	if c.MaxPaths < 1 || c.MaxPaths > MaxPaths {
		return errorf(c.Path, "max_paths", "%d: between 1 and %d", c.MaxPaths, MaxPaths)
	}
	check := func(key, policy, seq string) error {
		switch policy {
		case PolicyShortest, PolicyLatency:
			if seq != "" {
				return errorf(c.Path, key, "a sequence needs policy = %q", PolicySequence)
			}
		case PolicySequence:
			if seq == "" {
				return errorf(c.Path, key, "policy %q needs a sequence of hop predicates (e.g. \"1-64513#1 1-64512#1,2 1-64514#1\")", PolicySequence)
			}
			if _, err := pathpol.NewSequence(seq); err != nil {
				return errorf(c.Path, key, "sequence %q: %v", seq, err)
			}
		default:
			return errorf(c.Path, key, "policy %q: use %s, %s or %s", policy, PolicyShortest, PolicyLatency, PolicySequence)
		}
		return nil
	}
	if err := check("policy", c.Policy, ""); err != nil {
		return err
	}
	for ia, d := range c.Destinations {
		if d.Policy == "" {
			d.Policy = c.Policy
			c.Destinations[ia] = d
		}
		if err := check(fmt.Sprintf("destination %s", ia), d.Policy, d.Sequence); err != nil {
			return err
		}
	}
	if _, _, err := IAPrefix(c.IA); err != nil {
		return errorf(c.Path, "topology", "the AS %s has no SCION-mapped addresses: %v", c.IA, err)
	}
	if c.Address.IsValid() {
		smip, err := FromSCION(c.IA, c.Address)
		if err != nil {
			return errorf(c.Path, "address", "%v", err)
		}
		c.SMIP = smip
	}
	return nil
}

// RoutersToPort says whether the AS's routers hand the host SCION on the
// port the packet names — its UDP or TCP destination port, an SCMP echo or
// traceroute reply's identifier, the source port of the datagram an SCMP
// error quotes — whatever dispatched_ports says (scionproto v0.14.0 on).
// v0.12.0's routers hand what is not dispatched, and all SCION/TCP, to the
// end-host port 30041, where the translator takes it on every release.
func (c *Config) RoutersToPort() bool {
	r := scionproto.RouterOf(c.release())
	return !r.RedirectOutsideRange || r.TCPToPort
}

// takenOn says on which ports of the host tra_in takes SCION, for a log
// line.
func takenOn(c *Config) string {
	s := fmt.Sprintf("port %d and the dispatched ports %d-%d", endHostPort, c.DispatchedPortStart, c.DispatchedPortEnd)
	if c.RoutersToPort() {
		s += ", and from the AS's routers on any port"
	}
	return s
}

// release is SCIONVersion, or scionproto.Default for a Config made without
// LoadConfig.
func (c *Config) release() string { return scionproto.OrDefault(c.SCIONVersion) }

// What the translator takes from topology.json: the AS, its dispatched
// ports, and its border routers' internal addresses. scionproto v0.12.0's
// loader (private/topology, populateBR) resolves an internal_addr that
// names a host once, with net.ResolveUDPAddr ("udp": the first IPv4
// address, else the first IPv6 one), and fails the whole file when a name
// does not resolve: a router's new address would be refused as spoofed
// until the file changed, and DNS down at boot would stop tra run in a
// restart loop. So the translator reads the raw JSON itself, keeps the
// names, and resolves them aside from its loop, again and again.

// topoInfo is what readTopology takes from topology.json.
type topoInfo struct {
	IA                   addr.IA
	DispatchedStart, End uint16
	literal              map[string]netip.AddrPort // internal_addr given as an address
	names                map[string]string         // ... or as host:port
	owners               map[uint64]string         // each interface's router
}

// placeholder stands for a name in the copy of the file scionproto
// validates (TEST-NET-1): it validates everything but resolves nothing.
const placeholder = "192.0.2.1"

// readTopology reads topology.json: validated whole as scionproto's loader
// validates it, with every name left unresolved.
func readTopology(path string) (*topoInfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	raw := &jsontopo.Topology{}
	if err := json.Unmarshal(b, raw); err != nil {
		return nil, err
	}
	t := &topoInfo{literal: map[string]netip.AddrPort{}, names: map[string]string{}, owners: map[uint64]string{}}
	noDNS := func(s string) string {
		if _, err := netip.ParseAddrPort(s); err == nil || s == "" {
			return s
		}
		if host, port, err := net.SplitHostPort(s); err == nil && host != "" {
			return net.JoinHostPort(placeholder, port)
		}
		return s
	}
	for name, br := range raw.BorderRouters {
		if br == nil || br.InternalAddr == "" {
			return nil, fmt.Errorf("border router %s: no internal_addr", name)
		}
		if a, err := netip.ParseAddrPort(br.InternalAddr); err == nil {
			t.literal[name] = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		} else if host, _, err := net.SplitHostPort(br.InternalAddr); err != nil || host == "" {
			return nil, fmt.Errorf("border router %s: internal_addr %q: want address:port or host:port", name, br.InternalAddr)
		} else {
			t.names[name] = br.InternalAddr
		}
		br.InternalAddr = noDNS(br.InternalAddr)
		for id, i := range br.Interfaces {
			t.owners[uint64(id)] = name
			if i != nil {
				i.Underlay.Local, i.Underlay.Remote, i.Underlay.DeprecatedPublic = noDNS(i.Underlay.Local), noDNS(i.Underlay.Remote), noDNS(i.Underlay.DeprecatedPublic)
			}
		}
	}
	for _, svc := range []map[string]*jsontopo.ServerInfo{raw.ControlService, raw.DiscoveryService, raw.HiddenSegmentLookup, raw.HiddenSegmentReg} {
		for _, si := range svc {
			if si != nil {
				si.Addr = noDNS(si.Addr)
			}
		}
	}
	for _, g := range raw.SIG {
		if g != nil {
			g.CtrlAddr, g.DataAddr, g.ProbeAddr = noDNS(g.CtrlAddr), noDNS(g.DataAddr), noDNS(g.ProbeAddr)
		}
	}
	topo, err := topology.RWTopologyFromJSONTopology(raw)
	if err != nil {
		return nil, err
	}
	t.IA = topo.IA
	if topo.DispatchedPortStart > 0 {
		t.DispatchedStart, t.End = topo.DispatchedPortStart, topo.DispatchedPortEnd
	}
	return t, nil
}

// takeTopology takes the AS, the dispatched ports and the routers given by
// address; the routers given by name are left to resolve. Only IPv4
// internal addresses count toward the routers the translator takes
// (MaxRouters); a router given by name counts as one.
func (c *Config) takeTopology(t *topoInfo) error {
	c.IA = t.IA
	c.IfOwners = t.owners
	c.DispatchedPortStart, c.DispatchedPortEnd = t.DispatchedStart, t.End
	c.Routers, c.RouterNames, c.Skipped, c.Unresolved = map[string]netip.AddrPort{}, t.names, map[string]string{}, map[string]string{}
	for name, a := range t.literal {
		if !a.Addr().Is4() {
			c.Skipped[name] = fmt.Sprintf("internal_addr %s is IPv6, and the translator's underlay is IPv4", a)
			continue
		}
		c.Routers[name] = a
	}
	// The translator's underlay is IPv4: the host reaches, and takes SCION
	// from, routers with IPv4 internal addresses only.
	if len(c.Routers) == 0 && len(c.RouterNames) == 0 {
		return errorf(c.Path, "topology", "%s: no border router has an IPv4 internal_addr; the translator's underlay is IPv4 (give the AS's routers IPv4 internal addresses)", c.Topology)
	}
	if n := len(c.Routers) + len(c.RouterNames); n > MaxRouters {
		return errorf(c.Path, "topology", "%s: %d border routers with IPv4 (or named) internal addresses; the translator takes at most %d", c.Topology, n, MaxRouters)
	}
	return nil
}

// takeResolved takes what resolving the routers' names found: an IPv4
// address is the router's, an IPv6 one is skipped (as an IPv6
// internal_addr is), a failure leaves the router unresolved.
func (c *Config) takeResolved(r resolvedRouters) {
	for name := range c.RouterNames {
		delete(c.Unresolved, name)
		delete(c.Skipped, name)
		a, ok := r.addrs[name]
		switch {
		case !ok:
			c.Unresolved[name] = fmt.Sprintf("%s does not resolve: %v", c.RouterNames[name], r.errs[name])
		case !a.Addr().Is4():
			c.Skipped[name] = fmt.Sprintf("%s resolves to IPv6 %s only, and the translator's underlay is IPv4", c.RouterNames[name], a.Addr())
			delete(c.Routers, name)
		default:
			c.Routers[name] = a
		}
	}
}

// RouterWarnings say which routers the translator takes nothing from, and
// why: IPv6 internal addresses, names that do not resolve.
func (c *Config) RouterWarnings() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(c.Skipped)) {
		out = append(out, fmt.Sprintf("%s: border router %s skipped: %s (SCION from it is refused as spoofed)", c.Topology, name, c.Skipped[name]))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Unresolved)) {
		out = append(out, fmt.Sprintf("%s: border router %s: %s; SCION from it is refused as spoofed until it resolves (tra run asks again every %s)", c.Topology, name, c.Unresolved[name], resolveRetry))
	}
	return out
}

// How routers given by name are resolved: each name within resolveTimeout,
// all of them again every resolveEvery, sooner (resolveRetry) while one
// does not resolve.
var (
	resolveTimeout = 2 * time.Second
	resolveEvery   = time.Minute
	resolveRetry   = 10 * time.Second
)

// lookupHost resolves a host name (tests replace it).
var lookupHost = func(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// resolvedRouters is what one resolution of the routers' names found.
type resolvedRouters struct {
	names map[string]string // what was resolved: router → host:port
	addrs map[string]netip.AddrPort
	errs  map[string]error
}

// resolveRouters resolves the routers' names at once, each as scionproto's
// loader would (the first IPv4 address, else the first IPv6 one).
func resolveRouters(ctx context.Context, names map[string]string) resolvedRouters {
	r := resolvedRouters{names: names, addrs: map[string]netip.AddrPort{}, errs: map[string]error{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, hp := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := resolveRouter(ctx, hp)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.errs[name] = err
			} else {
				r.addrs[name] = a
			}
		}()
	}
	wg.Wait()
	return r
}

func resolveRouter(ctx context.Context, hostport string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := net.DefaultResolver.LookupPort(ctx, "udp", port)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := lookupHost(ctx, host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("no address for %s", host)
	}
	pick := addrs[0].Unmap()
	for _, a := range addrs {
		if a.Unmap().Is4() {
			pick = a.Unmap()
			break
		}
	}
	return netip.AddrPortFrom(pick, uint16(p)), nil
}

// routerResolver resolves the routers' names aside from the daemon's loop,
// which it hands each result (out) and which hands it a new set of names
// when topology.json changes (set).
type routerResolver struct {
	names chan map[string]string
	out   chan resolvedRouters
}

func newRouterResolver() *routerResolver {
	return &routerResolver{names: make(chan map[string]string, 1), out: make(chan resolvedRouters)}
}

// set has names resolved now, in place of the ones before (the loop's
// call: it never blocks).
func (r *routerResolver) set(names map[string]string) {
	select {
	case <-r.names:
	default:
	}
	select {
	case r.names <- names:
	default:
	}
}

// run resolves names, first after retry if some did not resolve at load,
// until ctx is done.
func (r *routerResolver) run(ctx context.Context, names map[string]string, retry bool) {
	wait := resolveEvery
	if retry {
		wait = resolveRetry
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case names = <-r.names:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
		if len(names) == 0 {
			timer.Reset(resolveEvery)
			continue
		}
		res := resolveRouters(ctx, names)
		select {
		case r.out <- res:
		case <-ctx.Done():
			return
		}
		wait = resolveEvery
		if len(res.errs) > 0 {
			wait = resolveRetry
		}
		timer.Reset(wait)
	}
}
