package br

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// brVar is a field of the router's br_vars: each has a writer of its own,
// which stores it in place through the mmapped map (an update of the whole
// value would put back the other fields as the writer read them).
type brVar struct {
	name string
	off  uintptr
}

var (
	varClock   = brVar{"the clock offset", unsafe.Offsetof(routerBrVarsEntry{}.MonoToUnixNs)}
	varKeyGen  = brVar{"the key generation", unsafe.Offsetof(routerBrVarsEntry{}.KeyGen)}
	varCapture = brVar{"the tap's lease", unsafe.Offsetof(routerBrVarsEntry{}.CaptureUntil)}
	varNetns   = brVar{"the namespace", unsafe.Offsetof(routerBrVarsEntry{}.NetnsIno)}
	varDevsGen = brVar{"the devices' generation", unsafe.Offsetof(routerBrVarsEntry{}.DevsGen)}
)

// setVar stores one field of br_vars: one aligned 8-byte store, which the
// program reads whole.
func setVar(vars *ebpf.Map, v brVar, val uint64) error {
	mem, err := vars.Memory()
	if err != nil {
		return fmt.Errorf("write %s: %w", v.name, err)
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], val)
	if _, err := mem.WriteAt(b[:], int64(v.off)); err != nil {
		return fmt.Errorf("write %s: %w", v.name, err)
	}
	return nil
}

// getVar reads one field of br_vars.
func getVar(vars *ebpf.Map, v brVar) (uint64, error) {
	mem, err := vars.Memory()
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", v.name, err)
	}
	var b [8]byte
	if _, err := mem.ReadAt(b[:], int64(v.off)); err != nil {
		return 0, fmt.Errorf("read %s: %w", v.name, err)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// newGeneration stores a generation no process stored before: the
// monotonic clock in ns, which no two reads share. Never the old value
// plus one: two processes changing it at once would then store the same
// value, one of them after the other's change.
func newGeneration(vars *ebpf.Map, v brVar) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("read the clock: %w", err)
	}
	return setVar(vars, v, uint64(ts.Nano()))
}

// monoToUnix is what turns the kernel's monotonic clock into Unix time:
// br_vars' mono_to_unix_ns.
func monoToUnix() (int64, error) {
	var mono, real unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return 0, err
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &real); err != nil {
		return 0, err
	}
	return real.Nano() - mono.Nano(), nil
}

// setClock measures the offset from the monotonic clock to Unix time and
// stores it.
func setClock(vars *ebpf.Map) (int64, error) {
	off, err := monoToUnix()
	if err != nil {
		return 0, fmt.Errorf("read clocks: %w", err)
	}
	return off, setVar(vars, varClock, uint64(off))
}
