package br

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// The tap keeps what the router does in XDP, whole: jumbo frames (longer
// than the 2,048 bytes it once kept) as they arrived in several buffers
// and as they left, small frames as before, and frames the router drops,
// with the verdict that dropped them; what it passes up is not its
// business. In both families, on a router attached in native mode.
func TestTapKeepsJumboAndDroppedFrames(t *testing.T) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		t.Run(fam, func(t *testing.T) {
			b := newHostBed(t, fam == "ipv6")
			for _, e := range [][2]string{{b.a, "a0"}, {b.dut, "d0"}, {b.dut, "d1"}, {b.b, "b0"}} {
				b.ip(t, e[0], "link", "set", e[1], "mtu", "9000")
			}
			name, _ := b.attach(t, XDPModeNative)
			tap, err := OpenTap(name)
			if err != nil {
				t.Fatal(err)
			}
			defer tap.Close()
			to := netip.AddrPortFrom(b.bAddr, 50000)
			got := listen(t, b.b, to)
			neighbour := netip.AddrPortFrom(b.aAddr, 50000)
			router := netip.AddrPortFrom(b.d0Addr, 50000)

			jumbo := b.transitOfSize(t, 3, 8000)
			small := b.transitOfSize(t, 2, 200)
			send(t, b.a, neighbour, router, append(append([][]byte{}, jumbo...), small...))
			if arrived := got.await(5); len(arrived) != 5 {
				t.Fatalf("%d of 5 datagrams arrived; verdicts %v", len(arrived), verdicts(t, name))
			}
			// From another port than the neighbour's: the router drops it.
			stray := b.transitOfSize(t, 1, 8000)
			send(t, b.a, netip.AddrPortFrom(b.aAddr, 50001), router, stray)
			// Not SCION: passed up, not tapped.
			l := listen(t, b.dut, netip.AddrPortFrom(b.d0Addr, 7001))
			send(t, b.a, netip.AddrPortFrom(b.aAddr, 7001), netip.AddrPortFrom(b.d0Addr, 7001), [][]byte{make([]byte, 100)})
			l.await(1)

			frames, missed := tap.Frames()
			if missed.Long != 0 || missed.Lost != 0 {
				t.Fatalf("the tap missed frames: %+v", missed)
			}
			sent := append(append(append([][]byte{}, jumbo...), small...), stray...)
			if len(frames) != len(sent) {
				t.Fatalf("tapped %d frames, want %d (5 forwarded, 1 dropped); verdicts %v", len(frames), len(sent), verdicts(t, name))
			}
			for i, f := range frames {
				src, dst, ok := underlayEnds(f.In)
				if !ok {
					t.Fatalf("frame %d: as it arrived, not UDP: % x", i, f.In[:min(len(f.In), 64)])
				}
				if !bytes.Equal(udpPayload(t, f.In), sent[i]) {
					t.Fatalf("frame %d: its datagram as it arrived (%d B) is not the %d B sent", i, len(udpPayload(t, f.In)), len(sent[i]))
				}
				if i == len(sent)-1 {
					if !f.Dropped() || f.Verdict != "underlay_mismatch" || f.Out != nil {
						t.Fatalf("the stray frame: verdict %s, %d B as it left; want dropped as underlay_mismatch", f.Verdict, len(f.Out))
					}
					if src.Port() != 50001 || len(f.In) <= 2048 {
						t.Fatalf("the stray frame: from %s, %d B", src, len(f.In))
					}
					continue
				}
				if f.Dropped() || src != neighbour || dst != router {
					t.Fatalf("frame %d: verdict %s, %s → %s", i, f.Verdict, src, dst)
				}
				if _, d, _ := underlayEnds(f.Out); d != to {
					t.Fatalf("frame %d left for %s, want %s", i, d, to)
				}
				// The SCION packet is the same length as it left, and the
				// frame as long as its datagram.
				if out := udpPayload(t, f.Out); len(out) != len(sent[i]) {
					t.Fatalf("frame %d left with %d B of SCION, arrived with %d", i, len(out), len(sent[i]))
				}
				if i < len(jumbo) && (len(f.In) <= 2048 || len(f.Out) <= 2048) {
					t.Fatalf("jumbo frame %d: %d B as it arrived, %d as it left", i, len(f.In), len(f.Out))
				}
			}
			// Closed, the tap no longer copies.
			tap.Close()
			p, err := OpenPinned(name)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			until, err := getVar(p.Vars, varCapture)
			if err != nil {
				t.Fatal(err)
			}
			if until != 0 {
				t.Fatalf("the tap's lease %d after Close", until)
			}
			time.Sleep(10 * time.Millisecond)
		})
	}
}

// udpPayload is a frame's UDP payload (IPv4 without options, or IPv6).
func udpPayload(t *testing.T, f []byte) []byte {
	t.Helper()
	off := 14 + 20
	if binary.BigEndian.Uint16(f[12:14]) == 0x86dd {
		off = 14 + 40
	}
	if len(f) < off+8 {
		t.Fatalf("a frame of %d B has no UDP header", len(f))
	}
	n := int(binary.BigEndian.Uint16(f[off+4:]))
	if n < 8 || off+n > len(f) {
		t.Fatalf("UDP length %d in a frame of %d B", n, len(f))
	}
	return f[off+8 : off+n]
}
