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
// br_config.capture_until is ahead (the tap moves it on every second, a
// lease of tapLease), and hands it to br_capture with the frame as it left
// when it forwards it. What the router does with the frame does not
// change; one tap at a time.
type Tap struct {
	name   string
	conf   *ebpf.Map
	ring   *ebpf.Map
	reader *ringbuf.Reader
	mu     sync.Mutex
	frames []ForwardedFrame
	long   int // frames longer than the tap takes
	done   chan struct{}
	stop   chan struct{}
	confMu sync.Mutex
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
	conf, err := ebpf.LoadPinnedMap(filepath.Join(dir, "br_conf"), nil)
	if err != nil {
		ring.Close()
		return nil, err
	}
	t := &Tap{name: name, conf: conf, ring: ring, done: make(chan struct{}), stop: make(chan struct{})}
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

// tapUntil is br_config.capture_until for a lease from now: Unix time in
// units of 2^30 ns.
func tapUntil() uint32 { return uint32(time.Now().Add(tapLease).UnixNano() >> 30) }

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

func (t *Tap) setCapture(until uint32) error {
	t.confMu.Lock()
	defer t.confMu.Unlock()
	var c routerBrConfig
	zero := uint32(0)
	if err := t.conf.Lookup(zero, &c); err != nil {
		return fmt.Errorf("router %s: read br_conf: %w", t.name, err)
	}
	c.CaptureUntil = until
	if err := t.conf.Update(zero, &c, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("router %s: write br_conf: %w", t.name, err)
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
	t.conf.Close()
	t.ring.Close()
}
