package tralab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
	"github.com/fastpath-dev/fastpath/internal/tra"
)

// The tra row: fastpath's translator on both end hosts, each host's own
// SM-IP address on the translator's device pair, `fastpath tra run`
// keeping the paths. The hosts' offloads stay as they are.
func init() {
	Register(Row{Name: "tra", Description: "fastpath's SCION-IP translator on both end hosts (TC egress, XDP ingress), IPv6 between their SM-IP addresses", Setup: setupTra})
}

// translated is a host with the translator attached and its daemon
// running.
type translated struct {
	name, dir string
	pair      string // the translator's device pair (PAIR0, PAIR1)
	smip      netip.Addr
	daemon    *exec.Cmd
	exited    chan struct{} // closed when the daemon has exited
	log       *os.File
}

func (h *translated) stop() error {
	var errs []error
	if h.exited != nil {
		h.daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.exited:
		case <-time.After(5 * time.Second):
			h.daemon.Process.Kill()
			<-h.exited
		}
	}
	if h.log != nil {
		h.log.Close()
	}
	if h.name != "" {
		errs = append(errs, tra.Detach(h.name))
	}
	errs = append(errs, os.RemoveAll(h.dir))
	return errors.Join(errs...)
}

// translate attaches a translator to the AS's end host, set for the
// scionproto release the network's routers run, and starts its daemon; the
// daemon's log is in the row's directory until teardown.
func translate(bin string, n scionlab.Network, a scionlab.AS, log io.Writer) (h *translated, err error) {
	h = &translated{}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.stop())
		}
	}()
	if h.dir, err = os.MkdirTemp("", "fastpath-tra-row-"); err != nil {
		return h, err
	}
	cfgPath := filepath.Join(h.dir, "tra.toml")
	conf := fmt.Sprintf("topology = %q\ndaemon = %q\ndevice = %q\naddress = %q\nscion_version = %q\n",
		filepath.Join(a.Dir, "topology.json"), a.Daemon(), scionlab.HostDev, a.Host, n.Version())
	if err := os.WriteFile(cfgPath, []byte(conf), 0o644); err != nil {
		return h, err
	}
	cfg, err := tra.LoadConfig(cfgPath)
	if err != nil {
		return h, err
	}
	if h.name, err = tra.Attach(cfg, tra.AttachOptions{Netns: a.HostNetns, Warn: log}); err != nil {
		return h, err
	}
	h.smip, h.pair = cfg.SMIP, cfg.Pair
	if h.log, err = os.Create(filepath.Join(h.dir, "daemon.log")); err != nil {
		return h, err
	}
	h.daemon = exec.Command(bin, "tra", "run", "--config", cfgPath)
	h.daemon.Stdout, h.daemon.Stderr = h.log, h.log
	if err := netns.Run(a.HostNetns, h.daemon.Start); err != nil {
		return h, fmt.Errorf("start %s tra run in %s: %w", bin, a.HostNetns, err)
	}
	h.exited = make(chan struct{})
	go func() { h.daemon.Wait(); close(h.exited) }()
	// Ready once it has reached the AS's daemon and says so.
	deadline := time.After(15 * time.Second)
	for {
		b, _ := os.ReadFile(h.log.Name())
		if strings.Contains(string(b), "paths from") {
			return h, nil
		}
		select {
		case <-h.exited:
			return h, fmt.Errorf("fastpath tra run in %s exited:\n%s", a.HostNetns, b)
		case <-deadline:
			return h, fmt.Errorf("fastpath tra run in %s not ready after 15 s:\n%s", a.HostNetns, b)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func setupTra(ctx context.Context, env Env) (p Path, err error) {
	bin, err := scionlab.FastpathBinary("the tra row runs `fastpath tra run`")
	if err != nil {
		return Path{}, err
	}
	// The hosts compute their transmit checksums, as in the ip-xdp row: on
	// an underlay without checksum offload the kernel completes a TCP
	// segment's checksum on the way out, so the translator takes it as the
	// host sends it (tra_out_egress) instead of after the pair.
	var undo undoList
	defer func() {
		if err != nil {
			err = errors.Join(err, undo.run())
		}
	}()
	for _, a := range []scionlab.AS{env.Client, env.Server} {
		u, err := setFeature(ipEnd{ns: a.HostNetns, dev: scionlab.HostDev}, "tx-checksum-ip-generic", false)
		if err != nil {
			return p, err
		}
		undo.add(u)
	}
	client, err := translate(bin, env.Net, env.Client, env.Log)
	if err != nil {
		return p, err
	}
	undo.add(client.stop)
	server, err := translate(bin, env.Net, env.Server, env.Log)
	if err != nil {
		return p, err
	}
	undo.add(server.stop)
	return Path{
		ClientNetns: env.Client.HostNetns, ServerNetns: env.Server.HostNetns, Addr: server.smip,
		Teardown: undo.run,
		Note:     "hosts' TSO off (their eth0's peer runs XDP), transmit checksums by the host (as ip-xdp); their pair end: MTU of the largest packet the underlay brings (1476 on 1500), segmentation off (the kernel segments)",
	}, nil
}
