/* Measures an L4 load balancer: TCP/UDP to a virtual IP is rewritten (DNAT) to a backend picked by flow hash. */
#include "common.h"
#include "parse.h"
#include "csum.h"
#include <linux/tcp.h>

#ifndef MAX_BACKENDS
#define MAX_BACKENDS 256
#endif

struct lb_config {
	__u32 vip;      /* network byte order */
	__u32 backends; /* slots of lb_backends in use, 1 to MAX_BACKENDS */
};

struct lb_backend {
	__u32 addr; /* network byte order */
	__u8 mac[ETH_ALEN];
	__u8 pad[2];
};

/* Slot 0: the virtual IP and how many backends serve it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_config);
} lb_config SEC(".maps");

/* The backends, in slots 0 to lb_config.backends - 1. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct lb_backend);
} lb_backends SEC(".maps");

static __always_inline __u32 rotl32(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

/* One word of MurmurHash3 (x86_32). */
static __always_inline __u32 murmur_round(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = rotl32(k, 15);
	k *= 0x1b873593;
	h ^= k;
	h = rotl32(h, 13);
	return h * 5 + 0xe6546b64;
}

/* MurmurHash3 of the 5-tuple: addresses and ports as they sit in the packet. */
static __always_inline __u32 flow_hash(__u32 saddr, __u32 daddr, __u32 ports, __u8 proto)
{
	__u32 h = proto;

	h = murmur_round(h, saddr);
	h = murmur_round(h, daddr);
	h = murmur_round(h, ports);
	h ^= 12;
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/* RFC 1624 eqn. 3 for a 32-bit field, every operand in memory order. */
static __always_inline __u16 csum_replace4(__u16 check, __u32 old, __u32 new)
{
	__u64 sum = (__u16)~check;

	old = ~old;
	sum += (old & 0xffff) + (old >> 16) + (new & 0xffff) + (new >> 16);
	return ~csum_fold32(sum);
}

SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct lb_backend *be;
	struct lb_config *cfg;
	struct iphdr *ip;
	__u16 *l4_check, check, *w, *mac;
	__u32 zero = 0, idx, ports, n;
	int is_udp = 0;
	void *l4;

	if (!PKT_HAS(eth, sizeof(*eth), data_end) || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	/* Fragments go up: only the first carries the ports to hash on. */
	if (!PKT_HAS(ip, sizeof(*ip), data_end) || ip->ihl < 5 || ipv4_is_fragment(ip))
		return XDP_PASS;

	cfg = bpf_map_lookup_elem(&lb_config, &zero);
	if (!cfg || ip->daddr != cfg->vip)
		return XDP_PASS;
	/* Read once: the control plane may change it under us. */
	n = cfg->backends;
	if (n == 0)
		return XDP_PASS;

	/* Where the TCP or UDP checksum is, or NULL for a UDP datagram sent
	 * without one. */
	l4 = (void *)ip + ip->ihl * 4;
	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if (!PKT_HAS(tcp, sizeof(*tcp), data_end))
			return XDP_PASS;
		l4_check = &tcp->check;
	} else if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *udp = l4;

		if (!PKT_HAS(udp, sizeof(*udp), data_end))
			return XDP_PASS;
		is_udp = 1;
		l4_check = udp->check ? &udp->check : NULL;
	} else {
		return XDP_PASS;
	}
	/* TCP and UDP both begin with the source and destination ports. */
	ports = *(__u32 *)l4;

	idx = flow_hash(ip->saddr, ip->daddr, ports, ip->protocol) % n;
	be = bpf_map_lookup_elem(&lb_backends, &idx);
	if (!be)
		return XDP_PASS;

	/* The frame leaves from the address it came to, toward the backend;
	 * in 16-bit words, as struct ethhdr is packed. */
	w = (__u16 *)eth;
	mac = (__u16 *)be->mac;
	w[3] = w[0];
	w[4] = w[1];
	w[5] = w[2];
	w[0] = mac[0];
	w[1] = mac[1];
	w[2] = mac[2];

	/* The destination address is in the IPv4 header and in the TCP/UDP
	 * pseudo-header: both checksums change by the same words. */
	if (l4_check) {
		check = csum_replace4(*l4_check, ip->daddr, be->addr);
		/* For UDP a computed zero is sent as 0xffff: zero means none. */
		if (is_udp && !check)
			check = 0xffff;
		*l4_check = check;
	}
	ip->check = csum_replace4(ip->check, ip->daddr, be->addr);
	ip->daddr = be->addr;
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
