package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// Bad input is refused with a message that says what is wrong, before
// anything is set up.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pcap")
	if err := os.WriteFile(empty, []byte{0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0}, 0o644); err != nil {
		t.Fatal(err)
	}
	badRules := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(badRules, []byte("default = \"drop\"\n\n[[rule]]\naction = \"drop\"\nsrc = \"10.0.0.300/8\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	otherKind := filepath.Join(dir, "other.json")
	if err := os.WriteFile(otherKind, []byte(`{"machine": {"kernel": "6.1.0", "cpu_model": "Other CPU", "cpus": 64}, "rows": []}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	shortKey := filepath.Join(dir, "short.key")
	if err := os.WriteFile(shortKey, []byte("c2hvcnQ=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badRecord := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badRecord, []byte(`{"machine": {"kernel": "6.1.0", "cpu_model": "Other CPU", "cpus": 64}, "rows": [{"scenario": "br", "mpps": 1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args []string
		want string
	}{
		"bench bad size":                  {[]string{"lab", "bench", "veth", "--size", "138,5x6", "--prefix", "fp-tcli-"}, `--size "138,5x6": want frame lengths in bytes`},
		"bench size over the MTU":         {[]string{"lab", "bench", "veth", "--size", "138,9100", "--prefix", "fp-tcli-"}, "--size 9100: longer than the lab's jumbo veths take"},
		"bench br packets too short":      {[]string{"lab", "bench", "br", "--size", "138,64", "--prefix", "fp-tcli-"}, "scenario br at --size 64: packet size 64 out of range"},
		"bench record of another machine": {[]string{"lab", "bench", "veth", "--record", otherKind, "--update-record", "--prefix", "fp-tcli-"}, "holds the figures of machine kind 64cpu-other-linux6.1"},
		"bench bad record":                {[]string{"lab", "bench", "veth", "--record", badRecord, "--prefix", "fp-tcli-"}, `record ` + badRecord + `: json: unknown field "mpps"`},
		"fw bad rules file":               {[]string{"fw", "check", badRules}, "bad.toml:5: bad prefix \"10.0.0.300/8\""},
		"fw attach bad file":              {[]string{"fw", "attach", "--rules", badRules, "eth0"}, "bad.toml:5"},
		"fw not attached":                 {[]string{"fw", "rules", "--name", "fp-tcli-none"}, "not attached"},
		"fw add no action":                {[]string{"fw", "add", "--src", "10.0.0.0/8"}, "--action drop, --action pass or --action synproxy is required"},
		"fw add bad port":                 {[]string{"fw", "add", "--action", "drop", "--proto", "tcp", "--dport", "9-1"}, "runs backwards"},
		"fw block no proto":               {[]string{"fw", "block", "--src", "192.0.2.1", "--dst", "192.0.2.2"}, "--proto is required"},
		"fw block mixed":                  {[]string{"fw", "block", "--src", "192.0.2.1", "--dst", "2001:db8::1", "--proto", "udp"}, "mixes IPv4 and IPv6"},
		"fw bad name":                     {[]string{"fw", "attach", "--name", "../x", "eth0"}, "instance name"},
		"unknown scenario":                {[]string{"lab", "bench", "veth", "nosuch", "--prefix", "fp-tcli-"}, `unknown scenario "nosuch"`},
		"bench a TCP row":                 {[]string{"lab", "bench", "fw-ct-synflood", "--prefix", "fp-tcli-"}, "run it with fastpath lab tcp fw-ct-synflood"},
		"unknown layout":                  {[]string{"lab", "up", "--layout", "mesh", "--prefix", "fp-tcli-"}, `unknown layout "mesh"`},
		"missing pcap":                    {[]string{"lab", "gen", "--dev", "fp-veth0", "--pcap", filepath.Join(dir, "nope.pcap"), "--count", "1"}, "no such file"},
		"empty pcap":                      {[]string{"lab", "gen", "--dev", "fp-veth0", "--pcap", empty, "--count", "1"}, "holds no packets"},
		"no limit":                        {[]string{"lab", "gen", "--dev", "fp-veth0", "--pcap", empty}, "give --count N or --duration D"},
		"two limits":                      {[]string{"lab", "gen", "--dev", "fp-veth0", "--pcap", empty, "--count", "5", "--duration", "1s"}, "not both"},
		"unknown iface":                   {[]string{"lab", "sink", "--dev", "fp-nosuch0", "--prefix", "fp-tcli-"}, "interface fp-nosuch0 not found"},
		"bad xdp mode":                    {[]string{"lab", "sink", "--dev", "fp-veth2", "--mode", "turbo"}, `unknown XDP mode "turbo"`},
		"packet too small":                {[]string{"lab", "packets", "--out", filepath.Join(dir, "x.pcap"), "--size", "20"}, "packet size 20"},
		"bad mac":                         {[]string{"lab", "packets", "--out", filepath.Join(dir, "x.pcap"), "--dst-mac", "zz"}, `--dst-mac "zz"`},
		"long prefix":                     {[]string{"lab", "up", "--prefix", "fp-much-too-long-"}, "too long"},
		"br no config":                    {[]string{"br", "attach", "eth0"}, "--config is required"},
		"br missing config":               {[]string{"br", "attach", "--config", filepath.Join(dir, "none.toml")}, "none.toml"},
		"br serve no config":              {[]string{"br", "serve", "eth0"}, "--config is required"},
		"br serve zero interval":          {[]string{"br", "serve", "--config", "x.toml", "--interval", "0s"}, "--interval 0s: give a positive duration"},
		"br serve missing config":         {[]string{"br", "serve", "--config", filepath.Join(dir, "none.toml")}, "none.toml"},
		"br key on the command line":      {[]string{"br", "key", "add", "br1", "0", "AAAAAAAAAAAAAAAAAAAAAA=="}, "a key on the command line is refused: ps and the shell's history show it"},
		"br bad key slot":                 {[]string{"br", "key", "add", "--name", "br1", "--index", "2", "--key-file", shortKey}, `key index "2": use 0 or 1`},
		"br key no index":                 {[]string{"br", "key", "add", "--name", "br1", "--key-file", shortKey}, "--index is required"},
		"br key no file":                  {[]string{"br", "key", "add", "--name", "br1", "--index", "0"}, "--key-file is required"},
		"br bad key":                      {[]string{"br", "key", "add", "--name", "br1", "--index", "0", "--key-file", shortKey}, "base64 of 16 bytes"},
		"br unknown router":               {[]string{"br", "watch", "--name", "fp-no-such-router"}, "not attached"},
		"br two names":                    {[]string{"br", "stats", "fp-a", "--name", "fp-b"}, "name the instance once, with --name"},
		"fw old and new mode":             {[]string{"fw", "attach", "--generic", "--mode", "native", "eth0"}, "--generic and --no-fallback are its old spellings"},
		"fw bad mode":                     {[]string{"fw", "attach", "--mode", "fast", "eth0"}, `unknown XDP mode "fast"`},
		"rt run auto mode":                {[]string{"rt", "run", "x.o", "--dev", "eth0", "--mode", "auto"}, "--mode auto: the runtime attaches in one mode and does not fall back"},
		"br run no input":                 {[]string{"br", "run", "--config", "x.toml"}, "--config and --in are required"},
		"scion packets bad config":        {[]string{"lab", "packets", "--scion", "--config", filepath.Join(dir, "none.toml"), "--out", filepath.Join(dir, "s.pcap")}, "none.toml"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := rootCmd()
			cmd.SetArgs(c.args)
			cmd.SetOut(new(strings.Builder))
			err := cmd.ExecuteContext(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("fastpath %s: error %v, want one containing %q", strings.Join(c.args, " "), err, c.want)
			}
			for _, ns := range []string{"fp-tcli-gen", "fp-tcli-dut", "fp-tcli-sink"} {
				if netns.Exists(ns) {
					netns.Delete(ns)
					t.Fatalf("a refused command left %s behind", ns)
				}
			}
		})
	}
}

func TestPacketsWritesCapture(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sub", "p.pcap")
	cmd := rootCmd()
	cmd.SetArgs([]string{"lab", "packets", "--out", out, "--count", "10", "--size", "200"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	// pcap: 24-byte file header, then 16 bytes of record header per packet.
	if want := int64(24 + 10*(16+200)); st.Size() != want {
		t.Fatalf("capture is %d bytes, want %d", st.Size(), want)
	}
}
