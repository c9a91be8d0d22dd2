package tra

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/scionproto/scion/pkg/slayers"
)

// pageLinear is what a veth puts in the first buffer of a frame for an
// xdp.frags program: a page less XDP's headroom and the shared info.
const pageLinear = 4096 - 256 - 320

// runFrags runs tra_in on a frame as a driver hands a jumbo frame to an
// xdp.frags program: linear bytes (pageLinear for 0) in the first buffer,
// the rest in frags (BPF_PROG_TEST_RUN puts what lies past the context's
// data_end in frags).
func (tr *Translator) runFrags(t *testing.T, frame []byte, linear int) (uint32, []byte) {
	t.Helper()
	ns, _ := testNetns.Load(tr)
	opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+512)}
	if linear == 0 {
		linear = pageLinear
	}
	if linear >= len(frame) {
		t.Fatalf("a frame of %d bytes is not in several buffers with %d linear", len(frame), linear)
	}
	// struct xdp_md: data, data_end, data_meta, ingress_ifindex,
	// rx_queue_index, egress_ifindex.
	ctx := make([]byte, 24)
	binary.NativeEndian.PutUint32(ctx[4:], uint32(linear))
	opts.Context = ctx
	var ret uint32
	err := netns.Run(ns.(string), func() error {
		var err error
		ret, err = tr.objs.TraIn.Run(&opts)
		return err
	})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

// A jumbo SCION frame in several buffers, its headers in the first, is
// translated whole as the reference says (fzCheckIn: the IPv6 header, the
// payload byte for byte, the checksum right for IPv6), the payload in the
// frags unread; trailing bytes past the SCION payload go from the last
// buffer. One whose headers go past the first buffer is the kernel's,
// counted multi_buffer.
func TestIngressJumboFrames(t *testing.T) {
	tr := loadTest(t)
	payload := func(n int) gopacket.Payload {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + i>>8)
		}
		return b
	}
	cases := map[string]struct {
		l4       []gopacket.SerializableLayer
		trailing int
		linear   int // 0: as much as the kernel's page takes
	}{
		"udp 8000 bytes": {l4: []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 31000}, payload(8000)}},
		"tcp segment of 8900 bytes": {l4: []gopacket.SerializableLayer{
			&layers.TCP{SrcPort: 5201, DstPort: 40000, Seq: 1, Ack: 2, ACK: true, PSH: true, Window: 512}, payload(8900)}},
		"udp with trailing bytes": {l4: []gopacket.SerializableLayer{&slayers.UDP{SrcPort: 31000, DstPort: 31000}, payload(6000)}, trailing: 300},
		"tcp, only the headers linear": {l4: []gopacket.SerializableLayer{
			&layers.TCP{SrcPort: 5201, DstPort: 40000, Seq: 1, ACK: true, Window: 512}, payload(5000)}, linear: 14 + 20 + 8 + 36 + 120 + 20},
	}
	translated := 0
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			in := scionFrame(t, remoteIA, remote4, 31000, c.l4...)
			// Bytes past the IPv4 packet (padding): in the frags.
			in = append(in, bytes.Repeat([]byte{0xee}, c.trailing)...)
			if c.linear > 0 && c.linear < 14+20+8+len(testPath(t))+36+20 {
				t.Fatalf("the linear part %d does not hold the headers", c.linear)
			}
			ret, out := tr.runFrags(t, in, c.linear)
			if fd := fzCheckIn(in, ret, out); fd != nil {
				t.Fatalf("%s: %s; counters %v", fd.kind, fd.detail, tr.counts(t))
			}
			if ret != xdpRedirect {
				t.Fatalf("action %d, want XDP_REDIRECT", ret)
			}
			translated++
		})
	}
	c := tr.counts(t)
	if c["translated_in"].Packets != uint64(translated) || c["multi_buffer"].Packets != 0 {
		t.Fatalf("translated_in %d multi_buffer %d, want %d and 0", c["translated_in"].Packets, c["multi_buffer"].Packets, translated)
	}

	// A broken frame in several buffers is dropped as one in a single
	// buffer is: a PayloadLen beyond the datagram.
	in := scionFrame(t, remoteIA, remote4, 31000, &slayers.UDP{SrcPort: 31000, DstPort: 31000}, payload(6000))
	binary.BigEndian.PutUint16(in[14+20+8+6:], 6100)
	if ret, _ := tr.runFrags(t, in, 0); ret != xdpDrop || tr.counts(t)["parse_error"].Packets != 1 {
		t.Fatalf("PayloadLen beyond the datagram: action %d; counters %v", ret, tr.counts(t))
	}

	// Headers past the first buffer: the TCP header in the frags.
	in = scionFrame(t, remoteIA, remote4, 31000, &layers.TCP{SrcPort: 5201, DstPort: 40000, ACK: true, Window: 512}, payload(5000))
	hdrs := 14 + 20 + 8 + int(in[14+20+8+5])*4
	ret, out := tr.runFrags(t, in, hdrs+10)
	if ret != xdpPass {
		t.Fatalf("headers past the first buffer: action %d, want XDP_PASS; counters %v", ret, tr.counts(t))
	}
	if !bytes.Equal(out[:len(in)], in) {
		t.Fatal("a frame left to the kernel was changed")
	}
	if got := tr.counts(t)["multi_buffer"].Packets; got != 1 {
		t.Fatalf("multi_buffer %d, want 1", got)
	}
}
