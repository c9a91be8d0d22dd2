/* The synproxy action: not built yet, so a packet it matches passes. */
#ifndef FASTPATH_FW_SYNPROXY_H
#define FASTPATH_FW_SYNPROXY_H

static __always_inline int synproxy(struct xdp_md *ctx, const struct fw_config *cfg, const struct fw_flow_key *k,
				    const struct fw_pkt *p, struct ct_result *r)
{
	return CONTINUE;
}

#endif
