package br

import (
	"bytes"
	"testing"
	"time"
)

// In hybrid mode the reference router knows from BFD that a link is down
// and answers with SCMP; the fast path must not keep sending into the
// link. A link whose neighbour sent BFD and then fell silent is down; one
// that never carried BFD (BFD off) is not.
func TestSilentLinkGoesToTheReferenceRouter(t *testing.T) {
	routerCases()       // fills the interface addresses
	transit := pktCase{ // child 111 → 110 → parent 100: leaves by interface 2
		path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{2, 1}, hopPair{31, 0})}, CurrHF: 1},
		src:  childIA, dst: farIA, in: arrival{ifid: 1},
	}
	bfdOn := func(ifid uint16) pktCase {
		return pktCase{
			path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{2, 1}, hopPair{31, 0})}, CurrHF: 1},
			src:  parentIA, dst: localIA, in: arrival{ifid: ifid},
			mutate: func(b []byte) { b[8] = 2; b[4] = 203 }, // one-hop path, BFD
		}
	}
	frame := func(c pktCase) []byte {
		p := c.packet()
		f, err := p.Frame()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	const timeout = 100 * time.Millisecond
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		bfdOn   uint16 // the interface BFD arrives on
		want    string // for transit after the link fell silent
	}{
		{"BFD on the egress link, then silence", timeout, 2, "link_down"},
		{"BFD on another link only", timeout, 3, "forwarded"},
		{"the check turned off", 0, 2, "forwarded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.LinkTimeout = tc.timeout
			r := loadTestRouter(t, cfg)
			in := frame(transit)
			if res := r.runOne(t, in); res.verdict != "forwarded" {
				t.Fatalf("before any BFD: %s, want forwarded (a link without BFD is up)", res.verdict)
			}
			if res := r.runOne(t, frame(bfdOn(tc.bfdOn))); res.action != xdpPass || res.verdict != "bfd" {
				t.Fatalf("BFD: action %d verdict %s, want pass bfd", res.action, res.verdict)
			}
			if res := r.runOne(t, in); res.verdict != "forwarded" {
				t.Fatalf("right after BFD: %s, want forwarded", res.verdict)
			}
			time.Sleep(timeout + 50*time.Millisecond) // the coarse clock ticks every few ms
			res := r.runOne(t, in)
			if res.verdict != tc.want {
				t.Fatalf("after %s of silence: %s, want %s", timeout+50*time.Millisecond, res.verdict, tc.want)
			}
			if tc.want == "link_down" {
				if res.action != xdpPass || !bytes.Equal(res.out, in) {
					t.Fatalf("action %d: a packet for a silent link must go up untouched", res.action)
				}
				r.runOne(t, frame(bfdOn(tc.bfdOn)))
				if res := r.runOne(t, in); res.verdict != "forwarded" {
					t.Fatalf("after BFD came back: %s, want forwarded", res.verdict)
				}
			}
		})
	}
}
