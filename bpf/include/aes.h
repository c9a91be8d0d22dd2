/* AES-128 encryption of one block with T-tables in .rodata: the hop-field MAC's cipher. */
#ifndef FASTPATH_AES_H
#define FASTPATH_AES_H

#include "common.h"

/* The table layout below relies on little-endian loads (bpfel). */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "aes.h needs a little-endian BPF target"
#endif

/* The AES S-box (FIPS-197 figure 7), as an X-macro from which the compiler
 * computes both tables, rather than 2 KiB of pasted hex. */
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
 * footprint, and k goes into the load's offset field. A load never crosses
 * its 8-byte entry, so never a cache line. */
#define AES_TE_ENTRY(s)                                               \
	((__u64)(AES_XT(s) ^ (s)) | (__u64)(s) << 8 | (__u64)(s) << 16 | \
	 (__u64)AES_XT(s) << 24 | (__u64)(AES_XT(s) ^ (s)) << 32 |       \
	 (__u64)(s) << 40 | (__u64)(s) << 48),
#define AES_S_ENTRY(s) (s),

/* Const, so in .rodata, which the loader freezes. The verifier accepts a
 * load at a variable offset into it when the offset is provably bounded
 * (here by a mask), and checks the bound against the whole section. The
 * S-box proper (stride 1) serves the last round, whose index then needs no
 * scaling; one object, so that one base register reaches both. */
struct aes_tables {
	__u64 te[256];
	__u8 sbox[256];
};

static const struct aes_tables aes_tab = {
	.te = { AES_SBOX(AES_TE_ENTRY) },
	.sbox = { AES_SBOX(AES_S_ENTRY) },
};

/* acc ^= Te_off[one byte of word]: one T-table lookup, six instructions.
 * The shift picks the byte and scales it by the entry size 8 in one go
 * (">>= 21" for the most significant byte, ">>= 13", ">>= 5", "<<= 3" for
 * the least); the mask bounds the offset to [0, 0x7f8] for the verifier.
 * Inline asm, because from the same computation in C clang 14 made worse
 * code: it copied the base before each add ("r4 = r1; r4 += r2": BPF's add
 * has two operands and clang does not commute it), hoisted tb + 1, tb + 2,
 * tb + 3 into registers of their own, narrowed the xors to 32 bits and
 * zero-extended before every shift ("r <<= 32; r >>= 32": -mcpu=v1 has no
 * alu32), and hoisted address computations across rounds until it ran out of
 * the ten registers and spilled. Volatile keeps the program's order; the
 * only spill left is the round-key pointer, reloaded once a round. */
#define AES_LOOKUP(acc, word, base, shift, off)                          \
	do {                                                             \
		__u64 i_;                                                \
		asm volatile("%[i] = %[s]\n\t"                           \
			     "%[i] " shift "\n\t"                        \
			     "%[i] &= 2040\n\t"                          \
			     "%[i] += %[tb]\n\t"                         \
			     "%[i] = *(u32 *)(%[i] + %[k])\n\t"          \
			     "%[t] ^= %[i]"                              \
			     : [t] "+r"(acc), [i] "=&r"(i_)              \
			     : [s] "r"(word), [tb] "r"(base), [k] "i"(off)); \
	} while (0)

/* One full round (SubBytes, ShiftRows, MixColumns, AddRoundKey r): output
 * word c is Te0[byte 0 of s[c]] ^ Te1[byte 1 of s[c+1]] ^ Te2[byte 2 of
 * s[c+2]] ^ Te3[byte 3 of s[c+3]] ^ rk[4r+c], byte 0 the most significant. */
#define AES_ROUND(s0, s1, s2, s3, tb, rk, r)                             \
	do {                                                             \
		__u64 t0 = (rk)[4 * (r)], t1 = (rk)[4 * (r) + 1];        \
		__u64 t2 = (rk)[4 * (r) + 2], t3 = (rk)[4 * (r) + 3];    \
		AES_LOOKUP(t0, s0, tb, ">>= 21", 0);                     \
		AES_LOOKUP(t0, s1, tb, ">>= 13", 1);                     \
		AES_LOOKUP(t0, s2, tb, ">>= 5", 2);                      \
		AES_LOOKUP(t0, s3, tb, "<<= 3", 3);                      \
		AES_LOOKUP(t1, s1, tb, ">>= 21", 0);                     \
		AES_LOOKUP(t1, s2, tb, ">>= 13", 1);                     \
		AES_LOOKUP(t1, s3, tb, ">>= 5", 2);                      \
		AES_LOOKUP(t1, s0, tb, "<<= 3", 3);                      \
		AES_LOOKUP(t2, s2, tb, ">>= 21", 0);                     \
		AES_LOOKUP(t2, s3, tb, ">>= 13", 1);                     \
		AES_LOOKUP(t2, s0, tb, ">>= 5", 2);                      \
		AES_LOOKUP(t2, s1, tb, "<<= 3", 3);                      \
		AES_LOOKUP(t3, s3, tb, ">>= 21", 0);                     \
		AES_LOOKUP(t3, s0, tb, ">>= 13", 1);                     \
		AES_LOOKUP(t3, s1, tb, ">>= 5", 2);                      \
		AES_LOOKUP(t3, s2, tb, "<<= 3", 3);                      \
		s0 = t0;                                                 \
		s1 = t1;                                                 \
		s2 = t2;                                                 \
		s3 = t3;                                                 \
	} while (0)

/* acc ^= S[one byte of word] << place, for the last round: extract ("" or a
 * right shift) and the mask pick the byte unscaled, place ("" or a left
 * shift) puts the S-box output back where the byte was. */
#define AES_SUB(acc, word, base, extract, place)                         \
	do {                                                             \
		__u64 i_;                                                \
		asm volatile("%[i] = %[s]\n\t"                           \
			     extract                                     \
			     "%[i] &= 255\n\t"                           \
			     "%[i] += %[tb]\n\t"                         \
			     "%[i] = *(u8 *)(%[i] + %[sbox])\n\t"        \
			     place                                       \
			     "%[t] ^= %[i]"                              \
			     : [t] "+r"(acc), [i] "=&r"(i_)              \
			     : [s] "r"(word), [tb] "r"(base),            \
			       [sbox] "i"(offsetof(struct aes_tables, sbox))); \
	} while (0)

/* Output word c of the last round (SubBytes, ShiftRows, AddRoundKey 10),
 * with s0 = s[c], s1 = s[c+1], …; no MixColumns. */
#define AES_LAST_WORD(out, s0, s1, s2, s3, tb, rk, c)                    \
	do {                                                             \
		__u64 acc_ = (rk)[40 + (c)];                             \
		AES_SUB(acc_, s0, tb, "%[i] >>= 24\n\t", "%[i] <<= 24\n\t"); \
		AES_SUB(acc_, s1, tb, "%[i] >>= 16\n\t", "%[i] <<= 16\n\t"); \
		AES_SUB(acc_, s2, tb, "%[i] >>= 8\n\t", "%[i] <<= 8\n\t"); \
		AES_SUB(acc_, s3, tb, "", "");                           \
		(out) = acc_;                                            \
	} while (0)

/* Encrypts one block in place: on entry s holds the plaintext, on return
 * the ciphertext, each as big-endian words (s[0] = in[0] << 24 | in[1] << 16
 * | in[2] << 8 | in[3], s[1] from in[4..7], …; bpf_ntohl of 32-bit loads).
 * rk is the FIPS-197 key schedule w[0..43] with the same convention
 * (w[0] = key[0] << 24 | … | key[3]), round key r in rk[4r..4r+3], stored as
 * native 32-bit integers: AddRoundKey is then one xor per word and the
 * rounds need no byte swaps. internal/br.CMACRoundKeys makes this layout.
 * The state stays in registers: reading its bytes back from a copy on the
 * stack takes one instruction less per lookup, but puts a narrow
 * store-to-load forwarding (about 6 cycles) into every round, and measured
 * 20% slower. About 1,050 instructions, no helpers, no branches; T-table AES
 * is not constant-time. */
static __always_inline void aes128_encrypt_words(const __u32 *rk, __u32 s[4])
{
	const __u8 *tb = (const __u8 *)&aes_tab;
	__u64 s0, s1, s2, s3;

	/* Opaque to the compiler, so that it keeps the table base in a
	 * register rather than rematerialising the 64-bit address. */
	asm volatile("" : "+r"(tb));

	s0 = s[0] ^ rk[0];
	s1 = s[1] ^ rk[1];
	s2 = s[2] ^ rk[2];
	s3 = s[3] ^ rk[3];
	AES_ROUND(s0, s1, s2, s3, tb, rk, 1);
	AES_ROUND(s0, s1, s2, s3, tb, rk, 2);
	AES_ROUND(s0, s1, s2, s3, tb, rk, 3);
	AES_ROUND(s0, s1, s2, s3, tb, rk, 4);
	AES_ROUND(s0, s1, s2, s3, tb, rk, 5);
	AES_ROUND(s0, s1, s2, s3, tb, rk, 6);
	AES_ROUND(s0, s1, s2, s3, tb, rk, 7);
	AES_ROUND(s0, s1, s2, s3, tb, rk, 8);
	AES_ROUND(s0, s1, s2, s3, tb, rk, 9);
	AES_LAST_WORD(s[0], s0, s1, s2, s3, tb, rk, 0);
	AES_LAST_WORD(s[1], s1, s2, s3, s0, tb, rk, 1);
	AES_LAST_WORD(s[2], s2, s3, s0, s1, tb, rk, 2);
	AES_LAST_WORD(s[3], s3, s0, s1, s2, tb, rk, 3);
}

#endif
