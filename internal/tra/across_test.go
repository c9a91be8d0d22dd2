package tra

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scionproto/scion/pkg/slayers/path/scion"

	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/scionlab"
)

// Two translated hosts in leaf ASes of different ISDs, on a network of our
// own in the .topo format (renumbered, so that the hosts have SM-IP
// addresses), with fastpath's routers in front of scionproto's: the
// default policy takes the peering link across the ISDs, a sequence
// policy on the other host takes the core path back, and when the peering
// links go down the flow fails over to a core path and goes on.
func TestAcrossISDs(t *testing.T) {
	labtest.Fastpath(t) // hybrid mode runs `fastpath br serve`
	topo, err := scionlab.ReadTopo(filepath.Join("..", "scionlab", "testdata", "two-isds.topo"))
	if err != nil {
		t.Fatal(err)
	}
	if topo, _, err = topo.Renumber(scionlab.FirstASN); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	rand.Read(b)
	n := scionlab.Network{Prefix: "fp-x" + hex.EncodeToString(b) + "-", Dir: filepath.Join(t.TempDir(), "scion")}
	t.Cleanup(func() {
		if err := n.Down(io.Discard); err != nil {
			t.Error(err)
		}
	})
	var log strings.Builder
	if _, err := n.Up(context.Background(), scionlab.UpOptions{Topo: topo, Renumber: true, Hybrid: true, Log: &log}); err != nil {
		t.Fatalf("up: %v\n%s", err, log.String())
	}
	as, _, err := n.ASes()
	if err != nil {
		t.Fatal(err)
	}
	// 1-ff00:0:112 and 2-ff00:0:211 of the file: leaves of ISD 1 and 2,
	// joined by a peering link (#3 at both ends, on an IPv6 underlay) and
	// by the core path 112#1 → 110 → 210 → 211#1.
	x, y := as[2], as[5]
	if x.IA.String() != "1-64514" || y.IA.String() != "2-64517" {
		t.Fatalf("the renumbered leaves are %s and %s", x.IA, y.IA)
	}
	a := translate(t, x, hostOptions{maxPaths: 1})
	bh := translate(t, y, hostOptions{maxPaths: 1, toml: fmt.Sprintf("\n[[destination]]\nia = %q\npolicy = \"sequence\"\nsequence = \"%s#1 0* %s#1\"\n", x.IA, y.IA, x.IA)})
	f := startFlow(t, a, bh, 31710)
	f.waitReplies("across the ISDs", time.Now(), 20*time.Second)

	if p := a.pathTo(t, y.IA); len(p) != 1 || egressOf(t, p[0].Raw) != 3 || !isPeering(t, p[0].Raw) {
		t.Fatalf("%s's path to %s: %d installed, want one by the peering interface 3", x.IA, y.IA, len(p))
	}
	if p := bh.pathTo(t, x.IA); len(p) != 1 || egressOf(t, p[0].Raw) != 1 || isPeering(t, p[0].Raw) {
		t.Fatalf("%s's path to %s: want one by its parent 2-64516 (interface 1), as its sequence policy says", y.IA, x.IA)
	}

	// The peering links to y go down (x's own, and the one of x's parent
	// 1-64513, at y's end): BFD notices, the reference routers answer with
	// SCMP external interface down, x's translator takes a core path.
	awaitAlternative(t, n, x, y, fmt.Sprintf("[%s 3>", x.IA))
	down := time.Now()
	if err := n.SetLink(x, 3, false); err != nil {
		t.Fatal(err)
	}
	if err := n.SetLink(y, 2, false); err != nil {
		t.Fatal(err)
	}
	f.waitReplies("after the peering links went down", down, 20*time.Second)
	gap, lost, sent := f.gapSince(down)
	p := a.pathTo(t, y.IA)
	if len(p) != 1 || egressOf(t, p[0].Raw) == 3 || isPeering(t, p[0].Raw) {
		t.Fatalf("%s's path to %s is still a peering path", x.IA, y.IA)
	}
	t.Logf("peering links down: the flow went on over a core path by interface %d after a gap of %s; %d of %d datagrams lost", egressOf(t, p[0].Raw), gap.Round(time.Millisecond), lost, sent)
}

// isPeering says whether a path crosses a peering link: its info fields
// carry the Peer flag.
func isPeering(t *testing.T, raw []byte) bool {
	t.Helper()
	var d scion.Decoded
	if err := d.DecodeFromBytes(raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range d.InfoFields {
		if f.Peer {
			return true
		}
	}
	return false
}
