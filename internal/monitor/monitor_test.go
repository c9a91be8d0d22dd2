package monitor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/fastpath-dev/fastpath/internal/pcap"
)

// frame builds Ethernet/IP/L4 with gopacket.
func frame(t *testing.T, src, dst string, l4 ...gopacket.SerializableLayer) []byte {
	t.Helper()
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	eth := &layers.Ethernet{SrcMAC: make([]byte, 6), DstMAC: make([]byte, 6)}
	var ip gopacket.NetworkLayer
	var ipl gopacket.SerializableLayer
	proto := layers.IPProtocolUDP
	if _, ok := l4[0].(*layers.TCP); ok {
		proto = layers.IPProtocolTCP
	}
	if s.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		v4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: s.AsSlice(), DstIP: d.AsSlice()}
		ip, ipl = v4, v4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: s.AsSlice(), DstIP: d.AsSlice()}
		ip, ipl = v6, v6
	}
	for _, l := range l4 {
		switch x := l.(type) {
		case *layers.TCP:
			x.SetNetworkLayerForChecksum(ip)
		case *layers.UDP:
			x.SetNetworkLayerForChecksum(ip)
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, append([]gopacket.SerializableLayer{eth, ipl}, l4...)...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// scionHeader is a SCION common and address header with IPv4 hosts and a
// standard path's meta header (hop 2 of 3+2, second segment), then UDP.
func scionHeader() []byte {
	b := make([]byte, 12+16+8+4+8)
	b[4] = 17                          // next header UDP
	b[5] = byte((12 + 16 + 8 + 4) / 4) // header length, lines of 4 bytes (the path cut short)
	b[8] = 1                           // standard path
	binary.BigEndian.PutUint64(b[12:], 1<<48|0xff00_0000_0110)
	binary.BigEndian.PutUint64(b[20:], 2<<48|64512)
	copy(b[28:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint32(b[36:], 1<<30|2<<24|3<<12|2<<6)
	binary.BigEndian.PutUint16(b[40:], 30041)
	binary.BigEndian.PutUint16(b[42:], 31000)
	return b
}

func TestParseFlowAndFilter(t *testing.T) {
	tcp := frame(t, "198.18.0.1", "198.18.1.1", &layers.TCP{SrcPort: 1234, DstPort: 80, SYN: true})
	udp6 := frame(t, "2001:db8::1", "2001:db8::2", &layers.UDP{SrcPort: 53, DstPort: 5353})
	sc := frame(t, "10.1.0.1", "10.1.0.2", &layers.UDP{SrcPort: 50000, DstPort: 50000}, gopacket.Payload(scionHeader()))
	cases := map[string]struct {
		data  []byte
		scion bool
		want  string
	}{
		"tcp":   {tcp, false, "tcp 198.18.0.1:1234 > 198.18.1.1:80"},
		"udp6":  {udp6, false, "udp [2001:db8::1]:53 > [2001:db8::2]:5353"},
		"scion": {sc, true, "udp 10.1.0.1:50000 > 10.1.0.2:50000 scion 2-64512,10.0.0.2:30041 > 1-ff00:0:110,10.0.0.1:31000 udp hop 2/5 inf 1"},
		"short": {tcp[:10], false, "short frame"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ParseFlow(c.data, c.scion).String(); got != c.want {
				t.Fatalf("%q, want %q", got, c.want)
			}
		})
	}
	ev := func(data []byte, scion bool, reason string) Event {
		return Event{Reason: reason, Flow: ParseFlow(data, scion)}
	}
	pfx := func(s string) netip.Prefix { p, _ := ParsePrefix(s); return p }
	filters := map[string]struct {
		f     Filter
		e     Event
		match bool
	}{
		"no filter":       {Filter{}, ev(tcp, false, "drop_rule"), true},
		"reason":          {Filter{Reasons: []string{"drop_rate_limit"}}, ev(tcp, false, "drop_rule"), false},
		"src prefix":      {Filter{Src: pfx("198.18.0.0/24")}, ev(tcp, false, ""), true},
		"src address":     {Filter{Src: pfx("198.18.0.2")}, ev(tcp, false, ""), false},
		"dst":             {Filter{Dst: pfx("2001:db8::/64")}, ev(udp6, false, ""), true},
		"proto":           {Filter{Proto: 17}, ev(tcp, false, ""), false},
		"port either end": {Filter{Port: 1234}, ev(tcp, false, ""), true},
		"scion host src":  {Filter{Src: pfx("10.0.0.2/32")}, ev(sc, true, ""), true},
		"scion l4 port":   {Filter{Port: 31000}, ev(sc, true, ""), true},
		"scion neither":   {Filter{Port: 9}, ev(sc, true, ""), false},
	}
	for name, c := range filters {
		t.Run(name, func(t *testing.T) {
			if c.f.Match(c.e) != c.match {
				t.Fatalf("match %v, want %v", !c.match, c.match)
			}
		})
	}
	if _, err := ParseProto("gre"); err == nil {
		t.Error("ParseProto(gre) succeeded")
	}
	if p, _ := ParseProto("icmp"); p != 1 {
		t.Error("icmp is not 1")
	}
}

// The pcapng file parses with gopacket's reader, holds the frames and their
// lengths, and carries each event's comment.
func TestPcapng(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcap.NewNgWriter(&buf, SnapMax, "test")
	if err != nil {
		t.Fatal(err)
	}
	out := Output{Ng: w}
	frames := [][]byte{
		frame(t, "198.18.0.1", "198.18.1.1", &layers.UDP{SrcPort: 1, DstPort: 2}),
		frame(t, "198.18.0.1", "198.18.1.1", &layers.TCP{SrcPort: 3, DstPort: 4}),
	}
	now := time.Now()
	for i, f := range frames {
		e := Event{Time: now, Function: "fw", Name: "eth0", Device: []string{"eth0", "eth1"}[i], Verdict: Drop, Reason: "drop_rule", Rule: fmt.Sprint("r", i+1), Len: len(f) + 10, Data: f}
		if err := out.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	file := buf.Bytes()
	r, err := pcapgo.NewNgReader(bytes.NewReader(file), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, f) || ci.Length != len(f)+10 || !ci.Timestamp.Equal(now) {
			t.Fatalf("frame %d: %d bytes of %d at %s", i, len(data), ci.Length, ci.Timestamp)
		}
	}
	if r.NInterfaces() != 2 {
		t.Errorf("%d interfaces, want 2", r.NInterfaces())
	}
	for _, c := range []string{"fw eth0 drop drop_rule rule=r1", "fw eth0 drop drop_rule rule=r2"} {
		if !strings.Contains(string(file), c) {
			t.Errorf("no comment %q", c)
		}
	}
}
