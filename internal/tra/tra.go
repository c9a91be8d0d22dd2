package tra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/safchain/ethtool"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// MaxPaths is how many paths a destination holds (TRA_MAX_PATHS).
const MaxPaths = len(translatorTraDest{}.Paths)

// PathMax is the longest path header a destination's path may have.
const PathMax = len(translatorTraPath{}.Raw)

// PinRoot holds a directory per attached translator.
var PinRoot = filepath.Join(preflight.BPFFS, "fastpath", "tra")

// PinDir is where a translator's maps and links are pinned.
func PinDir(name string) string { return filepath.Join(PinRoot, name) }

// Name is a translator's name, its pin directory's: the pair's name, after
// the host's namespace and a colon when the host has one (ns "" is the
// calling thread's), so that hosts in several namespaces of one machine
// each have their own.
func Name(pair, ns string) string {
	if ns == "" {
		ns = netns.Current()
	}
	if ns == "" {
		return pair
	}
	return ns + ":" + pair
}

// splitName is the host's namespace and the pair of a translator's name.
func splitName(name string) (ns, pair string) {
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		return name[:i], name[i+1:]
	}
	return "", name
}

// List names the attached translators.
func List() ([]string, error) {
	ents, err := os.ReadDir(PinRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, err
}

// ErrNotAttached is returned for a translator that is not attached.
var ErrNotAttached = errors.New("not attached")

// Verdict is why a program did what it did (enum tra_verdict).
type Verdict = translatorTraVerdict

// VerdictCount is the number of verdicts.
const VerdictCount = int(translatorTraVerdictTRA_VERDICT_MAX)

var verdictNames = map[Verdict]string{
	translatorTraVerdictTRA_OUT:          "translated_out",
	translatorTraVerdictTRA_IN:           "translated_in",
	translatorTraVerdictTRA_NO_PATH:      "no_path",
	translatorTraVerdictTRA_QUEUE_FULL:   "queue_full",
	translatorTraVerdictTRA_PTB:          "ptb_sent",
	translatorTraVerdictTRA_MSS_CLAMPED:  "mss_clamped",
	translatorTraVerdictTRA_NOT_SMIP:     "not_smip",
	translatorTraVerdictTRA_UNMAPPABLE:   "unmappable",
	translatorTraVerdictTRA_NOT_OURS:     "not_ours",
	translatorTraVerdictTRA_UNSUPPORTED:  "unsupported",
	translatorTraVerdictTRA_PARSE_ERROR:  "parse_error",
	translatorTraVerdictTRA_SCMP_ERROR:   "scmp_error",
	translatorTraVerdictTRA_ICMP_ERROR:   "icmp_error",
	translatorTraVerdictTRA_TX_FAILED:    "tx_failed",
	translatorTraVerdictTRA_MULTI_BUFFER: "multi_buffer",
}

// VerdictName is the counter name of a verdict.
func VerdictName(v Verdict) string {
	if n, ok := verdictNames[v]; ok {
		return n
	}
	return fmt.Sprintf("verdict_%d", v)
}

// Path is one path to a destination AS, as the data plane holds it.
type Path struct {
	Raw     []byte         // the path header (standard path), as the daemon gives it
	MTU     uint16         // the largest SCION packet it takes
	NextHop netip.AddrPort // the first router's underlay address (IPv4)
	Expiry  uint64         // Unix seconds
}

// Translator is a loaded translator: its programs and maps.
type Translator struct {
	objs translatorObjects
}

// Load loads the programs and maps, pinned under dir (reused when pinned
// there already); nothing is attached.
func Load(dir string) (*Translator, error) {
	spec, err := loadTranslator()
	if err != nil {
		return nil, fmt.Errorf("load translator spec: %w", err)
	}
	var opts ebpf.CollectionOptions
	if dir != "" {
		for _, m := range spec.Maps {
			if !strings.HasPrefix(m.Name, ".") {
				m.Pinning = ebpf.PinByName
			}
		}
		opts.Maps.PinPath = dir
	}
	t := &Translator{}
	if err := spec.LoadAndAssign(&t.objs, &opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel refused the translator: %+v", ve)
		}
		return nil, fmt.Errorf("load translator: %w", err)
	}
	return t, nil
}

// Close unloads what this process holds (pins stay).
func (t *Translator) Close() error { return t.objs.Close() }

// beIA is an ISD-AS as the programs compare it: the header's 8 bytes.
func beIA(ia addr.IA) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(ia))
	return binary.NativeEndian.Uint64(b[:])
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// HostConfig is what the programs need of the host.
type HostConfig struct {
	IA              addr.IA
	SMIP            netip.Addr // the host's SM-IP address
	Address         netip.Addr // its underlay IPv4 address
	UnderlayIfindex int
	PairIfindex     int              // the translator's end (PAIR1)
	HostMAC         net.HardwareAddr // the host's end (PAIR0)
	PairMAC         net.HardwareAddr // PAIR1
	DispatchedStart uint16
	DispatchedEnd   uint16
}

// Configure writes the host's configuration and where redirects into the
// pair go. A devmap resolves the index in the calling thread's namespace:
// call it there.
func (t *Translator) Configure(h HostConfig) error {
	var c translatorTraConfig
	c.LocalIa = beIA(h.IA)
	c.HostSmip = h.SMIP.As16()
	v4 := h.Address.As4()
	c.HostIp4 = binary.NativeEndian.Uint32(v4[:])
	if m, err := ToSCION(h.SMIP); err == nil && m.Host(h.SMIP).Is4() {
		c.HostIs4 = 1
	}
	c.UnderlayIfindex = uint32(h.UnderlayIfindex)
	c.HostIfindex = uint32(h.PairIfindex)
	copy(c.HostMac[:], h.HostMAC)
	copy(c.PairMac[:], h.PairMAC)
	c.DispatchedStart, c.DispatchedEnd = h.DispatchedStart, h.DispatchedEnd
	c.UnderlayPort = htons(30041)
	if err := t.objs.TraHostPort.Put(uint32(0), uint32(h.PairIfindex)); err != nil {
		return fmt.Errorf("set the pair in the redirect map: %w", err)
	}
	if err := t.objs.TraConf.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("write the translator's configuration: %w", err)
	}
	return nil
}

// SetPaths installs the paths to a destination AS (at most MaxPaths; none
// removes it). Flows spread over them by hash.
func (t *Translator) SetPaths(ia addr.IA, paths []Path) error {
	return setPaths(t.objs.TraPaths, ia, paths)
}

func setPaths(m *ebpf.Map, ia addr.IA, paths []Path) error {
	key := beIA(ia)
	if len(paths) == 0 {
		if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		return nil
	}
	if len(paths) > MaxPaths {
		paths = paths[:MaxPaths]
	}
	var d translatorTraDest
	if err := m.Lookup(key, &d); err == nil {
		d.Gen++
	}
	d.N = uint32(len(paths))
	for i, p := range paths {
		if len(p.Raw) > PathMax || len(p.Raw)%4 != 0 {
			return fmt.Errorf("path to %s: %d bytes; the translator takes whole 4-byte lines up to %d", ia, len(p.Raw), PathMax)
		}
		if !p.NextHop.Addr().Unmap().Is4() {
			return fmt.Errorf("path to %s: next hop %s: the translator's underlay is IPv4", ia, p.NextHop)
		}
		var v translatorTraPath
		v.Len = uint16(len(p.Raw))
		v.Mtu = p.MTU
		v.Type = 1
		v.NextPort = htons(p.NextHop.Port())
		nh := p.NextHop.Addr().Unmap().As4()
		v.NextHop = binary.NativeEndian.Uint32(nh[:])
		v.Expiry = p.Expiry
		copy(v.Raw[:], p.Raw)
		d.Paths[i] = v
	}
	if err := m.Put(key, &d); err != nil {
		return fmt.Errorf("install paths to %s: %w", ia, err)
	}
	return nil
}

// Counts are the counters summed over CPUs, by verdict name.
type Counts map[string]struct{ Packets, Bytes uint64 }

func readCounts(m *ebpf.Map) (Counts, error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	out := Counts{}
	for v := 0; v < VerdictCount; v++ {
		vals := make([]translatorTraCounter, ncpu)
		if err := m.Lookup(uint32(v), vals); err != nil {
			return nil, fmt.Errorf("read counters: %w", err)
		}
		var c struct{ Packets, Bytes uint64 }
		for _, x := range vals {
			c.Packets += x.Packets
			c.Bytes += x.Bytes
		}
		out[VerdictName(Verdict(v))] = c
	}
	return out, nil
}

// Counts reads the counters.
func (t *Translator) Counts() (Counts, error) { return readCounts(t.objs.TraCounters) }

// AttachOptions configure Attach.
type AttachOptions struct {
	Netns string // the host's namespace
	Warn  io.Writer
}

// pinNames of the links besides the underlay device's XDP link.
const tcLinkPin = "tc_link"

// Attach makes the translator's device pair in the host's namespace (the
// host's end with its SM-IP address, a route to fc00::/8 and an MTU that
// fits SCION's headers; no TSO and no checksum offload, so that the kernel
// cuts and completes what the host sends), loads the programs with maps
// pinned under PinDir, and attaches tra_in to the underlay device (XDP) and
// tra_out to the pair (TC ingress). Attaching again keeps the maps and
// swaps the programs. It returns the translator's name (see Name).
func Attach(cfg *Config, o AttachOptions) (name string, err error) {
	if o.Warn == nil {
		o.Warn = io.Discard
	}
	if o.Netns == "" {
		// Inside a named namespace: call it by its name, as the pins do.
		o.Netns = netns.Current()
	}
	name = Name(cfg.Pair, o.Netns)
	under := xdp.Iface{Netns: o.Netns, Name: cfg.Device}
	ua, err := xdp.Lookup(under)
	if err != nil {
		return "", fmt.Errorf("%s: device: %w", cfg.Path, err)
	}
	if err := checkRoutersElsewhere(cfg, o.Netns); err != nil {
		return "", err
	}
	if !cfg.Address.IsValid() {
		a, err := deviceIPv4(o.Netns, cfg.Device)
		if err != nil {
			return "", fmt.Errorf("%s: address: %w", cfg.Path, err)
		}
		cfg.Address = a
		if err := cfg.Validate(); err != nil {
			return "", err
		}
	}
	dir := PinDir(name)
	t, err := Load("")
	if err != nil {
		return "", err
	}
	t.Close()
	// The programs load: now make what the host will see, and on failure
	// remove it again unless it was there before.
	if _, statErr := os.Stat(dir); statErr != nil {
		defer func() {
			if err != nil {
				err = errors.Join(err, Detach(name))
			}
		}()
	}
	pair, err := makePair(cfg, o.Netns)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	t, err = Load(dir)
	if err != nil {
		return "", errors.Join(err, removeIfEmpty(dir))
	}
	defer t.Close()
	h := HostConfig{
		IA: cfg.IA, SMIP: cfg.SMIP, Address: cfg.Address, UnderlayIfindex: ua.Index,
		PairIfindex: pair.pairIndex, HostMAC: pair.hostMAC, PairMAC: pair.pairMAC,
		DispatchedStart: cfg.DispatchedPortStart, DispatchedEnd: cfg.DispatchedPortEnd,
	}
	if err := netns.Run(o.Netns, func() error { return t.Configure(h) }); err != nil {
		return "", err
	}
	if err := xdp.AttachPinned(dir, []xdp.Iface{under}, t.objs.TraIn, xdp.PinOptions{Mode: xdp.Native, Warn: o.Warn}); err != nil {
		return "", err
	}
	return name, attachTC(dir, xdp.Iface{Netns: o.Netns, Name: cfg.Pair + "1"}, pair.pairIndex, t.objs.TraOut)
}

// attachTC attaches tra_out to the pair's ingress through a TCX link,
// pinned; an existing link gets the program swapped in place.
func attachTC(dir string, i xdp.Iface, ifindex int, prog *ebpf.Program) error {
	pin := filepath.Join(dir, tcLinkPin)
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		err = l.Update(prog)
		l.Close()
		return err
	}
	var l link.Link
	err := netns.Run(i.Netns, func() error {
		var err error
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
		return err
	})
	if err != nil {
		return fmt.Errorf("attach tra_out to %s's ingress: %w", i, err)
	}
	defer l.Close()
	return l.Pin(pin)
}

func removeIfEmpty(dir string) error {
	xdp.RemoveIfEmpty(dir)
	return nil
}

// Detach removes the translator: its links (the programs go), maps, the
// device pair and with it the route. Nothing it did not make is touched.
func Detach(name string) error {
	ns, pair := splitName(name)
	dir := PinDir(name)
	_, statErr := os.Stat(dir)
	var errs []error
	if statErr == nil {
		errs = append(errs, os.Remove(filepath.Join(dir, tcLinkPin)))
		if err := xdp.DetachPinned(dir, PinRoot, nil); err != nil {
			errs = append(errs, err)
		}
		os.RemoveAll(dir)
		xdp.RemoveIfEmpty(PinRoot)
		xdp.RemoveIfEmpty(filepath.Dir(PinRoot))
	}
	pairFound := false
	if h, err := netns.Handle(ns); err == nil {
		// Only a veth whose peer is PAIR1 is ours.
		if l, err := h.LinkByName(pair + "0"); err == nil && l.Type() == "veth" {
			if p, err := h.LinkByName(pair + "1"); err == nil && p.Type() == "veth" {
				pairFound = true
				errs = append(errs, h.LinkDel(l))
			}
		}
		h.Close()
	}
	if statErr != nil && !pairFound {
		return fmt.Errorf("translator %s: %w (nothing under %s, no device %s0)", name, ErrNotAttached, dir, pair)
	}
	var out []error
	for _, e := range errs {
		if e != nil && !errors.Is(e, os.ErrNotExist) {
			out = append(out, e)
		}
	}
	return errors.Join(out...)
}

// OpenPinned opens an attached translator's maps.
func OpenPinned(name string) (*Pinned, error) {
	dir := PinDir(name)
	p := &Pinned{Name: name}
	for n, dst := range map[string]**ebpf.Map{"tra_paths": &p.paths, "tra_counters": &p.counters, "tra_conf": &p.conf, "tra_events": &p.events} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, n), nil)
		if err != nil {
			p.Close()
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("translator %s: %w", name, ErrNotAttached)
			}
			return nil, fmt.Errorf("open %s of translator %s: %w", n, name, err)
		}
		*dst = m
	}
	return p, nil
}

// Pinned are an attached translator's maps.
type Pinned struct {
	Name                          string
	paths, counters, conf, events *ebpf.Map
}

// Close closes the maps (the pins stay).
func (p *Pinned) Close() {
	for _, m := range []*ebpf.Map{p.paths, p.counters, p.conf, p.events} {
		if m != nil {
			m.Close()
		}
	}
}

// Counts reads the counters.
func (p *Pinned) Counts() (Counts, error) { return readCounts(p.counters) }

// SetPaths installs the paths to a destination AS (none removes it).
func (p *Pinned) SetPaths(ia addr.IA, paths []Path) error { return setPaths(p.paths, ia, paths) }

// Paths lists the installed paths by destination.
func (p *Pinned) Paths() (map[addr.IA][]Path, error) {
	out := map[addr.IA][]Path{}
	var k uint64
	var d translatorTraDest
	it := p.paths.Iterate()
	for it.Next(&k, &d) {
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], k)
		ia := addr.IA(binary.BigEndian.Uint64(b[:]))
		for i := 0; i < int(d.N) && i < MaxPaths; i++ {
			v := d.Paths[i]
			var nh [4]byte
			binary.NativeEndian.PutUint32(nh[:], v.NextHop)
			out[ia] = append(out[ia], Path{
				Raw: append([]byte(nil), v.Raw[:v.Len]...), MTU: v.Mtu, Expiry: v.Expiry,
				NextHop: netip.AddrPortFrom(netip.AddrFrom4(nh), htons(v.NextPort)),
			})
		}
	}
	return out, it.Err()
}

// pairDevs are the translator's device pair as made.
type pairDevs struct {
	pairIndex        int
	hostMAC, pairMAC net.HardwareAddr
}

// pairMTU is the host's end's MTU: room for a SCION header of a few
// segments within a 1500-byte underlay. A path with a smaller MTU is the
// host's path MTU discovery's (MSS clamping, Packet Too Big).
const pairMTU = 1400

// makePair makes (or finds) PAIR0/PAIR1 in the host's namespace and sets
// what the host needs to route SM-IP traffic into it.
func makePair(cfg *Config, ns string) (pairDevs, error) {
	var out pairDevs
	h, err := netns.Handle(ns)
	if err != nil {
		return out, err
	}
	defer h.Close()
	host, trans := cfg.Pair+"0", cfg.Pair+"1"
	if _, err := h.LinkByName(host); err != nil {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host, MTU: pairMTU}, PeerName: trans}
		if err := h.LinkAdd(v); err != nil {
			return out, fmt.Errorf("create the translator's devices %s/%s in %s: %w", host, trans, nsName(ns), err)
		}
	}
	hl, err := h.LinkByName(host)
	if err != nil {
		return out, err
	}
	tl, err := h.LinkByName(trans)
	if err != nil {
		return out, err
	}
	out.pairIndex, out.hostMAC, out.pairMAC = tl.Attrs().Index, hl.Attrs().HardwareAddr, tl.Attrs().HardwareAddr
	err = netns.Run(ns, func() error {
		// IPv6 on the host's end even where the namespace turns it off.
		for _, k := range []string{"disable_ipv6", "accept_dad", "accept_ra"} {
			val := "0"
			if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", host, k), []byte(val), 0o644); err != nil {
				return fmt.Errorf("sysctl %s of %s: %w", k, host, err)
			}
		}
		et, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer et.Close()
		// The kernel cuts and completes on the way out of PAIR0; GRO on
		// PAIR0 takes what tra_in redirects in, and coalesces it.
		if err := et.Change(host, map[string]bool{"tx-tcp-segmentation": false, "tx-tcp6-segmentation": false, "tx-checksum-ip-generic": false, "rx-gro": true}); err != nil {
			return fmt.Errorf("offloads of %s: %w", host, err)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	for _, l := range []netlink.Link{hl, tl} {
		if err := h.LinkSetUp(l); err != nil {
			return out, err
		}
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: cfg.SMIP.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: 0x80 /* IFA_F_NODAD */}
	if err := h.AddrReplace(hl, addr); err != nil {
		return out, fmt.Errorf("address %s on %s: %w", cfg.SMIP, host, err)
	}
	// fc00::/8 by a gateway that is a permanent neighbour: no neighbour
	// discovery stands between the host and the translator.
	gw := net.ParseIP("fe80::1")
	if err := h.NeighSet(&netlink.Neigh{LinkIndex: hl.Attrs().Index, Family: netlink.FAMILY_V6, IP: gw, HardwareAddr: tl.Attrs().HardwareAddr, State: netlink.NUD_PERMANENT}); err != nil {
		return out, fmt.Errorf("neighbour of %s: %w", host, err)
	}
	_, dst, _ := net.ParseCIDR("fc00::/8")
	if err := h.RouteReplace(&netlink.Route{LinkIndex: hl.Attrs().Index, Dst: dst, Gw: gw}); err != nil {
		return out, fmt.Errorf("route to fc00::/8 by %s: %w", host, err)
	}
	return out, nil
}

// checkRoutersElsewhere refuses a host whose namespace holds one of the
// AS's routers: the translator sends by the host's device to the router's
// internal address and takes what the router sends in XDP on that device,
// and a router on the host's own stack is reached through neither.
func checkRoutersElsewhere(cfg *Config, ns string) error {
	h, err := netns.Handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", nsName(ns), err)
	}
	local := map[netip.Addr]bool{}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			local[ip.Unmap()] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Routers)) {
		at := cfg.Routers[name].Addr().Unmap()
		if at.IsLoopback() || local[at] {
			return fmt.Errorf("%s: topology: the AS's router %s has its internal address %s in %s, the host's: the translator reaches routers by the host's device, so the host must be another namespace or machine on the AS's internal network (see docs/tra.md, Limits)",
				cfg.Path, name, cfg.Routers[name], nsName(ns))
		}
	}
	return nil
}

func deviceIPv4(ns, dev string) (netip.Addr, error) {
	h, err := netns.Handle(ns)
	if err != nil {
		return netip.Addr{}, err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s not found in %s", dev, nsName(ns))
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s has no IPv4 address: give address in the configuration", dev)
	}
	a, _ := netip.AddrFromSlice(addrs[0].IP.To4())
	return a, nil
}

func nsName(ns string) string {
	if ns == "" {
		return "this network namespace"
	}
	return "network namespace " + ns
}
