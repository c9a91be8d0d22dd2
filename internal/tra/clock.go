package tra

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// What the programs need to know of time that they cannot read themselves:
// Unix time, to take no path past its expiry, and whether a daemon is there
// to read the packets they hold.
//
// BPF has no wall clock. CLOCK_TAI (bpf_ktime_get_tai_ns) is Unix time plus
// the TAI-UTC offset the kernel keeps (adjtimex; 0 unless a time daemon set
// it, when CLOCK_TAI is CLOCK_REALTIME), and it follows every step of the
// clock as CLOCK_REALTIME does: given the offset, a translator whose daemon
// is stopped still takes expired paths out of use on time. Attach writes
// the offset; the daemon writes it again when it changes (a leap second).
//
// The daemon's heartbeat is the coarse monotonic clock the programs read
// (bpf_ktime_get_coarse_ns), written with every tick of its loop; older
// than TRA_HEARTBEAT_STALE_NS, tra_out holds no packet for a path lookup
// and answers the host no route at once (no_daemon).

// taiOffset is TAI - UTC in seconds, as the kernel keeps it.
func taiOffset() (int32, error) {
	var tx unix.Timex
	if _, err := unix.Adjtimex(&tx); err != nil {
		return 0, fmt.Errorf("the kernel's TAI offset (adjtimex): %w", err)
	}
	return tx.Tai, nil
}

// coarseNow is what bpf_ktime_get_coarse_ns reads now.
func coarseNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// Beat tells tra_out a daemon reads what it holds, and keeps the TAI
// offset as the kernel has it.
func (p *Pinned) Beat() error {
	if err := p.heartbeat.Put(uint32(0), coarseNow()); err != nil {
		return fmt.Errorf("write the daemon's heartbeat: %w", err)
	}
	tai, err := taiOffset()
	if err != nil {
		return err
	}
	c, err := p.config()
	if err != nil {
		return err
	}
	if c.TaiOffset == tai {
		return nil
	}
	c.TaiOffset = tai
	return p.conf.Put(uint32(0), &c)
}

// beatPlane is a data plane that hears the daemon's heartbeat (the pinned
// maps; the tests' fakes do not).
type beatPlane interface{ Beat() error }

// beat is the daemon's heartbeat, on every tick of its loop.
func (d *pathDaemon) beat() {
	if b, ok := d.dp.(beatPlane); ok {
		if err := b.Beat(); err != nil {
			d.log.Error("cannot write the daemon's heartbeat", "error", err)
		}
	}
}
