// Package labtest gives kernel tests of the network functions a testbed of
// their own and a way to send packets through it.
package labtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// RequireKernel fails a test that needs root, bpffs and BTF without them: a
// kernel test that skips quietly would hide a broken CI machine.
func RequireKernel(t testing.TB) {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
}

// Testbed brings up a DUT testbed under a name no other test or lab uses,
// and takes it down when the test ends, also when it fails.
func Testbed(t testing.TB) lab.Testbed {
	t.Helper()
	RequireKernel(t)
	b := make([]byte, 2)
	rand.Read(b)
	tb := lab.Testbed{Prefix: "fp-t" + hex.EncodeToString(b) + "-", Layout: lab.LayoutDUT}
	t.Cleanup(func() {
		if err := tb.Down(); err != nil {
			t.Error(err)
		}
		for _, ns := range tb.Namespaces() {
			if netns.Exists(ns) {
				t.Errorf("namespace %s left behind", ns)
			}
		}
	})
	if err := tb.Up(); err != nil {
		t.Fatal(err)
	}
	return tb
}

// Send sends count of pkts (cycling) from the testbed's generator at about
// rate packets per second, while a sink counts at the other end. The caller
// reads the sink; it is closed when the test ends.
func Send(t testing.TB, tb lab.Testbed, pkts [][]byte, count, rate uint64) (lab.GenStats, *lab.Sink) {
	t.Helper()
	sink, err := lab.AttachSink(tb.Sink().Iface(), xdp.Native)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	gen, err := lab.NewGenerator(lab.GenOptions{Iface: tb.Gen().Iface(), Packets: pkts, CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()
	st, err := gen.Send(context.Background(), lab.SendOptions{Count: count, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	// The veths finish their NAPI polls shortly after the last run.
	time.Sleep(200 * time.Millisecond)
	return st, sink
}

// RequireDetached fails the test unless the interface has no XDP program
// within a second: the kernel releases a link whose last holder went (an
// unpinned link, a closed descriptor) a moment later, not at once.
func RequireDetached(t testing.TB, i xdp.Iface) {
	t.Helper()
	for n := 0; ; n++ {
		attrs, err := xdp.Lookup(i)
		if err != nil {
			t.Fatal(err)
		}
		if attrs.Xdp == nil || !attrs.Xdp.Attached {
			return
		}
		if n == 100 {
			t.Fatalf("an XDP program is still attached to %s a second later", i)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Fastpath is the fastpath command, for tests that run it as an operator
// would (`fastpath br serve` in a SCION network's hybrid mode): the one
// $FASTPATH_BIN names, else one built for the test, which FASTPATH_BIN
// then names until the test ends.
func Fastpath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FASTPATH_BIN"); p != "" {
		return p
	}
	bin, err := BuildFastpath(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FASTPATH_BIN", bin)
	return bin
}

// BuildFastpath builds the fastpath command into dir and returns its path.
func BuildFastpath(dir string) (string, error) {
	bin := filepath.Join(dir, "fastpath")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fastpath-dev/fastpath/cmd/fastpath").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build fastpath: %v\n%s", err, out)
	}
	return bin, nil
}

// CheckServiceUnit checks a systemd unit shipped in docs/ (path, from the
// test's package directory): it holds every line of want; it never gives
// up restarting (a daemon that fails at boot while DHCP or DNS is slow
// must come up when they do); a drop-in its comments show empties
// ExecStart before it sets it again (systemd refuses a second ExecStart in
// a simple service otherwise); and, where systemd's tools are installed,
// `systemd-analyze verify` accepts an instance of it with this test binary
// standing for fastpath.
func CheckServiceUnit(t *testing.T, path string, want ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, w := range want {
		if !strings.Contains(unit, w) {
			t.Fatalf("%s lacks %q", path, w)
		}
	}
	if err := unitGivesUp(unit); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := unitDropInSetsExecStart(unit); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		return // nothing more to ask without systemd's tools
	}
	// Verified as systemd reads it, with an executable where it wants one.
	dir := t.TempDir()
	self, _ := os.Executable()
	unit = strings.ReplaceAll(unit, "/usr/bin/fastpath", self)
	name := filepath.Base(path)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	instance := strings.Replace(name, "@.", "@test.", 1)
	out, err := exec.Command("systemd-analyze", "verify", filepath.Join(dir, instance)).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// unitSetting is the last value a unit gives key, "" if none.
func unitSetting(unit, key string) string {
	v := ""
	for _, line := range strings.Split(unit, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			v = strings.TrimSpace(rest)
		}
	}
	return v
}

// unitGivesUp says how a unit that restarts would stop doing so: when
// StartLimitBurst starts fit in StartLimitIntervalSec (systemd's defaults:
// 5 in 10 s, a restart 100 ms after a failure).
func unitGivesUp(unit string) error {
	if unitSetting(unit, "Restart") == "" || unitSetting(unit, "Restart") == "no" {
		return nil
	}
	dur := func(key, def string) (time.Duration, error) {
		v := unitSetting(unit, key)
		if v == "" {
			v = def
		}
		if v == "infinity" {
			return 1 << 62, nil
		}
		if _, err := strconv.Atoi(v); err == nil {
			v += "s"
		}
		d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(v, "min", "m"), " ", ""))
		if err != nil {
			return 0, fmt.Errorf("%s=%s: %v", key, v, err)
		}
		return d, nil
	}
	interval, err := dur("StartLimitIntervalSec", "10s")
	if err != nil {
		return err
	}
	restart, err := dur("RestartSec", "100ms")
	if err != nil {
		return err
	}
	burst := 5
	if v := unitSetting(unit, "StartLimitBurst"); v != "" {
		if burst, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("StartLimitBurst=%s: %v", v, err)
		}
	}
	if interval > 0 && time.Duration(burst)*restart <= interval {
		return fmt.Errorf("a service failing in a loop is given up on after %d starts in %s (RestartSec=%s): "+
			"set StartLimitIntervalSec=0, so that it comes up when what it waits for at boot does", burst, interval, restart)
	}
	return nil
}

// unitDropInSetsExecStart checks the drop-in a unit's comments show: a
// drop-in must empty ExecStart (an "ExecStart=" line) before it sets it
// again, and a comment that tells to change ExecStart in a drop-in shows
// how.
func unitDropInSetsExecStart(unit string) error {
	var comment []string
	for _, line := range strings.Split(unit, "\n") {
		if c, ok := strings.CutPrefix(line, "#"); ok {
			comment = append(comment, strings.TrimSpace(c))
		}
	}
	text := strings.Join(comment, " ")
	shown, emptied := false, false
	for _, c := range comment {
		switch {
		case c == "ExecStart=":
			emptied = true
		case strings.HasPrefix(c, "ExecStart="):
			if !emptied {
				return fmt.Errorf("the drop-in in the comments sets %q without emptying ExecStart first (an \"ExecStart=\" line before it)", c)
			}
			shown = true
		}
	}
	if !shown && strings.Contains(text, "ExecStart") && (strings.Contains(text, "drop-in") || strings.Contains(text, "systemctl edit")) {
		return fmt.Errorf("the comments tell to change ExecStart in a drop-in without showing one: show its \"ExecStart=\" line that empties it, then the new ExecStart")
	}
	return nil
}

// PrevLayoutTag is the build tag of the "previous release" of the upgrade
// tests: the same source, with maps laid out otherwise in each network
// function (their layout_prev.go), as a release that changed them would.
const PrevLayoutTag = "fastpath_prevlayout"

// ReleaseBinaries builds fastpath from this source twice, as the previous
// release (PrevLayoutTag) and as this one, for tests that upgrade and roll
// back an instance with the binaries an operator would run.
func ReleaseBinaries(t testing.TB) (prev, cur string) {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("find the module: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	dir := t.TempDir()
	prev, cur = filepath.Join(dir, "fastpath-prev"), filepath.Join(dir, "fastpath")
	for _, b := range []struct{ out, tags string }{{prev, PrevLayoutTag}, {cur, ""}} {
		cmd := exec.Command("go", "build", "-tags", b.tags, "-o", b.out, "./cmd/fastpath")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.out, err, out)
		}
	}
	return prev, cur
}

// Run runs a fastpath binary and fails the test if it fails; it returns
// what it printed.
func Run(t testing.TB, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// CommitBinary is fastpath built from a commit of this repository's
// history, for tests that upgrade from a real earlier release. The binary
// is cached under ~/.cache/fastpath/; the test is skipped, saying why, when
// the history does not hold the commit (a shallow clone).
func CommitBinary(t testing.TB, commit string) string {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(home, ".cache", "fastpath")
	bin := filepath.Join(cache, "fastpath-"+commit)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if out, err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("commit %s is not in this repository's history (%v %s): no earlier release to upgrade from", commit, err, strings.TrimSpace(string(out)))
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "src")
	run := func(dir string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build fastpath at %s: %s %s: %v\n%s", commit, name, strings.Join(args, " "), err, out)
		}
	}
	run("", "git", "worktree", "add", "--detach", src, commit)
	t.Cleanup(func() { exec.Command("git", "worktree", "remove", "--force", src).Run() })
	// The Go binary only: its BPF objects, then the build (make build
	// would build the Rust runtime too, which the test does not run).
	pkgs, _ := filepath.Glob(filepath.Join(src, "internal", "*", "bpf.go"))
	for _, p := range pkgs {
		run(filepath.Dir(p), "go", "generate")
	}
	tmp := bin + ".tmp"
	run(src, "go", "build", "-o", tmp, "./cmd/fastpath")
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// Traffic is a generator sending at a steady rate in the background, for a
// test that changes the device under it (an upgrade, a rollback).
type Traffic struct {
	stop context.CancelFunc
	done chan trafficResult
}

type trafficResult struct {
	st  lab.GenStats
	err error
}

// StartTraffic has g send at rate packets per second for at most max.
func StartTraffic(g *lab.Generator, rate uint64, max time.Duration) *Traffic {
	ctx, stop := context.WithCancel(context.Background())
	tr := &Traffic{stop: stop, done: make(chan trafficResult, 1)}
	go func() {
		st, err := g.Send(ctx, lab.SendOptions{Duration: max, Rate: rate})
		tr.done <- trafficResult{st, err}
	}()
	return tr
}

// Running fails the test if the traffic ended before what it was to
// cover was done.
func (tr *Traffic) Running(t testing.TB, what string) {
	t.Helper()
	select {
	case <-tr.done:
		t.Fatalf("the traffic ended before the %s was done", what)
	default:
	}
}

// Stop ends the traffic and says what was sent.
func (tr *Traffic) Stop(t testing.TB) lab.GenStats {
	t.Helper()
	tr.stop()
	res := <-tr.done
	if res.err != nil && !errors.Is(res.err, context.Canceled) {
		t.Fatal(res.err)
	}
	return res.st
}

// PinnedMaxEntries is the max_entries of the map pinned at path: which
// release's layout the pins hold.
func PinnedMaxEntries(t testing.TB, path string) uint32 {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return m.MaxEntries()
}
