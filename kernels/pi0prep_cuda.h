/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The CUDA path of pi0prep (built only when CUDA is enabled), plus RAII wrappers for the CUDA
 * resources its callers hold. Same results as prep_cpu: the antialias filter works in the same
 * integer arithmetic, so the two agree bit for bit before the final float conversion. */

#include "pi0prep.h"

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

/* Pinned (page-locked) host memory, so cudaMemcpyAsync really is asynchronous. */
class PinnedBuffer
{
public:
  PinnedBuffer () = default;
  ~PinnedBuffer () { reset (); }
  PinnedBuffer (const PinnedBuffer &) = delete;
  PinnedBuffer &operator= (const PinnedBuffer &) = delete;
  cudaError_t ensure (size_t n)
  {
    if (n <= size_)
      return cudaSuccess;
    reset ();
    cudaError_t err = cudaMallocHost (&p_, n);
    if (err == cudaSuccess)
      size_ = n;
    return err;
  }
  void reset ()
  {
    if (p_)
      cudaFreeHost (p_);
    p_ = nullptr;
    size_ = 0;
  }
  uint8_t *data () const { return static_cast<uint8_t *> (p_); }
  size_t size () const { return size_; }

private:
  void *p_ = nullptr;
  size_t size_ = 0;
};

class DeviceBuffer
{
public:
  DeviceBuffer () = default;
  ~DeviceBuffer () { reset (); }
  DeviceBuffer (const DeviceBuffer &) = delete;
  DeviceBuffer &operator= (const DeviceBuffer &) = delete;
  cudaError_t ensure (size_t n)
  {
    if (n <= size_)
      return cudaSuccess;
    reset ();
    cudaError_t err = cudaMalloc (&p_, n);
    if (err == cudaSuccess)
      size_ = n;
    return err;
  }
  void reset ()
  {
    if (p_)
      cudaFree (p_);
    p_ = nullptr;
    size_ = 0;
  }
  uint8_t *data () const { return static_cast<uint8_t *> (p_); }
  size_t size () const { return size_; }

private:
  void *p_ = nullptr;
  size_t size_ = 0;
};

} // namespace pi0::prep
