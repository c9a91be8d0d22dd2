/* Connection tracking, per packet: reading the segment, finding the entry,
 * the states of UDP, ICMP and other protocols, and creating, promoting and
 * removing entries. Included by ct.h. */
#ifndef FASTPATH_FW_CT_TRACK_H
#define FASTPATH_FW_CT_TRACK_H

/* How long an answered UDP (or other) pseudo-connection must live before it
 * counts as a stream: nf_conntrack_udp's stream_ts. */
#define CT_STREAM_AFTER_NS 2000000000ULL

static __always_inline void ct_count_state(__u8 st)
{
	switch (st) {
	case FW_CT_NEW:
		count(FW_C_CT_NEW);
		break;
	case FW_CT_ESTABLISHED:
		count(FW_C_CT_ESTABLISHED);
		break;
	case FW_CT_RELATED:
		count(FW_C_CT_RELATED);
		break;
	case FW_CT_UNTRACKED:
		count(FW_C_CT_UNTRACKED);
		break;
	default:
		count(FW_C_CT_INVALID);
	}
}

static __always_inline __u64 ct_now(const struct fw_config *cfg)
{
	return bpf_ktime_get_coarse_ns() + cfg->ct_skew_ns;
}

/* Whether address a sorts after b (word by word: any total order will do). */
static __always_inline int addr_after(const __u32 *a, const __u32 *b)
{
	if (a[0] != b[0])
		return a[0] > b[0];
	if (a[1] != b[1])
		return a[1] > b[1];
	if (a[2] != b[2])
		return a[2] > b[2];
	return a[3] > b[3];
}

/* The connection key of a TCP, UDP or other packet: its ends ordered. The
 * end that sent it goes to r->end. */
static __always_inline void ct_key_ordered(struct ct_result *r, const struct fw_flow_key *k, __u16 sport,
					   __u16 dport)
{
	int swap = addr_after(k->src, k->dst);

	if (!swap && k->src[0] == k->dst[0] && k->src[1] == k->dst[1] && k->src[2] == k->dst[2] &&
	    k->src[3] == k->dst[3])
		swap = sport > dport;
	r->key.proto = k->proto;
	r->key.family = k->family;
	r->key.pad = 0;
	r->end = swap;
	if (swap) {
		__builtin_memcpy(r->key.addr[0], k->dst, 16);
		__builtin_memcpy(r->key.addr[1], k->src, 16);
		r->key.port[0] = dport;
		r->key.port[1] = sport;
	} else {
		__builtin_memcpy(r->key.addr[0], k->src, 16);
		__builtin_memcpy(r->key.addr[1], k->dst, 16);
		r->key.port[0] = sport;
		r->key.port[1] = dport;
	}
}

/* A found entry, and whether it is in the established table. */
struct ct_found {
	struct fw_ct_entry *e;
	int est;
};

/* Spins to take an entry's lock: its holder, in softirq on another CPU,
 * is a state change of some 100 ns away. After CT_LOCK_SPINS tries the
 * packet goes on without it rather than wait longer. */
#define CT_LOCK_SPINS 256

static __always_inline int ct_lock(struct fw_ct_entry *e)
{
	for (int i = 0; i < CT_LOCK_SPINS; i++)
		if (__sync_val_compare_and_swap(&e->lock, 0, 1) == 0)
			return 1;
	return 0;
}

static __always_inline void ct_unlock(struct fw_ct_entry *e, int held)
{
	if (held)
		__sync_lock_test_and_set(&e->lock, 0);
}

/* The live entry of key, the established table first. An expired entry is
 * deleted and not found. */
static __always_inline int ct_lookup(const struct fw_ct_key *key, __u64 now, struct ct_found *f)
{
	struct fw_ct_entry *e = bpf_map_lookup_elem(&fw_ct_est, key);

	if (e) {
		if (e->expires_ns > now) {
			f->e = e;
			f->est = 1;
			return 1;
		}
		bpf_map_delete_elem(&fw_ct_est, key);
	}
	e = bpf_map_lookup_elem(&fw_ct_new, key);
	if (e) {
		if (e->expires_ns > now) {
			f->e = e;
			f->est = 0;
			return 1;
		}
		bpf_map_delete_elem(&fw_ct_new, key);
	}
	return 0;
}

static __always_inline void ct_delete(const struct fw_ct_key *key, const struct ct_found *f)
{
	if (f->est)
		bpf_map_delete_elem(&fw_ct_est, key);
	else
		bpf_map_delete_elem(&fw_ct_new, key);
}

/* An assured connection moves from the embryonic table to the established
 * one, which never evicts: when that is full it stays where it is (and
 * says so once, in its status). */
static __always_inline void ct_promote(const struct fw_ct_key *key, struct fw_ct_entry *e)
{
	__u32 zero = 0;
	struct fw_ct_entry *l = bpf_map_lookup_elem(&fw_ct_scratch, &zero);
	long err;

	if (!l)
		return;
	*l = *e;
	l->lock = 0;
	l->status |= FW_CTS_EST_TABLE;
	err = bpf_map_update_elem(&fw_ct_est, key, l, BPF_NOEXIST);
	if (err == 0) {
		bpf_map_delete_elem(&fw_ct_new, key);
		count(FW_C_CT_PROMOTED);
	} else if (err != -17 /* EEXIST: another CPU did */) {
		e->status |= FW_CTS_EST_TABLE; /* not again */
		count(FW_C_CT_EST_FULL);
	}
}

/* Whether an entry of the embryonic table has just proved both ends real
 * (assured) and is to move to the established table. */
static __always_inline int ct_wants_promotion(const struct ct_found *f, const struct fw_ct_entry *e)
{
	return !f->est && (e->status & (FW_CTS_ASSURED | FW_CTS_EST_TABLE)) == FW_CTS_ASSURED;
}

/* A new connection's entry into the embryonic table; one another CPU
 * entered first stays. */
static __always_inline void ct_insert(const struct fw_ct_key *key, const struct fw_ct_entry *e)
{
	if (bpf_map_update_elem(&fw_ct_new, key, e, BPF_NOEXIST) == 0)
		count(FW_C_CT_CREATED);
}

/* The scratch entry a first packet fills, zeroed. */
static __always_inline struct fw_ct_entry *ct_fresh(void)
{
	__u32 zero = 0;
	struct fw_ct_entry *l = bpf_map_lookup_elem(&fw_ct_scratch, &zero);

	if (!l)
		return NULL;
	__builtin_memset(l, 0, sizeof(*l));
	return l;
}

/* The options being read (bpf_loop's context). */
struct tcp_opts {
	__u8 opt[40];
	__u32 len;
	__u32 off;
	struct tcp_seg *s;
};

/* One option (tcp_options and tcp_sack in one pass): a bpf_loop callback,
 * so that the verifier checks its body once rather than per option. */
static long tcp_option(__u64 i, void *data)
{
	struct tcp_opts *o = data;
	struct tcp_seg *s = o->s;
	__u32 off = o->off, len;
	__u8 kind;

	if (off >= o->len || off >= 40)
		return 1;
	kind = o->opt[off & 0x3f];
	if (kind == 0) /* EOL */
		return 1;
	if (kind == 1) { /* NOP */
		o->off = off + 1;
		return 0;
	}
	if (off + 1 >= o->len)
		return 1;
	len = o->opt[(off + 1) & 0x3f];
	if (len < 2 || off + len > o->len)
		return 1;
	if (kind == 4 && len == 2) {
		s->sack_perm = 1;
	} else if (kind == 3 && len == 3) {
		__u8 ws = o->opt[(off + 2) & 0x3f];

		s->wscale = ws > 14 ? 14 : ws;
	} else if (kind == 5 && len >= 10 && (len - 2) % 8 == 0) {
		/* SACK blocks: the highest right edge. */
		for (__u32 b = 0; b < 4; b++) {
			__u32 at = off + 2 + b * 8 + 4, edge;

			if (b * 8 + 10 > len || at + 4 > 40)
				break;
			edge = (__u32)o->opt[at & 0x3f] << 24 | (__u32)o->opt[(at + 1) & 0x3f] << 16 |
			       (__u32)o->opt[(at + 2) & 0x3f] << 8 | o->opt[(at + 3) & 0x3f];
			if (!s->has_sack || after32(edge, s->sack))
				s->sack = edge;
			s->has_sack = 1;
		}
		if (s->has_sack && before32(s->sack, s->ack))
			s->sack = s->ack;
	}
	o->off = off + len;
	return 0;
}

/* Reads the TCP segment; 0 if conntrack would call it an error (a header
 * cut short, flags no stack sends). */
static __noinline int ct_read_tcp(struct xdp_md *ctx, const struct fw_pkt *p, struct tcp_seg *s)
{
	struct tcp_opts o = {.s = s};
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 off = p->l4;
	__u8 *th;
	__u32 doff;

	/* Bounded, so that the verifier can give the pointer a range: headers
	 * are in a frame's first page anyway. */
	if (off > 4096)
		return 0;
	th = data + off;
	if (!PKT_HAS(th, 20, end))
		return 0;
	doff = (th[12] >> 4) * 4;
	if (doff < 20 || doff > p->l4_len)
		return 0;
	s->flags = th[13];
	if (!(TCP_VALID_FLAGS >> (s->flags & ~(TH_ECE | TH_CWR | TH_PSH) & 0x3f) & 1))
		return 0;
	s->seq = bpf_ntohl(*(__u32 *)&th[4]);
	s->ack = bpf_ntohl(*(__u32 *)&th[8]);
	s->sack = s->ack;
	s->win = bpf_ntohs(*(__u16 *)&th[14]);
	s->end = s->seq + (p->l4_len - doff) + !!(s->flags & TH_SYN) + !!(s->flags & TH_FIN);
	if (s->flags & TH_RST)
		s->index = TCP_RST_SET;
	else if (s->flags & TH_SYN)
		s->index = (s->flags & TH_ACK) ? TCP_SYNACK_SET : TCP_SYN_SET;
	else if (s->flags & TH_FIN)
		s->index = TCP_FIN_SET;
	else if (s->flags & TH_ACK)
		s->index = TCP_ACK_SET;
	else
		s->index = TCP_NONE_SET;
	s->wscale = 0xff;
	s->sack_perm = 0;
	s->has_sack = 0;

	o.len = doff - 20;
	if (!o.len || o.len > sizeof(o.opt))
		return 1;
	if (bpf_xdp_load_bytes(ctx, p->l4 + 20, o.opt, o.len))
		return 1;
	/* The common case, timestamps alone, has nothing for us. */
	if (o.len == 12 && o.opt[0] == 1 && o.opt[1] == 1 && o.opt[2] == 8 && o.opt[3] == 10)
		return 1;
	bpf_loop(40, tcp_option, &o, 0);
	return 1;
}

/* ct_tcp on a copy of an entry: a global function, so that the verifier
 * checks the state machine once, not once per path that leads here.
 * Returns the verdict; the new timeout and kill go to out. */
struct ct_tcp_out {
	__u64 now;
	__u64 timeout;
	__u32 dir;
	int kill;
};

__attribute__((noinline)) int fw_ct_tcp(struct fw_ct_entry *e, const struct tcp_seg *s, const struct fw_config *cfg,
					struct ct_tcp_out *out)
{
	if (!e || !s || !cfg || !out)
		return CTV_INVALID;
	return ct_tcp(e, out->dir & 1, s, cfg, out->now, &out->timeout, &out->kill);
}

/* The state of a packet of a found entry as nftables names it: a reply,
 * or an original packet once a reply was seen, is established. */
static __always_inline __u8 ct_seen_state(const struct fw_ct_entry *e, __u32 dir)
{
	return (dir || (e->status & FW_CTS_SEEN_REPLY)) ? FW_CT_ESTABLISHED : FW_CT_NEW;
}

static __always_inline void ct_account(struct fw_ct_entry *e, __u32 dir, __u64 len)
{
	e->packets[dir & 1] += 1;
	e->bytes[dir & 1] += len;
}

static __always_inline __u8 ct_track_tcp(struct xdp_md *ctx, const struct fw_config *cfg, const struct fw_pkt *p,
				    struct ct_result *r)
{
	struct tcp_seg s;
	struct ct_found f;
	struct fw_ct_entry *e;
	struct ct_tcp_out out = {.now = ct_now(cfg)};
	__u64 len = r->len;
	int res, promote = 0, held;
	__u8 st = FW_CT_INVALID;

	if (!ct_read_tcp(ctx, p, &s))
		return FW_CT_INVALID;
	if (ct_lookup(&r->key, out.now, &f)) {
		e = f.e;
		out.dir = r->end != e->orig;
		/* The synproxy's (synproxy.h): the entry's handshake, and the
		 * shift of its sequence numbers. */
		r->status = e->status | CT_R_FOUND;
		r->dir = out.dir;
		r->proxy_delta = e->proxy_delta;
		if (e->state == FW_TCP_PROXY_SYN) {
			r->status |= CT_R_PROXY_SYN;
			return ct_seen_state(e, out.dir);
		}
		held = ct_lock(e);
		res = fw_ct_tcp(e, &s, cfg, &out);
		if (res == CTV_IGNORE && (cfg->ct_flags & FW_CTF_STRICT))
			res = CTV_INVALID;
		if (res == CTV_ACCEPT || res == CTV_IGNORE) {
			st = ct_seen_state(e, out.dir);
			if (out.dir)
				e->status |= FW_CTS_SEEN_REPLY;
			if (out.timeout)
				e->expires_ns = out.now + out.timeout;
			ct_account(e, out.dir, len);
		}
		promote = ct_wants_promotion(&f, e);
		ct_unlock(e, held);
		if (res == CTV_IGNORE)
			count(FW_C_CT_IGNORED);
		if (res != CTV_REOPEN) {
			if (out.kill)
				ct_delete(&r->key, &f);
			else if (promote)
				ct_promote(&r->key, e);
			return st;
		}
		ct_delete(&r->key, &f);
		r->status = 0;
		r->len = len;
	}

	/* No entry: the packet may open one (tcp_new). */
	e = ct_fresh();
	if (!e)
		return FW_CT_INVALID;
	if (!ct_tcp_new(e, &s, cfg->ct_flags))
		return FW_CT_INVALID;
	e->orig = r->end;
	out.dir = 0;
	res = fw_ct_tcp(e, &s, cfg, &out);
	if (res != CTV_ACCEPT || out.kill)
		return res == CTV_INVALID ? FW_CT_INVALID : FW_CT_NEW;
	e->expires_ns = out.now + out.timeout;
	e->start_ns = out.now;
	ct_account(e, 0, len);
	r->commit = CT_CREATE;
	return FW_CT_NEW;
}

/* UDP and other protocols without a state machine of their own: new until
 * answered; answered and alive after 2 s, a stream (assured). */
static __noinline __u8 ct_track_stream(const struct fw_config *cfg, struct ct_result *r, __u32 t_unreplied,
				       __u32 t_stream)
{
	__u64 len = r->len;
	struct ct_found f;
	struct fw_ct_entry *e;
	__u64 now = ct_now(cfg);
	__u32 dir;
	int promote = 0, stream;
	__u8 st;

	if (ct_lookup(&r->key, now, &f)) {
		e = f.e;
		dir = r->end != e->orig;
		st = ct_seen_state(e, dir);
		/* Answered before this packet, and still alive after 2 s. */
		stream = (e->status & FW_CTS_SEEN_REPLY) && now > e->start_ns + CT_STREAM_AFTER_NS;
		e->expires_ns = now + ct_timeout(cfg, stream ? t_stream : t_unreplied);
		if (stream)
			e->status |= FW_CTS_ASSURED;
		if (dir)
			e->status |= FW_CTS_SEEN_REPLY;
		ct_account(e, dir, len);
		promote = ct_wants_promotion(&f, e);
		if (promote)
			ct_promote(&r->key, e);
		return st;
	}
	e = ct_fresh();
	if (!e)
		return FW_CT_INVALID;
	e->orig = r->end;
	e->start_ns = now;
	e->expires_ns = now + ct_timeout(cfg, t_unreplied);
	ct_account(e, 0, len);
	r->commit = CT_CREATE;
	return FW_CT_NEW;
}

/* ICMP request and reply types: the request a reply answers, 0 for a type
 * that is neither. */
static __always_inline __u8 icmp_request_of(__u8 family, __u8 type, int *is_reply)
{
	*is_reply = 0;
	if (family == FW_FAMILY_IPV4) {
		switch (type) {
		case 8:
		case 13:
		case 15:
		case 17:
			return type;
		case 0:
			*is_reply = 1;
			return 8;
		case 14:
		case 16:
		case 18:
			*is_reply = 1;
			return type - 1;
		}
		return 0;
	}
	switch (type) {
	case 128: /* echo */
	case 139: /* node information query */
		return type;
	case 129:
	case 140:
		*is_reply = 1;
		return type - 1;
	}
	return 0;
}

static __always_inline int icmp_is_error(__u8 family, __u8 type)
{
	if (family == FW_FAMILY_IPV4)
		return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
	return type < 128;
}

/* ICMPv6 that conntrack leaves untracked: neighbour discovery and MLD
 * (noct_valid_new). */
static __always_inline int icmp6_untracked(__u8 type)
{
	return (type >= 130 && type <= 136) || type == 143;
}

/* An ICMP error is related when it quotes a packet of a tracked
 * connection and goes to that packet's sender (nf_conntrack_inet_error). */
static __noinline __u8 ct_related(struct xdp_md *ctx, const struct fw_config *cfg, const struct fw_flow_key *k,
				       const struct fw_pkt *p)
{
	struct fw_flow_key in = {};
	struct ct_result q = {};
	struct ct_found f;
	__u8 hdr[48];
	__u32 off = p->l4 + 8, l4;
	__u16 sport = 0, dport = 0;

	in.family = k->family;
	if (k->family == FW_FAMILY_IPV4) {
		__u32 ihl;

		if (bpf_xdp_load_bytes(ctx, off, hdr, 20))
			return FW_CT_INVALID;
		ihl = (hdr[0] & 0xf) * 4;
		if ((hdr[0] >> 4) != 4 || ihl < 20)
			return FW_CT_INVALID;
		in.proto = hdr[9];
		in.src[2] = bpf_htonl(0xffff);
		in.dst[2] = bpf_htonl(0xffff);
		in.src[3] = *(__u32 *)&hdr[12];
		in.dst[3] = *(__u32 *)&hdr[16];
		l4 = off + ihl;
	} else {
		if (bpf_xdp_load_bytes(ctx, off, hdr, 40))
			return FW_CT_INVALID;
		if ((hdr[0] >> 4) != 6)
			return FW_CT_INVALID;
		in.proto = hdr[6];
		__builtin_memcpy(in.src, &hdr[8], 16);
		__builtin_memcpy(in.dst, &hdr[24], 16);
		l4 = off + 40;
	}
	/* The quoted packet's first 8 bytes of L4 are enough. */
	if (bpf_xdp_load_bytes(ctx, l4, hdr, 8))
		return FW_CT_INVALID;
	if (in.proto == IPPROTO_TCP || in.proto == IPPROTO_UDP) {
		sport = (__u16)hdr[0] << 8 | hdr[1];
		dport = (__u16)hdr[2] << 8 | hdr[3];
		ct_key_ordered(&q, &in, sport, dport);
	} else if ((k->family == FW_FAMILY_IPV4 && in.proto == IPPROTO_ICMP) ||
		   (k->family == FW_FAMILY_IPV6 && in.proto == IPPROTO_ICMPV6)) {
		int is_reply;
		__u8 req = icmp_request_of(k->family, hdr[0], &is_reply);

		if (!req)
			return FW_CT_INVALID; /* an error about an error */
		q.key.proto = in.proto;
		q.key.family = in.family;
		__builtin_memcpy(q.key.addr[0], is_reply ? in.dst : in.src, 16);
		__builtin_memcpy(q.key.addr[1], is_reply ? in.src : in.dst, 16);
		q.key.port[0] = (__u16)hdr[4] << 8 | hdr[5];
		q.key.port[1] = req;
	} else {
		ct_key_ordered(&q, &in, 0, 0);
	}
	if (!ct_lookup(&q.key, ct_now(cfg), &f))
		return FW_CT_INVALID;
	/* The error goes back to the quoted packet's sender. */
	if (k->dst[0] != in.src[0] || k->dst[1] != in.src[1] || k->dst[2] != in.src[2] || k->dst[3] != in.src[3])
		return FW_CT_INVALID;
	return FW_CT_RELATED;
}

static __noinline __u8 ct_track_icmp(struct xdp_md *ctx, const struct fw_config *cfg, const struct fw_flow_key *k,
				     const struct fw_pkt *p, struct ct_result *r)
{
	__u64 len = r->len;
	struct ct_found f;
	struct fw_ct_entry *e;
	__u8 icmp[8], req, st;
	__u64 now;
	int is_reply;

	if (p->l4_len < 8 || bpf_xdp_load_bytes(ctx, p->l4, icmp, sizeof(icmp)))
		return FW_CT_INVALID;
	if (icmp_is_error(k->family, icmp[0]))
		return ct_related(ctx, cfg, k, p);
	if (k->family == FW_FAMILY_IPV6 && icmp6_untracked(icmp[0]))
		return FW_CT_UNTRACKED;
	req = icmp_request_of(k->family, icmp[0], &is_reply);
	if (!req)
		return FW_CT_INVALID;
	r->key.proto = k->proto;
	r->key.family = k->family;
	r->key.pad = 0;
	__builtin_memcpy(r->key.addr[0], is_reply ? k->dst : k->src, 16);
	__builtin_memcpy(r->key.addr[1], is_reply ? k->src : k->dst, 16);
	r->key.port[0] = (__u16)icmp[4] << 8 | icmp[5];
	r->key.port[1] = req;
	r->end = 0;
	now = ct_now(cfg);
	if (ct_lookup(&r->key, now, &f)) {
		e = f.e;
		st = ct_seen_state(e, is_reply);
		if (is_reply)
			e->status |= FW_CTS_SEEN_REPLY;
		e->expires_ns = now + ct_timeout(cfg, FW_CTT_ICMP);
		ct_account(e, is_reply, len);
		return st;
	}
	if (is_reply)
		return FW_CT_INVALID; /* an answer to nothing */
	e = ct_fresh();
	if (!e)
		return FW_CT_INVALID;
	e->start_ns = now;
	e->expires_ns = now + ct_timeout(cfg, FW_CTT_ICMP);
	ct_account(e, 0, len);
	r->commit = CT_CREATE;
	return FW_CT_NEW;
}

/* The packet's ct state. A global function: the verifier checks it once,
 * and the rules after it once rather than once per state it can return.
 * Later fragments carry no L4 header and are untracked (conntrack sees
 * reassembled packets; an XDP program sees fragments). */
__attribute__((noinline)) int fw_track_conn(struct xdp_md *ctx, const struct fw_config *cfg,
					    const struct fw_flow_key *k, const struct fw_pkt *p, struct ct_result *r)
{
	__u8 st;

	if (!ctx || !cfg || !k || !p || !r)
		return FW_CT_INVALID;
	if (k->noports)
		st = FW_CT_UNTRACKED;
	else if (k->proto == IPPROTO_TCP) {
		ct_key_ordered(r, k, k->sport, k->dport);
		st = ct_track_tcp(ctx, cfg, p, r);
	} else if (k->proto == IPPROTO_UDP) {
		ct_key_ordered(r, k, k->sport, k->dport);
		st = ct_track_stream(cfg, r, FW_CTT_UDP, FW_CTT_UDP_STREAM);
	} else if ((k->family == FW_FAMILY_IPV4 && k->proto == IPPROTO_ICMP) ||
		   (k->family == FW_FAMILY_IPV6 && k->proto == IPPROTO_ICMPV6)) {
		st = ct_track_icmp(ctx, cfg, k, p, r);
	} else {
		ct_key_ordered(r, k, 0, 0);
		st = ct_track_stream(cfg, r, FW_CTT_GENERIC, FW_CTT_GENERIC);
	}
	ct_count_state(st);
	return st;
}

/* Step 4: the packet's ct state, into k->ct_state (0 with conntrack off). */
static __always_inline void track_conn(struct xdp_md *ctx, const struct fw_config *cfg, struct fw_flow_key *k,
				       const struct fw_pkt *p, struct ct_result *r, __u64 len)
{
	r->commit = CT_NONE;
	r->status = 0;
	r->len = len;
	if (!(cfg->ct_flags & FW_CTF_ON))
		return;
	k->ct_state = fw_track_conn(ctx, cfg, k, p, r);
}

/* After the rules: a new connection whose first packet passes is entered
 * (an entry whose packet is dropped was never confirmed). */
static __always_inline void ct_confirm(const struct ct_result *r)
{
	__u32 zero = 0;
	struct fw_ct_entry *l;

	if (r->commit != CT_CREATE)
		return;
	l = bpf_map_lookup_elem(&fw_ct_scratch, &zero);
	if (l)
		ct_insert(&r->key, l);
}

#endif
