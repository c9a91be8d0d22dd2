/* What several benchmark programs share: the MAC swap of a frame sent back. */
#ifndef FASTPATH_BENCH_H
#define FASTPATH_BENCH_H

#include "common.h"

/* In 16-bit words: struct ethhdr is packed, and memcpy of its arrays would
 * compile to single-byte loads and stores. */
static __always_inline void swap_macs(struct ethhdr *eth)
{
	__u16 *w = (__u16 *)eth;
	__u16 d0 = w[0], d1 = w[1], d2 = w[2];

	w[0] = w[3];
	w[1] = w[4];
	w[2] = w[5];
	w[3] = d0;
	w[4] = d1;
	w[5] = d2;
}

#endif
