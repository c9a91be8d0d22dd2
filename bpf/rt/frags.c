/* Multi-buffer frames (up to 9000 bytes and more): the frame's length, bytes
 * read and written across its pages, and its tail moved, in a frags-aware
 * program; a plain program sees the linear part only. Every helper's result
 * goes into a map. */
#include "log.h"

static __always_inline int run(struct xdp_md *ctx)
{
	__u8 buf[16] = {};
	__u64 len = bpf_xdp_get_buff_len(ctx);
	__u8 *p = (void *)(long)ctx->data;
	__s32 delta;
	__u32 off;

	if ((void *)(p + 4) > (void *)(long)ctx->data_end)
		return XDP_ABORTED;
	log_value(len);
	log_value(ctx->data_end - ctx->data);
	/* Offsets from the frame: inside, across the linear part's end, past the end. */
	off = ((__u32)p[1] << 8 | p[2]) % (len + 32);
	log_value(bpf_xdp_load_bytes(ctx, off, buf, sizeof(buf)));
	log_value(*(__u64 *)buf ^ *(__u64 *)(buf + 8));
	buf[0] ^= 0xff;
	log_value(bpf_xdp_store_bytes(ctx, (off * 7) % (len + 16), buf, sizeof(buf)));
	delta = (__s32)(__s8)p[3] * 40;
	log_value(bpf_xdp_adjust_tail(ctx, delta));
	log_value(bpf_xdp_get_buff_len(ctx));
	return XDP_TX;
}

SEC("xdp.frags")
int frags_mb(struct xdp_md *ctx)
{
	return run(ctx);
}

SEC("xdp")
int frags_linear(struct xdp_md *ctx)
{
	return run(ctx);
}

char _license[] SEC("license") = "GPL";
