package systemd_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/fw"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/obs"
	"github.com/fastpath-dev/fastpath/internal/obs/obstest"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
	"github.com/fastpath-dev/fastpath/internal/tra"
)

// namespaces makes named network namespaces that the test removes.
func namespaces(t *testing.T, names ...string) {
	t.Helper()
	for _, ns := range names {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netns.Delete(ns) })
		in(t, ns, "ip", "link", "set", "lo", "up")
		// Router solicitations and DAD would add packets of their own.
		in(t, ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
}

// in runs a command in a namespace.
func in(t *testing.T, ns string, args ...string) {
	t.Helper()
	mustRun(t, "ip", append([]string{"netns", "exec", ns}, args...)...)
}

// xdpAttached says whether a device has an XDP program.
func xdpAttached(t *testing.T, ns, dev string) bool {
	t.Helper()
	h, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	x := l.Attrs().Xdp
	return x != nil && x.Attached
}

// The firewall's unit, as shipped (the instance names the device and the
// rules file), attaches fw serve to a device in the host's namespace,
// reloads on `systemctl reload`, and on stop ends with success and leaves
// the firewall attached.
func TestFwServiceRuns(t *testing.T) {
	u := unique(t)
	dev, peerNS := u+"fw", u+"-p"
	namespaces(t, peerNS)
	mustRun(t, "ip", "link", "add", dev, "type", "veth", "peer", "name", "p0", "netns", peerNS)
	t.Cleanup(func() { exec.Command("ip", "link", "del", dev).Run() })
	mustRun(t, "ip", "link", "set", dev, "up")
	in(t, peerNS, "ip", "link", "set", "p0", "up")
	rules := "/etc/fastpath/fw-" + dev + ".toml"
	writeFile(t, rules, "default = \"pass\"\n\n[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = 7\n")
	t.Cleanup(func() { fw.Detach(dev, nil) })

	m := startManager(t)
	s := startService(t, m, "fastpath-fw@.service", dev, "")
	s.waitOutput(t, "firewall attached", 10*time.Second)
	if !xdpAttached(t, "", dev) {
		t.Fatalf("%s active, and %s has no XDP program:\n%s", s.name, dev, s.output())
	}
	// Its metrics, on the port the unit gives, from the sandbox.
	body := obstest.Scrape(t, "http://"+obs.AddrFW+"/metrics")
	obstest.CheckMetrics(t, body)
	for _, series := range []string{`fastpath_fw_rules{name="` + dev + `"}`, `fastpath_fw_reloads_total{name="` + dev + `",result="ok"}`,
		`fastpath_fw_device_attached{device="` + dev + `",mode="native",name="` + dev + `"}`} {
		if v, ok := obstest.Value(body, series); !ok || v != "1" {
			t.Errorf("%s: %q, want 1:\n%s", series, v, body)
		}
	}
	if _, err := os.Stat(fw.PinDir(dev)); err != nil {
		t.Fatalf("%s active, and no pins: %v", s.name, err)
	}
	m.mustSystemctl(t, "reload", s.name)
	s.waitOutput(t, "installed in place", 10*time.Second)
	s.noDenial(t)
	s.stop(t)
	if !xdpAttached(t, "", dev) {
		t.Fatalf("%s stopped, and the firewall left %s:\n%s", s.name, dev, s.output())
	}
}

// The border router's unit with the drop-in its comments give for a
// namespace (--netns, CAP_SYS_ADMIN, setns) attaches br serve, with its
// transmit-drop counter, to a router's devices in that namespace, reloads on `systemctl reload`, and on
// stop ends with success and leaves the router attached.
func TestBrServiceRuns(t *testing.T) {
	u := unique(t)
	router, dut, nb := u+"-br", u+"-r", u+"-n"
	namespaces(t, dut, nb)
	mustRun(t, "ip", "link", "add", "a0", "netns", nb, "type", "veth", "peer", "name", "d0", "netns", dut)
	mustRun(t, "ip", "link", "add", "b0", "netns", nb, "type", "veth", "peer", "name", "d1", "netns", dut)
	for _, a := range []struct{ ns, dev, addr string }{{nb, "a0", "10.1.0.1/24"}, {dut, "d0", "10.1.0.2/24"}, {dut, "d1", "10.2.0.2/24"}, {nb, "b0", "10.2.0.1/24"}} {
		in(t, a.ns, "ip", "addr", "add", a.addr, "dev", a.dev)
		in(t, a.ns, "ip", "link", "set", a.dev, "up")
	}
	// What the router's FIB lookups need of the host.
	in(t, dut, "sysctl", "-qw", "net.ipv4.conf.lo.forwarding=1")
	dir := filepath.Join(work, router)
	writeFile(t, filepath.Join(dir, "topology.json"), fmt.Sprintf(`{
  "isd_as": "1-ff00:0:110", "mtu": 1472, "dispatched_ports": "31000-32767", "attributes": [],
  "border_routers": {
    %q: {
      "internal_addr": "10.1.0.2:30042",
      "interfaces": {
        "1": {"underlay": {"local": "10.1.0.2:50000", "remote": "10.1.0.1:50000"}, "isd_as": "1-ff00:0:111", "link_to": "child", "mtu": 1472},
        "2": {"underlay": {"local": "10.2.0.2:50000", "remote": "10.2.0.1:50000"}, "isd_as": "1-ff00:0:100", "link_to": "parent", "mtu": 1472}
      }
    }
  }
}`, router))
	writeFile(t, filepath.Join(dir, "keys", "master0.key"), "IAOYbTs/CobLFV3T3jt6lQ==")
	writeFile(t, filepath.Join(dir, "keys", "master1.key"), "8fiM4fdey8zv/9OaQw8lKg==")
	// count_tx_drops: the tracing program too, which takes CAP_PERFMON.
	writeFile(t, "/etc/fastpath/br-"+router+".toml", fmt.Sprintf("router_id = %q\ntopology = %q\nkeys = %q\nscion_version = %q\ncount_tx_drops = true\n",
		router, filepath.Join(dir, "topology.json"), filepath.Join(dir, "keys"), scionproto.Default))
	t.Cleanup(func() { br.Detach(router, nil) })

	m := startManager(t)
	s := startService(t, m, "fastpath-br@.service", router, documentedDropIn(t, "fastpath-br@.service", "#   [Service]", dut))
	s.waitOutput(t, "router attached", 10*time.Second)
	for _, d := range []string{"d0", "d1"} {
		if !xdpAttached(t, dut, d) {
			t.Fatalf("%s active, and %s has no XDP program:\n%s", s.name, d, s.output())
		}
	}
	// The unit's --metrics: the sandbox lets serve listen and read the maps.
	body := obstest.Scrape(t, "http://"+obs.AddrBR+"/metrics")
	obstest.CheckMetrics(t, body)
	if v, ok := obstest.Value(body, `fastpath_br_device_attached{device="d0",mode="native",name="`+router+`"}`); !ok || v != "1" {
		t.Fatalf("%s's metrics say %q of d0, want it attached in native mode:\n%s", s.name, v, body)
	}
	m.mustSystemctl(t, "reload", s.name)
	s.waitOutput(t, "configuration reloaded and attached again in place", 10*time.Second)
	s.noDenial(t)
	s.stop(t)
	if !xdpAttached(t, dut, "d0") {
		t.Fatalf("%s stopped, and the router left d0:\n%s", s.name, s.output())
	}
}

// The translator's unit with the drop-in its comments give for a
// namespace attaches tra run to a host in that namespace (its pair, the
// pair's IPv6 settings, its lock) and runs the daemon, which asks for
// paths (of a scionproto daemon that is not there: it says so and goes
// on); on stop it ends with success.
func TestTraServiceRuns(t *testing.T) {
	u := unique(t)
	host, nb := u+"-h", u+"-n"
	namespaces(t, host, nb)
	mustRun(t, "ip", "link", "add", "eth0", "netns", host, "type", "veth", "peer", "name", "gw0", "netns", nb)
	in(t, host, "ip", "addr", "add", "10.101.0.2/24", "dev", "eth0")
	in(t, host, "ip", "link", "set", "eth0", "up")
	in(t, nb, "ip", "addr", "add", "10.101.0.254/24", "dev", "gw0")
	in(t, nb, "ip", "link", "set", "gw0", "up")
	in(t, host, "ip", "route", "add", "10.201.0.0/24", "via", "10.101.0.254")
	dir := filepath.Join(work, u+"-tra")
	writeFile(t, filepath.Join(dir, "topology.json"), `{
  "isd_as": "1-64513", "mtu": 1472, "dispatched_ports": "31000-32767", "attributes": [],
  "border_routers": {"br1": {"internal_addr": "10.201.0.1:30042", "interfaces": {
    "1": {"underlay": {"local": "10.255.1.2:50000", "remote": "10.255.1.1:50000"}, "isd_as": "1-64512", "link_to": "parent", "mtu": 1472}}}},
  "control_service": {"cs1": {"addr": "10.101.0.1:31000"}},
  "discovery_service": {"cs1": {"addr": "10.101.0.1:31000"}}
}`)
	config := "/etc/fastpath/tra-" + u + ".toml"
	writeFile(t, config, fmt.Sprintf("topology = %q\ndaemon = \"127.0.0.1:1\"\ndevice = \"eth0\"\naddress = \"10.101.0.2\"\n", filepath.Join(dir, "topology.json")))
	cfg, err := tra.LoadConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	name := tra.Name(cfg.Pair, host)
	t.Cleanup(func() { tra.Detach(name) })

	// The documented drop-in serves metrics on obs.AddrTRA; the test
	// takes a free port of its namespace instead, where it scrapes them
	// while tra run runs in the host's.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics := ln.Addr().String()
	ln.Close()
	dropIn := documentedDropIn(t, "fastpath-tra@.service", "#   [Service]", host)
	if !strings.Contains(dropIn, "--metrics "+obs.AddrTRA) {
		t.Fatalf("the documented drop-in serves no metrics on %s:\n%s", obs.AddrTRA, dropIn)
	}
	m := startManager(t)
	s := startService(t, m, "fastpath-tra@.service", u, strings.ReplaceAll(dropIn, obs.AddrTRA, metrics))
	s.waitOutput(t, "paths from", 10*time.Second)
	body := obstest.Scrape(t, "http://"+metrics+"/metrics")
	obstest.CheckMetrics(t, body)
	if v, _ := obstest.Value(body, `fastpath_tra_device_attached{device="eth0",mode="native",name="`+name+`"}`); v != "1" {
		t.Fatalf("%s serves no device attached:\n%s", s.name, body)
	}
	if !xdpAttached(t, host, "eth0") {
		t.Fatalf("%s runs, and eth0 has no XDP program:\n%s", s.name, s.output())
	}
	if _, err := os.Stat(filepath.Join(tra.LockDir, "tra-"+name+".lock")); err != nil {
		t.Fatalf("%s runs, and its lock: %v", s.name, err)
	}
	// A second of the daemon's work: the sandbox refuses nothing later.
	time.Sleep(time.Second)
	s.noDenial(t)
	if w := "warning"; strings.Contains(strings.ToLower(s.output()), w) {
		t.Fatalf("%s warned:\n%s", s.name, s.output())
	}
	s.stop(t)
}

var rtPackets = regexp.MustCompile(`: (\d+) packets in`)

// The runtime's unit, with its environment file and the drop-ins its
// comments give for a namespace (NetworkNamespacePath) and for a TAP
// device (/dev/net/tun), runs an XDP
// program that sends each frame back (xdptx) with the JIT over AF_XDP on a
// device in that namespace, and does send frames back, which its metrics
// count; SIGUSR1 writes the maps into its state folder; on stop it ends
// with success and takes its programs off the device.
func TestRtServiceRuns(t *testing.T) {
	u := unique(t)
	ns := u + "-x"
	namespaces(t, ns)
	mustRun(t, "ip", "link", "add", "x0", "netns", ns, "type", "veth", "peer", "name", "x1", "netns", ns)
	in(t, ns, "ip", "addr", "add", "10.9.0.1/24", "dev", "x1")
	for _, d := range []string{"x0", "x1"} {
		in(t, ns, "ip", "link", "set", d, "up")
	}
	fastpathBinary(t)
	if _, err := os.Stat(filepath.Join(work, "bin", "fastpath-rt")); err != nil {
		t.Fatal("no fastpath-rt built to run the unit with: `make build` builds it")
	}
	// The object goes where the unit can read it: a checkout under /root
	// or /home is hidden from it (ProtectHome), as an operator's would be.
	b, err := os.ReadFile("../../internal/bench/xdptx_bpfel.o")
	if err != nil {
		t.Fatalf("%v: `make build` (go generate in internal/bench) makes it", err)
	}
	obj := filepath.Join(work, "xdptx.o")
	if err := os.WriteFile(obj, b, 0o644); err != nil {
		t.Fatal(err)
	}
	maps := "/var/lib/fastpath/rt/" + u + ".maps"
	t.Cleanup(func() {
		os.Remove(maps)
		os.Remove(filepath.Dir(maps)) // if no other instance's maps are there
	})
	tap := u + "t"
	writeFile(t, "/etc/fastpath/rt-"+u+".env", "OBJ="+obj+"\nDEV=x0\nRT_ARGS=--engine jit --maps-out "+maps+" --tap "+tap+"\n")

	m := startManager(t)
	dropIn := documentedDropIn(t, "fastpath-rt@.service", "#   [Service]", ns) + documentedDropIn(t, "fastpath-rt@.service", "#   BindPaths=/dev/net/tun", ns)
	s := startService(t, m, "fastpath-rt@.service", u, dropIn)
	s.waitOutput(t, "on x0 queue 0", 10*time.Second)
	h, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.LinkByName(tap); err != nil {
		t.Fatalf("%s runs, and its TAP device %s: %v\n%s", s.name, tap, err, s.output())
	}
	// Frames into x0 (ARP for a neighbour that is not there) for the
	// program to send back.
	exec.Command("ip", "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "1", "10.9.0.2").Run()
	// The unit serves its metrics on its default address: it counted them.
	checkRtMetrics(t, ns, "x0")
	// SIGUSR1 to the unit writes the maps into its state folder, and ends
	// nothing.
	m.mustSystemctl(t, "kill", "-s", "USR1", s.name)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(maps); err == nil {
			break
		}
	}
	if _, err := os.Stat(maps); err != nil {
		t.Fatalf("%s after SIGUSR1: %v\n%s", s.name, err, s.output())
	}
	if state := m.show(t, s.name, "ActiveState"); state != "active" {
		t.Fatalf("%s %s after SIGUSR1, want active:\n%s", s.name, state, s.output())
	}
	s.noDenial(t)
	s.stop(t)
	m2 := rtPackets.FindStringSubmatch(s.output())
	if m2 == nil {
		t.Fatalf("%s said no count of packets:\n%s", s.name, s.output())
	}
	if n, _ := strconv.Atoi(m2[1]); n == 0 {
		t.Fatalf("%s ran no packet:\n%s", s.name, s.output())
	}
	if xdpAttached(t, ns, "x0") {
		t.Fatalf("%s stopped, and x0 still has an XDP program", s.name)
	}
}
