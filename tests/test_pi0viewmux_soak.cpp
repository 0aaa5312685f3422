/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* State cycles under GStreamer's leaks tracer (the test runs with GST_TRACERS=leaks): after
 * 200 PLAYING<->NULL cycles with data flowing, no GstObject or GstMiniObject is left that was
 * not there before. */

#include "tests/pi0testleaks.h"
#include "tests/pi0testgst.h"

#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

using namespace pi0test;

namespace
{

struct Counter {
  std::mutex lock;
  std::condition_variable cond;
  int n = 0;
  bool count_actions = false; /* count buffers with an action meta instead of observations */
};

void
on_handoff (GstElement *, GstBuffer *buf, GstPad *, gpointer user_data)
{
  auto c = static_cast<Counter *> (user_data);
  bool has_meta = c->count_actions ? gst_buffer_get_pi0_action_meta (buf) != nullptr
                                   : gst_buffer_get_pi0_observation_meta (buf) != nullptr;
  std::lock_guard<std::mutex> lk (c->lock);
  if (has_meta)
    c->n++;
  c->cond.notify_all ();
}

void
run_cycles (GstElement *pipe, Counter &c, int cycles, int buffers_per_cycle)
{
  for (int i = 0; i < cycles; i++) {
    {
      std::lock_guard<std::mutex> lk (c.lock);
      c.n = 0;
    }
    ASSERT_NE (gst_element_set_state (pipe, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    {
      std::unique_lock<std::mutex> lk (c.lock);
      /* A generous bound only so that a hang fails instead of blocking CI. */
      bool got =
          c.cond.wait_for (lk, std::chrono::seconds (20), [&] { return c.n >= buffers_per_cycle; });
      ASSERT_TRUE (got) << "cycle " << i << ": only " << c.n << " observations";
    }
    ASSERT_EQ (gst_element_set_state (pipe, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  }
}

/* Two warm-up cycles (they load plugins and fill caches that live for the whole process), then
 * @cycles PLAYING<->NULL cycles tracked by the leaks tracer: every object created during them
 * must be gone at the end. */
void
expect_cycles_leak_nothing (GstTracer *tracer, GstElement *pipe, Counter &c, int cycles,
                            int per_cycle)
{
  run_cycles (pipe, c, 2, per_cycle);
  g_signal_emit_by_name (tracer, "activity-start-tracking");
  run_cycles (pipe, c, cycles, per_cycle);
  /* A stopped task's thread drops its last reference to the GstTask a moment after the join:
   * wait for the task threads, as GStreamer's own leak tests do. */
  gst_task_cleanup_all ();
  auto leaked = alive_since_start (tracer);
  g_signal_emit_by_name (tracer, "activity-stop-tracking");
  for (const auto &kv : leaked)
    ADD_FAILURE () << kv.second << " " << kv.first << " created during the cycles still alive";
  EXPECT_TRUE (leaked.empty ());
}

} // namespace

class Pi0ViewMuxSoak : public ::testing::TestWithParam<bool>
{
};

TEST_P (Pi0ViewMuxSoak, PlayingNullCyclesLeakNothing)
{
  const bool live = GetParam ();
  ObjectPtr<GstTracer> tracer (leaks_tracer ());
  if (!tracer)
    GTEST_SKIP () << "run with GST_TRACERS=leaks (meson test does)";

  std::string src = std::string ("videotestsrc is-live=") + (live ? "true" : "false");
  std::string launch =
      "pi0viewmux name=mux max-staleness=100000000 ! fakesink name=out signal-handoffs=true "
      "sync=false " +
      src + " ! video/x-raw,format=RGB,width=32,height=24,framerate=30/1 ! mux.main " + src +
      " pattern=ball ! video/x-raw,format=NV12,width=16,height=12,framerate=15/1 ! mux.side " +
      src + " pattern=smpte ! video/x-raw,format=I420,width=20,height=14,framerate=10/1 ! mux.top";
  GError *err = nullptr;
  ElementPtr pipe (gst_parse_launch (launch.c_str (), &err));
  ASSERT_EQ (err, nullptr) << err->message;
  GstElement *sink = gst_bin_get_by_name (GST_BIN (pipe.get ()), "out");
  Counter c;
  g_signal_connect (sink, "handoff", G_CALLBACK (on_handoff), &c);
  gst_object_unref (sink);

  const int cycles = live ? 20 : 200;
  const int per_cycle = live ? 2 : 5;
  expect_cycles_leak_nothing (tracer.get (), pipe.get (), c, cycles, per_cycle);
}

INSTANTIATE_TEST_SUITE_P (LiveAndNonLive, Pi0ViewMuxSoak, ::testing::Bool ());

#ifdef HAVE_PI0INFER
/* The whole CPU chain with the policy: 100 cycles, each loading and warming up the model. */
TEST (Pi0InferSoak, PlayingNullCyclesLeakNothing)
{
  ObjectPtr<GstTracer> tracer (leaks_tracer ());
  if (!tracer)
    GTEST_SKIP () << "run with GST_TRACERS=leaks (meson test does)";
  GError *err = nullptr;
  ElementPtr pipe (gst_parse_launch (
      "pi0viewmux name=mux ! cudaprep width=32 height=32 device=cpu ! "
      "pi0infer model=builtin:pi0-tiny require-state=false instruction=wave ! "
      "fakesink name=out signal-handoffs=true sync=false "
      "videotestsrc ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 ! mux.main "
      "videotestsrc pattern=ball ! video/x-raw,format=NV12,width=32,height=24,framerate=15/1 ! "
      "mux.side",
      &err));
  ASSERT_EQ (err, nullptr) << err->message;
  GstElement *sink = gst_bin_get_by_name (GST_BIN (pipe.get ()), "out");
  Counter c;
  c.count_actions = true;
  g_signal_connect (sink, "handoff", G_CALLBACK (on_handoff), &c);
  gst_object_unref (sink);

  expect_cycles_leak_nothing (tracer.get (), pipe.get (), c, 100, 2);
}
#endif
