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
	TRA_UNSUPPORTED,    /* extension headers, GSO packets, other L4, ICMPv6 without an SCMP kin: dropped */
	TRA_PARSE_ERROR,    /* malformed IPv6 or SCION: dropped */
	TRA_SCMP_ERROR,     /* an SCMP error for the host: to the daemon, which sends ICMPv6 and fails over */
	TRA_ICMP_ERROR,     /* an ICMPv6 error from the host: to the daemon, which sends it as SCMP */
	TRA_TX_FAILED,      /* the redirect to the host or the AS failed */
	TRA_MULTI_BUFFER,   /* SCION for the host in several buffers (GRO, jumbo): passed untranslated */
	TRA_VERDICT_MAX,
};

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
	__u16 pad2;
};

/* One path to a destination AS, as the daemon gives it. */
struct tra_path {
	__u16 len;      /* bytes of raw; 0: the empty path (the local AS) */
	__u16 mtu;      /* the largest SCION packet the path takes */
	__u8 type;      /* SCION PathType: 1 standard */
	__u8 pad;
	__u16 next_port;   /* first hop's underlay port, network order */
	__u32 next_hop;    /* first hop's underlay IPv4 (a router's internal_addr) */
	__u32 pad2;
	__u64 expiry;      /* Unix seconds */
	__u8 raw[TRA_PATH_MAX];
};

/* Value of tra_paths, keyed by destination ISD-AS (network order). */
struct tra_dest {
	__u32 n;   /* paths in use, 1..TRA_MAX_PATHS */
	__u32 gen; /* bumped by each update, for the daemon */
	struct tra_path paths[TRA_MAX_PATHS];
};

/* What the programs send the daemon through tra_events. */
enum tra_event_kind {
	TRA_EV_NO_PATH = 1, /* a held packet: translate it once a path is there */
	TRA_EV_SCMP = 2,    /* an SCMP error for the host: the SCMP message */
	TRA_EV_ICMP = 3,    /* an ICMPv6 error from the host: the IPv6 packet */
};

struct tra_event {
	__u32 kind;
	__u32 len;       /* bytes of data: the held IPv6 packet, or the SCMP message */
	__u64 ia;        /* the destination AS (no path, ICMPv6) or the SCMP sender's */
	__u8 scmp_type;
	__u8 scmp_code;
	__u8 src_host_len; /* SCMP: the sender's host address, 4 or 16 bytes */
	__u8 pad;
	__u32 pad2;
	__u8 src_host[16];
	__u8 data[TRA_HELD_MAX];
};

/* Per-CPU counters, indexed by verdict. */
struct tra_counter {
	__u64 packets;
	__u64 bytes;
};

#endif
