/* Live-frames traffic generator.
 *
 * Run with BPF_PROG_TEST_RUN and BPF_F_TEST_XDP_LIVE_FRAMES on the sending
 * veth: every run writes the next packet of the capture into the frame and
 * sends it with XDP_TX. The kernel recycles live-frame pages without copying
 * the input again, and a device under test may have rewritten the frame in
 * place, so the whole packet is written on every run, not only what differs. */
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

/* Restore mode (gen_window == 0): each slot holds a whole packet, written over
 * the whole frame. Window mode: every packet has the same length, the frame
 * starts as the first packet (the test-run input), and each slot holds only
 * the bytes from gen_window_offset on where packets differ. Window mode is
 * only right when nothing on the path rewrites frames in place. */
volatile const __u32 gen_window = 0;
volatile const __u32 gen_window_offset = 0;

/* Index of the next packet, and runs so far. Not atomic: one generator runs
 * on one CPU. gen_runs is the authority on what was sent, since the test run
 * may be interrupted and restarted by a signal. */
__u32 gen_next = 0;
__u64 gen_runs = 0;

SEC("xdp")
int lab_gen(struct xdp_md *ctx)
{
	__u32 idx = gen_next;
	struct gen_packet *pkt;
	__u32 len, cur;

	gen_next = idx + 1 < gen_count ? idx + 1 : 0;
	gen_runs++;

	pkt = bpf_map_lookup_elem(&gen_packets, &idx);
	if (!pkt)
		return XDP_ABORTED;

	len = pkt->len;
	if (len < 1 || len > GEN_MAX_FRAME)
		return XDP_ABORTED;
	if (gen_window) {
		if (bpf_xdp_store_bytes(ctx, gen_window_offset, pkt->data, len))
			return XDP_ABORTED;
		return XDP_TX;
	}

	/* The frame starts each run with the length of the test-run input, which
	 * the control plane sizes to the longest packet: shorter ones shrink. */
	cur = ctx->data_end - ctx->data;
	if (len != cur && bpf_xdp_adjust_tail(ctx, (int)len - (int)cur))
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, pkt->data, len))
		return XDP_ABORTED;

	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
