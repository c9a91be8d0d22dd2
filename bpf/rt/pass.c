/* Nothing but XDP_PASS: what running a program costs an engine before the
 * program does anything (the first row of the engines' comparison). */
#include "common.h"

SEC("xdp")
int xdp_pass_only(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
