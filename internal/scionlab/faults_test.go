package scionlab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// What names no service, AS or interface of the network is refused with
// an error that says what there is, before anything is stopped or changed.
func TestRefusedFaults(t *testing.T) {
	n := Network{Prefix: "fp-tfault-", Dir: t.TempDir()}
	if err := n.writeState(&State{Prefix: n.Prefix, ASes: 3}); err != nil {
		t.Fatal(err)
	}
	as, _, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		do   func() error
		want string
	}{
		"unknown service":   {func() error { return n.Restart(context.Background(), as[1], "gateway", nil) }, `service "gateway": restart one of router, control, daemon`},
		"unrecorded":        {func() error { return n.Restart(context.Background(), as[1], "control", nil) }, "records no control-64513 of 1-64513"},
		"no fastpath-br":    {func() error { return n.Restart(context.Background(), as[1], ServeService, nil) }, "the network runs no fastpath-br: it was brought up without --hybrid"},
		"no such interface": {func() error { return n.SetLink(as[1], 2, false) }, "1-64513 has no interface 2: its interfaces are 1"},
		"core's interfaces": {func() error { return n.SetLink(as[0], 9, true) }, "1-64512 has no interface 9: its interfaces are 1, 2"},
		"bad IA":            {func() error { _, err := n.FindAS("64513"); return err }, `AS "64513": write it as ISD-AS, like 1-64513`},
		"IA not in network": {func() error { _, err := n.FindAS("1-64600"); return err }, "AS 1-64600 is not in the network: it has 1-64512 to 1-64514"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if err := c.do(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// interfaceUp is what an AS's reference router's metrics say of one of
// its interfaces: 1 up, 0 down (BFD's view).
func interfaceUp(n Network, a AS, ifid uint16) (float64, error) {
	m, err := n.RouterMetrics(a)
	if err != nil {
		return 0, err
	}
	prefix := fmt.Sprintf("router_interface_up{interface=%q,", fmt.Sprint(ifid))
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%s's router reports no router_interface_up for interface %d", a.IA, ifid)
}

// eventually retries f every 200 ms until it succeeds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// showpaths are the paths an AS's daemon gives its host, as scion
// showpaths prints them in JSON; --refresh makes the daemon ask its control
// service instead of answering from the segments it keeps.
func showpaths(n Network, src, dst AS) ([]struct {
	Expiry time.Time `json:"expiry"`
	Status string    `json:"status"`
}, error) {
	out, err := n.Scion(context.Background(), src, "showpaths", dst.IA.String(), "--refresh", "--format", "json", "--timeout", "2s")
	if err != nil {
		return nil, err
	}
	var res struct {
		Paths []struct {
			Expiry time.Time `json:"expiry"`
			Status string    `json:"status"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return nil, fmt.Errorf("showpaths JSON: %w\n%s", err, out)
	}
	if len(res.Paths) == 0 {
		return nil, fmt.Errorf("no path from %s to %s", src.IA, dst.IA)
	}
	return res.Paths, nil
}

// One network with hop fields of the shortest lifetime, on which services
// are restarted and a link is cut and mended: paths expire within that
// lifetime, restarted services come back with new PIDs and paths, and
// both routers' BFD sees the link go down and up.
func TestHopExpiryRestartAndLink(t *testing.T) {
	n, as := testNetwork(t, UpOptions{HopExpiry: HopExpiryUnit})
	leaf, other := as[2], as[1]

	t.Run("status records the hop expiry", func(t *testing.T) {
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		want := HopExpiry{Asked: HopExpiryUnit, ExpTime: 0, Lifetime: HopExpiryUnit}
		if st.Hops != want {
			t.Fatalf("status: %+v, want %+v", st.Hops, want)
		}
		var sb strings.Builder
		st.Write(&sb)
		if !strings.Contains(sb.String(), "hop fields live 5m37.5s (ExpTime 0, --hop-expiry 5m37.5s)") {
			t.Fatalf("status does not show the hop expiry:\n%s", sb.String())
		}
	})

	t.Run("paths expire within the hop expiry", func(t *testing.T) {
		paths, err := showpaths(n, other, leaf)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range paths {
			// A path expires with its first hop field to expire: one
			// unit after its segment's timestamp, which is in the past.
			if left := time.Until(p.Expiry); left <= 0 || left > HopExpiryUnit {
				t.Fatalf("path %d expires at %s, in %s: want within %s (scionproto's default would be 6h)", i, p.Expiry, left, HopExpiryUnit)
			}
		}
	})

	for _, service := range []string{"daemon", "control", "router"} {
		t.Run("restart "+service, func(t *testing.T) {
			before := recorded(t, n, procName(service, leaf))
			if err := n.Restart(context.Background(), leaf, service, io.Discard); err != nil {
				t.Fatal(err)
			}
			after := recorded(t, n, procName(service, leaf))
			if after.PID == before.PID || !after.Alive() || before.Alive() {
				t.Fatalf("%s: pid %d (alive %v) before, %d (alive %v) after the restart", service, before.PID, before.Alive(), after.PID, after.Alive())
			}
			if after.Log != before.Log || !slices.Equal(after.Args, before.Args) || after.Netns != before.Netns {
				t.Fatalf("restarted as %+v, was %+v", after, before)
			}
			eventually(t, 30*time.Second, "paths from "+leaf.IA.String()+" after restarting its "+service, func() error {
				_, err := showpaths(n, leaf, other)
				return err
			})
			if service == "router" {
				eventually(t, 30*time.Second, "pings across the restarted router", func() error { return pings(n, as, 3) })
			}
		})
	}

	t.Run("link down and up", func(t *testing.T) {
		const ifid = 1
		core := as[0]
		_, links, err := n.ASes()
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(links, func(l Link) bool { return l.Child == other.Index && l.ChildIf == ifid })
		coreIf := links[i].ParentIf
		for _, step := range []struct {
			up   bool
			want float64
		}{{false, 0}, {true, 1}} {
			if err := n.SetLink(other, ifid, step.up); err != nil {
				t.Fatal(err)
			}
			for _, end := range []struct {
				a    AS
				ifid uint16
			}{{other, ifid}, {core, coreIf}} {
				eventually(t, 10*time.Second, fmt.Sprintf("%s's router reporting interface %d as %v", end.a.IA, end.ifid, step.want), func() error {
					got, err := interfaceUp(n, end.a, end.ifid)
					if err == nil && got != step.want {
						err = fmt.Errorf("router_interface_up is %v", got)
					}
					return err
				})
			}
		}
		eventually(t, 30*time.Second, "pings across the mended link", func() error { return pings(n, as, 3) })
	})
}

// pings is nil if all of count SCMP echo requests from the first leaf's
// host to the last's are answered.
func pings(n Network, as []AS, count int) error {
	dst := as[len(as)-1]
	out, err := n.Scion(context.Background(), as[1], "ping", dst.IA.String()+","+dst.Host.String(), "-c", fmt.Sprint(count), "--interval", "50ms", "--timeout", "1s")
	m := lossRE.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("scion ping: %v\n%s", err, out)
	}
	if m[2] != fmt.Sprint(count) {
		return fmt.Errorf("%s of %d pings answered", m[2], count)
	}
	return nil
}

// recorded is the network's record of a process.
func recorded(t *testing.T, n Network, name string) Proc {
	t.Helper()
	st, err := n.readState()
	if err != nil || st == nil {
		t.Fatalf("no record of the network: %v", err)
	}
	for _, p := range st.Procs {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("the record has no %s", name)
	return Proc{}
}
