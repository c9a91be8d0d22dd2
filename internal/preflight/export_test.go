package preflight

import "github.com/cilium/ebpf/asm"

// HelperName is helperName for the external tests, from an instruction's
// constant.
func HelperName(c int64) string { return helperName(asm.BuiltinFunc(c)) }
