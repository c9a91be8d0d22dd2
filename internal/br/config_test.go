package br

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/router/control"
)

// The forwarding key scion derives from testdata/keys/master0.key ("IAOYbTs/CobLFV3T3jt6lQ==").
const wantKey0 = "xEg7WN/vMCn+ccb3P7O/5A=="

const (
	br1 = `border_routers["br1-ff00_0_110-1"]`
	br2 = `border_routers["br1-ff00_0_110-2"]`
	if1 = br1 + `.interfaces["1"]`
)

// wantInterfaces is what testdata/topology*.json resolve to for br1-ff00_0_110-1; ap maps the
// IPv4 addresses of topology.json to the variant's.
func wantInterfaces(ap func(string) netip.AddrPort) []Interface {
	ia := addr.MustParseIA
	return []Interface{
		{ID: 1, Kind: External, LinkType: "child", NeighborIA: ia("1-ff00:0:111"),
			Local: ap("198.18.1.1:50000"), Remote: ap("198.18.1.2:50000"), Router: "br1-ff00_0_110-1", MTU: 1472},
		{ID: 2, Kind: External, LinkType: "core", NeighborIA: ia("1-ff00:0:120"),
			Local: ap("198.18.2.1:50000"), Remote: ap("198.18.2.2:50000"), Router: "br1-ff00_0_110-1", MTU: 1472},
		{ID: 4, Kind: External, LinkType: "peer", NeighborIA: ia("2-ff00:0:210"),
			Local: ap("198.18.4.1:50000"), Remote: ap("198.18.4.2:50000"), Router: "br1-ff00_0_110-1", MTU: 1400},
		{ID: 3, Kind: Sibling, LinkType: "child", NeighborIA: ia("1-ff00:0:112"),
			SiblingAddr: ap("198.18.0.2:30042"), Router: "br1-ff00_0_110-2", MTU: 9000},
	}
}

// v6 maps topology.json's IPv4 addresses to topology_v6.json's: 198.18.X.Y -> [2001:2::Y] for the
// internal network (X = 0), [2001:2:0:X::Y] for the links.
func v6(s string) netip.AddrPort {
	a := netip.MustParseAddrPort(s).Addr().As4()
	b := [16]byte{0x20, 0x01, 0, 0x02, 0, 0, 0, a[2], 15: a[3]}
	return netip.AddrPortFrom(netip.AddrFrom16(b), netip.MustParseAddrPort(s).Port())
}

func TestConfigSample(t *testing.T) {
	tests := map[string]struct {
		topology string
		ap       func(string) netip.AddrPort
	}{
		"local":  {"topology.json", netip.MustParseAddrPort},
		"public": {"topology_public.json", netip.MustParseAddrPort}, // read as v0.12.0 reads it
		"ipv6":   {"topology_v6.json", v6},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			abs, err := filepath.Abs("testdata")
			if err != nil {
				t.Fatal(err)
			}
			// Absolute paths in the TOML file are taken as they are.
			path := filepath.Join(dir, "br.toml")
			writeFile(t, path, "router_id = \"br1-ff00_0_110-1\"\n"+
				"topology = \""+filepath.Join(abs, tc.topology)+"\"\n"+
				"keys = \""+filepath.Join(abs, "keys")+"\"\n"+
				map[bool]string{true: "scion_version = \"v0.12.0\"\n"}[name == "public"])
			c, err := LoadConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			if c.IA != addr.MustParseIA("1-ff00:0:110") || c.MTU != 1472 {
				t.Errorf("IA, MTU = %v, %d; want 1-ff00:0:110, 1472", c.IA, c.MTU)
			}
			if want := tc.ap("198.18.0.1:30042"); c.Internal != want {
				t.Errorf("Internal = %v, want %v", c.Internal, want)
			}
			if c.DispatchedPortStart != 31000 || c.DispatchedPortEnd != 32767 {
				t.Errorf("dispatched ports = %d-%d, want 31000-32767", c.DispatchedPortStart, c.DispatchedPortEnd)
			}
			if want := wantInterfaces(tc.ap); !reflect.DeepEqual(c.Interfaces, want) {
				t.Errorf("Interfaces =\n%+v\nwant\n%+v", c.Interfaces, want)
			}
		})
	}
}

func TestConfigTestdata(t *testing.T) {
	c, err := LoadConfig("testdata/br.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Path:                "testdata/br.toml",
		RouterID:            "br1-ff00_0_110-1",
		TopologyPath:        "testdata/topology.json",
		KeysDir:             "testdata/keys",
		InternalInterfaces:  []string{"fp-int0"},
		MACCheck:            true,
		SCMP:                SCMPPass,
		XDPMode:             XDPModeAuto,
		UDPChecksum:         UDPChecksumUpdate,
		LinkTimeout:         DefaultLinkTimeout,
		IA:                  addr.MustParseIA("1-ff00:0:110"),
		MTU:                 1472,
		Internal:            netip.MustParseAddrPort("198.18.0.1:30042"),
		DispatchedPortStart: 31000,
		DispatchedPortEnd:   32767,
		Interfaces:          wantInterfaces(netip.MustParseAddrPort),
		Keys:                [2][]byte{mustB64(t, wantKey0), control.DeriveHFMacKey(readKey(t, "testdata/keys/master1.key"))},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("LoadConfig =\n%+v\nwant\n%+v", c, want)
	}
	if got := base64.StdEncoding.EncodeToString(c.Keys[0]); got != wantKey0 {
		t.Errorf("forwarding key from master0.key = %s, want %s", got, wantKey0)
	}
}

// TestConfigExample decodes deploy/examples/br.example.toml with its paths pointed at testdata, checks it
// shows every key, and that the values it shows for the defaulted keys are the defaults.
func TestConfigExample(t *testing.T) {
	b, err := os.ReadFile("../../deploy/examples/br.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	var shown map[string]any
	if _, err := toml.Decode(string(b), &shown); err != nil {
		t.Fatal(err)
	}
	for _, k := range tomlKeys() {
		if _, ok := shown[k]; !ok {
			t.Errorf("deploy/examples/br.example.toml does not show key %q", k)
		}
	}
	abs, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for old, repl := range map[string]string{
		`topology = "/etc/scion/topology.json"`: `topology = "` + filepath.Join(abs, "topology.json") + `"`,
		`keys = "/etc/scion/keys"`:              `keys = "` + filepath.Join(abs, "keys") + `"`,
	} {
		if !strings.Contains(s, old) {
			t.Fatalf("deploy/examples/br.example.toml no longer has %s; update this test", old)
		}
		s = strings.Replace(s, old, repl, 1)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "example.toml"), s)
	ex, err := LoadConfig(filepath.Join(dir, "example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "min.toml"), "router_id = \"br1-ff00_0_110-1\"\n"+
		"topology = \""+filepath.Join(abs, "topology.json")+"\"\nkeys = \""+filepath.Join(abs, "keys")+"\"\n")
	def, err := LoadConfig(filepath.Join(dir, "min.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ex.CPUs) != 0 || ex.MACCheck != def.MACCheck || ex.SCMP != def.SCMP ||
		ex.KeyRollover != def.KeyRollover || ex.XDPMode != def.XDPMode || ex.LinkTimeout != def.LinkTimeout ||
		ex.UDPChecksum != def.UDPChecksum || def.UDPChecksum != UDPChecksumUpdate || ex.ForwardIP || def.ForwardIP {
		t.Errorf("example shows cpus=%v mac_check=%v scmp=%q key_rollover=%v xdp_mode=%q; "+
			"defaults are cpus=[] mac_check=%v scmp=%q key_rollover=%v xdp_mode=%q",
			ex.CPUs, ex.MACCheck, ex.SCMP, ex.KeyRollover, ex.XDPMode,
			def.MACCheck, def.SCMP, def.KeyRollover, def.XDPMode)
		t.Errorf("example shows udp_checksum=%q; default is %q", ex.UDPChecksum, def.UDPChecksum)
		t.Errorf("example shows forward_ip=%v; default is %v, want false", ex.ForwardIP, def.ForwardIP)
	}
}

// configCase builds a configuration directory (br.toml from baseTOML; topology.json and keys/ from
// testdata) with changes, loads it and checks the outcome. Error texts are checked with the
// directory written as $DIR, so each want names the file and the key exactly.
type configCase struct {
	toml  string                 // lines appended to baseTOML, or with whole the entire br.toml
	whole bool                   // toml replaces baseTOML instead of extending it
	topo  func(m map[string]any) // edits topology.json
	files map[string]string      // files to write, relative to the directory; removeFile deletes
	want  []string               // all in the error; none: LoadConfig must succeed
	check func(t *testing.T, c *Config)
}

const removeFile = "\x00remove"

const baseTOML = "router_id = \"br1-ff00_0_110-1\"\ntopology = \"topology.json\"\nkeys = \"keys\"\n"

func (tc configCase) run(t *testing.T) {
	dir := t.TempDir()
	src := baseTOML
	if tc.whole {
		src = tc.toml
	} else {
		src += tc.toml
	}
	writeFile(t, filepath.Join(dir, "br.toml"), src)

	var topo map[string]any
	if err := json.Unmarshal(readFile(t, "testdata/topology.json"), &topo); err != nil {
		t.Fatal(err)
	}
	if tc.topo != nil {
		tc.topo(topo)
	}
	b, err := json.MarshalIndent(topo, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "topology.json"), string(b))
	if err := os.Mkdir(filepath.Join(dir, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"master0.key", "master1.key"} {
		writeFile(t, filepath.Join(dir, "keys", k), string(readFile(t, filepath.Join("testdata/keys", k))))
	}
	for name, content := range tc.files {
		p := filepath.Join(dir, name)
		if content == removeFile {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		writeFile(t, p, content)
	}

	c, err := LoadConfig(filepath.Join(dir, "br.toml"))
	if len(tc.want) == 0 {
		if err != nil {
			t.Fatal(err)
		}
		if tc.check != nil {
			tc.check(t, c)
		}
		return
	}
	if err == nil {
		t.Fatalf("LoadConfig succeeded, want an error with %q", tc.want)
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error does not match ErrInvalidConfig: %v", err)
	}
	msg := strings.ReplaceAll(err.Error(), dir, "$DIR")
	t.Log(msg)
	for _, w := range tc.want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q\ndoes not contain %q", msg, w)
		}
	}
}

func TestConfigGood(t *testing.T) {
	tests := map[string]configCase{
		"settings": {
			toml: "internal_interfaces = [\"eth1\", \"eth2\"]\ncpus = [0]\nmac_check = false\n" +
				"scmp = \"drop\"\nkey_rollover = true\nxdp_mode = \"generic\"\nlink_timeout = \"1.5s\"\n" +
				"udp_checksum = \"verify\"\n",
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c.InternalInterfaces, []string{"eth1", "eth2"}) ||
					!reflect.DeepEqual(c.CPUs, []int{0}) || c.MACCheck || c.SCMP != SCMPDrop ||
					!c.KeyRollover || c.XDPMode != XDPModeGeneric || c.LinkTimeout != 1500*time.Millisecond ||
					c.UDPChecksum != UDPChecksumVerify {
					t.Errorf("settings not taken: %+v", c)
				}
			},
		},
		"forward_ip": {
			toml: "forward_ip = true\n",
			check: func(t *testing.T, c *Config) {
				if !c.ForwardIP {
					t.Errorf("forward_ip not taken: %+v", c)
				}
			},
		},
		"master1 absent": {
			files: map[string]string{"keys/master1.key": removeFile},
			check: func(t *testing.T, c *Config) {
				if c.Keys[1] != nil {
					t.Errorf("Keys[1] = %x, want nil", c.Keys[1])
				}
				if got := base64.StdEncoding.EncodeToString(c.Keys[0]); got != wantKey0 {
					t.Errorf("Keys[0] = %s, want %s", got, wantKey0)
				}
			},
		},
		"master0 with newline": {
			files: map[string]string{"keys/master0.key": "IAOYbTs/CobLFV3T3jt6lQ==\n"},
			check: func(t *testing.T, c *Config) {
				if got := base64.StdEncoding.EncodeToString(c.Keys[0]); got != wantKey0 {
					t.Errorf("Keys[0] = %s, want %s", got, wantKey0)
				}
			},
		},
		"interface mtu defaults to the AS's": {
			topo: func(m map[string]any) { delete(ifMap(m, "br1-ff00_0_110-1", "4"), "mtu") },
			check: func(t *testing.T, c *Config) {
				if c.Interfaces[2].ID != 4 || c.Interfaces[2].MTU != 1472 {
					t.Errorf("interface %d MTU = %d, want 1472", c.Interfaces[2].ID, c.Interfaces[2].MTU)
				}
			},
		},
		"empty dispatched_ports": {
			topo: func(m map[string]any) { m["dispatched_ports"] = "" },
			check: func(t *testing.T, c *Config) {
				if c.DispatchedPortStart != 0 || c.DispatchedPortEnd != 0 {
					t.Errorf("ports = %d-%d, want 0-0", c.DispatchedPortStart, c.DispatchedPortEnd)
				}
			},
		},
		// scionproto v0.12.0 reads no sibling interface's underlay; from
		// v0.14.0 its router refuses to start without it.
		"sibling without underlay": {
			toml: "scion_version = \"v0.12.0\"\n",
			topo: func(m map[string]any) { delete(ifMap(m, "br1-ff00_0_110-2", "3"), "underlay") },
		},
	}
	for name, tc := range tests {
		t.Run(name, tc.run)
	}
}

func TestConfigErrors(t *testing.T) {
	const (
		tomlFile = "$DIR/br.toml: "
		topoFile = "$DIR/topology.json: "
	)
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	tests := map[string]configCase{
		// The TOML file.
		"toml syntax": {
			whole: true, toml: "router_id = \"br1-ff00_0_110-1\"\ntopology = \"topology.json\nkeys = \"keys\"\n",
			want: []string{tomlFile + "line 2", "invalid TOML"},
		},
		"toml unknown key":   {toml: "mac_chek = false\n", want: []string{tomlFile + "mac_chek: unknown key", "mac_check"}},
		"toml unknown table": {toml: "[router]\nid = 1\n", want: []string{tomlFile + "router, router.id: unknown keys"}},
		"toml wrong type":    {toml: "cpus = \"0\"\n", want: []string{tomlFile, "cpus"}},
		"forward_ip in generic mode": {
			toml: "xdp_mode = \"generic\"\nforward_ip = true\n",
			want: []string{tomlFile + "forward_ip: needs native XDP"},
		},
		"toml missing file": {
			files: map[string]string{"br.toml": removeFile},
			want:  []string{tomlFile + "no such file or directory; give the path"},
		},
		"missing router_id": {whole: true, toml: "topology = \"topology.json\"\nkeys = \"keys\"\n",
			want: []string{tomlFile + "router_id: missing"}},
		"missing topology": {whole: true, toml: "router_id = \"br1-ff00_0_110-1\"\nkeys = \"keys\"\n",
			want: []string{tomlFile + "topology: missing"}},
		"missing keys": {whole: true, toml: "router_id = \"br1-ff00_0_110-1\"\ntopology = \"topology.json\"\n",
			want: []string{tomlFile + "keys: missing"}},
		"cpus out of range":    {toml: "cpus = [1048576]\n", want: []string{tomlFile + "cpus: CPU 1048576 is out of range"}},
		"cpus negative":        {toml: "cpus = [-1]\n", want: []string{tomlFile + "cpus: CPU -1 is out of range"}},
		"cpus duplicated":      {toml: "cpus = [0, 0]\n", want: []string{tomlFile + "cpus: CPU 0 is listed twice"}},
		"scmp invalid":         {toml: "scmp = \"reject\"\n", want: []string{tomlFile + `scmp: "reject" is not valid`}},
		"xdp_mode invalid":     {toml: "xdp_mode = \"skb\"\n", want: []string{tomlFile + `xdp_mode: "skb" is not valid`}},
		"udp_checksum invalid": {toml: "udp_checksum = \"off\"\n", want: []string{tomlFile + `udp_checksum: "off" is not valid`}},
		"link_timeout invalid": {toml: "link_timeout = \"600\"\n", want: []string{tomlFile + `link_timeout: "600" is not a duration`}},
		"internal_interfaces invalid": {toml: "internal_interfaces = [\"eth/0\"]\n",
			want: []string{tomlFile + `internal_interfaces: "eth/0"`}},
		"internal_interfaces duplicated": {toml: "internal_interfaces = [\"eth1\", \"eth1\"]\n",
			want: []string{tomlFile + `internal_interfaces: "eth1" is listed twice`}},
		"key_rollover without master1": {
			toml: "key_rollover = true\n", files: map[string]string{"keys/master1.key": removeFile},
			want: []string{tomlFile + "key_rollover: true, but $DIR/keys/master1.key is absent"},
		},

		// topology.json as a file.
		"topology missing": {whole: true,
			toml: "router_id = \"br1-ff00_0_110-1\"\ntopology = \"nope.json\"\nkeys = \"keys\"\n",
			want: []string{tomlFile + "topology: open $DIR/nope.json: no such file"}},
		"topology invalid JSON": {
			files: map[string]string{"topology.json": "{\n  \"isd_as\": \"1-ff00:0:110\",\n  \"mtu\": 1472,,\n}\n"},
			want:  []string{topoFile + "line 3, column 15: invalid JSON"},
		},
		"topology wrong type": {
			topo: func(m map[string]any) { m["mtu"] = "1472" },
			want: []string{topoFile + "mtu: line"},
		},
		"router_id not in topology": {whole: true,
			toml: "router_id = \"br9\"\ntopology = \"topology.json\"\nkeys = \"keys\"\n",
			want: []string{tomlFile + `router_id "br9": not in $DIR/topology.json border_routers ` +
				"(have: br1-ff00_0_110-1, br1-ff00_0_110-2)"}},

		// topology.json's AS-wide keys.
		"isd_as invalid": {
			topo: func(m map[string]any) { m["isd_as"] = "1-xyz" },
			want: []string{topoFile + `isd_as: "1-xyz"`},
		},
		"dispatched_ports reversed": {
			topo: func(m map[string]any) { m["dispatched_ports"] = "32767-31000" },
			want: []string{topoFile + `dispatched_ports: "32767-31000"`},
		},
		"dispatched_ports garbage": {
			topo: func(m map[string]any) { m["dispatched_ports"] = "abc" },
			want: []string{topoFile + `dispatched_ports: "abc"`},
		},
		"mtu missing": {
			topo: func(m map[string]any) { delete(m, "mtu") },
			want: []string{topoFile + "mtu: 0: must be positive"},
		},

		// topology.json's border routers.
		"null border router": {
			topo: func(m map[string]any) { routers(m)["br1-ff00_0_110-2"] = nil },
			want: []string{topoFile + br2 + ": is null"},
		},
		"internal_addr invalid": {
			topo: func(m map[string]any) { brMap(m, "br1-ff00_0_110-1")["internal_addr"] = "198.18.0.1" },
			want: []string{topoFile + br1 + `.internal_addr: "198.18.0.1"`},
		},
		"internal_addr port 0": {
			topo: func(m map[string]any) { brMap(m, "br1-ff00_0_110-1")["internal_addr"] = "198.18.0.1:0" },
			want: []string{topoFile + br1 + ".internal_addr: 198.18.0.1:0 has port 0"},
		},
		"sibling internal_addr family": {
			topo: func(m map[string]any) { brMap(m, "br1-ff00_0_110-2")["internal_addr"] = "[2001:2::2]:30042" },
			want: []string{topoFile + br2 + ".internal_addr: [2001:2::2]:30042 is IPv6"},
		},
		"underlay missing": {
			topo: func(m map[string]any) { delete(ifMap(m, "br1-ff00_0_110-1", "1"), "underlay") },
			want: []string{topoFile + if1 + ".underlay: missing"},
		},
		"underlay remote missing": {
			topo: func(m map[string]any) { delete(underlay(m, "1"), "remote") },
			want: []string{topoFile + if1 + ".underlay.remote: missing"},
		},
		"underlay local missing": {
			topo: func(m map[string]any) { delete(underlay(m, "1"), "local") },
			want: []string{topoFile + if1 + ".underlay.local: "},
		},
		"underlay local without IP": {
			topo: func(m map[string]any) { underlay(m, "1")["local"] = ":50000" },
			want: []string{topoFile + if1 + `.underlay.local: ":50000" has no IP address`},
		},
		"underlay local unspecified": {
			topo: func(m map[string]any) { underlay(m, "1")["local"] = "0.0.0.0:50000" },
			want: []string{topoFile + if1 + ".underlay.local: 0.0.0.0:50000 is the unspecified address"},
		},
		"underlay remote without port": {
			topo: func(m map[string]any) { underlay(m, "1")["remote"] = "198.18.1.2" },
			want: []string{topoFile + if1 + `.underlay.remote: "198.18.1.2"`},
		},
		"underlay mixed families": {
			topo: func(m map[string]any) { underlay(m, "1")["remote"] = "[2001:2:0:1::2]:50000" },
			want: []string{topoFile + if1 + ".underlay: local 198.18.1.1:50000 is IPv4 but remote [2001:2:0:1::2]:50000 is IPv6"},
		},
		// scionproto v0.12.0 still reads the deprecated public and bind.
		"underlay local and public": {
			toml: "scion_version = \"v0.12.0\"\n",
			topo: func(m map[string]any) { underlay(m, "1")["public"] = "198.18.1.1:50000" },
			want: []string{topoFile + if1 + ".underlay: ", `remove the deprecated "public"`},
		},
		"public with invalid bind": {
			toml: "scion_version = \"v0.12.0\"\n",
			topo: func(m map[string]any) {
				u := underlay(m, "1")
				u["public"], u["bind"] = u["local"], "not-an-ip"
				delete(u, "local")
			},
			want: []string{topoFile + if1 + ".underlay.bind: "},
		},
		// From v0.14.0 scionproto's router reads local and remote only, as
		// literal IP:port, of every router's interfaces.
		"public refused from v0.14.0": {
			topo: func(m map[string]any) {
				u := underlay(m, "1")
				u["public"] = u["local"]
				delete(u, "local")
			},
			want: []string{topoFile + if1 + `.underlay: uses "public"/"bind", which scionproto v0.15.1's router no longer reads`},
		},
		"host name refused from v0.14.0": {
			toml: "scion_version = \"v0.14.0\"\n",
			topo: func(m map[string]any) { underlay(m, "1")["remote"] = "localhost:50000" },
			want: []string{topoFile + if1 + `.underlay.remote: "localhost:50000" is not a literal IP:port, which scionproto v0.14.0's router needs`},
		},
		"sibling's host name refused from v0.14.0": {
			topo: func(m map[string]any) {
				m["border_routers"].(map[string]any)["br1-ff00_0_110-2"].(map[string]any)["interfaces"].(map[string]any)["3"].(map[string]any)["underlay"].(map[string]any)["local"] = ":50000"
			},
			want: []string{`interfaces["3"].underlay.local: ":50000" is not a literal IP:port`},
		},
		"unknown scion_version": {
			toml: "scion_version = \"v0.13.0\"\n",
			want: []string{`br.toml: scion_version: scionproto "v0.13.0" is not supported: choose one of v0.15.1, v0.14.0, v0.12.0`},
		},
		"duplicate local": {
			topo: func(m map[string]any) { underlay(m, "2")["local"] = "198.18.1.1:50000" },
			want: []string{topoFile + br1 + `.interfaces["2"].underlay.local: 198.18.1.1:50000 is also the local address of interface 1`},
		},
		"local is internal_addr": {
			topo: func(m map[string]any) { underlay(m, "1")["local"] = "198.18.0.1:30042" },
			want: []string{topoFile + if1 + ".underlay.local: 198.18.0.1:30042 is also " + br1 + ".internal_addr"},
		},
		"interface ID 0": {
			topo: func(m map[string]any) { renumber(m, "br1-ff00_0_110-1", "1", "0") },
			want: []string{topoFile + br1 + `.interfaces["0"]: interface ID 0 is reserved`},
		},
		"interface ID too big": {
			topo: func(m map[string]any) { renumber(m, "br1-ff00_0_110-1", "1", "70000") },
			want: []string{topoFile + br1 + `.interfaces["70000"]: interface ID 70000 is not in 1..65535`},
		},
		"sibling interface ID too big": {
			topo: func(m map[string]any) { renumber(m, "br1-ff00_0_110-2", "3", "65536") },
			want: []string{topoFile + br2 + `.interfaces["65536"]: interface ID 65536 is not in 1..65535`},
		},
		"interface ID in two routers": {
			topo: func(m map[string]any) { renumber(m, "br1-ff00_0_110-2", "3", "1") },
			want: []string{topoFile + br2 + `.interfaces["1"]: interface ID 1 is also used by ` + br1},
		},
		"link_to invalid for a core AS": {
			topo: func(m map[string]any) { ifMap(m, "br1-ff00_0_110-1", "1")["link_to"] = "PARENT" },
			want: []string{topoFile + if1 + `.link_to: "PARENT"`, "core, child or peer"},
		},
		"neighbour isd_as invalid": {
			topo: func(m map[string]any) { ifMap(m, "br1-ff00_0_110-1", "1")["isd_as"] = "garbage" },
			want: []string{topoFile + if1 + `.isd_as: "garbage"`},
		},
		"null interface": {
			topo: func(m map[string]any) { brMap(m, "br1-ff00_0_110-1")["interfaces"].(map[string]any)["1"] = nil },
			want: []string{topoFile + if1 + ": is null"},
		},

		// The keys directory.
		"keys dir missing": {whole: true,
			toml: "router_id = \"br1-ff00_0_110-1\"\ntopology = \"topology.json\"\nkeys = \"nokeys\"\n",
			want: []string{tomlFile + "keys: stat $DIR/nokeys: no such file"}},
		"keys not a directory": {whole: true,
			toml: "router_id = \"br1-ff00_0_110-1\"\ntopology = \"topology.json\"\nkeys = \"topology.json\"\n",
			want: []string{tomlFile + "keys: $DIR/topology.json is not a directory"}},
		"master0 missing": {
			files: map[string]string{"keys/master0.key": removeFile},
			want:  []string{"$DIR/keys/master0.key: no such file or directory; copy"},
		},
		"master0 missing, master1 too": {
			files: map[string]string{"keys/master0.key": removeFile, "keys/master1.key": removeFile},
			want:  []string{"$DIR/keys/master0.key: no such file"},
		},
		"master0 not base64": {
			files: map[string]string{"keys/master0.key": "not base64!"},
			want:  []string{"$DIR/keys/master0.key: not valid base64"},
		},
		"master0 too short": {
			files: map[string]string{"keys/master0.key": b64(8)},
			want:  []string{"$DIR/keys/master0.key: the key is 8 bytes, need at least 16"},
		},
		"master0 too short, master1 absent": {
			files: map[string]string{"keys/master0.key": b64(8), "keys/master1.key": removeFile},
			want:  []string{"$DIR/keys/master0.key: the key is 8 bytes"},
		},
		"master1 not base64": {
			files: map[string]string{"keys/master1.key": "###"},
			want:  []string{"$DIR/keys/master1.key: not valid base64"},
		},
		"master1 empty": {
			files: map[string]string{"keys/master1.key": ""},
			want:  []string{"$DIR/keys/master1.key: the key is 0 bytes"},
		},
	}
	for name, tc := range tests {
		t.Run(name, tc.run)
	}
}

// TestConfigValidate checks Validate on configurations built by hand.
func TestConfigValidate(t *testing.T) {
	good := func(t *testing.T) *Config {
		c, err := LoadConfig("testdata/br.toml")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := map[string]struct {
		edit func(c *Config)
		want string // "" means valid
	}{
		"loaded":             {edit: func(c *Config) {}},
		"no files":           {edit: func(c *Config) { c.Path, c.TopologyPath, c.KeysDir = "", "", "" }},
		"no interfaces":      {edit: func(c *Config) { c.Interfaces = nil }},
		"zero SCMP":          {edit: func(c *Config) { c.SCMP = "" }, want: `testdata/br.toml: scmp: "" is not valid`},
		"zero XDPMode":       {edit: func(c *Config) { c.XDPMode = "" }, want: `testdata/br.toml: xdp_mode: "" is not valid`},
		"no key":             {edit: func(c *Config) { c.Keys[0] = nil }, want: "testdata/br.toml: keys: forwarding key 0 is 0 bytes"},
		"short key 1":        {edit: func(c *Config) { c.Keys[1] = []byte{1} }, want: "forwarding key 1 is 1 bytes"},
		"zero IA":            {edit: func(c *Config) { c.IA = 0 }, want: "testdata/topology.json: isd_as"},
		"zero kind":          {edit: func(c *Config) { c.Interfaces[0].Kind = 0 }, want: if1 + ": kind InterfaceKind(0)"},
		"zero ID":            {edit: func(c *Config) { c.Interfaces[0].ID = 0 }, want: br1 + `.interfaces["0"]: interface ID 0 is reserved`},
		"duplicate ID":       {edit: func(c *Config) { c.Interfaces[1].ID = 1 }, want: "interface ID 1 is also used by " + br1},
		"bad link type":      {edit: func(c *Config) { c.Interfaces[0].LinkType = "CHILD" }, want: if1 + `.link_to: "CHILD"`},
		"no router":          {edit: func(c *Config) { c.Interfaces[0].Router = "" }, want: "Router is empty"},
		"external elsewhere": {edit: func(c *Config) { c.Interfaces[3].Kind = External }, want: "make it Sibling"},
		"sibling here":       {edit: func(c *Config) { c.Interfaces[0].Kind = Sibling }, want: "make it External"},
		"zero MTU":           {edit: func(c *Config) { c.Interfaces[0].MTU = 0 }, want: if1 + ".mtu"},
		"zero internal":      {edit: func(c *Config) { c.Internal = netip.AddrPort{} }, want: br1 + ".internal_addr: missing"},
		"ports half set":     {edit: func(c *Config) { c.DispatchedPortStart = 0 }, want: "dispatched_ports: 0-32767"},
		"zero sibling addr": {edit: func(c *Config) { c.Interfaces[3].SiblingAddr = netip.AddrPort{} },
			want: br2 + ".internal_addr: missing"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := good(t)
			tc.edit(c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && err == nil:
				t.Fatalf("Validate succeeded, want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q\ndoes not contain %q", err, tc.want)
			}
		})
	}
}

func routers(m map[string]any) map[string]any { return m["border_routers"].(map[string]any) }

func brMap(m map[string]any, name string) map[string]any { return routers(m)[name].(map[string]any) }

func ifMap(m map[string]any, name, id string) map[string]any {
	return brMap(m, name)["interfaces"].(map[string]any)[id].(map[string]any)
}

// underlay returns the underlay of br1-ff00_0_110-1's interface id.
func underlay(m map[string]any, id string) map[string]any {
	return ifMap(m, "br1-ff00_0_110-1", id)["underlay"].(map[string]any)
}

func renumber(m map[string]any, name, from, to string) {
	intfs := brMap(m, name)["interfaces"].(map[string]any)
	intfs[to] = intfs[from]
	delete(intfs, from)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readKey(t *testing.T, path string) []byte {
	t.Helper()
	return mustB64(t, strings.TrimSpace(string(readFile(t, path))))
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An attach's mode, overriding xdp_mode, is checked against the
// configuration before anything is loaded or pinned.
func TestAttachModeChecked(t *testing.T) {
	cases := map[string]struct {
		edit func(*Config)
		mode string
		want string
	}{
		"unknown mode":            {mode: "turbo", want: `XDP mode "turbo": use "auto", "native" or "generic"`},
		"generic with cpus":       {edit: func(c *Config) { c.CPUs = []int{0} }, mode: XDPModeGeneric, want: "cpus needs native XDP"},
		"generic with forward_ip": {edit: func(c *Config) { c.ForwardIP = true }, mode: XDPModeGeneric, want: "forward_ip needs native XDP"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadConfig("testdata/br.toml")
			if err != nil {
				t.Fatal(err)
			}
			if c.edit != nil {
				c.edit(cfg)
			}
			name := "fp-tmode-none"
			err = Attach(cfg, AttachOptions{Mode: c.mode, Name: name})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("attach --mode %s: %v, want %q", c.mode, err, c.want)
			}
			if _, err := os.Stat(PinDir(name)); !os.IsNotExist(err) {
				t.Fatalf("a refused attach left %s", PinDir(name))
			}
		})
	}
}
