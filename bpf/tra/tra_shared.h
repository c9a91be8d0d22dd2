/* What the SCION-IP translator's programs and its Go control plane agree on:
 * verdicts, configuration, the path map and the events it sends up. */
#ifndef FASTPATH_TRA_SHARED_H
#define FASTPATH_TRA_SHARED_H

#ifndef TRA_MAX_PATHS
#define TRA_MAX_PATHS 4 /* paths per destination AS, spread over by flow */
#endif
#ifndef TRA_PATH_MAX
#define TRA_PATH_MAX 256 /* bytes of a path header: meta, 3 info fields, 18 hops */
#endif
#ifndef TRA_HELD_MAX
#define TRA_HELD_MAX 1536 /* bytes of a held packet sent up */
#endif
#ifndef TRA_MAX_DESTS
#define TRA_MAX_DESTS 4096 /* destinations with paths; a power of two (slots of tra_used) */
#endif
#ifndef TRA_SETS
#define TRA_SETS (2 * TRA_MAX_DESTS) /* entries of tra_sets: every destination's set
				      * and as many free or set aside, so that all
				      * can be replaced at once (a route change) */
#endif
#ifndef TRA_HEARTBEAT_STALE_NS
#define TRA_HEARTBEAT_STALE_NS (3ULL * 1000000000ULL) /* the daemon writes its heartbeat
							* each second: gone when older */
#endif
#ifndef TRA_MAX_ROUTERS
#define TRA_MAX_ROUTERS 64 /* the AS's border routers' internal addresses */
#endif

/* Why a program did what it did; one per-CPU counter each. Keep in step
 * with verdictNames in internal/tra. */
enum tra_verdict {
	TRA_OUT = 0,        /* IPv6 → SCION, sent to the AS's router or a local host */
	TRA_IN,             /* SCION → IPv6, handed to the host */
	TRA_NO_PATH,        /* no path to the destination AS yet: held for the daemon */
	TRA_QUEUE_FULL,     /* for the daemon (no path, an error), whose queue was full: dropped */
	TRA_PTB,            /* too big for the path: ICMPv6 Packet Too Big to the host */
	TRA_MSS_CLAMPED,    /* a TCP SYN's MSS lowered to fit the path (also translated) */
	TRA_NOT_SMIP,       /* not to a SCION-mapped address: dropped (the host routed it here) */
	TRA_UNMAPPABLE,     /* a SCION source without an SM-IP address (AS or ISD too large) */
	TRA_NOT_OURS,       /* SCION, but not for this host: passed */
	TRA_UNSUPPORTED,    /* extension headers, other L4, ICMPv6 without an SCMP kin: dropped */
	TRA_PARSE_ERROR,    /* malformed IPv6 or SCION: dropped */
	TRA_SCMP_ERROR,     /* an SCMP error for the host: to the daemon, which sends ICMPv6 and fails over */
	TRA_ICMP_ERROR,     /* an ICMPv6 error from the host: to the daemon, which sends it as SCMP */
	TRA_TX_FAILED,      /* no route to the first hop, or the device refused the frame */
	TRA_MULTI_BUFFER,   /* SCION for the host in several buffers (GRO, jumbo): passed untranslated */
	TRA_SPOOFED,        /* SCION for the host from a sender that cannot have sent it: dropped */
	TRA_FRAGMENT,       /* an IPv6 fragment (SCION has none): dropped, the first answered */
	TRA_HOP_LIMIT,      /* hop limit 1 or 0: ICMPv6 time exceeded to the host */
	TRA_OFFLOAD,        /* a GSO packet (the pair's offloads turned on again): dropped */
	TRA_UNREACHABLE,    /* an IPv6 host of this AS (the underlay is IPv4): ICMPv6 unreachable */
	TRA_PROBE,          /* an SCMP traceroute reply: to the daemon's path probes */
	TRA_TO_PAIR,        /* at the host's end: on through the pair, to be translated there once
			     * the kernel has cut it or completed its checksum (not a final verdict) */
	TRA_TOO_BIG_IN,     /* SCION whose IPv6 packet would exceed the pair's MTU: dropped
			     * (the pair would drop it after the redirect, uncounted) */
	TRA_BAD_PATH,       /* the path chosen cannot carry its own SCION header (an MTU of 0:
			     * installed without the daemon, which refuses it): dropped */
	TRA_NO_DAEMON,      /* no path, and the daemon gone (its heartbeat stale): ICMPv6 no
			     * route to the host at once, rather than held for nobody */
	TRA_VERDICT_MAX,
};

/* Which program counted: tra_counters holds TRA_VERDICT_MAX counters for
 * each, tra_out's first. */
#define TRA_DIR_OUT 0
#define TRA_DIR_IN 1

/* The translator's configuration, the single entry of tra_conf. */
struct tra_config {
	__u64 local_ia;     /* network byte order, as in the SCION header */
	__u8 host_smip[16]; /* this host's SM-IP address */
	__u32 host_ip4;     /* this host's underlay IPv4 address, network order */
	__u8 host_is4;      /* 1: the host's SCION address is host_ip4 (IPv4 form) */
	__u8 pad[3];
	__u32 underlay_ifindex; /* the device to the AS (eth0) */
	__u32 host_ifindex;     /* the translator's end of its device pair (tra1) */
	__u8 host_mac[6];       /* the host's end of the pair (tra0): dst of what goes in */
	__u8 pair_mac[6];       /* tra1: src of what goes in */
	__u16 dispatched_start; /* the AS's dispatched_ports (host order) */
	__u16 dispatched_end;
	__u16 underlay_port;    /* the port SCION packets leave from (network order) */
	__u8 routers_to_port;   /* 1: the AS's routers hand the host SCION on the port the
				 * packet names (its UDP or TCP port, an SCMP identifier),
				 * dispatched or not (scionproto v0.14.0 on); 0: outside
				 * dispatched_ports, and all TCP, on the end-host port (v0.12.0) */
	__u8 pad2;
	__u32 netns_ino;        /* the host's network namespace, for the transmit tracepoints */
	__u32 underlay_sw_csum; /* 1: the underlay device has no transmit checksum offload, so
				 * the kernel completes a pending checksum on the way out of it
				 * (tra run keeps this as the device is) */
	__u32 pair_mtu;         /* the host's end's MTU: the largest IPv6 packet tra_in may
				 * hand the pair (0: unchecked) */
	__s32 tai_offset;       /* TAI − UTC in seconds, as the kernel keeps it (adjtimex):
				 * CLOCK_TAI less this is Unix time, for paths' expiry */
};

/* One path to a destination AS, as the daemon gives it. */
struct tra_path {
	__u16 len;      /* bytes of raw; 0: the empty path (the local AS) */
	__u16 mtu;      /* the largest SCION packet the path takes */
	__u8 type;      /* SCION PathType: 1 standard */
	__u8 pad;
	__u16 next_port;   /* first hop's underlay port, network order */
	__u32 next_hop;    /* first hop's underlay IPv4 (a router's internal_addr) */
	__u32 gateway;     /* the neighbour that takes what goes to next_hop: next_hop
			    * on the device's link, or its route's gateway (the daemon
			    * keeps it); 0: the kernel routes each packet */
	__u64 expiry;      /* Unix seconds: tra_out takes the path no longer from then
			    * on, daemon or not; 0: none */
	__u8 raw[TRA_PATH_MAX];
};

/* A destination AS's set of paths: an entry of tra_sets. The daemon writes
 * a set whole into an entry no destination points to, then points the
 * destination to it (tra_dests); an entry is written again only once no
 * program can still be reading it, so that a packet reads one set of
 * paths, never a set being rewritten. */
struct tra_dest {
	__u64 ia;   /* the destination, network order: checked against the key */
	__u32 gen;  /* written with the entry, checked against the tra_set_ref (never 0) */
	__u32 n;    /* paths in use, 1..TRA_MAX_PATHS */
	__u32 slot; /* the destination's entry in tra_used */
	__u32 pad;
	struct tra_path paths[TRA_MAX_PATHS];
};

/* Where a destination's set is: its entry of tra_sets and the generation
 * the entry was written with (the value of tra_dests). */
struct tra_set_ref {
	__u32 set;
	__u32 gen;
};

/* A border router's internal address: who may hand the host SCION with a
 * standard path. */
struct tra_addr4 {
	__u32 addr; /* network order */
	__u16 port; /* network order */
	__u16 pad;
};

/* What the programs send the daemon through tra_held and tra_events. */
enum tra_event_kind {
	TRA_EV_NO_PATH = 1, /* a held packet: translate it once a path is there (tra_held) */
	TRA_EV_SCMP = 2,    /* an SCMP error for the host: the SCMP message */
	TRA_EV_ICMP = 3,    /* an ICMPv6 error from the host: the IPv6 packet */
	TRA_EV_PROBE = 4,   /* an SCMP traceroute reply (tra_probes, struct tra_probe_reply) */
};

struct tra_event {
	__u32 kind;
	__u32 len;       /* bytes of data: the held IPv6 packet, or the SCMP message */
	__u64 ia;        /* the destination AS (no path, ICMPv6) or the SCMP sender's */
	__u8 scmp_type;
	__u8 scmp_code;
	__u8 src_host_len; /* SCMP: the sender's host address, 4 or 16 bytes */
	__u8 path_type;    /* SCMP: the SCION path type it came with (1 standard, 0 empty) */
	__u32 uid;         /* held packet: its socket owner's uid (TRA_UID_UNKNOWN: none) */
	__u8 src_host[16];
	__u32 from_addr;   /* SCMP: who handed it over on the underlay, network order */
	__u16 from_port;   /* network order */
	__u16 pad;
	__u8 data[TRA_HELD_MAX];
};

/* The mark of a packet held at the host's end of the pair (the held copy
 * goes to the daemon): it goes on into the pair, which drops it on its
 * other side. */
#define TRA_HELD_MARK 0x74726168

/* What bpf_get_socket_uid gives for a packet without a socket of the host
 * (the kernel's overflow uid). */
#define TRA_UID_UNKNOWN 65534

/* An SCMP traceroute reply, the answer to a path probe: a ring of its own
 * (tra_probes), so that a flood of SCMP errors never takes its room. */
#define TRA_PROBE_MSG 24 /* type, code, checksum, id, seq, ISD-AS, interface */
struct tra_probe_reply {
	__u64 ia;        /* the SCION source, network order */
	__u32 from_addr; /* the underlay sender, network order */
	__u16 from_port;
	__u8 path_type;
	__u8 len;        /* bytes of msg */
	__u8 msg[TRA_PROBE_MSG];
};

/* Per-CPU counters, indexed by verdict. */
struct tra_counter {
	__u64 packets;
	__u64 bytes;
};

/* What the daemon counts, in tra_daemon (one u64 each), so that `tra stats`
 * reads them beside the programs' verdicts, across daemon restarts. Keep in
 * step with daemonCounterNames in internal/tra. */
enum tra_daemon_counter {
	TRA_D_HELD = 0,          /* packets held for a path */
	TRA_D_HELD_SENT,         /* held packets sent once their path came */
	TRA_D_HELD_DROPPED,      /* held packets beyond a bound (per destination, in all): dropped */
	TRA_D_UNREACHABLE,       /* ICMPv6 destination unreachable sent to the host */
	TRA_D_UNREACHABLE_LIMITED, /* ... not sent: over the rate limit */
	TRA_D_LOOKUPS,           /* path lookups asked of scionproto's daemon */
	TRA_D_LOOKUP_FAILED,     /* lookups that failed or found no usable path */
	TRA_D_LOOKUP_REFUSED,    /* new destinations refused: lookup queue or destination bound full */
	TRA_D_INSTALLED,         /* path sets installed in the data plane */
	TRA_D_EXPIRED,           /* paths removed at their expiry */
	TRA_D_EVICTED,           /* idle destinations removed */
	TRA_D_IF_DOWN,           /* SCMP interface down believed: paths through it dropped */
	TRA_D_SCMP_IGNORED,      /* SCMP errors not about a packet of this host on a path of ours: ignored */
	TRA_D_SCMP_TO_HOST,      /* SCMP errors given to the host as ICMPv6 */
	TRA_D_ICMP_TO_SCION,     /* the host's ICMPv6 errors sent as SCMP */
	TRA_D_BAD_EVENT,         /* events the daemon could not decode or translate */
	TRA_D_PROBES,            /* path probes sent (SCMP traceroute) */
	TRA_D_PROBE_REPLIES,     /* path probes answered */
	TRA_D_PATH_DEAD,         /* paths left because their probes went unanswered */
	TRA_D_OFFLOAD_FIXED,     /* the pair's offloads set right again */
	TRA_D_REATTACHED,        /* tra_in attached again to a recreated device */
	TRA_D_PANICS,            /* panics recovered */
	TRA_D_DESTS,             /* gauge: destinations tracked */
	TRA_D_HELD_NOW,          /* gauge: packets held now */
	TRA_D_LOOKUPS_NOW,       /* gauge: lookups in flight or queued */
	TRA_D_SHUNNED_NOW,       /* gauge: interfaces shunned now */
	TRA_D_GOROUTINES,        /* gauge: the daemon's goroutines */
	TRA_D_RSS_KB,            /* gauge: the daemon's resident memory, KiB */
	TRA_D_PAIR_MTU_SET,      /* the pair's MTU set to follow the paths installed */
	TRA_D_PAIR_MTU,          /* gauge: the pair's MTU */
	TRA_D_IF_DOWN_FORGED,    /* interface down not from the router of the interface: refused */
	TRA_D_IF_DOWN_PROBED,    /* interface down claimed by another AS: its paths probed at once */
	TRA_D_PROBE_REFUSED,     /* probe replies that answer no probe of ours from the probed path's end */
	TRA_D_OWNER_LIMITED,     /* new destinations refused: their sender's user was over its share */
	TRA_D_RESOLVE_FAILED,    /* resolutions of a router's name (topology.json) that failed */
	TRA_D_PATH_REFUSED,      /* paths a lookup gave that cannot carry IPv6's minimum MTU (or name none) */
	TRA_D_MAX,
};

#endif
