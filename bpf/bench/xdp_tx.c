/* Measures the floor of an XDP forwarder: swap the MACs and send the frame back (XDP_TX). */
#include "common.h"
#include "bench.h"
#include "parse.h"

SEC("xdp")
int xdp_tx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if (!PKT_HAS(eth, sizeof(*eth), data_end))
		return XDP_PASS;
	swap_macs(eth);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
