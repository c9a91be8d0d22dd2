/* The synproxy action: SYN cookies answered in XDP, and a full proxy for
 * the connections whose cookie ACK checks out.
 *
 * A plain listener rejects a cookie ACK for a SYN it never saw (Linux's
 * cookie_tcp_check gives up unless its own queue overflowed lately), so
 * the firewall opens the server's side itself, as nf_synproxy does:
 *
 *   client SYN          -> SYN/ACK back (XDP_TX), seq = cookie; no state
 *   client ACK, no entry -> cookie checked; bad: drop. Good: an entry
 *                          (FW_TCP_PROXY_SYN) and the ACK rewritten into
 *                          the SYN the client sent (its ISN, the MSS the
 *                          cookie holds), passed on to the kernel
 *   server SYN/ACK      -> the ACK the client would send, back to the
 *                          server (XDP_TX); proxy_delta = cookie - server
 *                          ISN; the entry is ESTABLISHED
 *   later packets       -> client to server: ack -= delta; server to
 *                          client: seq += delta
 *
 * The SYN/ACK offers the MSS alone: no timestamps, SACK or window scale,
 * so that neither end sends them (the SYN to the server offers none
 * either) and no option but seq and ack needs a rewrite. The MSS is the
 * client's, rounded down to the cookie's table (the value the server is
 * told), and no more than the configured one. The entry counts both
 * directions in the server's sequence space: the client's acknowledgements
 * are taken down by the delta before its window checks (as Linux's seqadj
 * offsets them), so that its windows are tracked as any connection's.
 *
 * Frames are read into a buffer on the stack and written back whole:
 * the cookie helpers take the headers from there, and the checksums are
 * computed there. IPv4 options and IPv6 extension headers are not
 * proxied: a packet with them that reaches the handshake is dropped.
 *
 * The server's SYN/ACK must reach this program: the firewall on a router
 * (XDP on both interfaces). On the protected host itself the server's
 * packets leave by the egress path, which XDP does not see. */
#ifndef FASTPATH_FW_SYNPROXY_H
#define FASTPATH_FW_SYNPROXY_H

#include "csum.h"

/* The window of the SYN/ACK: the client may send before the server's
 * side is open; what arrives then is turned into the SYN again (in case
 * that was lost) and the client resends it. nf_synproxy offers 0 and
 * sends the client a window update once the server answers, a second
 * packet XDP cannot send. */
#define SP_WINDOW 65535

/* The cookie's MSS tables (net/ipv4/syncookies.c, net/ipv6/syncookies.c). */
static const __u16 sp_msstab4[4] = {536, 1300, 1440, 1460};
static const __u16 sp_msstab6[4] = {1280 - 60, 1480 - 60, 1500 - 60, 9000 - 60};

/* A frame's headers, as the proxy reads and writes them. */
struct sp_hdrs {
	__u8 mac[12];
	union {
		struct iphdr ip4;
		struct ipv6hdr ip6;
	};
	struct tcphdr th;
	__u8 opt[40];
};

#define SP_FLAGS(h) (((__u8 *)&(h)->th)[13])
#define SP_DOFF_FLAGS(h) (((__u16 *)&(h)->th)[6])

/* The TCP checksum of a header of tcp_len bytes without payload. */
static __always_inline __u16 sp_tcp_csum(const struct sp_hdrs *h, int v6, __u32 tcp_len)
{
	const __u32 *w = (const __u32 *)&h->th;
	__u64 sum = 0;

	if (v6) {
		const __u32 *a = (const __u32 *)&h->ip6.saddr;

#pragma unroll
		for (int i = 0; i < 8; i++)
			sum += a[i];
		sum += bpf_htonl(tcp_len) + bpf_htonl(IPPROTO_TCP);
	} else {
		sum += (__u64)h->ip4.saddr + h->ip4.daddr;
		sum += bpf_htons(IPPROTO_TCP) + bpf_htons(tcp_len);
	}
#pragma unroll
	for (int i = 0; i < 6; i++)
		if (i * 4 < tcp_len)
			sum += w[i];
	return ~csum_fold32(sum);
}

static __always_inline void sp_swap_ends(struct sp_hdrs *h, int v6)
{
	__u8 mac[6];
	__u16 port;

	__builtin_memcpy(mac, h->mac, 6);
	__builtin_memcpy(h->mac, h->mac + 6, 6);
	__builtin_memcpy(h->mac + 6, mac, 6);
	if (v6) {
		struct in6_addr a = h->ip6.saddr;

		h->ip6.saddr = h->ip6.daddr;
		h->ip6.daddr = a;
	} else {
		__u32 a = h->ip4.saddr;

		h->ip4.saddr = h->ip4.daddr;
		h->ip4.daddr = a;
	}
	port = h->th.source;
	h->th.source = h->th.dest;
	h->th.dest = port;
}

/* The IP header of a segment of tcp_len bytes; ttl 0 keeps the packet's. */
static __always_inline void sp_ip(struct sp_hdrs *h, int v6, __u32 tcp_len, __u8 ttl)
{
	if (v6) {
		h->ip6.payload_len = bpf_htons(tcp_len);
		if (ttl)
			h->ip6.hop_limit = ttl;
		return;
	}
	h->ip4.tot_len = bpf_htons(20 + tcp_len);
	if (ttl) {
		/* Our own packet: DF, as a stack's SYN/ACK. */
		h->ip4.ttl = ttl;
		h->ip4.id = 0;
		h->ip4.frag_off = bpf_htons(0x4000);
	}
	h->ip4.check = 0;
	h->ip4.check = ipv4_hdr_csum(&h->ip4);
}

/* The TCP header: seq, ack, flags, window, and an MSS option if mss. */
static __always_inline __u32 sp_tcp(struct sp_hdrs *h, int v6, __u32 seq, __u32 ack, __u8 flags, __u16 win, __u16 mss)
{
	__u32 len = mss ? 24 : 20;

	h->th.seq = bpf_htonl(seq);
	h->th.ack_seq = bpf_htonl(ack);
	SP_DOFF_FLAGS(h) = bpf_htons((len / 4) << 12 | flags);
	h->th.window = bpf_htons(win);
	h->th.urg_ptr = 0;
	h->opt[0] = 2;
	h->opt[1] = 4;
	h->opt[2] = mss >> 8;
	h->opt[3] = mss;
	h->th.check = 0;
	h->th.check = sp_tcp_csum(h, v6, len);
	return len;
}

/* Writes the headers back over a frame cut or grown to end with them. */
static __always_inline int sp_write(struct xdp_md *ctx, const struct fw_pkt *p, struct sp_hdrs *h, int v6,
				    __u32 tcp_len, int macs)
{
	__u32 l4 = p->l4;
	/* The full difference first: 32-bit pointer arithmetic is refused. */
	__s64 flen = (__s64)((void *)(long)ctx->data_end - (void *)(long)ctx->data);

	asm volatile("" : "+r"(flen));
	if (bpf_xdp_adjust_tail(ctx, (int)((__s64)(l4 + tcp_len) - flen)))
		return -1;
	if (macs && bpf_xdp_store_bytes(ctx, 0, h->mac, sizeof(h->mac)))
		return -1;
	if (v6) {
		if (bpf_xdp_store_bytes(ctx, l4 - 40, &h->ip6, 40))
			return -1;
	} else if (bpf_xdp_store_bytes(ctx, l4 - 20, &h->ip4, 20)) {
		return -1;
	}
	if (tcp_len == 24)
		return bpf_xdp_store_bytes(ctx, l4, &h->th, 24) ? -1 : 0;
	return bpf_xdp_store_bytes(ctx, l4, &h->th, 20) ? -1 : 0;
}

static __always_inline __u16 sp_cfg_mss(const struct fw_config *cfg, int v6)
{
	__u16 m = v6 ? cfg->synproxy_mss6 : cfg->synproxy_mss4;

	return m ? m : (v6 ? 1440 : 1460);
}

static __always_inline __u8 sp_ttl(const struct fw_config *cfg)
{
	return cfg->synproxy_ttl ? cfg->synproxy_ttl : 64;
}

/* A SYN: the SYN/ACK whose ISN is the cookie, back out (XDP_TX). */
static __always_inline int sp_answer_syn(struct xdp_md *ctx, const struct fw_config *cfg, const struct fw_pkt *p,
					 struct sp_hdrs *h, int v6, __u32 doff)
{
	__u32 olen = doff - 20, seq = bpf_ntohl(h->th.seq);
	__u16 mss, max = sp_cfg_mss(cfg, v6);
	__s64 c;

	if (olen > 40 || (olen && bpf_xdp_load_bytes(ctx, p->l4 + 20, h->opt, olen))) {
		count(FW_C_DROP_MALFORMED);
		return XDP_DROP;
	}
	if (v6)
		c = bpf_tcp_raw_gen_syncookie_ipv6(&h->ip6, &h->th, doff);
	else
		c = bpf_tcp_raw_gen_syncookie_ipv4(&h->ip4, &h->th, doff);
	if (c < 0) {
		/* No cookies here (fastpath-rt): the rule cannot answer. */
		count(FW_C_DROP_RULE);
		return XDP_DROP;
	}
	mss = c >> 32;
	if (mss > max)
		mss = max;
	sp_swap_ends(h, v6);
	sp_ip(h, v6, 24, sp_ttl(cfg));
	sp_tcp(h, v6, (__u32)c, seq + 1, TH_SYN | TH_ACK, SP_WINDOW, mss);
	if (sp_write(ctx, p, h, v6, 24, 1))
		return XDP_ABORTED;
	count(FW_C_SYNPROXY_SYN);
	return XDP_TX;
}

/* The MSS a valid cookie holds: the cookie of the client's SYN made again
 * with each MSS of the table (the check helper does not say which). A
 * cookie from the minute before matches none: the table's smallest. */
static __always_inline __u16 sp_cookie_mss(struct sp_hdrs *h, int v6, __u32 isn, __u32 cookie)
{
	const __u16 *tab = v6 ? sp_msstab6 : sp_msstab4;

	h->th.seq = bpf_htonl(isn);
	SP_DOFF_FLAGS(h) = bpf_htons(6 << 12 | TH_SYN);
	h->opt[0] = 2;
	h->opt[1] = 4;
#pragma unroll
	for (int i = 3; i > 0; i--) {
		__s64 c;

		h->opt[2] = tab[i] >> 8;
		h->opt[3] = tab[i];
		if (v6)
			c = bpf_tcp_raw_gen_syncookie_ipv6(&h->ip6, &h->th, 24);
		else
			c = bpf_tcp_raw_gen_syncookie_ipv4(&h->ip4, &h->th, 24);
		if (c >= 0 && (__u32)c == cookie)
			return tab[i];
	}
	return tab[0];
}

/* The SYN the client sent, to the server: the client's ISN and window, the
 * cookie's MSS; the frame is passed on for the kernel to route. */
static __always_inline int sp_syn_to_server(struct xdp_md *ctx, const struct fw_pkt *p, struct sp_hdrs *h, int v6,
					    __u32 isn, __u16 win, __u16 mss)
{
	sp_ip(h, v6, 24, 0);
	sp_tcp(h, v6, isn, 0, TH_SYN, win, mss);
	if (sp_write(ctx, p, h, v6, 24, 0))
		return XDP_ABORTED;
	return XDP_PASS;
}

/* An ACK of a connection without an entry: its cookie decides. */
static __always_inline int sp_open(struct xdp_md *ctx, const struct fw_config *cfg, const struct fw_pkt *p,
				   struct ct_result *r, struct sp_hdrs *h, int v6)
{
	__u32 isn = bpf_ntohl(h->th.seq) - 1, cookie = bpf_ntohl(h->th.ack_seq) - 1;
	__u16 win = bpf_ntohs(h->th.window), mss;
	struct ct_txn *t = ct_txn();
	struct fw_ct_entry *e;
	__u64 now;
	long bad;

	if (!t)
		return XDP_ABORTED;
	if (v6)
		bad = bpf_tcp_raw_check_syncookie_ipv6(&h->ip6, &h->th);
	else
		bad = bpf_tcp_raw_check_syncookie_ipv4(&h->ip4, &h->th);
	if (bad || (SP_FLAGS(h) & TH_FIN)) {
		count(FW_C_SYNPROXY_ACK_BAD);
		return XDP_DROP;
	}
	mss = sp_cookie_mss(h, v6, isn, cookie);
	if (mss > sp_cfg_mss(cfg, v6))
		mss = sp_cfg_mss(cfg, v6);

	e = ct_fresh(t);
	now = ct_now(cfg);
	e->orig = r->end;
	e->state = FW_TCP_PROXY_SYN;
	e->status = FW_CTS_SYNPROXY;
	e->last_index = TCP_NONE_SET;
	/* The cookie until the server's ISN is known. */
	e->proxy_delta = cookie;
	e->proxy_isn = isn;
	e->proxy_mss = mss;
	e->dir[0].td_end = isn + 1;
	e->dir[0].td_maxwin = win ? win : 1;
	e->dir[0].td_maxend = isn + 1 + e->dir[0].td_maxwin;
	if (cfg->ct_flags & FW_CTF_LIBERAL) {
		e->dir[0].flags = FW_CTH_BE_LIBERAL;
		e->dir[1].flags = FW_CTH_BE_LIBERAL;
	}
	e->start_ns = now;
	e->expires_ns = now + ct_timeout(cfg, FW_CTT_SYN_SENT);
	ct_account(e, 0, t->len);
	ct_insert(&r->key, e);
	count(FW_C_SYNPROXY_ACK_OK);
	return sp_syn_to_server(ctx, p, h, v6, isn, win, mss);
}

/* The server's SYN/ACK: the ACK back to it, and the delta. A SYN/ACK
 * resent to an open connection (our ACK was lost) is answered again. */
static __always_inline int sp_server_synack(struct xdp_md *ctx, const struct fw_config *cfg, const struct fw_pkt *p,
					    struct ct_result *r, struct sp_hdrs *h, int v6)
{
	__u32 sisn = bpf_ntohl(h->th.seq), ack = bpf_ntohl(h->th.ack_seq), swin;
	struct ct_txn *t = ct_txn();
	struct ct_found f;
	struct fw_ct_entry *e;
	__u16 win;
	int held = 0, opened = 0;

	if (!t || !ct_get(cfg, &r->key, ct_key_hash(&r->key), t, &f, &held)) {
		count(FW_C_CT_INVALID); /* expired since conntrack saw it */
		return XDP_DROP;
	}
	e = f.e;
	if (!held || ack != e->proxy_isn + 1) {
		ct_unlock(e, held);
		count(held ? FW_C_CT_INVALID : FW_C_CT_BUSY);
		return XDP_DROP;
	}
	if (e->state == FW_TCP_PROXY_SYN) {
		/* Both directions in the server's sequence space from here:
		 * each may send up to what the other acknowledged plus its
		 * window (no window scaling was offered either way). */
		swin = h->th.window ? bpf_ntohs(h->th.window) : 1;
		e->proxy_delta -= sisn;
		e->dir[1].td_end = sisn + 1;
		e->dir[1].td_maxwin = swin;
		e->dir[1].td_maxend = sisn + 1 + e->dir[0].td_maxwin;
		if (after32(e->proxy_isn + 1 + swin, e->dir[0].td_maxend))
			e->dir[0].td_maxend = e->proxy_isn + 1 + swin;
		e->last_index = TCP_SYNACK_SET;
		e->last_dir = 1;
		e->status |= FW_CTS_SEEN_REPLY | FW_CTS_ASSURED;
		e->expires_ns = t->now + ct_timeout(cfg, FW_CTT_ESTABLISHED);
		e->state = FW_TCP_ESTABLISHED;
		e->version++;
		opened = 1;
	}
	win = e->dir[0].td_maxwin;
	ct_unlock(e, held);
	if (opened)
		count(FW_C_SYNPROXY_OPENED);

	sp_swap_ends(h, v6);
	sp_ip(h, v6, 20, sp_ttl(cfg));
	sp_tcp(h, v6, ack, sisn + 1, TH_ACK, win, 0);
	if (sp_write(ctx, p, h, v6, 20, 1))
		return XDP_ABORTED;
	return XDP_TX;
}

/* A client packet while the server's SYN/ACK is awaited: the SYN again, in
 * case that was lost; the client resends what this carried. */
static __always_inline int sp_resend_syn(struct xdp_md *ctx, const struct fw_config *cfg, const struct fw_pkt *p,
					 struct ct_result *r, struct sp_hdrs *h, int v6)
{
	struct ct_found f;
	__u32 isn;
	__u16 mss, win;

	if (!ct_lookup(cfg, &r->key, ct_now(cfg), &f)) {
		count(FW_C_CT_INVALID);
		return XDP_DROP;
	}
	isn = f.e->proxy_isn;
	mss = f.e->proxy_mss;
	win = f.e->dir[0].td_maxwin;
	return sp_syn_to_server(ctx, p, h, v6, isn, win, mss);
}

/* The server's RST answering the SYN (nothing listens), which
 * acknowledges that SYN: to the client, at the sequence number it waits
 * for, the cookie's next (proxy_delta holds the cookie until the server
 * answers), so that it takes the refusal; and the entry goes, so that a
 * new attempt from the same port is a new connection. Any other RST is
 * no answer to our SYN: dropped. */
static __always_inline int sp_refused(struct xdp_md *ctx, const struct fw_config *cfg, const struct fw_pkt *p,
				      const struct ct_result *r, struct sp_hdrs *h)
{
	__u32 from = h->th.seq, cookie = r->proxy_delta;
	struct ct_txn *t = ct_txn();
	struct ct_found f;
	int held = 0, ok;

	if (!t || !ct_get(cfg, &r->key, ct_key_hash(&r->key), t, &f, &held)) {
		count(FW_C_CT_INVALID);
		return XDP_DROP;
	}
	ok = held && f.e->state == FW_TCP_PROXY_SYN && (SP_FLAGS(h) & TH_ACK) &&
	     bpf_ntohl(h->th.ack_seq) == f.e->proxy_isn + 1;
	ct_unlock(f.e, held);
	if (!ok) {
		count(FW_C_CT_INVALID);
		return XDP_DROP;
	}
	ct_delete(cfg, &r->key, &f);
	h->th.seq = bpf_htonl(cookie + 1);
	h->th.check = csum_update4(h->th.check, from, h->th.seq);
	if (bpf_xdp_store_bytes(ctx, p->l4, &h->th, 20))
		return XDP_ABORTED;
	return CONTINUE;
}

/* A packet of an open connection: the client's acks go down by the delta
 * to the server's sequence space, the server's seqs up to the client's.
 * In the packet itself: a helper call each way to copy the header would
 * cost every packet of the connection some 30 ns more. */
static __always_inline int sp_shift(struct tcphdr *th, const struct ct_result *r, __u8 flags)
{
	__u32 *field, from;

	if (r->dir) {
		field = &th->seq;
		from = *field;
		*field = bpf_htonl(bpf_ntohl(from) + r->proxy_delta);
	} else {
		if (!(flags & TH_ACK))
			return CONTINUE;
		field = &th->ack_seq;
		from = *field;
		*field = bpf_htonl(bpf_ntohl(from) - r->proxy_delta);
	}
	th->check = csum_update4(th->check, from, *field);
	return CONTINUE;
}

/* The synproxy for a packet the rules passed: one that a synproxy rule
 * matched, or one of a connection it opened. A global function, so that
 * the verifier checks it once. */
__attribute__((noinline)) int fw_synproxy(struct xdp_md *ctx, const struct fw_pkt *p, struct ct_result *r)
{
	/* The settings are looked up again rather than passed: fw_xdp would
	 * keep their pointer across the rules, in a stack slot of its own. */
	__u32 zero = 0;
	const struct fw_config *cfg = bpf_map_lookup_elem(&fw_conf, &zero);
	struct sp_hdrs h;
	__u32 doff, l4, st;
	__u8 flags;
	int v6;

	if (!ctx || !cfg || !p || !r)
		return XDP_ABORTED;
	/* Without conntrack no connection could follow its handshake: the
	 * rule passes, as a plain pass rule would. */
	if (!(cfg->ct_flags & FW_CTF_ON))
		return CONTINUE;
	st = r->status;
	/* A tracked connection's segment that conntrack refuses (outside the
	 * windows, a blind RST) is not the rule's to pass. */
	if ((st & (CT_R_FOUND | CT_R_PROXY_SYN)) == CT_R_FOUND && r->state == FW_CT_INVALID) {
		count(FW_C_SYNPROXY_INVALID);
		return XDP_DROP;
	}
	if ((st & CT_R_FOUND) && !(st & FW_CTS_SYNPROXY))
		return CONTINUE; /* a connection opened before the rule */
	if (r->key.proto != IPPROTO_TCP)
		return CONTINUE;
	l4 = p->l4;
	{
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		struct tcphdr *th;

		/* The mask bounds the offset for the verifier (a frame's
		 * linear part is a page); the barrier keeps clang from
		 * dropping it. */
		asm volatile("" : "+r"(l4));
		th = data + (l4 & 0xfff);
		if (l4 > 0xfff || (void *)(th + 1) > end)
			goto malformed;
		flags = ((__u8 *)th)[13];
		doff = th->doff * 4;
		if (doff < 20 || doff > p->l4_len)
			goto malformed;
		/* Open connections: the shift alone. */
		if ((st & (CT_R_FOUND | CT_R_PROXY_SYN)) == CT_R_FOUND &&
		    !(r->dir && (flags & (TH_SYN | TH_ACK | TH_RST)) == (TH_SYN | TH_ACK)))
			return sp_shift(th, r, flags);
		__builtin_memcpy(&h.th, th, sizeof(h.th));
	}

	/* The rest is zeroed only here: the shift reads no more than the
	 * TCP header (and the helpers read only what the stack holds). */
	__builtin_memset(&h, 0, offsetof(struct sp_hdrs, th));
	__builtin_memset(h.opt, 0, sizeof(h.opt));
	v6 = r->key.family == FW_FAMILY_IPV6;
	if (p->frag)
		goto malformed;
	if (v6) {
		if (l4 < 14 + 40 || bpf_xdp_load_bytes(ctx, l4 - 40, &h.ip6, 40) || h.ip6.nexthdr != IPPROTO_TCP)
			goto malformed;
	} else {
		if (l4 < 14 + 20 || bpf_xdp_load_bytes(ctx, l4 - 20, &h.ip4, 20) || h.ip4.ihl != 5)
			goto malformed;
	}
	if (bpf_xdp_load_bytes(ctx, 0, h.mac, sizeof(h.mac)))
		goto malformed;

	if (st & CT_R_FOUND) {
		if (r->dir && (flags & (TH_SYN | TH_ACK | TH_RST)) == (TH_SYN | TH_ACK))
			return sp_server_synack(ctx, cfg, p, r, &h, v6);
		if (r->dir && (flags & TH_RST))
			return sp_refused(ctx, cfg, p, r, &h);
		if (!r->dir && (flags & (TH_SYN | TH_ACK)) == TH_SYN)
			return sp_answer_syn(ctx, cfg, p, &h, v6, doff); /* the tuple anew */
		if (!r->dir && !(flags & TH_RST))
			return sp_resend_syn(ctx, cfg, p, r, &h, v6);
		return CONTINUE;
	}
	if ((flags & (TH_SYN | TH_ACK | TH_RST | TH_FIN)) == TH_SYN)
		return sp_answer_syn(ctx, cfg, p, &h, v6, doff);
	if ((flags & (TH_SYN | TH_ACK | TH_RST)) == TH_ACK)
		return sp_open(ctx, cfg, p, r, &h, v6);
	/* An RST or a SYN/ACK no connection explains: the server has none to
	 * end or answer (it sees only connections the proxy opened). */
	count(FW_C_SYNPROXY_INVALID);
	return XDP_DROP;
malformed:
	count(FW_C_DROP_MALFORMED);
	return XDP_DROP;
}

#endif
