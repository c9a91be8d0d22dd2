// Package systemd_test checks the systemd units of deploy/systemd: that
// systemd takes each as it is, that each sandboxes its function (exposure
// at most maxExposure by systemd-analyze security), and that each function
// still does its work inside that sandbox, run by a service manager of the
// test's own.
package systemd_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/rt"
)

// maxExposure is the most systemd-analyze security may rate a unit: 5.0
// and below is "OK" on its scale of 0 (locked down) to 10 (unprotected).
const maxExposure = 5.0

// installedBinary is the path the units name; `make install` rewrites it.
const installedBinary = "/usr/bin/fastpath"

// work is the test's directory outside /tmp (PrivateTmp hides /tmp from
// the units): the fastpath binary it built, logs, topology files.
var work string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("/run", "fp-units-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(d, 0o755)
	work = d
	// The units read /etc/fastpath; on a machine without fastpath installed
	// the tests make it, and it goes again when they end (if nothing else
	// came into it).
	// So does /var/lib/fastpath, which systemd makes for rt's StateDirectory.
	made := map[string]bool{}
	for _, dir := range []string{"/etc/fastpath", "/var/lib/fastpath"} {
		_, err := os.Stat(dir)
		made[dir] = os.IsNotExist(err)
	}
	code := m.Run()
	os.RemoveAll(d)
	for _, dir := range []string{"/etc/fastpath", "/var/lib/fastpath"} {
		if made[dir] {
			os.Remove(filepath.Join(dir, "rt"))
			os.Remove(dir)
		}
	}
	os.Exit(code)
}

// units are the unit files in this folder.
func units(t *testing.T) []string {
	t.Helper()
	u, err := filepath.Glob("*.service")
	if err != nil || len(u) == 0 {
		t.Fatalf("no units in deploy/systemd: %v", err)
	}
	return u
}

var binaryBuilt struct {
	path string
	err  error
}

// fastpathBinary builds fastpath into the test's directory once, with
// fastpath-rt beside it (as installed) when one is built.
func fastpathBinary(t *testing.T) string {
	t.Helper()
	if binaryBuilt.path == "" && binaryBuilt.err == nil {
		dir := filepath.Join(work, "bin")
		p := filepath.Join(dir, "fastpath")
		out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", p, "github.com/fastpath-dev/fastpath/cmd/fastpath").CombinedOutput()
		if err != nil {
			binaryBuilt.err = fmt.Errorf("build fastpath: %v\n%s", err, out)
		} else {
			binaryBuilt.path = p
			if src, err := rt.Binary(); err == nil {
				binaryBuilt.err = copyFile(src, filepath.Join(dir, "fastpath-rt"))
			}
		}
	}
	if binaryBuilt.err != nil {
		t.Fatal(binaryBuilt.err)
	}
	return binaryBuilt.path
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// unitText is a unit file as the test installs it: the built binary in
// place of the installed one.
func unitText(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "ExecStart="+installedBinary+" ") {
		t.Fatalf("%s: ExecStart does not run %s", file, installedBinary)
	}
	return strings.ReplaceAll(string(b), installedBinary, fastpathBinary(t))
}

var exposureLine = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

// Every unit is one systemd takes without a word (systemd-analyze verify,
// the binary in place), and sandboxes its function: an overall exposure
// of at most maxExposure.
func TestUnitsVerifyAndExposure(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("no systemd-analyze: the units cannot be verified here")
	}
	dir := t.TempDir()
	for _, file := range units(t) {
		t.Run(file, func(t *testing.T) {
			p := filepath.Join(dir, file)
			if err := os.WriteFile(p, []byte(unitText(t, file)), 0o644); err != nil {
				t.Fatal(err)
			}
			instance := filepath.Join(dir, strings.Replace(file, "@.", "@test.", 1))
			out, err := exec.Command("systemd-analyze", "verify", instance).CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Fatalf("systemd-analyze verify %s: %v\n%s", file, err, out)
			}
			out, err = exec.Command("systemd-analyze", "security", "--offline=yes", instance).CombinedOutput()
			m := exposureLine.FindSubmatch(out)
			if m == nil {
				t.Fatalf("systemd-analyze security %s: %v, no overall exposure in\n%s", file, err, out)
			}
			level, _ := strconv.ParseFloat(string(m[1]), 64)
			t.Logf("%s: overall exposure %.1f", file, level)
			if level > maxExposure {
				t.Fatalf("%s: overall exposure %.1f, want at most %.1f:\n%s", file, level, maxExposure, out)
			}
		})
	}
}

// documentedDropIn is a drop-in a unit's comments give: the indented
// comment lines from the first that is first ("#   [Service]" for the
// drop-in for a network namespace), with ns for NS and the built binary
// for the installed one.
func documentedDropIn(t *testing.T, file, first, ns string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if len(lines) == 0 && l != first {
			continue
		}
		rest, ok := strings.CutPrefix(l, "#   ")
		if !ok {
			break
		}
		lines = append(lines, rest)
	}
	if len(lines) == 0 {
		t.Fatalf("%s documents no drop-in from %q", file, first)
	}
	d := strings.Join(lines, "\n") + "\n"
	d = regexp.MustCompile(`\bNS\b`).ReplaceAllString(d, ns)
	return strings.ReplaceAll(d, installedBinary, fastpathBinary(t))
}

// service is one instance of a unit run by the test's manager, its output
// in a file of the test's.
type service struct {
	m    *manager
	name string
	log  string
}

// startService installs a unit and starts an instance, with dropIn added
// to it; it waits until the instance is active (for Type=notify: the
// function said it is ready) and fails if it fails or takes a minute.
func startService(t *testing.T, m *manager, file, instance, dropIn string) *service {
	t.Helper()
	s := &service{m: m, name: strings.Replace(file, "@.", "@"+instance+".", 1), log: filepath.Join(work, instance+".log")}
	// The manager has no journal: the output goes to a file. This is the
	// one thing the test adds to a unit.
	conf := "[Service]\nStandardOutput=append:" + s.log + "\nStandardError=inherit\n" + dropIn
	m.install(t, file, unitText(t, file), map[string]string{s.name: conf})
	t.Cleanup(func() {
		m.systemctl("stop", s.name)
		if t.Failed() {
			t.Logf("%s said:\n%s", s.name, s.output())
		}
	})
	m.mustSystemctl(t, "start", "--no-block", s.name)
	s.waitState(t, "active", time.Minute)
	return s
}

func (s *service) output() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// waitState waits for the unit's ActiveState; a unit that fails on the way
// fails the test with what it said.
func (s *service) waitState(t *testing.T, want string, within time.Duration) {
	t.Helper()
	var state string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		state = s.m.show(t, s.name, "ActiveState")
		if state == want {
			return
		}
		if state == "failed" || (want == "active" && s.m.show(t, s.name, "NRestarts") != "0") {
			status, _ := s.m.systemctl("status", "--no-pager", "--full", s.name)
			t.Fatalf("%s %s, want %s:\n%s\n%s", s.name, state, want, status, s.output())
		}
	}
	t.Fatalf("%s still %s after %s, want %s:\n%s", s.name, state, within, want, s.output())
}

// waitOutput waits for the unit to say want.
func (s *service) waitOutput(t *testing.T, want string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(s.output(), want) {
			return
		}
	}
	t.Fatalf("%s did not say %q in %s:\n%s", s.name, want, within, s.output())
}

// noDenial fails if the sandbox refused the function something: what a
// capability, a path, a family or a system call that the unit leaves out
// returns.
func (s *service) noDenial(t *testing.T) {
	t.Helper()
	out := strings.ToLower(s.output())
	for _, w := range []string{"not permitted", "permission denied", "read-only file system", "address family not supported", "bad system call"} {
		if strings.Contains(out, w) {
			t.Fatalf("%s was refused something by its sandbox (%q):\n%s", s.name, w, s.output())
		}
	}
}

// stop stops the unit and checks that the function ended with success.
func (s *service) stop(t *testing.T) {
	t.Helper()
	s.m.mustSystemctl(t, "stop", s.name)
	if r := s.m.show(t, s.name, "Result"); r != "success" {
		t.Fatalf("%s stopped with %s, want success:\n%s", s.name, r, s.output())
	}
}

// unique is a prefix for the names of one test's namespaces, devices and
// instances: fp-uXXXX.
func unique(t *testing.T) string {
	t.Helper()
	labtest.RequireKernel(t)
	b := make([]byte, 2)
	rand.Read(b)
	return "fp-u" + hex.EncodeToString(b)
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// writeFile writes a file the test removes.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
}
