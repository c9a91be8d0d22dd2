// Package tra is the SCION-IP translator: an unmodified IPv6 host talks to
// SCION hosts (and to hosts behind other translators) through its
// SCION-mapped IPv6 address. The data plane is bpf/tra; this package loads
// and attaches it, keeps its paths (the daemon, `tra run`), and reads its
// counters.
package tra

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/private/path/pathpol"
	"github.com/scionproto/scion/private/topology"
)

// Policies a destination's paths are chosen by.
const (
	PolicyShortest = "shortest" // fewest hops first
	PolicyLatency  = "latency"  // lowest latency the daemon's metadata gives first
	PolicySequence = "sequence" // only paths matching a hop-predicate sequence
)

// ErrInvalidConfig is matched by every error of LoadConfig and Validate.
var ErrInvalidConfig = errors.New("invalid translator configuration")

// Config is a translator's configuration: the TOML file and what it names.
type Config struct {
	Path string // the TOML file

	Topology string // toml "topology": the AS's topology.json (resolved against the file's directory)
	Daemon   string // toml "daemon": scionproto's daemon (sciond), ip:port
	Device   string // toml "device": the host's device towards the AS's routers
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

	// Resolved:
	IA addr.IA
	// Routers are the AS's border routers' internal addresses by name: the
	// first hops of what the translator sends.
	Routers map[string]netip.AddrPort
	// IfOwners are the routers (internal addresses) by the AS's
	// interfaces: the only senders whose SCMP may say one is down.
	IfOwners            map[uint64]netip.AddrPort
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
	Address     string `toml:"address"`
	Pair        string `toml:"pair"`
	Policy      string `toml:"policy"`
	MaxPaths    int    `toml:"max_paths"`
	Probe       string `toml:"probe_interval"`
	Idle        string `toml:"idle_timeout"`
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

// LoadConfig reads the TOML file and the topology.json it names. The
// address may still be unknown (the device's, found at attach).
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errorf(path, "", "%v; give the translator's TOML file", err)
	}
	raw := tomlFile{Pair: "fp-tra", Policy: PolicyShortest, MaxPaths: 2}
	md, err := toml.Decode(string(b), &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, errorf(path, fmt.Sprintf("line %d", pe.Position.Line), "%s", pe.Message)
		}
		return nil, errorf(path, "", "%v", err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		return nil, errorf(path, u[0].String(), "unknown key; the keys are topology, daemon, device, address, pair, policy, max_paths, probe_interval, idle_timeout and [[destination]] (ia, policy, sequence)")
	}
	c := &Config{Path: path, Daemon: raw.Daemon, Device: raw.Device, Pair: raw.Pair, Policy: raw.Policy, MaxPaths: raw.MaxPaths, Destinations: map[addr.IA]Destination{}}
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
	topo, err := topology.RWTopologyFromJSONFile(c.Topology)
	if err != nil {
		return nil, errorf(path, "topology", "%s: %v", c.Topology, err)
	}
	c.IA = topo.IA
	c.Routers = map[string]netip.AddrPort{}
	c.IfOwners = map[uint64]netip.AddrPort{}
	for name, br := range topo.BR {
		c.Routers[name] = br.InternalAddr
		for _, id := range br.IfIDs {
			c.IfOwners[uint64(id)] = br.InternalAddr
		}
	}
	// The translator's underlay is IPv4: the host reaches, and takes SCION
	// from, routers with IPv4 internal addresses only.
	v4 := 0
	for _, r := range c.Routers {
		if r.Addr().Unmap().Is4() {
			v4++
		}
	}
	if v4 == 0 {
		return nil, errorf(path, "topology", "%s: no border router has an IPv4 internal_addr; the translator's underlay is IPv4 (give the AS's routers IPv4 internal addresses)", c.Topology)
	}
	if len(c.Routers) > MaxRouters {
		return nil, errorf(path, "topology", "%s: %d border routers; the translator takes at most %d", c.Topology, len(c.Routers), MaxRouters)
	}
	if topo.DispatchedPortStart > 0 {
		c.DispatchedPortStart, c.DispatchedPortEnd = uint16(topo.DispatchedPortStart), uint16(topo.DispatchedPortEnd)
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
