#!/bin/sh
# The inference/model device check, prepared for a session that has the GPU machine (none had
# one so far). Run from the repository root with the build directory carried, e.g. through the
# device tool: command "sh bench/model_gpu_check.sh build-model", carry ["build-model"].
#
# It runs the gpu suite binary (CUDA vs CPU fp32/bf16, CUDA graph == eager) and the issue's
# benchmark: full-size pi0, random weights, bf16, 3 views, 48 tokens, 10 steps, graph and eager.
# Numbers go to docs/perf.md ("model" section). Never asserted.
#
# The build links LibTorch by absolute rpath into this machine's .venv; on another machine the
# same torch version (2.11) is found through its Python and LD_LIBRARY_PATH.
set -u
B=${1:-build-model}
TORCH_LIB=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
if [ -n "$TORCH_LIB" ]; then
  LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
fi
export PI0_SOURCE_ROOT="$PWD" PI0_BUILD_ROOT="$PWD/$B" GST_REGISTRY="${TMPDIR:-/tmp}/pi0-gpu-check.registry"
TOOL="$B/tools/pi0-model/pi0-model"
nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
echo "== gpu suite"
"$B/tests/test_model_gpu" || echo "test_model_gpu FAILED"
echo "== pi0-tiny on CUDA (fp32, bf16)"
"$TOOL" bench --config pi0-tiny --device cuda --dtype fp32 --iters 50
"$TOOL" bench --config pi0-tiny --device cuda --dtype bf16 --iters 50
echo "== pi0 full size, bf16, CUDA graph (total (no stage sync) = one replay per chunk)"
"$TOOL" bench --config pi0 --device cuda --dtype bf16 --iters 30 --warmup 5
echo "== pi0 full size, bf16, eager"
"$TOOL" bench --config pi0 --device cuda --dtype bf16 --iters 30 --warmup 5 --no-graph
