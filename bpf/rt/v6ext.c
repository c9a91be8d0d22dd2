/* An IPv6 extension-header walk, for the runtime's comparison with other
 * engines: up to six hop-by-hop, routing, fragment or destination-options
 * headers are skipped to reach the transport header, each with its own
 * bounds check at an offset known only at run time; UDP to a port the
 * blocked-ports array marks is dropped, and so is a walk that runs out of
 * headers to skip. */
#include "common.h"
#include <linux/ipv6.h>
#include <linux/in.h>

#define ETH_P_IPV6 0x86DD
#define MAX_EXT 6

struct ext_hdr {
	__u8 next;
	__u8 len; /* in 8-byte units, not counting the first 8 */
};

/* Indexed by destination port modulo 256: 1 blocks the port. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} blocked_ports SEC(".maps");

SEC("xdp")
int v6_ext_walk(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	void *p;
	__u8 next;
	int i;

	if ((void *)(ip6 + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6))
		return XDP_PASS;
	next = ip6->nexthdr;
	p = ip6 + 1;
#pragma unroll
	for (i = 0; i < MAX_EXT; i++) {
		struct ext_hdr *h = p;

		if (next != 0 && next != 43 && next != 44 && next != 60)
			break;
		if ((void *)(h + 1) > data_end)
			return XDP_DROP;
		next = h->next;
		/* A fragment header is 8 bytes whatever its second byte says. */
		p += next == 44 ? 8 : (h->len + 1) * 8;
	}
	if (next == 0 || next == 43 || next == 44 || next == 60)
		return XDP_DROP;
	if (next == IPPROTO_UDP) {
		__be16 *ports = p;
		__u32 key;
		__u8 *blocked;

		if ((void *)(ports + 2) > data_end)
			return XDP_DROP;
		key = bpf_ntohs(ports[1]) & 0xff;
		blocked = bpf_map_lookup_elem(&blocked_ports, &key);
		if (blocked && *blocked)
			return XDP_DROP;
	}
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
