/* The monitor's event ring (`fastpath monitor`): frames a function drops or
 * passes up, copied only while a monitor listens.
 *
 * A function includes this after defining MON_PREFIX (fw, tra): the maps are
 * <prefix>_mon_ctl, <prefix>_mon_ring and <prefix>_mon_buf, pinned with the
 * function's others. On a drop or pass path it calls mon_listening(): one
 * inlined array lookup, one load of `until` and a branch, nothing else while
 * nobody listens; only then the out-of-line mon_emit_xdp copies the frame.
 * The monitor moves `until` on every second; a monitor that dies leaves an
 * expired lease, which the first frame of a verdict it asked for clears (so
 * the cost is back to one load and a branch). */
#ifndef FASTPATH_MONITOR_H
#define FASTPATH_MONITOR_H

#include "common.h"

#ifndef MON_PREFIX
#error "define MON_PREFIX (the function's map prefix) before including monitor.h"
#endif

/* The most bytes of a frame an event carries (--snaplen is at most this). */
#ifndef MON_SNAP_MAX
#define MON_SNAP_MAX 2048
#endif

/* What the monitor wants (mon_ctl.flags). */
enum mon_flags {
	MON_F_DROPS = 1 << 0,  /* frames dropped (XDP_DROP, XDP_ABORTED, TC_ACT_SHOT) */
	MON_F_PASSES = 1 << 1, /* frames passed up to the kernel's stack */
};

/* The single entry of <prefix>_mon_ctl, written by the monitor. */
struct mon_ctl {
	/* Copy frames until this CLOCK_MONOTONIC time, in ns; 0: nobody
	 * listens. The monitor renews it every second for a few seconds. */
	__u64 until;
	__u32 flags;   /* enum mon_flags */
	__u32 snaplen; /* bytes of each frame to copy, at most MON_SNAP_MAX */
};

/* One event in the ring: this header, then cap bytes of the frame. */
struct mon_event {
	__u64 ts_ns;    /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	__u32 ifindex;  /* the device the frame came in by */
	__u32 len;      /* the frame's whole length */
	__u32 cap;      /* bytes of it that follow */
	__u32 reason;   /* the function's counter (its enum), as its stats name it */
	__u32 action;   /* XDP action (or TC action + 16 for a TC program) */
	__u32 aux;      /* the function's: fw's rule index, tra's direction */
};

/* Per CPU: the event being made, and the events the ring had no room for. */
struct mon_buf {
	__u64 lost;
	struct mon_event ev;
	__u8 data[MON_SNAP_MAX];
};

#define MON_CAT2(a, b) a##b
#define MON_CAT(a, b) MON_CAT2(a, b)
#define MON_CTL MON_CAT(MON_PREFIX, _mon_ctl)
#define MON_RING MON_CAT(MON_PREFIX, _mon_ring)
#define MON_BUF MON_CAT(MON_PREFIX, _mon_buf)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mon_ctl);
} MON_CTL SEC(".maps");

/* 1 MiB: some 600 events of full 1,500-byte frames, 4,000 of 200 bytes,
 * between two reads of the monitor. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} MON_RING SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mon_buf);
} MON_BUF SEC(".maps");

/* Whether a monitor may listen: the one check on the packet path. */
static __always_inline int mon_listening(void)
{
	__u32 zero = 0;
	struct mon_ctl *c = bpf_map_lookup_elem(&MON_CTL, &zero);

	return c && c->until;
}

/* Whether the lease is current and wants this action (and the time, in
 * *nowp); clears an expired one. */
static __always_inline int mon_wants(struct mon_ctl *c, __u32 want, __u64 *nowp)
{
	__u64 until = c->until, now;

	/* The verdict first: a monitor of drops costs a pass no clock read. */
	if (!until || !(c->flags & want))
		return 0;
	now = bpf_ktime_get_ns();
	if (now >= until) {
		/* The monitor is gone: back to one load and a branch. A plain
		 * store (a compare-and-swap needs -mcpu=v3, which tra is not
		 * built with): a monitor that wrote its first lease in the same
		 * instant loses it until its renewal, a second later. */
		c->until = 0;
		return 0;
	}
	*nowp = now;
	return 1;
}

/* The event into the ring: the header and cap bytes (already in b->data). */
static __always_inline void mon_send(struct mon_buf *b, __u64 cap)
{
	barrier_var(cap);
	if (cap > MON_SNAP_MAX)
		return;
	if (bpf_ringbuf_output(&MON_RING, &b->ev, sizeof(b->ev) + cap, 0))
		b->lost++;
}

/* How many bytes of a frame of len bytes to copy. */
static __always_inline __u64 mon_cap(const struct mon_ctl *c, __u64 len)
{
	__u64 n = len;

	if (n > c->snaplen)
		n = c->snaplen;
	barrier_var(n);
	if (n > MON_SNAP_MAX)
		n = MON_SNAP_MAX;
	return n;
}

/* A frame an XDP program drops (action XDP_DROP or XDP_ABORTED) or passes
 * (XDP_PASS), with the function's reason. Out of line: only a monitor's
 * frames get here. */
static __noinline int mon_emit_xdp(struct xdp_md *ctx, __u32 reason, __u32 action, __u32 aux)
{
	__u32 zero = 0;
	struct mon_ctl *c = bpf_map_lookup_elem(&MON_CTL, &zero);
	struct mon_buf *b;
	__u64 now, len, n;

	if (!c || !ctx)
		return 0;
	if (!mon_wants(c, action == XDP_PASS ? MON_F_PASSES : MON_F_DROPS, &now))
		return 0;
	b = bpf_map_lookup_elem(&MON_BUF, &zero);
	if (!b)
		return 0;
	len = bpf_xdp_get_buff_len(ctx);
	n = mon_cap(c, len);
	b->ev.ts_ns = now;
	b->ev.ifindex = ctx->ingress_ifindex;
	b->ev.len = len;
	b->ev.reason = reason;
	b->ev.action = action;
	b->ev.aux = aux;
	/* bpf_xdp_load_bytes reads across every buffer of a multi-buffer frame. */
	if (n > 0 && bpf_xdp_load_bytes(ctx, 0, b->data, n))
		n = 0;
	b->ev.cap = n;
	mon_send(b, n);
	return 0;
}

#endif
