package fw

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/checksum"
)

const xdpTx = 3

var (
	clientMAC = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	routerMAC = net.HardwareAddr{2, 0, 0, 0, 0, 2}
)

// spSeg is a TCP segment between two ends, as the tests send and expect it.
type spSeg struct {
	src, dst       netip.AddrPort
	seq, ack       uint32
	syn, ack_, psh bool
	rst            bool
	win            uint16
	mss            uint16 // an MSS option, if not 0
	full           bool   // the options a Linux client's SYN carries besides the MSS
	payload        []byte
}

func (s spSeg) frame(t testing.TB, srcMAC, dstMAC net.HardwareAddr) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC}
	var ipl gopacket.SerializableLayer
	var netl gopacket.NetworkLayer
	if s.src.Addr().Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolTCP,
			SrcIP: s.src.Addr().AsSlice(), DstIP: s.dst.Addr().AsSlice()}
		ipl, netl = ip, ip
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP,
			SrcIP: s.src.Addr().AsSlice(), DstIP: s.dst.Addr().AsSlice()}
		ipl, netl = ip, ip
	}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(s.src.Port()), DstPort: layers.TCPPort(s.dst.Port()), Seq: s.seq,
		Ack: s.ack, SYN: s.syn, ACK: s.ack_, PSH: s.psh, RST: s.rst, Window: s.win}
	if s.mss != 0 {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindMSS, OptionLength: 4,
			OptionData: binary.BigEndian.AppendUint16(nil, s.mss)})
	}
	if s.full {
		tcp.Options = append(tcp.Options,
			layers.TCPOption{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
			layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)},
			layers.TCPOption{OptionType: layers.TCPOptionKindNop},
			layers.TCPOption{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}})
	}
	tcp.SetNetworkLayerForChecksum(netl)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ipl, tcp, gopacket.Payload(s.payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkSeg decodes a frame the program wrote, checks its checksums with
// the Go implementation, and compares it with the segment expected.
func checkSeg(t *testing.T, frame []byte, want spSeg, srcMAC, dstMAC net.HardwareAddr, ttl uint8) *layers.TCP {
	t.Helper()
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if eth == nil || tcp == nil {
		t.Fatalf("not a TCP frame: %v", p)
	}
	if !bytes.Equal(eth.SrcMAC, srcMAC) || !bytes.Equal(eth.DstMAC, dstMAC) {
		t.Errorf("MACs %v > %v, want %v > %v", eth.SrcMAC, eth.DstMAC, srcMAC, dstMAC)
	}
	var pseudo []byte
	var src, dst netip.Addr
	var l4 []byte
	if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
		if ck := checksum.Fold(checksum.Sum(ip.Contents, 0)); ck != 0xffff {
			t.Errorf("IPv4 header checksum %#04x wrong", ip.Checksum)
		}
		// Ethernet pads a frame to 60 bytes.
		if int(ip.Length) != len(ip.Contents)+len(ip.Payload) || len(frame) != 14+int(ip.Length) && len(frame) != max(60, 14+int(ip.Length)) {
			t.Errorf("IPv4 length %d, frame %d", ip.Length, len(frame))
		}
		if ttl != 0 && ip.TTL != ttl {
			t.Errorf("TTL %d, want %d", ip.TTL, ttl)
		}
		l4 = ip.Payload
		pseudo = append(append(append([]byte{}, ip.SrcIP.To4()...), ip.DstIP.To4()...), 0, 6, byte(len(l4)>>8), byte(len(l4)))
	} else {
		ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
		if int(ip.Length) != len(ip.Payload) || len(frame) != 54+int(ip.Length) {
			t.Errorf("IPv6 payload length %d, frame %d", ip.Length, len(frame))
		}
		if ttl != 0 && ip.HopLimit != ttl {
			t.Errorf("hop limit %d, want %d", ip.HopLimit, ttl)
		}
		l4 = ip.Payload
		pseudo = append(append([]byte{}, ip.SrcIP...), ip.DstIP...)
		pseudo = append(pseudo, 0, 0, byte(len(l4)>>8), byte(len(l4)), 0, 0, 0, 6)
	}
	if ck := checksum.Fold(checksum.Sum(l4, checksum.Sum(pseudo, 0))); ck != 0xffff {
		t.Errorf("TCP checksum %#04x wrong", tcp.Checksum)
	}
	got := spSeg{src: netip.AddrPortFrom(src, uint16(tcp.SrcPort)), dst: netip.AddrPortFrom(dst, uint16(tcp.DstPort)),
		seq: tcp.Seq, ack: tcp.Ack, syn: tcp.SYN, ack_: tcp.ACK, psh: tcp.PSH, rst: tcp.RST, win: tcp.Window, payload: tcp.Payload}
	var opts []layers.TCPOptionKind
	for _, o := range tcp.Options {
		if o.OptionType == layers.TCPOptionKindMSS {
			got.mss = binary.BigEndian.Uint16(o.OptionData)
		}
		opts = append(opts, o.OptionType)
	}
	if want.mss != 0 && (len(opts) != 1 || opts[0] != layers.TCPOptionKindMSS) {
		t.Errorf("options %v, want the MSS alone", opts)
	}
	if want.mss == 0 && len(opts) != 0 {
		t.Errorf("options %v, want none", opts)
	}
	if tcp.FIN || tcp.URG {
		t.Errorf("flags FIN %v URG %v", tcp.FIN, tcp.URG)
	}
	if want.win == 0 {
		got.win = 0 // not checked
	}
	if got.payload == nil {
		got.payload = []byte{}
	}
	if want.payload == nil {
		want.payload = []byte{}
	}
	if got.src != want.src || got.dst != want.dst || got.seq != want.seq || got.ack != want.ack ||
		got.syn != want.syn || got.ack_ != want.ack_ || got.psh != want.psh || got.rst != want.rst || got.win != want.win ||
		got.mss != want.mss || !bytes.Equal(got.payload, want.payload) {
		t.Errorf("wrote %+v\nwant  %+v", got, want)
	}
	return tcp
}

// newSynproxy loads a firewall whose one rule synproxies TCP to port 80
// (which turns tracking on), with a TTL of 61 for the proxy's packets.
func newSynproxy(t testing.TB) *Firewall {
	t.Helper()
	f := newFirewall(t, `
[[rule]]
action = "synproxy"
proto = "tcp"
dport = 80
`)
	if err := f.updateConfig(func(c *fwFwConfig) { c.SynproxyTtl = 61 }); err != nil {
		t.Fatal(err)
	}
	return f
}

func runOut(t testing.TB, f *Firewall, frame []byte) (uint32, []byte) {
	t.Helper()
	opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, 512)}
	ret, err := f.Program().Run(&opts)
	if err != nil {
		t.Fatal(err)
	}
	return ret, opts.DataOut
}

func counter(t testing.TB, f *Firewall, c fwFwCounter) uint64 {
	t.Helper()
	var per []uint64
	if err := f.objs.FwCounters.Lookup(uint32(c), &per); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, v := range per {
		sum += v
	}
	return sum
}

// TestSynproxy takes a connection through the proxy's handshake and on:
// the client's SYN, a forged and the valid cookie ACK, the server's
// SYN/ACK, then data both ways, checking each frame the program writes.
func TestSynproxy(t *testing.T) {
	for name, c := range map[string]struct {
		client, server netip.AddrPort
		clientMSS      uint16 // what the client's SYN offers
		cookieMSS      uint16 // the cookie table's value for it
	}{
		"ipv4":           {netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.1.2:80"), 1460, 1460},
		"ipv4 small mss": {netip.MustParseAddrPort("10.0.0.1:40001"), netip.MustParseAddrPort("10.0.1.2:80"), 1400, 1300},
		"ipv6":           {netip.MustParseAddrPort("[fd00::1]:40000"), netip.MustParseAddrPort("[fd00:1::2]:80"), 1440, 1440},
	} {
		t.Run(name, func(t *testing.T) {
			f := newSynproxy(t)
			cl, sv := c.client, c.server
			const isn, sisn = 1000, 3000000000

			// The SYN: answered with a cookie, no entry.
			syn := spSeg{src: cl, dst: sv, seq: isn, syn: true, win: 64240, mss: c.clientMSS, full: true}
			ret, out := runOut(t, f, syn.frame(t, clientMAC, routerMAC))
			if ret != xdpTx {
				t.Fatalf("SYN: verdict %d, want XDP_TX", ret)
			}
			cookie := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default).
				Layer(layers.LayerTypeTCP).(*layers.TCP).Seq
			checkSeg(t, out, spSeg{src: sv, dst: cl, seq: cookie, ack: isn + 1, syn: true, ack_: true, win: 65535,
				mss: c.cookieMSS}, routerMAC, clientMAC, 61)
			if n := counter(t, f, fwFwCounterFW_C_SYNPROXY_SYN); n != 1 {
				t.Errorf("synproxy_syn %d, want 1", n)
			}
			if n := counter(t, f, fwFwCounterFW_C_CT_CREATED); n != 0 {
				t.Errorf("the SYN created %d entries", n)
			}

			// A forged ACK: dropped.
			forged := spSeg{src: cl, dst: sv, seq: isn + 1, ack: cookie + 1 + 4096, ack_: true, win: 502}
			if ret, _ := runOut(t, f, forged.frame(t, clientMAC, routerMAC)); ret != xdpDrop {
				t.Fatalf("forged ACK: verdict %d, want XDP_DROP", ret)
			}
			if n := counter(t, f, fwFwCounterFW_C_SYNPROXY_ACK_BAD); n != 1 {
				t.Errorf("synproxy_ack_bad %d, want 1", n)
			}

			// The valid ACK: the client's SYN again, to the server.
			ack := spSeg{src: cl, dst: sv, seq: isn + 1, ack: cookie + 1, ack_: true, win: 502}
			ret, out = runOut(t, f, ack.frame(t, clientMAC, routerMAC))
			if ret != xdpPass {
				t.Fatalf("cookie ACK: verdict %d, want XDP_PASS", ret)
			}
			checkSeg(t, out, spSeg{src: cl, dst: sv, seq: isn, syn: true, win: 502, mss: c.cookieMSS}, clientMAC, routerMAC, 64)
			if n := counter(t, f, fwFwCounterFW_C_SYNPROXY_ACK_OK); n != 1 {
				t.Errorf("synproxy_ack_ok %d, want 1", n)
			}

			// The client's data before the server answered: the SYN
			// again, in case that was lost; the client resends the data.
			req := spSeg{src: cl, dst: sv, seq: isn + 1, ack: cookie + 1, ack_: true, psh: true, win: 502, payload: []byte("GET /")}
			ret, out = runOut(t, f, req.frame(t, clientMAC, routerMAC))
			if ret != xdpPass {
				t.Fatalf("early data: verdict %d, want XDP_PASS", ret)
			}
			checkSeg(t, out, spSeg{src: cl, dst: sv, seq: isn, syn: true, win: 502, mss: c.cookieMSS}, clientMAC, routerMAC, 64)

			// The server's SYN/ACK: the client's ACK, back to the server;
			// again for a SYN/ACK resent (our ACK was lost).
			synack := spSeg{src: sv, dst: cl, seq: sisn, ack: isn + 1, syn: true, ack_: true, win: 65160, mss: 1460}
			ret, out = runOut(t, f, synack.frame(t, serverMAC, routerMAC))
			if ret != xdpTx {
				t.Fatalf("server SYN/ACK: verdict %d, want XDP_TX", ret)
			}
			checkSeg(t, out, spSeg{src: cl, dst: sv, seq: isn + 1, ack: sisn + 1, ack_: true, win: 502}, routerMAC, serverMAC, 61)
			ret, out = runOut(t, f, synack.frame(t, serverMAC, routerMAC))
			if ret != xdpTx {
				t.Fatalf("server SYN/ACK resent: verdict %d, want XDP_TX", ret)
			}
			checkSeg(t, out, spSeg{src: cl, dst: sv, seq: isn + 1, ack: sisn + 1, ack_: true, win: 502}, routerMAC, serverMAC, 61)
			if n := counter(t, f, fwFwCounterFW_C_SYNPROXY_OPENED); n != 1 {
				t.Errorf("synproxy_opened %d, want 1", n)
			}

			// Data both ways, shifted by cookie - server ISN.
			ret, out = runOut(t, f, req.frame(t, clientMAC, routerMAC))
			if ret != xdpPass {
				t.Fatalf("client data: verdict %d, want XDP_PASS", ret)
			}
			want := req
			want.ack = sisn + 1
			checkSeg(t, out, want, clientMAC, routerMAC, 64)

			resp := spSeg{src: sv, dst: cl, seq: sisn + 1, ack: isn + 6, ack_: true, psh: true, win: 509, payload: []byte("200 OK")}
			ret, out = runOut(t, f, resp.frame(t, serverMAC, routerMAC))
			if ret != xdpPass {
				t.Fatalf("server data: verdict %d, want XDP_PASS", ret)
			}
			want = resp
			want.seq = cookie + 1
			checkSeg(t, out, want, serverMAC, routerMAC, 64)
		})
	}
}

var serverMAC = net.HardwareAddr{2, 0, 0, 0, 0, 3}

// spOpen takes a client through the cookie handshake: the proxy's SYN to the
// server is out, the entry waits for the server. It returns the cookie.
func spOpen(t *testing.T, f *Firewall, cl, sv netip.AddrPort, isn uint32) uint32 {
	t.Helper()
	ret, out := runOut(t, f, spSeg{src: cl, dst: sv, seq: isn, syn: true, win: 64240, mss: 1460}.frame(t, clientMAC, routerMAC))
	if ret != xdpTx {
		t.Fatalf("SYN: verdict %d, want XDP_TX", ret)
	}
	cookie := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeTCP).(*layers.TCP).Seq
	if ret, _ := runOut(t, f, spSeg{src: cl, dst: sv, seq: isn + 1, ack: cookie + 1, ack_: true, win: 502}.frame(t, clientMAC, routerMAC)); ret != xdpPass {
		t.Fatalf("cookie ACK: verdict %d, want XDP_PASS", ret)
	}
	return cookie
}

// conn is the tracked connection between two ends, nil if there is none.
func conn(t *testing.T, f *Firewall, a, b netip.AddrPort) *Conn {
	t.Helper()
	conns, err := f.Conns()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		x, y := netip.AddrPortFrom(c.Src, c.SPort), netip.AddrPortFrom(c.Dst, c.DPort)
		if (x == a && y == b) || (x == b && y == a) {
			return &c
		}
	}
	return nil
}

// A server that refuses the proxied SYN: only an RST that acknowledges that
// SYN is taken (rewritten into the cookie's sequence space for the client),
// and it ends the connection, so that the client's next SYN from the same
// port is a new connection with its own ISN. A blind RST is dropped.
func TestSynproxyRefused(t *testing.T) {
	f := newSynproxy(t)
	cl, sv := netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.1.2:80")
	const isn = 1000
	cookie := spOpen(t, f, cl, sv, isn)

	blind := spSeg{src: sv, dst: cl, seq: 0, ack: isn + 77, ack_: true, rst: true}
	if ret, _ := runOut(t, f, blind.frame(t, serverMAC, routerMAC)); ret != xdpDrop {
		t.Fatalf("RST acking what the proxy never sent: verdict %d, want XDP_DROP", ret)
	}
	if conn(t, f, cl, sv) == nil {
		t.Fatal("a blind RST ended the connection")
	}
	rst := spSeg{src: sv, dst: cl, seq: 0, ack: isn + 1, ack_: true, rst: true}
	ret, out := runOut(t, f, rst.frame(t, serverMAC, routerMAC))
	if ret != xdpPass {
		t.Fatalf("server RST: verdict %d, want XDP_PASS", ret)
	}
	want := rst
	want.seq = cookie + 1
	checkSeg(t, out, want, serverMAC, routerMAC, 64)
	if c := conn(t, f, cl, sv); c != nil {
		t.Fatalf("the refused connection is still tracked: %v", c)
	}

	// The client tries again from the same port: its new ISN goes to the
	// server, not the old one.
	spOpen(t, f, cl, sv, 5000)
	ret, out = runOut(t, f, spSeg{src: cl, dst: sv, seq: 5001, ack: 1, ack_: true, psh: true, win: 502,
		payload: []byte("x")}.frame(t, clientMAC, routerMAC))
	if ret != xdpPass {
		t.Fatalf("data before the server answered: verdict %d, want XDP_PASS (the SYN again)", ret)
	}
	checkSeg(t, out, spSeg{src: cl, dst: sv, seq: 5000, syn: true, win: 502, mss: 1460}, clientMAC, routerMAC, 64)
}

// A proxied connection's windows are tracked in one sequence space: a
// server that speaks first (SSH, SMTP) and a client that acknowledges it
// make the connection established with the established timeout (not the
// timeout of data never acknowledged), and a blind RST far outside the
// window is invalid and leaves the connection as it was.
func TestSynproxyWindows(t *testing.T) {
	f := newSynproxy(t)
	if err := f.updateConfig(func(c *fwFwConfig) { c.CtFlags &^= ctfLiberal }); err != nil {
		t.Fatal(err)
	}
	cl, sv := netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.1.2:80")
	const isn, sisn = 1000, 3000000000
	cookie := spOpen(t, f, cl, sv, isn)
	if ret, _ := runOut(t, f, spSeg{src: sv, dst: cl, seq: sisn, ack: isn + 1, syn: true, ack_: true, win: 65160,
		mss: 1460}.frame(t, serverMAC, routerMAC)); ret != xdpTx {
		t.Fatalf("server SYN/ACK: verdict %d, want XDP_TX", ret)
	}
	banner := []byte("SSH-2.0-OpenSSH_9.2\r\n")
	if ret, _ := runOut(t, f, spSeg{src: sv, dst: cl, seq: sisn + 1, ack: isn + 1, ack_: true, psh: true, win: 509,
		payload: banner}.frame(t, serverMAC, routerMAC)); ret != xdpPass {
		t.Fatalf("the server's banner: verdict %d, want XDP_PASS", ret)
	}
	// The client acknowledges the banner in the cookie's space.
	ack := cookie + 1 + uint32(len(banner))
	if ret, _ := runOut(t, f, spSeg{src: cl, dst: sv, seq: isn + 1, ack: ack, ack_: true, win: 502}.frame(t, clientMAC, routerMAC)); ret != xdpPass {
		t.Fatalf("the client's ACK of the banner: verdict %d, want XDP_PASS", ret)
	}
	before := conn(t, f, cl, sv)
	if before == nil {
		t.Fatal("no connection")
	}
	if left := time.Until(before.Expires); left < time.Hour {
		t.Fatalf("an established proxied connection expires in %v: its ACKs were not taken", left.Round(time.Second))
	}
	cnt, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt["ct_ignored"] != 0 {
		t.Errorf("%d segments ignored by window tracking", cnt["ct_ignored"])
	}
	// A blind RST from "the client" at half the sequence space away.
	runOut(t, f, spSeg{src: cl, dst: sv, seq: isn + 1 + 1<<31, ack: ack, ack_: true, rst: true, win: 0}.frame(t, clientMAC, routerMAC))
	after := conn(t, f, cl, sv)
	if after == nil || after.State != before.State || after.Expires.Before(before.Expires.Add(-time.Minute)) {
		t.Fatalf("a blind RST changed the connection: before %v, after %v", before, after)
	}
}

// The synproxy rule passes what its handshake opened, never what no
// connection explains: an RST or a SYN/ACK to or from its port without a
// connection, a proxied connection's segment outside the windows.
func TestSynproxyRuleDropsInvalid(t *testing.T) {
	f := newSynproxy(t)
	cl, sv := netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.1.2:80")
	if ret, _ := runOut(t, f, spSeg{src: cl, dst: sv, seq: 1, rst: true}.frame(t, clientMAC, routerMAC)); ret != xdpDrop {
		t.Errorf("an RST to the port without a connection: verdict %d, want XDP_DROP", ret)
	}
	if n := counter(t, f, fwFwCounterFW_C_SYNPROXY_INVALID); n != 1 {
		t.Errorf("synproxy_invalid %d, want 1", n)
	}
	const isn, sisn = 1000, 3000000000
	cookie := spOpen(t, f, cl, sv, isn)
	if ret, _ := runOut(t, f, spSeg{src: sv, dst: cl, seq: sisn, ack: isn + 1, syn: true, ack_: true, win: 65160,
		mss: 1460}.frame(t, serverMAC, routerMAC)); ret != xdpTx {
		t.Fatalf("server SYN/ACK: verdict %d, want XDP_TX", ret)
	}
	far := spSeg{src: cl, dst: sv, seq: isn + 1 + 1<<30, ack: cookie + 1, ack_: true, psh: true, win: 502, payload: []byte("x")}
	if ret, _ := runOut(t, f, far.frame(t, clientMAC, routerMAC)); ret != xdpDrop {
		t.Errorf("data a gigabyte past the window: verdict %d, want XDP_DROP", ret)
	}
	ok := spSeg{src: cl, dst: sv, seq: isn + 1, ack: cookie + 1, ack_: true, psh: true, win: 502, payload: []byte("x")}
	if ret, _ := runOut(t, f, ok.frame(t, clientMAC, routerMAC)); ret != xdpPass {
		t.Errorf("data in the window: verdict %d, want XDP_PASS", ret)
	}
}

// BenchmarkSynproxy measures, with BPF_PROG_TEST_RUN's repeat, what an ACK
// flood's packet costs (a cookie checked and refused) and what a proxied
// connection's packet costs (its seq shifted). The SYN's answer rewrites
// the frame, which repeat does not restore: TestSynproxyFlood measures it.
func BenchmarkSynproxy(b *testing.B) {
	t := b
	f := newSynproxy(t)
	cl, sv := netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.1.2:80")
	_, out := runOut(t, f, spSeg{src: cl, dst: sv, seq: 1000, syn: true, win: 64240, mss: 1460}.frame(t, clientMAC, routerMAC))
	cookie := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeTCP).(*layers.TCP).Seq
	runOut(t, f, spSeg{src: cl, dst: sv, seq: 1001, ack: cookie + 1, ack_: true, win: 502}.frame(t, clientMAC, routerMAC))
	if ret, _ := runOut(t, f, spSeg{src: sv, dst: cl, seq: 5000, ack: 1001, syn: true, ack_: true, win: 65160,
		mss: 1460}.frame(t, serverMAC, routerMAC)); ret != xdpTx {
		b.Fatalf("server SYN/ACK: verdict %d", ret)
	}
	// A connection the proxy did not open, to port 81, for comparison.
	plain := netip.AddrPortFrom(sv.Addr(), 81)
	runOut(t, f, spSeg{src: cl, dst: plain, seq: 1000, syn: true, win: 64240, mss: 1460}.frame(t, clientMAC, routerMAC))
	runOut(t, f, spSeg{src: plain, dst: cl, seq: 5000, ack: 1001, syn: true, ack_: true, win: 65160, mss: 1460}.frame(t, serverMAC, routerMAC))
	runOut(t, f, spSeg{src: cl, dst: plain, seq: 1001, ack: 5001, ack_: true, win: 502}.frame(t, clientMAC, routerMAC))
	for name, c := range map[string]struct {
		frame []byte
		want  uint32
	}{
		"plain": {spSeg{src: plain, dst: cl, seq: 5001, ack: 1001, ack_: true, win: 509,
			payload: make([]byte, 1400)}.frame(t, serverMAC, routerMAC), xdpPass},
		"ack-bad": {spSeg{src: netip.MustParseAddrPort("10.0.0.9:40000"), dst: sv, seq: 1, ack: 12345, ack_: true,
			win: 502}.frame(t, clientMAC, routerMAC), xdpDrop},
		"shift": {spSeg{src: sv, dst: cl, seq: 5001, ack: 1001, ack_: true, win: 509,
			payload: make([]byte, 1400)}.frame(t, serverMAC, routerMAC), xdpPass},
	} {
		b.Run(name, func(b *testing.B) {
			ret, d, err := f.Program().Benchmark(c.frame, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			if ret != c.want {
				b.Fatalf("verdict %d, want %d", ret, c.want)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/pkt")
		})
	}
}
