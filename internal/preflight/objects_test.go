package preflight_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// mapNames are the kernel's names of the map types, as the requirement
// lists name them.
var mapNames = map[ebpf.MapType]string{
	ebpf.Hash: "HASH", ebpf.Array: "ARRAY", ebpf.ProgramArray: "PROG_ARRAY", ebpf.PerCPUArray: "PERCPU_ARRAY",
	ebpf.LRUHash: "LRU_HASH", ebpf.ArrayOfMaps: "ARRAY_OF_MAPS", ebpf.DevMap: "DEVMAP", ebpf.DevMapHash: "DEVMAP_HASH",
	ebpf.CPUMap: "CPUMAP", ebpf.XSKMap: "XSKMAP", ebpf.RingBuf: "RINGBUF",
}

// TestRequirementsCoverObjects reads each function's compiled objects (the
// committed bpf2go output) and checks that its requirement list names every
// helper and kfunc its programs call, every map type and tracepoint they
// use: a helper added to the C without a line here would fail on an older
// kernel at load time rather than in the preflight, with the release named.
func TestRequirementsCoverObjects(t *testing.T) {
	objects := map[preflight.Function][]string{
		preflight.BR:  {"../br/router_bpfel.o"},
		preflight.FW:  {"../fw/fw_bpfel.o", "../fw/fwegress_bpfel.o"},
		preflight.TRA: {"../tra/translator_bpfel.o"},
	}
	for fn, files := range objects {
		t.Run(string(fn), func(t *testing.T) {
			listed := map[string]bool{}
			for _, f := range preflight.Requirements(fn) {
				listed[f.Kind+" "+f.Name] = true
			}
			for _, file := range files {
				spec, err := ebpf.LoadCollectionSpec(file)
				if err != nil {
					t.Fatal(err)
				}
				need := map[string]string{}
				for name, p := range spec.Programs {
					for _, ins := range p.Instructions {
						switch {
						case ins.IsBuiltinCall():
							need["helper "+preflight.HelperName(ins.Constant)] = name
						case ins.IsKfuncCall():
							need["kfunc "+ins.Reference()] = name
						}
					}
					if tp, ok := strings.CutPrefix(p.SectionName, "tp_btf/"); ok {
						need["tracepoint "+tp] = name
					}
				}
				for name, m := range spec.Maps {
					if strings.HasPrefix(name, ".") { // .rodata, .bss: arrays the loader makes
						continue
					}
					kname, ok := mapNames[m.Type]
					if !ok {
						t.Errorf("%s: map %s has type %v, which this test does not name: add it to mapNames and to the requirements", file, name, m.Type)
						continue
					}
					need["map "+kname] = name
				}
				for what, by := range need {
					if !listed[what] {
						t.Errorf("%s: %s (used by %s) is not in preflight's requirements of %s: add it, with the release that brought it and why", file, what, by, fn)
					}
				}
			}
		})
	}
}

// TestInstallDocSaysMinKernels checks that docs/install.md's table gives
// each function the release its requirement list adds up to.
func TestInstallDocSaysMinKernels(t *testing.T) {
	b, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range preflight.Functions {
		row := fmt.Sprintf("| `%s` | %s |", fn, preflight.MinKernel(fn))
		if !strings.Contains(string(b), row) {
			t.Errorf("docs/install.md has no row %q: its table and internal/preflight disagree on what %s needs", row, fn)
		}
	}
}
