package tra

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
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
			if fd := fzCheckIn(in, false, ret, out); fd != nil {
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

// jumboNetwork is a SCION network of links of MTU 9000 for one test, with
// a prefix of its own, taken down when the test ends.
func jumboNetwork(t *testing.T) (scionlab.Network, []scionlab.AS) {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	b := make([]byte, 2)
	rand.Read(b)
	dir := t.TempDir()
	if os.Getenv("FASTPATH_BIN") == "" {
		bin, err := labtest.BuildFastpath(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("FASTPATH_BIN", bin)
	}
	n := scionlab.Network{Prefix: "fp-j" + hex.EncodeToString(b) + "-", Dir: filepath.Join(dir, "scion")}
	var log strings.Builder
	t.Cleanup(func() {
		if err := n.Down(io.Discard); err != nil {
			t.Error(err)
		}
	})
	if _, err := n.Up(context.Background(), scionlab.UpOptions{ASes: 3, Hybrid: true, MTU: 9000, Log: &log}); err != nil {
		t.Fatalf("up: %v\n%s", err, log.String())
	}
	as, _, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	return n, as
}

// pairMTU is the host end's MTU of a host's pair.
func (h *host) pairMTU(t *testing.T) int {
	t.Helper()
	nh, err := netns.Handle(h.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	l, err := nh.LinkByName("fp-tra0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().MTU
}

func (h *host) dirCounts(t *testing.T) (out, in Counts) {
	t.Helper()
	p, err := OpenPinned(h.name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out, in, err = p.DirCounts()
	if err != nil {
		t.Fatal(err)
	}
	return out, in
}

// On links of MTU 9000 the pair takes jumbo packets; an 8000-byte
// UDP datagram and TCP with segments of several kilobytes cross two
// translated hosts whole, both ways, translated in tra_out and tra_in (in
// several buffers on the way in), with no Packet Too Big; a path of a
// smaller MTU than the pair's gets the host Packet Too Big.
func TestJumboThroughTranslators(t *testing.T) {
	jn, as := jumboNetwork(t)
	a, b := translate(t, as[1], hostOptions{maxPaths: 1}), translate(t, as[2], hostOptions{maxPaths: 1})
	a.pingOK(t, b.smip, 2)
	b.pingOK(t, a.smip, 2)
	// The links carry 8,972 bytes of SCION; a router of v0.14.0 on reads
	// no datagram over 8,488, and its topology says so.
	pathMTU := uint16(scionlab.TopoMTU(jn.Version(), scionlab.SCIONMTU(9000)))
	paths := a.pathTo(t, b.as.IA)
	if len(paths) != 1 || paths[0].MTU != pathMTU {
		t.Fatalf("paths %+v, want one of SCION MTU %d (scionproto %s)", paths, pathMTU, jn.Version())
	}
	want := wantPairMTU(nil, 4, 9000) // what the underlay brings, more than the path carries
	eventually(t, 3*time.Second, "the pair's MTU taking what the underlay brings", func() bool { return a.pairMTU(t) == want && b.pairMTU(t) == want })
	t.Logf("path of %d bytes, SCION MTU %d: the path carries %d of the host's, the pair's MTU %d", len(paths[0].Raw), paths[0].MTU, hostPacketMTU(paths[0], 4, 9000), want)

	// UDP: 8000 bytes to b, echoed back whole.
	srv := b.udpListen(t, 31005)
	go echo(srv)
	var c *net.UDPConn
	if err := netns.Run(a.ns, func() error {
		var err error
		c, err = net.DialUDP("udp6", nil, &net.UDPAddr{IP: b.smip.AsSlice(), Port: 31005})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, 8000)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	aOut0, aIn0 := a.dirCounts(t)
	bOut0, bIn0 := b.dirCounts(t)
	got := make([]byte, 9000)
	n := 0
	for try := 0; try < 5 && n == 0; try++ {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, _ = c.Read(got)
	}
	if n != len(msg) || !bytes.Equal(got[:n], msg) {
		t.Fatalf("echo of %d bytes, want the 8000 sent; counters of a %v, of b %v", n, a.counts(t), b.counts(t))
	}
	aOut, aIn := a.dirCounts(t)
	bOut, bIn := b.dirCounts(t)
	for _, c := range []struct {
		what     string
		was, now Counts
	}{{"a out", aOut0, aOut}, {"b in", bIn0, bIn}, {"b out", bOut0, bOut}, {"a in", aIn0, aIn}} {
		v := "translated_out"
		if strings.HasSuffix(c.what, "in") {
			v = "translated_in"
		}
		if c.now[v].Bytes-c.was[v].Bytes < 8000 {
			t.Fatalf("%s: %s %d bytes more, want the datagram's 8000", c.what, v, c.now[v].Bytes-c.was[v].Bytes)
		}
		for _, bad := range []string{"multi_buffer", "ptb_sent", "fragment", "parse_error"} {
			if c.now[bad].Packets != c.was[bad].Packets {
				t.Fatalf("%s: %s %d", c.what, bad, c.now[bad].Packets-c.was[bad].Packets)
			}
		}
	}

	// TCP: a transfer's segments are of kilobytes, translated.
	iperf := exec.Command("iperf3", "-s", "-1", "-B", b.smip.String(), "-p", "5302")
	if err := netns.Run(b.ns, iperf.Start); err != nil {
		t.Fatal(err)
	}
	defer iperf.Process.Kill()
	time.Sleep(300 * time.Millisecond)
	_, bIn0 = b.dirCounts(t)
	out, err := a.command(t, "iperf3", "-c", b.smip.String(), "-p", "5302", "-t", "2", "-J")
	var r iperfResult
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil || err != nil || r.End.SumReceived.Bytes == 0 {
		t.Fatalf("iperf3: %v %v\n%s", err, jerr, out)
	}
	_, bIn = b.dirCounts(t)
	pk, by := bIn["translated_in"].Packets-bIn0["translated_in"].Packets, bIn["translated_in"].Bytes-bIn0["translated_in"].Bytes
	if pk == 0 || by/pk < 4000 || by < r.End.SumReceived.Bytes {
		t.Fatalf("b took %d packets of %d bytes in all for %d bytes of TCP: not jumbo segments", pk, by, r.End.SumReceived.Bytes)
	}
	if bIn["multi_buffer"].Packets != 0 || bIn["parse_error"].Packets != 0 {
		t.Fatalf("b in: multi_buffer %d, parse_error %d", bIn["multi_buffer"].Packets, bIn["parse_error"].Packets)
	}
	t.Logf("TCP %d bytes in 2 s, b took %d packets, %d bytes on average", r.End.SumReceived.Bytes, pk, by/pk)

	// A path of a smaller MTU than the pair's: the host gets Packet Too
	// Big for a larger datagram (the daemon puts the path back at its
	// next refresh, a minute on).
	p, err := OpenPinned(a.name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dests, err := p.Dests()
	if err != nil {
		t.Fatal(err)
	}
	d := dests[b.as.IA]
	small := append([]Path(nil), d.Paths...)
	small[0].MTU = 1472
	if err := p.SetPaths(b.as.IA, d.Slot, small); err != nil {
		t.Fatal(err)
	}
	aOut0, _ = a.dirCounts(t)
	c.Write(msg)
	aOut, _ = a.dirCounts(t)
	if aOut["ptb_sent"].Packets != aOut0["ptb_sent"].Packets+1 {
		t.Fatalf("ptb_sent %d more, want 1", aOut["ptb_sent"].Packets-aOut0["ptb_sent"].Packets)
	}
	if a.pairMTU(t) <= hostPacketMTU(small[0], 4, 9000) {
		t.Fatal("the pair's MTU is not above the small path's")
	}
}
