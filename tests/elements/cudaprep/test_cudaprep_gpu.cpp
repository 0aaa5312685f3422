/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cudaprep on the GPU (suite 'gpu': skips itself without a CUDA device): the same observation
 * through device=cuda and device=cpu gives the same tensor, the CUDA one with a ready event. */

#include <cstring>

#include "tests/pi0testcudaprep.h"
#include "tests/pi0testprepreference.h"
#include "tests/pi0testgst.h"

#include <cuda_runtime.h>
#include <gst/pi0/pi0.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

using namespace pi0test;

namespace
{

GstBuffer *
observation (std::vector<Frame> &frames)
{
  static const char *names[] = {"main", "side", "top"};
  GstBuffer *buf = gst_buffer_new ();
  GstPi0ObservationMeta *meta = gst_buffer_add_pi0_observation_meta (buf);
  for (size_t i = 0; i < frames.size (); i++)
    add_frame_view (buf, meta, names[i], frames[i]);
  return buf;
}

std::vector<uint8_t>
run (const char *props, GstBuffer *buf, bool expect_cuda)
{
  HarnessPtr h (gst_harness_new_parse ((std::string ("cudaprep ") + props).c_str ()));
  gst_harness_set_src_caps_str (h.get (), GST_PI0_OBSERVATION_MEDIA_TYPE ",views=3");
  EXPECT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_OK);
  BufferPtr out (gst_harness_pull (h.get ()));
  GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (out.get ());
  EXPECT_NE (tm, nullptr);
  if (!tm)
    return {};
  const size_t n = gst_pi0_tensor_meta_get_nbytes (tm);
  std::vector<uint8_t> host (n);
  if (expect_cuda) {
    EXPECT_EQ (tm->device, GST_PI0_DEVICE_CUDA);
    EXPECT_NE (tm->ready_event, nullptr);
    EXPECT_EQ (cudaEventSynchronize ((cudaEvent_t)tm->ready_event), cudaSuccess);
    EXPECT_EQ (cudaMemcpy (host.data (), tm->data, n, cudaMemcpyDeviceToHost), cudaSuccess);
  } else {
    EXPECT_EQ (tm->device, GST_PI0_DEVICE_CPU);
    std::memcpy (host.data (), tm->data, n);
  }
  return host;
}

} // namespace

TEST (CudaPrepGpu, CudaTensorEqualsCpuTensor)
{
  int n = 0;
  if (cudaGetDeviceCount (&n) != cudaSuccess || n == 0)
    GTEST_SKIP () << "no CUDA device";
  std::mt19937 rng (11);
  for (const char *filter : {"antialias", "pil", "bilinear"}) {
    std::vector<Frame> frames = {random_frame (rng, pi0::prep::Format::RGB, 1920, 1080, 0),
                                 random_frame (rng, pi0::prep::Format::NV12, 1280, 720, 0),
                                 random_frame (rng, pi0::prep::Format::BGRx, 641, 479, 0)};
    const std::string f = std::string (" filter=") + filter;
    /* Several frames: the second and later reuse pooled blocks and staging. */
    for (int round = 0; round < 3; round++) {
      std::vector<uint8_t> gpu = run (("device=cuda" + f).c_str (), observation (frames), true);
      std::vector<uint8_t> cpu = run (("device=cpu" + f).c_str (), observation (frames), false);
      ASSERT_EQ (gpu.size (), cpu.size ());
      const float *a = reinterpret_cast<const float *> (gpu.data ());
      const float *b = reinterpret_cast<const float *> (cpu.data ());
      size_t bad = 0;
      for (size_t i = 0; i < gpu.size () / 4; i++)
        bad += std::fabs (a[i] - b[i]) > 1e-3f;
      EXPECT_EQ (bad, 0u) << filter << " round " << round;
    }
  }
}
