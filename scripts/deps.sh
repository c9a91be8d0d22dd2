#!/usr/bin/env bash
# Installs what fastpath needs on Debian 12 and prepares the kernel
# interfaces it uses. Safe to run again: it only adds what is missing.
set -euo pipefail

say() { printf 'deps: %s\n' "$*"; }
die() { printf 'deps: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (sudo make ...): packages are installed with apt and XDP needs CAP_SYS_ADMIN"

# Debian packages: the BPF toolchain, the lab's tools and the baselines the
# benchmarks compare against.
pkgs=(clang llvm libbpf-dev linux-libc-dev iproute2 iputils-ping ethtool bpftool tcpdump tcpreplay iperf3 iptables nftables xdp-tools make gcc m4 libpcap-dev pkg-config)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Go: what go.mod's go line asks for. An older go (1.21+) fetches that
# toolchain from the module proxy by itself (GOTOOLCHAIN=auto), and then
# reports it here: the check below fails only when it could not.
if ! command -v go >/dev/null 2>&1; then
	for d in /usr/local/go/bin /usr/lib/go/bin; do [ -x "$d/go" ] && export PATH="$d:$PATH"; done
fi
gowant=$(awk '$1 == "go" {print $2; exit}' go.mod)
command -v go >/dev/null 2>&1 || die "Go is not installed: install Go $gowant or newer (https://go.dev/doc/install) and run make again"
gover=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$gowant" "$gover" | sort -V | head -1)" != "$gowant" ]; then
	die "Go $gover is older than the $gowant go.mod asks for: install Go $gowant or newer (https://go.dev/doc/install), or let Go fetch it (GOTOOLCHAIN=auto)"
fi
go mod download

# Rust for the userspace runtime (runtime/): rustup's toolchain if there is
# none. Its crates are pinned to versions that build with Rust 1.95.
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
	say "installing Rust 1.95 with rustup"
	command -v curl >/dev/null 2>&1 || apt-get install -y -qq --no-install-recommends curl ca-certificates >/dev/null
	curl -sSf https://sh.rustup.rs | sh -s -- -y -q --profile minimal --default-toolchain 1.95.0 >/dev/null
fi
command -v cargo >/dev/null 2>&1 || die "cargo is not installed: install Rust (https://rustup.rs) and run make again"
cargo fetch -q --manifest-path runtime/Cargo.toml

# promtool (Prometheus' linter) checks the exporters, the alert rules and
# the dashboards' queries in the tests, and a Prometheus server runs those
# queries against the lab's exporters. Both come out of Debian's prometheus
# package unpacked into a folder of fastpath's, not installed: installing
# would start a Prometheus server on this machine.
promdir=/usr/local/lib/fastpath/test
if [ ! -x "$promdir/promtool" ] || [ ! -x "$promdir/prometheus" ]; then
	say "unpacking promtool and prometheus from Debian's prometheus package into $promdir"
	tmp=$(mktemp -d)
	(cd "$tmp" && { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; }) ||
		die "cannot download Debian's prometheus package for promtool"
	dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
	install -D -m 0755 "$tmp/x/usr/bin/promtool" "$promdir/promtool"
	install -D -m 0755 "$tmp/x/usr/bin/prometheus" "$promdir/prometheus"
	rm -rf "$tmp"
fi

# bpffs: fastpath pins its maps and links under /sys/fs/bpf/fastpath.
if [ "$(stat -f -c %T /sys/fs/bpf 2>/dev/null)" != "bpf_fs" ]; then
	say "mounting bpffs at /sys/fs/bpf"
	mount -t bpf bpf /sys/fs/bpf || die "cannot mount bpffs at /sys/fs/bpf"
fi
[ -e /sys/kernel/btf/vmlinux ] || die "the kernel has no BTF (/sys/kernel/btf/vmlinux): use a kernel with CONFIG_DEBUG_INFO_BTF=y"
say "ready"
