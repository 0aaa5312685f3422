#!/usr/bin/env bash
# Records the scripted expert's episodes through the chain (pi0-sim run --record, docs/sim.md)
# as shards: SHARDS datasets of PER episodes each, OUT/shard-000, OUT/shard-001, ..., seeds
# SEED, SEED+1, ... in order, JOBS recordings at a time. Appending to one dataset slows as it
# grows (pi0lerobotsink checks every committed episode when it opens one to append), so many
# small datasets record in a fraction of the time; scripts/train_sim_pi0.py trains on them
# together. Extra arguments go to every `pi0-sim run` (the size, --actuation-noise, ...).
#
#   scripts/record_sim.sh OUT SHARDS PER SEED [pi0-sim run arguments...]
#   e.g. scripts/record_sim.sh /tmp/sim 16 150 20000 --width 96 --height 96 --actuation-noise 0.05
set -euo pipefail
if [ $# -lt 4 ]; then
    sed -n '2,9p' "$0" | sed 's/^# *//' >&2
    exit 2
fi
out=$1 shards=$2 per=$3 seed=$4
shift 4
root=$(cd "$(dirname "$0")/.." && pwd)
sim=${PI0_SIM:-$root/build/tools/pi0-sim}
jobs=${JOBS:-$(nproc)}
[ -x "$sim" ] || { echo "record_sim.sh: $sim not found (build first: scripts/build.sh build)" >&2; exit 1; }
mkdir -p "$out"
export sim out per seed
export PI0_SOURCE_ROOT=${PI0_SOURCE_ROOT:-$root}
seq 0 $((shards - 1)) | xargs -P "$jobs" -I{} bash -c '
    i=$1; shift
    dir=$(printf "%s/shard-%03d" "$out" "$i")
    if [ -e "$dir" ]; then echo "$dir exists: not recorded again" >&2; exit 0; fi
    "$sim" run --execute 1 --lossless --record "$dir" --episodes "$per" --seed $((seed + i * per)) "$@" \
        > "$dir.log" || { echo "shard $i failed: see $dir.log" >&2; exit 1; }
    tail -1 "$dir.log"
' _ {} "$@"
