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
	r->key.code = 0;
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

#include "ct_check.h"

/* A tracked packet's business with conntrack's tables, per CPU (fw_xdp's
 * stack has no room for it): the entry as the packet leaves it, computed
 * on a copy or made new, and written only once the rules pass the packet
 * (ct_commit). */
struct ct_txn {
	struct fw_ct_entry e;
	/* The segment, to apply again to an entry another CPU wrote to since
	 * the copy was taken. */
	struct tcp_seg s;
	__u64 now;
	/* The frame's length, for the counters. */
	__u64 len;
	/* The found entry's version when copied, and its table. */
	__u32 version;
	__u8 est;
	/* The packet's direction in the entry. */
	__u8 dir;
	/* For the stream and ICMP pseudo-connections: their timeouts. */
	__u8 t_unreplied;
	__u8 t_stream;
	/* A fragment's datagram. */
	struct fw_frag_key fk;
	/* fw_xdp's packet: its flow, headers and connection (per CPU: the
	 * stack has no room for them beside the calls that track). */
	struct fw_flow_key k;
	struct fw_pkt p;
	struct ct_result r;
	/* An ICMP error's quoted packet: its headers, flow and connection. */
	__u8 quote[48];
	struct fw_flow_key in;
	struct ct_result q;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ct_txn);
} fw_ct_txn SEC(".maps");

static __always_inline struct ct_txn *ct_txn(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&fw_ct_txn, &zero);
}

/* A hash of a key, kept in its entry (key_hash). */
static __always_inline __u32 ct_key_hash(const struct fw_ct_key *k)
{
	const __u32 *w = (const __u32 *)k;
	__u32 h = 0x9e3779b9;

#pragma unroll
	for (int i = 0; i < sizeof(*k) / 4; i++) {
		h = (h ^ w[i]) * 0x85ebca6b;
		h ^= h >> 13;
	}
	return h | 1; /* never 0: an entry made before the hash existed */
}

/* A found entry, and whether it is in the established table. */
struct ct_found {
	struct fw_ct_entry *e;
	int est;
};

/* Spins to take an entry's lock: its holder, in softirq on another CPU,
 * copies or writes the entry, a few dozen ns. A lock not taken after
 * CT_LOCK_SPINS tries leaves the packet without changes to write (it is
 * counted): never a write without the lock. */
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

/* The source an established entry counts against, as a prefix of bits:
 * the end that opened the connection, or the peer for the host's own. */
static __always_inline void ct_src_key(struct fw_ct_src_key *sk, const struct fw_ct_key *key,
				       const struct fw_ct_entry *e, __u8 bits)
{
	__u32 end = e->orig & 1;

	if (e->status & FW_CTS_LOCAL_ORIG)
		end ^= 1;
	__builtin_memset(sk, 0, sizeof(*sk));
	sk->family = key->family;
	sk->bits = bits;
	if (key->family == FW_FAMILY_IPV4)
		bits += 96;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 w = bpf_ntohl(key->addr[end][i]);
		__u32 keep = bits >= 32 * (i + 1) ? 32 : (bits > 32 * i ? bits - 32 * i : 0);

		sk->addr[i] = keep ? bpf_htonl(w & ~((1ULL << (32 - keep)) - 1)) : 0;
	}
}

/* Adds d to the count of one source prefix; returns the count before, or
 * (__u32)-1 if it cannot be kept. */
static __always_inline __u32 ct_src_add(const struct fw_ct_src_key *sk, __s32 d)
{
	__u32 zero = 0, *n = bpf_map_lookup_elem(&fw_ct_src, sk);

	if (!n) {
		if (d <= 0)
			return 0;
		bpf_map_update_elem(&fw_ct_src, sk, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&fw_ct_src, sk);
		if (!n)
			return (__u32)-1;
	}
	return __sync_fetch_and_add(n, d);
}

/* Whether the entry's source may hold one more established entry; if so,
 * counts it. Not inlined, nor ct_src_release: their keys would take stack
 * in every frame that may delete or promote. */
static __noinline int ct_src_take(const struct fw_config *cfg, const struct fw_ct_key *key,
				       const struct fw_ct_entry *e)
{
	struct fw_ct_src_key narrow, wide;
	__u32 v6 = key->family == FW_FAMILY_IPV6, *n;

	if (!cfg->ct_src_max && !cfg->ct_src_wide_max)
		return 1;
	ct_src_key(&narrow, key, e, cfg->ct_src_bits[v6 & 1]);
	ct_src_key(&wide, key, e, cfg->ct_src_wide_bits[v6 & 1]);
	if (cfg->ct_src_max && (n = bpf_map_lookup_elem(&fw_ct_src, &narrow)) && *n >= cfg->ct_src_max)
		return 0;
	if (cfg->ct_src_wide_max && (n = bpf_map_lookup_elem(&fw_ct_src, &wide)) && *n >= cfg->ct_src_wide_max)
		return 0;
	if (ct_src_add(&narrow, 1) == (__u32)-1)
		return 0;
	if (ct_src_add(&wide, 1) == (__u32)-1) {
		ct_src_add(&narrow, -1);
		return 0;
	}
	return 1;
}

/* An established entry is gone: its source's count goes down. */
static __noinline void ct_src_release(const struct fw_config *cfg, const struct fw_ct_key *key,
					   const struct fw_ct_entry *e)
{
	struct fw_ct_src_key sk;
	__u32 v6 = key->family == FW_FAMILY_IPV6, *n;

	if (!cfg->ct_src_max && !cfg->ct_src_wide_max)
		return;
	ct_src_key(&sk, key, e, cfg->ct_src_bits[v6 & 1]);
	if ((n = bpf_map_lookup_elem(&fw_ct_src, &sk)) && *n)
		__sync_fetch_and_add(n, -1);
	ct_src_key(&sk, key, e, cfg->ct_src_wide_bits[v6 & 1]);
	if ((n = bpf_map_lookup_elem(&fw_ct_src, &sk)) && *n)
		__sync_fetch_and_add(n, -1);
}

/* Deletes an entry; an established one gives its source's share back, by
 * whoever deleted it. */
static __always_inline void ct_delete(const struct fw_config *cfg, const struct fw_ct_key *key,
				      const struct ct_found *f)
{
	if (!f->est) {
		bpf_map_delete_elem(&fw_ct_new, key);
		return;
	}
	if (bpf_map_delete_elem(&fw_ct_est, key) == 0)
		ct_src_release(cfg, key, f->e);
}

/* The live entry of key, the established table first. An expired entry is
 * deleted and not found. */
static __always_inline int ct_lookup(const struct fw_config *cfg, const struct fw_ct_key *key, __u64 now,
				     struct ct_found *f)
{
	struct fw_ct_entry *e = bpf_map_lookup_elem(&fw_ct_est, key);

	f->est = 1;
	if (e) {
		f->e = e;
		if (e->expires_ns > now)
			return 1;
		ct_delete(cfg, key, f);
	}
	f->est = 0;
	e = bpf_map_lookup_elem(&fw_ct_new, key);
	if (e) {
		f->e = e;
		if (e->expires_ns > now && !(e->status & FW_CTS_MOVED))
			return 1;
		if (!(e->status & FW_CTS_MOVED))
			ct_delete(cfg, key, f);
	}
	return 0;
}

/* The live entry of key, locked (held: whether the lock was taken), as a
 * copy in t->e with its version. An entry that moved to the established
 * table while it was found is looked up there; one a map handed to another
 * key is not found. */
static __always_inline int ct_get(const struct fw_config *cfg, const struct fw_ct_key *key, __u32 hash,
				  struct ct_txn *t, struct ct_found *f, int *held)
{
#pragma unroll
	for (int try = 0; try < 2; try++) {
		if (!ct_lookup(cfg, key, t->now, f))
			return 0;
		*held = ct_lock(f->e);
		if (f->e->key_hash && f->e->key_hash != hash) {
			ct_unlock(f->e, *held);
			return 0;
		}
		if (!(f->e->status & FW_CTS_MOVED))
			return 1;
		ct_unlock(f->e, *held);
	}
	return 0;
}

/* Copies the locked entry into t (the lock word and all; it is not written
 * back), and lets it go. */
static __always_inline void ct_copy_out(struct ct_txn *t, const struct ct_found *f, int held)
{
	t->e = *f->e;
	t->version = f->e->version;
	t->est = f->est;
	ct_unlock(f->e, held);
}

/* A new connection's entry into the embryonic table; one another CPU
 * entered first stays. */
static __always_inline void ct_insert(const struct fw_ct_key *key, struct fw_ct_entry *e)
{
	e->lock = 0;
	e->version = 0;
	e->key_hash = ct_key_hash(key);
	if (bpf_map_update_elem(&fw_ct_new, key, e, BPF_NOEXIST) == 0)
		count(FW_C_CT_CREATED);
}

/* The entry a first packet fills, zeroed: t->e. */
static __always_inline struct fw_ct_entry *ct_fresh(struct ct_txn *t)
{
	__builtin_memset(&t->e, 0, sizeof(t->e));
	return &t->e;
}

/* An assured entry of the embryonic table moves to the established one,
 * which never evicts, if the table has room and the source its share; else
 * it stays, and tries again a second later. Called with e locked; lets it
 * go. t->e is free for the copy. */
static __always_inline void ct_promote(const struct fw_config *cfg, const struct fw_ct_key *key, struct ct_txn *t,
				       struct fw_ct_entry *e, int held)
{
	long err;

	if (!held || (e->status & (FW_CTS_ASSURED | FW_CTS_EST_TABLE | FW_CTS_MOVED)) != FW_CTS_ASSURED ||
	    t->now < e->promote_after_ns) {
		ct_unlock(e, held);
		return;
	}
	t->e = *e;
	t->e.lock = 0;
	t->e.status |= FW_CTS_EST_TABLE;
	if (!ct_src_take(cfg, key, e)) {
		e->promote_after_ns = t->now + 1000000000ULL;
		e->version++;
		ct_unlock(e, held);
		count(FW_C_CT_SRC_QUOTA);
		return;
	}
	err = bpf_map_update_elem(&fw_ct_est, key, &t->e, BPF_NOEXIST);
	if (err == 0 || err == -17 /* EEXIST: another CPU did */) {
		/* Whoever holds this copy finds it moved and looks again. */
		e->status |= FW_CTS_MOVED;
		ct_unlock(e, held);
		bpf_map_delete_elem(&fw_ct_new, key);
		if (err == 0)
			count(FW_C_CT_PROMOTED);
		else
			ct_src_release(cfg, key, e);
		return;
	}
	ct_src_release(cfg, key, e);
	e->promote_after_ns = t->now + 1000000000ULL;
	e->version++;
	ct_unlock(e, held);
	count(FW_C_CT_EST_FULL);
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
static __noinline int ct_read_tcp(FW_CTX *ctx, const struct fw_pkt *p, struct tcp_seg *s)
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
	if (fw_load_bytes(ctx, p->l4 + 20, o.opt, o.len))
		return 1;
	/* The common case, timestamps alone, has nothing for us. */
	if (o.len == 12 && o.opt[0] == 1 && o.opt[1] == 1 && o.opt[2] == 8 && o.opt[3] == 10)
		return 1;
	bpf_loop(40, tcp_option, &o, 0);
	return 1;
}

/* ct_tcp on an entry: a global function, so that the verifier checks the
 * state machine once, not once per path that leads here. Returns the
 * verdict; the new timeout and kill go to out. */
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

/* A segment of a connection the synproxy opened, as the entry counts it:
 * the client's acknowledgements come in the cookie's sequence space, the
 * entry keeps the server's (as Linux's seqadj offsets them). */
static __always_inline void ct_seqadj(const struct fw_ct_entry *e, __u32 dir, struct tcp_seg *s)
{
	if (!(e->status & FW_CTS_SYNPROXY) || e->state == FW_TCP_PROXY_SYN || dir)
		return;
	s->ack -= e->proxy_delta;
	s->sack -= e->proxy_delta;
}

/* The segment applied to an entry: state, windows, timeout, accounting.
 * Returns the verdict (enum ct_verdict); *kill when the entry is over. */
static __always_inline int ct_tcp_apply(struct fw_ct_entry *e, __u32 dir, struct tcp_seg *s,
					const struct fw_config *cfg, __u64 now, __u64 len, int *kill)
{
	struct ct_tcp_out out = {.now = now, .dir = dir};
	int res;

	ct_seqadj(e, dir, s);
	res = fw_ct_tcp(e, s, cfg, &out);
	if (res == CTV_IGNORE && (cfg->ct_flags & FW_CTF_STRICT))
		res = CTV_INVALID;
	if (res == CTV_ACCEPT || res == CTV_IGNORE) {
		if (dir)
			e->status |= FW_CTS_SEEN_REPLY;
		if (out.timeout)
			e->expires_ns = now + out.timeout;
		ct_account(e, dir, len);
	}
	*kill = out.kill;
	return res;
}

static __always_inline __u8 ct_track_tcp(FW_CTX *ctx, const struct fw_config *cfg, const struct fw_pkt *p,
				    struct ct_result *r, struct ct_txn *t)
{
	struct ct_found f;
	struct fw_ct_entry *e;
	struct ct_tcp_out out = {.now = t->now};
	__u64 len = t->len;
	int res, held = 0, kill;
	__u8 st = FW_CT_INVALID;

	if (!ct_read_tcp(ctx, p, &t->s))
		return FW_CT_INVALID;
	if (ct_get(cfg, &r->key, ct_key_hash(&r->key), t, &f, &held)) {
		out.dir = r->end != f.e->orig;
		ct_copy_out(t, &f, held);
		e = &t->e;
		t->dir = out.dir;
		/* The synproxy's (synproxy.h): the entry's handshake, and the
		 * shift of its sequence numbers. */
		r->status = e->status | CT_R_FOUND;
		r->dir = out.dir;
		r->proxy_delta = e->proxy_delta;
		if (e->state == FW_TCP_PROXY_SYN) {
			r->status |= CT_R_PROXY_SYN;
			return ct_seen_state(e, out.dir);
		}
		st = ct_seen_state(e, out.dir);
		res = ct_tcp_apply(e, out.dir, &t->s, cfg, t->now, len, &kill);
		if (res == CTV_IGNORE)
			count(FW_C_CT_IGNORED);
		if (res == CTV_INVALID)
			return FW_CT_INVALID;
		if (!held) {
			/* Read without the lock: no changes written. */
			count(FW_C_CT_BUSY);
			return st;
		}
		if (res != CTV_REOPEN) {
			r->commit = kill ? CT_KILL : CT_UPDATE;
			return st;
		}
		/* A SYN reopening a closed connection's tuple: a new one. */
		r->commit = CT_REOPEN;
		r->status = 0;
	}

	/* No entry: the packet may open one (tcp_new). */
	e = ct_fresh(t);
	if (!ct_tcp_new(e, &t->s, cfg->ct_flags))
		return FW_CT_INVALID;
	e->orig = r->end;
	out.dir = 0;
	res = fw_ct_tcp(e, &t->s, cfg, &out);
	if (res != CTV_ACCEPT || out.kill) {
		if (r->commit == CT_REOPEN)
			r->commit = CT_KILL;
		return res == CTV_INVALID ? FW_CT_INVALID : FW_CT_NEW;
	}
	e->expires_ns = t->now + out.timeout;
	e->start_ns = t->now;
	ct_account(e, 0, len);
	if (r->commit != CT_REOPEN)
		r->commit = CT_CREATE;
	return FW_CT_NEW;
}

/* A packet of a pseudo-connection (UDP, other protocols, ICMP requests and
 * replies) applied to its entry: new until answered; answered and alive
 * after 2 s, a stream (GRE: once answered). Only UDP becomes assured
 * (Linux assures no generic or ICMP entry; GRE it does, but an assured
 * entry here moves to the table that never evicts, which a tunnel's
 * spoofed answers must not fill). */
static __always_inline void ct_stream_apply(const struct fw_config *cfg, struct fw_ct_entry *e, __u32 dir, __u8 proto,
					    __u64 now, __u32 t_unreplied, __u32 t_stream, __u64 len)
{
	/* Answered before this packet, and still alive after 2 s. */
	int stream = (e->status & FW_CTS_SEEN_REPLY) && (proto == IPPROTO_GRE || now > e->start_ns + CT_STREAM_AFTER_NS);

	e->expires_ns = now + ct_timeout(cfg, stream ? t_stream : t_unreplied);
	if (stream && (proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE))
		e->status |= FW_CTS_ASSURED;
	if (dir)
		e->status |= FW_CTS_SEEN_REPLY;
	ct_account(e, dir, len);
}

/* The pseudo-connections' tracking: an entry found is copied and the
 * packet applied to the copy; none: a new one, for a packet that may open
 * it (not an ICMP reply). */
static __noinline __u8 ct_track_stream(const struct fw_config *cfg, struct ct_result *r, __u32 t_unreplied,
				       __u32 t_stream, int may_open)
{
	struct ct_txn *t = ct_txn();
	struct ct_found f;
	struct fw_ct_entry *e;
	int held = 0;
	__u32 dir;
	__u8 st;

	if (!t)
		return FW_CT_INVALID;
	t->t_unreplied = t_unreplied;
	t->t_stream = t_stream;
	if (ct_get(cfg, &r->key, ct_key_hash(&r->key), t, &f, &held)) {
		dir = r->end != f.e->orig;
		ct_copy_out(t, &f, held);
		t->dir = dir;
		st = ct_seen_state(&t->e, dir);
		ct_stream_apply(cfg, &t->e, dir, r->key.proto, t->now, t_unreplied, t_stream, t->len);
		if (held)
			r->commit = CT_UPDATE;
		else
			count(FW_C_CT_BUSY);
		return st;
	}
	if (!may_open)
		return FW_CT_INVALID; /* an answer to nothing */
	e = ct_fresh(t);
	e->orig = r->end;
	e->start_ns = t->now;
	e->expires_ns = t->now + ct_timeout(cfg, t_unreplied);
	ct_account(e, 0, t->len);
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

/* ICMPv6 that conntrack leaves untracked: neighbour discovery, MLD and
 * multicast router advertisements and solicitations (noct_valid_new;
 * not terminations, 153). */
static __always_inline int icmp6_untracked(__u8 type)
{
	return (type >= 130 && type <= 136) || type == 143 || type == 151 || type == 152;
}

/* An ICMP error is related when it quotes a packet of a tracked
 * connection and goes to that packet's sender (nf_conntrack_inet_error). */
static __noinline __u8 ct_related(FW_CTX *ctx, const struct fw_config *cfg, const struct fw_flow_key *k,
				       const struct fw_pkt *p)
{
	struct ct_txn *t = ct_txn();
	struct ct_found f;
	__u32 off = p->l4 + 8, end = p->l4 + p->l4_len, l4;
	__u16 sport = 0, dport = 0;
	int call;

	if (!t)
		return FW_CT_INVALID;
	/* Per CPU, not on the stack: this runs three calls deep. */
	__u8 *hdr = t->quote;
	struct fw_flow_key *in = &t->in;
	struct ct_result *q = &t->q;
	__builtin_memset(in, 0, sizeof(*in));
	__builtin_memset(q, 0, sizeof(*q));
	in->family = k->family;
	if (k->family == FW_FAMILY_IPV4) {
		__u32 ihl;

		if (fw_load_bytes(ctx, off, hdr, 20))
			return FW_CT_INVALID;
		/* Neither conntrack nor we look at the version; a later
		 * fragment has no L4 header to key. */
		ihl = (hdr[0] & 0xf) * 4;
		if (ihl < 20 || (hdr[6] & 0x1f) || hdr[7])
			return FW_CT_INVALID;
		in->proto = hdr[9];
		in->src[2] = bpf_htonl(0xffff);
		in->dst[2] = bpf_htonl(0xffff);
		in->src[3] = *(__u32 *)&hdr[12];
		in->dst[3] = *(__u32 *)&hdr[16];
		l4 = off + ihl;
	} else {
		if (fw_load_bytes(ctx, off, hdr, 40))
			return FW_CT_INVALID;
		in->proto = hdr[6];
		__builtin_memcpy(in->src, &hdr[8], 16);
		__builtin_memcpy(in->dst, &hdr[24], 16);
		l4 = ct_quote6_l4(ctx, off + 40, end, &in->proto);
		if (!l4)
			return FW_CT_INVALID;
	}
	/* Of the quoted packet's L4 header, what conntrack keys it by must
	 * lie within the error (by its IP length): the ports, or ICMP's
	 * 8 bytes. */
	if (ct_has_ports(in->proto)) {
		if (l4 + 4 > end || fw_load_bytes(ctx, l4, hdr, 4))
			return FW_CT_INVALID;
		sport = (__u16)hdr[0] << 8 | hdr[1];
		dport = (__u16)hdr[2] << 8 | hdr[3];
		ct_key_ordered(q, in, sport, dport);
	} else if ((k->family == FW_FAMILY_IPV4 && in->proto == IPPROTO_ICMP) ||
		   (k->family == FW_FAMILY_IPV6 && in->proto == IPPROTO_ICMPV6)) {
		int is_reply;
		__u8 req;

		if (l4 + 8 > end || fw_load_bytes(ctx, l4, hdr, 8))
			return FW_CT_INVALID;
		req = icmp_request_of(k->family, hdr[0], &is_reply);
		if (!req)
			return FW_CT_INVALID; /* an error about an error */
		q->key.proto = in->proto;
		q->key.family = in->family;
		__builtin_memcpy(q->key.addr[0], is_reply ? in->dst : in->src, 16);
		__builtin_memcpy(q->key.addr[1], is_reply ? in->src : in->dst, 16);
		q->key.port[0] = (__u16)hdr[4] << 8 | hdr[5];
		q->key.port[1] = req;
		q->key.code = hdr[1];
	} else {
		call = in->proto == IPPROTO_GRE && l4 < end ? ct_gre_call(ctx, l4, end - l4) : 0;
		if (call < 0)
			return FW_CT_INVALID;
		ct_key_ordered(q, in, 0, call);
	}
	if (!ct_lookup(cfg, &q->key, ct_now(cfg), &f))
		return FW_CT_INVALID;
	/* The error goes back to the quoted packet's sender. */
	if (k->dst[0] != in->src[0] || k->dst[1] != in->src[1] || k->dst[2] != in->src[2] || k->dst[3] != in->src[3])
		return FW_CT_INVALID;
	return FW_CT_RELATED;
}

/* ct_track_icmp's answer for a query or its reply, keyed in r: tracked as
 * a stream by the caller (a call less deep: the stack has no room). */
#define CT_ICMP_QUERY 0xff

/* An ICMP packet's state if it is an error or untracked, else
 * CT_ICMP_QUERY with its key in r. */
static __noinline __u8 ct_track_icmp(FW_CTX *ctx, const struct fw_config *cfg, const struct fw_flow_key *k,
				     const struct fw_pkt *p, struct ct_result *r)
{
	__u8 icmp[8], req;
	int is_reply;

	if (p->l4_len < 8 || fw_load_bytes(ctx, p->l4, icmp, sizeof(icmp)))
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
	__builtin_memcpy(r->key.addr[0], is_reply ? k->dst : k->src, 16);
	__builtin_memcpy(r->key.addr[1], is_reply ? k->src : k->dst, 16);
	r->key.port[0] = (__u16)icmp[4] << 8 | icmp[5];
	r->key.port[1] = req;
	r->key.code = icmp[1];
	/* The request's sender is end 0 of the key: end is the direction. */
	r->end = is_reply;
	return CT_ICMP_QUERY;
}

/* A first fragment is tracked as its datagram: a UDP datagram's bytes by
 * its header's length. */
static __always_inline void ct_first_fragment(FW_CTX *ctx, const struct fw_flow_key *k, const struct fw_pkt *p,
					      struct ct_txn *t)
{
	__u16 ulen;

	if (k->proto != IPPROTO_UDP || fw_load_bytes(ctx, p->l4 + 4, &ulen, sizeof(ulen)))
		return;
	ulen = bpf_ntohs(ulen);
	if (ulen > p->l4_len)
		t->len += ulen - p->l4_len;
}

/* What the first fragment's state was is the datagram's. */
static __always_inline void ct_note_fragment(struct ct_txn *t, __u8 st)
{
	struct fw_frag *fr = bpf_map_lookup_elem(&fw_frags, &t->fk);

	if (fr)
		fr->ct_state = st;
}

/* A later fragment has its datagram's state; untracked if its first
 * fragment was not seen (lost, late, or evicted by a flood). */
static __always_inline __u8 ct_later_fragment(struct ct_txn *t)
{
	struct fw_frag *fr = bpf_map_lookup_elem(&fw_frags, &t->fk);

	if (!fr || !fr->ct_state || fr->expires_ns <= t->now)
		return FW_CT_UNTRACKED;
	return fr->ct_state;
}

/* The packet's ct state. A global function: the verifier checks it once,
 * and the rules after it once rather than once per state it can return.
 * Later fragments carry no L4 header and are untracked (conntrack sees
 * reassembled packets; an XDP program sees fragments). */
__attribute__((noinline)) int fw_track_conn(FW_CTX *ctx, const struct fw_config *cfg,
					    const struct fw_flow_key *k, const struct fw_pkt *p, struct ct_result *r)
{
	struct ct_txn *t = ct_txn();
	int chk;
	__u8 st;

	if (!ctx || !cfg || !k || !p || !r || !t)
		return FW_CT_INVALID;
	t->now = ct_now(cfg);
	t->len = r->len;
	if (p->frag == PKT_FRAG_FIRST)
		ct_first_fragment(ctx, k, p, t);
	if (p->frag == PKT_FRAG_LATER)
		st = ct_later_fragment(t);
	else if (k->noports)
		st = FW_CT_UNTRACKED;
	else if ((chk = ct_check(ctx, k, p)) == FW_CT_INVALID)
		st = FW_CT_INVALID;
	else if (k->proto == IPPROTO_TCP) {
		ct_key_ordered(r, k, k->sport, k->dport);
		st = ct_track_tcp(ctx, cfg, p, r, t);
	} else if (k->proto == IPPROTO_UDP || k->proto == IPPROTO_UDPLITE) {
		ct_key_ordered(r, k, k->sport, k->dport);
		st = ct_track_stream(cfg, r, FW_CTT_UDP, FW_CTT_UDP_STREAM, 1);
	} else if ((k->family == FW_FAMILY_IPV4 && k->proto == IPPROTO_ICMP) ||
		   (k->family == FW_FAMILY_IPV6 && k->proto == IPPROTO_ICMPV6)) {
		st = ct_track_icmp(ctx, cfg, k, p, r);
		if (st == CT_ICMP_QUERY)
			st = ct_track_stream(cfg, r, FW_CTT_ICMP, FW_CTT_ICMP, !r->end);
	} else {
		ct_key_generic(ctx, k, p, r);
		if (k->proto == IPPROTO_GRE)
			st = ct_track_stream(cfg, r, FW_CTT_GRE, FW_CTT_GRE_STREAM, 1);
		else
			st = ct_track_stream(cfg, r, FW_CTT_GENERIC, FW_CTT_GENERIC, chk != CT_CHECK_NO_NEW);
	}
	if (p->frag == PKT_FRAG_FIRST)
		ct_note_fragment(t, st);
	ct_count_state(st);
	return st;
}

/* Step 4: the packet's ct state, into k->ct_state (0 with conntrack off). */
static __always_inline void track_conn(FW_CTX *ctx, const struct fw_config *cfg, struct fw_flow_key *k,
				       const struct fw_pkt *p, struct ct_result *r, __u64 len)
{
	r->commit = CT_NONE;
	r->status = 0;
	r->state = 0;
	r->len = len;
	if (!(cfg->ct_flags & FW_CTF_ON))
		return;
	k->ct_state = fw_track_conn(ctx, cfg, k, p, r);
	r->state = k->ct_state;
}

/* The found entry, locked, to write to: what the packet made of a copy
 * goes back if no other CPU wrote meanwhile, else the packet is applied
 * again to what that CPU left. */
static __always_inline void ct_write_back(const struct fw_config *cfg, const struct fw_ct_key *key, struct ct_txn *t,
					  struct ct_found *f, int held)
{
	struct fw_ct_entry *e = f->e;
	__u32 lock, version;
	int kill = 0;

	if (e->version == t->version) {
		lock = e->lock;
		version = e->version + 1;
		*e = t->e;
		e->lock = lock;
		e->version = version;
	} else if (key->proto == IPPROTO_TCP) {
		/* t->s was shifted for the copy already: undo, it is done again. */
		if ((e->status & FW_CTS_SYNPROXY) && e->state != FW_TCP_PROXY_SYN && !t->dir) {
			t->s.ack += e->proxy_delta;
			t->s.sack += e->proxy_delta;
		}
		ct_tcp_apply(e, t->dir, &t->s, cfg, t->now, t->len, &kill);
		e->version++;
	} else {
		ct_stream_apply(cfg, e, t->dir, key->proto, t->now, t->t_unreplied, t->t_stream, t->len);
		e->version++;
	}
	if (kill) {
		ct_unlock(e, held);
		ct_delete(cfg, key, f);
		return;
	}
	if (f->est) {
		ct_unlock(e, held);
		return;
	}
	ct_promote(cfg, key, t, e, held);
}

/* After the rules: what a packet they pass does to the tables. */
__attribute__((noinline)) int fw_ct_commit(const struct fw_config *cfg, const struct ct_result *r)
{
	struct ct_txn *t = ct_txn();
	struct ct_found f;
	int held = 0;

	if (!cfg || !r || !t)
		return 0;
	switch (r->commit) {
	case CT_CREATE:
		ct_insert(&r->key, &t->e);
		return 0;
	case CT_UPDATE:
	case CT_KILL:
	case CT_REOPEN:
		break;
	default:
		return 0;
	}
	if (!ct_get(cfg, &r->key, ct_key_hash(&r->key), t, &f, &held))
		goto create;
	if (!held) {
		count(FW_C_CT_BUSY);
		return 0;
	}
	if (r->commit == CT_UPDATE) {
		ct_write_back(cfg, &r->key, t, &f, held);
		return 0;
	}
	ct_unlock(f.e, held);
	ct_delete(cfg, &r->key, &f);
create:
	if (r->commit == CT_REOPEN)
		ct_insert(&r->key, &t->e);
	return 0;
}

#ifndef FW_EGRESS
/* The reaper's run: the request and where it is in it. */
struct ct_reap {
	struct xdp_md *ctx;
	const struct fw_config *cfg;
	struct fw_ct_reap_hdr h;
	__u64 now;
};

/* One key of the request: deleted if its entry, read under the lock, has
 * expired. A key whose entry was deleted and made anew since the caller
 * read it keeps the new one (it has not expired). */
static long ct_reap_one(__u64 i, void *data)
{
	struct ct_reap *rp = data;
	struct fw_ct_key key;
	struct ct_found f = {.est = rp->h.est != 0};
	int held, dead;

	if (i >= rp->h.n || i >= FW_CT_REAP_MAX)
		return 1;
	if (bpf_xdp_load_bytes(rp->ctx, sizeof(rp->h) + i * sizeof(key), &key, sizeof(key)))
		return 1;
	f.e = bpf_map_lookup_elem(f.est ? (void *)&fw_ct_est : (void *)&fw_ct_new, &key);
	if (!f.e)
		return 0;
	held = ct_lock(f.e);
	dead = rp->h.flush || (held && f.e->expires_ns <= rp->now && !(f.e->status & FW_CTS_MOVED));
	ct_unlock(f.e, held);
	if (dead) {
		ct_delete(rp->cfg, &key, &f);
		rp->h.reaped++;
	}
	return 0;
}

static __always_inline int ct_reap(struct xdp_md *ctx, const struct fw_config *cfg)
{
	struct ct_reap rp = {.ctx = ctx, .cfg = cfg};

	if (bpf_xdp_load_bytes(ctx, 0, &rp.h, sizeof(rp.h)))
		return XDP_ABORTED;
	rp.h.reaped = 0;
	rp.now = ct_now(cfg);
	bpf_loop(FW_CT_REAP_MAX, ct_reap_one, &rp, 0);
	if (bpf_xdp_store_bytes(ctx, 0, &rp.h, sizeof(rp.h)))
		return XDP_ABORTED;
	return XDP_PASS;
}
#endif

static __always_inline void ct_confirm(const struct fw_config *cfg, const struct ct_result *r)
{
	if (r->commit != CT_NONE)
		fw_ct_commit(cfg, r);
}

#endif
