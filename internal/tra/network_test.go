package tra

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scionproto/scion/pkg/addr"
	"github.com/scionproto/scion/pkg/daemon"
	"github.com/scionproto/scion/pkg/slayers/path/scion"
	"github.com/scionproto/scion/pkg/snet"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// The translator in the lab's SCION network: unmodified IPv6 hosts in two
// leaf ASes, fastpath's border router in hybrid mode in front of every
// AS's reference router, each leaf on two links to the core.

// Roles this test binary plays when it runs again inside a namespace: the
// daemon's and a native SCION application's sockets must be made there,
// by every thread that makes one.
const (
	envDaemon = "FASTPATH_TRA_TEST_DAEMON" // the translator's configuration
	envSnet   = "FASTPATH_TRA_TEST_SNET"   // daemon|local IP|remote ISD-AS,IP:port|message
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(envDaemon); cfg != "" {
		os.Exit(runDaemon(cfg))
	}
	if spec := os.Getenv(envSnet); spec != "" {
		os.Exit(runSnetEcho(spec))
	}
	code := m.Run()
	if err := stopLabNetwork(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// runDaemon is `fastpath tra run` for an attached translator.
func runDaemon(path string) int {
	cfg, err := LoadConfig(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// As `fastpath tra run` does: attach again from inside the namespace.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := AttachAndRun(ctx, cfg, RunOptions{Log: log, Refresh: 10 * time.Second}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runSnetEcho sends one datagram with scionproto's snet on a path the
// daemon gives, and prints the reply.
func runSnetEcho(spec string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	f := strings.Split(spec, "|")
	if len(f) != 4 {
		return fail(fmt.Errorf("bad spec %q", spec))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sd, err := daemon.NewService(f[0]).Connect(ctx)
	if err != nil {
		return fail(err)
	}
	defer sd.Close()
	local, err := sd.LocalIA(ctx)
	if err != nil {
		return fail(err)
	}
	remote, err := snet.ParseUDPAddr(f[2])
	if err != nil {
		return fail(err)
	}
	paths, err := sd.Paths(ctx, remote.IA, local, daemon.PathReqFlags{})
	if err != nil || len(paths) == 0 {
		return fail(fmt.Errorf("paths to %s: %v (%d)", remote.IA, err, len(paths)))
	}
	remote.Path, remote.NextHop = paths[0].Dataplane(), paths[0].UnderlayNextHop()
	sn := &snet.SCIONNetwork{Topology: sd, SCMPHandler: snet.DefaultSCMPHandler{}}
	conn, err := sn.Dial(ctx, "udp", &net.UDPAddr{IP: net.ParseIP(f[1])}, remote)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	buf := make([]byte, 2048)
	// The translator holds the first datagram while it fetches a path
	// back; a lost one is sent again.
	for try := 0; try < 5; try++ {
		if _, err := conn.Write([]byte(f[3])); err != nil {
			return fail(err)
		}
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := conn.Read(buf)
		if err == nil {
			fmt.Print(string(buf[:n]))
			return 0
		}
	}
	return fail(errors.New("no reply"))
}

var lab struct {
	sync.Mutex
	n       *scionlab.Network
	version string // the scionproto release n runs
	binDir  string // fastpath built for hybrid mode, if the tests built it
	as      []scionlab.AS
	err     error
}

// labNetwork is the package's network at the release tests run on unless
// they name one (scionproto.Chosen: the default, or FASTPATH_SCION_VERSION).
func labNetwork(t *testing.T) (scionlab.Network, []scionlab.AS) {
	t.Helper()
	v, err := scionproto.Chosen()
	if err != nil {
		t.Fatal(err)
	}
	return labNetworkAt(t, v)
}

// labNetworkAt is one network for the tests of the package, running
// scionproto release version: brought up by the first test that needs it,
// taken down when a test needs another release (one network at a time:
// the machine runs other labs beside) and when they are done.
func labNetworkAt(t *testing.T, version string) (scionlab.Network, []scionlab.AS) {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	lab.Lock()
	defer lab.Unlock()
	if lab.n != nil && lab.version != version {
		if err := downLabNetwork(); err != nil {
			t.Fatalf("take the network of scionproto %s down for %s: %v", lab.version, version, err)
		}
	}
	if lab.n == nil {
		b := make([]byte, 2)
		rand.Read(b)
		dir, err := os.MkdirTemp("", "fastpath-tra-test-")
		if err != nil {
			t.Fatal(err)
		}
		n := scionlab.Network{Prefix: "fp-t" + hex.EncodeToString(b) + "-", Dir: filepath.Join(dir, "scion")}
		lab.n, lab.version, lab.err = &n, version, nil
		if os.Getenv("FASTPATH_BIN") == "" {
			// Hybrid mode runs `fastpath br serve` for every AS; the
			// binary outlives this test and this network (another
			// release's may follow), so it lives in a dir of its own,
			// removed when the tests are done.
			if lab.binDir, err = os.MkdirTemp("", "fastpath-tra-test-bin-"); err != nil {
				t.Fatal(err)
			}
			bin, err := labtest.BuildFastpath(lab.binDir)
			if err != nil {
				t.Fatal(err)
			}
			os.Setenv("FASTPATH_BIN", bin)
		}
		var log strings.Builder
		st, err := n.Up(context.Background(), scionlab.UpOptions{Version: version, ASes: 3, Links: 2, Hybrid: true, Log: &log})
		if err != nil {
			lab.err = fmt.Errorf("up (scionproto %s): %v\n%s", version, err, log.String())
		} else {
			t.Logf("scionproto %s: first path after %.1f s", version, st.PathsAfter.Seconds())
			lab.as, _, lab.err = n.ASes()
		}
	}
	if lab.err != nil {
		t.Fatal(lab.err)
	}
	return *lab.n, lab.as
}

func stopLabNetwork() error {
	lab.Lock()
	defer lab.Unlock()
	err := downLabNetwork()
	if lab.binDir != "" {
		os.RemoveAll(lab.binDir)
		lab.binDir = ""
	}
	return err
}

// downLabNetwork takes the package's network down; lab is locked.
func downLabNetwork() error {
	if lab.n == nil {
		return nil
	}
	err := lab.n.Down(io.Discard)
	os.RemoveAll(filepath.Dir(lab.n.Dir))
	lab.n, lab.version, lab.as, lab.err = nil, "", nil, nil
	return err
}

// releases are the scionproto releases a test runs its subtests on
// (scionproto.ToTest), the one the package's network runs now first, so
// that tests in a row bring a network up as seldom as may be.
func releases(t *testing.T) []string {
	t.Helper()
	vs, err := scionproto.ToTest()
	if err != nil {
		t.Fatal(err)
	}
	vs = slices.Clone(vs)
	lab.Lock()
	running := lab.version
	lab.Unlock()
	if i := slices.Index(vs, running); i > 0 {
		vs = append([]string{running}, slices.Delete(vs, i, i+1)...)
	}
	return vs
}

// host is an end host with a translator and its daemon.
type host struct {
	as   scionlab.AS
	ns   string
	smip netip.Addr
	name string
	log  string
	cmd  *exec.Cmd // tra run
}

type hostOptions struct {
	maxPaths int
	// version is the scionproto release of the AS's routers, the
	// translator's scion_version ("": scionproto.Chosen(), the release a
	// network runs unless told).
	version string
	// toml is added to the translator's configuration ([[destination]]
	// tables, say).
	toml string
}

// translate attaches a translator to an AS's end host and runs its
// daemon; both go when the test ends.
func translate(t *testing.T, a scionlab.AS, o hostOptions) *host {
	t.Helper()
	if o.maxPaths == 0 {
		o.maxPaths = 2
	}
	if o.version == "" {
		v, err := scionproto.Chosen()
		if err != nil {
			t.Fatal(err)
		}
		o.version = v
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tra.toml")
	toml := fmt.Sprintf("topology = %q\ndaemon = %q\ndevice = %q\naddress = %q\nmax_paths = %d\nscion_version = %q\n",
		filepath.Join(a.Dir, "topology.json"), a.Daemon(), scionlab.HostDev, a.Host, o.maxPaths, o.version) + o.toml
	if err := os.WriteFile(cfgPath, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	name, err := Attach(cfg, AttachOptions{Netns: a.HostNetns})
	if err != nil {
		t.Fatal(err)
	}
	h := &host{as: a, ns: a.HostNetns, smip: cfg.SMIP, name: name, log: filepath.Join(dir, "daemon.log")}
	t.Cleanup(func() {
		if err := Detach(name); err != nil {
			t.Error(err)
		}
	})
	logf, err := os.Create(h.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envDaemon+"="+cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := netns.Run(a.HostNetns, cmd.Start); err != nil {
		t.Fatal(err)
	}
	h.cmd = cmd
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(h.log)
			t.Logf("daemon of %s:\n%s", name, b)
			if p, err := OpenPinned(name); err == nil {
				c, _ := p.Counts()
				t.Logf("counters of %s: %v", name, c)
				p.Close()
			}
		}
	})
	return h
}

func (h *host) counts(t *testing.T) Counts {
	t.Helper()
	p, err := OpenPinned(h.name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := p.Counts()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// udpListen opens a UDP socket on the host's SM-IP address, in its
// namespace.
func (h *host) udpListen(t *testing.T, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := netns.Run(h.ns, func() error {
		var err error
		c, err = net.ListenUDP("udp6", &net.UDPAddr{IP: h.smip.AsSlice(), Port: port})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo answers every datagram on the connection with itself.
func echo(c *net.UDPConn) {
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFromUDP(buf)
		if err != nil {
			return
		}
		c.WriteToUDP(buf[:n], from)
	}
}

func (h *host) command(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	var out []byte
	err := netns.Run(h.ns, func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	return string(out), err
}

var pingRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

func received(t *testing.T, out string) int {
	t.Helper()
	m := pingRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary in ping's output:\n%s", out)
	}
	n, _ := strconv.Atoi(m[2])
	return n
}

// Two translated hosts in leaf ASes, on a network of each release tested:
// a new flow's first packets, ping6, TCP, UDP on a port outside
// dispatched_ports (the one v0.14.0 and later routers deliver it to), and
// native SCION applications reaching a translated host.
func TestTranslatedHosts(t *testing.T) {
	for _, v := range releases(t) {
		t.Run(v, func(t *testing.T) { testTranslatedHosts(t, v) })
	}
}

func testTranslatedHosts(t *testing.T, version string) {
	n, as := labNetworkAt(t, version)
	a, b := translate(t, as[1], hostOptions{version: version}), translate(t, as[2], hostOptions{version: version})

	// Neither translator has a path yet: every datagram of the burst waits
	// for one, and none is lost.
	t.Run("first packets of a new flow", func(t *testing.T) {
		const count = 50
		srv := b.udpListen(t, 31500)
		var cli *net.UDPConn
		if err := netns.Run(a.ns, func() error {
			var err error
			cli, err = net.DialUDP("udp6", nil, &net.UDPAddr{IP: b.smip.AsSlice(), Port: 31500})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		for i := 0; i < count; i++ {
			msg := make([]byte, 200)
			binary.BigEndian.PutUint32(msg, uint32(i))
			if _, err := cli.Write(msg); err != nil {
				t.Fatal(err)
			}
		}
		got := map[uint32]bool{}
		buf := make([]byte, 2048)
		for len(got) < count {
			srv.SetReadDeadline(time.Now().Add(5 * time.Second))
			k, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("%d of %d datagrams arrived: %v", len(got), count, err)
			}
			if k != 200 || !from.IP.Equal(a.smip.AsSlice()) {
				t.Fatalf("datagram of %d bytes from %s, want 200 from %s", k, from.IP, a.smip)
			}
			got[binary.BigEndian.Uint32(buf)] = true
		}
		c := a.counts(t)
		if c["no_path"].Packets == 0 || c["queue_full"].Packets != 0 {
			t.Fatalf("counters %v: want packets held (no_path) and none lost", c)
		}
	})

	t.Run("ping6", func(t *testing.T) {
		out, err := a.command(t, "ping", "-6", "-c", "10", "-i", "0.2", "-W", "2", b.smip.String())
		if got := received(t, out); got != 10 || err != nil {
			t.Fatalf("%d of 10 echo replies (%v):\n%s", got, err, out)
		}
	})

	// TCP with the hosts' offloads as they are: the translator's own
	// device pair cuts what the host's TCP sends.
	t.Run("tcp with offloads on", func(t *testing.T) {
		const size = 64 << 20
		var ln net.Listener
		if err := netns.Run(b.ns, func() error {
			var err error
			ln, err = net.Listen("tcp6", net.JoinHostPort(b.smip.String(), "5001"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		type result struct {
			sum [32]byte
			n   int64
			err error
		}
		done := make(chan result, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				done <- result{err: err}
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(60 * time.Second))
			h := sha256.New()
			k, err := io.Copy(h, c)
			var r result
			copy(r.sum[:], h.Sum(nil))
			r.n, r.err = k, err
			done <- r
		}()
		var conn net.Conn
		if err := netns.Run(a.ns, func() error {
			var err error
			conn, err = net.DialTimeout("tcp6", net.JoinHostPort(b.smip.String(), "5001"), 10*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, size)
		rand.Read(data)
		start := time.Now()
		conn.SetDeadline(time.Now().Add(60 * time.Second))
		if _, err := conn.Write(data); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		r := <-done
		if r.err != nil || r.n != size || r.sum != sha256.Sum256(data) {
			t.Fatalf("received %d of %d bytes (%v), intact: %v", r.n, size, r.err, r.sum == sha256.Sum256(data))
		}
		t.Logf("%d MB in %s: %.0f Mbit/s", size>>20, time.Since(start).Round(time.Millisecond), float64(size*8)/time.Since(start).Seconds()/1e6)
	})

	// UDP to a port outside dispatched_ports, from an ephemeral port of
	// the client's: a v0.12.0 router hands both ways to the end-host port,
	// later ones to the port itself. Neither host's kernel gets a SCION
	// datagram for a port it has no socket on: the translator takes
	// them all.
	t.Run("udp outside dispatched_ports", func(t *testing.T) {
		const port = 5002
		noPorts := func(h *host) int { return udpNoPorts(t, h.ns) }
		beforeA, beforeB := noPorts(a), noPorts(b)
		cli := dialEcho(t, a, b, port)
		defer cli.Close()
		if p := cli.LocalAddr().(*net.UDPAddr).Port; p >= 31000 && p <= 32767 {
			t.Logf("the client's port %d lies in dispatched_ports", p)
		}
		buf := make([]byte, 2048)
		for i := range 20 {
			msg := []byte(fmt.Sprintf("datagram %d", i))
			if _, err := cli.Write(msg); err != nil {
				t.Fatal(err)
			}
			cli.SetReadDeadline(time.Now().Add(3 * time.Second))
			k, err := cli.Read(buf)
			if err != nil || !bytes.Equal(buf[:k], msg) {
				t.Fatalf("datagram %d: echo %q (%v); a's counters %v, b's %v", i, buf[:k], err, a.counts(t), b.counts(t))
			}
		}
		if da, db := noPorts(a)-beforeA, noPorts(b)-beforeB; da != 0 || db != 0 {
			t.Fatalf("the hosts' kernels got %d and %d UDP datagrams for no socket (SCION the translator left them)", da, db)
		}
	})

	// A native SCION application in another AS: scionproto's scion ping
	// reaches the translated host, whose kernel answers ICMPv6 echo.
	t.Run("scion ping from a native host", func(t *testing.T) {
		dst := fmt.Sprintf("%s,%s", a.as.IA, a.as.Host)
		out, err := n.Scion(context.Background(), as[0], "ping", dst, "-c", "5", "--interval", "200ms", "--timeout", "2s")
		if got := received(t, out); got != 5 || err != nil {
			t.Fatalf("%d of 5 SCMP echo replies (%v):\n%s", got, err, out)
		}
	})

	// scionproto's snet in another AS talks UDP to the translated host.
	t.Run("snet UDP from a native host", func(t *testing.T) {
		srv := a.udpListen(t, 31600)
		go echo(srv)
		src := as[0]
		var out bytes.Buffer
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s,%s|%s", envSnet, src.Daemon(), src.Host, a.as.IA, netip.AddrPortFrom(a.as.Host, 31600), "hello from snet"))
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := netns.Run(src.HostNetns, cmd.Start); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil || out.String() != "hello from snet" {
			t.Fatalf("snet: %v\n%s", err, out.String())
		}
	})
}

// udpNoPorts is the UDP datagrams a namespace's kernel got for a port
// without a socket (/proc/net/snmp, Udp: NoPorts).
func udpNoPorts(t *testing.T, ns string) int {
	t.Helper()
	var b []byte
	if err := netns.Run(ns, func() error {
		var err error
		b, err = os.ReadFile("/proc/net/snmp")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		if i := slices.Index(names, "NoPorts"); i > 0 && i < len(f) {
			n, err := strconv.Atoi(f[i])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no Udp NoPorts in /proc/net/snmp of %s", ns)
	return 0
}

// egressOf is the interface by which a path leaves the first AS on it.
func egressOf(t *testing.T, raw []byte) uint16 {
	t.Helper()
	var d scion.Decoded
	if err := d.DecodeFromBytes(raw); err != nil {
		t.Fatal(err)
	}
	if d.InfoFields[0].ConsDir {
		return d.HopFields[0].ConsEgress
	}
	return d.HopFields[0].ConsIngress
}

// awaitAlternative waits until from's daemon offers a path to to whose
// hops (as showpaths prints them) do not contain avoid.
func awaitAlternative(t *testing.T, n scionlab.Network, from, to scionlab.AS, avoid string) {
	t.Helper()
	var out string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		// The probes' replies go to the translator (the host's end-host
		// port is its): showpaths says "no path alive", and lists them.
		out, _ = n.Scion(context.Background(), from, "showpaths", to.IA.String(), "--refresh", "-m", "10", "--timeout", "1s")
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "Hops: [") && !strings.Contains(line, avoid) {
				return
			}
		}
	}
	t.Fatalf("%s's daemon offers no path to %s without %q within 30 s:\n%s", from.IA, to.IA, avoid, out)
}

func (h *host) pathTo(t *testing.T, ia addr.IA) []Path {
	t.Helper()
	p, err := OpenPinned(h.name)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	all, err := p.Paths()
	if err != nil {
		t.Fatal(err)
	}
	return all[ia]
}

// The link a flow's path uses goes down: the routers' BFD notices, the
// reference routers answer with SCMP external interface down, the
// translators drop the paths through it and take others, and the flow
// goes on; on a network of each release tested (a v0.14.0 and later
// router delivers the SCMP error to the quoted datagram's source port, no
// longer to the end-host port).
func TestFailover(t *testing.T) {
	for _, v := range releases(t) {
		t.Run(v, func(t *testing.T) { testFailover(t, v) })
	}
}

func testFailover(t *testing.T, version string) {
	n, as := labNetworkAt(t, version)
	a, b := translate(t, as[1], hostOptions{maxPaths: 1, version: version}), translate(t, as[2], hostOptions{maxPaths: 1, version: version})
	f := startFlow(t, a, b, 31700)
	f.waitReplies("before the failure", time.Now(), 10*time.Second)

	paths := a.pathTo(t, b.as.IA)
	if len(paths) != 1 {
		t.Fatalf("%d paths installed to %s, want 1", len(paths), b.as.IA)
	}
	ifid := egressOf(t, paths[0].Raw)
	dev := fmt.Sprintf("if%d", ifid)
	// Failover needs another path known both ways: a young network's
	// control services register the segments of each link in turn.
	awaitAlternative(t, n, a.as, b.as, fmt.Sprintf("[%s %d>", a.as.IA, ifid))
	awaitAlternative(t, n, b.as, a.as, fmt.Sprintf(">%d %s]", ifid, a.as.IA))
	down := time.Now()
	if out, err := exec.Command("ip", "-n", a.as.Netns, "link", "set", dev, "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s down: %v: %s", dev, err, out)
	}
	t.Cleanup(func() {
		exec.Command("ip", "-n", a.as.Netns, "link", "set", dev, "up").Run()
	})
	f.waitReplies(fmt.Sprintf("after %s of %s went down", dev, a.as.IA), down, 15*time.Second)
	gap, lost, sent := f.gapSince(down)
	now := a.pathTo(t, b.as.IA)
	if len(now) != 1 || egressOf(t, now[0].Raw) == ifid {
		t.Fatalf("paths after the failure still leave by interface %d", ifid)
	}
	if p, err := br.OpenPinned(scionlab.HybridName(a.as)); err == nil {
		if tot, err := p.Totals(); err == nil {
			t.Logf("fastpath's router of %s: link_down %d, tx_failed %d, fib_pass %d, forwarded %d", a.as.IA, tot["link_down"].Packets, tot["tx_failed"].Packets, tot["fib_pass"].Packets, tot["forwarded"].Packets)
		}
		p.Close()
	}
	b2, _ := os.ReadFile(a.log)
	t.Logf("daemon of %s:\n%s", a.name, b2)
	t.Logf("interface %d of %s down: the flow went on by interface %d after a gap of %s; %d of %d datagrams lost", ifid, a.as.IA, egressOf(t, now[0].Raw), gap.Round(time.Millisecond), lost, sent)
}

// flow is a UDP flow between two translated hosts: a datagram every 10 ms
// from a to an echo server on b, replies noted by sequence number.
type flow struct {
	t       *testing.T
	a, b    *host
	mu      sync.Mutex
	sent    map[uint32]time.Time
	replied map[uint32]time.Time
}

// dialEcho starts an echo server on b's port and returns a socket of a's
// connected to it, by b's SM-IP address.
func dialEcho(t *testing.T, a, b *host, port int) *net.UDPConn {
	t.Helper()
	srv := b.udpListen(t, port)
	go echo(srv)
	var cli *net.UDPConn
	if err := netns.Run(a.ns, func() error {
		var err error
		cli, err = net.DialUDP("udp6", nil, &net.UDPAddr{IP: b.smip.AsSlice(), Port: port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return cli
}

// startFlow starts a flow from a to b's port; it stops when the test ends.
func startFlow(t *testing.T, a, b *host, port int) *flow {
	t.Helper()
	f := &flow{t: t, a: a, b: b, sent: map[uint32]time.Time{}, replied: map[uint32]time.Time{}}
	cli := dialEcho(t, a, b, port)
	go func() {
		buf := make([]byte, 64)
		for {
			k, err := cli.Read(buf)
			if err != nil {
				return
			}
			if k >= 4 {
				f.mu.Lock()
				f.replied[binary.BigEndian.Uint32(buf)] = time.Now()
				f.mu.Unlock()
			}
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for seq := uint32(0); ; seq++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			msg := make([]byte, 64)
			binary.BigEndian.PutUint32(msg, seq)
			f.mu.Lock()
			f.sent[seq] = time.Now()
			f.mu.Unlock()
			cli.Write(msg)
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait(); cli.Close() })
	return f
}

func (f *flow) repliesSince(t0 time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := 0
	for _, at := range f.replied {
		if at.After(t0) {
			k++
		}
	}
	return k
}

// waitReplies fails the test unless 50 replies come after t0 within the
// time given.
func (f *flow) waitReplies(what string, t0 time.Time, within time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for f.repliesSince(t0) < 50 {
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: %d replies within %s; a's counters %v, b's %v", what, f.repliesSince(t0), within, f.a.counts(f.t), f.b.counts(f.t))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gapSince is the flow's longest silence between replies since t0 (less
// a second), the datagrams that never came back, and all it sent.
func (f *flow) gapSince(t0 time.Time) (gap time.Duration, lost, sent int) {
	f.mu.Lock()
	var times []time.Time
	for _, at := range f.replied {
		if at.After(t0.Add(-time.Second)) {
			times = append(times, at)
		}
	}
	for seq, at := range f.sent {
		if _, ok := f.replied[seq]; !ok && at.Before(time.Now().Add(-time.Second)) {
			lost++
		}
	}
	sent = len(f.sent)
	f.mu.Unlock()
	slices.SortFunc(times, func(x, y time.Time) int { return x.Compare(y) })
	for i := 1; i < len(times); i++ {
		gap = max(gap, times[i].Sub(times[i-1]))
	}
	return gap, lost, sent
}
