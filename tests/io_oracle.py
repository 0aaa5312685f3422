#!/usr/bin/env python3
"""Python side of tests/test_io_*.cpp: reference implementations nobody here wrote (the
`safetensors` and `sentencepiece` packages, numpy) driven through small commands, each printing
one JSON document on stdout.

  tokenize MODEL PROMPTS.json MAX_LEN   openpi's Pi0 prompt format with the sentencepiece package
  st-write OUT.safetensors              a file from safetensors.torch.save_file (see TENSORS)
  st-read IN.safetensors                every tensor's dtype, shape and values, and the metadata
  norm STATS.json INPUT.json            openpi's Normalize/Unnormalize formulas in numpy
  tied-ckpt OUT.safetensors PREFIX      a miniature openpi/LeRobot Pi0 saved with save_model()

The formulas are written from openpi's description (src/openpi/models/tokenizer.py and
src/openpi/transforms.py), deliberately plainly: they are the oracle, not an optimised path.
"""
import json
import sys

import numpy as np


def tokenize(model_path, prompts_path, max_len):
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=model_path)
    with open(prompts_path, encoding="utf-8") as f:
        prompts = json.load(f)
    out = []
    for prompt in prompts:
        cleaned = prompt.strip().replace("_", " ").replace("\n", " ")
        ids = sp.encode(cleaned, add_bos=True) + sp.encode("\n")
        n_real = min(len(ids), max_len)
        ids = ids[:max_len] + [0] * (max_len - n_real)
        out.append({"ids": ids, "mask": [i < n_real for i in range(max_len)], "cleaned": cleaned})
    return out


# name -> (torch dtype name, shape). Values: arange(numel) * 0.5 - 7 cast to the dtype, or
# (arange(numel) % 3 == 0) for bool; test_io_safetensors.cpp makes the same.
TENSORS = {
    "a.f32": ("float32", [3, 4]),
    "b.bf16": ("bfloat16", [2, 3, 5]),
    "c.f16": ("float16", [7]),
    "d.i64": ("int64", [2, 2]),
    "e.i32": ("int32", [5]),
    "f.u8": ("uint8", [4]),
    "g.bool": ("bool", [6]),
    "h.scalar": ("float32", []),
    "i.empty": ("float32", [0, 3]),
    "j.f64": ("float64", [3]),
}


def make_tensor(torch, dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    base = torch.arange(n, dtype=torch.float64)
    if dtype == "bool":
        t = (torch.arange(n) % 3) == 0
    else:
        t = (base * 0.5 - 7).to(getattr(torch, dtype))
    return t.reshape(shape)


def st_write(path):
    import torch
    from safetensors.torch import save_file

    tensors = {name: make_tensor(torch, dt, shape) for name, (dt, shape) in TENSORS.items()}
    save_file(tensors, path, metadata={"format": "pt", "writer": "python"})
    return {"written": sorted(tensors)}


def st_read(path):
    from safetensors import safe_open

    out = {"tensors": {}}
    with safe_open(path, framework="pt") as f:
        out["metadata"] = f.metadata()
        for name in f.keys():
            t = f.get_tensor(name)
            out["tensors"][name] = {
                "dtype": str(t.dtype).replace("torch.", ""),
                "shape": list(t.shape),
                "values": t.double().flatten().tolist() if t.dtype.is_floating_point else t.long().flatten().tolist(),
            }
    return out


def norm(stats_path, input_path):
    with open(stats_path) as f:
        stats = json.load(f)["norm_stats"]
    with open(input_path) as f:
        inp = json.load(f)
    state = np.asarray(inp["state"], dtype=np.float32)
    actions = np.asarray(inp["actions"], dtype=np.float32)
    native = inp["native_dims"]
    s, a = stats["state"], stats["actions"]
    out = {}

    d = state.shape[-1]
    mean, std = np.asarray(s["mean"])[:d], np.asarray(s["std"])[:d]
    out["state_zscore"] = ((state - mean) / (std + 1e-6)).tolist()
    q01, q99 = np.asarray(s["q01"])[:d], np.asarray(s["q99"])[:d]
    out["state_quantile"] = ((state - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0).tolist()

    dim = actions.shape[-1]
    am, asd = np.asarray(a["mean"]), np.asarray(a["std"])
    k = am.shape[-1]
    am = np.concatenate([am, np.zeros(dim - k)])
    asd = np.concatenate([asd, np.ones(dim - k)])
    out["actions_zscore"] = (actions * (asd + 1e-6) + am)[..., :native].tolist()
    aq01, aq99 = np.asarray(a["q01"]), np.asarray(a["q99"])
    head = (actions[..., :k] + 1.0) / 2.0 * (aq99 - aq01 + 1e-6) + aq01
    out["actions_quantile"] = np.concatenate([head, actions[..., k:]], axis=-1)[..., :native].tolist()
    return out


def tied_ckpt(path, prefix):
    """Mirrors how openpi's converter saves (safetensors.torch.save_model, which keeps one name
    of each tied pair) a module laid out like PI0Pytorch: PaliGemma's lm_head tied to its token
    embedding, an action expert built as a causal LM whose embedding was then removed (its
    lm_head stays, unused). PREFIX "model" wraps it as LeRobot's PI0Policy does."""
    import torch
    from safetensors.torch import load_file, save_model
    from torch import nn

    class Norm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(n))

    def node(**children):
        m = nn.Module()
        for k, v in children.items():
            setattr(m, k, v)
        return m

    torch.manual_seed(0)
    embed = nn.Embedding(16, 4)
    lm_head = nn.Linear(4, 16, bias=False)
    lm_head.weight = embed.weight
    paligemma = node(model=node(language_model=node(embed_tokens=embed, norm=Norm(4))), lm_head=lm_head)
    expert = node(model=node(norm=Norm(4)), lm_head=nn.Linear(4, 16, bias=False))
    net = node(paligemma_with_expert=node(paligemma=paligemma, gemma_expert=expert), state_proj=nn.Linear(6, 4))
    net.register_buffer("step", torch.tensor([7, 9]))
    top = node(model=net) if prefix == "model" else net
    save_model(top, path)
    return {k: v.double().flatten().tolist() for k, v in load_file(path).items()}


def main(argv):
    cmd = argv[1]
    if cmd == "tokenize":
        result = tokenize(argv[2], argv[3], int(argv[4]))
    elif cmd == "st-write":
        result = st_write(argv[2])
    elif cmd == "st-read":
        result = st_read(argv[2])
    elif cmd == "norm":
        result = norm(argv[2], argv[3])
    elif cmd == "tied-ckpt":
        result = tied_ckpt(argv[2], argv[3])
    else:
        raise SystemExit(f"unknown command {cmd}")
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)
