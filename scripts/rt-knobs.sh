#!/usr/bin/env bash
# A/B of fastpath-rt's I/O knobs in the lab: for each knob given (a string
# of fastpath-rt flags, e.g. "--batch 32"), PAIRS pairs of benches of
# xdp-redirect and rt-jit, one with fastpath-rt's defaults (A) and one with
# the knob (B), their order turning each pair so that the machine's drift
# favours neither. Both arms run with --profile-stages (set BASE= to run
# without it), so each bench also says fastpath-rt's CPU time (user and
# kernel, getrusage) per frame it sent. Prints every bench, then per knob
# the B/A ratios of rt-jit's Mpps at the sink and of the CPU time per frame
# sent, and their medians.
#
#   FASTPATH_RT=runtime/target/release/fastpath-rt scripts/rt-knobs.sh "--batch 32" "--kick once"
#
# Needs root, jq, and fastpath (FASTPATH=path, default ./fastpath) built
# from this tree. The CPU time per frame counts the loop's idle time too:
# for knobs that spin when idle (--busy-poll, --need-wakeup) it is not a
# fair comparison, their Mpps is.
set -euo pipefail
cd "$(dirname "$0")/.."
fastpath=${FASTPATH:-./fastpath}
pairs=${PAIRS:-4}
base=${BASE---profile-stages}
command -v jq >/dev/null || { echo "rt-knobs: needs jq" >&2; exit 1; }
[ $# -gt 0 ] || { echo "usage: scripts/rt-knobs.sh KNOB... (e.g. \"--batch 32\")" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# one LABEL FLAGS: one bench; prints LABEL, rt-jit's Mpps, xdp-redirect's,
# and fastpath-rt's CPU ns per frame sent (0 without the profile).
one() {
	local label=$1 flags=$2 f="$dir/$RANDOM$RANDOM.json"
	FASTPATH_RT_ARGS="$base $flags" "$fastpath" lab bench xdp-redirect rt-jit --runs 1 --no-ceiling --json-file "$f" >"$dir/log" 2>&1 ||
		{ cat "$dir/log" >&2; return 1; }
	jq -r --arg l "$label" '
		(.rows | map({(.scenario): .}) | add) as $r
		| ($r["rt-jit"].details[0] // {}) as $d
		| ($d.profile // {}) as $p
		| [$l, $r["rt-jit"].median_mpps, $r["xdp-redirect"].median_mpps,
		   (if $p.frames then (($p.user_ns + $p.system_ns) / ([$p.frames - $d.tx_ring_full, 1] | max)) else 0 end)]
		| @tsv' "$f"
}

for knob in "$@"; do
	out="$dir/pairs"
	: >"$out"
	for i in $(seq 1 "$pairs"); do
		if ((i % 2)); then a=$(one A ""); b=$(one B "$knob"); else b=$(one B "$knob"); a=$(one A ""); fi
		printf '%s\t%s\n' "$a" "$b" | tee -a "$out" >&2
	done
	awk -F'\t' -v knob="$knob" '
		function median(a, n,   i, j, t) {
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		}
		{ n++; m[n] = $6 / $2; mm = mm sprintf(" %.2f", $6 / $2)
		  if ($4 > 0 && $8 > 0) { c++; cpu[c] = $8 / $4; cc = cc sprintf(" %.2f", $8 / $4) } }
		END {
			printf "%s: rt-jit Mpps B/A%s, median %.2f", knob, mm, median(m, n)
			if (c) printf "; CPU per frame sent B/A%s, median %.2f", cc, median(cpu, c)
			printf "\n"
		}' "$out"
done
