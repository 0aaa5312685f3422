#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Plot joint 0 as sent to the robot, rtc=off above rtc=guided, with chunk switches marked.

Reads the CSVs of `bench/rtc-chain --csv-dir DIR` (t_s, chunk, row, switch, sent0, requested0)
and writes a PNG with Pillow (no matplotlib needed):

    scripts/rtc_plot.py DIR/rtc-off.csv DIR/rtc-guided.csv -o docs/rtc-chain.png --seconds 3
"""
import argparse
import csv

from PIL import Image, ImageDraw

W, H_PANEL, MARGIN = 1000, 260, 50


def load(path, seconds, skip):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            t = float(r["t_s"])
            if t < skip:
                continue
            if t > skip + seconds:
                break
            rows.append((t - skip, float(r["sent0"]), float(r["requested0"]), r["switch"] == "1"))
    return rows


def panel(draw, top, rows, title, seconds, lo, hi):
    x0, x1 = MARGIN, W - 10
    y0, y1 = top + 25, top + H_PANEL - 25
    draw.rectangle([x0, y0, x1, y1], outline=(0, 0, 0))
    draw.text((x0, top + 5), title, fill=(0, 0, 0))

    def xy(t, v):
        x = x0 + (x1 - x0) * t / seconds
        y = y1 - (y1 - y0) * (v - lo) / (hi - lo if hi > lo else 1.0)
        return x, y

    for k in range(5):
        v = lo + (hi - lo) * k / 4
        _, y = xy(0, v)
        draw.text((2, y - 6), f"{v:.2f}", fill=(80, 80, 80))
    for s in range(int(seconds) + 1):
        x, _ = xy(s, lo)
        draw.text((x - 4, y1 + 4), f"{s}s", fill=(80, 80, 80))
    for t, _, req, sw in rows:
        if sw:
            x, _ = xy(t, lo)
            draw.line([x, y0, x, y1], fill=(230, 150, 150))
            draw.ellipse([*(c - 3 for c in xy(t, req)), *(c + 3 for c in xy(t, req))],
                         outline=(200, 0, 0))
    pts = [xy(t, v) for t, v, _, _ in rows]
    if len(pts) > 1:
        draw.line(pts, fill=(0, 60, 200), width=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("off")
    ap.add_argument("guided")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--skip", type=float, default=1.0, help="seconds skipped at the start")
    ap.add_argument("--model", default="models/pi0-tiny-sines", help="the model named in the footer")
    a = ap.parse_args()
    off = load(a.off, a.seconds, a.skip)
    on = load(a.guided, a.seconds, a.skip)
    vals = [v for rows in (off, on) for _, s, r, _ in rows for v in (s, r)]
    lo, hi = min(vals), max(vals)
    pad = 0.05 * (hi - lo or 1.0)
    img = Image.new("RGB", (W, 2 * H_PANEL + 30), "white")
    d = ImageDraw.Draw(img)
    panel(d, 0, off, "rtc=off: joint 0 sent (blue); chunk switches (red lines), the new chunk's "
          "requested value there (red circles)", a.seconds, lo - pad, hi + pad)
    panel(d, H_PANEL, on, "rtc=guided: same", a.seconds, lo - pad, hi + pad)
    d.text((MARGIN, 2 * H_PANEL + 8), f"bench/rtc-chain, {a.model} on the CPU",
           fill=(80, 80, 80))
    img.save(a.output)


if __name__ == "__main__":
    main()
