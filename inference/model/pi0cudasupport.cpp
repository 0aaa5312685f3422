#include "inference/model/pi0cudasupport.h"

#include "inference/io/pi0error.h"

#ifdef PI0_MODEL_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <optional>
#include <string>

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

struct OwnStream::Impl {
  std::optional<c10::cuda::CUDAStream> stream;
};

OwnStream::OwnStream (const c10::Device &device) : impl_ (std::make_unique<Impl> ())
{
  if (device.is_cuda ())
    impl_->stream = c10::cuda::getStreamFromPool (true, device.has_index () ? device.index () : 0);
}

OwnStream::~OwnStream () = default;

void
OwnStream::wait_event (void *cuda_event, const c10::Device &data_device) const
{
  // Without a stream of our own (a CPU policy reading CUDA images), the copy to the host runs on
  // the data's device's current stream: that one waits.
  cudaStream_t s;
  if (impl_->stream)
    s = impl_->stream->stream ();
  else if (data_device.is_cuda ())
    s = c10::cuda::getCurrentCUDAStream (data_device.has_index () ? data_device.index () : 0)
            .stream ();
  else
    throw Error ("a CUDA event came with images that are not in CUDA memory");
  cudaError_t err = cudaStreamWaitEvent (s, (cudaEvent_t)cuda_event, 0);
  if (err != cudaSuccess)
    throw Error (std::string ("cudaStreamWaitEvent: ") + cudaGetErrorName (err) + ": " +
                 cudaGetErrorString (err));
}

struct StreamScope::Impl {
  std::optional<c10::cuda::CUDAStreamGuard> guard;
};

StreamScope::StreamScope (const OwnStream *stream) : impl_ (std::make_unique<Impl> ())
{
  if (stream && stream->impl_->stream)
    impl_->guard.emplace (*stream->impl_->stream);
}

StreamScope::~StreamScope () = default;

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

struct OwnStream::Impl {
};

/* LibTorch's current stream is used as is. */
OwnStream::OwnStream (const c10::Device &) : impl_ (std::make_unique<Impl> ()) {}

OwnStream::~OwnStream () = default;

void
OwnStream::wait_event (void *, const c10::Device &) const
{
  throw Error ("the images come with a CUDA event, but this build has no CUDA support");
}

struct StreamScope::Impl {
};

StreamScope::StreamScope (const OwnStream *) : impl_ (std::make_unique<Impl> ()) {}

StreamScope::~StreamScope () = default;

#endif

} // namespace pi0
