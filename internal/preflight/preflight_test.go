package preflight

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Under `ip netns exec`, /sys is a fresh mount without the pins: the check
// says so and names the fix, instead of asking for a bpffs mount.
func TestInsideIPNetnsExec(t *testing.T) {
	if os.Getenv("FASTPATH_PREFLIGHT_CHILD") == "1" {
		if err := BPFFSMounted(); err != nil {
			os.Stdout.WriteString(err.Error())
		}
		return
	}
	if err := Root(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	rand.Read(b)
	ns := "fp-tpf" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestInsideIPNetnsExec$")
	cmd.Env = append(os.Environ(), "FASTPATH_PREFLIGHT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"ip netns exec " + ns, "--netns " + ns, "nsenter --net=/run/netns/" + ns} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("inside ip netns exec the check said %q; want it to contain %q", out, want)
		}
	}
	// Outside, nothing to say.
	if err := BPFFSMounted(); err != nil {
		t.Fatal(err)
	}
}
