/* A router's forwarding step, for the runtime's comparison with other
 * engines: past one optional VLAN tag, an IPv4 packet's TTL (or an IPv6
 * packet's hop limit) is decremented, the IPv4 checksum updated
 * incrementally (RFC 1624), and the frame sent back with its addresses
 * swapped. A packet whose TTL would reach 0 goes to the stack, which
 * answers it. No maps and no helpers: every engine can run it. */
#include "common.h"
#include <linux/ip.h>
#include <linux/ipv6.h>

#define ETH_P_8021Q 0x8100
#define ETH_P_IPV6 0x86DD

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

static __always_inline void swap_macs(struct ethhdr *eth)
{
	__u8 tmp[ETH_ALEN];

	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
}

/* The checksum after the 16-bit word holding the TTL dropped by 0x0100. */
static __always_inline void ttl_dec4(struct iphdr *ip)
{
	__u32 sum = (__u32)ip->check + bpf_htons(0x0100);

	ip->check = (__u16)(sum + (sum >= 0xFFFF));
	ip->ttl--;
}

SEC("xdp")
int ttl_forward(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *l3 = eth + 1;
	__be16 proto;

	if (l3 > data_end)
		return XDP_DROP;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_hdr *vh = l3;

		if ((void *)(vh + 1) > data_end)
			return XDP_DROP;
		proto = vh->proto;
		l3 = vh + 1;
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > data_end)
			return XDP_DROP;
		if (ip->version != 4 || ip->ihl < 5)
			return XDP_DROP;
		if (ip->ttl <= 1)
			return XDP_PASS;
		ttl_dec4(ip);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end)
			return XDP_DROP;
		if (ip6->hop_limit <= 1)
			return XDP_PASS;
		ip6->hop_limit--;
	} else {
		return XDP_PASS;
	}
	swap_macs(eth);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
