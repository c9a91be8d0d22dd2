/* Traffic sink: counts every frame per CPU, then drops it.
 *
 * Both programs are frags-aware: the kernel refuses any other on a veth
 * whose peer's MTU exceeds a page ("Peer MTU is too large to set XDP"),
 * and a jumbo frame arrives there in several buffers, of which only the
 * first lies between data and data_end. Headers are always in the first. */
#include "common.h"
#include "lab_shared.h"

/* Packets and bytes seen, per CPU; userspace sums or shows them per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_counters);
} sink_stats SEC(".maps");

static __always_inline int count_and_drop(struct xdp_md *ctx)
{
	__u64 len = bpf_xdp_get_buff_len(ctx);
	struct sink_counters *c;
	__u32 key = 0;

	c = bpf_map_lookup_elem(&sink_stats, &key);
	if (c) {
		c->packets++;
		c->bytes += len;
		if (len > (__u64)(ctx->data_end - ctx->data))
			c->multi_buf++;
	}
	return XDP_DROP;
}

SEC("xdp.frags")
int lab_sink(struct xdp_md *ctx)
{
	return count_and_drop(ctx);
}

/* A sink on a SCION router's link: it counts and drops SCMP echo requests
 * on a standard path (the traffic under test: echoes captured from scion
 * ping) and passes everything else up, BFD (empty path), beacons (one-hop
 * path) and the control services' requests included, so that the router
 * behind keeps its sessions. */
SEC("xdp.frags")
int lab_sink_scion(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 *l4, *scion, *scmp;
	__u8 proto;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		__u8 *ip = (void *)(eth + 1);

		if ((void *)(ip + 20) > data_end)
			return XDP_PASS;
		proto = ip[9];
		l4 = ip + (ip[0] & 0xf) * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		__u8 *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 40) > data_end)
			return XDP_PASS;
		proto = ip6[6];
		l4 = ip6 + 40;
	} else {
		return XDP_PASS;
	}
	scion = l4 + 8;
	/* SCION's common header: NextHdr (byte 4: 202 is SCMP), HdrLen in
	 * 4-byte lines (byte 5), PathType (byte 8: 1 is SCION). */
	if (proto != 17 || (void *)(scion + 12) > data_end)
		return XDP_PASS;
	if (scion[8] != 1 || scion[4] != 202)
		return XDP_PASS;
	scmp = scion + scion[5] * 4;
	if ((void *)(scmp + 1) > data_end || scmp[0] != 128 /* echo request */)
		return XDP_PASS;
	return count_and_drop(ctx);
}

char _license[] SEC("license") = "GPL";
