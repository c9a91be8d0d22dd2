#!/bin/bash
# Builds Scitra-TUN (scion-cpp's SCION-IP translator) for the translator's
# interop test (internal/tra/scitra_test.go). scion-cpp needs C++23 (<format>,
# utc_clock) that Debian 12's GCC 12 lacks, and a newer compiler cannot link
# against Debian 12's gRPC, so it is built and run in a Debian 13 root made
# by debootstrap: nothing on the host changes but that directory.
#
#   scripts/scitra-build.sh [ROOT]        # default /var/lib/fastpath-scitra/root
#
# SCION_CPP_SRC=DIR copies a checkout (with submodules) instead of cloning
# github.com/lschulz/scion-cpp at SCION_CPP_COMMIT, and applies
# scitra-scmp-checksum.patch. Remove ROOT to undo.
set -euo pipefail
ROOT=${1:-${FASTPATH_SCITRA_ROOT:-/var/lib/fastpath-scitra/root}}
COMMIT=${SCION_CPP_COMMIT:-2393667deb061a10565721464bd4d053096ca980} # the SM-IP format of 2026-08
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

command -v debootstrap >/dev/null || apt-get install -y debootstrap
if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
	mkdir -p "$ROOT"
	debootstrap --variant=minbase trixie "$ROOT" "$MIRROR"
fi
# Scitra-TUN makes a TUN device: the node, without mounting the host's /dev.
mkdir -p "$ROOT/dev/net"
[ -e "$ROOT/dev/net/tun" ] || mknod -m 666 "$ROOT/dev/net/tun" c 10 200
# In a mount namespace of its own with /proc mounted (protoc finds its
# include directory by /proc/self/exe), gone with the command.
in_root() { unshare --mount --propagation private bash -c 'mount -t proc proc "$0/proc" && chroot "$0" env DEBIAN_FRONTEND=noninteractive bash -c "$1"' "$ROOT" "$1"; }
in_root 'apt-get update -qq && apt-get install -y -qq --no-install-recommends g++ cmake ninja-build pkg-config git ca-certificates \
	libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev libboost-dev libboost-json-dev libncurses-dev libsystemd-dev libmnl-dev iproute2'

SRC="$ROOT/opt/scion-cpp"
if [ ! -d "$SRC" ]; then
	if [ -n "${SCION_CPP_SRC:-}" ]; then
		cp -a "$SCION_CPP_SRC" "$SRC"
		rm -rf "$SRC/build"
	else
		in_root "git clone https://github.com/lschulz/scion-cpp /opt/scion-cpp && cd /opt/scion-cpp && git checkout $COMMIT && git submodule update --init --recursive"
	fi
fi
# One fix on top: Scitra-TUN's ICMPv6-to-SCMP step left the previous
# packet's checksum in the field it sums over, so every SCMP message after a
# translator thread's first (ping replies and requests) had a bad checksum.
PATCH=scitra-scmp-checksum.patch
cp "$(dirname "$0")/$PATCH" "$SRC/$PATCH"
in_root "cd /opt/scion-cpp && if git apply --check $PATCH 2>/dev/null; then git apply $PATCH; fi && git apply --reverse --check $PATCH"
in_root 'cd /opt/scion-cpp && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPDLOG_USE_STD_FORMAT=ON >/dev/null && ninja -C build scitra-tun scion2ip'
echo "Scitra-TUN: $ROOT/opt/scion-cpp/build/scitra/scitra-tun"
