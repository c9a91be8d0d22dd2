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

// ForwardedFrame is a frame an attached router forwarded in XDP: as it
// arrived and as it left.
type ForwardedFrame struct {
	In, Out []byte
}

// captureMax is BR_CAPTURE_MAX: longer frames come with length 0.
const captureMax = 2048

// Tap gets every frame an attached router forwards in XDP, from the moment
// it opens until Close: the router keeps each frame as it arrived while
// BR_VAR_CAPTURE_UNTIL is ahead (the tap moves it on every second, a
// lease of tapLease), and hands it to br_capture with the frame as it left
// when it forwards it. What the router does with the frame does not
// change; one tap at a time.
type Tap struct {
	name   string
	vars   *ebpf.Map
	ring   *ebpf.Map
	reader *ringbuf.Reader
	mu     sync.Mutex
	frames []ForwardedFrame
	long   int // frames longer than the tap takes
	done   chan struct{}
	stop   chan struct{}
}

// OpenTap starts capturing what the attached router of that pin name
// forwards.
func OpenTap(name string) (*Tap, error) {
	dir := PinDir(name)
	ring, err := ebpf.LoadPinnedMap(filepath.Join(dir, "br_capture"), nil)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("router %s has no tap (not attached, or attached by a fastpath before the tap: attach it again): %w", name, ErrNotAttached)
		}
		return nil, err
	}
	vars, err := ebpf.LoadPinnedMap(filepath.Join(dir, "br_vars"), nil)
	if err != nil {
		ring.Close()
		return nil, err
	}
	t := &Tap{name: name, vars: vars, ring: ring, done: make(chan struct{}), stop: make(chan struct{})}
	if t.reader, err = ringbuf.NewReader(ring); err != nil {
		t.closeMaps()
		return nil, err
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

// tapUntil is BR_VAR_CAPTURE_UNTIL for a lease from now: the monotonic
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
	if err := setVar(t.vars, routerBrVarBR_VAR_CAPTURE_UNTIL, until); err != nil {
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
		s := rec.RawSample
		if len(s) < 8+2*captureMax {
			continue
		}
		in, out := int(binary.LittleEndian.Uint32(s[0:4])), int(binary.LittleEndian.Uint32(s[4:8]))
		t.mu.Lock()
		if in == 0 || out == 0 || in > captureMax || out > captureMax {
			t.long++
		} else {
			t.frames = append(t.frames, ForwardedFrame{
				In:  append([]byte(nil), s[8:8+in]...),
				Out: append([]byte(nil), s[8+captureMax:8+captureMax+out]...),
			})
		}
		t.mu.Unlock()
	}
}

// Frames are what the router forwarded since the tap opened, and how many
// frames were too long for it (more than 2,048 bytes).
func (t *Tap) Frames() ([]ForwardedFrame, int) {
	// What the router handed over last is read within a moment.
	time.Sleep(50 * time.Millisecond)
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]ForwardedFrame(nil), t.frames...), t.long
}

// Close stops the capture.
func (t *Tap) Close() error {
	close(t.stop)
	err := t.setCapture(0)
	t.reader.Close()
	<-t.done
	t.closeMaps()
	return err
}

func (t *Tap) closeMaps() {
	t.vars.Close()
	t.ring.Close()
}
