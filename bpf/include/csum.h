/* Internet checksum helpers: folding, incremental updates, IPv4 header sum. */
#ifndef FASTPATH_CSUM_H
#define FASTPATH_CSUM_H

#include "common.h"

static __always_inline __u16 csum_fold32(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* Checksum of a 20-byte IPv4 header without options, checksum field zero. */
static __always_inline __u16 ipv4_hdr_csum(const void *iph)
{
	const __u16 *w = iph;
	__u64 sum = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	return ~csum_fold32(sum);
}

#endif
