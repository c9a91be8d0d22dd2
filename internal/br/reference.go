package br

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ReferenceVersion is the scionproto release the router follows and is
// compared with.
const ReferenceVersion = "v0.12.0"

// ReferenceRouterBinary returns scionproto's own router, built once per
// machine from the Go module proxy into the user's cache directory, or the
// binary FASTPATH_SCION_ROUTER names.
func ReferenceRouterBinary() (string, error) {
	if p := os.Getenv("FASTPATH_SCION_ROUTER"); p != "" {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "fastpath", "scion-router-"+ReferenceVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	dir, err := os.MkdirTemp("", "fastpath-refrouter-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	mod := fmt.Sprintf("module refrouter\n\ngo 1.24\n\nrequire github.com/scionproto/scion %s\n", ReferenceVersion)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", bin+".tmp", "github.com/scionproto/scion/router/cmd/router")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build scionproto's router %s (needs the Go module proxy): %v\n%s", ReferenceVersion, err, out)
	}
	return bin, os.Rename(bin+".tmp", bin)
}

// ReferenceRouter is scionproto's router running in a network namespace.
type ReferenceRouter struct {
	cmd    *exec.Cmd
	exited chan struct{}
	Logs   bytes.Buffer
}

// StartReferenceRouter runs scionproto's router for the configuration in
// configDir (topology.json and keys/ with master0.key and master1.key) and
// waits until it listens on internal. BFD is off: it would hold every
// interface down until a BFD peer answered.
func StartReferenceRouter(netns, id, configDir, internal string) (*ReferenceRouter, error) {
	bin, err := ReferenceRouterBinary()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(configDir, "router.toml")
	body := fmt.Sprintf("[general]\nid = %q\nconfig_dir = %q\n\n[log.console]\nlevel = \"error\"\n\n[router.bfd]\ndisable = true\n", id, configDir)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	r := &ReferenceRouter{exited: make(chan struct{})}
	r.cmd = exec.Command("ip", "netns", "exec", netns, bin, "--config", conf)
	r.cmd.Stdout, r.cmd.Stderr = &r.Logs, &r.Logs
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start scionproto's router: %w", err)
	}
	go func() { r.cmd.Wait(); close(r.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", netns, "ss", "-uln").CombinedOutput()
		if strings.Contains(string(out), internal) {
			return r, nil
		}
		if r.Exited() || time.Now().After(deadline) {
			r.Stop()
			return nil, fmt.Errorf("scionproto's router did not start:\n%s", r.Logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Exited reports whether the router has exited (it panics on some inputs).
func (r *ReferenceRouter) Exited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// Stop kills the router.
func (r *ReferenceRouter) Stop() {
	r.cmd.Process.Kill()
	<-r.exited
}
