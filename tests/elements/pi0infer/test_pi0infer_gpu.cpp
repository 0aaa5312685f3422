/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0infer on CUDA (suite 'gpu'; skips itself without a CUDA device): the element's CUDA path
 * agrees with its CPU path, and it waits for cudaprep's CUDA event on the GPU: a model input
 * written at the end of a deliberately slow stream of GPU work is read complete. */

#include "tests/pi0testgst.h"

#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include "inference/model/pi0policy.h"

#ifdef PI0_INFER_HAVE_CUDA
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <cmath>
#include <vector>

using namespace pi0test;

namespace
{

constexpr int TINY = 32;

/* [3,3,32,32] images from @seed, host memory, all views valid, 7-joint state. */
std::vector<float>
host_images (guint32 seed)
{
  std::vector<float> v (3 * 3 * TINY * TINY);
  GRand *r = g_rand_new_with_seed (seed);
  for (auto &x : v)
    x = (float)g_rand_double_range (r, -1.0, 1.0);
  g_rand_free (r);
  return v;
}

GstBuffer *
observation_with (GstPi0TensorStorage *st, gpointer ready_event)
{
  GstBuffer *buf = gst_buffer_new ();
  GST_BUFFER_PTS (buf) = 0;
  GstPi0ObservationMeta *om = gst_buffer_add_pi0_observation_meta (buf);
  om->sequence = 1;
  om->observation_time = 0;
  for (const char *n : {"main", "side", "top"})
    gst_pi0_observation_meta_add_view (om, n)->flags = GST_PI0_VIEW_FLAG_VALID;
  const gfloat state[7] = {0.1f, -0.2f, 0.3f, 0.f, 0.5f, -0.6f, 1.f};
  gst_pi0_observation_meta_set_state (om, state, 7, 0, GST_PI0_STATE_FLAG_NONE);
  const gint64 shape[4] = {3, 3, TINY, TINY};
  GstPi0TensorMeta *tm = gst_buffer_add_pi0_tensor_meta (buf, st, GST_PI0_DTYPE_FLOAT32, 4, shape);
  const gboolean masks[3] = {TRUE, TRUE, TRUE};
  gst_pi0_tensor_meta_set_masks (tm, masks, 3);
  tm->ready_event = ready_event;
  return buf;
}

std::vector<float>
run (const char *device, GstBuffer *obs)
{
  GstElement *e = gst_element_factory_make ("pi0infer", nullptr);
  g_object_set (e, "model", "builtin:pi0-tiny", "precision", 2 /* fp32 */, nullptr);
  gst_util_set_object_arg (G_OBJECT (e), "device", device);
  HarnessPtr h (gst_harness_new_with_element (e, "sink", "src"));
  gst_object_unref (e);
  gst_harness_set_src_caps_str (h.get (), GST_PI0_OBSERVATION_MEDIA_TYPE ",views=(int)3");
  std::vector<float> out;
  if (gst_harness_push (h.get (), obs) != GST_FLOW_OK)
    return out;
  BufferPtr b (gst_harness_pull (h.get ()));
  GstPi0ActionMeta *am = b ? gst_buffer_get_pi0_action_meta (b.get ()) : nullptr;
  if (am)
    out.assign (am->actions, am->actions + (size_t)am->horizon * am->dim);
  return out;
}

double
rel_err (const std::vector<float> &a, const std::vector<float> &b)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size () && i < b.size (); i++) {
    num = std::max (num, (double)std::fabs (a[i] - b[i]));
    den = std::max (den, (double)std::fabs (b[i]));
  }
  return den > 0 ? num / den : num;
}

GstBuffer *
host_observation (guint32 seed)
{
  std::vector<float> img = host_images (seed);
  GstPi0TensorStorage *st = gst_pi0_tensor_storage_new_host (img.size () * sizeof (float));
  memcpy (gst_pi0_tensor_storage_get_data (st), img.data (), img.size () * sizeof (float));
  GstBuffer *b = observation_with (st, nullptr);
  gst_pi0_tensor_storage_unref (st);
  return b;
}

} // namespace

TEST (Pi0InferGpu, CudaAgreesWithCpu)
{
  if (!pi0::cuda_available ())
    GTEST_SKIP () << "no CUDA device";
  std::vector<float> cpu = run ("cpu", host_observation (5));
  std::vector<float> gpu = run ("cuda", host_observation (5));
  ASSERT_FALSE (cpu.empty ());
  ASSERT_EQ (gpu.size (), cpu.size ());
  EXPECT_LE (rel_err (gpu, cpu), 1e-4);
}

#ifdef PI0_INFER_HAVE_CUDA
namespace
{
struct DeviceTensor {
  at::Tensor t;
  cudaEvent_t event = nullptr;
};
void
free_device_tensor (gpointer p)
{
  auto d = static_cast<DeviceTensor *> (p);
  if (d->event)
    cudaEventDestroy (d->event);
  delete d;
}
} // namespace

/* The images are written at the end of ~tens of milliseconds of matmuls on a side stream, and
 * only the event says when. Reading them earlier would give other values. */
TEST (Pi0InferGpu, WaitsOnTheTensorEventOnTheGpu)
{
  if (!pi0::cuda_available ())
    GTEST_SKIP () << "no CUDA device";
  std::vector<float> expect = run ("cpu", host_observation (9));
  ASSERT_FALSE (expect.empty ());

  auto *d = new DeviceTensor ();
  std::vector<float> img = host_images (9);
  at::Tensor host = at::from_blob (img.data (), {3, 3, TINY, TINY}, at::kFloat).clone ();
  d->t = at::full ({3, 3, TINY, TINY}, 1000.0f, at::TensorOptions ().device (at::kCUDA));
  ASSERT_EQ (cudaEventCreateWithFlags (&d->event, cudaEventDisableTiming), cudaSuccess);
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool (false, 0);
  {
    c10::cuda::CUDAStreamGuard g (side);
    at::Tensor m = at::randn ({2048, 2048}, at::TensorOptions ().device (at::kCUDA));
    for (int i = 0; i < 40; i++)
      m = at::tanh (m.matmul (m));
    /* 0 * a value that exists only when the slow work is done. */
    d->t.copy_ (host.to (at::kCUDA, true) + m.sum () * 0.0f);
    ASSERT_EQ (cudaEventRecord (d->event, side.stream ()), cudaSuccess);
  }
  GstPi0TensorStorage *st = gst_pi0_tensor_storage_new (
      d->t.data_ptr (), d->t.nbytes (), GST_PI0_DEVICE_CUDA, 0, d, free_device_tensor);
  std::vector<float> got = run ("cuda", observation_with (st, d->event));
  gst_pi0_tensor_storage_unref (st);
  ASSERT_EQ (got.size (), expect.size ());
  EXPECT_LE (rel_err (got, expect), 1e-4);
}
#endif
