/* What the border router's XDP program and its Go control plane agree on:
 * verdicts, configuration and map layouts. */
#ifndef FASTPATH_BR_SHARED_H
#define FASTPATH_BR_SHARED_H

#ifndef BR_MAX_IFACES
#define BR_MAX_IFACES 64 /* interfaces of this router and its siblings */
#endif
/* Counter slots: 0 internal, 1..BR_MAX_IFACES-2 external, last: packets that
 * matched none of the router's sockets. */
#define BR_SLOT_INTERNAL 0
#define BR_SLOT_UNMATCHED (BR_MAX_IFACES - 1)

/* Why the program did what it did; each has a per-CPU counter per slot.
 * Keep in step with verdictNames in internal/br. */
enum br_verdict {
	BR_FORWARDED = 0,      /* sent on: external neighbour, sibling or local host */
	BR_PARSE_ERROR,        /* malformed underlay or SCION header: dropped */
	BR_NOT_SCION,          /* not UDP to one of the router's sockets: passed */
	BR_NOT_IMPLEMENTED,    /* valid, but for the slow path (EPIC, SVC, extensions, …): passed */
	BR_NO_INTERFACE,       /* egress interface unknown or not allowed: SCMP */
	BR_UNDERLAY_MISMATCH,  /* underlay source is not the neighbour or sibling: dropped */
	BR_ROUTER_ALERT,       /* router alert for this router: passed */
	BR_FIB_DROP,           /* no route to the next hop: dropped */
	BR_FIB_PASS,           /* next hop not resolved (no neighbour entry, no route): passed */
	BR_INVALID_MAC,        /* hop-field MAC check failed: SCMP */
	BR_EXPIRED,            /* hop field expired: SCMP */
	BR_LINK_TYPE,          /* interface pair or segment change not allowed: SCMP */
	BR_INGRESS_MISMATCH,   /* hop field's ingress is not the arrival interface: SCMP */
	BR_BAD_LENGTH,         /* PayloadLen disagrees with the datagram: SCMP */
	BR_BAD_SRC_IA,         /* source ISD-AS invalid here: SCMP */
	BR_BAD_DST_IA,         /* destination ISD-AS invalid here: SCMP */
	BR_BAD_HOST_ADDR,      /* source or destination host address invalid: SCMP */
	BR_BFD,                /* BFD for the control plane: passed */
	BR_BAD_CHECKSUM,       /* UDP checksum wrong: dropped, as the kernel would */
	BR_LOCAL,              /* for an address of this host: passed, the kernel delivers it */
	BR_FWD_DISABLED,       /* FIB refused: forwarding is off on lo: passed */
	BR_TX_UNUSABLE,        /* egress device cannot take XDP frames: passed */
	BR_TX_FAILED,          /* handed to the device, which dropped it (not forwarded) */
	BR_LINK_DOWN,          /* the egress link's BFD fell silent: passed, the reference router answers */
	BR_MULTI_BUFFER,       /* a frame in several buffers (GRO, jumbo): passed, the kernel's stack takes it */
	BR_TOO_BIG,            /* longer than the egress device's MTU: passed, the reference router sends it */
	BR_TX_NO_SG,           /* a frame in several buffers for a device that takes XDP frames in one only: passed */
	BR_OTHER_HOST,         /* Ethernet destination another host's: passed, the kernel drops it */
	BR_WRONG_DEVICE,       /* for a socket whose traffic does not arrive by this device: passed, the kernel decides */
	BR_UNKNOWN_DEVICE,     /* arrived on a device the router has no entry for: passed */
	BR_STUN,               /* a STUN request to the internal address: passed, the reference router answers it */
	BR_UNKNOWN_L4,         /* a NextHdr the reference router refuses (v0.15), or for port 0, where it cannot send: dropped */
	BR_VERDICT_MAX,
};

/* What the plain-IP forwarder (br_forward_ip, `forward_ip = true`) did with
 * a packet the router gave up as not SCION; a per-CPU counter each, in
 * br_ip_counters. Keep in step with ipVerdictNames in internal/br. */
enum br_ip_verdict {
	BR_IP_FORWARDED = 0, /* sent to the FIB's next hop in XDP, hop limit or TTL decremented */
	BR_IP_LOCAL,         /* for this host, or not unicast (FIB: not forwarded): passed */
	BR_IP_NO_ROUTE,      /* no route, or no neighbour entry yet: passed, the kernel resolves or answers */
	BR_IP_HOP_LIMIT,     /* hop limit or TTL 1 or 0: passed, the kernel sends ICMP time exceeded */
	BR_IP_TOO_BIG,       /* longer than the egress MTU: passed, the kernel sends packet too big */
	BR_IP_NOT_READY,     /* the egress device takes no XDP frames now: passed, the kernel forwards */
	BR_IP_FWD_DISABLED,  /* forwarding is off on the ingress device: passed */
	BR_IP_OTHER,         /* not IPv4/IPv6, IPv4 options, IPv6 hop-by-hop options, link-local, multicast: passed */
	BR_IP_NOT_HOST,      /* Ethernet destination not this device's (another host's, broadcast, multicast): passed */
	BR_IP_BAD_HEADER,    /* IPv4 header checksum, a length longer than the frame: passed, the kernel drops it */
	BR_IP_MARTIAN,       /* a source or destination the kernel refuses (loopback, 0/8, multicast source, its own): passed */
	BR_IP_REVERSE_PATH,  /* IPv4 rp_filter on the device, and the source is not reached back through it: passed */
	BR_IP_EXTERNAL,      /* arrived on a SCION external interface's device (forward_ip_external off): passed */
	BR_IP_VERDICT_MAX,
};

/* How the reference router behind this one behaves where its releases
 * differ (br_config.reference); internal/scionproto says which release
 * does what. */
enum br_ref_flags {
	/* A port outside dispatched_ports is delivered to 30041 (v0.12). */
	BR_REF_REDIRECT_OUTSIDE_RANGE = 1 << 0,
	/* SCION/TCP is delivered to its port; a header under 20 bytes is
	 * dropped (v0.14 on). */
	BR_REF_TCP_TO_PORT = 1 << 1,
	/* A datagram whose NextHdr is none of TCP, UDP, SCMP, BFD, the
	 * extensions and the experimental values is dropped (v0.15 on). */
	BR_REF_KNOWN_L4 = 1 << 2,
	/* Such a datagram to the internal address is a STUN request the
	 * reference answers (v0.15 on). */
	BR_REF_STUN = 1 << 3,
	/* Transit from a sibling must come from its internal_addr's port too,
	 * not only its address (v0.14 on: a connected socket per sibling). */
	BR_REF_SIBLING_PORT = 1 << 4,
};

/* What an SCMP-worthy verdict does: the fast path never builds SCMP errors. */
enum br_scmp_action {
	BR_SCMP_PASS = 0, /* up the stack, for a userspace router to answer */
	BR_SCMP_DROP = 1,
};

enum br_link_type {
	BR_LINK_UNSET = 0,
	BR_LINK_CORE = 1,
	BR_LINK_PARENT = 2,
	BR_LINK_CHILD = 3,
	BR_LINK_PEER = 4,
};

/* Underlay address: IPv4 in the first 4 bytes of addr with family 4, or IPv6. */
struct br_addr {
	__u8 addr[16];
	__u16 port; /* network byte order */
	__u8 family; /* 4 or 6 */
	__u8 pad;
};

/* Key of br_sockets: an underlay address the router receives on. */
struct br_socket_key {
	__u8 addr[16];
	__u16 port; /* network byte order */
	__u8 family;
	__u8 pad;
};

/* Value of br_sockets: which interface the address belongs to. */
struct br_socket {
	__u16 ifid; /* 0: the internal interface */
	__u16 slot; /* counter slot */
};

/* Value of br_ports, keyed by UDP port (host byte order): the IPv4 sockets
 * on that port, so that the common case needs no hash lookup. With more than
 * BR_PORT_SOCKETS of them, overflow is set and br_sockets decides. */
#define BR_PORT_SOCKETS 4
struct br_port_socket {
	__u32 addr4; /* network byte order */
	__u16 ifid;
	__u16 slot;
};

struct br_port {
	__u8 n;
	__u8 overflow;
	__u16 pad;
	struct br_port_socket v4[BR_PORT_SOCKETS];
};

enum br_iface_kind {
	BR_IFACE_EXTERNAL = 1, /* one of this router's links to a neighbour AS */
	BR_IFACE_SIBLING = 2,  /* an interface of another router of this AS */
};

/* Value of br_ifaces, keyed by interface ID (__u16). */
struct br_iface {
	__u8 kind;      /* enum br_iface_kind */
	__u8 link_type; /* enum br_link_type; external interfaces only */
	__u16 slot;     /* counter slot; external interfaces only */
	__u64 neighbor_ia; /* ISD-AS across the link, network byte order */
	struct br_addr local;  /* external: our underlay end */
	struct br_addr remote; /* external: the neighbour's end; sibling: its internal_addr */
};

/* The single entry of br_config: the configuration file's, written whole
 * by attach (and a reload) and by nothing else. What changes for other
 * reasons lives in br_vars, an entry per writer. */
struct br_config {
	__u64 local_ia;          /* network byte order, as in the SCION header */
	struct br_addr internal; /* this router's internal_addr */
	__u16 dispatched_port_start; /* host byte order */
	__u16 dispatched_port_end;
	__u8 scmp_action;        /* enum br_scmp_action */
	/* 1: plain IP arriving on a device of an external interface only is
	 * forwarded too (`forward_ip_external`). */
	__u8 ip_from_external;
	__u8 reference; /* enum br_ref_flags */
	__u8 pad;
	/* The longest SCION datagram the reference router reads whole (9,000
	 * bytes, 8,488 from v0.14): a longer one is its to judge. */
	__u16 max_datagram;
	__u8 pad2[2];
	/* An external interface whose neighbour sent BFD once and then nothing
	 * for this long is down (0: never). */
	__u64 link_timeout_ns;
};

/* The single entry of br_vars: values that change apart from the
 * configuration, each with a writer of its own. The map is mmapped, and
 * each writer stores its own field in place, so that no writer can put
 * back another's older value (a read-modify-write of one shared value
 * could: a tap's lease restoring a replaced key's generation, say). */
struct br_vars_entry {
	/* Added to bpf_ktime_get_coarse_ns() (CLOCK_MONOTONIC_COARSE) to get
	 * Unix time in ns: CLOCK_REALTIME - CLOCK_MONOTONIC, measured by attach
	 * and again every second by `br serve` (a clock step moves it). Used
	 * for hop-field expiry only; everything else runs on the monotonic
	 * clock, which steps do not move. */
	__s64 mono_to_unix_ns;
	/* Changed whenever a key changes, to a value never used before (the
	 * monotonic clock when it changed): MAC cache entries of another
	 * generation no longer count. */
	__u64 key_gen;
	/* A tap (`br.OpenTap`) wants every frame forwarded or dropped in XDP
	 * in br_capture until this CLOCK_MONOTONIC time, in ns (0: no tap).
	 * The tap moves it on while it lives, so that a tap killed stops the
	 * copying within seconds. */
	__u64 capture_until;
	/* Inode of the network namespace the router's devices live in: the
	 * transmit tracepoints fire for every namespace. */
	__u64 netns_ino;
	/* Changed, to a value never used before, whenever a device stops
	 * taking what it took (br_devs): next hops cached under another
	 * generation are looked up again. */
	__u64 devs_gen;
};

/* What the router knows of a device of its namespace (br_devs): the
 * devices it is attached to and those its next hops leave by. */
enum br_dev_flags {
	BR_DEV_XMIT = 1 << 0,     /* takes XDP frames from a native program (NETDEV_XDP_ACT_NDO_XMIT) */
	BR_DEV_XMIT_SG = 1 << 1,  /* also in several buffers (NETDEV_XDP_ACT_NDO_XMIT_SG) */
	BR_DEV_UP = 1 << 2,       /* up: takes frames from the generic copy, which sends skbs */
	BR_DEV_INTERNAL = 1 << 3, /* faces the AS: internal_addr's traffic and plain IP arrive by it */
	BR_DEV_EXTERNAL = 1 << 4, /* an external interface's neighbour is reached by it */
	BR_DEV_RPF_STRICT = 1 << 5, /* IPv4 rp_filter 1 (the larger of all's and the device's) */
	BR_DEV_RPF_LOOSE = 1 << 6,  /* IPv4 rp_filter 2 */
};

struct br_dev {
	__u32 ifindex; /* whose entry this is: br_devs is indexed by ifindex modulo its size */
	__u16 flags;   /* enum br_dev_flags */
	__u8 mac[6];   /* all zero: a device without one (no Ethernet check) */
};


/* The tap (br.OpenTap): each frame the router forwards or drops in XDP, as a
 * record of br_capture — a br_capture_hdr, then the frame as it arrived
 * (in_len bytes) and, when it was forwarded, as it left (out_len bytes),
 * back to back, so that a record is only as long as its frames. A frame
 * longer than BR_CAPTURE_MAX (9,000 bytes of IP and more) is not kept: its
 * length is there, its bytes are not. */
#ifndef BR_CAPTURE_MAX
#define BR_CAPTURE_MAX 9216
#endif
struct br_capture_hdr {
	__u32 in_len;  /* the frame's whole length as it arrived */
	__u32 out_len; /* and as it left; 0 if it was dropped */
	__u32 verdict; /* enum br_verdict: BR_FORWARDED, or why it was dropped */
	/* Bit 0: by the copy attached in generic mode, which leaves a pending
	 * UDP checksum pending (its skb is completed by the device that sends
	 * it). From BR_CAPTURE_ACTION_SHIFT: the XDP action of a frame not
	 * forwarded, XDP_DROP (0 in older records: dropped) or XDP_PASS (up to
	 * the reference router, for the monitor). */
	__u32 generic;
};
#define BR_CAPTURE_ACTION_SHIFT 8

/* Value of br_capture_in, per CPU: the record being made. */
struct br_capture_frame {
	/* Records the ring had no room for: the tap reports them. */
	__u64 lost;
	/* p->mono of the frame kept in data, so that a departure or a drop
	 * sends only the arrival of its own frame. */
	__u64 arrived;
	struct br_capture_hdr hdr; /* from here, the record as it goes to the ring */
	__u8 data[2 * BR_CAPTURE_MAX];
};

/* Value of br_tx_slots, per CPU: which counter slot last sent a frame to
 * a device, so that the device's failed transmits count against it. */
#define BR_TX_SLOTS 256 /* power of two; indexed by ifindex */
struct br_tx_slot {
	__u32 ifindex;
	__u16 slot;
	__u16 len; /* the frame's length, for the bytes of a failure */
};

/* One hop-field key: AES-128 round keys, with round key 0 already XORed
 * with the CMAC subkey K1 (the MAC input is always one complete block). */
struct br_key {
	__u32 valid;
	__u32 rk[44];
};

/* Per-CPU counters, indexed slot * BR_VERDICT_MAX + verdict. */
struct br_counter {
	__u64 packets;
	__u64 bytes;
};

#endif
