// Package scionproto builds and finds scionproto's own programs — the
// reference router, the control service, the daemon, the dispatcher shim,
// the scion tool, scion-pki and the SCION-IP gateway — at the release fastpath follows. They are
// built once per machine from the Go module proxy into the user's cache.
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

// Version is the scionproto release fastpath follows and is compared with.
const Version = "v0.12.0"

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

// Dir is where the built programs are kept: FASTPATH_SCION_BIN if set,
// else scionproto-<Version> in the user's cache directory under fastpath.
func Dir() string {
	if d := os.Getenv("FASTPATH_SCION_BIN"); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "fastpath", "scionproto-"+Version)
}

var buildMu sync.Mutex

// Binary returns the path of one program, building it first if needed.
func Binary(name string) (string, error) {
	paths, err := Binaries(name)
	if err != nil {
		return "", err
	}
	return paths[name], nil
}

// Binaries returns the paths of the named programs, building the missing ones
// together (one go build: they share most packages).
func Binaries(names ...string) (map[string]string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	dir := Dir()
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
	if os.Getenv("FASTPATH_SCION_BIN") != "" {
		return nil, fmt.Errorf("FASTPATH_SCION_BIN=%s lacks %s: build them there, or unset it to build into the cache", dir, strings.Join(missing, ", "))
	}
	if err := build(dir, missing); err != nil {
		return nil, err
	}
	return out, nil
}

// build compiles the programs in a throwaway module that requires
// scionproto at Version (go install pkg@version refuses its replace
// directives), then moves them into dir.
func build(dir string, names []string) error {
	if _, err := exec.LookPath("go"); err != nil {
		return errors.New("building scionproto's programs needs the go command on PATH")
	}
	tmp, err := os.MkdirTemp("", "fastpath-scionproto-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	mod := fmt.Sprintf("module fastpathscion\n\ngo 1.24\n\nrequire github.com/scionproto/scion %s\n", Version)
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
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build scionproto %s's %s (needs the Go module proxy): %v\n%s", Version, strings.Join(names, ", "), err, out)
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
