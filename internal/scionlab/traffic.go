package scionlab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/slayers"

	"github.com/fastpath-dev/fastpath/internal/capture"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// Transit is traffic across the core AS on a real path of the network:
// a SCMP echo request as the first leaf AS's router sends it to the core,
// and where the generator (the first leaf's link veth) and the sink (the
// last leaf's link veth, before its router) go.
type Transit struct {
	Template  []byte
	Gen, Sink xdp.Iface
}

// CaptureTransit captures one `scion ping` from the first leaf AS's end
// host to the last's as it leaves the first leaf's router towards the core.
func (n Network) CaptureTransit(ctx context.Context) (*Transit, error) {
	as, links, err := n.ASes()
	if err != nil {
		return nil, err
	}
	src, dst := as[1], as[len(as)-1]
	// Each leaf's first link (with parallel links the ping may take
	// another: then nothing is captured, and the error says so).
	var up, down Link
	for _, l := range slices.Backward(links) {
		switch l.Child {
		case src.Index:
			up = l
		case dst.Index:
			down = l
		}
	}
	// The generator and the sink run on the leaves' veths, under a bridge
	// or macvlan if the link end has one; a VXLAN underlay carries the
	// frames encapsulated, which the rows do not make.
	for _, l := range []Link{up, down} {
		if l.ChildKind == VXLAN {
			return nil, fmt.Errorf("%s's link to the core is VXLAN: transit is sent and counted as plain frames on the leaves' veths; bring the network up with another --devices", as[l.Child].IA)
		}
	}
	tr := &Transit{
		Gen:  xdp.Iface{Netns: src.Netns, Name: up.ChildVeth},
		Sink: xdp.Iface{Netns: dst.Netns, Name: down.ChildVeth},
	}
	tap, err := capture.Open(tr.Gen)
	if err != nil {
		return nil, err
	}
	defer tap.Close()
	if out, err := n.Scion(ctx, src, "ping", fmt.Sprintf("%s,%s", dst.IA, dst.Host), "-c", "1", "--timeout", "2s"); err != nil {
		return nil, fmt.Errorf("capture a path: %w\n%s", err, out)
	}
	time.Sleep(50 * time.Millisecond)
	// The echo request, not the first SCION packet: the control services'
	// SCION/UDP leaves by the same link (on v0.15.1 networks, from port
	// 32767, it came first now and then).
	var other error
	for _, f := range tap.Frames() {
		if !f.Outgoing || !isSCIONTo(f.Data, up.ParentAddr) {
			continue
		}
		if _, err := echoVariants(f.Data, 1, 0); err != nil {
			other = err
			continue
		}
		tr.Template = f.Data
		return tr, nil
	}
	if other != nil {
		return nil, fmt.Errorf("no SCMP echo request to %s left %s during scion ping: %w", up.ParentAddr, tr.Gen, other)
	}
	return nil, fmt.Errorf("no SCION packet to %s left %s during scion ping", up.ParentAddr, tr.Gen)
}

// Frames are count distinct frames of the captured echo request, each
// frameLen bytes long (its echo payload padded) or as short as the path
// allows: the echo's sequence number counts up (SCMP checksum redone), the
// path (hop fields, MACs) stays as the control plane made it.
func (t *Transit) Frames(count, frameLen int) ([][]byte, error) {
	return echoVariants(t.Template, count, frameLen)
}

// isSCIONTo says whether a frame is a SCION packet with a standard path on
// an IPv4/UDP underlay to dst.
func isSCIONTo(f []byte, dst netip.AddrPort) bool {
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if ip == nil || udp == nil || len(udp.Payload) < 12 {
		return false
	}
	a, _ := netip.AddrFromSlice(ip.DstIP.To4())
	return netip.AddrPortFrom(a, uint16(udp.DstPort)) == dst && udp.Payload[8] == 1
}

// echoVariants makes n copies of a captured SCMP echo request, each with
// its own sequence number and right checksums, padded to frameLen.
func echoVariants(frame []byte, n, frameLen int) ([][]byte, error) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if eth == nil || ip == nil || udp == nil {
		return nil, fmt.Errorf("the captured frame is not Ethernet/IPv4/UDP")
	}
	var scn slayers.SCION
	var scmp slayers.SCMP
	var echo slayers.SCMPEcho
	if err := scn.DecodeFromBytes(udp.Payload, gopacket.NilDecodeFeedback); err != nil {
		return nil, fmt.Errorf("decode the captured SCION header: %w", err)
	}
	if scn.NextHdr != slayers.L4SCMP {
		return nil, fmt.Errorf("the captured packet is SCION with NextHdr %s, not SCMP", scn.NextHdr)
	}
	if err := scmp.DecodeFromBytes(scn.Payload, gopacket.NilDecodeFeedback); err != nil {
		return nil, fmt.Errorf("decode the captured SCMP header: %w", err)
	}
	if scmp.TypeCode.Type() != slayers.SCMPTypeEchoRequest {
		return nil, fmt.Errorf("the captured packet is SCMP %s, not an echo request", scmp.TypeCode)
	}
	if err := echo.DecodeFromBytes(scmp.Payload, gopacket.NilDecodeFeedback); err != nil {
		return nil, fmt.Errorf("decode the captured echo: %w", err)
	}
	// Headers: the frame less its echo payload.
	if pad := frameLen - (len(frame) - len(echo.Payload)); pad > 0 {
		echo.Payload = make([]byte, pad)
	} else {
		echo.Payload = nil
	}
	out := make([][]byte, n)
	for i := range out {
		echo.SeqNumber = uint16(i)
		scmp.SetNetworkLayerForChecksum(&scn)
		inner := gopacket.NewSerializeBuffer()
		opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
		if err := gopacket.SerializeLayers(inner, opts, &scn, &scmp, &echo, gopacket.Payload(echo.Payload)); err != nil {
			return nil, fmt.Errorf("build packet %d: %w", i, err)
		}
		e := *eth
		v4 := *ip
		u := layers.UDP{SrcPort: udp.SrcPort, DstPort: udp.DstPort}
		u.SetNetworkLayerForChecksum(&v4)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, opts, &e, &v4, &u, gopacket.Payload(inner.Bytes())); err != nil {
			return nil, fmt.Errorf("build packet %d: %w", i, err)
		}
		out[i] = buf.Bytes()
	}
	return out, nil
}
