package rt

// Programs of the runtime's own differential tests: what no benchmark
// program does (tail calls, libbpf-style initialisers, bpf_csum_diff's raw
// result, LPM keys, multi-buffer frames, bpf_loop's limit, functions the
// program never calls); and programs written for no engine in particular,
// for the comparison with other userspace engines (ttl, flows, v6ext).
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel tailcall ../../bpf/rt/tailcall.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel csum ../../bpf/rt/csum.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel progarray ../../bpf/rt/progarray.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel lpm ../../bpf/rt/lpm.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel frags ../../bpf/rt/frags.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel loop ../../bpf/rt/loop.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel unused ../../bpf/rt/unused.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel ttl ../../bpf/rt/ttl.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel flows ../../bpf/rt/flows.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel v6ext ../../bpf/rt/v6ext.c
