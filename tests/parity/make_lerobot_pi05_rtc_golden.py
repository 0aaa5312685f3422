#!/usr/bin/env python3
"""Makes tests/parity/lerobot_pi05/rtc.safetensors (read by tests/libs/inference/test_model_rtc.cpp): LeRobot
0.6.1's real-time chunking on PI05Pytorch, the pi0.5 goldens' weights, inputs and noise
(make_lerobot_pi05_golden.py), in both Jacobian modes, as make_lerobot_rtc_golden.py does for
pi0 (same file layout per case; see its docstring). pi0.5's chunk here has 10 rows, so the
cases' delays, execution horizons and prefixes are scaled to it.

    PYTHONPATH=tests/parity .lerobot-venv/bin/python tests/parity/make_lerobot_pi05_rtc_golden.py \\
        tests/parity/lerobot_pi05
"""
import json
import platform
import sys

import torch
from safetensors.torch import load_file, save_file

import lerobot
import transformers
from lerobot.configs import RTCAttentionSchedule
from lerobot.policies.pi05 import modeling_pi05
from lerobot.policies.pi05.configuration_pi05 import PI05Config

import make_lerobot_pi05_golden as base
from make_lerobot_rtc_golden import STEPS, run_cases

H = base.HORIZON

# name, jacobian, schedule, beta, delay d, execution horizon s, prefix rows R
CASES = [
    ("identity_linear", "identity", RTCAttentionSchedule.LINEAR, 10.0, 2, 3, 8),
    ("identity_exp_clamped", "identity", RTCAttentionSchedule.EXP, 5.0, 3, 4, 9),  # end 6 < R
    ("vjp_exp", "vjp", RTCAttentionSchedule.EXP, 5.0, 2, 3, 8),
    ("vjp_linear", "vjp", RTCAttentionSchedule.LINEAR, 10.0, 3, 2, 8),
]


def main() -> None:
    out = sys.argv[1]
    base.patch_lerobot()
    torch.manual_seed(base.SEED)
    cfg = PI05Config(device="cpu", dtype="float32", image_resolution=(32, 32), chunk_size=H, n_action_steps=H,
                     tokenizer_max_length=48)
    assert cfg.num_inference_steps == STEPS
    model = modeling_pi05.PI05Pytorch(cfg)
    base.shrink(model)
    weights = {k.removeprefix("model."): v for k, v in load_file(f"{out}/model.safetensors").items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
    model.eval()
    io = load_file(f"{out}/io.safetensors")
    images = [io["images"][i:i + 1] for i in range(io["images"].shape[0])]
    img_masks = [io["image_masks"][i:i + 1] for i in range(io["image_masks"].shape[0])]
    tokens, token_mask, noise = io["tokens"][None], io["token_mask"][None], io["noise"][None]

    def sample(noise_, **rtc):
        return model.sample_actions(images, img_masks, tokens, token_mask, noise=noise_.clone(), **rtc)

    model.config.rtc_config, model.rtc_processor = None, None
    plain = sample(noise)
    assert torch.equal(plain[0], io["actions"]), "the plain goldens no longer reproduce"
    prev = sample(torch.randn(1, H, 32, generator=torch.Generator().manual_seed(base.SEED + 1)))

    tensors, summary = run_cases(model, sample, noise, plain, prev, CASES, H)

    meta = {"lerobot": lerobot.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.platform()}
    save_file(tensors, f"{out}/rtc.safetensors", metadata=meta)
    print(json.dumps(meta))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
