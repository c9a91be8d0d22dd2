/* bpf_loop's return value kept whole: within its limit the number of calls,
 * over it -E2BIG as the kernel's inlined bpf_loop sets it (a 32-bit move). */
#include "log.h"

static long stop_at_once(__u64 i, void *ctx)
{
	return 1;
}

SEC("xdp")
int loop_ret(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data;
	__u32 nr;
	long r;

	if (data + 16 > data_end)
		return XDP_PASS;
	/* Around the limit of 1 << 23 calls, and 0. */
	nr = p[0] == 0 ? 0 : (1 << 23) - 128 + p[1];
	r = bpf_loop(nr, stop_at_once, 0, 0);
	log_value(r);
	*(__u64 *)(p + 8) = r;
	return r < 0 ? XDP_DROP : XDP_PASS;
}

char _license[] SEC("license") = "GPL";
