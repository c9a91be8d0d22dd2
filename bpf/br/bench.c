/* Timing harness for `br run --repeat`: BPF_PROG_TEST_RUN repeats a program
 * on the same buffer without restoring it, and the router rewrites the path,
 * so every run here first writes the original frame back, then tail-calls the
 * program under test. The same harness around an empty program gives the
 * cost to take off. */
#include "common.h"

#ifndef BENCH_MAX_FRAME
#define BENCH_MAX_FRAME 1536
#endif

struct bench_frame {
	__u32 len;
	__u8 data[BENCH_MAX_FRAME];
};

/* The frame to restore before each run. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_frame);
} bench_frames SEC(".maps");

/* Slot 0: the program under test. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_target SEC(".maps");

/* frags-aware, as the router is: a tail call needs both alike. */
SEC("xdp.frags")
int br_bench(struct xdp_md *ctx)
{
	__u32 zero = 0, len;
	struct bench_frame *f = bpf_map_lookup_elem(&bench_frames, &zero);

	if (!f)
		return XDP_ABORTED;
	len = f->len;
	/* A program that moved the head or tail leaves a frame this harness
	 * cannot restore: the caller sees XDP_ABORTED and times another way. */
	if (len < 1 || len > BENCH_MAX_FRAME || ctx->data_end - ctx->data != len)
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, f->data, len))
		return XDP_ABORTED;
	bpf_tail_call(ctx, &bench_target, 0);
	return XDP_ABORTED;
}

/* What the harness costs by itself. */
SEC("xdp.frags")
int br_bench_empty(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
