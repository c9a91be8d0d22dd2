/* A log of values for the runtime's differential tests: each value goes to
 * the next slot of an array, so that the map, dumped after a run, holds every
 * packet's values in order. The last slot counts the values. */
#ifndef FASTPATH_RT_LOG_H
#define FASTPATH_RT_LOG_H

#include "common.h"

#define LOG_SLOTS 4096

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LOG_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} rt_log SEC(".maps");

static __always_inline void log_value(__s64 v)
{
	__u32 k = LOG_SLOTS - 1, i;
	__u64 *n = bpf_map_lookup_elem(&rt_log, &k), *o;

	if (!n)
		return;
	i = *n % (LOG_SLOTS - 1);
	o = bpf_map_lookup_elem(&rt_log, &i);
	if (o)
		*o = v;
	*n += 1;
}

#endif
