/* Underlay parsing: Ethernet, IPv4 (with options) or IPv6, UDP. */
#ifndef FASTPATH_PARSE_H
#define FASTPATH_PARSE_H

#include "common.h"
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/in.h>

#ifndef ETH_P_IPV6
#define ETH_P_IPV6 0x86DD
#endif

/* Bounds check of n bytes at p, in the form the verifier tracks. */
#define PKT_HAS(p, n, end) ((void *)(p) + (n) <= (void *)(end))

/* Not fragmented: MF clear and offset zero. */
static __always_inline int ipv4_is_fragment(const struct iphdr *ip)
{
	return ip->frag_off & bpf_htons(0x3fff);
}

#endif
