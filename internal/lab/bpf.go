package lab

// The lab's BPF programs; `make build` reruns this when a .c or .h changes.
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel -type gen_packet gen ../../bpf/lab/gen.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel -type sink_counters sink ../../bpf/lab/sink.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel redirect ../../bpf/lab/redirect.c
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel pass ../../bpf/lab/pass.c
