// Package rtlab holds the userspace runtime's lab rows.
package rtlab

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
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
		Detail:      detail,
		Describe:    describe,
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
			Detail:      detail,
			Describe:    describe,
		})
	}
	lab.RegisterGroup("rt", "xdp-redirect", "afxdp-fwd", "rt-interp", "rt-jit")
}

// ArgsEnv names the variable whose words the lab adds to fastpath-rt's
// command line in the rt rows: --profile-stages, or an I/O knob to measure
// (--batch 32, --kick once). With --profile-stages each setup's summary,
// stage profile included, goes into the row's details, and the row's note
// says where a frame's time went.
const ArgsEnv = "FASTPATH_RT_ARGS"

// instance is the fastpath-rt a testbed's rt row started: its stop, and
// once stopped, its summary.
type instance struct {
	stop    func() error
	out     *bytes.Buffer
	summary json.RawMessage
	err     error
}

var (
	mu        sync.Mutex
	instances = map[string]*instance{}
)

func extraArgs() []string { return strings.Fields(os.Getenv(ArgsEnv)) }

func profiling() bool { return slices.Contains(extraArgs(), "--profile-stages") }

// detail stops the testbed's fastpath-rt (its profile is printed at exit)
// and returns its summary when it profiled, nil otherwise.
func detail(tb lab.Testbed) (json.RawMessage, error) {
	if !profiling() {
		return nil, nil
	}
	mu.Lock()
	in := instances[tb.Prefix]
	mu.Unlock()
	if in == nil {
		return nil, errors.New("no fastpath-rt running on the testbed")
	}
	if in.summary == nil && in.err == nil {
		in.err = in.stop()
		in.summary = json.RawMessage(bytes.TrimSpace(in.out.Bytes()))
		if in.err == nil && !json.Valid(in.summary) {
			in.err = fmt.Errorf("fastpath-rt's summary is not JSON: %q", in.summary)
		}
	}
	return in.summary, in.err
}

// describe says, from the profile, the ns of work per frame and the
// stages that took most of it.
func describe(tb lab.Testbed) (string, error) {
	mu.Lock()
	in := instances[tb.Prefix]
	mu.Unlock()
	if in == nil || in.summary == nil {
		return "", nil
	}
	var sum struct {
		Profile *struct {
			Frames         uint64  `json:"frames"`
			BusyNsPerFrame float64 `json:"busy_ns_per_frame"`
			Stages         []struct {
				Stage       string  `json:"stage"`
				NsPerFrame  float64 `json:"ns_per_frame"`
				ShareOfBusy float64 `json:"share_of_busy"`
			} `json:"stages"`
		} `json:"profile"`
	}
	if err := json.Unmarshal(in.summary, &sum); err != nil || sum.Profile == nil {
		return "", err
	}
	p := sum.Profile
	var parts []string
	for _, st := range p.Stages {
		if st.Stage != "wait" && st.ShareOfBusy >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.0f", st.Stage, st.NsPerFrame))
		}
	}
	return fmt.Sprintf("fastpath-rt worked %.0f ns a frame over %d frames (ns: %s)", p.BusyNsPerFrame, p.Frames, strings.Join(parts, ", ")), nil
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
	args = append(args, extraArgs()...)
	if n := runtime.NumCPU(); n > 1 {
		if _, err := exec.LookPath("taskset"); err == nil {
			args = append([]string{"-c", fmt.Sprint(n - 2), bin}, args...)
			bin = "taskset"
		}
	}
	cmd := exec.Command(bin, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
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
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			stopErr = cmd.Wait()
			os.RemoveAll(dir)
		})
		return stopErr
	}
	select {
	case <-ready:
		mu.Lock()
		instances[tb.Prefix] = &instance{stop: stop, out: &stdout}
		mu.Unlock()
		return func() error {
			mu.Lock()
			delete(instances, tb.Prefix)
			mu.Unlock()
			return stop()
		}, nil
	case <-time.After(10 * time.Second):
		stop()
		return nil, fmt.Errorf("fastpath-rt did not start: %s", <-text)
	}
}
