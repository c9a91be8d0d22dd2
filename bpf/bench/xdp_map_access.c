/* Measures one array map lookup and an atomic increment on top of xdp_tx. */
#include "common.h"
#include "bench.h"
#include "parse.h"

/* Slot 0: frames seen. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} access_count SEC(".maps");

SEC("xdp")
int xdp_map_access(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 zero = 0;
	__u64 *count;

	if (!PKT_HAS(eth, sizeof(*eth), data_end))
		return XDP_PASS;
	count = bpf_map_lookup_elem(&access_count, &zero);
	if (!count)
		return XDP_ABORTED;
	__sync_fetch_and_add(count, 1);
	swap_macs(eth);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
