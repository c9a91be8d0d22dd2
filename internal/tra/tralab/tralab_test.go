package tralab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/safchain/ethtool"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/tra"
)

func TestLookup(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string // rows, or the start of the error
	}{
		"every row":      {nil, "ip ip-notso ip-xdp sig"},
		"some, as given": {[]string{"sig", "ip"}, "sig ip"},
		"unknown":        {[]string{"ip", "nope"}, `no row "nope"`},
		"twice":          {[]string{"ip", "ip"}, `row "ip" named twice`},
	} {
		t.Run(name, func(t *testing.T) {
			rs, err := Lookup(tc.args)
			var got []string
			for _, r := range rs {
				got = append(got, r.Name)
			}
			if err != nil {
				got = []string{err.Error()}
			}
			// Rows registered by other files (the translator's) come after.
			if g := strings.Join(got, " "); !strings.HasPrefix(g, tc.want) {
				t.Fatalf("got %q, want %q", g, tc.want)
			}
		})
	}
}

// The ip rows and the translator's, briefly, on a SCION network the run
// brings up, as make demo runs them: every figure is there and positive,
// ratios are to ip, the system's ping6 crosses every row, and each row
// leaves the network's namespaces as it found them.
func TestRowsProduceFigures(t *testing.T) {
	n := testNetwork(t)
	var log strings.Builder
	rep, err := Bench(context.Background(), Options{
		Rows: []string{"ip", "ip-notso", "tra"}, Runs: 1, Seconds: 1, Pings: 20, UDPLen: DefaultUDPLen,
		Net: n, ASes: 3, Keep: true, Log: &log,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Log("\n" + rep.Table())
	if !strings.Contains(rep.Table(), "×4: four iperf3 processes, one stream each") {
		t.Fatalf("the legend does not say how ×4 ran:\n%s", rep.Table())
	}
	if got := strings.Count(log.String(), "3 packets transmitted, 3 received"); got != 3 {
		t.Fatalf("ping6 answered 3 of 3 on %d rows of 3:\n%s", got, log.String())
	}
	if rep.Baseline != "ip" || len(rep.Rows) != 3 {
		t.Fatalf("baseline %q, %d rows", rep.Baseline, len(rep.Rows))
	}
	for _, row := range rep.Rows {
		for _, m := range Metrics {
			f := row.Figures[m.Name]
			if f == nil || len(f.Runs) != 1 || !(f.Median > 0) {
				t.Fatalf("%s %s: %+v", row.Row, m.Name, f)
			}
			if row.Row == "ip" && f.Ratio != 1 {
				t.Fatalf("ip's own %s ratio is %v", m.Name, f.Ratio)
			}
			if f.Ratio <= 0 {
				t.Fatalf("%s %s has no ratio", row.Row, m.Name)
			}
		}
	}
	as, _, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	left, err := tra.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range left {
		if strings.HasPrefix(name, n.Prefix) {
			t.Fatalf("translator %s survived the row's teardown", name)
		}
	}
	for _, a := range as {
		for ns, dev := range map[string]string{a.Netns: ipASDev, a.HostNetns: ipHostDev} {
			h, err := netns.Handle(ns)
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.LinkByName(dev)
			h.Close()
			if err == nil {
				t.Fatalf("%s/%s survived the row's teardown", ns, dev)
			}
		}
		var fwd []byte
		netns.Run(a.Netns, func() error {
			fwd, err = os.ReadFile("/proc/sys/net/ipv6/conf/all/forwarding")
			return err
		})
		if strings.TrimSpace(string(fwd)) != "0" {
			t.Fatalf("IPv6 forwarding left on in %s (%q)", a.Netns, fwd)
		}
	}
	var md, png strings.Builder
	md.WriteString(rep.Markdown())
	if !strings.Contains(md.String(), "| ip-notso |") {
		t.Fatalf("Markdown without the ip-notso row:\n%s", md.String())
	}
	if err := rep.WritePNG(&png); err != nil || png.Len() == 0 {
		t.Fatalf("PNG: %v", err)
	}
}

// testNetwork is a SCION network of the test's own, brought up by what
// runs on it and taken down when the test ends, with nothing left behind;
// the tra row and the long runs run `fastpath tra run` as a user would, so
// fastpath is built for them.
func testNetwork(t *testing.T) scionlab.Network {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
	if os.Getenv("FASTPATH_BIN") == "" {
		bin := filepath.Join(t.TempDir(), "fastpath")
		if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/fastpath").CombinedOutput(); err != nil {
			t.Fatalf("go build fastpath: %v\n%s", err, out)
		}
		t.Setenv("FASTPATH_BIN", bin)
	}
	b := make([]byte, 2)
	rand.Read(b)
	n := scionlab.Network{Prefix: "fp-t" + hex.EncodeToString(b) + "-", Dir: filepath.Join(t.TempDir(), "scion")}
	t.Cleanup(func() {
		if err := n.Down(io.Discard); err != nil {
			t.Error(err)
		}
		all, _ := netns.List()
		for _, ns := range all {
			if strings.HasPrefix(ns, n.Prefix) {
				t.Errorf("namespace %s left behind", ns)
			}
		}
	})
	return n
}

// A short soak: a flap and a restart under steady UDP, TCP and ping6. The
// flows come through, every packet the hosts sent has a verdict, the
// daemons live on without panics, nothing grows.
func TestSoakBriefly(t *testing.T) {
	n := testNetwork(t)
	var log strings.Builder
	logs := t.TempDir()
	rep, err := Soak(context.Background(), SoakOptions{
		Net: n, Keep: true, Duration: 30 * time.Second, Sample: 5 * time.Second, FlapEvery: 10 * time.Second, FlapFor: 4 * time.Second,
		RestartEvery: 25 * time.Second, UDPRate: 100, UDPLen: 200, TCPRate: 10e6, Log: &log, LogDir: logs,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("\n%s", rep.Markdown())
	t.Cleanup(func() {
		if t.Failed() {
			ents, _ := os.ReadDir(logs)
			for _, e := range ents {
				b, _ := os.ReadFile(filepath.Join(logs, e.Name()))
				t.Logf("%s:\n%s", e.Name(), b)
			}
		}
	})
	s := rep.Summary
	if !s.DaemonsAlive || s.Panics != [2]uint64{} || s.TCPError != "" {
		t.Fatalf("daemons alive %v, panics %v, TCP %q", s.DaemonsAlive, s.Panics, s.TCPError)
	}
	if s.UnaccountedEnd != [2]int64{} {
		t.Fatalf("%v packets the hosts sent have no verdict", s.UnaccountedEnd)
	}
	// A flow may pause while a link it uses is down (4 s) and until the
	// daemon moves it (about a second); longer, it was stuck.
	if s.UDPSent < 2000 || s.UDPLongestGap > 4 || s.TCPLongestStall > 4 || s.PingReceived < s.PingSent*8/10 {
		t.Fatalf("flows: UDP %d lost of %d, longest gap %.1f s, TCP stall %.1f s, ping6 %d of %d", s.UDPLost, s.UDPSent, s.UDPLongestGap, s.TCPLongestStall, s.PingReceived, s.PingSent)
	}
	for h := 0; h < 2; h++ {
		if s.RSSMax[h] > 200<<10 || s.DestsMax[h] > 4 || s.GoroutinesMax[h] > 50 {
			t.Fatalf("host %d: RSS %d KiB, paths map %d, goroutines %d", h, s.RSSMax[h], s.DestsMax[h], s.GoroutinesMax[h])
		}
	}
	if !strings.Contains(log.String(), "down for") || !strings.Contains(log.String(), "restarted") {
		t.Fatalf("no flap or no restart happened:\n%s", log.String())
	}
}

// A short flood of destinations: the daemon stays bounded, the steady flow
// goes on.
func TestFloodBriefly(t *testing.T) {
	n := testNetwork(t)
	var log strings.Builder
	rep, err := Flood(context.Background(), FloodOptions{Net: n, Keep: true, Destinations: 20000, Duration: 5 * time.Second, Quiet: 3 * time.Second, UDPRate: 200, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("\n%s", rep.Markdown())
	if rep.Sent < 19000 || rep.RSSMaxKiB > 200<<10 || rep.Goroutines > 60 || rep.MapMax > 4 || rep.HeldMax > uint64(tra.DefaultLimits.Held) {
		t.Fatalf("sent %d: RSS %d KiB, goroutines %d, paths map %d, held %d", rep.Sent, rep.RSSMaxKiB, rep.Goroutines, rep.MapMax, rep.HeldMax)
	}
	if rep.During.Sent == 0 || rep.During.Lost > rep.During.Sent/50 {
		t.Fatalf("the steady flow lost %d of %d during the flood", rep.During.Lost, rep.During.Sent)
	}
}

// The ip-xdp row on a network of its own: it measures, every AS's router
// forwards its packets in XDP (the row's teardown fails it otherwise), and
// it leaves the network exactly as it found it: addresses, routes,
// neighbours, IPv6 switches, the hosts' offloads, the routers' files.
func TestIPXDPRow(t *testing.T) {
	n := testNetwork(t)
	var log strings.Builder
	if _, err := n.Up(context.Background(), scionlab.UpOptions{ASes: 3, Hybrid: true, Log: &log}); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	as, _, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	before := networkSnapshot(t, as)
	rep, err := Bench(context.Background(), Options{
		Rows: []string{"ip-xdp"}, Runs: 1, Seconds: 1, Pings: 20, UDPLen: DefaultUDPLen,
		Net: n, ASes: 3, Keep: true, Log: &log,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Log("\n" + rep.Table())
	if rep.Fair != FairBaseline || rep.Baseline != "" {
		t.Fatalf("fair baseline %q, baseline %q", rep.Fair, rep.Baseline)
	}
	for _, m := range Metrics {
		if f := rep.Rows[0].Figures[m.Name]; f == nil || !(f.Median > 0) || f.FairRatio != 1 {
			t.Fatalf("ip-xdp %s: %+v", m.Name, f)
		}
	}
	for _, a := range as {
		if !strings.Contains(log.String(), fmt.Sprintf("%s: ", a.IA)) {
			t.Fatalf("no count of %s's router:\n%s", a.IA, log.String())
		}
	}
	if strings.Count(log.String(), "packets forwarded in XDP, 0 passed up") != 3 {
		t.Fatalf("not every AS forwarded the row in XDP:\n%s", log.String())
	}
	if after := networkSnapshot(t, as); after != before {
		t.Fatalf("the row changed the network:\n%s", lineDiff(before, after))
	}
}

// networkSnapshot is what a row may touch of the network, as text.
func networkSnapshot(t *testing.T, as []scionlab.AS) string {
	t.Helper()
	var b strings.Builder
	for _, a := range as {
		for _, ns := range []string{a.Netns, a.HostNetns} {
			fmt.Fprintf(&b, "== %s\n", ns)
			for _, args := range [][]string{{"-6", "addr"}, {"-6", "route"}, {"-6", "neigh"}, {"-br", "link"}} {
				out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("ip %v in %s: %v: %s", args, ns, err, out)
				}
				b.Write(out)
			}
			if err := netns.Run(ns, func() error {
				for _, glob := range []string{"/proc/sys/net/ipv6/conf/*/*", "/proc/sys/net/ipv4/conf/*/forwarding"} {
					files, _ := filepath.Glob(glob)
					for _, f := range files {
						if strings.HasSuffix(f, "/stable_secret") {
							continue // unreadable until set
						}
						v, err := os.ReadFile(f)
						if err != nil {
							return err
						}
						fmt.Fprintf(&b, "%s %s", f, v)
					}
				}
				ifs, err := net.Interfaces()
				if err != nil {
					return err
				}
				et, err := ethtool.NewEthtool()
				if err != nil {
					return err
				}
				defer et.Close()
				for _, i := range ifs {
					if i.Name == "lo" {
						continue
					}
					f, err := et.Features(i.Name)
					if err != nil {
						return err
					}
					for _, k := range slices.Sorted(maps.Keys(f)) {
						fmt.Fprintf(&b, "%s %s %v\n", i.Name, k, f[k])
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		cfg, err := os.ReadFile(filepath.Join(a.Dir, "fastpath-br.toml"))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(cfg)
	}
	return b.String()
}

// lineDiff lists the lines only one of two texts has.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// The longest gap is the longest time no echo came back: an echo that came
// back late while later datagrams were echoed on time is not one.
func TestUDPGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	s := &steady{}
	for i := 0; i < 100; i++ {
		s.sent = append(s.sent, ms(i*10))
		s.got = append(s.got, ms(i*10+1))
	}
	// Datagram 10 comes back 5 s late; 40 to 59 never do (a 200 ms hole).
	s.got[10] = ms(5100)
	for i := 40; i < 60; i++ {
		s.got[i] = time.Time{}
	}
	if g := s.udpGap(t0, ms(1000)); g != 210*time.Millisecond {
		t.Fatalf("gap %s, want 210ms (from datagram 39's echo to 60's)", g)
	}
}
