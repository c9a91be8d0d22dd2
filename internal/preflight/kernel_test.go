package preflight

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// TestKernelHasEverything probes the running kernel, which the project is
// developed and tested on: it has everything every function needs.
func TestKernelHasEverything(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the probes load programs: run as root")
	}
	p := KernelProbes()
	for _, fn := range Functions {
		t.Run(string(fn), func(t *testing.T) {
			for _, s := range p.Check(fn) {
				if !s.Present {
					t.Errorf("%s %s (Linux %s) not found on %s: %s", s.Kind, s.Name, s.Kernel, KernelRelease(), s.Err)
				}
			}
			if err := Kernel(fn); err != nil {
				t.Error(err)
			}
		})
	}
}

// allPresent plays a kernel that has everything.
func allPresent() Probes {
	return Probes{
		Helper:      func(ebpf.ProgramType, asm.BuiltinFunc) error { return nil },
		MapType:     func(ebpf.MapType) error { return nil },
		ProgramType: func(ebpf.ProgramType) error { return nil },
		Kfunc:       func(string) error { return nil },
		Tracepoint:  func(string) error { return nil },
		EnumValue:   func(string, string) error { return nil },
		ISAv3:       func() error { return nil },
	}
}

var notSupported = fmt.Errorf("probe: %w", ebpf.ErrNotSupported)

// TestMissingNamesWhatLacks plays older kernels, each lacking one thing,
// and checks the error names it, the release that has it and the fix, and
// that only the functions that need it fail.
func TestMissingNamesWhatLacks(t *testing.T) {
	cases := map[string]struct {
		lack func(*Probes)
		// fails: the functions that must fail, with what the error must say.
		fails map[Function][]string
	}{
		"no syncookie helper (5.15)": {
			lack: func(p *Probes) {
				p.Helper = func(_ ebpf.ProgramType, fn asm.BuiltinFunc) error {
					if fn == asm.FnTcpRawGenSyncookieIpv4 {
						return notSupported
					}
					return nil
				}
			},
			fails: map[Function][]string{FW: {"helper bpf_tcp_raw_gen_syncookie_ipv4 (Linux 6.0)", "upgrade to Linux 6.0 or newer"}},
		},
		"no cast_to_kern_ctx kfunc (6.1)": {
			lack: func(p *Probes) {
				p.Kfunc = func(name string) error {
					if name == "bpf_cast_to_kern_ctx" {
						return notSupported
					}
					return nil
				}
			},
			fails: map[Function][]string{TRA: {"kfunc bpf_cast_to_kern_ctx (Linux 6.2)", "upgrade to Linux 6.2 or newer"}},
		},
		"no multi-buffer XDP (5.15)": {
			lack: func(p *Probes) {
				p.Helper = func(_ ebpf.ProgramType, fn asm.BuiltinFunc) error {
					if fn == asm.FnXdpGetBuffLen || fn == asm.FnXdpLoadBytes || fn == asm.FnXdpStoreBytes {
						return notSupported
					}
					return nil
				}
			},
			fails: map[Function][]string{
				BR:  {"helper bpf_xdp_get_buff_len (Linux 5.18)", "helper bpf_xdp_store_bytes (Linux 5.18)", "upgrade to Linux 5.18 or newer"},
				FW:  {"helper bpf_xdp_load_bytes (Linux 5.18)"},
				TRA: {"helper bpf_xdp_get_buff_len (Linux 5.18)"},
			},
		},
		"no XDP links (5.8)": {
			lack: func(p *Probes) {
				p.EnumValue = func(enum, value string) error {
					if value == "BPF_LINK_TYPE_XDP" || strings.HasPrefix(value, "BPF_TCX") {
						return notSupported
					}
					return nil
				}
			},
			fails: map[Function][]string{
				BR:  {"link XDP bpf_link (Linux 5.9)", "upgrade to Linux 5.9 or newer"},
				FW:  {"link XDP bpf_link (Linux 5.9)"},
				TRA: {"link XDP bpf_link (Linux 5.9)", "link TCX link (Linux 6.6)", "upgrade to Linux 6.6 or newer"},
				RT:  {"link XDP bpf_link (Linux 5.9)"},
			},
		},
		// The firewall's egress tracker is optional: fw attaches and says
		// so, the translator cannot.
		"no TCX (6.5)": {
			lack: func(p *Probes) {
				p.EnumValue = func(enum, value string) error {
					if strings.HasPrefix(value, "BPF_TCX") {
						return notSupported
					}
					return nil
				}
			},
			fails: map[Function][]string{TRA: {"link TCX link (Linux 6.6)"}},
		},
		// A probe that cannot tell (no privilege) is not a missing feature:
		// loading the programs will say.
		"probes refused": {
			lack: func(p *Probes) {
				p.Helper = func(ebpf.ProgramType, asm.BuiltinFunc) error { return unix.EPERM }
				p.MapType = func(ebpf.MapType) error { return unix.EPERM }
			},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := allPresent()
			c.lack(&p)
			for _, fn := range Functions {
				err := p.Missing(fn)
				want, fails := c.fails[fn]
				if !fails {
					if err != nil {
						t.Errorf("%s: %v", fn, err)
					}
					continue
				}
				if !errors.Is(err, ErrKernel) {
					t.Fatalf("%s: got %v, want an ErrKernel", fn, err)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error does not say %q:\n%v", fn, w, err)
					}
				}
			}
		})
	}
}

func TestHelperName(t *testing.T) {
	for fn, want := range map[asm.BuiltinFunc]string{
		asm.FnFibLookup:              "bpf_fib_lookup",
		asm.FnXdpGetBuffLen:          "bpf_xdp_get_buff_len",
		asm.FnTcpRawGenSyncookieIpv4: "bpf_tcp_raw_gen_syncookie_ipv4",
		asm.FnL4CsumReplace:          "bpf_l4_csum_replace",
		asm.FnGetSmpProcessorId:      "bpf_get_smp_processor_id",
	} {
		if got := helperName(fn); got != want {
			t.Errorf("helperName(%v) = %q, want %q", fn, got, want)
		}
	}
}

func TestLaterKernel(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"", "4.8", "4.8"},
		{"5.9", "5.18", "5.18"},
		{"6.0", "5.18", "6.0"},
		{"6.6", "6.6", "6.6"},
	} {
		if got := laterKernel(c.a, c.b); got != c.want {
			t.Errorf("laterKernel(%q, %q) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
}
