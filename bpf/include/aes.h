/* AES-128 encryption of one block with T-tables in .rodata: the hop-field MAC's cipher. */
#ifndef FASTPATH_AES_H
#define FASTPATH_AES_H

#include "common.h"

/* The tables below are read with unaligned 32-bit loads whose byte order
 * only works out on a little-endian target (bpfel). */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "aes.h needs a little-endian BPF target"
#endif

/* The AES S-box (FIPS-197 figure 7), as an X-macro so that both tables are
 * computed from it by the compiler rather than pasted as 2 KiB of hex. */
#define AES_SBOX(X) \
	X(0x63) X(0x7c) X(0x77) X(0x7b) X(0xf2) X(0x6b) X(0x6f) X(0xc5) \
	X(0x30) X(0x01) X(0x67) X(0x2b) X(0xfe) X(0xd7) X(0xab) X(0x76) \
	X(0xca) X(0x82) X(0xc9) X(0x7d) X(0xfa) X(0x59) X(0x47) X(0xf0) \
	X(0xad) X(0xd4) X(0xa2) X(0xaf) X(0x9c) X(0xa4) X(0x72) X(0xc0) \
	X(0xb7) X(0xfd) X(0x93) X(0x26) X(0x36) X(0x3f) X(0xf7) X(0xcc) \
	X(0x34) X(0xa5) X(0xe5) X(0xf1) X(0x71) X(0xd8) X(0x31) X(0x15) \
	X(0x04) X(0xc7) X(0x23) X(0xc3) X(0x18) X(0x96) X(0x05) X(0x9a) \
	X(0x07) X(0x12) X(0x80) X(0xe2) X(0xeb) X(0x27) X(0xb2) X(0x75) \
	X(0x09) X(0x83) X(0x2c) X(0x1a) X(0x1b) X(0x6e) X(0x5a) X(0xa0) \
	X(0x52) X(0x3b) X(0xd6) X(0xb3) X(0x29) X(0xe3) X(0x2f) X(0x84) \
	X(0x53) X(0xd1) X(0x00) X(0xed) X(0x20) X(0xfc) X(0xb1) X(0x5b) \
	X(0x6a) X(0xcb) X(0xbe) X(0x39) X(0x4a) X(0x4c) X(0x58) X(0xcf) \
	X(0xd0) X(0xef) X(0xaa) X(0xfb) X(0x43) X(0x4d) X(0x33) X(0x85) \
	X(0x45) X(0xf9) X(0x02) X(0x7f) X(0x50) X(0x3c) X(0x9f) X(0xa8) \
	X(0x51) X(0xa3) X(0x40) X(0x8f) X(0x92) X(0x9d) X(0x38) X(0xf5) \
	X(0xbc) X(0xb6) X(0xda) X(0x21) X(0x10) X(0xff) X(0xf3) X(0xd2) \
	X(0xcd) X(0x0c) X(0x13) X(0xec) X(0x5f) X(0x97) X(0x44) X(0x17) \
	X(0xc4) X(0xa7) X(0x7e) X(0x3d) X(0x64) X(0x5d) X(0x19) X(0x73) \
	X(0x60) X(0x81) X(0x4f) X(0xdc) X(0x22) X(0x2a) X(0x90) X(0x88) \
	X(0x46) X(0xee) X(0xb8) X(0x14) X(0xde) X(0x5e) X(0x0b) X(0xdb) \
	X(0xe0) X(0x32) X(0x3a) X(0x0a) X(0x49) X(0x06) X(0x24) X(0x5c) \
	X(0xc2) X(0xd3) X(0xac) X(0x62) X(0x91) X(0x95) X(0xe4) X(0x79) \
	X(0xe7) X(0xc8) X(0x37) X(0x6d) X(0x8d) X(0xd5) X(0x4e) X(0xa9) \
	X(0x6c) X(0x56) X(0xf4) X(0xea) X(0x65) X(0x7a) X(0xae) X(0x08) \
	X(0xba) X(0x78) X(0x25) X(0x2e) X(0x1c) X(0xa6) X(0xb4) X(0xc6) \
	X(0xe8) X(0xdd) X(0x74) X(0x1f) X(0x4b) X(0xbd) X(0x8b) X(0x8a) \
	X(0x70) X(0x3e) X(0xb5) X(0x66) X(0x48) X(0x03) X(0xf6) X(0x0e) \
	X(0x61) X(0x35) X(0x57) X(0xb9) X(0x86) X(0xc1) X(0x1d) X(0x9e) \
	X(0xe1) X(0xf8) X(0x98) X(0x11) X(0x69) X(0xd9) X(0x8e) X(0x94) \
	X(0x9b) X(0x1e) X(0x87) X(0xe9) X(0xce) X(0x55) X(0x28) X(0xdf) \
	X(0x8c) X(0xa1) X(0x89) X(0x0d) X(0xbf) X(0xe6) X(0x42) X(0x68) \
	X(0x41) X(0x99) X(0x2d) X(0x0f) X(0xb0) X(0x54) X(0xbb) X(0x16)

#define AES_XT(s) ((((s) << 1) ^ (((s) >> 7) * 0x1b)) & 0xff) /* 2·s in GF(2^8) */

/* One 8-byte entry per S-box input x, with S = S[x], S2 = 2·S, S3 = 3·S:
 * bytes S3 S S S2 S3 S S 0. A 32-bit little-endian load at byte offset k
 * (0..3) of the entry yields Te_k[x] of the usual four-table formulation,
 * whose big-endian bytes are Te0 = (S2 S S S3) and Te_k = Te0 rotated right
 * by 8k bits. One 2 KiB table instead of four 1 KiB ones: half the cache
 * footprint, and one base register serves all four lookups. The offset never
 * crosses the 8-byte entry, so no load straddles a cache line. */
#define AES_TE_ENTRY(s)                                               \
	((__u64)(AES_XT(s) ^ (s)) | (__u64)(s) << 8 | (__u64)(s) << 16 | \
	 (__u64)AES_XT(s) << 24 | (__u64)(AES_XT(s) ^ (s)) << 32 |       \
	 (__u64)(s) << 40 | (__u64)(s) << 48),
#define AES_S_ENTRY(s) (s),

/* Both tables in one object so that one base pointer reaches them: the
 * S-box with stride 1 saves the last round a shift per byte. Being const,
 * the object lands in .rodata, which the loader freezes; the verifier
 * accepts variable-index loads from it when the index is provably bounded
 * (here: a byte load, shifted left by 3), checking them against the section. */
struct aes_tables {
	__u64 te[256];
	__u8 sbox[256];
};

static const struct aes_tables aes_tab = {
	.te = { AES_SBOX(AES_TE_ENTRY) },
	.sbox = { AES_SBOX(AES_S_ENTRY) },
};

/* The address of entry x of aes_tab.te, as "idx <<= 3; idx += tb": in C the
 * compiler copies the base before each add (BPF's add is two-operand and it
 * will not commute it) or, worse, hoists tb + 1, tb + 2, tb + 3 into
 * registers of their own and spills; the byte offset k then goes into the
 * load instruction. */
static __always_inline const __u8 *aes_entry(const __u8 *tb, __u64 x)
{
	x <<= 3;
	asm("%0 += %1" : "+r"(x) : "r"(tb));
	return (const __u8 *)x;
}

/* The same for the stride-1 S-box: the address tb + x, to be read at the
 * S-box's offset. */
static __always_inline const __u8 *aes_sbox_entry(const __u8 *tb, __u64 x)
{
	asm("%0 += %1" : "+r"(x) : "r"(tb));
	return (const __u8 *)x;
}

/* Byte k (0 = most significant) of state word c, read from the stack copy
 * of the state (little-endian words, so the MSB sits at offset 3). A byte
 * load is one instruction where shift and mask from a register are three
 * (mov, shift, and); the 16-byte copy also keeps the four state words out of
 * registers, leaving enough of the ten for accumulators, round-key pointer
 * and table base without spills. */
#define AES_B(st, c, k) (((const volatile __u8 *)(st))[4 * (c) + 3 - (k)])
#define AES_TE(tb, k, x) (*(const __u32 *)(aes_entry(tb, x) + (k)))
#define AES_S(tb, x) ((__u32)aes_sbox_entry(tb, x)[offsetof(struct aes_tables, sbox)])

/* One full round: SubBytes, ShiftRows, MixColumns through the T-tables, then
 * AddRoundKey with round key r. */
#define AES_ROUND(st, tb, rk, r)                                          \
	do {                                                              \
		__u32 t0 = (rk)[4 * (r)] ^ AES_TE(tb, 0, AES_B(st, 0, 0)) ^ \
			   AES_TE(tb, 1, AES_B(st, 1, 1)) ^                \
			   AES_TE(tb, 2, AES_B(st, 2, 2)) ^                \
			   AES_TE(tb, 3, AES_B(st, 3, 3));                 \
		__u32 t1 = (rk)[4 * (r) + 1] ^ AES_TE(tb, 0, AES_B(st, 1, 0)) ^ \
			   AES_TE(tb, 1, AES_B(st, 2, 1)) ^                \
			   AES_TE(tb, 2, AES_B(st, 3, 2)) ^                \
			   AES_TE(tb, 3, AES_B(st, 0, 3));                 \
		__u32 t2 = (rk)[4 * (r) + 2] ^ AES_TE(tb, 0, AES_B(st, 2, 0)) ^ \
			   AES_TE(tb, 1, AES_B(st, 3, 1)) ^                \
			   AES_TE(tb, 2, AES_B(st, 0, 2)) ^                \
			   AES_TE(tb, 3, AES_B(st, 1, 3));                 \
		__u32 t3 = (rk)[4 * (r) + 3] ^ AES_TE(tb, 0, AES_B(st, 3, 0)) ^ \
			   AES_TE(tb, 1, AES_B(st, 0, 1)) ^                \
			   AES_TE(tb, 2, AES_B(st, 1, 2)) ^                \
			   AES_TE(tb, 3, AES_B(st, 2, 3));                 \
		(st)[0] = t0;                                             \
		(st)[1] = t1;                                             \
		(st)[2] = t2;                                             \
		(st)[3] = t3;                                             \
	} while (0)

/* The last round: no MixColumns, so S-box bytes put in place by shifts. */
#define AES_LAST_WORD(st, tb, rk, c)                                         \
	((rk)[40 + (c)] ^ AES_S(tb, AES_B(st, (c), 0)) << 24 ^                 \
	 AES_S(tb, AES_B(st, ((c) + 1) & 3, 1)) << 16 ^                        \
	 AES_S(tb, AES_B(st, ((c) + 2) & 3, 2)) << 8 ^                         \
	 AES_S(tb, AES_B(st, ((c) + 3) & 3, 3)))

/* Encrypts one block in place. s holds the 16 bytes as big-endian words
 * (s[0] = in[0] << 24 | in[1] << 16 | in[2] << 8 | in[3]), on entry the
 * plaintext, on return the ciphertext. rk is the FIPS-197 key schedule
 * w[0..43] as plain numbers (w[i] = key[4i] << 24 | … for i < 4), stored in
 * host byte order: the same big-endian-word convention as s, so AddRoundKey
 * is one xor per word and no byte swaps are needed. */
static __always_inline void aes128_encrypt_words(const __u32 *rk, __u32 s[4])
{
	volatile __u32 st[4];
	const __u8 *tb = (const __u8 *)&aes_tab;

	/* Opaque to the compiler: it keeps the table base in one register
	 * instead of rematerialising the 64-bit address for every lookup. */
	asm volatile("" : "+r"(tb));

	st[0] = s[0] ^ rk[0];
	st[1] = s[1] ^ rk[1];
	st[2] = s[2] ^ rk[2];
	st[3] = s[3] ^ rk[3];
	AES_ROUND(st, tb, rk, 1);
	AES_ROUND(st, tb, rk, 2);
	AES_ROUND(st, tb, rk, 3);
	AES_ROUND(st, tb, rk, 4);
	AES_ROUND(st, tb, rk, 5);
	AES_ROUND(st, tb, rk, 6);
	AES_ROUND(st, tb, rk, 7);
	AES_ROUND(st, tb, rk, 8);
	AES_ROUND(st, tb, rk, 9);
	s[0] = AES_LAST_WORD(st, tb, rk, 0);
	s[1] = AES_LAST_WORD(st, tb, rk, 1);
	s[2] = AES_LAST_WORD(st, tb, rk, 2);
	s[3] = AES_LAST_WORD(st, tb, rk, 3);
}

#endif
