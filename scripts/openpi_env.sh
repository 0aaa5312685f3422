#!/usr/bin/env bash
# By-hand helper (not CI): builds the project's .openpi-venv, a Python 3.11 environment in which
# openpi's own code (run from a checkout, never copied here) can execute its JAX->PyTorch
# converter (examples/convert_jax_model_to_pytorch.py) and its PyTorch policy on the CPU.
# Used by tests/parity/openpi_converter_golden.py.
#
#   usage: scripts/openpi_env.sh OPENPI_CHECKOUT [VENV_DIR]
#
# Pins follow openpi's pyproject.toml / uv.lock, except jax[cpu] instead of jax[cuda12]
# and no training/dataset-only packages (lerobot, wandb, tensorflow, gym-aloha).
# torch==2.7.1 comes from PyPI (the CUDA build; it runs on the CPU too).
# Idempotent: re-running re-checks the pins and re-applies openpi's transformers patch
# (openpi's README: copy src/openpi/models_pytorch/transformers_replace/* over the installed
# transformers package).
set -euo pipefail
openpi=${1:?usage: $0 OPENPI_CHECKOUT [VENV_DIR]}
openpi=$(cd "$openpi" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${2:-$here/.openpi-venv}
[ -f "$openpi/src/openpi/models_pytorch/transformers_replace/models/gemma/modeling_gemma.py" ] ||
  { echo "$openpi is not an openpi checkout" >&2; exit 1; }
[ -x "$venv/bin/python" ] || python3.11 -m venv "$venv"
py=$venv/bin/python
"$py" -m pip install --no-cache-dir -q --upgrade pip
"$py" -m pip install --no-cache-dir \
  "numpy==1.26.4" "ml-dtypes==0.4.1" "tensorstore==0.1.74" \
  "jax[cpu]==0.5.3" "jaxlib==0.5.3" "flax==0.10.2" "orbax-checkpoint==0.11.13" \
  "optax==0.2.4" "chex==0.1.90" "equinox==0.12.2" "augmax==0.4.1" "einops==0.8.1" \
  "jaxtyping==0.2.36" "beartype==0.19.0" "ml_collections==1.0.0" "treescope==0.1.9" \
  "etils[epath]==1.12.2" "fsspec==2025.3.0" "filelock==3.18.0" "tqdm-loggable==0.2" \
  "pydantic==2.11.5" "numpydantic==1.6.9" "dm-tree==0.1.8" "pillow==11.2.1" \
  "msgpack==1.1.0" "websockets==15.0.1" "typing-extensions==4.13.2" "rich==14.0.0" \
  "sentencepiece==0.2.0" "safetensors==0.5.3" "tyro==0.9.22" \
  "transformers==4.53.2" "torch==2.7.1"
# openpi's patched transformers modules (gemma adaRMS, paligemma, siglip).
site=$("$py" -c 'import os, transformers; print(os.path.dirname(transformers.__file__))')
cp -r "$openpi/src/openpi/models_pytorch/transformers_replace/"* "$site/"
"$py" -c 'from transformers.models.siglip import check; assert check.check_whether_transformers_replace_is_installed_correctly()' \
  && echo "openpi transformers_replace applied in $site"
echo "done: $venv (run openpi with PYTHONPATH=$openpi/src:$openpi/packages/openpi-client/src)"
