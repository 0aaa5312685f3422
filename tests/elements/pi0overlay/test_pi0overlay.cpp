/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0overlay: the planned chunk drawn over video, where the projection puts it (planar) and in
 * its inset (plot), and nothing drawn without a chunk, for a non-finite one or a stale one; bad
 * settings and caps refused with errors naming them. Two harnesses on one element: the video
 * pad and the actions pad. */
#include "tests/pi0testgst.h"

#include <gst/check/gstharness.h>
#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace pi0test;

namespace
{

const int W = 64, H = 48;
const guint8 BG = 0x20;

struct Pair {
  HarnessPtr video, actions;
};

Pair
make (const char *props)
{
  std::string desc = std::string ("pi0overlay ") + props;
  GstElement *el = gst_parse_launch (desc.c_str (), nullptr); /* one element: itself */
  Pair p;
  p.video.reset (gst_harness_new_with_element (el, "video_sink", "src"));
  p.actions.reset (gst_harness_new_with_element (el, "actions_sink", nullptr));
  gst_object_unref (el);
  gst_harness_set_src_caps_str (p.video.get (),
                                "video/x-raw,format=BGRx,width=64,height=48,framerate=10/1");
  gst_harness_set_src_caps_str (p.actions.get (), "application/x-pi0-test");
  return p;
}

GstBuffer *
frame (GstClockTime pts)
{
  GstBuffer *b = gst_buffer_new_allocate (nullptr, W * H * 4, nullptr);
  gst_buffer_memset (b, 0, BG, W * H * 4);
  GST_BUFFER_PTS (b) = pts;
  GST_BUFFER_DURATION (b) = GST_SECOND / 10;
  return b;
}

GstBuffer *
chunk (const std::vector<float> &a, guint horizon, guint dim, GstClockTime obs = 0)
{
  GstBuffer *b = gst_buffer_new ();
  GstPi0ActionMeta *m = gst_buffer_add_pi0_action_meta (b, horizon, dim, a.data (), "test");
  m->observation_time = obs;
  return b;
}

/* The frame that came out, as bytes. */
std::vector<guint8>
pull (GstHarness *h)
{
  BufferPtr out (gst_harness_pull (h));
  EXPECT_NE (out, nullptr);
  std::vector<guint8> v (W * H * 4);
  if (out)
    gst_buffer_extract (out.get (), 0, v.data (), v.size ());
  return v;
}

bool
changed (const std::vector<guint8> &f, int x, int y)
{
  for (int c = 0; c < 3; c++)
    if (f[(y * W + x) * 4 + c] != BG)
      return true;
  return false;
}

/* Any pixel within @r of (x, y) changed. */
bool
changed_near (const std::vector<guint8> &f, double x, double y, int r)
{
  for (int yy = (int)y - r; yy <= (int)y + r; yy++)
    for (int xx = (int)x - r; xx <= (int)x + r; xx++)
      if (xx >= 0 && yy >= 0 && xx < W && yy < H && changed (f, xx, yy))
        return true;
  return false;
}

guint64
stat (GstHarness *h, const char *field)
{
  GstStructure *s = nullptr;
  g_object_get (h->element, "stats", &s, nullptr);
  guint64 v = 0;
  gst_structure_get_uint64 (s, field, &v);
  gst_structure_free (s);
  return v;
}

/* A quarter turn of joint 0 over ten rows, the other two joints still. */
std::vector<float>
quarter_turn ()
{
  std::vector<float> a;
  for (int r = 0; r < 10; r++)
    a.insert (a.end (), {(float)(r * M_PI / 2 / 9), 0.f, 0.f});
  return a;
}

} // namespace

TEST (Pi0Overlay, WithoutAChunkTheFramesPassAsTheyCame)
{
  Pair p = make ("");
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (0)), GST_FLOW_OK);
  auto f = pull (p.video.get ());
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      ASSERT_FALSE (changed (f, x, y)) << x << "," << y;
  /* A buffer without a chunk is counted, and changes nothing. */
  ASSERT_EQ (gst_harness_push (p.actions.get (), gst_buffer_new ()), GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (0)), GST_FLOW_OK);
  f = pull (p.video.get ());
  EXPECT_FALSE (changed_near (f, W / 2, H / 2, W));
  EXPECT_EQ (stat (p.video.get (), "no-meta"), 1u);
  EXPECT_EQ (stat (p.video.get (), "drawn"), 0u);
}

/* links=1 and projection (px = 20 x + 32, py = -20 y + 24): joint 0 turning from 0 to 90
 * degrees puts the tool on a quarter circle of 20 pixels around (32, 24), from (52, 24) up to
 * (32, 4). The drawing is there, at its start, middle and end, and nowhere else. */
TEST (Pi0Overlay, PlanarDrawsTheToolPathWhereTheProjectionPutsIt)
{
  Pair p = make ("mode=planar links=1 projection=\"20,0,32,0,-20,24\"");
  ASSERT_EQ (gst_harness_push (p.actions.get (), chunk (quarter_turn (), 10, 3)), GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (0)), GST_FLOW_OK);
  auto f = pull (p.video.get ());
  EXPECT_TRUE (changed_near (f, 52, 24, 1)) << "the first row";
  EXPECT_TRUE (changed_near (f, 32 + 20 * std::cos (M_PI / 4), 24 - 20 * std::sin (M_PI / 4), 1))
      << "the middle";
  EXPECT_TRUE (changed_near (f, 32, 4, 1)) << "the last row";
  int n = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      if (changed (f, x, y)) {
        n++; /* braces: EXPECT_* is an if */
        const double r = std::hypot (x + 0.5 - 32, y + 0.5 - 24);
        const bool on_quarter = x + 0.5 >= 32 - 5 && y + 0.5 <= 24 + 5;
        EXPECT_TRUE (std::fabs (r - 20) <= 5 && on_quarter)
            << "a pixel off the path: " << x << "," << y;
      }
  EXPECT_GT (n, 20);
  EXPECT_EQ (stat (p.video.get (), "drawn"), 1u);
  EXPECT_EQ (stat (p.video.get (), "chunks"), 1u);
}

/* mode=plot with the robot's limits: drawing only in the inset (bottom left, 21 x 12 pixels at
 * 64 x 48), joint 0 rising from its lower limit to its upper across it in the first colour
 * (yellow). */
TEST (Pi0Overlay, PlotDrawsEachJointInTheInsetScaledToTheLimits)
{
  const std::string cfg = std::string (g_get_tmp_dir ()) + "/pi0overlay-robot.json";
  {
    std::ofstream o (cfg);
    o << R"({"joints": ["a", "b", "c"], "lower": [0, -1, -1], "upper": [1.5708, 1, 1],)"
      << R"( "max_step": [1, 1, 1]})";
  }
  Pair p = make (("robot-config=" + cfg).c_str ());
  ASSERT_EQ (gst_harness_push (p.actions.get (), chunk (quarter_turn (), 10, 3)), GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (0)), GST_FLOW_OK);
  auto f = pull (p.video.get ());
  std::remove (cfg.c_str ());
  const int bx = 1, by = 35, bw = 21, bh = 12;
  for (int y = 0; y < H; y++) {
    for (int x = 0; x < W; x++) {
      if (changed (f, x, y)) {
        EXPECT_TRUE (x >= bx && x < bx + bw && y >= by && y < by + bh) << x << "," << y;
      }
    }
  }
  auto yellow = [&] (int x, int y) {
    for (int yy = y - 1; yy <= y + 1; yy++)
      for (int xx = x - 1; xx <= x + 1; xx++) {
        const guint8 *px = &f[(yy * W + xx) * 4]; /* B, G, R, x */
        if (px[2] > 150 && px[1] > 120 && px[0] < 90)
          return true;
      }
    return false;
  };
  EXPECT_TRUE (yellow (bx + 1, by + bh - 2)) << "joint 0 starts at its lower limit";
  EXPECT_TRUE (yellow (bx + bw - 2, by + 1)) << "and ends at its upper";
  EXPECT_FALSE (yellow (bx + 1, by + 1)) << "not at its upper at the start";
}

/* A chunk with a NaN (which pi0actionsink refuses) clears the plan; a chunk older than max-age
 * is not drawn; the next good one is. */
TEST (Pi0Overlay, ANonFiniteOrStaleChunkIsNotDrawn)
{
  Pair p = make ("mode=planar links=1 projection=\"20,0,32,0,-20,24\"");
  ASSERT_EQ (gst_harness_push (p.actions.get (), chunk (quarter_turn (), 10, 3)), GST_FLOW_OK);
  auto bad = quarter_turn ();
  bad[7] = NAN;
  ASSERT_EQ (gst_harness_push (p.actions.get (), chunk (bad, 10, 3)), GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (0)), GST_FLOW_OK);
  auto f = pull (p.video.get ());
  EXPECT_FALSE (changed_near (f, W / 2, H / 2, W)) << "the NaN chunk cleared the plan";
  EXPECT_EQ (stat (p.video.get (), "non-finite"), 1u);
  /* Observed at 0: drawn at 0.5 s, not at 2 s (max-age 1 s). */
  ASSERT_EQ (gst_harness_push (p.actions.get (), chunk (quarter_turn (), 10, 3, 0)), GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (GST_SECOND / 2)), GST_FLOW_OK);
  EXPECT_TRUE (changed_near (pull (p.video.get ()), 52, 24, 1));
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (2 * GST_SECOND)), GST_FLOW_OK);
  EXPECT_FALSE (changed_near (pull (p.video.get ()), W / 2, H / 2, W)) << "stale";
  EXPECT_EQ (stat (p.video.get (), "stale"), 1u);
  EXPECT_EQ (stat (p.video.get (), "drawn"), 1u);
}

/* Settings that cannot draw are refused at start, with an error that names them. */
TEST (Pi0Overlay, BadSettingsRefuseToStartNamingTheProperty)
{
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mode=planar projection=\"1,0,0,0,1,0\"", "links"},
      {"mode=planar links=1", "six numbers"},
      {"mode=planar links=1 projection=\"1,2,3\"", "it has 3"},
      {"mode=planar links=\"0.3,abc\" projection=\"1,0,0,0,1,0\"", "links"},
      {"projection=\"1,2,x\"", "projection"},
      {"robot-config=/nonexistent/robot.json", "robot-config"},
  };
  for (auto &[props, want] : cases) {
    SCOPED_TRACE (props);
    ElementPtr pipe (
        gst_parse_launch (("fakesrc ! pi0overlay " + props + " ! fakesink").c_str (), nullptr));
    ASSERT_NE (pipe, nullptr);
    EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
    MessagePtr m (gst_bus_pop_filtered (bus.get (), GST_MESSAGE_ERROR));
    ASSERT_NE (m, nullptr);
    const std::string t = message_text (m.get ());
    EXPECT_NE (t.find (want), std::string::npos) << t;
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
  }
}

/* Only 32-bit BGRx/BGRA: packed RGB is refused at negotiation (videoconvert goes before). */
TEST (Pi0Overlay, OtherVideoFormatsAreRefused)
{
  Pair p = make ("");
  gst_harness_set_src_caps_str (p.video.get (),
                                "video/x-raw,format=RGB,width=64,height=48,framerate=10/1");
  GstBuffer *b = gst_buffer_new_allocate (nullptr, W * H * 3, nullptr);
  EXPECT_EQ (gst_harness_push (p.video.get (), b), GST_FLOW_NOT_NEGOTIATED);
}

/* A chunk is drawn from its observation on, never on an earlier frame: one observed at 1 s is
 * not drawn at 0 (nor does the frame wait, without wait-actions), and is at 1 s. */
TEST (Pi0Overlay, AChunkIsNotDrawnOnAFrameBeforeItsObservation)
{
  Pair p = make ("mode=planar links=1 projection=\"20,0,32,0,-20,24\"");
  ASSERT_EQ (gst_harness_push (p.actions.get (), chunk (quarter_turn (), 10, 3, GST_SECOND)),
             GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (0)), GST_FLOW_OK);
  EXPECT_FALSE (changed_near (pull (p.video.get ()), W / 2, H / 2, W)) << "observed later";
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (GST_SECOND)), GST_FLOW_OK);
  EXPECT_TRUE (changed_near (pull (p.video.get ()), 32, 4, 1));
  EXPECT_EQ (stat (p.video.get (), "waited"), 0u);
}

namespace
{
/* Joint 0 still at 0 over ten rows: the whole path at the tool's start, (52, 24). */
std::vector<float>
still ()
{
  return std::vector<float> (30, 0.f);
}

/* Pushes one frame on its own thread: with wait-actions it may wait for its chunk. */
struct Pusher {
  std::thread t;
  std::atomic<int> ret{1};
  Pusher (GstHarness *h, GstClockTime pts)
      : t ([this, h, pts] { ret = (int)gst_harness_push (h, frame (pts)); })
  {
  }
  ~Pusher ()
  {
    if (t.joinable ())
      t.join ();
  }
};
} // namespace

/* wait-actions: each frame waits for the chunk made from it, and is drawn with that one, not
 * an earlier or a later one, whichever thread is first. The frame at 0 is not out until the
 * chunk observed at 0 is in; the chunk observed at 0.2 s, in before the frame at 0.1 s, lets
 * that frame through at once with the plan from 0, and is the plan at 0.2 s. */
TEST (Pi0Overlay, WaitActionsDrawsEachFrameWithTheChunkMadeFromIt)
{
  Pair p = make ("mode=planar links=1 projection=\"20,0,32,0,-20,24\" wait-actions=true");
  {
    Pusher f0 (p.video.get (), 0);
    g_usleep (100 * 1000);
    /* Not a timing claim: were the frame not waiting it would be out by now, and a late
     * scheduler only lets this pass. */
    BufferPtr early (gst_harness_try_pull (p.video.get ()));
    EXPECT_EQ (early, nullptr) << "the frame did not wait for its chunk";
    ASSERT_EQ (gst_harness_push (p.actions.get (), chunk (quarter_turn (), 10, 3, 0)), GST_FLOW_OK);
    f0.t.join ();
    EXPECT_EQ (f0.ret, GST_FLOW_OK);
  }
  EXPECT_TRUE (changed_near (pull (p.video.get ()), 32, 4, 1)) << "the plan from 0";
  ASSERT_EQ (gst_harness_push (p.actions.get (), chunk (still (), 10, 3, GST_SECOND / 5)),
             GST_FLOW_OK);
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (GST_SECOND / 10)), GST_FLOW_OK);
  EXPECT_TRUE (changed_near (pull (p.video.get ()), 32, 4, 1)) << "still the plan from 0";
  ASSERT_EQ (gst_harness_push (p.video.get (), frame (GST_SECOND / 5)), GST_FLOW_OK);
  auto f = pull (p.video.get ());
  EXPECT_TRUE (changed_near (f, 52, 24, 1));
  EXPECT_FALSE (changed_near (f, 32, 4, 2)) << "the plan from 0.2 s: no quarter turn";
  EXPECT_EQ (stat (p.video.get (), "waited"), 1u);
  EXPECT_EQ (stat (p.video.get (), "drawn"), 3u);
}

/* A waiting frame never hangs: the actions pad's EOS lets it through undrawn (and the frames
 * after it do not wait), and so does the element going down (the push is flushed). */
TEST (Pi0Overlay, AWaitingFrameLeavesOnTheActionsEosOrAStop)
{
  {
    Pair p = make ("wait-actions=true");
    Pusher f0 (p.video.get (), 0);
    ASSERT_TRUE (gst_harness_push_event (p.actions.get (), gst_event_new_eos ()));
    f0.t.join ();
    EXPECT_EQ (f0.ret, GST_FLOW_OK);
    EXPECT_FALSE (changed_near (pull (p.video.get ()), W / 2, H / 2, W));
    ASSERT_EQ (gst_harness_push (p.video.get (), frame (GST_SECOND)), GST_FLOW_OK);
    EXPECT_NE (BufferPtr (gst_harness_pull (p.video.get ())), nullptr);
  }
  {
    Pair p = make ("wait-actions=true");
    Pusher f0 (p.video.get (), 0);
    g_usleep (50 * 1000);
    ASSERT_EQ (gst_element_set_state (p.video->element, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
    f0.t.join ();
    EXPECT_EQ (f0.ret, GST_FLOW_FLUSHING);
  }
}
