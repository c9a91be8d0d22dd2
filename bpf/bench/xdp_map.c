/* Measures a hash map on the packet path: packets and bytes per IPv4 source address. */
#include "common.h"
#include "parse.h"

#ifndef MAX_SOURCES
#define MAX_SOURCES 65536
#endif

struct src_stats {
	__u64 packets;
	__u64 bytes;
};

/* Per IPv4 source address (network byte order): what it sent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SOURCES);
	__type(key, __u32);
	__type(value, struct src_stats);
} src_stats SEC(".maps");

SEC("xdp")
int xdp_map(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct src_stats *st;
	struct iphdr *ip;
	__u32 saddr;

	if (!PKT_HAS(eth, sizeof(*eth), data_end) || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if (!PKT_HAS(ip, sizeof(*ip), data_end))
		return XDP_PASS;

	saddr = ip->saddr;
	st = bpf_map_lookup_elem(&src_stats, &saddr);
	if (!st) {
		struct src_stats zero = {};

		/* Another CPU may insert the same source first: NOEXIST then
		 * fails, and the lookup finds its entry. */
		bpf_map_update_elem(&src_stats, &saddr, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&src_stats, &saddr);
		if (!st)
			return XDP_PASS; /* the map is full */
	}
	__sync_fetch_and_add(&st->packets, 1);
	__sync_fetch_and_add(&st->bytes, data_end - data);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
