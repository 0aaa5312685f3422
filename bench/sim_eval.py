#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Closed-loop evaluation on the simulated arm (issues 27 and 44): success and motion per policy,
real-time-chunking mode, execution horizon and delay; prints a markdown table.

  python3 bench/sim_eval.py --policy models/pi0-sim-tiny --control models/pi0-sim-tiny-control --expert
  python3 bench/sim_eval.py --policy builtin:pi0-tiny --prep-size 32 --episodes 5   # a smoke run
  python3 bench/sim_eval.py --policy models/pi0-sim-moving --rtc off,guided,guided-identity,sync \
      --delays 0,100,200,300,400 --executes 5,8 --episodes 100 \
      --scene "--block-speed 0.15 --block-speed-spread 0.5 --time-limit 20 --phrasing heldout"

Each cell is one `pi0-sim run` over the same K held-out scenes (seeds S..S+K-1), lock-step:
the delay is world time from an observation's capture to its chunk reaching the robot
(docs/sim.md), so the table is the same on any machine, however loaded. Modes are pi0infer's
`rtc` values, and `sync`: the synchronous baseline (`pi0-sim run --sync`, rtc=off), where the
robot holds still for the delay before each chunk and runs it from its first row. Reported per
row: successes of K with a 95% interval (Wilson), wrong blocks and timeouts, mean ticks to
success with a 95% interval (normal, over the successful episodes), the mean jerk of the joints
(rad/s^3), the mean and largest joint step at chunk switches (rad), and the chunks pi0infer
guided with the delay it measured (rows). An asynchronous delay must be shorter than `execute`
periods (the chunk must come before the rows run out): cells past that are left out; `sync`
takes any delay. `--policy` may be given more than once (each runs every mode at every delay
and horizon); `--control` adds a policy at delay 0 with rtc=off only (the untrained control);
`--expert` adds the scripted expert at each delay (it ignores the mode). `--scene` passes
pi0-sim options that set the task (`--block-speed`, `--time-limit`, `--phrasing`, ...). `--plot
PNG` draws success (with its interval) and the mean switch step against the delay, one line per
policy, mode and horizon (Pillow; no matplotlib needed). `--jobs` runs cells side by side (they
do not change each other's numbers: lock-step). Never asserted anywhere: numbers go to
docs/perf.md.
"""

import argparse
import concurrent.futures
import json
import math
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wilson(k, n, z=1.96):
    """The 95% Wilson score interval of k successes in n, as (low, high) counts."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return n * max(0.0, centre - half), n * min(1.0, centre + half)


def mean_interval(xs, z=1.96):
    """Mean and the half-width of its 95% interval (normal approximation)."""
    if not xs:
        return float("nan"), float("nan")
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return m, z * sd / math.sqrt(len(xs))


def run_cell(a, policy, mode, delay, execute):
    """One `pi0-sim run`: its summary line, its episode lines, the chunks pi0infer guided and the
    delays it measured."""
    cmd = [a.pi0_sim, "run", "--policy", policy, "--episodes", str(a.episodes), "--seed", str(a.seed),
           "--execute", str(execute), "--width", str(a.width), "--height", str(a.height),
           "--prep-size", str(a.prep_size), "--delay-ms", str(delay), "--timeout", str(a.timeout)]
    cmd += shlex.split(a.scene)
    if mode == "sync":
        cmd += ["--sync"]
    if policy != "expert":
        cmd += ["--infer", f"rtc={'off' if mode == 'sync' else mode} " + a.infer]
    env = dict(os.environ, PI0_SOURCE_ROOT=ROOT)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"sim_eval: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr.strip()}")
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    episodes, summary = lines[:-1], lines[-1]
    guided = sum(e.get("guided", 0) for e in episodes)
    delays = sorted({e["delay_rows"] for e in episodes if e.get("guided", 0)})
    return summary, episodes, guided, delays


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", help="pi0infer's model (more than once: each);"
                                                      " builtin:pi0-tiny if none")
    ap.add_argument("--control", help="a policy run once, at delay 0 with rtc=off")
    ap.add_argument("--expert", action="store_true", help="also the scripted expert")
    ap.add_argument("--rtc", default="off,guided,guided-identity",
                    help="modes: pi0infer's rtc values, and sync (the synchronous baseline)")
    ap.add_argument("--delays", default="0,50,100,200", help="ms")
    ap.add_argument("--executes", default="5", help="rows executed per chunk (the execution horizon), each")
    ap.add_argument("--scene", default="", help="more pi0-sim options: the task (--block-speed, --time-limit, ...)")
    ap.add_argument("--plot", help="also draw success and switch steps against the delay into this PNG")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=5000, help="first scene (5000 on: held out from training)")
    ap.add_argument("--width", type=int, default=96)
    ap.add_argument("--height", type=int, default=96)
    ap.add_argument("--prep-size", type=int, default=96, help="the model's image size (32 for builtin:pi0-tiny)")
    ap.add_argument("--infer", default="", help="more pi0infer properties")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--jobs", type=int, default=1, help="cells run side by side")
    ap.add_argument("--pi0-sim", default=os.path.join(ROOT, "build/tools/pi0-sim"))
    a = ap.parse_args()
    delays = [int(d) for d in a.delays.split(",")]
    executes = [int(e) for e in a.executes.split(",")]
    modes = a.rtc.split(",")
    policies = a.policy or ["builtin:pi0-tiny"]

    def fits(mode, delay, execute):
        return mode == "sync" or delay < execute * 100

    cells = [(p, m, d, e) for p in policies for e in executes for m in modes for d in delays if fits(m, d, e)]
    if a.control:
        cells = [(a.control, "off", 0, executes[0])] + cells
    if a.expert:
        cells = [("expert", "-", d, e) for e in executes for d in delays if fits("-", d, e)] + cells
    print(f"{a.episodes} scenes from seed {a.seed}, 10 Hz, cameras {a.width}x{a.height}, "
          f"policies {', '.join(policies)}" + (f", task `{a.scene}`" if a.scene else "") + "\n")
    print("| policy | mode | execute | delay ms | success (95%) | wrong | timeout | ticks to success (95%) | "
          "mean jerk | switch step mean | switch step max | guided | delay rows |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = [pool.submit(run_cell, a, *c) for c in cells]
        for (policy, mode, delay, execute), f in zip(cells, futures):
            s, episodes, guided, rows = f.result()
            name = "expert" if policy == "expert" else os.path.basename(policy.rstrip("/"))
            lo, hi = wilson(s["success"], s["episodes"])
            ticks, half = mean_interval([e["ticks"] for e in episodes if e["outcome"] == "success"])
            span = "-" if math.isnan(ticks) else f"{ticks:.1f}" + ("" if math.isnan(half) else f" ± {half:.1f}")
            results.append((name, mode, execute, delay, s, lo, hi))
            print(f"| {name} | {mode} | {execute} | {delay} | {s['success']} ({lo:.0f}-{hi:.0f}) | {s['wrong']} | "
                  f"{s['timeout']} | {span} | {s['mean_jerk']:.1f} | "
                  f"{s['mean_switch_step']:.4f} | {s['max_switch_step']:.4f} | {guided} | "
                  f"{','.join(map(str, rows)) or '-'} |", flush=True)
    if a.plot:
        plot(results, delays, a.episodes, a.plot)


def plot(results, delays, episodes, path):
    """Two panels against the delay: successes of K (with their 95% intervals), and the mean joint
    step at chunk switches; one line per policy, mode and horizon (one run at one delay only is
    left out)."""
    from PIL import Image, ImageDraw, ImageFont

    try:
        font = ImageFont.load_default(size=13)  # Pillow >= 10.1: a scalable font with real spaces
    except TypeError:
        font = ImageFont.load_default()

    lines = {}
    several = len({r[2] for r in results}) > 1
    for name, mode, execute, delay, s, lo, hi in results:
        key = (name, mode, execute if several else None)
        lines.setdefault(key, []).append((delay, s["success"], s["mean_switch_step"], lo, hi))
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
        for j, ((name, _, _), pts) in enumerate(lines.items()):
            c = colour(j, name)
            pts = sorted(pts)
            xys = [xy(p[0], p[field]) for p in pts]
            d.line(xys, fill=c, width=2)
            for p, (x, y) in zip(pts, xys):
                d.ellipse([x - 3, y - 3, x + 3, y + 3], outline=c)
                if field == 1:  # the success's 95% interval, a little apart per line
                    dx = (j - len(lines) / 2) * 3
                    d.line([x + dx, xy(p[0], p[3])[1], x + dx, xy(p[0], p[4])[1]], fill=c, width=1)
    for j, (name, mode, execute) in enumerate(lines):
        y = 2 * h + 10 + 18 * j
        label = name if mode == "-" else f"{name}, {'synchronous' if mode == 'sync' else 'rtc=' + mode}"
        if execute is not None:
            label += f", execute {execute}"
        d.line([m, y + 8, m + 30, y + 8], fill=colour(j, name), width=2)
        d.text((m + 40, y), label, fill=(0, 0, 0), font=font)
    d.text((m, img.height - 18), "bench/sim_eval.py: pi0-sim run, lock-step (the delay in world time)",
           fill=(80, 80, 80), font=font)
    img.save(path)


if __name__ == "__main__":
    main()
