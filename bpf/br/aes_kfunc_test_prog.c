/* Test harness for aes_kfunc.h, used only by internal/br's tests: the same
 * CMAC of the frame's first 16 bytes as aes_test_prog.c, through the
 * kernel's crypto API. */
#include "common.h"
#include "aes_kfunc.h"

/* The key under test, installed by aes_kfunc_test_setup. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct aes_kfunc_key);
} aes_kfunc_test_key SEC(".maps");

SEC("syscall")
int aes_kfunc_test_setup(struct aes_kfunc_setup *a)
{
	struct aes_kfunc_key *k;
	__u32 key = 0;

	k = bpf_map_lookup_elem(&aes_kfunc_test_key, &key);
	if (!k)
		return -1;
	return aes_kfunc_install(k, a);
}

/* The same with a named implementation behind "ecb(aes)": the kernel's
 * T-table AES in C (aes-generic), where "ecb(aes)" takes the highest
 * priority one (aes-fixed-time without AES-NI). The null cipher would show
 * the call alone, but it takes no 16-byte key and the kfunc wants one. */
SEC("syscall")
int aes_kfunc_test_setup_generic(struct aes_kfunc_setup *a)
{
	struct bpf_crypto_params params = { .type = "skcipher", .algo = "ecb(aes-generic)" };
	struct aes_kfunc_key *k;
	__u32 key = 0;

	k = bpf_map_lookup_elem(&aes_kfunc_test_key, &key);
	if (!k)
		return -1;
	return aes_kfunc_install_params(k, a, &params);
}

SEC("xdp")
int aes_kfunc_test(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 *blk = data;
	struct aes_kfunc_key *k;
	__u32 key = 0;
	__u32 s[4];

	if (data + 16 > data_end)
		return XDP_ABORTED;
	k = bpf_map_lookup_elem(&aes_kfunc_test_key, &key);
	if (!k)
		return XDP_ABORTED;

	s[0] = bpf_ntohl(blk[0]);
	s[1] = bpf_ntohl(blk[1]);
	s[2] = bpf_ntohl(blk[2]);
	s[3] = bpf_ntohl(blk[3]);
	if (aes_kfunc_cmac_words(k, s))
		return XDP_DROP;
	blk[0] = bpf_htonl(s[0]);
	blk[1] = bpf_htonl(s[1]);
	blk[2] = bpf_htonl(s[2]);
	blk[3] = bpf_htonl(s[3]);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
