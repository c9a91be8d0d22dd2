/* Layouts shared by the lab's BPF programs and its Go control code. */
#ifndef FASTPATH_LAB_SHARED_H
#define FASTPATH_LAB_SHARED_H

/* Largest frame the generator can send: a 1500-byte MTU plus Ethernet and one
 * VLAN tag, rounded up. Live frames allow more, but the lab's veths use 1500. */
#ifndef GEN_MAX_FRAME
#define GEN_MAX_FRAME 1536
#endif

/* One packet of the capture the generator replays. */
struct gen_packet {
	__u32 len;
	__u8 data[GEN_MAX_FRAME];
};

/* What the sink counts, per CPU. */
struct sink_counters {
	__u64 packets;
	__u64 bytes;
};

#endif
