package lab

import (
	"bytes"
	"testing"

	"github.com/cilium/ebpf"
)

// runXDP runs prog once on data with BPF_PROG_TEST_RUN (no live frames) and
// returns the action and the frame as the program left it.
func runXDP(t *testing.T, prog *ebpf.Program, data []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(data)+256)
	opts := ebpf.RunOptions{Data: data, DataOut: out}
	ret, err := prog.Run(&opts)
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

// genForTest loads the generator on a loopback-free path: NewGenerator needs
// an interface only for its MTU and index, which plain test runs ignore.
func genForTest(t *testing.T, pkts [][]byte, window bool) *Generator {
	t.Helper()
	tb := testTestbed(t, LayoutVeth)
	g, err := NewGenerator(GenOptions{Iface: tb.Gen().Iface(), Packets: pkts, CPU: -1, Window: window})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func TestGenWritesEachPacketInTurn(t *testing.T) {
	base := Testbed{Prefix: DefaultPrefix, Layout: LayoutVeth}.DefaultUDP()
	base.Count = 5
	same, _ := UDPPackets(base)
	base.Size = 200
	long, _ := UDPPackets(base)
	mixed := [][]byte{long[0], same[1], long[2], same[3]}

	cases := map[string]struct {
		pkts   [][]byte
		window bool
		// wantWindow is whether the generator can use window mode.
		wantWindow bool
	}{
		"restore, one length":    {same, false, false},
		"restore, mixed lengths": {mixed, false, false},
		"window, one length":     {same, true, true},
		"window, mixed lengths":  {mixed, true, false},
		"window, one packet":     {same[:1], true, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			g := genForTest(t, c.pkts, c.window)
			if g.Window() != c.wantWindow {
				t.Fatalf("window mode %v, want %v", g.Window(), c.wantWindow)
			}
			// The frame a run starts from: the longest packet in restore mode,
			// the first packet (as live frames are initialised) in window mode,
			// overwritten with junk so that a byte the program fails to write
			// shows up.
			for round := 0; round < 2*len(c.pkts); round++ {
				in := bytes.Repeat([]byte{0xee}, g.maxLen)
				if c.wantWindow {
					in = append([]byte(nil), c.pkts[0]...)
					lo, hi, _ := diffWindow(c.pkts)
					for i := lo; i < hi; i++ {
						in[i] = 0xee
					}
				}
				ret, out := runXDP(t, g.objs.LabGen, in)
				if ret != 3 /* XDP_TX */ {
					t.Fatalf("round %d: action %d, want XDP_TX", round, ret)
				}
				want := c.pkts[round%len(c.pkts)]
				if !bytes.Equal(out, want) {
					t.Fatalf("round %d: frame\n%x\nwant\n%x", round, out, want)
				}
			}
			if n, _ := g.runs(); n != uint64(2*len(c.pkts)) {
				t.Fatalf("run counter %d, want %d", n, 2*len(c.pkts))
			}
		})
	}
}

func TestSinkCountsAndDrops(t *testing.T) {
	requireKernel(t)
	var objs sinkObjects
	if err := loadSinkObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	s := &Sink{objs: objs}
	var wantBytes uint64
	// A test run hands the frags-aware sink 8,000 bytes in several buffers,
	// as a veth does a jumbo frame: all of them count.
	for _, size := range []int{60, 138, 1000, 8000} {
		ret, _ := runXDP(t, objs.LabSink, make([]byte, size))
		if ret != 1 /* XDP_DROP */ {
			t.Fatalf("action %d, want XDP_DROP", ret)
		}
		wantBytes += uint64(size)
	}
	tot, err := s.Total()
	if err != nil {
		t.Fatal(err)
	}
	if tot.Packets != 4 || tot.Bytes != wantBytes || tot.MultiBuf != 1 {
		t.Fatalf("counted %d packets, %d bytes, %d in several buffers; want 4, %d, 1", tot.Packets, tot.Bytes, tot.MultiBuf, wantBytes)
	}
}

func TestRedirectRedirects(t *testing.T) {
	requireKernel(t)
	var objs redirectObjects
	if err := loadRedirectObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	// With an empty devmap the program falls back to its default action.
	if ret, _ := runXDP(t, objs.LabRedirect, make([]byte, 60)); ret != 1 /* XDP_DROP */ {
		t.Fatalf("empty port map: action %d, want XDP_DROP", ret)
	}
	// With a port it redirects; a plain test run reports the action without
	// sending, so loopback serves as the port.
	if err := objs.RedirectPort.Put(uint32(0), uint32(1)); err != nil {
		t.Fatal(err)
	}
	if ret, _ := runXDP(t, objs.LabRedirect, make([]byte, 60)); ret != 4 /* XDP_REDIRECT */ {
		t.Fatalf("with a port: action %d, want XDP_REDIRECT", ret)
	}
}
