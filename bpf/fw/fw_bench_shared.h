/* What the firewall's benchmark variant (fw_bench.c) and its Go driver agree
 * on: the head of a packet, written over the frame before each run. */
#ifndef FASTPATH_FW_BENCH_SHARED_H
#define FASTPATH_FW_BENCH_SHARED_H

#include <linux/types.h>

/* Ethernet, IPv4 or IPv6, and the ports: all the firewall reads. */
#define FW_BENCH_HEAD 64

struct fw_bench_pkt {
	__u8 head[FW_BENCH_HEAD];
};

#endif
