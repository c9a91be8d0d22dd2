package lab

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// SinkCounters is what the sink counted on one CPU.
type SinkCounters = sinkSinkCounters

// Sink counts and drops every frame that reaches an interface.
type Sink struct {
	objs sinkObjects
	link link.Link
}

// AttachSink loads the sink and attaches it to the interface.
func AttachSink(iface xdp.Iface, mode xdp.Mode) (*Sink, error) {
	return attachSink(iface, mode, false)
}

// AttachSCIONSink is a sink for a SCION router's link: it counts and drops
// SCMP echo requests on a standard path (the scion rows' traffic) and passes
// the rest (BFD, beacons, the control services' requests) to the router
// behind.
func AttachSCIONSink(iface xdp.Iface, mode xdp.Mode) (*Sink, error) {
	return attachSink(iface, mode, true)
}

func attachSink(iface xdp.Iface, mode xdp.Mode, scion bool) (*Sink, error) {
	if _, err := xdp.Lookup(iface); err != nil {
		return nil, err
	}
	s := &Sink{}
	if err := loadSinkObjects(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("load sink: %w", err)
	}
	prog := s.objs.LabSink
	if scion {
		prog = s.objs.LabSinkScion
	}
	l, err := xdp.Attach(iface, prog, mode)
	if err != nil {
		s.objs.Close()
		return nil, err
	}
	s.link = l
	return s, nil
}

// PerCPU returns the counters of every possible CPU.
func (s *Sink) PerCPU() ([]SinkCounters, error) {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	vals := make([]SinkCounters, n)
	if err := s.objs.SinkStats.Lookup(uint32(0), vals); err != nil {
		return nil, fmt.Errorf("read sink counters: %w", err)
	}
	return vals, nil
}

// Total returns the counters summed over CPUs.
func (s *Sink) Total() (SinkCounters, error) {
	per, err := s.PerCPU()
	var t SinkCounters
	for _, c := range per {
		t.Packets += c.Packets
		t.Bytes += c.Bytes
		t.MultiBuf += c.MultiBuf
	}
	return t, err
}

// Close detaches and unloads the sink.
func (s *Sink) Close() error {
	var err error
	if s.link != nil {
		err = s.link.Close()
	}
	s.objs.Close()
	return err
}
