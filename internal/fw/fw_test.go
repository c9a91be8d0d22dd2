package fw

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/fastpath-dev/fastpath/internal/lab"
)

const (
	xdpDrop = 1
	xdpPass = 2
)

// packet builds an Ethernet frame for a flow, with a payload of size bytes.
func packet(t testing.TB, fl Flow, size int) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	var ls []gopacket.SerializableLayer
	var netl gopacket.NetworkLayer
	if fl.Src.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocol(fl.Proto), SrcIP: fl.Src.AsSlice(), DstIP: fl.Dst.AsSlice()}
		ls, netl = append(ls, eth, ip), ip
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocol(fl.Proto), SrcIP: fl.Src.AsSlice(), DstIP: fl.Dst.AsSlice()}
		ls, netl = append(ls, eth, ip), ip
	}
	switch fl.Proto {
	case 6:
		tcp := &layers.TCP{SrcPort: layers.TCPPort(fl.SPort), DstPort: layers.TCPPort(fl.DPort), SYN: true, Window: 1000}
		tcp.SetNetworkLayerForChecksum(netl)
		ls = append(ls, tcp)
	case 17:
		udp := &layers.UDP{SrcPort: layers.UDPPort(fl.SPort), DstPort: layers.UDPPort(fl.DPort)}
		udp.SetNetworkLayerForChecksum(netl)
		ls = append(ls, udp)
	case 1:
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0)})
	case 58:
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}
		ic.SetNetworkLayerForChecksum(netl)
		ls = append(ls, ic)
	}
	ls = append(ls, gopacket.Payload(make([]byte, size)))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func flow(src, dst string, proto Proto, sport, dport uint16) Flow {
	return Flow{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: proto, SPort: sport, DPort: dport}
}

// newFirewall loads an unpinned firewall with the rules installed.
func newFirewall(t testing.TB, rules string) *Firewall {
	t.Helper()
	f, err := Load(LoadOptions{MaxFlows: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if rules != "" {
		rs, err := ParseRules("test.toml", []byte(rules))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Install(rs); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func run(t testing.TB, f *Firewall, pkt []byte) uint32 {
	t.Helper()
	ret, err := f.Program().Run(&ebpf.RunOptions{Data: pkt})
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

func verdictName(v uint32) string {
	return map[uint32]string{xdpDrop: "drop", xdpPass: "pass"}[v]
}

const precedenceRules = `
default = "drop"

[[rule]]
action = "drop"
src = "10.1.2.0/24"
proto = "tcp"
dport = 22

[[rule]]
action = "pass"
src = "10.1.0.0/16"

[[rule]]
action = "pass"
dst = "192.0.2.0/24"
proto = "udp"
dport = "1000-2000"

[[rule]]
action = "drop"
proto = "udp"
sport = 53

[[rule]]
action = "pass"
proto = "udp"

[[rule]]
action = "pass"
src = "2001:db8::/32"
dst = "2001:db8:1::/48"
proto = "tcp"
dport = "80-89"

[[rule]]
action = "pass"
proto = "icmpv6"

[[rule]]
action = "drop"
src = "2001:db8::/32"
`

func TestRules(t *testing.T) {
	cases := []struct {
		name string
		fl   Flow
		want string
		rule int
	}{
		{"first match beats a later, broader pass", flow("10.1.2.3", "198.51.100.1", 6, 5000, 22), "drop", 1},
		{"same source, other port: the /16 pass", flow("10.1.2.3", "198.51.100.1", 6, 5000, 23), "pass", 2},
		{"same port, other protocol", flow("10.1.2.3", "198.51.100.1", 17, 5000, 22), "pass", 2},
		{"outside the /24, inside the /16", flow("10.1.3.3", "198.51.100.1", 6, 5000, 22), "pass", 2},
		{"range low edge", flow("203.0.113.1", "192.0.2.9", 17, 53, 1000), "pass", 3},
		{"range high edge", flow("203.0.113.1", "192.0.2.9", 17, 53, 2000), "pass", 3},
		{"just past the range: sport 53 drop", flow("203.0.113.1", "192.0.2.9", 17, 53, 2001), "drop", 4},
		{"other destination: sport 53 drop", flow("203.0.113.1", "198.51.100.9", 17, 53, 1500), "drop", 4},
		{"any udp", flow("203.0.113.1", "198.51.100.9", 17, 54, 1500), "pass", 5},
		{"tcp from nowhere: default", flow("203.0.113.1", "198.51.100.9", 6, 54, 80), "drop", 0},
		{"icmp: default", flow("203.0.113.1", "198.51.100.9", 1, 0, 0), "drop", 0},
		{"ipv6 all fields", flow("2001:db8::1", "2001:db8:1::5", 6, 40000, 85), "pass", 6},
		{"ipv6 port outside", flow("2001:db8::1", "2001:db8:1::5", 6, 40000, 90), "drop", 8},
		{"ipv6 dst outside", flow("2001:db8::1", "2001:db8:2::5", 6, 40000, 85), "drop", 8},
		{"ipv6 udp: any udp", flow("2001:db8::1", "2001:db8:1::5", 17, 40000, 85), "pass", 5},
		{"icmpv6", flow("2001:db8::1", "2001:db8:1::5", 58, 0, 0), "pass", 7},
		{"ipv6 elsewhere: default", flow("2001:db9::1", "2001:db8:1::5", 6, 1, 2), "drop", 0},
		{"ipv4 rule does not match mapped ipv6", flow("::ffff:10.1.2.3", "::ffff:10.0.0.1", 6, 5000, 80), "drop", 0},
	}
	f := newFirewall(t, precedenceRules)
	rs, _ := ParseRules("test.toml", []byte(precedenceRules))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if id, act := rs.Match(c.fl); id != c.rule || act.String() != c.want {
				t.Fatalf("oracle: rule %d %s, case says rule %d %s", id, act, c.rule, c.want)
			}
			// Twice: the first packet is classified, the second hits the
			// flow's cached verdict.
			for i := 0; i < 2; i++ {
				if got := verdictName(run(t, f, packet(t, c.fl, 32))); got != c.want {
					t.Fatalf("packet %d of %s: %s, want %s", i+1, c.fl, got, c.want)
				}
			}
			flows, err := f.Flows()
			if err != nil {
				t.Fatal(err)
			}
			for _, fs := range flows {
				if fs.Flow == c.fl {
					if int(fs.Rule) != c.rule || !fs.Current || fs.Packets != 2 {
						t.Fatalf("flow entry: rule %d current %v packets %d, want rule %d, current, 2 packets", fs.Rule, fs.Current, fs.Packets, c.rule)
					}
					return
				}
			}
			t.Fatalf("flow %s not in the flow table", c.fl)
		})
	}
}

// TestRandomAgainstOracle compares the kernel's verdicts with a plain
// first-match walk on random rule sets that nest and overlap.
func TestRandomAgainstOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for set := 0; set < 6; set++ {
		rs := randomRuleSet(rng, 50+set*200)
		f, err := Load(LoadOptions{MaxFlows: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Install(rs); err != nil {
			f.Close()
			t.Fatal(err)
		}
		for i := 0; i < 1500; i++ {
			fl := randomFlow(rng, rs)
			_, want := rs.Match(fl)
			got := run(t, f, packet(t, fl, 8))
			if verdictName(got) != want.String() {
				id, _ := rs.Match(fl)
				f.Close()
				t.Fatalf("set %d: %s: kernel %s, oracle %s (rule %d: %v)", set, fl, verdictName(got), want, id, ruleAt(rs, id))
			}
		}
		f.Close()
	}
}

func ruleAt(rs *RuleSet, id int) any {
	if id == 0 {
		return "default"
	}
	return rs.Rules[id-1]
}

// Addresses come from a small pool so that prefixes nest and packets hit them.
var pool4 = []string{"10.0.0.0", "10.1.0.0", "10.1.2.0", "10.1.2.3", "192.0.2.0", "192.0.2.128", "198.51.100.7"}
var pool6 = []string{"2001:db8::", "2001:db8:1::", "2001:db8:1:2::", "2001:db8:1:2::3", "fd00::", "fd00::1"}

func randomPrefix(rng *rand.Rand, v4 bool) Prefix {
	if v4 {
		a := netip.MustParseAddr(pool4[rng.IntN(len(pool4))])
		p, _ := a.Prefix([]int{0, 8, 16, 24, 25, 32}[rng.IntN(6)])
		return Prefix{p}
	}
	a := netip.MustParseAddr(pool6[rng.IntN(len(pool6))])
	p, _ := a.Prefix([]int{0, 16, 32, 48, 64, 128}[rng.IntN(6)])
	return Prefix{p}
}

func randomPorts(rng *rand.Rand) Ports {
	if rng.IntN(2) == 0 {
		return AnyPort
	}
	lo := uint16([]int{0, 22, 53, 80, 1000, 1024}[rng.IntN(6)])
	return Ports{lo, lo + uint16(rng.IntN(3)*500), true}
}

func randomRuleSet(rng *rand.Rand, n int) *RuleSet {
	rs := &RuleSet{Default: Action(rng.IntN(2))}
	for len(rs.Rules) < n {
		v4 := rng.IntN(3) > 0
		r := Rule{Action: Action(rng.IntN(2)), SPort: AnyPort, DPort: AnyPort}
		if rng.IntN(3) > 0 {
			r.Src = randomPrefix(rng, v4)
		}
		if rng.IntN(2) > 0 {
			r.Dst = randomPrefix(rng, v4)
		}
		switch rng.IntN(4) {
		case 0:
			r.Proto = 6
		case 1:
			r.Proto = 17
		case 2:
			if v4 && r.Src.IsValid() || r.Dst.IsValid() {
				r.Proto = map[bool]Proto{true: 1, false: 58}[v4]
			}
		}
		if r.Proto == 6 || r.Proto == 17 {
			r.SPort, r.DPort = randomPorts(rng), randomPorts(rng)
		}
		if r.Validate() == nil {
			rs.Rules = append(rs.Rules, r)
		}
	}
	return rs
}

func randomFlow(rng *rand.Rand, rs *RuleSet) Flow {
	v4 := rng.IntN(3) > 0
	addr := func() netip.Addr {
		pool := pool6
		if v4 {
			pool = pool4
		}
		b := netip.MustParseAddr(pool[rng.IntN(len(pool))]).AsSlice()
		b[len(b)-1] += byte(rng.IntN(3))
		if rng.IntN(4) == 0 {
			b[1] ^= byte(rng.IntN(256))
		}
		a, _ := netip.AddrFromSlice(b)
		return a
	}
	fl := Flow{Src: addr(), Dst: addr(), Proto: []Proto{6, 17, 1, 58}[rng.IntN(4)]}
	if v4 && fl.Proto == 58 {
		fl.Proto = 1
	}
	if !v4 && fl.Proto == 1 {
		fl.Proto = 58
	}
	if fl.Proto == 6 || fl.Proto == 17 {
		port := func() uint16 {
			return uint16([]int{0, 21, 22, 53, 80, 999, 1000, 1024, 1500, 2024, 40000}[rng.IntN(11)])
		}
		fl.SPort, fl.DPort = port(), port()
	}
	return fl
}

func TestBadRuleFiles(t *testing.T) {
	cases := map[string]struct{ file, want string }{
		"bad prefix":        {"[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/33\"\n", "test.toml:3"},
		"host bits":         {"\n[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.1/8\"\n", "did you mean 10.0.0.0/8"},
		"mixed families":    {"[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/8\"\ndst = \"2001:db8::/32\"\n", "test.toml:1: rule 1: src 10.0.0.0/8 and dst 2001:db8::/32"},
		"ports without l4":  {"[[rule]]\naction = \"drop\"\ndport = 22\n", "ports need proto"},
		"backward range":    {"[[rule]]\naction = \"drop\"\nproto = \"tcp\"\ndport = \"90-80\"\n", "test.toml:4: port range \"90-80\" runs backwards"},
		"port too big":      {"[[rule]]\naction = \"drop\"\nproto = \"tcp\"\ndport = 70000\n", "test.toml:4"},
		"unknown action":    {"[[rule]]\naction = \"reject\"\n", "unknown action \"reject\""},
		"missing action":    {"[[rule]]\naction = \"drop\"\n\n[[rule]]\nsrc = \"10.0.0.0/8\"\n", "test.toml:4: rule 2 has no action"},
		"unknown key":       {"[[rule]]\naction = \"drop\"\nsource = \"10.0.0.0/8\"\n", "test.toml:3: unknown key \"source\" in rule 1"},
		"unknown proto":     {"[[rule]]\naction = \"drop\"\nproto = \"sctpx\"\n", "unknown protocol"},
		"icmp with ipv6":    {"[[rule]]\naction = \"drop\"\nproto = \"icmp\"\nsrc = \"2001:db8::/32\"\n", "does not go with IPv6"},
		"rate without time": {"[rate_limit]\npps = 10\n", "no block_for"},
		"syntax":            {"[[rule]\naction = \"drop\"\n", "test.toml:1: expected character ]"},
		// The rule-file defects of issue 11, one case each, and kin.
		"negative pps":                          {"[rate_limit]\npps = -5\nblock_for = \"1s\"\n", "test.toml:2: pps = -5 is negative"},
		"negative bps":                          {"[rate_limit]\npps = 5\nbps = -1\nblock_for = \"1s\"\n", "test.toml:3: bps = -1 is negative"},
		"unknown top-level key":                 {"default = \"drop\"\n\nverbose = true\n", "test.toml:3: unknown key \"verbose\""},
		"unknown rate_limit key":                {"[rate_limit]\npps = 5\nburst = 3\n", "test.toml:3: unknown key \"burst\" in [rate_limit]"},
		"default after a rule":                  {"[[rule]]\naction = \"drop\"\n\ndefault = \"drop\"\n", "test.toml:4: default is a key of rule 1 here: top-level keys must come before the first [[rule]]"},
		"rule header in a multi-line string":    {"[[rule]]\naction = \"drop\"\ncomment = \"\"\"\n[[rule]]\n\"\"\"\n\n[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.1/8\"\n", "test.toml:9: prefix \"10.0.0.1/8\" has host bits"},
		"missing action after a literal string": {"[[rule]]\naction = \"drop\"\ncomment = '''\n[[rule]]\n'''\n[[rule]]\nsrc = \"10.0.0.0/8\"\n", "test.toml:6: rule 2 has no action"},
		"zone":                                  {"[[rule]]\naction = \"drop\"\nsrc = \"fe80::1%eth0\"\n", "test.toml:3: address \"fe80::1%eth0\" has a zone (%eth0)"},
		"key set twice":                         {"[[rule]]\naction = \"drop\"\naction = \"pass\"\n", "test.toml:3: action is set twice (first on line 2)"},
		"one [rule] table":                      {"[rule]\naction = \"drop\"\n", "test.toml:1: [rule] is one table, not a list of rules: write [[rule]]"},
		"rate as a string":                      {"[rate_limit]\npps = \"100\"\nblock_for = \"1s\"\n", "test.toml:2: pps must be a whole number"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRules("test.toml", []byte(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestBadReplaceKeepsRules: a bad file is refused before anything changes.
func TestBadReplaceKeepsRules(t *testing.T) {
	f := newFirewall(t, "default = \"pass\"\n[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/8\"\n")
	gen, _ := f.Generation()
	bad := &RuleSet{Rules: []Rule{{Action: Drop, Proto: 1, Src: Prefix{netip.MustParsePrefix("2001:db8::/32")}}}}
	if err := f.Install(bad); err == nil {
		t.Fatal("a rule set with icmp and IPv6 addresses was installed")
	}
	if g, _ := f.Generation(); g != gen {
		t.Fatalf("generation moved from %d to %d", gen, g)
	}
	if got := verdictName(run(t, f, packet(t, flow("10.0.0.1", "192.0.2.1", 17, 1, 2), 8))); got != "drop" {
		t.Fatalf("old rule lost: %s", got)
	}
}

func TestCountersAndStats(t *testing.T) {
	f := newFirewall(t, "default = \"pass\"\n[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.0/8\"\n")
	drop := packet(t, flow("10.0.0.1", "192.0.2.1", 17, 1, 2), 100)
	pass := packet(t, flow("11.0.0.1", "192.0.2.1", 17, 1, 2), 50)
	for i := 0; i < 3; i++ {
		run(t, f, drop)
	}
	run(t, f, pass)
	st, err := f.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st[1] != (RuleStats{3, 3 * uint64(len(drop))}) || st[0] != (RuleStats{1, uint64(len(pass))}) {
		t.Fatalf("rule stats %+v", st)
	}
	c, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// A flow is tracked from its second packet, so its first two are
	// classified and the third takes the cached verdict.
	if c["drop_rule"] != 3 || c["pass_default"] != 1 || c["classified"] != 3 {
		t.Fatalf("counters %v", c)
	}
	// Non-IP passes; a cut IPv4 header is dropped.
	arp := append(make([]byte, 12), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	if got := run(t, f, arp); got != xdpPass {
		t.Fatalf("ARP: %s", verdictName(got))
	}
	if got := run(t, f, drop[:20]); got != xdpDrop {
		t.Fatalf("truncated IPv4: %s", verdictName(got))
	}
}

func TestBlockExpiry(t *testing.T) {
	f := newFirewall(t, "default = \"pass\"\n")
	fl := flow("192.0.2.1", "198.51.100.1", 6, 1234, 443)
	other := flow("192.0.2.1", "198.51.100.1", 6, 1235, 443)
	pkt := packet(t, fl, 10)
	if err := f.Block(fl, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := run(t, f, pkt); got != xdpDrop {
		t.Fatalf("blocked flow: %s", verdictName(got))
	}
	if got := run(t, f, packet(t, other, 10)); got != xdpPass {
		t.Fatalf("other flow of the same hosts: %s", verdictName(got))
	}
	bl, err := f.Blocked()
	if err != nil || len(bl) != 1 || bl[0].Flow != fl || bl[0].Packets != 1 {
		t.Fatalf("block list %+v, %v", bl, err)
	}
	time.Sleep(350 * time.Millisecond)
	if got := run(t, f, pkt); got != xdpPass {
		t.Fatalf("after expiry: %s", verdictName(got))
	}
	if bl, _ := f.Blocked(); len(bl) != 0 {
		t.Fatalf("expired block still listed: %+v", bl)
	}
	// Without expiry, until unblocked.
	if err := f.Block(fl, 0); err != nil {
		t.Fatal(err)
	}
	if got := run(t, f, pkt); got != xdpDrop {
		t.Fatalf("blocked again: %s", verdictName(got))
	}
	if err := f.Unblock(fl); err != nil {
		t.Fatal(err)
	}
	if got := run(t, f, pkt); got != xdpPass {
		t.Fatalf("unblocked: %s", verdictName(got))
	}
	if err := f.Unblock(fl); err == nil || !strings.Contains(err.Error(), "not blocked") {
		t.Fatalf("second unblock: %v", err)
	}
}

func TestRateLimit(t *testing.T) {
	f := newFirewall(t, "default = \"pass\"\n[rate_limit]\npps = 100\nblock_for = \"300ms\"\n")
	src := packet(t, flow("192.0.2.1", "198.51.100.1", 17, 1, 2), 10)
	other := packet(t, flow("192.0.2.2", "198.51.100.1", 17, 1, 2), 10)
	// BPF_PROG_TEST_RUN with a repeat sends the packets well within a second.
	ret, err := f.Program().Run(&ebpf.RunOptions{Data: src, Repeat: 100})
	if err != nil || ret != xdpPass {
		t.Fatalf("the first 100 packets: %d, %v", ret, err)
	}
	if got := run(t, f, src); got != xdpDrop {
		t.Fatalf("packet 101: %s", verdictName(got))
	}
	if got := run(t, f, other); got != xdpPass {
		t.Fatalf("another source: %s", verdictName(got))
	}
	srcs, err := f.RateSources()
	if err != nil || len(srcs) != 1 || srcs[0].Trips != 1 || srcs[0].BlockedUntil.IsZero() {
		t.Fatalf("rate sources %+v, %v", srcs, err)
	}
	time.Sleep(350 * time.Millisecond)
	if got := run(t, f, src); got != xdpPass {
		t.Fatalf("after the block: %s", verdictName(got))
	}
	c, _ := f.Counters()
	if c["rate_limit_trips"] != 1 || c["drop_rate_limit"] != 1 {
		t.Fatalf("counters %v", c)
	}
}

// TestRateLimitBits trips on bit/s rather than packets.
func TestRateLimitBits(t *testing.T) {
	pkt := packet(t, flow("192.0.2.1", "198.51.100.1", 17, 1, 2), 1000-42)
	f := newFirewall(t, fmt.Sprintf("[rate_limit]\nbps = %d\nblock_for = \"1s\"\n", 10*1000*8))
	ret, err := f.Program().Run(&ebpf.RunOptions{Data: pkt, Repeat: 10})
	if err != nil || ret != xdpPass {
		t.Fatalf("10 kB: %d %v", ret, err)
	}
	if got := run(t, f, pkt); got != xdpDrop {
		t.Fatalf("past 80 kbit: %s", verdictName(got))
	}
}

func TestRulesReadBack(t *testing.T) {
	f := newFirewall(t, precedenceRules)
	rs, err := f.Rules()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ParseRules("test.toml", []byte(precedenceRules))
	if len(rs.Rules) != len(want.Rules) || rs.Default != want.Default {
		t.Fatalf("read back %d rules default %s", len(rs.Rules), rs.Default)
	}
	for i := range rs.Rules {
		if rs.Rules[i].String() != want.Rules[i].String() {
			t.Fatalf("rule %d: read back %q, installed %q", i+1, rs.Rules[i], want.Rules[i])
		}
	}
}

// BenchmarkFastPath reports the kernel's time per packet of a tracked flow
// and of classification, at several rule counts.
func BenchmarkFastPath(b *testing.B) {
	for _, n := range []int{0, 1000, 100000} {
		tb := labTestbed()
		rs := LabRules(tb.Gen().Addr.Masked(), tb.Sink().Addr.Masked(), n)
		f, err := Load(LoadOptions{MaxFlows: 1 << 16})
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Install(rs); err != nil {
			b.Fatal(err)
		}
		pkt := packet(b, flow("198.18.0.1", "198.18.1.1", 17, 1024, 9), 96)
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			ret, d, err := f.Program().Benchmark(pkt, b.N, nil)
			if err != nil || ret != xdpPass {
				b.Fatal(ret, err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "kernel-ns/pkt")
		})
		f.Close()
	}
}

func labTestbed() lab.Testbed { return lab.Testbed{Prefix: "fp-", Layout: lab.LayoutDUT} }

// fragment builds a UDP fragment: first (offset 0, with the UDP header) or
// later (no header), IPv4 or IPv6.
func fragment(t *testing.T, src, dst string, first bool) []byte {
	t.Helper()
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	payload := gopacket.Payload(make([]byte, 64))
	udp := &layers.UDP{SrcPort: 5000, DstPort: 53}
	var ls []gopacket.SerializableLayer
	var off uint16
	if !first {
		off = 100
	}
	if s.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: s.AsSlice(), DstIP: d.AsSlice(), FragOffset: off}
		if first {
			ip.Flags = layers.IPv4MoreFragments
		}
		ls = append(ls, eth, ip)
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6Fragment, SrcIP: s.AsSlice(), DstIP: d.AsSlice()}
		// gopacket cannot write a fragment header: next header, reserved,
		// offset in 8-byte units << 3 | M, identification.
		frag := []byte{byte(layers.IPProtocolUDP), 0, byte(off >> 5), byte(off<<3) | map[bool]byte{true: 1}[first], 0, 0, 0, 7}
		if first {
			frag = append(frag, 0x13, 0x88, 0, 53, 0, 72, 0, 0) // UDP 5000 → 53
		}
		ls = append(ls, eth, ip, gopacket.Payload(append(frag, payload...)))
		udp, first = nil, false
	}
	if first {
		ls = append(ls, udp)
	}
	if s.Is4() {
		ls = append(ls, payload)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFragments: fragments after the first carry no ports: they get their
// first fragment's, so port rules treat a datagram alike; without a first
// seen they have none, so port rules
// never match them; address rules do.
func TestFragments(t *testing.T) {
	f := newFirewall(t, `
default = "pass"
[[rule]]
action = "drop"
proto = "udp"
dport = "0-100"
[[rule]]
action = "drop"
src = "10.9.0.0/16"
[[rule]]
action = "drop"
src = "2001:db8:9::/48"
`)
	cases := []struct {
		name     string
		src, dst string
		first    bool
		want     string
	}{
		{"ipv4 first fragment: port rule", "192.0.2.1", "198.51.100.1", true, "drop"},
		{"ipv4 later fragment: its first's ports", "192.0.2.1", "198.51.100.1", false, "drop"},
		{"ipv4 later fragment without a first: no port rule", "192.0.2.2", "198.51.100.1", false, "pass"},
		{"ipv4 later fragment: address rule", "10.9.1.1", "198.51.100.1", false, "drop"},
		{"ipv6 first fragment: port rule", "2001:db8::1", "2001:db8::2", true, "drop"},
		{"ipv6 later fragment: its first's ports", "2001:db8::1", "2001:db8::2", false, "drop"},
		{"ipv6 later fragment without a first: no port rule", "2001:db8::3", "2001:db8::2", false, "pass"},
		{"ipv6 later fragment: address rule", "2001:db8:9::1", "2001:db8::2", false, "drop"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := verdictName(run(t, f, fragment(t, c.src, c.dst, c.first))); got != c.want {
				t.Fatalf("%s, want %s", got, c.want)
			}
		})
	}
	if cnt, _ := f.Counters(); cnt["frag_without_first"] != 4 {
		t.Errorf("frag_without_first %d, want the 4 later fragments whose first was not seen", cnt["frag_without_first"])
	}
}

// TestExampleFile: the documented example decodes and means what its
// comments say.
func TestExampleFile(t *testing.T) {
	rs, err := LoadRules("../../deploy/examples/fw.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if rs.Default != Pass || rs.RateLimit == nil || rs.RateLimit.BlockFor.Duration != 30*time.Second {
		t.Fatalf("default %s, rate limit %+v", rs.Default, rs.RateLimit)
	}
	if rs.Rules[0].ID() != "ssh-jump-host" || rs.Rules[1].ID() != "ssh-blocked-net" || !strings.HasPrefix(rs.Rules[2].ID(), "h:") {
		t.Errorf("identities %q, %q, %q: want the two names and a hash", rs.Rules[0].ID(), rs.Rules[1].ID(), rs.Rules[2].ID())
	}
	for _, c := range []struct {
		fl   Flow
		want int
	}{
		{flow("203.0.113.7", "192.0.2.1", 6, 40000, 22), 1},
		{flow("203.0.113.8", "192.0.2.1", 6, 40000, 22), 2},
		{flow("2001:db8:bad::1", "2001:db8::1", 17, 1, 2), 3},
		{flow("192.0.2.9", "198.51.100.3", 17, 1, 15000), 4},
		{flow("192.0.2.9", "198.51.100.3", 1, 0, 0), 5},
		{flow("192.0.2.9", "198.51.100.3", 6, 1, 80), 0},
	} {
		if got, _ := rs.Match(c.fl); got != c.want {
			t.Errorf("%s: rule %d, want %d", c.fl, got, c.want)
		}
	}
}

func TestTop(t *testing.T) {
	a := flow("192.0.2.1", "198.51.100.1", 17, 1, 2)
	b := flow("192.0.2.2", "198.51.100.1", 17, 1, 2)
	c := flow("192.0.2.3", "198.51.100.1", 17, 1, 2)
	before := []FlowStats{{Flow: a, Packets: 100, Bytes: 10000}, {Flow: b, Packets: 50, Bytes: 5000}, {Flow: c, Packets: 7, Bytes: 700}}
	after := []FlowStats{
		{Flow: a, Packets: 300, Bytes: 30000},                                           // +200 packets
		{Flow: b, Packets: 5, Bytes: 500},                                               // evicted and back: 5 new packets
		{Flow: c, Packets: 7, Bytes: 700},                                               // idle: not shown
		{Flow: flow("192.0.2.4", "198.51.100.1", 6, 3, 4), Packets: 1000, Bytes: 64000}, // new
	}
	top := Top(before, after, 2*time.Second, 2)
	if len(top) != 2 || top[0].Packets != 1000 || top[0].PPS != 500 || top[0].BPS != 256000 || top[1].Flow != a || top[1].PPS != 100 {
		t.Fatalf("top %+v", top)
	}
	if all := Top(before, after, time.Second, 0); len(all) != 3 || all[2].Flow != b || all[2].PPS != 5 {
		t.Fatalf("all %+v", all)
	}
}

// TestMappedAddressIsIPv6: "::ffff:10.9.9.9" without a length is the IPv6
// host ::ffff:10.9.9.9/128, as with the length, never the IPv4 host.
func TestMappedAddressIsIPv6(t *testing.T) {
	for _, src := range []string{"::ffff:10.9.9.9", "::ffff:10.9.9.9/128"} {
		rules := fmt.Sprintf("default = \"pass\"\n[[rule]]\naction = \"drop\"\nsrc = %q\n", src)
		rs, err := ParseRules("test.toml", []byte(rules))
		if err != nil {
			t.Fatal(err)
		}
		if r := rs.Rules[0]; r.Family() != 6 || r.Src.Bits() != 128 || r.String() != "drop src ::ffff:10.9.9.9" {
			t.Fatalf("%s: family %d, rule %q", src, r.Family(), r)
		}
		f := newFirewall(t, rules)
		if got := verdictName(run(t, f, packet(t, flow("10.9.9.9", "192.0.2.1", 17, 1, 2), 8))); got != "pass" {
			t.Fatalf("%s: an IPv4 packet from 10.9.9.9: %s", src, got)
		}
		if got := verdictName(run(t, f, packet(t, flow("::ffff:10.9.9.9", "2001:db8::1", 17, 1, 2), 8))); got != "drop" {
			t.Fatalf("%s: an IPv6 packet from ::ffff:10.9.9.9: %s", src, got)
		}
	}
}

// TestZeroPrefixReadBack: a /0 reads back as the /0 of its family, so that
// fw add and fw del (which reinstall what they read) keep "::/0" IPv6-only.
func TestZeroPrefixReadBack(t *testing.T) {
	f := newFirewall(t, "default = \"pass\"\n[[rule]]\naction = \"drop\"\nsrc = \"::/0\"\n[[rule]]\naction = \"drop\"\ndst = \"0.0.0.0/0\"\nproto = \"udp\"\n")
	rs, err := f.Rules()
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Rules[0].String() + "; " + rs.Rules[1].String(); got != "drop src ::/0; drop dst 0.0.0.0/0 proto udp" {
		t.Fatalf("read back %q", got)
	}
	if err := f.Install(rs); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		fl   Flow
		want string
	}{
		{flow("192.0.2.1", "198.51.100.1", 6, 1, 2), "pass"},
		{flow("192.0.2.1", "198.51.100.1", 17, 1, 2), "drop"},
		{flow("2001:db8::1", "2001:db8::2", 6, 1, 2), "drop"},
	} {
		if got := verdictName(run(t, f, packet(t, c.fl, 8))); got != c.want {
			t.Errorf("%s after reinstalling what was read back: %s, want %s", c.fl, got, c.want)
		}
	}
}
