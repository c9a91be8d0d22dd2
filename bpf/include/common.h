/* Common includes and attributes for every fastpath BPF program. */
#ifndef FASTPATH_COMMON_H
#define FASTPATH_COMMON_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* A step that has not decided the packet's fate returns CONTINUE; a step that
 * has decided returns an XDP action (>= 0). */
#define CONTINUE (-1)

#endif
