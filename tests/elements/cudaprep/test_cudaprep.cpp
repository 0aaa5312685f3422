/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cudaprep: tensor meta contents against the plain reference, properties, and every bad input
 * of issue 3 (unsupported format, device=cuda without a GPU, auto without one, strides and
 * sizes that do not fit). Observation buffers are built here with the meta API, so these tests
 * do not depend on pi0viewmux. */

#include <cstring>

#include "tests/pi0testcudaprep.h"
#include "tests/pi0testprepcases.h"
#include "tests/pi0testprepreference.h"
#include "tests/pi0testgst.h"

#include <gst/pi0/pi0.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <atomic>
#include <string>

using namespace pi0test;

namespace
{

bool
have_cuda_device ()
{
#ifdef HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount (&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

GstBuffer *
new_observation ()
{
  GstBuffer *buf = gst_buffer_new ();
  gst_buffer_add_pi0_observation_meta (buf);
  return buf;
}

HarnessPtr
make_harness (const char *props = "device=cpu")
{
  std::string desc = std::string ("cudaprep ") + props;
  HarnessPtr h (gst_harness_new_parse (desc.c_str ()));
  gst_harness_set_src_caps_str (h.get (), GST_PI0_OBSERVATION_MEDIA_TYPE ",views=3");
  return h;
}

void
expect_tensor_matches (GstPi0TensorMeta *tm, const pi0::prep::Params &p, guint view, const Frame *f)
{
  const std::vector<double> ref = reference (p, f);
  const size_t vb = pi0::prep::view_bytes (p);
  const uint8_t *data = static_cast<const uint8_t *> (tm->data) + view * vb;
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size (); i++) {
    const double d = std::fabs (out_value (p, data, i) - ref[i]);
    worst = std::max (worst, d);
    bad += d > tolerance (p, ref[i]);
  }
  EXPECT_EQ (bad, 0u) << "view " << view << ": worst error " << worst;
}

const pi0::prep::Format kYuvFormats[] = {pi0::prep::Format::NV12, pi0::prep::Format::NV21,
                                         pi0::prep::Format::I420, pi0::prep::Format::YV12,
                                         pi0::prep::Format::Y42B, pi0::prep::Format::Y444,
                                         pi0::prep::Format::YUY2, pi0::prep::Format::UYVY};

} // namespace

TEST (CudaPrep, TensorMetaMatchesReferenceAndViewsPassThrough)
{
  std::mt19937 rng (1);
  Frame a = random_frame (rng, pi0::prep::Format::RGB, 641, 479, 29);
  Frame b = random_frame (rng, pi0::prep::Format::NV12, 1280, 720, 0);
  GstBuffer *buf = new_observation ();
  GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (buf);
  add_frame_view (buf, meta, "main", a);
  gst_pi0_observation_meta_add_view (meta, "side"); /* masked */
  add_frame_view (buf, meta, "top", b);
  GstMemory *mem0 = gst_buffer_peek_memory (buf, 0);

  HarnessPtr h = make_harness ();
  ASSERT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_OK);
  BufferPtr out (gst_harness_pull (h.get ()));
  ASSERT_TRUE (out);
  /* In place: the same memories, untouched. */
  EXPECT_EQ (gst_buffer_n_memory (out.get ()), 2u);
  EXPECT_EQ (gst_buffer_peek_memory (out.get (), 0), mem0);
  GstMapInfo map;
  ASSERT_TRUE (gst_buffer_map_range (out.get (), 0, 1, &map, GST_MAP_READ));
  std::vector<uint8_t> first (a.planes[0]);
  EXPECT_EQ (std::memcmp (map.data, first.data (), first.size ()), 0);
  gst_buffer_unmap (out.get (), &map);
  ASSERT_NE (gst_buffer_get_pi0_observation_meta (out.get ()), nullptr);

  GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (out.get ());
  ASSERT_NE (tm, nullptr);
  EXPECT_EQ (tm->dtype, GST_PI0_DTYPE_FLOAT32);
  EXPECT_EQ (tm->device, GST_PI0_DEVICE_CPU);
  ASSERT_EQ (tm->n_dims, 4u);
  EXPECT_EQ (tm->shape[0], 3);
  EXPECT_EQ (tm->shape[1], 3);
  EXPECT_EQ (tm->shape[2], 224);
  EXPECT_EQ (tm->shape[3], 224);
  ASSERT_EQ (tm->n_masks, 3u);
  EXPECT_TRUE (tm->image_masks[0]);
  EXPECT_FALSE (tm->image_masks[1]);
  EXPECT_TRUE (tm->image_masks[2]);
  EXPECT_EQ (tm->ready_event, nullptr);
  pi0::prep::Params p;
  expect_tensor_matches (tm, p, 0, &a);
  expect_tensor_matches (tm, p, 1, nullptr);
  expect_tensor_matches (tm, p, 2, &b);
}

TEST (CudaPrep, PropertiesShapeTheTensor)
{
  std::mt19937 rng (2);
  Frame a = random_frame (rng, pi0::prep::Format::BGRx, 333, 250);
  GstBuffer *buf = new_observation ();
  add_frame_view (buf, gst_buffer_get_pi0_observation_meta (buf), "main", a);

  HarnessPtr h = make_harness ("device=cpu width=64 height=100 resize=crop filter=bilinear "
                               "normalize=imagenet dtype=bfloat16 n-threads=3");
  ASSERT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_OK);
  BufferPtr out (gst_harness_pull (h.get ()));
  GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (out.get ());
  ASSERT_NE (tm, nullptr);
  EXPECT_EQ (tm->dtype, GST_PI0_DTYPE_BFLOAT16);
  EXPECT_EQ (tm->shape[0], 1);
  EXPECT_EQ (tm->shape[2], 100);
  EXPECT_EQ (tm->shape[3], 64);
  pi0::prep::Params p;
  p.out_width = 64;
  p.out_height = 100;
  p.resize = pi0::prep::Resize::Crop;
  p.filter = pi0::prep::Filter::Bilinear;
  p.dtype = pi0::prep::DType::BFloat16;
  const float m[3] = {0.485f, 0.456f, 0.406f}, s[3] = {0.229f, 0.224f, 0.225f};
  std::memcpy (p.mean, m, sizeof m);
  std::memcpy (p.std, s, sizeof s);
  expect_tensor_matches (tm, p, 0, &a);
}

TEST (CudaPrep, CustomMeanAndStd)
{
  ElementPtr e (gst_element_factory_make ("cudaprep", nullptr));
  ASSERT_TRUE (e);
  gst_util_set_object_arg (G_OBJECT (e.get ()), "mean", "<0.25, 0.5, 0.75>");
  gst_util_set_object_arg (G_OBJECT (e.get ()), "std", "<0.1, 0.2, 0.4>");
  gst_util_set_object_arg (G_OBJECT (e.get ()), "normalize", "custom");
  GValue v = G_VALUE_INIT;
  g_value_init (&v, GST_TYPE_ARRAY);
  g_object_get_property (G_OBJECT (e.get ()), "std", &v);
  ASSERT_EQ (gst_value_array_get_size (&v), 3u);
  EXPECT_FLOAT_EQ (g_value_get_float (gst_value_array_get_value (&v, 2)), 0.4f);
  g_value_unset (&v);

  /* A constant grey 50x50 view: out = (128/255 - mean) / std per channel. */
  Frame f;
  f.format = pi0::prep::Format::RGB;
  f.width = f.height = 50;
  f.strides[0] = 150;
  f.planes[0].assign (150 * 50, 128);
  GstBuffer *buf = new_observation ();
  add_frame_view (buf, gst_buffer_get_pi0_observation_meta (buf), "main", f);
  HarnessPtr h (gst_harness_new_with_element (e.get (), "sink", "src"));
  gst_harness_set_src_caps_str (h.get (), GST_PI0_OBSERVATION_MEDIA_TYPE ",views=1");
  g_object_set (e.get (), "device", 2 /* cpu */, "width", 8, "height", 8, nullptr);
  ASSERT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_OK);
  BufferPtr out (gst_harness_pull (h.get ()));
  GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (out.get ());
  ASSERT_NE (tm, nullptr);
  const float *d = static_cast<const float *> (tm->data);
  const double mean[3] = {0.25, 0.5, 0.75}, sd[3] = {0.1, 0.2, 0.4};
  for (int c = 0; c < 3; c++)
    EXPECT_NEAR (d[c * 64 + 27], (128.0 / 255.0 - mean[c]) / sd[c], 1e-5) << "channel " << c;
}

/* Every YUV format, odd sizes and padded strides, through the element (GstVideoInfo to
 * pi0::prep::Image, as a muxer's view would be). */
TEST (CudaPrep, EveryYuvFormatMatchesReference)
{
  std::mt19937 rng (4);
  for (pi0::prep::Format fmt : kYuvFormats) {
    Frame a = random_frame (rng, fmt, 161, 121, 7);
    GstBuffer *buf = new_observation ();
    add_frame_view (buf, gst_buffer_get_pi0_observation_meta (buf), "main", a);
    HarnessPtr h = make_harness ();
    ASSERT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_OK) << pi0::prep::format_name (fmt);
    BufferPtr out (gst_harness_pull (h.get ()));
    GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (out.get ());
    ASSERT_NE (tm, nullptr) << pi0::prep::format_name (fmt);
    ASSERT_EQ (tm->n_masks, 1u);
    EXPECT_TRUE (tm->image_masks[0]);
    SCOPED_TRACE (pi0::prep::format_name (fmt));
    expect_tensor_matches (tm, pi0::prep::Params (), 0, &a);
  }
}

/* The reference (and through test_kernels, the kernels) reads each YUV layout as GStreamer's
 * own unpack functions do: the same Y, U and V for every pixel, odd sizes and padded strides. */
TEST (CudaPrep, ReferenceReadsYuvAsGStreamerUnpacksIt)
{
  std::mt19937 rng (5);
  const int sizes[][2] = {{37, 23}, {64, 48}};
  for (pi0::prep::Format fmt : kYuvFormats)
    for (auto &sz : sizes) {
      const int w = sz[0], h = sz[1];
      Frame f = random_frame (rng, fmt, w, h);
      const GstVideoFormatInfo *info = gst_video_format_get_info (to_gst (fmt));
      ASSERT_NE (info, nullptr);
      ASSERT_EQ (GST_VIDEO_FORMAT_INFO_N_PLANES (info), (guint)pi0::prep::format_n_planes (fmt));
      gpointer data[GST_VIDEO_MAX_PLANES] = {};
      gint stride[GST_VIDEO_MAX_PLANES] = {};
      for (int p = 0; p < pi0::prep::format_n_planes (fmt); p++) {
        data[p] = f.planes[p].data ();
        stride[p] = (gint)f.strides[p];
      }
      std::vector<uint8_t> ayuv (4 * size_t (w));
      int bad = 0;
      for (int y = 0; y < h; y++) {
        info->unpack_func (info, GST_VIDEO_PACK_FLAG_NONE, ayuv.data (), data, stride, 0, y, w);
        for (int x = 0; x < w; x++) {
          int Y, U, V;
          ref_yuv (f, x, y, Y, U, V);
          if (Y != ayuv[4 * x + 1] || U != ayuv[4 * x + 2] || V != ayuv[4 * x + 3]) {
            if (bad++ == 0)
              ADD_FAILURE () << pi0::prep::format_name (fmt) << " " << w << "x" << h << " at (" << x
                             << "," << y << "): reference " << Y << "," << U << "," << V
                             << ", GStreamer " << int (ayuv[4 * x + 1]) << ","
                             << int (ayuv[4 * x + 2]) << "," << int (ayuv[4 * x + 3]);
          }
        }
      }
      EXPECT_EQ (bad, 0) << pi0::prep::format_name (fmt) << " " << w << "x" << h;
    }
}

namespace
{

/* A copy of view @i of @buf, with the YUV matrix its colorimetry names. */
Frame
frame_of_view (GstBuffer *buf, const GstPi0ObservationMeta *meta, guint i, pi0::prep::Format fmt)
{
  Frame f{};
  GstVideoFrame vf;
  if (!gst_pi0_observation_meta_map_view (meta, buf, i, &vf, GST_MAP_READ)) {
    ADD_FAILURE () << "cannot map view " << i;
    return f;
  }
  f.format = fmt;
  f.width = GST_VIDEO_FRAME_WIDTH (&vf);
  f.height = GST_VIDEO_FRAME_HEIGHT (&vf);
  for (int p = 0; p < pi0::prep::format_n_planes (fmt); p++) {
    f.strides[p] = GST_VIDEO_FRAME_PLANE_STRIDE (&vf, p);
    const uint8_t *d = static_cast<const uint8_t *> (GST_VIDEO_FRAME_PLANE_DATA (&vf, p));
    f.planes[p].assign (d, d + f.strides[p] * plane_rows (fmt, f.height, p));
  }
  if (is_yuv (fmt)) { /* RGB and GRAY8 views have no YUV matrix */
    gdouble kr = 0, kb = 0;
    EXPECT_TRUE (gst_video_color_matrix_get_Kr_Kb (vf.info.colorimetry.matrix, &kr, &kb));
    f.yuv = pi0::prep::make_yuv_matrix (kr, kb,
                                        vf.info.colorimetry.range == GST_VIDEO_COLOR_RANGE_0_255);
  }
  gst_video_frame_unmap (&vf);
  return f;
}

void
expect_observation_matches (GstBuffer *buf, const pi0::prep::Format *formats, guint n_views,
                            const pi0::prep::Params &p = pi0::prep::Params ())
{
  GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (buf);
  ASSERT_NE (meta, nullptr);
  GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (buf);
  ASSERT_NE (tm, nullptr);
  ASSERT_EQ (gst_pi0_observation_meta_get_n_views (meta), n_views);
  ASSERT_EQ (tm->shape[0], (gint64)n_views);
  for (guint i = 0; i < n_views; i++) {
    const GstPi0View *v = gst_pi0_observation_meta_get_view (meta, i);
    ASSERT_TRUE (v->flags & GST_PI0_VIEW_FLAG_VALID) << v->name;
    EXPECT_TRUE (tm->image_masks[i]) << v->name;
    const Frame f = frame_of_view (buf, meta, i, formats[i]);
    SCOPED_TRACE (v->name);
    ASSERT_EQ (tm->shape[2], p.out_height);
    ASSERT_EQ (tm->shape[3], p.out_width);
    expect_tensor_matches (tm, p, i, &f);
  }
}

} // namespace

/* What most USB (UVC) cameras give raw, YUY2, next to a YV12 view, from pi0viewmux: cudaprep
 * negotiates and each observation's tensor matches the reference of the frames it carries. */
TEST (CudaPrep, Yuy2ViewThroughViewMux)
{
  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch (
      "pi0viewmux name=mux ! cudaprep device=cpu ! appsink name=out sync=false "
      "videotestsrc num-buffers=3 ! "
      "video/x-raw,format=YUY2,width=161,height=121,framerate=30/1,colorimetry=bt601 ! mux.main "
      "videotestsrc num-buffers=3 pattern=smpte100 ! "
      "video/x-raw,format=YV12,width=90,height=67,framerate=30/1,colorimetry=bt709 ! mux.side",
      &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  ObjectPtr<GstElement> sink (gst_bin_get_by_name (GST_BIN (pipe.get ()), "out"));
  ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  const pi0::prep::Format formats[] = {pi0::prep::Format::YUY2, pi0::prep::Format::YV12};
  int n = 0;
  for (;;) {
    /* A bounded wait: a refused view would stop the stream without EOS. */
    GstSample *sample = nullptr;
    g_signal_emit_by_name (sink.get (), "try-pull-sample", 10 * GST_SECOND, &sample);
    if (!sample)
      break;
    expect_observation_matches (gst_sample_get_buffer (sample), formats, 2);
    gst_sample_unref (sample);
    n++;
  }
  gboolean eos = FALSE;
  g_object_get (sink.get (), "eos", &eos, nullptr);
  ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
  MessagePtr error = pop_message (bus.get (), GST_MESSAGE_ERROR);
  EXPECT_FALSE (error) << message_text (error.get ());
  EXPECT_TRUE (eos);
  EXPECT_EQ (n, 3);
}

namespace
{

/* Runs "pi0viewmux ! cudaprep device=cpu width=W height=H ! appsink" on one videotestsrc camera
 * of @caps (2 frames); with @check, compares each observation's tensor with the reference.
 * Returns the number of observations, -1 after an error message. */
int
run_one_camera (const char *caps, pi0::prep::Format format, const pi0::prep::Params &p, bool check)
{
  std::string desc =
      "pi0viewmux name=mux ! cudaprep device=cpu width=" + std::to_string (p.out_width) +
      " height=" + std::to_string (p.out_height) +
      " ! appsink name=out sync=false videotestsrc num-buffers=2 ! " + caps + " ! mux.main";
  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch (desc, &parse_error);
  if (!pipe) {
    ADD_FAILURE () << parse_error;
    return -1;
  }
  ObjectPtr<GstElement> sink (gst_bin_get_by_name (GST_BIN (pipe.get ()), "out"));
  gst_element_set_state (pipe.get (), GST_STATE_PLAYING);
  int n = 0;
  for (;;) {
    GstSample *sample = nullptr;
    g_signal_emit_by_name (sink.get (), "try-pull-sample", 60 * GST_SECOND, &sample);
    if (!sample)
      break;
    if (check)
      expect_observation_matches (gst_sample_get_buffer (sample), &format, 1, p);
    else
      EXPECT_NE (gst_buffer_get_pi0_tensor_meta (gst_sample_get_buffer (sample)), nullptr);
    gst_sample_unref (sample);
    n++;
  }
  ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
  MessagePtr error = pop_message (bus.get (), GST_MESSAGE_ERROR);
  EXPECT_FALSE (error) << message_text (error.get ());
  gst_element_set_state (pipe.get (), GST_STATE_NULL);
  return error ? -1 : n;
}

struct CameraCase {
  const char *caps;
  pi0::prep::Format format;
  int out_w, out_h;
};

const CameraCase kIssueCameras[] = {
    {"video/x-raw,format=RGB,width=640,height=480,framerate=30/1", pi0::prep::Format::RGB, 1, 1},
    {"video/x-raw,format=NV12,width=7680,height=4320,framerate=30/1", pi0::prep::Format::NV12, 32,
     32},
    {"video/x-raw,format=GRAY8,width=2,height=2500,framerate=30/1", pi0::prep::Format::GRAY8, 32,
     32},
};

} // namespace

/* Issue 16 item 1: these crashed the process (SIGSEGV, a stack overflow in the vertical pass).
 * Each pipeline first runs in a child process, so that a crash fails this test instead of
 * killing the binary, then here, where its tensors are checked against the reference. */
TEST (CudaPrep, TinyOutputsAndLargeDownscalesThroughViewMux)
{
  GTEST_FLAG_SET (death_test_style, "threadsafe");
  for (const CameraCase &c : kIssueCameras) {
    pi0::prep::Params p;
    p.out_width = c.out_w;
    p.out_height = c.out_h;
    SCOPED_TRACE (c.caps);
    EXPECT_EXIT (std::exit (run_one_camera (c.caps, c.format, p, false) == 2 ? 0 : 1),
                 ::testing::ExitedWithCode (0), "");
    if (HasFailure ())
      continue; /* a crash would take this process down too */
    EXPECT_EQ (run_one_camera (c.caps, c.format, p, true), 2);
  }
}

/* Issue 16 item 12: normalize=pi0 through the element is openpi's float32 x / 255 * 2 - 1, bit
 * for bit, on every level (a 16x16 view holding all 256 in each channel, output 16x16). */
TEST (CudaPrep, Pi0NormalizationIsOpenpisOnAll256Levels)
{
  for (const char *filter : {"antialias", "pil", "bilinear"}) {
    Frame f = levels_frame ();
    GstBuffer *buf = new_observation ();
    add_frame_view (buf, gst_buffer_get_pi0_observation_meta (buf), "main", f);
    HarnessPtr h =
        make_harness ((std::string ("device=cpu width=16 height=16 filter=") + filter).c_str ());
    ASSERT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_OK);
    BufferPtr out (gst_harness_pull (h.get ()));
    GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (out.get ());
    ASSERT_NE (tm, nullptr);
    pi0::prep::Params p;
    p.out_width = p.out_height = 16;
    std::string first;
    EXPECT_EQ (count_level_mismatches (
                   p, tm->data, [] (int v, int) { return openpi_normalize (v); }, first),
               0)
        << filter << ": " << first;
  }
}

TEST (CudaPrep, UnsupportedFormatIsNotNegotiatedAndNamed)
{
  GstBuffer *buf = new_observation ();
  GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (buf);
  GstPi0View *v = gst_pi0_observation_meta_add_view (meta, "main");
  gst_video_info_set_format (&v->info, GST_VIDEO_FORMAT_NV16, 64, 48);
  v->flags = GST_PI0_VIEW_FLAG_VALID;
  v->mem_index = 0;
  v->n_mem = 1;
  gst_buffer_append_memory (buf, gst_allocator_alloc (nullptr, v->info.size, nullptr));

  HarnessPtr h = make_harness ();
  ObjectPtr<GstBus> bus (gst_bus_new ());
  gst_element_set_bus (h->element, bus.get ());
  EXPECT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_NOT_NEGOTIATED);
  EXPECT_EQ (gst_harness_buffers_in_queue (h.get ()), 0u);
  MessagePtr msg = pop_message (bus.get (), GST_MESSAGE_ERROR);
  ASSERT_TRUE (msg);
  EXPECT_NE (message_text (msg.get ()).find ("NV16"), std::string::npos)
      << message_text (msg.get ());
}

TEST (CudaPrep, FrameLargerThanItsMemoryIsAnErrorNotARead)
{
  for (int variant = 0; variant < 3; variant++) {
    GstBuffer *buf = new_observation ();
    GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (buf);
    GstPi0View *v = gst_pi0_observation_meta_add_view (meta, "main");
    gst_video_info_set_format (&v->info, GST_VIDEO_FORMAT_RGB, 640, 480);
    v->flags = GST_PI0_VIEW_FLAG_VALID;
    v->mem_index = 0;
    v->n_mem = 1;
    gsize mem_size = v->info.size;
    const char *expect;
    if (variant == 0) {
      v->info.stride[0] = 4000; /* stride * rows > memory */
      expect = "do not hold";
    } else if (variant == 1) {
      mem_size = v->info.size - 1; /* one byte short */
      expect = "do not hold";
    } else {
      v->info.stride[0] = 640 * 3 - 2; /* shorter than a row: would read into the next */
      expect = "shorter than a row";
    }
    gst_buffer_append_memory (buf, gst_allocator_alloc (nullptr, mem_size, nullptr));
    HarnessPtr h = make_harness ();
    ObjectPtr<GstBus> bus (gst_bus_new ());
    gst_element_set_bus (h->element, bus.get ());
    EXPECT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_ERROR) << "variant " << variant;
    EXPECT_EQ (gst_harness_buffers_in_queue (h.get ()), 0u);
    MessagePtr msg = pop_message (bus.get (), GST_MESSAGE_ERROR);
    ASSERT_TRUE (msg) << "variant " << variant;
    EXPECT_NE (message_text (msg.get ()).find (expect), std::string::npos)
        << message_text (msg.get ());
  }
}

/* A view wider than the 65536 pixels a side that the kernels take is an error naming its size
 * (the observation caps do not carry view sizes, so the first frame finds it). */
TEST (CudaPrep, FrameAboveTheSizeLimitIsAnErrorNamingIt)
{
  std::mt19937 rng (6);
  Frame f = random_frame (rng, pi0::prep::Format::GRAY8, 65537, 1, 0);
  GstBuffer *buf = new_observation ();
  add_frame_view (buf, gst_buffer_get_pi0_observation_meta (buf), "main", f);
  HarnessPtr h = make_harness ();
  ObjectPtr<GstBus> bus (gst_bus_new ());
  gst_element_set_bus (h->element, bus.get ());
  EXPECT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_ERROR);
  EXPECT_EQ (gst_harness_buffers_in_queue (h.get ()), 0u);
  MessagePtr msg = pop_message (bus.get (), GST_MESSAGE_ERROR);
  ASSERT_TRUE (msg);
  EXPECT_NE (message_text (msg.get ())
                 .find ("View 'main' (65537x1 GRAY8) cannot be read: frame 65537x1 is larger than "
                        "the 65536 pixels per side supported"),
             std::string::npos)
      << message_text (msg.get ());
}

TEST (CudaPrep, BufferWithoutObservationMetaIsAnError)
{
  HarnessPtr h = make_harness ();
  ObjectPtr<GstBus> bus (gst_bus_new ());
  gst_element_set_bus (h->element, bus.get ());
  EXPECT_EQ (gst_harness_push (h.get (), gst_buffer_new_allocate (nullptr, 16, nullptr)),
             GST_FLOW_ERROR);
  MessagePtr msg = pop_message (bus.get (), GST_MESSAGE_ERROR);
  ASSERT_TRUE (msg);
  EXPECT_NE (message_text (msg.get ()).find ("GstPi0ObservationMeta"), std::string::npos);
}

TEST (CudaPrep, DeviceCudaWithoutGpuFailsAtStart)
{
  if (have_cuda_device ())
    GTEST_SKIP () << "a CUDA device is present";
  ElementPtr e (gst_element_factory_make ("cudaprep", nullptr));
  gst_util_set_object_arg (G_OBJECT (e.get ()), "device", "cuda");
  ObjectPtr<GstBus> bus (gst_bus_new ());
  gst_element_set_bus (e.get (), bus.get ());
  EXPECT_EQ (gst_element_set_state (e.get (), GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  MessagePtr msg = pop_message (bus.get (), GST_MESSAGE_ERROR);
  ASSERT_TRUE (msg);
  const std::string text = message_text (msg.get ());
  EXPECT_NE (text.find ("No usable CUDA device"), std::string::npos) << text;
  gst_element_set_state (e.get (), GST_STATE_NULL);
}

namespace
{
std::atomic<int> cpu_info_lines{0};

void
count_cpu_info (GstDebugCategory *cat, GstDebugLevel level, const gchar *, const gchar *, gint,
                GObject *, GstDebugMessage *message, gpointer)
{
  if (level == GST_LEVEL_INFO && std::strcmp (gst_debug_category_get_name (cat), "cudaprep") == 0 &&
      std::strstr (gst_debug_message_get (message), "using the CPU path"))
    cpu_info_lines++;
}
} // namespace

TEST (CudaPrep, AutoWithoutGpuUsesCpuAndSaysSoOnceAtInfo)
{
  if (have_cuda_device ())
    GTEST_SKIP () << "a CUDA device is present";
  if (!gst_debug_is_active ())
    gst_debug_set_active (TRUE);
  gst_debug_set_threshold_for_name ("cudaprep", GST_LEVEL_INFO);
  gst_debug_add_log_function (count_cpu_info, nullptr, nullptr);
  cpu_info_lines = 0;
  {
    std::mt19937 rng (3);
    HarnessPtr h = make_harness ("device=auto");
    for (int cycle = 0; cycle < 2; cycle++) {
      for (int i = 0; i < 3; i++) {
        Frame f = random_frame (rng, pi0::prep::Format::I420, 99, 77);
        GstBuffer *buf = new_observation ();
        add_frame_view (buf, gst_buffer_get_pi0_observation_meta (buf), "main", f);
        ASSERT_EQ (gst_harness_push (h.get (), buf), GST_FLOW_OK);
        BufferPtr out (gst_harness_pull (h.get ()));
        GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (out.get ());
        ASSERT_NE (tm, nullptr);
        EXPECT_EQ (tm->device, GST_PI0_DEVICE_CPU);
        expect_tensor_matches (tm, pi0::prep::Params (), 0, &f);
      }
      /* Restart: still said only once. */
      gst_element_set_state (h->element, GST_STATE_NULL);
      gst_element_set_state (h->element, GST_STATE_PLAYING);
    }
  }
  gst_debug_remove_log_function (count_cpu_info);
  gst_debug_set_threshold_for_name ("cudaprep", GST_LEVEL_NONE);
  EXPECT_EQ (cpu_info_lines.load (), 1);
}

TEST (CudaPrep, EnumsAreRegisteredWithNicks)
{
  ElementPtr e (gst_element_factory_make ("cudaprep", nullptr));
  const struct {
    const char *prop, *nick;
  } cases[] = {{"resize", "stretch"},     {"filter", "bilinear"}, {"filter", "pil"},
               {"normalize", "imagenet"}, {"dtype", "float16"},   {"device", "cpu"}};
  for (auto &c : cases) {
    gst_util_set_object_arg (G_OBJECT (e.get ()), c.prop, c.nick);
    GParamSpec *ps = g_object_class_find_property (G_OBJECT_GET_CLASS (e.get ()), c.prop);
    ASSERT_NE (ps, nullptr);
    EXPECT_TRUE (ps->flags & (GST_PARAM_MUTABLE_PLAYING | GST_PARAM_MUTABLE_READY)) << c.prop;
    gint val;
    g_object_get (e.get (), c.prop, &val, nullptr);
    GEnumValue *ev = g_enum_get_value (G_PARAM_SPEC_ENUM (ps)->enum_class, val);
    ASSERT_NE (ev, nullptr);
    EXPECT_STREQ (ev->value_nick, c.nick);
  }
}

TEST (CudaPrep, NonPositiveStdIsRefusedAndKept)
{
  ElementPtr e (gst_element_factory_make ("cudaprep", nullptr));
  ExpectLog expect ("std must be > 0");
  gst_util_set_object_arg (G_OBJECT (e.get ()), "std", "<0.2, 0.0, 0.3>");
  EXPECT_EQ (expect.count (), 1);
  GValue v = G_VALUE_INIT;
  g_value_init (&v, GST_TYPE_ARRAY);
  g_object_get_property (G_OBJECT (e.get ()), "std", &v);
  for (guint i = 0; i < 3; i++)
    EXPECT_FLOAT_EQ (g_value_get_float (gst_value_array_get_value (&v, i)), 0.5f);
  g_value_unset (&v);
}
