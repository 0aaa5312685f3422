#!/usr/bin/env bash
# The moving task's policies (issue 44, docs/sim.md "The moving task"): records the scripted
# expert through the chain on the turning table, with the instruction worded by the training
# templates, and fine-tunes the committed static-task policy on it with LeRobot's own classes;
# then the untrained control and a first evaluation on held-out scenes and wordings.
#
#   scripts/sim_moving_loop.sh OUT [pi0|pi05]
#
#   OUT/moving/shard-*  2,400 expert episodes on the moving task (0.15 m/s +- 50 %), actuation
#                       noise, the training wordings, 96x96 cameras
#   OUT/static/shard-*  600 on the static task, the training wordings (it stays solved)
#   OUT/holdout         100 more on the moving task, other seeds, the held-out wordings: the
#                       open-loop score while training
#   OUT/frames.pt       the decoded frames, kept for the other type's run
#   OUT/TYPE/policy     models/pi0-sim-tiny (pi05-sim-tiny) fine-tuned on all of them
#   OUT/TYPE/control    the same architecture and statistics, untrained (LeRobot's initialization)
#   OUT/TYPE/eval.md    bench/sim_eval.py on 100 held-out scenes (seeds 5000-5099), held-out
#                       wordings, moving task with a 2-s limit, no delay
#   OUT/TYPE/times      how long each stage took
#
# About 35 min for pi0 on 2 cores (8 to record, 26 to train). Environment: STEPS (4000 for pi0,
# 3000 for pi0.5), JOBS (recordings side by side: the cores).
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
out=$1 type=${2:-pi0}
case $type in
    pi0) base=pi0-sim-tiny ;;
    pi05) base=pi05-sim-tiny ;;
    *) echo "sim_moving_loop.sh: the type is pi0 or pi05, not $type" >&2; exit 2 ;;
esac
name=sim_moving_loop.sh
source "$(dirname "$0")/sim_loop_lib.sh"
steps=${STEPS:-$([ "$type" = pi05 ] && echo 3000 || echo 4000)}
run=$out/$type
mkdir -p "$run"
times=$run/times
: > "$times"
size=(--width 96 --height 96)
moving=(--block-speed 0.15 --block-speed-spread 0.5)
step record record "$out/moving" 16 150 30000 "${size[@]}" --actuation-noise 0.05 \
    "${moving[@]}" --phrasing train
step record-static record "$out/static" 4 150 40000 "${size[@]}" --actuation-noise 0.05 \
    --phrasing train
step record-holdout record "$out/holdout" 1 100 9000 "${size[@]}" "${moving[@]}" \
    --phrasing heldout
train=("$py" "$root/scripts/train_sim_pi0.py" --type "$type" --image 96 --patch 12 --batch 32
       --holdout "$out/holdout/shard-000" --cache "$out/frames.pt" --name "${base%-tiny}-moving"
       "$out"/moving/shard-*/ "$out"/static/shard-*/)
# From the static task's policy: it knows the cameras, the arm and the colours already.
step train "${train[@]}" "$run/policy" --init "$root/models/$base" --steps "$steps" --lr 3e-4 \
    --warmup 100 --eval-every 500
step control "${train[@]}" "$run/control" --steps 0
evaluate() {
    python3 "$root/bench/sim_eval.py" --policy "$run/policy" --control "$run/control" --expert \
        --rtc off --delays 0 --episodes 100 \
        --scene "${moving[*]} --time-limit 20 --phrasing heldout" > "$run/eval.md"
}
step evaluate evaluate
cat "$run/eval.md"
