package scionlab

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
)

// ServeService is the service that keeps fastpath's router in front of an
// AS's reference router in hybrid mode: `fastpath br serve`, one per AS.
const ServeService = "fastpath-br"

// serveReadyTimeout bounds how long `br serve` may take to attach: the
// router program is loaded and verified once per AS.
const serveReadyTimeout = 60 * time.Second

// FastpathBinary is the fastpath command the lab runs its daemons with
// (`br serve` in hybrid mode, `tra run` on translated hosts): $FASTPATH_BIN
// if set, else this program when it is fastpath. needs says, for the error,
// what runs it.
func FastpathBinary(needs string) (string, error) {
	if p := os.Getenv("FASTPATH_BIN"); p != "" {
		return p, nil
	}
	self, err := os.Executable()
	if err == nil && filepath.Base(self) == "fastpath" {
		return self, nil
	}
	return "", fmt.Errorf("%s: run it from the fastpath command, or name the binary in FASTPATH_BIN (make build puts it in bin/fastpath)", needs)
}

// ServeHybrid puts fastpath's router in front of the AS's reference router
// and keeps it there: lo forwarding on in the AS's namespace (what the FIB
// lookups need), then `fastpath br serve` with the AS's own files, as a
// process of the network (fastpath-br-<ASN>: status shows it, restart
// restarts it, down stops it and detaches). It returns once the router is
// attached; from then on a neighbour that attaches or turns GRO on later
// is forwarded in XDP within a second, without attaching again.
func (n Network) ServeHybrid(ctx context.Context, a AS, log io.Writer) error {
	st, err := n.running()
	if err != nil {
		return err
	}
	_, links, err := n.plan(st)
	if err != nil {
		return err
	}
	for k := range a.Routers {
		if err := n.serveHybrid(ctx, st, a, links, k, log); err != nil {
			return err
		}
	}
	return nil
}

// serveHybrid starts the `br serve` of router k of the AS, records it in st
// (before it is ready, so that down finds it whatever happens) and waits
// until it has attached. On veths it must attach in native XDP
// (--mode native); a router with a bridge, macvlan or VXLAN device, none
// of which has native XDP, may fall back to generic XDP on that device,
// and its log says so.
func (n Network) serveHybrid(ctx context.Context, st *State, a AS, links []Link, k int, log io.Writer) error {
	if log == nil {
		log = io.Discard
	}
	bin, err := FastpathBinary("hybrid mode runs `fastpath br serve` for every AS")
	if err != nil {
		return err
	}
	r := a.Routers[k]
	if err := loForwarding(r.Netns); err != nil {
		return err
	}
	name := routerHybridName(r)
	args := []string{"br", "serve", "--config", filepath.Join(a.Dir, routerFile("fastpath-br", k)), "--netns", r.Netns, "--name", name}
	if onVeths(a, links, k) {
		args = append(args, "--mode", "native")
	}
	p, err := n.startServe(ctx, st, Proc{Name: routerProcName(ServeService, a, k), AS: a.IA.String(), Netns: r.Netns, Args: append([]string{bin}, args...)})
	if err != nil {
		return fmt.Errorf("fastpath in front of %s: %w", r.ID, err)
	}
	st.Hybrid = append(st.Hybrid, name)
	if err := n.writeState(st); err != nil {
		return err
	}
	fmt.Fprintf(log, "fastpath br %s attached in front of %s and kept by %s (pid %d; log %s)\n", name, r.ID, p.Name, p.PID, p.Log)
	return nil
}

// onVeths says whether every device of router k of an AS that holds an
// address is a veth: its internal network's and its ends of links.
func onVeths(a AS, links []Link, k int) bool {
	if a.InternalKind != Veth {
		return false
	}
	for _, l := range links {
		if (l.Parent == a.Index && l.ParentRouter == k && l.ParentKind != Veth) ||
			(l.Child == a.Index && l.ChildRouter == k && l.ChildKind != Veth) {
			return false
		}
	}
	return true
}

// startServe starts a `br serve` like want (name, AS, namespace, command
// line), records it in st in place of a process of the same name, and
// waits until it says it is ready (NOTIFY_SOCKET, as systemd's Type=notify
// does) or fails.
func (n Network) startServe(ctx context.Context, st *State, want Proc) (Proc, error) {
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return Proc{}, err
	}
	sock := filepath.Join(n.Dir, want.Name+".notify")
	// sockaddr_un holds 108 bytes with the terminating zero.
	if len(sock) > 107 {
		return Proc{}, fmt.Errorf("%s: longer than a Unix socket's path may be (107 bytes): give a shorter --dir", sock)
	}
	os.Remove(sock)
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return Proc{}, fmt.Errorf("listen for %s's readiness: %w", want.Name, err)
	}
	defer os.Remove(sock)
	defer l.Close()
	p, err := n.startEnv([]string{"NOTIFY_SOCKET=" + sock}, want.Name, want.AS, want.Netns, want.Args[0], want.Args[1:]...)
	if err != nil {
		return Proc{}, err
	}
	replaced := false
	for i := range st.Procs {
		if st.Procs[i].Name == p.Name && st.Procs[i].AS == p.AS {
			st.Procs[i], replaced = p, true
		}
	}
	if !replaced {
		st.Procs = append(st.Procs, p)
	}
	if err := n.writeState(st); err != nil {
		return p, err
	}
	deadline := time.Now().Add(serveReadyTimeout)
	buf := make([]byte, 256)
	for {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		if !p.Alive() {
			return p, fmt.Errorf("%s exited before it was ready; its log: %s\n%s", p.Name, p.Log, tail(p.Log, 15))
		}
		if time.Now().After(deadline) {
			return p, fmt.Errorf("%s not ready after %s; its log: %s\n%s", p.Name, serveReadyTimeout, p.Log, tail(p.Log, 15))
		}
		l.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		k, err := l.Read(buf)
		if err == nil && strings.Contains(string(buf[:k]), "READY=1") {
			return p, nil
		}
	}
}

// loForwarding turns forwarding on for lo in a router's namespace, for
// IPv4 and, where the namespace has it, IPv6: the kernel refuses the fast
// path's FIB lookups without it.
func loForwarding(ns string) error {
	if err := netns.Run(ns, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/lo/forwarding", []byte("1"), 0o644); err != nil {
			return err
		}
		if b, err := os.ReadFile("/proc/sys/net/ipv6/conf/lo/disable_ipv6"); err == nil && strings.TrimSpace(string(b)) == "0" {
			return os.WriteFile("/proc/sys/net/ipv6/conf/lo/forwarding", []byte("1"), 0o644)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("lo forwarding in %s: %w", ns, err)
	}
	return nil
}

// reloadedLine is what `br serve` logs when a reload has been taken on.
const reloadedLine = "reloaded and attached again in place"

// SetForwardIP has fastpath's router in front of AS a forward plain IP in
// XDP (br's forward_ip, and forward_ip_external: the lab's plain IP
// crosses the inter-AS links) or stop doing so: it rewrites the AS's
// fastpath-br.toml and reloads its `br serve` (SIGHUP), which takes the
// change on without detaching, and returns once the reload is logged.
// Hybrid mode only.
func (n Network) SetForwardIP(a AS, on bool) error {
	st, err := n.running()
	if err != nil {
		return err
	}
	name := procName(ServeService, a)
	i := slices.IndexFunc(st.Procs, func(p Proc) bool { return p.Name == name })
	if i < 0 {
		return fmt.Errorf("the network runs no %s: forward_ip needs hybrid mode (lab scion up --hybrid)", name)
	}
	p := st.Procs[i]
	if !p.Alive() {
		return fmt.Errorf("%s is not running: see %s", name, p.Log)
	}
	path := filepath.Join(a.Dir, "fastpath-br.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "forward_ip") {
			lines = append(lines, l)
		}
	}
	if on {
		// The lab's plain IP crosses the ASes over their SCION links,
		// which a router leaves to the kernel unless told otherwise.
		lines = append(lines, "forward_ip = true", "forward_ip_external = true")
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	logText := func() string { b, _ := os.ReadFile(p.Log); return string(b) }
	before := strings.Count(logText(), reloadedLine)
	failedBefore := strings.Count(logText(), "reload: ")
	proc, err := os.FindProcess(p.PID)
	if err == nil {
		err = proc.Signal(syscall.SIGHUP)
	}
	if err != nil {
		return fmt.Errorf("reload %s: %w", name, err)
	}
	for deadline := time.Now().Add(serveReadyTimeout); ; time.Sleep(20 * time.Millisecond) {
		text := logText()
		if strings.Count(text, reloadedLine) > before {
			return nil
		}
		if strings.Count(text, "reload: ") > failedBefore {
			return fmt.Errorf("%s refused forward_ip = %v; its log: %s\n%s", name, on, p.Log, tail(p.Log, 5))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not reload within %s; its log: %s\n%s", name, serveReadyTimeout, p.Log, tail(p.Log, 5))
		}
	}
}
