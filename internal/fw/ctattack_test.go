package fw

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// ctSized is a firewall with an established table of ctMax entries and the
// rules.
func ctSized(t *testing.T, ctMax uint32, rules string) *Firewall {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	f, err := Load(LoadOptions{MaxFlows: 4096, CtMax: ctMax})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	installRules(t, f, rules)
	return f
}

// handshake opens a TCP connection from c:sport to s:80.
func handshake(t *testing.T, f *Firewall, c, s net.IP, sport uint16) {
	t.Helper()
	for i, st := range []struct {
		from, to net.IP
		s        seg
	}{
		{c, s, seg{sport: sport, dport: 80, seq: 1, flags: "S"}},
		{s, c, seg{sport: 80, dport: sport, seq: 100, ack: 2, flags: "SA"}},
		{c, s, seg{sport: sport, dport: 80, seq: 2, ack: 101, flags: "A"}},
	} {
		if got := run(t, f, ctFrame(t, st.from, st.to, layers.IPProtocolTCP, st.s.layers()...)); got != xdpPass {
			t.Fatalf("handshake %v:%d, packet %d: %s", c, sport, i, verdictName(got))
		}
	}
}

// tableOf is the table the connection from c:sport is in ("" for none).
func tableOf(t *testing.T, f *Firewall, c net.IP, sport uint16) string {
	t.Helper()
	conns, err := f.Conns()
	if err != nil {
		t.Fatal(err)
	}
	for _, cn := range conns {
		if cn.Src.AsSlice() != nil && net.IP(cn.Src.AsSlice()).Equal(c) && cn.SPort == sport {
			return cn.Table
		}
	}
	return ""
}

// A patient attacker with one IPv6 /64 opens as many connections as the
// established table holds: it gets its share, and a client from elsewhere
// is still moved to the table that never evicts.
func TestCtSourceShareKeepsTableForOthers(t *testing.T) {
	const ctMax = 1024
	f := ctSized(t, ctMax, statefulServiceRules)
	s := net.ParseIP("2001:db8:ffff::80")
	for i := range ctMax {
		a := net.ParseIP("2001:db8:bad:1::")
		binary.BigEndian.PutUint16(a[14:], uint16(i+1))
		handshake(t, f, a, s, uint16(10000+i))
	}
	client := net.ParseIP("2001:db8:1::1")
	handshake(t, f, client, s, 40000)
	if got := tableOf(t, f, client, 40000); got != "established" {
		t.Errorf("after the attacker's %d connections, a client's is in the %q table", ctMax, got)
	}
	st, err := f.ConntrackStats()
	if err != nil {
		t.Fatal(err)
	}
	cnt, _ := f.Counters()
	if want := ctMax / 64; st.Established != want+1 {
		t.Errorf("%d established entries, want the /64's share %d and the client's", st.Established, want)
	}
	if cnt["ct_source_quota"] == 0 {
		t.Error("no connection counted as over its source's share")
	}
}

// A connection not moved because the table was full is moved once there is
// room again, at its next packet a second later or more.
func TestCtPromotionRetried(t *testing.T) {
	const ctMax = 128
	f := ctSized(t, ctMax, statefulServiceRules)
	s := net.ParseIP("2001:db8:ffff::80")
	// Two connections from each of 64 networks: the table is full, no
	// share exceeded.
	var first net.IP
	for i := range ctMax {
		a := net.ParseIP("2001:db8::1")
		binary.BigEndian.PutUint16(a[4:], uint16(0x100+i/2))
		if i == 0 {
			first = a
		}
		handshake(t, f, a, s, uint16(10000+i))
	}
	client := net.ParseIP("2001:db9::1")
	handshake(t, f, client, s, 40000)
	if got := tableOf(t, f, client, 40000); got != "embryonic" {
		t.Fatalf("with the table full, the client's connection is in the %q table", got)
	}
	// One connection ends (an RST leaves it 10 s, as Linux does); once
	// expired, its entry goes, and with it its share.
	if got := run(t, f, ctFrame(t, first, s, layers.IPProtocolTCP, seg{sport: 10000, dport: 80, seq: 2, ack: 101, flags: "R"}.layers()...)); got != xdpPass {
		t.Fatalf("RST: %s", verdictName(got))
	}
	skewClock(t, f, 11*time.Second)
	if n, err := f.ExpireConns(); err != nil || n != 1 {
		t.Fatalf("expire: %d, %v; want the reset connection", n, err)
	}
	if got := run(t, f, ctFrame(t, client, s, layers.IPProtocolTCP, seg{sport: 40000, dport: 80, seq: 2, ack: 101, flags: "PA", data: 10}.layers()...)); got != xdpPass {
		t.Fatalf("the client's data: %s", verdictName(got))
	}
	if got := tableOf(t, f, client, 40000); got != "established" {
		t.Errorf("with room again, the client's connection stays in the %q table", got)
	}
}

// What a packet does to its connection is written only if the rules pass
// it: a forged SYN/ACK that a rule drops leaves the SYN's entry as it was,
// so the client's ACK after it does not complete anything.
func TestCtStateWrittenAfterRules(t *testing.T) {
	f := ctFirewall(t, `
default = "drop"
[[rule]]
action = "drop"
proto = "tcp"
sport = 80
dport = 30000
[[rule]]
action = "pass"
ct_state = ["established", "related"]
[[rule]]
action = "pass"
ct_state = "new"
proto = "tcp"
dport = 80
`)
	c, s := net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4()
	if got := run(t, f, ctFrame(t, c, s, layers.IPProtocolTCP, seg{sport: 30000, dport: 80, seq: 1, flags: "S"}.layers()...)); got != xdpPass {
		t.Fatalf("SYN: %s", verdictName(got))
	}
	if got := run(t, f, ctFrame(t, s, c, layers.IPProtocolTCP, seg{sport: 80, dport: 30000, seq: 100, ack: 2, flags: "SA"}.layers()...)); got != xdpDrop {
		t.Fatalf("the forged SYN/ACK: %s, want drop by the first rule", verdictName(got))
	}
	conns, err := f.Conns()
	if err != nil || len(conns) != 1 {
		t.Fatalf("connections %+v, %v", conns, err)
	}
	if cn := conns[0]; cn.State != "SYN_SENT" || cn.Replied || cn.Table != "embryonic" {
		t.Errorf("after a dropped SYN/ACK the connection is %+v, want SYN_SENT, no reply, embryonic", cn)
	}
	run(t, f, ctFrame(t, c, s, layers.IPProtocolTCP, seg{sport: 30000, dport: 80, seq: 2, ack: 101, flags: "A"}.layers()...))
	if got := tableOf(t, f, c, 30000); got == "established" {
		t.Error("a handshake whose SYN/ACK was dropped moved to the established table")
	}
}

// The reaper deletes what it was asked to only if it is still expired when
// it gets there: an entry made anew under the same key stays.
func TestCtReaperKeepsFreshEntry(t *testing.T) {
	f := ctFirewall(t, "[conntrack]\nenabled = true\n")
	c, s := net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4()
	udp := ctFrame(t, c, s, layers.IPProtocolUDP, &layers.UDP{SrcPort: 1000, DstPort: 53}, gopacket.Payload([]byte("q")))
	run(t, f, udp)
	skewClock(t, f, 60*time.Second) // unanswered UDP lives 30 s
	var doomed []fwFwCtKey
	if err := ctWalk(f.objs.FwCtNew, func(ks []fwFwCtKey, _ []fwFwCtEntry) { doomed = append(doomed, ks...) }); err != nil {
		t.Fatal(err)
	}
	if len(doomed) != 1 {
		t.Fatalf("%d entries read, want 1", len(doomed))
	}
	// Between the read and the delete, the flow starts again.
	run(t, f, udp)
	n, err := f.reap(false, false, doomed)
	if err != nil || n != 0 {
		t.Fatalf("reaped %d, %v: want the fresh entry kept", n, err)
	}
	if conns, _ := f.Conns(); len(conns) != 1 {
		t.Errorf("connections after the reaper: %+v", conns)
	}
	skewClock(t, f, 60*time.Second)
	if n, err := f.ExpireConns(); err != nil || n != 1 {
		t.Errorf("expire: %d, %v; want 1", n, err)
	}
}

// ipv6Ext is a frame from a to b: IPv6 with n Destination Options headers,
// then a TCP SYN to dport.
func ipv6Ext(a, b net.IP, n int, dport uint16) []byte {
	eth := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd}
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], 1)
	tcp[12] = 5 << 4
	tcp[13] = 0x02
	binary.BigEndian.PutUint16(tcp[14:], 1024)
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(8*n+len(tcp)))
	ip[6] = 6
	if n > 0 {
		ip[6] = 60
	}
	ip[7] = 64
	copy(ip[8:], a.To16())
	copy(ip[24:], b.To16())
	frame := append(eth, ip...)
	for i := range n {
		next := byte(60)
		if i == n-1 {
			next = 6
		}
		// Next header, length 0 (8 bytes), PadN of 4 bytes.
		frame = append(frame, next, 0, 1, 4, 0, 0, 0, 0)
	}
	return append(frame, tcp...)
}

// A packet whose extension headers the program cannot follow to their end
// is dropped, not classified by the last header it read: seven Destination
// Options headers around TCP to port 23 do not slip past a rule for it.
func TestIPv6ExtensionChain(t *testing.T) {
	f := newFirewall(t, `
[[rule]]
action = "drop"
proto = "tcp"
dport = 23
`)
	a, b := net.ParseIP("2001:db8::1"), net.ParseIP("2001:db8::2")
	for n := 0; n <= 10; n++ {
		if got := run(t, f, ipv6Ext(a, b, n, 23)); got != xdpDrop {
			t.Errorf("%d extension headers, TCP to port 23: %s", n, verdictName(got))
		}
	}
	if got := run(t, f, ipv6Ext(a, b, 6, 22)); got != xdpPass {
		t.Errorf("6 extension headers, TCP to port 22: %s", verdictName(got))
	}
	cnt, _ := f.Counters()
	if cnt["drop_malformed"] == 0 {
		t.Error("headers past the parser's reach not counted as malformed")
	}
}

// SCTP, DCCP and UDPLite connections are told apart by their ports (one
// SCTP association does not make all SCTP between two hosts established),
// and no connection of a protocol without a tracker of its own becomes
// assured or moves to the established table.
func TestCtPortsAndGenericEntries(t *testing.T) {
	f := ctFirewall(t, "[conntrack]\nenabled = true\n")
	c, s := net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4()
	// Headers the kernel's trackers take: an SCTP INIT (verification tag
	// 0, one chunk carrying its initiate tag) and its INIT ACK, UDP-Lite
	// with a checksum over its header. (This kernel tracks DCCP by
	// addresses alone: it has no DCCP tracker any more.)
	l4 := func(proto layers.IPProtocol, sport, dport uint16, answer bool) gopacket.Payload {
		b := make([]byte, 8)
		binary.BigEndian.PutUint16(b[0:], sport)
		binary.BigEndian.PutUint16(b[2:], dport)
		if proto == layers.IPProtocolUDPLite {
			binary.BigEndian.PutUint16(b[4:], 8)
			binary.BigEndian.PutUint16(b[6:], 0x1234)
			return append(b, 'x')
		}
		b = append(b, 0, 0, 0, 0) // checksum (not verified)
		chunk := make([]byte, 20)
		chunk[0] = 1 // INIT
		if answer {
			binary.BigEndian.PutUint32(b[4:], 0x11111111)
			chunk[0] = 2 // INIT ACK
		}
		binary.BigEndian.PutUint16(chunk[2:], 20)
		binary.BigEndian.PutUint32(chunk[4:], 0x11111111+uint32(sport))
		binary.BigEndian.PutUint32(chunk[8:], 65535)
		binary.BigEndian.PutUint16(chunk[12:], 1)
		binary.BigEndian.PutUint16(chunk[14:], 1)
		return append(b, chunk...)
	}
	for _, proto := range []layers.IPProtocol{layers.IPProtocolSCTP, layers.IPProtocolUDPLite} {
		run(t, f, ctFrame(t, c, s, proto, l4(proto, 5000, 7000, false)))
		run(t, f, ctFrame(t, s, c, proto, l4(proto, 7000, 5000, true)))
		if st, _ := ctStateOf(t, f, ctFrame(t, c, s, proto, l4(proto, 5001, 7000, false))); st != "new" {
			t.Errorf("%v from another port after one association was answered: %s, want new", proto, st)
		}
	}
	// GRE answered both ways for longer than a stream takes.
	gre := gopacket.Payload([]byte{0, 0, 0x08, 0x00})
	run(t, f, ctFrame(t, c, s, layers.IPProtocolGRE, gre))
	run(t, f, ctFrame(t, s, c, layers.IPProtocolGRE, gre))
	skewClock(t, f, 3*time.Second)
	run(t, f, ctFrame(t, c, s, layers.IPProtocolGRE, gre))
	run(t, f, ctFrame(t, s, c, layers.IPProtocolGRE, gre))
	conns, err := f.Conns()
	if err != nil {
		t.Fatal(err)
	}
	for _, cn := range conns {
		if cn.Proto == Proto(layers.IPProtocolGRE) && (cn.Assured || cn.Table != "embryonic") {
			t.Errorf("a GRE pseudo-connection became %+v", cn)
		}
	}
}

// servicePolicy is the policy of a stateful service: what is established
// or related passes, new connections of proto to port pass, nothing else.
func servicePolicy(proto string, port int) string {
	return fmt.Sprintf(`
default = "drop"
[[rule]]
action = "pass"
ct_state = ["established", "related"]
[[rule]]
action = "pass"
ct_state = "new"
proto = %q
dport = %d
`, proto, port)
}

var statefulServiceRules = servicePolicy("tcp", 80)

// udpFragment is one fragment of a UDP datagram of udpLen bytes (header
// included) from a:sport to b:dport, with IP ID id: the first (with the UDP
// header and 64 bytes) or a later one at byte offset off.
func udpFragment(t *testing.T, a, b net.IP, sport, dport uint16, id uint32, udpLen uint16, off uint16) []byte {
	t.Helper()
	var body []byte
	if off == 0 {
		body = make([]byte, 8+64)
		binary.BigEndian.PutUint16(body[0:], sport)
		binary.BigEndian.PutUint16(body[2:], dport)
		binary.BigEndian.PutUint16(body[4:], udpLen)
	} else {
		body = make([]byte, 64)
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	var ls []gopacket.SerializableLayer
	if a.To4() != nil {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: a.To4(), DstIP: b.To4(), Id: uint16(id), FragOffset: off / 8}
		if off == 0 {
			ip.Flags = layers.IPv4MoreFragments
		}
		ls = []gopacket.SerializableLayer{eth, ip, gopacket.Payload(body)}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: a, DstIP: b}
		frag := make([]byte, 8)
		frag[0] = byte(layers.IPProtocolUDP)
		binary.BigEndian.PutUint16(frag[2:], off&^7)
		if off == 0 {
			frag[3] |= 1
		}
		binary.BigEndian.PutUint32(frag[4:], id)
		ls = []gopacket.SerializableLayer{eth, ip, gopacket.Payload(append(frag, body...))}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A large answer (EDNS0, IKE, fragmented IPv6 UDP) passes the documented
// host policy whole: its later fragments have its first's state, not
// "untracked". A later fragment whose first was not seen stays untracked,
// and the policy drops it.
func TestCtLaterFragmentsTracked(t *testing.T) {
	f := ctFirewall(t, servicePolicy("udp", 53))
	for _, fam := range []struct{ c, s, other net.IP }{
		{net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4(), net.ParseIP("198.51.100.9").To4()},
		{net.ParseIP("2001:db8::1"), net.ParseIP("2001:db8:1::53"), net.ParseIP("2001:db8:1::99")},
	} {
		query := ctFrame(t, fam.c, fam.s, layers.IPProtocolUDP, &layers.UDP{SrcPort: 5000, DstPort: 53}, gopacket.Payload([]byte("q")))
		if got := run(t, f, query); got != xdpPass {
			t.Fatalf("%v: query %s", fam.c, verdictName(got))
		}
		const id, size = 4242, 3000
		for _, off := range []uint16{0, 1480, 2960} {
			frame := udpFragment(t, fam.s, fam.c, 53, 5000, id, size, off)
			if st, got := ctStateOf(t, f, frame); st != "established" || got != xdpPass {
				t.Errorf("%v: the answer's fragment at %d: %s, %s; want established, pass", fam.c, off, st, verdictName(got))
			}
		}
		stray := udpFragment(t, fam.other, fam.c, 53, 5000, id, size, 1480)
		if st, got := ctStateOf(t, f, stray); st != "untracked" || got != xdpDrop {
			t.Errorf("%v: a later fragment without its first: %s, %s; want untracked, drop", fam.c, st, verdictName(got))
		}
	}
	conns, err := f.Conns()
	if err != nil {
		t.Fatal(err)
	}
	for _, cn := range conns {
		if cn.Bytes[1] < 3000 {
			t.Errorf("%v: answer counted as %d bytes, want the datagram's (3000 and headers)", cn, cn.Bytes[1])
		}
	}
}

// Two CPUs on the same connections at once: one sends data, the other
// closes them (FIN both ways, the last ACK) and resets others. Whatever the
// interleaving, no closed connection is left ESTABLISHED (a FIN applied on
// one CPU while the other moved the entry is not lost), and the shares of
// the established table add up to its entries (none leaked or lost).
func TestCtConcurrentCloseAndShares(t *testing.T) {
	f := ctSized(t, 4096, statefulServiceRules)
	s := net.ParseIP("198.51.100.1").To4()
	const conns = 300
	client := func(i int) net.IP { return net.IPv4(10, 1, byte(i>>8), byte(i)).To4() }
	frames := func(i int) (syn, synack, ack, data, finC, finS, last []byte) {
		c, p := client(i), uint16(20000+i)
		mk := func(from, to net.IP, sg seg) []byte {
			return ctFrame(t, from, to, layers.IPProtocolTCP, sg.layers()...)
		}
		return mk(c, s, seg{sport: p, dport: 80, seq: 1, flags: "S"}),
			mk(s, c, seg{sport: 80, dport: p, seq: 100, ack: 2, flags: "SA"}),
			mk(c, s, seg{sport: p, dport: 80, seq: 2, ack: 101, flags: "A"}),
			mk(c, s, seg{sport: p, dport: 80, seq: 2, ack: 101, flags: "PA", data: 10}),
			mk(c, s, seg{sport: p, dport: 80, seq: 12, ack: 101, flags: "FA"}),
			mk(s, c, seg{sport: 80, dport: p, seq: 101, ack: 13, flags: "FA"}),
			mk(c, s, seg{sport: p, dport: 80, seq: 13, ack: 102, flags: "A"})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range conns {
			_, _, _, data, _, _, _ := frames(i)
			for range 20 {
				f.Program().Run(&ebpf.RunOptions{Data: data})
			}
		}
	}()
	for i := range conns {
		syn, synack, ack, data, finC, finS, last := frames(i)
		for _, fr := range [][]byte{syn, synack, ack, data, finC, finS, last} {
			run(t, f, fr)
		}
	}
	<-done
	conns_, err := f.Conns()
	if err != nil {
		t.Fatal(err)
	}
	for _, cn := range conns_ {
		if cn.State == "ESTABLISHED" {
			t.Errorf("closed both ways, still %v", cn)
		}
	}
	st, err := f.ConntrackStats()
	if err != nil {
		t.Fatal(err)
	}
	var k fwFwCtSrcKey
	var n uint32
	var sum uint64
	it := f.objs.FwCtSrc.Iterate()
	for it.Next(&k, &n) {
		sum += uint64(n)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if want := 2 * uint64(st.Established+st.EstablishedExpired); sum != want {
		t.Errorf("shares counted %d, want 2 per established entry (%d entries)", sum, st.Established+st.EstablishedExpired)
	}
	// All gone: every share given back.
	if _, err := f.FlushConns(); err != nil {
		t.Fatal(err)
	}
	sum = 0
	it = f.objs.FwCtSrc.Iterate()
	for it.Next(&k, &n) {
		sum += uint64(n)
	}
	if sum != 0 {
		t.Errorf("after a flush, %d shares still counted", sum)
	}
}
