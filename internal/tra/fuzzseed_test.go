package tra

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/gopacket"
	"github.com/scionproto/scion/pkg/slayers"

	"github.com/fastpath-dev/fastpath/internal/capture"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/pcap"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The fuzz tests' seeds: frames of the lab's SCION network, captured at a
// translated host once and kept under testdata (fuzz-in.pcap: SCION as it
// arrives on the host's underlay device; fuzz-out.pcap: IPv6 as the host
// sends it into the translator's pair). FASTPATH_TRA_CAPTURE=1 captures
// them anew:
//
//	FASTPATH_TRA_CAPTURE=1 go test -count=1 -run '^TestCaptureFuzzSeeds$' ./internal/tra/

const (
	envFuzzCapture = "FASTPATH_TRA_CAPTURE"
	fzSeedsIn      = "testdata/fuzz-in.pcap"
	fzSeedsOut     = "testdata/fuzz-out.pcap"
)

// fzTap records the frames tra_in is handed. An AF_PACKET socket on the
// underlay device sees none that tra_in takes (XDP runs before the
// device's taps), and an fentry program on tra_in needs the function
// tracer, which the test machines' kernels are built without (the load
// fails with EPERM); so the tap is an XDP program of its own, swapped into
// the device's link for the capture: it copies each frame into a ring
// buffer and tail-calls tra_in, which decides as ever. It is a few
// instructions built here rather than an object of its own: only the
// capture uses it.
type fzTap struct {
	prog   *ebpf.Program
	events *ebpf.Map
	next   *ebpf.Map // a program array: tra_in
	rd     *ringbuf.Reader
	mu     sync.Mutex
	frames [][]byte
	done   chan struct{}
}

// fzTapRecord is the size of a ring buffer record: the length, then the
// frame (a SCION packet of the lab fits: its links' MTU is 1500).
const (
	fzTapRecord   = 2048
	fzTapFrameMax = fzTapRecord - 8
	// fzXdpHasFrags is BPF_F_XDP_HAS_FRAGS: a tail call needs it as tra_in
	// has it (xdp.frags).
	fzXdpHasFrags = 1 << 5
)

// newFzTap loads the tap in front of a loaded tra_in; attaching it is the
// caller's.
func newFzTap(target *ebpf.Program) (*fzTap, error) {
	tp := &fzTap{done: make(chan struct{})}
	var err error
	tp.events, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 1 << 22})
	if err != nil {
		return nil, fmt.Errorf("tap ring buffer: %w", err)
	}
	tp.next, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		tp.close()
		return nil, fmt.Errorf("tap program array: %w", err)
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnXdpGetBuffLen.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.JEq.Imm(asm.R8, 0, "next"),
		asm.JGT.Imm(asm.R8, fzTapFrameMax, "next"),
		asm.LoadMapPtr(asm.R1, tp.events.FD()),
		asm.Mov.Imm(asm.R2, fzTapRecord),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, "next"),
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.StoreMem(asm.R9, 0, asm.R8, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 0),
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Imm(asm.R3, 8),
		asm.Mov.Reg(asm.R4, asm.R8),
		asm.FnXdpLoadBytes.Call(),
		asm.Mov.Reg(asm.R1, asm.R9),
		asm.Mov.Imm(asm.R2, 0),
		asm.JNE.Imm(asm.R0, 0, "discard"),
		asm.FnRingbufSubmit.Call(),
		asm.Ja.Label("next"),
		asm.FnRingbufDiscard.Call().WithSymbol("discard"),
		asm.Mov.Reg(asm.R1, asm.R6).WithSymbol("next"),
		asm.LoadMapPtr(asm.R2, tp.next.FD()),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnTailCall.Call(),
		// tra_in gone from the array: the kernel's.
		asm.Mov.Imm(asm.R0, xdpPass),
		asm.Return(),
	}
	tp.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "tra_seed_tap", Type: ebpf.XDP, AttachType: ebpf.AttachXDP, Flags: fzXdpHasFrags, Instructions: insns, License: "GPL",
	})
	if err != nil {
		tp.close()
		return nil, fmt.Errorf("tap program: %w", err)
	}
	if err := tp.next.Put(uint32(0), target); err != nil {
		tp.close()
		return nil, fmt.Errorf("tap: tra_in into the program array: %w", err)
	}
	if tp.rd, err = ringbuf.NewReader(tp.events); err != nil {
		tp.close()
		return nil, err
	}
	go tp.read()
	return tp, nil
}

func (tp *fzTap) read() {
	defer close(tp.done)
	for {
		rec, err := tp.rd.Read()
		if err != nil {
			return
		}
		n := int(binary.NativeEndian.Uint32(rec.RawSample))
		if n > 0 && 8+n <= len(rec.RawSample) {
			tp.mu.Lock()
			tp.frames = append(tp.frames, append([]byte(nil), rec.RawSample[8:8+n]...))
			tp.mu.Unlock()
		}
	}
}

// Frames are the frames seen so far.
func (tp *fzTap) Frames() [][]byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([][]byte(nil), tp.frames...)
}

// Close stops recording; what the tap recorded stays readable.
func (tp *fzTap) Close() {
	// Records still in the ring: the reader takes them, then ends.
	for deadline := time.Now().Add(time.Second); tp.rd.AvailableBytes() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	tp.rd.Close()
	<-tp.done
	tp.close()
}

func (tp *fzTap) close() {
	if tp.prog != nil {
		tp.prog.Close()
	}
	for _, m := range []*ebpf.Map{tp.next, tp.events} {
		if m != nil {
			m.Close()
		}
	}
}

// The tap sees the frames a test run hands tra_in, as it sees the
// underlay's: the capture below relies on it.
func TestSeedTapSeesFrames(t *testing.T) {
	tr := loadTest(t)
	tp, err := newFzTap(tr.objs.TraIn)
	if err != nil {
		t.Fatal(err)
	}
	f := scionFrame(t, remoteIA, remote4, 31000, &slayers.UDP{SrcPort: 31000, DstPort: 31000}, gopacket.Payload("seen by the tap"))
	if ret, out := tr.run(t, tp.prog, f, false); ret != xdpRedirect || len(out) < 54 || out[12] != 0x86 {
		t.Fatalf("through the tap: action %d, want tra_in's XDP_REDIRECT of an IPv6 frame", ret)
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(tp.Frames()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	tp.Close()
	got := tp.Frames()
	if len(got) != 1 || !bytes.Equal(got[0], f) {
		t.Fatalf("the tap saw %d frames, want the one run", len(got))
	}
}

// TestCaptureFuzzSeeds captures the fuzz tests' seeds in the lab: UDP
// both ways (to closed ports too, and larger than the pair's MTU), TCP
// both ways, ping6 (with a hop limit of 1 too), scion ping and snet UDP
// from a native host, packets to hosts and ASes the translator cannot
// reach, and the daemon's path probes; what arrives at the translated
// host's tra_in (SCION) and what its stack sends into the pair (IPv6),
// each frame once, a few of each kind.
func TestCaptureFuzzSeeds(t *testing.T) {
	if os.Getenv(envFuzzCapture) != "1" {
		t.Skipf("captures the fuzz seeds from the lab's network: %s=1 to capture them anew", envFuzzCapture)
	}
	n, as := labNetwork(t)
	a, b := translate(t, as[1], hostOptions{}), translate(t, as[2], hostOptions{})
	srvA, srvB := a.udpListen(t, 31600), b.udpListen(t, 31500)
	go echo(srvA)
	go echo(srvB)
	// Both daemons run (each attaches its programs again when it starts)
	// and have paths.
	fzRoundTrip(t, a, b.smip, 31500, 100, true)
	fzRoundTrip(t, b, a.smip, 31600, 100, true)

	under := xdp.Iface{Netns: a.ns, Name: scionlab.HostDev}
	l, err := link.LoadPinnedLink(filepath.Join(PinDir(a.name), xdp.LinkPinName(under)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	traIn, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		t.Fatal(err)
	}
	defer traIn.Close()
	tap, err := newFzTap(traIn)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Update(tap.prog); err != nil {
		t.Fatalf("the tap in front of tra_in: %v", err)
	}
	tapped := true
	restore := func() {
		if tapped {
			if err := l.Update(traIn); err != nil {
				t.Errorf("tra_in back on %s: %v", under, err)
			}
			tapped = false
		}
	}
	defer restore()
	// What tra_in passes reaches the device's taps too.
	passed, err := capture.Open(under)
	if err != nil {
		t.Fatal(err)
	}
	_, pairName := splitName(a.name)
	sent, err := capture.Open(xdp.Iface{Netns: a.ns, Name: pairName + "0"})
	if err != nil {
		t.Fatal(err)
	}

	for _, size := range []int{0, 1, 8, 100, 512, 1200, 1300} {
		fzRoundTrip(t, a, b.smip, 31500, size, true)
		fzRoundTrip(t, b, a.smip, 31600, size, true)
	}
	// Closed ports: b's host answers port unreachable, which reaches a
	// as SCMP; a's host answers b's likewise, into the pair.
	fzRoundTrip(t, a, b.smip, 31998, 40, false)
	fzRoundTrip(t, b, a.smip, 31997, 40, false)
	// Larger than the pair's MTU: the host sends fragments.
	fzRoundTrip(t, a, b.smip, 31500, 3000, false)
	// Where the translator cannot go: a local IPv6 host, an AS without a
	// path, another local host (IPv4: straight there).
	fzRoundTrip(t, a, fzLocal6, 31500, 20, false)
	fzRoundTrip(t, a, fzMustSMIP(fzHeldIA, netip.MustParseAddr("10.104.0.2")), 31500, 20, false)
	fzRoundTrip(t, a, fzMustSMIP(localIA, fzLocal4), 31500, 20, false)
	fzTCP(t, a, b, 5001, 300<<10)
	fzTCP(t, b, a, 5002, 100<<10)
	fzTCPClosed(t, a, b.smip, 5999)
	for _, args := range [][]string{
		{"-c", "3", "-i", "0.2"}, {"-c", "2", "-i", "0.2", "-s", "1300"}, {"-c", "2", "-i", "0.2", "-t", "1"},
	} {
		a.command(t, "ping", append(append([]string{"-6", "-W", "1"}, args...), b.smip.String())...)
	}
	b.command(t, "ping", "-6", "-W", "1", "-c", "2", "-i", "0.2", a.smip.String())
	dst := fmt.Sprintf("%s,%s", a.as.IA, a.as.Host)
	if out, err := n.Scion(t.Context(), as[0], "ping", dst, "-c", "3", "--interval", "200ms", "--timeout", "2s"); err != nil {
		t.Logf("scion ping: %v\n%s", err, out)
	}
	fzSnet(t, as[0], a, 31600)
	// The daemons' path probes and their replies come on their own.
	time.Sleep(2 * time.Second)

	restore()
	tap.Close()
	passed.Close()
	sent.Close()
	var in, out [][]byte
	in = append(in, tap.Frames()...)
	for _, f := range passed.Frames() {
		if !f.Outgoing {
			in = append(in, f.Data)
		}
	}
	for _, f := range sent.Frames() {
		if !f.Outgoing {
			continue
		}
		g := append([]byte(nil), f.Data...)
		if f.Pending && len(g) > 14 {
			completeL4Checksum(g[14:])
		}
		out = append(out, g)
	}
	in = fzSelect(in, fzKeyIn, 3, 200)
	out = fzSelect(out, fzKeyOut, 3, 200)
	t.Logf("%d SCION frames in, %d IPv6 frames out", len(in), len(out))
	if len(in) < 20 || len(out) < 20 {
		t.Fatalf("%d frames in, %d out: too few to seed a fuzzer", len(in), len(out))
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := pcap.Write(fzSeedsIn, in); err != nil {
		t.Fatal(err)
	}
	if err := pcap.Write(fzSeedsOut, out); err != nil {
		t.Fatal(err)
	}
}

// fzRoundTrip sends a datagram of size bytes from a host to to:port and,
// if want, waits for its echo (sending again a few times: the first
// datagrams of a flow wait for a path).
func fzRoundTrip(t *testing.T, from *host, to netip.Addr, port, size int, want bool) {
	t.Helper()
	var c *net.UDPConn
	if err := netns.Run(from.ns, func() error {
		var err error
		c, err = net.DialUDP("udp6", nil, &net.UDPAddr{IP: to.AsSlice(), Port: port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte{byte(size)}, size)
	buf := make([]byte, 65536)
	for try := 0; try < 5; try++ {
		c.Write(msg)
		c.SetReadDeadline(time.Now().Add(time.Second))
		k, err := c.Read(buf)
		if err == nil && k == size {
			return
		}
		if !want {
			return
		}
	}
	t.Fatalf("no echo of %d bytes from %s:%d", size, to, port)
}

// fzTCP sends size bytes by TCP from one host to the other.
func fzTCP(t *testing.T, from, to *host, port, size int) {
	t.Helper()
	var ln net.Listener
	if err := netns.Run(to.ns, func() error {
		var err error
		ln, err = net.Listen("tcp6", net.JoinHostPort(to.smip.String(), fmt.Sprint(port)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		k, _ := io.Copy(io.Discard, c)
		got <- k
	}()
	var c net.Conn
	if err := netns.Run(from.ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp6", net.JoinHostPort(to.smip.String(), fmt.Sprint(port)), 10*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(bytes.Repeat([]byte("fastpath"), size/8)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if k := <-got; k != int64(size/8*8) {
		t.Fatalf("TCP: %d of %d bytes arrived", k, size)
	}
}

// fzTCPClosed opens a connection to a port nobody listens on: a SYN, a RST.
func fzTCPClosed(t *testing.T, from *host, to netip.Addr, port int) {
	t.Helper()
	netns.Run(from.ns, func() error {
		c, err := net.DialTimeout("tcp6", net.JoinHostPort(to.String(), fmt.Sprint(port)), 3*time.Second)
		if err == nil {
			c.Close()
		}
		return nil
	})
}

// fzSnet sends a datagram from a native SCION host (scionproto's snet) to a
// translated host's echo server.
func fzSnet(t *testing.T, src scionlab.AS, to *host, port int) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s,%s|%s", envSnet, src.Daemon(), src.Host, to.as.IA, netip.AddrPortFrom(to.as.Host, uint16(port)), "seed from snet"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netns.Run(src.HostNetns, cmd.Start); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Logf("snet: %v\n%s", err, out.String())
	}
}

// fzSelect keeps each frame once, at most perKey of a kind, at most max.
func fzSelect(frames [][]byte, key func([]byte) string, perKey, max int) [][]byte {
	seen := map[string]bool{}
	kinds := map[string]int{}
	var out [][]byte
	for _, f := range frames {
		k := key(f)
		if k == "" || seen[string(f)] || kinds[k] >= perKey || len(out) >= max || len(f) > fzFrameMax {
			continue
		}
		seen[string(f)] = true
		kinds[k]++
		out = append(out, f)
	}
	return out
}

// fzKeyIn is a SCION frame's kind: L4, path type, hosts, size; "" for what
// is not SCION/UDP/IPv4.
func fzKeyIn(f []byte) string {
	if len(f) < 34 || fzBe16(f[12:]) != 0x0800 || f[14+9] != 17 {
		return ""
	}
	l := fzLayoutIn(f)
	if len(f) < l.sc+12 {
		return "short"
	}
	nh, detail := f[l.sc+4], ""
	if l.l4+14 <= len(f) {
		switch nh {
		case 6:
			detail = fmt.Sprintf("flags %#x data %t", f[l.l4+13], len(f)-l.l4 > int(f[l.l4+12]>>4)*4)
		case 202:
			detail = fmt.Sprintf("type %d/%d", f[l.l4], f[l.l4+1])
		}
	}
	return fmt.Sprintf("%d %s path %d addr %#x size %d", nh, detail, f[l.sc+8], f[l.sc+9], len(f)/256)
}

// fzKeyOut is an IPv6 frame's kind: L4, destination AS, hop limit, size.
func fzKeyOut(f []byte) string {
	if len(f) < 54 || fzBe16(f[12:]) != 0x86dd {
		return ""
	}
	nh, l4, detail := f[20], f[54:], ""
	switch {
	case nh == 6 && len(l4) >= 14:
		detail = fmt.Sprintf("flags %#x data %t", l4[13], len(l4) > int(l4[12]>>4)*4)
	case nh == 58 && len(l4) >= 2:
		detail = fmt.Sprintf("type %d/%d", l4[0], l4[1])
	case nh == 44 && len(l4) >= 4:
		detail = fmt.Sprintf("first %t", fzBe16(l4[2:])&0xfff8 == 0)
	}
	dst := netip.AddrFrom16([16]byte(f[38:54]))
	ia := "not SM-IP"
	if m, err := ToSCION(dst); err == nil {
		ia = m.IA.String()
	}
	return fmt.Sprintf("%d %s to %s hops %t size %d", nh, detail, ia, f[21] <= 1, len(f)/256)
}
