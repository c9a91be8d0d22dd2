package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// jumboTestbed is testTestbed with veths of JumboMTU.
func jumboTestbed(t *testing.T, layout Layout) Testbed {
	t.Helper()
	tb := testTestbed(t, layout)
	tb.MTU = JumboMTU
	if err := tb.Up(); err != nil {
		t.Fatal(err)
	}
	return tb
}

// udpOf is count UDP packets of one size from the testbed's generator.
func udpOf(t *testing.T, tb Testbed, size, count int) [][]byte {
	t.Helper()
	u := tb.DefaultUDP()
	u.Size, u.Count = size, count
	pkts, err := UDPPackets(u)
	if err != nil {
		t.Fatal(err)
	}
	return pkts
}

// A testbed is up only at its MTU: another MTU builds it anew, every veth
// at that MTU.
func TestTestbedMTU(t *testing.T) {
	tb := testTestbed(t, LayoutDUT)
	for _, mtu := range []int{JumboMTU, DefaultMTU} {
		want := tb
		want.MTU = mtu
		if mtu != DefaultMTU && want.IsUp() {
			t.Fatalf("a testbed of MTU %d counts as up at MTU %d", tb.mtu(), mtu)
		}
		if err := want.Up(); err != nil {
			t.Fatal(err)
		}
		for _, ep := range want.Endpoints() {
			attrs, err := xdp.Lookup(ep.Iface())
			if err != nil {
				t.Fatal(err)
			}
			if attrs.MTU != mtu {
				t.Fatalf("%s has MTU %d, want %d", ep.Iface(), attrs.MTU, mtu)
			}
		}
		tb = want
	}
}

// The bench picks live frames for what they take and the packet socket for
// longer frames, and the sink counts exactly what the packet socket sent:
// frames longer than a veth's first page (3,520 bytes here) as frames in
// several buffers, shorter ones in one.
func TestPacketGeneratorSendsExactly(t *testing.T) {
	tb := jumboTestbed(t, LayoutVeth)
	cases := map[string]struct {
		sizes    []int
		method   string
		multiBuf bool
	}{
		"Ethernet frames": {sizes: []int{1514}, method: MethodLiveFrames},
		"jumbo":           {sizes: []int{8000}, method: MethodPacket, multiBuf: true},
		"one buffer":      {sizes: []int{2000}, method: MethodPacket},
		"mixed":           {sizes: []int{8000, 2000, 9014}, method: MethodPacket},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var pkts [][]byte
			for _, size := range c.sizes {
				pkts = append(pkts, udpOf(t, tb, size, 100)...)
			}
			sink, err := AttachSink(tb.Sink().Iface(), xdp.Native)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			g, err := NewSender(GenOptions{Iface: tb.Gen().Iface(), Packets: pkts, CPU: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if g.Method() != c.method {
				t.Fatalf("frames of %v bytes go by %s, want %s", c.sizes, g.Method(), c.method)
			}
			// Whole rounds of the capture, unpaced.
			count := uint64(100 * len(pkts))
			st, err := g.Send(context.Background(), SendOptions{Count: count})
			if err != nil {
				t.Fatal(err)
			}
			got, err := settle(sink)
			if err != nil {
				t.Fatal(err)
			}
			if st.Sent != count || got.Packets != count {
				t.Fatalf("sent %d, sink counted %d; want exactly %d (interface drops %d, vanished %d)", st.Sent, got.Packets, count, st.Drops, st.Vanished)
			}
			var wantBytes, wantMulti uint64
			for _, p := range pkts {
				wantBytes += 100 * uint64(len(p))
				if len(p) > 3520 {
					wantMulti += 100
				}
			}
			if got.Bytes != wantBytes || got.MultiBuf != wantMulti {
				t.Fatalf("sink counted %d bytes, %d frames in several buffers; want %d, %d", got.Bytes, got.MultiBuf, wantBytes, wantMulti)
			}
			if c.multiBuf && wantMulti != count {
				t.Fatal("the jumbo case sent frames that fit a page")
			}
			if st.Elapsed <= 0 || st.Elapsed > st.Wall {
				t.Fatalf("sending time %v, wall %v: want 0 < sending <= wall", st.Elapsed, st.Wall)
			}
		})
	}
}

// Paced, the packet socket keeps about the rate and stops on time.
func TestPacketGeneratorPaced(t *testing.T) {
	tb := jumboTestbed(t, LayoutVeth)
	sink, err := AttachSink(tb.Sink().Iface(), xdp.Native)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	g, err := NewPacketGenerator(GenOptions{Iface: tb.Gen().Iface(), Packets: udpOf(t, tb, 8000, 10), CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Send(context.Background(), SendOptions{}); err == nil {
		t.Fatal("Send without count or duration accepted")
	}
	st, err := g.Send(context.Background(), SendOptions{Duration: 300 * time.Millisecond, Rate: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent < 1000 || st.Sent > 10_000 || st.Wall > time.Second {
		t.Fatalf("paced send for 300 ms at 10 kpps sent %d in %v", st.Sent, st.Wall)
	}
}

func TestPacketGeneratorRejects(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	jumbo := udpOf(t, tb, 8000, 1)
	cases := map[string]struct {
		opts GenOptions
		want string
	}{
		"no packets":   {GenOptions{Iface: tb.Gen().Iface()}, "capture is empty"},
		"over the MTU": {GenOptions{Iface: tb.Gen().Iface(), Packets: jumbo}, "packet 1 is 8000 bytes, longer than " + tb.Gen().Iface().String() + " allows (MTU 1500"},
		"runt":         {GenOptions{Iface: tb.Gen().Iface(), Packets: [][]byte{make([]byte, 10)}}, "shorter than an Ethernet header"},
		"flood":        {GenOptions{Iface: tb.Gen().Iface(), Packets: jumbo, Flows: 10}, "flood mode (--flows)"},
		"no such dev":  {GenOptions{Iface: xdp.Iface{Netns: tb.Gen().Netns, Name: "fp-nope"}, Packets: jumbo}, "interface fp-nope not found"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := NewPacketGenerator(c.opts)
			if err == nil {
				g.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want one containing %q", err, c.want)
			}
		})
	}
}

// A program that cannot take frames in several buffers does not attach
// where a peer's MTU allows them, and the error says why; the sink does.
func TestJumboNeedsFrags(t *testing.T) {
	tb := jumboTestbed(t, LayoutDUT)
	teardown, err := scenarios["xdp-redirect"].Setup(tb)
	if err == nil {
		teardown()
		t.Fatal("a program without frags attached to a veth whose peer has MTU 9000")
	}
	if !strings.Contains(err.Error(), "frags-aware") {
		t.Fatalf("error %q does not say the program must be frags-aware", err)
	}
	s, err := AttachSink(tb.Sink().Iface(), xdp.Native)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
