/* The XDP firewall: exact-flow blocking, per-source rate limits, and rules of
 * AND-combined prefixes, protocol and port ranges, first match wins.
 *
 * A flow's verdict is cached in a per-CPU set-associative flow cache that
 * also holds its counters: a packet of a cached flow costs one set's read.
 * A new flow is classified without walking the rules: each rule is anchored
 * on one field (see fw_shared.h), and a packet checks only the rules
 * anchored on its own addresses, ports, or family and protocol. Finding
 * them takes a fixed number of array reads: a /16 index and a short binary
 * search per address, a 17-bit mask per port, and one parent per shorter
 * anchor prefix that covers the address. */
#include "common.h"
#include "parse.h"
#include <linux/tcp.h>
#include "fw_shared.h"

/* What the parser and conntrack read packets from: XDP's context, or TC's
 * for the host's own packets (fw_egress.c). */
#ifndef FW_CTX
#define FW_CTX struct xdp_md
#define fw_load_bytes bpf_xdp_load_bytes
#endif

/* Sets of each flow cache, per CPU; --max-flows sets it at load. */
#ifndef FW_FLOW_SETS
#define FW_FLOW_SETS 4096
#endif
#ifndef FW_MAX_BLOCKED
#define FW_MAX_BLOCKED 65536
#endif
#ifndef FW_MAX_SOURCES
#define FW_MAX_SOURCES 65536
#endif
/* IPv6 extension headers walked before giving up on finding the ports. */
#define FW_MAX_EXT_HDRS 6
/* Steps of a binary search over at most 2^20 intervals: 2 per anchor
 * prefix, 2^18 rules. */
#define FW_SEARCH_STEPS 21
/* Anchor prefixes that can cover one address: one per length. */
#define FW_MAX_NEST4 33
#define FW_MAX_NEST6 129

/* Rate limits and the flow caches' size; array of one. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fw_config);
} fw_conf SEC(".maps");

/* The active rule set's generation; its slot is gen & 1. Written last by a
 * swap, in one aligned 4-byte store. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} fw_gen SEC(".maps");

/* Packets per reason. The key's type carries the reasons' names to Go. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_C_MAX);
	__type(key, enum fw_counter);
	__type(value, __u64);
} fw_counters SEC(".maps");

/* The flow table: FW_FLOW_SETS sets per CPU, CPU c's at c * sets. A plain
 * array rather than a per-CPU one: a per-CPU array allocates each value on
 * its own, so random sets cost a TLB miss each; here a CPU's sets are one
 * contiguous range. No two CPUs write the same set. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_FLOW_SETS);
	__type(key, __u32);
	__type(value, struct fw_flow_set);
} fw_flows SEC(".maps");

/* The tags of the flow table's sets, at the same index: 16 bytes a set, so
 * that every packet's first read stays in cache. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_FLOW_SETS);
	__type(key, __u32);
	__type(value, struct fw_flow_tags);
} fw_tags SEC(".maps");

/* Flows blocked by the operator (fw block). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FW_MAX_BLOCKED);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct fw_flow_key);
	__type(value, struct fw_block);
} fw_blocked SEC(".maps");

/* Per-rule counters of both slots (see FW_STATS_SLOT_SHIFT): an array, so
 * that counting is a few instructions the verifier inlines. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_SLOTS << FW_STATS_SLOT_SHIFT);
	__type(key, __u32);
	__type(value, struct fw_rule_stats);
} fw_stats SEC(".maps");

/* The two overlays (see struct fw_overlay). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_SLOTS);
	__type(key, __u32);
	__type(value, struct fw_overlay);
} fw_overlays SEC(".maps");

/* Each overlay's added rules: overlay o's at o * FW_MAX_ADDED. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_SLOTS * FW_MAX_ADDED);
	__type(key, __u32);
	__type(value, struct fw_rule);
} fw_added SEC(".maps");

/* Each overlay's deleted ids, a bit each: overlay o's at o * FW_DEAD_WORDS. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_SLOTS * FW_DEAD_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} fw_dead SEC(".maps");

/* Rate-limit state per source address (IPv4-mapped for IPv4). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FW_MAX_SOURCES);
	__type(key, __u32[4]);
	__type(value, struct fw_rate);
} fw_rates SEC(".maps");

/* The two rule-set slots. Each outer array holds one map per slot; a rule set
 * is built in the slot the data path does not use, then fw_gen flips. Inner
 * definitions give sizes rather than types: clang emits the types of these
 * never-instantiated structs as forward declarations, which loaders cannot
 * size. Fixed-size inner arrays leave out BPF_F_INNER_MAP so that the
 * verifier inlines their lookups; the others are sized per rule set. */
struct fw_sets {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_set));
};

/* The class of each IPv4 /16 and direction, a nibble each (FW_CLS4_FLOOR). */
struct fw_cls4s {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 << 12);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u64));
};

/* The search tree's node that holds all the intervals of each IPv4 /16 and
 * direction, + 1 (0: they span two): source at 0, destination at 65536. */
struct fw_leaf4s {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 << 16);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
};

/* The IPv4 search trees of both directions (struct fw_snode4). */
struct fw_snode4s {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_snode4));
};

struct fw_ivl6s {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_ivl6));
};

struct fw_nodes {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_node));
};

struct fw_wilds {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * FW_WILD_PER_FAMILY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_span));
};

/* Per port, the levels whose block holds rules: levels 0-10 per
 * port >> FW_PORT_WIDE_SHIFT (struct fw_pwide), levels 11-16 per port (bits
 * 0-5). There is one tree per direction and protocol (port_tree), one after
 * the other. */
struct fw_pwides {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_PORT_TREES << (16 - FW_PORT_WIDE_SHIFT));
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_pwide));
};

struct fw_pnarrows {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_PORT_TREES << 16);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u8));
};

/* Spans of the port blocks: tree t's at t * FW_PORT_BLOCKS. */
struct fw_pblocks {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_PORT_TREES * FW_PORT_BLOCKS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_span));
};

/* The spans' rules, whole, so that checking one costs one read. */
struct fw_cands {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_rule));
};

/* The hulls of the candidates' blocks, level by level (fw_set.hull_base). */
struct fw_hulls {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_rule));
};

/* The rules by id, for reading the set back. */
struct fw_rules {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_rule));
};

/* One instance of each type the control plane writes into the slot maps, so
 * that BTF holds their full layouts for Go. Never read. */
struct {
	struct fw_span span;
	struct fw_range range;
	struct fw_pwide pwide;
	struct fw_snode4 snode4;
	struct fw_ivl6 ivl6;
	struct fw_node node;
	struct fw_rule rule;
	struct fw_set set;
	struct fw_rule_stats stats;
	struct fw_flow_set flow;
	struct fw_flow_tags tags;
	struct fw_ct_key ct_key;
	struct fw_ct_entry ct_entry;
	enum fw_ct_state ct_state;
	enum fw_ct_flag ct_flag;
	enum fw_ct_status ct_status;
	enum fw_tcp_state tcp_state;
	enum fw_ct_timeout ct_timeout;
	struct fw_ct_reap_hdr ct_reap;
	enum fw_ct_reap_limit ct_reap_limit;
} fw_btf_types;

#define FW_SLOT_MAP(name, inner)                        \
	struct {                                        \
		__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS); \
		__uint(max_entries, FW_SLOTS);          \
		__type(key, __u32);                     \
		__array(values, struct inner);          \
	} name SEC(".maps")

FW_SLOT_MAP(fw_set_slots, fw_sets);
FW_SLOT_MAP(fw_cls4_slots, fw_cls4s);
FW_SLOT_MAP(fw_leaf4_slots, fw_leaf4s);
FW_SLOT_MAP(fw_snode4_slots, fw_snode4s);
FW_SLOT_MAP(fw_ivl6_slots, fw_ivl6s);
FW_SLOT_MAP(fw_node_slots, fw_nodes);
FW_SLOT_MAP(fw_wild_slots, fw_wilds);
FW_SLOT_MAP(fw_pwide_slots, fw_pwides);
FW_SLOT_MAP(fw_pnarrow_slots, fw_pnarrows);
FW_SLOT_MAP(fw_pblock_slots, fw_pblocks);
FW_SLOT_MAP(fw_cand_slots, fw_cands);
FW_SLOT_MAP(fw_hull_slots, fw_hulls);
FW_SLOT_MAP(fw_rule_slots, fw_rules);

static __always_inline void count(enum fw_counter reason)
{
	__u32 key = reason;
	__u64 *c = bpf_map_lookup_elem(&fw_counters, &key);

	if (c)
		*c += 1;
}

#include "ct.h"
#include "frag.h"
#ifndef FW_EGRESS
#include "synproxy.h"
#endif

static __always_inline void *slot_map(void *outer, __u32 slot)
{
	return bpf_map_lookup_elem(outer, &slot);
}

/* Step 1: the flow key. Non-IP frames are the kernel's business (ARP must
 * work); IP packets whose headers are cut short are dropped, since no rule
 * could be checked against them. */
static __always_inline int parse_flow(FW_CTX *ctx, struct fw_flow_key *k, struct fw_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *l4;
	__u16 proto;
	int frag_later = 0;

	if (!PKT_HAS(eth, sizeof(*eth), end))
		return XDP_DROP;
	proto = eth->h_proto;
	data = eth + 1;
	/* Up to two VLAN tags (802.1ad outer, 802.1Q inner). */
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if (!PKT_HAS(data, 4, end))
			return XDP_DROP;
		proto = *(__u16 *)(data + 2);
		data += 4;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data;

		if (!PKT_HAS(ip, sizeof(*ip), end) || ip->ihl < 5)
			return XDP_DROP;
		k->family = FW_FAMILY_IPV4;
		k->proto = ip->protocol;
		k->src[2] = bpf_htonl(0xffff);
		k->src[3] = ip->saddr;
		k->dst[2] = bpf_htonl(0xffff);
		k->dst[3] = ip->daddr;
		/* Fragments after the first carry no ports. */
		frag_later = ip->frag_off & bpf_htons(0x1fff);
		p->frag = frag_later ? PKT_FRAG_LATER : ipv4_is_fragment(ip) ? PKT_FRAG_FIRST : PKT_FRAG_NONE;
		p->frag_id = ip->id;
		l4 = data + ip->ihl * 4;
		p->l4_len = bpf_ntohs(ip->tot_len) > ip->ihl * 4 ? bpf_ntohs(ip->tot_len) - ip->ihl * 4 : 0;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data;
		__u8 next;

		if (!PKT_HAS(ip6, sizeof(*ip6), end))
			return XDP_DROP;
		k->family = FW_FAMILY_IPV6;
		__builtin_memcpy(k->src, &ip6->saddr, 16);
		__builtin_memcpy(k->dst, &ip6->daddr, 16);
		next = ip6->nexthdr;
		l4 = ip6 + 1;
#pragma unroll
		for (int i = 0; i < FW_MAX_EXT_HDRS; i++) {
			__u8 *h = l4;

			if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING && next != IPPROTO_DSTOPTS &&
			    next != IPPROTO_FRAGMENT && next != IPPROTO_AH)
				break;
			if (!PKT_HAS(h, 8, end))
				return XDP_DROP;
			if (next == IPPROTO_FRAGMENT) {
				frag_later = *(__u16 *)(h + 2) & bpf_htons(0xfff8);
				p->frag = frag_later ? PKT_FRAG_LATER : PKT_FRAG_FIRST;
				p->frag_id = *(__u32 *)(h + 4);
				l4 = h + 8;
				/* A later fragment's data is no header. */
				if (frag_later) {
					next = h[0];
					break;
				}
			} else if (next == IPPROTO_AH) {
				l4 = h + (h[1] + 2) * 4;
			} else {
				l4 = h + (h[1] + 1) * 8;
			}
			next = h[0];
		}
		/* More extension headers than we follow: the protocol is not
		 * known, and a rule on it could be slipped past (Linux follows
		 * them all to TCP, say). What cannot be parsed to its end is
		 * dropped. */
		if (!frag_later && (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS ||
				    next == IPPROTO_FRAGMENT || next == IPPROTO_AH))
			return XDP_DROP;
		k->proto = next;
		{
			__u32 ext = l4 - (void *)(ip6 + 1), plen = bpf_ntohs(ip6->payload_len);

			p->l4_len = plen > ext ? plen - ext : 0;
		}
	} else {
		return XDP_PASS;
	}

	{
		/* The full difference first: clang would otherwise keep a
		 * pointer's low half for it, which the verifier refuses. */
		__u64 off = l4 - (void *)(long)ctx->data;

		asm volatile("" : "+r"(off));
		p->l4 = off;
	}
	if (frag_later) {
		k->noports = 1;
		return CONTINUE;
	}
	/* The protocols whose first four bytes are ports, for rules and for
	 * conntrack's keys (Linux keys SCTP and UDP-Lite by them too; DCCP
	 * by addresses alone: ct_has_ports). */
	if (k->proto != IPPROTO_TCP && k->proto != IPPROTO_UDP && k->proto != IPPROTO_UDPLITE &&
	    k->proto != IPPROTO_SCTP && k->proto != IPPROTO_DCCP)
		return CONTINUE;
	if (!PKT_HAS(l4, 4, end))
		return XDP_DROP;
	k->sport = bpf_ntohs(*(__u16 *)l4);
	k->dport = bpf_ntohs(*(__u16 *)(l4 + 2));
	return CONTINUE;
}

/* Step 2: flows the operator blocked, until their expiry. */
static __always_inline int check_blocked_flow(const struct fw_config *cfg, const struct fw_flow_key *k, __u64 len)
{
	struct fw_block *b;

	if (!cfg->blocked)
		return CONTINUE;
	b = bpf_map_lookup_elem(&fw_blocked, k);
	if (!b || (b->expires_ns && bpf_ktime_get_coarse_ns() >= b->expires_ns))
		return CONTINUE;
	__sync_fetch_and_add(&b->packets, 1);
	__sync_fetch_and_add(&b->bytes, len);
	count(FW_C_DROP_BLOCKED);
	return XDP_DROP;
}

/* Step 3: per-source rate limits over fixed one-second windows. A source
 * that crosses a threshold is dropped for rate_block_ns, then counted
 * afresh. */
static __always_inline int check_rate_limit(const struct fw_config *cfg, const struct fw_flow_key *k, __u64 len)
{
	struct fw_rate *r;
	__u64 pkts, bytes, now;

	if (!cfg->rate_pps && !cfg->rate_bps)
		return CONTINUE;
	now = bpf_ktime_get_coarse_ns();
	r = bpf_map_lookup_elem(&fw_rates, k->src);
	if (!r) {
		struct fw_rate fresh = {.window_start = now};

		bpf_map_update_elem(&fw_rates, k->src, &fresh, BPF_NOEXIST);
		r = bpf_map_lookup_elem(&fw_rates, k->src);
		if (!r)
			return CONTINUE;
	}
	if (r->blocked_until > now) {
		__sync_fetch_and_add(&r->dropped, 1);
		count(FW_C_DROP_RATE);
		return XDP_DROP;
	}
	if (now - r->window_start >= FW_RATE_WINDOW_NS) {
		r->window_start = now;
		r->packets = 0;
		r->bytes = 0;
	}
	pkts = __sync_fetch_and_add(&r->packets, 1) + 1;
	bytes = __sync_fetch_and_add(&r->bytes, len) + len;
	if ((cfg->rate_pps && pkts > cfg->rate_pps) || (cfg->rate_bps && bytes * 8 > cfg->rate_bps)) {
		/* A fresh window opens when the block ends. */
		r->blocked_until = now + cfg->rate_block_ns;
		r->window_start = r->blocked_until;
		r->packets = 0;
		r->bytes = 0;
		__sync_fetch_and_add(&r->trips, 1);
		__sync_fetch_and_add(&r->dropped, 1);
		count(FW_C_RATE_TRIPS);
		count(FW_C_DROP_RATE);
		return XDP_DROP;
	}
	return CONTINUE;
}

static __always_inline int addr_in(const __u32 *a, const __u32 *net, const __u32 *mask)
{
	return (a[0] & mask[0]) == net[0] && (a[1] & mask[1]) == net[1] && (a[2] & mask[2]) == net[2] &&
	       (a[3] & mask[3]) == net[3];
}

static __always_inline int rule_matches(const struct fw_rule *r, const struct fw_flow_key *k)
{
	if (r->family && r->family != k->family)
		return 0;
	if (r->proto && r->proto != k->proto)
		return 0;
	if (r->ct_states && !(r->ct_states & k->ct_state))
		return 0;
	if ((r->flags & FW_RULE_PORTS) && k->noports)
		return 0;
	if (k->sport < r->sport_lo || k->sport > r->sport_hi)
		return 0;
	if (k->dport < r->dport_lo || k->dport > r->dport_hi)
		return 0;
	return addr_in(k->src, r->src_net, r->src_mask) && addr_in(k->dst, r->dst_net, r->dst_mask);
}

struct scan {
	struct fw_flow_key key;
	/* The slot of the installed set's maps, and the overlay. */
	__u32 slot;
	__u32 overlay;
	/* The span being scanned: candidates [start, end), and the hull level
	 * to try at start (long_step). */
	__u32 start;
	__u32 end;
	__u32 lvl;
	/* The match so far: the lowest prio (~0 while none), its rule's id
	 * and action. */
	__u32 best;
	__u32 rule;
	__u32 action;
	/* The anchor prefix node whose rules are next (scan_nodes). */
	__u32 node;
	/* The port and its levels still to scan, and the lowest prio of each
	 * level of its tree (scan_port). */
	__u32 port;
	__u32 levels;
	const __u32 *first;
};

/* Candidates checked per bpf_loop iteration: the callback is an indirect
 * call, which costs more than checking a rule. */
#define FW_CHUNK 8

static __always_inline int is_dead(const struct scan *s, __u32 id)
{
	__u32 key = s->overlay * FW_DEAD_WORDS + (id >> 6);
	__u64 *w = bpf_map_lookup_elem(&fw_dead, &key);

	return w && (*w & (1ULL << (id & 63)));
}

/* Checks one candidate: 1 ends its span (a match, or a prio above the best
 * so far: spans are ascending), 0 goes on. */
static __always_inline int check(struct scan *s, const struct fw_rule *r, int base)
{
	if (!r || r->prio >= s->best)
		return 1;
	if (!rule_matches(r, &s->key) || (base && is_dead(s, r->id)))
		return 0;
	s->best = r->prio;
	s->rule = r->id;
	s->action = r->action;
	return 1;
}

/* FW_CHUNK candidates of a span of the installed set. The slot's map is
 * looked up here rather than passed in: bpf_loop hands the callback only a
 * stack pointer (the outer lookup is inlined). */
static long scan_candidates(__u64 i, void *data)
{
	struct scan *s = data;
	void *cands = slot_map(&fw_cand_slots, s->slot);
	__u32 idx = s->start + (__u32)i * FW_CHUNK;

	if (!cands)
		return 1;
	for (int j = 0; j < FW_CHUNK; j++, idx++) {
		if (idx >= s->end || check(s, bpf_map_lookup_elem(cands, &idx), 1))
			return 1;
	}
	return 0;
}

/* The highest hull level whose block starts at pos and lies within the
 * span: its hull holds only the span's rules. */
static __always_inline __u32 hull_level(__u32 pos, __u32 end)
{
	__u32 left = end - pos, l = 0;

#pragma unroll
	for (int k = 1; k <= FW_HULL_LEVELS; k++) {
		__u32 size = 1U << (FW_HULL_SHIFT * k);

		if ((pos & (size - 1)) || left < size)
			break;
		l = k;
	}
	return l;
}

/* One step of a long span's scan, at candidate s->start: the hull of the
 * block at level s->lvl, which the packet misses (skip the block) or may
 * match (a level down), or at level 0 the candidate itself. */
static long long_step(__u64 i, void *data)
{
	struct scan *s = data;
	void *cands = slot_map(&fw_cand_slots, s->slot);
	void *hulls = slot_map(&fw_hull_slots, s->slot);
	void *sets = slot_map(&fw_set_slots, s->slot);
	__u32 pos = s->start, l = s->lvl, key = 0;
	struct fw_set *set = sets ? bpf_map_lookup_elem(sets, &key) : NULL;

	if (!cands || !hulls || !set || pos >= s->end || l > FW_HULL_LEVELS)
		return 1;
	if (l) {
		__u32 shift = FW_HULL_SHIFT * (l & 7);
		struct fw_rule *h;

		key = set->hull_base[(l - 1) & 7] + (pos >> shift);
		h = bpf_map_lookup_elem(hulls, &key);
		if (!h)
			return 1;
		if (h->prio < s->best && rule_matches(h, &s->key)) {
			s->lvl = l - 1;
			return 0;
		}
		s->start = pos + (1U << shift);
	} else {
		if (check(s, bpf_map_lookup_elem(cands, &pos), 1))
			return 1;
		s->start = pos + 1;
	}
	s->lvl = hull_level(s->start, s->end);
	return s->start >= s->end;
}

/* The candidates [start, end) of a long span, through the hulls of its
 * blocks; the match found as prio << 32 | rule << 1 | action, or 0 when
 * none beats best. A global function, verified once: its loop, inlined at
 * every span's place, took the verifier past its million instructions.
 * slots is the installed set's slot | the overlay << 1. */
__attribute__((noinline)) __u64 scan_long(const struct fw_flow_key *k, __u32 slots, __u32 start, __u32 end,
					  __u32 best)
{
	struct scan s = {.slot = slots & 1, .overlay = slots >> 1 & 1, .start = start, .end = end, .best = best};

	if (!k || start >= end || end - start > (1U << 22))
		return 0;
	s.key = *k;
	s.lvl = hull_level(start, end);
	/* Each candidate is a step, and each block whose hull the packet may
	 * match one more: fewer than twice the span. */
	bpf_loop(2 * (end - start), long_step, &s, 0);
	if (s.best >= best)
		return 0;
	return (__u64)s.best << 32 | s.rule << FW_ACT_BITS | s.action;
}

/* A span's first candidate is checked here, and only the rest of a longer
 * span goes to bpf_loop: most spans a new flow reads end at their first
 * candidate (a match, or a rule that cannot beat the best), and a bpf_loop
 * call and its callback cost some 10 ns each on a kernel with retpolines
 * and return thunks. A span longer than FW_HULL_SPAN is read through its
 * blocks' hulls (scan_long). */
static __always_inline void scan_span(struct scan *s, const struct fw_span *span)
{
	void *cands;
	__u32 idx;

	if (!span || !span->len)
		return;
	cands = slot_map(&fw_cand_slots, s->slot);
	if (!cands)
		return;
	idx = span->start;
	if (check(s, bpf_map_lookup_elem(cands, &idx), 1) || span->len == 1)
		return;
	if (span->len > FW_HULL_SPAN) {
		__u64 m = scan_long(&s->key, s->slot | s->overlay << 1, idx + 1, idx + span->len, s->best);

		if (m) {
			s->best = m >> 32;
			s->rule = (__u32)m >> FW_ACT_BITS;
			s->action = m & FW_ACT_MASK;
		}
		return;
	}
	s->start = idx + 1;
	s->end = span->start + span->len;
	bpf_loop((span->len - 1 + FW_CHUNK - 1) / FW_CHUNK, scan_candidates, s, 0);
}

/* FW_CHUNK of the overlay's added rules. */
static long scan_added(__u64 i, void *data)
{
	struct scan *s = data;
	__u32 idx = s->start + (__u32)i * FW_CHUNK;

	for (int j = 0; j < FW_CHUNK; j++, idx++) {
		__u32 key = s->overlay * FW_MAX_ADDED + idx;

		if (idx >= s->end || check(s, bpf_map_lookup_elem(&fw_added, &key), 0))
			return 1;
	}
	return 0;
}

/* One anchor prefix of an address: its rules, then on to its parent. The
 * loops below run as bpf_loop callbacks so that the verifier checks each
 * body once rather than once per iteration. */
static long scan_node(__u64 i, void *data)
{
	struct scan *s = data;
	void *nodes = slot_map(&fw_node_slots, s->slot);
	struct fw_node *n = nodes ? bpf_map_lookup_elem(nodes, &s->node) : NULL;

	if (!n || n->first >= s->best)
		return 1;
	scan_span(s, &n->span);
	s->node = n->parent;
	return !s->node;
}

/* The rules of an address's anchor prefixes: its interval's node, here,
 * then each shorter anchor prefix that covers it. */
static __always_inline void scan_nodes(struct scan *s, __u32 node, int max_nest)
{
	void *nodes = slot_map(&fw_node_slots, s->slot);
	struct fw_node *n = nodes && node ? bpf_map_lookup_elem(nodes, &node) : NULL;

	if (!n || n->first >= s->best)
		return;
	scan_span(s, &n->span);
	s->node = n->parent;
	if (s->node)
		bpf_loop(max_nest - 1, scan_node, s, 0);
}

/* The position of a 32-bit word's only set bit. */
static __always_inline __u32 bit_pos(__u32 b)
{
	return !!(b & 0xffff0000) << 4 | !!(b & 0xff00ff00) << 3 | !!(b & 0xf0f0f0f0) << 2 | !!(b & 0xcccccccc) << 1 |
	       !!(b & 0xaaaaaaaa);
}

static __always_inline __u32 popcount32(__u32 v)
{
	v = v - ((v >> 1) & 0x55555555);
	v = (v & 0x33333333) + ((v >> 2) & 0x33333333);
	return (((v + (v >> 4)) & 0x0f0f0f0f) * 0x01010101) >> 24;
}

/* The lowest level left in s->levels of a port that holds rules; s->port
 * is the port tree << 16 | port. */
static __always_inline void scan_next_level(struct scan *s)
{
	__u32 low = s->levels & -s->levels;
	__u32 l = bit_pos(low);
	void *pblocks;
	__u32 key;

	s->levels ^= low;
	if (l >= FW_PORT_LEVELS || !s->first || s->first[l] >= s->best)
		return;
	pblocks = slot_map(&fw_pblock_slots, s->slot);
	if (!pblocks)
		return;
	key = (s->port >> 16) * FW_PORT_BLOCKS + (1U << l) + ((s->port & 0xffff) >> (16 - l));
	scan_span(s, bpf_map_lookup_elem(pblocks, &key));
}

static long scan_level(__u64 i, void *data)
{
	struct scan *s = data;

	scan_next_level(s);
	return !s->levels;
}

/* The levels whose rules can beat prio best: a bit per level whose lowest
 * prio is below it. Branch-free, so that the verifier walks one path, not
 * 2^17: the empty asm hides the sign bit's meaning from clang, which would
 * otherwise turn it back into a compare and a jump. */
static __always_inline __u32 levels_below(const __u32 *first, __u32 best)
{
	__u32 m = 0;

#pragma unroll
	for (int l = 0; l < FW_PORT_LEVELS; l++) {
		__u64 d = (__u64)first[l] - best;

		asm volatile("" : "+r"(d));
		m |= (__u32)(d >> 63) << l;
	}
	return m;
}

/* The port tree of a direction (0 source, 1 destination) and protocol:
 * rules with ports are TCP or UDP, and a packet checks only its own
 * protocol's. */
static __always_inline __u32 port_tree(__u32 dir, __u8 proto)
{
	return dir | (proto == IPPROTO_UDP) << 1;
}

/* The rules anchored on a port: one block per level that holds rules.
 * Only the levels whose rules can beat the best match so far are looked
 * at, and a mask is read only if one of its levels is: the per-port one is
 * 256 KiB, a cache miss for a flood's random port. */
static __always_inline void scan_port(struct scan *s, const struct fw_set *set, void *pwide, void *pnarrow, __u32 tree,
				      __u32 port)
{
	const __u32 wide = (1U << FW_PORT_WIDE_LEVELS) - 1;
	__u32 key, worth, levels;
	struct fw_pwide *w;

	if (tree >= FW_PORT_TREES || set->port_tree_first[tree] >= s->best)
		return;
	s->first = set->port_first[tree];
	worth = levels_below(s->first, s->best);
	key = port >> FW_PORT_WIDE_SHIFT;
	if (!worth || !(set->port_groups[tree][(key >> 6) & 15] >> (key & 63) & 1))
		return;
	key |= tree << (16 - FW_PORT_WIDE_SHIFT);
	w = bpf_map_lookup_elem(pwide, &key);
	if (!w)
		return;
	levels = w->levels;
	key = tree << 16 | port;
	if ((worth & ~wide) && (w->narrow >> (port & 63) & 1)) {
		__u8 *n = bpf_map_lookup_elem(pnarrow, &key);

		if (n)
			levels |= (__u32)*n << FW_PORT_WIDE_LEVELS;
	}
	s->levels = levels & worth;
	if (!s->levels)
		return;
	s->port = key;
	/* Mostly one level is left: it is scanned here. */
	scan_next_level(s);
	if (s->levels)
		bpf_loop(popcount32(s->levels), scan_level, s, 0);
}

/* How many of a tree node's starts lie at or below addr: at least one,
 * since a node is only reached through a start at or below addr (and the
 * root's first start is 0). Branch-free, as levels_below. */
static __always_inline __u32 snode_count(const struct fw_snode4 *sn, __u32 addr)
{
	__u32 c = 0;

#pragma unroll
	for (int i = 0; i < FW_SNODE_KEYS; i++) {
		__u64 d = (__u64)addr - sn->key[i];

		asm volatile("" : "+r"(d));
		c += 1 - (__u32)(d >> 63);
	}
	/* Unused keys are ~0: at or below only the last address. */
	return c < sn->n ? c : sn->n;
}

/* The node of the IPv4 interval holding addr (host order): in the tree
 * node that holds all of its /16's intervals, or else by a walk down the
 * direction's search tree, one tree node per level (some 20 ns a level
 * here, cached or not). */
static __always_inline __u32 find_ivl4(void *tree, void *leaf, const struct fw_set *set, __u32 dir, __u32 addr)
{
	__u32 levels = set->stree4_levels[dir & 1], q = 0, key = dir << 16 | addr >> 16;
	__u32 *l = bpf_map_lookup_elem(leaf, &key);

	/* The /16's own leaf: a walk of level 0 only, from that node. */
	if (l && *l) {
		levels = 1;
		q = *l - 1 - set->stree4_base[dir & 1][0];
	}
	/* Unrolled, so that each level's base is a constant offset. */
#pragma unroll
	for (int j = FW_STREE_LEVELS - 1; j >= 0; j--) {
		struct fw_snode4 *sn;
		__u32 c;

		if (j >= levels)
			continue;
		key = set->stree4_base[dir & 1][j] + q;
		sn = bpf_map_lookup_elem(tree, &key);
		if (!sn)
			return 0;
		c = snode_count(sn, addr);
		if (!c || c > FW_SNODE_KEYS)
			return 0;
		if (!j)
			return sn->node[c - 1];
		q = q * FW_SNODE_KEYS + c - 1;
	}
	return 0;
}

static __always_inline __u32 find_ivl6(void *ivl, const struct fw_range *r, const __u32 *a)
{
	__u64 ahi = (__u64)bpf_ntohl(a[0]) << 32 | bpf_ntohl(a[1]);
	__u64 alo = (__u64)bpf_ntohl(a[2]) << 32 | bpf_ntohl(a[3]);
	__u32 lo = r->lo, hi = r->hi;
	struct fw_ivl6 *e;

	for (int i = 0; i < FW_SEARCH_STEPS && lo < hi; i++) {
		__u32 mid = hi - (hi - lo) / 2;

		e = bpf_map_lookup_elem(ivl, &mid);
		if (!e)
			return 0;
		if (e->hi < ahi || (e->hi == ahi && e->lo <= alo))
			lo = mid;
		else
			hi = mid - 1;
	}
	e = bpf_map_lookup_elem(ivl, &lo);
	return e ? e->node : 0;
}

/* An IPv4 address's node, or none when its /16's class says that no rule
 * it leads to can beat prio best. */
static __always_inline __u32 find_node4(void *cls, void *tree, void *leaf, const struct fw_set *set, __u32 dir,
					__u32 addr, __u32 best)
{
	__u32 key = dir << 12 | addr >> 20;
	__u64 *w = bpf_map_lookup_elem(cls, &key);
	__u32 q;

	if (!w)
		return 0;
	q = *w >> ((addr >> 14) & 0x3c) & 0xf;
	if (!q || FW_CLS4_FLOOR(q) >= best)
		return 0;
	return find_ivl4(tree, leaf, set, dir, addr);
}

/* The new-flow path: the first rule that matches (lowest prio), from the
 * rules anchored on the packet's values and the overlay's added ones.
 * Returns the rule's id, 0 for the default policy. A function of its own
 * (a call and its return cost ~15 ns of a new flow here): inlined, its
 * stack and conntrack's together passed the verifier's 512 bytes. */
static __noinline __u32 classify(const struct fw_flow_key *k, const struct fw_overlay *ov, __u32 overlay,
				      __u8 *action)
{
	__u32 zero = 0, slot = ov->base;
	void *sets = slot_map(&fw_set_slots, slot);
	struct fw_set *set = sets ? bpf_map_lookup_elem(sets, &zero) : NULL;
	struct scan s = {.key = *k, .slot = slot, .overlay = overlay, .best = ~0U};
	void *wild = slot_map(&fw_wild_slots, slot);
	__u32 key;

	*action = FW_ACT_PASS;
	if (!set || !wild)
		return 0; /* no rule set loaded yet */
	if (ov->nadded) {
		s.start = 0;
		s.end = ov->nadded;
		bpf_loop((ov->nadded + FW_CHUNK - 1) / FW_CHUNK, scan_added, &s, 0);
	}

	key = (k->family == FW_FAMILY_IPV6) * FW_WILD_PER_FAMILY + 256;
	scan_span(&s, bpf_map_lookup_elem(wild, &key));
	if (k->proto) {
		key = key - 256 + k->proto;
		scan_span(&s, bpf_map_lookup_elem(wild, &key));
	}

	if (k->family == FW_FAMILY_IPV4) {
		void *cls = slot_map(&fw_cls4_slots, slot);
		void *tree = slot_map(&fw_snode4_slots, slot);
		void *leaf = slot_map(&fw_leaf4_slots, slot);

		if (!cls || !tree || !leaf)
			return 0;
		if (set->flags & FW_SET_SRC4)
			scan_nodes(&s, find_node4(cls, tree, leaf, set, 0, bpf_ntohl(k->src[3]), s.best), FW_MAX_NEST4);
		if (set->flags & FW_SET_DST4)
			scan_nodes(&s, find_node4(cls, tree, leaf, set, 1, bpf_ntohl(k->dst[3]), s.best), FW_MAX_NEST4);
	} else {
		void *ivl = slot_map(&fw_ivl6_slots, slot);

		if (!ivl)
			return 0;
		if (set->flags & FW_SET_SRC6)
			scan_nodes(&s, find_ivl6(ivl, &set->ivl6[0], k->src), FW_MAX_NEST6);
		if (set->flags & FW_SET_DST6)
			scan_nodes(&s, find_ivl6(ivl, &set->ivl6[1], k->dst), FW_MAX_NEST6);
	}

	if ((k->proto == IPPROTO_TCP || k->proto == IPPROTO_UDP) && !k->noports &&
	    (set->flags & (FW_SET_SPORT | FW_SET_DPORT))) {
		void *pwide = slot_map(&fw_pwide_slots, slot);
		void *pnarrow = slot_map(&fw_pnarrow_slots, slot);

		if (pwide && pnarrow) {
			if (set->flags & FW_SET_SPORT)
				scan_port(&s, set, pwide, pnarrow, port_tree(0, k->proto), k->sport);
			if (set->flags & FW_SET_DPORT)
				scan_port(&s, set, pwide, pnarrow, port_tree(1, k->proto), k->dport);
		}
	}

	if (s.best != ~0U) {
		*action = s.action;
		return s.rule;
	}
	*action = set->default_action;
	return 0;
}

static __always_inline void count_rule(__u32 slot, __u32 rule, __u64 len)
{
	__u32 key = slot << FW_STATS_SLOT_SHIFT | rule;
	struct fw_rule_stats *st = bpf_map_lookup_elem(&fw_stats, &key);

	if (st) {
		st->packets += 1;
		st->bytes += len;
	}
}

static __always_inline __u32 mix32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

static __always_inline __u32 flow_hash(const struct fw_flow_key *k)
{
	__u32 h = (__u32)k->sport << 16 | k->dport;

	h = mix32(h ^ k->src[3] * 0x9e3779b1);
	h = mix32(h ^ k->dst[3] ^ (__u32)k->proto << 24 ^ (__u32)k->ct_state << 8 ^ k->noports);
	if (k->family == FW_FAMILY_IPV6)
		h = mix32(h ^ k->src[0] ^ k->src[1] * 31 ^ k->src[2] * 131 ^ k->dst[0] * 7 ^ k->dst[1] * 17 ^
			  k->dst[2] * 257);
	return h;
}

/* The way a returning flow takes: an empty one, else an idle one, else the
 * one with the fewest packets, so that a flood does not push out the busy
 * flows. */
static __always_inline int victim(const struct fw_flow_tags *t, const struct fw_flow_set *set, __u64 now)
{
	int w, best = 0;

#pragma unroll
	for (w = 0; w < FW_FLOW_WAYS; w++)
		if (!t->flow[w])
			return w;
#pragma unroll
	for (w = 0; w < FW_FLOW_WAYS; w++)
		if (set->way[w].f.last_ns + FW_FLOW_IDLE_NS < now)
			return w;
#pragma unroll
	for (w = 1; w < FW_FLOW_WAYS; w++)
		if (set->way[w].f.packets < set->way[best].f.packets)
			best = w;
	return best;
}

static __always_inline int key_eq(const struct fw_flow_key *a, const struct fw_flow_key *b)
{
	return a->src[0] == b->src[0] && a->src[1] == b->src[1] && a->src[2] == b->src[2] &&
	       a->src[3] == b->src[3] && a->dst[0] == b->dst[0] && a->dst[1] == b->dst[1] &&
	       a->dst[2] == b->dst[2] && a->dst[3] == b->dst[3] && a->sport == b->sport &&
	       a->dport == b->dport && a->proto == b->proto && a->noports == b->noports && a->ct_state == b->ct_state;
}

/* A flow seen once leaves its tag in its set's queue. */
static __always_inline void flow_seen(struct fw_flow_tags *t, __u16 tag)
{
	t->seen = t->seen << 16 | tag;
}

/* Whether the set saw the tag once lately: a zero-halfword test of the
 * queue xor the tag in each halfword. */
static __always_inline int seen_once(const struct fw_flow_tags *t, __u16 tag)
{
	__u64 x = t->seen ^ (tag * 0x0001000100010001ULL);

	return !!((x - 0x0001000100010001ULL) & ~x & 0x8000800080008000ULL);
}

/* A flow that takes a way leaves the queue. */
static __always_inline void forget_seen(struct fw_flow_tags *t, __u16 tag)
{
#pragma unroll
	for (int i = 0; i < FW_SEEN_SLOTS; i++)
		if ((__u16)(t->seen >> 16 * i) == tag)
			t->seen &= ~(0xffffULL << 16 * i);
}

/* Step 4a, for a packet whose tag its set holds: the flow's way in set idx
 * if it is tracked or comes back now (see fw_flow_tags), -1 for a flow seen
 * once. A global function, so that the verifier checks its ways and key
 * comparisons once rather than once for every path through the parser. */
__attribute__((noinline)) int flow_track(const struct fw_flow_key *k, __u32 idx, __u32 h, __u32 len)
{
	struct fw_flow_tags *t = bpf_map_lookup_elem(&fw_tags, &idx);
	__u16 tag = h >> 16 | 1;
	struct fw_flow_set *set;
	struct fw_flow *f;
	__u64 now;
	int w, s;

	if (!t || !k)
		return -1;
	s = seen_once(t, tag);
	if (t->flow[0] == tag || t->flow[1] == tag || t->flow[2] == tag || t->flow[3] == tag) {
		set = bpf_map_lookup_elem(&fw_flows, &idx);
		if (!set)
			return -1;
#pragma unroll
		for (w = 0; w < FW_FLOW_WAYS; w++)
			if (t->flow[w] == tag && key_eq(&set->way[w].key, k))
				return w;
	}
	if (!s) {
		/* A tracked flow's tag, but another flow. */
		flow_seen(t, tag);
		return -1;
	}
	/* Seen before (or a flow with the same tag was: a tag is no key, so
	 * the first packet counted may be another's): it takes a way. */
	forget_seen(t, tag);
	set = bpf_map_lookup_elem(&fw_flows, &idx);
	if (!set)
		return -1;
	now = bpf_ktime_get_coarse_ns();
	w = victim(t, set, now) & (FW_FLOW_WAYS - 1);
	if (t->flow[w])
		count(FW_C_FLOW_REPLACED);
	t->flow[w] = tag;
	set->way[w].key = *k;
	f = &set->way[w].f;
	f->verdict = 0; /* no generation is 0 once a set is installed */
	f->packets = 1;
	f->bytes = len; /* the first packet's length is not kept: this one's */
	f->first_ns = now;
	return w;
}

/* The flow's counters and cached verdict, or NULL for a flow not tracked.
 * A packet whose tag its set does not hold (a flood's every packet) is
 * settled here, without a call: a call and its return cost some 9 ns each
 * on a kernel with retpolines and return thunks. */
static __always_inline struct fw_flow *flow_lookup(const struct fw_config *cfg, const struct fw_flow_key *k, __u32 len)
{
	__u32 h = flow_hash(k);
	__u32 idx = (h & cfg->flow_mask) + bpf_get_smp_processor_id() * (cfg->flow_mask + 1);
	struct fw_flow_tags *t = bpf_map_lookup_elem(&fw_tags, &idx);
	__u16 tag = h >> 16 | 1;
	struct fw_flow_set *set;
	int w;

	if (!t)
		return NULL;
	if (t->flow[0] != tag && t->flow[1] != tag && t->flow[2] != tag && t->flow[3] != tag && !seen_once(t, tag)) {
		flow_seen(t, tag);
		return NULL;
	}
	w = flow_track(k, idx, h, len);
	if (w < 0)
		return NULL;
	set = bpf_map_lookup_elem(&fw_flows, &idx);
	return set ? &set->way[w & (FW_FLOW_WAYS - 1)].f : NULL;
}

/* Step 5: the rules, through the flow's cached verdict when it is tracked
 * and the verdict belongs to the active rule set. Returns the action
 * (enum fw_action), or -1 to abort. */
static __always_inline int apply_rules(const struct fw_config *cfg, const struct fw_flow_key *k, __u64 len,
				       __u32 *rulep)
{
	__u32 zero = 0;
	__u32 *genp = bpf_map_lookup_elem(&fw_gen, &zero);
	__u32 gen = genp ? *(volatile __u32 *)genp : 0;
	__u32 overlay = gen & 1;
	struct fw_overlay *ov = bpf_map_lookup_elem(&fw_overlays, &overlay);
	struct fw_flow *f;
	__u64 verdict;
	__u32 rule;
	__u8 action;

	if (!ov)
		return -1;
	f = flow_lookup(cfg, k, len);
	if (f && f->packets && (f->verdict >> 32) == gen) {
		verdict = f->verdict;
		rule = (__u32)verdict >> FW_ACT_BITS;
		action = verdict & FW_ACT_MASK;
	} else if (!ov->nbase && !ov->nadded) {
		rule = 0; /* no rules: the default policy */
		action = ov->default_action;
		verdict = (__u64)gen << 32 | action;
	} else {
		rule = classify(k, ov, overlay, &action);
		count(FW_C_CLASSIFIED);
		verdict = (__u64)gen << 32 | rule << FW_ACT_BITS | action;
	}
	if (f) {
		f->packets += 1;
		f->bytes += len;
		/* Only a tracked flow reads the clock: a helper call costs
		 * some 17 ns here, a tenth of a flood packet's time. */
		f->last_ns = bpf_ktime_get_coarse_ns();
		if (f->verdict != verdict)
			f->verdict = verdict; /* only after a classification */
	}
	count_rule(ov->stats, rule, len);
	*rulep = rule;
	if (action == FW_ACT_DROP)
		count(rule ? FW_C_DROP_RULE : FW_C_DROP_DEFAULT);
	else
		count(rule ? FW_C_PASS_RULE : FW_C_PASS_DEFAULT);
	return action;
}

#ifndef FW_EGRESS
/* The monitor's ring (fastpath monitor): what the firewall drops or passes,
 * copied only while a monitor listens. FW_MON is the one check on a drop or
 * pass path: an inlined array lookup, a load and a branch. */
#define MON_PREFIX fw
#include "monitor.h"
#define FW_MON(reason, action, rule)                               \
	do {                                                       \
		if (mon_listening())                               \
			mon_emit_xdp(ctx, (reason), (action), (rule)); \
	} while (0)

/* What runs after the firewall on a device (the border router, the
 * translator), by the device's ifindex: a frame the firewall passes goes on
 * to it. The control plane fills a slot when a program is attached behind
 * the firewall (docs/fw.md); an empty one passes to the kernel as before,
 * for the cost of one failed tail call. Indexing by ifindex keeps one
 * instance on several devices right without a lookup. */
#ifndef FW_NEXT_SLOTS
#define FW_NEXT_SLOTS 65536
#endif
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, FW_NEXT_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} fw_next SEC(".maps");

/* From the main program only: the verifier refuses a tail call from a
 * subprogram whose callers' frames hold 256 bytes of stack. */
static __always_inline int fw_pass(struct xdp_md *ctx)
{
	bpf_tail_call(ctx, &fw_next, ctx->ingress_ifindex);
	return XDP_PASS;
}

/* Set for the generic-mode program (GenericProgram), whose frames are the
 * stack's packets, GRO's of many buffers among them. */
volatile const __u8 fw_whole_len = 0;

SEC("xdp")
int fw_xdp(struct xdp_md *ctx)
{
	struct ct_txn *t = ct_txn();
	struct fw_flow_key *key;
	struct fw_pkt *pkt;
	struct ct_result *ct;
	/* In generic mode all of a GRO packet's buffers; in native mode the
	 * frame's one (a helper call costs some 17 ns). */
	__u64 len = fw_whole_len ? bpf_xdp_get_buff_len(ctx) : (__u64)(long)ctx->data_end - (__u64)(long)ctx->data;
	struct fw_config *cfg;
	__u32 zero = 0, rule = 0;
	int rc;

#ifdef FW_BENCH_PROLOGUE
	FW_BENCH_PROLOGUE(ctx);
#endif
	if (!t)
		return XDP_ABORTED;
	key = &t->k;
	pkt = &t->p;
	ct = &t->r;
	__builtin_memset(key, 0, sizeof(*key));
	__builtin_memset(pkt, 0, sizeof(*pkt));
	rc = parse_flow(ctx, key, pkt);
	if (rc == XDP_PASS) {
		count(FW_C_PASS_NOT_IP);
		FW_MON(FW_C_PASS_NOT_IP, XDP_PASS, 0);
		return rc;
	}
	if (rc != CONTINUE) {
		count(FW_C_DROP_MALFORMED);
		FW_MON(FW_C_DROP_MALFORMED, rc, 0);
		return rc;
	}
	cfg = bpf_map_lookup_elem(&fw_conf, &zero);
	if (!cfg)
		return XDP_ABORTED;
	if (pkt->frag)
		frag_flow(cfg, key, pkt, t);
	if ((rc = check_blocked_flow(cfg, key, len)) != CONTINUE) {
		FW_MON(FW_C_DROP_BLOCKED, rc, 0);
		return rc;
	}
	if ((rc = check_rate_limit(cfg, key, len)) != CONTINUE) {
		FW_MON(FW_C_DROP_RATE, rc, 0);
		return rc;
	}
	track_conn(ctx, cfg, key, pkt, ct, len);
	rc = apply_rules(cfg, key, len, &rule);
	if (rc < 0)
		return XDP_ABORTED;
	if (rc == FW_ACT_DROP) {
		FW_MON(rule ? FW_C_DROP_RULE : FW_C_DROP_DEFAULT, XDP_DROP, rule);
		return XDP_DROP;
	}
	/* The synproxy: the action's handshake, and every packet of the
	 * connections it opened (whatever rule passed them). */
	if ((rc == FW_ACT_SYNPROXY || (ct->status & FW_CTS_SYNPROXY)) &&
	    (rc = fw_synproxy(ctx, pkt, ct)) != CONTINUE) {
		if (rc != XDP_TX)
			FW_MON(FW_MON_SYNPROXY, rc, rule);
		return rc;
	}
	ct_confirm(cfg, ct);
	FW_MON(rule ? FW_C_PASS_RULE : FW_C_PASS_DEFAULT, XDP_PASS, rule);
	return fw_pass(ctx);
}

/* Conntrack's garbage collector, run by the control plane through
 * BPF_PROG_TEST_RUN with a struct fw_ct_reap_hdr and its keys: the
 * deletes happen here, under each entry's lock and with the source's share
 * of the established table given back, which a delete from userspace could
 * do neither of. */
SEC("xdp")
int fw_ct_reap(struct xdp_md *ctx)
{
	struct fw_config *cfg;
	__u32 zero = 0;

	cfg = bpf_map_lookup_elem(&fw_conf, &zero);
	if (!cfg)
		return XDP_ABORTED;
	return ct_reap(ctx, cfg);
}
#endif

char _license[] SEC("license") = "GPL";
