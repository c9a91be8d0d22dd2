/* Measures a ring buffer on the packet path: one record per frame to userspace. */
#include "common.h"
#include "parse.h"

#ifndef OBS_RING_BYTES
#define OBS_RING_BYTES (256 * 1024)
#endif

/* What userspace learns of a frame. Fields are laid out with no padding, as
 * ring buffer memory comes uninitialised. Fields of a layer the frame does
 * not have are zero. */
struct obs_record {
	__u32 len;       /* frame length */
	__u16 eth_proto; /* host byte order */
	__u8 ip_proto;
	__u8 pad;
	__u8 saddr[4]; /* IPv4, as on the wire */
	__u8 daddr[4];
	__u16 sport; /* TCP/UDP, host byte order */
	__u16 dport;
};

/* Unused by the program: it puts struct obs_record into BTF, where bpf2go
 * finds it for the Go side; a ring buffer map has no value type to carry it. */
volatile const struct obs_record obs_record_anchor = {};

/* Records for userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, OBS_RING_BYTES);
} obs_ring SEC(".maps");

/* Slot 0: frames whose record did not fit in the ring. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} obs_lost SEC(".maps");

SEC("xdp")
int xdp_observer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct obs_record *rec;
	struct udphdr *l4;
	struct iphdr *ip;
	__u32 zero = 0;
	__u64 *lost;

	rec = bpf_ringbuf_reserve(&obs_ring, sizeof(*rec), 0);
	if (!rec) {
		lost = bpf_map_lookup_elem(&obs_lost, &zero);
		if (lost)
			__sync_fetch_and_add(lost, 1);
		return XDP_PASS;
	}
	__builtin_memset(rec, 0, sizeof(*rec));
	rec->len = data_end - data;

	if (!PKT_HAS(eth, sizeof(*eth), data_end))
		goto submit;
	rec->eth_proto = bpf_ntohs(eth->h_proto);
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		goto submit;
	ip = (void *)(eth + 1);
	if (!PKT_HAS(ip, sizeof(*ip), data_end) || ip->ihl < 5)
		goto submit;
	rec->ip_proto = ip->protocol;
	__builtin_memcpy(rec->saddr, &ip->saddr, 4);
	__builtin_memcpy(rec->daddr, &ip->daddr, 4);
	if ((ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP) ||
	    (ip->frag_off & bpf_htons(0x1fff)))
		goto submit;
	/* TCP and UDP both begin with the source and destination ports. */
	l4 = (void *)ip + ip->ihl * 4;
	if (!PKT_HAS(l4, 4, data_end))
		goto submit;
	rec->sport = bpf_ntohs(l4->source);
	rec->dport = bpf_ntohs(l4->dest);
submit:
	bpf_ringbuf_submit(rec, 0);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
