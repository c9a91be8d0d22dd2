/* Measures bpf_xdp_adjust_tail: frames longer than 64 bytes are cut to 64, then xdp_tx. */
#include "common.h"
#include "bench.h"
#include "parse.h"

#ifndef TAIL_LEN
#define TAIL_LEN 64
#endif

SEC("xdp")
int xdp_adjust_tail(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int len = data_end - data;
	struct ethhdr *eth;

	if (len > TAIL_LEN && bpf_xdp_adjust_tail(ctx, TAIL_LEN - len))
		return XDP_ABORTED;
	/* The helper invalidates every packet pointer: load them again. */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if (!PKT_HAS(eth, sizeof(*eth), data_end))
		return XDP_PASS;
	swap_macs(eth);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
