package br

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/fastpath-dev/fastpath/internal/monitor"
)

// tapAction is the XDP action a record of br_capture carries above its
// generic flag (BR_CAPTURE_ACTION_SHIFT); 0 in a forwarded frame's.
func tapAction(generic uint32) uint32 { return generic >> 8 & 0xff }

// XDP actions, as records carry them.
const (
	tapDrop = 1
	tapPass = 2
)

// OpenMonitor opens the tap's ring (br_capture) of an attached router for
// the monitor: what it drops in XDP and what it passes up to the reference
// router, while the monitor's lease (br_vars' capture_until) lasts. The tap
// copies what the router forwards too (the lab's oracle replays it): the
// monitor leaves those out. One tap or monitor at a time.
func OpenMonitor(name string) (monitor.Source, error) {
	dir := PinDir(name)
	ms, closeAll, err := monitor.OpenPinned(dir, "br_vars", "br_capture", "br_capture_in")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("router %s has no tap (not attached, or attached by a fastpath before the tap: attach it again): %w", name, ErrNotAttached)
		}
		return nil, fmt.Errorf("router %s: %w", name, err)
	}
	vars, ring, in := ms[0], ms[1], ms[2]
	if in.ValueSize() != uint32(binary.Size(routerBrCaptureFrame{})) {
		closeAll()
		return nil, fmt.Errorf("router %s: its tap's records are of an older fastpath (br_capture_in of %d bytes): detach it and attach it again", name, in.ValueSize())
	}
	t := &Tap{in: in}
	return monitor.NewRing(monitor.RingConfig{
		Function: "br", Name: name, Dir: dir, Ring: ring,
		// The router copies every frame while the lease lasts, whatever
		// the monitor wants: it filters them.
		SetCtl: func(until uint64, _, _ uint32) error { return setVar(vars, varCapture, until) },
		Lost:   t.lostCount,
		Decode: decodeMonitorRecord,
		Close:  closeAll,
	})
}

// decodeMonitorRecord reads a record of br_capture for the monitor: the
// frame as it arrived, its verdict, and whether it was dropped, passed up
// or forwarded.
func decodeMonitorRecord(s []byte) (monitor.Raw, bool) {
	var h routerBrCaptureHdr
	if _, err := binary.Decode(s, binary.NativeEndian, &h); err != nil {
		return monitor.Raw{}, false
	}
	s = s[captureHdrLen:]
	r := monitor.Raw{Len: int(h.InLen), Reason: VerdictName(Verdict(h.Verdict)), Verdict: monitor.Drop}
	switch {
	case h.OutLen > 0:
		r.Verdict = monitor.Forward
	case tapAction(h.Generic) == tapPass:
		r.Verdict = monitor.Pass
	}
	if in := int(h.InLen); in <= CaptureMax && in <= len(s) {
		r.Data = append([]byte(nil), s[:in]...)
	}
	return r, true
}
