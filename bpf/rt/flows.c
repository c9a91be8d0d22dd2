/* Per-flow counters with a limit, for the runtime's comparison with other
 * engines: an IPv4 TCP or UDP flow's packets and bytes are counted in a
 * hash map (a new flow is inserted, a known one updated in place), and a
 * flow past the limit the configuration array holds is dropped. The counts
 * are plain additions, not atomic ones: two CPUs may lose an increment
 * between them, which a limit tolerates, and engines without atomic
 * instructions can run it. */
#include "common.h"
#include <linux/ip.h>
#include <linux/in.h>

struct flow_key {
	__be32 saddr, daddr;
	__be16 sport, dport;
	__u8 proto;
	__u8 pad[3];
};

struct flow_stats {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct flow_key);
	__type(value, struct flow_stats);
} flows SEC(".maps");

/* Slot 0: packets a flow may send before it is dropped (0: no limit). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} flow_limit SEC(".maps");

SEC("xdp")
int flow_count(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct flow_key key = {};
	struct flow_stats *st, init;
	__u64 *limit, len = data_end - data;
	__u32 zero = 0;
	__be16 *ports;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	ports = (void *)ip + ip->ihl * 4;
	if ((void *)(ports + 2) > data_end)
		return XDP_PASS;
	key.saddr = ip->saddr;
	key.daddr = ip->daddr;
	key.sport = ports[0];
	key.dport = ports[1];
	key.proto = ip->protocol;
	st = bpf_map_lookup_elem(&flows, &key);
	if (!st) {
		init.packets = 1;
		init.bytes = len;
		bpf_map_update_elem(&flows, &key, &init, BPF_NOEXIST);
		return XDP_PASS;
	}
	st->packets++;
	st->bytes += len;
	limit = bpf_map_lookup_elem(&flow_limit, &zero);
	if (limit && *limit && st->packets > *limit)
		return XDP_DROP;
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
