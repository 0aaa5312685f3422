/* The CUDA-only pieces of the native policy, behind a header without CUDA includes so that the
 * rest of inference/model builds (and runs on the CPU) without the CUDA toolkit. Built with
 * CUDA when PI0_MODEL_HAVE_CUDA is defined for cuda_support.cpp; otherwise every function here
 * reports "not available". */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace pi0
{

/* True when this build can capture CUDA graphs (LibTorch CUDA + CUDA toolkit). */
bool cuda_graphs_built ();

/* Blocks the host until `device`'s current stream is idle (no-op on the CPU). */
void synchronize_device (const c10::Device &device);

/* Peak bytes allocated by LibTorch's CUDA caching allocator since the last reset; -1 on CPU. */
int64_t cuda_peak_allocated_bytes (const c10::Device &device);
void cuda_reset_peak (const c10::Device &device);

/* A piece of GPU work captured once as a CUDA graph over fixed buffers, then replayed: each
 * replay is one launch, with no host synchronisation inside. The body runs once eagerly first
 * (a warm-up that also creates cuBLAS workspaces, which must not happen during capture), then is
 * captured in thread-local mode so that other threads' CUDA calls (other elements of a pipeline)
 * are not disturbed. Every tensor the body reads or writes must stay alive at the same address;
 * callers copy new inputs into those buffers before replay(). */
class CapturedGraph
{
public:
  CapturedGraph (const std::function<void ()> &body, const c10::Device &device);
  ~CapturedGraph ();
  CapturedGraph (const CapturedGraph &) = delete;
  CapturedGraph &operator= (const CapturedGraph &) = delete;
  void replay ();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace pi0
