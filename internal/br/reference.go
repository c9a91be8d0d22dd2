package br

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// ReferenceVersion is the scionproto release the router follows unless its
// configuration names another (scion_version).
const ReferenceVersion = scionproto.Default

// ReferenceRouter is scionproto's router running in a network namespace.
type ReferenceRouter struct {
	cmd    *exec.Cmd
	exited chan struct{}
	Logs   bytes.Buffer
}

// StartReferenceRouter runs release version of scionproto's router for the configuration in
// configDir (topology.json and keys/ with master0.key and master1.key) and
// waits until it listens on internal. BFD is off: it would hold every
// interface down until a BFD peer answered.
func StartReferenceRouter(version, netns, id, configDir, internal string) (*ReferenceRouter, error) {
	bin, err := scionproto.Binary(version, "router")
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
	// Ready once every socket it opens is open: internal_addr's and one per
	// interface of its own. From v0.14.0 it opens the interfaces' sockets
	// after internal_addr's, connected (ss lists them established, not
	// listening); a datagram sent before would be lost.
	want := append([]string{internal}, ownLocals(configDir, id)...)
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _ := exec.Command("ip", "netns", "exec", netns, "ss", "-uan").CombinedOutput()
		if allIn(string(out), want) {
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

// ownLocals are the underlay addresses of router id's own interfaces in
// configDir's topology.json, as ss prints them; none if it cannot be read
// (the router then fails to start, and says why).
func ownLocals(configDir, id string) []string {
	b, err := os.ReadFile(filepath.Join(configDir, "topology.json"))
	if err != nil {
		return nil
	}
	var topo struct {
		BorderRouters map[string]struct {
			Interfaces map[string]struct {
				Underlay struct {
					Local string `json:"local"`
				} `json:"underlay"`
			} `json:"interfaces"`
		} `json:"border_routers"`
	}
	if json.Unmarshal(b, &topo) != nil {
		return nil
	}
	var out []string
	for _, ifc := range topo.BorderRouters[id].Interfaces {
		if a, err := netip.ParseAddrPort(ifc.Underlay.Local); err == nil {
			out = append(out, a.String())
		}
	}
	return out
}

func allIn(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
