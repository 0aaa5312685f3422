/* The CUDA-only pieces of the native policy, behind a header without CUDA includes so that the
 * rest of inference/model builds (and runs on the CPU) without the CUDA toolkit. Built with
 * CUDA when PI0_MODEL_HAVE_CUDA is defined for pi0cudasupport.cpp; otherwise every function here
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

/* A high-priority CUDA stream from LibTorch's pool, owned by one opened policy so that two
 * policies in one process (two elements) do not serialize on one stream. Inert on the CPU. */
class OwnStream
{
public:
  /* On a CUDA device, takes a stream from the pool; otherwise (the CPU, or a build without
   * CUDA) holds nothing and LibTorch's current stream is used. */
  explicit OwnStream (const c10::Device &device);
  ~OwnStream ();
  OwnStream (const OwnStream &) = delete;
  OwnStream &operator= (const OwnStream &) = delete;
  /* Makes the stream that will read data on @data_device wait, on the GPU and not the host,
   * for a cudaEvent_t recorded elsewhere: this stream, or (without one) @data_device's current
   * stream. Throws pi0::Error naming the CUDA error, and in a build without CUDA. */
  void wait_event (void *cuda_event, const c10::Device &data_device) const;

private:
  friend class StreamScope;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/* Makes @stream (if any, and if it is a CUDA one) current for the scope: LibTorch then queues
 * everything on it. */
class StreamScope
{
public:
  explicit StreamScope (const OwnStream *stream);
  ~StreamScope ();
  StreamScope (const StreamScope &) = delete;
  StreamScope &operator= (const StreamScope &) = delete;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace pi0
