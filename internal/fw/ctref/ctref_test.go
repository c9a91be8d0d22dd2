package ctref

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/preflight"
)

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

// frame is an Ethernet frame of an IPv4 or IPv6 packet (by src's family)
// from src to dst carrying l4 (with checksums), and payload.
func frame(t *testing.T, src, dst net.IP, l4 gopacket.SerializableLayer, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB}
	var ip gopacket.NetworkLayer
	var ipl gopacket.SerializableLayer
	var next layers.IPProtocol
	switch l := l4.(type) {
	case *layers.TCP:
		next = layers.IPProtocolTCP
	case *layers.UDP:
		next = layers.IPProtocolUDP
	case *layers.ICMPv4:
		next = layers.IPProtocolICMPv4
	default:
		t.Fatalf("layer %T", l)
	}
	if src.To4() != nil {
		eth.EthernetType = layers.EthernetTypeIPv4
		v4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: next, SrcIP: src, DstIP: dst, Flags: layers.IPv4DontFragment}
		ip, ipl = v4, v4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: src, DstIP: dst}
		ip, ipl = v6, v6
	}
	switch l := l4.(type) {
	case *layers.TCP:
		l.SetNetworkLayerForChecksum(ip)
	case *layers.UDP:
		l.SetNetworkLayerForChecksum(ip)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ipl, l4, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// What nftables' ct state says of the packets of a few conversations, in
// both families: the reference answers as the kernel's conntrack does
// (docs/design/fw-conntrack.md, §2).
func TestReference(t *testing.T) {
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	b := make([]byte, 2)
	rand.Read(b)
	r, err := Open("fp-ct" + hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, fam := range []struct {
		name   string
		c, s   net.IP
		router net.IP
	}{
		{"IPv4", net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4(), net.ParseIP("203.0.113.1").To4()},
		{"IPv6", net.ParseIP("2001:db8::1"), net.ParseIP("2001:db8:1::1"), nil},
	} {
		c, s := fam.c, fam.s
		tcp := func(sport, dport uint16, seq, ack uint32, flags string) *layers.TCP {
			l := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: seq, Ack: ack, Window: 64240, DataOffset: 5}
			for _, f := range flags {
				switch f {
				case 'S':
					l.SYN = true
				case 'A':
					l.ACK = true
				case 'F':
					l.FIN = true
				case 'R':
					l.RST = true
				}
			}
			return l
		}
		steps := []struct {
			what     string
			from, to net.IP
			l4       gopacket.SerializableLayer
			want     string
		}{
			{"SYN", c, s, tcp(40000, 80, 1000, 0, "S"), New},
			{"SYN retransmitted", c, s, tcp(40000, 80, 1000, 0, "S"), New},
			{"SYN/ACK", s, c, tcp(80, 40000, 5000, 1001, "SA"), Established},
			{"ACK", c, s, tcp(40000, 80, 1001, 5001, "A"), Established},
			{"ACK far out of window", c, s, tcp(40000, 80, 1001+100000000, 5001, "A"), Invalid},
			{"mid-stream ACK of an unknown flow (picked up)", c, s, tcp(40001, 80, 7000, 9000, "A"), New},
			{"its reply", s, c, tcp(80, 40001, 9000, 7000, "A"), Established},
			{"SYN|FIN", c, s, tcp(40002, 80, 1, 0, "SF"), Invalid},
			{"SYN/ACK of no SYN", s, c, tcp(80, 40003, 1, 2, "SA"), Invalid},
			{"UDP", c, s, &layers.UDP{SrcPort: 5000, DstPort: 53}, New},
			{"UDP reply", s, c, &layers.UDP{SrcPort: 53, DstPort: 5000}, Established},
		}
		for _, st := range steps {
			got, err := r.Send(frame(t, st.from, st.to, st.l4, nil))
			if err != nil {
				t.Fatalf("%s %s: %v", fam.name, st.what, err)
			}
			if got != st.want {
				t.Errorf("%s %s: %s, want %s", fam.name, st.what, got, st.want)
			}
		}
		if fam.router == nil {
			continue
		}
		// An ICMP error from a router on the way, quoting the client's
		// packet of the tracked flow: related; quoting an unknown flow:
		// invalid.
		for _, q := range []struct {
			sport uint16
			want  string
		}{{40000, Related}, {41000, Invalid}} {
			quoted := frame(t, c, s, tcp(q.sport, 80, 1001, 5001, "A"), nil)[14:]
			icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeHost)}
			got, err := r.Send(frame(t, fam.router, c, icmp, quoted[:28]))
			if err != nil {
				t.Fatalf("ICMP error quoting port %d: %v", q.sport, err)
			}
			if got != q.want {
				t.Errorf("ICMP error quoting port %d: %s, want %s", q.sport, got, q.want)
			}
		}
	}
}
