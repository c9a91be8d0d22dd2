package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// readIperf reads one recorded iperf3 3.12 client JSON (-J) from
// testdata/iperf3: tcp.json and udp.json are 1-second runs between two
// namespaces, udp-lossy.json one offered at 2 Gbit/s that lost a third,
// refused.json a client that found no server.
func readIperf(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "iperf3", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseIperf(t *testing.T) {
	for name, tc := range map[string]struct {
		want    iperfStream
		wantErr string
	}{
		"tcp.json":       {want: iperfStream{bitsPerSecond: 14029739625.81266}},
		"udp.json":       {want: iperfStream{bitsPerSecond: 49943167.33396314, lostPackets: 0, packets: 5204}},
		"udp-lossy.json": {want: iperfStream{bitsPerSecond: 1302855703.0572753, lostPackets: 72414, packets: 208289}},
		"refused.json":   {wantErr: "unable to connect to server: Connection refused"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseIperf(readIperf(t, name))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if !transientIperf(err, false) {
					t.Errorf("%v: a refused connection is worth another try", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := parseIperf([]byte("iperf3: error - killed")); err == nil {
		t.Error("output that is not JSON parsed without an error")
	}
}

func TestSumIperf(t *testing.T) {
	parse := func(name string) iperfStream {
		s, err := parseIperf(readIperf(t, name))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tcp, udp, lossy := parse("tcp.json"), parse("udp.json"), parse("udp-lossy.json")
	for name, tc := range map[string]struct {
		streams            []iperfStream
		udp                bool
		wantGbps, wantLost float64
	}{
		"one tcp":  {streams: []iperfStream{tcp}, wantGbps: 14.02973962581266},
		"four tcp": {streams: []iperfStream{tcp, tcp, tcp, tcp}, wantGbps: 4 * 14.02973962581266},
		// Lost over sent in all: 72414 / (208289 + 5204). The average of
		// the two percentages (34.77 and 0) would say 17.38.
		"udp lossy and clean": {streams: []iperfStream{lossy, udp}, udp: true, wantGbps: 1.3527988703412074, wantLost: 100 * 72414.0 / (208289 + 5204)},
		"udp clean":           {streams: []iperfStream{udp, udp}, udp: true, wantGbps: 2 * 0.04994316733396314},
		"udp none sent":       {streams: []iperfStream{{}}, udp: true},
	} {
		t.Run(name, func(t *testing.T) {
			r := sumIperf(tc.streams, tc.udp)
			if math.Abs(r.Gbps-tc.wantGbps) > 1e-9 || math.Abs(r.LostPercent-tc.wantLost) > 1e-9 {
				t.Errorf("got %.9f Gbit/s, %.6f%% lost; want %.9f, %.6f%%", r.Gbps, r.LostPercent, tc.wantGbps, tc.wantLost)
			}
			if len(r.StreamGbps) != len(tc.streams) {
				t.Errorf("%d per-stream figures for %d streams", len(r.StreamGbps), len(tc.streams))
			}
		})
	}
}

func TestBitrateShare(t *testing.T) {
	for _, tc := range []struct {
		total uint64
		n     int
		want  []uint64
	}{
		{0, 4, []uint64{0, 0, 0, 0}},
		{400e6, 4, []uint64{100e6, 100e6, 100e6, 100e6}},
		{10, 4, []uint64{3, 3, 2, 2}},
		{7, 1, []uint64{7}},
	} {
		var sum uint64
		for i := range tc.n {
			got := bitrateShare(tc.total, i, tc.n)
			if got != tc.want[i] {
				t.Errorf("share %d of %d of %d: %d, want %d", i, tc.n, tc.total, got, tc.want[i])
			}
			sum += got
		}
		if sum != tc.total {
			t.Errorf("shares of %d over %d add up to %d", tc.total, tc.n, sum)
		}
	}
}

// TestIperfProcesses runs four client processes, one stream each, against
// four servers between two namespaces, for TCP and for UDP at a modest
// rate: each server must have received something. No thresholds: the
// figures depend on the machine.
func TestIperfProcesses(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	servers, err := StartIperfServers(tb.Sink().Netns, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer servers.Close()
	for name, o := range map[string]IperfOptions{
		"tcp": {Seconds: 1, Streams: 4},
		"udp": {Seconds: 1, Streams: 4, UDP: true, Len: 1200, Bitrate: 40e6},
	} {
		t.Run(name, func(t *testing.T) {
			o.Netns, o.Dst = tb.Gen().Netns, tb.Sink().Addr.Addr()
			r, err := Iperf(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.StreamGbps) != 4 {
				t.Fatalf("%d processes' figures, want 4: %+v", len(r.StreamGbps), r)
			}
			for i, g := range r.StreamGbps {
				if g <= 0 {
					t.Errorf("server %d received nothing: %+v", i+1, r)
				}
			}
			if r.Gbps <= 0 || r.LostPercent < 0 || r.LostPercent > 100 {
				t.Errorf("implausible sum: %+v", r)
			}
			t.Logf("%s: %.3f Gbit/s in all (%v), %.2f%% lost", name, r.Gbps, r.StreamGbps, r.LostPercent)
		})
	}
}

// TestIperfStreamFails stops the whole run, and names the stream, when one
// process cannot run: here the fourth has no server.
func TestIperfStreamFails(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	servers, err := StartIperfServers(tb.Sink().Netns, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer servers.Close()
	_, err = Iperf(context.Background(), IperfOptions{Netns: tb.Gen().Netns, Dst: tb.Sink().Addr.Addr(), Seconds: 1, Streams: 4})
	if err == nil {
		t.Fatal("a run with a stream that has no server succeeded")
	}
	t.Log(err)
	for _, want := range []string{"stream 4 of 4", "unable to connect"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestIperfServersCleanUp fails to start the second server (its port is
// taken) and checks that the first one is gone too.
func TestIperfServersCleanUp(t *testing.T) {
	tb := testTestbed(t, LayoutVeth)
	ns := tb.Sink().Netns
	listen := func(port int) (net.Listener, error) {
		var l net.Listener
		err := netns.Run(ns, func() error {
			var err error
			l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
			return err
		})
		return l, err
	}
	taken, err := listen(IperfPort + 1)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	s, err := StartIperfServers(ns, 2)
	if err == nil {
		s.Close()
		t.Fatal("started a server on a port in use")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), fmt.Sprint(IperfPort+1)) {
		t.Errorf("error %q does not name the port", err)
	}
	l, err := listen(IperfPort)
	if err != nil {
		t.Fatalf("the first server still holds its port: %v", err)
	}
	l.Close()
}

// A UDP stream whose opening exchange was lost is tried again; a TCP
// stream that failed reading has measured something, and is not.
func TestTransientIperfUDPOpening(t *testing.T) {
	err := errors.New("unable to read from stream socket: Resource temporarily unavailable")
	if !transientIperf(err, true) {
		t.Error("a UDP stream's lost opening is worth another try")
	}
	if transientIperf(err, false) {
		t.Error("a TCP stream that failed reading is not tried again")
	}
}
