/* The firewall for measuring its new-flow path with BPF_PROG_TEST_RUN: one
 * test run with a repeat count runs the program many times on one frame,
 * so before each run this variant writes the head of the next packet of
 * fw_bench_pkts over the frame. Every run is then a packet of its own,
 * and each a new flow if the packets are distinct. Never attached. */
#include "common.h"
#include "fw_bench_shared.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fw_bench_pkt);
} fw_bench_pkts SEC(".maps");

__u32 fw_bench_next = 0;
volatile const __u32 fw_bench_count = 1;

static __always_inline void fw_bench_next_packet(struct xdp_md *ctx)
{
	__u32 idx = fw_bench_next;
	struct fw_bench_pkt *p;

	fw_bench_next = idx + 1 < fw_bench_count ? idx + 1 : 0;
	p = bpf_map_lookup_elem(&fw_bench_pkts, &idx);
	if (p)
		bpf_xdp_store_bytes(ctx, 0, p->head, sizeof(p->head));
}

#define FW_BENCH_PROLOGUE fw_bench_next_packet
#include "fw.c"
