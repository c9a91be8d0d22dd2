package br

//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I../../bpf/br -I/usr/include/x86_64-linux-gnu" -target bpfel -type br_key aestest ../../bpf/br/aes_test_prog.c
