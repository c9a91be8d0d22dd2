/* AES-CMAC of one block through the kernel's crypto API (bpf_crypto kfuncs, Linux 6.10+): tests only, slower than aes.h. */
#ifndef FASTPATH_AES_KFUNC_H
#define FASTPATH_AES_KFUNC_H

#include "common.h"

/* The kernel's context (kernel/bpf/crypto.c), opaque here. A kptr's type
 * must be a struct in the program's BTF (a forward declaration is refused),
 * found in vmlinux by its name. */
struct bpf_crypto_ctx {
	int opaque_;
};

/* struct bpf_crypto_params of kernel/bpf/crypto.c: the kfunc takes it by
 * pointer and checks only its size (408 bytes), so it is declared here
 * rather than from vmlinux.h, which the build does not use. */
struct bpf_crypto_params {
	char type[14];
	__u8 reserved[2];
	char algo[128];
	__u8 key[256];
	__u32 key_len;
	__u32 authsize;
};

extern struct bpf_crypto_ctx *bpf_crypto_ctx_create(const struct bpf_crypto_params *params,
						    __u32 params__sz, int *err) __ksym;
extern void bpf_crypto_ctx_release(struct bpf_crypto_ctx *ctx) __ksym;
extern int bpf_crypto_encrypt(struct bpf_crypto_ctx *ctx, const struct bpf_dynptr *src,
			      const struct bpf_dynptr *dst, const struct bpf_dynptr *siv__nullable) __ksym;

/* One hop-field key for the kfunc path: the context of the raw AES key and
 * the CMAC subkey K1 (as big-endian words, like aes.h's round keys), which
 * aes.h folds into round key 0 and which here goes into the input. A NULL
 * ctx is an empty slot. clang before 15 drops the __kptr type tag from
 * struct members: the loader puts it back into the map's BTF (tagKptr in
 * internal/br's tests), else the field is a plain pointer to the verifier,
 * which refuses the call ("arg#0 pointer type STRUCT bpf_crypto_ctx must
 * point to scalar, or struct with scalar"). */
struct aes_kfunc_key {
	struct bpf_crypto_ctx __kptr *ctx;
	__u32 k1[4];
};

/* What a syscall program that installs a key is given (its context, from
 * BPF_PROG_RUN): K1 and the raw key. */
struct aes_kfunc_setup {
	__u32 k1[4];
	__u8 key[16];
};

/* Makes a context with params (type and algorithm set, the key taken from
 * a) and puts it with a->k1 into k, releasing the context k held: 0 or a
 * negative errno (-ENOENT with no "skcipher" type, -EOPNOTSUPP with no such
 * cipher), k unchanged on failure. Sleepable programs only. A packet checked
 * while this runs may see the new K1 with the old context (and fail), as one
 * may see a half-written br_key on the T-table path. */
static __always_inline int aes_kfunc_install_params(struct aes_kfunc_key *k, const struct aes_kfunc_setup *a,
						    struct bpf_crypto_params *params)
{
	struct bpf_crypto_ctx *ctx, *old;
	int err = 0;

	__builtin_memcpy(params->key, a->key, 16);
	params->key_len = 16;
	ctx = bpf_crypto_ctx_create(params, sizeof(*params), &err);
	if (!ctx)
		return err ? err : -1;
	k->k1[0] = a->k1[0];
	k->k1[1] = a->k1[1];
	k->k1[2] = a->k1[2];
	k->k1[3] = a->k1[3];
	old = bpf_kptr_xchg(&k->ctx, ctx);
	if (old)
		bpf_crypto_ctx_release(old);
	return 0;
}

/* The same with AES-128 ("ecb(aes)": one block in, one out). */
static __always_inline int aes_kfunc_install(struct aes_kfunc_key *k, const struct aes_kfunc_setup *a)
{
	struct bpf_crypto_params params = { .type = "skcipher", .algo = "ecb(aes)" };

	return aes_kfunc_install_params(k, a, &params);
}

/* The block being encrypted, per CPU: bpf_dynptr_from_mem takes map values,
 * not the stack ("Unsupported reg type fp for bpf_dynptr_from_mem data"). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32[4]);
} aes_kfunc_block SEC(".maps");

/* CMAC of one complete block with k: on entry s holds the MAC input, on
 * return the CMAC, each as big-endian words (aes128_encrypt_words' layout).
 * 0, or -1 when the slot is empty or the kernel refused the call. */
static __always_inline int aes_kfunc_cmac_words(const struct aes_kfunc_key *k, __u32 s[4])
{
	struct bpf_crypto_ctx *ctx = k->ctx;
	struct bpf_dynptr d;
	__u32 zero = 0;
	__u32 *blk;

	if (!ctx)
		return -1;
	blk = bpf_map_lookup_elem(&aes_kfunc_block, &zero);
	if (!blk)
		return -1;
	blk[0] = bpf_htonl(s[0] ^ k->k1[0]);
	blk[1] = bpf_htonl(s[1] ^ k->k1[1]);
	blk[2] = bpf_htonl(s[2] ^ k->k1[2]);
	blk[3] = bpf_htonl(s[3] ^ k->k1[3]);
	bpf_dynptr_from_mem(blk, 16, 0, &d);
	if (bpf_crypto_encrypt(ctx, &d, &d, NULL))
		return -1;
	s[0] = bpf_ntohl(blk[0]);
	s[1] = bpf_ntohl(blk[1]);
	s[2] = bpf_ntohl(blk[2]);
	s[3] = bpf_ntohl(blk[3]);
	return 0;
}

#endif
