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

#ifndef CSUM_MAX_LEN
#define CSUM_MAX_LEN 4096 /* longest run csum_packet sums: a linear XDP frame */
#endif

/* Adds bytes [start, start+len) of the packet to *sum, in the kernel's
 * convention (16-bit words as they lie in memory, so that the result can
 * be stored as it is). bpf_csum_diff does the bulk in fixed-size pieces, as
 * the verifier wants a bounded size for a packet pointer; since 6.13 it
 * returns its sum folded to 16 bits, before that unfolded: either chains as
 * a seed and folds to the same value. Returns -1 if the range leaves the
 * packet or is longer than CSUM_MAX_LEN. */
static __always_inline int csum_packet(void *start, __u32 len, void *data_end, __u64 *sum)
{
	__u8 *c = start;
	__u32 s = 0;

	if (len > CSUM_MAX_LEN)
		return -1;
	for (int i = 0; i < CSUM_MAX_LEN / 256; i++) {
		if (len < 256)
			break;
		if ((void *)(c + 256) > data_end)
			return -1;
		s = bpf_csum_diff(NULL, 0, (void *)c, 256, s);
		c += 256;
		len -= 256;
	}
#define CSUM_PIECE(n)                                                 \
	if (len >= (n)) {                                             \
		if ((void *)(c + (n)) > data_end)                     \
			return -1;                                    \
		s = bpf_csum_diff(NULL, 0, (void *)c, (n), s);        \
		c += (n);                                             \
		len -= (n);                                           \
	}
	CSUM_PIECE(128)
	CSUM_PIECE(64)
	CSUM_PIECE(32)
	CSUM_PIECE(16)
	CSUM_PIECE(8)
	CSUM_PIECE(4)
#undef CSUM_PIECE
	*sum += s;
	if (len >= 2) {
		if ((void *)(c + 2) > data_end)
			return -1;
		*sum += *(__u16 *)c;
		c += 2;
		len -= 2;
	}
	if (len == 1) {
		if ((void *)(c + 1) > data_end)
			return -1;
		/* An odd last byte is the first byte of a zero-padded word. */
		*sum += bpf_ntohs((__u16)*c << 8);
	}
	return 0;
}

#endif
