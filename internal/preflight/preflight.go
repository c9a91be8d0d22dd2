// Package preflight checks what every BPF-using command needs before it
// changes anything, and says in one line what is missing and how to fix it.
package preflight

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// BPFFS is where fastpath pins its objects.
const BPFFS = "/sys/fs/bpf"

// ErrNotReady wraps every preflight failure.
var ErrNotReady = errors.New("system not ready")

// Root fails unless the process runs as root: loading BPF programs and
// creating namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN.
func Root() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: fastpath must run as root (namespaces and XDP programs need CAP_NET_ADMIN and CAP_SYS_ADMIN); run it with sudo", ErrNotReady)
	}
	return nil
}

// BPFFSMounted fails unless a bpf filesystem is mounted at /sys/fs/bpf.
func BPFFSMounted() error {
	var st unix.Statfs_t
	if err := unix.Statfs(BPFFS, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%w: no bpf filesystem at %s; mount one with `mount -t bpf bpf %s` (or run `make deps`)", ErrNotReady, BPFFS, BPFFS)
	}
	return nil
}

// BTF fails unless the kernel exposes its BTF, which CO-RE relocations and
// the map types of our objects need.
func BTF() error {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return fmt.Errorf("%w: the kernel has no BTF (/sys/kernel/btf/vmlinux missing); use a kernel built with CONFIG_DEBUG_INFO_BTF=y", ErrNotReady)
	}
	return nil
}

// BPF runs every check a command that loads BPF programs needs, and lifts the
// memlock limit that kernels before 5.11 charge maps against.
func BPF() error {
	for _, check := range []func() error{Root, BPFFSMounted, BTF} {
		if err := check(); err != nil {
			return err
		}
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("%w: lift the memlock rlimit: %v", ErrNotReady, err)
	}
	return nil
}
