#!/usr/bin/env python3
"""Trains models/pi0-tiny-sines: a tiny pi0 whose chunks are smooth, for measuring real-time
chunking on the whole chain (issue 13, docs/rtc.md "Measured on the whole chain").

builtin:pi0-tiny is untrained: its rows jump by about as much from one row to the next as two
chunks differ at a switch, so no sampler can make switches smooth there. This model is LeRobot's
PI0Pytorch in the tiny dimensions of the parity goldens (tests/parity/make_lerobot_golden.py),
trained with pi0's own flow-matching loss on a synthetic task that has the two properties RTC is
about and nothing else:

- every chunk is smooth: joint j follows  a_j[i] = A * sin(2*pi*i/P + phi + 2*pi*j/D)  (row i,
  P rows per cycle), so consecutive rows differ by at most 2*pi*A/P;
- the policy is multimodal: the phase phi is uniform and independent of the observation (images,
  instruction and state are random and carry no information), so two chunks sampled from
  different noise are two different sines, and switching between them jumps by up to 2*A.

It is not a robot policy and learns nothing about images or language. It is what a trained,
smooth, multimodal policy looks like to the chain, which is what RTC's claims are about.

    python3.12 -m venv /tmp/lr && /tmp/lr/bin/pip install lerobot==0.6.1
    /tmp/lr/bin/python scripts/train_smooth_tiny.py models/pi0-tiny-sines [--steps 3000]

Writes model.safetensors (LeRobot key names) and config.json (our gst_pi0 layout, naming the
tiny test tokenizer); deterministic for a given seed, torch version and thread count.
"""
import argparse
import json
import math
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "parity"))
import make_lerobot_golden as golden  # noqa: E402  (the tiny-dimension patches)

import lerobot  # noqa: E402
import transformers  # noqa: E402
from lerobot.policies.pi0 import modeling_pi0  # noqa: E402
from lerobot.policies.pi0.configuration_pi0 import PI0Config  # noqa: E402

H, D, VIEWS, TOKENS = 50, 32, 3, 48


def batch(n: int, period: float, amplitude: float, gen: torch.Generator):
    phi = torch.rand(n, 1, 1, generator=gen) * 2 * math.pi
    rows = torch.arange(H, dtype=torch.float32)[None, :, None]
    joints = torch.arange(D, dtype=torch.float32)[None, None, :]
    actions = amplitude * torch.sin(2 * math.pi * rows / period + phi + 2 * math.pi * joints / D)
    images = [torch.rand(n, 3, 32, 32, generator=gen) * 2 - 1 for _ in range(VIEWS)]
    masks = [torch.ones(n, dtype=torch.bool) for _ in range(VIEWS)]
    valid = torch.randint(1, 12, (n, 1), generator=gen)
    token_mask = torch.arange(TOKENS)[None] < valid
    tokens = torch.randint(1, golden.VOCAB, (n, TOKENS), generator=gen) * token_mask
    state = torch.rand(n, D, generator=gen) * 2 - 1
    return images, masks, tokens, token_mask, state, actions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--period", type=float, default=50.0, help="rows per cycle of the sines")
    ap.add_argument("--amplitude", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--expert", default="32,2,64",
                    help="action expert width,depth,mlp (heads as the goldens: 8 x 16, 1 kv head; depth must be the VLM's, 2)")
    ap.add_argument("--init", help="continue from this model.safetensors (as this script writes it)")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)  # tiny ops: one thread is fastest here (and the result deterministic)
    width, depth, mlp = (int(v) for v in a.expert.split(","))
    golden.EXPERT.update(width=width, depth=depth, mlp_dim=mlp)
    golden.patch_lerobot()
    cfg = PI0Config(device="cpu", dtype="float32", image_resolution=(32, 32), chunk_size=H, n_action_steps=H)
    model = modeling_pi0.PI0Pytorch(cfg)
    golden.shrink(model)
    gen = torch.Generator().manual_seed(a.seed)
    golden.randomize(model, gen)
    if a.init:
        from safetensors.torch import load_file

        weights = {k.removeprefix("model."): v for k, v in load_file(a.init).items()}
        missing, unexpected = model.load_state_dict(weights, strict=False)
        if unexpected or any("lm_head" not in k for k in missing):
            sys.exit(f"{a.init}: missing {missing}, unexpected {unexpected}")
    model.train()
    params = [p for n, p in model.named_parameters() if "lm_head" not in n]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=a.steps, pct_start=0.05)
    t0 = time.time()
    for step in range(1, a.steps + 1):
        images, masks, tokens, token_mask, state, actions = batch(a.batch, a.period, a.amplitude, gen)
        noise = torch.randn(actions.shape, generator=gen)
        t = model.sample_time(a.batch, "cpu")
        loss = model.forward(images, masks, tokens, token_mask, state, actions, noise, t).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == 1:
            print(f"step {step:5d}  loss {loss.item():.4f}  {time.time() - t0:6.1f} s", flush=True)

    # How smooth and how multimodal the sampled chunks are (what docs/rtc.md quotes).
    model.eval()
    with torch.no_grad():
        images, masks, tokens, token_mask, state, _ = batch(64, a.period, a.amplitude, gen)
        x = model.sample_actions(images, masks, tokens, token_mask, state)
    step_max = (x[:, 1:] - x[:, :-1]).abs().amax().item()
    step_p99 = (x[:, 1:] - x[:, :-1]).abs().flatten().quantile(0.99).item()
    amp = x.abs().amax().item()
    spread = (x[:, 0] - x[0:1, 0]).abs().amax(dim=-1).median().item()
    ideal = 2 * math.pi * a.amplitude / a.period
    print(f"sampled: row-to-row step max {step_max:.3f} p99 {step_p99:.3f} (ideal max {ideal:.3f}); "
          f"max |a| {amp:.3f}; median row-0 difference between samples {spread:.3f}")

    os.makedirs(a.out, exist_ok=True)
    from safetensors.torch import save_file

    meta = {"lerobot": lerobot.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "trained": f"sines period {a.period} amplitude {a.amplitude}, "
            f"{a.steps} steps batch {a.batch} lr {a.lr} seed {a.seed}, final loss {loss.item():.4f}"}
    save_file(golden.lerobot_state_dict(model), f"{a.out}/model.safetensors", metadata=meta)
    golden.write_config(a.out, "pi0-tiny-sines", cfg, VIEWS, TOKENS,
                        tokenizer="../../tests/data/tokenizer/tiny_paligemma.model")
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
