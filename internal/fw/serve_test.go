package fw

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// syncBuffer is a log that serve writes and the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// count is how many times the log says want.
func (s *syncBuffer) count(want string) int { return strings.Count(s.String(), want) }

// waitLog waits up to 90 s (an attach verifies the program: seconds, and
// tens of seconds on a machine loaded with other tests) for the log to say
// want n times.
func waitLog(t *testing.T, log *syncBuffer, want string, n int) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if log.count(want) >= n {
			return
		}
	}
	t.Fatalf("the log does not say %q %d times after 90 s:\n%s", want, n, log)
}

// served is a Serve running in the background for a test.
type served struct {
	log       *syncBuffer
	reload    chan struct{}
	ready     atomic.Int32
	reloading atomic.Int32
	done      chan error
	cancel    context.CancelFunc
}

// serve starts Serve on a rules file, polling it every 50 ms and removing
// expired connections every 100 ms, and waits until it is ready; serve is
// stopped when the test ends.
func serve(t *testing.T, o ServeOptions) *served {
	t.Helper()
	s := &served{log: &syncBuffer{}, reload: make(chan struct{}), done: make(chan error, 1)}
	o.Log = slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.Reload, o.Poll, o.GCInterval = s.reload, 50*time.Millisecond, 100*time.Millisecond
	o.Attach.NoFallback = true
	readyc := make(chan struct{}, 1)
	o.Ready = func() {
		s.ready.Add(1)
		select {
		case readyc <- struct{}{}:
		default:
		}
	}
	o.Reloading = func() { s.reloading.Add(1) }
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- Serve(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			t.Errorf("serve did not end 20 s after it was stopped")
		}
	})
	select {
	case <-readyc:
	case err := <-s.done:
		t.Fatalf("serve ended before it was ready: %v\n%s", err, s.log)
	case <-time.After(90 * time.Second):
		t.Fatalf("serve not ready after 90 s:\n%s", s.log)
	}
	return s
}

// stop ends serve as SIGTERM does and returns what it returned.
func (s *served) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not end 20 s after it was stopped:\n%s", s.log)
		return nil
	}
}

// writeFile replaces a file the way an editor that renames into place
// does: a new inode, complete at once.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// verdicts runs a UDP packet to each port through the program attached to
// dev (its link pin's), and says pass or drop for each.
func verdicts(t *testing.T, name string, dev xdp.Iface, ports ...uint16) string {
	t.Helper()
	prog, err := xdp.PinnedProgram(filepath.Join(PinDir(name), xdp.LinkPinName(dev)))
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	var out []string
	for _, p := range ports {
		ret, err := prog.Run(&ebpf.RunOptions{Data: packet(t, flow("192.0.2.1", "198.51.100.1", 17, 1024, p), 10)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, verdictName(ret))
	}
	return strings.Join(out, " ")
}

// dropPorts is a rules file that tracks connections and drops UDP to the
// ports given, passing the rest.
func dropPorts(ports ...string) string {
	s := "default = \"pass\"\n[conntrack]\nenabled = true\n"
	for _, p := range ports {
		s += "\n[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = " + p + "\n"
	}
	return s
}

// Serve attaches from a file, reads it again on a reload and when an
// editor renames a new one into place, keeps the running rules when the
// file turns bad, removes expired connections by itself, and leaves the
// firewall attached when it ends.
func TestServe(t *testing.T) {
	name, dev, _ := vethBed(t)
	rules := filepath.Join(t.TempDir(), "fw.toml")
	writeFile(t, rules, dropPorts("7"))
	s := serve(t, ServeOptions{Rules: rules, Attach: AttachOptions{Name: name, Devices: []xdp.Iface{dev}}})
	waitLog(t, s.log, `msg="firewall attached" name=`+name+" devices="+dev.String(), 1)
	if !strings.Contains(s.log.String(), "rules=1 ") {
		t.Errorf("the attach does not say it has 1 rule:\n%s", s.log)
	}
	if got := verdicts(t, name, dev, 7, 9, 11); got != "drop pass pass" {
		t.Fatalf("ports 7, 9, 11 after the attach: %s, want drop pass pass", got)
	}

	// A reload (SIGHUP) reads the file, changed or not.
	if err := os.WriteFile(rules, []byte(dropPorts("7", "9")), 0o644); err != nil {
		t.Fatal(err)
	}
	s.reload <- struct{}{}
	waitLog(t, s.log, `msg="rules installed in place" name=`+name+" trigger=reload file="+rules+" rules=2 ", 1)
	if got := verdicts(t, name, dev, 7, 9, 11); got != "drop drop pass" {
		t.Fatalf("ports 7, 9, 11 after the reload: %s, want drop drop pass", got)
	}
	// A file renamed into place is read without being asked.
	writeFile(t, rules, dropPorts("7", "9", "11"))
	waitLog(t, s.log, `msg="rules installed in place" name=`+name+" trigger=file_changed file="+rules+" rules=3 ", 1)
	if got := verdicts(t, name, dev, 7, 9, 11); got != "drop drop drop" {
		t.Fatalf("ports 7, 9, 11 after the file changed: %s, want drop drop drop", got)
	}
	// A bad file changes nothing, and says where it is bad.
	writeFile(t, rules, dropPorts("7")+"\n[[rule]]\naction = \"pass\"\ndport = 9\n")
	waitLog(t, s.log, `level=ERROR msg="rules file invalid: the firewall goes on with the rules it has"`, 1)
	if !strings.Contains(s.log.String(), "file="+rules+" line=10 ") {
		t.Errorf("the bad file's error does not name %s and its line, 10, as attributes:\n%s", rules, s.log)
	}
	if got := verdicts(t, name, dev, 7, 9, 11); got != "drop drop drop" {
		t.Fatalf("ports 7, 9, 11 after a bad file: %s, want the rules as they were", got)
	}
	// (A poll may see the file written for the reload before the reload
	// comes, and read it too.)
	if r, rl := s.reloading.Load(), s.ready.Load(); r < 2 || rl != r+1 {
		t.Errorf("%d RELOADING and %d READY notifications, want one READY at the start and RELOADING, READY around each of at least 2 reloads", r, rl)
	}

	// Conntrack expiry without fw ct gc: the UDP connections the packets
	// above opened through the device's program, its clock moved past the
	// 30 s an unanswered one lives, are gone within serve's gc interval.
	f, err := OpenPinned(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := verdicts(t, name, dev, 53); got != "pass" {
		t.Fatalf("port 53: %s", got)
	}
	if st, err := f.ConntrackStats(); err != nil || st.Embryonic == 0 {
		t.Fatalf("conntrack after UDP packets passed: %+v, %v; want their entries", st, err)
	}
	skewClock(t, f, time.Minute)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := f.ConntrackStats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Embryonic+st.EmbryonicExpired == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired connection is still there 10 s later: %+v\n%s", st, s.log)
		}
	}

	// Stopping leaves the program filtering with the rules it had.
	if err := s.stop(t); err != nil {
		t.Fatalf("serve: %v\n%s", err, s.log)
	}
	if !strings.Contains(s.log.String(), "the firewall stays attached") {
		t.Errorf("serve did not say the firewall stays attached:\n%s", s.log)
	}
	if got := verdicts(t, name, dev, 7, 9, 12); got != "drop drop pass" {
		t.Fatalf("ports 7, 9, 12 after serve ended: %s, want the rules it had", got)
	}
	if attrs, err := xdp.Lookup(dev); err != nil || attrs.Xdp == nil || !attrs.Xdp.Attached {
		t.Fatalf("%s has no XDP program after serve ended (%v)", dev, err)
	}
}

// With --fail-closed a bad file at start attaches a rule set that drops
// every IP packet, replaced in place once the file is valid; fw detach
// ends serve with success.
func TestServeFailClosed(t *testing.T) {
	name, dev, _ := vethBed(t)
	rules := filepath.Join(t.TempDir(), "fw.toml")
	writeFile(t, rules, "default = \"pass\"\n[[rule]]\naction = \"frobnicate\"\n")
	s := serve(t, ServeOptions{Rules: rules, Attach: AttachOptions{Name: name, Devices: []xdp.Iface{dev}}, FailClosed: true})
	waitLog(t, s.log, "failing closed (--fail-closed)", 1)
	if !strings.Contains(s.log.String(), "file="+rules+" line=3 ") {
		t.Errorf("the bad file's error does not name %s and line 3:\n%s", rules, s.log)
	}
	if got := verdicts(t, name, dev, 7, 9); got != "drop drop" {
		t.Fatalf("ports 7, 9 while the file is bad: %s, want everything dropped", got)
	}
	writeFile(t, rules, dropPorts("7"))
	waitLog(t, s.log, `msg="rules installed in place" name=`+name+" trigger=file_changed file="+rules+" rules=1 ", 1)
	if got := verdicts(t, name, dev, 7, 9); got != "drop pass" {
		t.Fatalf("ports 7, 9 once the file is valid: %s, want drop pass", got)
	}

	if err := Detach(name, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Fatalf("serve after fw detach: %v, want success\n%s", err, s.log)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still runs 10 s after fw detach:\n%s", s.log)
	}
	if !strings.Contains(s.log.String(), "firewall was detached") {
		t.Errorf("serve did not say why it ended:\n%s", s.log)
	}
	labtest.RequireDetached(t, dev)
}

// Failing open (the default), a bad file at start attaches nothing: the
// device passes everything as before, and serve, ready, waits for the
// file. A device that is not there yet is waited for.
func TestServeFailOpenAndLateDevice(t *testing.T) {
	name, dev, _ := vethBed(t)
	rules := filepath.Join(t.TempDir(), "fw.toml")
	late := xdp.Iface{Netns: dev.Netns, Name: "fw2"}
	s := serve(t, ServeOptions{Rules: rules, Attach: AttachOptions{Name: name, Devices: []xdp.Iface{dev, late}}})
	waitLog(t, s.log, "failing open", 1)
	if !strings.Contains(s.log.String(), "no such file") {
		t.Errorf("serve did not say the file is missing:\n%s", s.log)
	}
	if _, err := os.Stat(PinDir(name)); !os.IsNotExist(err) {
		t.Fatalf("%s with no valid file, failing open: %v", PinDir(name), err)
	}
	writeFile(t, rules, dropPorts("7"))
	waitLog(t, s.log, "retry_in=1s", 1)
	if _, err := os.Stat(PinDir(name)); !os.IsNotExist(err) {
		t.Fatalf("%s with a device missing: %v, want nothing attached yet", PinDir(name), err)
	}
	vethPair(t, late.Netns, "fw2", "fw3")
	waitLog(t, s.log, `msg="firewall attached" name=`+name, 1)
	for _, d := range []xdp.Iface{dev, late} {
		if got := verdicts(t, name, d, 7, 9); got != "drop pass" {
			t.Fatalf("ports 7, 9 on %s: %s, want drop pass", d, got)
		}
	}
	t.Logf("serve said:\n%s", s.log)
	if n := s.ready.Load(); n != 1 {
		t.Errorf("%d READY notifications, want the one at the start", n)
	}
}

// The service unit in deploy/systemd runs `fw serve` with the instance's file, is
// started once the firewall is attached (waiting as long as that takes),
// reloads on SIGHUP and restarts serve when it fails.
func TestFwServiceUnit(t *testing.T) {
	labtest.CheckServiceUnit(t, "../../deploy/systemd/fastpath-fw@.service",
		"Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "After=network-online.target",
		"TimeoutStartSec=infinity", "--rules /etc/fastpath/fw-%i.toml")
}
