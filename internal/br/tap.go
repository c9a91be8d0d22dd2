package br

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// TapFrame is a frame an attached router forwarded or dropped in XDP: as
// it arrived and, when forwarded, as it left; Verdict is "forwarded" or
// why it was dropped (a counter's name: parse_error, underlay_mismatch, …).
type TapFrame struct {
	In, Out []byte
	Verdict string
	// Generic: by the copy attached in generic mode, which leaves a
	// pending UDP checksum pending for the device to complete.
	Generic bool
}

// Dropped says the router dropped the frame.
func (f TapFrame) Dropped() bool { return f.Verdict != VerdictName(routerBrVerdictBR_FORWARDED) }

// TapMissed are the frames a tap got no bytes of.
type TapMissed struct {
	// Long frames were longer than the tap keeps (CaptureMax).
	Long int
	// Lost records found the ring full: the reader fell behind.
	Lost uint64
}

// CaptureMax is the longest frame the tap keeps (BR_CAPTURE_MAX): the
// per-CPU record holds two of them, as it arrived and as it left.
const CaptureMax = len(routerBrCaptureFrame{}.Data) / 2

// captureHdrLen is the length of a record's header in the ring.
var captureHdrLen = binary.Size(routerBrCaptureHdr{})

// Tap gets every frame an attached router forwards or drops in XDP, from
// the moment it opens until Close: the router keeps each frame as it
// arrived while br_vars' capture_until is ahead (the tap moves it on
// every second, a lease of tapLease), and hands it to br_capture with the
// frame as it left when it forwards it, or with its verdict when it drops
// it. What the router does with the frame does not change; one tap at a
// time.
type Tap struct {
	name      string
	vars      *ebpf.Map
	ring      *ebpf.Map
	in        *ebpf.Map // br_capture_in: the per-CPU records, and their lost counts
	lost0     uint64    // what they counted before the tap opened
	reader    *ringbuf.Reader
	mu        sync.Mutex
	frames    []TapFrame
	long      int    // frames longer than the tap keeps
	lost      uint64 // records the ring had no room for, as last read
	closed    bool
	done      chan struct{}
	stop      chan struct{}
	closeOnce sync.Once
}

// OpenTap starts capturing what the attached router of that pin name
// forwards and drops in XDP.
func OpenTap(name string) (*Tap, error) {
	dir := PinDir(name)
	ring, err := ebpf.LoadPinnedMap(filepath.Join(dir, "br_capture"), nil)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("router %s has no tap (not attached, or attached by a fastpath before the tap: attach it again): %w", name, ErrNotAttached)
		}
		return nil, err
	}
	t := &Tap{name: name, ring: ring, done: make(chan struct{}), stop: make(chan struct{})}
	if t.vars, err = ebpf.LoadPinnedMap(filepath.Join(dir, "br_vars"), nil); err == nil {
		t.in, err = ebpf.LoadPinnedMap(filepath.Join(dir, "br_capture_in"), nil)
	}
	if err == nil && t.in.ValueSize() != uint32(binary.Size(routerBrCaptureFrame{})) {
		err = fmt.Errorf("its tap's records are of an older fastpath (br_capture_in of %d bytes): detach it and attach it again", t.in.ValueSize())
	}
	if err == nil {
		t.lost0, err = t.lostCount()
	}
	if err == nil {
		t.reader, err = ringbuf.NewReader(ring)
	}
	if err != nil {
		t.closeMaps()
		return nil, fmt.Errorf("router %s: open its tap: %w", name, err)
	}
	// What a tap that did not close left in the ring is not this tap's.
	t.reader.SetDeadline(time.Now())
	for {
		if _, err := t.reader.Read(); err != nil {
			break
		}
	}
	t.reader.SetDeadline(time.Time{})
	if err := t.setCapture(tapUntil()); err != nil {
		t.reader.Close()
		t.closeMaps()
		return nil, err
	}
	go t.read()
	go t.renew()
	return t, nil
}

// tapLease is how long the router copies frames after the tap last said
// it lives: a tap killed stops the copying within it.
const tapLease = 5 * time.Second

// tapUntil is br_vars' capture_until for a lease from now: the monotonic
// clock in ns, which a step of the system clock does not move.
func tapUntil() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano() + int64(tapLease))
}

// renew moves the lease on every second until the tap closes.
func (t *Tap) renew() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.setCapture(tapUntil())
		}
	}
}

// setCapture writes the lease, the tap's own entry of br_vars.
func (t *Tap) setCapture(until uint64) error {
	if err := setVar(t.vars, varCapture, until); err != nil {
		return fmt.Errorf("router %s: %w", t.name, err)
	}
	return nil
}

func (t *Tap) read() {
	defer close(t.done)
	for {
		rec, err := t.reader.Read()
		if err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		f, long, ok := parseTapRecord(rec.RawSample)
		if !ok {
			continue
		}
		t.mu.Lock()
		if long {
			t.long++
		} else {
			t.frames = append(t.frames, f)
		}
		t.mu.Unlock()
	}
}

// parseTapRecord reads one record of br_capture: its header, then the
// kept bytes of the frame as it arrived and as it left, back to back. long
// says a frame was longer than the tap keeps; ok is false for a record
// that does not add up.
func parseTapRecord(s []byte) (f TapFrame, long, ok bool) {
	var h routerBrCaptureHdr
	if _, err := binary.Decode(s, binary.NativeEndian, &h); err != nil {
		return f, false, false
	}
	s = s[captureHdrLen:]
	kept := func(n uint32) int {
		if n > uint32(CaptureMax) {
			return 0
		}
		return int(n)
	}
	in, out := kept(h.InLen), kept(h.OutLen)
	// The ring rounds a record up to 8 bytes.
	if in+out > len(s) {
		return f, false, false
	}
	// Frames passed up to the reference router are the monitor's
	// (monitor_ring.go): it got them itself.
	if h.OutLen == 0 && tapAction(h.Generic) == tapPass {
		return f, false, false
	}
	f.Verdict = VerdictName(Verdict(h.Verdict))
	f.Generic = h.Generic&1 != 0
	if h.InLen == 0 || in == 0 || (h.OutLen > 0 && out == 0) {
		return f, true, true
	}
	f.In = append([]byte(nil), s[:in]...)
	if out > 0 {
		f.Out = append([]byte(nil), s[in:in+out]...)
	}
	if !f.Dropped() && f.Out == nil {
		return f, false, false
	}
	return f, false, true
}

// lostCount sums the per-CPU counts of records the ring had no room for.
func (t *Tap) lostCount() (uint64, error) {
	var vals []routerBrCaptureFrame
	if err := t.in.Lookup(uint32(0), &vals); err != nil {
		return 0, fmt.Errorf("read br_capture_in: %w", err)
	}
	var n uint64
	for _, v := range vals {
		n += v.Lost
	}
	return n, nil
}

// Frames are what the router forwarded or dropped in XDP since the tap
// opened, and what the tap missed.
func (t *Tap) Frames() ([]TapFrame, TapMissed) {
	// What the router handed over last is read within a moment.
	time.Sleep(50 * time.Millisecond)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		if n, err := t.lostCount(); err == nil {
			t.lost = n - t.lost0
		}
	}
	return append([]TapFrame(nil), t.frames...), TapMissed{Long: t.long, Lost: t.lost}
}

// Close stops the capture; Frames still tells what it got.
func (t *Tap) Close() error {
	var err error
	t.closeOnce.Do(func() {
		close(t.stop)
		err = t.setCapture(0)
		t.reader.Close()
		<-t.done
		t.mu.Lock()
		if n, lerr := t.lostCount(); lerr == nil {
			t.lost = n - t.lost0
		}
		t.closed = true
		t.mu.Unlock()
		t.closeMaps()
	})
	return err
}

func (t *Tap) closeMaps() {
	for _, m := range []*ebpf.Map{t.vars, t.in, t.ring} {
		if m != nil {
			m.Close()
		}
	}
}
