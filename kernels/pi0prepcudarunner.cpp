/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* CudaRunner: the views of one observation on the GPU in parallel, as cudaprep runs them. One
 * stream per view, host frames through pinned staging, the per-view kernels (CudaPrep), and one
 * event for the whole output tensor, taken from a pool of device blocks. */

#include "kernels/pi0prepcuda.h"

#include <cstring>
#include <memory>

namespace pi0::prep
{

namespace
{

void *
device_alloc (size_t n)
{
  void *p = nullptr;
  return cudaMalloc (&p, n) == cudaSuccess ? p : nullptr;
}

void
device_free (void *p)
{
  cudaFree (p);
}

void
destroy_event (void *e)
{
  cudaEventDestroy (static_cast<cudaEvent_t> (e));
}

} // namespace

CudaRunner::~CudaRunner ()
{
  synchronize ();
  close ();
}

cudaError_t
CudaRunner::init (int device, int max_views, const char **what)
{
  cudaError_t err;
  device_ = device;
  *what = "selecting the device";
  if ((err = cudaSetDevice (device)) != cudaSuccess)
    return err;
  prep_ = std::make_unique<CudaPrep> (max_views);
  views_.clear ();
  for (int v = 0; v < max_views; v++) {
    auto cv = std::make_unique<View> ();
    *what = "creating a stream";
    if ((err = cv->stream.create ()) != cudaSuccess)
      return err;
    *what = "creating an event";
    if ((err = cv->done.create ()) != cudaSuccess ||
        (err = cv->upload_done.create ()) != cudaSuccess)
      return err;
    views_.push_back (std::move (cv));
  }
  pool_ = BlockPool::make (device_alloc, device_free);
  return cudaSuccess;
}

BlockPool::Block *
CudaRunner::run (const Params &p, const Image *views, const bool *in_device, int n,
                 cudaError_t *err, const char **what)
{
  const size_t vb = view_bytes (p);
  BlockPool::Block *blk = n > 0 && n <= (int)views_.size () ? pool_->acquire (vb * n) : nullptr;
  auto fail = [&] (const char *doing, cudaError_t e) -> BlockPool::Block * {
    *what = doing;
    *err = e;
    if (blk)
      BlockPool::release (blk);
    return nullptr;
  };
  if (!blk)
    return fail (n > (int)views_.size () ? "running more views than were set up"
                                         : "allocating the output",
                 n > (int)views_.size () ? cudaErrorInvalidValue : cudaErrorMemoryAllocation);
  cudaEvent_t out_event = nullptr;
  cudaError_t e = cudaEventCreateWithFlags (&out_event, cudaEventDisableTiming);
  if (e != cudaSuccess)
    return fail ("creating the output event", e);
  blk->event = out_event;
  blk->destroy_event = destroy_event;

  for (int v = 0; v < n; v++) {
    View &cv = *views_[v];
    Image im = views[v];
    if (im.planes[0] && !in_device[v]) {
      /* Host memory: each plane into pinned staging, uploaded on this view's stream. */
      const int np = format_n_planes (im.format);
      size_t offs[3], total = 0;
      for (int pl = 0; pl < np; pl++) {
        offs[pl] = total;
        total += (plane_span (im.format, im.height, pl, im.strides[pl]) + 255) / 256 * 256;
      }
      if ((e = cudaEventSynchronize (cv.upload_done.get ())) != cudaSuccess)
        return fail ("waiting for the previous upload", e);
      if ((e = cv.staging.ensure (total)) != cudaSuccess)
        return fail ("allocating pinned staging memory", e);
      if ((e = cv.input.ensure (total)) != cudaSuccess)
        return fail ("allocating device input memory", e);
      for (int pl = 0; pl < np; pl++) {
        std::memcpy (cv.staging.data () + offs[pl], im.planes[pl],
                     plane_span (im.format, im.height, pl, im.strides[pl]));
        im.planes[pl] = cv.input.data () + offs[pl];
      }
      if ((e = cudaMemcpyAsync (cv.input.data (), cv.staging.data (), total, cudaMemcpyHostToDevice,
                                cv.stream.get ())) != cudaSuccess)
        return fail ("uploading a frame", e);
      if ((e = cudaEventRecord (cv.upload_done.get (), cv.stream.get ())) != cudaSuccess)
        return fail ("recording an event", e);
    }
    if ((e = prep_->run_view (p, v, im, static_cast<uint8_t *> (blk->data) + v * vb,
                              cv.stream.get ())) != cudaSuccess)
      return fail ("running the preprocessing kernel", e);
    if ((e = cudaEventRecord (cv.done.get (), cv.stream.get ())) != cudaSuccess)
      return fail ("recording an event", e);
  }
  /* One event for the whole tensor: view 0's stream waits for the others on the GPU. */
  cudaStream_t s0 = views_[0]->stream.get ();
  for (int v = 1; v < n; v++)
    if ((e = cudaStreamWaitEvent (s0, views_[v]->done.get (), 0)) != cudaSuccess)
      return fail ("joining the view streams", e);
  if ((e = cudaEventRecord (out_event, s0)) != cudaSuccess)
    return fail ("recording the output event", e);
  *err = cudaSuccess;
  return blk;
}

void
CudaRunner::synchronize ()
{
  for (auto &v : views_)
    cudaStreamSynchronize (v->stream.get ());
}

} // namespace pi0::prep
