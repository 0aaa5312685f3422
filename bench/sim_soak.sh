#!/usr/bin/env bash
# A soak of pi0-sim's lock-step loop (issue 44, docs/sim.md): many short episodes through the
# chain, the expert and a guided builtin:pi0-tiny, with and without a delay, each case run
# REPEATS times on the same scenes, JOBS runs at a time (load). It counts the runs that stalled
# (no chunk or no pi0-executing event within --timeout: the loop waited for something that never
# came), the runs that failed otherwise, and the runs whose episodes or executed rows (--rows)
# differ from the case's first run (lock-step: none may). A table at the end. Not a test (minutes
# to hours, and load is its point): never run by meson test or CI.
#
#   bench/sim_soak.sh [--repeats R] [--episodes K] [--jobs J] [--timeout S] [--seed S]
#                     [--cases expert,tiny] [--pi0-sim PATH] [--keep DIR]
#
# 8 cases x R runs x K episodes: the defaults (R 13, K 20) are 2,080 episodes, about a minute and
# a half on 2 cores (docs/sim.md, "Soak of the lock-step loop", has what it measured). A binary
# without --rows (before issue 44) is compared on its episode lines only.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
sim=${PI0_SIM:-$root/build/tools/pi0-sim}
repeats=13 episodes=20 jobs=2 timeout=30 seed=100 which=expert,tiny keep=
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --episodes) episodes=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --cases) which=$2; shift 2 ;;
    --pi0-sim) sim=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "sim_soak.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
[ -x "$sim" ] || { echo "sim_soak.sh: $sim not found (build first, or --pi0-sim PATH)" >&2; exit 1; }

# Each case: a name, then pi0-sim run's arguments.
tiny="--policy builtin:pi0-tiny --prep-size 32 --infer rtc=guided-identity"
cases=()
if [[ ,$which, == *,expert,* ]]; then
  cases+=("expert-0|--execute 5" "expert-100|--execute 5 --delay-ms 100"
          "expert-300|--execute 5 --delay-ms 300" "expert-250-x3|--execute 3 --delay-ms 250")
fi
if [[ ,$which, == *,tiny,* ]]; then
  cases+=("tiny-0|$tiny --execute 5" "tiny-100|$tiny --execute 5 --delay-ms 100"
          "tiny-300|$tiny --execute 5 --delay-ms 300" "tiny-250-x3|$tiny --execute 3 --delay-ms 250")
fi

work=${keep:-$(mktemp -d /tmp/sim-soak.XXXXXX)}
mkdir -p "$work"
[ -n "$keep" ] || trap 'rm -rf "$work"' EXIT
rows=
"$sim" --help 2>&1 | grep -q -- '--rows' && rows=1

export sim work rows episodes timeout seed
export PI0_SOURCE_ROOT=${PI0_SOURCE_ROOT:-$root} OMP_NUM_THREADS=1
one () {
  local i=$1 r=$2 name=${3%%|*} args=${3#*|}
  local out="$work/$i-$r"
  # shellcheck disable=SC2086  # the case's arguments are words
  "$sim" run --episodes "$episodes" --seed "$seed" --width 32 --height 32 --timeout "$timeout" \
      $args ${rows:+--rows "$out.rows"} >"$out.out" 2>"$out.err" && echo 0 >"$out.rc" ||
    echo $? >"$out.rc"
}
export -f one

start=$(date +%s)
for r in $(seq 1 "$repeats"); do
  for i in "${!cases[@]}"; do
    printf '%s\0%s\0%s\0' "$i" "$r" "${cases[$i]}"
  done
done | xargs -0 -n 3 -P "$jobs" bash -c 'one "$@"' _

printf '| case | runs | episodes | stalled | failed otherwise | differ from the first run |\n'
printf '| --- | --- | --- | --- | --- | --- |\n'
total_runs=0 total_eps=0 total_stalls=0 total_failed=0 total_differ=0
for i in "${!cases[@]}"; do
  name=${cases[$i]%%|*}
  runs=0 eps=0 stalls=0 failed=0 differ=0 ref=
  for r in $(seq 1 "$repeats"); do
    out="$work/$i-$r"
    runs=$((runs + 1))
    rc=$(cat "$out.rc")
    if [ "$rc" != 0 ]; then
      if grep -q 'within [0-9.]* s' "$out.err"; then stalls=$((stalls + 1)); else failed=$((failed + 1)); fi
      echo "  $name run $r: exit $rc: $(tail -1 "$out.err")" >&2
      continue
    fi
    eps=$((eps + $(grep -c '^{"seed"' "$out.out" || true)))
    sum=$( (grep '^{"seed"' "$out.out"; [ -z "$rows" ] || cat "$out.rows") | md5sum)
    if [ -z "$ref" ]; then ref=$sum; elif [ "$sum" != "$ref" ]; then differ=$((differ + 1)); fi
  done
  printf '| %s | %d | %d | %d | %d | %d |\n' "$name" "$runs" "$eps" "$stalls" "$failed" "$differ"
  total_runs=$((total_runs + runs)) total_eps=$((total_eps + eps))
  total_stalls=$((total_stalls + stalls)) total_failed=$((total_failed + failed))
  total_differ=$((total_differ + differ))
done
printf '| all | %d | %d | %d | %d | %d |\n' "$total_runs" "$total_eps" "$total_stalls" \
  "$total_failed" "$total_differ"
compared="episode lines"
[ -z "$rows" ] || compared="episode lines and executed rows"
echo "($(($(date +%s) - start)) s, $jobs at a time, --timeout $timeout, $compared compared; $sim)"
