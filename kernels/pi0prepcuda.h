/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The CUDA path of pi0prep (built only when CUDA is enabled), plus RAII wrappers for the CUDA
 * resources its callers hold. Same results as prep_cpu: the antialias filter works in the same
 * integer arithmetic, so the two agree bit for bit before the final float conversion. */

#include "kernels/pi0prep.h"

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pi0::prep
{

/* "cudaErrorXxx (description)" */
std::string cuda_error_text (cudaError_t err);

/* Owns one view slot's device weight tables; re-uploads them only when the geometry changes
 * (a new frame size or new parameters), so steady-state frames allocate nothing. */
class CudaPrep
{
public:
  explicit CudaPrep (int max_views);
  ~CudaPrep ();
  CudaPrep (const CudaPrep &) = delete;
  CudaPrep &operator= (const CudaPrep &) = delete;

  /* Enqueues view @slot on @stream: @img's planes are device pointers (nullptr planes[0] = a
   * masked view, pad value everywhere); @out is view_bytes(p) bytes of device memory. Returns
   * the first CUDA error (launch errors included); the work itself runs asynchronously. */
  cudaError_t run_view (const Params &p, int slot, const Image &img, void *out,
                        cudaStream_t stream);

private:
  struct Slot;
  std::vector<std::unique_ptr<Slot>> slots_;
};

/* Convenience: every view on its own stream (streams[v]); out holds n_views * view_bytes. */
cudaError_t prep_cuda (const Params &p, const Image *views, int n_views, void *out,
                       const cudaStream_t *streams, CudaPrep &prep);

/* ---- RAII ---- */

class CudaStream
{
public:
  CudaStream () = default;
  ~CudaStream () { reset (); }
  CudaStream (const CudaStream &) = delete;
  CudaStream &operator= (const CudaStream &) = delete;
  cudaError_t create ()
  {
    reset ();
    return cudaStreamCreateWithFlags (&s_, cudaStreamNonBlocking);
  }
  void reset ()
  {
    if (s_)
      cudaStreamDestroy (s_);
    s_ = nullptr;
  }
  cudaStream_t get () const { return s_; }

private:
  cudaStream_t s_ = nullptr;
};

class CudaEvent
{
public:
  CudaEvent () = default;
  ~CudaEvent () { reset (); }
  CudaEvent (const CudaEvent &) = delete;
  CudaEvent &operator= (const CudaEvent &) = delete;
  cudaError_t create (bool timing = false)
  {
    reset ();
    return cudaEventCreateWithFlags (&e_, timing ? cudaEventDefault : cudaEventDisableTiming);
  }
  void reset ()
  {
    if (e_)
      cudaEventDestroy (e_);
    e_ = nullptr;
  }
  cudaEvent_t get () const { return e_; }

private:
  cudaEvent_t e_ = nullptr;
};

/* Memory that only grows: ensure() keeps what is there when it is big enough. @Alloc and @Free
 * are cudaMallocHost/cudaFreeHost (pinned host memory, so cudaMemcpyAsync really is
 * asynchronous) or cudaMalloc/cudaFree (device memory). */
template <cudaError_t (*Alloc) (void **, size_t), cudaError_t (*Free) (void *)> class CudaBuffer
{
public:
  CudaBuffer () = default;
  ~CudaBuffer () { reset (); }
  CudaBuffer (const CudaBuffer &) = delete;
  CudaBuffer &operator= (const CudaBuffer &) = delete;
  cudaError_t ensure (size_t n)
  {
    if (n <= size_)
      return cudaSuccess;
    reset ();
    cudaError_t err = Alloc (&p_, n);
    if (err == cudaSuccess)
      size_ = n;
    return err;
  }
  void reset ()
  {
    if (p_)
      Free (p_);
    p_ = nullptr;
    size_ = 0;
  }
  uint8_t *data () const { return static_cast<uint8_t *> (p_); }
  size_t size () const { return size_; }

private:
  void *p_ = nullptr;
  size_t size_ = 0;
};

inline cudaError_t
cuda_malloc_host (void **p, size_t n)
{
  return cudaMallocHost (p, n);
}
inline cudaError_t
cuda_malloc (void **p, size_t n)
{
  return cudaMalloc (p, n);
}
using PinnedBuffer = CudaBuffer<cuda_malloc_host, cudaFreeHost>;
using DeviceBuffer = CudaBuffer<cuda_malloc, cudaFree>;

/* The device's primary context, retained while held: the context cudart works in, which
 * GStreamer's CUDA elements can share (gst_cuda_context_new_wrapped) so that their frames are
 * readable in place. The driver API is found at run time, so a build with CUDA still loads
 * (and runs on the CPU) where there is no driver. */
class PrimaryContext
{
public:
  PrimaryContext () = default;
  ~PrimaryContext () { reset (); }
  PrimaryContext (const PrimaryContext &) = delete;
  PrimaryContext &operator= (const PrimaryContext &) = delete;
  /* false (and get() nullptr) without a driver or when it refuses. */
  bool retain (int device);
  void reset ();
  void *get () const { return ctx_; } /* a CUcontext */

private:
  void *ctx_ = nullptr;
  int device_ = 0;
};

/* ---- the views of one observation, in parallel ---- */

/* What cudaprep does on a GPU, apart from GStreamer: one stream per view, frames in host memory
 * copied into pinned staging and uploaded on their view's stream (the previous upload of a view
 * must be done before its staging is rewritten: an event says so), each view's kernel on its
 * stream, then one event for the whole tensor, recorded on view 0's stream after it waited for
 * the others on the GPU, and the output from a pool of device blocks. No CPU thread waits for the
 * GPU except on the staging of a view whose previous upload is still running. */
class CudaRunner
{
public:
  CudaRunner () = default;
  ~CudaRunner ();
  CudaRunner (const CudaRunner &) = delete;
  CudaRunner &operator= (const CudaRunner &) = delete;

  /* Streams, events and kernels' tables for up to @max_views views on @device (made current).
   * On an error, @what says what was being done. */
  cudaError_t init (int device, int max_views, const char **what);
  int device () const { return device_; }

  /* Enqueues @n views (@in_device[v]: @views[v]'s planes are device pointers; otherwise host
   * pointers, plane_span() bytes each). Returns the output block, n * view_bytes(p) bytes of
   * device memory whose event (block->event, a cudaEvent_t) is recorded once every view is
   * written, or nullptr with the error and what was being done. */
  BlockPool::Block *run (const Params &p, const Image *views, const bool *in_device, int n,
                         cudaError_t *err, const char **what);

  /* Waits for every stream (before the streams and buffers go). */
  void synchronize ();
  /* Blocks still held downstream are freed as they come back. */
  void close () { if (pool_) pool_->close (); }

private:
  struct View {
    CudaStream stream;
    CudaEvent done;
    CudaEvent upload_done; /* staging may be rewritten once this has fired */
    PinnedBuffer staging;
    DeviceBuffer input;
  };
  int device_ = 0;
  std::unique_ptr<CudaPrep> prep_;
  std::vector<std::unique_ptr<View>> views_;
  std::shared_ptr<BlockPool> pool_;
};

} // namespace pi0::prep
