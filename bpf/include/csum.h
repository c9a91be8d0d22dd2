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

/* Whether an IPv4 header with options sums to zero: the kernel drops the
 * packet otherwise, before any socket sees it. */
static __always_inline int ipv4_hdr_csum_ok(const void *iph, const void *end, __u32 ihl_words)
{
	const __u16 *w = iph;
	__u64 sum = 0;

	/* A bounded loop: the header is 10 to 30 words. */
	for (int i = 0; i < 30; i++) {
		if (i >= ihl_words * 2)
			break;
		if ((const void *)(w + i + 1) > end)
			return 0;
		sum += w[i];
	}
	return csum_fold32(sum) == 0xffff;
}

#endif
