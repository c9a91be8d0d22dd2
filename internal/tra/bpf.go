package tra

// The translator's programs: tra_out (TC) and tra_in (XDP).
//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror -I../../bpf/include -I../../bpf/tra -I/usr/include/x86_64-linux-gnu" -target bpfel -type tra_config -type tra_path -type tra_dest -type tra_event -type tra_probe_reply -type tra_counter -type tra_addr4 translator ../../bpf/tra/tra.c
