/* Measures a byte-at-a-time bounded loop: FNV-1a over up to 128 bytes of the frame. */
#include "common.h"
#include "parse.h"

#ifndef HASH_BYTES
#define HASH_BYTES 128
#endif

#define FNV64_OFFSET 0xcbf29ce484222325ULL
#define FNV64_PRIME 0x100000001b3ULL

/* Slot 0: the sum of the hashes of every frame seen. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hash_sum SEC(".maps");

SEC("xdp")
int xdp_hash_sum(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 h = FNV64_OFFSET;
	__u32 zero = 0;
	__u64 *sum;

	for (__u32 i = 0; i < HASH_BYTES; i++) {
		__u8 *b = data + i;

		if (!PKT_HAS(b, 1, data_end))
			break;
		h ^= *b;
		h *= FNV64_PRIME;
	}

	sum = bpf_map_lookup_elem(&hash_sum, &zero);
	if (!sum)
		return XDP_ABORTED;
	__sync_fetch_and_add(sum, h);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
