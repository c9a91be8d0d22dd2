// Package monitor shows what the XDP functions drop or pass up, frame by
// frame, while someone listens: each function copies such frames into a
// ring buffer of its own only while a monitor holds a lease on it (a
// CLOCK_MONOTONIC deadline in a map, renewed every second), so that nobody
// listening costs one load and a branch on those paths, and a monitor that
// dies stops the copying when its lease runs out. The functions open their
// rings (fw.OpenMonitor, tra.OpenMonitor, br.OpenMonitor); Run reads one,
// filters in userspace and hands each event on.
package monitor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Verdict is what the function did with a frame.
type Verdict string

const (
	Drop    Verdict = "drop"    // dropped in XDP
	Pass    Verdict = "pass"    // passed up to the kernel's stack (or the program behind)
	Forward Verdict = "forward" // forwarded in XDP (the border router's tap only)
)

// Want is what a monitor asks the function to copy (enum mon_flags).
type Want uint32

const (
	WantDrops  Want = 1 << 0
	WantPasses Want = 1 << 1
	WantAll         = WantDrops | WantPasses
)

// Raw is one event as a function's ring gives it.
type Raw struct {
	Mono      uint64 // CLOCK_MONOTONIC ns when the function saw it
	Ifindex   uint32 // the device it came in by
	Len       int    // the frame's whole length
	Verdict   Verdict
	Reason    string // as the function's counters name it
	Rule      string // fw: the rule's identity (its name, else h:HASH; "default": the default policy)
	Direction string // tra: scion_to_ip
	Data      []byte // what was kept of the frame, from its start
}

// Source is a function's event ring, opened by the function's package.
type Source interface {
	// Function is br, fw or tra; Name the instance.
	Function() string
	Name() string
	// Listen takes or renews the lease: the function copies the frames
	// want names until the CLOCK_MONOTONIC time until (ns), at most
	// snaplen bytes of each.
	Listen(until uint64, want Want, snaplen int) error
	// Read returns the next event, or os.ErrDeadlineExceeded once the
	// deadline passes.
	Read(deadline time.Time) (Raw, error)
	// Lost counts the events the ring had no room for, since the instance
	// was attached.
	Lost() (uint64, error)
	// Device names the device of an ifindex.
	Device(ifindex uint32) string
	// Close ends the lease and releases the ring.
	Close() error
}

// Options say what Run shows and for how long.
type Options struct {
	Want     Want
	Filter   Filter
	Count    int           // stop after this many events shown (0: no limit)
	Duration time.Duration // stop after this long (0: until ctx ends)
	Snaplen  int           // bytes of each frame the function copies (0: SnapMax)
	// Lease is how long the function copies after the monitor last renewed
	// (every second): a killed monitor stops the copying within it.
	Lease time.Duration
}

// SnapMax is the most bytes of a frame the fw and tra rings carry
// (MON_SNAP_MAX); the border router's tap keeps frames whole.
const SnapMax = 2048

// DefaultLease is Options.Lease's default.
const DefaultLease = 5 * time.Second

// Stats is what a run saw.
type Stats struct {
	Events   int    `json:"events"`   // shown
	Filtered int    `json:"filtered"` // read, and left out by the filter
	Lost     uint64 `json:"lost"`     // found the ring full
}

// Monotonic is CLOCK_MONOTONIC in ns, the clock of the functions' leases.
func Monotonic() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// Run listens on src until ctx ends, Count events were shown or Duration
// passed, handing each event that passes the filter to emit, and ends the
// lease when it returns. An error from emit ends the run with it.
func Run(ctx context.Context, src Source, o Options, emit func(Event) error) (Stats, error) {
	var st Stats
	if o.Want == 0 {
		o.Want = WantDrops
	}
	if o.Snaplen <= 0 || o.Snaplen > SnapMax {
		o.Snaplen = SnapMax
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if err := o.Filter.Validate(); err != nil {
		return st, err
	}
	lost0, err := src.Lost()
	if err != nil {
		return st, err
	}
	defer func() {
		if n, err := src.Lost(); err == nil && n >= lost0 {
			st.Lost = n - lost0
		}
	}()
	lease := func() error { return src.Listen(Monotonic()+uint64(o.Lease), o.Want, o.Snaplen) }
	if err := lease(); err != nil {
		return st, err
	}
	// Wall time of a monotonic stamp: the offset now (a clock step later
	// shifts the shown times, not the order).
	off := time.Now().UnixNano() - int64(Monotonic())
	var end time.Time
	if o.Duration > 0 {
		end = time.Now().Add(o.Duration)
	}
	renewed := time.Now()
	for {
		if ctx.Err() != nil || (!end.IsZero() && !time.Now().Before(end)) {
			return st, nil
		}
		if time.Since(renewed) >= time.Second {
			if err := lease(); err != nil {
				return st, err
			}
			renewed = time.Now()
		}
		dl := time.Now().Add(200 * time.Millisecond)
		if !end.IsZero() && end.Before(dl) {
			dl = end
		}
		r, err := src.Read(dl)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return st, err
		}
		if r.Verdict == Forward || (r.Verdict == Drop && o.Want&WantDrops == 0) || (r.Verdict == Pass && o.Want&WantPasses == 0) {
			continue
		}
		t := time.Unix(0, int64(r.Mono)+off)
		if r.Mono == 0 {
			t = time.Now() // the border router's tap carries no time
		}
		if len(r.Data) > o.Snaplen {
			r.Data = r.Data[:o.Snaplen]
		}
		dev := ""
		if r.Ifindex != 0 {
			dev = src.Device(r.Ifindex)
		}
		ev := NewEvent(src.Function(), src.Name(), dev, r, t)
		if !o.Filter.Match(ev) {
			st.Filtered++
			continue
		}
		if err := emit(ev); err != nil {
			return st, err
		}
		st.Events++
		if o.Count > 0 && st.Events >= o.Count {
			return st, nil
		}
	}
}

// DeviceName names an ifindex of this namespace, or if<N>.
func DeviceName(ifindex uint32) string {
	if i, err := net.InterfaceByIndex(int(ifindex)); err == nil {
		return i.Name
	}
	return fmt.Sprintf("if%d", ifindex)
}
