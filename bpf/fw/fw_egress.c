/* The host's own packets, for connection tracking: XDP sees what arrives
 * on a device, never what the host sends, so on a host that runs the
 * firewall on its own interface the answers it sends (the SYN/ACK of an
 * SSH server) and the connections it opens would be unknown to conntrack,
 * and their next packets in `invalid` or `new`. This program, at the
 * device's TC egress hook, tracks them in the same tables with the same
 * keys, as Linux's conntrack does at OUTPUT. It filters nothing: the
 * rules are for what comes in. */
#define FW_EGRESS
#define FW_CTX struct __sk_buff
#define fw_load_bytes bpf_skb_load_bytes
#include "fw.c"

/* TCX: let the next program on the hook (or the stack) have the packet. */
#define FW_TCX_NEXT (-1)

/* The devices the instance's XDP program is attached to. A packet that
 * came in on one of them was tracked there: forwarded out again, it is the
 * same packet, not the host's. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} fw_devs SEC(".maps");

SEC("tc")
int fw_egress(struct __sk_buff *skb)
{
	struct ct_txn *t = ct_txn();
	struct fw_config *cfg;
	__u32 zero = 0, in = skb->ingress_ifindex;

	cfg = bpf_map_lookup_elem(&fw_conf, &zero);
	if (!cfg || !t || !(cfg->ct_flags & FW_CTF_ON))
		return FW_TCX_NEXT;
	if (in && bpf_map_lookup_elem(&fw_devs, &in))
		return FW_TCX_NEXT;
	__builtin_memset(&t->k, 0, sizeof(t->k));
	__builtin_memset(&t->p, 0, sizeof(t->p));
	/* Headers the host wrote are in the linear part; anything else
	 * (a device without Ethernet headers, say) is not tracked. */
	if (parse_flow(skb, &t->k, &t->p) != CONTINUE)
		return FW_TCX_NEXT;
	if (t->p.frag)
		frag_flow(cfg, &t->k, &t->p, t);
	track_conn(skb, cfg, &t->k, &t->p, &t->r, skb->len);
	count(FW_C_CT_EGRESS);
	if (t->k.ct_state == FW_CT_INVALID)
		count(FW_C_CT_EGRESS_INVALID);
	/* The synproxy's connections are shifted at XDP, which the host's
	 * packets never pass: leave them as the proxy keeps them. */
	if (t->r.status & FW_CTS_SYNPROXY)
		return FW_TCX_NEXT;
	if (t->r.commit == CT_CREATE || t->r.commit == CT_REOPEN)
		t->e.status |= FW_CTS_LOCAL_ORIG;
	ct_confirm(cfg, &t->r);
	return FW_TCX_NEXT;
}
