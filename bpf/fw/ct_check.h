/* The checks Linux's conntrack makes of a packet's own fields before it
 * looks for a connection (its trackers' error and tuple functions: UDP's
 * length, UDP-Lite's coverage, SCTP's chunks, GRE's version, ICMP in its
 * own family): a packet that fails one is invalid there, and here. Also
 * the keys of the protocols conntrack tracks by more than addresses and
 * ports, and what an ICMP error may quote. Included by ct_track.h; what
 * is not checked, and why, is in docs/design/fw-conntrack.md ("Where it
 * differs from the kernel's conntrack"). */
#ifndef FASTPATH_FW_CT_CHECK_H
#define FASTPATH_FW_CT_CHECK_H

#ifndef IPPROTO_NONE
#define IPPROTO_NONE 59
#endif

/* ct_check's answers besides FW_CT_INVALID: the packet may open a
 * connection, or only belong to one (SCTP chunks that only an
 * association carries: conntrack opens none for them). */
#define CT_CHECK_OK 0
#define CT_CHECK_NO_NEW 0x80

/* Whether a protocol's connections are keyed by their ports (the first
 * four bytes of its header), as Linux's trackers for it key them. DCCP's
 * tracker is gone from the kernel: DCCP is keyed by addresses alone, as
 * any protocol without a tracker. */
static __always_inline int ct_has_ports(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE || proto == IPPROTO_SCTP;
}

/* A GRE header of len bytes at off: PPTP's (version 1) call ID, the key
 * conntrack gives its connections; 0 for plain GRE, which is keyed by
 * addresses alone; -1 for version 1 carrying anything but PPP, which
 * conntrack cannot key (gre_pkt_to_tuple). */
static __always_inline int ct_gre_call(FW_CTX *ctx, __u32 off, __u32 len)
{
	__u8 h[8];

	if (len < 8 || fw_load_bytes(ctx, off, h, sizeof(h)) || (h[1] & 7) != 1)
		return 0;
	if (h[2] != 0x88 || h[3] != 0x0b) /* PPP */
		return -1;
	return (int)h[6] << 8 | h[7];
}

/* The key of a packet without a tracker of its own, or of SCTP or GRE:
 * SCTP by its ports; PPTP's GRE by the call ID, as the destination's key
 * (the source's is known only to the kernel's PPTP helper: 0), so that
 * the two directions of a call are two connections, as in the kernel
 * without that helper; the rest by addresses. */
static __always_inline void ct_key_generic(FW_CTX *ctx, const struct fw_flow_key *k, const struct fw_pkt *p,
					   struct ct_result *r)
{
	int call = 0;

	if (ct_has_ports(k->proto)) {
		ct_key_ordered(r, k, k->sport, k->dport);
		return;
	}
	if (k->proto == IPPROTO_GRE)
		call = ct_gre_call(ctx, p->l4, p->l4_len);
	ct_key_ordered(r, k, 0, call > 0 ? call : 0);
}

/* UDP: a length between the header's and the IP payload's (udp_error);
 * UDP-Lite: a checksum, and its coverage 0 (all) or as UDP's length
 * (udplite_error). The checksums themselves are not verified. */
static __always_inline int ct_check_udp(FW_CTX *ctx, const struct fw_pkt *p, __u8 proto)
{
	__u8 h[8];
	__u32 len;

	if (p->l4_len < 8 || fw_load_bytes(ctx, p->l4, h, sizeof(h)))
		return FW_CT_INVALID;
	len = (__u32)h[4] << 8 | h[5];
	if (proto == IPPROTO_UDPLITE) {
		if (!h[6] && !h[7])
			return FW_CT_INVALID;
		if (!len)
			return CT_CHECK_OK;
	}
	if (p->frag)
		return CT_CHECK_OK; /* the length is the whole datagram's */
	return len < 8 || len > p->l4_len ? FW_CT_INVALID : CT_CHECK_OK;
}

/* SCTP chunk types (RFC 9260, 3.2), as bits of ct_sctp_walk.seen. */
enum {
	CT_SCTP_INIT = 1,
	CT_SCTP_INIT_ACK = 2,
	CT_SCTP_HEARTBEAT = 4,
	CT_SCTP_HEARTBEAT_ACK = 5,
	CT_SCTP_ABORT = 6,
	CT_SCTP_SHUTDOWN = 7,
	CT_SCTP_SHUTDOWN_ACK = 8,
	CT_SCTP_ERROR = 9,
	CT_SCTP_COOKIE_ECHO = 10,
	CT_SCTP_COOKIE_ACK = 11,
	CT_SCTP_SHUTDOWN_COMPLETE = 14,
};
#define CT_SCTP_BIT(t) (1U << (t))
/* The chunks a packet that opens an association may hold (sctp_new: no
 * DATA, SACK or other; no ABORT, SHUTDOWN COMPLETE or COOKIE ACK out of
 * the blue). */
#define CT_SCTP_OPENERS                                                                                        \
	(CT_SCTP_BIT(CT_SCTP_INIT) | CT_SCTP_BIT(CT_SCTP_INIT_ACK) | CT_SCTP_BIT(CT_SCTP_HEARTBEAT) |          \
	 CT_SCTP_BIT(CT_SCTP_HEARTBEAT_ACK) | CT_SCTP_BIT(CT_SCTP_SHUTDOWN) | CT_SCTP_BIT(CT_SCTP_SHUTDOWN_ACK) | \
	 CT_SCTP_BIT(CT_SCTP_ERROR) | CT_SCTP_BIT(CT_SCTP_COOKIE_ECHO))
/* The chunks whose packet's verification tag the association's does not
 * check (RFC 9260, 8.5.1). */
#define CT_SCTP_OWN_TAG                                                                                         \
	(CT_SCTP_BIT(CT_SCTP_INIT) | CT_SCTP_BIT(CT_SCTP_SHUTDOWN_COMPLETE) | CT_SCTP_BIT(CT_SCTP_COOKIE_ECHO) | \
	 CT_SCTP_BIT(CT_SCTP_ABORT) | CT_SCTP_BIT(CT_SCTP_SHUTDOWN_ACK) | CT_SCTP_BIT(CT_SCTP_HEARTBEAT) |      \
	 CT_SCTP_BIT(CT_SCTP_HEARTBEAT_ACK))
/* Chunks read per packet; those after are not checked. */
#define CT_SCTP_CHUNKS 32

/* The chunks being read (bpf_loop's context). */
struct ct_sctp_walk {
	FW_CTX *ctx;
	/* The next chunk's offset, and the IP payload's end. */
	__u32 off;
	__u32 end;
	__u32 count;
	/* A bit per chunk type below 31; bit 31 for the others. */
	__u32 seen;
	__u8 bad;
	/* An INIT, INIT ACK or SHUTDOWN COMPLETE: no chunk may follow. */
	__u8 alone;
};

/* One chunk (do_basic_checks): a bpf_loop callback, so that the verifier
 * checks its body once. */
static long ct_sctp_chunk(__u64 i, void *data)
{
	struct ct_sctp_walk *w = data;
	__u32 type, len;
	__u8 ch[4];

	if (w->off + 4 > w->end || fw_load_bytes(w->ctx, w->off, ch, sizeof(ch)))
		return 1;
	type = ch[0];
	len = (__u32)ch[2] << 8 | ch[3];
	if (type == CT_SCTP_INIT || type == CT_SCTP_INIT_ACK || type == CT_SCTP_SHUTDOWN_COMPLETE)
		w->alone = 1;
	/* COOKIE ECHO and ACK only first, INIT, INIT ACK and SHUTDOWN
	 * COMPLETE only alone, no chunk empty; an INIT's fixed part there. */
	if (((type == CT_SCTP_COOKIE_ACK || type == CT_SCTP_COOKIE_ECHO || w->alone) && w->count) || !len ||
	    ((type == CT_SCTP_INIT || type == CT_SCTP_INIT_ACK) && w->off + 20 > w->end)) {
		w->bad = 1;
		return 1;
	}
	w->seen |= type < 31 ? CT_SCTP_BIT(type) : CT_SCTP_BIT(31);
	w->off += (len + 3) & ~3U;
	w->count++;
	return 0;
}

/* SCTP: a common header and chunks that pass do_basic_checks, an INIT's
 * verification tag 0; CT_CHECK_NO_NEW for chunks that open no
 * association (sctp_new and the tag checks on a new one). The CRC32c and
 * an association's own tags and states are not checked. */
static __always_inline int ct_check_sctp(FW_CTX *ctx, const struct fw_pkt *p)
{
	struct ct_sctp_walk w = {.ctx = ctx, .off = p->l4 + 12, .end = p->l4 + p->l4_len};
	__u32 vtag;

	if (p->l4_len < 12 || fw_load_bytes(ctx, p->l4 + 4, &vtag, sizeof(vtag)))
		return FW_CT_INVALID;
	if (p->frag)
		return CT_CHECK_OK; /* the chunks go on in other fragments */
	bpf_loop(CT_SCTP_CHUNKS, ct_sctp_chunk, &w, 0);
	if (w.bad || !w.count)
		return FW_CT_INVALID;
	if ((w.seen & CT_SCTP_BIT(CT_SCTP_INIT)) && vtag)
		return FW_CT_INVALID;
	if (w.seen & ~CT_SCTP_OPENERS)
		return CT_CHECK_NO_NEW;
	/* A new association has no tag yet but 0: a COOKIE ECHO must carry
	 * it, and so must a packet of chunks that do not carry their own. */
	if (vtag && ((w.seen & CT_SCTP_BIT(CT_SCTP_COOKIE_ECHO)) || !(w.seen & CT_SCTP_OWN_TAG)))
		return CT_CHECK_NO_NEW;
	return CT_CHECK_OK;
}

/* Whether a packet passes the checks Linux's tracker for its protocol
 * makes before any lookup: CT_CHECK_OK, CT_CHECK_NO_NEW or FW_CT_INVALID.
 * Lengths are the IP header's: what lies past them in the frame (an
 * Ethernet pad) is no part of the packet. */
static __noinline int ct_check(FW_CTX *ctx, const struct fw_flow_key *k, const struct fw_pkt *p)
{
	/* nf_ct_get_tuple: the ports must be in the packet. */
	if (ct_has_ports(k->proto) && p->l4_len < 4)
		return FW_CT_INVALID;
	switch (k->proto) {
	case IPPROTO_UDP:
	case IPPROTO_UDPLITE:
		return ct_check_udp(ctx, p, k->proto);
	case IPPROTO_SCTP:
		return ct_check_sctp(ctx, p);
	case IPPROTO_GRE:
		return ct_gre_call(ctx, p->l4, p->l4_len) < 0 ? FW_CT_INVALID : CT_CHECK_OK;
	case IPPROTO_ICMP:
		/* ICMP's tracker takes IPv4 only, ICMPv6's IPv6 only. */
		return k->family == FW_FAMILY_IPV4 ? CT_CHECK_OK : FW_CT_INVALID;
	case IPPROTO_ICMPV6:
		return k->family == FW_FAMILY_IPV6 ? CT_CHECK_OK : FW_CT_INVALID;
	case IPPROTO_NONE:
		/* IPv6's "no next header": conntrack finds no protocol. */
		return k->family == FW_FAMILY_IPV6 ? FW_CT_INVALID : CT_CHECK_OK;
	}
	return CT_CHECK_OK;
}

/* An ICMPv6 error's quoted packet: its extension headers skipped as
 * ipv6_skip_exthdr does, from off (after the fixed header) to end (the
 * error's end). Returns the L4 header's offset with its protocol in
 * *proto, or 0 for what conntrack finds no connection in: a later
 * fragment, "no next header", or more headers than we follow. */
static __always_inline __u32 ct_quote6_l4(FW_CTX *ctx, __u32 off, __u32 end, __u8 *proto)
{
	__u8 h[4];

#pragma unroll
	for (int i = 0; i < FW_MAX_EXT_HDRS; i++) {
		__u8 next = *proto;

		if (next == IPPROTO_NONE)
			return 0;
		if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING && next != IPPROTO_DSTOPTS &&
		    next != IPPROTO_FRAGMENT && next != IPPROTO_AH)
			return off;
		if (off + sizeof(h) > end || fw_load_bytes(ctx, off, h, sizeof(h)))
			return 0;
		*proto = h[0];
		if (next == IPPROTO_FRAGMENT) {
			if ((h[2] << 8 | h[3]) & ~7)
				return 0;
			off += 8;
		} else if (next == IPPROTO_AH) {
			off += (h[1] + 2) * 4;
		} else {
			off += (h[1] + 1) * 8;
		}
	}
	/* More headers than we follow. */
	if (*proto == IPPROTO_NONE || *proto == IPPROTO_HOPOPTS || *proto == IPPROTO_ROUTING ||
	    *proto == IPPROTO_DSTOPTS || *proto == IPPROTO_FRAGMENT || *proto == IPPROTO_AH)
		return 0;
	return off;
}

#endif
