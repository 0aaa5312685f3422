#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Closed-loop evaluation on the simulated arm (issue 27): success and motion per policy,
real-time-chunking mode and delay; prints a markdown table.

  python3 bench/sim_eval.py --policy models/DIR --prep-size 64 --width 64 --height 64
  python3 bench/sim_eval.py --policy builtin:pi0-tiny --prep-size 32 --episodes 5   # a smoke run

Each cell is one `pi0-sim run` over the same K held-out scenes (seeds S..S+K-1), lock-step:
the delay is world time from an observation's capture to its chunk reaching the robot
(docs/sim.md), so the table is the same on any machine, however loaded. Reported per row:
successes, wrong blocks and timeouts of K, mean ticks to success, the mean jerk of the joints
(rad/s^3), the mean and largest joint step at chunk switches (rad), and the chunks pi0infer
guided with the delay it measured (rows). `--expert` adds the scripted expert at each delay
(it ignores the rtc mode). Never asserted anywhere: numbers go to docs/perf.md.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cell(a, policy, rtc, delay):
    cmd = [a.pi0_sim, "run", "--policy", policy, "--episodes", str(a.episodes), "--seed", str(a.seed),
           "--execute", str(a.execute), "--width", str(a.width), "--height", str(a.height),
           "--prep-size", str(a.prep_size), "--delay-ms", str(delay), "--timeout", str(a.timeout)]
    if policy != "expert":
        cmd += ["--infer", f"rtc={rtc} " + a.infer]
    env = dict(os.environ, PI0_SOURCE_ROOT=ROOT)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"sim_eval: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr.strip()}")
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    episodes, summary = lines[:-1], lines[-1]
    guided = sum(e.get("guided", 0) for e in episodes)
    delays = sorted({e["delay_rows"] for e in episodes if e.get("guided", 0)})
    return summary, guided, delays


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="builtin:pi0-tiny", help="pi0infer's model")
    ap.add_argument("--expert", action="store_true", help="also the scripted expert")
    ap.add_argument("--rtc", default="off,guided,guided-identity")
    ap.add_argument("--delays", default="0,50,100,200", help="ms, each below execute periods")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=5000, help="first scene (5000 on: held out from training)")
    ap.add_argument("--execute", type=int, default=5)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--prep-size", type=int, default=32)
    ap.add_argument("--infer", default="", help="more pi0infer properties")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--pi0-sim", default=os.path.join(ROOT, "build/tools/pi0-sim"))
    a = ap.parse_args()
    delays = [int(d) for d in a.delays.split(",")]
    cells = [(a.policy, r, d) for r in a.rtc.split(",") for d in delays]
    if a.expert:
        cells = [("expert", "-", d) for d in delays] + cells
    print(f"{a.episodes} scenes from seed {a.seed}, execute {a.execute} of each chunk, 10 Hz, "
          f"cameras {a.width}x{a.height}, policy {a.policy}\n")
    print("| policy | rtc | delay ms | success | wrong | timeout | ticks to success | mean jerk | "
          "switch step mean | switch step max | guided | delay rows |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for policy, rtc, delay in cells:
        s, guided, rows = run_cell(a, policy, rtc, delay)
        name = "expert" if policy == "expert" else os.path.basename(policy.rstrip("/"))
        print(f"| {name} | {rtc} | {delay} | {s['success']} | {s['wrong']} | {s['timeout']} | "
              f"{s['mean_ticks_to_success']:.1f} | {s['mean_jerk']:.1f} | {s['mean_switch_step']:.4f} | "
              f"{s['max_switch_step']:.4f} | {guided} | {','.join(map(str, rows)) or '-'} |", flush=True)


if __name__ == "__main__":
    main()
