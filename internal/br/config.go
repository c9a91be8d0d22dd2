// Configuration loading: the router's TOML file, scionproto's topology.json and master keys.

package br

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/segment/iface"
	"github.com/scionproto/scion/private/keyconf"
	"github.com/scionproto/scion/private/topology"
	jsontopo "github.com/scionproto/scion/private/topology/json"
	"github.com/scionproto/scion/router/control"
)

// Values of Config.SCMP.
const (
	// SCMPPass hands a packet that needs an SCMP error to the kernel (XDP_PASS), where a
	// slow path may answer it.
	SCMPPass = "pass"
	// SCMPDrop drops such a packet and counts it.
	SCMPDrop = "drop"
)

// Values of Config.XDPMode.
const (
	// XDPModeAuto is native mode, and generic mode (with a warning) on a
	// device whose driver has no native XDP.
	XDPModeAuto    = "auto"
	XDPModeNative  = "native"  // the driver runs the program (XDP_FLAGS_DRV_MODE), or attach fails
	XDPModeGeneric = "generic" // the kernel runs it after the skb is built (XDP_FLAGS_SKB_MODE)
)

// Values of Config.UDPChecksum.
const (
	// UDPChecksumUpdate updates a complete checksum by the words the router
	// rewrites (RFC 1624): a right one leaves right, a wrong one leaves
	// exactly as wrong and the next host's kernel drops it. Only a checksum
	// that may be pending (the pseudo-header's sum) is completed from the
	// datagram's sum. The cost does not grow with the datagram.
	UDPChecksumUpdate = "update"
	// UDPChecksumVerify sums every datagram and drops a wrong one on
	// arrival, where the kernel in front of the reference router would.
	UDPChecksumVerify = "verify"
)

// ErrInvalidConfig is matched by errors.Is for every error LoadConfig and Validate return.
var ErrInvalidConfig = errors.New("invalid border router configuration")

// Config is a border router's configuration: the TOML file plus what it points to.
type Config struct {
	Path               string   // the TOML file
	RouterID           string   // toml "router_id": the border_routers key in topology.json
	TopologyPath       string   // toml "topology", resolved: relative paths are relative to the TOML file's directory
	KeysDir            string   // toml "keys", resolved like TopologyPath: directory with master0.key (and optionally master1.key)
	InternalInterfaces []string // toml "internal_interfaces": network devices facing the AS's internal network (empty: the device holding Internal's address)
	CPUs               []int    // toml "cpus": worker CPUs to spread packets over (empty: process on the receiving CPU)
	MACCheck           bool     // toml "mac_check", default true
	SCMP               string   // toml "scmp": SCMPPass (default) or SCMPDrop: what happens to packets that need an SCMP error
	KeyRollover        bool     // toml "key_rollover", default false: also accept MACs made with master1.key's key
	// CountTxDrops (toml "count_tx_drops", default false) counts frames a
	// device dropped after the router handed them over (a veth's full ring,
	// a neighbour that stopped taking XDP frames before the keeper noticed)
	// as tx_failed instead of forwarded. It traces every XDP flush of the
	// machine (xdp_devmap_xmit, xdp_bulk_tx), in every namespace and for
	// every router, which cost a translated datagram crossing three ASes
	// about 0.45 µs per router attached (docs/br.md); refused redirects and
	// XDP_TX failures are counted either way.
	CountTxDrops bool
	// LinkTimeout (toml "link_timeout", default 600ms, scionproto's BFD detection time: 3 × 200 ms):
	// an external interface whose neighbour's BFD was seen and then not for this long is down,
	// and packets for it go to the reference router, which answers with SCMP. "0s" turns it off.
	LinkTimeout time.Duration
	XDPMode     string // toml "xdp_mode": XDPModeAuto (default), XDPModeNative or XDPModeGeneric; br attach --mode overrides it
	// UDPChecksum (toml "udp_checksum"): UDPChecksumUpdate (default) updates a
	// complete checksum by what the router changes, without reading the
	// datagram; UDPChecksumVerify sums every datagram and drops a wrong one
	// on arrival, as the kernel does before the reference router's socket.
	UDPChecksum string
	// ForwardIP (toml "forward_ip", default false): what the router finds is
	// not SCION (plain IPv4 and IPv6 not for this host) is forwarded in XDP
	// by the kernel's FIB instead of being passed up to the kernel.
	ForwardIP bool
	// ForwardIPExternal (toml "forward_ip_external", default false): with
	// ForwardIP, plain IP arriving on a device that faces only neighbour
	// ASes (it holds an external interface's address or reaches its
	// neighbour, and faces no internal network) is forwarded in XDP too,
	// past the kernel's forwarding switches and firewall; off, it goes up
	// to the kernel, which forwards it or not as without fastpath.
	ForwardIPExternal bool
	// SCIONVersion (toml "scion_version", default scionproto.Default) is
	// the release of the scionproto router this one fronts: where releases
	// deliver or drop differently (TCP's port, ports outside
	// dispatched_ports, STUN), fastpath does as that release does.
	SCIONVersion string

	// Resolved from the topology and keys:
	IA                                     addr.IA
	MTU                                    int            // the AS's MTU (topology "mtu")
	Internal                               netip.AddrPort // this router's internal_addr
	DispatchedPortStart, DispatchedPortEnd uint16         // topology "dispatched_ports"; both 0 when it is empty
	// Interfaces holds this router's external interfaces sorted by ID, then every sibling router's
	// interfaces sorted by ID.
	Interfaces []Interface
	// Keys are the forwarding (hop-field MAC) keys, 16 bytes each, derived from master0.key and
	// master1.key with scion's control.DeriveHFMacKey; Keys[1] is nil if master1.key is absent.
	// The reference router installs Keys[0] only; Keys[1] is used only with KeyRollover.
	Keys [2][]byte
}

// Reference is the scionproto release of the router this one fronts:
// SCIONVersion, or scionproto.Default if it is unset.
func (c *Config) Reference() string { return scionproto.OrDefault(c.SCIONVersion) }

// InterfaceKind tells whether an interface is this router's own link or a sibling's.
type InterfaceKind int

const (
	External InterfaceKind = iota + 1 // this router's link to a neighbour AS
	Sibling                           // an interface of another router of this AS
)

func (k InterfaceKind) String() string {
	switch k {
	case External:
		return "external"
	case Sibling:
		return "sibling"
	default:
		return fmt.Sprintf("InterfaceKind(%d)", int(k))
	}
}

// Interface is one SCION interface of the AS, as the router sees it.
type Interface struct {
	ID            uint16
	Kind          InterfaceKind
	LinkType      string         // "core", "parent", "child", "peer" (topology link_to, lowercase)
	NeighborIA    addr.IA        // isd_as across the link
	Local, Remote netip.AddrPort // External: underlay local/remote; zero for Sibling
	SiblingAddr   netip.AddrPort // Sibling: the owning router's internal_addr; zero for External
	Router        string         // owning router's name
	MTU           int            // the interface's mtu, or the AS's when the topology gives none
}

// tomlFile is the TOML file as written; LoadConfig fills the defaults in before decoding.
type tomlFile struct {
	RouterID           string   `toml:"router_id"`
	Topology           string   `toml:"topology"`
	Keys               string   `toml:"keys"`
	InternalInterfaces []string `toml:"internal_interfaces"`
	CPUs               []int    `toml:"cpus"`
	MACCheck           bool     `toml:"mac_check"`
	SCMP               string   `toml:"scmp"`
	KeyRollover        bool     `toml:"key_rollover"`
	CountTxDrops       bool     `toml:"count_tx_drops"`
	XDPMode            string   `toml:"xdp_mode"`
	UDPChecksum        string   `toml:"udp_checksum"`
	LinkTimeout        string   `toml:"link_timeout"`
	ForwardIP          bool     `toml:"forward_ip"`
	ForwardIPExternal  bool     `toml:"forward_ip_external"`
	SCIONVersion       string   `toml:"scion_version"`
}

// minMasterKeyLen is the shortest master key accepted; scion's generator writes 16 random bytes.
const minMasterKeyLen = 16

// LoadConfig reads the TOML file at path and the topology and master keys it names, and returns
// the validated configuration. Nothing is attached or opened beyond reading those files.
func LoadConfig(path string) (*Config, error) {
	c := &Config{Path: path}
	if err := c.decodeTOML(); err != nil {
		return nil, err
	}
	// Settings first, so a typo in the TOML file is reported before anything it points to.
	if err := c.validateSettings(); err != nil {
		return nil, err
	}
	if err := c.loadTopology(); err != nil {
		return nil, err
	}
	if err := c.loadKeys(); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// Last, so that what every release refuses is reported as such first.
	if scionproto.RouterOf(c.Reference()).LiteralUnderlays {
		if err := literalUnderlays(c.TopologyPath, c.Reference()); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Validate checks every field; LoadConfig calls it, and it works on a hand-built Config too (the
// paths may then be empty, and errors name the fields' TOML or topology keys without a file).
func (c *Config) Validate() error {
	if err := c.validateSettings(); err != nil {
		return err
	}
	if err := c.validateKeys(); err != nil {
		return err
	}
	return c.validateTopology()
}

// configError is every error of this file: "file: key: what is wrong; what to do".
type configError struct {
	file, key, msg string
	err            error // the cause, for errors.Is/As; its text is already in msg where useful
}

func (e *configError) Error() string {
	parts := make([]string, 0, 3)
	for _, s := range []string{e.file, e.key, e.msg} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

func (e *configError) Unwrap() error { return e.err }

func (e *configError) Is(target error) bool { return target == ErrInvalidConfig }

func errorf(file, key string, cause error, format string, args ...any) error {
	return &configError{file: file, key: key, msg: fmt.Sprintf(format, args...), err: cause}
}

// tomlKeys lists the keys the TOML file may hold, in declaration order.
func tomlKeys() []string {
	t := reflect.TypeFor[tomlFile]()
	keys := make([]string, t.NumField())
	for i := range keys {
		keys[i] = t.Field(i).Tag.Get("toml")
	}
	return keys
}

func (c *Config) decodeTOML() error {
	b, err := os.ReadFile(c.Path)
	if err != nil {
		return errorf(c.Path, "", err, "%s; give the path of the router's TOML file", ioProblem(err))
	}
	raw := tomlFile{MACCheck: true, SCMP: SCMPPass, XDPMode: XDPModeAuto, UDPChecksum: UDPChecksumUpdate, LinkTimeout: DefaultLinkTimeout.String()}
	md, err := toml.Decode(string(b), &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			after := ""
			if pe.LastKey != "" {
				after = fmt.Sprintf(" (after key %q)", pe.LastKey)
			}
			return errorf(c.Path, "", err, "line %d, column %d%s: invalid TOML: %s; fix the syntax",
				pe.Position.Line, pe.Position.Col, after, pe.Message)
		}
		// Type mismatches come as "toml: line N (last key "k"): incompatible types: ...".
		return errorf(c.Path, "", err, "%s; see br.example.toml (deploy/examples/ in the source, share/doc/fastpath/examples/ where fastpath is installed) for each key's type",
			strings.TrimPrefix(err.Error(), "toml: "))
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		names := make([]string, len(undecoded))
		for i, k := range undecoded {
			names[i] = k.String()
		}
		what := "unknown key; remove it or fix its spelling"
		if len(names) > 1 {
			what = "unknown keys; remove them or fix their spelling"
		}
		return errorf(c.Path, strings.Join(names, ", "), nil,
			"%s (known keys: %s)", what, strings.Join(tomlKeys(), ", "))
	}
	dir := filepath.Dir(c.Path)
	resolve := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	switch {
	case raw.RouterID == "":
		return errorf(c.Path, "router_id", nil,
			"missing; set it to this router's name among topology.json's border_routers")
	case raw.Topology == "":
		return errorf(c.Path, "topology", nil,
			"missing; set it to the path of scion's topology.json (relative to this file's directory)")
	case raw.Keys == "":
		return errorf(c.Path, "keys", nil,
			"missing; set it to the directory holding master0.key (relative to this file's directory)")
	}
	c.RouterID = raw.RouterID
	c.TopologyPath = resolve(raw.Topology)
	c.KeysDir = resolve(raw.Keys)
	c.InternalInterfaces = raw.InternalInterfaces
	c.CPUs = raw.CPUs
	c.MACCheck = raw.MACCheck
	c.SCMP = raw.SCMP
	c.KeyRollover = raw.KeyRollover
	c.CountTxDrops = raw.CountTxDrops
	c.XDPMode = raw.XDPMode
	c.UDPChecksum = raw.UDPChecksum
	c.ForwardIP = raw.ForwardIP
	c.ForwardIPExternal = raw.ForwardIPExternal
	// Unset, Reference() gives the default, and attach says so.
	c.SCIONVersion = raw.SCIONVersion
	d, err := time.ParseDuration(raw.LinkTimeout)
	if err != nil || d < 0 {
		return errorf(c.Path, "link_timeout", nil, "%q is not a duration; give one like \"600ms\" (\"0s\" turns the check off)", raw.LinkTimeout)
	}
	c.LinkTimeout = d
	return nil
}

// DefaultLinkTimeout is scionproto's BFD detection time: 3 missed packets of
// 200 ms.
const DefaultLinkTimeout = 600 * time.Millisecond

// brKey and ifKey name a part of topology.json as a JSON path.
func brKey(name string) string { return fmt.Sprintf("border_routers[%q]", name) }

func ifKey(name string, id uint64) string {
	return fmt.Sprintf("%s.interfaces[\"%d\"]", brKey(name), id)
}

func (c *Config) loadTopology() error {
	file := c.TopologyPath
	b, err := os.ReadFile(file)
	if err != nil {
		return errorf(c.Path, "topology", err,
			"%v; fix the path (relative paths are relative to the directory of %s)", err, c.Path)
	}
	// Parse once the way scion does, to point at a JSON error and to keep a null entry from
	// reaching scion's converter, which dereferences it.
	var raw jsontopo.Topology
	if err := json.Unmarshal(b, &raw); err != nil {
		return jsonError(file, b, err)
	}
	for _, name := range slices.Sorted(maps.Keys(raw.BorderRouters)) {
		rb := raw.BorderRouters[name]
		if rb == nil {
			return errorf(file, brKey(name), nil, "is null; give the router's internal_addr and interfaces")
		}
		for _, id := range slices.Sorted(maps.Keys(rb.Interfaces)) {
			if rb.Interfaces[id] == nil {
				return errorf(file, ifKey(name, uint64(id)), nil, "is null; describe the interface or remove it")
			}
		}
	}
	topo, err := topology.RWTopologyFromJSONBytes(b)
	if err != nil {
		return locateTopologyError(file, &raw, err)
	}

	br, ok := topo.BR[c.RouterID]
	if !ok {
		have := slices.Sorted(maps.Keys(topo.BR))
		list := strings.Join(have, ", ")
		if len(have) == 0 {
			list = "none"
		}
		return errorf(c.Path, fmt.Sprintf("router_id %q", c.RouterID), nil,
			"not in %s border_routers (have: %s)", file, list)
	}
	c.IA = topo.IA
	c.MTU = topo.MTU
	c.Internal = br.InternalAddr
	c.DispatchedPortStart, c.DispatchedPortEnd = topo.DispatchedPortStart, topo.DispatchedPortEnd

	// Mirror router/control.confExternalInterfaces: this router's interfaces are its own links
	// (underlay local/remote), every other router's are reached through its internal_addr.
	var ext, sib []Interface
	for _, name := range slices.Sorted(maps.Keys(topo.BR)) {
		owner := topo.BR[name]
		for _, id := range owner.IfIDs {
			info := owner.IFs[id]
			if id == 0 {
				return errorf(file, ifKey(name, 0), nil,
					"interface ID 0 is reserved (hop fields use it for \"no interface\"); renumber it in 1..65535")
			}
			if id > math.MaxUint16 {
				return errorf(file, ifKey(name, uint64(id)), nil,
					"interface ID %d is not in 1..65535; SCION hop fields carry 16-bit interface IDs, renumber it", id)
			}
			intf := Interface{
				ID:         uint16(id),
				LinkType:   info.LinkType.String(),
				NeighborIA: info.IA,
				Router:     name,
				MTU:        info.MTU,
			}
			if intf.MTU == 0 {
				intf.MTU = topo.MTU
			}
			if name == c.RouterID {
				intf.Kind = External
				intf.Local, intf.Remote = info.Local, info.Remote
				ext = append(ext, intf)
			} else {
				intf.Kind = Sibling
				intf.SiblingAddr = owner.InternalAddr
				sib = append(sib, intf)
			}
		}
	}
	byID := func(a, b Interface) int { return int(a.ID) - int(b.ID) }
	slices.SortFunc(ext, byID)
	slices.SortFunc(sib, byID)
	c.Interfaces = append(ext, sib...)
	return nil
}

// jsonError points at the line and column of a JSON syntax or type error.
func jsonError(file string, b []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line, col := lineCol(b, se.Offset)
		return errorf(file, "", err, "line %d, column %d: invalid JSON: %v; fix the syntax", line, col, err)
	case errors.As(err, &te):
		line, col := lineCol(b, te.Offset)
		return errorf(file, te.Field, err, "line %d, column %d: %v; fix the value's type", line, col, err)
	default:
		return errorf(file, "", err, "%v", err)
	}
}

// lineCol gives the 1-based line and column of the last byte encoding/json read before it
// stopped: its offsets count the offending byte.
func lineCol(b []byte, offset int64) (line, col int) {
	at := int(min(max(offset-1, 0), int64(len(b))))
	before := string(b[:at])
	line = 1 + strings.Count(before, "\n")
	col = at - strings.LastIndexByte(before, '\n')
	return line, col
}

// locateTopologyError finds the part of topology.json that scion's converter rejected, by
// converting the parts one at a time with the same converter, and names it. scion's error stays
// the cause.
func locateTopologyError(file string, raw *jsontopo.Topology, err error) error {
	meta := jsontopo.Topology{
		IA:               raw.IA,
		MTU:              raw.MTU,
		EndhostPortRange: raw.EndhostPortRange,
		Attributes:       raw.Attributes,
	}
	convert := func(brs map[string]*jsontopo.BRInfo) error {
		t := meta
		t.BorderRouters = brs
		_, err := topology.RWTopologyFromJSONTopology(&t)
		return err
	}
	if e := convert(nil); e != nil {
		if ia, perr := addr.ParseIA(raw.IA); perr != nil || ia.IsWildcard() {
			return errorf(file, "isd_as", err, "%q: %v; write the AS as ISD-AS, e.g. \"1-ff00:0:110\"", raw.IA, e)
		}
		return errorf(file, "dispatched_ports", err,
			"%q: %v; write \"START-END\" (e.g. \"31000-32767\"), \"all\", or leave it empty", raw.EndhostPortRange, e)
	}
	isCore := slices.Contains(raw.Attributes, jsontopo.AttrCore)
	owner := map[iface.ID]string{}
	for _, name := range slices.Sorted(maps.Keys(raw.BorderRouters)) {
		rb := raw.BorderRouters[name]
		if e := convert(map[string]*jsontopo.BRInfo{name: {InternalAddr: rb.InternalAddr}}); e != nil {
			return errorf(file, brKey(name)+".internal_addr", err, "%q: %v; write \"IP:port\"", rb.InternalAddr, e)
		}
		for _, id := range slices.Sorted(maps.Keys(rb.Interfaces)) {
			key := ifKey(name, uint64(id))
			if other, dup := owner[id]; dup {
				return errorf(file, key, err,
					"interface ID %d is also used by %s; interface IDs must be unique within the AS", id, brKey(other))
			}
			owner[id] = name
			ri := *rb.Interfaces[id]
			one := func(ri jsontopo.BRInterface) error {
				return convert(map[string]*jsontopo.BRInfo{name: {
					InternalAddr: rb.InternalAddr,
					Interfaces:   map[iface.ID]*jsontopo.BRInterface{id: &ri},
				}})
			}
			e := one(ri)
			if e == nil {
				continue
			}
			if _, perr := addr.ParseIA(ri.IA); perr != nil {
				return errorf(file, key+".isd_as", err, "%q: %v; write the neighbour AS as ISD-AS", ri.IA, e)
			}
			lt := topology.LinkTypeFromString(ri.LinkTo)
			if lerr := (topology.IFInfo{LinkType: lt}).CheckLinks(isCore, name); lerr != nil {
				allowed := "parent, child or peer (this AS is not core: attributes lacks \"core\")"
				if isCore {
					allowed = "core, child or peer (this AS is core: attributes has \"core\")"
				}
				return errorf(file, key+".link_to", err, "%q: %v; use %s", ri.LinkTo, e, allowed)
			}
			// scion converts local before remote: if a known-good remote cures it, remote was at fault.
			fixed := ri
			fixed.Underlay.Remote = "192.0.2.1:1"
			if one(fixed) == nil {
				return errorf(file, key+".underlay.remote", err, "%q: %v; write \"IP:port\"", ri.Underlay.Remote, e)
			}
			field, hint := localField(ri.Underlay)
			return errorf(file, key+"."+field, err, "%v; %s", e, hint)
		}
	}
	// Not in the border routers: the services, which scion parses too.
	return errorf(file, "", err, "%v; fix the service entry it names", err)
}

// localField names the underlay field scion takes the local address from, and how to write it.
// literalUnderlays refuses what a release's router refuses to start with
// from v0.14.0 on: every interface of every router (siblings' too) must
// give "local" and "remote" as a literal "IP:port" — no host name, no
// ":port", no deprecated "public" or "bind" (it no longer reads them).
func literalUnderlays(file, version string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return errorf(file, "", err, "%v", err)
	}
	var raw jsontopo.Topology
	if err := json.Unmarshal(b, &raw); err != nil {
		return jsonError(file, b, err)
	}
	for _, name := range slices.Sorted(maps.Keys(raw.BorderRouters)) {
		rb := raw.BorderRouters[name]
		for _, id := range slices.Sorted(maps.Keys(rb.Interfaces)) {
			u := rb.Interfaces[id].Underlay
			key := ifKey(name, uint64(id))
			if u.DeprecatedPublic != "" || u.DeprecatedBind != "" {
				return errorf(file, key+".underlay", nil, "uses \"public\"/\"bind\", which scionproto %s's router no longer reads; write \"local\": \"IP:port\" instead (or set scion_version to the release the routers run)", version)
			}
			for _, f := range []struct{ name, v string }{{"local", u.Local}, {"remote", u.Remote}} {
				if _, err := netip.ParseAddrPort(f.v); err != nil {
					return errorf(file, key+".underlay."+f.name, nil, "%q is not a literal IP:port, which scionproto %s's router needs (no host names, no \":port\")", f.v, version)
				}
			}
		}
	}
	return nil
}

func localField(u jsontopo.Underlay) (field, hint string) {
	const addrPort = "write \"IP:port\""
	deprecated := u.DeprecatedPublic != "" || u.DeprecatedBind != ""
	switch {
	case deprecated && u.Local != "":
		return "underlay", "keep \"local\" and remove the deprecated \"public\" and \"bind\""
	case u.DeprecatedBind != "":
		if _, err := netip.ParseAddr(u.DeprecatedBind); err != nil {
			return "underlay.bind", "write an IP address, or replace \"public\" and \"bind\" by \"local\": \"IP:port\""
		}
		return "underlay.public", addrPort
	case u.DeprecatedPublic != "":
		return "underlay.public", addrPort
	default:
		return "underlay.local", addrPort
	}
}

// loadKeys reads the master keys with scion's keyconf and derives the forwarding keys with scion's
// control.DeriveHFMacKey, as the reference router does (it installs only Key0's).
func (c *Config) loadKeys() error {
	st, err := os.Stat(c.KeysDir)
	if err != nil {
		return errorf(c.Path, "keys", err,
			"%v; point it at the directory holding master0.key (relative paths are relative to this file's directory)", err)
	}
	if !st.IsDir() {
		return errorf(c.Path, "keys", nil, "%s is not a directory; point it at the directory holding master0.key", c.KeysDir)
	}
	path0 := filepath.Join(c.KeysDir, keyconf.MasterKey0)
	path1 := filepath.Join(c.KeysDir, keyconf.MasterKey1)
	m, err := keyconf.LoadMaster(c.KeysDir)
	if err != nil {
		// LoadMaster names neither the file at fault nor lets master1.key be absent, which this
		// router allows: read the files one by one to tell.
		key0, err0 := readMasterKey(path0)
		if err0 != nil {
			return err0
		}
		if _, serr := os.Stat(path1); !errors.Is(serr, fs.ErrNotExist) {
			if _, err1 := readMasterKey(path1); err1 != nil {
				return err1
			}
			return errorf(c.KeysDir, "", err, "loading master keys: %v", err)
		}
		m = keyconf.Master{Key0: key0}
	}
	for _, k := range []struct {
		path string
		key  []byte
	}{{path0, m.Key0}, {path1, m.Key1}} {
		if k.key != nil && len(k.key) < minMasterKeyLen {
			return errorf(k.path, "", nil,
				"the key is %d bytes, need at least %d; make one with: head -c 16 /dev/urandom | base64",
				len(k.key), minMasterKeyLen)
		}
	}
	c.Keys[0] = control.DeriveHFMacKey(m.Key0)
	if m.Key1 != nil {
		c.Keys[1] = control.DeriveHFMacKey(m.Key1)
	}
	return nil
}

// readMasterKey decodes one key file as keyconf does (standard base64, newlines ignored), to say
// which file is wrong when keyconf.LoadMaster fails.
func readMasterKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errorf(path, "", err,
			"%s; copy the AS's master key here (scion's keys/%s) or make one with: head -c 16 /dev/urandom | base64",
			ioProblem(err), filepath.Base(path))
	}
	key := make([]byte, base64.StdEncoding.DecodedLen(len(b)))
	n, err := base64.StdEncoding.Decode(key, b)
	if err != nil {
		return nil, errorf(path, "", err, "not valid base64: %v; the file holds the key in standard base64", err)
	}
	return key[:n], nil
}

// ioProblem is a file error's text without the path, for messages that name the file already.
func ioProblem(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func (c *Config) validateSettings() error {
	if c.SCIONVersion != "" {
		if err := scionproto.Check(c.SCIONVersion); err != nil {
			return errorf(c.Path, "scion_version", nil, "%v: the release of scionproto's router behind this one", err)
		}
	}
	if c.RouterID == "" {
		return errorf(c.Path, "router_id", nil, "missing; set it to this router's name among topology.json's border_routers")
	}
	if c.SCMP != SCMPPass && c.SCMP != SCMPDrop {
		return errorf(c.Path, "scmp", nil, "%q is not valid; use %q (default) or %q", c.SCMP, SCMPPass, SCMPDrop)
	}
	if c.XDPMode != XDPModeAuto && c.XDPMode != XDPModeNative && c.XDPMode != XDPModeGeneric {
		return errorf(c.Path, "xdp_mode", nil, "%q is not valid; use %q (default), %q or %q",
			c.XDPMode, XDPModeAuto, XDPModeNative, XDPModeGeneric)
	}
	if c.ForwardIP && c.XDPMode == XDPModeGeneric {
		// The generic-mode copy of the router is not frags-aware, and a
		// program array takes programs of one kind: its slot stays empty.
		return errorf(c.Path, "forward_ip", nil, "needs native XDP (xdp_mode = %q or %q); in generic mode plain IP would go up to the kernel all the same: drop one of the two", XDPModeAuto, XDPModeNative)
	}
	if c.ForwardIPExternal && !c.ForwardIP {
		return errorf(c.Path, "forward_ip_external", nil, "forwards plain IP from neighbour ASes, which needs forward_ip = true; set both, or drop forward_ip_external")
	}
	if c.UDPChecksum != UDPChecksumUpdate && c.UDPChecksum != UDPChecksumVerify {
		return errorf(c.Path, "udp_checksum", nil, "%q is not valid; use %q (default) or %q",
			c.UDPChecksum, UDPChecksumUpdate, UDPChecksumVerify)
	}
	ncpu := runtime.NumCPU()
	seenCPU := map[int]bool{}
	for _, cpu := range c.CPUs {
		if cpu < 0 || cpu >= ncpu {
			return errorf(c.Path, "cpus", nil, "CPU %d is out of range; this machine has CPUs 0..%d", cpu, ncpu-1)
		}
		if seenCPU[cpu] {
			return errorf(c.Path, "cpus", nil, "CPU %d is listed twice; list each CPU once", cpu)
		}
		seenCPU[cpu] = true
	}
	seenDev := map[string]bool{}
	for _, dev := range c.InternalInterfaces {
		if problem := devNameProblem(dev); problem != "" {
			return errorf(c.Path, "internal_interfaces", nil, "%q %s; give the name of a network device (ip link)", dev, problem)
		}
		if seenDev[dev] {
			return errorf(c.Path, "internal_interfaces", nil, "%q is listed twice; list each device once", dev)
		}
		seenDev[dev] = true
	}
	return nil
}

// devNameProblem mirrors the kernel's dev_valid_name.
func devNameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > 15:
		return "is longer than 15 bytes"
	case name == "." || name == "..":
		return "is not a device name"
	case strings.ContainsAny(name, "/: \t\n\r\v\f"):
		return "contains '/', ':' or white space"
	}
	return ""
}

func (c *Config) validateKeys() error {
	for i, k := range c.Keys {
		if (i == 0 || k != nil) && len(k) != 16 {
			return errorf(c.Path, "keys", nil,
				"forwarding key %d is %d bytes, want 16 (derived from master%d.key with DeriveHFMacKey)", i, len(k), i)
		}
	}
	if c.KeyRollover && c.Keys[1] == nil {
		return errorf(c.Path, "key_rollover", nil,
			"true, but %s is absent; add the second master key there or set key_rollover = false",
			filepath.Join(c.KeysDir, keyconf.MasterKey1))
	}
	return nil
}

// endpointProblem says what is wrong with an underlay or internal address, or "".
func endpointProblem(a netip.AddrPort) string {
	switch {
	case !a.Addr().IsValid() && a.Port() != 0:
		return fmt.Sprintf("\":%d\" has no IP address; the XDP router matches and writes the address, give \"IP:port\"", a.Port())
	case !a.Addr().IsValid():
		return "missing; give \"IP:port\""
	case a.Addr().IsUnspecified():
		return fmt.Sprintf("%s is the unspecified address; give the address itself", a)
	case a.Port() == 0:
		return fmt.Sprintf("%s has port 0; give the UDP port", a)
	}
	return ""
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func (c *Config) validateTopology() error {
	file := c.TopologyPath
	if c.IA.IsZero() || c.IA.IsWildcard() {
		return errorf(file, "isd_as", nil, "%q is not a specific AS; write it as ISD-AS, e.g. \"1-ff00:0:110\"", c.IA)
	}
	if c.MTU <= 0 {
		return errorf(file, "mtu", nil, "%d: must be positive; set the AS's MTU, e.g. 1472", c.MTU)
	}
	if c.DispatchedPortStart > c.DispatchedPortEnd || (c.DispatchedPortStart == 0) != (c.DispatchedPortEnd == 0) {
		return errorf(file, "dispatched_ports", nil, "%d-%d is not a port range; write \"START-END\" with 1 <= START <= END",
			c.DispatchedPortStart, c.DispatchedPortEnd)
	}
	internalKey := brKey(c.RouterID) + ".internal_addr"
	if p := endpointProblem(c.Internal); p != "" {
		return errorf(file, internalKey, nil, "%s", p)
	}
	ids := map[uint16]string{}
	locals := map[netip.AddrPort]uint16{}
	for _, intf := range c.Interfaces {
		key := ifKey(intf.Router, uint64(intf.ID))
		if intf.Router == "" {
			return errorf(file, key, nil, "Router is empty; name the router that owns interface %d", intf.ID)
		}
		if intf.ID == 0 {
			return errorf(file, key, nil, "interface ID 0 is reserved; renumber it in 1..65535")
		}
		if other, dup := ids[intf.ID]; dup {
			return errorf(file, key, nil,
				"interface ID %d is also used by %s; interface IDs must be unique within the AS", intf.ID, brKey(other))
		}
		ids[intf.ID] = intf.Router
		switch intf.LinkType {
		case "core", "parent", "child", "peer":
		default:
			return errorf(file, key+".link_to", nil, "%q is not a link type; use core, parent, child or peer", intf.LinkType)
		}
		if intf.NeighborIA.IsZero() || intf.NeighborIA.IsWildcard() {
			return errorf(file, key+".isd_as", nil, "%q is not a specific AS; write the neighbour AS as ISD-AS", intf.NeighborIA)
		}
		if intf.MTU <= 0 {
			return errorf(file, key+".mtu", nil, "%d: must be positive", intf.MTU)
		}
		switch intf.Kind {
		case External:
			if err := c.validateExternal(file, key, intf, locals); err != nil {
				return err
			}
		case Sibling:
			if intf.Router == c.RouterID {
				return errorf(file, key, nil, "a sibling interface belongs to this router %q; make it External", c.RouterID)
			}
			sibKey := brKey(intf.Router) + ".internal_addr"
			if p := endpointProblem(intf.SiblingAddr); p != "" {
				return errorf(file, sibKey, nil, "%s", p)
			}
			if intf.SiblingAddr.Addr().Is4() != c.Internal.Addr().Is4() {
				return errorf(file, sibKey, nil,
					"%s is %s but %s %s is %s; the routers of an AS must reach each other over one address family",
					intf.SiblingAddr, family(intf.SiblingAddr.Addr()), internalKey, c.Internal, family(c.Internal.Addr()))
			}
		default:
			return errorf(file, key, nil, "kind %v is neither External nor Sibling", intf.Kind)
		}
	}
	return nil
}

func (c *Config) validateExternal(file, key string, intf Interface, locals map[netip.AddrPort]uint16) error {
	if intf.Router != c.RouterID {
		return errorf(file, key, nil, "an external interface belongs to router %q, not to this router %q; make it Sibling",
			intf.Router, c.RouterID)
	}
	if !intf.Local.IsValid() && intf.Local.Port() == 0 && !intf.Remote.IsValid() && intf.Remote.Port() == 0 {
		return errorf(file, key+".underlay", nil,
			"missing; this router owns the interface and needs underlay \"local\" and \"remote\" (\"IP:port\" each)")
	}
	if p := endpointProblem(intf.Local); p != "" {
		return errorf(file, key+".underlay.local", nil, "%s", p)
	}
	if p := endpointProblem(intf.Remote); p != "" {
		return errorf(file, key+".underlay.remote", nil, "%s", p)
	}
	if intf.Local.Addr().Is4() != intf.Remote.Addr().Is4() {
		return errorf(file, key+".underlay", nil, "local %s is %s but remote %s is %s; both ends of a link use one address family",
			intf.Local, family(intf.Local.Addr()), intf.Remote, family(intf.Remote.Addr()))
	}
	if intf.Local == c.Internal {
		return errorf(file, key+".underlay.local", nil, "%s is also %s.internal_addr; give the interface its own address or port",
			intf.Local, brKey(c.RouterID))
	}
	if other, dup := locals[intf.Local]; dup {
		return errorf(file, key+".underlay.local", nil, "%s is also the local address of interface %d; give each interface its own address or port",
			intf.Local, other)
	}
	locals[intf.Local] = intf.ID
	return nil
}
