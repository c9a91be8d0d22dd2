package rt

// Programs of the runtime's own tests: tail calls, which no benchmark
// program makes.
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I/usr/include/x86_64-linux-gnu" -target bpfel tailcall ../../bpf/rt/tailcall.c
