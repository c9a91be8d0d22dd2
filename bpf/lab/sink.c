/* Traffic sink: counts every frame per CPU, then drops it. */
#include "common.h"
#include "lab_shared.h"

/* Packets and bytes seen, per CPU; userspace sums or shows them per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_counters);
} sink_stats SEC(".maps");

SEC("xdp")
int lab_sink(struct xdp_md *ctx)
{
	struct sink_counters *c;
	__u32 key = 0;

	c = bpf_map_lookup_elem(&sink_stats, &key);
	if (c) {
		c->packets++;
		c->bytes += ctx->data_end - ctx->data;
	}
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
