/* SCION header layout (draft-dekater-scion-dataplane) and field accessors. */
#ifndef FASTPATH_SCION_H
#define FASTPATH_SCION_H

#include "common.h"

#define SCION_CMN_LEN 12   /* common header */
#define SCION_IA_LEN 8
#define SCION_META_LEN 4   /* path meta header */
#define SCION_INF_LEN 8    /* info field */
#define SCION_HOP_LEN 12   /* hop field */
#define SCION_MAC_LEN 6
#define SCION_MAX_INF 3
#define SCION_MAX_HOPS 64
#define SCION_LINE 4       /* HdrLen is in units of 4 bytes */

/* PathType */
#define SCION_PATH_EMPTY 0
#define SCION_PATH_SCION 1
#define SCION_PATH_ONEHOP 2
#define SCION_PATH_EPIC 3

/* NextHdr */
#define SCION_PROTO_TCP 6
#define SCION_PROTO_UDP 17
#define SCION_PROTO_HBH 200
#define SCION_PROTO_E2E 201
#define SCION_PROTO_SCMP 202
#define SCION_PROTO_BFD 203
/* Experimentation and testing (RFC 3692, as SCION reuses them). */
#define SCION_PROTO_EXP1 253
#define SCION_PROTO_EXP2 254

/* Address types: T (2 bits) << 2 | L (2 bits); length is 4 * (L + 1). */
#define SCION_ADDR_IP4 0x0
#define SCION_ADDR_SVC 0x4
#define SCION_ADDR_IP6 0x3

/* Info field flags (first byte). */
#define SCION_INF_CONSDIR 0x01
#define SCION_INF_PEER 0x02
/* Hop field flags (first byte). */
#define SCION_HF_EGRESS_ALERT 0x01
#define SCION_HF_INGRESS_ALERT 0x02

/* Default end-host port of v0.12.0 (topology.EndhostPort). */
#define SCION_ENDHOST_PORT 30041

/* SCMP info types whose destination port is known without parsing further. */
#define SCMP_ECHO_REQUEST 128
#define SCMP_ECHO_REPLY 129
#define SCMP_TRACEROUTE_REQUEST 130
#define SCMP_TRACEROUTE_REPLY 131
/* SCMP message lengths: the header (type, code, checksum), and the shortest
 * echo and traceroute messages with it (draft-dekater-scion-dataplane). */
#define SCMP_HDR_LEN 4
#define SCMP_ECHO_LEN (SCMP_HDR_LEN + 4)        /* identifier, sequence */
#define SCMP_TRACEROUTE_LEN (SCMP_HDR_LEN + 20) /* identifier, sequence, ISD-AS, interface */

/* Hop expiry unit: 24 h / 256 = 337.5 s, in ns. */
#define SCION_EXP_UNIT_NS 337500000000ULL

/* Decoded path meta header. */
struct scion_meta {
	__u8 curr_inf;
	__u8 curr_hf;
	__u8 seg_len[3];
	__u8 num_inf;
	__u8 num_hops;
};

/* Decoded info field. */
struct scion_inf {
	__u8 flags;
	__u16 seg_id;
	__u32 timestamp;
};

/* Decoded hop field; mac stays as the 6 bytes of the packet. */
struct scion_hf {
	__u8 flags;
	__u8 exp_time;
	__u16 cons_ingress;
	__u16 cons_egress;
	__u8 mac[SCION_MAC_LEN];
};

static __always_inline struct scion_meta scion_decode_meta(__u32 word)
{
	struct scion_meta m = {
		.curr_inf = word >> 30,
		.curr_hf = (word >> 24) & 0x3f,
		.seg_len = { (word >> 12) & 0x3f, (word >> 6) & 0x3f, word & 0x3f },
	};
	return m;
}

/* Index of the info field a hop field belongs to (infIndexForHF). */
static __always_inline __u8 scion_inf_for_hf(const struct scion_meta *m, __u8 hf)
{
	if (hf < m->seg_len[0])
		return 0;
	if (hf < m->seg_len[0] + m->seg_len[1])
		return 1;
	return 2;
}

#endif
