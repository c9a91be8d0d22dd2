package fw

import (
	"fmt"
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
