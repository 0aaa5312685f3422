/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The metas of libgstpi0-1.0: accessors, deep copies, survival through queue/tee/copy,
 * tensor storage ownership, the action finite check, and the docs' pad-probe example. */

#include "tests/pi0testgst.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace pi0test;

/* docs/examples/observation-probe.c, compiled into this test. */
extern "C" {
typedef struct {
  guint64 observations;
  guint64 masked_views;
  guint64 stale_states;
  guint64 action_chunks;
  gfloat first_action[32];
} Pi0ProbeCounts;
gulong pi0_example_add_probe (GstPad *pad, Pi0ProbeCounts *counts);
}

namespace
{

/* A two-view observation: an 8x4 RGB frame (one memory) and a masked view. */
GstBuffer *
make_observation ()
{
  GstBuffer *buf = gst_buffer_new ();
  GstVideoInfo info;
  gst_video_info_set_format (&info, GST_VIDEO_FORMAT_RGB, 8, 4);
  gst_buffer_append_memory (buf,
                            gst_allocator_alloc (nullptr, GST_VIDEO_INFO_SIZE (&info), nullptr));
  gst_buffer_memset (buf, 0, 0x42, GST_VIDEO_INFO_SIZE (&info));

  GstPi0ObservationMeta *m = gst_buffer_add_pi0_observation_meta (buf);
  m->sequence = 7;
  m->observation_time = 5 * GST_SECOND;
  GstPi0View *v = gst_pi0_observation_meta_add_view (m, "main");
  v->flags = GST_PI0_VIEW_FLAG_VALID;
  v->info = info;
  v->pts = 1;
  v->capture_time = 2;
  v->mem_index = 0;
  v->n_mem = 1;
  gst_pi0_observation_meta_add_view (m, "side");
  const gfloat state[3] = {0.5f, -1.f, 2.f};
  gst_pi0_observation_meta_set_state (m, state, 3, 4 * GST_SECOND, GST_PI0_STATE_FLAG_STALE);
  return buf;
}

void
expect_observation (GstBuffer *buf)
{
  GstPi0ObservationMeta *m = gst_buffer_get_pi0_observation_meta (buf);
  ASSERT_NE (m, nullptr);
  EXPECT_EQ (m->version, (guint)GST_PI0_META_VERSION);
  EXPECT_EQ (m->sequence, 7u);
  EXPECT_EQ (m->observation_time, 5 * GST_SECOND);
  ASSERT_EQ (gst_pi0_observation_meta_get_n_views (m), 2u);
  EXPECT_EQ (gst_pi0_observation_meta_find_view (m, "side"), 1);
  EXPECT_EQ (gst_pi0_observation_meta_find_view (m, "top"), -1);
  EXPECT_TRUE (gst_pi0_observation_meta_get_view (m, 0)->flags & GST_PI0_VIEW_FLAG_VALID);
  EXPECT_FALSE (gst_pi0_observation_meta_get_view (m, 1)->flags & GST_PI0_VIEW_FLAG_VALID);
  EXPECT_EQ (gst_pi0_observation_meta_get_view (m, 2), nullptr);
  guint dim = 0;
  const gfloat *st = gst_pi0_observation_meta_get_state (m, &dim);
  ASSERT_EQ (dim, 3u);
  EXPECT_EQ (st[1], -1.f);
  EXPECT_TRUE (m->state_flags & GST_PI0_STATE_FLAG_PRESENT);
  EXPECT_TRUE (m->state_flags & GST_PI0_STATE_FLAG_STALE);
  GstVideoFrame f;
  ASSERT_TRUE (gst_pi0_observation_meta_map_view (m, buf, 0, &f, GST_MAP_READ));
  EXPECT_EQ (GST_VIDEO_FRAME_WIDTH (&f), 8);
  EXPECT_EQ (((guint8 *)GST_VIDEO_FRAME_PLANE_DATA (&f, 0))[0], 0x42);
  gst_video_frame_unmap (&f);
}

struct StorageProbe {
  int freed = 0;
};

void
storage_freed (gpointer data)
{
  auto p = static_cast<StorageProbe *> (data);
  p->freed++;
}

} // namespace

TEST (Pi0Meta, RegisteredOnceByName)
{
  EXPECT_EQ (gst_meta_get_info ("GstPi0ObservationMeta"), GST_PI0_OBSERVATION_META_INFO);
  EXPECT_EQ (gst_meta_get_info ("GstPi0TensorMeta"), GST_PI0_TENSOR_META_INFO);
  EXPECT_EQ (gst_meta_get_info ("GstPi0ActionMeta"), GST_PI0_ACTION_META_INFO);
  /* No tags: generic transforms must keep them. */
  for (GType api : {GST_PI0_OBSERVATION_META_API_TYPE, GST_PI0_TENSOR_META_API_TYPE,
                    GST_PI0_ACTION_META_API_TYPE}) {
    const gchar *const *tags = gst_meta_api_type_get_tags (api);
    EXPECT_TRUE (tags == nullptr || tags[0] == nullptr);
  }
}

TEST (Pi0Meta, ObservationAccessorsAndDeepCopy)
{
  BufferPtr buf (make_observation ());
  expect_observation (buf.get ());

  BufferPtr copy (gst_buffer_copy (buf.get ()));
  expect_observation (copy.get ());
  GstPi0ObservationMeta *a = gst_buffer_get_pi0_observation_meta (buf.get ());
  GstPi0ObservationMeta *b = gst_buffer_get_pi0_observation_meta (copy.get ());
  EXPECT_NE (a->state, b->state); /* deep: each copy owns its state */

  /* make_writable on a shared buffer copies it, meta included. */
  GstBuffer *shared = gst_buffer_ref (buf.get ());
  shared = gst_buffer_make_writable (shared);
  EXPECT_NE (shared, buf.get ());
  expect_observation (shared);
  gst_buffer_unref (shared);
}

TEST (Pi0Meta, RegionCopyDropsObservationMeta)
{
  BufferPtr buf (make_observation ());
  /* The views index memories: part of a buffer cannot keep them. */
  BufferPtr part (gst_buffer_copy_region (buf.get (), GST_BUFFER_COPY_ALL, 0, 10));
  EXPECT_EQ (gst_buffer_get_pi0_observation_meta (part.get ()), nullptr);
  BufferPtr whole (gst_buffer_copy_region (buf.get (), GST_BUFFER_COPY_ALL, 0, -1));
  EXPECT_NE (gst_buffer_get_pi0_observation_meta (whole.get ()), nullptr);
}

TEST (Pi0Meta, MapViewNeverReadsPastTheMemory)
{
  BufferPtr buf (make_observation ());
  GstPi0ObservationMeta *m = gst_buffer_get_pi0_observation_meta (buf.get ());
  GstVideoFrame f;
  m->views[0].info.stride[0] = 1000; /* 4 rows of 1000 bytes do not fit in 96 */
  EXPECT_FALSE (gst_pi0_observation_meta_map_view (m, buf.get (), 0, &f, GST_MAP_READ));
  m->views[0].info.stride[0] = 24;
  m->views[0].n_mem = 2; /* more memories than the buffer has */
  EXPECT_FALSE (gst_pi0_observation_meta_map_view (m, buf.get (), 0, &f, GST_MAP_READ));
  m->views[0].n_mem = 1;
  EXPECT_FALSE (
      gst_pi0_observation_meta_map_view (m, buf.get (), 1, &f, GST_MAP_READ)); /* masked */
  EXPECT_FALSE (gst_pi0_observation_meta_map_view (m, buf.get (), 5, &f, GST_MAP_READ));
  EXPECT_TRUE (gst_pi0_observation_meta_map_view (m, buf.get (), 0, &f, GST_MAP_READ));
  gst_video_frame_unmap (&f);
}

TEST (Pi0Meta, ViewNamesAreBounded)
{
  BufferPtr buf (gst_buffer_new ());
  GstPi0ObservationMeta *m = gst_buffer_add_pi0_observation_meta (buf.get ());
  {
    ExpectLog crit ("strlen (name) < GST_PI0_VIEW_NAME_LEN");
    EXPECT_EQ (gst_pi0_observation_meta_add_view (m, "a-name-far-too-long-for-a-view"), nullptr);
    EXPECT_EQ (crit.count (), 1);
  }
  for (int i = 0; i < GST_PI0_MAX_VIEWS; i++)
    EXPECT_NE (gst_pi0_observation_meta_add_view (m, "v"), nullptr);
  EXPECT_EQ (gst_pi0_observation_meta_add_view (m, "v"), nullptr);
}

TEST (Pi0Meta, TensorStorageIsSharedAndFreedOnce)
{
  StorageProbe probe;
  const gint64 shape[4] = {2, 3, 4, 5};
  static float data[2 * 3 * 4 * 5];
  GstPi0TensorStorage *st = gst_pi0_tensor_storage_new (data, sizeof (data), GST_PI0_DEVICE_CPU, 0,
                                                        &probe, storage_freed);
  {
    BufferPtr buf (gst_buffer_new ());
    GstPi0TensorMeta *m =
        gst_buffer_add_pi0_tensor_meta (buf.get (), st, GST_PI0_DTYPE_FLOAT32, 4, shape);
    ASSERT_NE (m, nullptr);
    gst_pi0_tensor_storage_unref (st); /* the meta holds the only reference now */
    const gboolean masks[2] = {TRUE, FALSE};
    gst_pi0_tensor_meta_set_masks (m, masks, 2);
    EXPECT_EQ (gst_pi0_tensor_meta_get_n_elements (m), 120u);
    EXPECT_EQ (gst_pi0_tensor_meta_get_nbytes (m), 480u);
    EXPECT_EQ (m->data, (gpointer)data);

    BufferPtr copy (gst_buffer_copy (buf.get ()));
    GstPi0TensorMeta *c = gst_buffer_get_pi0_tensor_meta (copy.get ());
    ASSERT_NE (c, nullptr);
    EXPECT_EQ (c->storage, m->storage);
    EXPECT_EQ (c->data, m->data);
    EXPECT_TRUE (c->image_masks[0]);
    EXPECT_FALSE (c->image_masks[1]);
    EXPECT_EQ (c->n_dims, 4u);
    EXPECT_EQ (c->shape[3], 5);
    buf.reset ();
    EXPECT_EQ (probe.freed, 0); /* the copy still uses it */
  }
  EXPECT_EQ (probe.freed, 1);
}

TEST (Pi0Meta, TensorLargerThanStorageIsRefused)
{
  GstPi0TensorStorage *st = gst_pi0_tensor_storage_new_host (100);
  BufferPtr buf (gst_buffer_new ());
  const gint64 shape[2] = {10, 10};
  EXPECT_EQ (gst_buffer_add_pi0_tensor_meta (buf.get (), st, GST_PI0_DTYPE_FLOAT32, 2, shape),
             nullptr);
  EXPECT_NE (gst_buffer_add_pi0_tensor_meta (buf.get (), st, GST_PI0_DTYPE_UINT8, 2, shape),
             nullptr);
  gst_pi0_tensor_storage_unref (st);
  EXPECT_STREQ (gst_pi0_dtype_to_string (GST_PI0_DTYPE_BFLOAT16), "bfloat16");
  EXPECT_EQ (gst_pi0_dtype_size (GST_PI0_DTYPE_FLOAT16), 2u);
}

TEST (Pi0Meta, ActionMetaFlagsNonFinite)
{
  BufferPtr buf (gst_buffer_new ());
  std::vector<float> vals (50 * 7, 0.25f);
  GstPi0ActionMeta *m =
      gst_buffer_add_pi0_action_meta (buf.get (), 50, 7, vals.data (), "pi0-test");
  ASSERT_NE (m, nullptr);
  EXPECT_FALSE (m->flags & GST_PI0_ACTION_FLAG_NON_FINITE);
  EXPECT_STREQ (m->model_id, "pi0-test");
  EXPECT_EQ (gst_pi0_action_meta_get_action (m, 49)[6], 0.25f);
  EXPECT_EQ (gst_pi0_action_meta_get_action (m, 50), nullptr);

  for (float bad : {NAN, INFINITY, -INFINITY}) {
    m->actions[123] = bad;
    EXPECT_FALSE (gst_pi0_action_meta_check_finite (m));
    EXPECT_TRUE (m->flags & GST_PI0_ACTION_FLAG_NON_FINITE);
    m->actions[123] = 0.f;
    EXPECT_TRUE (gst_pi0_action_meta_check_finite (m));
    EXPECT_FALSE (m->flags & GST_PI0_ACTION_FLAG_NON_FINITE);
  }
  vals[0] = NAN;
  BufferPtr buf2 (gst_buffer_new ());
  GstPi0ActionMeta *m2 = gst_buffer_add_pi0_action_meta (buf2.get (), 50, 7, vals.data (), nullptr);
  EXPECT_TRUE (m2->flags & GST_PI0_ACTION_FLAG_NON_FINITE);
  EXPECT_STREQ (m2->model_id, "");

  BufferPtr copy (gst_buffer_copy (buf2.get ()));
  GstPi0ActionMeta *c = gst_buffer_get_pi0_action_meta (copy.get ());
  ASSERT_NE (c, nullptr);
  EXPECT_NE (c->actions, m2->actions);
  EXPECT_TRUE (std::isnan (c->actions[0]));
  EXPECT_TRUE (c->flags & GST_PI0_ACTION_FLAG_NON_FINITE);
}

/* The stage stamps start unset and survive a copy, so the sink can measure each stage. */
TEST (Pi0Meta, StageStampsStartUnsetAndAreCopied)
{
  BufferPtr buf (gst_buffer_new ());
  GstPi0ObservationMeta *om = gst_buffer_add_pi0_observation_meta (buf.get ());
  GstPi0TensorStorage *st = gst_pi0_tensor_storage_new_host (16);
  const gint64 shape[1] = {4};
  GstPi0TensorMeta *tm =
      gst_buffer_add_pi0_tensor_meta (buf.get (), st, GST_PI0_DTYPE_FLOAT32, 1, shape);
  gst_pi0_tensor_storage_unref (st);
  float v[2] = {0, 0};
  GstPi0ActionMeta *am = gst_buffer_add_pi0_action_meta (buf.get (), 1, 2, v, "m");
  EXPECT_EQ (om->muxed_time, GST_CLOCK_TIME_NONE);
  EXPECT_EQ (tm->prepared_time, GST_CLOCK_TIME_NONE);
  EXPECT_EQ (am->done_time, GST_CLOCK_TIME_NONE);
  EXPECT_EQ (am->model_time, GST_CLOCK_TIME_NONE);
  om->muxed_time = 11;
  tm->prepared_time = 22;
  am->done_time = 33;
  am->model_time = 44;
  BufferPtr copy (gst_buffer_copy (buf.get ()));
  EXPECT_EQ (gst_buffer_get_pi0_observation_meta (copy.get ())->muxed_time, 11u);
  EXPECT_EQ (gst_buffer_get_pi0_tensor_meta (copy.get ())->prepared_time, 22u);
  EXPECT_EQ (gst_buffer_get_pi0_action_meta (copy.get ())->done_time, 33u);
  EXPECT_EQ (gst_buffer_get_pi0_action_meta (copy.get ())->model_time, 44u);
}

/* A frame's memories join the observation by reference, after the ones already there. */
TEST (Pi0Meta, AddFrameAppendsTheFramesMemories)
{
  BufferPtr obs (gst_buffer_new ());
  GstPi0ObservationMeta *om = gst_buffer_add_pi0_observation_meta (obs.get ());
  GstVideoInfo info;
  gst_video_info_set_format (&info, GST_VIDEO_FORMAT_NV12, 4, 2);
  BufferPtr frame (gst_buffer_new ());
  gst_buffer_append_memory (frame.get (), gst_allocator_alloc (nullptr, 8, nullptr));
  gst_buffer_append_memory (frame.get (), gst_allocator_alloc (nullptr, 4, nullptr));
  GST_BUFFER_PTS (frame.get ()) = 7;
  ASSERT_NE (gst_pi0_observation_meta_add_view (om, "main"), nullptr); /* masked */
  GstPi0View *v = gst_pi0_observation_meta_add_frame (om, obs.get (), "side", &info, frame.get (),
                                                      GST_PI0_VIEW_FLAG_SKEWED, 5);
  ASSERT_NE (v, nullptr);
  EXPECT_EQ (v->flags, GST_PI0_VIEW_FLAG_VALID | GST_PI0_VIEW_FLAG_SKEWED);
  EXPECT_EQ (v->pts, 7u);
  EXPECT_EQ (v->capture_time, 5u);
  EXPECT_EQ (v->mem_index, 0u);
  EXPECT_EQ (v->n_mem, 2u);
  EXPECT_EQ (gst_buffer_n_memory (obs.get ()), 2u);
  EXPECT_EQ (gst_buffer_peek_memory (obs.get (), 1), gst_buffer_peek_memory (frame.get (), 1));
  EXPECT_FALSE (GST_BUFFER_FLAG_IS_SET (obs.get (), GST_BUFFER_FLAG_TAG_MEMORY));
  GstVideoFrame f;
  ASSERT_TRUE (gst_pi0_observation_meta_map_view (om, obs.get (), 1, &f, GST_MAP_READ));
  gst_video_frame_unmap (&f);
}

TEST (Pi0Meta, ObservationCapsNameTheViewsAndTheBase)
{
  const gchar *names[] = {"main", "top"};
  CapsPtr caps (gst_pi0_observation_caps_new (names, 2, "top", 7, 30, 1, TRUE));
  gchar *str = gst_caps_to_string (caps.get ());
  EXPECT_STREQ (str, "application/x-pi0-observation(memory:CUDAMemory), views=(int)2, "
                     "view-names=(string)\"main\\,top\", base-view=(string)top, "
                     "state-dim=(int)7, framerate=(fraction)30/1");
  g_free (str);
}

/* All three metas go through tee, queue and a buffer copy unchanged. */
TEST (Pi0Meta, SurvivesTeeQueueAndCopy)
{
  std::string parse_error;
  ElementPtr pipe =
      pi0::tools::launch ("appsrc name=src format=time caps=application/x-pi0-observation ! "
                          "tee name=t ! queue ! appsink name=a sync=false "
                          "t. ! queue ! identity ! appsink name=b sync=false",
                          &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  GstElement *src = gst_bin_get_by_name (GST_BIN (pipe.get ()), "src");
  GstElement *sinks[2] = {gst_bin_get_by_name (GST_BIN (pipe.get ()), "a"),
                          gst_bin_get_by_name (GST_BIN (pipe.get ()), "b")};
  ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);

  GstBuffer *buf = make_observation ();
  GST_BUFFER_PTS (buf) = 0;
  const gfloat act[4] = {1, 2, 3, 4};
  gst_buffer_add_pi0_action_meta (buf, 2, 2, act, "m");
  GstPi0TensorStorage *st = gst_pi0_tensor_storage_new_host (16);
  const gint64 shape[1] = {4};
  gst_buffer_add_pi0_tensor_meta (buf, st, GST_PI0_DTYPE_FLOAT32, 1, shape);
  gst_pi0_tensor_storage_unref (st);
  ASSERT_EQ (gst_app_src_push_buffer (GST_APP_SRC (src), buf), GST_FLOW_OK);
  gst_app_src_end_of_stream (GST_APP_SRC (src));

  for (GstElement *sink : sinks) {
    GstSample *s = gst_app_sink_pull_sample (GST_APP_SINK (sink));
    ASSERT_NE (s, nullptr);
    BufferPtr copy (gst_buffer_copy (gst_sample_get_buffer (s)));
    gst_sample_unref (s);
    expect_observation (copy.get ());
    GstPi0ActionMeta *a = gst_buffer_get_pi0_action_meta (copy.get ());
    ASSERT_NE (a, nullptr);
    EXPECT_EQ (gst_pi0_action_meta_get_action (a, 1)[1], 4.f);
    EXPECT_NE (gst_buffer_get_pi0_tensor_meta (copy.get ()), nullptr);
    gst_object_unref (sink);
  }
  gst_object_unref (src);
}

/* The pad-probe example of docs/meta.md compiles (it is part of this binary) and works. */
TEST (Pi0Meta, DocsProbeExampleRuns)
{
  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch (
      "pi0viewmux name=mux max-staleness=50000000 ! fakesink name=out sync=false "
      "videotestsrc num-buffers=10 ! "
      "video/x-raw,format=RGB,width=32,height=24,framerate=30/1 ! mux.main "
      "videotestsrc num-buffers=2 ! "
      "video/x-raw,format=GRAY8,width=16,height=12,framerate=30/1 ! mux.side",
      &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  GstElement *mux = gst_bin_get_by_name (GST_BIN (pipe.get ()), "mux");
  GstPad *pad = gst_element_get_static_pad (mux, "src");
  Pi0ProbeCounts counts = {};
  EXPECT_NE (pi0_example_add_probe (pad, &counts), 0u);
  gst_object_unref (pad);
  gst_object_unref (mux);
  ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  GstBus *bus = gst_element_get_bus (pipe.get ());
  MessagePtr msg (gst_bus_timed_pop_filtered (
      bus, 20 * GST_SECOND, (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR)));
  gst_object_unref (bus);
  ASSERT_NE (msg, nullptr);
  EXPECT_EQ (GST_MESSAGE_TYPE (msg.get ()), GST_MESSAGE_EOS);
  EXPECT_EQ (counts.observations, 10u);
  /* side's frames are at 0 and 33 ms; with 50 ms staleness it is masked from 100 ms on. */
  EXPECT_EQ (counts.masked_views, 7u);
}

TEST (Pi0Meta, DocsContainTheCompiledExample)
{
  const char *root = g_getenv ("PI0_SOURCE_ROOT");
  ASSERT_NE (root, nullptr);
  auto slurp = [] (const std::string &path) {
    std::ifstream f (path);
    std::stringstream ss;
    ss << f.rdbuf ();
    return ss.str ();
  };
  std::string example = slurp (std::string (root) + "/docs/examples/observation-probe.c");
  std::string doc = slurp (std::string (root) + "/docs/meta.md");
  ASSERT_FALSE (example.empty ());
  EXPECT_NE (doc.find (example), std::string::npos)
      << "docs/meta.md must quote docs/examples/observation-probe.c verbatim";
}

TEST (Pi0Meta, RequestMetaSurvivesCopies)
{
  GstBuffer *b = gst_buffer_new ();
  GstPi0RequestMeta *m = gst_buffer_add_pi0_request_meta (b, "srv", 7, 3, "pick it up", 42);
  ASSERT_NE (m, nullptr);
  m->flags = GST_PI0_REQUEST_FLAG_CLIENT_SEED;
  m->received_time = 5 * GST_SECOND;
  GstBuffer *c = gst_buffer_copy (b);
  GstPi0RequestMeta *mc = gst_buffer_get_pi0_request_meta (c);
  ASSERT_NE (mc, nullptr);
  EXPECT_STREQ (mc->server, "srv");
  EXPECT_EQ (mc->client_id, 7u);
  EXPECT_EQ (mc->request_id, 3u);
  EXPECT_STREQ (mc->prompt, "pick it up");
  EXPECT_NE (mc->prompt, m->prompt); /* a deep copy */
  EXPECT_EQ (mc->seed, 42u);
  EXPECT_EQ (mc->flags, GST_PI0_REQUEST_FLAG_CLIENT_SEED);
  EXPECT_EQ (mc->received_time, 5 * GST_SECOND);
  EXPECT_EQ (mc->version, (guint)GST_PI0_META_VERSION);
  gst_buffer_unref (b);
  gst_buffer_unref (c);
  /* A prompt that is not UTF-8 is refused (it would reach a tokenizer). */
  ExpectLog crit ("g_utf8_validate");
  GstBuffer *d = gst_buffer_new ();
  EXPECT_EQ (gst_buffer_add_pi0_request_meta (d, "srv", 1, 0, "caf\xc3", 0), nullptr);
  EXPECT_EQ (crit.count (), 1);
  gst_buffer_unref (d);
}
