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
		if ns := inIPNetnsExec(); ns != "" {
			return fmt.Errorf("%w: running inside `ip netns exec %s`, which mounts a fresh /sys and so hides the pins under %s (the routers and firewalls attached there); run fastpath outside it and name the namespace with --netns %s, or enter only the network namespace: nsenter --net=/run/netns/%s fastpath ...", ErrNotReady, ns, BPFFS, ns, ns)
		}
		return fmt.Errorf("%w: no bpf filesystem at %s; mount one with `mount -t bpf bpf %s` (or run `make deps`)", ErrNotReady, BPFFS, BPFFS)
	}
	return nil
}

// inIPNetnsExec names the namespace when the process looks like it runs
// under `ip netns exec NAME`: a mount namespace of its own (ip makes one to
// remount /sys) and a network namespace bind-mounted as NAME.
func inIPNetnsExec() string {
	same := func(a, b string) bool {
		var sa, sb unix.Stat_t
		return unix.Stat(a, &sa) == nil && unix.Stat(b, &sb) == nil && sa.Ino == sb.Ino && sa.Dev == sb.Dev
	}
	if same("/proc/self/ns/mnt", "/proc/1/ns/mnt") || same("/proc/self/ns/net", "/proc/1/ns/net") {
		return ""
	}
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if same("/proc/self/ns/net", "/run/netns/"+e.Name()) {
			return e.Name()
		}
	}
	return ""
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
