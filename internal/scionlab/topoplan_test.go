package scionlab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scionproto/scion/pkg/addr"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/scionproto"
)

// The lab lays a .topo network out on namespaces, addresses and MTUs of
// its own, each device sized for its SCION MTU and underlay.
func TestPlanTopo(t *testing.T) {
	topo, err := ReadTopo(filepath.Join("testdata", "two-isds.topo"))
	if err != nil {
		t.Fatal(err)
	}
	n := Network{Prefix: "fp-x-", Dir: "/nowhere"}
	as, links, err := n.PlanTopo(topo)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 6 || len(links) != 9 {
		t.Fatalf("%d ASes, %d links", len(as), len(links))
	}
	a111 := as[1]
	if a111.IA.String() != "1-ff00:0:111" || len(a111.Routers) != 2 || a111.Switch != "fp-x-sw1-ff00_0_111" ||
		a111.Routers[1].Netns != "fp-x-as1-ff00_0_111-2" || a111.Routers[1].ID != "br1-ff00_0_111-2" ||
		a111.Internal.String() != "fd00:5c10:0:1::1" || a111.Routers[1].Internal.String() != "fd00:5c10:0:1::b" ||
		a111.Host.String() != "fd00:5c10:0:1::2" || a111.MTU != 1472 || a111.DevMTU != 1472+48 {
		t.Fatalf("1-ff00:0:111 laid out as %+v", a111)
	}
	if a := as[3]; a.MTU != 1400 || a.DevMTU != 1428 || len(a.Routers) != 2 || a.Internal.String() != "10.103.0.1" {
		t.Fatalf("1-ff00:0:113 laid out as %+v", a)
	}
	core := links[0]
	if core.Type != LinkCore || core.ParentAddr.String() != "[fd00:5c10:1::1]:50000" || core.SCIONMTU != 1380 || core.DevMTU != 1428 {
		t.Fatalf("the core link laid out as %+v", core)
	}
	peer := links[5]
	if peer.Type != LinkPeer || peer.ParentRouter != 1 || peer.ParentIf != 2 || peer.ChildIf != 2 || peer.DevMTU != 1500 {
		t.Fatalf("the peering link laid out as %+v", peer)
	}
	topology := topology(a111, as, links, 0, scionproto.Default)
	routers := topology["border_routers"].(map[string]any)
	b := routers["br1-ff00_0_111-2"].(map[string]any)
	ifs := b["interfaces"].(map[string]any)
	if p := ifs["2"].(map[string]any); p["link_to"] != "peer" || p["remote_interface_id"] != uint16(2) || p["isd_as"] != "2-ff00:0:211" {
		t.Fatalf("peer interface 2 of 1-ff00:0:111: %v", p)
	}
	if b["internal_addr"] != "[fd00:5c10:0:1::b]:30042" || len(ifs) != 2 {
		t.Fatalf("router 2 of 1-ff00:0:111: %v", b)
	}
	for _, ns := range Namespaces(as) {
		if rest, _ := strings.CutPrefix(ns, n.Prefix); !isTopoNetns(rest) {
			t.Errorf("namespace %s would not be found again by down", ns)
		}
	}
	for _, other := range []string{"as64512", "h64513", "tra0", "as1-ff00_0_111-x", "sw1-ff00_0_111-2"} {
		if isTopoNetns(other) {
			t.Errorf("%s taken for a .topo network's namespace", other)
		}
	}

	lonely, err := ParseTopo("lonely.topo", []byte("ASes:\n  \"1-ff00:0:1\": {core: true, voting: true, issuing: true}\n  \"1-ff00:0:2\": {cert_issuer: 1-ff00:0:1}\n  \"1-ff00:0:3\": {cert_issuer: 1-ff00:0:1}\nlinks:\n  - {a: \"1-ff00:0:1#1\", b: \"1-ff00:0:2#1\", linkAtoB: CHILD}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.PlanTopo(lonely); err == nil || !strings.Contains(err.Error(), "lonely.topo:4: AS 1-ff00:0:3 has no link") {
		t.Fatalf("an AS without a link: %v", err)
	}
}

// A network of our own in the .topo format, in hybrid mode: every pair of
// leaf ASes has paths that answer ping and traceroute, and every kind of
// path the file has is proved forwarded in XDP at each router it crosses
// (peering within and across ISDs, a shortcut, router to router across an
// IPv6 internal network, an IPv6 link, a link narrower than its ASes).
// Down leaves no namespace and no router behind.
func TestTopoNetwork(t *testing.T) {
	topo, err := ReadTopo(filepath.Join("testdata", "two-isds.topo"))
	if err != nil {
		t.Fatal(err)
	}
	n, as := testNetwork(t, UpOptions{Topo: topo, Hybrid: true})
	// As an operator might: the IPv6 core link across the ISDs goes down
	// and up again (its addresses must stay), and the second router of
	// 1-ff00:0:111 and fastpath's in front of it are restarted.
	core, a111, a211 := as[0], as[1], as[5]
	if err := n.SetLink(core, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := n.SetLink(core, 1, true); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"router-2", "fastpath-br-2"} {
		if err := n.Restart(context.Background(), a111, svc, nil); err != nil {
			t.Fatal(err)
		}
	}
	// BFD brings the link back within a second or two; wait for an echo
	// across the ISDs before the check starts.
	for i := 0; ; i++ {
		if r, _ := n.ping(context.Background(), a111, fmt.Sprintf("%s,%s", a211.IA, a211.Host), "", 1, 0); r.Received == 1 {
			break
		}
		if i == 30 {
			t.Fatal("no echo from 2-ff00:0:211 within 30 s of the link's flap")
		}
	}
	var log strings.Builder
	c, err := n.CheckTopo(context.Background(), TopoCheckOptions{Oracle: true}, &log)
	if err != nil {
		t.Fatal(err)
	}
	c.WriteSummary(&log)
	t.Log(log.String())
	if len(c.Pairs) != 6 {
		t.Fatalf("%d pairs of leaves, want 6", len(c.Pairs))
	}
	if !c.OK() {
		t.Fatal("the check failed")
	}
	frames := 0
	for _, r := range c.Oracle {
		frames += r.Frames
	}
	if len(c.Oracle) != 16 || frames < 100 {
		t.Fatalf("the oracle replayed %d frames of %d routers, want every router's and at least the proofs' 100", frames, len(c.Oracle))
	}
	// The oracle is not blind: frames fastpath sent wrong, and one it
	// dropped that the reference forwards, differ.
	_, links, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	taps, err := openTaps(as[1:2])
	if err != nil {
		t.Fatal(err)
	}
	n.ping(context.Background(), a111, fmt.Sprintf("%s,%s", a211.IA, a211.Host), "", 2, 0)
	tampered := 0
	for k, r := range a111.Routers {
		tap := taps[routerHybridName(r)]
		got, _ := tap.Frames()
		tap.Close()
		if len(slices.DeleteFunc(got, br.TapFrame.Dropped)) < 3 {
			continue
		}
		replayTampered(t, n, a111, k, links, got)
		tampered++
	}
	if tampered == 0 {
		t.Fatal("neither router of 1-ff00:0:111 forwarded the echoes to 2-ff00:0:211 in XDP")
	}
	// One core AS per ISD: no core link within one.
	if len(c.Missing) != 1 || c.Missing[0] != KindCoreInISD {
		t.Fatalf("no path of kinds %v", c.Missing)
	}
	st, err := n.readState()
	if err != nil {
		t.Fatal(err)
	}
	as, _, err = n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	routers := 0
	for _, a := range as {
		routers += len(a.Routers)
	}
	// Every endpoint without a router name has a router of its own.
	if routers != 16 || len(st.Hybrid) != routers {
		t.Fatalf("fastpath in front of %d routers of %d, want 16: %v", len(st.Hybrid), routers, st.Hybrid)
	}
	if err := n.Down(nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range st.Hybrid {
		if _, err := os.Stat(br.PinDir(name)); err == nil {
			t.Errorf("fastpath %s still pinned after down", name)
		}
	}
	all, _ := netns.List()
	for _, ns := range all {
		if strings.HasPrefix(ns, n.Prefix) {
			t.Errorf("namespace %s left behind", ns)
		}
	}
}

// A generated network of any size the lab takes is a valid .topo network
// with one router per AS, and lays out.
func TestGenerateTopo(t *testing.T) {
	for k := 6; k <= MaxASes; k++ {
		topo, err := ReadTopo(GeneratedPrefix + fmt.Sprint(k))
		if err != nil {
			t.Fatalf("%d ASes: %v", k, err)
		}
		as, _, err := (Network{Prefix: "fp-x-", Dir: "/nowhere"}).PlanTopo(topo)
		if err != nil {
			t.Fatalf("%d ASes: %v", k, err)
		}
		isds := map[addr.ISD]bool{}
		for _, a := range as {
			isds[a.IA.ISD()] = true
			if len(a.Routers) != 1 {
				t.Fatalf("%d ASes: %s has %d routers", k, a.IA, len(a.Routers))
			}
		}
		if len(as) != k || len(isds) != 2 {
			t.Fatalf("%d ASes: %d in %d ISDs", k, len(as), len(isds))
		}
	}
	for _, bad := range []string{"generated:5", "generated:51", "generated:x", "generated:07"} {
		if _, err := ReadTopo(bad); err == nil {
			t.Errorf("%s taken", bad)
		}
	}
}
