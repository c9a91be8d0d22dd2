/* SCION border router: the standard-path data plane in XDP.
 *
 * The steps follow scionproto v0.12.0 router/dataplane.go process() in its
 * order, with its names. Each step returns CONTINUE or a verdict's action.
 * Nothing in the packet is written before the last step has decided to
 * forward: a packet passed up the stack reaches the userspace router as it
 * arrived, so that it can answer with SCMP or handle what we do not.
 *
 * Variants: BR_NO_MAC builds the router without hop-field MAC checks (the
 * br-nomac benchmark row and `mac_check = false`). */
#include "common.h"
#include "parse.h"
#define CSUM_XDP
#include "csum.h"
#include "scion.h"
#include "br_shared.h"
#ifndef BR_NO_MAC
#include "aes.h"
#endif

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* Router configuration, written by the control plane. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct br_config);
} br_conf SEC(".maps");

/* Hop-field keys: slot 0 from master0.key, slot 1 (rollover) from master1.key. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct br_key);
} br_keys SEC(".maps");

/* Underlay addresses the router receives on: external locals and internal_addr. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BR_MAX_IFACES);
	__type(key, struct br_socket_key);
	__type(value, struct br_socket);
} br_sockets SEC(".maps");

/* IPv4 sockets by UDP port: an array lookup where a hash would cost more
 * than all of the path checks together. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct br_port);
} br_ports SEC(".maps");

/* Every interface of the AS by ID: an array, since IDs are 16 bits and an
 * array lookup is inlined by the verifier. kind == 0: unknown interface. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct br_iface);
} br_ifaces SEC(".maps");

/* Packets and bytes per counter slot and verdict, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BR_MAX_IFACES * BR_VERDICT_MAX);
	__type(key, __u32);
	__type(value, struct br_counter);
} br_counters SEC(".maps");

/* Values that change apart from the configuration, a writer each (struct
 * br_vars_entry): mmapped, so that each writes its own field in place. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct br_vars_entry);
} br_vars SEC(".maps");

/* The devices the router is attached to and those its next hops leave by,
 * as the control plane last found them (struct br_dev): which take XDP
 * frames, in one buffer or several; which face the AS and which an
 * external link; their MACs. Indexed by ifindex modulo the size, so that a
 * lookup is an array's; a device whose slot another holds is in
 * br_devs_more. A device in neither is one the router knows nothing of. */
#define BR_DEV_SLOTS 256 /* power of two */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BR_DEV_SLOTS);
	__type(key, __u32);
	__type(value, struct br_dev);
} br_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct br_dev);
} br_devs_more SEC(".maps");

/* The device each external interface's neighbour is reached by, by counter
 * slot (0: not known, no check): its traffic arriving by another device is
 * what a strict reverse-path check refuses, and goes to the kernel. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BR_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
} br_slot_devs SEC(".maps");

/* Devices the router redirects frames to, by ifindex: those of br_devs
 * that take XDP frames. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} br_tx_ports SEC(".maps");

/* Addresses of this host besides loopback, written at attach: a next hop
 * there is delivered by the kernel, not forwarded, and a plain-IP packet
 * from one is a martian. A host with more than fit is told so; a next hop
 * at an address left out goes up as fib_pass instead of local. */
#ifndef BR_LOCAL_ADDRS
#define BR_LOCAL_ADDRS 4096
#endif
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BR_LOCAL_ADDRS);
	__type(key, struct br_addr);
	__type(value, __u8);
} br_local_addrs SEC(".maps");

/* The counter slot that last sent a frame to each device, per CPU: a device
 * flushes what it was given on the CPU that gave it, and the transmit
 * tracepoints report what it dropped then. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BR_TX_SLOTS);
	__type(key, __u32);
	__type(value, struct br_tx_slot);
} br_tx_slots SEC(".maps");

/* When BFD last arrived on each external interface, by counter slot, on
 * the monotonic clock (br_pkt's mono): a step of the system clock must not
 * make a link look silent. In hybrid mode the reference router runs BFD
 * and knows a link is down; fastpath would keep sending into it, and the
 * senders would never hear (SCMP external interface down) and fail over.
 * The neighbour's BFD falling silent is the same signal, seen in XDP. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BR_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u64);
} br_bfd_seen SEC(".maps");

/* Next hops the FIB gave for an egress interface ID, per CPU, for
 * BR_NH_CACHE_NS: the FIB lookup is the costliest step after the MAC. */
struct br_nh {
	__u64 expires; /* monotonic */
	/* br_vars' devs_gen when the device was found usable: an entry of
	 * another generation is looked up again, the device may have stopped
	 * taking frames since. */
	__u64 devs_gen;
	__u32 ifindex;
	__u8 smac[6];
	__u8 dmac[6];
	/* The egress device's MTU, as the FIB gave it: a packet from the cache
	 * is checked against it as the FIB would have. */
	__u32 mtu;
	/* The device's br_devs flags then: what the generic copy and the
	 * native program, which share the cache, may each send it, in one
	 * buffer or several. */
	__u16 dev_flags;
};

#ifndef BR_NH_CACHE_NS
#define BR_NH_CACHE_NS 500000000ULL /* route and neighbour changes apply within 0.5 s */
#endif

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct br_nh);
} br_nh_cache SEC(".maps");

/* Worker CPUs for the `cpus` option: br_spread hashes flows onto them. */
struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} br_cpus SEC(".maps");

/* The program a packet that is not SCION goes on to (`forward_ip`: the
 * plain-IP forwarder, br_forward_ip); an empty slot passes it up. The
 * kernel lets a program array hold programs of one attach type only: the
 * worker-CPU router (cpumap) has a slot of its own, for br_forward_ip_cpu. */
struct br_next_slot {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
};
struct br_next_slot br_next SEC(".maps");
struct br_next_slot br_next_cpu SEC(".maps");

/* Packets and bytes per plain-IP verdict (enum br_ip_verdict), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BR_IP_VERDICT_MAX);
	__type(key, __u32);
	__type(value, struct br_counter);
} br_ip_counters SEC(".maps");

#ifndef BR_NO_MAC
/* Hop fields whose MAC this CPU verified recently. A flow repeats its hop
 * fields in every packet, and a hit costs a compare instead of an AES
 * encryption. Entries are written only after a successful check, so the
 * cache holds nothing a sender chose; a hit needs the same 16-byte MAC input,
 * the same MAC and the current key generation. */
#ifndef BR_MAC_CACHE_SIZE
#define BR_MAC_CACHE_SIZE 4096 /* power of two */
#endif
struct br_mac_entry {
	__u32 in[4];
	__u32 mac_hi;
	__u32 mac_lo; /* MAC bytes 4-5 */
	__u64 key_gen; /* br_vars' key_gen when it was verified */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BR_MAC_CACHE_SIZE);
	__type(key, __u32);
	__type(value, struct br_mac_entry);
} br_mac_cache SEC(".maps");
#endif

/* 0: every MAC is computed (`mac_cache = false`, and the cold benchmark). */
volatile const __u32 br_use_mac_cache = 1;

/* Unused by the program: they put the enums into BTF, where bpf2go finds
 * their names for the Go side. */
volatile const enum br_verdict br_verdict_anchor = BR_VERDICT_MAX;
volatile const enum br_ip_verdict br_ip_verdict_anchor = BR_IP_VERDICT_MAX;
volatile const enum br_dev_flags br_dev_flags_anchor = BR_DEV_XMIT;

/* Worker CPUs for spreading: br_cpu_ids[0..br_num_cpus-1] are the CPU
 * numbers, which are also br_cpus' keys; 0 CPUs: spreading is off. */
volatile const __u32 br_num_cpus = 0;
volatile const __u32 br_cpu_ids[64] = {};
/* Offline runs (`br run --no-fib`) skip the FIB: next-hop MACs stay zero and
 * the frame leaves with XDP_TX. */
volatile const __u32 br_skip_fib = 0;
/* 1: every datagram's UDP checksum is summed and checked on arrival, as the
 * kernel would before the reference router's socket saw it (`udp_checksum =
 * "verify"`). 0: a complete checksum is updated by what the router changes
 * (RFC 1624), without reading the datagram: a right one leaves right and a
 * wrong one leaves exactly as wrong, for the next host's kernel to drop. */
volatile const __u32 br_verify_udp_csum = 0;
/* 1 in the copy attached in generic mode, which runs on skbs: what it sends
 * stays an skb, whose pending checksum (CHECKSUM_PARTIAL) the device still
 * completes, so a pending checksum must stay pending. */
volatile const __u32 br_generic = 0;

/* Where the packet stands; offsets are from the start of the frame. */
struct br_pkt {
	void *data;
	void *data_end;
	struct br_config *cfg;
	const struct br_vars_entry *vars;
	const struct br_dev *dev; /* the ingress device's entry in br_devs */
	__u32 ingress_ifindex;
	/* The whole frame: more than data_end - data when it came in several
	 * buffers (a jumbo frame), whose first holds every header. */
	__u32 frame_len;

	/* Underlay */
	__u8 family;   /* 4 or 6 */
	__u8 ip_options; /* an IPv4 header with options */
	__u16 l3_off;
	__u16 udp_off;
	__u16 udp_len; /* UDP length field: the datagram the socket would see */
	__u16 udp_csum;
	/* Aligned: compared as words, and the verifier rejects misaligned
	 * stack access. */
	__u8 ul_src[16] __attribute__((aligned(8)));
	__u8 ul_dst[16] __attribute__((aligned(8)));
	__u16 ul_sport;
	__u16 ul_dport;
	/* The datagram after its UDP header, summed when the checksum needs it
	 * (body_summed), and what the checksum field holds (enum udp_csum_kind). */
	__u64 body_sum;
	__u8 csum_kind;
	__u8 body_summed;
	/* The arriving pseudo-header's sum, folded: what the update of a
	 * complete checksum takes out again. */
	__u16 pseudo16;

	__u16 ingress; /* interface ID the packet came in on; 0: internal */
	__u16 slot;

	/* SCION */
	__u16 scion_off;
	__u16 path_off;
	__u16 hdr_bytes;
	__u16 payload_len;
	__u8 next_hdr;
	__u8 path_type;
	__u8 dst_type;
	__u8 src_type;
	__u64 dst_ia; /* network byte order */
	__u64 src_ia;

	__u32 meta_word;
	struct scion_meta meta;
	struct scion_inf inf;
	struct scion_hf hf;
	__u8 peering;
	__u8 effective_xover;
	__u16 egress;
	/* Interface ID whose next hop may come from br_nh_cache; 0: look up. */
	__u16 nh_cache_key;
	__u64 mono; /* CLOCK_MONOTONIC_COARSE, ns: caches, BFD, the tap */
	__u64 now;  /* Unix time, ns: hop-field expiry */

	/* SegID updates to write when forwarding: up to two info fields change
	 * (against construction before a crossover, along it after). */
	__u8 seg_upd_n;
	__u8 seg_upd_idx0;
	__u8 seg_upd_idx1;
	__u16 seg_upd_val0;
	__u16 seg_upd_val1;
	__u8 meta_changed;

	/* Where the packet goes */
	struct br_addr next_hop __attribute__((aligned(8)));
	const struct br_addr *src;
};

static __always_inline void count(const struct br_pkt *p, __u32 verdict)
{
	__u32 key = (__u32)p->slot * BR_VERDICT_MAX + verdict;
	struct br_counter *c;

	if (key >= BR_MAX_IFACES * BR_VERDICT_MAX)
		return;
	c = bpf_map_lookup_elem(&br_counters, &key);
	if (c) {
		c->packets++;
		c->bytes += p->frame_len;
	}
}

/* The tap (below) keeps what is dropped, with the verdict. */
static __always_inline int capturing(const struct br_pkt *p);
static __noinline int capture_drop(__u64 now, __u32 verdict, __u32 action);

/* verdict: count it and return its action. */
static __always_inline int verdict(const struct br_pkt *p, __u32 v, int action)
{
	count(p, v);
	/* Constant at every call but slow_path's: a test on drops and passes
	 * only (the monitor shows what goes up to the reference router). */
	if ((action == XDP_DROP || action == XDP_PASS) && capturing(p))
		capture_drop(p->mono, v, action);
	return action;
}

/* Not SCION, or not for one of the router's sockets: counted, and then
 * router_main offers it to the next program (br_next) or passes it up. */
#define NOT_SCION (-2)

static __always_inline int not_scion(const struct br_pkt *p)
{
	count(p, BR_NOT_SCION);
	return NOT_SCION;
}

/* A packet that needs an SCMP error: the slow path answers or it is dropped. */
static __always_inline int slow_path(const struct br_pkt *p, __u32 v)
{
	return verdict(p, v, p->cfg->scmp_action == BR_SCMP_DROP ? XDP_DROP : XDP_PASS);
}

/* Big-endian words from the packet, where a word may be read unaligned (the
 * verifier allows it on hosts with cheap unaligned loads, as x86-64): one
 * load and a byte swap instead of two or four loads. */
static __always_inline __u16 pkt_be16(const __u8 *b)
{
	return bpf_ntohs(*(const __u16 *)b);
}

static __always_inline __u32 pkt_be32(const __u8 *b)
{
	return bpf_ntohl(*(const __u32 *)b);
}

#ifndef BR_NO_MAC
/* Big-endian words of the stack (the MAC check's copy of a hop field). */
static __always_inline __u16 load_be16(const __u8 *b)
{
	return ((__u16)b[0] << 8) | b[1];
}

static __always_inline __u32 load_be32(const __u8 *b)
{
	return ((__u32)b[0] << 24) | ((__u32)b[1] << 16) | ((__u32)b[2] << 8) | b[3];
}
#endif

/* What br_devs knows of a device, or NULL. */
static __always_inline const struct br_dev *dev_info(__u32 ifindex)
{
	__u32 key = ifindex & (BR_DEV_SLOTS - 1);
	struct br_dev *d = bpf_map_lookup_elem(&br_devs, &key);

	if (d && d->ifindex == ifindex)
		return d;
	return bpf_map_lookup_elem(&br_devs_more, &ifindex);
}

/* ---- Arrival ------------------------------------------------------------ */

/* The kernel takes a frame whose Ethernet destination is another host's
 * (PACKET_OTHERHOST: a veth or a bridge port sees those, a NIC in
 * promiscuous mode too) no further than the link layer: the reference
 * router never sees it, and neither does the kernel's forwarding. Broadcast
 * and multicast destinations go on: a socket takes a unicast datagram in
 * such a frame. A device the router has no entry for (it was created again
 * since attach and the keeper has not looked yet) goes to the kernel whole. */
static __always_inline int check_arrival(struct br_pkt *p)
{
	const struct ethhdr *eth = p->data;
	const __u16 *d, *m;

	p->dev = dev_info(p->ingress_ifindex);
	if (!p->dev)
		return verdict(p, BR_UNKNOWN_DEVICE, XDP_PASS);
	if (!PKT_HAS(eth, sizeof(*eth), p->data_end) || (eth->h_dest[0] & 1))
		return CONTINUE;
	d = (const __u16 *)eth->h_dest;
	m = (const __u16 *)p->dev->mac;
	if ((m[0] | m[1] | m[2]) && (d[0] != m[0] || d[1] != m[1] || d[2] != m[2]))
		return verdict(p, BR_OTHER_HOST, XDP_PASS);
	return CONTINUE;
}

/* ---- Underlay ---------------------------------------------------------- */

static __always_inline int parse_underlay(struct br_pkt *p)
{
	struct ethhdr *eth = p->data;
	struct udphdr *udp;
	__u16 l3_payload;

	if (!PKT_HAS(eth, sizeof(*eth), p->data_end))
		return not_scion(p);
	p->l3_off = sizeof(*eth);

	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = p->data + sizeof(*eth);
		__u32 ihl;

		if (!PKT_HAS(ip, sizeof(*ip), p->data_end))
			return not_scion(p);
		/* Fragments and anything but UDP are the kernel's. */
		if (ip->protocol != IPPROTO_UDP || ipv4_is_fragment(ip) || ip->version != 4)
			return not_scion(p);
		ihl = ip->ihl * 4;
		if (ihl < sizeof(*ip))
			return not_scion(p);
		/* The kernel drops a packet longer than its frame (and trims a
		 * shorter one to tot_len). */
		if (bpf_ntohs(ip->tot_len) < ihl + sizeof(struct udphdr) ||
		    bpf_ntohs(ip->tot_len) > p->frame_len - sizeof(*eth))
			return not_scion(p);
		/* A header the kernel would refuse never reaches the reference
		 * router; the kernel may have it. (Ours is rebuilt on output.) */
		if (!ipv4_hdr_ok(ip, p->data_end, ip->ihl))
			return not_scion(p);
		l3_payload = bpf_ntohs(ip->tot_len) - ihl;
		p->family = 4;
		p->ip_options = ihl > sizeof(*ip);
		__builtin_memcpy(p->ul_src, &ip->saddr, 4);
		__builtin_memcpy(p->ul_dst, &ip->daddr, 4);
		p->udp_off = (sizeof(*eth) + ihl) & 0x7f;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = p->data + sizeof(*eth);

		if (!PKT_HAS(ip6, sizeof(*ip6), p->data_end))
			return not_scion(p);
		/* Extension headers go to the kernel. */
		if (ip6->nexthdr != IPPROTO_UDP || ip6->version != 6)
			return not_scion(p);
		l3_payload = bpf_ntohs(ip6->payload_len);
		if (l3_payload + sizeof(*ip6) > p->frame_len - sizeof(*eth))
			return not_scion(p);
		p->family = 6;
		__builtin_memcpy(p->ul_src, &ip6->saddr, 16);
		__builtin_memcpy(p->ul_dst, &ip6->daddr, 16);
		p->udp_off = sizeof(*eth) + sizeof(*ip6);
	} else {
		return not_scion(p);
	}

	udp = p->data + p->udp_off;
	if (!PKT_HAS(udp, sizeof(*udp), p->data_end))
		return not_scion(p);
	p->ul_sport = udp->source;
	p->ul_dport = udp->dest;
	p->udp_len = bpf_ntohs(udp->len);
	p->udp_csum = udp->check;
	/* The kernel drops datagrams whose UDP length exceeds the IP payload or
	 * the frame, and trims the rest to the UDP length; so do we. */
	if (p->udp_len < sizeof(*udp) || p->udp_len > l3_payload ||
	    p->udp_off + p->udp_len > p->frame_len)
		return not_scion(p);
	return CONTINUE;
}

/* Which of the router's sockets the datagram is for decides the ingress
 * interface, as the reference router has one socket per interface. */
static __always_inline int lookup_socket(struct br_pkt *p)
{
	struct br_socket_key key = {};
	struct br_socket *s;

	if (p->family == 4) {
		__u32 port = bpf_ntohs(p->ul_dport);
		__u32 dst = *(__u32 *)p->ul_dst;
		struct br_port *bp = bpf_map_lookup_elem(&br_ports, &port);

		if (!bp)
			return not_scion(p);
#pragma unroll
		for (int i = 0; i < BR_PORT_SOCKETS; i++) {
			if (i < bp->n && bp->v4[i].addr4 == dst) {
				p->ingress = bp->v4[i].ifid;
				p->slot = bp->v4[i].slot < BR_MAX_IFACES ? bp->v4[i].slot : BR_SLOT_UNMATCHED;
				return CONTINUE;
			}
		}
		if (!bp->overflow)
			return not_scion(p);
	}
	__builtin_memcpy(key.addr, p->ul_dst, 16);
	key.port = p->ul_dport;
	key.family = p->family;
	s = bpf_map_lookup_elem(&br_sockets, &key);
	if (!s)
		return not_scion(p);
	p->ingress = s->ifid;
	p->slot = s->slot < BR_MAX_IFACES ? s->slot : BR_SLOT_UNMATCHED;
	return CONTINUE;
}

static __always_inline int addr_eq(const __u8 *a, const __u8 *b, __u8 family)
{
	if (family == 4)
		return *(const __u32 *)a == *(const __u32 *)b;
	return ((const __u64 *)a)[0] == ((const __u64 *)b)[0] &&
	       ((const __u64 *)a)[1] == ((const __u64 *)b)[1];
}

/* An external interface's socket is connected to the neighbour: the kernel
 * would deliver nothing from another source to the reference router. */
static __always_inline int check_underlay_source(struct br_pkt *p)
{
	struct br_iface *ifc;
	__u32 key = p->ingress;

	if (p->ingress == 0)
		return CONTINUE;
	ifc = bpf_map_lookup_elem(&br_ifaces, &key);
	if (!ifc || ifc->kind != BR_IFACE_EXTERNAL)
		return verdict(p, BR_UNDERLAY_MISMATCH, XDP_DROP);
	if (ifc->remote.family != p->family || ifc->remote.port != p->ul_sport ||
	    !addr_eq(ifc->remote.addr, p->ul_src, p->family))
		return verdict(p, BR_UNDERLAY_MISMATCH, XDP_DROP);
	return CONTINUE;
}

/* Where the reference router's socket would get the datagram from. The
 * kernel runs IPv4 options (a source route it refuses, say) before any
 * socket sees them. An external interface's traffic arrives by the device
 * its neighbour is reached by, and internal_addr's by a device facing the
 * AS: a frame by another device (a neighbour sending to internal_addr with
 * a sibling's source, over its external link) is what a strict reverse-path
 * check drops, and a loose one lets through; the kernel decides, as it
 * would for the reference router. */
static __always_inline int check_arrival_device(struct br_pkt *p)
{
	__u32 key = p->slot, *want;

	if (p->ip_options)
		return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
	if (p->ingress == 0) {
		if (!(p->dev->flags & BR_DEV_INTERNAL))
			return verdict(p, BR_WRONG_DEVICE, XDP_PASS);
		return CONTINUE;
	}
	want = bpf_map_lookup_elem(&br_slot_devs, &key);
	if (want && *want && *want != p->ingress_ifindex)
		return verdict(p, BR_WRONG_DEVICE, XDP_PASS);
	return CONTINUE;
}

/* ---- UDP checksum --------------------------------------------------------- */

/* What the arriving checksum field holds. A datagram a local socket sent
 * through a veth arrives with the checksum still to be completed
 * (CHECKSUM_PARTIAL): the field holds only the pseudo-header's sum, and the
 * device that finally sends the skb adds the rest. XDP cannot see the skb's
 * state, so it tells the kinds apart by summing. */
enum udp_csum_kind {
	CSUM_NONE = 0,  /* IPv4 without a checksum (zero) */
	CSUM_FULL,      /* a complete checksum, and right */
	CSUM_PENDING,   /* the pseudo-header's sum: to be completed */
	CSUM_EITHER,    /* both at once (one datagram in 65,536 of those pending) */
};

static __always_inline __u64 addr_sum(const __u8 *a, __u8 family)
{
	const __u16 *w = (const __u16 *)a;
	__u64 sum = 0;
	int n = family == 4 ? 2 : 8;

#pragma unroll
	for (int i = 0; i < 8; i++)
		if (i < n)
			sum += w[i];
	return sum;
}

/* The UDP pseudo-header's sum: addresses, protocol, UDP length. */
static __always_inline __u64 pseudo_sum(const __u8 *src, const __u8 *dst, __u8 family, __u16 udp_len)
{
	return addr_sum(src, family) + addr_sum(dst, family) + bpf_htons(IPPROTO_UDP) + bpf_htons(udp_len);
}

/* Sums the datagram after its UDP header into p->body_sum: the linear
 * part in place, what lies in further buffers through copies. */
static __always_inline int sum_body(struct xdp_md *ctx, struct br_pkt *p)
{
	__u32 off = p->udp_off + sizeof(struct udphdr);
	__u32 len = p->udp_len - sizeof(struct udphdr);
	__u32 linear = (__u32)(p->data_end - p->data) - off;

	p->body_summed = 1;
	if (len <= linear)
		return csum_xdp(ctx, off, len, &p->body_sum);
	/* An even share in place keeps the 16-bit words paired in the rest. */
	linear &= ~1U;
	if (csum_xdp(ctx, off, linear, &p->body_sum))
		return -1;
	return csum_xdp_frags(ctx, off + linear, len - linear, &p->body_sum);
}

/* The kernel checks a datagram's checksum before any socket sees it: a
 * wrong one never reaches the reference router, and a forwarded one must
 * leave with a right one whatever the arriving field held. A field that
 * may be pending must be completed, which takes the datagram's sum; a
 * complete one is updated on the way out (or, with br_verify_udp_csum,
 * checked here first). */
static __always_inline int validate_udp_checksum(struct xdp_md *ctx, struct br_pkt *p)
{
	__u64 pseudo = pseudo_sum(p->ul_src, p->ul_dst, p->family, p->udp_len);
	__u16 field = p->udp_csum;
	int full, pending;

	if (field == 0 && p->family == 4) {
		p->csum_kind = CSUM_NONE;
		/* What leaves gets a complete checksum, as the reference's socket sends. */
		if (sum_body(ctx, p))
			return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
		return CONTINUE;
	}
	p->pseudo16 = csum_fold32(pseudo);
	pending = field == p->pseudo16;
	if (!pending && !br_verify_udp_csum) {
		/* IPv6 forbids "no checksum": zero is never right there. */
		if (field == 0)
			return verdict(p, BR_BAD_CHECKSUM, XDP_DROP);
		p->csum_kind = CSUM_FULL;
		return CONTINUE;
	}
	if (sum_body(ctx, p))
		return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
	full = csum_fold32(pseudo + p->ul_sport + p->ul_dport + bpf_htons(p->udp_len) + field + p->body_sum) == 0xffff;
	if (full && pending)
		p->csum_kind = CSUM_EITHER;
	else if (full)
		p->csum_kind = CSUM_FULL;
	else if (pending)
		p->csum_kind = CSUM_PENDING;
	else
		return verdict(p, BR_BAD_CHECKSUM, XDP_DROP);
	return CONTINUE;
}

/* ---- SCION common and address header ------------------------------------ */

static __always_inline int known_l4(__u8 next_hdr)
{
	switch (next_hdr) {
	case SCION_PROTO_TCP:
	case SCION_PROTO_UDP:
	case SCION_PROTO_SCMP:
	case SCION_PROTO_BFD:
	case SCION_PROTO_HBH:
	case SCION_PROTO_E2E:
	case SCION_PROTO_EXP1:
	case SCION_PROTO_EXP2:
		return 1;
	}
	return 0;
}

/* From v0.15 the reference router reads NextHdr before anything else: a
 * value it does not know is not SCION to it, on any link. On the internal
 * link such a datagram may be a STUN binding request (its magic cookie
 * lies where NextHdr is), which it answers with the sender's address; it
 * drops all others. A request it answers ends in a fingerprint: 28 bytes
 * at least, what parse_scion has checked before it asks. */
static __noinline int unknown_next_hdr(struct br_pkt *p)
{
	const __u8 *c = p->data + p->scion_off;

	if (!PKT_HAS(c, 8, p->data_end))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	if (p->ingress == 0 && (p->cfg->reference & BR_REF_STUN) && (c[0] & 0xc0) == 0 &&
	    c[4] == 0x21 && c[5] == 0x12 && c[6] == 0xa4 && c[7] == 0x42)
		return verdict(p, BR_STUN, XDP_PASS);
	return verdict(p, BR_UNKNOWN_L4, XDP_DROP);
}

static __always_inline int parse_scion(struct br_pkt *p)
{
	__u8 *c;
	__u32 addr_len, dl, sl, datagram;

	p->scion_off = (p->udp_off + sizeof(struct udphdr)) & 0xff;
	c = p->data + p->scion_off;
	if (!PKT_HAS(c, SCION_CMN_LEN + 2 * SCION_IA_LEN, p->data_end))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	p->next_hdr = c[4];
	if ((p->cfg->reference & BR_REF_KNOWN_L4) && !known_l4(p->next_hdr))
		return unknown_next_hdr(p);
	p->hdr_bytes = c[5] * SCION_LINE;
	p->payload_len = pkt_be16(c + 6);
	p->path_type = c[8];
	p->dst_type = c[9] >> 4;
	p->src_type = c[9] & 0xf;
	dl = (p->dst_type & 3) + 1;
	sl = (p->src_type & 3) + 1;
	addr_len = 2 * SCION_IA_LEN + 4 * (dl + sl);
	__builtin_memcpy(&p->dst_ia, c + SCION_CMN_LEN, 8);
	__builtin_memcpy(&p->src_ia, c + SCION_CMN_LEN + 8, 8);

	datagram = p->udp_len - sizeof(struct udphdr);
	if (datagram > p->cfg->max_datagram)
		return slow_path(p, BR_BAD_LENGTH);
	if (datagram < SCION_CMN_LEN + addr_len)
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	/* HdrLen must cover common and address header, and the datagram the header. */
	if (p->hdr_bytes < SCION_CMN_LEN + addr_len || p->hdr_bytes > datagram)
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	p->path_off = p->scion_off + SCION_CMN_LEN + addr_len;
	/* A frame in several buffers is forwarded whole when its first buffer
	 * holds every header the router reads (SCION's, and the L4 header's
	 * first 8 bytes for local delivery); else the kernel takes it. */
	if (p->frame_len > (__u32)(p->data_end - p->data) &&
	    p->scion_off + p->hdr_bytes + 8 > (__u32)(p->data_end - p->data))
		return verdict(p, BR_MULTI_BUFFER, XDP_PASS);
	return CONTINUE;
}

/* BFD goes up to the reference router; its arrival on an external
 * interface says the link is alive. */
static __always_inline int note_bfd(struct br_pkt *p)
{
	__u32 key = p->slot;
	__u64 *seen;

	if (p->ingress != 0 && (seen = bpf_map_lookup_elem(&br_bfd_seen, &key)))
		*seen = p->mono;
	return verdict(p, BR_BFD, XDP_PASS);
}

/* Empty, one-hop and EPIC paths, BFD and extension headers. */
static __always_inline int dispatch_path_type(struct br_pkt *p)
{
	switch (p->path_type) {
	case SCION_PATH_SCION:
		break;
	case SCION_PATH_EMPTY:
		/* v0.12.0 handles only BFD on empty paths and discards the rest. */
		if (p->next_hdr == SCION_PROTO_BFD)
			return note_bfd(p);
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	case SCION_PATH_ONEHOP:
		if (p->next_hdr == SCION_PROTO_BFD)
			return note_bfd(p);
		return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
	case SCION_PATH_EPIC:
		return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
	default:
		/* The reference discards unknown path types. */
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	}
	/* Extensions are validated by the reference before anything else, and
	 * needed to find the L4 header: the slow path takes them. */
	if (p->next_hdr == SCION_PROTO_HBH || p->next_hdr == SCION_PROTO_E2E)
		return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
	return CONTINUE;
}

/* ---- Path access -------------------------------------------------------- */

static __always_inline __u8 *inf_ptr(const struct br_pkt *p, __u32 idx)
{
	__u32 off = p->path_off + SCION_META_LEN + (idx & 3) * SCION_INF_LEN;
	__u8 *f = p->data + (off & 0x3ff);

	if (!PKT_HAS(f, SCION_INF_LEN, p->data_end))
		return NULL;
	return f;
}

static __always_inline __u8 *hf_ptr(const struct br_pkt *p, __u32 idx)
{
	__u32 off = p->path_off + SCION_META_LEN + p->meta.num_inf * SCION_INF_LEN +
		    (idx & 0x3f) * SCION_HOP_LEN;
	__u8 *f = p->data + (off & 0x7ff);

	if (!PKT_HAS(f, SCION_HOP_LEN, p->data_end))
		return NULL;
	return f;
}

static __always_inline int load_inf(const struct br_pkt *p, __u32 idx, struct scion_inf *inf)
{
	__u8 *f = inf_ptr(p, idx);

	if (!f)
		return -1;
	inf->flags = f[0];
	inf->seg_id = pkt_be16(f + 2);
	inf->timestamp = pkt_be32(f + 4);
	return 0;
}

static __always_inline int load_hf(const struct br_pkt *p, __u32 idx, struct scion_hf *hf)
{
	__u8 *f = hf_ptr(p, idx);

	if (!f)
		return -1;
	hf->flags = f[0];
	hf->exp_time = f[1];
	hf->cons_ingress = pkt_be16(f + 2);
	hf->cons_egress = pkt_be16(f + 4);
	__builtin_memcpy(hf->mac, f + 6, SCION_MAC_LEN);
	return 0;
}

/* The current info field as this router sees it: with its SegID as updated
 * by an earlier step of this run. */
static __always_inline void note_seg_id(struct br_pkt *p, __u8 idx, __u16 seg_id)
{
	/* Fields, not arrays: a variable index into the stack does not verify. */
	if (p->seg_upd_n == 0 || p->seg_upd_idx0 == idx) {
		p->seg_upd_idx0 = idx;
		p->seg_upd_val0 = seg_id;
		if (p->seg_upd_n == 0)
			p->seg_upd_n = 1;
		return;
	}
	p->seg_upd_idx1 = idx;
	p->seg_upd_val1 = seg_id;
	p->seg_upd_n = 2;
}

/* IncPath: CurrHF + 1, CurrINF follows. */
static __always_inline int inc_path(struct br_pkt *p)
{
	if (p->meta.curr_hf >= p->meta.num_hops - 1)
		return -1;
	p->meta.curr_hf++;
	p->meta.curr_inf = scion_inf_for_hf(&p->meta, p->meta.curr_hf);
	p->meta_changed = 1;
	return 0;
}

static __always_inline int is_xover(const struct br_pkt *p)
{
	return p->meta.curr_hf + 1 < p->meta.num_hops &&
	       p->meta.curr_inf != scion_inf_for_hf(&p->meta, p->meta.curr_hf + 1);
}

static __always_inline int is_first_hop_after_xover(const struct br_pkt *p)
{
	return p->meta.curr_inf > 0 && p->meta.curr_hf > 0 &&
	       p->meta.curr_inf - 1 == scion_inf_for_hf(&p->meta, p->meta.curr_hf - 1);
}

/* ---- process() steps ------------------------------------------------------ */

static __always_inline int parse_path(struct br_pkt *p)
{
	__u8 *m = p->data + (p->path_off & 0x1ff);
	__u32 path_len;

	if (!PKT_HAS(m, SCION_META_LEN, p->data_end))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	p->meta_word = pkt_be32(m);
	p->meta = scion_decode_meta(p->meta_word);
	/* Segments fill from the first: a zero length after a non-zero one is malformed. */
	if (p->meta.seg_len[2] > 0) {
		if (p->meta.seg_len[1] == 0 || p->meta.seg_len[0] == 0)
			return verdict(p, BR_PARSE_ERROR, XDP_DROP);
		p->meta.num_inf = 3;
	} else if (p->meta.seg_len[1] > 0) {
		if (p->meta.seg_len[0] == 0)
			return verdict(p, BR_PARSE_ERROR, XDP_DROP);
		p->meta.num_inf = 2;
	} else if (p->meta.seg_len[0] > 0) {
		p->meta.num_inf = 1;
	} else {
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	}
	p->meta.num_hops = p->meta.seg_len[0] + p->meta.seg_len[1] + p->meta.seg_len[2];
	if (p->meta.num_hops > SCION_MAX_HOPS)
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	path_len = SCION_META_LEN + p->meta.num_inf * SCION_INF_LEN + p->meta.num_hops * SCION_HOP_LEN;
	if (p->hdr_bytes < (p->path_off - p->scion_off) + path_len)
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	/* Bounds of the current fields: CurrINF < NumINF, CurrHF < NumHops. */
	if (p->meta.curr_inf >= p->meta.num_inf || p->meta.curr_hf >= p->meta.num_hops)
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	if (load_hf(p, p->meta.curr_hf, &p->hf) || load_inf(p, p->meta.curr_inf, &p->inf))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	/* Segments without the Peering flag have at least two hop fields. */
	if (!(p->inf.flags & SCION_INF_PEER) &&
	    (p->meta.seg_len[0] == 1 || p->meta.seg_len[1] == 1 || p->meta.seg_len[2] == 1))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	if (p->meta.curr_inf != scion_inf_for_hf(&p->meta, p->meta.curr_hf))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	return CONTINUE;
}

static __always_inline int determine_peer(struct br_pkt *p)
{
	__u8 seg0 = p->meta.seg_len[0];

	if (!(p->inf.flags & SCION_INF_PEER))
		return CONTINUE;
	if (seg0 == 0 || p->meta.seg_len[1] == 0 || p->meta.seg_len[2] != 0)
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	p->peering = p->meta.curr_hf == seg0 - 1 || p->meta.curr_hf == seg0;
	return CONTINUE;
}

static __always_inline int validate_hop_expiry(struct br_pkt *p)
{
	__u64 now = p->now;
	__u64 expiry = (__u64)p->inf.timestamp * 1000000000ULL +
		       ((__u64)p->hf.exp_time + 1) * SCION_EXP_UNIT_NS;

	if (expiry < now)
		return slow_path(p, BR_EXPIRED);
	return CONTINUE;
}

static __always_inline int validate_ingress_id(struct br_pkt *p)
{
	__u16 hdr_ingress = (p->inf.flags & SCION_INF_CONSDIR) ? p->hf.cons_ingress : p->hf.cons_egress;

	if (p->ingress != 0 && p->ingress != hdr_ingress)
		return slow_path(p, BR_INGRESS_MISMATCH);
	return CONTINUE;
}

static __always_inline int validate_pkt_len(struct br_pkt *p)
{
	__u32 payload = p->udp_len - sizeof(struct udphdr) - p->hdr_bytes;

	if (p->payload_len != payload)
		return slow_path(p, BR_BAD_LENGTH);
	return CONTINUE;
}

/* ingressInterface(): the interface the packet entered the AS through, which
 * for the first hop after a crossover is in the previous hop field. */
static __always_inline int ingress_interface(const struct br_pkt *p, __u16 *ifid)
{
	struct scion_inf inf = p->inf;
	struct scion_hf hf = p->hf;

	if (!p->peering && is_first_hop_after_xover(p)) {
		if (load_inf(p, p->meta.curr_inf - 1, &inf) || load_hf(p, p->meta.curr_hf - 1, &hf))
			return -1;
	}
	*ifid = (inf.flags & SCION_INF_CONSDIR) ? hf.cons_ingress : hf.cons_egress;
	return 0;
}

/* Transit packets from the internal network must come from the sibling
 * router that owns the interface they entered the AS through. */
static __always_inline int validate_transit_underlay_src(struct br_pkt *p)
{
	struct br_iface *ifc;
	__u16 ifid;
	__u32 key;

	if (p->meta.curr_hf == 0 || p->ingress != 0)
		return CONTINUE;
	if (ingress_interface(p, &ifid))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	key = ifid;
	ifc = bpf_map_lookup_elem(&br_ifaces, &key);
	/* ifid 0 is dropped in every release mode: from v0.14 the reference
	 * lets it through from any address but a sibling's (its internal link
	 * is interface 0), which would let a host of the AS leave with a
	 * source ISD-AS of its choice. */
	if (!ifc || ifc->kind != BR_IFACE_SIBLING || ifc->remote.family != p->family ||
	    !addr_eq(ifc->remote.addr, p->ul_src, p->family))
		return verdict(p, BR_UNDERLAY_MISMATCH, XDP_DROP);
	if ((p->cfg->reference & BR_REF_SIBLING_PORT) && ifc->remote.port != p->ul_sport)
		return verdict(p, BR_UNDERLAY_MISMATCH, XDP_DROP);
	return CONTINUE;
}

static __always_inline int validate_src_dst_ia(struct br_pkt *p)
{
	int src_local = p->src_ia == p->cfg->local_ia;
	int dst_local = p->dst_ia == p->cfg->local_ia;

	if (p->ingress == 0) {
		/* Outbound: SrcIA is checked on the first hop only. */
		if (p->meta.curr_hf == 0 && !src_local)
			return slow_path(p, BR_BAD_SRC_IA);
		if (dst_local)
			return slow_path(p, BR_BAD_DST_IA);
	} else {
		if (src_local)
			return slow_path(p, BR_BAD_SRC_IA);
		if ((p->meta.curr_hf == p->meta.num_hops - 1) != dst_local)
			return slow_path(p, BR_BAD_DST_IA);
	}
	return CONTINUE;
}

static __always_inline __u8 *src_host_ptr(const struct br_pkt *p)
{
	__u32 off = p->scion_off + SCION_CMN_LEN + 2 * SCION_IA_LEN + 4 * ((p->dst_type & 3) + 1);
	__u8 *a = p->data + (off & 0x1ff);

	if (!PKT_HAS(a, 16, p->data_end))
		return NULL;
	return a;
}

/* IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
static __always_inline int is_4in6(const __u8 *a)
{
	return ((const __u64 *)a)[0] == 0 && ((const __u32 *)a)[2] == bpf_htonl(0xffff);
}

static __always_inline int validate_src_host(struct br_pkt *p)
{
	__u8 *a;

	if (p->src_ia != p->cfg->local_ia)
		return CONTINUE;
	switch (p->src_type) {
	case SCION_ADDR_IP4:
	case SCION_ADDR_SVC:
		return CONTINUE;
	case SCION_ADDR_IP6:
		a = src_host_ptr(p);
		if (!a)
			return verdict(p, BR_PARSE_ERROR, XDP_DROP);
		if (is_4in6(a))
			return slow_path(p, BR_BAD_HOST_ADDR);
		return CONTINUE;
	}
	return slow_path(p, BR_BAD_HOST_ADDR);
}

static __always_inline __u16 mac_prefix16(const struct scion_hf *hf)
{
	return ((__u16)hf->mac[0] << 8) | hf->mac[1];
}

static __always_inline int update_non_cons_dir_ingress_seg_id(struct br_pkt *p)
{
	if (!(p->inf.flags & SCION_INF_CONSDIR) && p->ingress != 0 && !p->peering) {
		p->inf.seg_id ^= mac_prefix16(&p->hf);
		note_seg_id(p, p->meta.curr_inf, p->inf.seg_id);
	}
	return CONTINUE;
}

#ifndef BR_NO_MAC
/* A hop field's MAC input as big-endian words, and its 6-byte MAC. */
struct mac_check {
	__u32 in[4];
	__u32 mac_hi; /* MAC bytes 0-3 */
	__u32 mac_lo; /* MAC bytes 4-5 */
};

/* AES-CMAC of the 16-byte MAC input, compared with the hop field's MAC.
 * Not inlined: a crossover verifies two hop fields, with up to two keys. */
static __noinline int hop_mac_matches(const struct br_key *k, const struct mac_check *m)
{
	__u32 s[4] = { m->in[0], m->in[1], m->in[2], m->in[3] };

	aes128_encrypt_words(k->rk, s);
	return s[0] == m->mac_hi && (s[1] >> 16) == m->mac_lo;
}
#endif

#ifndef BR_NO_MAC
static __always_inline struct br_mac_entry *mac_cache_slot(const struct mac_check *m)
{
	__u32 h = m->in[0] * 0x9e3779b1 ^ m->in[1] * 0x85ebca77 ^ m->in[2] * 0xc2b2ae3d ^
		  m->in[3] * 0x27d4eb2f ^ m->mac_hi;
	__u32 idx = (h >> 16 ^ h) & (BR_MAC_CACHE_SIZE - 1);

	return bpf_map_lookup_elem(&br_mac_cache, &idx);
}
#endif

static __always_inline int verify_current_mac(struct br_pkt *p)
{
#ifndef BR_NO_MAC
	struct mac_check m = {
		.in = { p->inf.seg_id, p->inf.timestamp,
			((__u32)p->hf.exp_time << 16) | p->hf.cons_ingress,
			(__u32)p->hf.cons_egress << 16 },
		.mac_hi = load_be32(p->hf.mac),
		.mac_lo = load_be16(p->hf.mac + 4),
	};
	__u64 gen = p->vars->key_gen;
	struct br_mac_entry *e = NULL;
	struct br_key *k;
	__u32 slot = 0;

	if (br_use_mac_cache) {
		e = mac_cache_slot(&m);
		if (e && e->mac_hi == m.mac_hi && e->mac_lo == m.mac_lo && e->key_gen == gen && e->in[0] == m.in[0] &&
		    e->in[1] == m.in[1] && e->in[2] == m.in[2] && e->in[3] == m.in[3])
			return CONTINUE;
	}
	k = bpf_map_lookup_elem(&br_keys, &slot);
	if (k && k->valid && hop_mac_matches(k, &m))
		goto valid;
	/* Slot 1 is filled only while a key rollover is configured. */
	slot = 1;
	k = bpf_map_lookup_elem(&br_keys, &slot);
	if (k && k->valid && hop_mac_matches(k, &m))
		goto valid;
	return slow_path(p, BR_INVALID_MAC);
valid:
	if (e) {
		e->in[0] = m.in[0];
		e->in[1] = m.in[1];
		e->in[2] = m.in[2];
		e->in[3] = m.in[3];
		e->mac_hi = m.mac_hi;
		e->mac_lo = m.mac_lo;
		e->key_gen = gen;
	}
	return CONTINUE;
#else
	return CONTINUE;
#endif
}

static __always_inline int handle_ingress_router_alert(struct br_pkt *p)
{
	__u8 flag = (p->inf.flags & SCION_INF_CONSDIR) ? SCION_HF_INGRESS_ALERT : SCION_HF_EGRESS_ALERT;

	if (p->ingress == 0 || !(p->hf.flags & flag))
		return CONTINUE;
	return verdict(p, BR_ROUTER_ALERT, XDP_PASS);
}

/* resolveInbound(): the end host and its port. */
static __always_inline int resolve_inbound(struct br_pkt *p)
{
	__u32 dst_off = p->scion_off + SCION_CMN_LEN + 2 * SCION_IA_LEN;
	__u8 *a = p->data + (dst_off & 0x1ff);
	__u8 *l4 = p->data + ((p->scion_off + p->hdr_bytes) & 0x7ff);
	__u32 l4_len = p->payload_len;
	__u16 port = SCION_ENDHOST_PORT;

	if (!PKT_HAS(a, 16, p->data_end))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	__builtin_memset(&p->next_hop, 0, sizeof(p->next_hop));
	switch (p->dst_type) {
	case SCION_ADDR_IP4:
		if (*(__u32 *)a == 0)
			return slow_path(p, BR_BAD_HOST_ADDR);
		__builtin_memcpy(p->next_hop.addr, a, 4);
		p->next_hop.family = 4;
		break;
	case SCION_ADDR_IP6:
		if (is_4in6(a) || (((__u64 *)a)[0] == 0 && ((__u64 *)a)[1] == 0))
			return slow_path(p, BR_BAD_HOST_ADDR);
		__builtin_memcpy(p->next_hop.addr, a, 16);
		p->next_hop.family = 6;
		break;
	case SCION_ADDR_SVC:
		/* Service resolution stays with the slow path. */
		return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
	default:
		return slow_path(p, BR_BAD_HOST_ADDR);
	}

	switch (p->next_hdr) {
	case SCION_PROTO_UDP:
		if (l4_len < 8 || !PKT_HAS(l4, 8, p->data_end))
			return verdict(p, BR_PARSE_ERROR, XDP_DROP);
		port = pkt_be16(l4 + 2);
		break;
	case SCION_PROTO_TCP:
		/* Before v0.14 all SCION/TCP went to the end-host port. */
		if (!(p->cfg->reference & BR_REF_TCP_TO_PORT))
			break;
		if (l4_len < 20 || !PKT_HAS(l4, 4, p->data_end))
			return verdict(p, BR_PARSE_ERROR, XDP_DROP);
		port = pkt_be16(l4 + 2);
		break;
	case SCION_PROTO_SCMP:
		/* The reference decodes type, code and checksum, and for a reply
		 * its whole body (echo: identifier and sequence; traceroute: also
		 * the ISD-AS and interface), and discards what is too short. */
		if (l4_len < SCMP_HDR_LEN || !PKT_HAS(l4, SCMP_HDR_LEN, p->data_end))
			return verdict(p, BR_PARSE_ERROR, XDP_DROP);
		switch (l4[0]) {
		case SCMP_ECHO_REQUEST:
		case SCMP_TRACEROUTE_REQUEST:
			port = SCION_ENDHOST_PORT;
			break;
		case SCMP_ECHO_REPLY:
		case SCMP_TRACEROUTE_REPLY:
			if (l4_len < (l4[0] == SCMP_ECHO_REPLY ? SCMP_ECHO_LEN : SCMP_TRACEROUTE_LEN) ||
			    !PKT_HAS(l4, SCMP_HDR_LEN + 2, p->data_end))
				return verdict(p, BR_PARSE_ERROR, XDP_DROP);
			port = pkt_be16(l4 + 4); /* Identifier */
			break;
		default:
			/* Errors are delivered by the quoted packet's port: slow path. */
			return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
		}
		break;
	default:
		break;
	}
	/* Before v0.14 a port outside dispatched_ports went to the end-host
	 * port; from v0.14 every port is its own (the release's range check
	 * never holds). */
	if ((p->cfg->reference & BR_REF_REDIRECT_OUTSIDE_RANGE) &&
	    (port < p->cfg->dispatched_port_start || port > p->cfg->dispatched_port_end))
		port = SCION_ENDHOST_PORT;
	/* Port 0 stays 0 (v0.14 on, or inside an empty range, 0-0): the
	 * kernel refuses to send there, and the reference drops it. */
	if (port == 0)
		return verdict(p, BR_UNKNOWN_L4, XDP_DROP);
	p->next_hop.port = bpf_htons(port);
	p->src = &p->cfg->internal;
	p->egress = 0;
	return CONTINUE;
}

static __always_inline int do_xover(struct br_pkt *p)
{
	p->effective_xover = 1;
	if (inc_path(p))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	if (load_hf(p, p->meta.curr_hf, &p->hf) || load_inf(p, p->meta.curr_inf, &p->inf))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	return CONTINUE;
}

static __always_inline __u16 egress_interface(const struct br_pkt *p)
{
	return (p->inf.flags & SCION_INF_CONSDIR) ? p->hf.cons_egress : p->hf.cons_ingress;
}

static __always_inline __u8 link_type_of(__u16 ifid)
{
	__u32 key = ifid;
	struct br_iface *ifc;

	if (ifid == 0)
		return BR_LINK_UNSET;
	ifc = bpf_map_lookup_elem(&br_ifaces, &key);
	return ifc ? ifc->link_type : BR_LINK_UNSET;
}

/* validateEgressID(): the egress interface exists, and the pair of link
 * types is allowed within a segment or at a segment change. */
static __always_inline int validate_egress_id(struct br_pkt *p, struct br_iface **out)
{
	__u32 key = p->egress;
	struct br_iface *eg = bpf_map_lookup_elem(&br_ifaces, &key);
	__u8 in_lt, eg_lt;

	if (!eg || eg->kind == 0 || p->egress == 0 || (p->ingress == 0 && eg->kind != BR_IFACE_EXTERNAL))
		return slow_path(p, BR_NO_INTERFACE);
	*out = eg;
	in_lt = link_type_of(p->ingress);
	eg_lt = eg->link_type;
	if (!p->effective_xover) {
		if (p->ingress == 0)
			return CONTINUE;
		if ((in_lt == BR_LINK_CORE && eg_lt == BR_LINK_CORE) ||
		    (in_lt == BR_LINK_CHILD && eg_lt == BR_LINK_PARENT) ||
		    (in_lt == BR_LINK_PARENT && eg_lt == BR_LINK_CHILD) ||
		    (in_lt == BR_LINK_CHILD && eg_lt == BR_LINK_PEER) ||
		    (in_lt == BR_LINK_PEER && eg_lt == BR_LINK_CHILD))
			return CONTINUE;
		return slow_path(p, BR_LINK_TYPE);
	}
	if ((in_lt == BR_LINK_CORE && eg_lt == BR_LINK_CHILD) ||
	    (in_lt == BR_LINK_CHILD && eg_lt == BR_LINK_CORE) ||
	    (in_lt == BR_LINK_CHILD && eg_lt == BR_LINK_CHILD))
		return CONTINUE;
	return slow_path(p, BR_LINK_TYPE);
}

static __always_inline int handle_egress_router_alert(struct br_pkt *p, const struct br_iface *eg)
{
	__u8 flag = (p->inf.flags & SCION_INF_CONSDIR) ? SCION_HF_EGRESS_ALERT : SCION_HF_INGRESS_ALERT;

	if (!(p->hf.flags & flag) || eg->kind != BR_IFACE_EXTERNAL)
		return CONTINUE;
	return verdict(p, BR_ROUTER_ALERT, XDP_PASS);
}

/* A link whose BFD fell silent is down: the reference router decides (it
 * sends SCMP external interface down if its BFD agrees). A link that never
 * carried BFD (BFD off) is always up. */
static __always_inline int check_link_alive(struct br_pkt *p, const struct br_iface *eg)
{
	__u32 key = eg->slot;
	__u64 *seen, last;

	if (!p->cfg->link_timeout_ns || !(seen = bpf_map_lookup_elem(&br_bfd_seen, &key)))
		return CONTINUE;
	last = *seen;
	if (last && last < p->mono && p->mono - last > p->cfg->link_timeout_ns)
		return verdict(p, BR_LINK_DOWN, XDP_PASS);
	return CONTINUE;
}

static __always_inline int process_egress(struct br_pkt *p)
{
	if ((p->inf.flags & SCION_INF_CONSDIR) && !p->peering) {
		p->inf.seg_id ^= mac_prefix16(&p->hf);
		note_seg_id(p, p->meta.curr_inf, p->inf.seg_id);
	}
	if (inc_path(p))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	return CONTINUE;
}

/* ---- Forwarding --------------------------------------------------------- */

struct br_underlay_v4 {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
} __attribute__((packed));

struct br_underlay_v6 {
	struct ethhdr eth;
	struct ipv6hdr ip;
	struct udphdr udp;
} __attribute__((packed));

/* Whether a next hop is an address of this host: loopback, or one attach
 * found on the namespace's devices. br_local_addrs is keyed by the address
 * with port 0, laid out as struct br_addr: the next hop itself is the key
 * once its port is cleared (the caller has decided by then, and a key on
 * the stack would not fit the verifier's budget). */
static __always_inline int is_local_addr(struct br_addr *a)
{
	if (a->family == 4 && a->addr[0] == 127)
		return 1;
	if (a->family == 6 && ((const __u64 *)a->addr)[0] == 0 &&
	    ((const __u32 *)a->addr)[2] == 0 && ((const __u32 *)a->addr)[3] == bpf_htonl(1))
		return 1;
	a->port = 0;
	a->pad = 0;
	return bpf_map_lookup_elem(&br_local_addrs, a) != NULL;
}

#define LOOPBACK_IFINDEX 1

/* The FIB request, per CPU: the pipeline's stack frame leaves no room for
 * its 64 bytes. Bytes to the map (Go has no type for its unions). */
struct br_fib_req {
	__u8 raw[sizeof(struct bpf_fib_lookup)];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct br_fib_req);
} br_fib_req SEC(".maps");

/* The length of the IP packet the router sends to p->next_hop. */
static __always_inline __u32 ip_len(const struct br_pkt *p)
{
	return p->udp_len + (p->next_hop.family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr));
}

/* Whether the frame can leave in XDP by a device with these br_devs
 * flags. The native program's frames need the device's own XDP transmit
 * (ndo_xdp_xmit: a bridge, a macvlan, a VXLAN device have none, a veth has
 * it while its peer runs XDP or GRO, some NIC drivers only while a program
 * of their own is attached), and a frame in several buffers needs it for
 * those too; the generic copy's are skbs, which any device that is up
 * takes. Otherwise the reference router's socket sends it: the kernel would
 * drop the frame, or the device lose it without a word. */
static __always_inline int check_egress_device(struct br_pkt *p, __u16 flags)
{
	__u16 need = br_generic ? BR_DEV_UP : BR_DEV_XMIT;

	if ((flags & need) != need)
		return verdict(p, BR_TX_UNUSABLE, XDP_PASS);
	if (!br_generic && p->frame_len > (__u32)(p->data_end - p->data) && !(flags & BR_DEV_XMIT_SG))
		return verdict(p, BR_TX_NO_SG, XDP_PASS);
	return CONTINUE;
}

/* Next-hop MAC and device from the kernel's FIB, looked up as the
 * reference router's socket sends: from lo (the kernel's input device for
 * what the host itself sends), from src to the next hop. The kernel answers
 * FWD_DISABLED unless forwarding is on for the device a lookup names;
 * naming lo asks for nothing but lo's flag, which makes the host forward
 * nothing it did not before. `br attach` says so when it is off.
 * The answer is br_nh_cache's entry for the egress interface, or, for a
 * next hop that is not cached (a local host), its slot 0, which no
 * interface ID uses. */
static __always_inline int fib_next_hop(struct xdp_md *ctx, struct br_pkt *p, struct br_nh **out)
{
	struct bpf_fib_lookup *fib;
	const struct br_dev *dev;
	struct br_nh *nh;
	__u32 key = p->nh_cache_key;
	/* Read before br_devs: a device that stops after this read bumps it. */
	__u64 gen = p->vars->devs_gen;
	int rc;

	nh = bpf_map_lookup_elem(&br_nh_cache, &key);
	if (!nh)
		return verdict(p, BR_FIB_PASS, XDP_PASS);
	*out = nh;
	if (br_skip_fib) {
		nh->expires = 0;
		nh->ifindex = p->ingress_ifindex;
		__builtin_memset(nh->smac, 0, ETH_ALEN);
		__builtin_memset(nh->dmac, 0, ETH_ALEN);
		return CONTINUE;
	}
	if (key && nh->expires > p->mono && nh->devs_gen == gen) {
		/* A veth drops an XDP frame longer than its MTU without a word:
		 * the reference router's socket sends it (fragmented in the
		 * underlay; v0.12.0 sends no SCMP packet too big). */
		if (ip_len(p) > nh->mtu)
			return verdict(p, BR_TOO_BIG, XDP_PASS);
		return check_egress_device(p, nh->dev_flags);
	}
	key = 0;
	fib = (struct bpf_fib_lookup *)bpf_map_lookup_elem(&br_fib_req, &key);
	if (!fib)
		return verdict(p, BR_FIB_PASS, XDP_PASS);
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->ifindex = LOOPBACK_IFINDEX;
	fib->l4_protocol = IPPROTO_UDP;
	fib->sport = p->src->port;
	fib->dport = p->next_hop.port;
	/* The FIB checks the whole IP packet's length against the egress MTU
	 * (for IPv6 too: tot_len counts the 40-byte header). */
	fib->tot_len = ip_len(p);
	if (p->next_hop.family == 4) {
		fib->family = AF_INET;
		__builtin_memcpy(&fib->ipv4_src, p->src->addr, 4);
		__builtin_memcpy(&fib->ipv4_dst, p->next_hop.addr, 4);
	} else {
		fib->family = AF_INET6;
		__builtin_memcpy(fib->ipv6_src, p->src->addr, 16);
		__builtin_memcpy(fib->ipv6_dst, p->next_hop.addr, 16);
	}
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return verdict(p, BR_TOO_BIG, XDP_PASS);
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
		return verdict(p, BR_FIB_DROP, XDP_DROP);
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return verdict(p, BR_FWD_DISABLED, XDP_PASS);
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		/* Local (or not unicast, or no route): the kernel delivers what
		 * the reference router sends there through lo. */
		if (is_local_addr(&p->next_hop))
			return verdict(p, BR_LOCAL, XDP_PASS);
		return verdict(p, BR_FIB_PASS, XDP_PASS);
	default:
		/* No neighbour entry yet, or a route the FIB cannot resolve here:
		 * the userspace router sends it and the kernel resolves. */
		return verdict(p, BR_FIB_PASS, XDP_PASS);
	}
	dev = dev_info(fib->ifindex);
	if (!dev)
		return verdict(p, BR_TX_UNUSABLE, XDP_PASS);
	if ((rc = check_egress_device(p, dev->flags)) != CONTINUE)
		return rc;
	nh->expires = p->nh_cache_key ? p->mono + BR_NH_CACHE_NS : 0;
	nh->devs_gen = gen;
	nh->dev_flags = dev->flags;
	nh->ifindex = fib->ifindex;
	/* On success mtu_result (tot_len's place) holds the egress MTU. */
	nh->mtu = fib->mtu_result;
	__builtin_memcpy(nh->smac, fib->smac, ETH_ALEN);
	__builtin_memcpy(nh->dmac, fib->dmac, ETH_ALEN);
	return CONTINUE;
}

/* The reference rewrites the whole info field when it updates the SegID: the
 * flags byte keeps only ConsDir and Peer, the reserved byte becomes zero. */
static __always_inline int write_seg_id(struct br_pkt *p, __u8 idx, __u16 val, __u64 *add, __u64 *sub)
{
	__u8 *f = inf_ptr(p, idx);
	__u8 flags;

	if (!f)
		return -1;
	flags = f[0] & (SCION_INF_CONSDIR | SCION_INF_PEER);
	*sub += *(const __u16 *)f + *(const __u16 *)(f + 2);
	*add += bpf_htons((__u16)flags << 8) + bpf_htons(val);
	f[0] = flags;
	f[1] = 0;
	f[2] = val >> 8;
	f[3] = val;
	return 0;
}

/* Writes the new path meta and SegIDs into the SCION header. Returns the
 * ones' complement difference they make to the UDP checksum. */
static __always_inline int write_path(struct br_pkt *p, __u64 *add, __u64 *sub)
{
	__u8 *m = p->data + (p->path_off & 0x1ff);

	if (!PKT_HAS(m, SCION_META_LEN, p->data_end))
		return -1;
	if (p->meta_changed) {
		__u32 old = p->meta_word;
		/* As the reference serializes it: the reserved bits come out zero. */
		__u32 w = ((__u32)p->meta.curr_inf << 30) | ((__u32)(p->meta.curr_hf & 0x3f) << 24) |
			  (old & 0x3ffff);

		*sub += bpf_htons(old >> 16) + bpf_htons(old & 0xffff);
		*add += bpf_htons(w >> 16) + bpf_htons(w & 0xffff);
		m[0] = w >> 24;
		m[1] = w >> 16;
		m[2] = w >> 8;
		m[3] = w;
	}
	if (p->seg_upd_n >= 1 && write_seg_id(p, p->seg_upd_idx0, p->seg_upd_val0, add, sub))
		return -1;
	if (p->seg_upd_n >= 2 && write_seg_id(p, p->seg_upd_idx1, p->seg_upd_val1, add, sub))
		return -1;
	return 0;
}

/* The checksum the packet leaves with, given the words the path rewrite
 * added and removed: complete, from the datagram's sum when it was taken,
 * else the arriving complete checksum updated by every word that changed
 * (addresses, ports, path; RFC 1624: HC' = ~(~HC + ~m + m')); or, in
 * generic mode, still pending if it came pending (the device completes it). */
static __always_inline __u16 udp_checksum_out(const struct br_pkt *p, __u64 add, __u64 sub)
{
	__u64 pseudo = pseudo_sum(p->src->addr, p->next_hop.addr, p->next_hop.family, p->udp_len);
	__u64 ports = p->src->port + p->next_hop.port;
	__u64 sum;
	__u16 c;

	if (br_generic && p->csum_kind == CSUM_PENDING)
		return csum_fold32(pseudo);
	if (p->body_summed) {
		sum = pseudo + ports + bpf_htons(p->udp_len) + p->body_sum + add + (__u16)~csum_fold32(sub);
	} else {
		/* The pseudo-header and the ports changed too; the UDP length,
		 * in both, did not. */
		sub += p->pseudo16 + p->ul_sport + p->ul_dport;
		sum = (__u16)~p->udp_csum + pseudo + ports + add + (__u16)~csum_fold32(sub);
	}
	c = ~csum_fold32(sum);
	/* Zero means "no checksum": RFC 768 sends all ones instead. */
	return c ? c : 0xffff;
}

/* Notes which counter slot sends to the device, for the transmit
 * tracepoints to charge a failure to. */
static __always_inline void note_tx(const struct br_pkt *p, __u32 ifindex)
{
	__u32 key = ifindex & (BR_TX_SLOTS - 1);
	struct br_tx_slot *t = bpf_map_lookup_elem(&br_tx_slots, &key);

	if (t) {
		t->ifindex = ifindex;
		t->slot = p->slot;
		t->len = p->frame_len;
	}
}

/* Sends the packet to p->next_hop from p->src: a new underlay in front of the
 * SCION header, written only now that every check has passed. A function of
 * its own so that its stack frame (the FIB request) is not added to the
 * pipeline's. */
static __noinline int forward(struct xdp_md *ctx, struct br_pkt *p)
{
	struct br_nh *nh = NULL;
	__u32 old_hdr = p->scion_off, new_hdr;
	__u64 add = 0, sub = 0;
	__u16 udp_csum;
	int ret, delta;

	if (p->next_hop.family != p->src->family)
		return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
	/* Generic mode cannot tell a pending checksum from a complete one that
	 * happens to look the same; the reference router can. */
	if (br_generic && p->csum_kind == CSUM_EITHER)
		return verdict(p, BR_NOT_IMPLEMENTED, XDP_PASS);
	ret = fib_next_hop(ctx, p, &nh);
	if (ret != CONTINUE)
		return ret;

	/* The SCION header first, while the offsets still hold. */
	if (write_path(p, &add, &sub))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	udp_csum = udp_checksum_out(p, add, sub);

	new_hdr = p->next_hop.family == 4 ? sizeof(struct br_underlay_v4) : sizeof(struct br_underlay_v6);
	delta = (int)old_hdr - (int)new_hdr;
	if (delta && bpf_xdp_adjust_head(ctx, delta))
		return verdict(p, BR_PARSE_ERROR, XDP_DROP);
	p->data = (void *)(long)ctx->data;
	p->data_end = (void *)(long)ctx->data_end;

	if (p->next_hop.family == 4) {
		struct br_underlay_v4 *u = p->data;

		if (!PKT_HAS(u, sizeof(*u), p->data_end))
			return verdict(p, BR_PARSE_ERROR, XDP_DROP);
		__builtin_memcpy(u->eth.h_dest, nh->dmac, ETH_ALEN);
		__builtin_memcpy(u->eth.h_source, nh->smac, ETH_ALEN);
		u->eth.h_proto = bpf_htons(ETH_P_IP);
		u->ip.version = 4;
		u->ip.ihl = 5;
		u->ip.tos = 0;
		u->ip.tot_len = bpf_htons(p->udp_len + sizeof(struct iphdr));
		u->ip.id = 0;
		/* Linux sends UDP with DF set (path MTU discovery). */
		u->ip.frag_off = bpf_htons(0x4000);
		u->ip.ttl = 64;
		u->ip.protocol = IPPROTO_UDP;
		__builtin_memcpy(&u->ip.saddr, p->src->addr, 4);
		__builtin_memcpy(&u->ip.daddr, p->next_hop.addr, 4);
		/* From the values, not the header just written: reading back
		 * bytes stored a moment ago stalls on store forwarding. */
		u->ip.check = ipv4_udp_hdr_csum(p->udp_len + sizeof(struct iphdr), 0x4000, 64,
						*(const __u32 *)p->src->addr, *(const __u32 *)p->next_hop.addr);
		u->udp.source = p->src->port;
		u->udp.dest = p->next_hop.port;
		u->udp.len = bpf_htons(p->udp_len);
		u->udp.check = udp_csum;
	} else {
		struct br_underlay_v6 *u = p->data;

		if (!PKT_HAS(u, sizeof(*u), p->data_end))
			return verdict(p, BR_PARSE_ERROR, XDP_DROP);
		__builtin_memcpy(u->eth.h_dest, nh->dmac, ETH_ALEN);
		__builtin_memcpy(u->eth.h_source, nh->smac, ETH_ALEN);
		u->eth.h_proto = bpf_htons(ETH_P_IPV6);
		u->ip.version = 6;
		u->ip.priority = 0;
		__builtin_memset(u->ip.flow_lbl, 0, sizeof(u->ip.flow_lbl));
		u->ip.payload_len = bpf_htons(p->udp_len);
		u->ip.nexthdr = IPPROTO_UDP;
		u->ip.hop_limit = 64;
		__builtin_memcpy(&u->ip.saddr, p->src->addr, 16);
		__builtin_memcpy(&u->ip.daddr, p->next_hop.addr, 16);
		u->udp.source = p->src->port;
		u->udp.dest = p->next_hop.port;
		u->udp.len = bpf_htons(p->udp_len);
		u->udp.check = udp_csum;
	}
	/* Frames longer than the datagram (Ethernet padding, trailing bytes) end
	 * where the datagram ends. */
	{
		int excess = (int)(p->frame_len - delta) - (int)(new_hdr + p->udp_len - sizeof(struct udphdr));

		if (excess > 0) {
			if (bpf_xdp_adjust_tail(ctx, -excess))
				return verdict(p, BR_PARSE_ERROR, XDP_DROP);
			p->data = (void *)(long)ctx->data;
			p->data_end = (void *)(long)ctx->data_end;
		}
		p->frame_len = p->frame_len - delta - (excess > 0 ? excess : 0);
	}

	if (br_skip_fib)
		return verdict(p, BR_FORWARDED, XDP_TX);
	note_tx(p, nh->ifindex);
	/* A redirect also where the frame leaves by the device it came in by:
	 * the worker-CPU copy runs in a CPU map, which has no XDP_TX, and a
	 * veth flushes XDP_TX'd frames to its peer only while the peer runs an
	 * XDP program (with GRO alone they wait in its ring), where a redirect
	 * flushes them. The device may have left the redirect map since
	 * br_devs said yes (the keeper takes it out of br_devs first): the
	 * frame, rewritten already, is dropped and counted so. */
	ret = bpf_redirect_map(&br_tx_ports, nh->ifindex, XDP_DROP);
	return verdict(p, ret == XDP_REDIRECT ? BR_FORWARDED : BR_TX_FAILED, ret);
}

/* ---- The pipeline ------------------------------------------------------- */

static __always_inline int process(struct xdp_md *ctx, struct br_pkt *p)
{
	struct br_iface *eg = NULL;
	int ret;

	if ((ret = parse_path(p)) != CONTINUE)
		return ret;
	if ((ret = determine_peer(p)) != CONTINUE)
		return ret;
	if ((ret = validate_hop_expiry(p)) != CONTINUE)
		return ret;
	if ((ret = validate_ingress_id(p)) != CONTINUE)
		return ret;
	if ((ret = validate_pkt_len(p)) != CONTINUE)
		return ret;
	if ((ret = validate_transit_underlay_src(p)) != CONTINUE)
		return ret;
	if ((ret = validate_src_dst_ia(p)) != CONTINUE)
		return ret;
	if ((ret = validate_src_host(p)) != CONTINUE)
		return ret;
	if ((ret = update_non_cons_dir_ingress_seg_id(p)) != CONTINUE)
		return ret;
	if ((ret = verify_current_mac(p)) != CONTINUE)
		return ret;
	if ((ret = handle_ingress_router_alert(p)) != CONTINUE)
		return ret;

	/* Inbound: to a host of this AS. */
	if (p->dst_ia == p->cfg->local_ia) {
		if ((ret = resolve_inbound(p)) != CONTINUE)
			return ret;
		return forward(ctx, p);
	}

	/* Outbound, AS transit or BR transit. */
	if (is_xover(p) && !p->peering) {
		if ((ret = do_xover(p)) != CONTINUE)
			return ret;
		if ((ret = validate_hop_expiry(p)) != CONTINUE)
			return ret;
		if ((ret = verify_current_mac(p)) != CONTINUE)
			return ret;
	}
	p->egress = egress_interface(p);
	if ((ret = validate_egress_id(p, &eg)) != CONTINUE)
		return ret;
	if ((ret = handle_egress_router_alert(p, eg)) != CONTINUE)
		return ret;

	if (eg->kind == BR_IFACE_EXTERNAL) {
		if ((ret = check_link_alive(p, eg)) != CONTINUE)
			return ret;
		if ((ret = process_egress(p)) != CONTINUE)
			return ret;
		p->next_hop = eg->remote;
		p->src = &eg->local;
		p->nh_cache_key = p->egress;
		return forward(ctx, p);
	}
	/* AS transit in: to the sibling router that owns the egress interface. */
	p->next_hop = eg->remote;
	p->src = &p->cfg->internal;
	p->nh_cache_key = p->egress;
	p->egress = 0;
	return forward(ctx, p);
}

/* A frame in several buffers (a jumbo frame, a GRO'd skb on a veth) shows
 * only its first buffer between data and data_end; the rest is reached
 * through helpers. */
static __always_inline void note_frame_len(struct xdp_md *ctx, struct br_pkt *p)
{
	p->frame_len = bpf_xdp_get_buff_len(ctx);
}

/* ---- The tap ---------------------------------------------------------------
 * Only while br_vars' capture_until is ahead (the lab's check replays what the
 * router did through the reference router): the frame is kept as it arrived,
 * per CPU, and handed to userspace with the frame as it left when it was
 * forwarded in XDP, or with its verdict when it was dropped (verdict() calls
 * capture_drop). What is passed up reaches the reference router itself. */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	/* 4 MiB: records are as long as their frames, so about 12,000 pairs of
	 * 160-byte frames or 260 of 8,000-byte frames between reads. */
	__uint(max_entries, 1 << 22);
} br_capture SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct br_capture_frame);
} br_capture_in SEC(".maps");

static __always_inline int capturing(const struct br_pkt *p)
{
	__u64 until = p->vars->capture_until;

	return until && p->mono < until;
}

/* How many bytes of a frame of len bytes the tap keeps: all or none. In a
 * 64-bit variable, checked after barrier_var: with a 32-bit copy clang
 * checked the copy and passed the helper the unchecked return value ("R4
 * min value is negative, either use unsigned or 'var &= const'"). */
static __always_inline __u64 kept(__u64 len)
{
	barrier_var(len);
	if (len > BR_CAPTURE_MAX)
		return 0;
	return len;
}

/* The record into the ring: the header and the kept bytes of both frames,
 * which lie back to back in f->data. */
static __always_inline void capture_send(struct br_capture_frame *f, __u64 used)
{
	/* Bounds the verifier can follow into the helper: the record never
	 * reaches past the value. */
	barrier_var(used);
	if (used > 2 * BR_CAPTURE_MAX)
		return;
	/* A full ring loses the record: the tap says how many. */
	if (bpf_ringbuf_output(&br_capture, &f->hdr, sizeof(f->hdr) + used, 0))
		f->lost++;
	f->arrived = 0;
}

static __noinline int capture_arrival(struct xdp_md *ctx, __u64 now)
{
	struct br_capture_frame *f;
	__u32 zero = 0;
	__u64 len, n;

	f = bpf_map_lookup_elem(&br_capture_in, &zero);
	if (!f)
		return 0;
	len = bpf_xdp_get_buff_len(ctx);
	f->hdr.in_len = len;
	f->arrived = now;
	/* bpf_xdp_load_bytes reads across every buffer of a multi-buffer frame. */
	n = kept(len);
	if (n > 0 && bpf_xdp_load_bytes(ctx, 0, f->data, n))
		f->arrived = 0;
	return 0;
}

static __noinline int capture_departure(struct xdp_md *ctx, __u64 now)
{
	struct br_capture_frame *f;
	__u32 zero = 0;
	__u64 in, len, n;

	f = bpf_map_lookup_elem(&br_capture_in, &zero);
	if (!f || f->arrived != now)
		return 0;
	in = kept(f->hdr.in_len);
	len = bpf_xdp_get_buff_len(ctx);
	f->hdr.out_len = len;
	f->hdr.verdict = BR_FORWARDED;
	f->hdr.generic = br_generic;
	/* As it left, right after it as it arrived. */
	n = kept(len);
	if (n > 0 && bpf_xdp_load_bytes(ctx, 0, f->data + in, n))
		n = 0;
	capture_send(f, in + n);
	return 0;
}

/* A dropped frame, or one passed up to the reference router: as it
 * arrived, why, and which (the action above the generic flag). */
static __noinline int capture_drop(__u64 now, __u32 verdict, __u32 action)
{
	struct br_capture_frame *f;
	__u32 zero = 0;

	f = bpf_map_lookup_elem(&br_capture_in, &zero);
	if (!f || f->arrived != now)
		return 0;
	f->hdr.out_len = 0;
	f->hdr.verdict = verdict;
	f->hdr.generic = br_generic | (action & 0xff) << BR_CAPTURE_ACTION_SHIFT;
	capture_send(f, kept(f->hdr.in_len));
	return 0;
}

static __always_inline int router_main(struct xdp_md *ctx, void *next)
{
	struct br_pkt p = {};
	__u32 zero = 0;
	int ret;

	p.data = (void *)(long)ctx->data;
	p.data_end = (void *)(long)ctx->data_end;
	p.ingress_ifindex = ctx->ingress_ifindex;
	p.slot = BR_SLOT_UNMATCHED;
	p.cfg = bpf_map_lookup_elem(&br_conf, &zero);
	p.vars = bpf_map_lookup_elem(&br_vars, &zero);
	if (!p.cfg || !p.vars)
		return XDP_PASS;
	/* The coarse clock (a few ms) costs a quarter of the precise ones here;
	 * hop expiry has a granularity of 337.5 s. */
	p.mono = bpf_ktime_get_coarse_ns();
	p.now = p.mono + p.vars->mono_to_unix_ns;

	note_frame_len(ctx, &p);
	if (capturing(&p))
		capture_arrival(ctx, p.mono);
	if ((ret = check_arrival(&p)) != CONTINUE)
		return ret;
	ret = parse_underlay(&p);
	if (ret == CONTINUE)
		ret = lookup_socket(&p);
	if (ret == NOT_SCION) {
		/* From this frame, the main program's: the verifier refuses a
		 * tail call from a subprogram once the frames below it hold 256
		 * bytes of stack, and br_pkt alone is close to that. An empty slot
		 * falls through to the kernel, as before. */
		bpf_tail_call(ctx, next, 0);
		return XDP_PASS;
	}
	if (ret != CONTINUE)
		return ret;
	if ((ret = check_arrival_device(&p)) != CONTINUE)
		return ret;
	if ((ret = check_underlay_source(&p)) != CONTINUE)
		return ret;
	if ((ret = validate_udp_checksum(ctx, &p)) != CONTINUE)
		return ret;
	if ((ret = parse_scion(&p)) != CONTINUE)
		return ret;
	if ((ret = dispatch_path_type(&p)) != CONTINUE)
		return ret;
	ret = process(ctx, &p);
	if ((ret == XDP_TX || ret == XDP_REDIRECT) && capturing(&p))
		capture_departure(ctx, p.mono);
	return ret;
}

SEC("xdp.frags")
int br_router(struct xdp_md *ctx)
{
	return router_main(ctx, &br_next);
}

/* The same router for the worker CPUs of a CPU map, which only runs
 * programs loaded for it (expected attach type BPF_XDP_CPUMAP). */
SEC("xdp.frags/cpumap")
int br_router_cpu(struct xdp_md *ctx)
{
	return router_main(ctx, &br_next_cpu);
}

/* With `cpus`: spread packets over the worker CPUs by a hash of the underlay
 * flow, so that one flow stays on one CPU and is not reordered. */
SEC("xdp.frags")
int br_spread(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 hash = 0x9747b28c, cpu;

	if (br_num_cpus == 0)
		return XDP_PASS;
	if (PKT_HAS(eth, sizeof(*eth), data_end) && eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if (PKT_HAS(ip, sizeof(*ip) + 12, data_end) && ip->ihl == 5) {
			__u32 ports = *(__u32 *)(ip + 1);
			/* SCION's first line after the UDP header: its FlowID keeps
			 * apart the flows that share one underlay link, as the
			 * reference router's computeProcID does. */
			__u32 line = *(__u32 *)((void *)(ip + 1) + 8) & bpf_htonl(0x000fffff);

			hash ^= ip->saddr * 0x85ebca6b;
			hash ^= ip->daddr * 0xc2b2ae35;
			hash ^= ports * 0x27d4eb2f;
			hash ^= line * 0x165667b1;
		}
	} else if (PKT_HAS(eth, sizeof(*eth), data_end) && eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if (PKT_HAS(ip6, sizeof(*ip6) + 4, data_end)) {
			hash ^= ip6->saddr.in6_u.u6_addr32[3] * 0x85ebca6b;
			hash ^= ip6->daddr.in6_u.u6_addr32[3] * 0xc2b2ae35;
			hash ^= *(__u32 *)(ip6 + 1) * 0x27d4eb2f;
		}
	}
	hash ^= hash >> 16;
	hash *= 0x7feb352d;
	hash ^= hash >> 15;
	cpu = br_cpu_ids[(hash % br_num_cpus) & 63];
	return bpf_redirect_map(&br_cpus, cpu, XDP_PASS);
}

/* ---- Plain IP ------------------------------------------------------------ */

/* What the router gives up as not SCION, forwarded as an IP router would
 * (`forward_ip = true`): reached by tail call from router_main through
 * br_next, on the router's own devices and maps. The kernel's FIB decides,
 * asked as for a packet arriving on the ingress device, so that the host's
 * routes, neighbours and forwarding switches rule as they would for the
 * kernel's own forwarding; whatever needs an answer (ICMP time exceeded,
 * packet too big, unreachable) or a neighbour resolved goes up unchanged,
 * and the kernel does it. */

static __always_inline int ip_verdict(__u32 v, __u32 len, int action)
{
	struct br_counter *c = bpf_map_lookup_elem(&br_ip_counters, &v);

	if (c) {
		c->packets++;
		c->bytes += len;
	}
	return action;
}

/* Link-local (fe80::/10) or multicast (ff00::/8): never forwarded; the FIB
 * would answer a link-local destination with a route on some device. */
static __always_inline int ipv6_link_scoped(const struct in6_addr *a)
{
	__u8 b0 = a->in6_u.u6_addr8[0], b1 = a->in6_u.u6_addr8[1];

	return b0 == 0xff || (b0 == 0xfe && (b1 & 0xc0) == 0x80);
}

/* TTL minus one, with the header checksum updated by the difference (RFC
 * 1624): the TTL is the high byte of its 16-bit word. */
static __always_inline void ipv4_decrease_ttl(struct iphdr *ip)
{
	__u32 check = (__u32)ip->check + (__u32)bpf_htons(0x0100);

	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;
}

/* IPv4 sources and destinations the kernel's input refuses as martians
 * (ip_route_input_slow): a multicast, limited-broadcast, 0/8 or loopback
 * source; a 0/8 or loopback destination. */
static __always_inline int ipv4_martian(__be32 saddr, __be32 daddr)
{
	__u32 s = bpf_ntohl(saddr), d = bpf_ntohl(daddr);

	return (s >> 28) == 0xe || s == 0xffffffff || (s >> 24) == 0 || (s >> 24) == 127 ||
	       (d >> 24) == 0 || (d >> 24) == 127;
}

/* :: or ::1. */
static __always_inline int ipv6_any_or_loopback(const struct in6_addr *a)
{
	const __u32 *w = a->in6_u.u6_addr32;

	return (w[0] | w[1] | w[2]) == 0 && (w[3] == 0 || w[3] == bpf_htonl(1));
}

/* What the kernel's IPv6 input and forwarding refuse (ipv6_rcv,
 * ip6_forward): an unspecified, loopback or IPv4-mapped source, a loopback
 * or unspecified destination. */
static __always_inline int ipv6_martian(const struct ipv6hdr *ip6)
{
	const __u32 *s = ip6->saddr.in6_u.u6_addr32;

	return ipv6_any_or_loopback(&ip6->saddr) || ipv6_any_or_loopback(&ip6->daddr) ||
	       ((s[0] | s[1]) == 0 && s[2] == bpf_htonl(0xffff));
}

/* A source that is one of the host's own addresses: a martian to the
 * kernel's source validation (fib_validate_source), whatever rp_filter. */
static __always_inline int ipv4_from_host(__be32 saddr)
{
	struct br_addr a = { .family = 4 };

	__builtin_memcpy(a.addr, &saddr, 4);
	return bpf_map_lookup_elem(&br_local_addrs, &a) != NULL;
}

/* IPv4's reverse-path filter (rp_filter, the larger of all's and the
 * device's, as the keeper read them), which the kernel's source validation
 * applies to every packet it forwards: the route back to the source must be
 * unicast (loose, 2) and leave by the device the packet came in by
 * (strict, 1). The FIB answers when asked from lo, as the kernel asks it.
 * Anything it does not answer plainly goes up, and the kernel decides. fib
 * is the caller's, overwritten. */
static __always_inline int ipv4_reverse_path_ok(struct xdp_md *ctx, const struct br_dev *dev,
						const struct iphdr *ip, struct bpf_fib_lookup *fib)
{
	if (!(dev->flags & (BR_DEV_RPF_STRICT | BR_DEV_RPF_LOOSE)))
		return 1;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET;
	fib->ifindex = LOOPBACK_IFINDEX;
	fib->tos = ip->tos;
	fib->ipv4_dst = ip->saddr;
	fib->ipv4_src = ip->daddr;
	if (bpf_fib_lookup(ctx, fib, sizeof(*fib), BPF_FIB_LOOKUP_SKIP_NEIGH) != BPF_FIB_LKUP_RET_SUCCESS)
		return 0;
	return !(dev->flags & BR_DEV_RPF_STRICT) || fib->ifindex == ctx->ingress_ifindex;
}

/* The plain-IP forwarder, as the kernel's ip_rcv/ip_forward and
 * ipv6_rcv/ip6_forward would forward: what they would drop or answer goes
 * up unchanged, and they do it. */
static __always_inline int forward_ip(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ethhdr old_eth;
	struct bpf_fib_lookup fib;
	const struct br_dev *dev, *out;
	struct br_config *cfg;
	struct iphdr *ip = NULL;
	struct ipv6hdr *ip6 = NULL;
	__u32 len = bpf_xdp_get_buff_len(ctx), zero = 0, ip_len;
	int rc, excess;

	if (!PKT_HAS(eth, sizeof(*eth), data_end))
		return ip_verdict(BR_IP_OTHER, len, XDP_PASS);
	/* The router checked the device and that the frame is not another
	 * host's; ip_forward and ip6_forward forward nothing that came in a
	 * broadcast or multicast frame either. */
	dev = dev_info(ctx->ingress_ifindex);
	cfg = bpf_map_lookup_elem(&br_conf, &zero);
	if (!dev || !cfg || (eth->h_dest[0] & 1))
		return ip_verdict(BR_IP_NOT_HOST, len, XDP_PASS);
	/* A neighbour AS's plain IP is the kernel's to forward or not, where
	 * the operator's forwarding switches and firewall see it: in XDP it
	 * would reach the AS's hosts (the control service, the dispatched
	 * ports) past both, with no hop field checked. */
	if ((dev->flags & (BR_DEV_EXTERNAL | BR_DEV_INTERNAL)) == BR_DEV_EXTERNAL && !cfg->ip_from_external)
		return ip_verdict(BR_IP_EXTERNAL, len, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		ip6 = (void *)(eth + 1);
		if (!PKT_HAS(ip6, sizeof(*ip6), data_end) || ip6->version != 6)
			return ip_verdict(BR_IP_OTHER, len, XDP_PASS);
		/* Hop-by-hop options (router alert, MLD) are for every router's
		 * kernel to read. */
		if (ip6->nexthdr == IPPROTO_HOPOPTS || ipv6_link_scoped(&ip6->saddr) ||
		    ipv6_link_scoped(&ip6->daddr))
			return ip_verdict(BR_IP_OTHER, len, XDP_PASS);
		ip_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		if (ip_len > len - sizeof(*eth))
			return ip_verdict(BR_IP_BAD_HEADER, len, XDP_PASS);
		if (ipv6_martian(ip6))
			return ip_verdict(BR_IP_MARTIAN, len, XDP_PASS);
		if (ip6->hop_limit <= 1)
			return ip_verdict(BR_IP_HOP_LIMIT, len, XDP_PASS);
		__builtin_memset(&fib, 0, sizeof(fib));
		fib.family = AF_INET6;
		fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
		fib.l4_protocol = ip6->nexthdr;
		__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, 16);
	} else if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		ip = (void *)(eth + 1);
		/* Options (record route, timestamps) are the kernel's to fill. */
		if (!PKT_HAS(ip, sizeof(*ip), data_end) || ip->version != 4 || ip->ihl != 5)
			return ip_verdict(BR_IP_OTHER, len, XDP_PASS);
		ip_len = bpf_ntohs(ip->tot_len);
		if (!ipv4_hdr_ok(ip, data_end, 5) || ip_len < sizeof(*ip) || ip_len > len - sizeof(*eth))
			return ip_verdict(BR_IP_BAD_HEADER, len, XDP_PASS);
		if (ipv4_martian(ip->saddr, ip->daddr) || ipv4_from_host(ip->saddr))
			return ip_verdict(BR_IP_MARTIAN, len, XDP_PASS);
		if (ip->ttl <= 1)
			return ip_verdict(BR_IP_HOP_LIMIT, len, XDP_PASS);
		if (!ipv4_reverse_path_ok(ctx, dev, ip, &fib))
			return ip_verdict(BR_IP_REVERSE_PATH, len, XDP_PASS);
		__builtin_memset(&fib, 0, sizeof(fib));
		fib.family = AF_INET;
		fib.tos = ip->tos;
		fib.l4_protocol = ip->protocol;
		fib.ipv4_src = ip->saddr;
		fib.ipv4_dst = ip->daddr;
	} else {
		return ip_verdict(BR_IP_OTHER, len, XDP_PASS);
	}
	fib.tot_len = ip_len;
	fib.ifindex = ctx->ingress_ifindex;

	/* From XDP the helper checks the length against the egress MTU:
	 * FRAG_NEEDED. */
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return ip_verdict(BR_IP_FWD_DISABLED, len, XDP_PASS);
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return ip_verdict(BR_IP_TOO_BIG, len, XDP_PASS);
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return ip_verdict(BR_IP_LOCAL, len, XDP_PASS);
	default:
		/* Blackhole, unreachable, prohibit (the kernel answers), no
		 * neighbour yet (the kernel resolves), a route the helper does
		 * not follow. */
		return ip_verdict(BR_IP_NO_ROUTE, len, XDP_PASS);
	}
	/* What leaves is the IP packet; mtu_result shares tot_len's place and
	 * holds the egress MTU on success. */
	if (ip_len > fib.mtu_result)
		return ip_verdict(BR_IP_TOO_BIG, len, XDP_PASS);
	/* Checked before anything is written: a frame passed up must reach the
	 * kernel as it arrived. As for SCION: the device's own XDP transmit,
	 * and for a frame in several buffers its scatter-gather one. */
	out = dev_info(fib.ifindex);
	if (!out || !(out->flags & BR_DEV_XMIT) ||
	    (len > (__u32)(data_end - data) && !(out->flags & BR_DEV_XMIT_SG)))
		return ip_verdict(BR_IP_NOT_READY, len, XDP_PASS);
	/* The kernel trims what follows the IP packet (Ethernet padding). */
	excess = (int)len - (int)(sizeof(*eth) + ip_len);
	if (excess > 0) {
		if (bpf_xdp_adjust_tail(ctx, -excess))
			return ip_verdict(BR_IP_OTHER, len, XDP_PASS);
		len -= excess;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		eth = data;
		if (!PKT_HAS(eth, sizeof(*eth) + (ip6 ? sizeof(*ip6) : sizeof(*ip)), data_end))
			return ip_verdict(BR_IP_OTHER, len, XDP_PASS);
		if (ip6)
			ip6 = (void *)(eth + 1);
		else
			ip = (void *)(eth + 1);
	}

	__builtin_memcpy(&old_eth, eth, sizeof(old_eth));
	if (ip6)
		ip6->hop_limit--;
	else if (ip)
		ipv4_decrease_ttl(ip);
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	/* A redirect also back out of the arrival device, as for SCION. */
	rc = bpf_redirect_map(&br_tx_ports, fib.ifindex, XDP_PASS);
	if (rc == XDP_REDIRECT)
		return ip_verdict(BR_IP_FORWARDED, len, rc);
	/* The device left the redirect map since br_devs said yes (the keeper
	 * takes it out of br_devs first): the kernel forwards the frame as it
	 * arrived. */
	__builtin_memcpy(eth, &old_eth, sizeof(old_eth));
	if (ip6)
		ip6->hop_limit++;
	else if (ip) {
		__u32 check = (__u32)ip->check + (__u32)(__u16)~bpf_htons(0x0100);

		ip->check = (__u16)(check + (check >> 16));
		ip->ttl++;
	}
	return ip_verdict(BR_IP_NOT_READY, len, XDP_PASS);
}

SEC("xdp.frags")
int br_forward_ip(struct xdp_md *ctx)
{
	return forward_ip(ctx);
}

/* The same for the worker-CPU router's slot. */
SEC("xdp.frags/cpumap")
int br_forward_ip_cpu(struct xdp_md *ctx)
{
	return forward_ip(ctx);
}

/* ---- Transmit failures --------------------------------------------------- */

#include "kern.h"

/* A device dropped frames the router handed it: a veth whose peer stopped
 * taking XDP frames, a device gone down, a full ring. They were counted
 * forwarded when handed over; they move to BR_TX_FAILED, against the slot
 * that last sent to that device from this CPU (the kernel reports a failure
 * on the CPU that queued the frame). dev is any device of the event, for
 * its namespace; ifindex the device the frames were for. */
static __always_inline void charge_tx_failure(const struct net_device *dev, __u32 ifindex, int drops)
{
	struct br_counter *fwd, *failed;
	struct br_tx_slot *t;
	struct br_vars_entry *vars;
	__u32 key = 0;

	if (drops <= 0)
		return;
	vars = bpf_map_lookup_elem(&br_vars, &key);
	if (!vars || dev->nd_net.net->ns.inum != vars->netns_ino)
		return;
	key = ifindex & (BR_TX_SLOTS - 1);
	t = bpf_map_lookup_elem(&br_tx_slots, &key);
	if (!t || t->ifindex != ifindex || t->slot >= BR_MAX_IFACES)
		return;
	key = (__u32)t->slot * BR_VERDICT_MAX + BR_FORWARDED;
	fwd = bpf_map_lookup_elem(&br_counters, &key);
	key = (__u32)t->slot * BR_VERDICT_MAX + BR_TX_FAILED;
	failed = bpf_map_lookup_elem(&br_counters, &key);
	if (!fwd || !failed)
		return;
	failed->packets += drops;
	failed->bytes += (__u64)drops * t->len;
	fwd->packets = fwd->packets > (__u64)drops ? fwd->packets - drops : 0;
	fwd->bytes = fwd->bytes > (__u64)drops * t->len ? fwd->bytes - (__u64)drops * t->len : 0;
}

/* Each way the kernel reports a frame it could not send. */

/* A redirect refused at once (the target takes no XDP frames now, or is
 * down): xdp_redirect_err(dev, prog, target, err, map_type, map_id, index). */
SEC("tp_btf/xdp_redirect_err")
int br_tx_redirect_err(__u64 *ctx)
{
	const struct net_device *dev = (const struct net_device *)ctx[0];

	charge_tx_failure(dev, (__u32)ctx[6], 1);
	return 0;
}

/* Redirected frames the target dropped when the devmap flushed them:
 * xdp_devmap_xmit(from_dev, to_dev, sent, drops, err). */
SEC("tp_btf/xdp_devmap_xmit")
int br_tx_devmap(__u64 *ctx)
{
	const struct net_device *to = (const struct net_device *)ctx[1];

	charge_tx_failure(to, to->ifindex, (int)ctx[3]);
	return 0;
}

/* XDP_TX frames the driver dropped at its flush: xdp_bulk_tx(dev, sent,
 * drops, err). */
SEC("tp_btf/xdp_bulk_tx")
int br_tx_bulk(__u64 *ctx)
{
	const struct net_device *dev = (const struct net_device *)ctx[0];

	charge_tx_failure(dev, dev->ifindex, (int)ctx[2]);
	return 0;
}

/* An XDP_TX the driver (or generic XDP) could not send at all:
 * xdp_exception(dev, prog, act). */
SEC("tp_btf/xdp_exception")
int br_tx_exception(__u64 *ctx)
{
	const struct net_device *dev = (const struct net_device *)ctx[0];

	if ((__u32)ctx[2] == XDP_TX)
		charge_tx_failure(dev, dev->ifindex, 1);
	return 0;
}

char _license[] SEC("license") = "GPL";
