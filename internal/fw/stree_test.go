package fw

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// TestSearchTreeEdges: the IPv4 search tree finds every interval's first
// and last address, the addresses beside them, 0.0.0.0 and 255.255.255.255,
// in trees of every shape around its 15-way nodes (one node, a node and
// one start more, two and three levels), both directions. Neighbouring
// prefixes alternate actions and each set runs with either default, so a
// lookup that lands one interval off changes some verdict.
func TestSearchTreeEdges(t *testing.T) {
	f := newFirewall(t, "")
	for _, n := range []int{1, 7, 14, 15, 16, 30, 112, 113, 225, 226, 1700} {
		for _, dir := range []string{"src", "dst"} {
			for _, def := range []Action{Pass, Drop} {
				t.Run(fmt.Sprintf("%d-%s-%s", n, dir, def), func(t *testing.T) {
					var b strings.Builder
					fmt.Fprintf(&b, "default = %q\n", def)
					var prefixes []netip.Prefix
					// /31s two addresses apart, spread over the space,
					// and the two ends of it.
					step := uint32(0xfffffff0 / uint32(n+2))
					for i := range n {
						a := (uint32(i+1) * step) &^ 1
						p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), 31)
						if i == 0 {
							p = netip.MustParsePrefix("0.0.0.0/32")
						} else if i == n-1 && n > 2 {
							p = netip.MustParsePrefix("255.255.255.255/32")
						}
						prefixes = append(prefixes, p)
						fmt.Fprintf(&b, "[[rule]]\naction = %q\n%s = %q\n", Action(i%2), dir, p)
					}
					rs, err := ParseRules("t.toml", []byte(b.String()))
					if err != nil {
						t.Fatal(err)
					}
					if err := f.Install(rs); err != nil {
						t.Fatal(err)
					}
					probe := func(a netip.Addr) {
						fl := flow("192.0.2.1", "192.0.2.2", 17, 1, 2)
						if dir == "src" {
							fl.Src = a
						} else {
							fl.Dst = a
						}
						id, want := rs.Match(fl)
						if got := verdictName(run(t, f, packet(t, fl, 8))); got != want.String() {
							t.Fatalf("%s %s: kernel %s, oracle %s (rule %d)", dir, a, got, want, id)
						}
					}
					probe(netip.MustParseAddr("0.0.0.0"))
					probe(netip.MustParseAddr("255.255.255.255"))
					for _, p := range prefixes {
						first, last := p.Addr(), p.Addr()
						if p.Bits() == 31 {
							last = last.Next()
						}
						for _, a := range []netip.Addr{first.Prev(), first, last, last.Next()} {
							if a.IsValid() {
								probe(a)
							}
						}
					}
				})
			}
		}
	}
}

// TestLongSpansAgainstOracle: lists longer than a hull block (rules that
// share the port blocks a packet falls in and differ in addresses,
// protocol and the other port) give the verdicts of a plain first-match
// walk, for packets that match one of them and packets that match none, so
// that blocks are skipped through their hulls and entered through them.
func TestLongSpansAgainstOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for set := range 4 {
		rs := longListRuleSet(t, rng, 1500+1000*set, Action(set%2))
		f := newFirewall(t, "")
		if err := f.Install(rs); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2000; i++ {
			fl := longListFlow(rng)
			id, want := rs.Match(fl)
			if got := verdictName(run(t, f, packet(t, fl, 8))); got != want.String() {
				t.Fatalf("set %d: %s: kernel %s, oracle %s (rule %d: %v)", set, fl, got, want, id, ruleAt(rs, id))
			}
		}
	}
}

var longListNets = []string{"10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "11.0.0.0/8", "192.0.2.0/24", ""}

// longListRuleSet is n rules that share the port blocks a packet falls in
// (ranges nested from either end of the ports) and differ in addresses,
// protocol and the other port: lists far longer than a hull block.
func longListRuleSet(t testing.TB, rng *rand.Rand, n int, def Action) *RuleSet {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "default = %q\n", def)
	for i := range n {
		fmt.Fprintf(&b, "[[rule]]\naction = %q\nproto = %q\n", Action(rng.IntN(2)), []string{"tcp", "udp"}[rng.IntN(2)])
		if n := longListNets[rng.IntN(len(longListNets))]; n != "" {
			fmt.Fprintf(&b, "src = %q\n", n)
		}
		if n := longListNets[rng.IntN(len(longListNets))]; n != "" && i%3 == 0 {
			fmt.Fprintf(&b, "dst = %q\n", n)
		}
		if r := rng.IntN(65536); i%2 == 0 {
			fmt.Fprintf(&b, "dport = \"0-%d\"\n", r)
		} else {
			fmt.Fprintf(&b, "dport = \"%d-65535\"\n", r)
		}
		if i%5 == 0 {
			fmt.Fprintf(&b, "sport = \"%d-%d\"\n", 1000+rng.IntN(1000), 2000+rng.IntN(60000))
		}
	}
	rs, err := ParseRules("t.toml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if c := compile(rs); c.longest <= 2*hullSpan {
		t.Fatalf("longest list %d: no long lists to test", c.longest)
	}
	return rs
}

// longListFlow is a flow from and to the networks of longListRuleSet and
// beside them, often on the ends of the port range.
func longListFlow(rng *rand.Rand) Flow {
	hosts := []string{"10.1.2.3", "10.1.9.9", "10.200.0.1", "11.5.5.5", "192.0.2.7", "198.51.100.1"}
	return flow(hosts[rng.IntN(len(hosts))], hosts[rng.IntN(len(hosts))], []Proto{6, 17}[rng.IntN(2)],
		uint16(rng.IntN(65536)), uint16([]int{0, 65535, rng.IntN(65536)}[rng.IntN(3)]))
}
