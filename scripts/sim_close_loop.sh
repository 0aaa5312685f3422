#!/usr/bin/env bash
# Closes the loop of docs/sim.md on a built tree: records the scripted expert through the chain,
# trains a small pi0 (or pi0.5) on it with LeRobot's own classes, deploys the checkpoint in the
# chain on held-out scenes and measures it against its untrained control and the expert.
#
#   scripts/sim_close_loop.sh OUT [pi0|pi05]
#
#   OUT/data/shard-*   3,000 expert episodes with actuation noise (recoveries), 96x96 cameras
#   OUT/holdout        100 more, other seeds: the open-loop score while training
#   OUT/frames.pt      the decoded frames (2.4 GB), kept for the other type's run
#   OUT/TYPE/stage1    trained on the overhead camera alone (cheap steps: it learns the words)
#   OUT/TYPE/policy    from stage1, on all three cameras: the checkpoint pi0infer deploys
#   OUT/TYPE/control   the same architecture and statistics, untrained (LeRobot's initialization)
#   OUT/TYPE/eval.md   bench/sim_eval.py on 50 held-out scenes (seeds 5000-5049), lock-step
#   OUT/TYPE/times     how long each stage took
#
# The datasets are recorded once: a second run in the same OUT (the other type) trains on them.
# About 40 min for pi0 (recording included) and 60 for pi0.5 on 2 cores (docs/perf.md).
# Environment: STAGE1_STEPS (12000 for pi0, 20000 for pi0.5), STAGE2_STEPS (2000, 3000), SHARDS
# (20) x PER (150) episodes, JOBS (recordings side by side: the cores).
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
out=$1 type=${2:-pi0}
case $type in
    pi0 | pi05) ;;
    *) echo "sim_close_loop.sh: the type is pi0 or pi05, not $type" >&2; exit 2 ;;
esac
name=sim_close_loop.sh
source "$(dirname "$0")/sim_loop_lib.sh"
stage1=${STAGE1_STEPS:-$([ "$type" = pi05 ] && echo 20000 || echo 12000)}
stage2=${STAGE2_STEPS:-$([ "$type" = pi05 ] && echo 3000 || echo 2000)}
run=$out/$type
mkdir -p "$run"
times=$run/times
: > "$times"
size=(--width 96 --height 96)
train=("$py" "$root/scripts/train_sim_pi0.py" --type "$type" --image 96 --patch 12 --batch 32
       --holdout "$out/holdout/shard-000" --cache "$out/frames.pt")

step record record "$out/data" "${SHARDS:-20}" "${PER:-150}" 20000 "${size[@]}" \
    --actuation-noise 0.05
step record-holdout record "$out/holdout" 1 100 9000 "${size[@]}"
# Three views from the start: the model learns where blocks are but not which one the words
# name, at 0.37 s a step. The overhead camera alone: a seventh of the step, and it learns both
# (docs/sim.md). The cameras share the vision tower, so its weights start the three-view model.
step stage1 "${train[@]}" "$out"/data/shard-*/ "$run/stage1" --cameras main --steps "$stage1" \
    --pos-embed sincos --eval-every 1000
step stage2 "${train[@]}" "$out"/data/shard-*/ "$run/policy" --init "$run/stage1" \
    --steps "$stage2" --lr 3e-4 --warmup 100 --eval-every 500
step control "${train[@]}" "$out"/data/shard-*/ "$run/control" --steps 0
evaluate() {
    python3 "$root/bench/sim_eval.py" --policy "$run/policy" --control "$run/control" --expert \
        --rtc off --delays 0 > "$run/eval.md"
}
step evaluate evaluate
cat "$run/eval.md"
