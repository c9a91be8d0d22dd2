/* Functions the program never calls, for the runtime's linker: it must link
 * only what the entry reaches, by calls and by callbacks, as libbpf does —
 * the kernel refuses instructions no path reaches and wants func_info for
 * exactly the subprograms it finds. */
#include "common.h"

__noinline int used_global(__u32 len)
{
	return len > 100 ? 3 : 5;
}

__noinline int unused_global(__u32 x)
{
	return x + 7;
}

static __attribute__((used)) __noinline int unused_static(__u32 x)
{
	return x * 3;
}

static __noinline int used_static(__u32 x)
{
	return x ^ 0x5a;
}

static long add_step(__u32 i, void *ctx)
{
	*(__u32 *)ctx += i;
	return 0;
}

SEC("xdp")
int unused_entry(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data, acc = 0;

	bpf_loop(4, add_step, &acc, 0);
	return (used_global(len) + used_static(len) + acc) % 3 == 0 ? XDP_PASS : XDP_DROP;
}

char _license[] SEC("license") = "GPL";
