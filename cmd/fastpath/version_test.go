package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// TestVersionNamesWhatIsMissing plays a kernel without the synproxy's
// helper: the firewall is not ready and the line names the helper and the
// release that has it; the other functions are ready.
func TestVersionNamesWhatIsMissing(t *testing.T) {
	p := preflight.Probes{
		Helper: func(_ ebpf.ProgramType, fn asm.BuiltinFunc) error {
			if fn == asm.FnTcpRawCheckSyncookieIpv6 {
				return fmt.Errorf("probe: %w", ebpf.ErrNotSupported)
			}
			return nil
		},
		MapType:     func(ebpf.MapType) error { return nil },
		ProgramType: func(ebpf.ProgramType) error { return nil },
		Kfunc:       func(string) error { return nil },
		Tracepoint:  func(string) error { return nil },
		EnumValue:   func(string, string) error { return nil },
		ISAv3:       func() error { return nil },
	}
	info := collectBuildInfo(p)
	for _, fi := range info.Functions {
		if want := fi.Name != preflight.FW; fi.Ready != want {
			t.Errorf("%s: ready = %v, want %v", fi.Name, fi.Ready, want)
		}
	}
	var out bytes.Buffer
	printBuildInfo(&out, info)
	for _, want := range []string{"fw       missing what it needs (needs Linux 6.0)", "missing helper bpf_tcp_raw_check_syncookie_ipv6 (Linux 6.0)", "br       ready"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not say %q:\n%s", want, out.String())
		}
	}
	if info.Go == "" || info.Kernel == "" || info.Version == "" {
		t.Errorf("go %q, kernel %q, version %q: each must be said", info.Go, info.Kernel, info.Version)
	}
}
