// Package bench holds the benchmark programs of the userspace runtime: small
// XDP programs, one per file in bpf/bench/, each measuring one thing (a map
// lookup, a checksum helper, a ring buffer, a rewrite). The kernel loads them
// here, and runtime/ loads the same objects, the *_bpfel.o files bpf2go
// writes next to this file, so that both run identical bytecode on the
// corpus of corpus.go.
package bench

// One object per program; `make build` reruns these when a .c or .h changes.
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdptx ../../bpf/bench/xdp_tx.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdpmapaccess ../../bpf/bench/xdp_map_access.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdpcsum ../../bpf/bench/xdp_csum.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdphashsum ../../bpf/bench/xdp_hash_sum.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdping ../../bpf/bench/xdping.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdpmap ../../bpf/bench/xdp_map.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdpfirewall ../../bpf/bench/xdp_firewall.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdpadjusttail ../../bpf/bench/xdp_adjust_tail.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdplb ../../bpf/bench/xdp_lb.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel xdpobserver ../../bpf/bench/xdp_observer.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel -type tcp_class xdptcpclassify ../../bpf/bench/xdp_tcpclassify.c
