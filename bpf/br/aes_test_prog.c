/* Test harness for aes.h, used only by internal/br's tests: encrypts the
 * first 16 bytes of the frame in place with the key in aes_test_key. */
#include "common.h"
#include "aes.h"
#include "br_shared.h"

/* The key under test, written by the test before each run. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct br_key);
} aes_test_key SEC(".maps");

SEC("xdp")
int aes_test(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 *blk = data;
	struct br_key *k;
	__u32 key = 0;
	__u32 s[4];

	if (data + 16 > data_end)
		return XDP_ABORTED;
	k = bpf_map_lookup_elem(&aes_test_key, &key);
	if (!k)
		return XDP_ABORTED;

	s[0] = bpf_ntohl(blk[0]);
	s[1] = bpf_ntohl(blk[1]);
	s[2] = bpf_ntohl(blk[2]);
	s[3] = bpf_ntohl(blk[3]);
	aes128_encrypt_words(k->rk, s);
	blk[0] = bpf_htonl(s[0]);
	blk[1] = bpf_htonl(s[1]);
	blk[2] = bpf_htonl(s[2]);
	blk[3] = bpf_htonl(s[3]);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
