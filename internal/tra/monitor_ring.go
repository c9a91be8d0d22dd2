package tra

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/fastpath-dev/fastpath/internal/monitor"
)

// OpenMonitor opens the monitor ring (tra_mon_ring) of an attached
// translator: the frames tra_in (XDP, SCION → IPv6) drops or passes up,
// while the monitor's lease lasts.
func OpenMonitor(name string) (monitor.Source, error) {
	dir := PinDir(name)
	ms, closeAll, err := monitor.OpenPinned(dir, "tra_mon_ctl", "tra_mon_ring", "tra_mon_buf")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(filepath.Join(dir, "tra_conf")); serr != nil {
				return nil, fmt.Errorf("translator %q: %w", name, ErrNotAttached)
			}
			return nil, fmt.Errorf("translator %q was attached by a fastpath without the monitor: attach it again (a restart of tra run)", name)
		}
		return nil, fmt.Errorf("translator %q: %w", name, err)
	}
	ctl, ring, buf := ms[0], ms[1], ms[2]
	if buf.ValueSize() != uint32(binary.Size(translatorMonBuf{})) {
		closeAll()
		return nil, fmt.Errorf("translator %q: its monitor ring is of another fastpath (tra_mon_buf of %d bytes): attach it again", name, buf.ValueSize())
	}
	return monitorRing(name, dir, ctl, ring, buf, closeAll)
}

// monitorRing is the monitor's Source over the translator's maps; dir is
// the directory locked while it listens.
func monitorRing(name, dir string, ctl, ring, buf *ebpf.Map, closeAll func()) (monitor.Source, error) {
	return monitor.NewRing(monitor.RingConfig{
		Function: "tra", Name: name, Dir: dir, Ring: ring,
		SetCtl: func(until uint64, flags, snaplen uint32) error {
			return ctl.Put(uint32(0), translatorMonCtl{Until: until, Flags: flags, Snaplen: snaplen})
		},
		Lost: func() (uint64, error) {
			var vals []translatorMonBuf
			if err := buf.Lookup(uint32(0), &vals); err != nil {
				return 0, fmt.Errorf("read tra_mon_buf: %w", err)
			}
			var n uint64
			for _, v := range vals {
				n += v.Lost
			}
			return n, nil
		},
		Decode: decodeMonitorEvent,
		Close:  closeAll,
	})
}

// decodeMonitorEvent reads one record of tra_mon_ring: a struct mon_event
// and the kept bytes of the frame.
func decodeMonitorEvent(rec []byte) (monitor.Raw, bool) {
	var b translatorMonBuf
	n, err := binary.Decode(rec, binary.NativeEndian, &b.Ev)
	if err != nil || int(b.Ev.Cap) > len(rec)-n {
		return monitor.Raw{}, false
	}
	ev := b.Ev
	return monitor.Raw{
		Mono: ev.TsNs, Ifindex: ev.Ifindex, Len: int(ev.Len),
		Verdict: monitor.XDPVerdict(ev.Action), Reason: MonitorReason(ev.Reason), Direction: monitorDirection(ev.Aux),
		Data: append([]byte(nil), rec[n:n+int(ev.Cap)]...),
	}, true
}

// MonitorReason names a reason of tra_mon_ring's events as the counters do.
func MonitorReason(r uint32) string { return VerdictName(Verdict(r)) }

// monitorDirection names a direction (TRA_DIR_*) as the metrics do.
func monitorDirection(d uint32) string {
	if d == 1 {
		return "scion_to_ip"
	}
	return "ip_to_scion"
}
