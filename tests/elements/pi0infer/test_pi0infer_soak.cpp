/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0infer under GStreamer's leaks tracer (the test runs with GST_TRACERS=leaks): 100
 * PLAYING<->NULL cycles of the whole CPU chain with the policy, each loading and warming up the
 * model, leave no GstObject or GstMiniObject that was not there before. */

#include "tests/pi0testleaks.h"
#include "tests/pi0testgst.h"

#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>


using namespace pi0test;

#ifdef HAVE_PI0INFER
TEST (Pi0InferSoak, PlayingNullCyclesLeakNothing)
{
  ObjectPtr<GstTracer> tracer (leaks_tracer ());
  if (!tracer)
    GTEST_SKIP () << "run with GST_TRACERS=leaks (meson test does)";
  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch (
      "pi0viewmux name=mux ! cudaprep width=32 height=32 device=cpu ! "
      "pi0infer model=builtin:pi0-tiny require-state=false instruction=wave ! "
      "fakesink name=out signal-handoffs=true sync=false "
      "videotestsrc ! video/x-raw,format=RGB,width=64,height=48,framerate=30/1 ! mux.main "
      "videotestsrc pattern=ball ! video/x-raw,format=NV12,width=32,height=24,framerate=15/1 ! "
      "mux.side",
      &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  GstElement *sink = gst_bin_get_by_name (GST_BIN (pipe.get ()), "out");
  Counter c;
  c.count_actions = true;
  g_signal_connect (sink, "handoff", G_CALLBACK (on_handoff), &c);
  gst_object_unref (sink);

  expect_cycles_leak_nothing (tracer.get (), pipe.get (), c, 100, 2);
}
#endif
