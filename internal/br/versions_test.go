package br

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"hash/crc32"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// stunRequest is a STUN binding request (RFC 5389) with a FINGERPRINT, as
// a host behind a NAT sends it to learn its address.
func stunRequest(txid [12]byte) []byte {
	b := []byte{0x00, 0x01, 0, 8, 0x21, 0x12, 0xa4, 0x42}
	b = append(b, txid[:]...)
	fp := crc32.ChecksumIEEE(b) ^ 0x5354554e
	b = append(b, 0x80, 0x28, 0, 4)
	return binary.BigEndian.AppendUint32(b, fp)
}

// stunMapped is the address a binding response's XOR-MAPPED-ADDRESS gives
// (IPv4), or false if resp is not a success response to txid.
func stunMapped(resp []byte, txid [12]byte) (netip.AddrPort, bool) {
	if len(resp) < 32 || resp[0] != 0x01 || resp[1] != 0x01 || !bytes.Equal(resp[8:20], txid[:]) {
		return netip.AddrPort{}, false
	}
	a := resp[20:]
	if binary.BigEndian.Uint16(a) != 0x0020 || a[5] != 1 {
		return netip.AddrPort{}, false
	}
	port := binary.BigEndian.Uint16(a[6:]) ^ 0x2112
	var ip [4]byte
	for i, c := range []byte{0x21, 0x12, 0xa4, 0x42} {
		ip[i] = a[8+i] ^ c
	}
	return netip.AddrPortFrom(netip.AddrFrom4(ip), port), true
}

// STUN on the router's internal address: from v0.15.1 scionproto's router
// answers a binding request there with the sender's address, so in hybrid
// mode fastpath passes it up (counted stun) where it would have dropped it
// as a SCION packet too short to parse; for a release without STUN it
// drops it, as that release does.
func TestSTUNInHybridMode(t *testing.T) {
	for _, v := range testedVersions(t) {
		t.Run(v, func(t *testing.T) {
			b := newHostBed(t, false)
			b.cfg.SCIONVersion = v
			internal := netip.AddrPortFrom(b.d0Addr, 30042)
			ref, err := StartReferenceRouter(v, b.dut, "br1", b.dir, internal.String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ref.Stop)
			name, _ := b.attach(t, XDPModeNative)
			from := netip.AddrPortFrom(b.aAddr, 40123)
			var txid [12]byte
			rand.Read(txid[:])
			before := verdicts(t, name)
			var resp []byte
			err = netns.Run(b.a, func() error {
				c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(from))
				if err != nil {
					return err
				}
				defer c.Close()
				if _, err := c.WriteToUDPAddrPort(stunRequest(txid), internal); err != nil {
					return err
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				buf := make([]byte, 1500)
				if n, _, err := c.ReadFromUDPAddrPort(buf); err == nil {
					resp = buf[:n]
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			after := verdicts(t, name)
			switch v {
			case "v0.15.1":
				mapped, ok := stunMapped(resp, txid)
				if !ok || mapped != from {
					t.Fatalf("no binding response with %s (got %x, %v); verdicts before %v after %v; reference router:\n%s", from, resp, mapped, before, after, ref.Logs.String())
				}
				if after["stun"] != before["stun"]+1 {
					t.Errorf("stun counted %d → %d, want one more", before["stun"], after["stun"])
				}
			default:
				if resp != nil {
					t.Fatalf("scionproto %s answers no STUN, yet %x came back", v, resp)
				}
				if after["parse_error"] != before["parse_error"]+1 || after["stun"] != before["stun"] {
					t.Errorf("verdicts before %v after %v: want one more parse_error and no stun", before, after)
				}
			}
		})
	}
}

// A configuration without scion_version is attached as the default release
// would have it, and attach says so: an operator upgrading fastpath in
// front of an older router learns what to set.
func TestAttachWarnsWithoutSCIONVersion(t *testing.T) {
	b := newHostBed(t, false)
	b.cfg.SCIONVersion = ""
	_, warnings := b.attach(t, XDPModeNative)
	if !strings.Contains(warnings, "sets no scion_version") || !strings.Contains(warnings, "default="+scionproto.Default) {
		t.Fatalf("no warning about scion_version:\n%s", warnings)
	}
	b.cfg.SCIONVersion = scionproto.Default
	if _, warnings := b.attach(t, XDPModeNative); strings.Contains(warnings, "scion_version") {
		t.Fatalf("warned with scion_version set:\n%s", warnings)
	}
}
