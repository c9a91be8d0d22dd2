/* What the firewall's XDP program and its Go control plane agree on: flow
 * keys, rules, spans of candidate rules, the rule-set header, counters. */
#ifndef FASTPATH_FW_SHARED_H
#define FASTPATH_FW_SHARED_H

#include <linux/types.h>

/* Actions of a rule and of the default policy. */
enum fw_action {
	FW_ACT_PASS = 0,
	FW_ACT_DROP = 1,
};

/* Address families as the rules and flow keys spell them. */
enum fw_family {
	FW_FAMILY_ANY = 0,
	FW_FAMILY_IPV4 = 4,
	FW_FAMILY_IPV6 = 6,
};

/* A flow: the 5-tuple. IPv4 addresses are stored IPv4-mapped
 * (::ffff:a.b.c.d) so that one key and one rule layout serve both
 * families. Ports are in host byte order, 0 for protocols without ports;
 * fragments after the first have no ports either, and say so in noports,
 * so that no port rule matches them (as in iptables). */
struct fw_flow_key {
	__u8 family;
	__u8 proto;
	__u16 sport;
	__u16 dport;
	__u8 noports;
	__u8 pad;
	__u32 src[4];
	__u32 dst[4];
};

/* The IPv4 flow table's key: a quarter of the hashing of the general key,
 * which is a sizeable part of a tracked packet's cost. */
struct fw_flow4_key {
	__u32 src;
	__u32 dst;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 noports;
	__u8 pad[2];
};

/* Per-flow monitoring, which also caches the flow's classification: the
 * verdict's rule (0 = the default policy) and action hold while its
 * generation is the rule set's. Times are bpf_ktime_get_coarse_ns. */
struct fw_flow {
	__u64 packets;
	__u64 bytes;
	__u64 first_ns;
	__u64 last_ns;
	/* gen << 32 | rule << 1 | action, written with one store so that a
	 * reader on another CPU never pairs one generation with another's rule. */
	__u64 verdict;
};

/* A blocked flow: dropped until expires_ns (0: until unblocked). */
struct fw_block {
	__u64 expires_ns;
	__u64 packets;
	__u64 bytes;
};

/* Rate-limit state of one source over a window of FW_RATE_WINDOW_NS. */
struct fw_rate {
	__u64 window_start;
	__u64 packets;
	__u64 bytes;
	__u64 blocked_until;
	__u64 dropped;
	__u32 trips;
	__u32 pad;
};

#define FW_RATE_WINDOW_NS 1000000000ULL

/* Global settings; rule sets carry their own default policy. */
struct fw_config {
	/* Per-source thresholds per second; 0 turns that threshold off. */
	__u64 rate_pps;
	__u64 rate_bps;
	/* How long a source that crossed a threshold stays blocked. */
	__u64 rate_block_ns;
	/* Entries in the block list, kept by userspace: an empty list costs no
	 * lookup. */
	__u32 blocked;
	__u32 pad;
};

/* A range of the candidate array: rule ids [start, start+len), ascending. */
struct fw_span {
	__u32 start;
	__u32 len;
};

/* LPM keys of the source and destination tries. */
struct fw_lpm4_key {
	__u32 prefixlen;
	__u32 addr;
};

struct fw_lpm6_key {
	__u32 prefixlen;
	__u32 addr[4];
};

/* One rule, every field ANDed. net/mask are over the IPv4-mapped 128-bit
 * address; a zero mask matches any address. Port ranges are inclusive, in
 * host byte order. */
struct fw_rule {
	__u8 family;
	__u8 proto; /* 0: any */
	__u8 action;
	__u8 has_ports; /* a port range narrower than all ports */
	__u16 sport_lo, sport_hi;
	__u16 dport_lo, dport_hi;
	__u32 pad2;
	__u32 src_net[4];
	__u32 src_mask[4];
	__u32 dst_net[4];
	__u32 dst_mask[4];
};

/* Header of a rule set (index 0 of its set map). */
struct fw_set {
	__u32 nrules;
	__u8 default_action;
	__u8 pad[3];
	/* Candidates anchored on no address or port: checked for every packet. */
	struct fw_span wild;
};

/* Per-rule counters (index 0: the default policy). */
struct fw_rule_stats {
	__u64 packets;
	__u64 bytes;
};

/* Reasons counted per CPU. */
enum fw_counter {
	FW_C_PASS_RULE,
	FW_C_DROP_RULE,
	FW_C_PASS_DEFAULT,
	FW_C_DROP_DEFAULT,
	FW_C_DROP_BLOCKED,
	FW_C_DROP_RATE,
	FW_C_RATE_TRIPS,
	FW_C_PASS_NOT_IP,
	FW_C_DROP_MALFORMED,
	FW_C_CLASSIFIED,
	FW_C_FLOW_UNTRACKED,
	FW_C_MAX,
};

/* Two rule sets exist: the active one, gen & 1, and the one being built. */
#define FW_SLOTS 2

#endif
