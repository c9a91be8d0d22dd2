/* LPM trie updates with bits set beyond the prefix, lookups and deletes,
 * keys from the frame: the kernel keeps the key bytes of the last update,
 * and a dump shows them. */
#include "common.h"

struct lpm_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 64);
	__type(key, struct lpm_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lpm_routes SEC(".maps");

SEC("xdp")
int lpm_update(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = data;
	struct lpm_key k = {};
	__u32 v, *hit;

	if (data + 32 > data_end)
		return XDP_PASS;
	/* Few prefixes and few values, so that updates meet earlier ones. */
	k.prefixlen = p[20] % 33;
	__builtin_memcpy(k.addr, p + 26, 4);
	k.addr[0] &= 0x3;
	v = ctx->data_end - ctx->data;
	if (p[21] & 1)
		bpf_map_delete_elem(&lpm_routes, &k);
	else
		bpf_map_update_elem(&lpm_routes, &k, &v, BPF_ANY);
	k.prefixlen = 32;
	__builtin_memcpy(k.addr, p + 28, 4);
	k.addr[0] &= 0x3;
	hit = bpf_map_lookup_elem(&lpm_routes, &k);
	if (!hit)
		return XDP_PASS;
	return *hit & 1 ? XDP_TX : XDP_DROP;
}

char _license[] SEC("license") = "GPL";
