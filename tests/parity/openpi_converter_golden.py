#!/usr/bin/env python3
"""Golden data from openpi's OWN code: a pi0.5 PyTorch checkpoint written by openpi's converter, and
what openpi's own PyTorch policy does with one raw DROID observation through it.

By-hand tool (not CI). It needs an openpi checkout (run from there, never copied into this project)
and the environment built by scripts/openpi_env.sh:

    scripts/openpi_env.sh /tmp/openpi
    .openpi-venv/bin/python tests/parity/openpi_converter_golden.py \\
        --openpi /tmp/openpi --out /tmp/openpi-pi05 [--config pi05_droid] [--keep-jax]

Full size needs ~45 GB of RAM+swap (the converter holds the numpy params, the PyTorch model and
safetensors' serialized bytes at once) and ~35 GB of disk while OUTDIR/jax exists.
Each phase runs in its own process (this script re-invokes itself with --phase; --reuse-jax keeps
an existing OUTDIR/jax/params, which is the same for the same seed):

 1. make-jax: builds openpi's JAX model for the training config (abstractly, with
    nnx.eval_shape(config.model.create, key) + nnx.split(...).to_pure_dict(): exactly the tree that
    openpi.models.model.BaseModelConfig.load() checks against), and fills EVERY leaf with seeded
    random values (numpy PCG64): matrices/embeddings/biases ~ N(0, 0.02^2) (the adaRMSNorm
    modulation Dense_0 kernels, which openpi zero-initialises, ~ N(0, 0.01^2) and their biases
    ~ N(0, 0.02^2)); Gemma RMSNorm scales (used as 1+scale) ~ N(0, 0.1^2); SigLIP LayerNorm
    scales ~ 1 + N(0, 0.1^2). All values are rounded to bfloat16 and the checkpoint is saved in
    bfloat16 (like openpi's released params) as an orbax PyTree {"params": <pure dict>} at
    OUTDIR/jax/params: the layout openpi.models.model.restore_params reads (no trailing "value"
    keys). openpi's norm stats (openpi.shared.normalize.save; mean/std/q01/q99 for "state" and
    "actions", 8 dims each as DROID's are: 7 joints + gripper) go to
      OUTDIR/jax/assets/<asset_id>/norm_stats.json  (openpi's released-checkpoint layout, which
                                                     create_trained_policy reads), and
      OUTDIR/assets/<asset_id>/norm_stats.json      (where the converter copies assets FROM:
                                                     Path(checkpoint_dir).parent / "assets").
 2. convert: runs openpi's examples/convert_jax_model_to_pytorch.py UNCHANGED as a subprocess:
      --checkpoint_dir OUTDIR/jax --config_name <config> --output_path OUTDIR/pytorch
      --precision float32
    (the converter only treats a checkpoint as pi0.5 when the string "pi05" is in checkpoint_dir:
    OUTDIR must contain "pi05" for a pi05 config; this script refuses otherwise).
 3. policy: openpi.policies.policy_config.create_trained_policy(config, OUTDIR/pytorch) and
    policy.infer(obs, noise=noise) on one raw DROID observation as openpi's DROID client sends it.
    Writes OUTDIR/pytorch_io.safetensors.
 4. removes OUTDIR/jax unless --keep-jax.

Stand-ins and patches (nothing that computes a number is replaced):
 - lerobot is not installed: openpi.training.checkpoints imports openpi.training.data_loader, which
   imports lerobot.common.datasets.lerobot_dataset at module level (only used for training data).
   A stub module of that name is put in sys.modules in the policy phase.
 - no network: openpi.models.tokenizer.PaligemmaTokenizer downloads
   gs://big_vision/paligemma_tokenizer.model with openpi.shared.download.maybe_download; that
   function is wrapped so that, for that URL only, it returns this project's small SentencePiece
   model tests/data/tokenizer/tiny_paligemma.model (ids < 257152). Every other path goes to
   openpi's own function. Installed in the make-jax phase too (the data config, read there for
   the asset id, builds the tokenizer).
 - the train config's model is dataclasses.replace()d with pytorch_compile_mode=None (openpi's
   default "max-autotune" would torch.compile sample_actions, which on a CPU needs a C++ toolchain
   and a long compile) and, for --policy-precision float32 (default), dtype="float32".
 - create_trained_policy calls model.paligemma_with_expert.to_bfloat16_for_selected_params(
   "bfloat16") on every PyTorch checkpoint (bf16 weights except patch/pos embeddings and norms).
   For --policy-precision float32 (default) that method is wrapped to get "float32" instead (an
   argument openpi's method supports: it then does .to(torch.float32)), so the policy runs in fp32.
   --policy-precision bfloat16 leaves openpi's behaviour alone.
 - policy._input_transform is wrapped to record (not change) what openpi feeds the model.
"""

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import resource
import shutil
import subprocess
import sys
import time
import types

HERE = pathlib.Path(__file__).resolve()
REPO = HERE.parents[2]
TINY_TOKENIZER = REPO / "tests" / "data" / "tokenizer" / "tiny_paligemma.model"
PALIGEMMA_TOKENIZER_URL = "gs://big_vision/paligemma_tokenizer.model"
SEED = 20240917
PROMPT = "pick up the red block and put it in the bowl"


def _setup_paths(openpi: pathlib.Path) -> None:
    for p in (openpi / "packages" / "openpi-client" / "src", openpi / "src"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))


def _env(openpi: pathlib.Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(openpi / "src"), str(openpi / "packages" / "openpi-client" / "src")]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(k, "2")
    return env


def _openpi_commit(openpi: pathlib.Path) -> str:
    try:
        return subprocess.check_output(["git", "-C", str(openpi), "rev-parse", "HEAD"], text=True).strip()
    except Exception:  # noqa: BLE001
        return "unknown"


# ----------------------------------------------------------------------------------------------
# norm stats
# ----------------------------------------------------------------------------------------------
def _norm_stats(rng):
    import numpy as np

    from openpi.shared import normalize as _normalize

    # state: 7 joint positions (rad) + gripper position in [0, 1].
    s_lo = np.array([-2.4, -1.5, -2.6, -2.9, -2.7, 0.4, -2.8, 0.0])
    s_hi = np.array([2.5, 1.6, 2.3, -0.3, 2.6, 3.5, 2.9, 1.0])
    s_lo[:7] += rng.uniform(-0.2, 0.2, 7)
    s_hi[:7] += rng.uniform(-0.2, 0.2, 7)
    # actions (pi05_droid: joint velocities + gripper position).
    a_hi = np.array([0.9, 0.6, 1.1, 0.8, 1.3, 0.7, 1.6, 1.0]) * rng.uniform(0.8, 1.2, 8)
    a_lo = -a_hi * rng.uniform(0.7, 1.0, 8)
    a_lo[7], a_hi[7] = 0.0, 1.0

    def stats(lo, hi):
        mean = lo + (hi - lo) * rng.uniform(0.4, 0.6, lo.shape)
        std = (hi - lo) * rng.uniform(0.15, 0.3, lo.shape)
        return _normalize.NormStats(
            mean=mean.astype(np.float32),
            std=std.astype(np.float32),
            q01=lo.astype(np.float32),
            q99=hi.astype(np.float32),
        )

    return {"state": stats(s_lo, s_hi), "actions": stats(a_lo, a_hi)}


# ----------------------------------------------------------------------------------------------
# phase 1: random openpi JAX checkpoint
# ----------------------------------------------------------------------------------------------
def phase_make_jax(args) -> None:
    import jax
    import ml_dtypes
    import numpy as np
    import orbax.checkpoint as ocp
    from flax import nnx
    from flax import traverse_util

    import openpi.shared.normalize as _normalize
    import openpi.training.config as _config

    cfg = _config.get_config(args.config)
    model_cfg = cfg.model
    abstract = nnx.eval_shape(model_cfg.create, jax.random.key(0))
    _, state = nnx.split(abstract)
    pure = state.to_pure_dict()
    flat = traverse_util.flatten_dict(pure)

    jax_dir = args.out / "jax"
    reuse = args.reuse_jax and (jax_dir / "params" / "_CHECKPOINT_METADATA").exists()
    if reuse:
        print(f"reusing {jax_dir / 'params'} (--reuse-jax; generation is deterministic)", flush=True)
    else:
        rng = np.random.Generator(np.random.PCG64(SEED))
        bf16 = ml_dtypes.bfloat16
        out = {}
        n_total = 0
        for path in sorted(flat):
            leaf = flat[path]
            shape = tuple(leaf.shape)
            name = "/".join(str(p) for p in path)
            last = str(path[-1])
            if last == "scale":
                if name.startswith("PaliGemma/img"):  # SigLIP LayerNorm: x * scale
                    base, std = 1.0, 0.1
                else:  # Gemma RMSNorm: x * (1 + scale)
                    base, std = 0.0, 0.1
            elif "Dense_0" in path and any("norm" in str(p) for p in path) and last == "kernel":
                base, std = 0.0, 0.01  # adaRMSNorm modulation (zero-initialised in openpi)
            else:
                base, std = 0.0, 0.02
            arr = np.empty(shape, dtype=bf16)
            if len(shape) >= 1 and shape[0] > 1 and int(np.prod(shape)) > (1 << 24):
                for i in range(shape[0]):
                    arr[i] = (rng.standard_normal(shape[1:], dtype=np.float32) * std + base).astype(bf16)
            else:
                arr[...] = (rng.standard_normal(shape, dtype=np.float32) * std + base).astype(bf16)
            assert arr.size > 1000 or np.all(arr != 0), name
            out[path] = arr
            n_total += arr.size
            print(f"  {name:80s} {shape} std={std} base={base}", flush=True)
        print(f"{len(out)} leaves, {n_total} parameters", flush=True)
        params = traverse_util.unflatten_dict(out)

        if jax_dir.exists():
            shutil.rmtree(jax_dir)
        jax_dir.mkdir(parents=True)
        t = time.time()
        with ocp.PyTreeCheckpointer() as ckptr:
            ckptr.save((jax_dir / "params").resolve(), {"params": params})
        print(f"saved orbax params in {time.time() - t:.1f}s", flush=True)


    # Check that openpi reads back the same tree (structure, shapes) it expects.
    with ocp.PyTreeCheckpointer() as ckptr:
        meta = ckptr.metadata((jax_dir / "params").resolve())
    got = traverse_util.flatten_dict(meta["params"])
    assert set(got) == set(flat), (set(got) ^ set(flat))
    for k, v in got.items():
        assert tuple(v.shape) == tuple(flat[k].shape), k
        assert str(v.dtype) == "bfloat16", (k, v.dtype)

    _install_stand_ins()  # the data config builds openpi's PaligemmaTokenizer
    data_cfg = cfg.data.create(cfg.assets_dirs, model_cfg)
    asset_id = data_cfg.asset_id
    ns = _norm_stats(np.random.Generator(np.random.PCG64(SEED + 1)))
    _normalize.save(jax_dir / "assets" / asset_id, ns)  # openpi's released-checkpoint layout
    _normalize.save(args.out / "assets" / asset_id, ns)  # where the converter copies from
    print(f"norm stats (asset_id={asset_id!r}) written; use_quantile_norm={data_cfg.use_quantile_norm}", flush=True)


# ----------------------------------------------------------------------------------------------
# phase 3: openpi PyTorch policy
# ----------------------------------------------------------------------------------------------
def _install_stand_ins() -> None:
    # lerobot: only training-data code uses it.
    if "lerobot" not in sys.modules:
        for name in ("lerobot", "lerobot.common", "lerobot.common.datasets", "lerobot.common.datasets.lerobot_dataset"):
            sys.modules[name] = types.ModuleType(name)
        ld = sys.modules["lerobot.common.datasets.lerobot_dataset"]

        class _Unavailable:  # noqa: D401
            def __init__(self, *a, **k):
                raise RuntimeError("lerobot stand-in: datasets are not available here")

        ld.LeRobotDataset = _Unavailable
        ld.LeRobotDatasetMetadata = _Unavailable
        sys.modules["lerobot.common.datasets"].lerobot_dataset = ld

    import openpi.shared.download as _download

    orig = _download.maybe_download
    if getattr(orig, "_golden_wrapped", False):
        return

    def maybe_download(url, *a, **k):
        if str(url) == PALIGEMMA_TOKENIZER_URL:
            return TINY_TOKENIZER.resolve()
        return orig(url, *a, **k)

    maybe_download._golden_wrapped = True
    _download.maybe_download = maybe_download


def phase_policy(args) -> None:
    import numpy as np

    _install_stand_ins()
    import jax
    import safetensors.numpy
    import torch
    import transformers

    torch.set_num_threads(2)
    import openpi.models_pytorch.gemma_pytorch as _gemma_pt
    import openpi.policies.policy_config as _policy_config
    import openpi.training.config as _config

    cfg = _config.get_config(args.config)
    model_over = {"pytorch_compile_mode": None}
    if args.policy_precision == "float32":
        model_over["dtype"] = "float32"
        orig_sel = _gemma_pt.PaliGemmaWithExpertModel.to_bfloat16_for_selected_params

        def to_sel(self, precision="bfloat16"):
            return orig_sel(self, "float32")

        _gemma_pt.PaliGemmaWithExpertModel.to_bfloat16_for_selected_params = to_sel
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **model_over))

    t = time.time()
    policy = _policy_config.create_trained_policy(cfg, args.out / "pytorch", pytorch_device="cpu")
    print(f"policy created in {time.time() - t:.1f}s", flush=True)
    model = policy._model  # noqa: SLF001
    dtypes = {}
    for _, p in model.named_parameters():
        dtypes[str(p.dtype)] = dtypes.get(str(p.dtype), 0) + p.numel()
    print(f"parameter dtypes: {dtypes}", flush=True)

    recorded = {}
    orig_in = policy._input_transform  # noqa: SLF001

    def rec_in(x):
        y = orig_in(x)
        recorded.update(jax.tree.map(lambda v: np.array(v), y))
        return y

    policy._input_transform = rec_in  # noqa: SLF001

    rng = np.random.Generator(np.random.PCG64(SEED + 2))

    def image(h, w):
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], axis=-1)
        return np.clip(base + rng.normal(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)

    ext = image(180, 320)
    wrist = image(240, 320)
    joints = rng.uniform(-1.0, 1.0, 7)  # rad, inside the norm stats' q01..q99
    joints[3] = -1.6
    joints[5] = 1.8
    gripper = np.array([0.37])
    obs = {
        "observation/exterior_image_1_left": ext,
        "observation/wrist_image_left": wrist,
        "observation/joint_position": joints,
        "observation/gripper_position": gripper,
        "prompt": PROMPT,
    }
    noise = rng.standard_normal((cfg.model.action_horizon, cfg.model.action_dim)).astype(np.float32)

    t = time.time()
    out = policy.infer(obs, noise=noise)
    print(f"infer in {time.time() - t:.1f}s; policy_timing={out.get('policy_timing')}", flush=True)
    actions = np.asarray(out["actions"])
    print(f"actions {actions.shape} {actions.dtype}\n{actions}", flush=True)
    assert np.all(np.isfinite(actions))

    tensors = {
        "exterior_image_1_left": ext,
        "wrist_image_left": wrist,
        "joint_position": joints.astype(np.float64),
        "gripper_position": gripper.astype(np.float64),
        "noise": noise,
        "actions": np.ascontiguousarray(actions),
    }
    if "state" in recorded:
        tensors["model_state"] = np.asarray(recorded["state"], dtype=np.float32)
    if "tokenized_prompt" in recorded:
        tensors["tokenized_prompt"] = np.asarray(recorded["tokenized_prompt"]).astype(np.int32)
        tensors["tokenized_prompt_mask"] = np.asarray(recorded["tokenized_prompt_mask"]).astype(np.uint8)
    for k, v in recorded.get("image", {}).items():
        tensors[f"model_image_{k}"] = np.asarray(v)
    for k, v in recorded.get("image_mask", {}).items():
        tensors[f"model_image_mask_{k}"] = np.asarray(v).astype(np.uint8).reshape(1)
    meta = {
        "openpi_commit": _openpi_commit(args.openpi),
        "config": args.config,
        "prompt": PROMPT,
        "seed": str(SEED),
        "policy_precision": args.policy_precision,
        "parameter_dtypes": json.dumps(dtypes),
        "tokenizer": str(TINY_TOKENIZER.relative_to(REPO)),
        "jax": jax.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    dest = args.out / ("pytorch_io.safetensors" if args.policy_precision == "float32" else "pytorch_io_bf16.safetensors")
    safetensors.numpy.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(dest), metadata=meta)
    print(f"wrote {dest}: " + ", ".join(f"{k}{tuple(v.shape)}:{v.dtype}" for k, v in tensors.items()), flush=True)


# ----------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------
def _run(cmd, env, log_name, args) -> None:
    print(f"$ {' '.join(map(str, cmd))}", flush=True)
    t = time.time()
    proc = subprocess.Popen([str(c) for c in cmd], env=env)
    _, status, ru = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    line = f"{log_name}: rc={rc} wall={time.time() - t:.1f}s peak_rss={ru.ru_maxrss / 1024 / 1024:.2f} GiB"
    print(line, flush=True)
    with open(args.out / "timings.txt", "a") as f:
        f.write(line + "\n")
    if rc != 0:
        sys.exit(f"{log_name} failed (rc={rc})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--openpi", type=pathlib.Path, required=True)
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--config", default="pi05_droid")
    ap.add_argument("--keep-jax", action="store_true")
    ap.add_argument("--reuse-jax", action="store_true", help="keep an existing OUTDIR/jax/params (same seed => same)")
    ap.add_argument("--policy-precision", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--phase", choices=["all", "make-jax", "convert", "policy"], default="all")
    args = ap.parse_args()
    args.openpi = args.openpi.resolve()
    args.out = args.out.resolve()
    _setup_paths(args.openpi)
    if "pi05" in args.config and "pi05" not in str(args.out / "jax"):
        sys.exit("openpi's converter only takes the pi0.5 path when 'pi05' is in --checkpoint_dir: use an OUTDIR with 'pi05'")

    if args.phase == "make-jax":
        return phase_make_jax(args)
    if args.phase == "policy":
        return phase_policy(args)
    convert_cmd = [
        sys.executable, args.openpi / "examples" / "convert_jax_model_to_pytorch.py",
        "--checkpoint_dir", args.out / "jax", "--config_name", args.config,
        "--output_path", args.out / "pytorch", "--precision", "float32",
    ]
    if args.phase == "convert":
        _run(convert_cmd, _env(args.openpi), "convert", args)
        return None

    args.out.mkdir(parents=True, exist_ok=True)
    env = _env(args.openpi)
    me = [sys.executable, HERE, "--openpi", args.openpi, "--out", args.out, "--config", args.config,
          "--policy-precision", args.policy_precision, *(["--reuse-jax"] if args.reuse_jax else [])]
    _run([*me, "--phase", "make-jax"], env, "make-jax", args)
    _run(convert_cmd, env, "convert", args)
    _run([*me, "--phase", "policy"], env, "policy", args)
    if not args.keep_jax:
        shutil.rmtree(args.out / "jax")
        print(f"removed {args.out / 'jax'}", flush=True)
    return None


if __name__ == "__main__":
    main()
