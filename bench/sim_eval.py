#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Closed-loop evaluation on the simulated arm (issue 27): success and motion per policy,
real-time-chunking mode and delay; prints a markdown table.

  python3 bench/sim_eval.py --policy models/pi0-sim-tiny --control models/pi0-sim-tiny-control --expert
  python3 bench/sim_eval.py --policy builtin:pi0-tiny --prep-size 32 --episodes 5   # a smoke run

Each cell is one `pi0-sim run` over the same K held-out scenes (seeds S..S+K-1), lock-step:
the delay is world time from an observation's capture to its chunk reaching the robot
(docs/sim.md), so the table is the same on any machine, however loaded. Reported per row:
successes, wrong blocks and timeouts of K, mean ticks to success, the mean jerk of the joints
(rad/s^3), the mean and largest joint step at chunk switches (rad), and the chunks pi0infer
guided with the delay it measured (rows). `--policy` may be given more than once (each runs
every rtc mode at every delay); `--control` adds a policy at delay 0 with rtc=off only (the
untrained control: one row is enough to say it is near chance); `--expert` adds the scripted
expert at each delay (it ignores the rtc mode). `--plot PNG` draws success and the mean switch
step against the delay, one line per policy and rtc mode (Pillow; no matplotlib needed).
Never asserted anywhere: numbers go to docs/perf.md.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cell(a, policy, rtc, delay):
    """One `pi0-sim run`: its summary line, the chunks pi0infer guided and the delays it measured."""
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
    ap.add_argument("--policy", action="append", help="pi0infer's model (more than once: each);"
                                                      " builtin:pi0-tiny if none")
    ap.add_argument("--control", help="a policy run once, at delay 0 with rtc=off")
    ap.add_argument("--expert", action="store_true", help="also the scripted expert")
    ap.add_argument("--rtc", default="off,guided,guided-identity")
    ap.add_argument("--delays", default="0,50,100,200", help="ms, each below execute periods")
    ap.add_argument("--plot", help="also draw success and switch steps against the delay into this PNG")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=5000, help="first scene (5000 on: held out from training)")
    ap.add_argument("--execute", type=int, default=5)
    ap.add_argument("--width", type=int, default=96)
    ap.add_argument("--height", type=int, default=96)
    ap.add_argument("--prep-size", type=int, default=96, help="the model's image size (32 for builtin:pi0-tiny)")
    ap.add_argument("--infer", default="", help="more pi0infer properties")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--pi0-sim", default=os.path.join(ROOT, "build/tools/pi0-sim"))
    a = ap.parse_args()
    delays = [int(d) for d in a.delays.split(",")]
    policies = a.policy or ["builtin:pi0-tiny"]
    cells = [(p, r, d) for p in policies for r in a.rtc.split(",") for d in delays]
    if a.control:
        cells = [(a.control, "off", 0)] + cells
    if a.expert:
        cells = [("expert", "-", d) for d in delays] + cells
    print(f"{a.episodes} scenes from seed {a.seed}, execute {a.execute} of each chunk, 10 Hz, "
          f"cameras {a.width}x{a.height}, policies {', '.join(policies)}\n")
    print("| policy | rtc | delay ms | success | wrong | timeout | ticks to success | mean jerk | "
          "switch step mean | switch step max | guided | delay rows |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    results = []
    for policy, rtc, delay in cells:
        s, guided, rows = run_cell(a, policy, rtc, delay)
        name = "expert" if policy == "expert" else os.path.basename(policy.rstrip("/"))
        results.append((name, rtc, delay, s))
        print(f"| {name} | {rtc} | {delay} | {s['success']} | {s['wrong']} | {s['timeout']} | "
              f"{s['mean_ticks_to_success']:.1f} | {s['mean_jerk']:.1f} | {s['mean_switch_step']:.4f} | "
              f"{s['max_switch_step']:.4f} | {guided} | {','.join(map(str, rows)) or '-'} |", flush=True)
    if a.plot:
        plot(results, delays, a.episodes, a.plot)


def plot(results, delays, episodes, path):
    """Two panels against the delay: successes of K, and the mean joint step at chunk switches;
    one line per policy and rtc mode (a policy run at one delay only is left out)."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font = ImageFont.load_default(size=13)  # Pillow >= 10.1: a scalable font with real spaces
    except TypeError:
        font = ImageFont.load_default()

    lines = {}
    for name, rtc, delay, s in results:
        lines.setdefault((name, rtc), []).append((delay, s["success"], s["mean_switch_step"]))
    lines = {k: v for k, v in lines.items() if len(v) > 1}
    colours = [(0, 60, 200), (200, 40, 40), (30, 150, 60), (120, 120, 120), (160, 60, 180), (220, 150, 0),
               (0, 170, 190), (140, 90, 40)]

    def colour(j, name):
        return (0, 0, 0) if name == "expert" else colours[j % len(colours)]

    w, h, m = 900, 300, 60
    img = Image.new("RGB", (w, 2 * h + 40 + 18 * len(lines)), "white")
    d = ImageDraw.Draw(img)
    lo_d, hi_d = min(delays), max(delays) or 1
    steps = [v[2] for pts in lines.values() for v in pts] or [1.0]
    panels = [("successes of %d held-out scenes" % episodes, 1, 0, episodes),
              ("mean joint step at a chunk switch (rad)", 2, 0, max(steps) * 1.1 or 1.0)]
    for i, (title, field, lo, hi) in enumerate(panels):
        top = i * h
        x0, x1, y0, y1 = m, w - 40, top + 30, top + h - 30
        d.rectangle([x0, y0, x1, y1], outline=(0, 0, 0))
        d.text((x0, top + 8), title, fill=(0, 0, 0), font=font)

        def xy(delay, v):
            return (x0 + (x1 - x0) * (delay - lo_d) / (hi_d - lo_d or 1),
                    y1 - (y1 - y0) * (v - lo) / (hi - lo or 1))

        for k in range(5):
            v = lo + (hi - lo) * k / 4
            d.text((4, xy(lo_d, v)[1] - 6), f"{v:.3g}", fill=(80, 80, 80), font=font)
        for delay in delays:
            x = xy(delay, lo)[0]
            d.text((x - 10, y1 + 6), f"{delay} ms", fill=(80, 80, 80), font=font)
        for j, ((name, _), pts) in enumerate(lines.items()):
            c = colour(j, name)
            xys = [xy(p[0], p[field]) for p in sorted(pts)]
            d.line(xys, fill=c, width=2)
            for x, y in xys:
                d.ellipse([x - 3, y - 3, x + 3, y + 3], outline=c)
    for j, (name, rtc) in enumerate(lines):
        y = 2 * h + 10 + 18 * j
        d.line([m, y + 8, m + 30, y + 8], fill=colour(j, name), width=2)
        d.text((m + 40, y), f"{name}, rtc={rtc}" if rtc != "-" else name, fill=(0, 0, 0), font=font)
    d.text((m, img.height - 18), "bench/sim_eval.py: pi0-sim run, lock-step (the delay in world time)",
           fill=(80, 80, 80), font=font)
    img.save(path)


if __name__ == "__main__":
    main()
