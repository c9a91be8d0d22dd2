package br

import (
	"net/netip"
	"reflect"
	"testing"
)

// transitFrame is a valid transit packet child 111 → 110 → parent 100.
func transitFrame(t testing.TB) []byte {
	t.Helper()
	p := pktCase{
		path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{2, 1}, hopPair{31, 0})}, CurrHF: 1},
		src:  childIA, dst: farIA, in: arrival{ifid: 1},
	}.packet()
	f, err := p.Frame()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRunReportsEachPacket(t *testing.T) {
	r := loadTestRouter(t, testConfig())
	good := transitFrame(t)
	bad2 := append([]byte(nil), good...)
	bad2[14+20+8+5] = 1 // HdrLen far too short
	setUDPChecksum(bad2)
	res, err := r.Run([][]byte{good, bad2, make([]byte, 60)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []RunResult{
		{Index: 0, Action: "forward", Verdict: "forwarded", EgressIfid: 2, NextHop: extRemote[2].String()},
		{Index: 1, Action: "drop", Verdict: "parse_error"},
		{Index: 2, Action: "pass", Verdict: "not_scion"},
	}
	for i := range want {
		got := res[i]
		got.Out = nil
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("packet %d: %+v, want %+v", i, got, want[i])
		}
	}
	if _, err := netip.ParseAddrPort(res[0].NextHop); err != nil {
		t.Fatal(err)
	}
}

func TestRunTimesTransitPacket(t *testing.T) {
	for _, mac := range []bool{true, false} {
		cfg := testConfig()
		cfg.MACCheck = mac
		r := loadTestRouter(t, cfg)
		res, err := r.Run([][]byte{transitFrame(t)}, 1000000)
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Verdict != "forwarded" || res[0].Ns <= 0 {
			t.Fatalf("timed run: %+v", res[0])
		}
		t.Logf("mac_check=%v: %.1f ns per transit packet", mac, res[0].Ns)
	}
}

// An IPv4 header with a wrong checksum is the kernel's to drop, as it would
// before the reference router's socket saw it.
func TestBadIPv4ChecksumGoesToTheKernel(t *testing.T) {
	r := loadTestRouter(t, testConfig())
	f := transitFrame(t)
	f[14+10] ^= 0x40
	res, err := r.Run([][]byte{f}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Action != "pass" || res[0].Verdict != "not_scion" {
		t.Fatalf("bad IPv4 header checksum: %s/%s, want pass/not_scion", res[0].Action, res[0].Verdict)
	}
}
