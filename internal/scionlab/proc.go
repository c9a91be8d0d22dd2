package scionlab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// Proc is a process the network started: found again by PID, and told
// apart from a later process with the same PID by its start time.
type Proc struct {
	Name  string   `json:"name"`
	AS    string   `json:"as"`
	Netns string   `json:"netns"`
	PID   int      `json:"pid"`
	Start uint64   `json:"start"` // /proc/PID/stat starttime, in clock ticks since boot
	Log   string   `json:"log"`
	Args  []string `json:"args"`
}

// State is what up records in Dir/state.json, and what status and down read.
type State struct {
	// Version is the scionproto release the network runs ("" in a record
	// of before there was a choice: v0.12.0).
	Version string    `json:"scion_version,omitempty"`
	Prefix  string    `json:"prefix"`
	ASes    int       `json:"ases"`
	Started time.Time `json:"started"`
	Procs   []Proc    `json:"procs"`
	// Hybrid are fastpath's routers attached in front of the reference
	// routers, by pin name.
	Hybrid []string `json:"hybrid,omitempty"`
	// PathsAfter is how long it took from starting the services until the
	// first leaf AS had a path to the last.
	PathsAfter time.Duration `json:"paths_after_ns,omitempty"`
	NoBFD      bool          `json:"no_bfd,omitempty"`
	// Links is how many links each leaf has to the core (0: one).
	Links int `json:"links,omitempty"`
	// HopExpiry is up's HopExpiry: 0 for scionproto's default.
	HopExpiry time.Duration `json:"hop_expiry_ns,omitempty"`
	// MTU is the links' MTU (0 in a record of before --mtu: DefaultMTU).
	MTU int `json:"mtu,omitempty"`
	// Topo names the .topo file the network was built from ("" for the
	// default network); its text is kept in Dir (topoPath), renumbered
	// again when Renumber.
	Topo     string `json:"topo,omitempty"`
	Renumber bool   `json:"renumber,omitempty"`
	// Devices is up's Devices in ParseDevices' form ("" in a record of
	// before --devices: every address on a veth).
	Devices string `json:"devices,omitempty"`
}

// version is the scionproto release the recorded network runs.
func (s *State) version() string {
	if s.Version == "" {
		return "v0.12.0"
	}
	return s.Version
}

// Version is the scionproto release the network runs: the recorded one if
// it is up, else the one Up would choose.
func (n Network) Version() string {
	if st, err := n.readState(); err == nil && st != nil {
		return st.version()
	}
	v, err := scionproto.Chosen()
	if err != nil {
		return scionproto.Default
	}
	return v
}

func (n Network) topoPath() string { return filepath.Join(n.Dir, "network.topo") }

// plan is the plan of the recorded network, its devices laid out.
func (n Network) plan(s *State) ([]AS, []Link, error) {
	as, links, err := n.planShape(s)
	if err != nil {
		return nil, nil, err
	}
	d, err := ParseDevices(s.Devices)
	if err == nil {
		err = d.Apply(as, links)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", n.statePath(), err)
	}
	return as, links, nil
}

// planShape is the recorded network's ASes and links.
func (n Network) planShape(s *State) ([]AS, []Link, error) {
	if s.Topo == "" {
		return n.PlanLinks(s.ASes, s.links())
	}
	b, err := os.ReadFile(n.topoPath())
	if err != nil {
		return nil, nil, fmt.Errorf("the network was built from %s, whose copy is gone: %w", s.Topo, err)
	}
	t, err := ParseTopo(s.Topo, b)
	if err != nil {
		return nil, nil, err
	}
	if s.Renumber {
		if t, _, err = t.Renumber(FirstASN); err != nil {
			return nil, nil, err
		}
	}
	return n.PlanTopo(t)
}

func (s *State) links() int { return max(s.Links, 1) }

func (s *State) devices() string {
	if s.Devices == "" {
		return DefaultDevices.String()
	}
	return s.Devices
}

func (s *State) mtu() int {
	if s.MTU == 0 {
		return DefaultMTU
	}
	return s.MTU
}

func (n Network) statePath() string { return filepath.Join(n.Dir, "state.json") }

func (n Network) logDir() string { return filepath.Join(n.Dir, "logs") }

// readState reads the record of a running network; nil if there is none.
func (n Network) readState() (*State, error) {
	b, err := os.ReadFile(n.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w (remove it, and the namespaces %s*, by hand)", n.statePath(), err, n.Prefix)
	}
	return &s, nil
}

// running is the record of the network that is up: ErrNotUp when there is
// none.
func (n Network) running() (*State, error) {
	st, err := n.readState()
	if err == nil && st == nil {
		err = ErrNotUp
	}
	return st, err
}

// writeState records s; it is written after each process starts, so that
// down finds everything even after a crash half-way through up.
func (n Network) writeState(s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := n.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, n.statePath())
}

// start runs a program in a namespace in a session of its own (it outlives
// the command that started it), logging to Dir/logs/NAME.log.
func (n Network) start(name, as, ns, bin string, args ...string) (Proc, error) {
	return n.startEnv(nil, name, as, ns, bin, args...)
}

// startEnv is start with variables added to the program's environment.
func (n Network) startEnv(env []string, name, as, ns, bin string, args ...string) (Proc, error) {
	if err := os.MkdirAll(n.logDir(), 0o755); err != nil {
		return Proc{}, err
	}
	log := filepath.Join(n.logDir(), name+".log")
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Proc{}, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// A child forked from a thread inside the namespace is born there.
	if err := netns.Run(ns, cmd.Start); err != nil {
		return Proc{}, fmt.Errorf("start %s in %s: %w", name, ns, err)
	}
	// Reap it if it dies while this process lives; it is not waited for.
	go cmd.Wait()
	p := Proc{Name: name, AS: as, Netns: ns, PID: cmd.Process.Pid, Log: log, Args: append([]string{bin}, args...)}
	p.Start, _ = startTime(p.PID)
	return p, nil
}

// procName names a service of an AS in the record and its log:
// control-64513, say.
func procName(service string, a AS) string {
	if a.Tag != "" {
		return service + "-" + a.Tag
	}
	return fmt.Sprintf("%s-%d", service, FirstASN+a.Index)
}

// routerProcName names a service of router k of an AS: the first router's
// as procName does, the others' with their number (router-1-ff00_0_a02-2).
func routerProcName(service string, a AS, k int) string {
	if k == 0 {
		return procName(service, a)
	}
	return fmt.Sprintf("%s-%d", procName(service, a), k+1)
}

// Services are those of an AS that Restart restarts; ServeService only in
// hybrid mode.
var Services = []string{"router", "control", "daemon", ServeService}

// CheckService says whether Restart can restart a service of that name:
// one of Services, or router-N or fastpath-br-N for the Nth router of an
// AS with several (router is router-1).
func CheckService(service string) error {
	base, _ := routerService(service)
	if !slices.Contains(Services, base) {
		return fmt.Errorf("service %q: restart one of %s (router-N, fastpath-br-N for an AS's Nth router)", service, strings.Join(Services, ", "))
	}
	return nil
}

// routerService splits router-N and fastpath-br-N into the service and
// the router's index (0 for the first); other names are index 0.
func routerService(service string) (string, int) {
	for _, base := range []string{"router", ServeService} {
		if rest, ok := strings.CutPrefix(service, base+"-"); ok {
			if k, err := strconv.Atoi(rest); err == nil && k >= 1 && fmt.Sprint(k) == rest {
				return base, k - 1
			}
		}
	}
	return service, 0
}

// restartSettle is how long a restarted service must keep running for
// Restart to call it started: what dies of its configuration or of a port
// still taken dies sooner.
const restartSettle = time.Second

// Restart stops one service of AS a (one of Services) and starts it again
// as up did: the same program and arguments, in the same namespace,
// appending to the same log; the record gets the new PID. It also starts a
// service that had died or was stopped. The databases stay, so a control
// service or daemon comes back with the segments it had. A router restart
// leaves fastpath's router in front of it attached: that is on the
// devices, not the process. So does a restart of ServeService (hybrid
// mode), which returns once the new `br serve` has attached again in place.
func (n Network) Restart(ctx context.Context, a AS, service string, log io.Writer) error {
	if err := CheckService(service); err != nil {
		return err
	}
	if log == nil {
		log = io.Discard
	}
	st, err := n.running()
	if err != nil {
		return err
	}
	service, k := routerService(service)
	if k >= len(a.Routers) {
		return fmt.Errorf("%s has %d border routers: no %s-%d", a.IA, len(a.Routers), service, k+1)
	}
	name := routerProcName(service, a, k)
	i := slices.IndexFunc(st.Procs, func(p Proc) bool { return p.Name == name && p.AS == a.IA.String() })
	if i < 0 && service == ServeService && len(st.Hybrid) == 0 {
		return fmt.Errorf("the network runs no %s: it was brought up without --hybrid", ServeService)
	}
	if i < 0 {
		return fmt.Errorf("%s records no %s of %s: is %s the network's --dir?", n.statePath(), name, a.IA, n.Dir)
	}
	old := st.Procs[i]
	if len(old.Args) == 0 {
		return fmt.Errorf("%s records no command line for %s: take the network down and up again", n.statePath(), name)
	}
	old.stop()
	if service == ServeService {
		// The router stayed attached meanwhile; the new serve attaches
		// again in place and is started once it has.
		p, err := n.startServe(ctx, st, old)
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "%s of %s restarted: pid %d (was %d); log %s\n", service, a.IA, p.PID, old.PID, p.Log)
		return nil
	}
	p, err := n.start(old.Name, old.AS, old.Netns, old.Args[0], old.Args[1:]...)
	if err != nil {
		return err
	}
	st.Procs[i] = p
	if err := n.writeState(st); err != nil {
		return err
	}
	fmt.Fprintf(log, "%s of %s restarted: pid %d (was %d); log %s\n", service, a.IA, p.PID, old.PID, p.Log)
	return settle(ctx, p)
}

// settle waits restartSettle and fails if p died meanwhile.
func settle(ctx context.Context, p Proc) error {
	t := time.NewTimer(restartSettle)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	if !p.Alive() {
		return fmt.Errorf("%s exited right after its restart; its log: %s\n%s", p.Name, p.Log, tail(p.Log, 15))
	}
	return nil
}

// startTime is field 22 of /proc/PID/stat.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Alive says whether the process still runs (and is the one started).
func (p Proc) Alive() bool {
	st, err := startTime(p.PID)
	if err != nil || st != p.Start {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	// A zombie (Z) has exited.
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// stop ends the process: SIGTERM, then SIGKILL if it lingers.
func (p Proc) stop() {
	if !p.Alive() {
		return
	}
	unix.Kill(p.PID, unix.SIGTERM)
	for i := 0; i < 50 && p.Alive(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if p.Alive() {
		unix.Kill(p.PID, unix.SIGKILL)
		for i := 0; i < 20 && p.Alive(); i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// killInNamespaces kills whatever still runs inside the namespaces: what a
// crashed up started without recording, or a user left there.
func killInNamespaces(names []string) []int {
	inodes := map[uint64]bool{}
	for _, ns := range names {
		var st unix.Stat_t
		if unix.Stat(netns.Path(ns), &st) == nil {
			inodes[st.Ino] = true
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var killed []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) != nil || !inodes[st.Ino] {
			continue
		}
		start, _ := startTime(pid)
		Proc{PID: pid, Start: start}.stop()
		killed = append(killed, pid)
	}
	return killed
}
