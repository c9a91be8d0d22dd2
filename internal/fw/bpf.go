package fw

// The firewall's XDP program. -mcpu=v3 for atomic fetch-and-add, whose result
// the rate limiter uses.
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../bpf/include -I../../bpf/fw -I/usr/include/x86_64-linux-gnu" -target bpfel -type fw_flow_key -type fw_flow -type fw_flow_set -type fw_flow_tags -type fw_block -type fw_rate -type fw_config -type fw_span -type fw_range -type fw_pwide -type fw_snode4 -type fw_ivl6 -type fw_node -type fw_rule -type fw_set -type fw_rule_stats -type fw_overlay -type fw_counter -type fw_ct_key -type fw_ct_entry -type fw_ct_half -type fw_ct_state -type fw_tcp_state -type fw_ct_timeout -type fw_ct_flag -type fw_ct_status -type fw_ct_reap_hdr -type fw_ct_reap_limit -type fw_ct_src_key fw ../../bpf/fw/fw.c

// The same program writing a packet of its own over the frame before each
// run, for measuring new flows with BPF_PROG_TEST_RUN (bench_test.go).
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../bpf/include -I../../bpf/fw -I/usr/include/x86_64-linux-gnu" -target bpfel -type fw_bench_pkt fwBench ../../bpf/fw/fw_bench.c

// The host's own packets tracked at TC egress, in the firewall's tables
// (host mode; its maps are the XDP program's, given at load).
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I../../bpf/include -I../../bpf/fw -I/usr/include/x86_64-linux-gnu" -target bpfel fwEgress ../../bpf/fw/fw_egress.c
