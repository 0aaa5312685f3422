/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0viewmux: pairing, staleness (live, on the test clock), state alignment, EOS, flush,
 * caps changes, bad caps, pad release, and the gst-launch line of the docs. */

#include "tests/pi0testgst.h"

#include <gst/pi0/pi0.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <map>
#include <thread>
#include <vector>

using namespace pi0test;

namespace
{

GstClockTime
frame_time (guint64 n, int fps)
{
  return gst_util_uint64_scale (n, GST_SECOND, fps);
}

/* A frame whose every byte is @fill, so a test can tell frames apart by content. */
GstBuffer *
make_frame (const GstVideoInfo &info, GstClockTime pts, GstClockTime dur, guint8 fill)
{
  GstBuffer *buf = gst_buffer_new_allocate (nullptr, GST_VIDEO_INFO_SIZE (&info), nullptr);
  gst_buffer_memset (buf, 0, fill, GST_VIDEO_INFO_SIZE (&info));
  GST_BUFFER_PTS (buf) = pts;
  GST_BUFFER_DURATION (buf) = dur;
  return buf;
}

GstBuffer *
make_state (const std::vector<float> &v, GstClockTime pts)
{
  GstBuffer *buf = gst_buffer_new_memdup (v.data (), v.size () * sizeof (float));
  GST_BUFFER_PTS (buf) = pts;
  return buf;
}

GstVideoInfo
video_info (const char *caps_str)
{
  GstVideoInfo info;
  CapsPtr caps (gst_caps_from_string (caps_str));
  EXPECT_TRUE (gst_video_info_from_caps (&info, caps.get ()));
  return info;
}

guint8
view_byte (GstBuffer *obs, const GstPi0View *v)
{
  guint8 b = 0;
  GstMemory *mem = gst_buffer_peek_memory (obs, v->mem_index);
  GstMapInfo map;
  EXPECT_TRUE (gst_memory_map (mem, &map, GST_MAP_READ));
  b = map.data[0];
  gst_memory_unmap (mem, &map);
  return b;
}

const char *MAIN_CAPS = "video/x-raw,format=RGB,width=64,height=48,framerate=30/1";
const char *SIDE_CAPS = "video/x-raw,format=NV12,width=32,height=24,framerate=15/1";
const char *TOP_CAPS = "video/x-raw,format=I420,width=40,height=30,framerate=10/1";

/* One muxer with a harness per input; the main harness also collects the output. */
struct Mux {
  ObjectPtr<GstElement> element;
  HarnessPtr main, side, top, state;
  ObjectPtr<GstBus> bus;

  explicit Mux (bool live, bool with_state = false, bool with_top = true, bool force_live = false)
  {
    element.reset (gst_element_factory_make_full ("pi0viewmux", "force-live", force_live, nullptr));
    gst_object_ref_sink (element.get ());
    bus.reset (gst_bus_new ());
    gst_element_set_bus (element.get (), bus.get ());
    main.reset (gst_harness_new_with_element (element.get (), "main", "src"));
    side.reset (gst_harness_new_with_element (element.get (), "side", nullptr));
    if (with_top)
      top.reset (gst_harness_new_with_element (element.get (), "top", nullptr));
    if (with_state)
      state.reset (gst_harness_new_with_element (element.get (), "state", nullptr));
    for (GstHarness *h : {main.get (), side.get (), top.get (), state.get ()}) {
      if (h)
        gst_harness_set_live (h, live);
    }
    /* Each harness brings its own test clock; the one the tests crank is main's. */
    gst_harness_use_testclock (main.get ());
  }

  ~Mux ()
  {
    /* Secondary harnesses first: the main one owns the element's src pad. */
    state.reset ();
    top.reset ();
    side.reset ();
    main.reset ();
    if (element)
      gst_element_set_bus (element.get (), nullptr);
  }

  std::vector<MessagePtr> messages (GstMessageType type)
  {
    std::vector<MessagePtr> out;
    while (GstMessage *m = gst_bus_pop_filtered (bus.get (), type))
      out.emplace_back (m);
    return out;
  }
};

/* Pushes a sequence on its own thread: a non-live muxer holds one buffer per pad and pushes
 * block until it takes them, so one thread per input, as in a real pipeline. */
class Pusher
{
public:
  explicit Pusher (std::function<void ()> fn) : thread_ (std::move (fn)) {}
  ~Pusher () { join (); }
  void join ()
  {
    if (thread_.joinable ())
      thread_.join ();
  }

private:
  std::thread thread_;
};

void
push_video (GstHarness *h, const char *caps, int fps, int n, int first_fill = 0,
            GstFlowReturn *last = nullptr)
{
  gst_harness_set_src_caps_str (h, caps);
  GstVideoInfo info = video_info (caps);
  for (int i = 0; i < n; i++) {
    GstFlowReturn r = gst_harness_push (
        h, make_frame (info, frame_time (i, fps), frame_time (1, fps), (guint8)(first_fill + i)));
    if (last)
      *last = r;
    if (r != GST_FLOW_OK)
      return;
  }
  gst_harness_push_event (h, gst_event_new_eos ());
}

/* The newest index i with frame_time (i, fps) <= limit. */
int
newest_at_or_before (GstClockTime limit, int fps, int n)
{
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (frame_time (i, fps) <= limit)
      best = i;
  }
  return best;
}

guint64
stat (GstElement *mux, const char *view, const char *field)
{
  GstStructure *s = nullptr;
  guint64 v = 0;
  g_object_get (mux, "stats", &s, nullptr);
  if (!s)
    return G_MAXUINT64;
  if (view) {
    const GValue *val = gst_structure_get_value (s, view);
    if (val && GST_VALUE_HOLDS_STRUCTURE (val))
      gst_structure_get_uint64 (gst_value_get_structure (val), field, &v);
  } else {
    gst_structure_get_uint64 (s, field, &v);
  }
  gst_structure_free (s);
  return v;
}

/* Releases the muxer's earliest pending clock wait, if any (never blocks: a wait that new data
 * cancels meanwhile is simply not there any more). */
bool
crank_once (GstTestClock *clock)
{
  GstClockID id = nullptr;
  if (!gst_test_clock_peek_next_pending_id (clock, &id))
    return false;
  const GstClockTime t = gst_clock_id_get_time (id);
  gst_clock_id_unref (id);
  if (t > gst_clock_get_time (GST_CLOCK (clock)))
    gst_test_clock_set_time (clock, t);
  if (GstClockID done = gst_test_clock_process_next_clock_id (clock))
    gst_clock_id_unref (done);
  return true;
}

/* A live muxer on the test clock: releases every deadline it waits for until @done () holds.
 * False when that does not happen while the muxer stops waiting on the clock (for 5 s of real
 * time): it is then waiting for data that will not come. */
bool
crank_until (GstHarness *h, const std::function<bool ()> &done)
{
  GstTestClock *clock = gst_harness_get_testclock (h);
  gint64 idle_since = g_get_monotonic_time ();
  bool ok = false;
  for (int cranks = 0; !(ok = done ()) && cranks < 10000;) {
    if (crank_once (clock)) {
      cranks++;
      idle_since = g_get_monotonic_time ();
    } else if (g_get_monotonic_time () - idle_since > 5 * G_USEC_PER_SEC) {
      break;
    } else {
      g_usleep (1000);
    }
  }
  gst_object_unref (clock);
  return ok;
}

/* Whether EOS has come out of @h (pulls the events that precede it). */
bool
pulled_eos (GstHarness *h)
{
  while (GstEvent *ev = gst_harness_try_pull_event (h)) {
    bool eos = GST_EVENT_TYPE (ev) == GST_EVENT_EOS;
    gst_event_unref (ev);
    if (eos)
      return true;
  }
  return false;
}

/* A frame of @info at @pts whose video meta declares @offset and @stride for plane 0 (the other
 * planes as the caps say). */
GstBuffer *
frame_with_layout (const GstVideoInfo &info, GstClockTime pts, gsize size, gsize offset,
                   gint stride)
{
  GstBuffer *buf = gst_buffer_new_allocate (nullptr, size, nullptr);
  gst_buffer_memset (buf, 0, 0x55, size);
  GST_BUFFER_PTS (buf) = pts;
  gsize offsets[GST_VIDEO_MAX_PLANES];
  gint strides[GST_VIDEO_MAX_PLANES];
  for (guint p = 0; p < GST_VIDEO_MAX_PLANES; p++) {
    offsets[p] = info.offset[p];
    strides[p] = info.stride[p];
  }
  offsets[0] = offset;
  strides[0] = stride;
  gst_buffer_add_video_meta_full (buf, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_INFO_FORMAT (&info),
                                  GST_VIDEO_INFO_WIDTH (&info), GST_VIDEO_INFO_HEIGHT (&info),
                                  GST_VIDEO_INFO_N_PLANES (&info), offsets, strides);
  return buf;
}

} // namespace

TEST (Pi0ViewMux, PadsAndProperties)
{
  ObjectPtr<GstElement> mux (gst_element_factory_make ("pi0viewmux", nullptr));
  ASSERT_NE (mux, nullptr);
  gst_object_ref_sink (mux.get ());
  GstElementClass *klass = GST_ELEMENT_GET_CLASS (mux.get ());
  for (const char *name : {"main", "side", "top", "state"}) {
    GstPadTemplate *t = gst_element_class_get_pad_template (klass, name);
    ASSERT_NE (t, nullptr) << name;
    EXPECT_EQ (GST_PAD_TEMPLATE_PRESENCE (t), GST_PAD_REQUEST);
  }
  for (const char *prop : {"base-view", "max-skew", "max-staleness", "max-state-age",
                           "require-all-views", "force-live", "stats", "latency"})
    EXPECT_NE (g_object_class_find_property (G_OBJECT_GET_CLASS (mux.get ()), prop), nullptr)
        << prop;

  GstPad *side = gst_element_request_pad_simple (mux.get (), "side");
  ASSERT_NE (side, nullptr);
  EXPECT_STREQ (GST_PAD_NAME (side), "side");
  /* One pad per view (core complains about the name clash before asking us). */
  {
    ExpectLog clash ("already has a pad named side");
    EXPECT_EQ (gst_element_request_pad_simple (mux.get (), "side"), nullptr);
  }
  EXPECT_EQ (gst_element_request_pad_simple (mux.get (), "sink_0"), nullptr);
  gst_element_release_request_pad (mux.get (), side);
  gst_object_unref (side);
}

/* Three cameras at 30, 15 and 10 fps (non-live): one observation per main frame, each other
 * view with its newest frame at or before the main frame (+ max-skew), all valid. */
TEST (Pi0ViewMux, PairsThreeRatesNonLive)
{
  Mux m (false);
  const int NM = 30, NS = 15, NT = 10;
  {
    Pusher a ([&] { push_video (m.side.get (), SIDE_CAPS, 15, NS, 100); });
    Pusher b ([&] { push_video (m.top.get (), TOP_CAPS, 10, NT, 200); });
    Pusher c ([&] { push_video (m.main.get (), MAIN_CAPS, 30, NM, 0); });

    for (int k = 0; k < NM; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr) << "observation " << k;
      GstClockTime T = frame_time (k, 30);
      EXPECT_EQ (GST_BUFFER_PTS (obs.get ()), T);
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      ASSERT_NE (meta, nullptr);
      EXPECT_EQ (meta->version, (guint)GST_PI0_META_VERSION);
      EXPECT_EQ (meta->sequence, (guint64)k);
      EXPECT_EQ (meta->observation_time, T);
      ASSERT_EQ (meta->n_views, 3u);
      EXPECT_STREQ (meta->views[0].name, "main");
      EXPECT_STREQ (meta->views[1].name, "side");
      EXPECT_STREQ (meta->views[2].name, "top");
      EXPECT_EQ (gst_buffer_n_memory (obs.get ()), 3u);

      int js = newest_at_or_before (T + 10 * GST_MSECOND, 15, NS);
      int jt = newest_at_or_before (T + 10 * GST_MSECOND, 10, NT);
      const struct {
        int idx, fill0, fps;
        const char *fmt;
      } expect[3] = {{k, 0, 30, "RGB"}, {js, 100, 15, "NV12"}, {jt, 200, 10, "I420"}};
      for (int v = 0; v < 3; v++) {
        const GstPi0View *view = gst_pi0_observation_meta_get_view (meta, v);
        ASSERT_TRUE (view->flags & GST_PI0_VIEW_FLAG_VALID) << "obs " << k << " view " << v;
        EXPECT_EQ (view->pts, frame_time (expect[v].idx, expect[v].fps))
            << "obs " << k << " view " << v;
        EXPECT_EQ (view->capture_time, view->pts);
        EXPECT_EQ (view_byte (obs.get (), view), (guint8)(expect[v].fill0 + expect[v].idx));
        EXPECT_STREQ (gst_video_format_to_string (GST_VIDEO_INFO_FORMAT (&view->info)),
                      expect[v].fmt);
        bool skewed = T - view->pts > 10 * GST_MSECOND;
        EXPECT_EQ (!!(view->flags & GST_PI0_VIEW_FLAG_SKEWED), skewed)
            << "obs " << k << " view " << v;
        /* The view maps as a frame with the recorded layout. */
        GstVideoFrame frame;
        ASSERT_TRUE (gst_pi0_observation_meta_map_view (meta, obs.get (), v, &frame, GST_MAP_READ));
        EXPECT_EQ (GST_VIDEO_FRAME_WIDTH (&frame), GST_VIDEO_INFO_WIDTH (&view->info));
        gst_video_frame_unmap (&frame);
      }
      EXPECT_EQ (meta->state_flags, GST_PI0_STATE_FLAG_NONE);
    }
  }
  /* The base view ended: so does the output. */
  bool eos = false;
  while (!eos) {
    GstEvent *ev = gst_harness_pull_event (m.main.get ());
    ASSERT_NE (ev, nullptr) << "no EOS";
    eos = GST_EVENT_TYPE (ev) == GST_EVENT_EOS;
    gst_event_unref (ev);
  }
  EXPECT_EQ (gst_harness_try_pull (m.main.get ()), nullptr);

  EXPECT_EQ (stat (m.element.get (), nullptr, "observations"), (guint64)NM);
  EXPECT_EQ (stat (m.element.get (), "main", "frames-in"), (guint64)NM);
  EXPECT_EQ (stat (m.element.get (), "side", "frames-in"), (guint64)NS);
  EXPECT_EQ (stat (m.element.get (), "top", "frames-in"), (guint64)NT);
  EXPECT_EQ (stat (m.element.get (), "side", "used"), (guint64)NM);
  EXPECT_EQ (stat (m.element.get (), "top", "masked"), 0u);
  EXPECT_TRUE (m.messages (GST_MESSAGE_WARNING).empty ());

  /* The observation caps describe the views and the base rate. */
  CapsPtr caps (
      gst_pad_get_current_caps (GST_PAD (GST_ELEMENT_CAST (m.element.get ())->srcpads->data)));
  ASSERT_NE (caps, nullptr);
  const GstStructure *s = gst_caps_get_structure (caps.get (), 0);
  EXPECT_TRUE (gst_structure_has_name (s, GST_PI0_OBSERVATION_MEDIA_TYPE));
  gint views = 0, n, d;
  EXPECT_TRUE (gst_structure_get_int (s, "views", &views));
  EXPECT_EQ (views, 3);
  EXPECT_STREQ (gst_structure_get_string (s, "view-names"), "main,side,top");
  EXPECT_TRUE (gst_structure_get_fraction (s, "framerate", &n, &d));
  EXPECT_EQ (n, 30);
  EXPECT_EQ (d, 1);
}

/* A view that ends early is used while fresh, then masked; the output goes on until the base
 * view ends. A masked view contributes no memory and is never zero-filled. */
TEST (Pi0ViewMux, EndedViewIsMaskedAfterStaleness)
{
  Mux m (false);
  g_object_set (m.element.get (), "max-staleness", (guint64)(150 * GST_MSECOND), nullptr);
  const int NM = 20;
  {
    Pusher a ([&] { push_video (m.side.get (), SIDE_CAPS, 15, 15, 100); });
    Pusher b ([&] { push_video (m.top.get (), TOP_CAPS, 10, 3, 200); }); /* 0, 100, 200 ms */
    Pusher c ([&] { push_video (m.main.get (), MAIN_CAPS, 30, NM, 0); });
    for (int k = 0; k < NM; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr);
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      GstClockTime T = frame_time (k, 30);
      bool top_valid = T <= 200 * GST_MSECOND + 150 * GST_MSECOND;
      EXPECT_EQ (!!(meta->views[2].flags & GST_PI0_VIEW_FLAG_VALID), top_valid) << "obs " << k;
      EXPECT_EQ (gst_buffer_n_memory (obs.get ()), top_valid ? 3u : 2u);
      if (!top_valid) {
        EXPECT_EQ (meta->views[2].n_mem, 0u);
        GstVideoFrame f;
        EXPECT_FALSE (gst_pi0_observation_meta_map_view (meta, obs.get (), 2, &f, GST_MAP_READ));
      }
    }
  }
  EXPECT_EQ (stat (m.element.get (), "top", "masked"), (guint64)(NM - 11));
  /* The bus heard about it, naming the view. */
  auto warnings = m.messages (GST_MESSAGE_WARNING);
  ASSERT_EQ (warnings.size (), 1u);
  EXPECT_NE (message_text (warnings[0].get ()).find ("'top' is stale"), std::string::npos);
}

TEST (Pi0ViewMux, RequireAllViewsDropsIncompleteObservations)
{
  Mux m (false);
  g_object_set (m.element.get (), "max-staleness", (guint64)(150 * GST_MSECOND),
                "require-all-views", TRUE, nullptr);
  {
    Pusher a ([&] { push_video (m.side.get (), SIDE_CAPS, 15, 15, 100); });
    Pusher b ([&] { push_video (m.top.get (), TOP_CAPS, 10, 3, 200); });
    Pusher c ([&] { push_video (m.main.get (), MAIN_CAPS, 30, 20, 0); });
    for (int k = 0; k < 11; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr);
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      for (guint v = 0; v < meta->n_views; v++)
        EXPECT_TRUE (meta->views[v].flags & GST_PI0_VIEW_FLAG_VALID);
    }
  }
  EXPECT_EQ (gst_harness_try_pull (m.main.get ()), nullptr);
  EXPECT_EQ (stat (m.element.get (), nullptr, "observations"), 11u);
  EXPECT_EQ (stat (m.element.get (), nullptr, "dropped-observations"), 9u);
}

/* Live sources on the test clock: the top camera stalls; the output never waits for it
 * beyond the latency, masks it after max-staleness, and unmasks it when it returns. */
TEST (Pi0ViewMux, LiveStalledViewIsMaskedThenRecovers)
{
  Mux m (true);
  const GstClockTime staleness = 100 * GST_MSECOND;
  g_object_set (m.element.get (), "max-staleness", staleness, nullptr);
  gst_harness_set_src_caps_str (m.main.get (),
                                "video/x-raw,format=RGB,width=64,height=48,framerate=30/1");
  gst_harness_set_src_caps_str (m.side.get (),
                                "video/x-raw,format=NV12,width=32,height=24,framerate=30/1");
  gst_harness_set_src_caps_str (m.top.get (),
                                "video/x-raw,format=I420,width=40,height=30,framerate=30/1");
  GstVideoInfo im = video_info ("video/x-raw,format=RGB,width=64,height=48,framerate=30/1");
  GstVideoInfo is = video_info ("video/x-raw,format=NV12,width=32,height=24,framerate=30/1");
  GstVideoInfo it = video_info ("video/x-raw,format=I420,width=40,height=30,framerate=30/1");

  /* top delivers frames 0..5, stalls, and comes back at frame 45 (1.5 s). */
  auto top_alive = [] (int k) {
    return k <= 5 || k >= 45;
  };
  const int N = 50;
  for (int k = 0; k < N; k++) {
    GstClockTime T = frame_time (k, 30), D = frame_time (1, 30);
    ASSERT_EQ (gst_harness_push (m.side.get (), make_frame (is, T, D, 100)), GST_FLOW_OK);
    if (top_alive (k)) {
      ASSERT_EQ (gst_harness_push (m.top.get (), make_frame (it, T, D, (guint8)k)), GST_FLOW_OK);
    }
    ASSERT_EQ (gst_harness_push (m.main.get (), make_frame (im, T, D, 0)), GST_FLOW_OK);

    /* While top delivers, every view's frame lasts past T + max-skew: the observation is
     * complete at once. While it is stalled the muxer waits for its deadline: release it. */
    if (!top_alive (k)) {
      ASSERT_TRUE (gst_harness_crank_single_clock_wait (m.main.get ()));
    }
    BufferPtr obs (gst_harness_pull (m.main.get ()));
    ASSERT_NE (obs, nullptr) << "observation " << k;
    GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
    EXPECT_EQ (meta->observation_time, T);
    EXPECT_TRUE (meta->views[0].flags & GST_PI0_VIEW_FLAG_VALID);
    EXPECT_TRUE (meta->views[1].flags & GST_PI0_VIEW_FLAG_VALID);
    int last_top = top_alive (k) ? k : 5;
    bool expect_valid = T - frame_time (last_top, 30) <= staleness;
    EXPECT_EQ (!!(meta->views[2].flags & GST_PI0_VIEW_FLAG_VALID), expect_valid) << "obs " << k;
    if (expect_valid) {
      EXPECT_EQ (view_byte (obs.get (), &meta->views[2]), (guint8)last_top) << "obs " << k;
    }
  }

  /* Masked from frame 9 (top's frame 5 is 133 ms old at frame 9) to 44. */
  EXPECT_EQ (stat (m.element.get (), "top", "masked"), 36u);
  auto warnings = m.messages (GST_MESSAGE_WARNING);
  ASSERT_EQ (warnings.size (), 2u);
  EXPECT_NE (message_text (warnings[0].get ()).find ("'top' is stale"), std::string::npos);
  EXPECT_NE (message_text (warnings[1].get ()).find ("'top' recovered"), std::string::npos);
  const GstStructure *details = nullptr;
  gst_message_parse_warning_details (warnings[1].get (), &details);
  ASSERT_NE (details, nullptr);
  EXPECT_STREQ (gst_structure_get_string (details, "view"), "top");
}

/* The robot state: the newest sample at or before the observation; too old is flagged;
 * malformed and non-finite samples never reach the meta. */
TEST (Pi0ViewMux, StateAlignmentAndStaleness)
{
  Mux m (false, true, false);
  g_object_set (m.element.get (), "max-state-age", (guint64)(40 * GST_MSECOND), nullptr);
  const int NM = 12, NST = 8; /* state at 20 Hz: 0, 50, ... 350 ms */
  {
    Pusher a ([&] { push_video (m.side.get (), SIDE_CAPS, 15, 6, 100); });
    Pusher b ([&] {
      gst_harness_set_src_caps_str (m.state.get (), "application/x-pi0-state,dim=(int)3");
      for (int i = 0; i < NST; i++) {
        GstClockTime t = i * 50 * GST_MSECOND;
        if (i == 3) {
          /* A NaN sample and a short one at 150 ms: rejected; 100 ms stays current. */
          gst_harness_push (m.state.get (), make_state ({1.f, NAN, 3.f}, t));
          gst_harness_push (m.state.get (), make_state ({1.f}, t));
          continue;
        }
        gst_harness_push (m.state.get (), make_state ({(float)i, 0.5f, -1.f}, t));
      }
      gst_harness_push_event (m.state.get (), gst_event_new_eos ());
    });
    Pusher c ([&] { push_video (m.main.get (), MAIN_CAPS, 30, NM, 0); });

    for (int k = 0; k < NM; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr);
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      GstClockTime T = frame_time (k, 30);
      int i = (int)(T / (50 * GST_MSECOND));
      if (i == 3)
        i = 2; /* the samples at 150 ms were rejected */
      guint dim = 0;
      const float *st = gst_pi0_observation_meta_get_state (meta, &dim);
      ASSERT_NE (st, nullptr) << "obs " << k;
      ASSERT_EQ (dim, 3u);
      EXPECT_EQ (st[0], (float)i) << "obs " << k;
      EXPECT_EQ (meta->state_time, i * 50 * GST_MSECOND);
      bool stale = T - i * 50 * GST_MSECOND > 40 * GST_MSECOND;
      EXPECT_EQ (!!(meta->state_flags & GST_PI0_STATE_FLAG_STALE), stale) << "obs " << k;
      EXPECT_TRUE (meta->state_flags & GST_PI0_STATE_FLAG_PRESENT);
    }
  }
  EXPECT_EQ (stat (m.element.get (), nullptr, "state-rejected"), 2u);
  auto warnings = m.messages (GST_MESSAGE_WARNING);
  EXPECT_EQ (warnings.size (), 2u);
  for (auto &w : warnings)
    EXPECT_NE (message_text (w.get ()).find ("finite float32"), std::string::npos);
}

/* A camera changes resolution mid-stream: the meta follows, the observation caps do not. */
TEST (Pi0ViewMux, ViewResolutionChangeMidStream)
{
  Mux m (false, false, false);
  const char *side2 = "video/x-raw,format=NV12,width=16,height=12,framerate=15/1";
  {
    Pusher a ([&] {
      GstVideoInfo i1 = video_info (SIDE_CAPS), i2 = video_info (side2);
      gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
      for (int j = 0; j < 8; j++) {
        if (j == 4)
          gst_harness_set_src_caps_str (m.side.get (), side2);
        gst_harness_push (m.side.get (), make_frame (j < 4 ? i1 : i2, frame_time (j, 15),
                                                     frame_time (1, 15), (guint8)j));
      }
      gst_harness_push_event (m.side.get (), gst_event_new_eos ());
    });
    Pusher c ([&] { push_video (m.main.get (), MAIN_CAPS, 30, 16, 0); });
    for (int k = 0; k < 16; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr);
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      const GstPi0View *v = &meta->views[1];
      ASSERT_TRUE (v->flags & GST_PI0_VIEW_FLAG_VALID);
      int j = newest_at_or_before (frame_time (k, 30) + 10 * GST_MSECOND, 15, 8);
      EXPECT_EQ (view_byte (obs.get (), v), (guint8)j);
      EXPECT_EQ (GST_VIDEO_INFO_WIDTH (&v->info), j < 4 ? 32 : 16) << "obs " << k;
      EXPECT_EQ (gst_buffer_get_sizes_range (obs.get (), v->mem_index, v->n_mem, nullptr, nullptr),
                 GST_VIDEO_INFO_SIZE (&v->info));
    }
  }
  EXPECT_TRUE (m.messages (GST_MESSAGE_ERROR).empty ());
}

/* Caps the muxer cannot use are refused with an error that names the view and the problem,
 * and nothing comes out. */
TEST (Pi0ViewMux, BadCapsAreNotNegotiatedWithClearError)
{
  struct Case {
    const char *pad, *caps, *needle;
  } cases[] = {
      {"main", "video/x-raw,format=v210,width=32,height=24,framerate=15/1", "video format v210"},
      {"main", "video/x-raw,format=RGB,framerate=15/1", "incomplete or invalid video caps"},
      {"state", "application/x-pi0-state", "dim=(int)N"},
      {"state", "application/x-pi0-state,dim=(int)0", "dim=(int)N"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE (c.caps);
    ObjectPtr<GstElement> mux (gst_element_factory_make ("pi0viewmux", nullptr));
    gst_object_ref_sink (mux.get ());
    ObjectPtr<GstBus> bus (gst_bus_new ());
    gst_element_set_bus (mux.get (), bus.get ());
    bool state_case = g_str_equal (c.pad, "state");
    /* A good base view beside a bad state pad; the bad view is the base otherwise. */
    HarnessPtr good (state_case ? gst_harness_new_with_element (mux.get (), "main", "src")
                                : nullptr);
    HarnessPtr h (gst_harness_new_with_element (mux.get (), c.pad, state_case ? nullptr : "src"));
    gst_harness_set_live (h.get (), FALSE);
    std::thread good_pusher;
    if (good) {
      gst_harness_set_live (good.get (), FALSE);
      gst_harness_set_src_caps_str (good.get (), MAIN_CAPS);
      good_pusher = std::thread ([&] {
        GstVideoInfo im = video_info (MAIN_CAPS);
        gst_harness_push (good.get (), make_frame (im, 0, 0, 0));
      });
    }
    ASSERT_TRUE (gst_harness_push_event (h.get (), gst_event_new_stream_start ("bad")));
    /* The aggregator queues serialized events, so the refusal shows on the bus and in the
     * flow of the data that follows. */
    CapsPtr caps (gst_caps_from_string (c.caps));
    gst_harness_push_event (h.get (), gst_event_new_caps (caps.get ()));
    GstSegment seg;
    gst_segment_init (&seg, GST_FORMAT_TIME);
    gst_harness_push_event (h.get (), gst_event_new_segment (&seg));
    GstFlowReturn last = GST_FLOW_OK;
    for (int i = 0; i < 3 && last == GST_FLOW_OK; i++) {
      GstBuffer *buf = gst_buffer_new_allocate (nullptr, 16, nullptr);
      GST_BUFFER_PTS (buf) = i * GST_MSECOND;
      last = gst_harness_push (h.get (), buf);
    }
    EXPECT_EQ (last, GST_FLOW_NOT_NEGOTIATED);
    MessagePtr err (gst_bus_timed_pop_filtered (bus.get (), 5 * GST_SECOND, GST_MESSAGE_ERROR));
    ASSERT_NE (err, nullptr);
    GError *gerr = nullptr;
    gst_message_parse_error (err.get (), &gerr, nullptr);
    EXPECT_TRUE (g_error_matches (gerr, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION));
    g_clear_error (&gerr);
    std::string text = message_text (err.get ());
    EXPECT_NE (text.find (c.needle), std::string::npos) << text;
    EXPECT_NE (text.find (c.pad), std::string::npos) << text;
    if (good_pusher.joinable ())
      good_pusher.join ();
    EXPECT_EQ (gst_harness_try_pull (good ? good.get () : h.get ()), nullptr);
    h.reset ();
    good.reset ();
    gst_element_set_bus (mux.get (), nullptr);
  }
}

TEST (Pi0ViewMux, FramesWithoutTimestampAreAnError)
{
  Mux m (false, false, false);
  gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
  gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
  GstVideoInfo im = video_info (MAIN_CAPS), is = video_info (SIDE_CAPS);
  GstFlowReturn side_ret = GST_FLOW_OK;
  {
    Pusher a ([&] {
      side_ret = gst_harness_push (m.side.get (), make_frame (is, GST_CLOCK_TIME_NONE, 0, 1));
    });
    GstFlowReturn r = gst_harness_push (m.main.get (), make_frame (im, 0, 0, 0));
    EXPECT_EQ (r, GST_FLOW_OK); /* queued; the error comes from the aggregate thread */
  }
  MessagePtr err;
  for (int i = 0; i < 500 && !err; i++) {
    err.reset (gst_bus_timed_pop_filtered (m.bus.get (), 10 * GST_MSECOND, GST_MESSAGE_ERROR));
  }
  ASSERT_NE (err, nullptr);
  EXPECT_NE (message_text (err.get ()).find ("'side' sent a frame without a usable timestamp"),
             std::string::npos);
  EXPECT_EQ (gst_harness_try_pull (m.main.get ()), nullptr);
}

/* A flushing seek: nothing from before the flush pairs with anything after it. */
TEST (Pi0ViewMux, FlushingSeekForgetsOldFrames)
{
  Mux m (false, false, false);
  GstVideoInfo im = video_info (MAIN_CAPS), is = video_info (SIDE_CAPS);
  gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
  gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
  {
    Pusher a ([&] {
      for (int j = 0; j < 3; j++)
        gst_harness_push (m.side.get (), make_frame (is, frame_time (j, 15), 0, 0xAA));
    });
    Pusher b ([&] {
      for (int k = 0; k < 4; k++)
        gst_harness_push (m.main.get (), make_frame (im, frame_time (k, 30), 0, 1));
    });
    for (int k = 0; k < 4; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr);
    }
  }

  GstEvent *seek = gst_event_new_seek (1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, GST_SEEK_TYPE_SET,
                                       0, GST_SEEK_TYPE_NONE, 0);
  guint32 seqnum = gst_event_get_seqnum (seek);
  EXPECT_TRUE (gst_harness_push_upstream_event (m.main.get (), seek));
  for (GstHarness *h : {m.main.get (), m.side.get ()}) {
    GstEvent *fs = gst_event_new_flush_start ();
    gst_event_set_seqnum (fs, seqnum);
    gst_harness_push_event (h, fs);
  }
  for (GstHarness *h : {m.main.get (), m.side.get ()}) {
    GstEvent *fs = gst_event_new_flush_stop (TRUE);
    gst_event_set_seqnum (fs, seqnum);
    gst_harness_push_event (h, fs);
    GstSegment seg;
    gst_segment_init (&seg, GST_FORMAT_TIME);
    GstEvent *se = gst_event_new_segment (&seg);
    gst_event_set_seqnum (se, seqnum);
    gst_harness_push_event (h, se);
  }
  while (GstBuffer *stale = gst_harness_try_pull (m.main.get ()))
    gst_buffer_unref (stale);

  {
    /* After the flush the side camera starts 100 ms late: until then it is masked, never
     * filled with its pre-flush frame. */
    Pusher a ([&] {
      for (int j = 0; j < 6; j++)
        gst_harness_push (m.side.get (),
                          make_frame (is, 100 * GST_MSECOND + frame_time (j, 15), 0, 0xBB));
      gst_harness_push_event (m.side.get (), gst_event_new_eos ());
    });
    Pusher b ([&] {
      for (int k = 0; k < 8; k++)
        gst_harness_push (m.main.get (), make_frame (im, frame_time (k, 30), 0, 2));
      gst_harness_push_event (m.main.get (), gst_event_new_eos ());
    });
    for (int k = 0; k < 8; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr);
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      GstClockTime T = frame_time (k, 30);
      bool side_valid = T + 10 * GST_MSECOND >= 100 * GST_MSECOND;
      ASSERT_EQ (!!(meta->views[1].flags & GST_PI0_VIEW_FLAG_VALID), side_valid) << "obs " << k;
      if (side_valid) {
        EXPECT_EQ (view_byte (obs.get (), &meta->views[1]), 0xBB);
      }
      EXPECT_EQ (meta->sequence, (guint64)(4 + k)); /* sequence numbers never go back */
    }
  }
}

/* Releasing a view's pad while running keeps the observation layout (the view is masked once
 * its last frame is stale) and never stalls the output. */
TEST (Pi0ViewMux, PadReleasedWhilePlaying)
{
  Mux m (false);
  g_object_set (m.element.get (), "max-staleness", (guint64)(100 * GST_MSECOND), nullptr);
  GstVideoInfo it = video_info (TOP_CAPS);
  {
    Pusher a ([&] { push_video (m.side.get (), SIDE_CAPS, 15, 10, 100); });
    Pusher b ([&] {
      gst_harness_set_src_caps_str (m.top.get (), TOP_CAPS);
      gst_harness_push (m.top.get (), make_frame (it, 0, 0, 7));
      gst_harness_push (m.top.get (), make_frame (it, 100 * GST_MSECOND, 0, 8));
    });
    Pusher c ([&] { push_video (m.main.get (), MAIN_CAPS, 30, 18, 0); });
    for (int k = 0; k < 18; k++) {
      if (k == 3) {
        /* Observation 3 waits for top's next frame, which will never come: once the muxer has
         * taken both of top's frames, release the pad. */
        b.join ();
        for (int i = 0; i < 5000 && stat (m.element.get (), "top", "frames-in") < 2; i++)
          g_usleep (1000);
        ASSERT_EQ (stat (m.element.get (), "top", "frames-in"), 2u);
        m.top.reset (); /* tears down the harness, releasing the 'top' pad */
      }
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr) << "obs " << k;
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      ASSERT_EQ (meta->n_views, 3u);
      bool top_valid = frame_time (k, 30) <= 200 * GST_MSECOND;
      EXPECT_EQ (!!(meta->views[2].flags & GST_PI0_VIEW_FLAG_VALID), top_valid) << "obs " << k;
    }
  }
  EXPECT_TRUE (m.messages (GST_MESSAGE_ERROR).empty ());
}

/* The README's and the docs' gst-launch line, shortened: meta on every observation. */
TEST (Pi0ViewMux, LaunchLineWithTestSources)
{
  std::string parse_error;
  ElementPtr pipe =
      pi0::tools::launch ("pi0viewmux name=mux ! appsink name=out sync=false "
                          "videotestsrc num-buffers=12 ! "
                          "video/x-raw,format=RGB,width=64,height=48,framerate=30/1 ! mux.main "
                          "videotestsrc num-buffers=6 pattern=ball ! "
                          "video/x-raw,format=NV12,width=32,height=24,framerate=15/1 ! mux.side "
                          "videotestsrc num-buffers=4 pattern=smpte ! "
                          "video/x-raw,format=I420,width=40,height=30,framerate=10/1 ! mux.top",
                          &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  GstElement *sink = gst_bin_get_by_name (GST_BIN (pipe.get ()), "out");
  ASSERT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
  int n = 0;
  while (true) {
    GstSample *s = nullptr;
    g_signal_emit_by_name (sink, "pull-sample", &s);
    if (!s)
      break;
    GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (gst_sample_get_buffer (s));
    EXPECT_NE (meta, nullptr);
    if (meta) {
      EXPECT_EQ (meta->n_views, 3u);
    }
    gst_sample_unref (s);
    n++;
  }
  gst_object_unref (sink);
  EXPECT_EQ (n, 12);
}

/* Views negotiated in CUDA memory are flagged per view, and the observation caps carry the
 * memory:CUDAMemory feature when every view is in CUDA memory. (The frames' memory type is
 * what the caps say; a real CUDA source is exercised by the GPU suite.) */
TEST (Pi0ViewMux, CudaMemoryCapsAreCarried)
{
  Mux m (false, false, false);
  const char *main_cuda =
      "video/x-raw(memory:CUDAMemory),format=NV12,width=64,height=48,framerate=30/1";
  const char *side_cuda =
      "video/x-raw(memory:CUDAMemory),format=NV12,width=32,height=24,framerate=15/1";
  {
    Pusher a ([&] { push_video (m.side.get (), side_cuda, 15, 4, 0); });
    Pusher c ([&] { push_video (m.main.get (), main_cuda, 30, 6, 0); });
    for (int k = 0; k < 6; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr);
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      EXPECT_TRUE (meta->views[0].flags & GST_PI0_VIEW_FLAG_CUDA);
      EXPECT_TRUE (meta->views[1].flags & GST_PI0_VIEW_FLAG_CUDA);
    }
  }
  GstPad *src = GST_PAD (GST_ELEMENT_CAST (m.element.get ())->srcpads->data);
  CapsPtr caps (gst_pad_get_current_caps (src));
  ASSERT_NE (caps, nullptr);
  EXPECT_TRUE (
      gst_caps_features_contains (gst_caps_get_features (caps.get (), 0), "memory:CUDAMemory"));
}

/* Live, with a camera that declares 100 ms of latency: by default each observation waits for
 * it (base frame + latency); with max-wait it goes out max-wait after the base frame, and the
 * slow camera's frames that come later count as late. */
TEST (Pi0ViewMux, MaxWaitBoundsTheLiveDeadline)
{
  for (GstClockTime max_wait :
       {(GstClockTime)GST_CLOCK_TIME_NONE, (GstClockTime)(20 * GST_MSECOND)}) {
    SCOPED_TRACE (max_wait);
    Mux m (true, false, true);
    if (GST_CLOCK_TIME_IS_VALID (max_wait))
      g_object_set (m.element.get (), "max-wait", max_wait, nullptr);
    gst_harness_set_upstream_latency (m.top.get (), 100 * GST_MSECOND);
    gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
    gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
    gst_harness_set_src_caps_str (m.top.get (), TOP_CAPS);
    /* As a pipeline would when going to PLAYING. */
    GstClockTime latency = gst_harness_query_latency (m.main.get ());
    EXPECT_EQ (latency, 110 * GST_MSECOND); /* top's 100 ms + max-skew */
    GstVideoInfo im = video_info (MAIN_CAPS), is = video_info (SIDE_CAPS);
    GstTestClock *clock = gst_harness_get_testclock (m.main.get ());
    /* From 200 ms on: a deadline cannot be earlier than the latency itself (running time 0). */
    for (int k = 0; k < 3; k++) {
      GstClockTime T = 200 * GST_MSECOND + frame_time (k, 30);
      ASSERT_EQ (gst_harness_push (m.side.get (), make_frame (is, T, 0, 1)), GST_FLOW_OK);
      ASSERT_EQ (gst_harness_push (m.main.get (), make_frame (im, T, 0, 0)), GST_FLOW_OK);
      /* top sends nothing in time: the observation waits for the deadline. */
      ASSERT_TRUE (gst_harness_crank_single_clock_wait (m.main.get ()));
      GstClockTime deadline = GST_CLOCK_TIME_IS_VALID (max_wait) ? T + max_wait : T + latency;
      EXPECT_EQ (gst_clock_get_time (GST_CLOCK (clock)), deadline) << "obs " << k;
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr);
      EXPECT_FALSE (gst_buffer_get_pi0_observation_meta (obs.get ())->views[2].flags &
                    GST_PI0_VIEW_FLAG_VALID);
    }
    gst_object_unref (clock);
  }
}

/* @m (live, three views, a state pad) with caps on every input and its latency queried; top
 * declares 100 ms. */
static void
set_up_live_with_state (Mux &m)
{
  gst_harness_set_src_caps_str (m.state.get (), "application/x-pi0-state,dim=(int)3");
  gst_harness_set_upstream_latency (m.top.get (), 100 * GST_MSECOND);
  gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
  gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
  gst_harness_set_src_caps_str (m.top.get (), TOP_CAPS);
  gst_harness_query_latency (m.main.get ());
}

/* For a base frame at @T: a state sample (value @k) 5 ms before T lasting 10 ms, which covers T
 * and is final; side and top frames captured 3 ms after T, within max-skew and lasting past
 * T + 10 ms; then the base frame. The observation must come out with every view valid and the
 * sample. */
static void
push_covered_inputs_and_pull (Mux &m, GstClockTime T, int k)
{
  SCOPED_TRACE ("obs " + std::to_string (k));
  static const GstVideoInfo im = video_info (MAIN_CAPS), is = video_info (SIDE_CAPS),
                            it = video_info (TOP_CAPS);
  const GstClockTime D = frame_time (1, 30);
  GstBuffer *sb = make_state ({(float)k, 0, 0}, T - 5 * GST_MSECOND);
  GST_BUFFER_DURATION (sb) = 10 * GST_MSECOND;
  ASSERT_EQ (gst_harness_push (m.state.get (), sb), GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (m.side.get (), make_frame (is, T + 3 * GST_MSECOND, D, 1)),
             GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (m.top.get (), make_frame (it, T + 3 * GST_MSECOND, D, 2)),
             GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (m.main.get (), make_frame (im, T, D, 0)), GST_FLOW_OK);
  BufferPtr obs (gst_harness_pull (m.main.get ()));
  ASSERT_NE (obs, nullptr);
  GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
  EXPECT_EQ (meta->observation_time, T);
  for (int v = 0; v < 3; v++)
    EXPECT_TRUE (meta->views[v].flags & GST_PI0_VIEW_FLAG_VALID) << "view " << v;
  ASSERT_EQ (meta->state_dim, 3u);
  EXPECT_EQ (meta->state[0], (float)k);
}

/* A frame whose duration reaches past T + max-skew proves that no newer frame of that view
 * belongs to the observation at T (a state sample: past T): live, the observation goes out as
 * soon as every input has such a buffer, with no wait for a deadline (the test clock is never
 * cranked). A frame without a duration proves nothing: the muxer waits. */
TEST (Pi0ViewMux, LiveFramesWithDurationsPairWithoutWaiting)
{
  Mux m (true, true, true);
  set_up_live_with_state (m);
  for (int k = 0; k < 5; k++) {
    push_covered_inputs_and_pull (m, 200 * GST_MSECOND + frame_time (k, 30), k);
    if (HasFatalFailure ())
      return;
  }
  GstTestClock *clock = gst_harness_get_testclock (m.main.get ());
  EXPECT_EQ (gst_clock_get_time (GST_CLOCK (clock)), 0u) << "no deadline was waited for";
  gst_object_unref (clock);
  EXPECT_EQ (stat (m.element.get (), nullptr, "deadline-observations"), 0u);

  /* Without durations the same frames leave no proof: the observation waits its deadline, and
   * is counted as made there (a replay could pair it differently). */
  GstVideoInfo im = video_info (MAIN_CAPS), is = video_info (SIDE_CAPS), it = video_info (TOP_CAPS);
  const GstClockTime D = frame_time (1, 30);
  GstClockTime T = 200 * GST_MSECOND + frame_time (5, 30);
  GstBuffer *sb = make_state ({5, 0, 0}, T - 5 * GST_MSECOND);
  GST_BUFFER_DURATION (sb) = 10 * GST_MSECOND;
  ASSERT_EQ (gst_harness_push (m.state.get (), sb), GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (m.side.get (), make_frame (is, T, GST_CLOCK_TIME_NONE, 1)),
             GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (m.top.get (), make_frame (it, T, GST_CLOCK_TIME_NONE, 2)),
             GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (m.main.get (), make_frame (im, T, D, 0)), GST_FLOW_OK);
  EXPECT_EQ (gst_harness_try_pull (m.main.get ()), nullptr);
  ASSERT_TRUE (gst_harness_crank_single_clock_wait (m.main.get ()));
  BufferPtr obs (gst_harness_pull (m.main.get ()));
  ASSERT_NE (obs, nullptr);
  EXPECT_EQ (stat (m.element.get (), nullptr, "observations"), 6u);
  EXPECT_EQ (stat (m.element.get (), nullptr, "deadline-observations"), 1u);
}

/* A base frame that comes after its live deadline: while it was missing the muxer may have
 * taken the other inputs past it, so its observation counts as made at the deadline
 * (stats.deadline-observations) even though every input has proved complete. An on-time one
 * with the same inputs does not count. */
TEST (Pi0ViewMux, LateBaseFrameCountsAsADeadlineObservation)
{
  Mux m (true, true, true);
  set_up_live_with_state (m);
  GstTestClock *clock = gst_harness_get_testclock (m.main.get ());
  for (int k = 0; k < 2; k++) {
    const GstClockTime T = 200 * GST_MSECOND + frame_time (k, 30);
    /* The second base frame comes a second after its capture. */
    if (k == 1)
      gst_test_clock_set_time (clock, T + GST_SECOND);
    push_covered_inputs_and_pull (m, T, k);
    EXPECT_EQ (stat (m.element.get (), nullptr, "deadline-observations"), (guint64)k) << "obs " << k;
  }
  gst_object_unref (clock);
}

/* The rule is the same without live sources, so a replay pairs as the live run did: a frame
 * whose duration reaches past T + max-skew is chosen even when its successor, captured early
 * (jitter), also falls within max-skew. */
TEST (Pi0ViewMux, DurationRuleIsTheSameWhenNotLive)
{
  Mux m (false, false, false);
  GstVideoInfo im = video_info (MAIN_CAPS), is = video_info (SIDE_CAPS);
  const GstClockTime D = frame_time (1, 30), T = 100 * GST_MSECOND;
  /* side frame A at T - 25 ms lasts to T + 8 ms (not past T + max-skew), frame B at T + 5 ms
   * is the newest within max-skew and, lasting past it, is chosen without looking further.
   * Frame C at T + 36 ms is then within the next base frame's window (T + 33.3 + 10 ms). */
  {
    Pusher a ([&] {
      gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
      const std::pair<GstClockTime, guint8> frames[] = {
          {T - 25 * GST_MSECOND, 1}, {T + 5 * GST_MSECOND, 2}, {T + 36 * GST_MSECOND, 3}};
      for (const auto &f : frames)
        gst_harness_push (m.side.get (), make_frame (is, f.first, D, f.second));
      gst_harness_push_event (m.side.get (), gst_event_new_eos ());
    });
    Pusher b ([&] {
      gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
      gst_harness_push (m.main.get (), make_frame (im, T, D, 0));
      gst_harness_push (m.main.get (), make_frame (im, T + D, D, 0));
      gst_harness_push_event (m.main.get (), gst_event_new_eos ());
    });
  }
  BufferPtr o1 (gst_harness_pull (m.main.get ()));
  ASSERT_NE (o1, nullptr);
  GstPi0ObservationMeta *m1 = gst_buffer_get_pi0_observation_meta (o1.get ());
  EXPECT_EQ (view_byte (o1.get (), &m1->views[1]), 2);
  BufferPtr o2 (gst_harness_pull (m.main.get ()));
  ASSERT_NE (o2, nullptr);
  GstPi0ObservationMeta *m2 = gst_buffer_get_pi0_observation_meta (o2.get ());
  EXPECT_EQ (view_byte (o2.get (), &m2->views[1]), 3);
}

/* timestamps=pts pairs by the buffers' PTS, ignoring segments: what a replay needs when a
 * demuxer rebases its segment (matroskademux starts it at the file's first timestamp) while
 * the state comes back with the original one. Here main's segment starts at 5 ms, so its frame
 * at PTS 105 ms has running time 100 ms. */
TEST (Pi0ViewMux, TimestampsPtsIgnoresSegments)
{
  for (bool use_pts : {false, true}) {
    SCOPED_TRACE (use_pts);
    Mux m (false, true, false);
    if (use_pts)
      gst_util_set_object_arg (G_OBJECT (m.element.get ()), "timestamps", "pts");
    GstVideoInfo im = video_info (MAIN_CAPS), is = video_info (SIDE_CAPS);
    const GstClockTime D = frame_time (1, 30);
    {
      Pusher a ([&] {
        gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
        GstSegment seg;
        gst_segment_init (&seg, GST_FORMAT_TIME);
        seg.start = 5 * GST_MSECOND;
        gst_harness_push_event (m.main.get (), gst_event_new_segment (&seg));
        gst_harness_push (m.main.get (), make_frame (im, 105 * GST_MSECOND, D, 0));
        gst_harness_push_event (m.main.get (), gst_event_new_eos ());
      });
      Pusher b ([&] {
        gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
        gst_harness_push (m.side.get (), make_frame (is, 100 * GST_MSECOND, D, 1));
        gst_harness_push_event (m.side.get (), gst_event_new_eos ());
      });
      Pusher c ([&] {
        gst_harness_set_src_caps_str (m.state.get (), "application/x-pi0-state,dim=(int)3");
        gst_harness_push (m.state.get (), make_state ({1.f, 0, 0}, 98 * GST_MSECOND));
        gst_harness_push (m.state.get (), make_state ({2.f, 0, 0}, 102 * GST_MSECOND));
        gst_harness_push_event (m.state.get (), gst_event_new_eos ());
      });
    }
    BufferPtr obs (gst_harness_pull (m.main.get ()));
    ASSERT_NE (obs, nullptr);
    GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
    EXPECT_EQ (meta->observation_time, (use_pts ? 105 : 100) * GST_MSECOND);
    ASSERT_EQ (meta->state_dim, 3u);
    /* The newest state at or before the observation: 98 ms by running time, 102 ms by PTS. */
    EXPECT_EQ (meta->state[0], use_pts ? 2.f : 1.f);
    EXPECT_TRUE (meta->views[1].flags & GST_PI0_VIEW_FLAG_VALID);
  }
}

/* A slower input's buffer that covers several observations stays queued on its pad, so every
 * pad still holds data at the next base frame and GstAggregator aggregates at once: a 10 Hz
 * state (or a 10 fps camera) does not hold each 30 fps observation to its deadline. */
TEST (Pi0ViewMux, LiveSlowInputsKeepCoveringBufferQueued)
{
  Mux m (true, true, false);
  gst_harness_set_upstream_latency (m.side.get (), 100 * GST_MSECOND);
  gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
  gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
  gst_harness_set_src_caps_str (m.state.get (), "application/x-pi0-state,dim=(int)3");
  gst_harness_query_latency (m.main.get ());
  GstVideoInfo im = video_info (MAIN_CAPS), is = video_info (SIDE_CAPS);
  const GstClockTime T0 = 200 * GST_MSECOND, D = frame_time (1, 30);
  /* One side frame and one state sample, each lasting 100 ms: they cover three base frames. */
  ASSERT_EQ (gst_harness_push (m.side.get (), make_frame (is, T0, 100 * GST_MSECOND, 7)),
             GST_FLOW_OK);
  GstBuffer *sb = make_state ({4.f, 0, 0}, T0 - GST_MSECOND);
  GST_BUFFER_DURATION (sb) = 100 * GST_MSECOND;
  ASSERT_EQ (gst_harness_push (m.state.get (), sb), GST_FLOW_OK);
  for (int k = 0; k < 3; k++) {
    ASSERT_EQ (gst_harness_push (m.main.get (), make_frame (im, T0 + k * D, D, 0)), GST_FLOW_OK);
    BufferPtr obs (gst_harness_pull (m.main.get ()));
    ASSERT_NE (obs, nullptr) << "obs " << k;
    GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
    EXPECT_EQ (view_byte (obs.get (), &meta->views[1]), 7) << "obs " << k;
    ASSERT_EQ (meta->state_dim, 3u);
    EXPECT_EQ (meta->state[0], 4.f);
  }
  GstTestClock *clock = gst_harness_get_testclock (m.main.get ());
  EXPECT_EQ (gst_clock_get_time (GST_CLOCK (clock)), 0u) << "no deadline was waited for";
  gst_object_unref (clock);
  EXPECT_EQ (stat (m.element.get (), "side", "frames-in"), 1u); /* counted once, not per use */
}

/* Issue 17 item 1: live, an ended base view ends the stream even while another input has
 * stopped delivering (a stalled side camera, a silent state udpsrc), and even when the base
 * view never delivered a frame (issue 16 item 3: gst-launch -e with a stalled base camera).
 * The same with a not-live upstream and force-live. Both on the test clock. */
TEST (Pi0ViewMux, EndedBaseEndsTheStreamWhileOtherInputsStall)
{
  for (bool force_live : {false, true}) {
    for (const char *stalled : {"side", "state"}) {
      for (int n_main : {3, 0}) {
        SCOPED_TRACE (std::string (stalled) + (force_live ? " force-live" : " live") +
                      " main frames " + std::to_string (n_main));
        Mux m (!force_live, true, false, force_live);
        gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
        gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
        gst_harness_set_src_caps_str (m.state.get (), "application/x-pi0-state,dim=(int)3");
        GstVideoInfo im = video_info (MAIN_CAPS), is = video_info (SIDE_CAPS);
        const GstClockTime D = frame_time (1, 30);
        /* The stalled input delivers its first buffer only (none when the base view delivers
         * none either); the other one keeps up. */
        const bool side_stalls = g_str_equal (stalled, "side");
        for (int k = 0; k < std::max (n_main, 1); k++) {
          GstClockTime T = frame_time (k, 30);
          if (side_stalls ? k == 0 && n_main > 0 : true) {
            ASSERT_EQ (gst_harness_push (m.side.get (), make_frame (is, T, D, 1)), GST_FLOW_OK);
          }
          if (!side_stalls ? k == 0 && n_main > 0 : true) {
            ASSERT_EQ (gst_harness_push (m.state.get (), make_state ({1, 2, 3}, T)), GST_FLOW_OK);
          }
          if (k >= n_main)
            break;
          ASSERT_EQ (gst_harness_push (m.main.get (), make_frame (im, T, D, 0)), GST_FLOW_OK);
          BufferPtr obs;
          ASSERT_TRUE (crank_until (m.main.get (),
                                    [&] {
                                      obs.reset (gst_harness_try_pull (m.main.get ()));
                                      return obs != nullptr;
                                    }))
              << "observation " << k;
          EXPECT_EQ (gst_buffer_get_pi0_observation_meta (obs.get ())->observation_time, T);
        }
        ASSERT_TRUE (gst_harness_push_event (m.main.get (), gst_event_new_eos ()));
        EXPECT_TRUE (crank_until (m.main.get (), [&] { return pulled_eos (m.main.get ()); }))
            << "no EOS after the base view ended";
        EXPECT_EQ (gst_harness_try_pull (m.main.get ()), nullptr);
      }
    }
  }
}

/* Issue 16 item 3: while the live base camera is silent, the other inputs keep flowing (their
 * frames are passed on as they age), so their sources are never blocked in the muxer's pads
 * and can take the EOS that gst-launch -e sends every source on Ctrl-C. Then the base view's
 * EOS ends the stream. */
TEST (Pi0ViewMux, SilentLiveBaseLetsTheOtherInputsFlow)
{
  Mux m (true, true, false);
  gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
  gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
  gst_harness_set_src_caps_str (m.state.get (), "application/x-pi0-state,dim=(int)3");
  const int N = 20;
  std::atomic<int> side_done{0}, state_done{0};
  GstFlowReturn side_ret = GST_FLOW_OK, state_ret = GST_FLOW_OK;
  {
    Pusher a ([&] {
      GstVideoInfo is = video_info (SIDE_CAPS);
      for (int j = 0; j < N && side_ret == GST_FLOW_OK; j++)
        side_ret = gst_harness_push (m.side.get (),
                                     make_frame (is, frame_time (j, 30), frame_time (1, 30), 1));
      side_done = 1;
    });
    Pusher b ([&] {
      for (int j = 0; j < N && state_ret == GST_FLOW_OK; j++)
        state_ret = gst_harness_push (m.state.get (), make_state ({1, 2, 3}, frame_time (j, 50)));
      state_done = 1;
    });
    /* Far more than the pads hold: without the muxer passing them on, the pushes block. */
    EXPECT_TRUE (crank_until (m.main.get (), [&] { return side_done && state_done; }))
        << "the side camera and the state source stay blocked in the muxer";
    /* Ctrl-C with -e: the base source sends EOS. (It also releases the pushes if stuck.) */
    ASSERT_TRUE (gst_harness_push_event (m.main.get (), gst_event_new_eos ()));
    EXPECT_TRUE (crank_until (m.main.get (), [&] { return pulled_eos (m.main.get ()); }));
  }
  EXPECT_EQ (side_ret, GST_FLOW_OK);
  EXPECT_EQ (state_ret, GST_FLOW_OK);
  EXPECT_EQ (gst_harness_try_pull (m.main.get ()), nullptr);
  EXPECT_EQ (stat (m.element.get (), nullptr, "observations"), 0u);
}

/* Not live, the base view's end ends the stream while another view still holds frames that
 * no observation will use; its source gets EOS as its flow (a regression check: the muxer
 * waits for data when not live, but never for a view once the base view is over). */
TEST (Pi0ViewMux, EndedBaseEndsTheStreamNotLive)
{
  Mux m (false, false, false);
  GstFlowReturn side_ret = GST_FLOW_OK;
  {
    Pusher a ([&] {
      gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
      GstVideoInfo is = video_info (SIDE_CAPS);
      for (int j = 0; j < 100 && side_ret == GST_FLOW_OK; j++)
        side_ret = gst_harness_push (m.side.get (), make_frame (is, frame_time (j, 15), 0, 1));
    });
    Pusher b ([&] { push_video (m.main.get (), MAIN_CAPS, 30, 3, 0); });
    for (int k = 0; k < 3; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr) << "observation " << k;
    }
    bool eos = false;
    while (!eos) {
      GstEvent *ev = gst_harness_pull_event (m.main.get ());
      ASSERT_NE (ev, nullptr) << "no EOS";
      eos = GST_EVENT_TYPE (ev) == GST_EVENT_EOS;
      gst_event_unref (ev);
    }
  }
  EXPECT_EQ (side_ret, GST_FLOW_EOS);
}

/* Issue 16 item 10: frames whose buffer does not hold the layout they declare (too short, a
 * negative or too short stride, an offset past the end or so large that the sum wraps) are
 * refused: never passed on, counted in `invalid`, and warned about at most once per second of
 * running time per view, with a details structure. */
TEST (Pi0ViewMux, FramesThatDoNotHoldTheirLayoutAreRefusedCountedAndWarned)
{
  Mux m (false, false, false);
  GstVideoInfo is = video_info (SIDE_CAPS);
  const gsize size = GST_VIDEO_INFO_SIZE (&is);
  const gint stride = GST_VIDEO_INFO_PLANE_STRIDE (&is, 0);
  const GstClockTime D = frame_time (1, 30);
  /* side at 30 fps: frames 1..5 and 70 (2.33 s) bad, the others good. */
  auto side_frame = [&] (int j) -> GstBuffer * {
    GstClockTime t = frame_time (j, 30);
    GstBuffer *b = nullptr;
    switch (j) {
      case 1:
        b = make_frame (is, t, D, 1);
        gst_buffer_resize (b, 0, size / 2); /* shorter than its caps */
        return b;
      case 2:
        b = frame_with_layout (is, t, size, 0, -stride);
        break;
      case 3:
        b = frame_with_layout (is, t, size, size, stride); /* starts at the end */
        break;
      case 4:
        b = frame_with_layout (is, t, size, G_MAXSIZE - 16, stride); /* wraps around */
        break;
      case 5:
        b = frame_with_layout (is, t, size, 0, 2); /* rows overlap */
        break;
      case 70:
        b = make_frame (is, t, D, 1);
        gst_buffer_resize (b, 0, 1);
        return b;
      default:
        b = make_frame (is, t, D, (guint8)j);
        return b;
    }
    GST_BUFFER_DURATION (b) = D;
    return b;
  };
  const int NM = 72;
  {
    Pusher a ([&] {
      gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
      for (int j = 0; j < NM; j++)
        gst_harness_push (m.side.get (), side_frame (j));
      gst_harness_push_event (m.side.get (), gst_event_new_eos ());
    });
    Pusher b ([&] { push_video (m.main.get (), MAIN_CAPS, 30, NM, 0); });
    for (int k = 0; k < NM; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr) << "observation " << k;
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      const GstPi0View *v = &meta->views[1];
      bool bad = (k >= 1 && k <= 5) || k == 70;
      int expect = bad ? (k == 70 ? 69 : 0) : k;
      ASSERT_TRUE (v->flags & GST_PI0_VIEW_FLAG_VALID) << "obs " << k;
      EXPECT_EQ (view_byte (obs.get (), v), (guint8)expect) << "obs " << k;
      GstVideoFrame f;
      ASSERT_TRUE (gst_pi0_observation_meta_map_view (meta, obs.get (), 1, &f, GST_MAP_READ));
      gst_video_frame_unmap (&f);
    }
  }
  EXPECT_EQ (stat (m.element.get (), "side", "invalid"), 6u);
  EXPECT_EQ (stat (m.element.get (), "side", "frames-in"), (guint64)NM);
  EXPECT_EQ (stat (m.element.get (), "side", "used"), (guint64)NM);
  auto warnings = m.messages (GST_MESSAGE_WARNING);
  ASSERT_EQ (warnings.size (), 2u) << "one at 33 ms, one at 2.33 s";
  for (auto &w : warnings) {
    EXPECT_NE (message_text (w.get ()).find ("'side'"), std::string::npos);
    const GstStructure *details = nullptr;
    gst_message_parse_warning_details (w.get (), &details);
    ASSERT_NE (details, nullptr);
    EXPECT_STREQ (gst_structure_get_string (details, "view"), "side");
    EXPECT_NE (gst_structure_get_string (details, "problem"), nullptr);
    guint64 size_field = 0;
    EXPECT_TRUE (gst_structure_get_uint64 (details, "size", &size_field));
  }
  const GstStructure *last = nullptr;
  gst_message_parse_warning_details (warnings[1].get (), &last);
  guint64 held = 0;
  EXPECT_TRUE (gst_structure_get_uint64 (last, "held-back", &held));
  EXPECT_EQ (held, 4u); /* frames 2..5 were refused without a warning of their own */
}

/* Issue 16 item 10: a base camera whose timestamps go back. observation_time never decreases:
 * a base frame not after the previous observation is dropped, counted in `backwards`, and
 * warned about (rate-limited, with details). */
TEST (Pi0ViewMux, BaseTimestampsGoingBackAreDropped)
{
  Mux m (false, false, false);
  GstVideoInfo im = video_info (MAIN_CAPS);
  const GstClockTime ms = GST_MSECOND;
  const GstClockTime times[] = {0, 33 * ms, 66 * ms, 50 * ms, 66 * ms, 100 * ms, 80 * ms, 133 * ms};
  {
    Pusher a ([&] { push_video (m.side.get (), SIDE_CAPS, 15, 4, 100); });
    Pusher b ([&] {
      gst_harness_set_src_caps_str (m.main.get (), MAIN_CAPS);
      for (GstClockTime t : times)
        gst_harness_push (m.main.get (), make_frame (im, t, 0, 0));
      gst_harness_push_event (m.main.get (), gst_event_new_eos ());
    });
    GstClockTime prev = GST_CLOCK_TIME_NONE;
    for (GstClockTime expect : {0 * ms, 33 * ms, 66 * ms, 100 * ms, 133 * ms}) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr);
      GstClockTime t = gst_buffer_get_pi0_observation_meta (obs.get ())->observation_time;
      EXPECT_EQ (t, expect);
      if (GST_CLOCK_TIME_IS_VALID (prev)) {
        EXPECT_GT (t, prev);
      }
      prev = t;
    }
    bool eos = false;
    while (!eos) {
      GstEvent *ev = gst_harness_pull_event (m.main.get ());
      ASSERT_NE (ev, nullptr) << "no EOS";
      eos = GST_EVENT_TYPE (ev) == GST_EVENT_EOS;
      gst_event_unref (ev);
    }
  }
  EXPECT_EQ (gst_harness_try_pull (m.main.get ()), nullptr);
  EXPECT_EQ (stat (m.element.get (), "main", "backwards"), 3u);
  EXPECT_EQ (stat (m.element.get (), nullptr, "observations"), 5u);
  auto warnings = m.messages (GST_MESSAGE_WARNING);
  ASSERT_EQ (warnings.size (), 1u);
  EXPECT_NE (message_text (warnings[0].get ()).find ("'main'"), std::string::npos);
  const GstStructure *details = nullptr;
  gst_message_parse_warning_details (warnings[0].get (), &details);
  ASSERT_NE (details, nullptr);
  EXPECT_STREQ (gst_structure_get_string (details, "view"), "main");
  guint64 last_obs = 0;
  EXPECT_TRUE (gst_structure_get_uint64 (details, "last-observation", &last_obs));
  EXPECT_EQ (last_obs, 66 * ms);
}

/* Issue 17 item 3, in launch lines. Caps of the wrong media type or format that reach a pad
 * at run time (here appsrc, linked before it has caps) get the muxer's NEGOTIATION error naming
 * the pad and what it takes, before the source's generic "Internal data stream error". Fixed
 * caps that gst-launch sees when it links (a caps filter, a source's caps property) are refused
 * earlier, by the link itself ("could not link"): the pads' caps are the exact list, which is
 * what lets a videoconvert before them pick a format the muxer takes. */
TEST (Pi0ViewMux, NegotiationErrorsInLaunchLines)
{
  const char *good_main = "videotestsrc num-buffers=5 ! "
                          "video/x-raw,format=RGB,width=64,height=48,framerate=30/1 ! mux.main ";
  struct Case {
    const char *pad, *caps, *needle;
  } cases[] = {
      {"state", "audio/x-raw,format=S16LE,rate=48000,channels=1,layout=interleaved",
       "The state pad needs application/x-pi0-state"},
      {"side", "audio/x-raw,format=S16LE,rate=48000,channels=1,layout=interleaved",
       "View 'side' needs raw video"},
      {"side", "video/x-raw,format=v210,width=48,height=2,framerate=30/1",
       "View 'side' cannot take video format v210"},
      {"side", "video/x-raw,format=RGB16,width=4,height=2,framerate=30/1",
       "View 'side' cannot take video format RGB16"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE (c.caps);
    std::string parse_error;
    ElementPtr pipe =
        pi0::tools::launch (std::string ("pi0viewmux name=mux ! fakesink ") + good_main +
                                "appsrc name=src format=time ! mux." + c.pad,
                            &parse_error);
    ASSERT_TRUE (pipe) << parse_error;
    GstElement *src = gst_bin_get_by_name (GST_BIN (pipe.get ()), "src");
    GstElement *mux = gst_bin_get_by_name (GST_BIN (pipe.get ()), "mux");
    gst_util_set_object_arg (G_OBJECT (src), "caps", c.caps);
    gst_element_set_state (pipe.get (), GST_STATE_PLAYING);
    GstBuffer *buf = gst_buffer_new_allocate (nullptr, 16, nullptr);
    GST_BUFFER_PTS (buf) = 0;
    GstFlowReturn fr;
    g_signal_emit_by_name (src, "push-buffer", buf, &fr);
    gst_buffer_unref (buf);
    ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
    MessagePtr msg (gst_bus_timed_pop_filtered (bus.get (), 10 * GST_SECOND, GST_MESSAGE_ERROR));
    ASSERT_NE (msg, nullptr);
    GError *gerr = nullptr;
    gst_message_parse_error (msg.get (), &gerr, nullptr);
    EXPECT_TRUE (g_error_matches (gerr, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION))
        << gerr->message;
    g_clear_error (&gerr);
    EXPECT_NE (message_text (msg.get ()).find (c.needle), std::string::npos)
        << message_text (msg.get ());
    EXPECT_EQ (GST_MESSAGE_SRC (msg.get ()), GST_OBJECT (mux));
    gst_object_unref (mux);
    gst_object_unref (src);
  }

  /* Linked straight to a fixed format the view cannot take: refused when linking. */
  GError *err = nullptr;
  GstElement *pipe = gst_parse_launch ("pi0viewmux name=mux ! fakesink videotestsrc ! "
                                       "video/x-raw,format=v210,width=48,height=2 ! mux.main",
                                       &err);
  ASSERT_NE (err, nullptr);
  EXPECT_TRUE (g_error_matches (err, GST_PARSE_ERROR, GST_PARSE_ERROR_LINK)) << err->message;
  EXPECT_NE (std::string (err->message).find ("could not link"), std::string::npos) << err->message;
  g_clear_error (&err);
  if (pipe)
    gst_object_unref (pipe);
}

/* A GAP event on a view (a demuxer's sparse stream, a decoder that lost frames) is time passing,
 * not a frame: no warning, nothing refused, and the view goes on with the frame it has (masked
 * once that is stale, as with no frame at all). */
TEST (Pi0ViewMux, GapEventsAreNotFrames)
{
  Mux m (false, false, false);
  const int NM = 8;
  {
    Pusher a ([&] {
      gst_harness_set_src_caps_str (m.side.get (), SIDE_CAPS);
      GstVideoInfo is = video_info (SIDE_CAPS);
      gst_harness_push (m.side.get (), make_frame (is, 0, frame_time (1, 15), 5));
      gst_harness_push_event (m.side.get (),
                              gst_event_new_gap (frame_time (1, 15), frame_time (2, 15)));
      gst_harness_push (m.side.get (), make_frame (is, frame_time (3, 15), frame_time (1, 15), 6));
      gst_harness_push_event (m.side.get (), gst_event_new_eos ());
    });
    Pusher b ([&] { push_video (m.main.get (), MAIN_CAPS, 30, NM, 0); });
    for (int k = 0; k < NM; k++) {
      BufferPtr obs (gst_harness_pull (m.main.get ()));
      ASSERT_NE (obs, nullptr) << "observation " << k;
      GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
      ASSERT_TRUE (meta->views[1].flags & GST_PI0_VIEW_FLAG_VALID) << "obs " << k;
      const bool second = frame_time (k, 30) + 10 * GST_MSECOND >= frame_time (3, 15);
      EXPECT_EQ (view_byte (obs.get (), &meta->views[1]), second ? 6 : 5) << "obs " << k;
    }
  }
  EXPECT_TRUE (m.messages (GST_MESSAGE_WARNING).empty ());
  EXPECT_EQ (stat (m.element.get (), "side", "frames-in"), 2u);
  EXPECT_EQ (stat (m.element.get (), "side", "dropped"), 0u);
}
