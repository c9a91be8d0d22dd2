/* Fragments: XDP sees each, where conntrack and the rules of the kernel see
 * the reassembled datagram. A later fragment carries no L4 header; it gets
 * its first fragment's ports here, so that the rules treat every fragment
 * of a datagram alike, and its state in conntrack (ct_later_fragment). */
#ifndef FASTPATH_FW_FRAG_H
#define FASTPATH_FW_FRAG_H

static __always_inline void frag_key(struct fw_frag_key *fk, const struct fw_flow_key *k, const struct fw_pkt *p)
{
	__builtin_memcpy(fk->src, k->src, 16);
	__builtin_memcpy(fk->dst, k->dst, 16);
	fk->id = p->frag_id;
	fk->family = k->family;
	fk->proto = k->family == FW_FAMILY_IPV4 ? k->proto : 0;
	fk->pad = 0;
}

/* Step 2: a first fragment notes its datagram's ports; a later one takes
 * them (and stays without, as before, if the first was not seen). */
static __noinline void frag_flow(const struct fw_config *cfg, struct fw_flow_key *k, const struct fw_pkt *p,
				 struct ct_txn *t)
{
	struct fw_frag *fr;
	__u64 now;

	if (!cfg || !k || !p || !t)
		return;
	now = ct_now(cfg);
	frag_key(&t->fk, k, p);
	if (p->frag == PKT_FRAG_FIRST) {
		struct fw_frag n = {
			.expires_ns = now + FW_FRAG_TIMEOUT_NS,
			.sport = k->sport,
			.dport = k->dport,
		};

		bpf_map_update_elem(&fw_frags, &t->fk, &n, BPF_ANY);
		return;
	}
	fr = bpf_map_lookup_elem(&fw_frags, &t->fk);
	if (!fr || fr->expires_ns <= now) {
		count(FW_C_FRAG_NO_FIRST);
		return;
	}
	k->sport = fr->sport;
	k->dport = fr->dport;
	k->noports = 0;
}

#endif
