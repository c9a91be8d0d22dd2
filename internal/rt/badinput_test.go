package rt

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastpath-dev/fastpath/internal/bench"
	"github.com/fastpath-dev/fastpath/internal/labtest"
	"github.com/fastpath-dev/fastpath/internal/netns"
	"github.com/fastpath-dev/fastpath/internal/xdp"
)

// An object whose program reads the packet without a bounds check: the
// kernel's verifier refuses it, so the runtime must too.
const unsafeProgram = `
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int unchecked(struct xdp_md *ctx)
{
	unsigned char *p = (void *)(long)ctx->data;
	return p[100] == 7 ? XDP_DROP : XDP_PASS;
}
char _license[] SEC("license") = "GPL";
`

// A program the kernel accepts with a helper the runtime lacks.
const loadBytesProgram = `
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int load_bytes(struct xdp_md *ctx)
{
	char b[4];
	return bpf_xdp_load_bytes(ctx, 0, b, sizeof(b)) ? XDP_DROP : XDP_PASS;
}
char _license[] SEC("license") = "GPL";
`

// compile builds a C source into a BPF object in dir.
func compile(t *testing.T, dir, name, src string) string {
	t.Helper()
	c, o := filepath.Join(dir, name+".c"), filepath.Join(dir, name+".o")
	os.WriteFile(c, []byte(src), 0o644)
	if out, err := exec.Command("clang", "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c", c, "-o", o).CombinedOutput(); err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	return o
}

func TestBadInput(t *testing.T) {
	labtest.RequireKernel(t)
	dir := t.TempDir()
	bad := compile(t, dir, "unchecked", unsafeProgram)
	loadBytes := compile(t, dir, "load_bytes", loadBytesProgram)
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("not an object\n"), 0o644)
	xdpTx := filepath.Join("..", "bench", "xdptx_bpfel.o")
	pkts := [][]byte{bench.Sample("xdp_tx")}
	cases := map[string]struct {
		o    TestRunOptions
		want string
	}{
		"not an ELF object":     {TestRunOptions{Object: text}, "not an ELF object"},
		"not a BPF object":      {TestRunOptions{Object: "/bin/true"}, "not a BPF object"},
		"missing file":          {TestRunOptions{Object: filepath.Join(dir, "none.o")}, "No such file"},
		"verifier refuses":      {TestRunOptions{Object: bad}, "the kernel's verifier refused program unchecked"},
		"verifier log included": {TestRunOptions{Object: bad}, "invalid access to packet"},
		"unknown program":       {TestRunOptions{Object: xdpTx, Program: "nosuch"}, `no program or section named "nosuch": the object has xdp_tx (section xdp)`},
		"unsupported helper":    {TestRunOptions{Object: loadBytes}, "helper bpf_xdp_load_bytes (189) is not supported by the runtime"},
		"unknown engine":        {TestRunOptions{Object: xdpTx, Engine: "turbo"}, `--engine "turbo"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			c.o.Packets = pkts
			_, err := TestRun(c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestRunRefusesWithoutNativeXDP: an interface whose driver has no native
// XDP (loopback) is refused with the reason, and nothing stays attached.
func TestRunRefusesWithoutNativeXDP(t *testing.T) {
	labtest.RequireKernel(t)
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	tb := labtest.Testbed(t)
	cmd := exec.Command(bin, "run", filepath.Join("..", "bench", "xdptx_bpfel.o"), "--dev", "lo", "--duration", "1")
	var out []byte
	err = netns.Run(tb.DUTIn().Netns, func() error {
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err == nil || !strings.Contains(string(out), "attach XDP to interface") || !strings.Contains(string(out), "native mode") {
		t.Fatalf("run on lo: %v\n%s", err, out)
	}
	labtest.RequireDetached(t, xdp.Iface{Netns: tb.DUTIn().Netns, Name: "lo"})
}
