#!/usr/bin/env python3
"""bench/vs-peers: the seed article's preprocessing, the fourth column (.venv).

    vs_peers_seed.py --checkpoint DIR --obs DIR [--threads N] [--warmup N]

The article this project answers (docs/design.md) measured a Python pipeline that prepares
three camera frames for Pi0 at 152 ms per observation serially and 65 ms "after thread pools,
DataLoader and autocast". Its code is not public; this worker is that design written plainly:
one thread-pool task per camera (PIL's resize with pad to 224x224, through openpi-client's own
image_tools.resize_with_pad, then uint8 HWC -> float CHW in [-1, 1] with torch), the
instruction through transformers' tokenizer (the test SentencePiece model, as LeRobot's step
gets it), the state normalized with the checkpoint's statistics and padded to 32 (for pi0.5 the
discretized state goes into the prompt, as openpi writes it), everything stacked into batched
tensors; then, for the other end, a model output unnormalized back to robot units. No model
runs here: the column is the part outside the model only, and there are no actions to compare.
"""
import argparse
import concurrent.futures
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vs_peers_common as common  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--obs", required=True)
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    real_stdout, sys.stdout = sys.stdout, sys.stderr

    import numpy as np
    import torch
    import sentencepiece
    from openpi_client import image_tools

    with open(os.path.join(args.checkpoint, "vs_peers.json")) as f:
        spec = json.load(f)
    sp = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(HERE, "..", "tests", "data", "tokenizer", "tiny_paligemma.model"))
    st, ac = spec["stats"]["observation.state"], spec["stats"]["action"]
    quantiles = spec["kind"] == "pi05"
    s_lo, s_hi = np.array(st["q01"], np.float32), np.array(st["q99"], np.float32)
    s_mean, s_std = np.array(st["mean"], np.float32), np.array(st["std"], np.float32)
    a_mean, a_std = np.array(ac["mean"], np.float32), np.array(ac["std"], np.float32)
    a_lo, a_hi = np.array(ac["q01"], np.float32), np.array(ac["q99"], np.float32)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.threads)
    m = common.manifest(args.obs)
    size = spec["dims"]["vision"]["image_size"]
    fake_output = np.zeros((spec["horizon"], 32), np.float32)

    def view(frame):
        img = image_tools.resize_with_pad(frame, size, size)  # PIL bilinear, black pad
        return torch.from_numpy(img).permute(2, 0, 1).float().div_(127.5).sub_(1.0)

    def run_one(i: int) -> dict:
        frames, state = common.load_observation(args.obs, m, i)
        clock = common.Clock()
        views = list(pool.map(view, [frames[c] for c in spec["cameras"]]))
        images = torch.stack(views)[None]
        if quantiles:
            s = np.clip((state - s_lo) / (s_hi - s_lo + 1e-8) * 2.0 - 1.0, -1.0, 1.0)
            bins = np.digitize(s, np.linspace(-1, 1, 257)[:-1]) - 1
            prompt = f"Task: {m['prompt']}, State: {' '.join(map(str, bins))};\nAction: "
        else:
            s = (state - s_mean) / (s_std + 1e-8)
            prompt = m["prompt"] + "\n"
        ids = ([sp.bos_id()] + sp.encode(prompt))[: spec["max_tokens"]]
        tokens = torch.zeros(1, spec["max_tokens"], dtype=torch.long)
        tokens[0, : len(ids)] = torch.tensor(ids)
        token_mask = torch.arange(spec["max_tokens"])[None] < len(ids)
        batch = {"images": images, "image_masks": torch.ones(1, len(views), dtype=torch.bool),
                 "tokens": tokens, "token_mask": token_mask,
                 "state": torch.from_numpy(np.pad(s, (0, 32 - len(s))).astype(np.float32))[None]}
        t_pre = clock.wall_ms()
        out = fake_output[:, : spec["action_dim"]]
        actions = (out * (a_hi - a_lo) / 2 + (a_hi + a_lo) / 2) if quantiles else out * a_std + a_mean
        actions = np.ascontiguousarray(actions, np.float32)
        whole = clock.wall_ms()
        assert batch["images"].shape[1] == len(spec["cameras"]) and actions.shape[0] == spec["horizon"]
        # Only the part outside the model: no whole, forward or whole-observation CPU figure (-1).
        return {"whole_ms": -1, "cpu_ms": -1, "forward_ms": -1, "outside_ms": whole,
                "faults": clock.faults(),
                "parts": {"preprocess": t_pre, "postprocess": whole - t_pre, "process_cpu": clock.cpu_ms()}}

    sys.stdout = real_stdout
    common.serve(run_one, m, args.warmup)


if __name__ == "__main__":
    main()
