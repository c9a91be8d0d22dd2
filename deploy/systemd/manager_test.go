package systemd_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// manager is a systemd service manager of the test's own: PID 1 of a PID,
// mount and cgroup namespace. It runs a unit with exactly the sandbox a
// booted host's systemd gives it, on a machine whose PID 1 is not systemd
// (a container, CI) as on one whose PID 1 is. It shares the host's
// network, files and bpffs, and nothing else of the host's is its to
// manage:
//   - it knows the units the test installs and no others
//     (SYSTEMD_UNIT_PATH), so that it starts none of the host's (tmpfiles
//     would empty /tmp, sysctl would set the host's keys), and runs no
//     generators;
//   - /run/systemd is its own (its sockets, the test's units), the rest of
//     /run the host's: /run is bound on itself so that systemd mounts no
//     empty /run over the host's /run/netns;
//   - its cgroups are a subtree of the host's cgroup v2 hierarchy,
//     fp-units-PID-N, which it sees as the root of its own (the unified
//     layout, whatever the host's).
//
// New mounts under /run/netns reach it (its mounts are the host's slaves):
// namespaces the test makes after the start are there for a unit's --netns
// or NetworkNamespacePath.
type manager struct {
	pid    int // systemd's, in the host's PID namespace
	cmd    *exec.Cmd
	done   chan struct{}
	out    *syncBuffer
	cgroup string // its subtree of the host's cgroup v2 hierarchy
}

var managers atomic.Int32

// childOf is the PID of a child of a process, 0 if none yet.
func childOf(parent int) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ")".
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(parent) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}

// Targets a unit's default dependencies and the fastpath units' ordering
// name, each empty: the manager boots nothing.
var standIns = []string{"sysinit.target", "network-online.target", "time-sync.target", "shutdown.target", "fp-idle.target"}

// cgroup2Root is where the host's cgroup v2 hierarchy is mounted:
// /sys/fs/cgroup on a host of the unified layout, /sys/fs/cgroup/unified on
// one of the hybrid layout (Debian 12 in a container).
func cgroup2Root() (string, error) {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.subtree_control")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
}

func startManager(t *testing.T) *manager {
	t.Helper()
	sd := "/lib/systemd/systemd"
	if _, err := os.Stat(sd); err != nil {
		t.Skipf("no %s to run the units with", sd)
	}
	for _, tool := range []string{"unshare", "nsenter", "systemctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s to run the units with", tool)
		}
	}
	root, err := cgroup2Root()
	if err != nil {
		t.Skipf("%v: the units cannot be run here", err)
	}
	m := &manager{done: make(chan struct{}), out: &syncBuffer{}}
	m.cgroup = filepath.Join(root, fmt.Sprintf("fp-units-%d-%d", os.Getpid(), managers.Add(1)))
	var outer, inner strings.Builder
	// The shell moves itself into the subtree, then becomes unshare, whose
	// child sees the subtree as the root of its cgroup namespace and of the
	// cgroup v2 hierarchy it mounts: the manager's, in the unified layout.
	fmt.Fprintf(&outer, "set -e\nmkdir %s\necho $$ > %s/cgroup.procs\n", m.cgroup, m.cgroup)
	inner.WriteString("set -e\nmount -t proc proc /proc\nmount --rbind /run /run\nmount -t tmpfs tmpfs /run/systemd\nmkdir /run/systemd/system /run/systemd/none\n")
	inner.WriteString("mount -t cgroup2 cgroup2 /sys/fs/cgroup\n")
	for _, u := range standIns {
		fmt.Fprintf(&inner, "printf '[Unit]\\nDescription=stand-in for %s\\n' > /run/systemd/system/%s\n", u, u)
	}
	inner.WriteString("exec env container=fastpath-test SYSTEMD_UNIT_PATH=/run/systemd/system SYSTEMD_GENERATOR_PATH=/run/systemd/none SYSTEMD_ENVIRONMENT_GENERATOR_PATH=/run/systemd/none " +
		sd + " --system --unit=fp-idle.target --log-target=console --log-level=notice\n")
	fmt.Fprintf(&outer, "exec unshare --pid --fork --mount --cgroup --propagation slave sh -c %s\n", shellQuote(inner.String()))
	m.cmd = exec.Command("sh", "-c", outer.String())
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.cmd.Wait(); close(m.done) }()
	t.Cleanup(m.stop)
	deadline := time.Now().Add(30 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-m.done:
			t.Fatalf("the test's service manager ended:\n%s", m.out)
		default:
		}
		if m.pid == 0 {
			m.pid = childOf(m.cmd.Process.Pid) // unshare forks the shell that becomes systemd
			continue
		}
		if _, err := m.systemctl("show", "--property=SystemState", "--value"); err == nil {
			if jobs, _ := m.systemctl("list-jobs", "--no-legend"); jobs == "" {
				return m
			}
		}
	}
	t.Fatalf("the test's service manager did not start in 30 s:\n%s", m.out)
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (m *manager) stop() {
	if m.pid == 0 {
		m.pid = childOf(m.cmd.Process.Pid)
	}
	if m.pid != 0 {
		// PID 1 of the namespace: its end ends every process in it.
		syscall.Kill(m.pid, syscall.SIGKILL)
	}
	m.cmd.Process.Kill()
	<-m.done
	// The subtree, deepest first, once the processes in it are gone.
	var dirs []string
	filepath.WalkDir(m.cgroup, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 50 && os.Remove(dirs[i]) != nil; try++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// systemctl runs systemctl against the manager; it returns the output,
// trimmed.
func (m *manager) systemctl(args ...string) (string, error) {
	a := append([]string{"-t", strconv.Itoa(m.pid), "-m", "-p", "systemctl"}, args...)
	out, err := exec.Command("nsenter", a...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (m *manager) mustSystemctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := m.systemctl(args...)
	if err != nil {
		t.Fatalf("systemctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// install puts a unit file (and drop-ins) into the manager's
// /run/systemd/system, and has it read them.
func (m *manager) install(t *testing.T, name, text string, dropIns map[string]string) {
	t.Helper()
	dir := filepath.Join(fmt.Sprintf("/proc/%d/root", m.pid), "run/systemd/system")
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for unit, conf := range dropIns {
		d := filepath.Join(dir, unit+".d")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "test.conf"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m.mustSystemctl(t, "daemon-reload")
}

// show is one property of a unit.
func (m *manager) show(t *testing.T, unit, prop string) string {
	t.Helper()
	return m.mustSystemctl(t, "show", "--property="+prop, "--value", unit)
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
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
