#include "model/cuda_support.h"

#include "io/error.h"

#ifdef PI0_MODEL_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace pi0
{

#ifdef PI0_MODEL_HAVE_CUDA

bool
cuda_graphs_built ()
{
  return true;
}

void
synchronize_device (const c10::Device &device)
{
  if (device.is_cuda ())
    c10::cuda::getCurrentCUDAStream (device.index ()).synchronize ();
}

int64_t
cuda_peak_allocated_bytes (const c10::Device &device)
{
  if (!device.is_cuda ())
    return -1;
  auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats (device.index () < 0 ? 0 : device.index ());
  return stats.allocated_bytes[static_cast<size_t> (c10::CachingAllocator::StatType::AGGREGATE)]
      .peak;
}

void
cuda_reset_peak (const c10::Device &device)
{
  if (device.is_cuda ())
    c10::cuda::CUDACachingAllocator::resetPeakStats (device.index () < 0 ? 0 : device.index ());
}

struct CapturedGraph::Impl {
  at::cuda::CUDAGraph graph;
};

CapturedGraph::CapturedGraph (const std::function<void ()> &body, const c10::Device &device)
    : impl_ (std::make_unique<Impl> ())
{
  if (!device.is_cuda ())
    throw Error ("CapturedGraph: a CUDA device is required");
  c10::cuda::CUDAGuard device_guard (device);
  // Capture must not run on the legacy default stream: use a side stream ordered after the
  // current one, and order the current one after it again when done.
  auto current = c10::cuda::getCurrentCUDAStream (device.index ());
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool (false, device.index ());
  at::cuda::CUDAEvent ready;
  ready.record (current);
  ready.block (side);
  {
    c10::cuda::CUDAStreamGuard stream_guard (side);
    body (); // warm-up
    impl_->graph.capture_begin ({0, 0}, cudaStreamCaptureModeThreadLocal);
    body ();
    impl_->graph.capture_end ();
  }
  at::cuda::CUDAEvent captured;
  captured.record (side);
  captured.block (current);
}

CapturedGraph::~CapturedGraph () = default;

void
CapturedGraph::replay ()
{
  impl_->graph.replay ();
}

#else // no CUDA in this build

bool
cuda_graphs_built ()
{
  return false;
}
void
synchronize_device (const c10::Device &)
{
}
int64_t
cuda_peak_allocated_bytes (const c10::Device &)
{
  return -1;
}
void
cuda_reset_peak (const c10::Device &)
{
}

struct CapturedGraph::Impl {
};

CapturedGraph::CapturedGraph (const std::function<void ()> &, const c10::Device &)
{
  throw Error (
      "this build has no CUDA graph support (built without the CUDA toolkit or LibTorch CUDA)");
}
CapturedGraph::~CapturedGraph () = default;
void
CapturedGraph::replay ()
{
}

#endif

} // namespace pi0
