/* Measures a two-lookup filter: drop blocked IPv4 sources and TCP/UDP to blocked ports. */
#include "common.h"
#include "parse.h"

#ifndef MAX_BLOCKED
#define MAX_BLOCKED 65536
#endif

/* Blocked IPv4 source addresses (network byte order): frames dropped. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_BLOCKED);
	__type(key, __u32);
	__type(value, __u64);
} blocked_src SEC(".maps");

/* By destination port (host byte order): non-zero drops TCP and UDP to it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} blocked_port SEC(".maps");

SEC("xdp")
int xdp_firewall(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *l4;
	__u64 *drops;
	__u8 *flag;
	__u32 key;

	if (!PKT_HAS(eth, sizeof(*eth), data_end) || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if (!PKT_HAS(ip, sizeof(*ip), data_end) || ip->ihl < 5)
		return XDP_PASS;

	key = ip->saddr;
	drops = bpf_map_lookup_elem(&blocked_src, &key);
	if (drops) {
		__sync_fetch_and_add(drops, 1);
		return XDP_DROP;
	}

	/* Only a first fragment carries the ports. */
	if ((ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP) ||
	    (ip->frag_off & bpf_htons(0x1fff)))
		return XDP_PASS;
	/* TCP and UDP both begin with the source and destination ports. */
	l4 = (void *)ip + ip->ihl * 4;
	if (!PKT_HAS(l4, 4, data_end))
		return XDP_PASS;
	key = bpf_ntohs(l4->dest);
	flag = bpf_map_lookup_elem(&blocked_port, &key);
	if (flag && *flag)
		return XDP_DROP;
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
