package brlab

import (
	"os"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/br"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// A bench run that dies leaves the router attached and pinned: lab down
// removes the pins with the namespaces.
func TestLabDownRemovesRouterPins(t *testing.T) {
	tb := labtest.Testbed(t)
	cfg, cleanup, err := br.LabConfig()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	name := tb.Prefix + "br"
	if err := br.Attach(cfg, br.AttachOptions{Devices: []xdp.Iface{tb.DUTIn().Iface(), tb.DUTOut().Iface()}, Name: name, NoFallback: true}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Down(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(br.PinDir(name)); !os.IsNotExist(err) {
		br.Detach(name, nil)
		t.Fatalf("lab down left %s (%v)", br.PinDir(name), err)
	}
}
