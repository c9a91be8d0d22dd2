/* Layouts shared by the lab's BPF programs and its Go control code. */
#ifndef FASTPATH_LAB_SHARED_H
#define FASTPATH_LAB_SHARED_H

/* Largest frame the generator can send: a 1500-byte MTU plus Ethernet and one
 * VLAN tag, rounded up. Live frames allow more, but the lab's veths use 1500. */
#ifndef GEN_MAX_FRAME
#define GEN_MAX_FRAME 1536
#endif

/* One packet of the capture the generator replays. The offsets are for
 * flood mode, which rewrites the source address and ports of each packet:
 * where they are, and the bits of the address that may change. */
struct gen_packet {
	__u32 len;
	__u32 host_mask; /* host order */
	__u16 l3_off;
	__u16 l4_off;
	__u16 csum_off; /* the L4 checksum */
	__u8 family;    /* 4 or 6 */
	__u8 proto;     /* IPPROTO_UDP or IPPROTO_TCP */
	__u8 data[GEN_MAX_FRAME];
};

/* What the sink counts, per CPU: multi_buf are the frames that came in
 * several buffers (longer than a veth's first page takes). */
struct sink_counters {
	__u64 packets;
	__u64 bytes;
	__u64 multi_buf;
};

#endif
