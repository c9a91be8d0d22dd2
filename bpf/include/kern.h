/* Kernel types that tracepoint programs (and tc programs through
 * bpf_cast_to_kern_ctx) read, declared with only the fields
 * they use: CO-RE relocates each field to where the running kernel keeps
 * it. */
#ifndef FASTPATH_KERN_H
#define FASTPATH_KERN_H

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

struct net_device {
	int ifindex;
	struct {
		struct net *net;
	} nd_net;
} __attribute__((preserve_access_index));

/* ip_summed: how far the kernel has the L4 checksum (CHECKSUM_*). */
struct sk_buff {
	__u8 ip_summed : 2;
} __attribute__((preserve_access_index));

#ifndef CHECKSUM_PARTIAL
#define CHECKSUM_PARTIAL 3
#endif

#endif
