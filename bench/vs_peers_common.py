"""What bench/vs-peers' Python workers share (LeRobot's, openpi's and the seed article's): the
observation directory the driver writes, the noise every system draws for an observation, and
the command loop on stdin/stdout. Only numpy at import time: each worker runs in its own
peer's environment (.lerobot-venv, .openpi-venv, .venv)."""
import json
import os
import resource
import sys
import time

import numpy as np


def manifest(obs_dir: str) -> dict:
    with open(os.path.join(obs_dir, "manifest.json")) as f:
        return json.load(f)


def load_observation(obs_dir: str, m: dict, i: int) -> tuple[dict, np.ndarray]:
    """Observation @i as a robot hands it over: HWC uint8 frames by camera name, a float32
    state in robot units."""
    frames = {}
    for c in m["cameras"]:
        raw = np.fromfile(os.path.join(obs_dir, f"obs{i}_{c['name']}.rgb"), dtype=np.uint8)
        frames[c["name"]] = raw.reshape(c["height"], c["width"], 3)
    state = np.fromfile(os.path.join(obs_dir, f"obs{i}_state.f32"), dtype=np.float32)
    return frames, state


def noise(m: dict, i: int):
    """The flow-matching noise of observation @i: [horizon, 32] standard normal from a torch CPU
    generator seeded with noise_seed + i, which is what pi0infer draws for seed + sequence
    (inference/model/pi0policy.cpp, noise_from_seed)."""
    import torch

    g = torch.Generator().manual_seed(m["noise_seed"] + i)
    return torch.empty(m["horizon"], 32).normal_(0.0, 1.0, generator=g)


def _faults() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_minflt + ru.ru_majflt


class Clock:
    """Wall and process CPU time of one observation, and the page faults the process took in it
    (a worker that sat idle while the others ran may find its pages reclaimed: docs/perf.md)."""

    def __init__(self):
        self.t0, self.c0, self.f0 = time.perf_counter(), time.process_time(), _faults()

    def faults(self) -> int:
        return _faults() - self.f0

    def wall_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1e3

    def cpu_ms(self) -> float:
        return (time.process_time() - self.c0) * 1e3


def serve(run_one, m: dict, warmup: int) -> None:
    """Warms up on observation 0, says ready, then answers "run I" lines with run_one(I) (a dict)
    as one JSON line each until "quit" or end of input. stdout carries only the protocol: the
    peers' own prints go to stderr."""
    out = sys.stdout
    sys.stdout = sys.stderr
    for _ in range(warmup):
        run_one(0)
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        line = line.strip()
        if line == "quit":
            break
        try:
            i = int(line.split()[1]) if line.startswith("run ") else -1
        except ValueError:
            i = -1
        if not 0 <= i < m["count"]:
            out.write(json.dumps({"error": f"bad command: {line}"}) + "\n")
        else:
            r = run_one(i)
            r["i"] = i
            out.write(json.dumps(r) + "\n")
        out.flush()
