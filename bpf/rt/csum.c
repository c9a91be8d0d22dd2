/* bpf_csum_diff's raw result, for the runtime's differential test: sizes,
 * seed and data come from the frame, and every result is kept whole (64 bits)
 * in a map, so a runtime that folds differently from the kernel shows. */
#include "log.h"

SEC("xdp")
int csum_diff_raw(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data;
	__s64 a, b, c, d = 0;
	__u32 seed, fs, ts;

	if (data + 64 > data_end)
		return XDP_PASS;
	seed = *(__u32 *)(p + 12);
	/* Multiples of 4 (both kernels' sizes), then any size (6.13's). */
	fs = (p[0] & 7) * 4;
	ts = (p[1] & 7) * 4;
	a = bpf_csum_diff((__be32 *)(p + 32), fs, (__be32 *)(p + 16), ts, seed);
	fs = p[2] & 31;
	ts = p[3] & 31;
	b = bpf_csum_diff((__be32 *)(p + 32), fs, (__be32 *)(p + 16), ts, seed);
	/* Pushing and pulling data: one side empty. */
	c = bpf_csum_diff(0, 0, (__be32 *)(p + 16), 16, seed) + bpf_csum_diff((__be32 *)(p + 16), 16, 0, 0, seed);
	/* More than 512 bytes in all: refused up to 6.12. */
	if (data + 600 <= data_end)
		d = bpf_csum_diff((__be32 *)p, 300, (__be32 *)(p + 300), 300, 0);
	log_value(a);
	log_value(b);
	log_value(c);
	log_value(d);
	/* Store the first result in the frame as well, and let it pick the verdict. */
	*(__u32 *)(p + 8) = (__u32)a;
	return (a & 1) ? XDP_TX : XDP_PASS;
}

char _license[] SEC("license") = "GPL";
