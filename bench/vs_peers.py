#!/usr/bin/env python3
"""bench/vs-peers' driver (run by bench/vs-peers, which finds the environments): our chain
against LeRobot's and openpi's own inference, on one machine, for the same checkpoint and the
same stream of raw observations, interleaved observation by observation.

For each kind (pi0, pi0.5):
 1. the checkpoint: LeRobot writes it (bench/vs_peers_make.py in .lerobot-venv; kept in WORK);
 2. the observations: --observations raw observations as a robot hands them over (cameras of
    1920x1080, 1280x720 and 640x480 uint8 RGB, a 14-dim float32 state in robot units drawn from
    the checkpoint's statistics, one instruction), written once to WORK/obs-KIND/;
 3. the workers, each in its own process and environment, each loading the checkpoint and
    warming up: ours (build/bench/vs-peers-chain: appsrc -> pi0viewmux -> cudaprep -> pi0infer),
    LeRobot's (bench/vs_peers_lerobot.py), openpi's (bench/vs_peers_openpi.py, its PyTorch
    policy from a checkout) and the seed article's thread-pool preprocessing
    (bench/vs_peers_seed.py: the part outside the model only);
 4. observation 0 to every worker, then observation 1 to every worker, ...: only one works at a
    time, the others wait on their input, so the load of the machine weighs on all alike
    (--order blocks: each worker's observations back to back instead, one worker after the
    other: no worker pauses between its observations, as none does on a robot);
 5. per system and figure the median and 95th percentile, the ratio ours/peer of the medians,
    and how far the systems' actions for the same observation and noise are apart.

Prints markdown tables and writes WORK/results-KIND.json. Never asserts a time; exits 1 when a
worker fails or when the actions disagree by more than --agree (the comparison would then not
be of the same work).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOKENIZER = os.path.join(ROOT, "tests", "data", "tokenizer", "tiny_paligemma.model")
CAMERAS = [("cam_high", 1920, 1080), ("cam_left_wrist", 1280, 720), ("cam_right_wrist", 640, 480)]
PROMPT = "pick up the red block and put it in the bowl"
NAMES = {"ours": "gst-pi0", "ours-pil": "gst-pi0 (filter=pil)", "lerobot": "LeRobot", "openpi": "openpi", "seed": "seed article"}


def make_observations(out: str, spec: dict, count: int, seed: int) -> None:
    """Frames with structure and noise (a camera's picture is neither constant nor random), and
    states around the statistics' mean."""
    if os.path.exists(os.path.join(out, "manifest.json")):
        with open(os.path.join(out, "manifest.json")) as f:
            if json.load(f)["count"] >= count:
                return
    os.makedirs(out, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(seed))
    st = spec["stats"]["observation.state"]
    mean, std = np.array(st["mean"], np.float32), np.array(st["std"], np.float32)
    for i in range(count):
        for name, w, h in CAMERAS:
            yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
            phase = rng.uniform(0, 6.28, 3)
            base = np.stack([127 + 100 * np.sin(xx / (w / 7) + phase[0]),
                             127 + 100 * np.sin(yy / (h / 5) + phase[1]),
                             127 + 100 * np.sin((xx + yy) / (w / 3) + phase[2])], axis=-1)
            frame = np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
            frame.tofile(os.path.join(out, f"obs{i}_{name}.rgb"))
        state = (mean + std * rng.standard_normal(len(mean)).astype(np.float32) * 0.7).astype(np.float32)
        state.tofile(os.path.join(out, f"obs{i}_state.f32"))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"count": count, "prompt": PROMPT, "state_dim": len(mean), "horizon": spec["horizon"],
                   "noise_seed": 1000003, "cameras": [{"name": n, "width": w, "height": h} for n, w, h in CAMERAS]},
                  f, indent=1)


class Worker:
    def __init__(self, name: str, argv: list, env: dict, log: str):
        self.name = name
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, env=env, bufsize=1)

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the worker ended (rc {self.proc.wait()}); see {self.log.name}")
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError(f"{self.name}: {r['error']}")
        return r

    def run(self, i: int) -> dict:
        self.proc.stdin.write(f"run {i}\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def pct(values, q):
    return float(np.percentile(np.asarray(values, float), q)) if values else float("nan")


def table(kind: str, results: dict, systems: list) -> str:
    figures = [("outside_ms", "outside the model (ms)"), ("forward_ms", "model forward (ms)"),
               ("whole_ms", "whole observation -> actions (ms)"), ("cpu_ms", "process CPU time (ms)"),
               ("faults", "page faults (count)")]
    peers = [s for s in systems if s != "ours"]
    head = "| figure | " + " | ".join(f"{NAMES[s]} median / p95" for s in systems) + " | " + " | ".join(
        f"ours/{NAMES[s]}" for s in peers) + " |"
    lines = [head, "|" + " --- |" * (1 + len(systems) + len(peers))]
    for key, label in figures:
        cells, med = [], {}
        for s in systems:
            v = [r[key] for r in results[s] if r.get(key) is not None and r[key] >= 0]
            med[s] = pct(v, 50)
            cells.append(f"{pct(v, 50):.1f} / {pct(v, 95):.1f}" if v else "-")
        ratios = []
        for s in peers:
            ok = "ours" in med and s in med and med[s] == med[s] and med[s] > 0 and med["ours"] == med["ours"]
            ratios.append(f"{med['ours'] / med[s]:.2f}" if ok else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def parts_table(results: dict, systems: list) -> str:
    lines = ["| system | part | median ms | p95 ms |", "| --- | --- | --- | --- |"]
    for s in systems:
        names = list(results[s][0].get("parts", {}).keys()) if results[s] else []
        for p in names:
            v = [r["parts"][p] for r in results[s]]
            lines.append(f"| {NAMES[s]} | {p} | {pct(v, 50):.2f} | {pct(v, 95):.2f} |")
    return "\n".join(lines)


def agreement(results: dict, pairs: list, count: int) -> tuple[str, float]:
    """Largest |difference| between two systems' actions for the same observation, over all
    observations, absolute and relative to the largest |action| of that chunk. pairs: (a, b,
    checked): the worst relative difference is taken over the checked pairs only."""
    lines = ["| pair | max abs diff | max rel diff | observations |", "| --- | --- | --- | --- |"]
    worst = 0.0
    for sa, sb, checked in pairs:
        ab, rel = 0.0, 0.0
        for i in range(count):
            x = np.asarray(results[sa][i]["actions"], np.float64)
            y = np.asarray(results[sb][i]["actions"], np.float64)
            if x.shape != y.shape:
                raise RuntimeError(f"{sa} gives actions {x.shape}, {sb} {y.shape}")
            d = float(np.max(np.abs(x - y)))
            ab = max(ab, d)
            rel = max(rel, d / max(float(np.max(np.abs(x))), 1e-12))
        if checked:
            worst = max(worst, rel)
        lines.append(f"| {NAMES[sa]} vs {NAMES[sb]}{'' if checked else ' (not checked)'} | {ab:.3g} | {rel:.3g} "
                     f"| {count} |")
    return "\n".join(lines), worst


def agreement_pairs(systems: list, filter_: str) -> list:
    """Which pairs do the same work. The peers resize differently: LeRobot with
    torch.nn.functional.interpolate(bilinear) on floats, openpi with PIL's antialiased bilinear on
    uint8 (openpi_client.image_tools.resize_with_pad). Ours compares with the peer whose resize its
    filter is: bilinear with LeRobot, pil with openpi; the agreement pass 'ours-pil' (untimed)
    gives openpi its match when the timed run uses bilinear. LeRobot vs openpi is shown, not
    checked: that difference is theirs."""
    pairs = []
    if "lerobot" in systems and "ours" in systems:
        pairs.append(("ours", "lerobot", filter_ == "bilinear"))
    if "openpi" in systems and "ours" in systems:
        pairs.append(("ours" if filter_ == "pil" else "ours-pil", "openpi", True))
    if "lerobot" in systems and "openpi" in systems:
        pairs.append(("lerobot", "openpi", False))
    return pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default="pi0,pi05")
    ap.add_argument("--size", default="mid", choices=["mid", "full"])
    ap.add_argument("--observations", type=int, default=10)
    ap.add_argument("--systems", default="ours,lerobot,openpi,seed")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--filter", default="bilinear", choices=["antialias", "bilinear", "pil"],
                    help="cudaprep's filter in the timed run (bilinear: LeRobot's resize; openpi's, pil, "
                         "is run once more untimed for the agreement with openpi)")
    ap.add_argument("--work", default="/tmp/gst-pi0-vs-peers")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--openpi", default=os.environ.get("OPENPI", ""), help="openpi checkout")
    ap.add_argument("--lerobot-python", default=os.path.join(ROOT, ".lerobot-venv", "bin", "python"))
    ap.add_argument("--openpi-python", default=os.path.join(ROOT, ".openpi-venv", "bin", "python"))
    ap.add_argument("--seed-python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    ap.add_argument("--agree", type=float, default=0.05,
                    help="largest relative difference of two systems' actions accepted")
    ap.add_argument("--lerobot-compile", action="store_true")
    ap.add_argument("--order", default="interleaved", choices=["interleaved", "blocks"],
                    help="interleaved: observation 0 to every system, then 1, ... (the machine's load "
                         "weighs on all alike); blocks: all of one system's observations back to back, "
                         "then the next system's (no pause between a system's observations)")
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    for s in systems:
        if s not in NAMES:
            print(f"vs-peers: unknown system {s!r} (ours, lerobot, openpi, seed)", file=sys.stderr)
            return 2
    if "openpi" in systems and not os.path.isdir(os.path.join(args.openpi, "src", "openpi")):
        print("vs-peers: --openpi CHECKOUT (or $OPENPI) is needed for openpi's column", file=sys.stderr)
        return 2
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu" if args.device == "cpu" else "")
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    dtype = "float32" if args.precision == "fp32" else "bfloat16"
    status = 0
    print(f"vs-peers: {platform.node()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"device {args.device}, {args.precision}, {args.observations} observations, size {args.size}")
    for kind in args.kinds.split(","):
        ckpt = os.path.join(args.work, f"{kind}-{args.size}")
        if not os.path.exists(os.path.join(ckpt, "vs_peers.json")):
            subprocess.run([args.lerobot_python, os.path.join(HERE, "vs_peers_make.py"), ckpt, kind, args.size],
                           check=True, stdout=sys.stderr)
        with open(os.path.join(ckpt, "vs_peers.json")) as f:
            spec = json.load(f)
        obs = os.path.join(args.work, f"obs-{kind}")
        make_observations(obs, spec, args.observations, seed=77)
        def ours(filter_: str) -> list:
            return [os.path.join(args.build, "bench", "vs-peers-chain"), "--obs", obs, "--checkpoint", ckpt,
                    "--tokenizer", TOKENIZER, "--device", args.device, "--precision", args.precision,
                    "--filter", filter_]

        argv = {
            "ours": ours(args.filter),
            "lerobot": [args.lerobot_python, os.path.join(HERE, "vs_peers_lerobot.py"), "--checkpoint", ckpt,
                        "--obs", obs, "--device", args.device, "--dtype", dtype]
            + (["--compile"] if args.lerobot_compile else []),
            "openpi": [args.openpi_python, os.path.join(HERE, "vs_peers_openpi.py"), "--openpi", args.openpi,
                       "--checkpoint", ckpt, "--obs", obs, "--work", os.path.join(args.work, f"openpi-{kind}"),
                       "--device", args.device, "--dtype", dtype],
            "seed": [args.seed_python, os.path.join(HERE, "vs_peers_seed.py"), "--checkpoint", ckpt, "--obs", obs],
        }
        workers = {}
        try:
            for s in systems:  # one at a time: each loads its model and warms up alone
                t = time.time()
                workers[s] = Worker(s, argv[s], env, os.path.join(args.work, f"{s}-{kind}.log"))
                workers[s].read()
                print(f"  {kind}: {NAMES[s]} ready in {time.time() - t:.0f} s", file=sys.stderr)
            results = {s: [] for s in systems}
            if args.order == "interleaved":
                for i in range(args.observations):
                    for s in systems:
                        results[s].append(workers[s].run(i))
            else:  # blocks: each system's observations back to back, as a robot streams them
                for s in systems:
                    results[s] = [workers[s].run(i) for i in range(args.observations)]
            pairs = agreement_pairs(systems, args.filter)
            if any("ours-pil" in p[:2] for p in pairs):  # untimed: openpi's resize, for the agreement only
                workers["ours"].close()
                del workers["ours"]
                workers["ours-pil"] = Worker("ours-pil", ours("pil"), env,
                                             os.path.join(args.work, f"ours-pil-{kind}.log"))
                workers["ours-pil"].read()
                results["ours-pil"] = [workers["ours-pil"].run(i) for i in range(args.observations)]
        finally:
            for w in workers.values():
                w.close()
        print(f"\n### {kind}, {args.size}: {args.observations} observations, {args.order}\n")
        print(table(kind, results, systems))
        print()
        print(parts_table(results, systems))
        agree, worst = agreement(results, pairs, args.observations)
        print(f"\nactions, same observation and noise:\n\n{agree}")
        if worst > args.agree:
            print(f"vs-peers: {kind}: the actions differ by up to {worst:.3g} of their size (more than "
                  f"--agree {args.agree}): not the same work", file=sys.stderr)
            status = 1
        with open(os.path.join(args.work, f"results-{kind}.json"), "w") as f:
            json.dump({"kind": kind, "size": args.size, "device": args.device, "precision": args.precision,
                       "filter": args.filter, "results": results}, f)
    return status


if __name__ == "__main__":
    sys.exit(main())
