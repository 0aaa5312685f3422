#!/usr/bin/env bash
# A newcomer's first runs, timed on a clean clone of this checkout's HEAD: the README's demo
# command (its setup, its build of what the demo runs, the demo itself) and, with --ci, CI's run
# (`CI=true bash .ci/run`: both Python environments, the whole build, the CPU suite, the
# sanitizer half). Prints a table of the parts and, from each build directory's ninja log, the
# outputs that took longest. Asserts nothing.
#
#   bench/first-run.sh [--ci] [DIR]     (DIR: where the clone goes, default a new temporary one)
#
# The clone has no Python environment, so PyPI's downloads are in the times (pip runs with
# --no-cache-dir); Debian's packages are whatever this machine already has (scripts/setup.sh
# installs only those missing). Run it on an otherwise idle machine.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
CI_TOO=0
if [ "${1:-}" = "--ci" ]; then
  CI_TOO=1
  shift
fi
dir="${1:-$(mktemp -d /tmp/pi0-first-run-XXXXXX)}"
mkdir -p "$dir"
clone="$dir/clone"
rm -rf "$clone"
git clone -q "$src" "$clone"
cd "$clone"
echo "== clean clone of $(git rev-parse --short HEAD) in $clone"

rows=()
timed () { # name command...
  local name=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  "$@" >"$dir/$name.log" 2>&1 || { echo "$name failed: see $dir/$name.log"; tail -20 "$dir/$name.log"; exit 1; }
  t1=$(date +%s.%N)
  rows+=("$name|$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')")
}
mmss () { printf '%d min %02d s' "$(( ${1%.*} / 60 ))" "$(( ${1%.*} % 60 ))"; }

export CCACHE_DISABLE=1
# The demo command's parts, as scripts/demo.sh runs them.
timed setup-demo bash scripts/setup.sh --demo
timed build-demo bash scripts/build.sh --demo build pi0-demo pi0-robotsim
timed build-demo-tokenizer ninja -C build inference/io/libpi0spm.so
timed demo build/tools/pi0-demo
if [ $CI_TOO = 1 ]; then
  timed ci env CI=true bash .ci/run
fi

echo
echo "| part | wall time |"
echo "| --- | ---: |"
total=0
for r in "${rows[@]}"; do
  name=${r%%|*}
  s=${r##*|}
  if [ "$name" != ci ]; then total=$(awk -v a="$total" -v b="$s" 'BEGIN {printf "%.1f", a + b}'); fi
  echo "| $name | $(mmss "$s") |"
done
echo "| **fresh clone to the demo's output** | **$(mmss "$total")** |"

for b in build build-asan; do
  [ -f "$b/.ninja_log" ] || continue
  echo
  echo "$b: $(awk 'NR > 1 {n++; s += ($2 - $1) / 1000} END {printf "%d outputs, %.0f job-seconds", n, s}' "$b/.ninja_log")"
  echo "| longest outputs of $b | job-seconds |"
  echo "| --- | ---: |"
  awk 'NR > 1 {printf "%.1f %s\n", ($2 - $1) / 1000, $4}' "$b/.ninja_log" | sort -rn | head -12 |
    while read -r s out; do echo "| \`$out\` | $s |"; done
done
if [ $CI_TOO = 1 ]; then
  echo
  echo "CI's own marks (.ci/run):"
  grep '^== \[' "$dir/ci.log" || true
  grep -E '^[0-9]+ passed' "$dir/ci.log" || true
fi
