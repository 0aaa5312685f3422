#!/usr/bin/env python3
"""Makes the committed LeRobot Pi0 goldens in tests/parity/lerobot_pi0/ (read by
tests/libs/inference/test_model_parity.cpp).

LeRobot's PI0Pytorch (lerobot >= 0.5: the openpi port) with seeded random weights in tiny
dimensions, run in fp32 on seeded inputs and noise, the third camera masked:

    python3.12 -m venv /tmp/lrvenv && /tmp/lrvenv/bin/pip install lerobot==0.6.1
    /tmp/lrvenv/bin/python tests/parity/make_lerobot_golden.py tests/parity/lerobot_pi0

Writes model.safetensors (LeRobot key names, with its "model." prefix; the unused lm_heads left
out), config.json (our gst_pi0 layout: LeRobot's own config cannot express tiny widths) and
io.safetensors: inputs, noise, sample_actions() output and the prefix KV cache.

LeRobot fixes the Gemma widths by variant name, the SigLIP So400m shape and the 257,152-entry
vocabulary in code: lerobot_sizes.py patches the variant table and swaps in smaller modules before
initialising (every swapped module keeps its name and role; nothing in the computation changes).
"""
import json
import platform
import sys

import torch
from torch import nn

import lerobot
import transformers
from lerobot.policies.pi0 import modeling_pi0
from lerobot.policies.pi0.configuration_pi0 import PI0Config

import lerobot_sizes as sizes  # LeRobot at the sizes below
from transformers_parity import randomize  # the same weight rules as the live parity test

VISION = dict(image_size=32, patch_size=8, width=32, depth=1, mlp_dim=64, num_heads=4)
TEXT = dict(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16)
EXPERT = dict(width=32, depth=2, mlp_dim=64, num_heads=8, num_kv_heads=1, head_dim=16)
TINY = dict(vision=VISION, text=TEXT, expert=EXPERT)  # the same dicts: a caller may change one
VOCAB = 1024
SEED = 4242


def patch_lerobot() -> None:
    sizes.patch_lerobot(modeling_pi0, TINY)


def shrink(model: nn.Module) -> None:
    sizes.shrink(model, TINY, VOCAB)


def lerobot_state_dict(model: nn.Module) -> dict:
    """The weights as LeRobot saves them (its "model." prefix), without the unused lm_heads."""
    return {"model." + k: v.contiguous() for k, v in model.state_dict().items() if "lm_head" not in k}


def write_config(out: str, name: str, cfg: PI0Config, views: int, length: int, tokenizer: str | None = None) -> None:
    """config.json in our gst_pi0 layout for the tiny dimensions above (as they are when called)."""
    gst = {"name": name}
    if tokenizer:
        gst["tokenizer"] = tokenizer
    gst.update({
        "vision": {**VISION, "layer_norm_eps": 1e-6}, "text": TEXT, "expert": EXPERT, "vocab_size": VOCAB,
        "num_views": views, "max_tokens": length, "state_dim": 32, "action_dim": 32, "horizon": 50,
        "num_steps": 10, "min_period": cfg.min_period, "max_period": cfg.max_period})
    with open(f"{out}/config.json", "w") as f:
        json.dump({"type": "pi0", "gst_pi0": gst}, f, indent=2)
        f.write("\n")


def main() -> None:
    out = sys.argv[1]
    patch_lerobot()
    torch.manual_seed(SEED)
    cfg = PI0Config(device="cpu", dtype="float32", image_resolution=(32, 32), chunk_size=50, n_action_steps=50)
    model = modeling_pi0.PI0Pytorch(cfg)
    shrink(model)
    gen = torch.Generator().manual_seed(SEED)
    randomize(model, gen)
    model.eval()

    views, length, valid = 3, 48, 10
    images = [torch.rand(1, 3, 32, 32, generator=gen) * 2 - 1 for _ in range(views)]
    img_masks = [torch.tensor([True]), torch.tensor([True]), torch.tensor([False])]
    tokens = torch.randint(1, VOCAB, (1, length), generator=gen)
    token_mask = torch.arange(length)[None] < valid
    tokens = tokens * token_mask
    state = torch.rand(1, 32, generator=gen) * 2 - 1
    noise = torch.randn(1, 50, 32, generator=gen)

    with torch.no_grad():
        actions = model.sample_actions(images, img_masks, tokens, token_mask, state, noise=noise.clone())
        # The prefix KV cache exactly as sample_actions builds it.
        embs, pad, att = model.embed_prefix(images, img_masks, tokens, token_mask)
        mask4d = modeling_pi0.prepare_attention_masks_4d(modeling_pi0.make_att_2d_masks(pad, att))
        pos = torch.cumsum(pad, dim=1) - 1
        model.paligemma_with_expert.paligemma.model.language_model.config._attn_implementation = "eager"
        _, kv = model.paligemma_with_expert.forward(attention_mask=mask4d, position_ids=pos, past_key_values=None,
                                                    inputs_embeds=[embs, None], use_cache=True)

    state_dict = lerobot_state_dict(model)
    from safetensors.torch import save_file

    meta = {"lerobot": lerobot.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.platform()}
    save_file(state_dict, f"{out}/model.safetensors", metadata=meta)
    io = {"images": torch.cat(images).contiguous(), "image_masks": torch.cat(img_masks),
          "tokens": tokens[0].contiguous(), "token_mask": token_mask[0].contiguous(), "state": state[0].contiguous(),
          "noise": noise[0].contiguous(), "actions": actions[0].contiguous()}
    for i, layer in enumerate(kv.layers):
        io[f"kv.k.{i}"] = layer.keys.contiguous()
        io[f"kv.v.{i}"] = layer.values.contiguous()
    save_file(io, f"{out}/io.safetensors", metadata=meta)
    write_config(out, "lerobot-golden-tiny", cfg, views, length)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
