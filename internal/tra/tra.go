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
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/safchain/ethtool"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

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
	translatorTraVerdictTRA_SPOOFED:      "spoofed",
	translatorTraVerdictTRA_FRAGMENT:     "fragment",
	translatorTraVerdictTRA_HOP_LIMIT:    "hop_limit",
	translatorTraVerdictTRA_OFFLOAD:      "offload",
	translatorTraVerdictTRA_UNREACHABLE:  "unreachable",
	translatorTraVerdictTRA_PROBE:        "probe",
	translatorTraVerdictTRA_TO_PAIR:      "to_pair",
	translatorTraVerdictTRA_TOO_BIG_IN:   "too_big_in",
	translatorTraVerdictTRA_BAD_PATH:     "bad_path",
	translatorTraVerdictTRA_NO_DAEMON:    "no_daemon",
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
	Expiry  uint64         // Unix seconds; tra_out no longer takes it from then on (0: never)
	// Gateway is the neighbour that takes what goes to NextHop (NextHop
	// itself on the device's link); invalid: the kernel routes each packet.
	Gateway netip.Addr
}

// Translator is a loaded translator: its programs and maps.
type Translator struct {
	objs translatorObjects
	pathMaps
	// migration carries the maps another release pinned into this one's
	// layout; Attach commits it once the programs run.
	migration *xdp.Migration
}

// Load loads the programs and maps, pinned under dir (reused when pinned
// there already); nothing is attached. A pin an older translator left whose
// map no longer fits these programs (an upgrade) is replaced: the daemon
// fetches the paths again.
func Load(dir string) (*Translator, error) {
	return load(dir, io.Discard)
}

func load(dir string, warn io.Writer) (*Translator, error) {
	spec, err := loadTranslator()
	if err != nil {
		return nil, fmt.Errorf("load translator spec: %w", err)
	}
	layout(spec)
	if m := spec.Maps["tra_used"]; m == nil || int(m.MaxEntries) != MaxDests {
		return nil, fmt.Errorf("the translator's object holds another number of destinations than this program (%d)", MaxDests)
	}
	if m := spec.Maps["tra_dests"]; m == nil || int(m.MaxEntries) != MaxDests {
		return nil, fmt.Errorf("the translator's object holds another number of destinations than this program (%d)", MaxDests)
	}
	if m := spec.Maps["tra_routers"]; m == nil || int(m.MaxEntries) != MaxRouters {
		return nil, fmt.Errorf("the translator's object holds another number of routers than this program (%d)", MaxRouters)
	}
	var opts ebpf.CollectionOptions
	if dir != "" {
		for _, m := range spec.Maps {
			if !strings.HasPrefix(m.Name, ".") {
				m.Pinning = ebpf.PinByName
			}
		}
		opts.Maps.PinPath = dir
		removeOldPins(dir, warn)
	}
	t := &Translator{}
	if dir != "" {
		// Maps pinned by another release in another layout are carried
		// into this one's (docs/upgrade.md); what cannot be is made afresh
		// (the daemon installs the paths again), never refused.
		afresh := map[string]bool{}
		for name := range spec.Maps {
			afresh[name] = true
		}
		mig, err := xdp.PrepareMigration(spec, dir, xdp.MigrateOptions{Afresh: afresh, Counters: map[string]bool{"tra_counters": true}, Warn: warn})
		if err != nil {
			return nil, fmt.Errorf("translator %s: %w; the running translator is left as it is", filepath.Base(dir), err)
		}
		t.migration = mig
		opts.MapReplacements = mig.Replacements()
	}
	if err := spec.LoadAndAssign(&t.objs, &opts); err != nil {
		t.migration.Close()
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel refused the translator: %+v", ve)
		}
		return nil, fmt.Errorf("load translator: %w", err)
	}
	t.pathMaps = pathMaps{dests: t.objs.TraDests, sets: t.objs.TraSets, used: t.objs.TraUsed, alloc: newSetAlloc()}
	return t, nil
}

// Maps of earlier versions that these programs no longer have: their pins
// are removed when met (the programs attached until the swap keep them).
// tra_paths was a map of maps, each update of which waited for an RCU grace
// period; tra_dests and tra_sets hold the paths now.
var oldMapPins = []string{"tra_paths"}

func removeOldPins(dir string, warn io.Writer) {
	for _, name := range oldMapPins {
		if err := os.Remove(filepath.Join(dir, name)); err == nil {
			fmt.Fprintf(warn, "translator: %s of an earlier version removed: the daemon installs the paths again\n", name)
		}
	}
}

// Close unloads what this process holds (pins stay).
func (t *Translator) Close() error {
	t.migration.Close()
	return t.objs.Close()
}

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
	// RoutersToPort says the AS's routers hand the host SCION on the port
	// the packet names, dispatched or not (Config.RoutersToPort): tra_in
	// takes SCION from them on any port.
	RoutersToPort bool
	// Routers are the AS's border routers' internal addresses: the only
	// senders of SCION with a standard path the host takes.
	Routers []netip.AddrPort
	// NetnsIno is the host's network namespace (its inode), for the
	// transmit tracepoints, which see every namespace.
	NetnsIno uint64
	// UnderlaySWCsum says the underlay device has no transmit checksum
	// offload (underlaySWCsum), so that tra_out_egress may translate a
	// packet whose checksum is still pending.
	UnderlaySWCsum bool
	// PairMTU is the host's end's MTU: tra_in hands the pair no larger
	// IPv6 packet (0: unchecked).
	PairMTU int
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
	c.UnderlayPort = htons(endHostPort)
	if h.RoutersToPort {
		c.RoutersToPort = 1
	}
	c.NetnsIno = uint32(h.NetnsIno)
	if h.UnderlaySWCsum {
		c.UnderlaySwCsum = 1
	}
	c.PairMtu = uint32(h.PairMTU)
	tai, err := taiOffset()
	if err != nil {
		return err
	}
	c.TaiOffset = tai
	if err := setRouters(t.objs.TraRouters, h.Routers); err != nil {
		return err
	}
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
	return t.set(ia, uint32(ia)%uint32(MaxDests), paths)
}

// setRouters replaces the routers the host takes SCION from: the new ones
// go in before the old ones that are left go, so that no router's packets
// are refused in between. IPv6 internal addresses are left out (the
// underlay is IPv4; LoadConfig names them) and take no room.
func setRouters(m *ebpf.Map, routers []netip.AddrPort) error {
	var v4 []netip.AddrPort
	for _, r := range routers {
		if r.Addr().Unmap().Is4() {
			v4 = append(v4, r)
		}
	}
	if len(v4) > int(m.MaxEntries()) {
		return fmt.Errorf("%d border routers with IPv4 internal addresses: the translator takes at most %d", len(v4), m.MaxEntries())
	}
	want := map[translatorTraAddr4]netip.AddrPort{}
	for _, r := range v4 {
		a := r.Addr().Unmap().As4()
		want[translatorTraAddr4{Addr: binary.NativeEndian.Uint32(a[:]), Port: htons(r.Port())}] = r
	}
	var k translatorTraAddr4
	var v uint8
	var stale []translatorTraAddr4
	have := map[translatorTraAddr4]bool{}
	it := m.Iterate()
	for it.Next(&k, &v) {
		have[k] = true
		if _, ok := want[k]; !ok {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	added := 0
	for k := range want {
		if !have[k] {
			added++
		}
	}
	// Without room for the new ones beside the old, the old go first.
	if len(have)+added > int(m.MaxEntries()) {
		for _, k := range stale {
			m.Delete(k)
		}
		stale = nil
	}
	for k, r := range want {
		if err := m.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("router %s: %w", r, err)
		}
	}
	for _, k := range stale {
		m.Delete(k)
	}
	return nil
}

// Counts are the counters summed over CPUs, by verdict name.
type Counts map[string]struct{ Packets, Bytes uint64 }

func readCounts(m *ebpf.Map) (Counts, error) {
	out, in, err := readDirCounts(m)
	if err != nil {
		return nil, err
	}
	sum := Counts{}
	for name, o := range out {
		i := in[name]
		sum[name] = struct{ Packets, Bytes uint64 }{o.Packets + i.Packets, o.Bytes + i.Bytes}
	}
	return sum, nil
}

// readDirCounts reads tra_out's counters and tra_in's apart.
func readDirCounts(m *ebpf.Map) (out, in Counts, err error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, nil, err
	}
	out, in = Counts{}, Counts{}
	for dir, into := range []Counts{out, in} {
		for v := 0; v < VerdictCount; v++ {
			vals := make([]translatorTraCounter, ncpu)
			if err := m.Lookup(uint32(dir*VerdictCount+v), vals); err != nil {
				return nil, nil, fmt.Errorf("read counters: %w", err)
			}
			var c struct{ Packets, Bytes uint64 }
			for _, x := range vals {
				c.Packets += x.Packets
				c.Bytes += x.Bytes
			}
			into[VerdictName(Verdict(v))] = c
		}
	}
	return out, in, nil
}

// Counts reads the counters.
func (t *Translator) Counts() (Counts, error) { return readCounts(t.objs.TraCounters) }

// AttachOptions configure Attach.
type AttachOptions struct {
	Netns string // the host's namespace
	Warn  io.Writer
	// Mode overrides the configuration's xdp_mode (XDPModeAuto,
	// XDPModeNative or XDPModeGeneric); "" keeps it.
	Mode string
}

// pinNames of the links besides the underlay device's XDP link: tra_out at
// the translator's end of the pair (ingress), tra_out_egress at the host's
// end (egress).
const (
	tcLinkPin       = "tc_link"
	tcEgressLinkPin = "tc_egress_link"
)

// Attach makes the translator's device pair in the host's namespace (the
// host's end with its SM-IP address, a route to fc00::/8 and an MTU that
// fits SCION's headers; no TSO and no checksum offload, so that the kernel
// cuts and completes what the host sends), loads the programs with maps
// pinned under PinDir, and attaches tra_in to the underlay device (XDP),
// tra_out_egress to the host's end of the pair (TC egress) and tra_out to
// the translator's end (TC ingress), for what the first lets through. Attaching again keeps the maps and
// swaps the programs. It returns the translator's name (see Name).
func Attach(cfg *Config, o AttachOptions) (name string, err error) {
	if err := preflight.Kernel(preflight.TRA); err != nil {
		return "", err
	}
	if o.Warn == nil {
		o.Warn = io.Discard
	}
	if o.Netns == "" {
		// Inside a named namespace: call it by its name, as the pins do.
		o.Netns = netns.Current()
	}
	xdpMode := cfg.XDPMode
	switch o.Mode {
	case "":
	case XDPModeAuto, XDPModeNative, XDPModeGeneric:
		xdpMode = o.Mode
	default:
		return "", fmt.Errorf("XDP mode %q: use %q, %q or %q", o.Mode, XDPModeAuto, XDPModeNative, XDPModeGeneric)
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
	t, err = load(dir, o.Warn)
	if err != nil {
		return "", errors.Join(err, removeIfEmpty(dir))
	}
	defer t.Close()
	ino, err := xdp.NetnsInode(o.Netns)
	if err != nil {
		return "", err
	}
	h := HostConfig{
		IA: cfg.IA, SMIP: cfg.SMIP, Address: cfg.Address, UnderlayIfindex: ua.Index,
		PairIfindex: pair.pairIndex, HostMAC: pair.hostMAC, PairMAC: pair.pairMAC,
		DispatchedStart: cfg.DispatchedPortStart, DispatchedEnd: cfg.DispatchedPortEnd, RoutersToPort: cfg.RoutersToPort(),
		Routers: slices.Collect(maps.Values(cfg.Routers)), NetnsIno: ino, PairMTU: pair.hostMTU,
	}
	if err := netns.Run(o.Netns, func() error {
		var err error
		if h.UnderlaySWCsum, err = underlaySWCsum(cfg.Device); err != nil {
			return err
		}
		return t.Configure(h)
	}); err != nil {
		return "", err
	}
	// A link left on a device that was removed and made again is defunct:
	// attach afresh.
	if pin := filepath.Join(dir, xdp.LinkPinName(under)); errors.Is(xdp.PinnedLinkState(pin), xdp.ErrLinkGone) {
		os.Remove(pin)
	}
	mode, noFallback := xdp.Native, xdpMode == XDPModeNative
	if xdpMode == XDPModeGeneric {
		mode = xdp.Generic
	}
	if err := xdp.AttachPinned(dir, []xdp.Iface{under}, t.objs.TraIn, xdp.PinOptions{Mode: mode, NoFallback: noFallback, Warn: o.Warn}); err != nil {
		return "", err
	}
	// tra_in runs on the new maps: once the pair's programs run on them
	// too, or failed to, the pins follow.
	defer func() {
		if cerr := t.migration.Commit(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	// A pair deleted and made again leaves the old one's TC links severed:
	// attach afresh.
	for _, pin := range []string{tcLinkPin, tcEgressLinkPin} {
		removeSeveredTCX(filepath.Join(dir, pin))
	}
	if err := xdp.AttachTCX(filepath.Join(dir, tcLinkPin), xdp.Iface{Netns: o.Netns, Name: cfg.Pair + "1"}, pair.pairIndex, t.objs.TraOut, ebpf.AttachTCXIngress); err != nil {
		return "", err
	}
	if err := xdp.AttachTCX(filepath.Join(dir, tcEgressLinkPin), xdp.Iface{Netns: o.Netns, Name: cfg.Pair + "0"}, pair.hostIndex, t.objs.TraOutEgress, ebpf.AttachTCXEgress); err != nil {
		return "", err
	}
	if err := attachTracepoints(dir, t); err != nil {
		fmt.Fprintf(o.Warn, "warning: translator %s: %v; frames the pair refuses are counted translated_in, not tx_failed\n", name, err)
	}
	return name, nil
}

// removeSeveredTCX removes a pinned TC link whose device went (its
// ifindex is 0 then): it cannot be updated, only made anew.
func removeSeveredTCX(pin string) {
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		return
	}
	info, err := l.Info()
	l.Close()
	if err == nil && info.TCX() != nil && info.TCX().Ifindex == 0 {
		os.Remove(pin)
	}
}

// Pins of the transmit tracepoints' links.
var tracepointPins = map[string]func(*Translator) *ebpf.Program{
	"tp_redirect_err": func(t *Translator) *ebpf.Program { return t.objs.TraTxRedirectErr },
}

// Tracepoint links of earlier versions, removed when met.
var oldTracepointPins = []string{"tp_devmap_xmit"}

// attachTracepoints attaches the programs that count frames the pair did
// not take. Tracing links cannot swap programs: a new link is pinned over
// the old one, which goes with its pin.
func attachTracepoints(dir string, t *Translator) error {
	for _, pin := range oldTracepointPins {
		os.Remove(filepath.Join(dir, pin))
	}
	for pin, prog := range tracepointPins {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog(t)})
		if err != nil {
			return fmt.Errorf("attach %s: %w", pin, err)
		}
		tmp := filepath.Join(dir, pin+"_new") // bpffs takes no dots in names
		os.Remove(tmp)
		err = l.Pin(tmp)
		l.Close()
		if err == nil {
			err = os.Rename(tmp, filepath.Join(dir, pin))
		}
		if err != nil {
			os.Remove(tmp)
			return fmt.Errorf("pin %s: %w", pin, err)
		}
	}
	return nil
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
		if err := os.Remove(filepath.Join(dir, tcEgressLinkPin)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err) // a translator attached before the egress link has none
		}
		for pin := range tracepointPins {
			errs = append(errs, os.Remove(filepath.Join(dir, pin)))
		}
		if err := xdp.DetachPinned(dir, PinRoot, nil); err != nil {
			errs = append(errs, err)
		}
		os.RemoveAll(dir)
		xdp.RemoveIfEmpty(PinRoot) // not /sys/fs/bpf/fastpath: see xdp.DetachPinned
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
	for n, dst := range map[string]**ebpf.Map{
		"tra_dests": &p.dests, "tra_sets": &p.sets, "tra_used": &p.used, "tra_counters": &p.counters, "tra_conf": &p.conf,
		"tra_held": &p.held, "tra_events": &p.events, "tra_probes": &p.probes, "tra_routers": &p.routers, "tra_daemon": &p.daemon,
		"tra_heartbeat": &p.heartbeat,
	} {
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
	p.alloc = newSetAlloc()
	return p, nil
}

// Pinned are an attached translator's maps.
type Pinned struct {
	Name string
	pathMaps
	counters, conf, held, events, probes, routers, daemon, heartbeat *ebpf.Map
}

// Close closes the maps (the pins stay).
func (p *Pinned) Close() {
	for _, m := range []*ebpf.Map{p.dests, p.sets, p.used, p.counters, p.conf, p.held, p.events, p.probes, p.routers, p.daemon, p.heartbeat} {
		if m != nil {
			m.Close()
		}
	}
}

// Counts reads the counters.
func (p *Pinned) Counts() (Counts, error) { return readCounts(p.counters) }

// DirCounts reads tra_out's counters (out) and tra_in's (in) apart: each
// program's add up to the packets it was handed (mss_clamped aside, which
// also counts a packet translated; to_pair counts a packet tra_out_egress
// handed on to tra_out, which gives it its verdict).
func (p *Pinned) DirCounts() (out, in Counts, err error) { return readDirCounts(p.counters) }

// DaemonCounts reads the daemon's counters (tra_daemon), by name.
func (p *Pinned) DaemonCounts() (map[string]uint64, error) {
	out := map[string]uint64{}
	for i, name := range daemonCounterNames {
		var v uint64
		if err := p.daemon.Lookup(uint32(i), &v); err != nil {
			return nil, fmt.Errorf("read the daemon's counters: %w", err)
		}
		out[name] = v
	}
	return out, nil
}

// SetPaths installs the paths to a destination AS, its use recorded in
// slot (none removes it).
func (p *Pinned) SetPaths(ia addr.IA, slot uint32, paths []Path) error { return p.set(ia, slot, paths) }

// Dests lists the installed destinations.
func (p *Pinned) Dests() (map[addr.IA]DestPaths, error) { return p.list() }

// Paths lists the installed paths by destination.
func (p *Pinned) Paths() (map[addr.IA][]Path, error) {
	d, err := p.list()
	out := map[addr.IA][]Path{}
	for ia, dp := range d {
		out[ia] = dp.Paths
	}
	return out, err
}

// UsedAt reads when each slot last had a packet (see pathMaps.usedAt).
func (p *Pinned) UsedAt() ([]uint32, error) { return p.usedAt() }

// SetRouters replaces the border routers the host takes SCION from.
func (p *Pinned) SetRouters(routers []netip.AddrPort) error { return setRouters(p.routers, routers) }

// SetDispatched sets the dispatched ports tra_in takes SCION on besides
// the end-host port (topology.json's dispatched_ports; 0-0: none); it says
// whether they changed.
func (p *Pinned) SetDispatched(start, end uint16) (bool, error) {
	c, err := p.config()
	if err != nil {
		return false, err
	}
	if c.DispatchedStart == start && c.DispatchedEnd == end {
		return false, nil
	}
	c.DispatchedStart, c.DispatchedEnd = start, end
	return true, p.conf.Put(uint32(0), &c)
}

// SetUnderlaySWCsum tells tra_out_egress whether the underlay device
// completes pending checksums in software; it says whether that changed.
func (p *Pinned) SetUnderlaySWCsum(on bool) (bool, error) {
	c, err := p.config()
	if err != nil {
		return false, err
	}
	var v uint32
	if on {
		v = 1
	}
	if c.UnderlaySwCsum == v {
		return false, nil
	}
	c.UnderlaySwCsum = v
	return true, p.conf.Put(uint32(0), &c)
}

// SetPairMTU tells tra_in the host's end's MTU (pairmtu.go keeps it as the
// pair is).
func (p *Pinned) SetPairMTU(mtu int) error {
	c, err := p.config()
	if err != nil {
		return err
	}
	if c.PairMtu == uint32(mtu) {
		return nil
	}
	c.PairMtu = uint32(mtu)
	return p.conf.Put(uint32(0), &c)
}

// Config reads the programs' configuration.
func (p *Pinned) config() (translatorTraConfig, error) {
	var c translatorTraConfig
	err := p.conf.Lookup(uint32(0), &c)
	return c, err
}

// pairDevs are the translator's device pair as made.
type pairDevs struct {
	pairIndex        int // the translator's end
	hostIndex        int // the host's end
	hostMAC, pairMAC net.HardwareAddr
	hostMTU          int // the host's end's MTU
}

// makePair makes (or finds) PAIR0/PAIR1 in the host's namespace and sets
// what the host needs to route SM-IP traffic into it. Its MTU takes the
// largest packet tra_in can make of a frame the underlay device takes
// (wantPairMTU; the daemon keeps it so): the host's larger packets get
// Packet Too Big from tra_out for the path they take.
func makePair(cfg *Config, ns string) (pairDevs, error) {
	var out pairDevs
	h, err := netns.Handle(ns)
	if err != nil {
		return out, err
	}
	defer h.Close()
	host, trans := cfg.Pair+"0", cfg.Pair+"1"
	under := 0
	if l, err := h.LinkByName(cfg.Device); err == nil {
		under = l.Attrs().MTU
	}
	mtu := wantPairMTU(nil, srcHostLen(cfg), under)
	if l, err := h.LinkByName(host); err != nil {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host, MTU: mtu}, PeerName: trans}
		if err := h.LinkAdd(v); err != nil {
			return out, fmt.Errorf("create the translator's devices %s/%s in %s: %w", host, trans, nsName(ns), err)
		}
	} else if under > 0 && l.Attrs().MTU != mtu {
		if err := (netlinkPair{ns: ns, pair: cfg.Pair, device: cfg.Device}).SetMTU(mtu); err != nil {
			return out, fmt.Errorf("MTU %d on %s/%s: %w", mtu, host, trans, err)
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
	out.pairIndex, out.hostIndex, out.hostMAC, out.pairMAC = tl.Attrs().Index, hl.Attrs().Index, hl.Attrs().HardwareAddr, tl.Attrs().HardwareAddr
	out.hostMTU = hl.Attrs().MTU
	err = netns.Run(ns, func() error {
		// IPv6 on the host's end even where the namespace turns it off.
		for _, k := range []string{"disable_ipv6", "accept_dad", "accept_ra"} {
			val := "0"
			if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", host, k), []byte(val), 0o644); err != nil {
				return fmt.Errorf("sysctl %s of %s: %w", k, host, err)
			}
		}
		_, err := setPairOffloads(host)
		return err
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

// setPairOffloads keeps the host's end of the pair as the translator needs
// it, and says whether anything had to change: no segmentation offload of
// any kind (the kernel cuts every GSO packet on the way in, so that tra_out
// sees one IPv6 packet per SCION packet), no checksum offload (checksums
// are complete), GRO on (what tra_in redirects in is taken, and coalesced
// again). Call it in the host's namespace.
// underlaySWCsum says whether a device (in this namespace) has every
// transmit checksum offload off, so that the kernel completes a pending
// checksum in software before the packet leaves by it (validate_xmit_skb).
// Then a TCP segment, whose checksum is pending at the pair's egress, can be
// translated there and need not cross the pair; with an offload on, a veth
// would hand the pending sum to the AS's router's XDP, which cannot
// complete it.
func underlaySWCsum(dev string) (bool, error) {
	et, have, err := offloads(dev)
	if err != nil {
		return false, err
	}
	et.Close()
	for _, f := range []string{"tx-checksum-ip-generic", "tx-checksum-ipv4", "tx-checksum-ipv6"} {
		if have[f] {
			return false, nil
		}
	}
	return true, nil
}

// offloads reads a device's features (ethtool -k's names) in this
// namespace, and returns the handle to change them with.
func offloads(dev string) (*ethtool.Ethtool, map[string]bool, error) {
	et, err := ethtool.NewEthtool()
	if err != nil {
		return nil, nil, err
	}
	have, err := et.Features(dev)
	if err != nil {
		et.Close()
		return nil, nil, fmt.Errorf("offloads of %s: %w", dev, err)
	}
	return et, have, nil
}

func setPairOffloads(dev string) (changed bool, err error) {
	et, have, err := offloads(dev)
	if err != nil {
		return false, err
	}
	defer et.Close()
	want := map[string]bool{}
	for name, on := range have {
		off := (strings.HasPrefix(name, "tx-") && strings.HasSuffix(name, "segmentation")) ||
			name == "tx-gso-list" || strings.HasPrefix(name, "tx-checksum-")
		if off && on {
			want[name] = false
		}
	}
	if !have["rx-gro"] {
		want["rx-gro"] = true
	}
	if len(want) == 0 {
		return false, nil
	}
	if err := et.Change(dev, want); err != nil {
		return false, fmt.Errorf("offloads of %s: %w", dev, err)
	}
	return true, nil
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

// LockDir holds the daemons' instance locks: bpffs, where the pins live,
// takes no flock.
var LockDir = "/run/fastpath"

// ErrAlreadyRunning is returned by Run when another daemon runs the same
// translator: two would split its ring buffers between them and fight
// over its slots.
var ErrAlreadyRunning = errors.New("already running")

// instanceLock is a daemon's hold on its translator.
type instanceLock struct {
	f    *os.File
	path string
}

// lockInstance takes the translator's lock (LockDir/tra-NAME.lock, 0600,
// holding the PID), or says who holds it. A lock file removed and made
// again between the open and the flock is opened again: the lock is on the
// file the path names.
func lockInstance(name, cfgPath string) (*instanceLock, error) {
	if err := os.MkdirAll(LockDir, 0o755); err != nil {
		return nil, fmt.Errorf("translator %s: the lock's directory: %w", name, err)
	}
	path := filepath.Join(LockDir, "tra-"+name+".lock")
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("translator %s: lock: %w", name, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			b, _ := io.ReadAll(io.LimitReader(f, 32))
			f.Close()
			if !errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("translator %s: lock %s: %w", name, path, err)
			}
			by := "another process"
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				by = fmt.Sprintf("PID %d", pid)
			}
			return nil, fmt.Errorf("translator %s is already run by %s; stop it first (%s): %w", name, by, stopHint(cfgPath), ErrAlreadyRunning)
		}
		var held, named unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(path, &named) != nil || held.Ino != named.Ino || held.Dev != named.Dev {
			f.Close()
			continue
		}
		if err := f.Truncate(0); err == nil {
			_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return &instanceLock{f: f, path: path}, nil
	}
}

// stopHint names how to stop the daemon that holds a translator: its
// service, if the configuration is the unit's.
func stopHint(cfgPath string) string {
	base := filepath.Base(cfgPath)
	if inst, ok := strings.CutPrefix(strings.TrimSuffix(base, ".toml"), "tra-"); ok && strings.HasSuffix(base, ".toml") && inst != "" {
		return "systemctl stop fastpath-tra@" + inst
	}
	return "systemctl stop fastpath-tra@INSTANCE, or end the other tra run"
}

// release gives the lock up; the file goes while it is still held, so
// that no one locks a file no longer at the path.
func (l *instanceLock) release() {
	if l == nil {
		return
	}
	os.Remove(l.path)
	l.f.Close()
}
