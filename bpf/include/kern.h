/* Kernel types that tracepoint programs read, declared with only the fields
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

#endif
