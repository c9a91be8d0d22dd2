package monitor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/fastpath-dev/fastpath/internal/xdp"
	"golang.org/x/sys/unix"
)

// ErrBusy says another monitor listens to the instance: a ring has one
// reader.
var ErrBusy = errors.New("another monitor listens to it")

// RingConfig is a function's ring of bpf/include/monitor.h: the function's
// package opens the pinned maps and says how to read and write their
// values (its bpf2go types).
type RingConfig struct {
	Function, Name string
	Dir            string    // the instance's pin directory: locked while listening
	Ring           *ebpf.Map // <prefix>_mon_ring
	// SetCtl writes <prefix>_mon_ctl's entry.
	SetCtl func(until uint64, flags, snaplen uint32) error
	// Lost sums <prefix>_mon_buf's per-CPU lost counts.
	Lost func() (uint64, error)
	// Decode reads one record of the ring.
	Decode func(rec []byte) (Raw, bool)
	// Close closes the maps the function opened.
	Close func()
}

// Ring is a Source over a RingConfig.
type Ring struct {
	c       RingConfig
	reader  *ringbuf.Reader
	lock    *os.File
	devices map[uint32]string
}

// Lock takes the instance's monitor lock (one reader per ring): a flock on
// its pin directory, released when the process ends, killed or not.
func Lock(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrBusy
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// NewRing takes the lock, opens the reader and empties what a monitor
// before it left in the ring.
func NewRing(c RingConfig) (*Ring, error) {
	r := &Ring{c: c, devices: Devices(c.Dir)}
	var err error
	if r.lock, err = Lock(c.Dir); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s %s: %w", c.Function, c.Name, err)
	}
	if r.reader, err = ringbuf.NewReader(c.Ring); err != nil {
		r.lock.Close()
		c.Close()
		return nil, fmt.Errorf("%s %s: open the monitor ring: %w", c.Function, c.Name, err)
	}
	r.reader.SetDeadline(time.Now())
	for {
		if _, err := r.reader.Read(); err != nil {
			break
		}
	}
	r.reader.SetDeadline(time.Time{})
	return r, nil
}

func (r *Ring) Function() string { return r.c.Function }
func (r *Ring) Name() string     { return r.c.Name }

func (r *Ring) Listen(until uint64, want Want, snaplen int) error {
	if err := r.c.SetCtl(until, uint32(want), uint32(snaplen)); err != nil {
		return fmt.Errorf("%s %s: set the monitor's lease: %w", r.c.Function, r.c.Name, err)
	}
	return nil
}

func (r *Ring) Read(deadline time.Time) (Raw, error) {
	r.reader.SetDeadline(deadline)
	for {
		rec, err := r.reader.Read()
		if err != nil {
			return Raw{}, err
		}
		if raw, ok := r.c.Decode(rec.RawSample); ok {
			return raw, nil
		}
	}
}

func (r *Ring) Lost() (uint64, error) { return r.c.Lost() }

func (r *Ring) Device(ifindex uint32) string {
	if d, ok := r.devices[ifindex]; ok {
		return d
	}
	return DeviceName(ifindex)
}

// Close ends the lease (the function stops copying at once) and releases
// the ring.
func (r *Ring) Close() error {
	err := r.c.SetCtl(0, 0, 0)
	r.reader.Close()
	r.c.Close()
	r.lock.Close()
	return err
}

// Devices names the ifindexes of an instance's attached devices by its link
// pins (link_<netns>_<dev>), which hold the ifindex in their namespace.
func Devices(dir string) map[uint32]string {
	out := map[uint32]string{}
	for _, p := range xdp.Links(dir) {
		i, ok := xdp.ParseLinkPinName(filepath.Base(p))
		if !ok {
			continue
		}
		l, err := link.LoadPinnedLink(p, nil)
		if err != nil {
			continue
		}
		info, err := l.Info()
		l.Close()
		if err != nil || info.XDP() == nil {
			continue
		}
		out[info.XDP().Ifindex] = i.Name
	}
	return out
}

// XDPVerdict is the verdict of an XDP action a ring carries.
func XDPVerdict(action uint32) Verdict {
	switch action {
	case 2: // XDP_PASS
		return Pass
	case 3, 4: // XDP_TX, XDP_REDIRECT
		return Forward
	}
	return Drop // XDP_ABORTED, XDP_DROP
}

// OpenPinned opens the maps pinned in dir under names, all or none, and
// gives a function that closes them. A map that is not there fails it
// with an error that wraps os.ErrNotExist, for the function to say why
// (not attached, or attached by a fastpath without the monitor).
func OpenPinned(dir string, names ...string) ([]*ebpf.Map, func(), error) {
	ms := make([]*ebpf.Map, 0, len(names))
	closeAll := func() {
		for _, m := range ms {
			m.Close()
		}
	}
	for _, n := range names {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, n), nil)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("open %s: %w", n, err)
		}
		ms = append(ms, m)
	}
	return ms, closeAll, nil
}
