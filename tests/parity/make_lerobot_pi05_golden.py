#!/usr/bin/env python3
"""Makes the committed LeRobot pi0.5 goldens in tests/parity/lerobot_pi05/ (read by
tests/libs/inference/test_model_parity.cpp).

LeRobot 0.6.1's PI05Pytorch with seeded random weights in tiny dimensions (the weight rules of
transformers_parity.randomize: the adaRMSNorm `dense` layers, zero at LeRobot's init, get
non-zero weights so that the time conditioning is exercised), run in fp32 on seeded inputs and
noise, the third camera masked:

    .lerobot-venv/bin/pip install "transformers>=5.4,<5.6" "scipy>=1.14,<2" \\
        "opencv-python-headless>=4.9,<4.14" sentencepiece
    PYTHONPATH=tests/parity .lerobot-venv/bin/python tests/parity/make_lerobot_pi05_golden.py \
        tests/parity/lerobot_pi05

Writes model.safetensors (LeRobot key names, "model." prefix, no lm_heads), config.json (our
gst_pi0 layout with "pi05": true), io.safetensors (inputs, noise, sample_actions() output, and
the same with the condition layers zeroed: the control that shows the time conditioning acts)
and prompt.json: LeRobot's own Pi05PrepareStateTokenizerProcessorStep on normalized states
inside and outside [-1, 1] (the bins and the prompt text it builds), with the ids that
SentencePiece gives the prompt under tests/data/tokenizer/tiny_paligemma.model (BOS first, as
openpi's PaligemmaTokenizer encodes it).
"""
import json
import platform
import sys

import numpy as np
import sentencepiece
import torch
from torch import nn

import lerobot
import transformers
from lerobot.policies.pi05 import modeling_pi05
from lerobot.policies.pi05.configuration_pi05 import PI05Config
from lerobot.policies.pi05.processor_pi05 import Pi05PrepareStateTokenizerProcessorStep
from lerobot.lerobot_types import TransitionKey

import lerobot_sizes as sizes
from transformers_parity import randomize

VISION = dict(image_size=32, patch_size=8, width=32, depth=1, mlp_dim=64, num_heads=4)
TEXT = dict(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16)
EXPERT = dict(width=32, depth=2, mlp_dim=64, num_heads=8, num_kv_heads=1, head_dim=16)
TINY = dict(vision=VISION, text=TEXT, expert=EXPERT)
VOCAB = 1024
HORIZON = 10  # pi05_libero's
SEED = 5050
TOKENIZER = "tests/data/tokenizer/tiny_paligemma.model"


def patch_lerobot() -> None:
    sizes.patch_lerobot(modeling_pi05, TINY)


def shrink(model: nn.Module) -> None:
    sizes.shrink(model, TINY, VOCAB)


def prompts(meta: dict, out: str) -> None:
    """LeRobot's own state-to-prompt step on states that hit the edges and leave [-1, 1]."""
    step = Pi05PrepareStateTokenizerProcessorStep(max_state_dim=32)
    edge = 1.0 / 128
    states = [
        [0.0, -1.0, 1.0, -1.0 - 1e-6, 1.0 + 1e-6, 1.0 - edge, 1.0 - edge - 1e-7, -1.0 + edge],
        [-3.5, 7.25, 0.5, -0.5, 0.999, -0.999, 1e-9, -1e-9],
        [0.1234567, -0.7654321, 0.00390625, -0.00390625, 0.3, 0.6, 0.9, 2.0],
    ]
    tasks = ["pick_up the red\nblock  ", "Touch the blue block", "  fold the towel"]
    sp = sentencepiece.SentencePieceProcessor(model_file=TOKENIZER)
    cases = []
    for state, task in zip(states, tasks, strict=True):
        st = torch.tensor([state], dtype=torch.float32)
        transition = {TransitionKey.OBSERVATION: {"observation.state": st},
                      TransitionKey.COMPLEMENTARY_DATA: {"task": [task]}}
        text = step(transition)[TransitionKey.COMPLEMENTARY_DATA]["task"][0]
        bins = (np.digitize(st.numpy()[0], bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1).tolist()
        ids = [sp.bos_id()] + sp.encode(text)
        cases.append({"state": st[0].tolist(), "task": task, "bins": bins, "prompt": text, "ids": ids})
    with open(f"{out}/prompt.json", "w") as f:
        json.dump({"meta": meta, "tokenizer": TOKENIZER, "cases": cases}, f, indent=1)
        f.write("\n")


def main() -> None:
    out = sys.argv[1]
    patch_lerobot()
    torch.manual_seed(SEED)
    cfg = PI05Config(device="cpu", dtype="float32", image_resolution=(32, 32), chunk_size=HORIZON,
                     n_action_steps=HORIZON, tokenizer_max_length=48)
    model = modeling_pi05.PI05Pytorch(cfg)
    shrink(model)
    gen = torch.Generator().manual_seed(SEED)
    randomize(model, gen)
    model.eval()

    views, length, valid = 3, 48, 17
    images = [torch.rand(1, 3, 32, 32, generator=gen) * 2 - 1 for _ in range(views)]
    img_masks = [torch.tensor([True]), torch.tensor([True]), torch.tensor([False])]
    tokens = torch.randint(1, VOCAB, (1, length), generator=gen)
    token_mask = torch.arange(length)[None] < valid
    tokens = tokens * token_mask
    noise = torch.randn(1, HORIZON, 32, generator=gen)

    with torch.no_grad():
        actions = model.sample_actions(images, img_masks, tokens, token_mask, noise=noise.clone())
        # Controls. One token changed: the prompt reaches the actions.
        tokens2 = tokens.clone()
        tokens2[0, 5] = (tokens2[0, 5] % (VOCAB - 1)) + 1
        actions_token = model.sample_actions(images, img_masks, tokens2, token_mask, noise=noise.clone())
        # The condition layers zeroed (LeRobot's init): what the time conditioning contributes.
        state_dict = {"model." + k: v.clone().contiguous() for k, v in model.state_dict().items() if "lm_head" not in k}
        for name, p in model.named_parameters():
            if ".dense." in name:
                p.zero_()
        actions_nocond = model.sample_actions(images, img_masks, tokens, token_mask, noise=noise.clone())

    from safetensors.torch import save_file

    meta = {"lerobot": lerobot.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.platform()}
    save_file(state_dict, f"{out}/model.safetensors", metadata=meta)
    io = {"images": torch.cat(images).contiguous(), "image_masks": torch.cat(img_masks),
          "tokens": tokens[0].contiguous(), "tokens_changed": tokens2[0].contiguous(),
          "token_mask": token_mask[0].contiguous(), "noise": noise[0].contiguous(),
          "actions": actions[0].contiguous(), "actions_token_changed": actions_token[0].contiguous(),
          "actions_dense_zeroed": actions_nocond[0].contiguous()}
    save_file(io, f"{out}/io.safetensors", metadata=meta)
    gst = {"name": "lerobot-pi05-golden-tiny", "pi05": True,
           "vision": {**VISION, "layer_norm_eps": 1e-6}, "text": TEXT, "expert": EXPERT, "vocab_size": VOCAB,
           "num_views": views, "max_tokens": length, "state_dim": 32, "action_dim": 32, "horizon": HORIZON,
           "num_steps": 10, "min_period": cfg.min_period, "max_period": cfg.max_period}
    with open(f"{out}/config.json", "w") as f:
        json.dump({"type": "pi05", "gst_pi0": gst}, f, indent=2)
        f.write("\n")
    prompts(meta, out)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
