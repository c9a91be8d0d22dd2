package lab

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/preflight"
)

// requireKernel fails a test that needs root, bpffs and BTF without them:
// a kernel test that skips quietly would hide a broken CI machine.
func requireKernel(t *testing.T) {
	t.Helper()
	if err := preflight.BPF(); err != nil {
		t.Fatalf("kernel test: %v", err)
	}
}

// testTestbed builds a testbed with a name no other test or lab uses, and
// removes it when the test ends, also when it fails.
func testTestbed(t *testing.T, layout Layout) Testbed {
	t.Helper()
	requireKernel(t)
	b := make([]byte, 2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	tb := Testbed{Prefix: "fp-t" + hex.EncodeToString(b) + "-", Layout: layout}
	t.Cleanup(func() {
		if err := tb.Down(); err != nil {
			t.Errorf("down: %v", err)
		}
		for _, ns := range tb.allNamespaces() {
			if netns.Exists(ns) {
				t.Errorf("namespace %s left behind", ns)
			}
		}
	})
	if err := tb.Up(); err != nil {
		t.Fatalf("up: %v", err)
	}
	return tb
}
