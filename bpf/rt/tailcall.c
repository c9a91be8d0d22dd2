/* Tail calls for the runtime's conformance test: the entry jumps by frame
 * length modulo 3 into a program array where slot 2 stays empty, so all
 * three outcomes of bpf_tail_call occur (taken to DROP, taken to TX through a
 * subprogram, not taken). */
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u32);
} jump SEC(".maps");

/* How often each program ran. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} runs SEC(".maps");

static __noinline int count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&runs, &which);

	if (c)
		*c += 1;
	return 0;
}

SEC("xdp")
int tc_entry(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;

	count(0);
	bpf_tail_call(ctx, &jump, len % 3);
	return XDP_PASS;
}

SEC("xdp")
int tc_drop(struct xdp_md *ctx)
{
	count(1);
	return XDP_DROP;
}

SEC("xdp")
int tc_tx(struct xdp_md *ctx)
{
	count(2);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
