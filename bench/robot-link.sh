#!/usr/bin/env bash
# bench/robot-link.sh: what the robot executes when it sits behind a network delay, over UDP and
# over TCP (issue 25). pi0-robotsim listens on 127.0.0.1; bench/delay_proxy.py stands between
# it and the sink and delays every datagram (UDP) or piece of the stream (TCP) by DELAY +- JITTER
# ms in each direction, the robot's FEEDBACK included (its joint state goes straight to the
# chain). The policy side is the chain of pipelines/demo.txt with a smooth model
# (models/pi0-tiny-sines: 32 joints) and real-time chunking, sending chunk-mode actions. Counted
# from the robot's own log, not from what the sink sent: the rows executed, and those the robot
# had to clamp to its max_step ("limited": a chunk's first row far from where the robot was, or
# a row after one clamped).
#
#   bench/robot-link.sh [--delay MS] [--jitter MS] [--duration S] [--protos "udp tcp"]
#                       [--rtc MODE] [--max-step X] [--rate HZ]
#
# Needs a built tree (build/) and python3. Talks only to 127.0.0.1. The kernel's tc netem (a
# veth pair into a network namespace) would do the delaying too; this VM's kernel has no netem,
# so the proxy does it in user space. Never asserted: the table goes to docs/perf.md with
# machine, date and command.
set -euo pipefail
cd "$(dirname "$0")/.."

DELAY=60
JITTER=15
DURATION=10
PROTOS="udp tcp"
RTC=guided-identity
MAX_STEP=0.3
RATE=100
while [ $# -gt 0 ]; do
  case "$1" in
    --delay) DELAY="$2"; shift 2 ;;
    --jitter) JITTER="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --protos) PROTOS="$2"; shift 2 ;;
    --rtc) RTC="$2"; shift 2 ;;
    --max-step) MAX_STEP="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    *) echo "robot-link.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
SIM="${SIM:-build/tools/pi0-robotsim/pi0-robotsim}" # SIM=...: another build of the robot
[ -x "$SIM" ] || { echo "robot-link.sh: build first ($SIM missing)" >&2; exit 2; }
export GST_PLUGIN_PATH_1_0="$PWD/build/gst"
TMP="$(mktemp -d)"
PIDS=()
cleanup () {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] && cp -r "$TMP" "$KEEP"; rm -rf "$TMP"
}
trap cleanup EXIT
ROBOT_PORT=19870
PROXY_PORT=19871
STATE_PORT=19872

# pi0-tiny-sines' 32 action dims as 32 joints: wide limits, max_step as asked.
python3 - "$TMP/robot.json" "$MAX_STEP" <<'EOF'
import json, sys
n = 32
json.dump({"joints": [f"j{i}" for i in range(n)], "lower": [-10.0] * n, "upper": [10.0] * n,
           "max_step": [float(sys.argv[2])] * n}, open(sys.argv[1], "w"))
EOF

printf '%s\n' "robot behind ${DELAY} +- ${JITTER} ms each way (bench/delay_proxy.py), rtc=${RTC}," \
  "chunk mode at ${RATE} Hz, max_step ${MAX_STEP}, ${DURATION} s per transport; counted from the robot's log" ""
printf '| %-5s | %8s | %13s | %13s | %9s | %8s |\n' transport chunks "rows executed" "rows limited" "limited %" reports
printf '| %-5s | %8s | %13s | %13s | %9s | %8s |\n' --- ---: ---: ---: ---: ---:
for proto in $PROTOS; do
  log="$TMP/$proto.jsonl"
  "$SIM" --proto="$proto" --bind=127.0.0.1 --port=$ROBOT_PORT \
    --robot-config="$TMP/robot.json" --state-to=127.0.0.1:$STATE_PORT --state-rate=100 \
    --log="$log" --duration=$((DURATION + 8)) >/dev/null &
  sim=$!
  PIDS+=("$sim")
  python3 bench/delay_proxy.py --proto "$proto" --listen $PROXY_PORT --to $ROBOT_PORT \
    --delay "$DELAY" --jitter "$JITTER" &
  proxy=$!
  PIDS+=("$proxy")
  sleep 1
  timeout $((DURATION + 30)) gst-launch-1.0 -q -e \
    pi0viewmux name=mux max-wait=20000000 max-staleness=200000000 max-state-age=200000000 \
    ! cudaprep width=32 height=32 ! queue max-size-buffers=1 leaky=downstream \
    ! pi0infer model=models/pi0-tiny-sines device=cpu rtc="$RTC" \
    ! pi0actionsink target="$proto://127.0.0.1:$PROXY_PORT" robot-config="$TMP/robot.json" mode=chunk \
      control-rate="$RATE" max-action-age=1000000000 \
    videotestsrc is-live=true num-buffers=$((DURATION * 30)) pattern=smpte \
      ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 ! queue ! mux.main \
    videotestsrc is-live=true pattern=ball ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 \
      ! queue ! mux.side \
    videotestsrc is-live=true pattern=snow ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 \
      ! queue ! mux.top \
    udpsrc address=127.0.0.1 port=$STATE_PORT do-timestamp=true caps="application/x-pi0-state,dim=(int)32" \
      ! queue ! mux.state >"$TMP/$proto.launch" 2>&1 || true
  kill "$sim" "$proxy" 2>/dev/null || true
  wait "$sim" "$proxy" 2>/dev/null || true
  python3 - "$log" "$proto" <<'EOF'
import json, sys
# The robot logs each row when it is scheduled ("execute", with at_ns, when it runs); a later
# chunk or a HOLD replaces the rows not yet run. A row ran if it was due before the next plan
# arrived (and before the log ends).
plans, rows, reports = [], [], 0
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    ev = e.get("event")
    if ev == "execute":
        if not plans or plans[-1][0] != ("chunk", e["chunk_id"]):
            plans.append((("chunk", e["chunk_id"]), e["recv_ns"]))
        rows.append((len(plans) - 1, e["at_ns"], bool(e.get("limited"))))
    elif ev in ("hold", "stop"):
        plans.append(((ev, len(plans)), e["recv_ns"]))
    elif ev == "feedback":
        reports += 1
ran = [r for r in rows if r[0] + 1 >= len(plans) or r[1] < plans[r[0] + 1][1]]
limited = sum(r[2] for r in ran)
chunks = len({p[0] for p in plans if p[0][0] == "chunk"})
pct = 100.0 * limited / len(ran) if ran else 0.0
print(f"| {sys.argv[2]:<5} | {chunks:8d} | {len(ran):13d} | {limited:13d} | {pct:8.1f}% | {reports:8d} |")
EOF
done
