/* Program arrays and maps of maps declared libbpf-style, filled by `.maps`
 * initialisers: the runtime must fill them as libbpf (and cilium/ebpf) do. */
#include "common.h"

int pa_drop(struct xdp_md *ctx);
int pa_tx(struct xdp_md *ctx);

/* Slot 0: pa_drop, slot 2: pa_tx, slots 1 and 3 empty. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 4);
	__uint(key_size, sizeof(__u32));
	__array(values, int(void *));
} pa_jump SEC(".maps") = {
	.values = {
		[0] = (void *)&pa_drop,
		[2] = (void *)&pa_tx,
	},
};

/* Per-slot frame counters, reached through the map of maps. */
struct pa_counter {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} pa_count_a SEC(".maps"), pa_count_b SEC(".maps");

/* Slot 1: pa_count_b; slot 0 empty. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct pa_counter);
} pa_counters SEC(".maps") = {
	.values = {
		[1] = &pa_count_b,
	},
};

SEC("xdp")
int pa_entry(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	__u32 which = len & 1, zero = 0;
	void *inner = bpf_map_lookup_elem(&pa_counters, &which);

	if (inner) {
		__u64 *c = bpf_map_lookup_elem(inner, &zero);

		if (c)
			*c += 1;
	}
	bpf_tail_call(ctx, &pa_jump, len & 3);
	return XDP_PASS;
}

SEC("xdp")
int pa_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

SEC("xdp")
int pa_tx(struct xdp_md *ctx)
{
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
