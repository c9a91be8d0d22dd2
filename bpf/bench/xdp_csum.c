/* Measures bpf_csum_diff: the Internet checksum of a frame's first 64 bytes, then xdp_tx. */
#include "common.h"
#include "bench.h"
#include "parse.h"
#include "csum.h"

#ifndef CSUM_BYTES
#define CSUM_BYTES 64
#endif
_Static_assert(CSUM_BYTES <= 64, "the chunks of a short frame cover up to 63 bytes");

/* Slot 0: the checksum of the last frame, in the byte order a checksum field
 * of the frame would hold it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u16);
} csum_result SEC(".maps");

/* Adds n bytes at *p to sum when len has bit n set. bpf_csum_diff needs a
 * size the verifier can bound by a checked packet range, and a variable size
 * up to CSUM_BYTES would need CSUM_BYTES bytes checked, which a shorter frame
 * does not have: so a short frame is summed in power-of-two chunks of
 * constant size, at most one call per bit of its length. */
static __always_inline int csum_chunk(void **p, void *end, __u32 len, __u32 n, __s64 *sum)
{
	if (!(len & n))
		return CONTINUE;
	if (!PKT_HAS(*p, n, end))
		return XDP_ABORTED;
	*sum = bpf_csum_diff(NULL, 0, *p, n, *sum);
	if (*sum < 0)
		return XDP_ABORTED;
	*p += n;
	return CONTINUE;
}

SEC("xdp")
int xdp_csum(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;
	struct ethhdr *eth = data;
	__u32 zero = 0;
	__s64 sum = 0;
	__u64 tail = 0;
	__u16 *res;
	void *p = data;
	int ret;

	if (!PKT_HAS(eth, sizeof(*eth), data_end))
		return XDP_PASS;

	if (len >= CSUM_BYTES) {
		if (!PKT_HAS(p, CSUM_BYTES, data_end))
			return XDP_ABORTED;
		sum = bpf_csum_diff(NULL, 0, p, CSUM_BYTES, 0);
		if (sum < 0)
			return XDP_ABORTED;
	} else {
		if ((ret = csum_chunk(&p, data_end, len, 32, &sum)) >= 0)
			return ret;
		if ((ret = csum_chunk(&p, data_end, len, 16, &sum)) >= 0)
			return ret;
		if ((ret = csum_chunk(&p, data_end, len, 8, &sum)) >= 0)
			return ret;
		if ((ret = csum_chunk(&p, data_end, len, 4, &sum)) >= 0)
			return ret;
		/* The last 1 to 3 bytes, padded with zeros to a word as the
		 * checksum wants, in memory order like the words before. */
		if (len & 2) {
			if (!PKT_HAS(p, 2, data_end))
				return XDP_ABORTED;
			tail = *(__u16 *)p;
			p += 2;
		}
		if (len & 1) {
			if (!PKT_HAS(p, 1, data_end))
				return XDP_ABORTED;
			tail |= (__u64)(*(__u8 *)p) << ((len & 2) * 8);
		}
	}

	res = bpf_map_lookup_elem(&csum_result, &zero);
	if (!res)
		return XDP_ABORTED;
	*res = ~csum_fold32((__u64)(__u32)sum + tail);
	swap_macs(eth);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
