/* Connection tracking for the firewall: each IP packet gets a ct state
 * (new, established, related, invalid, untracked) with the meaning
 * nftables' `ct state` gives it, so that rules can match on it.
 *
 * TCP follows Linux's nf_conntrack_proto_tcp: the same state table
 * (tcp_conntracks), the same window checks (tcp_in_window) and the same
 * special cases (ignored packets and resync, reopening after TIME_WAIT,
 * simultaneous open, RST checks), with nf_conntrack_tcp_loose and
 * _be_liberal as options. UDP, ICMP echo and other protocols are
 * pseudo-connections with timeouts; ICMP errors that quote a tracked
 * connection are related. See docs/design/fw-conntrack.md.
 *
 * Entries live in two tables. Every connection starts in fw_ct_new, an LRU
 * of its own; only a connection that proves both ends real (conntrack's
 * ASSURED: a TCP handshake completed, UDP answered and still alive after
 * 2 s) moves to fw_ct_est, which never evicts. A flood of spoofed SYNs or
 * of new UDP flows churns fw_ct_new and cannot push an established
 * connection out. */
#ifndef FASTPATH_FW_CT_H
#define FASTPATH_FW_CT_H

#ifndef FW_CT_MAX
#define FW_CT_MAX 131072
#endif
#ifndef FW_CT_EMBRYONIC
#define FW_CT_EMBRYONIC 32768
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FW_CT_MAX);
	__type(key, struct fw_ct_key);
	__type(value, struct fw_ct_entry);
} fw_ct_est SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FW_CT_EMBRYONIC);
	__type(key, struct fw_ct_key);
	__type(value, struct fw_ct_entry);
} fw_ct_new SEC(".maps");

/* Each source's connections in the established table, by prefix (struct
 * fw_ct_src_key): its share is bounded (fw_config's ct_src_*), so that a
 * patient attacker with few prefixes cannot fill the table that never
 * evicts. */
#ifndef FW_CT_SRC
#define FW_CT_SRC (2 * FW_CT_MAX)
#endif
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FW_CT_SRC);
	__type(key, struct fw_ct_src_key);
	__type(value, __u32);
} fw_ct_src SEC(".maps");

/* What the parser found beyond the flow key, as offsets from the frame's
 * start. */
struct fw_pkt {
	__u16 l3;
	__u16 l4;
	/* L4 bytes by the IP header's length fields (not the frame's). */
	__u16 l4_len;
	/* enum pkt_frag */
	__u8 frag;
	__u8 pad;
	/* A fragment's datagram: its IP ID (IPv4's 16 bits, or IPv6's 32). */
	__u32 frag_id;
};

enum pkt_frag {
	PKT_FRAG_NONE = 0,
	PKT_FRAG_FIRST = 1,
	/* A fragment after the first: no L4 header. */
	PKT_FRAG_LATER = 2,
};

/* Fragments of one datagram, by what they all carry (as the kernel's
 * reassembly keys them: IPv6 without the protocol, which a later fragment
 * may name differently): a later fragment gets the first's ports, for the
 * rules, and its ct state. */
struct fw_frag_key {
	__u32 src[4];
	__u32 dst[4];
	__u32 id;
	__u8 family;
	__u8 proto;
	__u16 pad;
};

struct fw_frag {
	__u64 expires_ns;
	__u16 sport;
	__u16 dport;
	/* The first fragment's ct state, once tracked (0: not yet): the
	 * whole datagram's, for conntrack sees datagrams. */
	__u8 ct_state;
	__u8 pad[3];
};

/* Linux gives a datagram's fragments 30 s to arrive (ipfrag_time). */
#define FW_FRAG_TIMEOUT_NS (30ULL * 1000000000ULL)

/* An LRU: a flood of first fragments evicts the oldest datagrams, whose
 * later fragments are then untracked (as if their first were lost). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct fw_frag_key);
	__type(value, struct fw_frag);
} fw_frags SEC(".maps");

/* What conntrack decided for a packet, and what to do once the rules
 * have spoken (the rest is in the CPU's struct ct_txn). */
struct ct_result {
	struct fw_ct_key key;
	/* The key's end that sent the packet. */
	__u8 end;
	/* enum ct_commit */
	__u8 commit;
	/* For the synproxy: the found entry's status (enum fw_ct_status,
	 * with CT_R_FOUND and CT_R_PROXY_SYN; 0 without an entry) and the
	 * packet's direction in it. */
	__u8 status;
	__u8 dir;
	union {
		/* In: the frame's length, for the counters. */
		__u32 len;
		/* Out, once a TCP entry is found: its proxy_delta, for the
		 * synproxy. One word for both: fw_xdp's stack has no room
		 * for another. */
		__u32 proxy_delta;
	};
	/* The packet's ct state (enum fw_ct_state), for the synproxy. */
	__u8 state;
	__u8 pad[3];
};

/* ct_result.status: an entry was found; it awaits the server's SYN/ACK. */
#define CT_R_FOUND 0x80
#define CT_R_PROXY_SYN 0x40

/* What a packet the rules pass does to conntrack's tables. Nothing is
 * written before the rules have spoken: a packet they drop (a forged
 * SYN/ACK, say) leaves every entry as it was. */
enum ct_commit {
	CT_NONE = 0,
	/* Insert txn.e: a new connection (as in Linux, an entry is confirmed
	 * only when its packet leaves the stack). */
	CT_CREATE = 1,
	/* Write txn.e over the found entry: what the packet made of it. */
	CT_UPDATE = 2,
	/* Delete the found entry (an RST as the only answer). */
	CT_KILL = 3,
	/* Delete the found entry and insert txn.e (a SYN reopening a closed
	 * connection's tuple). */
	CT_REOPEN = 4,
};

/* TCP flags as in byte 13 of the header. */
#define TH_FIN 0x01
#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_PSH 0x08
#define TH_ACK 0x10
#define TH_URG 0x20
#define TH_ECE 0x40
#define TH_CWR 0x80

/* The flag combinations conntrack lets through (tcp_valid_flags), PSH, ECE
 * and CWR aside: a bit per combination of FIN SYN RST ACK URG. */
#define TCP_VALID_FLAGS                                                                                 \
	(1ULL << TH_SYN | 1ULL << (TH_SYN | TH_URG) | 1ULL << (TH_SYN | TH_ACK) | 1ULL << TH_RST |           \
	 1ULL << (TH_RST | TH_ACK) | 1ULL << (TH_FIN | TH_ACK) | 1ULL << (TH_FIN | TH_ACK | TH_URG) |        \
	 1ULL << TH_ACK | 1ULL << (TH_ACK | TH_URG))

/* get_conntrack_index */
enum tcp_index {
	TCP_SYN_SET,
	TCP_SYNACK_SET,
	TCP_FIN_SET,
	TCP_ACK_SET,
	TCP_RST_SET,
	TCP_NONE_SET,
};

#define sNO FW_TCP_NONE
#define sSS FW_TCP_SYN_SENT
#define sSR FW_TCP_SYN_RECV
#define sES FW_TCP_ESTABLISHED
#define sFW FW_TCP_FIN_WAIT
#define sCW FW_TCP_CLOSE_WAIT
#define sLA FW_TCP_LAST_ACK
#define sTW FW_TCP_TIME_WAIT
#define sCL FW_TCP_CLOSE
#define sS2 FW_TCP_SYN_SENT2
#define sIV FW_TCP_MAX
#define sIG FW_TCP_IGNORE

/* The next state by direction, flag index and state: Linux's
 * tcp_conntracks, whose comments explain each cell. */
static const __u8 tcp_conntracks[2][6][10] = {
	{
		/*	     sNO, sSS, sSR, sES, sFW, sCW, sLA, sTW, sCL, sS2	*/
		/*syn*/ {sSS, sSS, sIG, sIG, sIG, sIG, sIG, sSS, sSS, sS2},
		/*synack*/ {sIV, sIV, sSR, sIV, sIV, sIV, sIV, sIV, sIV, sSR},
		/*fin*/ {sIV, sIV, sFW, sFW, sLA, sLA, sLA, sTW, sCL, sIV},
		/*ack*/ {sES, sIV, sES, sES, sCW, sCW, sTW, sTW, sCL, sIV},
		/*rst*/ {sIV, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
		/*none*/ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
	},
	{
		/*syn*/ {sIV, sS2, sIV, sIV, sIV, sIV, sIV, sSS, sIV, sS2},
		/*synack*/ {sIV, sSR, sIG, sIG, sIG, sIG, sIG, sIG, sIG, sSR},
		/*fin*/ {sIV, sIV, sFW, sFW, sLA, sLA, sLA, sTW, sCL, sIV},
		/*ack*/ {sIV, sIG, sSR, sES, sCW, sCW, sTW, sTW, sCL, sIG},
		/*rst*/ {sIV, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL, sCL},
		/*none*/ {sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV, sIV},
	},
};

/* A TCP segment as conntrack reads it. */
struct tcp_seg {
	__u32 seq;
	__u32 ack;
	/* The highest SACK edge (ack when none). */
	__u32 sack;
	/* seq + payload + SYN + FIN */
	__u32 end;
	__u16 win;
	__u8 flags;
	__u8 index;
	/* From the options: window scale (0xff: none) and SACK permitted. */
	__u8 wscale;
	__u8 sack_perm;
	__u8 has_sack;
	__u8 pad;
};

static __always_inline int before32(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}
#define after32(a, b) before32(b, a)

/* MAXACKWINCONST */
#define CT_MAXACKWIN 66000

/* What ct_tcp decided. */
enum ct_verdict {
	CTV_ACCEPT,
	/* Accepted, but the state did not change (NFCT_TCP_IGNORE). */
	CTV_IGNORE,
	CTV_INVALID,
	/* The connection is over and this SYN opens a new one on its tuple. */
	CTV_REOPEN,
};

static __always_inline __u64 ct_timeout(const struct fw_config *cfg, __u32 t)
{
	return (__u64)cfg->ct_timeout[t & 31] * 1000000000ULL;
}

/* tcp_options: window scale and SACK permitted, from a SYN. */
static __always_inline void ct_tcp_options(struct fw_ct_half *h, const struct tcp_seg *s)
{
	if (!s->has_sack && s->wscale == 0xff && !s->sack_perm)
		return;
	h->td_scale = 0;
	h->flags &= FW_CTH_BE_LIBERAL;
	if (s->sack_perm)
		h->flags |= FW_CTH_SACK_PERM;
	if (s->wscale != 0xff) {
		h->flags |= FW_CTH_WINDOW_SCALE;
		h->td_scale = s->wscale;
	}
}

/* nf_tcp_log_invalid: a liberal sender's packet is accepted as it is. */
static __always_inline int ct_window_fail(const struct fw_ct_half *sender, __u32 flags, int ret)
{
	if ((sender->flags & FW_CTH_BE_LIBERAL) || (flags & FW_CTF_LIBERAL))
		return CTV_ACCEPT;
	return ret;
}

/* tcp_in_window: whether the segment lies in the window its receiver
 * advertised, and the window state it moves. */
static __always_inline int ct_tcp_in_window(struct fw_ct_entry *e, __u32 dir, const struct tcp_seg *s, __u32 cflags)
{
	struct fw_ct_half *sender = &e->dir[dir & 1];
	struct fw_ct_half *receiver = &e->dir[!dir];
	__u32 seq = s->seq, ack = s->ack, sack = s->ack, end = s->end, win = s->win, swin;
	__u32 maxack;
	int in_recv_win;

	if ((receiver->flags & FW_CTH_SACK_PERM) && s->has_sack)
		sack = s->sack;

	if (sender->td_maxwin == 0) {
		if (s->flags & TH_SYN) {
			/* The SYN/ACK answering a SYN, or a SYN from the reply
			 * direction in a simultaneous open. */
			sender->td_end = sender->td_maxend = end;
			sender->td_maxwin = win == 0 ? 1 : win;
			ct_tcp_options(sender, s);
			/* RFC 1323: scaling only if both ends offered it. */
			if (!((sender->flags & FW_CTH_WINDOW_SCALE) && (receiver->flags & FW_CTH_WINDOW_SCALE))) {
				sender->td_scale = 0;
				receiver->td_scale = 0;
			}
			if (!(s->flags & TH_ACK))
				return CTV_ACCEPT;
		} else {
			/* Mid-connection: what the packet says is all we know. */
			sender->td_end = end;
			swin = win << (sender->td_scale & 15);
			sender->td_maxwin = swin == 0 ? 1 : swin;
			sender->td_maxend = end + sender->td_maxwin;
			if (receiver->td_maxwin == 0)
				receiver->td_end = receiver->td_maxend = sack;
			else if (sack == receiver->td_end + 1)
				receiver->td_end++; /* a reply to a keepalive */
		}
	} else if ((s->flags & TH_SYN) && after32(end, sender->td_end) &&
		   (e->state == FW_TCP_SYN_SENT || e->state == FW_TCP_SYN_RECV)) {
		/* RFC 793: a SYN with a later ISN reinitialises its side. */
		sender->td_end = sender->td_maxend = end;
		sender->td_maxwin = win == 0 ? 1 : win;
		ct_tcp_options(sender, s);
	}

	if (!(s->flags & TH_ACK) || ((s->flags & (TH_ACK | TH_RST)) == (TH_ACK | TH_RST) && ack == 0))
		/* No ACK, or a broken stack's RST|ACK with ack 0. */
		ack = sack = receiver->td_end;

	if ((s->flags & TH_RST) && seq == 0 && e->state == FW_TCP_SYN_SENT)
		/* An RST answering a SYN. */
		seq = end = sender->td_end;

	maxack = sender->td_maxwin > CT_MAXACKWIN ? sender->td_maxwin : CT_MAXACKWIN;
	if (!before32(seq, sender->td_maxend + 1)) {
		__u32 overshot = end - sender->td_maxend + 1;
		int ack_ok = after32(sack, receiver->td_end - maxack - 1);

		in_recv_win = receiver->td_maxwin && after32(end, sender->td_end - receiver->td_maxwin - 1);
		if (in_recv_win && ack_ok && overshot <= receiver->td_maxwin && before32(sack, receiver->td_end + 1)) {
			/* A sender that overshoots the window a little: if the
			 * peer acknowledges it, its ACK must pass. */
			sender->td_end = end;
			sender->flags |= FW_CTH_DATA_UNACKNOWLEDGED;
			return ct_window_fail(sender, cflags, CTV_IGNORE);
		}
		return ct_window_fail(sender, cflags, CTV_INVALID); /* SEQ over the upper bound */
	}
	if (!before32(sack, receiver->td_end + 1))
		return ct_window_fail(sender, cflags, CTV_INVALID); /* ACKs data not seen yet */
	in_recv_win = !receiver->td_maxwin || after32(end, sender->td_end - receiver->td_maxwin - 1);
	if (!in_recv_win)
		return ct_window_fail(sender, cflags, CTV_IGNORE); /* an old retransmission */
	if (!after32(sack, receiver->td_end - maxack - 1))
		return ct_window_fail(sender, cflags, CTV_IGNORE); /* an overly delayed ACK */

	if (!(s->flags & TH_SYN))
		win <<= sender->td_scale & 15;

	/* The sender's side. */
	swin = win + (sack - ack);
	if (sender->td_maxwin < swin)
		sender->td_maxwin = swin;
	if (after32(end, sender->td_end)) {
		sender->td_end = end;
		sender->flags |= FW_CTH_DATA_UNACKNOWLEDGED;
	}
	if (s->flags & TH_ACK) {
		if (!(sender->flags & FW_CTH_MAXACK_SET)) {
			sender->td_maxack = ack;
			sender->flags |= FW_CTH_MAXACK_SET;
		} else if (after32(ack, sender->td_maxack)) {
			sender->td_maxack = ack;
		}
	}

	/* The receiver's. */
	if (receiver->td_maxwin != 0 && after32(end, sender->td_maxend))
		receiver->td_maxwin += end - sender->td_maxend;
	if (after32(sack + win, receiver->td_maxend - 1)) {
		receiver->td_maxend = sack + win;
		if (win == 0)
			receiver->td_maxend++;
	}
	if (ack == receiver->td_end)
		receiver->flags &= ~FW_CTH_DATA_UNACKNOWLEDGED;

	/* Retransmissions. */
	if (s->index == TCP_ACK_SET) {
		if (e->last_dir == dir && e->last_seq == seq && e->last_ack == ack && e->last_end == end &&
		    e->last_win == s->win) {
			if (e->retrans < 255)
				e->retrans++;
		} else {
			e->last_dir = dir;
			e->last_seq = seq;
			e->last_ack = ack;
			e->last_end = end;
			e->last_win = s->win;
			e->retrans = 0;
		}
	}
	return CTV_ACCEPT;
}

/* nf_tcp_handle_invalid: an assured connection whose ends both sent an
 * out-of-window FIN or RST is cut to the UNACK timeout. */
static __always_inline void ct_tcp_handle_invalid(struct fw_ct_entry *e, __u32 dir, __u32 index,
						  const struct fw_config *cfg, __u64 now)
{
	__u64 unack;

	if (!(e->status & FW_CTS_ASSURED) || (index != TCP_RST_SET && index != TCP_FIN_SET))
		return;
	if (e->last_dir != dir && (e->last_index == TCP_FIN_SET || e->last_index == TCP_RST_SET)) {
		unack = ct_timeout(cfg, FW_CTT_UNACK);
		if (e->expires_ns > now + 120000000000ULL && e->expires_ns > now + unack)
			e->expires_ns = now + unack;
	} else {
		e->last_index = index;
		e->last_dir = dir;
	}
}

/* nf_conntrack_tcp_packet on entry e for a segment in direction dir
 * (0: original). Sets *timeout to the entry's new lifetime (0: keep the
 * old expiry) and *kill when the entry is over at once. */
static __always_inline int ct_tcp(struct fw_ct_entry *e, __u32 dir, const struct tcp_seg *s,
				  const struct fw_config *cfg, __u64 now, __u64 *timeout, int *kill)
{
	__u32 index = s->index, old = e->state, new, cflags = cfg->ct_flags;
	__u32 flags_both;
	__u64 t;
	int res;

	*timeout = 0;
	*kill = 0;
	if (index > TCP_NONE_SET || old > FW_TCP_SYN_SENT2)
		return CTV_INVALID;
	new = tcp_conntracks[dir & 1][index][old];

	switch (new) {
	case FW_TCP_SYN_SENT:
		if (old < FW_TCP_TIME_WAIT)
			break;
		/* RFC 1122: a closed connection's tuple may be reused by a
		 * SYN once a FIN closed it or its last packet was an RST from
		 * the same side. */
		flags_both = e->dir[0].flags | e->dir[1].flags;
		if ((flags_both & FW_CTH_CLOSE_INIT) || (e->last_dir == dir && e->last_index == TCP_RST_SET))
			return CTV_REOPEN;
		/* fallthrough */
	case FW_TCP_IGNORE:
		/* Our entry may be out of sync with the ends: packets that
		 * could resync it are let through unchanged (a SYN in the
		 * original direction, a SYN/ACK in the reply one, an ACK in
		 * reply to the first SYN). */
		if (index == TCP_SYNACK_SET && e->last_index == TCP_SYN_SET && e->last_dir != dir &&
		    s->ack == e->last_end) {
			/* This SYN/ACK acknowledges a SYN we ignored: both
			 * ends are in sync, we take the SYN's values. */
			struct fw_ct_half *l = &e->dir[e->last_dir & 1];

			old = FW_TCP_SYN_SENT;
			new = FW_TCP_SYN_RECV;
			l->td_end = e->last_end;
			l->td_maxend = e->last_end;
			l->td_maxwin = e->last_win == 0 ? 1 : e->last_win;
			l->td_scale = e->last_wscale;
			e->last_flags &= ~FW_CTH_EXP_CHALLENGE_ACK;
			l->flags = e->last_flags;
			__builtin_memset(&e->dir[dir & 1], 0, sizeof(e->dir[0]));
			break;
		}
		e->last_index = index;
		e->last_dir = dir;
		e->last_seq = s->seq;
		e->last_end = s->end;
		e->last_win = s->win;
		if (index == TCP_SYN_SET && dir == 0) {
			e->last_flags = 0;
			e->last_wscale = 0;
			if (s->wscale != 0xff) {
				e->last_flags |= FW_CTH_WINDOW_SCALE;
				e->last_wscale = s->wscale;
			}
			if (s->sack_perm)
				e->last_flags |= FW_CTH_SACK_PERM;
			/* A SYN in LAST_ACK may draw an RFC 5961 challenge
			 * ACK, which must not be taken for the last ACK. */
			if (old == FW_TCP_LAST_ACK)
				e->last_flags |= FW_CTH_EXP_CHALLENGE_ACK;
		}
		/* A possible challenge ACK answering a SYN. */
		if (old == FW_TCP_SYN_SENT && index == TCP_ACK_SET && dir == 1)
			e->last_ack = s->ack;
		return CTV_IGNORE;
	case FW_TCP_MAX:
		return CTV_INVALID;
	case FW_TCP_TIME_WAIT:
		/* An RFC 5961 challenge ACK must not move us to TIME_WAIT. */
		if (e->last_index == TCP_SYN_SET && index == TCP_ACK_SET && e->last_dir != dir &&
		    (e->last_flags & FW_CTH_EXP_CHALLENGE_ACK)) {
			e->last_flags &= ~FW_CTH_EXP_CHALLENGE_ACK;
			return CTV_IGNORE;
		}
		break;
	case FW_TCP_SYN_SENT2:
		/* The table alone cannot follow a simultaneous open. */
		e->last_flags |= FW_CTH_SIMULTANEOUS_OPEN;
		break;
	case FW_TCP_SYN_RECV:
		if (dir == 1 && index == TCP_ACK_SET && (e->last_flags & FW_CTH_SIMULTANEOUS_OPEN))
			new = FW_TCP_ESTABLISHED;
		break;
	case FW_TCP_CLOSE:
		if (index != TCP_RST_SET)
			break;
		/* The tuple may have been reused already: RST checks use what
		 * the other side acknowledged. */
		if (e->dir[!dir].flags & FW_CTH_MAXACK_SET) {
			__u32 maxack = e->dir[!dir].td_maxack;

			if (before32(s->seq, maxack))
				return CTV_INVALID; /* invalid rst */
			if (!(old == FW_TCP_ESTABLISHED || old == FW_TCP_FIN_WAIT || old == FW_TCP_CLOSE_WAIT ||
			      old == FW_TCP_LAST_ACK || old == FW_TCP_TIME_WAIT) ||
			    s->seq == maxack)
				break;
			/* Part of a train: data, then RST at its end. */
			if (e->last_index == TCP_ACK_SET && e->last_dir == dir && s->seq == e->last_end)
				break;
			/* Not exactly at the edge: keep the state, so that a
			 * challenge ACK can follow. */
			new = old;
		}
		if ((((e->status & FW_CTS_SEEN_REPLY) && e->last_index == TCP_SYN_SET) ||
		     (!(e->status & FW_CTS_ASSURED) && e->last_index == TCP_ACK_SET)) &&
		    s->ack == e->last_end)
			/* An RST to a SYN or ACK we let through as ignored:
			 * the window checks are skipped, it may acknowledge
			 * what we ignored. */
			goto in_window;
		/* An RST answering a challenge ACK we let through. */
		if (old == FW_TCP_SYN_SENT && e->last_index == TCP_ACK_SET && e->last_dir == 1 &&
		    s->seq == e->last_ack)
			goto in_window;
		break;
	default:
		break;
	}

	res = ct_tcp_in_window(e, dir, s, cflags);
	if (res == CTV_IGNORE)
		return CTV_IGNORE;
	if (res == CTV_INVALID) {
		ct_tcp_handle_invalid(e, dir, index, cfg, now);
		return CTV_INVALID;
	}
in_window:
	e->last_index = index;
	e->last_dir = dir;
	e->state = new;
	if (old != new && new == FW_TCP_FIN_WAIT)
		e->dir[dir & 1].flags |= FW_CTH_CLOSE_INIT;

	t = ct_timeout(cfg, new); /* FW_CTT_SYN_SENT is state 1, and so on */
	if (e->retrans >= 3 && t > ct_timeout(cfg, FW_CTT_RETRANS))
		t = ct_timeout(cfg, FW_CTT_RETRANS);
	else if (index == TCP_RST_SET)
		t = ct_timeout(cfg, FW_CTT_CLOSE);
	else if (((e->dir[0].flags | e->dir[1].flags) & FW_CTH_DATA_UNACKNOWLEDGED) &&
		 t > ct_timeout(cfg, FW_CTT_UNACK))
		t = ct_timeout(cfg, FW_CTT_UNACK);

	if (!(e->status & FW_CTS_SEEN_REPLY)) {
		/* An RST as the only answer: no connection, gone at once. */
		if (s->flags & TH_RST) {
			*kill = 1;
			return CTV_ACCEPT;
		}
		/* A SYN retransmission does not renew the timeout. */
		if (index == TCP_SYN_SET && old == FW_TCP_SYN_SENT)
			return CTV_ACCEPT;
		/* A picked-up connection without an answer yet. */
		if (new == FW_TCP_ESTABLISHED && t > ct_timeout(cfg, FW_CTT_UNACK))
			t = ct_timeout(cfg, FW_CTT_UNACK);
	} else if (!(e->status & FW_CTS_ASSURED) && (old == FW_TCP_SYN_RECV || old == FW_TCP_ESTABLISHED) &&
		   new == FW_TCP_ESTABLISHED) {
		e->status |= FW_CTS_ASSURED;
	}
	*timeout = t;
	return CTV_ACCEPT;
}

/* tcp_new: the entry a first packet opens, or none (invalid). */
static __always_inline int ct_tcp_new(struct fw_ct_entry *e, const struct tcp_seg *s, __u32 cflags)
{
	__u32 st = s->index <= TCP_NONE_SET ? tcp_conntracks[0][s->index][FW_TCP_NONE] : FW_TCP_MAX;
	struct fw_ct_half *h = &e->dir[0];

	if (st >= FW_TCP_MAX)
		return 0; /* invalid new */
	if (st != FW_TCP_SYN_SENT && !(cflags & FW_CTF_LOOSE))
		return 0; /* no pick-up */
	h->td_end = s->end;
	h->td_maxwin = s->win == 0 ? 1 : s->win;
	if (st == FW_TCP_SYN_SENT) {
		h->td_maxend = h->td_end;
		ct_tcp_options(h, s);
	} else {
		/* Picked up mid-stream: its history is lost, so SACK and
		 * liberal windows, for window scaling we did not see. */
		h->td_maxend = h->td_end + h->td_maxwin;
		e->dir[0].flags = FW_CTH_SACK_PERM | FW_CTH_BE_LIBERAL;
		e->dir[1].flags = FW_CTH_SACK_PERM | FW_CTH_BE_LIBERAL;
	}
	e->last_index = TCP_NONE_SET;
	return 1;
}

#include "ct_track.h"

#endif
