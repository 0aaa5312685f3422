#include "model/cuda_support.h"

#include "io/error.h"
#include "model/pi0_model.h"

#ifdef PI0_MODEL_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace pi0 {

#ifdef PI0_MODEL_HAVE_CUDA

bool cuda_graphs_built() { return true; }

void synchronize_device(const c10::Device &device) {
  if (device.is_cuda())
    c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
}

int64_t cuda_peak_allocated_bytes(const c10::Device &device) {
  if (!device.is_cuda())
    return -1;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

void cuda_reset_peak(const c10::Device &device) {
  if (device.is_cuda())
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
}

struct DenoiseGraph::Impl {
  at::cuda::CUDAGraph graph;
};

DenoiseGraph::DenoiseGraph(const Pi0Model &model, const PrefixCache &cache, const at::Tensor &state, at::Tensor &x)
    : impl_(std::make_unique<Impl>()) {
  if (!x.is_cuda())
    throw Error("DenoiseGraph: the buffers must be on a CUDA device");
  c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor saved = x.clone();
  // Capture must not run on the legacy default stream; a warm-up pass on the same side stream
  // first initialises cuBLAS handles and workspaces, which must not be created during capture.
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, x.device().index());
  auto current = c10::cuda::getCurrentCUDAStream(x.device().index());
  at::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(side);
  {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    model.denoise_loop(cache, state, x);
    x.copy_(saved);
    impl_->graph.capture_begin();
    model.denoise_loop(cache, state, x);
    impl_->graph.capture_end();
  }
  at::cuda::CUDAEvent captured;
  captured.record(side);
  captured.block(current);
  // The capture recorded the kernels without running them: x still holds the noise.
}

DenoiseGraph::~DenoiseGraph() = default;

void DenoiseGraph::replay() { impl_->graph.replay(); }

#else  // no CUDA in this build

bool cuda_graphs_built() { return false; }
void synchronize_device(const c10::Device &) {}
int64_t cuda_peak_allocated_bytes(const c10::Device &) { return -1; }
void cuda_reset_peak(const c10::Device &) {}

struct DenoiseGraph::Impl {};

DenoiseGraph::DenoiseGraph(const Pi0Model &, const PrefixCache &, const at::Tensor &, at::Tensor &) {
  throw Error("this build has no CUDA graph support (built without the CUDA toolkit or LibTorch CUDA)");
}
DenoiseGraph::~DenoiseGraph() = default;
void DenoiseGraph::replay() {}

#endif

}  // namespace pi0
