package fw

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/fw/ctref"
	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// ctFrame is an Ethernet frame from src to dst (IPv4 or IPv6 by src)
// carrying the layers ls, with lengths and checksums filled in.
func ctFrame(t testing.TB, src, dst net.IP, proto layers.IPProtocol, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	var ip gopacket.NetworkLayer
	var ipl gopacket.SerializableLayer
	if src.To4() != nil {
		eth.EthernetType = layers.EthernetTypeIPv4
		v4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: src.To4(), DstIP: dst.To4(), Flags: layers.IPv4DontFragment}
		ip, ipl = v4, v4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		v6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: src, DstIP: dst}
		ip, ipl = v6, v6
	}
	for _, l := range ls {
		switch l := l.(type) {
		case *layers.TCP:
			l.SetNetworkLayerForChecksum(ip)
		case *layers.UDP:
			l.SetNetworkLayerForChecksum(ip)
		case *layers.ICMPv6:
			l.SetNetworkLayerForChecksum(ip)
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		append([]gopacket.SerializableLayer{eth, ipl}, ls...)...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// seg is a TCP segment: flags of "SAFRPU", options on a SYN (window scale
// 7, SACK permitted, MSS 1460) unless noOpts.
type seg struct {
	sport, dport uint16
	seq, ack     uint32
	flags        string
	data         int
	win          uint16
	noOpts       bool
}

func (s seg) layers() []gopacket.SerializableLayer {
	l := &layers.TCP{SrcPort: layers.TCPPort(s.sport), DstPort: layers.TCPPort(s.dport), Seq: s.seq, Ack: s.ack, Window: s.win}
	if l.Window == 0 {
		l.Window = 502
	}
	for _, f := range s.flags {
		switch f {
		case 'S':
			l.SYN = true
		case 'A':
			l.ACK = true
		case 'F':
			l.FIN = true
		case 'R':
			l.RST = true
		case 'P':
			l.PSH = true
		case 'U':
			l.URG = true
		}
	}
	if l.SYN && !s.noOpts {
		l.Window = 64240
		l.Options = []layers.TCPOption{
			{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0xb4}},
			{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
			{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}},
		}
	}
	return []gopacket.SerializableLayer{l, gopacket.Payload(make([]byte, s.data))}
}

// A step of a trace: a frame and what nftables' ct state says of it.
type ctStep struct {
	what  string
	frame []byte
	// Advance the clocks before the frame: the kernel's by sleeping (its
	// timeouts shortened by the trace's sysctls), ours by the skew.
	wait bool
}

// ctTrace is a conversation between a client and a server; ports are the
// trace's own, so that traces do not meet in either table.
type ctTrace struct {
	name  string
	steps func(c, s net.IP, r net.IP, port uint16) []ctStep
	// Only for one family (4 or 6), else both.
	family int
}

func tcpStep(t testing.TB, what string, from, to net.IP, s seg) ctStep {
	return ctStep{what: what, frame: ctFrame(t, from, to, layers.IPProtocolTCP, s.layers()...)}
}

// ctTraces: the cases of docs/design/fw-conntrack.md's corpus.
func ctTraces(t testing.TB) []ctTrace {
	hs := func(c, s net.IP, p uint16) []ctStep {
		return []ctStep{
			tcpStep(t, "SYN", c, s, seg{sport: p, dport: 80, seq: 1000, flags: "S"}),
			tcpStep(t, "SYN/ACK", s, c, seg{sport: 80, dport: p, seq: 5000, ack: 1001, flags: "SA"}),
			tcpStep(t, "ACK", c, s, seg{sport: p, dport: 80, seq: 1001, ack: 5001, flags: "A"}),
		}
	}
	udp := func(sp, dp uint16) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{&layers.UDP{SrcPort: layers.UDPPort(sp), DstPort: layers.UDPPort(dp)}, gopacket.Payload([]byte("hello"))}
	}
	return []ctTrace{
		{name: "handshake, data, FIN both ways, TIME_WAIT reopened by a SYN", steps: func(c, s, _ net.IP, p uint16) []ctStep {
			return []ctStep{
				tcpStep(t, "SYN", c, s, seg{sport: p, dport: 80, seq: 1000, flags: "S"}),
				tcpStep(t, "SYN retransmitted", c, s, seg{sport: p, dport: 80, seq: 1000, flags: "S"}),
				tcpStep(t, "SYN/ACK", s, c, seg{sport: 80, dport: p, seq: 5000, ack: 1001, flags: "SA"}),
				tcpStep(t, "ACK", c, s, seg{sport: p, dport: 80, seq: 1001, ack: 5001, flags: "A"}),
				tcpStep(t, "data", c, s, seg{sport: p, dport: 80, seq: 1001, ack: 5001, flags: "PA", data: 100}),
				tcpStep(t, "data retransmitted", c, s, seg{sport: p, dport: 80, seq: 1001, ack: 5001, flags: "PA", data: 100}),
				tcpStep(t, "its ACK", s, c, seg{sport: 80, dport: p, seq: 5001, ack: 1101, flags: "A"}),
				tcpStep(t, "reply data", s, c, seg{sport: 80, dport: p, seq: 5001, ack: 1101, flags: "PA", data: 1000}),
				tcpStep(t, "FIN from the client", c, s, seg{sport: p, dport: 80, seq: 1101, ack: 6001, flags: "FA"}),
				tcpStep(t, "ACK of the FIN", s, c, seg{sport: 80, dport: p, seq: 6001, ack: 1102, flags: "A"}),
				tcpStep(t, "FIN from the server", s, c, seg{sport: 80, dport: p, seq: 6001, ack: 1102, flags: "FA"}),
				tcpStep(t, "last ACK", c, s, seg{sport: p, dport: 80, seq: 1102, ack: 6002, flags: "A"}),
				tcpStep(t, "a new SYN on the tuple in TIME_WAIT", c, s, seg{sport: p, dport: 80, seq: 90000, flags: "S"}),
				tcpStep(t, "its SYN/ACK", s, c, seg{sport: 80, dport: p, seq: 70000, ack: 90001, flags: "SA"}),
			}
		}},
		{name: "out of window, RSTs", steps: func(c, s, _ net.IP, p uint16) []ctStep {
			return append(hs(c, s, p),
				tcpStep(t, "ACK far ahead", c, s, seg{sport: p, dport: 80, seq: 1001 + 100000000, ack: 5001, flags: "A"}),
				tcpStep(t, "ACK of data never sent", c, s, seg{sport: p, dport: 80, seq: 1001, ack: 5001 + 100000000, flags: "A"}),
				tcpStep(t, "old retransmission far behind", c, s, seg{sport: p, dport: 80, seq: 1 << 31, ack: 5001, flags: "A", data: 10}),
				tcpStep(t, "RST out of window", s, c, seg{sport: 80, dport: p, seq: 5001 + 100000000, flags: "R"}),
				tcpStep(t, "RST in window, not at the edge", s, c, seg{sport: 80, dport: p, seq: 5001 + 10, flags: "R"}),
				tcpStep(t, "RST at the edge", s, c, seg{sport: 80, dport: p, seq: 5001, flags: "R"}),
				tcpStep(t, "data after the RST", c, s, seg{sport: p, dport: 80, seq: 1001, ack: 5001, flags: "PA", data: 10}),
				tcpStep(t, "SYN reusing the tuple", c, s, seg{sport: p, dport: 80, seq: 777777, flags: "S"}),
			)
		}},
		{name: "RST answering a SYN, then a new SYN", steps: func(c, s, _ net.IP, p uint16) []ctStep {
			return []ctStep{
				tcpStep(t, "SYN", c, s, seg{sport: p, dport: 80, seq: 1000, flags: "S"}),
				tcpStep(t, "RST|ACK", s, c, seg{sport: 80, dport: p, seq: 0, ack: 1001, flags: "RA"}),
				tcpStep(t, "SYN again", c, s, seg{sport: p, dport: 80, seq: 1000, flags: "S"}),
				tcpStep(t, "SYN/ACK", s, c, seg{sport: 80, dport: p, seq: 5000, ack: 1001, flags: "SA"}),
			}
		}},
		{name: "simultaneous open", steps: func(c, s, _ net.IP, p uint16) []ctStep {
			return []ctStep{
				tcpStep(t, "SYN", c, s, seg{sport: p, dport: 80, seq: 1000, flags: "S"}),
				tcpStep(t, "SYN the other way", s, c, seg{sport: 80, dport: p, seq: 5000, flags: "S"}),
				tcpStep(t, "SYN/ACK", c, s, seg{sport: p, dport: 80, seq: 1000, ack: 5001, flags: "SA"}),
				tcpStep(t, "SYN/ACK the other way", s, c, seg{sport: 80, dport: p, seq: 5000, ack: 1001, flags: "SA"}),
				tcpStep(t, "ACK", c, s, seg{sport: p, dport: 80, seq: 1001, ack: 5001, flags: "A"}),
				tcpStep(t, "data", s, c, seg{sport: 80, dport: p, seq: 5001, ack: 1001, flags: "PA", data: 20}),
			}
		}},
		{name: "mid-stream pickup, FIN and RST of unknown flows, bad flags", steps: func(c, s, _ net.IP, p uint16) []ctStep {
			return []ctStep{
				tcpStep(t, "mid-stream data", c, s, seg{sport: p, dport: 80, seq: 7000, ack: 9000, flags: "PA", data: 50, win: 1000}),
				tcpStep(t, "its reply", s, c, seg{sport: 80, dport: p, seq: 9000, ack: 7050, flags: "A", win: 1000}),
				tcpStep(t, "more data", c, s, seg{sport: p, dport: 80, seq: 7050, ack: 9000, flags: "PA", data: 50, win: 1000}),
				tcpStep(t, "FIN|ACK of no flow", c, s, seg{sport: p + 1, dport: 80, seq: 1, ack: 1, flags: "FA"}),
				tcpStep(t, "RST of no flow", c, s, seg{sport: p + 2, dport: 80, seq: 1, flags: "R"}),
				tcpStep(t, "SYN/ACK of no SYN", s, c, seg{sport: 80, dport: p + 3, seq: 1, ack: 2, flags: "SA"}),
				tcpStep(t, "no flags", c, s, seg{sport: p + 4, dport: 80, seq: 1, flags: ""}),
				tcpStep(t, "SYN|FIN", c, s, seg{sport: p + 5, dport: 80, seq: 1, flags: "SF"}),
				tcpStep(t, "SYN|RST", c, s, seg{sport: p + 6, dport: 80, seq: 1, flags: "SR"}),
				tcpStep(t, "XMAS", c, s, seg{sport: p + 7, dport: 80, seq: 1, flags: "FPU"}),
				tcpStep(t, "FIN without ACK", c, s, seg{sport: p + 8, dport: 80, seq: 1, flags: "F"}),
			}
		}},
		{name: "SYN on an established connection, SYN/ACK from the wrong side", steps: func(c, s, _ net.IP, p uint16) []ctStep {
			return append(hs(c, s, p),
				tcpStep(t, "SYN again, new ISN", c, s, seg{sport: p, dport: 80, seq: 424242, flags: "S"}),
				tcpStep(t, "SYN/ACK from the client", c, s, seg{sport: p, dport: 80, seq: 1001, ack: 5001, flags: "SA"}),
				tcpStep(t, "SYN from the server", s, c, seg{sport: 80, dport: p, seq: 5001, flags: "S"}),
				tcpStep(t, "data", c, s, seg{sport: p, dport: 80, seq: 1001, ack: 5001, flags: "PA", data: 10}),
			)
		}},
		{name: "UDP", steps: func(c, s, _ net.IP, p uint16) []ctStep {
			f := func(what string, from, to net.IP, sp, dp uint16) ctStep {
				return ctStep{what: what, frame: ctFrame(t, from, to, layers.IPProtocolUDP, udp(sp, dp)...)}
			}
			return []ctStep{
				f("first datagram", c, s, p, 53), f("second, unanswered", c, s, p, 53),
				f("reply", s, c, 53, p), f("next datagram", c, s, p, 53),
				f("a datagram of another flow", s, c, 53, p+1),
			}
		}},
		{name: "ICMP echo and errors", family: 4, steps: func(c, s, r net.IP, p uint16) []ctStep {
			echo := func(what string, from, to net.IP, typ uint8, id uint16) ctStep {
				return ctStep{what: what, frame: ctFrame(t, from, to, layers.IPProtocolICMPv4,
					&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, 0), Id: id, Seq: 1}, gopacket.Payload([]byte("ping")))}
			}
			quoted := func(sport uint16) []byte {
				return ctFrame(t, c, s, layers.IPProtocolTCP, seg{sport: sport, dport: 80, seq: 1001, ack: 5001, flags: "A"}.layers()...)[14:42]
			}
			unreach := func(what string, to net.IP, q []byte) ctStep {
				return ctStep{what: what, frame: ctFrame(t, r, to, layers.IPProtocolICMPv4,
					&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeHost)}, gopacket.Payload(q))}
			}
			return append(append(hs(c, s, p),
				echo("echo request", c, s, 8, p), echo("echo reply", s, c, 0, p), echo("echo reply of no request", s, c, 0, p+1),
				echo("router advertisement", r, c, 9, 0)),
				unreach("unreachable quoting the tracked flow", c, quoted(p)),
				unreach("unreachable quoting an unknown flow", c, quoted(p+1)),
				unreach("unreachable sent to the wrong host", s, quoted(p)),
			)
		}},
		{name: "ICMPv6 echo, errors, neighbour discovery", family: 6, steps: func(c, s, _ net.IP, p uint16) []ctStep {
			r := net.ParseIP("2001:db8:2::1")
			echo := func(what string, from, to net.IP, typ uint8, id uint16) ctStep {
				return ctStep{what: what, frame: ctFrame(t, from, to, layers.IPProtocolICMPv6,
					&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}, &layers.ICMPv6Echo{Identifier: id, SeqNumber: 1})}
			}
			quoted := func(sport uint16) []byte {
				return ctFrame(t, c, s, layers.IPProtocolTCP, seg{sport: sport, dport: 80, seq: 1001, ack: 5001, flags: "A"}.layers()...)[14 : 14+60]
			}
			unreach := func(what string, to net.IP, q []byte) ctStep {
				return ctStep{what: what, frame: ctFrame(t, r, to, layers.IPProtocolICMPv6,
					&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeDestinationUnreachable, 3)}, gopacket.Payload(append(make([]byte, 4), q...)))}
			}
			ns := ctStep{what: "neighbour solicitation", frame: ctFrame(t, c, s, layers.IPProtocolICMPv6,
				&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}, gopacket.Payload(append(make([]byte, 4), s.To16()...)))}
			ns.frame[14+7] = 255 // the hop limit neighbour discovery needs
			return append(append(hs(c, s, p),
				echo("echo request", c, s, 128, p), echo("echo reply", s, c, 129, p), echo("echo reply of no request", s, c, 129, p+1)),
				unreach("unreachable quoting the tracked flow", c, quoted(p)),
				unreach("unreachable quoting an unknown flow", c, quoted(p+1)),
				ns,
			)
		}},
		{name: "a protocol without a tracker (GRE)", steps: func(c, s, _ net.IP, p uint16) []ctStep {
			gre := func(what string, from, to net.IP) ctStep {
				return ctStep{what: what, frame: ctFrame(t, from, to, layers.IPProtocolGRE, gopacket.Payload([]byte{0, 0, 0x08, 0, 1, 2, 3, 4}))}
			}
			return []ctStep{gre("first", c, s), gre("second", c, s), gre("reply", s, c), gre("next", c, s)}
		}},
		{name: "UDP after its timeout", steps: func(c, s, _ net.IP, p uint16) []ctStep {
			f := func(what string, from, to net.IP, sp, dp uint16, wait bool) ctStep {
				return ctStep{what: what, frame: ctFrame(t, from, to, layers.IPProtocolUDP, udp(sp, dp)...), wait: wait}
			}
			return []ctStep{f("datagram", c, s, p, 53, false), f("another after the timeout", c, s, p, 53, true), f("reply", s, c, 53, p, false)}
		}},
	}
}

// ctStateOf runs one frame through the firewall and returns the ct state
// its counters moved by, and the verdict.
func ctStateOf(t testing.TB, f *Firewall, frame []byte) (string, uint32) {
	t.Helper()
	before, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	verdict := run(t, f, frame)
	after, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{ctref.New, ctref.Established, ctref.Related, ctref.Invalid, ctref.Untracked} {
		if after["ct_"+s] > before["ct_"+s] {
			return s, verdict
		}
	}
	return "none", verdict
}

// skewClock moves conntrack's clock on by d.
func skewClock(t testing.TB, f *Firewall, d time.Duration) {
	t.Helper()
	if err := f.updateConfig(func(c *fwFwConfig) { c.CtSkewNs += int64(d) }); err != nil {
		t.Fatal(err)
	}
}

// TestConntrackAgreesWithNftables sends the same traces, frame by frame,
// through Linux conntrack with nftables' `ct state` (ctref) and through the
// firewall, in both families: every packet's state must be the same.
func TestConntrackAgreesWithNftables(t *testing.T) {
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	// The options against the sysctls they stand for.
	for _, opt := range []struct {
		name, conntrack string
		sysctls         map[string]string
	}{
		{"defaults", "", nil},
		{"no_pickup", "no_pickup = true\n", map[string]string{"net/netfilter/nf_conntrack_tcp_loose": "0"}},
		{"liberal", "liberal = true\n", map[string]string{"net/netfilter/nf_conntrack_tcp_be_liberal": "1"}},
	} {
		t.Run(opt.name, func(t *testing.T) {
			b := make([]byte, 2)
			rand.Read(b)
			ref, err := ctref.Open("fp-cta" + hex.EncodeToString(b))
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			// The timeout trace waits out a UDP entry of 1 s in the kernel.
			sysctls := map[string]string{"net/netfilter/nf_conntrack_udp_timeout": "1"}
			for k, v := range opt.sysctls {
				sysctls[k] = v
			}
			for k, v := range sysctls {
				if err := ref.Sysctl(k, v); err != nil {
					t.Fatal(err)
				}
			}
			f := ctFirewall(t, "[conntrack]\nenabled = true\n"+opt.conntrack)
			compareTraces(t, ref, f, false)
		})
	}
}

// traceFamilies are a trace's client, server and third party (a router
// sending errors) in IPv4 and IPv6.
var traceFamilies = []struct {
	fam     int
	c, s, r net.IP
}{
	{4, net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4(), net.ParseIP("203.0.113.1").To4()},
	{6, net.ParseIP("2001:db8::1"), net.ParseIP("2001:db8:1::1"), net.ParseIP("2001:db8:2::1")},
}

// compareTraces sends every trace in both families through the reference
// and the firewall and compares each packet's state and, with verdicts,
// whether it passed.
func compareTraces(t *testing.T, ref *ctref.Ref, f *Firewall, verdicts bool) {
	fams := traceFamilies
	port := uint16(20000)
	for _, tr := range ctTraces(t) {
		for _, fm := range fams {
			if tr.family != 0 && tr.family != fm.fam {
				continue
			}
			port += 100
			for i, st := range tr.steps(fm.c, fm.s, fm.r, port) {
				if st.wait {
					time.Sleep(1500 * time.Millisecond)
					skewClock(t, f, 31*time.Second)
				}
				wantState, wantPass, err := ref.SendVerdict(st.frame)
				if err != nil {
					t.Fatalf("IPv%d %s, step %d (%s): nftables: %v", fm.fam, tr.name, i+1, st.what, err)
				}
				gotState, got := ctStateOf(t, f, st.frame)
				want := map[bool]uint32{true: xdpPass, false: xdpDrop}[wantPass]
				if gotState != wantState || (verdicts && got != want) {
					t.Errorf("IPv%d %s, step %d (%s): %s %s, nftables: %s %s", fm.fam, tr.name, i+1, st.what,
						gotState, verdictName(got), wantState, verdictName(want))
				}
			}
		}
	}
}

func installRules(t testing.TB, f *Firewall, text string) {
	t.Helper()
	rs, err := ParseRules("rules.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Install(rs); err != nil {
		t.Fatal(err)
	}
}

// ctFirewall is a firewall, closed when the test ends, running rules.
func ctFirewall(t *testing.T, rules string) *Firewall {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	f, err := Load(LoadOptions{MaxFlows: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	installRules(t, f, rules)
	return f
}

// statefulService is a firewall whose rules pass established and related
// packets and new TCP connections to port 80, and drop the rest.
func statefulService(t *testing.T) *Firewall {
	return ctFirewall(t, statefulServiceRules)
}

// The first rule of nearly every stateful firewall: established and related
// pass, new only to a service; a new packet that is dropped leaves no entry,
// so its answer is no reply of anything.
func TestCtStateRules(t *testing.T) {
	f := statefulService(t)
	c, s := net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4()
	for _, st := range []struct {
		what     string
		from, to net.IP
		s        seg
		want     uint32
	}{
		{"SYN to the service", c, s, seg{sport: 30000, dport: 80, seq: 1, flags: "S"}, xdpPass},
		{"its SYN/ACK", s, c, seg{sport: 80, dport: 30000, seq: 100, ack: 2, flags: "SA"}, xdpPass},
		{"ACK", c, s, seg{sport: 30000, dport: 80, seq: 2, ack: 101, flags: "A"}, xdpPass},
		{"data, twice (the second from the flow cache)", c, s, seg{sport: 30000, dport: 80, seq: 2, ack: 101, flags: "PA", data: 10}, xdpPass},
		{"data again", c, s, seg{sport: 30000, dport: 80, seq: 12, ack: 101, flags: "PA", data: 10}, xdpPass},
		{"ACK far out of window (invalid)", c, s, seg{sport: 30000, dport: 80, seq: 1 << 30, ack: 101, flags: "A"}, xdpDrop},
		{"SYN to another port", c, s, seg{sport: 30001, dport: 81, seq: 1, flags: "S"}, xdpDrop},
		{"a SYN/ACK as if it had passed", s, c, seg{sport: 81, dport: 30001, seq: 100, ack: 2, flags: "SA"}, xdpDrop},
		{"a server opening a connection", s, c, seg{sport: 80, dport: 30002, seq: 1, flags: "S"}, xdpDrop},
	} {
		if got := run(t, f, ctFrame(t, st.from, st.to, layers.IPProtocolTCP, st.s.layers()...)); got != st.want {
			t.Errorf("%s: %s, want %s", st.what, verdictName(got), verdictName(st.want))
		}
	}
	conns, err := f.Conns()
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 1 || conns[0].State != "ESTABLISHED" || !conns[0].Assured || conns[0].Table != "established" ||
		conns[0].SPort != 30000 || conns[0].Src.String() != "192.0.2.1" {
		t.Errorf("connections %+v: want the one to port 80, assured, in the established table", conns)
	}
}

// A flood of new connections churns the embryonic table, never the
// established one: a connection that completed its handshake before the
// flood is still known after 3 tables' worth of spoofed SYNs.
func TestCtFloodKeepsEstablished(t *testing.T) {
	f := statefulService(t)
	c, s := net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4()
	for _, st := range []struct {
		from, to net.IP
		s        seg
	}{
		{c, s, seg{sport: 30000, dport: 80, seq: 1, flags: "S"}},
		{s, c, seg{sport: 80, dport: 30000, seq: 100, ack: 2, flags: "SA"}},
		{c, s, seg{sport: 30000, dport: 80, seq: 2, ack: 101, flags: "A"}},
	} {
		run(t, f, ctFrame(t, st.from, st.to, layers.IPProtocolTCP, st.s.layers()...))
	}
	n := int(f.objs.FwCtNew.MaxEntries()) * 3
	syn := ctFrame(t, net.IPv4(10, 0, 0, 1).To4(), s, layers.IPProtocolTCP, seg{sport: 1, dport: 80, seq: 1, flags: "S"}.layers()...)
	for i := range n {
		// Another source and port each time; the checksums are not
		// checked on the way in.
		syn[14+12+1], syn[14+12+2], syn[14+12+3] = byte(i>>16), byte(i>>8), byte(i)
		syn[34], syn[35] = byte(i>>8), byte(i)|1
		if got := run(t, f, syn); got != xdpPass {
			t.Fatalf("flood SYN %d: %s", i, verdictName(got))
		}
	}
	cnt, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt["ct_created"] < uint64(n) {
		t.Errorf("%d entries created for %d SYNs", cnt["ct_created"], n)
	}
	if got := run(t, f, ctFrame(t, s, c, layers.IPProtocolTCP, seg{sport: 80, dport: 30000, seq: 101, ack: 2, flags: "PA", data: 10}.layers()...)); got != xdpPass {
		t.Errorf("the established connection's data after the flood: %s", verdictName(got))
	}
	st, err := f.ConntrackStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Established != 1 || st.Embryonic == 0 || st.Embryonic > int(st.EmbryoMax) {
		t.Errorf("after the flood: %d established, %d of %d embryonic entries", st.Established, st.Embryonic, st.EmbryoMax)
	}
}

// fw ct gc removes expired connections, flush all; the metrics name them.
func TestCtExpireFlushMetrics(t *testing.T) {
	f := ctFirewall(t, "[conntrack]\nenabled = true\n")
	c, s := net.ParseIP("2001:db8::1"), net.ParseIP("2001:db8:1::1")
	udp := func(sp, dp uint16) []byte {
		return ctFrame(t, c, s, layers.IPProtocolUDP, &layers.UDP{SrcPort: layers.UDPPort(sp), DstPort: layers.UDPPort(dp)}, gopacket.Payload([]byte("x")))
	}
	run(t, f, udp(1000, 53))
	run(t, f, ctFrame(t, c, s, layers.IPProtocolTCP, seg{sport: 1001, dport: 80, seq: 1, flags: "S"}.layers()...))
	conns, err := f.Conns()
	if err != nil || len(conns) != 2 {
		t.Fatalf("connections %+v, %v: want 2", conns, err)
	}
	b, err := scrapeCollector(f.Collector("ct", MetricsOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`fastpath_fw_ct_packets_total{name="ct",state="new"} 2`, `fastpath_fw_ct_entries{name="ct",table="embryonic"} 2`, `fastpath_fw_ct_tcp_connections{name="ct",state="syn_sent"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s:\n%s", want, b)
		}
	}
	// UDP lives 30 s unanswered, a SYN 120 s.
	skewClock(t, f, 60*time.Second)
	if n, err := f.ExpireConns(); err != nil || n != 1 {
		t.Errorf("expire after 60 s: %d removed, %v; want the UDP one", n, err)
	}
	if n, err := f.FlushConns(); err != nil || n != 1 {
		t.Errorf("flush: %d removed, %v; want 1", n, err)
	}
	if conns, _ := f.Conns(); len(conns) != 0 {
		t.Errorf("after flush: %+v", conns)
	}
}

// TestCtRulesAgreeWithNftables runs the traces through rule sets written
// for both, fastpath's rules file and nft statements: every packet's state
// and verdict equal. A new packet a rule drops leaves no entry on either
// side, so the traces go on differently than without rules.
func TestCtRulesAgreeWithNftables(t *testing.T) {
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	sets := []struct {
		name, rules string
		policy      string
		nft         []string
	}{
		{"a stateful service", `
default = "drop"
[[rule]]
action = "pass"
ct_state = ["established", "related"]
[[rule]]
action = "pass"
ct_state = "new"
proto = "tcp"
dport = 80
[[rule]]
action = "pass"
ct_state = "new"
proto = "udp"
[[rule]]
action = "pass"
ct_state = "new"
proto = "icmp"
[[rule]]
action = "pass"
ct_state = "new"
proto = "icmpv6"
`, "drop", []string{
			"ct state established,related accept",
			"ct state new meta l4proto tcp th dport 80 accept",
			"ct state new meta l4proto udp accept",
			"ct state new meta l4proto { icmp, ipv6-icmp } accept",
		}},
		{"invalid dropped, the server opens nothing", `
[[rule]]
action = "drop"
ct_state = "invalid"
[[rule]]
action = "drop"
ct_state = "new"
src = "198.51.100.1"
[[rule]]
action = "drop"
ct_state = "new"
src = "2001:db8:1::1"
`, "accept", []string{
			"ct state invalid drop",
			"ct state new ip saddr 198.51.100.1 drop",
			"ct state new ip6 saddr 2001:db8:1::1 drop",
		}},
	}
	for _, set := range sets {
		t.Run(set.name, func(t *testing.T) {
			b := make([]byte, 2)
			rand.Read(b)
			ref, err := ctref.Open("fp-ctr" + hex.EncodeToString(b))
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			if err := ref.Sysctl("net/netfilter/nf_conntrack_udp_timeout", "1"); err != nil {
				t.Fatal(err)
			}
			if err := ref.Filter(set.policy, set.nft); err != nil {
				t.Fatal(err)
			}
			f := ctFirewall(t, set.rules)
			compareTraces(t, ref, f, true)
		})
	}
}

// strict = true makes invalid what conntrack lets through unchanged.
func TestCtStrict(t *testing.T) {
	f := ctFirewall(t, "[conntrack]\nenabled = true\nstrict = true\n")
	c, s := net.ParseIP("192.0.2.1").To4(), net.ParseIP("198.51.100.1").To4()
	for _, st := range []struct {
		what     string
		from, to net.IP
		s        seg
		want     string
	}{
		{"SYN", c, s, seg{sport: 30000, dport: 80, seq: 1, flags: "S"}, ctref.New},
		{"SYN/ACK", s, c, seg{sport: 80, dport: 30000, seq: 100, ack: 2, flags: "SA"}, ctref.Established},
		{"ACK", c, s, seg{sport: 30000, dport: 80, seq: 2, ack: 101, flags: "A"}, ctref.Established},
		{"a SYN on the live connection (conntrack: ignored, established)", c, s, seg{sport: 30000, dport: 80, seq: 5000, flags: "S"}, ctref.Invalid},
		{"an old retransmission far behind (conntrack: ignored)", c, s, seg{sport: 30000, dport: 80, seq: 1 << 31, ack: 101, flags: "A", data: 10}, ctref.Invalid},
		{"data in window", c, s, seg{sport: 30000, dport: 80, seq: 2, ack: 101, flags: "PA", data: 10}, ctref.Established},
	} {
		if got, _ := ctStateOf(t, f, ctFrame(t, st.from, st.to, layers.IPProtocolTCP, st.s.layers()...)); got != st.want {
			t.Errorf("%s: %s, want %s", st.what, got, st.want)
		}
	}
	rs, err := f.Rules()
	if err != nil || rs.Conntrack == nil || !rs.Conntrack.Strict {
		t.Errorf("rules read back: conntrack %+v, %v; want strict", rs.Conntrack, err)
	}
}
