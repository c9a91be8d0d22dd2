#!/usr/bin/env bash
# Prints fastpath's version from git, in a form Debian's version ordering
# and the tarball names accept:
#   at tag v1.2.3                  1.2.3
#   4 commits after v1.2.3         1.2.3+git4.gabc1234   (sorts after 1.2.3)
#   no tag yet                     0.0.0~gitabc1234      (sorts before 0.0.0)
#   uncommitted changes            ... with +dirty (or .dirty after a +)
# Outside a git checkout: 0.0.0~unknown.
set -euo pipefail
cd "$(dirname "$0")/.."
d=$(git describe --tags --always --dirty --match 'v[0-9]*' 2>/dev/null) || { echo 0.0.0~unknown; exit 0; }
dirty=
case "$d" in *-dirty) dirty=1; d=${d%-dirty};; esac
if [[ "$d" =~ ^v([0-9][^-]*)-([0-9]+)-(g[0-9a-f]+)$ ]]; then
	v="${BASH_REMATCH[1]}+git${BASH_REMATCH[2]}.${BASH_REMATCH[3]}"
elif [[ "$d" =~ ^v([0-9].*)$ ]]; then
	v="${BASH_REMATCH[1]}"
else
	v="0.0.0~git$d"
fi
if [ -n "$dirty" ]; then
	case "$v" in *+*) v="$v.dirty";; *) v="$v+dirty";; esac
fi
echo "$v"
