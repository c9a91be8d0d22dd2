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
const taiProgram = `
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int tai(struct xdp_md *ctx)
{
	return bpf_ktime_get_tai_ns() & 1 ? XDP_DROP : XDP_PASS;
}
char _license[] SEC("license") = "GPL";
`

// Maps far larger than memory: one of 2^31 entries that runs (its pages
// cost nothing until written), and one that no address space holds.
const hugeMapsProgram = `
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1u << 31);
	__type(key, __u32);
	__type(value, __u64);
} huge SEC(".maps");
SEC("xdp") int huge_map(struct xdp_md *ctx)
{
	__u32 k = 1u << 30;
	__u64 *v = bpf_map_lookup_elem(&huge, &k);

	if (!v)
		return XDP_PASS;
	*v += 1;
	return XDP_TX;
}
char _license[] SEC("license") = "GPL";
`

const vastMapProgram = `
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 0xffffffff);
	__type(key, __u32);
	__uint(value_size, 1 << 16);
} vast SEC(".maps");
SEC("xdp") int vast_map(struct xdp_md *ctx)
{
	__u32 k = 0;
	return bpf_map_lookup_elem(&vast, &k) ? XDP_DROP : XDP_PASS;
}
char _license[] SEC("license") = "GPL";
`

// An object with maps and no program.
const noProgram = `
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lonely SEC(".maps");
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
	tai := compile(t, dir, "tai", taiProgram)
	vast := compile(t, dir, "vast", vastMapProgram)
	empty := compile(t, dir, "empty", noProgram)
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
		"unsupported helper":    {TestRunOptions{Object: tai}, "helper bpf_ktime_get_tai_ns (208) is not supported by the runtime"},
		"map beyond memory":     {TestRunOptions{Object: vast, NoVerify: true}, "map vast (4294967295 entries of 65536 bytes): 281474976645120 bytes (262144.0 GiB) of values cannot be allocated"},
		"no programs":           {TestRunOptions{Object: empty}, "the object has no programs"},
		"no programs, by name":  {TestRunOptions{Object: empty, Program: "x"}, `no program or section named "x": the object has no programs`},
		"unknown engine":        {TestRunOptions{Object: xdpTx, Engine: "turbo"}, `--engine "turbo"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			c.o.Packets = pkts
			_, err := TestRun(c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "panicked") || strings.Contains(err.Error(), "backtrace") {
				t.Fatalf("the runtime aborted: %v", err)
			}
		})
	}
}

// TestHugeMap: a map of 2^31 entries, loaded without the kernel's verifier
// (which would need as much kernel memory), runs in both engines.
func TestHugeMap(t *testing.T) {
	labtest.RequireKernel(t)
	obj := compile(t, t.TempDir(), "huge", hugeMapsProgram)
	for _, engine := range []string{"interp", "jit", "aot"} {
		got, err := TestRun(TestRunOptions{Object: obj, Packets: [][]byte{bench.Sample("xdp_tx")}, NoVerify: true, Engine: engine})
		if err != nil {
			t.Fatalf("%s: %v", engine, err)
		}
		if got.Packets[0].Ret != 3 {
			t.Fatalf("%s: verdict %d, want XDP_TX from slot 2^30's value", engine, got.Packets[0].Ret)
		}
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
