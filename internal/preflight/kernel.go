package preflight

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// ErrKernel wraps the error of a function whose programs this kernel cannot
// load or attach: it names each helper, kfunc, map, program or link type
// missing, the release that brought it, and the release to upgrade to.
var ErrKernel = fmt.Errorf("%w: kernel too old", ErrNotReady)

// Function names a network function whose kernel needs are listed here.
type Function string

// The network functions, by their subcommand.
const (
	BR  Function = "br"
	FW  Function = "fw"
	TRA Function = "tra"
	RT  Function = "rt"
)

// Functions lists every function, in the order `fastpath version` shows them.
var Functions = []Function{BR, FW, TRA, RT}

// Feature is one thing a function's programs need of the kernel: a helper
// or kfunc they call, a map, program or link type they use.
type Feature struct {
	Kind string `json:"kind"` // helper, kfunc, map, program, link, tracepoint, isa
	Name string `json:"name"`
	// Kernel is the first Linux release that has it.
	Kernel string `json:"kernel"`
	// Why the function needs it.
	Why string `json:"why"`
	// Optional features cost part of the function when missing (said as a
	// warning where it is used); the rest are needed to load or attach at all.
	Optional bool `json:"optional,omitempty"`

	probe func(Probes) error
}

// Probes ask the kernel for one feature each: nil when it has it, an error
// wrapping ebpf.ErrNotSupported when it has not, any other error when the
// probe could not tell (no privilege, no BTF). Tests replace them to play an
// older kernel.
type Probes struct {
	Helper      func(ebpf.ProgramType, asm.BuiltinFunc) error
	MapType     func(ebpf.MapType) error
	ProgramType func(ebpf.ProgramType) error
	// Kfunc looks a kernel function up in the kernel's BTF.
	Kfunc func(name string) error
	// Tracepoint looks a raw tracepoint's BTF type (btf_trace_NAME) up.
	Tracepoint func(name string) error
	// EnumValue looks a value of a uapi enum up in the kernel's BTF: a link
	// or attach type the kernel knows.
	EnumValue func(enum, value string) error
	// ISAv3 says whether the verifier takes the v3 instruction set.
	ISAv3 func() error
}

// KernelProbes asks the running kernel, through cilium/ebpf's feature
// probes (each loads a tiny program or creates a tiny map once; the result
// is cached) and the kernel's BTF.
func KernelProbes() Probes {
	return Probes{
		Helper:      features.HaveProgramHelper,
		MapType:     features.HaveMapType,
		ProgramType: programType,
		Kfunc:       kernelFunc,
		Tracepoint:  func(name string) error { return kernelType("btf_trace_"+name, "tracepoint "+name) },
		EnumValue:   kernelEnumValue,
		ISAv3:       features.HaveV3ISA,
	}
}

var kernelBTF = sync.OnceValues(btf.LoadKernelSpec)

// programType is features.HaveProgramType, except for tracing programs:
// its probe loads an fentry program, which kernels without ftrace's direct
// calls refuse (EPERM here), while ours attach to raw tracepoints (tp_btf),
// so the probe loads one of those.
func programType(pt ebpf.ProgramType) error {
	if pt != ebpf.Tracing {
		return features.HaveProgramType(pt)
	}
	return tpBTF()
}

var tpBTF = sync.OnceValue(func() error {
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceRawTp,
		AttachTo:     "xdp_exception",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()},
		License:      "GPL",
	}, ebpf.ProgramOptions{LogDisabled: true})
	if err == nil {
		prog.Close()
		return nil
	}
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.E2BIG) {
		return fmt.Errorf("tp_btf program: %w", ebpf.ErrNotSupported)
	}
	return err
})

func kernelFunc(name string) error {
	spec, err := kernelBTF()
	if err != nil {
		return fmt.Errorf("read the kernel's BTF: %w", err)
	}
	var fn *btf.Func
	if err := spec.TypeByName(name, &fn); err != nil {
		if errors.Is(err, btf.ErrNotFound) {
			return fmt.Errorf("kfunc %s: %w", name, ebpf.ErrNotSupported)
		}
		return err
	}
	return nil
}

func kernelType(name, what string) error {
	spec, err := kernelBTF()
	if err != nil {
		return fmt.Errorf("read the kernel's BTF: %w", err)
	}
	if _, err := spec.AnyTypeByName(name); err != nil {
		if errors.Is(err, btf.ErrNotFound) {
			return fmt.Errorf("%s: %w", what, ebpf.ErrNotSupported)
		}
		return err
	}
	return nil
}

func kernelEnumValue(enum, value string) error {
	spec, err := kernelBTF()
	if err != nil {
		return fmt.Errorf("read the kernel's BTF: %w", err)
	}
	var e *btf.Enum
	if err := spec.TypeByName(enum, &e); err != nil {
		return fmt.Errorf("enum %s: %w", enum, err)
	}
	for _, v := range e.Values {
		if v.Name == value {
			return nil
		}
	}
	return fmt.Errorf("%s: %w", value, ebpf.ErrNotSupported)
}

func helper(pt ebpf.ProgramType, fn asm.BuiltinFunc, kernel, why string) Feature {
	return Feature{Kind: "helper", Name: helperName(fn), Kernel: kernel, Why: why,
		probe: func(p Probes) error { return p.Helper(pt, fn) }}
}

// helperName is the helper's name in C: FnXdpGetBuffLen → bpf_xdp_get_buff_len.
func helperName(fn asm.BuiltinFunc) string {
	s := strings.TrimPrefix(fn.String(), "Fn")
	var b strings.Builder
	b.WriteString("bpf")
	for _, r := range s {
		// Digits join the word before them: Ipv4 is ipv4, L4Csum l4_csum.
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func mapType(mt ebpf.MapType, name, kernel, why string) Feature {
	return Feature{Kind: "map", Name: name, Kernel: kernel, Why: why,
		probe: func(p Probes) error { return p.MapType(mt) }}
}

func progType(pt ebpf.ProgramType, name, kernel, why string) Feature {
	return Feature{Kind: "program", Name: name, Kernel: kernel, Why: why,
		probe: func(p Probes) error { return p.ProgramType(pt) }}
}

func kfunc(name, kernel, why string) Feature {
	return Feature{Kind: "kfunc", Name: name, Kernel: kernel, Why: why,
		probe: func(p Probes) error { return p.Kfunc(name) }}
}

func tracepoint(name, kernel, why string) Feature {
	return Feature{Kind: "tracepoint", Name: name, Kernel: kernel, Why: why,
		probe: func(p Probes) error { return p.Tracepoint(name) }}
}

func linkType(name, enum, value, kernel, why string) Feature {
	return Feature{Kind: "link", Name: name, Kernel: kernel, Why: why,
		probe: func(p Probes) error { return p.EnumValue(enum, value) }}
}

func optional(f Feature) Feature { f.Optional = true; return f }

// What every XDP function needs.
var (
	xdpLink = linkType("XDP bpf_link", "bpf_link_type", "BPF_LINK_TYPE_XDP", "5.9",
		"attachments are links pinned under /sys/fs/bpf/fastpath: they outlive the process, and a reload swaps the program without detaching")
	xdpLookup = helper(ebpf.XDP, asm.FnMapLookupElem, "4.8", "every program reads its configuration and counters from maps")
	xdpFrags  = []Feature{
		helper(ebpf.XDP, asm.FnXdpGetBuffLen, "5.18", "multi-buffer frames (xdp.frags): jumbo frames that span several buffers"),
		helper(ebpf.XDP, asm.FnXdpLoadBytes, "5.18", "reads headers and payload that lie past the first buffer of a multi-buffer frame"),
	}
	tracing = progType(ebpf.Tracing, "tracing (tp_btf)", "5.5", "counts the frames the kernel failed to transmit, at the xdp tracepoints")
)

// requirements lists, per function, what its programs need of the kernel.
// The lists are checked against the compiled objects by the tests: every
// helper, kfunc and map type an object uses is here.
var requirements = map[Function][]Feature{
	BR: append([]Feature{
		xdpLink, xdpLookup,
		helper(ebpf.XDP, asm.FnFibLookup, "4.18", "the next hop, its MAC and the egress device come from the kernel's FIB"),
		helper(ebpf.XDP, asm.FnRedirectMap, "4.14", "forwarded frames leave through a device map"),
		helper(ebpf.XDP, asm.FnXdpAdjustHead, "4.10", "the underlay header changes length between IPv4 and IPv6"),
		helper(ebpf.XDP, asm.FnXdpAdjustTail, "4.18", "trims Ethernet padding, as the kernel does"),
		helper(ebpf.XDP, asm.FnXdpStoreBytes, "5.18", "writes into multi-buffer frames"),
		helper(ebpf.XDP, asm.FnKtimeGetCoarseNs, "5.11", "checks hop-field expiry against the clock at every packet"),
		helper(ebpf.XDP, asm.FnRingbufOutput, "5.8", "hands captured frames (br capture) to userspace"),
		helper(ebpf.XDP, asm.FnTailCall, "4.2", "the plain-IP forwarder runs as a program of its own"),
		helper(ebpf.XDP, asm.FnCsumDiff, "4.6", "recomputes UDP checksums of frames longer than one buffer"),
		mapType(ebpf.DevMapHash, "DEVMAP_HASH", "5.4", "the devices a frame may leave by, keyed by ifindex"),
		mapType(ebpf.CPUMap, "CPUMAP", "4.15", "spreads frames over the CPUs named by cpus (programs in its entries: 5.9)"),
		mapType(ebpf.RingBuf, "RINGBUF", "5.8", "the capture ring"),
		mapType(ebpf.ProgramArray, "PROG_ARRAY", "4.2", "the tail call to the plain-IP forwarder"),
		mapType(ebpf.PerCPUArray, "PERCPU_ARRAY", "4.6", "counters and per-CPU scratch space"),
		mapType(ebpf.Hash, "HASH", "3.19", "the SCION sockets and the host's own addresses"),
		mapType(ebpf.Array, "ARRAY", "3.19", "configuration, keys, interfaces"),
		tracing,
		tracepoint("xdp_redirect_err", "4.14", "counts redirects the kernel failed to transmit"),
		tracepoint("xdp_exception", "4.13", "counts frames an XDP program's action failed on"),
		tracepoint("xdp_devmap_xmit", "4.18", "count_tx_drops: counts each flush of a device map"),
		tracepoint("xdp_bulk_tx", "5.6", "count_tx_drops: counts each flush of XDP_TX"),
	}, xdpFrags...),
	FW: {
		xdpLink, xdpLookup,
		helper(ebpf.XDP, asm.FnMapUpdateElem, "4.8", "records flows, connections and rate-limit buckets"),
		helper(ebpf.XDP, asm.FnMapDeleteElem, "4.8", "removes closed connections"),
		helper(ebpf.XDP, asm.FnTailCall, "4.2", "chains to the program behind the firewall (a router or translator on the same device)"),
		helper(ebpf.XDP, asm.FnGetSmpProcessorId, "4.8", "per-CPU conntrack slots"),
		helper(ebpf.XDP, asm.FnKtimeGetCoarseNs, "5.11", "conntrack timeouts and rate limits against the clock"),
		helper(ebpf.XDP, asm.FnLoop, "5.17", "walks the rule tree and reaps connections in bounded loops the verifier accepts whatever their length"),
		helper(ebpf.XDP, asm.FnXdpStoreBytes, "5.18", "writes the synproxy's answers into the frame"),
		helper(ebpf.XDP, asm.FnXdpAdjustTail, "4.18", "sizes the synproxy's answers"),
		helper(ebpf.XDP, asm.FnTcpRawGenSyncookieIpv4, "6.0", "the synproxy's SYN cookies (compiled into the program, so needed with no synproxy rule too)"),
		helper(ebpf.XDP, asm.FnTcpRawGenSyncookieIpv6, "6.0", "the synproxy's SYN cookies over IPv6"),
		helper(ebpf.XDP, asm.FnTcpRawCheckSyncookieIpv4, "6.0", "checks the synproxy's SYN cookies"),
		helper(ebpf.XDP, asm.FnTcpRawCheckSyncookieIpv6, "6.0", "checks the synproxy's SYN cookies over IPv6"),
		mapType(ebpf.ArrayOfMaps, "ARRAY_OF_MAPS", "4.12", "rule sets swap as a whole: a new generation of tables replaces the old in one update"),
		mapType(ebpf.LRUHash, "LRU_HASH", "4.10", "new connections, fragments and rate limits, oldest evicted first"),
		mapType(ebpf.ProgramArray, "PROG_ARRAY", "4.2", "the program behind the firewall"),
		mapType(ebpf.PerCPUArray, "PERCPU_ARRAY", "4.6", "counters and rule statistics"),
		mapType(ebpf.Hash, "HASH", "3.19", "established connections and the block list"),
		mapType(ebpf.Array, "ARRAY", "3.19", "configuration and flows"),
		{Kind: "isa", Name: "eBPF v3 instructions", Kernel: "5.1", Why: "the programs are built with -mcpu=v3 (32-bit jumps: smaller programs within the verifier's budget)",
			probe: func(p Probes) error { return p.ISAv3() }},
		optional(linkType("TCX link", "bpf_attach_type", "BPF_TCX_EGRESS", "6.6",
			"connection tracking of what this host sends (its answers, its own connections); without it the firewall filters all the same")),
		optional(helper(ebpf.SchedCLS, asm.FnSkbLoadBytes, "4.5", "the egress tracker reads the host's packets")),
		helper(ebpf.XDP, asm.FnXdpGetBuffLen, "5.18", "the frame's whole length, for the synproxy's answers and fragments"),
		helper(ebpf.XDP, asm.FnXdpLoadBytes, "5.18", "reads the headers of IPv6 extension chains and fragments"),
		helper(ebpf.XDP, asm.FnKtimeGetNs, "4.1", "fastpath monitor: its lease's deadline and each event's time"),
		helper(ebpf.XDP, asm.FnRingbufOutput, "5.8", "fastpath monitor: hands the frames it drops or passes to userspace while one listens"),
		mapType(ebpf.RingBuf, "RINGBUF", "5.8", "fastpath monitor's ring"),
	},
	TRA: append([]Feature{
		xdpLink, xdpLookup,
		linkType("TCX link", "bpf_attach_type", "BPF_TCX_INGRESS", "6.6",
			"the translator's pair takes the host's packets at TCX ingress and egress, pinned as links that a reload swaps in place"),
		kfunc("bpf_cast_to_kern_ctx", "6.2", "tells a TCP segment whose checksum the kernel has still to complete (the sk_buff's ip_summed)"),
		helper(ebpf.SchedCLS, asm.FnKtimeGetTaiNs, "6.1", "SCION timestamps are TAI: path expiry and the packets' timestamps"),
		helper(ebpf.SchedCLS, asm.FnKtimeGetCoarseNs, "5.11", "path liveness against the clock"),
		helper(ebpf.SchedCLS, asm.FnRedirectNeigh, "5.10", "sends translated packets to the border router, the kernel resolving its MAC"),
		helper(ebpf.SchedCLS, asm.FnRedirect, "4.4", "hands packets between the pair's ends"),
		helper(ebpf.SchedCLS, asm.FnSkbAdjustRoom, "4.13", "adds and removes the SCION header"),
		helper(ebpf.SchedCLS, asm.FnSkbChangeTail, "4.9", "trims packets to their new length"),
		helper(ebpf.SchedCLS, asm.FnSkbPullData, "4.9", "makes the headers directly readable"),
		helper(ebpf.SchedCLS, asm.FnSkbLoadBytes, "4.5", "reads headers past the linear part"),
		helper(ebpf.SchedCLS, asm.FnSkbStoreBytes, "4.1", "writes the new headers"),
		helper(ebpf.SchedCLS, asm.FnL4CsumReplace, "4.1", "updates the L4 checksum"),
		helper(ebpf.SchedCLS, asm.FnCsumDiff, "4.6", "computes the SCION/UDP checksum"),
		helper(ebpf.SchedCLS, asm.FnGetSocketUid, "4.12", "tells the daemon which user's socket asked for a destination with no path"),
		helper(ebpf.SchedCLS, asm.FnMapLookupElem, "4.1", "destinations, paths and configuration"),
		helper(ebpf.SchedCLS, asm.FnRingbufReserve, "5.8", "events for the daemon (no path, probes)"),
		helper(ebpf.SchedCLS, asm.FnRingbufSubmit, "5.8", "events for the daemon"),
		helper(ebpf.SchedCLS, asm.FnRingbufDiscard, "5.8", "events for the daemon"),
		helper(ebpf.XDP, asm.FnRedirectMap, "4.14", "hands translated packets to the host's end of the pair"),
		helper(ebpf.XDP, asm.FnXdpAdjustHead, "4.10", "removes the SCION header"),
		helper(ebpf.XDP, asm.FnXdpAdjustTail, "4.18", "trims packets to their new length"),
		helper(ebpf.XDP, asm.FnRingbufReserve, "5.8", "events for the daemon (path probes' replies)"),
		helper(ebpf.XDP, asm.FnKtimeGetNs, "4.1", "fastpath monitor: its lease's deadline and each event's time"),
		helper(ebpf.XDP, asm.FnRingbufOutput, "5.8", "fastpath monitor: hands the frames tra_in drops or passes to userspace while one listens"),
		mapType(ebpf.DevMap, "DEVMAP", "4.14", "the host's end of the pair"),
		mapType(ebpf.RingBuf, "RINGBUF", "5.8", "events and held packets for the daemon"),
		mapType(ebpf.PerCPUArray, "PERCPU_ARRAY", "4.6", "counters"),
		mapType(ebpf.Hash, "HASH", "3.19", "destinations and border routers"),
		mapType(ebpf.Array, "ARRAY", "3.19", "configuration and path sets"),
		tracing,
		tracepoint("xdp_redirect_err", "4.14", "counts packets the pair did not take"),
	}, xdpFrags...),
	RT: {
		xdpLink,
		mapType(ebpf.XSKMap, "XSKMAP", "4.18", "AF_XDP: each queue's frames go to the runtime's socket"),
		helper(ebpf.XDP, asm.FnRedirectMap, "4.14", "the redirect program hands frames to the AF_XDP sockets"),
	},
}

// Requirements lists what fn needs of the kernel.
func Requirements(fn Function) []Feature { return requirements[fn] }

// Status is a feature and what the probe said of it.
type Status struct {
	Feature
	// Present is true when the kernel has it; false with Err nil when the
	// probe could not tell.
	Present bool `json:"present"`
	// Err says why it is missing, or why the probe could not tell.
	Err string `json:"error,omitempty"`
	// Unknown: the probe failed (no privilege, no BTF) without an answer.
	Unknown bool `json:"unknown,omitempty"`
}

// Check probes every feature fn needs.
func (p Probes) Check(fn Function) []Status {
	var out []Status
	for _, f := range requirements[fn] {
		err := f.probe(p)
		s := Status{Feature: f, Present: err == nil}
		if err != nil {
			s.Err = err.Error()
			s.Unknown = !errors.Is(err, ebpf.ErrNotSupported)
		}
		out = append(out, s)
	}
	return out
}

// Missing is what fn needs that the kernel lacks: every required feature
// the probes found missing, with the release that brings each and the one
// to upgrade to. Features the probes could not tell about are not counted:
// loading the programs will say.
func (p Probes) Missing(fn Function) error {
	var lines []string
	need := ""
	for _, s := range p.Check(fn) {
		if s.Present || s.Unknown || s.Optional {
			continue
		}
		lines = append(lines, fmt.Sprintf("  %s %s (Linux %s): %s", s.Kind, s.Name, s.Kernel, s.Why))
		need = laterKernel(need, s.Kernel)
	}
	if len(lines) == 0 {
		return nil
	}
	return fmt.Errorf("%w: fastpath %s needs what Linux %s does not have:\n%s\nupgrade to Linux %s or newer (`fastpath version` shows what each function finds)",
		ErrKernel, fn, KernelRelease(), strings.Join(lines, "\n"), need)
}

// Kernel fails, naming each one, when the running kernel lacks something
// fn's programs need. Call it first: before anything is loaded or changed.
func Kernel(fn Function) error { return KernelProbes().Missing(fn) }

// MinKernel is the oldest release that has everything fn needs (optional
// features aside).
func MinKernel(fn Function) string {
	min := ""
	for _, f := range requirements[fn] {
		if !f.Optional {
			min = laterKernel(min, f.Kernel)
		}
	}
	return min
}

// laterKernel returns the later of two releases ("5.18" > "5.9").
func laterKernel(a, b string) string {
	if a == "" {
		return b
	}
	if slices.Compare(release(a), release(b)) >= 0 {
		return a
	}
	return b
}

func release(s string) []int {
	var v []int
	for _, f := range strings.Split(s, ".") {
		n, _ := strconv.Atoi(f)
		v = append(v, n)
	}
	return v
}

// KernelRelease is uname -r.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
