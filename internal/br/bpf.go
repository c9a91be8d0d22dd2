package br

// The router's XDP programs, with and without hop-field MAC checks.
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I../../bpf/br -I/usr/include/x86_64-linux-gnu" -target bpfel -type br_config -type br_key -type br_socket_key -type br_socket -type br_iface -type br_counter -type br_addr -type br_port -type br_dev -type br_vars_entry -type br_capture_hdr -type br_capture_frame router ../../bpf/br/br.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -DBR_NO_MAC -I../../bpf/include -I../../bpf/br -I/usr/include/x86_64-linux-gnu" -target bpfel routernomac ../../bpf/br/br.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel -type bench_frame bench ../../bpf/br/bench.c
// The AES test program, for the tests only.
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I../../bpf/br -I/usr/include/x86_64-linux-gnu" -target bpfel -type br_key aestest ../../bpf/br/aes_test_prog.c
// The same CMAC through the kernel's crypto API (bpf_crypto kfuncs), for the tests only.
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I../../bpf/br -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types -type aes_kfunc_setup aeskfunctest ../../bpf/br/aes_kfunc_test_prog.c
