package lab

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/pcap"
)

// checksum16 is the Internet checksum over b, computed independently of the
// packet builder.
func checksum16(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func TestUDPPackets(t *testing.T) {
	tb := Testbed{Prefix: DefaultPrefix, Layout: LayoutDUT}
	for _, size := range []int{60, 64, 138, 1514} {
		o := tb.DefaultUDP()
		o.Size, o.Count = size, 300
		pkts, err := UDPPackets(o)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		seen := map[string]bool{}
		for i, p := range pkts {
			if len(p) != size {
				t.Fatalf("size %d packet %d: %d bytes", size, i, len(p))
			}
			seen[string(p)] = true
			ip := p[14:34]
			if got := checksum16(ip); got != 0 {
				t.Fatalf("packet %d: IPv4 header checksum does not verify (%#04x)", i, got)
			}
			if l := binary.BigEndian.Uint16(ip[2:]); int(l) != size-14 {
				t.Fatalf("packet %d: IPv4 total length %d, want %d", i, l, size-14)
			}
			udp := p[34:]
			pseudo := append(append([]byte{}, ip[12:20]...), 0, 17, byte(len(udp)>>8), byte(len(udp)))
			if got := checksum16(append(pseudo, udp...)); got != 0 {
				t.Fatalf("packet %d: UDP checksum does not verify (%#04x)", i, got)
			}
			if sp := binary.BigEndian.Uint16(udp); int(sp) != 1024+i {
				t.Fatalf("packet %d: source port %d, want %d", i, sp, 1024+i)
			}
			if !bytes.Equal(p[0:6], tb.Sink().MAC) || !bytes.Equal(p[6:12], tb.Gen().MAC) {
				t.Fatalf("packet %d: MACs %x → %x", i, p[6:12], p[0:6])
			}
		}
		if len(seen) != len(pkts) {
			t.Fatalf("size %d: %d distinct packets of %d", size, len(seen), len(pkts))
		}
	}
}

func TestUDPPacketsRejects(t *testing.T) {
	base := Testbed{Prefix: DefaultPrefix, Layout: LayoutDUT}.DefaultUDP()
	cases := map[string]struct {
		mod  func(*UDPOptions)
		want string
	}{
		"too small":  {func(o *UDPOptions) { o.Size = 59 }, "packet size 59"},
		"too large":  {func(o *UDPOptions) { o.Size = PacketMaxFrame + 1 }, "out of range"},
		"no packets": {func(o *UDPOptions) { o.Count = 0 }, "packet count 0"},
		"ipv6":       {func(o *UDPOptions) { o.Dst = netip.MustParseAddr("2001:2::1") }, "IPv4"},
		"no mac":     {func(o *UDPOptions) { o.DstMAC = nil }, "MAC"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o := base
			c.mod(&o)
			_, err := UDPPackets(o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestPcapRoundTrip(t *testing.T) {
	o := Testbed{Prefix: DefaultPrefix, Layout: LayoutDUT}.DefaultUDP()
	o.Count = 1000
	pkts, err := UDPPackets(o)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.pcap")
	if err := pcap.Write(path, pkts); err != nil {
		t.Fatal(err)
	}
	got, err := pcap.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(pkts) {
		t.Fatalf("read %d packets, wrote %d", len(got), len(pkts))
	}
	for i := range pkts {
		if !bytes.Equal(got[i], pkts[i]) {
			t.Fatalf("packet %d differs after the round trip", i)
		}
	}
	// gopacket decodes what we wrote as Ethernet/IPv4/UDP.
	p := gopacket.NewPacket(got[7], layers.LayerTypeEthernet, gopacket.Default)
	if p.Layer(layers.LayerTypeUDP) == nil || p.ErrorLayer() != nil {
		t.Fatalf("packet 7 does not decode as UDP: %v", p.ErrorLayer())
	}
}
