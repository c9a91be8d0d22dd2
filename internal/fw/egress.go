package fw

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// Host mode: XDP sees what arrives on a device, never what the host sends.
// A second program, on the device's TC egress hook, tracks the host's own
// packets in the same conntrack tables, so that the answers of a server on
// the host and the connections it opens are known when their next packets
// come in (fw_egress.c). It filters nothing.

// egressPinPrefix names the pins of the egress links, one per device, in
// the instance's directory (beside the XDP links, link_...).
const egressPinPrefix = "egress_"

func egressPin(i xdp.Iface) string {
	return egressPinPrefix + strings.TrimPrefix(xdp.LinkPinName(i), "link_")
}

// egressMaps are the XDP program's maps the egress program shares.
func (f *Firewall) egressMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		"fw_conf":     f.objs.FwConf,
		"fw_counters": f.objs.FwCounters,
		"fw_ct_est":   f.objs.FwCtEst,
		"fw_ct_new":   f.objs.FwCtNew,
		"fw_ct_src":   f.objs.FwCtSrc,
		"fw_ct_txn":   f.objs.FwCtTxn,
		"fw_frags":    f.objs.FwFrags,
	}
}

// egressObjects is what the egress object gives: its program, and the set
// of the instance's XDP devices (pinned as fw_devs).
type egressObjects struct {
	Prog *ebpf.Program `ebpf:"fw_egress"`
	Devs *ebpf.Map     `ebpf:"fw_devs"`
}

func (o *egressObjects) Close() {
	if o.Prog != nil {
		o.Prog.Close()
	}
	if o.Devs != nil {
		o.Devs.Close()
	}
}

// loadEgress loads the egress program on the firewall's maps; fw_devs is
// pinned in dir.
func (f *Firewall) loadEgress(dir string) (*egressObjects, error) {
	spec, err := loadFwEgress()
	if err != nil {
		return nil, err
	}
	layout(spec)
	repl := map[string]*ebpf.Map{}
	for name, m := range f.egressMaps() {
		ms, ok := spec.Maps[name]
		if !ok {
			continue
		}
		// Sized at the instance's creation (LoadOptions).
		ms.MaxEntries = m.MaxEntries()
		repl[name] = m
	}
	spec.Maps["fw_devs"].Pinning = ebpf.PinByName
	var o egressObjects
	err = spec.LoadAndAssign(&o, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: dir}, MapReplacements: repl})
	if err != nil {
		return nil, fmt.Errorf("load the egress tracker: %w", err)
	}
	return &o, nil
}

// attachEgress tracks the host's packets leaving the devices, and tells the
// egress program which devices the XDP program is on (all the instance's,
// from its link pins).
func (f *Firewall) attachEgress(dir string, devs []xdp.Iface) error {
	o, err := f.loadEgress(dir)
	if err != nil {
		return err
	}
	defer o.Close()
	if err := fillEgressDevs(dir, o.Devs); err != nil {
		return err
	}
	var errs []error
	for _, d := range devs {
		errs = append(errs, attachEgressLink(filepath.Join(dir, egressPin(d)), d, o.Prog))
	}
	return errors.Join(errs...)
}

// fillEgressDevs makes fw_devs the ifindexes of the devices the instance's
// XDP links are on.
func fillEgressDevs(dir string, m *ebpf.Map) error {
	want := map[uint32]bool{}
	for _, p := range xdp.Links(dir) {
		i, ok := xdp.ParseLinkPinName(filepath.Base(p))
		if !ok {
			continue
		}
		la, err := xdp.Lookup(i)
		if err != nil {
			continue // gone: its link goes with it
		}
		want[uint32(la.Index)] = true
	}
	var k uint32
	var v uint8
	var stale []uint32
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		m.Delete(k)
	}
	for k := range want {
		if err := m.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("note the firewall's devices for the egress tracker: %w", err)
		}
	}
	return nil
}

// attachEgressLink attaches prog at the device's TCX egress, pinned at pin.
func attachEgressLink(pin string, d xdp.Iface, prog *ebpf.Program) error {
	la, err := xdp.Lookup(d)
	if err != nil {
		return err
	}
	return xdp.AttachTCX(pin, d, la.Index, prog, ebpf.AttachTCXEgress)
}

// detachEgress removes the egress links of the devices (all if none given).
func detachEgress(dir string, devs []xdp.Iface) error {
	var pins []string
	if len(devs) == 0 {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), egressPinPrefix) {
				pins = append(pins, filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, d := range devs {
		pins = append(pins, filepath.Join(dir, egressPin(d)))
	}
	var errs []error
	for _, p := range pins {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
