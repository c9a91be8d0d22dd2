#!/usr/bin/env bash
# Runs every test (the kernel tests need root) and ends with one line that
# counts them: "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT
go test -count=1 -v ./... 2>&1 | tee "$log" | grep -E '^(--- (PASS|FAIL|SKIP)|ok|FAIL|panic)'
status=${PIPESTATUS[0]}
# Count leaf and parent tests alike: each "--- PASS" line is one test.
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
	# A build failure or panic fails no named test: show it and count it.
	grep -vE '^(=== |\s*--- |ok|PASS)' "$log" | head -50
	failed=1
fi
echo
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit "$status"
