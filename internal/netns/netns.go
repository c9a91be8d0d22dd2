// Package netns is the one place that creates, enters and removes network
// namespaces. Everything else names a namespace and calls Run or Handle.
//
// Namespaces are bind-mounted under /run/netns like `ip netns add` does, so
// iproute2 sees them too. Only the network namespace is switched, never the
// mount namespace: `ip netns exec` remounts /sys, which hides bpffs pins.
package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where named namespaces are bind-mounted.
const Dir = "/run/netns"

// ErrNotExist is returned when a named namespace does not exist.
var ErrNotExist = errors.New("network namespace does not exist")

// Path returns the bind-mount path of a named namespace.
func Path(name string) string { return filepath.Join(Dir, name) }

// Exists reports whether the named namespace exists.
func Exists(name string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(Path(name), &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// Create makes a named namespace; an existing one is kept as it is.
func Create(name string) error {
	if Exists(name) {
		return nil
	}
	if err := sharedRunDir(); err != nil {
		return err
	}
	// NewNamed switches the calling thread into the new namespace, so run it on
	// a thread of its own that switches back before it is released.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if err != nil {
			// Leave the thread locked: its namespace state is unknown, and a
			// locked thread is discarded when the goroutine exits.
			errc <- fmt.Errorf("create netns %s: %w", name, err)
			return
		}
		ns.Close()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("return to original netns: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	return <-errc
}

// sharedRunDir makes Dir a shared mount of itself, as `ip netns add` does
// before its first namespace. A namespace bind-mounted on Dir before that
// is hidden under the self-mount that `ip netns add` makes later: on a
// fresh machine, tests that made namespaces both ways at once left such a
// namespace behind, its file impossible to remove (EBUSY) or enter.
func sharedRunDir() error {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", Dir, err)
	}
	if err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err == nil {
		return nil
	} else if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("make %s a shared mount: %w", Dir, err)
	}
	// EINVAL: not a mount point yet.
	if err := unix.Mount(Dir, Dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mount %s on itself: %w", Dir, err)
	}
	if err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", Dir, err)
	}
	return nil
}

// Delete removes a named namespace; a missing one is not an error. The
// interfaces inside go with it (a veth takes its peer along).
func Delete(name string) error {
	if !Exists(name) {
		if _, err := os.Stat(Path(name)); err == nil {
			// A leftover mount point from a crashed run.
			_ = os.Remove(Path(name))
		}
		return nil
	}
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// Run calls fn on an OS thread that has entered the named namespace. An empty
// name runs fn in the caller's namespace. Syscalls that resolve interfaces by
// index (XDP attach, BPF_PROG_TEST_RUN live frames) must be made inside fn.
func Run(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	if !Exists(name) {
		return fmt.Errorf("%s: %w", name, ErrNotExist)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(name)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// The thread stays locked and dies with the goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Handle returns a netlink handle that acts inside the named namespace (the
// caller's own for ""). Close it when done.
func Handle(name string) (*netlink.Handle, error) {
	if name == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromName(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", name, ErrNotExist)
		}
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in netns %s: %w", name, err)
	}
	return h, nil
}

// FD opens the named namespace for netlink calls that move links into it.
func FD(name string) (netns.NsHandle, error) {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return 0, fmt.Errorf("open netns %s: %w", name, err)
	}
	return ns, nil
}

// List returns the names of the namespaces under Dir.
func List() ([]string, error) {
	ents, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

// Current names the namespace the calling thread is in, if one under Dir
// is it; "" otherwise (the host's, or one without a name).
func Current() string {
	var self unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return ""
	}
	names, _ := List()
	for _, n := range names {
		var st unix.Stat_t
		if unix.Stat(Path(n), &st) == nil && st.Ino == self.Ino && st.Dev == self.Dev {
			return n
		}
	}
	return ""
}

// Sysctl writes a /proc/sys key (net/ipv4/ip_forward, say). The net keys
// are those of the calling thread's network namespace: call it inside Run.
func Sysctl(key, val string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(val), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, val, err)
	}
	return nil
}
