#!/usr/bin/env python3
"""bench/vs-peers: openpi's side, one observation at a time on command (.openpi-venv).

    vs_peers_openpi.py --openpi CHECKOUT --checkpoint DIR --obs DIR --work DIR
                       [--device cpu|cuda] [--dtype float32|bfloat16] [--warmup N]

What an openpi user runs for a raw ALOHA observation, from the checkout (imported, never copied):
openpi.policies.policy_config.create_trained_policy(train_config, WORK/pytorch,
pytorch_device=DEVICE) on a PyTorch checkpoint, then per observation what openpi's ALOHA client
sends (images transposed to CHW uint8, the state, the prompt) to policy.infer(obs, noise=...):
the input transforms (AlohaInputs(adapt_to_pi=False): cameras cam_high / cam_left_wrist /
cam_right_wrist to base_0_rgb / left_wrist_0_rgb / right_wrist_0_rgb, back to HWC; Normalize
with the checkpoint's norm stats, z-score for pi0 and quantiles for pi0.5 as openpi's
DataConfigFactory decides; ModelTransformFactory's ResizeImages(224, 224), i.e. openpi_client's
image_tools.resize_with_pad, PIL's bilinear resize (antialiased when it shrinks) on uint8;
TokenizePrompt with PaligemmaTokenizer, prompt + "\\n" for pi0, the discretized state in the
prompt for pi0.5; PadStatesAndActions to 32), to torch and the device, Observation.from_dict
(uint8 -> [-1, 1]), PI0Pytorch.sample_actions (its _preprocess_observation, then 10 Euler
steps), the output transforms (Unnormalize, AlohaOutputs: the first 14 dims).

train_config is an openpi.training.config.TrainConfig made here, not one of openpi's named
configs: Pi0Config(pi05=KIND == pi05, action_horizon=50, max_token_len=the checkpoint's, dtype,
pytorch_compile_mode=None) (openpi's default "max-autotune" would torch.compile sample_actions)
and openpi's own LeRobotAlohaDataConfig(use_delta_joint_actions=False, adapt_to_pi=False):
the checkpoint's actions are absolute and in the robot's units, as LeRobot's are.

The model's forward is timed around the PI0Pytorch instance's sample_actions, less its
_preprocess_observation (openpi's image checks and resizes, outside the model); everything else
is outside the model, in parts: client (the CHW transposes, reading the actions),
input_transforms, to_torch_and_model_preprocess (the rest of policy.infer: to torch and the
device, Observation.from_dict, _preprocess_observation, back to numpy) and output_transforms.
torch keeps its default thread count (as LeRobot's worker does).

Precision: openpi's create_trained_policy casts every PyTorch checkpoint to bfloat16
(paligemma_with_expert.to_bfloat16_for_selected_params("bfloat16"): all but the patch and
position embeddings and the norms), whatever the config's dtype and the device, CPU included.
For --dtype float32 that method is wrapped to get "float32" (an argument openpi's method takes:
it then does .to(torch.float32)) and the config's dtype is "float32", so the policy runs in fp32
as LeRobot's and ours do; --dtype bfloat16 leaves openpi's behaviour alone (the projections
outside paligemma_with_expert stay fp32). Also openpi's: PI0Pytorch.__init__ calls
torch.set_float32_matmul_precision("high") for the process, i.e. TF32 fp32 matmuls on a CUDA
device (on a CPU "high" computes as "highest").

The checkpoint is LeRobot's (bench/vs_peers_make.py). Made once in WORK/pytorch, what openpi's
PyTorch policy loads: model.safetensors with LeRobot's keys less their "model." prefix (LeRobot's
PI0Pytorch / PI05Pytorch is a port of openpi's: the key sets and shapes agree, checked by
openpi's strict load; LeRobot wrote its lm_heads as tensors of their own, and they are untied
here too), and
assets/vs_peers/norm_stats.json written by openpi's own openpi.shared.normalize.save from the
statistics in vs_peers.json (mean, std, q01, q99 of "state" and "actions").

Stand-ins and patches (nothing that computes a number is replaced):
 - lerobot: openpi's training code (checkpoints -> data_loader) imports the old
   lerobot.common.datasets.lerobot_dataset at module level, for training data only: a stub
   module of that name (its classes raise if used).
 - no network: openpi.shared.download.maybe_download is wrapped so that
   gs://big_vision/paligemma_tokenizer.model is the project's test SentencePiece model
   (tests/data/tokenizer/tiny_paligemma.model, the checkpoint's vocabulary); every other path
   goes to openpi's function.
 - sizes (vs_peers.json's "dims"; openpi fixes them by variant name and in code):
   openpi.models.gemma.get_config gives the checkpoint's Gemma and expert sizes for
   "gemma_2b" / "gemma_300m"; openpi.models_pytorch.gemma_pytorch's CONFIG_MAPPING["paligemma"]
   has SigLIP's depth, width, heads and patch; after PI0Pytorch.__init__ the modules whose sizes
   openpi's code fixes (SigLIP's MLPs at 4304, the projector to 2048, the 257,152-entry token
   embedding and the two lm_heads) are remade at the checkpoint's sizes, with their class, name
   and dtype, before the weights are loaded (as tests/parity/lerobot_sizes.py does for LeRobot).
 - timing: the PI0Pytorch instance's sample_actions and _preprocess_observation, and the
   policy's _input_transform and _output_transform, are wrapped to be timed (not changed).
"""
import argparse
import json
import os
import pathlib
import resource
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))

import vs_peers_common as common  # noqa: E402

TOKENIZER = os.path.join(ROOT, "tests", "data", "tokenizer", "tiny_paligemma.model")
PALIGEMMA_TOKENIZER_URL = "gs://big_vision/paligemma_tokenizer.model"
ASSET_ID = "vs_peers"


def install_stand_ins() -> None:
    """The lerobot stub and the tokenizer download (see the docstring)."""
    try:
        import lerobot.common.datasets.lerobot_dataset  # noqa: F401
    except ImportError:
        for name in ("lerobot", "lerobot.common", "lerobot.common.datasets",
                     "lerobot.common.datasets.lerobot_dataset"):
            sys.modules[name] = types.ModuleType(name)
        ld = sys.modules["lerobot.common.datasets.lerobot_dataset"]

        class Unavailable:
            def __init__(self, *a, **k):
                raise RuntimeError("lerobot stand-in: datasets are not available here")

        ld.LeRobotDataset = ld.LeRobotDatasetMetadata = Unavailable
        sys.modules["lerobot.common.datasets"].lerobot_dataset = ld

    import openpi.shared.download as download

    maybe_download = download.maybe_download

    def maybe_download_offline(url, *a, **k):
        if str(url) == PALIGEMMA_TOKENIZER_URL:
            return pathlib.Path(TOKENIZER).resolve()
        return maybe_download(url, *a, **k)

    download.maybe_download = maybe_download_offline


def convert(checkpoint: str, spec: dict, pytorch_dir: pathlib.Path) -> None:
    """LeRobot's checkpoint as openpi's PyTorch policy loads it, unless already there."""
    import numpy as np
    import safetensors.torch

    import openpi.shared.normalize as normalize

    weights = pytorch_dir / "model.safetensors"
    if not weights.exists():
        tensors = safetensors.torch.load_file(os.path.join(checkpoint, "model.safetensors"))
        prefix = "model."
        stray = [k for k in tensors if not k.startswith(prefix)]
        if stray:
            raise RuntimeError(f"{checkpoint}: keys outside LeRobot's {prefix!r}: {stray[:5]}")
        pytorch_dir.mkdir(parents=True, exist_ok=True)
        tmp = weights.with_suffix(".tmp")
        safetensors.torch.save_file({k[len(prefix):]: v.contiguous() for k, v in tensors.items()}, str(tmp),
                                    metadata={"format": "pt"})
        os.replace(tmp, weights)  # a conversion cut short is not taken for a finished one
    stats_dir = pytorch_dir / "assets" / ASSET_ID
    if not (stats_dir / "norm_stats.json").exists():

        def norm_stats(s):
            return normalize.NormStats(**{n: np.asarray(s[n], np.float32)
                                          for n in ("mean", "std", "q01", "q99")})

        tmp = stats_dir.with_name(ASSET_ID + ".tmp")
        normalize.save(tmp, {"state": norm_stats(spec["stats"]["observation.state"]),
                             "actions": norm_stats(spec["stats"]["action"])})
        stats_dir.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / "norm_stats.json", stats_dir / "norm_stats.json")
        tmp.rmdir()


def make_at_size(dims: dict, vocab: int) -> None:
    """openpi's PI0Pytorch made at @dims and @vocab (see the docstring)."""
    from lerobot_sizes import sized_config_mapping
    from torch import nn

    import openpi.models.gemma as gemma
    import openpi.models_pytorch.gemma_pytorch as gemma_pt
    import openpi.models_pytorch.pi0_pytorch as pi0_pt

    vision = dims["vision"]
    if vision["image_size"] != 224:
        raise SystemExit(f"openpi resizes to 224x224 in code; the checkpoint's SigLIP takes "
                         f"{vision['image_size']}")
    variants = {"gemma_2b": "text", "gemma_300m": "expert"}
    get_config = gemma.get_config
    gemma.get_config = lambda variant: (gemma.Config(**dims[variants[variant]]) if variant in variants
                                        else get_config(variant))

    gemma_pt.CONFIG_MAPPING = sized_config_mapping(dims)

    init = pi0_pt.PI0Pytorch.__init__

    def init_at_size(self, *a, **k):
        init(self, *a, **k)
        w, ew = dims["text"]["width"], dims["expert"]["width"]

        def like(old, new):  # a remade module keeps the dtype openpi gave the one it replaces
            return new.to(dtype=old.weight.dtype)

        pwe = self.paligemma_with_expert
        pg = pwe.paligemma.model
        for layer in pg.vision_tower.vision_model.encoder.layers:
            layer.mlp.fc1 = like(layer.mlp.fc1, nn.Linear(vision["width"], vision["mlp_dim"]))
            layer.mlp.fc2 = like(layer.mlp.fc2, nn.Linear(vision["mlp_dim"], vision["width"]))
        proj = pg.multi_modal_projector
        proj.linear = like(proj.linear, nn.Linear(vision["width"], w))
        emb = pg.language_model.embed_tokens
        pg.language_model.embed_tokens = like(emb, type(emb)(vocab, w, emb.padding_idx))
        # openpi's lm_heads (tied to the 257,152-entry embedding, unused by inference) at the
        # vocabulary: LeRobot's save_pretrained wrote them, untied.
        pwe.paligemma.lm_head = like(pwe.paligemma.lm_head, nn.Linear(w, vocab, bias=False))
        pwe.gemma_expert.lm_head = like(pwe.gemma_expert.lm_head, nn.Linear(ew, vocab, bias=False))

    pi0_pt.PI0Pytorch.__init__ = init_at_size


def main() -> None:
    t_start = time.perf_counter()
    ap = argparse.ArgumentParser()
    ap.add_argument("--openpi", required=True, help="openpi checkout (its src/ and openpi-client imported)")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--obs", required=True)
    ap.add_argument("--work", required=True, help="where the checkpoint is converted for openpi (kept)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    sys.stdout, real_stdout = sys.stderr, sys.stdout  # the peers print; the protocol is ours
    openpi = os.path.abspath(args.openpi)
    sys.path[:0] = [os.path.join(openpi, "src"), os.path.join(openpi, "packages", "openpi-client", "src")]
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # JAX only runs openpi's image resize here

    import numpy as np
    import torch

    install_stand_ins()
    import openpi.models.pi0_config as pi0_config
    import openpi.models_pytorch.gemma_pytorch as gemma_pt
    import openpi.policies.policy_config as policy_config
    import openpi.training.config as train_config_lib

    with open(os.path.join(args.checkpoint, "vs_peers.json")) as f:
        spec = json.load(f)
    pytorch_dir = pathlib.Path(args.work).resolve() / "pytorch"
    t = time.perf_counter()
    convert(args.checkpoint, spec, pytorch_dir)
    convert_s = time.perf_counter() - t
    make_at_size(spec["dims"], spec["vocab"])
    if args.dtype == "float32":
        to_selected = gemma_pt.PaliGemmaWithExpertModel.to_bfloat16_for_selected_params

        def to_float32(self, precision="bfloat16"):
            return to_selected(self, "float32")

        gemma_pt.PaliGemmaWithExpertModel.to_bfloat16_for_selected_params = to_float32

    model_config = pi0_config.Pi0Config(pi05=spec["kind"] == "pi05", action_horizon=spec["horizon"],
                                        max_token_len=spec["max_tokens"], dtype=args.dtype,
                                        pytorch_compile_mode=None)
    config = train_config_lib.TrainConfig(
        name=f"vs_peers_{spec['kind']}", model=model_config,
        data=train_config_lib.LeRobotAlohaDataConfig(
            use_delta_joint_actions=False, adapt_to_pi=False,
            assets=train_config_lib.AssetsConfig(assets_dir=str(pytorch_dir / "assets"), asset_id=ASSET_ID)))
    policy = policy_config.create_trained_policy(config, pytorch_dir, pytorch_device=args.device)
    model = policy._model  # noqa: SLF001
    cuda = torch.device(args.device).type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times = {}

    def timed(name, fn, synced=False):
        def wrapper(*a, **k):
            if synced:
                sync()
            t = time.perf_counter()
            out = fn(*a, **k)
            if synced:
                sync()
            times[name] = times.get(name, 0.0) + (time.perf_counter() - t) * 1e3
            return out

        return wrapper

    # Policy keeps the bound sample_actions it saw when it was made: the timed one goes there too.
    sample_actions = timed("sample_actions", model.sample_actions, True)
    model.sample_actions = policy._sample_actions = sample_actions  # noqa: SLF001
    model._preprocess_observation = timed("model_preprocess", model._preprocess_observation, True)  # noqa: SLF001
    policy._input_transform = timed("input_transforms", policy._input_transform)  # noqa: SLF001
    policy._output_transform = timed("output_transforms", policy._output_transform)  # noqa: SLF001
    m = common.manifest(args.obs)
    horizon, action_dim = spec["horizon"], spec["action_dim"]

    def run_one(i: int) -> dict:
        frames, state = common.load_observation(args.obs, m, i)
        noise = common.noise(m, i).numpy()
        times.clear()
        clock = common.Clock()
        # openpi's ALOHA client: CHW uint8 images, the state, the prompt ("client" below, with
        # reading the actions; the rest of the parts is inside policy.infer).
        obs = {"images": {cam: np.transpose(f, (2, 0, 1)) for cam, f in frames.items()},
               "state": state, "prompt": m["prompt"]}
        t = time.perf_counter()
        out = policy.infer(obs, noise=noise)
        infer_ms = (time.perf_counter() - t) * 1e3
        actions = np.asarray(out["actions"])
        whole, cpu = clock.wall_ms(), clock.cpu_ms()
        if actions.shape != (horizon, action_dim):
            raise RuntimeError(f"openpi gave actions of shape {actions.shape}, not {(horizon, action_dim)}")
        fwd = times["sample_actions"] - times["model_preprocess"]
        inp, outp = times["input_transforms"], times["output_transforms"]
        return {"whole_ms": whole, "cpu_ms": cpu, "forward_ms": fwd, "outside_ms": whole - fwd,
                "faults": clock.faults(),
                "parts": {"client": whole - infer_ms, "input_transforms": inp,
                          "to_torch_and_model_preprocess": infer_ms - inp - fwd - outp,
                          "output_transforms": outp},
                "actions": actions.astype(float).tolist()}

    dtypes = {}
    for p in model.parameters():
        dtypes[str(p.dtype)] = dtypes.get(str(p.dtype), 0) + p.numel()
    print(f"openpi: {spec['kind']} policy on {args.device} in {time.perf_counter() - t_start:.1f} s "
          f"(conversion {convert_s:.1f} s), parameters {dtypes}, torch threads {torch.get_num_threads()}",
          file=sys.stderr, flush=True)
    sys.stdout = real_stdout
    common.serve(run_one, m, args.warmup)
    print(f"openpi: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
