/* The CUDA-only pieces of the native policy, behind a header without CUDA includes so that the
 * rest of inference/model builds (and runs on the CPU) without the CUDA toolkit. Built with
 * CUDA when PI0_MODEL_HAVE_CUDA is defined for cuda_support.cpp; otherwise every function here
 * reports "not available". */
#pragma once

#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace pi0 {

class Pi0Model;
struct PrefixCache;

/* True when this build can capture CUDA graphs (LibTorch CUDA + CUDA toolkit). */
bool cuda_graphs_built();

/* Blocks the host until `device`'s current stream is idle (no-op on the CPU). */
void synchronize_device(const c10::Device &device);

/* Peak bytes allocated by LibTorch's CUDA caching allocator since the last reset; -1 on CPU. */
int64_t cuda_peak_allocated_bytes(const c10::Device &device);
void cuda_reset_peak(const c10::Device &device);

/* The 10 denoising steps captured once as a CUDA graph over fixed buffers, then replayed: each
 * replay is one launch, with no host synchronisation inside the loop. The buffers (cache, state,
 * x) must stay alive and keep their addresses; callers copy new data into them before replay().
 * x holds the noise before and the actions after. */
class DenoiseGraph {
 public:
  DenoiseGraph(const Pi0Model &model, const PrefixCache &cache, const at::Tensor &state, at::Tensor &x);
  ~DenoiseGraph();
  DenoiseGraph(const DenoiseGraph &) = delete;
  DenoiseGraph &operator=(const DenoiseGraph &) = delete;
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pi0
