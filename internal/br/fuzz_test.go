package br

import (
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/google/gopacket"
	"github.com/scionproto/scion/pkg/scrypto"
	"github.com/scionproto/scion/pkg/slayers"
	"github.com/scionproto/scion/pkg/slayers/path"
	"github.com/scionproto/scion/pkg/slayers/path/scion"
)

// forwardable is the oracle: whether the reference would even consider
// forwarding this frame. It must decode as SCION with a standard path, have
// the length it claims, and carry a current hop field whose MAC is right
// under testKey (with the SegID as the router sees it on arrival).
func forwardable(frame []byte) (bool, string) {
	_, dst, ok := underlayEnds(frame)
	if !ok || len(frame) < 14+20+8 {
		return false, "no underlay"
	}
	off := 14 + 20
	if binary.BigEndian.Uint16(frame[12:]) == 0x86dd {
		off = 14 + 40
	} else {
		off = 14 + int(frame[14]&0xf)*4
	}
	udpLen := int(binary.BigEndian.Uint16(frame[off+4:]))
	if udpLen < 8 || off+udpLen > len(frame) {
		return false, "bad UDP length"
	}
	payload := frame[off+8 : off+udpLen]
	var s slayers.SCION
	if err := s.DecodeFromBytes(payload, gopacket.NilDecodeFeedback); err != nil {
		return false, "SCION decode: " + err.Error()
	}
	if int(s.PayloadLen) != len(s.Payload) {
		return false, "PayloadLen"
	}
	raw, ok := s.Path.(*scion.Raw)
	if !ok {
		return false, "not a standard path"
	}
	hf, err := raw.GetCurrentHopField()
	if err != nil {
		return false, "hop field"
	}
	inf, err := raw.GetCurrentInfoField()
	if err != nil {
		return false, "info field"
	}
	ingress := uint16(0)
	for id, a := range extLocal {
		if a == dst {
			ingress = id
		}
	}
	if !inf.ConsDir && ingress != 0 && !inf.Peer {
		inf.UpdateSegID(hf.Mac)
	}
	mac, _ := scrypto.InitMac(testKey)
	want := path.MAC(mac, inf, hf, nil)
	if want != hf.Mac {
		return false, "MAC"
	}
	return true, ""
}

// Random and mutated packets: nothing malformed and nothing with a wrong
// MAC is ever forwarded, and the program never aborts.
func TestFuzzNothingBadIsForwarded(t *testing.T) {
	r := loadTestRouter(t, testConfig())
	rng := rand.New(rand.NewSource(1))
	var seeds [][]byte
	for _, c := range []pktCase{
		{path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{0, 21}, hopPair{2, 1}, hopPair{31, 0})}, CurrHF: 1}, src: childIA, dst: farIA, in: arrival{ifid: 1}},
		{path: PathSpec{Segments: []Segment{seg(true, 1, hopPair{0, 31}, hopPair{2, 1}, hopPair{21, 0})}, CurrHF: 1}, src: farIA, dst: childIA, in: arrival{ifid: 2}},
		{path: PathSpec{Segments: []Segment{seg(false, 1, hopPair{0, 21}, hopPair{0, 1}), seg(true, 0, hopPair{0, 3}, hopPair{41, 0})}, CurrHF: 1}, src: childIA, dst: coreIA, in: arrival{ifid: 1}},
		{path: PathSpec{Segments: []Segment{seg(true, 2, hopPair{0, 31}, hopPair{21, 41}, hopPair{2, 0})}, CurrHF: 2}, src: farIA, dst: localIA, dstHost: hostA, dstPort: 31500, in: arrival{ifid: 2}},
		{path: PathSpec{Segments: []Segment{seg(false, 2, hopPair{2, 0}, hopPair{31, 21}, hopPair{0, 41})}, CurrHF: 0}, src: localIA, dst: farIA, in: arrival{ifid: 0}},
	} {
		f, err := c.packet().Frame()
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, f)
	}
	forwarded, runs := 0, 0
	check := func(f []byte, how string) {
		res := r.runOne(t, f)
		runs++
		if res.action == xdpAborted {
			t.Fatalf("%s: the program aborted", how)
		}
		if res.action == xdpTX {
			forwarded++
			if ok, why := forwardable(f); !ok {
				t.Fatalf("%s: forwarded a packet the reference would not (%s):\n%s", how, why, hexdump(f))
			}
		}
	}
	for _, s := range seeds {
		check(s, "seed")
	}
	for i := 0; i < 3000; i++ {
		f := append([]byte(nil), seeds[rng.Intn(len(seeds))]...)
		switch rng.Intn(4) {
		case 0: // flip a few bits in the SCION header and path
			for n := rng.Intn(4) + 1; n > 0; n-- {
				j := 42 + rng.Intn(min(len(f)-42, 110))
				f[j] ^= 1 << rng.Intn(8)
			}
		case 1: // a random byte anywhere
			f[rng.Intn(len(f))] = byte(rng.Intn(256))
		case 2: // cut the frame short, fixing the IP and UDP lengths or not
			n := 14 + rng.Intn(len(f)-14)
			f = f[:n]
			if rng.Intn(2) == 0 && n > 42 {
				binary.BigEndian.PutUint16(f[16:], uint16(n-14))
				binary.BigEndian.PutUint16(f[38:], uint16(n-34))
			}
		case 3: // random meta header or path fields
			j := 42 + 12 + 24 + rng.Intn(4+8+36)
			if j < len(f) {
				f[j] = byte(rng.Intn(256))
			}
		}
		check(f, "mutation")
	}
	for i := 0; i < 500; i++ { // garbage after a valid underlay header
		f := append([]byte(nil), seeds[0][:42]...)
		g := make([]byte, rng.Intn(200))
		rng.Read(g)
		f = append(f, g...)
		binary.BigEndian.PutUint16(f[16:], uint16(len(f)-14))
		binary.BigEndian.PutUint16(f[38:], uint16(len(f)-34))
		check(f, "garbage")
	}
	t.Logf("%d runs, %d forwarded", runs, forwarded)
	if forwarded == 0 {
		t.Fatal("nothing was forwarded: the seeds are broken")
	}
}
