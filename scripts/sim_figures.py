#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Makes docs/sim-cameras.png and docs/sim-overlay.png from the built pi0-sim (Pillow only).

    .venv/bin/python scripts/sim_figures.py [--policy models/pi0-sim-tiny]

sim-cameras.png: the three cameras of scene 9 at ticks 0, 4 and 8 of the expert's episode
(`pi0-sim snapshot`). sim-overlay.png: the overhead camera of held-out scene 5003 at ticks 0, 2,
4 and 6 of the policy's episode, with the plan pi0overlay drew from each observation (`pi0-sim
run --overlay`, lock-step: the same pictures on any machine).
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

from PIL import Image, ImageDraw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.path.join(ROOT, "build/tools/pi0-sim")


def sim(*args):
    env = dict(os.environ, PI0_SOURCE_ROOT=ROOT)
    p = subprocess.run([SIM, *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"sim_figures: pi0-sim {' '.join(args)} failed:\n{p.stderr}")
    return p.stdout


def cameras(out):
    w, h, gap, top = 192, 144, 4, 18
    names = [("overhead", "overhead (pad main)"), ("wrist", "wrist (pad side)"), ("front", "front (pad top)")]
    ticks = [0, 4, 8]
    img = Image.new("RGB", (3 * w + 4 * gap, top + len(ticks) * (h + gap) + gap), "white")
    d = ImageDraw.Draw(img)
    for c, (_, label) in enumerate(names):
        d.text((gap + c * (w + gap) + 4, 3), label, fill="black")
    with tempfile.TemporaryDirectory() as tmp:
        for r, t in enumerate(ticks):
            dir = os.path.join(tmp, str(t))
            os.makedirs(dir)
            sim("snapshot", "--out", dir, "--seed", "9", "--ticks", str(t), "--width", str(w), "--height", str(h))
            for c, (name, _) in enumerate(names):
                x, y = gap + c * (w + gap), top + r * (h + gap)
                img.paste(Image.open(os.path.join(dir, name + ".png")).convert("RGB"), (x, y))
                if c == 0:
                    d.text((x + 4, y + 3), f"tick {t}", fill="black")
    img.save(out)


def overlay(policy, out):
    with tempfile.TemporaryDirectory() as tmp:
        sim("run", "--policy", policy, "--prep-size", "96", "--width", "192", "--height", "192", "--execute", "1",
            "--episodes", "1", "--seed", "5003", "--overlay", tmp)
        frames = sorted(glob.glob(os.path.join(tmp, "5003-*.png")))
        picked = [f for i, f in enumerate(frames) if i in (0, 2, 4, 6)]
        if not picked:
            sys.exit("sim_figures: pi0-sim run --overlay drew nothing")
        tiles = [Image.open(f).convert("RGB") for f in picked]
        w, h, gap = tiles[0].width, tiles[0].height, 2
        img = Image.new("RGB", (len(tiles) * w + (len(tiles) - 1) * gap, h), "white")
        for i, t in enumerate(tiles):
            img.paste(t, (i * (w + gap), 0))
        img.save(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default=os.path.join(ROOT, "models/pi0-sim-tiny"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs"))
    a = ap.parse_args()
    cameras(os.path.join(a.out, "sim-cameras.png"))
    overlay(a.policy, os.path.join(a.out, "sim-overlay.png"))


if __name__ == "__main__":
    main()
