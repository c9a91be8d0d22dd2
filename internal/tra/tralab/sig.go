package tralab

import (
	"context"
	"fmt"
	"io"
	"time"
)

// The sig row: scionproto's SCION-IP gateway of the network's release on
// the two end hosts, carrying IPv6 between the addresses behind them
// (scionlab's StartSIG), over SCION through the three ASes' routers with
// fastpath in front. It is started for each turn and stopped after it, so
// that the other rows run without its probes and path lookups.
func init() {
	Register(Row{Name: "sig", Description: "scionproto's SCION-IP gateway (the network's release) on both end hosts, IPv6 over its TUN devices", Setup: setupSIG})
}

// sigTimeout bounds the gateways' start: about 9 s on this machine.
const sigTimeout = 60 * time.Second

func setupSIG(ctx context.Context, env Env) (Path, error) {
	if err := env.Net.StartSIG(ctx, env.Client, env.Server, sigTimeout, env.Log); err != nil {
		return Path{}, err
	}
	_, v6 := env.Server.SIGAddrs()
	return Path{
		ClientNetns: env.Client.HostNetns, ServerNetns: env.Server.HostNetns, Addr: v6,
		Teardown: func() error { return env.Net.StopSIG(io.Discard) },
		Note:     fmt.Sprintf("scionproto %s's gateway, TUN MTU 1500, the gateways fragment into the SCION MTU", env.Net.Version()),
	}, nil
}
