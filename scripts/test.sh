#!/usr/bin/env bash
# Runs every test (the kernel tests need root) and ends with one line that
# counts them: "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The committed bpf2go output must be what bpf/ compiles to: `go install`
# builds from it, without clang. It counts as one test.
gpassed=0; gfailed=0
if bash scripts/check-generated.sh; then gpassed=1; else gfailed=1; fi
# Each package's tests get 30 minutes (the default, 10, is near what the border
# router's take against two releases of scionproto's router on a busy machine).
go test -count=1 -timeout 30m -v ./... 2>&1 | tee "$log" | grep -E '^(--- (PASS|FAIL|SKIP)|ok|FAIL|panic)'
status=${PIPESTATUS[0]}
# The runtime's own tests (Rust); each "test … ok" counts as a pass.
rlog=$(mktemp)
trap 'rm -f "$log" "$rlog"' EXIT
cargo test --release --quiet --manifest-path runtime/Cargo.toml >"$rlog" 2>&1
rstatus=$?
grep -E '^test result|FAILED|panicked|^error' "$rlog" || true
[ "$rstatus" -ne 0 ] && status=$rstatus
rpassed=$(grep -oE 'test result: [a-z]+\. [0-9]+ passed' "$rlog" | awk '{s+=$4} END {print s+0}')
rfailed=$(grep -oE '[0-9]+ failed' "$rlog" | awk '{s+=$1} END {print s+0}')
# Count leaf and parent tests alike: each "--- PASS" line is one test.
passed=$(( $(grep -cE '^\s*--- PASS' "$log") + rpassed + gpassed ))
failed=$(( $(grep -cE '^\s*--- FAIL' "$log") + rfailed + gfailed ))
skipped=$(grep -cE '^\s*--- SKIP' "$log")
if [ "$failed" -gt 0 ]; then
	# What the failing tests said (their own output, from their RUN line to
	# their FAIL line), so that a red CI log shows why.
	for t in $(grep -oE '^\s*--- FAIL: \S+' "$log" | awk '{print $3}' | sort -u); do
		echo
		# Its first lines hold the reason; its last, what it logged on the
		# way out (daemons' logs): both, and what lies between cut.
		awk -v t="$t" '$0 ~ "^=== (RUN|CONT)[ ]+"t"$" {on=1} on {print} $0 ~ "^[ ]*--- FAIL: "t" " {on=0}' "$log" >"$log.t"
		if [ "$(wc -l <"$log.t")" -gt 100 ]; then
			head -60 "$log.t"; echo "        [… $(( $(wc -l <"$log.t") - 100 )) lines …]"; tail -40 "$log.t"
		else
			cat "$log.t"
		fi
		rm -f "$log.t"
	done
fi
[ "$gfailed" -ne 0 ] && [ "$status" -eq 0 ] && status=1
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
	# A build failure or panic fails no named test: show it and count it.
	grep -vE '^(=== |\s*--- |ok|PASS)' "$log" | head -50
	failed=1
fi
echo
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit "$status"
