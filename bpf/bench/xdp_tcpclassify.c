/* Measures a TCP flag classifier: a per-CPU counter per class and a hash map counter per destination port. */
#include "common.h"
#include "parse.h"
#include <linux/tcp.h>

enum tcp_class {
	TCP_CLASS_SYN,
	TCP_CLASS_SYN_ACK,
	TCP_CLASS_FIN,
	TCP_CLASS_RST,
	TCP_CLASS_ACK,   /* ACK with none of the flags above */
	TCP_CLASS_OTHER, /* none of SYN, FIN, RST, ACK */
	TCP_CLASS_MAX,
};

/* IPv4 TCP segments per class. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TCP_CLASS_MAX);
	__type(key, enum tcp_class);
	__type(value, __u64);
} tcp_classes SEC(".maps");

/* IPv4 TCP segments per destination port (host byte order). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u16);
	__type(value, __u64);
} tcp_ports SEC(".maps");

/* RST first: a segment with RST set is a reset whatever else it carries. */
static __always_inline enum tcp_class classify(const struct tcphdr *tcp)
{
	if (tcp->rst)
		return TCP_CLASS_RST;
	if (tcp->syn)
		return tcp->ack ? TCP_CLASS_SYN_ACK : TCP_CLASS_SYN;
	if (tcp->fin)
		return TCP_CLASS_FIN;
	if (tcp->ack)
		return TCP_CLASS_ACK;
	return TCP_CLASS_OTHER;
}

SEC("xdp")
int xdp_tcpclassify(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct tcphdr *tcp;
	struct iphdr *ip;
	__u64 *count, one = 1;
	enum tcp_class class;
	__u16 port;

	if (!PKT_HAS(eth, sizeof(*eth), data_end) || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if (!PKT_HAS(ip, sizeof(*ip), data_end) || ip->ihl < 5 ||
	    ip->protocol != IPPROTO_TCP || ipv4_is_fragment(ip))
		return XDP_PASS;
	tcp = (void *)ip + ip->ihl * 4;
	if (!PKT_HAS(tcp, sizeof(*tcp), data_end))
		return XDP_PASS;

	class = classify(tcp);
	count = bpf_map_lookup_elem(&tcp_classes, &class);
	if (count)
		*count += 1;

	port = bpf_ntohs(tcp->dest);
	count = bpf_map_lookup_elem(&tcp_ports, &port);
	if (count) {
		__sync_fetch_and_add(count, 1);
	} else if (bpf_map_update_elem(&tcp_ports, &port, &one, BPF_NOEXIST)) {
		/* Another CPU inserted the port first, or the map is full. */
		count = bpf_map_lookup_elem(&tcp_ports, &port);
		if (count)
			__sync_fetch_and_add(count, 1);
	}
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
