/* Minimal XDP forwarder: every frame goes out the one port in redirect_port.
 * It does nothing else, so its rate is the ceiling of any XDP forwarder on the
 * testbed (the xdp-redirect scenario). */
#include "common.h"

/* Slot 0 holds the egress interface; a devmap lets the kernel bulk the sends. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} redirect_port SEC(".maps");

SEC("xdp")
int lab_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&redirect_port, 0, XDP_DROP);
}

char _license[] SEC("license") = "GPL";
