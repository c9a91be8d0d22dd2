// Package rtlab holds the userspace runtime's lab rows.
package rtlab

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/fastpath-dev/fastpath/internal/lab"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/rt"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// The runtime's lab rows: the xdp-redirect scenario's own object, run by
// fastpath-rt over AF_XDP on both DUT veths, beside the kernel running it
// natively (xdp-redirect) and beside fastpath-rt forwarding with no program
// at all (afxdp-fwd: the same sockets, rings, UMEM and mode, the ceiling of
// AF_XDP on this testbed), in the same bench.
func init() {
	lab.Register(lab.Scenario{
		Name:        "afxdp-fwd",
		Description: "fastpath-rt forwarding over AF_XDP with no program (the same rings and mode as rt-*), veth1 → veth3",
		Layout:      lab.LayoutDUT,
		Order:       69,
		Anchor:      "xdp-redirect",
		Setup:       func(tb lab.Testbed) (func() error, error) { return startRuntime(tb, "") },
	})
	for i, engine := range []string{"interp", "jit"} {
		engine := engine
		lab.Register(lab.Scenario{
			Name:        "rt-" + engine,
			Description: "the xdp-redirect program in fastpath-rt (" + engine + ") over AF_XDP, veth1 → veth3",
			Layout:      lab.LayoutDUT,
			Order:       70 + i,
			Anchor:      "afxdp-fwd",
			Setup:       func(tb lab.Testbed) (func() error, error) { return startRuntime(tb, engine) },
		})
	}
	lab.RegisterGroup("rt", "xdp-redirect", "afxdp-fwd", "rt-interp", "rt-jit")
}

// startRuntime runs fastpath-rt in the DUT's namespace on the last CPU but
// one (the generator and the veths have the last), and stops it on
// teardown. With no engine it forwards without a program.
func startRuntime(tb lab.Testbed, engine string) (func() error, error) {
	bin, err := rt.Binary()
	if err != nil {
		return nil, err
	}
	out := tb.DUTOut()
	attrs, err := xdp.Lookup(out.Iface())
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fastpath-rt-lab-")
	if err != nil {
		return nil, err
	}
	obj := filepath.Join(dir, "redirect.o")
	maps := filepath.Join(dir, "maps.json")
	ifindex := binary.LittleEndian.AppendUint32(nil, uint32(attrs.Index))
	err = errors.Join(
		os.WriteFile(obj, lab.RedirectObject(), 0o600),
		os.WriteFile(maps, []byte(fmt.Sprintf(`{"redirect_port": [["00000000", "%s"]]}`, hex.EncodeToString(ifindex))), 0o600),
	)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"run", obj, "--dev", tb.DUTIn().Dev, "--dev", out.Dev, "--engine", engine, "--maps-in", maps, "--json"}
	if engine == "" {
		args = []string{"forward", "--dev", tb.DUTIn().Dev, "--dev", out.Dev, "--json"}
	}
	if n := runtime.NumCPU(); n > 1 {
		if _, err := exec.LookPath("taskset"); err == nil {
			args = append([]string{"-c", fmt.Sprint(n - 2), bin}, args...)
			bin = "taskset"
		}
	}
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := netns.Run(tb.DUTIn().Netns, cmd.Start); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start fastpath-rt: %w", err)
	}
	// Ready when both sockets are bound.
	ready, text := make(chan struct{}), make(chan string, 1)
	go func() {
		var lines []string
		bound := 0
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "queue 0") {
				if bound++; bound == 2 {
					close(ready)
				}
			}
		}
		text <- strings.Join(lines, "\n")
	}()
	stop := func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		os.RemoveAll(dir)
		return err
	}
	select {
	case <-ready:
		return stop, nil
	case <-time.After(10 * time.Second):
		stop()
		return nil, fmt.Errorf("fastpath-rt did not start: %s", <-text)
	}
}
