#!/usr/bin/env bash
# Regenerates every package's bpf2go output (the *_bpfel.go and *_bpfel.o
# files that are committed so that `go install` builds without clang) from
# bpf/ in a scratch copy of the tree, and fails when it differs from what is
# in the tree: the C was changed and the objects were not regenerated, or
# someone edited generated code. The objects hold no paths (bpf2go strips
# the DWARF, and BTF names files relative to the package), so two checkouts
# in different directories produce the same bytes; a different clang or
# different kernel headers (linux-libc-dev) do not.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v clang >/dev/null 2>&1 || { echo "check-generated: clang is not installed: install it (make deps) to check the generated BPF objects" >&2; exit 1; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp go.mod go.sum "$scratch"/
cp -r bpf "$scratch"/
pkgs=$(ls internal/*/bpf.go | xargs -n1 dirname)
for p in $pkgs; do
	mkdir -p "$scratch/$p"
	cp "$p/bpf.go" "$scratch/$p/"
	(cd "$scratch/$p" && go generate >/dev/null)
done
stale=()
for p in $pkgs; do
	for f in "$scratch/$p"/*_bpfel.go "$scratch/$p"/*_bpfel.o; do
		rel="$p/$(basename "$f")"
		cmp -s "$f" "$rel" || stale+=("$rel")
	done
	# Generated files whose directive is gone.
	for f in "$p"/*_bpfel.go "$p"/*_bpfel.o; do
		[ -e "$scratch/$f" ] || stale+=("$f (no go:generate directive makes it)")
	done
done
if [ ${#stale[@]} -gt 0 ]; then
	printf 'check-generated: %s differs from what bpf/ compiles to\n' "${stale[@]}" >&2
	echo "check-generated: run \`make build\` and commit the *_bpfel.go and *_bpfel.o files (with $(clang --version | head -1))" >&2
	exit 1
fi
echo "check-generated: the committed bpf2go output of $(echo $pkgs | wc -w) packages matches bpf/"
