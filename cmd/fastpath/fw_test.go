package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
)

// fastpath runs the CLI in-process and returns what it printed.
func fastpath(t *testing.T, args ...string) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	cmd := rootCmd()
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	os.Stdout = stdout
	w.Close()
	return <-done, err
}

// TestFwCommands drives the firewall through the CLI on a testbed: attach
// with rules, add, del, a refused load that changes nothing, block, detach.
func TestFwCommands(t *testing.T) {
	tb := labtest.Testbed(t)
	name := tb.Prefix + "cli"
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(good, []byte("default = \"drop\"\n[[rule]]\naction = \"pass\"\nsrc = \"198.18.0.0/24\"\n[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"1-100\"\n"), 0o644)
	os.WriteFile(bad, []byte("[[rule]]\naction = \"pass\"\n\n[[rule]]\naction = \"drop\"\nproto = \"tcp\"\nsrc = \"10.0.0.0/8\"\ndst = \"2001:db8::/32\"\n"), 0o644)
	t.Cleanup(func() {
		if _, err := os.Stat(fw.PinDir(name)); err == nil {
			fw.Detach(name, nil)
		}
	})
	if _, err := fastpath(t, "fw", "attach", "--name", name, "--netns", tb.DUTIn().Netns, "--rules", good, tb.DUTIn().Dev); err != nil {
		t.Fatal(err)
	}
	if _, err := fastpath(t, "fw", "add", "--name", name, "--action", "drop", "--src", "192.0.2.0/24", "--at", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := fastpath(t, "fw", "add", "--name", name, "--action", "drop", "--src", "192.0.2.0/24", "--at", "0"); err == nil || !strings.Contains(err.Error(), "--at 0: the set has 3 rules, use 1 to 4") {
		t.Fatalf("fw add --at 0: %v", err)
	}
	if _, err := fastpath(t, "fw", "del", "--name", name, "3"); err != nil {
		t.Fatal(err)
	}
	want := []string{"drop src 192.0.2.0/24", "pass src 198.18.0.0/24"}
	list := func() []string {
		out, err := fastpath(t, "fw", "rules", "--name", name, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Default string `json:"default"`
			Rules   []struct {
				fw.Rule
			} `json:"rules"`
		}
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("fw rules --json: %v\n%s", err, out)
		}
		var got []string
		for _, r := range l.Rules {
			got = append(got, r.Rule.String())
		}
		return append(got, "default "+l.Default)
	}
	want = append(want, "default drop")
	if got := list(); strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("rules after add and del: %q, want %q", got, want)
	}
	_, err := fastpath(t, "fw", "load", "--name", name, bad)
	if err == nil || !strings.Contains(err.Error(), "bad.toml:4: rule 2: src 10.0.0.0/8 and dst 2001:db8::/32") {
		t.Fatalf("load of a bad file: %v", err)
	}
	if got := list(); strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("a refused load changed the rules: %q", got)
	}
	if _, err := fastpath(t, "fw", "block", "--name", name, "--src", "198.18.0.1", "--dst", "198.18.1.1", "--proto", "udp", "--sport", "5", "--dport", "6", "--for", "1h"); err != nil {
		t.Fatal(err)
	}
	out, err := fastpath(t, "fw", "list-blocked", "--name", name, "--json")
	if err != nil || !strings.Contains(out, `"dport": 6`) {
		t.Fatalf("list-blocked: %v\n%s", err, out)
	}
	if out, err := fastpath(t, "fw", "stats", "--name", name, "--json"); err != nil || !strings.Contains(out, `"drop_blocked"`) {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	// fw list shows the instance among the attached: its device, in its
	// namespace and mode, and its number of rules.
	out, err = fastpath(t, "fw", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var instances []instanceState
	if err := json.Unmarshal([]byte(out), &instances); err != nil {
		t.Fatalf("fw list --json: %v\n%s", err, out)
	}
	found := false
	for _, in := range instances {
		if in.Name != name {
			continue
		}
		found = true
		if in.Rules == nil || *in.Rules != len(want)-1 {
			t.Errorf("fw list: %s has %v rules, want %d", name, in.Rules, len(want)-1)
		}
		if len(in.Devices) != 1 || in.Devices[0].Iface != tb.DUTIn().Iface() || in.Devices[0].Mode == "" {
			t.Errorf("fw list: %s on %+v, want %s with its mode", name, in.Devices, tb.DUTIn().Iface())
		}
	}
	if !found {
		t.Errorf("fw list does not show %s:\n%s", name, out)
	}
	if _, err := fastpath(t, "fw", "detach", "--name", name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fw.PinDir(name)); !os.IsNotExist(err) {
		t.Fatalf("detach left %s", fw.PinDir(name))
	}
}

// sdNotify sends each state as one datagram to NOTIFY_SOCKET, and nothing
// without it.
func TestSdNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	for _, state := range []string{"READY=1", "RELOADING=1", "READY=1"} {
		if err := sdNotify(state); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		ln.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := ln.Read(buf)
		if err != nil || string(buf[:n]) != state {
			t.Fatalf("the service manager got %q, %v; want %q", buf[:n], err, state)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %v", err)
	}
}

// freeAddr is a loopback address with a port nothing listens on (now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ruleIDs are fw rules --json's identities, by the rules' fields.
func ruleIDs(t *testing.T, name string) map[string]string {
	t.Helper()
	out, err := fastpath(t, "fw", "rules", "--name", name, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		DefaultRule string `json:"default_rule"`
		Rules       []struct {
			ID string `json:"rule"`
			fw.Rule
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("fw rules --json: %v\n%s", err, out)
	}
	ids := map[string]string{"default": l.DefaultRule}
	for _, r := range l.Rules {
		ids[r.Rule.String()] = r.ID
	}
	return ids
}

// fw metrics serves an attached instance's figures, promtool-clean, and
// reads only (it refuses the --gc-interval it had); fw add --at 1 renames
// no other rule: fw rules and the metrics' rule label keep each rule's
// identity, named or hashed, while its position moves.
func TestFwMetricsAndRuleIdentity(t *testing.T) {
	tb := labtest.Testbed(t)
	name := tb.Prefix + "mx"
	rules := filepath.Join(t.TempDir(), "fw.toml")
	os.WriteFile(rules, []byte("default = \"pass\"\n[[rule]]\nname = \"no-ntp\"\naction = \"drop\"\nproto = \"udp\"\ndport = 123\n\n[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"1-100\"\n"), 0o644)
	t.Cleanup(func() {
		if _, err := os.Stat(fw.PinDir(name)); err == nil {
			fw.Detach(name, nil)
		}
	})
	if _, err := fastpath(t, "fw", "attach", "--name", name, "--netns", tb.DUTIn().Netns, "--rules", rules, tb.DUTIn().Dev); err != nil {
		t.Fatal(err)
	}
	if _, err := fastpath(t, "fw", "metrics", "--name", name, "--gc-interval", "10s"); err == nil || !strings.Contains(err.Error(), "no longer removes expired connections") {
		t.Fatalf("fw metrics --gc-interval 10s: %v, want a refusal that says why", err)
	}

	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cmd := rootCmd()
		cmd.SetArgs([]string{"fw", "metrics", "--name", name, "--listen", addr, "--rule-metrics", "all"})
		done <- cmd.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fw metrics: %v", err)
		}
	})
	labels := func() map[string]bool {
		body := obstest.Scrape(t, "http://"+addr+"/metrics")
		obstest.CheckMetrics(t, body)
		out := map[string]bool{}
		for _, line := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(line, "fastpath_fw_rule_packets_total{name=\""+name+"\",rule=\""); ok {
				out[rest[:strings.IndexByte(rest, '"')]] = true
			}
		}
		return out
	}

	before := ruleIDs(t, name)
	if before["drop proto udp dport 123"] != "no-ntp" || !strings.HasPrefix(before["drop proto udp dport 1-100"], "h:") || before["default"] != "default" {
		t.Fatalf("fw rules identities: %v", before)
	}
	if got := labels(); len(got) != 3 || !got["no-ntp"] || !got[before["drop proto udp dport 1-100"]] || !got["default"] {
		t.Fatalf("rule labels %v, want no-ntp, the unnamed rule's hash and default", got)
	}
	if _, err := fastpath(t, "fw", "add", "--name", name, "--action", "drop", "--src", "192.0.2.0/24", "--at", "1"); err != nil {
		t.Fatal(err)
	}
	after := ruleIDs(t, name)
	for rule, id := range before {
		if after[rule] != id {
			t.Errorf("fw add --at 1 changed %s's identity from %s to %s", rule, id, after[rule])
		}
	}
	got := labels()
	for _, id := range before {
		if !got[id] {
			t.Errorf("after fw add --at 1 the metrics have no rule=%q: %v", id, got)
		}
	}
	if len(got) != 4 || !got[after["drop src 192.0.2.0/24"]] {
		t.Errorf("after fw add --at 1: rule labels %v, want the new rule's beside the others", got)
	}
}
