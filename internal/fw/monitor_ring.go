package fw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/fastpath-dev/fastpath/internal/monitor"
)

// monReasonSynproxy is FW_MON_SYNPROXY (fw_shared.h): a frame the
// synproxy dropped or passed; its synproxy_* counters say why.
const monReasonSynproxy = 1000

// OpenMonitor opens the monitor ring (fw_mon_ring) of an attached firewall:
// the frames it drops or passes, while the monitor's lease lasts.
func OpenMonitor(name string) (monitor.Source, error) {
	dir := PinDir(name)
	var ms [3]*ebpf.Map
	closeAll := func() {
		for _, m := range ms {
			if m != nil {
				m.Close()
			}
		}
	}
	for i, n := range []string{"fw_mon_ctl", "fw_mon_ring", "fw_mon_buf"} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, n), nil)
		if err != nil {
			closeAll()
			if errors.Is(err, os.ErrNotExist) {
				if _, serr := os.Stat(filepath.Join(dir, "fw_gen")); serr != nil {
					return nil, fmt.Errorf("firewall %q: %w", name, ErrNotAttached)
				}
				return nil, fmt.Errorf("firewall %q was attached by a fastpath without the monitor: attach it again (fw attach or a restart of fw serve)", name)
			}
			return nil, fmt.Errorf("firewall %q: open %s: %w", name, n, err)
		}
		ms[i] = m
	}
	ctl, ring, buf := ms[0], ms[1], ms[2]
	if buf.ValueSize() != uint32(binary.Size(fwMonBuf{})) {
		closeAll()
		return nil, fmt.Errorf("firewall %q: its monitor ring is of another fastpath (fw_mon_buf of %d bytes): attach it again", name, buf.ValueSize())
	}
	return monitor.NewRing(monitor.RingConfig{
		Function: "fw", Name: name, Dir: dir, Ring: ring,
		SetCtl: func(until uint64, flags, snaplen uint32) error {
			return ctl.Put(uint32(0), fwMonCtl{Until: until, Flags: flags, Snaplen: snaplen})
		},
		Lost: func() (uint64, error) {
			var vals []fwMonBuf
			if err := buf.Lookup(uint32(0), &vals); err != nil {
				return 0, fmt.Errorf("read fw_mon_buf: %w", err)
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

// decodeMonitorEvent reads one record of fw_mon_ring: a struct mon_event
// and the kept bytes of the frame.
func decodeMonitorEvent(rec []byte) (monitor.Raw, bool) {
	var b fwMonBuf
	n, err := binary.Decode(rec, binary.NativeEndian, &b.Ev)
	if err != nil || int(b.Ev.Cap) > len(rec)-n {
		return monitor.Raw{}, false
	}
	ev := b.Ev
	return monitor.Raw{
		Mono: ev.TsNs, Ifindex: ev.Ifindex, Len: int(ev.Len),
		Verdict: monitor.XDPVerdict(ev.Action), Reason: MonitorReason(ev.Reason), Rule: int(ev.Aux),
		Data: append([]byte(nil), rec[n:n+int(ev.Cap)]...),
	}, true
}

// MonitorReason names a reason of fw_mon_ring's events as the counters do.
func MonitorReason(r uint32) string {
	if r == monReasonSynproxy {
		return "synproxy"
	}
	if n, ok := counterNames[fwFwCounter(r)]; ok {
		return n
	}
	return fmt.Sprintf("reason_%d", r)
}
