#!/usr/bin/env bash
# Runs one or more pipelines/NAME.txt lines with gst-launch-1.0 from the build tree.
#
#   pipelines/run.sh demo                       # until Ctrl-C (EOS first: files are finalized)
#   DURATION=10 pipelines/run.sh record         # stops itself after 10 s
#   pipelines/run.sh remote-gpu remote-robot    # several lines at once (all but the last in
#                                               # the background), e.g. both ends of `remote`
#
# Variables the lines use (${NAME:-default}) come from the environment. When a line sends to
# ${ROBOT_PORT}, a pi0-robotsim is started there (publishing its joint state to ${STATE_PORT}
# when a line reads that) and its log is summarised at the end. Build first: scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
[ $# -ge 1 ] || { sed -n '2,12p' "$0"; exit 2; }
export GST_PLUGIN_PATH="$PWD/$BUILD/gst${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
export ROBOT_PORT="${ROBOT_PORT:-9870}" STATE_PORT="${STATE_PORT:-5005}"

lines=() uses_robot=0 uses_state=0
for name in "$@"; do
  f="pipelines/${name%.txt}.txt"
  [ -f "$f" ] || { echo "no such pipeline: $f" >&2; exit 2; }
  line="$(grep -v '^#' "$f" | tr '\n' ' ')"
  lines+=("$line")
  [[ "$line" == *'${ROBOT_PORT'* ]] && uses_robot=1
  [[ "$line" == *'${STATE_PORT'* ]] && uses_state=1
  if [[ "$line" == *'${REC'* ]]; then mkdir -p "${REC:-/tmp/pi0-rec}"; fi
done

pids=()
cleanup () { for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

if [ "$uses_robot" = 1 ] && [ -z "${NO_ROBOTSIM:-}" ]; then
  sim_log="$(mktemp -t pi0-robotsim-XXXXXX.jsonl)"
  sim_args=(--port "$ROBOT_PORT" --robot-config "${ROBOT_CONFIG:-pipelines/robot-7dof.json}" --log "$sim_log")
  [ "$uses_state" = 1 ] && sim_args+=(--state-to "127.0.0.1:$STATE_PORT")
  "$BUILD/tools/pi0-robotsim/pi0-robotsim" "${sim_args[@]}" >/dev/null &
  sim_pid=$!
  echo "pi0-robotsim on udp://127.0.0.1:$ROBOT_PORT (log: $sim_log)"
fi

run_line () {
  if [ -n "${DURATION:-}" ]; then
    eval timeout -s INT -k 10 "$DURATION" gst-launch-1.0 -e "$1" || [ $? = 124 ]
  else
    eval gst-launch-1.0 -e "$1"
  fi
}
n=${#lines[@]}
for ((i = 0; i < n - 1; i++)); do run_line "${lines[$i]}" & pids+=($!); done
status=0
run_line "${lines[$((n - 1))]}" || status=$?
for p in "${pids[@]}"; do wait "$p" || status=$?; done
pids=()

if [ -n "${sim_pid:-}" ]; then
  kill -INT "$sim_pid" 2>/dev/null || true; wait "$sim_pid" 2>/dev/null || true
  echo "robot: $(grep -c '"event":"execute"' "$sim_log" || true) action rows executed," \
       "$(grep -c '"event":"reject"' "$sim_log" || true) frames rejected," \
       "$(grep -c '"event":"hold"' "$sim_log" || true) HOLDs"
fi
exit $status
