/* SCION-IP translator: an unmodified IPv6 host talks over SCION.
 *
 * The host routes SCION-mapped IPv6 (fc00::/8) into a device pair of the
 * translator's own (tra0 → tra1) that has neither TSO nor checksum offload:
 * the kernel cuts TCP super-packets into segments and completes checksums
 * on the way, in one pass, so that what arrives at tra1 is one IPv6 packet
 * per SCION packet. Checksums are updated through the kernel's helper all
 * the same, which keeps a still pending one (the offloads turned on again
 * behind the translator's back) right for the device that completes it.
 *
 *   tra_out (TC ingress of tra1): IPv6 → SCION/UDP/IPv4 to the AS's router
 *   tra_in  (XDP on the underlay device): SCION → IPv6, into tra1 → tra0
 *
 * Each direction is a list of named steps; each returns CONTINUE, REPLY
 * (answer the host with the ICMPv6 error the step put in the packet state)
 * or the action it decided. A packet without a path yet goes to the daemon,
 * which sends it again once the path is there. Nothing a sender outside the
 * host controls reaches the host unless a border router of the AS (or, for
 * the empty path, the local host named as the source) handed it over. */
#include "common.h"
#include <bpf/bpf_core_read.h>
#include "parse.h"
#define CSUM_SKB
#include "csum.h"
#include "scion.h"
#include "tra_shared.h"
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/icmpv6.h>

#ifndef AF_INET
#define AF_INET 2
#endif
#define IPPROTO_ICMPV6_ 58
#define IPPROTO_FRAGMENT_ 44

/* A step asks for an ICMPv6 error to the host (type, code and parameter in
 * the packet state); the program sends it from one place. */
#define REPLY (-2)
/* At the host's end: the packet goes on through the pair (hold_only). */
#define PASS_ON (-3)

/* The translator's configuration, written by the control plane. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tra_config);
} tra_conf SEC(".maps");

/* Where each destination AS's paths are, by its ISD-AS (network order):
 * its entry of tra_sets and that entry's generation. The daemon writes a
 * set whole into a free entry, then points the destination to it with one
 * update here; neither update waits for a grace period (a map of maps
 * does, on each update from userspace). A hash element the kernel recycles
 * at once for another key cannot hand a packet another AS's paths: the set
 * names its AS and generation, and both are checked. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TRA_MAX_DESTS);
	__type(key, __u64);
	__type(value, struct tra_set_ref);
} tra_dests SEC(".maps");

/* The destinations' sets of paths. An entry is written only while no
 * destination points to it and none has for a while (dataplane.go: longer
 * than a program runs), so that a packet reads one set whole. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRA_SETS);
	__type(key, __u32);
	__type(value, struct tra_dest);
} tra_sets SEC(".maps");

/* When the daemon last said it is there (bpf_ktime_get_coarse_ns, written
 * each second; 0: no daemon has run yet): a packet without a path is held
 * for a daemon only while one reads them. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tra_heartbeat SEC(".maps");

/* When each destination last had a packet (coarse monotonic time in units
 * of 2^30 ns), by its slot: the daemon refreshes and probes only what is in
 * use, and forgets what is idle. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRA_MAX_DESTS);
	__type(key, __u32);
	__type(value, __u32);
} tra_used SEC(".maps");

/* The AS's border routers' internal addresses (topology.json): the only
 * senders of SCION with a standard path to the host. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TRA_MAX_ROUTERS);
	__type(key, struct tra_addr4);
	__type(value, __u8);
} tra_routers SEC(".maps");

/* Packets waiting for a path, for the daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} tra_held SEC(".maps");

/* SCMP errors, the host's ICMPv6 errors and probe replies, for the daemon:
 * a queue of their own, so that a burst of them never takes the room of a
 * new flow's first packets. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} tra_events SEC(".maps");

/* SCMP traceroute replies, for the daemon's path probes. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} tra_probes SEC(".maps");

/* The host's end of the pair, for redirects into it. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} tra_host_port SEC(".maps");

/* Packets and bytes per direction and verdict, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * TRA_VERDICT_MAX);
	__type(key, __u32);
	__type(value, struct tra_counter);
} tra_counters SEC(".maps");

/* The daemon's own counters (enum tra_daemon_counter), written by it; here
 * so that they are pinned with the rest and outlive a daemon. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRA_D_MAX);
	__type(key, __u32);
	__type(value, __u64);
} tra_daemon SEC(".maps");

/* Unused by the programs: put the enums and struct tra_event (a ring
 * buffer has no value type) into BTF for bpf2go. */
volatile const enum tra_verdict tra_verdict_anchor = TRA_VERDICT_MAX;
volatile const enum tra_daemon_counter tra_daemon_anchor = TRA_D_MAX;
const struct tra_event *tra_event_anchor __attribute__((unused));
const struct tra_probe_reply *tra_probe_reply_anchor __attribute__((unused));

/* Counters per direction and verdict: tra_out's come first, then tra_in's,
 * so that each program's packets add up to what it was handed. */
static __always_inline void count(__u32 dir, __u32 v, __u32 bytes)
{
	__u32 key = dir * TRA_VERDICT_MAX + v;
	struct tra_counter *c = bpf_map_lookup_elem(&tra_counters, &key);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

#define count_out(v, bytes) count(TRA_DIR_OUT, v, bytes)
/* tra_in's verdicts also note themselves in its packet (p->verdict), for
 * the monitor: every caller has the packet as p. */
#define count_in(v, bytes) (p->verdict = (v), count(TRA_DIR_IN, v, bytes))

/* How much of a packet an event carries: the mask bounds it for the
 * verifier (a clamp alone is lost in clang's rewrites), the clamp for us. */
static __always_inline __u32 event_len(__u32 n)
{
	n &= 0x7ff;
	return n > TRA_HELD_MAX ? TRA_HELD_MAX : n;
}

/* ---- Shared: checksums and SCION addresses --------------------------------- */

static __always_inline __u64 sum_bytes16(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;

	return (__u64)w[0] + w[1] + w[2] + w[3];
}

/* The SCION host address of an SM-IP address: its IPv4 address (IPv4 form:
 * local prefix 0, IID 0:ffff:a.b.c.d) or itself. Returns 4 or 16. */
static __always_inline int smip_host_len(const __u8 *smip)
{
	const __u32 *w = (const __u32 *)smip;

	/* The local prefix is the low 24 bits of the upper half for the BGP
	 * form, 8 for the public form: both zero in the IPv4 form. */
	__u32 hi_lo = bpf_ntohl(w[1]);
	__u8 form = (bpf_ntohl(w[0]) >> 8) & 0xf;
	__u32 local = form == 0xe ? hi_lo & 0xff : hi_lo & 0xffffff;

	if (local == 0 && w[2] == bpf_htonl(0xffff))
		return 4;
	return 16;
}

/* The ISD-AS an SM-IP address encodes, network order; 0 if it is not one. */
static __always_inline __u64 smip_ia(const __u8 *smip)
{
	__u64 hi = ((__u64)bpf_ntohl(((const __u32 *)smip)[0]) << 32) | bpf_ntohl(((const __u32 *)smip)[1]);
	__u64 isd, as;
	__u8 field;

	if (hi >> 56 != 0xfc)
		return 0;
	isd = hi >> 44 & 0xfff;
	field = hi >> 40 & 0xf;
	if (!(field & 0x8))
		as = hi >> 24 & 0xfffff;
	else if (field == 0xe)
		as = (2ULL << 32) | (hi >> 8 & 0xffffffff);
	else
		return 0;
	return bpf_cpu_to_be64(isd << 48 | as);
}

/* The SM-IP address of a SCION address: an IPv4 host in its IPv4 form; an
 * IPv6 host must be an SM-IP address of that ISD-AS. Returns 0 or -1. */
static __always_inline int scion_to_smip(__u64 ia_be, const __u8 *host, int host_len, __u8 *out)
{
	__u64 ia = bpf_be64_to_cpu(ia_be);
	__u64 isd = ia >> 48, as = ia & 0xffffffffffffULL, hi;

	/* ISD 0 and AS 0 are wildcards, no AS's address. */
	if (isd == 0 || as == 0)
		return -1;
	if (host_len == 16) {
		if (smip_ia(host) != ia_be)
			return -1;
		__builtin_memcpy(out, host, 16);
		return 0;
	}
	if (isd > 0xfff)
		return -1;
	if (as < (1 << 19))
		hi = 0xfcULL << 56 | isd << 44 | as << 24;
	else if (as >> 32 == 2)
		hi = 0xfcULL << 56 | isd << 44 | 0xeULL << 40 | (as & 0xffffffff) << 8;
	else
		return -1;
	((__u32 *)out)[0] = bpf_htonl(hi >> 32);
	((__u32 *)out)[1] = bpf_htonl(hi);
	((__u32 *)out)[2] = bpf_htonl(0xffff);
	__builtin_memcpy(out + 12, host, 4);
	return 0;
}

/* The difference between two pseudo-headers' sums, as the checksum helpers
 * take it: sum(add) - sum(sub) in ones' complement. */
static __always_inline __u32 csum_sub_add(__u64 sub, __u64 add)
{
	return (__u32)(__u16)~csum_fold32(sub) + csum_fold32(add);
}

/* ---- Egress: IPv6 from the host → SCION ------------------------------------ */

/* Where an outgoing packet stands. */
struct tra_out_pkt {
	struct tra_config *cfg;
	__u32 len;         /* bytes from the IPv6 header on */
	__u16 l4_len;      /* IPv6 payload */
	__u8 proto;        /* IPv6 next header */
	__u8 scion_proto;  /* SCION NextHdr */
	__u8 tclass;
	__u8 hop_limit;
	__u8 tcp_flags;
	__u8 pad;
	__u32 flow;        /* 20-bit FlowID */
	__u8 src[16] __attribute__((aligned(8)));
	__u8 dst[16] __attribute__((aligned(8)));
	__u64 dst_ia;      /* network order */
	__u8 dst_host_len; /* 4 or 16 */
	__u8 src_host_len;
	__u16 scion_len;   /* the SCION header: common, address, path */
	struct tra_path *path;
	__u16 l4_csum_off; /* from the IPv6 header */
	/* The ICMPv6 error a step asks for (REPLY), and whom it is from: the
	 * destination (0) or the translator, the host's gateway (1). */
	__u8 err_type;
	__u8 err_code;
	__u32 err_param;
	__u8 err_from_gw;
	__u8 no_reply; /* an ICMPv6 error: no error answers one (RFC 4443 2.4 e) */
	/* At the host's end, a packet the kernel has still to complete: held
	 * there if it has no path (its sender is known there, not past the
	 * pair), passed on through the pair otherwise. */
	__u8 hold_only;
	__u8 at_egress; /* at the host's end of the pair (tra_out_egress) */
};

#define ETH_LEN 14
#define IP6_LEN 40
#define OUT_HDRS (20 + 8) /* IPv4 and UDP in front of the SCION header */

static __always_inline int reply(struct tra_out_pkt *p, __u8 type, __u8 code, __u32 param)
{
	if (p->no_reply)
		return TC_ACT_SHOT;
	p->err_type = type;
	p->err_code = code;
	p->err_param = param;
	return REPLY;
}

/* Whether the packet is an ICMPv6 error, seen through a first fragment's
 * header: the errors the translator sends the host must not answer one. */
static __always_inline int is_icmp6_error(const struct ipv6hdr *ip6, const void *end)
{
	const __u8 *l4 = (const __u8 *)(ip6 + 1);
	__u8 nh = ip6->nexthdr;

	if (nh == IPPROTO_FRAGMENT_) {
		if (!PKT_HAS(l4, 9, end) || (*(const __u16 *)(l4 + 2) & bpf_htons(0xfff8)))
			return 0;
		nh = l4[0];
		l4 += 8;
	}
	return nh == IPPROTO_ICMPV6_ && PKT_HAS(l4, 1, end) && l4[0] < 128;
}

static __always_inline int parse_ipv6_out(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	void *data, *end;
	struct ethhdr *eth;
	struct ipv6hdr *ip6;

	/* Headers and the first bytes of L4 (the TCP options of a SYN); a
	 * bare ACK or a small datagram is all there is. */
	bpf_skb_pull_data(skb, skb->len < 128 ? skb->len : 128);
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	eth = data;
	ip6 = data + ETH_LEN;
	if (!PKT_HAS(ip6, IP6_LEN, end) || eth->h_proto != bpf_htons(ETH_P_IPV6) || ip6->version != 6) {
		/* ARP, IPv4: nothing the host should send here. */
		count_out(TRA_NOT_SMIP, skb->len);
		return TC_ACT_SHOT;
	}
	/* One SCION packet per IPv6 packet: the pair cuts GSO packets before
	 * they get here while its offloads are off (tra run keeps them so);
	 * a GSO packet cannot be translated. */
	if (skb->gso_size) {
		count_out(TRA_OFFLOAD, skb->len);
		return TC_ACT_SHOT;
	}
	p->proto = ip6->nexthdr;
	p->l4_len = bpf_ntohs(ip6->payload_len);
	p->len = skb->len - ETH_LEN;
	p->tclass = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	p->flow = ((ip6->flow_lbl[0] & 0xf) << 16) | (ip6->flow_lbl[1] << 8) | ip6->flow_lbl[2];
	p->hop_limit = ip6->hop_limit;
	p->no_reply = is_icmp6_error(ip6, end);
	__builtin_memcpy(p->src, &ip6->saddr, 16);
	__builtin_memcpy(p->dst, &ip6->daddr, 16);
	if (IP6_LEN + p->l4_len != p->len) {
		count_out(TRA_PARSE_ERROR, skb->len);
		return TC_ACT_SHOT;
	}
	return CONTINUE;
}

/* The destination's ISD-AS and host from its SM-IP address; the source
 * must be this host's. A host of this AS is reached over the IPv4 underlay
 * at its IPv4 address: one with an IPv6 SCION address cannot be. */
static __always_inline int map_destination(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	p->dst_ia = smip_ia(p->dst);
	if (!p->dst_ia) {
		count_out(TRA_NOT_SMIP, skb->len);
		return TC_ACT_SHOT;
	}
	if (((__u64 *)p->src)[0] != ((__u64 *)p->cfg->host_smip)[0] ||
	    ((__u64 *)p->src)[1] != ((__u64 *)p->cfg->host_smip)[1]) {
		count_out(TRA_NOT_SMIP, skb->len);
		return TC_ACT_SHOT;
	}
	p->dst_host_len = smip_host_len(p->dst);
	p->src_host_len = p->cfg->host_is4 ? 4 : 16;
	if (p->dst_ia == p->cfg->local_ia && p->dst_host_len == 16) {
		count_out(TRA_UNREACHABLE, skb->len);
		return reply(p, ICMPV6_DEST_UNREACH, ICMPV6_ADDR_UNREACH, 0);
	}
	return CONTINUE;
}

/* The translator is the host's first hop (its gateway, fe80::1): a packet
 * whose hop limit runs out here is answered as a router answers it. */
static __always_inline int check_hop_limit(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	if (p->hop_limit > 1)
		return CONTINUE;
	count_out(TRA_HOP_LIMIT, skb->len);
	p->err_from_gw = 1;
	return reply(p, ICMPV6_TIME_EXCEED, ICMPV6_EXC_HOPLIMIT, 0);
}

/* An ICMPv6 error from the host goes to the daemon, which sends it as SCMP
 * with the quoted packet as it was in SCION (errors are rare, and their
 * quotes need rebuilding). */
static __always_inline int icmp_error_to_daemon(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	struct tra_event *e = bpf_ringbuf_reserve(&tra_events, sizeof(*e), 0);
	__u32 n;

	if (!e) {
		count_out(TRA_QUEUE_FULL, skb->len);
		return TC_ACT_SHOT;
	}
	__builtin_memset(e, 0, __builtin_offsetof(struct tra_event, data));
	e->kind = TRA_EV_ICMP;
	e->ia = p->dst_ia;
	n = event_len(p->len);
	e->len = n;
	if (!n || bpf_skb_load_bytes(skb, ETH_LEN, e->data, n)) {
		bpf_ringbuf_discard(e, 0);
		count_out(TRA_PARSE_ERROR, skb->len);
		return TC_ACT_SHOT;
	}
	bpf_ringbuf_submit(e, 0);
	count_out(TRA_ICMP_ERROR, skb->len);
	return TC_ACT_SHOT;
}

/* SCION carries no fragments, and the translator reassembles none: a host
 * fragments a UDP datagram larger than the path MTU (after a Packet Too
 * Big) and gets, for its first fragment, a parameter problem at the next
 * header that names the fragment header, which Linux reports on the socket
 * (EPROTO); the other fragments go without a word. */
static __always_inline int refuse_fragment(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	__u8 *frag = data + ETH_LEN + IP6_LEN;

	count_out(TRA_FRAGMENT, skb->len);
	if (!PKT_HAS(frag, 8, end))
		return TC_ACT_SHOT;
	/* Offset zero: the first fragment, which holds the upper layer's
	 * header that the host matches the error to. */
	if ((*(__u16 *)(frag + 2) & bpf_htons(0xfff8)) != 0)
		return TC_ACT_SHOT;
	return reply(p, ICMPV6_PARAMPROB, ICMPV6_UNK_NEXTHDR, __builtin_offsetof(struct ipv6hdr, nexthdr));
}

/* The L4 header: TCP, UDP, ICMPv6 echo (SCMP echo, same types and layout)
 * and the ICMPv6 errors SCMP has. */
static __always_inline int parse_l4_out(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	void *l4 = data + ETH_LEN + IP6_LEN;

	switch (p->proto) {
	case IPPROTO_TCP: {
		struct tcphdr *tcp = l4;

		if (!PKT_HAS(tcp, sizeof(*tcp), end))
			goto bad;
		p->scion_proto = IPPROTO_TCP;
		p->l4_csum_off = IP6_LEN + 16;
		p->tcp_flags = ((__u8 *)tcp)[13];
		return CONTINUE;
	}
	case IPPROTO_UDP: {
		struct udphdr *udp = l4;

		if (!PKT_HAS(udp, sizeof(*udp), end))
			goto bad;
		p->scion_proto = IPPROTO_UDP;
		p->l4_csum_off = IP6_LEN + 6;
		return CONTINUE;
	}
	case IPPROTO_ICMPV6_: {
		__u8 *icmp = l4;

		if (!PKT_HAS(icmp, 8, end))
			goto bad;
		switch (icmp[0]) {
		case ICMPV6_ECHO_REQUEST:
		case ICMPV6_ECHO_REPLY:
			break;
		case ICMPV6_DEST_UNREACH:
		case ICMPV6_PKT_TOOBIG:
		case ICMPV6_PARAMPROB:
			return icmp_error_to_daemon(skb, p);
		default: /* time exceeded, neighbour discovery, MLD: nothing in SCMP */
			count_out(TRA_UNSUPPORTED, skb->len);
			return TC_ACT_SHOT;
		}
		p->scion_proto = SCION_PROTO_SCMP;
		p->l4_csum_off = IP6_LEN + 2;
		return CONTINUE;
	}
	case IPPROTO_FRAGMENT_:
		return refuse_fragment(skb, p);
	default:
		count_out(TRA_UNSUPPORTED, skb->len);
		return TC_ACT_SHOT;
	}
bad:
	count_out(TRA_PARSE_ERROR, skb->len);
	return TC_ACT_SHOT;
}

/* A flow's hash: which of the destination's paths it takes, and its
 * FlowID. The flow label is left out: Linux changes a socket's label when
 * it suspects a dead path, which would move the flow for no SCION reason. */
static __always_inline __u32 flow_hash(struct __sk_buff *skb, const struct tra_out_pkt *p)
{
	__u32 h = 0x811c9dc5, ports = 0;
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	__u32 *l4 = data + ETH_LEN + IP6_LEN;

	if ((p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) && PKT_HAS(l4, 4, end))
		ports = *l4;
	h ^= ((const __u32 *)p->dst)[3] * 0x85ebca6b;
	h ^= ((const __u32 *)p->dst)[1] * 0xc2b2ae35;
	h ^= ports * 0x27d4eb2f;
	h ^= p->proto * 0x165667b1;
	h ^= h >> 16;
	h *= 0x7feb352d;
	h ^= h >> 15;
	return h;
}

/* The destination had a packet now: written only when the coarse clock has
 * moved on, so that the line is not written per packet. */
static __always_inline void mark_used(__u32 slot)
{
	__u32 key = slot & (TRA_MAX_DESTS - 1);
	__u32 *u = bpf_map_lookup_elem(&tra_used, &key);
	__u32 now = bpf_ktime_get_coarse_ns() >> 30;

	if (u && *u != now)
		*u = now;
}

/* A packet for the daemon: sent again once a path is there. At the host's
 * end of the pair it is not dropped: a drop there fails the sender's send
 * (ENOBUFS, as a TC program cannot take a packet quietly), and the sender
 * sends the same packet again — twice delivered once the daemon sends the
 * held copy (ping's replies came back duplicated). It goes on into the pair
 * marked, and tra_out drops it at the other end, where no sender hears of
 * it. The copy carries its socket owner's uid, known at the host's end
 * only: the daemon shares its lookups fairly among the host's users. */
static __always_inline int hold(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	struct tra_event *e;
	__u32 n;

	e = bpf_ringbuf_reserve(&tra_held, sizeof(*e), 0);
	if (!e) {
		count_out(TRA_QUEUE_FULL, skb->len);
		return TC_ACT_SHOT;
	}
	__builtin_memset(e, 0, __builtin_offsetof(struct tra_event, data));
	e->kind = TRA_EV_NO_PATH;
	e->ia = p->dst_ia;
	e->uid = bpf_get_socket_uid(skb);
	n = event_len(p->len);
	e->len = n;
	if (!n || p->len > TRA_HELD_MAX || bpf_skb_load_bytes(skb, ETH_LEN, e->data, n)) {
		bpf_ringbuf_discard(e, 0);
		count_out(TRA_QUEUE_FULL, skb->len);
		return TC_ACT_SHOT;
	}
	bpf_ringbuf_submit(e, 0);
	count_out(TRA_NO_PATH, skb->len);
	if (p->at_egress) {
		/* Its verdict is no_path; it still crosses the pair, as
		 * to_pair counts what does. */
		count_out(TRA_TO_PAIR, skb->len);
		skb->mark = TRA_HELD_MARK;
		return TC_ACT_OK;
	}
	return TC_ACT_SHOT;
}

/* Whether the daemon is gone: it wrote its heartbeat once and not for a
 * few seconds (stopped, killed, stuck). */
static __always_inline int daemon_gone(void)
{
	__u32 zero = 0;
	__u64 *beat = bpf_map_lookup_elem(&tra_heartbeat, &zero);

	return beat && *beat && (__s64)(bpf_ktime_get_coarse_ns() - *beat) > (__s64)TRA_HEARTBEAT_STALE_NS;
}

/* No path to send the packet on: held for the daemon, which sends it again
 * once it has one. With the daemon gone nobody would read it: the host
 * hears at once that there is no route (as the daemon would tell it after
 * a failed lookup), and its existing flows' packets in go on being
 * translated by tra_in. */
static __always_inline int no_path(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	if (daemon_gone()) {
		count_out(TRA_NO_DAEMON, skb->len);
		return reply(p, ICMPV6_DEST_UNREACH, ICMPV6_NOROUTE, 0);
	}
	return hold(skb, p);
}

/* Whether a path's expiry (Unix seconds; 0: none) has passed. BPF has no
 * wall clock, but CLOCK_TAI is Unix time plus the TAI-UTC offset the
 * kernel keeps (attach and the daemon copy it into the configuration), and
 * follows the clock's steps as CLOCK_REALTIME does. Compared in
 * nanoseconds: a multiplication per path, where Unix seconds would take a
 * division per packet; an expiry past 2^33 s (the year 2242) is none, so
 * that the product stays within 64 bits. tai holds the clock once read. */
static __always_inline int expired(const struct tra_config *cfg, __u64 expiry, __u64 *tai)
{
	if (!expiry || expiry >= 1ULL << 33)
		return 0;
	if (!*tai)
		*tai = bpf_ktime_get_tai_ns();
	return (__u64)((__s64)expiry + cfg->tai_offset) * 1000000000ULL <= *tai;
}

/* A path per destination AS, chosen per flow among those not expired (a
 * flow whose path expired moves to the next); none: the daemon gets the
 * packet and sends it again once it has one. The daemon removes a path
 * before it expires; this keeps an expired one out of use when the daemon
 * is not there to. The local AS needs none. */
static __always_inline int choose_path(struct __sk_buff *skb, struct tra_out_pkt *p, __u32 hash)
{
	struct tra_set_ref *ref;
	struct tra_dest *d;
	__u32 set, gen, n, first;
	__u64 tai = 0;

	if (p->dst_ia == p->cfg->local_ia)
		return p->hold_only ? PASS_ON : CONTINUE;
	ref = bpf_map_lookup_elem(&tra_dests, &p->dst_ia);
	if (!ref)
		return no_path(skb, p);
	set = ref->set;
	gen = ref->gen;
	d = bpf_map_lookup_elem(&tra_sets, &set);
	if (!d || d->ia != p->dst_ia || d->gen != gen || d->n == 0)
		return no_path(skb, p);
	mark_used(d->slot);
	n = d->n < TRA_MAX_PATHS ? d->n : TRA_MAX_PATHS;
	first = hash % n;
	/* clang drops a mask it can prove idle; the verifier cannot follow
	 * the modulo. */
	asm volatile("" : "+r"(first));
	for (__u32 k = 0; k < TRA_MAX_PATHS; k++) {
		struct tra_path *path;
		__u32 i = first + k;

		if (k >= n)
			break;
		if (i >= n)
			i -= n;
		path = &d->paths[i & (TRA_MAX_PATHS - 1)];
		if (expired(p->cfg, path->expiry, &tai))
			continue;
		if (p->hold_only)
			return PASS_ON;
		p->path = path;
		return CONTINUE;
	}
	return no_path(skb, p);
}

/* The SCION header this packet will carry: common (12), address (16 of
 * ISD-ASes and the two hosts), path. */
static __always_inline void size_scion(struct tra_out_pkt *p)
{
	__u16 path = p->path ? (p->path->len & (TRA_PATH_MAX - 1 | TRA_PATH_MAX)) : 0;

	p->scion_len = SCION_CMN_LEN + 2 * SCION_IA_LEN + p->dst_host_len + p->src_host_len + path;
}

#ifndef TCPOPT_MSS
#define TCPOPT_MSS 2
#endif

/* A TCP SYN asks for at most what fits the path: MSS = path MTU less the
 * SCION header and TCP's own. The checksum follows by the kernel's helper
 * (nothing to do while it is still pending). */
static __always_inline void clamp_mss(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct tcphdr *tcp = data + ETH_LEN + IP6_LEN;
	__u16 mss, old, new;
	__u32 at = 0;
	__u8 *opt;
	int max;

	if (p->proto != IPPROTO_TCP || !(p->tcp_flags & 0x02) || !p->path)
		return;
	if (!PKT_HAS(tcp, sizeof(*tcp), end))
		return;
	/* In signed arithmetic: a path too small for the headers (refused
	 * by the daemon, and dropped by check_path_mtu) would wrap. */
	max = (int)p->path->mtu - (int)p->scion_len - (int)sizeof(*tcp);
	if (max <= 0)
		return;
	opt = (__u8 *)(tcp + 1);
	/* Options up to 40 bytes; the MSS option is usually first. An option
	 * is read only if it lies whole within the header. */
	for (int i = 0; i < 10; i++) {
		if (!PKT_HAS(opt, 4, end) || opt >= (__u8 *)tcp + tcp->doff * 4)
			return;
		if (opt[0] > 1 && opt + 4 > (__u8 *)tcp + tcp->doff * 4)
			return;
		if (opt[0] == 0)
			return;
		if (opt[0] == 1) {
			opt++;
			continue;
		}
		if (opt[0] == TCPOPT_MSS && opt[1] == 4) {
			mss = (opt[2] << 8) | opt[3];
			if (mss <= max)
				return;
			old = *(__u16 *)(opt + 2);
			new = bpf_htons((__u16)max);
			at = (void *)(opt + 2) - data;
			break;
		}
		if (opt[1] < 2)
			return;
		opt += opt[1];
	}
	if (!at)
		return;
	if (bpf_skb_store_bytes(skb, at & 0xff, &new, 2, 0))
		return;
	/* At an odd offset from the TCP header the two bytes fall into two
	 * 16-bit words of the checksum, each in the other half: the sum sees
	 * them swapped. */
	if ((at - ETH_LEN - IP6_LEN) & 1) {
		old = (old >> 8) | (old << 8);
		new = (new >> 8) | (new << 8);
	}
	bpf_l4_csum_replace(skb, ETH_LEN + IP6_LEN + 16, old, new, 2);
	count_out(TRA_MSS_CLAMPED, 0);
}

/* A UDP datagram without a checksum (0: a tunnel's socket may send one so
 * over IPv6) gets one: SCION's UDP always has one, and an incremental move
 * leaves a zero field as it is. */
static __always_inline int complete_udp_csum(struct __sk_buff *skb, const struct tra_out_pkt *p)
{
	__u16 c;
	__u64 sum;

	if (bpf_skb_load_bytes(skb, ETH_LEN + IP6_LEN + 6, &c, 2) || c != 0)
		return 0;
	if (bpf_skb_pull_data(skb, skb->len))
		goto fail;
	sum = sum_bytes16(p->src) + sum_bytes16(p->dst) + bpf_htonl(p->l4_len) + bpf_htonl(IPPROTO_UDP);
	if (csum_skb(skb, ETH_LEN + IP6_LEN, p->l4_len, &sum))
		goto fail;
	c = ~csum_fold32(sum);
	if (c == 0)
		c = 0xffff;
	if (bpf_skb_store_bytes(skb, ETH_LEN + IP6_LEN + 6, &c, 2, 0))
		goto fail;
	return 0;
fail:
	count_out(TRA_PARSE_ERROR, skb->len);
	return -1;
}

/* The L4 checksum moves from IPv6's pseudo-header to SCION's: addresses
 * become ISD-ASes and hosts, ICMPv6's next header SCMP's; the length is the
 * same in both. A UDP checksum that comes out zero is sent as 0xffff. */
static __always_inline int move_l4_csum_out(struct __sk_buff *skb, const struct tra_out_pkt *p)
{
	__u64 sub = sum_bytes16(p->src) + sum_bytes16(p->dst) + bpf_htons(p->proto);
	/* Each half widened before the sum: in 32 bits it wraps for about one
	 * AS in 256, and the checksum comes out one off. */
	__u64 add = (__u64)(__u32)p->cfg->local_ia + (__u32)(p->cfg->local_ia >> 32) +
		    (__u32)p->dst_ia + (__u32)(p->dst_ia >> 32) + bpf_htons(p->scion_proto);
	__u64 flags = BPF_F_PSEUDO_HDR;

	add += p->src_host_len == 4 ? p->cfg->host_ip4 : sum_bytes16(p->src);
	add += p->dst_host_len == 4 ? ((const __u32 *)p->dst)[3] : sum_bytes16(p->dst);
	if (p->proto == IPPROTO_UDP) {
		if (complete_udp_csum(skb, p))
			return TC_ACT_SHOT;
		flags |= BPF_F_MARK_MANGLED_0;
	}
	if (bpf_l4_csum_replace(skb, ETH_LEN + p->l4_csum_off, 0, csum_sub_add(sub, add), flags)) {
		count_out(TRA_PARSE_ERROR, skb->len);
		return TC_ACT_SHOT;
	}
	return CONTINUE;
}

/* Too big for the path: the host gets ICMPv6 Packet Too Big with the MTU
 * that fits, quoting its packet (IPv6 minimum MTU: 1280 bytes in all). A
 * path that cannot carry even its SCION header (an MTU of 0: metadata
 * missing; the daemon installs no such path) is no path: a Packet Too Big
 * would name an MTU that wrapped, which Linux ignores, and every packet
 * would bounce. */
static __always_inline int check_path_mtu(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	int room, mtu;

	if (!p->path)
		return CONTINUE;
	room = (int)p->path->mtu - (int)p->scion_len; /* for the IPv6 payload */
	if (room <= 0) {
		count_out(TRA_BAD_PATH, skb->len);
		return TC_ACT_SHOT;
	}
	if (p->l4_len <= room)
		return CONTINUE;
	mtu = room + IP6_LEN;
	count_out(TRA_PTB, skb->len);
	return reply(p, ICMPV6_PKT_TOOBIG, 0, mtu < 1280 ? 1280 : mtu);
}

/* Builds the SCION packet in place: IPv6 (40) becomes IPv4 (20), UDP (8)
 * and the SCION header. */
static __always_inline int build_scion(struct __sk_buff *skb, struct tra_out_pkt *p, __u32 hash)
{
	void *data, *end;
	struct iphdr *ip;
	struct udphdr *udp;
	__u8 *c, *a;
	__u16 path_len = p->path ? p->path->len : 0;
	__u32 off, need;

	/* The 40 bytes of IPv6 header become IPv4, UDP and SCION: room for the
	 * difference after the Ethernet header, in one move of that header;
	 * the encapsulation flag makes the skb IPv4 (skb->protocol), which
	 * the neighbour output goes by. */
	if (bpf_skb_adjust_room(skb, OUT_HDRS + p->scion_len - IP6_LEN, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4))
		goto fail;
	/* What is written directly: underlay, common and address headers.
	 * Every packet has that much (an L4 header of 8 bytes at least
	 * follows the hosts). */
	need = ETH_LEN + OUT_HDRS + SCION_CMN_LEN + 2 * SCION_IA_LEN + p->dst_host_len + p->src_host_len;
	if (need > skb->len || bpf_skb_pull_data(skb, need))
		goto fail;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	ip = data + ETH_LEN;
	udp = (void *)(ip + 1);
	c = (void *)(udp + 1);
	if (!PKT_HAS(c, SCION_CMN_LEN + 2 * SCION_IA_LEN + 8, end))
		goto fail;
	((struct ethhdr *)data)->h_proto = bpf_htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = p->tclass;
	ip->tot_len = bpf_htons(OUT_HDRS + p->scion_len + p->l4_len);
	ip->id = 0;
	ip->frag_off = bpf_htons(0x4000);
	ip->ttl = 64;
	ip->protocol = IPPROTO_UDP;
	ip->check = 0;
	ip->saddr = p->cfg->host_ip4;
	if (p->path && p->path->len) {
		ip->daddr = p->path->next_hop;
		udp->dest = p->path->next_port;
	} else {
		/* The local AS: straight to the host (IPv4 hosts only). */
		ip->daddr = ((const __u32 *)p->dst)[3];
		udp->dest = bpf_htons(SCION_ENDHOST_PORT);
	}
	ip->check = ipv4_hdr_csum(ip);
	udp->source = p->cfg->underlay_port;
	udp->len = bpf_htons(8 + p->scion_len + p->l4_len);
	/* IPv4 allows no UDP checksum; the L4 checksum inside covers the
	 * payload end to end. */
	udp->check = 0;

	/* Common header: version 0, QoS, FlowID, NextHdr, HdrLen, PayloadLen,
	 * PathType, address types and lengths. The FlowID is the host's flow
	 * label (the same meaning, RFC 6437), or the flow's hash without one. */
	if (!p->flow)
		p->flow = hash & 0xfffff;
	c[0] = p->tclass >> 4;
	c[1] = (p->tclass << 4) | ((p->flow >> 16) & 0xf);
	c[2] = p->flow >> 8;
	c[3] = p->flow;
	c[4] = p->scion_proto;
	c[5] = p->scion_len / SCION_LINE;
	c[6] = p->l4_len >> 8;
	c[7] = p->l4_len;
	c[8] = path_len ? SCION_PATH_SCION : SCION_PATH_EMPTY;
	c[9] = (p->dst_host_len == 16 ? SCION_ADDR_IP6 : SCION_ADDR_IP4) << 4 |
	       (p->src_host_len == 16 ? SCION_ADDR_IP6 : SCION_ADDR_IP4);
	c[10] = 0;
	c[11] = 0;
	a = c + SCION_CMN_LEN;
	__builtin_memcpy(a, &p->dst_ia, 8);
	__builtin_memcpy(a + 8, &p->cfg->local_ia, 8);
	a += 16;
	/* Each combination of host lengths, checked for what it writes. */
	if (p->dst_host_len == 16) {
		if (!PKT_HAS(a, 16, end))
			goto fail;
		__builtin_memcpy(a, p->dst, 16);
		a += 16;
	} else {
		__builtin_memcpy(a, p->dst + 12, 4);
		a += 4;
	}
	if (p->src_host_len == 16) {
		if (!PKT_HAS(a, 16, end))
			goto fail;
		__builtin_memcpy(a, p->src, 16);
	} else {
		if (!PKT_HAS(a, 4, end))
			goto fail;
		__builtin_memcpy(a, &p->cfg->host_ip4, 4);
	}
	off = ETH_LEN + OUT_HDRS + SCION_CMN_LEN + 2 * SCION_IA_LEN + p->dst_host_len + p->src_host_len;
	if (path_len) {
		/* 1..TRA_PATH_MAX, in a form the verifier can bound. */
		__u32 n = ((path_len - 1) & (TRA_PATH_MAX - 1)) + 1;

		if (path_len > TRA_PATH_MAX || bpf_skb_store_bytes(skb, off & 0xff, p->path->raw, n, 0))
			goto fail;
	}
	return CONTINUE;
fail:
	count_out(TRA_PARSE_ERROR, skb->len);
	return TC_ACT_SHOT;
}

/* To the first hop by the route the host's own FIB gives for it (a router
 * of another subnet is reached through its gateway), with L2 from the
 * neighbour table, resolved by the kernel if need be. The daemon keeps each
 * path's gateway as the host's routes say (a route lookup a packet cost
 * the host a twentieth of its UDP); without one — a host of this AS, a path
 * the daemon has not seen yet — the helper makes the output route lookup
 * the host's stack would (bpf_fib_lookup would want forwarding on the
 * host's device). */
static __always_inline int send_to_as(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	struct bpf_redir_neigh nh = { .nh_family = AF_INET };
	long ret;

	if (p->path && p->path->gateway) {
		nh.ipv4_nh = p->path->gateway;
		ret = bpf_redirect_neigh(p->cfg->underlay_ifindex, &nh, sizeof(nh), 0);
	} else {
		ret = bpf_redirect_neigh(p->cfg->underlay_ifindex, NULL, 0, 0);
	}

	if (ret != TC_ACT_REDIRECT) {
		count_out(TRA_TX_FAILED, skb->len);
		return TC_ACT_SHOT;
	}
	count_out(TRA_OUT, skb->len);
	return ret;
}

/* The ICMPv6 error a step asked for, built from the packet itself: a new
 * IPv6 and ICMPv6 header in front, what does not fit 1280 bytes cut, back
 * out of tra1 to the host. */
static __always_inline int send_icmp6_error(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	struct ethhdr *eth;
	struct ipv6hdr *ip6;
	__u8 *icmp, from[16] __attribute__((aligned(8)));
	void *data, *end;
	__u32 quote, plen;
	__u64 sum = 0;
	__u8 mac[6];

	if (p->err_from_gw) {
		/* fe80::1, the host's route to fc00::/8. */
		__builtin_memset(from, 0, 16);
		from[0] = 0xfe;
		from[1] = 0x80;
		from[15] = 1;
	} else {
		__builtin_memcpy(from, p->dst, 16);
	}
	/* An ICMPv6 error quotes as much as fits the minimum MTU. */
	quote = p->len < 1280 - IP6_LEN - 8 ? p->len : 1280 - IP6_LEN - 8;
	if (bpf_skb_change_tail(skb, ETH_LEN + quote, 0))
		goto fail;
	if (bpf_skb_adjust_room(skb, IP6_LEN + 8, BPF_ADJ_ROOM_MAC, 0))
		goto fail;
	if (bpf_skb_pull_data(skb, 0))
		goto fail;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	eth = data;
	ip6 = data + ETH_LEN;
	icmp = (void *)(ip6 + 1);
	if (!PKT_HAS(icmp, 8, end))
		goto fail;
	__builtin_memcpy(mac, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, mac, 6);
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	plen = 8 + quote;
	ip6->version = 6;
	ip6->priority = 0;
	__builtin_memset(ip6->flow_lbl, 0, 3);
	ip6->payload_len = bpf_htons(plen);
	ip6->nexthdr = IPPROTO_ICMPV6_;
	ip6->hop_limit = 64;
	__builtin_memcpy(&ip6->saddr, from, 16);
	__builtin_memcpy(&ip6->daddr, p->src, 16);
	icmp[0] = p->err_type;
	icmp[1] = p->err_code;
	icmp[2] = 0;
	icmp[3] = 0;
	*(__u32 *)(icmp + 4) = bpf_htonl(p->err_param);
	sum = sum_bytes16(from) + sum_bytes16(p->src) + bpf_htonl(plen) + bpf_htonl(IPPROTO_ICMPV6_);
	if (csum_skb(skb, ETH_LEN + IP6_LEN, plen, &sum))
		goto fail;
	*(__u16 *)(icmp + 2) = ~csum_fold32(sum);
	return bpf_redirect(p->cfg->host_ifindex, 0);
fail:
	count_out(TRA_PARSE_ERROR, skb->len);
	return TC_ACT_SHOT;
}

/* Runs the egress steps; REPLY from any of them ends in one place. */
static __always_inline int tra_out_steps(struct __sk_buff *skb, struct tra_out_pkt *p)
{
	__u32 hash;
	int ret;

	if ((ret = parse_ipv6_out(skb, p)) != CONTINUE)
		return ret;
	if ((ret = map_destination(skb, p)) != CONTINUE)
		return ret;
	if ((ret = check_hop_limit(skb, p)) != CONTINUE)
		return ret;
	if ((ret = parse_l4_out(skb, p)) != CONTINUE)
		return ret;
	hash = flow_hash(skb, p);
	if ((ret = choose_path(skb, p, hash)) != CONTINUE)
		return ret;
	size_scion(p);
	if ((ret = check_path_mtu(skb, p)) != CONTINUE)
		return ret;
	clamp_mss(skb, p);
	if ((ret = move_l4_csum_out(skb, p)) != CONTINUE)
		return ret;
	if ((ret = build_scion(skb, p, hash)) != CONTINUE)
		return ret;
	return send_to_as(skb, p);
}

/* Where tra_out runs: at the host's end of the pair as the host sends
 * (EGRESS), or at the translator's end once the packet has crossed the
 * pair (INGRESS). */
enum tra_hook { TRA_AT_INGRESS, TRA_AT_EGRESS };

#include "kern.h"

extern void *bpf_cast_to_kern_ctx(void *) __ksym;

/* Whether the kernel has still to complete the L4 checksum (a TCP segment:
 * TCP leaves it to the device, which for the pair is the kernel's
 * validate_xmit_skb, after the egress hook). */
static __always_inline int csum_pending(struct __sk_buff *skb)
{
	struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);

	return BPF_CORE_READ_BITFIELD(kskb, ip_summed) == CHECKSUM_PARTIAL;
}

/* At the host's end, before the pair: what the kernel's transmit path has
 * still to make translatable goes on through the pair instead — a GSO
 * packet to be cut, and a pending checksum unless the underlay device
 * completes it in software (it has no checksum offload). Translated with
 * its sum pending, a packet would leave a veth whose peer runs XDP (the
 * AS's router) with the pseudo-header's sum only, and nothing on the way
 * completes it. */
static __always_inline int translatable_here(struct __sk_buff *skb, const struct tra_config *cfg)
{
	if (skb->gso_size)
		return 0;
	return cfg->underlay_sw_csum || !csum_pending(skb);
}

/* Whether a packet may start a flow to a new destination: anything but a
 * TCP segment without SYN (the host's first packet to an AS is a SYN, a
 * datagram, an echo). */
static __always_inline int flow_start(struct __sk_buff *skb)
{
	__u8 nh, flags;

	if (bpf_skb_load_bytes(skb, ETH_LEN + 6, &nh, 1))
		return 1;
	if (nh != IPPROTO_TCP)
		return 1;
	if (bpf_skb_load_bytes(skb, ETH_LEN + IP6_LEN + 13, &flags, 1))
		return 1;
	return flags & 0x02;
}

static __always_inline int tra_out_main(struct __sk_buff *skb, enum tra_hook hook)
{
	struct tra_out_pkt p = {};
	__u32 zero = 0;
	int ret;

	p.cfg = bpf_map_lookup_elem(&tra_conf, &zero);
	if (!p.cfg || !p.cfg->underlay_ifindex) {
		count_out(TRA_UNSUPPORTED, skb->len); /* not configured yet */
		return TC_ACT_SHOT;
	}
	if (hook == TRA_AT_INGRESS && skb->mark == TRA_HELD_MARK)
		return TC_ACT_SHOT; /* held at the host's end, counted there */
	p.at_egress = hook == TRA_AT_EGRESS;
	if (hook == TRA_AT_EGRESS && !translatable_here(skb, p.cfg)) {
		/* Cut by the pair's kernel (GSO), or a TCP segment of a flow
		 * under way: on through the pair at once, as every segment of
		 * a transfer is. A flow's first packet is held here if it has
		 * no path, where its sender is known. */
		if (skb->gso_size || !flow_start(skb)) {
			count_out(TRA_TO_PAIR, skb->len);
			return TC_ACT_OK;
		}
		p.hold_only = 1;
	}
	ret = tra_out_steps(skb, &p);
	if (ret == PASS_ON) {
		count_out(TRA_TO_PAIR, skb->len);
		return TC_ACT_OK;
	}
	if (ret != REPLY)
		return ret;
	ret = send_icmp6_error(skb, &p);
	/* At the host's own end, the error goes straight back in, as if it
	 * had come out of the translator's. */
	if (ret == TC_ACT_REDIRECT && hook == TRA_AT_EGRESS)
		ret = bpf_redirect(skb->ifindex, BPF_F_INGRESS);
	return ret;
}

/* At the translator's end of the pair: what the host's end let through,
 * cut into segments and with its checksums completed by the kernel as it
 * crossed the pair. */
SEC("tc")
int tra_out(struct __sk_buff *skb)
{
	return tra_out_main(skb, TRA_AT_INGRESS);
}

/* At the host's end of the pair, before the packet crosses it: translated
 * here, a packet is spared the pair (its queue, a NAPI poll, GRO, a second
 * pass through the receive path); what only the kernel's transmit path
 * makes translatable goes on through the pair to tra_out
 * (translatable_here). */
SEC("tc")
int tra_out_egress(struct __sk_buff *skb)
{
	return tra_out_main(skb, TRA_AT_EGRESS);
}

/* ---- Ingress: SCION for the host → IPv6 ------------------------------------ */

struct tra_in_pkt {
	struct tra_config *cfg;
	__u16 udp_off;
	__u16 udp_end;     /* the UDP datagram's end: its length, not the frame's */
	__u16 scion_off;
	__u16 hdr_len;     /* SCION header */
	__u16 l4_len;
	__u8 next_hdr;
	__u8 src_host_len;
	__u8 dst_host_len;
	__u8 qos;
	__u8 path_type;
	__u8 multi;        /* the frame is in several buffers */
	__u8 any_port;     /* it came to a port only a router delivers to (routers_to_port) */
	__u8 verdict;      /* the last verdict counted (count_in), for the monitor */
	__u32 len;         /* the frame's length, every buffer's */
	__u32 flow;
	struct tra_addr4 from; /* the underlay sender */
	__u64 src_ia;
	__u8 src_smip[16] __attribute__((aligned(8)));
	__u8 src_host[16] __attribute__((aligned(8)));
};

/* Whether an IPv4 header (ihl bytes, options and all) sums right. Any
 * SCION datagram is longer than the longest header, so the 60 bytes are
 * checked at once, and the loop needs no check of its own. */
static __always_inline int ipv4_header_ok(const struct iphdr *ip, const void *end, __u32 ihl)
{
	const __u16 *w = (const __u16 *)ip;
	__u64 sum = 0;

	if (!PKT_HAS(ip, 60, end))
		return 0;
	for (int i = 0; i < 30; i++) {
		if (i >= ihl / 2)
			break;
		sum += w[i];
	}
	return csum_fold32(sum) == 0xffff;
}

/* A dispatched range that takes the host's own ports — the well-known ones
 * below 1024, Linux's ephemeral ones from 32768, or more than a few
 * thousand (dispatched_ports = "all") — brings tra_in the host's DNS
 * replies, NTP answers and QUIC datagrams, which are no SCION. */
static __always_inline int dispatched_wide(const struct tra_config *cfg)
{
	return cfg->dispatched_end && cfg->dispatched_end >= cfg->dispatched_start &&
	       (cfg->dispatched_start < 1024 || cfg->dispatched_end >= 32768 ||
		cfg->dispatched_end - cfg->dispatched_start >= 4096);
}

/* What could be SCION at all: version 0, and a header and payload that
 * fill the datagram, as a router and a host of the AS send it. */
static __always_inline int plausible_scion(const struct udphdr *udp, const void *end)
{
	const __u8 *c = (const __u8 *)(udp + 1);

	if (!PKT_HAS(c, SCION_CMN_LEN, end))
		return 0;
	return c[0] >> 4 == 0 &&
	       c[5] * SCION_LINE + ((__u32)c[6] << 8 | c[7]) + sizeof(*udp) == bpf_ntohs(udp->len);
}

static __always_inline int parse_underlay_in(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + ETH_LEN;
	struct udphdr *udp;
	__u32 ihl;

	if (!PKT_HAS(ip, sizeof(*ip), end) || eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4)
		return XDP_PASS;
	if (ip->protocol != IPPROTO_UDP || ip->daddr != p->cfg->host_ip4 || ipv4_is_fragment(ip))
		return XDP_PASS;
	ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip) || ihl > 60)
		return XDP_PASS;
	p->udp_off = ETH_LEN + ihl;
	udp = data + p->udp_off;
	if (!PKT_HAS(udp, sizeof(*udp), end))
		return XDP_PASS;
	/* Hosts of the AS send SCION to the end-host port, or to the
	 * destination's port when it lies in dispatched_ports (scionproto's
	 * snet, every release); scionproto v0.12.0's routers deliver alike,
	 * and all SCION/TCP to the end-host port. From v0.14.0 a router
	 * delivers to the port the packet names, whatever the range: its UDP
	 * or TCP port, an SCMP reply's identifier, the port of the datagram an
	 * SCMP error quotes. What comes to another port is taken only then,
	 * and only from a router (check_sender). */
	{
		__u16 port = bpf_ntohs(udp->dest);

		if (port != SCION_ENDHOST_PORT && (port < p->cfg->dispatched_start || port > p->cfg->dispatched_end)) {
			if (!p->cfg->routers_to_port)
				return XDP_PASS;
			p->any_port = 1;
		}
	}
	p->from.addr = ip->saddr;
	p->from.port = udp->source;
	p->scion_off = p->udp_off + sizeof(*udp);
	/* On any port, or with a wide range, UDP that is not even shaped like
	 * SCION is the kernel's at once, uncounted: a few loads. Who sent it
	 * is not looked up (tra_routers): the lookup cost a DNS reply more than
	 * the parsing it spares (BenchmarkOrdinaryUDP), and a router sends no
	 * datagram of another shape; check_sender still says who may hand over
	 * what is shaped like SCION. */
	if ((p->any_port || dispatched_wide(p->cfg)) && !plausible_scion(udp, end))
		return XDP_PASS;
	/* On a port that is not SCION's, only a router hands the host SCION:
	 * from anyone else the datagram is the host's own traffic, however it
	 * looks (a WireGuard session whose index reads like SCION lengths, a
	 * forgery): the kernel's, untranslated, as without the translator. A
	 * forger gains nothing there: the host sees the real sender. */
	if (p->any_port && !bpf_map_lookup_elem(&tra_routers, &p->from))
		return XDP_PASS;
	return CONTINUE;
}

/* What the kernel would drop (a bad header checksum, lengths that do not
 * fit) it gets to drop, and count: the translator takes only a datagram the
 * host's stack would have taken. */
static __always_inline int check_underlay_in(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + ETH_LEN;
	struct udphdr *udp = data + (p->udp_off & 0x7f);
	__u32 ihl, ip_len, udp_len;

	if (!PKT_HAS(ip, sizeof(*ip), end) || !PKT_HAS(udp, sizeof(*udp), end))
		return XDP_PASS;
	ihl = ip->ihl * 4;
	ip_len = bpf_ntohs(ip->tot_len);
	udp_len = bpf_ntohs(udp->len);
	if (ip_len < ihl + sizeof(*udp) || ETH_LEN + ip_len > p->len ||
	    udp_len < sizeof(*udp) || udp_len > ip_len - ihl || !ipv4_header_ok(ip, end, ihl))
		return XDP_PASS;
	p->udp_end = p->udp_off + udp_len;
	return CONTINUE;
}

/* Headers that end before they should: a broken packet, or a frame in
 * several buffers whose headers go past the first, which the kernel gets,
 * counted (the translator reads headers in the first buffer only). */
static __always_inline int short_in(struct tra_in_pkt *p)
{
	if (p->multi) {
		count_in(TRA_MULTI_BUFFER, p->len);
		return XDP_PASS;
	}
	count_in(TRA_PARSE_ERROR, p->len);
	return XDP_DROP;
}

/* The SCION header: for this host, a standard or empty path, an L4 the
 * translator carries. The shortest there is (IPv4 hosts, the empty path)
 * is 36 bytes; each field is checked for what it needs. */
static __always_inline int parse_scion_in(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u8 *c = data + (p->scion_off & 0xff);
	__u8 *dst, *src;
	__u8 dt, st;

	if (!PKT_HAS(c, SCION_CMN_LEN + 2 * SCION_IA_LEN + 8, end))
		return XDP_PASS;
	if (c[0] >> 4 != 0)
		return XDP_PASS;
	if (*(__u64 *)(c + SCION_CMN_LEN) != p->cfg->local_ia) {
		count_in(TRA_NOT_OURS, p->len);
		return XDP_PASS;
	}
	p->qos = (c[0] << 4) | (c[1] >> 4);
	p->flow = ((c[1] & 0xf) << 16) | (c[2] << 8) | c[3];
	p->next_hdr = c[4];
	p->hdr_len = c[5] * SCION_LINE;
	p->l4_len = (c[6] << 8) | c[7];
	p->path_type = c[8];
	dt = c[9] >> 4;
	st = c[9] & 0xf;
	if ((dt != SCION_ADDR_IP4 && dt != SCION_ADDR_IP6) || (st != SCION_ADDR_IP4 && st != SCION_ADDR_IP6)) {
		count_in(TRA_NOT_OURS, p->len);
		return XDP_PASS;
	}
	if (p->path_type != SCION_PATH_SCION && p->path_type != SCION_PATH_EMPTY) {
		count_in(TRA_UNSUPPORTED, p->len);
		return XDP_DROP;
	}
	p->dst_host_len = dt == SCION_ADDR_IP6 ? 16 : 4;
	p->src_host_len = st == SCION_ADDR_IP6 ? 16 : 4;
	dst = c + SCION_CMN_LEN + 2 * SCION_IA_LEN;
	/* This host: its IPv4 address, or its SM-IP address. */
	if (p->dst_host_len == 4) {
		if (!p->cfg->host_is4 || *(__u32 *)dst != p->cfg->host_ip4) {
			count_in(TRA_NOT_OURS, p->len);
			return XDP_PASS;
		}
		src = dst + 4;
	} else {
		if (!PKT_HAS(dst, 16, end))
			goto short_pkt;
		if (((__u64 *)dst)[0] != ((__u64 *)p->cfg->host_smip)[0] ||
		    ((__u64 *)dst)[1] != ((__u64 *)p->cfg->host_smip)[1]) {
			count_in(TRA_NOT_OURS, p->len);
			return XDP_PASS;
		}
		src = dst + 16;
	}
	if (p->src_host_len == 4) {
		if (!PKT_HAS(src, 4, end))
			goto short_pkt;
		__builtin_memcpy(p->src_host, src, 4);
	} else {
		if (!PKT_HAS(src, 16, end))
			goto short_pkt;
		__builtin_memcpy(p->src_host, src, 16);
	}
	p->src_ia = *(__u64 *)(c + SCION_CMN_LEN + SCION_IA_LEN);
	if (p->hdr_len < SCION_CMN_LEN + 2 * SCION_IA_LEN + p->dst_host_len + p->src_host_len ||
	    (__u32)p->scion_off + p->hdr_len + p->l4_len > p->udp_end) {
		count_in(TRA_PARSE_ERROR, p->len);
		return XDP_DROP;
	}
	if (p->next_hdr != IPPROTO_TCP && p->next_hdr != IPPROTO_UDP && p->next_hdr != SCION_PROTO_SCMP) {
		count_in(TRA_UNSUPPORTED, p->len);
		return XDP_DROP;
	}
	return CONTINUE;
short_pkt:
	return short_in(p);
}

/* Who handed the packet over must be able to have sent it: a standard path
 * ends at one of the AS's border routers, which sends from its internal
 * address; the empty path is a host of this AS, which sends from the
 * underlay address it names as the source, to the end-host port or a
 * dispatched one (never any_port: only a router delivers there, and what
 * comes there from anyone else is passed in parse_underlay_in). Anything
 * else is a machine of the network injecting what it likes under another's
 * name. */
static __always_inline int check_sender(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	if (p->path_type == SCION_PATH_SCION) {
		if (bpf_map_lookup_elem(&tra_routers, &p->from))
			return CONTINUE;
	} else if (!p->any_port && p->src_ia == p->cfg->local_ia && p->src_host_len == 4 &&
		   *(__u32 *)p->src_host == p->from.addr) {
		return CONTINUE;
	}
	count_in(TRA_SPOOFED, p->len);
	return XDP_DROP;
}

static __always_inline int map_source(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	if (scion_to_smip(p->src_ia, p->src_host, p->src_host_len, p->src_smip)) {
		count_in(TRA_UNMAPPABLE, p->len);
		return XDP_DROP;
	}
	return CONTINUE;
}

/* An SCMP message for the daemon, whole, with its sender. */
static __always_inline int scmp_to_daemon(struct xdp_md *ctx, struct tra_in_pkt *p, __u8 *l4, __u32 kind, __u32 verdict)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct tra_event *e;
	__u32 n;

	if (!PKT_HAS(l4, 2, end))
		return XDP_DROP;
	e = bpf_ringbuf_reserve(&tra_events, sizeof(*e), 0);
	if (!e) {
		count_in(TRA_QUEUE_FULL, p->len);
		return XDP_DROP;
	}
	/* The message is the SCION payload; what trails it is not. */
	n = event_len(p->l4_len);
	e->kind = kind;
	e->ia = p->src_ia;
	e->scmp_type = l4[0];
	e->scmp_code = l4[1];
	e->src_host_len = p->src_host_len;
	e->path_type = p->path_type;
	e->uid = 0;
	__builtin_memcpy(e->src_host, p->src_host, 16);
	e->from_addr = p->from.addr;
	e->from_port = p->from.port;
	e->pad = 0;
	e->len = n;
	if (!n || bpf_xdp_load_bytes(ctx, (void *)l4 - data, e->data, n)) {
		bpf_ringbuf_discard(e, 0);
		count_in(TRA_PARSE_ERROR, p->len);
		return XDP_DROP;
	}
	bpf_ringbuf_submit(e, 0);
	count_in(verdict, p->len);
	return XDP_DROP;
}

/* A traceroute reply for the daemon's probes: the message's first bytes,
 * which say whom it answers and from where. */
static __always_inline int probe_to_daemon(struct xdp_md *ctx, struct tra_in_pkt *p, __u8 *l4)
{
	void *end = (void *)(long)ctx->data_end;
	struct tra_probe_reply *r;

	if (p->l4_len < TRA_PROBE_MSG || !PKT_HAS(l4, TRA_PROBE_MSG, end)) {
		count_in(TRA_PARSE_ERROR, p->len);
		return XDP_DROP;
	}
	r = bpf_ringbuf_reserve(&tra_probes, sizeof(*r), 0);
	if (!r) {
		count_in(TRA_QUEUE_FULL, p->len);
		return XDP_DROP;
	}
	r->ia = p->src_ia;
	r->from_addr = p->from.addr;
	r->from_port = p->from.port;
	r->path_type = p->path_type;
	r->len = TRA_PROBE_MSG;
	__builtin_memcpy(r->msg, l4, TRA_PROBE_MSG);
	bpf_ringbuf_submit(r, 0);
	count_in(TRA_PROBE, p->len);
	return XDP_DROP;
}

/* The L4 checksum moves from SCION's pseudo-header to IPv6's. SCMP echo
 * becomes ICMPv6 echo (same types and layout); SCMP errors go to the daemon
 * (it tells the host in ICMPv6, the quote rebuilt as IPv6, and fails over
 * on interface down), traceroute replies too (they answer its probes). */
static __always_inline int translate_l4_in(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u8 *l4 = data + ((p->scion_off + p->hdr_len) & 0x7ff);
	__u8 proto6 = p->next_hdr == SCION_PROTO_SCMP ? IPPROTO_ICMPV6_ : p->next_hdr;
	__u16 *csum;
	__u64 sub, add, s;

	if (p->l4_len < 8) {
		count_in(TRA_PARSE_ERROR, p->len);
		return XDP_DROP;
	}
	if (!PKT_HAS(l4, 8, end))
		return short_in(p);
	switch (p->next_hdr) {
	case IPPROTO_TCP:
		if (p->l4_len < 20) {
			count_in(TRA_PARSE_ERROR, p->len);
			return XDP_DROP;
		}
		if (!PKT_HAS(l4, 20, end))
			return short_in(p);
		csum = (__u16 *)(l4 + 16);
		break;
	case IPPROTO_UDP:
		csum = (__u16 *)(l4 + 6);
		break;
	default: /* SCMP */
		csum = (__u16 *)(l4 + 2);
		if (l4[0] == SCMP_TRACEROUTE_REPLY)
			return probe_to_daemon(ctx, p, l4);
		if (l4[0] < 128)
			return scmp_to_daemon(ctx, p, l4, TRA_EV_SCMP, TRA_SCMP_ERROR);
		/* Informational types other than echo (traceroute requests):
		 * nothing the host would understand. */
		if (l4[0] != SCMP_ECHO_REQUEST && l4[0] != SCMP_ECHO_REPLY) {
			count_in(TRA_UNSUPPORTED, p->len);
			return XDP_DROP;
		}
	}
	{
		const __u8 *dst = data + ((p->scion_off + SCION_CMN_LEN + 2 * SCION_IA_LEN) & 0xff);

		sub = (__u64)(__u32)p->cfg->local_ia + (__u32)(p->cfg->local_ia >> 32) + (__u32)p->src_ia +
		      (__u32)(p->src_ia >> 32) + bpf_htons(p->next_hdr);
		if (p->dst_host_len == 4) {
			if (!PKT_HAS(dst, 4, end))
				return XDP_DROP;
			sub += *(__u32 *)dst;
		} else {
			if (!PKT_HAS(dst, 16, end))
				return XDP_DROP;
			sub += sum_bytes16(dst);
		}
		sub += p->src_host_len == 4 ? *(__u32 *)p->src_host : sum_bytes16(p->src_host);
	}
	add = sum_bytes16(p->src_smip) + sum_bytes16(p->cfg->host_smip) + bpf_htons(proto6);
	s = (__u16)~*csum;
	s += (__u16)~csum_fold32(sub);
	s += add;
	s = (__u16)~csum_fold32(s);
	/* IPv6 has no UDP without a checksum: a sum of zero goes as 0xffff. */
	if (s == 0 && p->next_hdr == IPPROTO_UDP)
		s = 0xffff;
	*csum = s;
	return CONTINUE;
}

/* What the pair takes: the IPv6 packet must fit the host's end's MTU, or
 * the veth drops it after the redirect, where nothing of the translator's
 * counts it. The pair is sized for the largest packet the underlay device
 * can bring (pairmtu.go); this catches one set smaller (by hand, or while
 * the daemon changes it). */
static __always_inline int check_pair_mtu(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	if (p->cfg->pair_mtu && IP6_LEN + (__u32)p->l4_len > p->cfg->pair_mtu) {
		count_in(TRA_TOO_BIG_IN, p->len);
		return XDP_DROP;
	}
	return CONTINUE;
}

/* Everything in front of L4 becomes Ethernet and IPv6, from the remote's
 * SM-IP address to this host's; into tra1, out of tra0. */
static __always_inline int to_ipv6(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	int delta = (int)(p->scion_off + p->hdr_len) - (ETH_LEN + IP6_LEN);
	void *data, *end;
	struct ethhdr *eth;
	struct ipv6hdr *ip6;

	if (bpf_xdp_adjust_head(ctx, delta)) {
		count_in(TRA_PARSE_ERROR, p->len);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	ip6 = data + ETH_LEN;
	if (!PKT_HAS(ip6, IP6_LEN, end))
		return XDP_DROP;
	__builtin_memcpy(eth->h_dest, p->cfg->host_mac, 6);
	__builtin_memcpy(eth->h_source, p->cfg->pair_mac, 6);
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	ip6->version = 6;
	ip6->priority = p->qos >> 4;
	ip6->flow_lbl[0] = (p->qos << 4) | (p->flow >> 16 & 0xf);
	ip6->flow_lbl[1] = p->flow >> 8;
	ip6->flow_lbl[2] = p->flow;
	ip6->payload_len = bpf_htons(p->l4_len);
	ip6->nexthdr = p->next_hdr == SCION_PROTO_SCMP ? IPPROTO_ICMPV6_ : p->next_hdr;
	ip6->hop_limit = 64;
	__builtin_memcpy(&ip6->saddr, p->src_smip, 16);
	__builtin_memcpy(&ip6->daddr, p->cfg->host_smip, 16);
	/* Trailing bytes past the SCION payload go (from the last buffer on,
	 * in a frame of several). */
	{
		int excess = (int)(p->len - delta) - (ETH_LEN + IP6_LEN + p->l4_len);

		if (excess > 0 && bpf_xdp_adjust_tail(ctx, -excess))
			return XDP_DROP;
	}
	count_in(TRA_IN, ETH_LEN + IP6_LEN + p->l4_len);
	return bpf_redirect_map(&tra_host_port, 0, 0);
}

/* A frame in several buffers (a jumbo frame: a veth hands one larger than
 * a page so) shows only its first between data and data_end. It is
 * translated as one in a single buffer if its headers, the SCION header and
 * the L4 header whose checksum changes, lie in the first: the checksum
 * changes by the pseudo-headers only, the payload is not read, and the
 * head and the tail move on a frame of several buffers too. One whose
 * headers go past the first buffer is the kernel's (short_in). */
static __always_inline void measure_frame(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	p->len = bpf_xdp_get_buff_len(ctx);
	p->multi = p->len != (__u32)(ctx->data_end - ctx->data);
}

/* The monitor's ring (fastpath monitor): what tra_in drops or passes up,
 * copied only while a monitor listens. */
#define MON_PREFIX tra
#include "monitor.h"

static __always_inline int tra_in_main(struct xdp_md *ctx, struct tra_in_pkt *p)
{
	__u32 zero = 0;
	int ret;

	p->cfg = bpf_map_lookup_elem(&tra_conf, &zero);
	if (!p->cfg || !p->cfg->host_ifindex)
		return XDP_PASS;
	if ((ret = parse_underlay_in(ctx, p)) != CONTINUE)
		return ret;
	measure_frame(ctx, p);
	if ((ret = check_underlay_in(ctx, p)) != CONTINUE)
		return ret;
	if ((ret = parse_scion_in(ctx, p)) != CONTINUE)
		return ret;
	if ((ret = check_sender(ctx, p)) != CONTINUE)
		return ret;
	if ((ret = map_source(ctx, p)) != CONTINUE)
		return ret;
	if ((ret = translate_l4_in(ctx, p)) != CONTINUE)
		return ret;
	if ((ret = check_pair_mtu(ctx, p)) != CONTINUE)
		return ret;
	return to_ipv6(ctx, p);
}

SEC("xdp.frags")
int tra_in(struct xdp_md *ctx)
{
	struct tra_in_pkt p = {};
	int ret = tra_in_main(ctx, &p);

	/* Only frames tra_in counted a verdict for: what it leaves to the
	 * kernel uncounted (the host's own traffic) is not the translator's.
	 * A redirect (translated) is not looked at. */
	if (ret != XDP_REDIRECT && p.verdict != TRA_OUT && mon_listening())
		mon_emit_xdp(ctx, p.verdict, ret, TRA_DIR_IN);
	return ret;
}

/* ---- Transmit failures into the host --------------------------------------- */

/* A redirect into the pair the kernel refused at once (the pair down):
 * counted translated_in when handed over, it moves to tx_failed. Only this
 * tracepoint, which fires only on a failure: xdp_devmap_xmit would see the
 * frames a pair without GRO drops at its flush, but it fires on every flush
 * of every XDP redirect of the machine (the routers' too), and a program on
 * it cost the lab's translated UDP about 4 %. The daemon puts the pair's GRO
 * back within a second instead. xdp_redirect_err(dev, prog, target, err,
 * map_type, map_id, index): dev is the underlay device, whose program
 * tra_in redirects only into the pair. */
SEC("tp_btf/xdp_redirect_err")
int tra_tx_redirect_err(__u64 *ctx)
{
	const struct net_device *from = (const struct net_device *)ctx[0];
	struct tra_counter *in, *failed;
	struct tra_config *cfg;
	__u32 zero = 0, key;

	cfg = bpf_map_lookup_elem(&tra_conf, &zero);
	if (!cfg || from->nd_net.net->ns.inum != cfg->netns_ino || from->ifindex != cfg->underlay_ifindex)
		return 0;
	key = TRA_DIR_IN * TRA_VERDICT_MAX + TRA_IN;
	in = bpf_map_lookup_elem(&tra_counters, &key);
	key = TRA_DIR_IN * TRA_VERDICT_MAX + TRA_TX_FAILED;
	failed = bpf_map_lookup_elem(&tra_counters, &key);
	if (!in || !failed)
		return 0;
	failed->packets++;
	if (in->packets)
		in->packets--;
	return 0;
}

char _license[] SEC("license") = "GPL";
