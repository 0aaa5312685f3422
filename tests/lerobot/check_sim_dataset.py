#!/usr/bin/env python3
"""Loads a dataset that `pi0-sim run --record` wrote with the real lerobot (0.6.1) and checks it
against what the simulator said it did (tests/tools/test_pi0_sim.cpp):

    check_sim_dataset.py DATASET EPISODES.jsonl WIDTH HEIGHT

EPISODES.jsonl holds pi0-sim's episode lines (seed, instruction, outcome, ticks). Checked: one
LeRobot episode per line, as many frames as the episode's ticks, its task the instruction, fps
10, the three cameras at WIDTH x HEIGHT, and that every recorded action is the joint position
the arm was in at the next frame (the planar arm goes exactly where it is commanded within
max_step, and the expert never asks for more). Prints one JSON line; exit status 1 on a
mismatch.
"""
import json
import sys

import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset


def main() -> int:
    root, lines, width, height = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    episodes = [json.loads(l) for l in open(lines) if l.startswith('{"seed"')]
    ds = LeRobotDataset("pi0-sim/expert", root=root)
    problems = []
    if ds.num_episodes != len(episodes):
        problems.append(f"{ds.num_episodes} episodes, the simulator ran {len(episodes)}")
    if ds.fps != 10:
        problems.append(f"fps {ds.fps}")
    ep_index = np.asarray(ds.hf_dataset["episode_index"])
    worst = 0.0
    for e, sim in enumerate(episodes[: ds.num_episodes]):
        idx = np.nonzero(ep_index == e)[0]
        if len(idx) != sim["ticks"]:
            problems.append(f"episode {e}: {len(idx)} frames for {sim['ticks']} ticks")
            continue
        first, last = ds[int(idx[0])], ds[int(idx[-1])]
        if first["task"] != sim["instruction"] or last["task"] != sim["instruction"]:
            problems.append(f"episode {e}: task {first['task']!r}, not {sim['instruction']!r}")
        for view in ("main", "side", "top"):
            shape = tuple(first[f"observation.images.{view}"].shape)
            if shape != (3, height, width):
                problems.append(f"episode {e}: {view} is {shape}")
        state = np.stack([ds.hf_dataset[int(i)]["observation.state"] for i in idx])
        action = np.stack([ds.hf_dataset[int(i)]["action"] for i in idx])
        if len(idx) > 1:
            worst = max(worst, float(np.abs(action[:-1] - state[1:]).max()))
    if worst > 0:
        problems.append(f"an action is {worst} from the next frame's state")
    print(json.dumps({"episodes": ds.num_episodes, "frames": ds.num_frames, "worst": worst, "problems": problems}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
