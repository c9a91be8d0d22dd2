// Package scionproto builds and finds scionproto's own programs — the
// reference router, the control service, the daemon, the dispatcher shim,
// the scion tool, scion-pki and the SCION-IP gateway — at one of the releases
// fastpath supports, and says how their routers differ. The programs of each
// release are built once per machine from the Go module proxy into the
// user's cache.
package scionproto

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Default is the release fastpath follows unless told otherwise: the
// current one.
const Default = "v0.15.1"

// Versions are the releases fastpath supports, newest first.
var Versions = []string{"v0.15.1", "v0.14.0", "v0.12.0"}

// Tested are the releases the version-sensitive tests run against unless
// FASTPATH_SCION_VERSIONS names others (comma-separated): the current
// release and the oldest supported one.
var Tested = []string{"v0.15.1", "v0.12.0"}

// Check returns an error naming the supported releases if v is not one.
func Check(v string) error {
	if slices.Contains(Versions, v) {
		return nil
	}
	return fmt.Errorf("scionproto %q is not supported: choose one of %s", v, strings.Join(Versions, ", "))
}

// OrDefault is v, or Default if v is unset: a configuration's release.
func OrDefault(v string) string {
	if v == "" {
		return Default
	}
	return v
}

// Chosen is the release named by FASTPATH_SCION_VERSION, else Default.
func Chosen() (string, error) {
	v := os.Getenv("FASTPATH_SCION_VERSION")
	if v == "" {
		return Default, nil
	}
	if err := Check(v); err != nil {
		return "", fmt.Errorf("FASTPATH_SCION_VERSION: %w", err)
	}
	return v, nil
}

// ToTest are the releases a version-sensitive test runs against:
// FASTPATH_SCION_VERSIONS (comma-separated) if set, else Tested.
func ToTest() ([]string, error) {
	env := os.Getenv("FASTPATH_SCION_VERSIONS")
	if env == "" {
		return Tested, nil
	}
	var out []string
	for _, v := range strings.Split(env, ",") {
		v = strings.TrimSpace(v)
		if err := Check(v); err != nil {
			return nil, fmt.Errorf("FASTPATH_SCION_VERSIONS: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}

// packages are the main packages of the programs, by the name they are
// installed under.
var packages = map[string]string{
	"router":     "router/cmd/router",
	"control":    "control/cmd/control",
	"daemon":     "daemon/cmd/daemon",
	"dispatcher": "dispatcher/cmd/dispatcher",
	"scion":      "scion/cmd/scion",
	"scion-pki":  "scion-pki/cmd/scion-pki",
	// The SCION-IP gateway (SIG). Its extra modules (TUN, netlink) are in
	// scionproto's go.mod, so the throwaway module's -mod=mod build finds
	// them without a tool directive.
	"gateway": "gateway/cmd/gateway",
}

// Programs are the names Binaries knows, sorted.
func Programs() []string {
	var out []string
	for n := range packages {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Dir is where the built programs of release version are kept:
// FASTPATH_SCION_BIN if set (programs of the default release only), else
// scionproto-<version> in the user's cache directory under fastpath.
func Dir(version string) string {
	if d := os.Getenv("FASTPATH_SCION_BIN"); d != "" && version == Default {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "fastpath", "scionproto-"+version)
}

var buildMu sync.Mutex

// Binary returns the path of one program of release version, building it
// first if needed.
func Binary(version, name string) (string, error) {
	paths, err := Binaries(version, name)
	if err != nil {
		return "", err
	}
	return paths[name], nil
}

// Binaries returns the paths of the named programs of release version,
// building the missing ones together (one go build: they share most
// packages).
func Binaries(version string, names ...string) (map[string]string, error) {
	if err := Check(version); err != nil {
		return nil, err
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	dir := Dir(version)
	out := map[string]string{}
	var missing []string
	for _, n := range names {
		if _, ok := packages[n]; !ok {
			return nil, fmt.Errorf("scionproto has no program %q here: known are %s", n, strings.Join(Programs(), ", "))
		}
		out[n] = filepath.Join(dir, n)
		if _, err := os.Stat(out[n]); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	if os.Getenv("FASTPATH_SCION_BIN") != "" && version == Default {
		return nil, fmt.Errorf("FASTPATH_SCION_BIN=%s lacks %s: build them there, or unset it to build into the cache", dir, strings.Join(missing, ", "))
	}
	if err := build(version, dir, missing); err != nil {
		return nil, err
	}
	return out, nil
}

// build compiles the programs in a throwaway module that requires
// scionproto at version (go install pkg@version refuses its replace
// directives), then moves them into dir.
func build(version, dir string, names []string) error {
	if _, err := exec.LookPath("go"); err != nil {
		return errors.New("building scionproto's programs needs the go command on PATH")
	}
	tmp, err := os.MkdirTemp("", "fastpath-scionproto-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// The go line is raised to what the release asks (-mod=mod): v0.15.1
	// needs Go 1.26.4.
	mod := fmt.Sprintf("module fastpathscion\n\ngo 1.24\n\nrequire github.com/scionproto/scion %s\n", version)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte(mod), 0o644); err != nil {
		return err
	}
	bin := filepath.Join(tmp, "bin")
	args := []string{"build", "-o", bin + "/"}
	for _, n := range names {
		args = append(args, "github.com/scionproto/scion/"+packages[n])
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = tmp
	// v0.15.1's control service and daemon use SQLite through cgo.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build scionproto %s's %s (needs the Go module proxy, the Go the release asks for in its go.mod, and a C compiler for cgo): %v\n%s", version, strings.Join(names, ", "), err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, n := range names {
		// A rename is atomic: a concurrent reader sees the whole binary or none.
		if err := os.Rename(filepath.Join(bin, n), filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("install %s: %w", n, err)
		}
	}
	return nil
}

// Router is what a release's router does differently from the others
// where fastpath's XDP must do the same in front of it (docs/scion-lab.md,
// Versions).
type Router struct {
	Version string
	// RedirectOutsideRange: a packet for an end host whose port lies
	// outside the topology's dispatched_ports goes to the end-host port
	// 30041 (v0.12.0). From v0.14.0 the router compares the port with the
	// range in a way that never holds (port < start && port > end): every
	// packet goes to its own port.
	RedirectOutsideRange bool
	// TCPToPort: SCION/TCP goes to its destination port, and a TCP header
	// shorter than 20 bytes is dropped (v0.14.0 on); before, all SCION/TCP
	// went to 30041.
	TCPToPort bool
	// KnownL4: a datagram whose NextHdr byte is none the router knows
	// (TCP, UDP, SCMP, BFD, hop-by-hop and end-to-end options, the two
	// experimental values) is dropped on arrival, on every link (v0.15.0
	// on); before, such a packet was forwarded like any other.
	KnownL4 bool
	// STUN: such a datagram to the router's internal address that is a
	// STUN binding request is answered with the sender's address (v0.15.0
	// on).
	STUN bool
	// SiblingPort: transit from a sibling router must come from its
	// internal_addr's port as well as its address (v0.14.0 on, which
	// keeps a connected socket per sibling); before, the address decided.
	SiblingPort bool
	// LiteralUnderlays: the router starts only if every interface of every
	// router in topology.json gives its underlay "local" and "remote" as a
	// literal IP:port (v0.14.0 on); v0.12.0 also resolves host names, an
	// address-less ":port" and the deprecated "public" and "bind".
	LiteralUnderlays bool
	// MaxDatagram is the longest SCION datagram the router reads whole:
	// its 9,000-byte buffers, less the 512 bytes kept in front of each
	// packet for SCMP quoting from v0.14.0 on. A longer one arrives cut
	// short.
	MaxDatagram int
}

// RouterOf returns how release version's router differs. It panics on a
// version Check refuses.
func RouterOf(version string) Router {
	switch version {
	case "v0.12.0":
		return Router{Version: version, RedirectOutsideRange: true, MaxDatagram: 9000}
	case "v0.14.0":
		return Router{Version: version, TCPToPort: true, SiblingPort: true, LiteralUnderlays: true, MaxDatagram: 9000 - 512}
	case "v0.15.1":
		return Router{Version: version, TCPToPort: true, KnownL4: true, STUN: true, SiblingPort: true, LiteralUnderlays: true, MaxDatagram: 9000 - 512}
	}
	panic("scionproto: unsupported release " + version)
}
