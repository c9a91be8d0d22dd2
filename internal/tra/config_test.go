package tra

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/scionproto/scion/pkg/addr"

	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// topologyJSON is a leaf AS's topology as scionproto v0.12.0 writes it.
func topologyJSON(ia string) string {
	return `{
  "isd_as": "` + ia + `", "mtu": 1472, "dispatched_ports": "31000-32767", "attributes": [],
  "border_routers": {"br1": {"internal_addr": "10.101.0.1:30042", "interfaces": {
    "1": {"underlay": {"local": "10.255.1.2:50000", "remote": "10.255.1.1:50000"}, "isd_as": "1-64512", "link_to": "parent", "mtu": 1472}}}},
  "control_service": {"cs1": {"addr": "10.101.0.1:31000"}},
  "discovery_service": {"cs1": {"addr": "10.101.0.1:31000"}}
}`
}

func writeConfig(t *testing.T, dir, toml string) string {
	t.Helper()
	p := filepath.Join(dir, "tra.toml")
	if err := os.WriteFile(p, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func configDir(t *testing.T, ia string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "topology.json"), []byte(topologyJSON(ia)), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The documented sample decodes, shows every key, and shows the defaults
// as they are.
func TestConfigExample(t *testing.T) {
	b, err := os.ReadFile("../../deploy/examples/tra.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	var shown map[string]any
	if _, err := toml.Decode(string(b), &shown); err != nil {
		t.Fatal(err)
	}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(tomlFile{})) {
		if k := f.Tag.Get("toml"); shown[k] == nil {
			t.Errorf("deploy/examples/tra.example.toml does not show key %q", k)
		}
	}
	dir := configDir(t, "1-64513")
	const topo = `topology = "/etc/scion/topology.json"`
	if !strings.Contains(string(b), topo) {
		t.Fatalf("deploy/examples/tra.example.toml no longer has %s; update this test", topo)
	}
	ex, err := LoadConfig(writeConfig(t, dir, strings.Replace(string(b), topo, `topology = "topology.json"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if ex.SMIP.String() != "fc00:10fc:100::ffff:a65:2" || len(ex.Destinations) != 2 ||
		ex.Destinations[addr.MustParseIA("1-64514")].Policy != PolicySequence {
		t.Errorf("example read as SM-IP %s, destinations %v", ex.SMIP, ex.Destinations)
	}
	def, err := LoadConfig(writeConfig(t, dir, "topology = \"topology.json\"\ndaemon = \"127.0.0.1:30255\"\ndevice = \"eth0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ex.Pair != def.Pair || ex.Policy != def.Policy || ex.MaxPaths != def.MaxPaths || ex.SCIONVersion != def.SCIONVersion || ex.XDPMode != def.XDPMode {
		t.Errorf("example shows pair=%q policy=%q max_paths=%d scion_version=%q xdp_mode=%q; defaults are %q %q %d %q %q", ex.Pair, ex.Policy, ex.MaxPaths, ex.SCIONVersion, ex.XDPMode, def.Pair, def.Policy, def.MaxPaths, def.SCIONVersion, def.XDPMode)
	}
	if def.DispatchedPortStart != 31000 || def.DispatchedPortEnd != 32767 || def.IA != addr.MustParseIA("1-64513") {
		t.Errorf("from the topology: %s, dispatched %d-%d", def.IA, def.DispatchedPortStart, def.DispatchedPortEnd)
	}
}

// scion_version says on which ports the AS's routers hand the host SCION:
// v0.12.0's only on the end-host port and the dispatched ones, later
// releases' on the port the packet names.
func TestConfigSCIONVersion(t *testing.T) {
	dir := configDir(t, "1-64513")
	base := "topology = \"topology.json\"\ndaemon = \"127.0.0.1:30255\"\ndevice = \"eth0\"\n"
	for v, want := range map[string]bool{"": true, "v0.15.1": true, "v0.14.0": true, "v0.12.0": false} {
		toml := base
		if v != "" {
			toml += fmt.Sprintf("scion_version = %q\n", v)
		}
		c, err := LoadConfig(writeConfig(t, dir, toml))
		if err != nil {
			t.Fatal(err)
		}
		if v == "" && c.SCIONVersion != scionproto.Default {
			t.Errorf("scion_version unset: %q, want the default %s", c.SCIONVersion, scionproto.Default)
		}
		if got := c.RoutersToPort(); got != want {
			t.Errorf("scion_version %q: RoutersToPort %v, want %v", v, got, want)
		}
	}
}

// Every bad input is refused naming the file, the key or line, and what
// to do.
func TestConfigRefusals(t *testing.T) {
	base := "topology = \"topology.json\"\ndaemon = \"127.0.0.1:30255\"\ndevice = \"eth0\"\n"
	cases := map[string]struct{ ia, toml, want string }{
		"bad probe_interval":    {"1-64513", base + "probe_interval = \"1ms\"\n", "probe_interval: \"1ms\": a duration from 10ms"},
		"bad idle_timeout":      {"1-64513", base + "idle_timeout = \"soon\"\n", "idle_timeout: \"soon\""},
		"bad xdp_mode":          {"1-64513", base + "xdp_mode = \"turbo\"\n", "xdp_mode: \"turbo\" is not valid; use \"auto\" (default), \"native\" or \"generic\""},
		"IPv6 routers only":     {"v6", base, "no border router has an IPv4 internal_addr"},
		"unknown key":           {"1-64513", base + "polcy = \"latency\"\n", "polcy: unknown key"},
		"syntax":                {"1-64513", base + "pair = \n", "line 4"},
		"no topology":           {"1-64513", "daemon = \"127.0.0.1:30255\"\ndevice = \"eth0\"\n", "topology: missing"},
		"no daemon":             {"1-64513", "topology = \"topology.json\"\ndevice = \"eth0\"\n", "daemon: missing"},
		"daemon without port":   {"1-64513", "topology = \"topology.json\"\ndaemon = \"127.0.0.1\"\ndevice = \"eth0\"\n", "want ip:port"},
		"no device":             {"1-64513", "topology = \"topology.json\"\ndaemon = \"127.0.0.1:30255\"\n", "device: missing"},
		"IPv6 address":          {"1-64513", base + "address = \"fd00::1\"\n", "not an IPv4 address"},
		"long pair":             {"1-64513", base + "pair = \"a-very-long-pair\"\n", "at most 15 characters"},
		"max_paths 0":           {"1-64513", base + "max_paths = 0\n", "max_paths: 0: between 1 and"},
		"unknown policy":        {"1-64513", base + "policy = \"fastest\"\n", "policy \"fastest\": use"},
		"sequence, no policy":   {"1-64513", base + "[[destination]]\nia = \"1-64514\"\nsequence = \"1-64513#1\"\n", "needs policy = \"sequence\""},
		"policy, no sequence":   {"1-64513", base + "[[destination]]\nia = \"1-64514\"\npolicy = \"sequence\"\n", "needs a sequence"},
		"bad sequence":          {"1-64513", base + "[[destination]]\nia = \"1-64514\"\npolicy = \"sequence\"\nsequence = \"1-64513#x\"\n", "sequence \"1-64513#x\""},
		"destination twice":     {"1-64513", base + "[[destination]]\nia = \"1-64514\"\n[[destination]]\nia = \"1-64514\"\n", "given twice"},
		"bad destination":       {"1-64513", base + "[[destination]]\nia = \"64514\"\n", "destination[0].ia"},
		"AS without SM-IP":      {"1-ff00:0:110", base, "has no SCION-mapped addresses"},
		"ISD without SM-IP":     {"4096-64513", base, "has no SCION-mapped addresses"},
		"missing topology file": {"", base, "topology.json"},
		"unknown scion_version": {"1-64513", base + "scion_version = \"v0.13.0\"\n", "scion_version: scionproto \"v0.13.0\" is not supported: choose one of v0.15.1, v0.14.0, v0.12.0: give the release"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			switch c.ia {
			case "":
			case "v6":
				topo := strings.Replace(topologyJSON("1-64513"), `"10.101.0.1:30042"`, `"[fd00::1]:30042"`, 1)
				if err := os.WriteFile(filepath.Join(dir, "topology.json"), []byte(topo), 0o600); err != nil {
					t.Fatal(err)
				}
			default:
				dir = configDir(t, c.ia)
			}
			p := writeConfig(t, dir, c.toml)
			_, err := LoadConfig(p)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q; want one naming %s and saying %q", err, p, c.want)
			}
		})
	}
}

// A host whose namespace holds the AS's router (a one-machine AS) cannot be
// translated: attach says so, naming the router and the way out, and makes
// nothing.
func TestAttachRefusesHostOfTheRouter(t *testing.T) {
	labtest.RequireKernel(t)
	b := make([]byte, 2)
	rand.Read(b)
	ns := "fp-tr" + hex.EncodeToString(b)
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(ns) })
	for _, args := range [][]string{
		{"link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"},
		{"addr", "add", "10.101.0.1/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	dir := configDir(t, "1-64513") // its router's internal address is 10.101.0.1
	cfg, err := LoadConfig(writeConfig(t, dir, "topology = \"topology.json\"\ndaemon = \"10.101.0.1:30255\"\ndevice = \"eth0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Attach(cfg, AttachOptions{Netns: ns})
	if err == nil {
		Detach(Name(cfg.Pair, ns))
		t.Fatal("attached to a host that holds the AS's router")
	}
	if !strings.Contains(err.Error(), "router br1") || !strings.Contains(err.Error(), "another namespace or machine") {
		t.Fatalf("error %q; want the router named and the way out", err)
	}
	h, herr := netns.Handle(ns)
	if herr != nil {
		t.Fatal(herr)
	}
	defer h.Close()
	if _, lerr := h.LinkByName(cfg.Pair + "0"); lerr == nil {
		t.Fatalf("the pair %s0 was made before the refusal", cfg.Pair)
	}
	if _, serr := os.Stat(PinDir(Name(cfg.Pair, ns))); serr == nil {
		t.Fatal("pins were made before the refusal")
	}
}

// The service unit in deploy/systemd is one systemd takes, and runs `tra run` with a
// configuration and restarts it when it fails.
func TestServiceUnit(t *testing.T) {
	labtest.CheckServiceUnit(t, "../../deploy/systemd/fastpath-tra@.service",
		"ExecStart=/usr/bin/fastpath tra run --config /etc/fastpath/tra-%i.toml", "Restart=on-failure")
}
