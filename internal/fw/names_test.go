package fw

import (
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/labtest"
)

// A rule's name is checked where the file says it: its form, and that no
// other rule has it; the error names the file and the line.
func TestRuleNamesValidated(t *testing.T) {
	for name, c := range map[string]struct{ text, want string }{
		"twice": {"[[rule]]\nname = \"ssh\"\naction = \"pass\"\n\n[[rule]]\nname = \"ssh\"\naction = \"drop\"\n",
			`r.toml:5: rule 2: name "ssh" is rule 1's already (line 1)`},
		"bad characters": {"[[rule]]\naction = \"pass\"\nname = \"a b\"\n", `r.toml:3: rule 1: name "a b": use 1 to 64 letters`},
		"too long":       {"[[rule]]\naction = \"pass\"\nname = \"" + strings.Repeat("x", 65) + "\"\n", `r.toml:3: rule 1: name "xxx`},
		"the default's":  {"[[rule]]\naction = \"pass\"\nname = \"default\"\n", `r.toml:3: rule 1: name "default" is the default policy's`},
		"not a string":   {"[[rule]]\naction = \"pass\"\nname = 7\n", `r.toml:3: name must be a string`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRules("r.toml", []byte(c.text))
			var re *RulesError
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &re) || re.File != "r.toml" || re.Line == 0 || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an error with file and line saying %q", err, c.want)
			}
		})
	}
	rs, err := ParseRules("r.toml", []byte("[[rule]]\nname = \"web.in-1_a\"\naction = \"pass\"\nproto = \"tcp\"\ndport = 443\n"))
	if err != nil || rs.Rules[0].ID() != "web.in-1_a" {
		t.Fatalf("a good name: %v, %+v", err, rs)
	}
}

// The identity of an unnamed rule is a hash of what it matches and does:
// the same for the rule as a file writes it and as the kernel gives it back,
// and not its comment or its position; a name is kept beside the rules,
// through fw add and fw del and a whole install (fw add's rebuild among
// them).
func TestRuleIdentity(t *testing.T) {
	text := `default = "drop"
[[rule]]
action = "pass"
proto = "tcp"
dport = "22"
comment = "ssh"

[[rule]]
name = "dns"
action = "pass"
proto = "udp"
dport = 53

[[rule]]
action = "drop"
src = "192.0.2.1"
dst = "0.0.0.0/0"

[[rule]]
action = "pass"
src = "2001:db8::/32"
ct_state = "established,related"
`
	rs, err := ParseRules("id.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, len(rs.Rules))
	for i, r := range rs.Rules {
		want[i] = r.ID()
	}
	if want[1] != "dns" || !strings.HasPrefix(want[0], "h:") || len(want[0]) != 14 || want[0] == want[2] {
		t.Fatalf("identities %q", want)
	}
	// Not the comment, not the position.
	moved, _ := ParseRules("id.toml", []byte(strings.Replace(text, "comment = \"ssh\"", "comment = \"secure shell\"", 1)+"\n[[rule]]\naction = \"pass\"\nproto = \"tcp\"\ndport = 22\n"))
	if moved.Rules[0].ID() != want[0] || moved.Rules[4].ID() != want[0] {
		t.Fatalf("comment or position changed an identity: %q, %q, want %q", moved.Rules[0].ID(), moved.Rules[4].ID(), want[0])
	}
	other := rs.Rules[0]
	other.Action = Drop
	if other.ID() == want[0] {
		t.Fatal("the action is not in the identity")
	}

	f := newFirewall(t, text)
	ids := func() []string {
		t.Helper()
		got, err := f.Rules()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range got.Rules {
			out = append(out, r.ID())
		}
		return out
	}
	if got := ids(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("read back from the kernel: %q, want %q", got, want)
	}
	named, _ := ParseRules("cli", []byte("[[rule]]\nname = \"first\"\naction = \"drop\"\nproto = \"udp\"\n"))
	if err := f.Insert(1, named.Rules[0]); err != nil {
		t.Fatal(err)
	}
	if err := f.Insert(2, named.Rules[0]); err == nil || !strings.Contains(err.Error(), `rule name "first" is rule 1's already`) {
		t.Fatalf("a second rule named first: %v", err)
	}
	if err := f.Delete(3); err != nil { // dns
		t.Fatal(err)
	}
	wantNow := []string{"first", want[0], want[2], want[3]}
	if got := ids(); strings.Join(got, " ") != strings.Join(wantNow, " ") {
		t.Fatalf("after fw add --at 1 and fw del 3: %q, want %q", got, wantNow)
	}
	// A whole install of what runs (as a rebuild does) keeps the names,
	// and one of a file without them drops them.
	again, err := f.Rules()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Install(again); err != nil {
		t.Fatal(err)
	}
	if got := ids(); strings.Join(got, " ") != strings.Join(wantNow, " ") {
		t.Fatalf("after installing the running set again: %q, want %q", got, wantNow)
	}
	plain, _ := ParseRules("p.toml", []byte("[[rule]]\naction = \"drop\"\nproto = \"udp\"\n"))
	if err := f.Install(plain); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 1 || got[0] != plain.Rules[0].ID() {
		t.Fatalf("after a file without names: %q", got)
	}
}

// fw metrics only reads: a scrape leaves expired connections where they
// are (fw serve's gc and fw ct gc remove them).
func TestCollectorDoesNotGC(t *testing.T) {
	labtest.RequireKernel(t)
	b := make([]byte, 3)
	crand.Read(b)
	name := "fp-mg" + hex.EncodeToString(b)
	if err := os.MkdirAll(PinDir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(PinDir(name)) })
	loaded, err := Load(LoadOptions{PinPath: PinDir(name), MaxFlows: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	installRules(t, loaded, "[conntrack]\nenabled = true\n")
	run(t, loaded, packet(t, flow("192.0.2.1", "198.51.100.1", 17, 1024, 53), 10))
	skewClock(t, loaded, time.Minute)
	c := NewCollector(name, MetricsOptions{})
	defer c.Close()
	for i := range 3 {
		got, err := scrapeCollector(c)
		if err != nil {
			t.Fatal(err)
		}
		want := `fastpath_fw_ct_expired_entries{name="` + name + `",table="embryonic"} 1`
		if !strings.Contains(string(got), want) {
			t.Fatalf("scrape %d lacks %s:\n%s", i+1, want, got)
		}
	}
	if n, err := loaded.ExpireConns(); err != nil || n != 1 {
		t.Fatalf("the gc after the scrapes removed %d, %v; want the expired connection the scrapes left", n, err)
	}
}

// Generated rules of every shape (nested prefixes, port ranges, both
// families) have the same identity read back from the kernel as written.
func TestRuleIdentityClassBench(t *testing.T) {
	rs, err := ClassBench("fw", 2000, 7, 30, netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rs.WriteTOML(&b); err != nil {
		t.Fatal(err)
	}
	f := newFirewall(t, b.String())
	got, err := f.Rules()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rules) != len(rs.Rules) {
		t.Fatalf("%d rules read back, %d written", len(got.Rules), len(rs.Rules))
	}
	for i := range rs.Rules {
		if a, b := rs.Rules[i].ID(), got.Rules[i].ID(); a != b {
			t.Fatalf("rule %d (%s): %s written, %s read back (%s)", i+1, rs.Rules[i], a, b, got.Rules[i])
		}
	}
}
