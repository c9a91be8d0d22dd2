/* What the firewall's XDP program and its Go control plane agree on: flow
 * keys, rules, spans of candidate rules, the rule-set header, counters. */
#ifndef FASTPATH_FW_SHARED_H
#define FASTPATH_FW_SHARED_H

#include <linux/types.h>

/* Actions of a rule and of the default policy. */
enum fw_action {
	FW_ACT_PASS = 0,
	FW_ACT_DROP = 1,
	/* A TCP SYN that matches is answered with a SYN cookie from XDP; the
	 * connection reaches the host only after the client's ACK carries a
	 * valid cookie (see fw_ct_entry). Other packets that match pass. */
	FW_ACT_SYNPROXY = 2,
};
#define FW_ACT_BITS 2
#define FW_ACT_MASK 3

/* A packet's connection-tracking state, one bit each as nftables' ct state
 * (NF_CT_STATE_BIT): a rule matches a set of them. 0 while conntrack is
 * off. */
enum fw_ct_state {
	FW_CT_INVALID = 1,
	FW_CT_ESTABLISHED = 2,
	FW_CT_RELATED = 4,
	FW_CT_NEW = 8,
	FW_CT_UNTRACKED = 64,
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
	/* The packet's enum fw_ct_state: part of the key, so that the flow
	 * cache holds a verdict per state of a flow. */
	__u8 ct_state;
	__u32 src[4];
	__u32 dst[4];
};

/* One flow's counters and cached classification in the flow table: the
 * verdict's rule (0 = the default policy) and action hold while its
 * generation is the rule set's. Times are bpf_ktime_get_coarse_ns. A way
 * with no packets is empty. */
struct fw_flow {
	/* gen << 32 | rule << 1 | action */
	__u64 verdict;
	__u64 packets;
	__u64 bytes;
	__u64 first_ns;
	__u64 last_ns;
};

/* The flow table is per CPU and set-associative: a flow's hash picks a set
 * of FW_FLOW_WAYS ways in its CPU's part of an array. It tracks the flows
 * that come back, not every flow: a flow takes a way at its second packet,
 * so a flood of new flows writes no flow state at all. What a packet reads
 * first is its set's tags (struct fw_flow_tags, 16 bytes a set in an array
 * small enough to stay in cache): the tags of the set's tracked flows, and
 * of the last FW_SEEN_SLOTS flows of the set seen once. Only a packet whose
 * tag is there reads a way. A flow that comes back while its tag is still
 * among those seen takes the way of an empty or idle flow (no packet for
 * FW_FLOW_IDLE_NS), or else of the one with the fewest packets, and counts
 * its first packet too (at the length of the packet it comes back with):
 * the busy flows of a set stay while a flood passes. A CPU holds at most
 * sets * FW_FLOW_WAYS flows. */
#define FW_FLOW_WAYS 4
#define FW_SEEN_SLOTS 4
#define FW_FLOW_IDLE_NS 1000000000ULL

/* Tags are the top 15 bits of a flow's hash with the low bit set; 0 is an
 * empty way. The flows seen once are a queue of four tags, newest in the
 * low 16 bits, so that a new flow shifts its tag in with one store. 16
 * bytes a set rather than 32 (a ring with each packet's length and a
 * pointer) halve the array every packet reads: ~45 ns less per new flow
 * here (128 rather than 256 KiB a CPU by default). */
struct fw_flow_tags {
	__u16 flow[FW_FLOW_WAYS];
	__u64 seen;
};

struct fw_flow_way {
	struct fw_flow_key key;
	struct fw_flow f;
};

struct fw_flow_set {
	struct fw_flow_way way[FW_FLOW_WAYS];
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
	/* Sets of each CPU's flow cache minus one (their count is a power of
	 * two), written when the maps are created. */
	__u32 flow_mask;
	/* Connection tracking (enum fw_ct_flag); timeouts in seconds by
	 * enum fw_ct_timeout, the kernel's defaults unless set. */
	__u32 ct_flags;
	__u32 ct_timeout[32];
	__u32 pad0;
	/* Added to the clock of connection tracking: tests age entries with it. */
	__s64 ct_skew_ns;
	/* The MSS the synproxy announces (IPv4, IPv6), and the TTL of its
	 * SYN/ACKs. */
	__u16 synproxy_mss4;
	__u16 synproxy_mss6;
	__u8 synproxy_ttl;
	/* The established table's share per source: the end that opened a
	 * connection (the peer, for the host's own), by prefix. At most
	 * ct_src_max connections per source of ct_src_bits[0] (IPv4) or
	 * ct_src_bits[1] (IPv6) bits, and ct_src_wide_max per one of
	 * ct_src_wide_bits (0: no limit). */
	__u8 ct_src_bits[2];
	__u8 ct_src_wide_bits[2];
	__u8 pad[3];
	__u32 ct_src_max;
	__u32 ct_src_wide_max;
};

/* The request fw_ct_reap is run with (BPF_PROG_TEST_RUN's data): the
 * keys of one table to delete if expired (or in any case, with flush),
 * each checked under its entry's lock; reaped is written back. */
struct fw_ct_reap_hdr {
	__u32 est; /* 1: fw_ct_est, 0: fw_ct_new */
	__u32 flush;
	__u32 n;
	__u32 reaped;
};

/* The keys of one request, at most: a request fits in a page. */
enum fw_ct_reap_limit { FW_CT_REAP_MAX = 80 };

/* Key of fw_ct_src: a source prefix of either width, and the number of
 * its connections in the established table (value, __u32). */
struct fw_ct_src_key {
	__u32 addr[4];
	__u8 family;
	__u8 bits;
	__u16 pad;
};

enum fw_ct_flag {
	/* Track connections; set when a rule matches on ct state or
	 * synproxies. */
	FW_CTF_ON = 1,
	/* Pick up TCP connections from a mid-stream ACK (nf_conntrack_tcp_loose,
	 * on by default as in Linux). */
	FW_CTF_LOOSE = 2,
	/* Skip the window checks (nf_conntrack_tcp_be_liberal). */
	FW_CTF_LIBERAL = 4,
	/* Stricter than nftables: a TCP packet conntrack would ignore (an old
	 * retransmission, a SYN on a live connection) is invalid. */
	FW_CTF_STRICT = 8,
};

/* Timeouts, as nf_conntrack's tcp_timeouts[] and the others. */
enum fw_ct_timeout {
	FW_CTT_SYN_SENT = 1,
	FW_CTT_SYN_RECV,
	FW_CTT_ESTABLISHED,
	FW_CTT_FIN_WAIT,
	FW_CTT_CLOSE_WAIT,
	FW_CTT_LAST_ACK,
	FW_CTT_TIME_WAIT,
	FW_CTT_CLOSE,
	FW_CTT_SYN_SENT2,
	FW_CTT_RETRANS,
	FW_CTT_UNACK,
	FW_CTT_UDP,
	FW_CTT_UDP_STREAM,
	FW_CTT_ICMP,
	/* Protocols without a tracker of their own (nf_conntrack_generic). */
	FW_CTT_GENERIC,
	/* GRE, unanswered and answered (nf_conntrack_proto_gre). */
	FW_CTT_GRE,
	FW_CTT_GRE_STREAM,
	FW_CTT_MAX,
};

/* TCP states, numbered as enum tcp_conntrack. */
enum fw_tcp_state {
	FW_TCP_NONE = 0,
	FW_TCP_SYN_SENT,
	FW_TCP_SYN_RECV,
	FW_TCP_ESTABLISHED,
	FW_TCP_FIN_WAIT,
	FW_TCP_CLOSE_WAIT,
	FW_TCP_LAST_ACK,
	FW_TCP_TIME_WAIT,
	FW_TCP_CLOSE,
	FW_TCP_SYN_SENT2,
	FW_TCP_MAX,
	FW_TCP_IGNORE,
	/* Synproxy: the client's cookie ACK was let through as a SYN to the
	 * server, whose SYN/ACK is awaited. */
	FW_TCP_PROXY_SYN,
};

/* A connection: both directions in one entry under one key. For TCP and
 * UDP the ends are ordered (lower address, then port, first), so that a
 * packet of either direction finds the entry with one lookup; for ICMP the
 * end that sent the request comes first and port[0] is the identifier,
 * port[1] the request's type. */
struct fw_ct_key {
	__u32 addr[2][4];
	__u16 port[2];
	__u8 proto;
	__u8 family;
	/* ICMP: the code, which conntrack's tuples hold too (a reply of
	 * another code is no reply); 0 otherwise. */
	__u16 code;
};

/* One direction's TCP window state, as ip_ct_tcp_state. */
struct fw_ct_half {
	__u32 td_end;
	__u32 td_maxend;
	__u32 td_maxwin;
	__u32 td_maxack;
	__u8 td_scale;
	__u8 flags; /* enum fw_ct_half_flag */
	__u16 pad;
};

enum fw_ct_half_flag {
	FW_CTH_WINDOW_SCALE = 1,
	FW_CTH_SACK_PERM = 2,
	FW_CTH_CLOSE_INIT = 4,
	FW_CTH_BE_LIBERAL = 8,
	FW_CTH_DATA_UNACKNOWLEDGED = 16,
	FW_CTH_MAXACK_SET = 32,
	FW_CTH_EXP_CHALLENGE_ACK = 64,
	FW_CTH_SIMULTANEOUS_OPEN = 128,
};

enum fw_ct_status {
	FW_CTS_SEEN_REPLY = 1,
	FW_CTS_ASSURED = 2,
	/* Opened through the synproxy: seq/ack are shifted by proxy_delta. */
	FW_CTS_SYNPROXY = 4,
	/* In the established table (fw_ct_est) rather than the embryonic one. */
	FW_CTS_EST_TABLE = 8,
	/* An embryonic entry copied into the established table: whoever finds
	 * it looks the key up again. */
	FW_CTS_MOVED = 16,
	/* Opened by the host itself (seen leaving, at TC egress): the peer,
	 * not the host, is the source a quota counts it against. */
	FW_CTS_LOCAL_ORIG = 32,
};

/* What a connection's entry holds. dir[] and the counters are indexed by
 * conntrack direction: 0 the original (the first packet's), 1 the reply. */
struct fw_ct_entry {
	/* Taken while the entry is read whole or written (see ct_lock): the
	 * two directions of a connection may be on two CPUs. A word of our own
	 * rather than a bpf_spin_lock, which LRU maps cannot hold, nor maps
	 * without BTF (fastpath-rt's), and under which no function may be
	 * called. */
	__u32 lock;
	/* Counts the writes under the lock: a state computed from a copy is
	 * written back only if no other CPU wrote meanwhile. */
	__u32 version;
	__u8 state;  /* enum fw_tcp_state; 0 for UDP and ICMP */
	__u8 status; /* enum fw_ct_status */
	__u8 orig;   /* which end of the key sent the first packet */
	__u8 retrans;
	__u8 last_index;
	__u8 last_dir;
	__u8 last_flags;
	__u8 last_wscale;
	__u16 last_win;
	__u16 pad;
	__u32 last_seq;
	__u32 last_ack;
	__u32 last_end;
	struct fw_ct_half dir[2];
	/* Synproxy: the cookie (the ISN the client saw) minus the server's ISN,
	 * and the client's ISN and MSS while the server's SYN/ACK is awaited. */
	__u32 proxy_delta;
	__u32 proxy_isn;
	__u16 proxy_mss;
	__u16 pad2;
	/* A hash of the key the entry was made for: a map may hand an element
	 * to another key while a CPU still holds it (an LRU evicts, a hash
	 * map reuses a freed element at once), which this tells. */
	__u32 key_hash;
	__u64 expires_ns;
	/* Not before this time does an assured embryonic entry try the
	 * established table again (it was full, or the source's share was). */
	__u64 promote_after_ns;
	__u64 start_ns;
	__u64 packets[2];
	__u64 bytes[2];
};


/* A range of the candidate array: rules [start, start+len), ascending. */
struct fw_span {
	__u32 start;
	__u32 len;
};

/* Classification. The control plane anchors each rule on one field it sets
 * (source prefix, destination prefix, source or destination port range) or,
 * with none, on its family and protocol; a packet then checks only the
 * rules anchored on its own values.
 *
 * Prefixes: the anchor prefixes of one family and direction cut the address
 * space into intervals; each interval knows the longest anchor prefix that
 * covers it (a node), and each node its rules and the next shorter anchor
 * prefix that covers it (its parent). IPv4 intervals are found by a search
 * tree (struct fw_snode4), IPv6 intervals by a binary search of the
 * direction's range (fw_set). */
struct fw_range {
	__u32 lo;
	__u32 hi; /* inclusive */
};

/* One direction's IPv4 intervals in a static search tree of
 * FW_SNODE_KEYS-way nodes: level 0 holds every interval's start (host
 * order, ascending) and node, FW_SNODE_KEYS to a tree node; each level
 * above holds the first start of each node below, up to a single node.
 * A search reads one tree node per level, counting the starts at or below
 * the address without a branch. A binary search read a line per step, and
 * in a /16 that holds many rules most of them were cache misses (8.5 a
 * packet in the ipc-like set at 100,000 rules); here the upper levels are
 * few and stay in cache. n is how many of key[] are starts; node[] is
 * used on level 0 only. */
#define FW_SNODE_KEYS 15
#define FW_STREE_LEVELS 6 /* 15^6 > 2^20 intervals: 2 per anchor prefix, 2^18 rules */

struct fw_snode4 {
	__u32 key[FW_SNODE_KEYS];
	__u32 n;
	__u32 node[FW_SNODE_KEYS];
	__u32 pad;
};

struct fw_ivl6 {
	__u64 hi; /* start address, host byte order */
	__u64 lo;
	__u32 node;
	__u32 pad;
};

/* Node 0 is "no anchor prefix". first is the lowest prio of the node's
 * rules and its parents': a walk stops at a node that cannot beat the best
 * match so far, without reading its rules. */
struct fw_node {
	struct fw_span span;
	__u32 parent;
	__u32 first;
};

/* Ports: a segment tree over 0-65535. A range is stored on the at most 32
 * aligned blocks that tile it; a port lies in one block per level 0-16
 * (block (1 << l) + (port >> (16 - l))), and masks say which of its 17
 * blocks hold rules: levels 0-10 (blocks of 64 ports or more) per
 * port >> FW_PORT_WIDE_SHIFT (struct fw_pwide), levels 11-16 per port.
 * Memory is linear in the rules whatever their nesting. */
#define FW_PORT_LEVELS 17
#define FW_PORT_BLOCKS (1 << FW_PORT_LEVELS)
#define FW_PORT_WIDE_LEVELS 11
#define FW_PORT_WIDE_SHIFT (16 - FW_PORT_WIDE_LEVELS + 1)
/* Port trees: source and destination port, of TCP, then of UDP. */
#define FW_PORT_TREES 4

/* The levels of 64 ports (port >> FW_PORT_WIDE_SHIFT) in one read: the
 * levels 0-10 that hold rules, and a bit per port that has rules on levels
 * 11-16. The per-port masks are 256 KiB, and a read of a random place in
 * them costs a cache and TLB miss, some 100 ns here: most ports have no
 * narrow blocks, and this says so from 64 KiB. */
struct fw_pwide {
	__u32 levels;
	__u32 pad;
	__u64 narrow;
};

/* Per IPv4 /16 and direction, a nibble (16 to a word): 0 when no anchor
 * prefix covers part of the /16, else a class q whose floor
 * FW_CLS4_FLOOR(q) is at most the lowest prio the /16's addresses can lead
 * to (the least first of the nodes of its intervals). 64 KiB that stay in
 * cache: a flood's random addresses mostly stop here, before the search
 * tree's lower levels, which are cache misses. */
#define FW_CLS4_FLOOR(q) ((q) < 2 ? 0 : 1U << ((q) + 14))
#define FW_CLS4_MAX 15


/* Rules anchored on no field, by family and protocol: index
 * (family == 6) * FW_WILD_PER_FAMILY + proto, and + 256 for the rules of any
 * protocol. A rule whose fields repeat an earlier rule's is never anchored:
 * it can never be the first match. */
#define FW_WILD_PER_FAMILY 257

/* One rule, every field ANDed. net/mask are over the IPv4-mapped 128-bit
 * address; a zero mask matches any address. Port ranges are inclusive, in
 * host byte order. The first match is the rule of lowest prio; id names
 * its counters and stays while the rule lives. A set installed whole gives
 * rule n id n and prio n << FW_PRIO_SHIFT, which leaves room for the rules
 * fw add puts between. */
struct fw_rule {
	__u8 family;
	__u8 proto; /* 0: any */
	__u8 action;
	__u8 flags; /* enum fw_rule_flag */
	__u16 sport_lo, sport_hi;
	__u16 dport_lo, dport_hi;
	__u32 id;
	__u32 prio;
	/* For the control plane: the next rule that repeats this one's fields
	 * (FW_RULE_DUP), which takes its place if fw del deletes it. */
	__u32 dup_next;
	/* The ct states it matches (enum fw_ct_state bits); 0: any. */
	__u8 ct_states;
	__u8 pad[3];
	__u32 src_net[4];
	__u32 src_mask[4];
	__u32 dst_net[4];
	__u32 dst_mask[4];
};

/* What a rule sets beyond its masks: a port range narrower than all ports
 * (which no fragment after the first matches), and which addresses it
 * gives, so that a /0 reads back as a /0 of its family rather than "any". */
enum fw_rule_flag {
	FW_RULE_PORTS = 1,
	FW_RULE_SRC = 2,
	FW_RULE_DST = 4,
	/* Repeats the fields of an earlier rule of the installed set, so no
	 * index holds it: it can never be the first match. */
	FW_RULE_DUP = 8,
};

/* Hulls over the candidate array: level l (1 to FW_HULL_LEVELS) holds one
 * rule per aligned block of 8^l candidates that matches every packet any
 * of them matches (common family and protocol, the longest prefixes that
 * cover all of theirs, the spans of their port ranges, their least prio).
 * A span longer than FW_HULL_SPAN skips each block within it whose hull
 * the packet misses, so that a list of many rules that all differ from
 * the packet in the same field (10,000 nested port ranges of one source
 * network, from another network) costs a few reads per level rather than
 * one per rule. */
#define FW_HULL_SHIFT 3
#define FW_HULL_LEVELS 6
#define FW_HULL_SPAN 64

/* Header of a rule set (index 0 of its set map). */
struct fw_set {
	__u32 nrules;
	__u8 default_action;
	__u8 pad[3];
	/* IPv6 intervals of the source (0) and destination (1), [lo, hi]. */
	struct fw_range ivl6[2];
	/* The IPv4 search trees of the source (0) and destination (1): their
	 * levels, and the index of each level's first tree node. */
	__u32 stree4_levels[2];
	__u32 stree4_base[2][FW_STREE_LEVELS];
	/* The index of each hull level's first hull; 8 rather than
	 * FW_HULL_LEVELS, so that an index masked with 7 is in bounds. */
	__u32 hull_base[8];
	/* Which indexes hold rules (enum fw_set_flag): an empty one costs no
	 * lookup. */
	__u32 flags;
	__u32 pad2;
	/* The lowest prio of the rules on each port tree's level: a packet
	 * skips a level whose rules cannot beat the best match found so far.
	 * Under a flood a protocol-only rule has mostly matched by then, and
	 * the level's block and candidates would be two cache misses. */
	__u32 port_first[FW_PORT_TREES][FW_PORT_LEVELS];
	/* ... and of each tree: under a flood most packets skip both. */
	__u32 port_tree_first[FW_PORT_TREES];
	/* A bit per 64 ports of each tree whose struct fw_pwide holds any
	 * level: most random ports fall in none, and this is read anyway. */
	__u64 port_groups[FW_PORT_TREES][1 << (16 - FW_PORT_WIDE_SHIFT) >> 6];
};

enum fw_set_flag {
	FW_SET_SRC4 = 1,
	FW_SET_DST4 = 2,
	FW_SET_SRC6 = 4,
	FW_SET_DST6 = 8,
	FW_SET_SPORT = 16,
	FW_SET_DPORT = 32,
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
	FW_C_FLOW_REPLACED,
	/* Packets by ct state. */
	FW_C_CT_NEW,
	FW_C_CT_ESTABLISHED,
	FW_C_CT_RELATED,
	FW_C_CT_INVALID,
	FW_C_CT_UNTRACKED,
	/* Entries created (embryonic), moved to the established table, and
	 * left embryonic because that table was full. */
	FW_C_CT_CREATED,
	FW_C_CT_PROMOTED,
	FW_C_CT_EST_FULL,
	/* Assured connections kept in the embryonic table because their
	 * source holds its share of the established one already. */
	FW_C_CT_SRC_QUOTA,
	/* Packets whose entry another CPU held too long: their state was
	 * read without the lock, and their changes not written. */
	FW_C_CT_BUSY,
	/* The host's own packets tracked at egress (host mode), and of
	 * them those conntrack found invalid (they leave all the same: the
	 * firewall filters what comes in). */
	FW_C_CT_EGRESS,
	FW_C_CT_EGRESS_INVALID,
	/* Fragments after the first whose first was not seen (or is gone):
	 * without ports, and untracked. */
	FW_C_FRAG_NO_FIRST,
	/* TCP packets conntrack ignores (accepted, state unchanged). */
	FW_C_CT_IGNORED,
	/* Synproxy: SYNs answered with a cookie, cookie ACKs that passed and
	 * failed, connections the server completed. */
	FW_C_SYNPROXY_SYN,
	FW_C_SYNPROXY_ACK_OK,
	FW_C_SYNPROXY_ACK_BAD,
	FW_C_SYNPROXY_OPENED,
	/* Packets to the synproxy's port that no connection explains: an RST
	 * or SYN/ACK without one, a proxied connection's invalid segment. */
	FW_C_SYNPROXY_INVALID,
	FW_C_MAX,
};

/* The monitor's reason for a frame the synproxy dropped or passed (its
 * own counters, synproxy_*, say why); the others are enum fw_counter's. */
#define FW_MON_SYNPROXY 1000

/* Two rule sets exist: the active one, gen & 1, and the one being built. */
#define FW_SLOTS 2

/* Per-rule counters of both slots: index slot << FW_STATS_SLOT_SHIFT | rule.
 * A set has at most (1 << FW_STATS_SLOT_SHIFT) - 1 rules. */
#define FW_STATS_SLOT_SHIFT 18

#define FW_PRIO_SHIFT 12

/* fw add and fw del change a rule set without rebuilding it: an overlay
 * says which of the installed set's rules are deleted (a bit per id in
 * fw_dead) and which rules were added (fw_added, ascending prio, checked
 * for every new flow). Two overlays exist, like the slots: fw_gen & 1
 * picks one, so that a change is built in the other and made active with
 * the same one write; the installed set's maps are shared. */
struct fw_overlay {
	__u32 base;    /* the slot of the installed set's maps */
	__u32 stats;   /* the slot of its counters in fw_stats */
	__u32 nadded;  /* rules in fw_added */
	__u32 next_id; /* for the control plane: the next rule's id */
	__u32 nbase;   /* rules of the installed set: ids 1 to nbase */
	/* What no rule matches gets, as in the set's header: with no rules at
	 * all (nbase and nadded 0) a packet needs nothing else. */
	__u32 default_action;
};

/* Rules that can be added to a set before fw add installs it whole. */
#define FW_MAX_ADDED 4096
/* Words of one overlay's bitmap of deleted ids. */
#define FW_DEAD_WORDS (1 << (FW_STATS_SLOT_SHIFT - 6))

#endif
