/* The XDP firewall: exact-flow blocking, per-source rate limits, and rules of
 * AND-combined prefixes, protocol and port ranges, first match wins.
 *
 * Rules are classified without walking them: the control plane anchors each
 * rule on one of its fields (source prefix, destination prefix, destination
 * port, source port, or none) and stores, for every trie entry and port, the
 * span of rules anchored there that can match. A packet looks up its source
 * and destination in LPM tries and its ports in arrays, then checks only the
 * rules in those spans. The verdict is cached in the packet's flow entry,
 * which also holds the flow's counters, so only a flow's first packet after
 * a rule change is classified. */
#include "common.h"
#include "parse.h"
#include <linux/tcp.h>
#include "fw_shared.h"

#ifndef FW_MAX_FLOWS
#define FW_MAX_FLOWS 131072
#endif
#ifndef FW_MAX_BLOCKED
#define FW_MAX_BLOCKED 65536
#endif
/* Counters of both slots' rules: twice FW_MAX_RULES + 1, rounded up. */
#ifndef FW_MAX_STATS
#define FW_MAX_STATS (1 << 19)
#endif
#ifndef FW_MAX_SOURCES
#define FW_MAX_SOURCES 65536
#endif
/* IPv6 extension headers walked before giving up on finding the ports. */
#define FW_MAX_EXT_HDRS 6

/* Rate limits; array of one. */
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

/* Per-flow counters and cached verdicts, one table per family; the least
 * recently seen flow makes room for a new one. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FW_MAX_FLOWS);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, struct fw_flow4_key);
	__type(value, struct fw_flow);
} fw_flows4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FW_MAX_FLOWS);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, struct fw_flow_key);
	__type(value, struct fw_flow);
} fw_flows6 SEC(".maps");

/* Flows blocked by the operator (fw block). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FW_MAX_BLOCKED);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct fw_flow_key);
	__type(value, struct fw_block);
} fw_blocked SEC(".maps");

/* Per-rule counters of both slots, keyed slot << 31 | rule id. A global map
 * rather than one per slot: the verifier turns lookups in a map it knows
 * into direct calls, while an inner map's lookup is an indirect call, which
 * cost a third of a tracked packet's time. Entries are created and deleted
 * with the rule sets, so memory follows the rules in use. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, FW_MAX_STATS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct fw_rule_stats);
} fw_stats SEC(".maps");

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
 * size. */
struct fw_lpm4 {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(key_size, sizeof(struct fw_lpm4_key));
	__uint(value_size, sizeof(struct fw_span));
};

struct fw_lpm6 {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(key_size, sizeof(struct fw_lpm6_key));
	__uint(value_size, sizeof(struct fw_span));
};

/* Span of port-anchored rules per port number. */
struct fw_ports {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_span));
};

/* Sized per rule set, hence BPF_F_INNER_MAP. */
struct fw_cands {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
};

struct fw_rules {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_rule));
};

struct fw_sets {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct fw_set));
};


/* One instance of each type the control plane writes into the slot maps, so
 * that BTF holds their full layouts for Go. Never read. */
struct {
	struct fw_lpm4_key lpm4;
	struct fw_lpm6_key lpm6;
	struct fw_span span;
	struct fw_rule rule;
	struct fw_set set;
	struct fw_rule_stats stats;
} fw_btf_types;

#define FW_SLOT_MAP(name, inner)                        \
	struct {                                        \
		__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS); \
		__uint(max_entries, FW_SLOTS);          \
		__type(key, __u32);                     \
		__array(values, struct inner);          \
	} name SEC(".maps")

FW_SLOT_MAP(fw_src4, fw_lpm4);
FW_SLOT_MAP(fw_dst4, fw_lpm4);
FW_SLOT_MAP(fw_src6, fw_lpm6);
FW_SLOT_MAP(fw_dst6, fw_lpm6);
FW_SLOT_MAP(fw_sport, fw_ports);
FW_SLOT_MAP(fw_dport, fw_ports);
FW_SLOT_MAP(fw_cand, fw_cands);
FW_SLOT_MAP(fw_rule_slots, fw_rules);
FW_SLOT_MAP(fw_set_slots, fw_sets);

static __always_inline void count(enum fw_counter reason)
{
	__u64 *c = bpf_map_lookup_elem(&fw_counters, &reason);

	if (c)
		*c += 1;
}

static __always_inline void *slot_map(void *outer, __u32 slot)
{
	return bpf_map_lookup_elem(outer, &slot);
}

/* Step 1: the flow key. Non-IP frames are the kernel's business (ARP must
 * work); IP packets whose headers are cut short are dropped, since no rule
 * could be checked against them. */
static __always_inline int parse_flow(struct xdp_md *ctx, struct fw_flow_key *k)
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
		l4 = data + ip->ihl * 4;
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
				l4 = h + 8;
			} else if (next == IPPROTO_AH) {
				l4 = h + (h[1] + 2) * 4;
			} else {
				l4 = h + (h[1] + 1) * 8;
			}
			next = h[0];
		}
		k->proto = next;
	} else {
		return XDP_PASS;
	}

	if (frag_later) {
		k->noports = 1;
		return CONTINUE;
	}
	if (k->proto != IPPROTO_TCP && k->proto != IPPROTO_UDP)
		return CONTINUE;
	if (!PKT_HAS(l4, 4, end))
		return XDP_DROP;
	k->sport = bpf_ntohs(*(__u16 *)l4);
	k->dport = bpf_ntohs(*(__u16 *)(l4 + 2));
	return CONTINUE;
}

/* Step 2: flows the operator blocked, until their expiry. */
static __always_inline int check_blocked_flow(const struct fw_config *cfg, const struct fw_flow_key *k, __u64 len,
					      __u64 now)
{
	struct fw_block *b;

	if (!cfg->blocked)
		return CONTINUE;
	b = bpf_map_lookup_elem(&fw_blocked, k);
	if (!b || (b->expires_ns && now >= b->expires_ns))
		return CONTINUE;
	__sync_fetch_and_add(&b->packets, 1);
	__sync_fetch_and_add(&b->bytes, len);
	count(FW_C_DROP_BLOCKED);
	return XDP_DROP;
}

/* Step 3: per-source rate limits over fixed one-second windows. A source
 * that crosses a threshold is dropped for rate_block_ns, then counted
 * afresh. */
static __always_inline int check_rate_limit(const struct fw_config *cfg, const struct fw_flow_key *k, __u64 len,
					    __u64 now)
{
	struct fw_rate *r;
	__u64 pkts, bytes;

	if (!cfg->rate_pps && !cfg->rate_bps)
		return CONTINUE;
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
	if (r->has_ports && k->noports)
		return 0;
	if (k->sport < r->sport_lo || k->sport > r->sport_hi)
		return 0;
	if (k->dport < r->dport_lo || k->dport > r->dport_hi)
		return 0;
	return addr_in(k->src, r->src_net, r->src_mask) && addr_in(k->dst, r->dst_net, r->dst_mask);
}

struct scan {
	struct fw_flow_key key;
	__u32 slot;
	__u32 start;
	/* Lowest matching rule id so far; nrules + 1 while none matched. */
	__u32 best;
};

/* One candidate of a span. Spans are ascending, so the first match is the
 * span's best and a candidate above the best so far ends the scan. The slot's
 * maps are looked up here rather than passed in: bpf_loop hands the callback
 * only a stack pointer. */
static long scan_candidate(__u64 i, void *data)
{
	struct scan *s = data;
	__u32 idx = s->start + (__u32)i;
	void *cands = slot_map(&fw_cand, s->slot);
	void *rules = slot_map(&fw_rule_slots, s->slot);
	struct fw_rule *r;
	__u32 *id;

	if (!cands || !rules)
		return 1;
	id = bpf_map_lookup_elem(cands, &idx);
	if (!id || *id >= s->best)
		return 1;
	r = bpf_map_lookup_elem(rules, id);
	if (r && rule_matches(r, &s->key)) {
		s->best = *id;
		return 1;
	}
	return 0;
}

static __always_inline void scan_span(struct scan *s, const struct fw_span *span)
{
	if (!span || !span->len)
		return;
	s->start = span->start;
	bpf_loop(span->len, scan_candidate, s, 0);
}

/* The slow path: the lowest-numbered rule that matches, from the spans the
 * packet's addresses and ports select. Returns the rule id, 0 for the
 * default policy. */
static __always_inline __u32 classify(const struct fw_flow_key *k, __u32 slot, __u8 *action)
{
	__u32 zero = 0;
	void *sets = slot_map(&fw_set_slots, slot);
	struct fw_set *set = sets ? bpf_map_lookup_elem(sets, &zero) : NULL;
	struct scan s = {.key = *k, .slot = slot};
	void *m;

	*action = FW_ACT_PASS;
	if (!set)
		return 0; /* no rule set loaded yet */
	s.best = set->nrules + 1;
	scan_span(&s, &set->wild);
	if (k->family == FW_FAMILY_IPV4) {
		struct fw_lpm4_key lk = {.prefixlen = 32, .addr = k->src[3]};

		if ((m = slot_map(&fw_src4, slot)))
			scan_span(&s, bpf_map_lookup_elem(m, &lk));
		lk.addr = k->dst[3];
		if ((m = slot_map(&fw_dst4, slot)))
			scan_span(&s, bpf_map_lookup_elem(m, &lk));
	} else {
		struct fw_lpm6_key lk = {.prefixlen = 128};

		__builtin_memcpy(lk.addr, k->src, 16);
		if ((m = slot_map(&fw_src6, slot)))
			scan_span(&s, bpf_map_lookup_elem(m, &lk));
		__builtin_memcpy(lk.addr, k->dst, 16);
		if ((m = slot_map(&fw_dst6, slot)))
			scan_span(&s, bpf_map_lookup_elem(m, &lk));
	}
	if ((k->proto == IPPROTO_TCP || k->proto == IPPROTO_UDP) && !k->noports) {
		__u32 port = k->dport;

		if ((m = slot_map(&fw_dport, slot)))
			scan_span(&s, bpf_map_lookup_elem(m, &port));
		port = k->sport;
		if ((m = slot_map(&fw_sport, slot)))
			scan_span(&s, bpf_map_lookup_elem(m, &port));
	}
	if (s.best <= set->nrules) {
		void *rules = slot_map(&fw_rule_slots, slot);
		struct fw_rule *r = rules ? bpf_map_lookup_elem(rules, &s.best) : NULL;

		if (r) {
			*action = r->action;
			return s.best;
		}
	}
	*action = set->default_action;
	return 0;
}

static __always_inline void count_rule(__u32 slot, __u32 rule, __u64 len)
{
	__u32 key = slot << 31 | rule;
	struct fw_rule_stats *st = bpf_map_lookup_elem(&fw_stats, &key);

	if (st) {
		st->packets += 1;
		st->bytes += len;
	}
}

/* Step 4: the rules, through the flow's cached verdict when it belongs to
 * the active rule set. flows and fkey are the family's flow table and key. */
static __always_inline int apply_rules(const struct fw_flow_key *k, void *flows, const void *fkey, __u64 len,
				       __u64 now)
{
	__u32 zero = 0;
	__u32 *genp = bpf_map_lookup_elem(&fw_gen, &zero);
	__u32 gen = genp ? *(volatile __u32 *)genp : 0;
	__u32 slot = gen & 1;
	struct fw_flow *f = bpf_map_lookup_elem(flows, fkey);
	__u64 verdict;
	__u32 rule;
	__u8 action;

	if (f && (f->verdict >> 32) == gen) {
		verdict = f->verdict;
		rule = (__u32)verdict >> 1;
		action = verdict & 1;
	} else {
		rule = classify(k, slot, &action);
		count(FW_C_CLASSIFIED);
		verdict = (__u64)gen << 32 | rule << 1 | action;
	}
	if (f) {
		__sync_fetch_and_add(&f->packets, 1);
		__sync_fetch_and_add(&f->bytes, len);
		f->last_ns = now;
		if (f->verdict != verdict)
			f->verdict = verdict; /* only after a classification */
	} else {
		struct fw_flow fresh = {.packets = 1, .bytes = len, .first_ns = now, .last_ns = now, .verdict = verdict};

		if (bpf_map_update_elem(flows, fkey, &fresh, BPF_NOEXIST))
			count(FW_C_FLOW_UNTRACKED);
	}
	count_rule(slot, rule, len);
	if (action == FW_ACT_DROP) {
		count(rule ? FW_C_DROP_RULE : FW_C_DROP_DEFAULT);
		return XDP_DROP;
	}
	count(rule ? FW_C_PASS_RULE : FW_C_PASS_DEFAULT);
	return XDP_PASS;
}

SEC("xdp")
int fw_xdp(struct xdp_md *ctx)
{
	struct fw_flow_key key = {};
	__u64 len = ctx->data_end - ctx->data;
	struct fw_config *cfg;
	__u32 zero = 0;
	__u64 now;
	int rc;

	rc = parse_flow(ctx, &key);
	if (rc == XDP_PASS) {
		count(FW_C_PASS_NOT_IP);
		return rc;
	}
	if (rc != CONTINUE) {
		count(FW_C_DROP_MALFORMED);
		return rc;
	}
	cfg = bpf_map_lookup_elem(&fw_conf, &zero);
	if (!cfg)
		return XDP_ABORTED;
	now = bpf_ktime_get_coarse_ns();
	if ((rc = check_blocked_flow(cfg, &key, len, now)) != CONTINUE)
		return rc;
	if ((rc = check_rate_limit(cfg, &key, len, now)) != CONTINUE)
		return rc;
	if (key.family == FW_FAMILY_IPV4) {
		struct fw_flow4_key k4 = {
			.src = key.src[3],
			.dst = key.dst[3],
			.sport = key.sport,
			.dport = key.dport,
			.proto = key.proto,
			.noports = key.noports,
		};

		return apply_rules(&key, &fw_flows4, &k4, len, now);
	}
	return apply_rules(&key, &fw_flows6, &key, len, now);
}

char _license[] SEC("license") = "GPL";
