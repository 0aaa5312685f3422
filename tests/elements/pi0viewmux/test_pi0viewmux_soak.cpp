/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0viewmux: state cycles under GStreamer's leaks tracer (the test runs with GST_TRACERS=leaks): after
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
  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch (launch, &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  GstElement *sink = gst_bin_get_by_name (GST_BIN (pipe.get ()), "out");
  Counter c;
  g_signal_connect (sink, "handoff", G_CALLBACK (on_handoff), &c);
  gst_object_unref (sink);

  const int cycles = live ? 20 : 200;
  const int per_cycle = live ? 2 : 5;
  expect_cycles_leak_nothing (tracer.get (), pipe.get (), c, cycles, per_cycle);
}

INSTANTIATE_TEST_SUITE_P (LiveAndNonLive, Pi0ViewMuxSoak, ::testing::Bool ());
