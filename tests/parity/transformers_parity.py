#!/usr/bin/env python3
"""Oracle for tests/libs/inference/test_model_parity.cpp: transformers' SiglipVisionModel and GemmaModel with
seeded random weights in pi0-tiny's dimensions, run on seeded inputs in fp32.

    transformers_parity.py OUT_DIR

writes OUT_DIR/siglip.safetensors and OUT_DIR/gemma_prefix.safetensors, OUT_DIR/gemma_expert.safetensors:
"w.<transformers name>" weights, "in.*" inputs, "out.hidden.<i>" hidden states (transformers'
output_hidden_states: the embeddings, each layer but the last, then the normed last), and
"out.last" the final output. The C++ test loads the weights into our module tree by name and
compares every hidden state (fp32, 1e-4 relative).
"""
import sys

import torch
from safetensors.torch import save_file
from transformers import GemmaConfig, GemmaModel, SiglipVisionConfig, SiglipVisionModel

# Must equal pi0::config_by_name("pi0-tiny").
VISION = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, intermediate_size=64,
              num_attention_heads=4, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh",
              vision_use_head=False)
TEXT = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=1, head_dim=16, vocab_size=1024)
EXPERT = dict(hidden_size=32, num_hidden_layers=2, intermediate_size=64, num_attention_heads=4,
              num_key_value_heads=1, head_dim=16, vocab_size=1024)


def randomize(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Weights that exercise every rule: non-zero Gemma norm scales (the 1 + w rule), LayerNorm
    gains around 1, linear weights at 1/sqrt(fan_in)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen)
            if "layer_norm" in name or "post_layernorm" in name:
                p.copy_(1.0 + 0.1 * r if name.endswith("weight") else 0.05 * r)
            elif "layernorm" in name or name.endswith("norm.weight"):
                p.copy_(0.1 * r)  # Gemma RMSNorm: scale is 1 + w
            elif p.dim() >= 2 and "embed" not in name:
                fan_in = p[0].numel()
                p.copy_(r / fan_in ** 0.5)
            else:
                p.copy_(0.5 * r)


def gemma(cfg: dict, gen: torch.Generator, with_ids: bool, out: str) -> None:
    config = GemmaConfig(hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, rope_theta=10000.0,
                         attention_bias=False, **cfg)
    config._attn_implementation = "eager"
    model = GemmaModel(config).eval()
    randomize(model, gen)
    n = 20
    tensors = {"w." + k: v.contiguous() for k, v in model.state_dict().items()}
    with torch.no_grad():
        if with_ids:
            ids = torch.randint(0, cfg["vocab_size"], (2, n), generator=gen)
            res = model(input_ids=ids, output_hidden_states=True)
            tensors["in.input_ids"] = ids
        else:
            emb = torch.randn(2, n, cfg["hidden_size"], generator=gen)
            res = model(inputs_embeds=emb, output_hidden_states=True)
            tensors["in.inputs_embeds"] = emb
    for i, h in enumerate(res.hidden_states):
        tensors[f"out.hidden.{i}"] = h.clone().contiguous()
    tensors["out.last"] = res.last_hidden_state.clone().contiguous()
    save_file(tensors, out)


def main() -> None:
    out_dir = sys.argv[1]
    gen = torch.Generator().manual_seed(20240611)

    vcfg = SiglipVisionConfig(**VISION)
    vcfg._attn_implementation = "eager"
    vision = SiglipVisionModel(vcfg).eval()
    randomize(vision, gen)
    pixels = torch.rand(3, 3, 32, 32, generator=gen) * 2 - 1
    with torch.no_grad():
        res = vision(pixel_values=pixels, output_hidden_states=True)
    tensors = {"w." + k: v.contiguous() for k, v in vision.state_dict().items()}
    tensors["in.pixels"] = pixels
    for i, h in enumerate(res.hidden_states):
        tensors[f"out.hidden.{i}"] = h.clone().contiguous()
    tensors["out.last"] = res.last_hidden_state.clone().contiguous()
    save_file(tensors, f"{out_dir}/siglip.safetensors")

    gemma(TEXT, gen, True, f"{out_dir}/gemma_prefix.safetensors")
    gemma(EXPERT, gen, False, f"{out_dir}/gemma_expert.safetensors")
    print("transformers", __import__("transformers").__version__, "torch", torch.__version__)


if __name__ == "__main__":
    main()
