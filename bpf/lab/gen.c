/* Live-frames traffic generator.
 *
 * Run with BPF_PROG_TEST_RUN and BPF_F_TEST_XDP_LIVE_FRAMES on the sending
 * veth: every run writes the next packet of the capture into the frame and
 * sends it with XDP_TX. The kernel recycles live-frame pages without copying
 * the input again, and a device under test may have rewritten the frame in
 * place, so the whole packet is written on every run, not only what differs.
 *
 * Each run also notes the time of the packets the control plane asked about
 * (the first and the last of a test run), so that a rate is timed from the
 * first packet to the last and not over the test run's set-up. */
#include "common.h"
#include "lab_shared.h"

/* The capture, one packet per slot; max_entries is set to its length at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_packet);
} gen_packets SEC(".maps");

/* Number of packets in gen_packets; set before load. */
volatile const __u32 gen_count = 1;

/* How many data bytes each gen_packets value holds: the longest packet,
 * rounded up to 8. The control plane shrinks the map's values to that at
 * load, so that a thousand packets stay in the cache (whole 1.5 KB values
 * cost a cache miss a run, as much as writing the packet). */
volatile const __u32 gen_max_len = GEN_MAX_FRAME;

/* Restore mode (gen_window == 0): each slot holds a whole packet, written over
 * the whole frame. Window mode: every packet has the same length, the frame
 * starts as the first packet (the test-run input), and each slot holds only
 * the bytes from gen_window_offset on where packets differ. Window mode is
 * only right when nothing on the path rewrites frames in place. */
volatile const __u32 gen_window = 0;
volatile const __u32 gen_window_offset = 0;

/* Flood mode (gen_flows > 0): run n sends flow n % gen_flows, whose source
 * address bits and ports come from a bijection of the flow number, so that
 * gen_flows flows are all distinct and look random. gen_flow_bits is how
 * many bits vary: the source prefix's host bits (at most 32) plus 32 bits of
 * ports. */
volatile const __u32 gen_flows = 0;
volatile const __u32 gen_flow_bits = 32;

/* Flood mode with a fixed destination port (a SYN flood at one service):
 * only the source port varies, so the bijection runs over the host bits
 * plus 16 bits of port, and the template's destination port stays. */
volatile const __u32 gen_flow_keep_dport = 0;

/* Index of the next packet, and runs so far. Not atomic: one generator runs
 * on one CPU. gen_runs is the authority on what was sent, since the test run
 * may be interrupted and restarted by a signal. */
__u32 gen_next = 0;
__u64 gen_runs = 0;

/* The control plane sets gen_first/gen_last to the run numbers of a test
 * run's first and last packet; the program notes when it sends them. */
__u64 gen_first = 0;
__u64 gen_last = 0;
__u64 gen_first_ns = 0;
__u64 gen_last_ns = 0;

/* The run number from which nothing is sent (0: no end), set with
 * gen_first and gen_last: a test run a signal interrupts is run again whole
 * (cilium/ebpf retries on EINTR), and the frames it already sent must not
 * go out twice — under load a bench sent a batch more than it was asked
 * for. */
__u64 gen_end = 0;

static __always_inline int past_last(__u64 run)
{
	return gen_end && run >= gen_end;
}

static __always_inline void note_time(__u64 run)
{
	if (run == gen_first)
		gen_first_ns = bpf_ktime_get_ns();
	if (run == gen_last)
		gen_last_ns = bpf_ktime_get_ns();
}

/* A bijection on the low bits of x (multiplications by odd constants and
 * xor-shifts are each invertible modulo 2^bits). */
static __always_inline __u64 mix_bits(__u64 x, __u32 bits)
{
	__u64 mask = bits >= 64 ? ~0ULL : (1ULL << bits) - 1;

	x = (x * 0x9e3779b97f4a7c15ULL) & mask;
	x ^= x >> (bits / 2 + 1);
	x = (x * 0xbf58476d1ce4e5b9ULL) & mask;
	x ^= x >> (bits / 3 + 1);
	x = (x * 0x94d049bb133111ebULL) & mask;
	return x;
}

static __always_inline __u16 fold(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* new = ~(~old + ~old_words + new_words) in ones' complement (RFC 1624). */
static __always_inline __u16 csum_replace(__u16 old, __u64 sub, __u64 add)
{
	__u64 s = (__u16)~old;

	s += (__u16)~fold(sub);
	s += add;
	return ~fold(s);
}

/* Copies len bytes of src to the frame from off on, with plain loads and
 * stores in unrolled 64-byte pieces and one bounds check per piece:
 * bpf_xdp_store_bytes, or a check per word, costs as much again as the
 * rest of a run (measured: 30-50 ns a packet more at 138 bytes). */
static __always_inline int write_frame(struct xdp_md *ctx, __u32 off, const __u8 *src, __u32 len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 i = 0;

	if (off > GEN_MAX_FRAME || len > GEN_MAX_FRAME)
		return -1;
	for (int c = 0; c < GEN_MAX_FRAME / 64; c++) {
		__u8 *d = data + off + i;

		if (i + 64 > len)
			break;
		if ((void *)(d + 64) > data_end)
			return -1;
#pragma unroll
		for (int w = 0; w < 8; w++)
			((__u64 *)d)[w] = ((const __u64 *)(src + i))[w];
		i += 64;
	}
	for (int w = 0; w < 8; w++) {
		__u8 *d = data + off + (i & 0x7ff);

		if (i + 8 > len)
			break;
		if ((void *)(d + 8) > data_end)
			return -1;
		*(__u64 *)d = *(const __u64 *)(src + (i & 0x7ff));
		i += 8;
	}
	for (int b = 0; b < 8; b++) {
		__u8 *d = data + off + (i & 0x7ff);

		if (i >= len)
			break;
		if ((void *)(d + 1) > data_end)
			return -1;
		*d = src[i & 0x7ff];
		i++;
	}
	return 0;
}

/* Writes flow n's source address bits and ports into the frame (the
 * template's fields), with the IPv4 header and L4 checksums updated. */
static __always_inline int vary_flow(struct xdp_md *ctx, const struct gen_packet *pkt, __u64 run)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 port_bits = gen_flow_keep_dport ? 16 : 32;
	__u32 host_bits = gen_flow_bits - port_bits;
	__u64 v = mix_bits(run % gen_flows, gen_flow_bits);
	__u32 ports = (__u32)v; /* sport << 16 | dport, host order */
	__u32 host = (__u32)(v >> port_bits);
	__u32 l3 = pkt->l3_off, l4 = pkt->l4_off, csum = pkt->csum_off;
	__u32 addr_off = pkt->family == 4 ? l3 + 12 : l3 + 8 + 12; /* IPv6: the low 32 bits */
	__be32 *a;
	__be16 *p, *c;
	__u32 old_a, new_a, old_p, new_p;
	__u64 sub, add;

	if (addr_off > GEN_MAX_FRAME - 4 || l4 > GEN_MAX_FRAME - 4 || csum > GEN_MAX_FRAME - 2)
		return -1;
	a = data + addr_off;
	p = data + l4;
	c = data + csum;
	if ((void *)(a + 1) > data_end || (void *)(p + 2) > data_end || (void *)(c + 1) > data_end)
		return -1;

	old_a = bpf_ntohl(*a);
	new_a = host_bits ? (old_a & ~pkt->host_mask) | (host & pkt->host_mask) : old_a;
	old_p = bpf_ntohl(*(__be32 *)p);
	new_p = gen_flow_keep_dport ? (ports & 0xffff) << 16 | (old_p & 0xffff) : ports;
	*a = bpf_htonl(new_a);
	*(__be32 *)p = bpf_htonl(new_p);

	sub = (old_a >> 16) + (old_a & 0xffff) + (old_p >> 16) + (old_p & 0xffff);
	add = (new_a >> 16) + (new_a & 0xffff) + (new_p >> 16) + (new_p & 0xffff);
	/* A zero UDP checksum over IPv4 means "none" and stays so. */
	if (*c || pkt->proto != 17 || pkt->family != 4) {
		__u16 n = csum_replace(bpf_ntohs(*c), sub, add);

		if (n == 0 && pkt->proto == 17)
			n = 0xffff;
		*c = bpf_htons(n);
	}
	if (pkt->family == 4) {
		__be16 *ipc;

		if (l3 > 64)
			return -1;
		ipc = data + l3 + 10;
		if ((void *)(ipc + 1) > data_end)
			return -1;
		sub = (old_a >> 16) + (old_a & 0xffff);
		add = (new_a >> 16) + (new_a & 0xffff);
		*ipc = bpf_htons(csum_replace(bpf_ntohs(*ipc), sub, add));
	}
	return 0;
}

SEC("xdp")
int lab_gen(struct xdp_md *ctx)
{
	__u32 idx = gen_next;
	struct gen_packet *pkt;
	__u64 run = gen_runs;
	__u32 len, cur;

	if (past_last(run))
		return XDP_DROP;
	gen_next = idx + 1 < gen_count ? idx + 1 : 0;
	gen_runs = run + 1;
	note_time(run);

	pkt = bpf_map_lookup_elem(&gen_packets, &idx);
	if (!pkt)
		return XDP_ABORTED;

	len = pkt->len;
	if (len < 1 || len > gen_max_len || len > GEN_MAX_FRAME)
		return XDP_ABORTED;
	if (gen_window) {
		if (write_frame(ctx, gen_window_offset, pkt->data, len))
			return XDP_ABORTED;
	} else {
		/* The frame starts each run with the length of the test-run input,
		 * which the control plane sizes to the longest packet: shorter ones
		 * shrink. */
		cur = ctx->data_end - ctx->data;
		if (len != cur && bpf_xdp_adjust_tail(ctx, (int)len - (int)cur))
			return XDP_ABORTED;
		if (write_frame(ctx, 0, pkt->data, len))
			return XDP_ABORTED;
	}
	if (gen_flows && vary_flow(ctx, pkt, run))
		return XDP_ABORTED;
	return XDP_TX;
}

/* The generator's ceiling: the test-run input sent as it is, nothing
 * written. The lab reports it beside the rows, so that what the generator
 * itself costs per packet is visible. */
SEC("xdp")
int lab_gen_fixed(struct xdp_md *ctx)
{
	__u64 run = gen_runs;

	if (past_last(run))
		return XDP_DROP;
	gen_runs = run + 1;
	note_time(run);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
