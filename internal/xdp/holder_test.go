package xdp

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// namedProgram is a pass-all XDP program with a name the error must show.
func namedProgram(t *testing.T, name string) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name, Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// A device another program holds is refused with an error that names the
// program and says how to remove it, for each way it can be held: through
// netlink (ip link, xdp-loader), through a link a process keeps open, and
// through a fastpath instance's pin.
func TestAttachNamesTheHolder(t *testing.T) {
	a, _ := pair(t)
	mine := passProgram(t)

	t.Run("netlink", func(t *testing.T) {
		other := namedProgram(t, "other_fw")
		if err := netns.Run(a.Netns, func() error {
			l, err := netlink.LinkByName(a.Name)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(l, other.FD(), nl.XDP_FLAGS_DRV_MODE)
		}); err != nil {
			t.Fatal(err)
		}
		defer run(t, a.Netns, "ip", "link", "set", "dev", a.Name, "xdpdrv", "off")
		_, err := Attach(a, mine, Native)
		want := "XDP program other_fw"
		fix := "ip -n " + a.Netns + " link set dev " + a.Name + " xdpdrv off"
		t.Log(err)
		if !errors.Is(err, ErrDeviceHeld) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fix) {
			t.Fatalf("got %v, want ErrDeviceHeld naming %q and %q", err, want, fix)
		}
		// Generic mode on a device with a native program: the kernel's
		// EEXIST, the same answer.
		if _, err := Attach(a, mine, Generic); !errors.Is(err, ErrDeviceHeld) || !strings.Contains(err.Error(), want) {
			t.Fatalf("generic over native: got %v", err)
		}
	})

	t.Run("link held by a process", func(t *testing.T) {
		l, err := Attach(a, namedProgram(t, "held_by_pid"), Native)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = Attach(a, mine, Native)
		pid := strconv.Itoa(os.Getpid())
		t.Log(err)
		if !errors.Is(err, ErrDeviceHeld) || !strings.Contains(err.Error(), "held_by_pid") || !strings.Contains(err.Error(), "process "+pid) {
			t.Fatalf("got %v, want the program and process %s named", err, pid)
		}
	})

	t.Run("fastpath instance", func(t *testing.T) {
		inst := filepath.Base(a.Netns) // unique per test run
		dir := filepath.Join(preflight.BPFFS, "fastpath", "fw", inst)
		// The folders above the instance's go again if the test made them.
		var made []string
		for d := filepath.Dir(dir); d != preflight.BPFFS; d = filepath.Dir(d) {
			if _, err := os.Stat(d); os.IsNotExist(err) {
				made = append(made, d)
			}
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		defer func() {
			os.RemoveAll(dir)
			for _, d := range made {
				RemoveIfEmpty(d)
			}
		}()
		l, err := Attach(a, namedProgram(t, "fw_pinned"), Native)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Pin(filepath.Join(dir, LinkPinName(a))); err != nil {
			t.Fatal(err)
		}
		l.Close()
		defer os.Remove(filepath.Join(dir, LinkPinName(a)))
		_, err = Attach(a, mine, Native)
		fix := "fastpath fw detach --name " + inst
		t.Log(err)
		if !errors.Is(err, ErrDeviceHeld) || !strings.Contains(err.Error(), fix) {
			t.Fatalf("got %v, want %q", err, fix)
		}
	})
}
