/* An XDP program that passes every frame: what attaching any XDP program to
 * a veth costs the kernel's path, before the program does any work. */
#include "common.h"

SEC("xdp")
int lab_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
