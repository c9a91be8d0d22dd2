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

/* A checksum after a 32-bit word it covers changed from one value to
 * another, all three as they lie in memory (RFC 1624, eqn. 3): for an
 * XDP program, which has no bpf_l4_csum_replace. */
static __always_inline __u16 csum_update4(__u16 check, __u32 from, __u32 to)
{
	return ~csum_fold32((__u64)(__u16)~check + (__u32)~from + to);
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

/* The checksum of an IPv4 header without options, DSCP, ID or ones set,
 * from its values: total length, fragment word and TTL in host order,
 * protocol UDP, addresses in network order. */
static __always_inline __u16 ipv4_udp_hdr_csum(__u16 tot_len, __u16 frag_off, __u8 ttl, __u32 saddr, __u32 daddr)
{
	__u64 sum = bpf_htons(0x4500) + bpf_htons(tot_len) + bpf_htons(frag_off) +
		    bpf_htons((__u16)ttl << 8 | IPPROTO_UDP) + (__u64)saddr + daddr;

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

/* ipv4_hdr_csum_ok, with the common header of five words read as five
 * 32-bit words. */
static __always_inline int ipv4_hdr_ok(const void *iph, const void *end, __u32 ihl_words)
{
	const __u32 *w = iph;

	if (ihl_words == 5) {
		if ((const void *)(w + 5) > end)
			return 0;
		return csum_fold32((__u64)w[0] + w[1] + w[2] + w[3] + w[4]) == 0xffff;
	}
	return ipv4_hdr_csum_ok(iph, end, ihl_words);
}

#ifndef CSUM_MAX_LEN
#define CSUM_MAX_LEN 4096 /* longest run csum_packet sums: a linear XDP frame */
#endif

/* Adds bytes [start, start+len) of the packet to *sum, in the kernel's
 * convention (16-bit words as they lie in memory, so that the result can
 * be stored as it is). Plain 8-byte loads, unrolled by 64 bytes with one
 * bounds check a piece: no helper call (bpf_csum_diff costs a call per
 * fixed-size piece, and its result changed form in 6.13), and the 32-bit
 * halves of each word add up in 64 bits without carries to track. Returns
 * -1 if the range leaves the packet or is longer than CSUM_MAX_LEN. */
static __always_inline int csum_packet(void *start, __u32 len, void *data_end, __u64 *sum)
{
	__u8 *q = start;
	__u64 s = 0;

	if (len > CSUM_MAX_LEN)
		return -1;
	/* Whole 256-byte pieces through the kernel's csum_partial, which
	 * reads a word per add-with-carry: about 3 times the loop's speed
	 * from 576 bytes on (a datagram of 1,458 bytes: 50 ns against 100). */
	for (int p = 0; p < CSUM_MAX_LEN / 256; p++) {
		long r;

		asm volatile("" : "+r"(q));
		if (len < 256)
			break;
		if ((void *)(q + 256) > data_end)
			return -1;
		r = bpf_csum_diff(NULL, 0, (__be32 *)q, 256, 0);
		if (r < 0)
			return -1;
		s += (__u32)r;
		q += 256;
		len -= 256;
	}
	if (len >= 256)
		return -1;
	/* The pointer advances, so that each check covers the loads after it
	 * (a pointer recomputed from a variable offset loses the range). */
	for (int p = 0; p < 4; p++) {
		/* Keeps clang from turning the bounds checks into arithmetic
		 * on data_end, which the verifier refuses. */
		asm volatile("" : "+r"(q));
		if (len < 64)
			break;
		if ((void *)(q + 64) > data_end)
			return -1;
#pragma unroll
		for (int w = 0; w < 8; w++) {
			__u64 v = ((__u64 *)q)[w];

			s += (v & 0xffffffff) + (v >> 32);
		}
		q += 64;
		len -= 64;
	}
	for (int w = 0; w < 7; w++) {
		__u64 v;

		asm volatile("" : "+r"(q));
		if (len < 8)
			break;
		if ((void *)(q + 8) > data_end)
			return -1;
		v = *(__u64 *)q;
		s += (v & 0xffffffff) + (v >> 32);
		q += 8;
		len -= 8;
	}
	if (len >= 4) {
		if ((void *)(q + 4) > data_end)
			return -1;
		s += *(__u32 *)q;
		q += 4;
		len -= 4;
	}
	if (len >= 2) {
		if ((void *)(q + 2) > data_end)
			return -1;
		s += *(__u16 *)q;
		q += 2;
		len -= 2;
	}
	if (len) {
		if ((void *)(q + 1) > data_end)
			return -1;
		/* An odd last byte is the first byte of a zero-padded word. */
		s += bpf_ntohs((__u16)*q << 8);
	}
	*sum += s;
	return 0;
}

#ifndef CSUM_OFF_MASK
#define CSUM_OFF_MASK 0x1ff /* the farthest a summed range starts in the frame */
#endif

/* The global functions below are compiled only where asked for
 * (CSUM_XDP, CSUM_SKB): an object carries none it does not call, as a
 * loader that links all of .text would otherwise offer the kernel a
 * function no instruction reaches. */
#ifdef CSUM_XDP
/* csum_packet over bytes [off, off+len) of an XDP frame, as a global
 * function: the verifier checks it once, on its own, instead of once per
 * path of the program that calls it (the loop would cost a big program
 * its instruction budget). */
__attribute__((noinline)) int csum_xdp(struct xdp_md *ctx, __u32 off, __u32 len, __u64 *sum)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (!sum || off > CSUM_OFF_MASK)
		return -1;
	/* The mask, not only the test, bounds the offset for the verifier:
	 * clang zero-extends off afresh after the test, and would drop a mask
	 * it can see is a no-op. */
	asm volatile("" : "+r"(off));
	return csum_packet(data + (off & CSUM_OFF_MASK), len, data_end, sum);
}
#endif

#ifdef CSUM_XDP
#ifndef CSUM_FRAGS_MAX_LEN
#define CSUM_FRAGS_MAX_LEN 9216 /* the longest jumbo frame */
#endif
#define CSUM_COPY 512 /* the most bpf_csum_diff sums in one call */

/* Where csum_xdp_frags copies the bytes it sums: a global function's stack
 * frame adds to its caller's, which leaves no room for it. */
struct csum_copy {
	__u8 b[CSUM_COPY];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct csum_copy);
} csum_copies SEC(".maps");

/* Its key, in .rodata: the frame has not a byte to spare for one. */
static const __u32 csum_copy_key = 0;

/* csum_xdp for bytes [off, off+len) anywhere in a frame of several buffers,
 * through copies (bpf_xdp_load_bytes crosses buffer ends); off - the
 * datagram's start must be even. */
__attribute__((noinline)) int csum_xdp_frags(struct xdp_md *ctx, __u32 off, __u32 len, __u64 *sum)
{
	struct csum_copy *c;
	__u64 s = 0;

	if (!sum || len > CSUM_FRAGS_MAX_LEN)
		return -1;
	c = bpf_map_lookup_elem(&csum_copies, &csum_copy_key);
	if (!c)
		return -1;
	for (int p = 0; p < CSUM_FRAGS_MAX_LEN / CSUM_COPY; p++) {
		__u32 n = len < CSUM_COPY ? len : CSUM_COPY;
		long r;

		if (n == 0)
			break;
		/* The last piece is summed in whole words: zero padding adds
		 * nothing, and an odd last byte is the first of a word. */
		if (n < CSUM_COPY)
			__builtin_memset(c->b, 0, sizeof(c->b));
		/* The masks repeat the bounds for the verifier. */
		if (bpf_xdp_load_bytes(ctx, off, c->b, ((n - 1) & (CSUM_COPY - 1)) + 1))
			return -1;
		r = bpf_csum_diff(NULL, 0, (__be32 *)c->b, (((n + 3) & ~3U) - 1) % CSUM_COPY + 1, 0);
		if (r < 0)
			return -1;
		s += (__u32)r;
		off += n;
		len -= n;
	}
	*sum += s;
	return 0;
}
#endif

#ifdef CSUM_SKB
/* csum_xdp for an skb (TC), whose bytes from off on must be linear (pulled). */
__attribute__((noinline)) int csum_skb(struct __sk_buff *skb, __u32 off, __u32 len, __u64 *sum)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;

	if (!sum || off > CSUM_OFF_MASK)
		return -1;
	asm volatile("" : "+r"(off));
	return csum_packet(data + (off & CSUM_OFF_MASK), len, data_end, sum);
}
#endif

#endif
