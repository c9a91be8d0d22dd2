/* Measures an in-place reply: IPv4 ICMP echo requests become echo replies sent back (XDP_TX). */
#include "common.h"
#include "bench.h"
#include "parse.h"
#include "csum.h"

/* The head of an ICMP echo message (RFC 792). Not <linux/icmp.h>: it pulls in
 * <linux/if.h> and with it glibc's headers, which want 32-bit stubs under
 * -target bpf. */
struct icmp_echo {
	__u8 type;
	__u8 code;
	__u16 checksum;
	__u16 id;
	__u16 seq;
};

#define ICMP_ECHOREPLY 0
#define ICMP_ECHO 8

/* Slot 0: echo replies sent. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ping_replies SEC(".maps");

/* RFC 1624 eqn. 3: the checksum after one 16-bit word changes from old to
 * new. Every operand is in memory order, which the sum does not mind. */
static __always_inline __u16 csum_replace2(__u16 check, __u16 old, __u16 new)
{
	__u64 sum = (__u16)~check + (__u16)~old + new;

	return ~csum_fold32(sum);
}

SEC("xdp")
int xdping(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct icmp_echo *icmp;
	struct iphdr *ip;
	__u16 old_word;
	__u32 addr, zero = 0;
	__u64 *replies;

	if (!PKT_HAS(eth, sizeof(*eth), data_end) || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if (!PKT_HAS(ip, sizeof(*ip), data_end) || ip->ihl < 5 ||
	    ip->protocol != IPPROTO_ICMP || ipv4_is_fragment(ip))
		return XDP_PASS;
	icmp = (void *)ip + ip->ihl * 4;
	if (!PKT_HAS(icmp, sizeof(*icmp), data_end) ||
	    icmp->type != ICMP_ECHO || icmp->code != 0)
		return XDP_PASS;

	swap_macs(eth);
	/* Swapping the addresses leaves the header checksum as it is. */
	addr = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = addr;
	old_word = *(__u16 *)icmp;
	icmp->type = ICMP_ECHOREPLY;
	icmp->checksum = csum_replace2(icmp->checksum, old_word, *(__u16 *)icmp);

	replies = bpf_map_lookup_elem(&ping_replies, &zero);
	if (replies)
		__sync_fetch_and_add(replies, 1);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
