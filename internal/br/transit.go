package br

import (
	"fmt"
	"net"
	"os"
	"sort"

	"github.com/scionproto/scion/pkg/addr"
)

// TransitOptions describe test traffic through a router.
type TransitOptions struct {
	Count int
	// Size is the frame length; the SCION/UDP payload fills what the headers leave.
	Size           int
	SrcMAC, DstMAC net.HardwareAddr
}

// TransitPackets builds valid SCION/UDP packets that cross the router from
// its lowest-numbered external interface to the next: child to parent (an
// up-segment against construction) or core to core. Each carries its own
// sequence number, and every MAC is right for the configuration's key.
func TransitPackets(cfg *Config, o TransitOptions) ([][]byte, error) {
	var ext []Interface
	for _, i := range cfg.Interfaces {
		if i.Kind == External {
			ext = append(ext, i)
		}
	}
	sort.Slice(ext, func(a, b int) bool { return ext[a].ID < ext[b].ID })
	if len(ext) < 2 {
		return nil, fmt.Errorf("%s: transit traffic needs two external interfaces, the router has %d", cfg.Path, len(ext))
	}
	in, out := ext[0], ext[1]
	var s Segment
	switch {
	case in.LinkType == "child" && out.LinkType == "parent":
		// Hop fields in traversal order; ours has ConsIngress towards the parent.
		s = seg2(false, 2, [2]uint16{0, 11}, [2]uint16{out.ID, in.ID}, [2]uint16{21, 0})
	case in.LinkType == "core" && out.LinkType == "core":
		s = seg2(true, 1, [2]uint16{0, 11}, [2]uint16{in.ID, out.ID}, [2]uint16{21, 0})
	default:
		return nil, fmt.Errorf("%s: interfaces %d (%s) and %d (%s): transit traffic needs child→parent or core→core", cfg.Path, in.ID, in.LinkType, out.ID, out.LinkType)
	}
	headers := 14 + 20 + 8 + 12 + 24 + 4 + 8 + 3*12 + 8
	if !in.Local.Addr().Is4() {
		headers += 20 // an IPv6 underlay
	}
	// Up to a jumbo frame: 9,000 bytes of MTU and the Ethernet header.
	if o.Size < headers+4 || o.Size > 9014 {
		return nil, fmt.Errorf("packet size %d out of range: SCION transit packets here are %d to 9014 bytes", o.Size, headers+4)
	}
	if o.Count < 1 || o.Count > 1<<16 {
		return nil, fmt.Errorf("packet count %d out of range: 1 to 65536", o.Count)
	}
	srcHost := addr.MustParseHost("198.51.100.1")
	dstHost := addr.MustParseHost("203.0.113.1")
	pkts := make([][]byte, o.Count)
	for n := range pkts {
		payload := make([]byte, o.Size-headers)
		for i := range payload {
			payload[i] = byte(n >> (8 * (3 - i%4)))
		}
		p := SCIONPacket{
			Path: PathSpec{Segments: []Segment{s}, CurrHF: 1}, Key: cfg.Keys[0],
			SrcIA: in.NeighborIA, DstIA: out.NeighborIA, SrcHost: srcHost, DstHost: dstHost,
			SrcPort: uint16(10000 + n%50000), DstPort: 9, Payload: payload,
			SrcMAC: o.SrcMAC, DstMAC: o.DstMAC, UnderlaySrc: in.Remote, UnderlayDst: in.Local,
			FlowID: uint32(n),
		}
		f, err := p.Frame()
		if err != nil {
			return nil, err
		}
		pkts[n] = f
	}
	return pkts, nil
}

func seg2(consDir bool, carried int, hops ...[2]uint16) Segment {
	s := Segment{ConsDir: consDir, Timestamp: uint32(nowUnix()), SegID: 0x2b2b, Carried: carried}
	for _, h := range hops {
		s.Hops = append(s.Hops, Hop{ConsIngress: h[0], ConsEgress: h[1], ExpTime: 255})
	}
	return s
}

// LabConfig loads the lab's router configuration from a temporary copy.
func LabConfig() (*Config, func(), error) {
	dir, err := os.MkdirTemp("", "fastpath-br-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	path, err := WriteLabConfig(dir)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return cfg, cleanup, nil
}
