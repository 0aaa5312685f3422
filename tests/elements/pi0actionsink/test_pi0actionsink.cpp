/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0actionsink: safety (non-finite chunks, limits, step bound, staleness), the watchdog on the
 * test clock, sessions and sequence numbers, flush/EOS/pause, TCP faults (peer absent, not
 * reading, killed), 1000 state cycles with a stalled peer, and frames that the robot simulator
 * validates. */

#include "protocol/pi0link.h"
#include "protocol/pi0safety.h"
#include "tests/pi0testsink.h"
#include "tests/pi0testgst.h"

#include <gst/check/gstharness.h>
#include <gst/check/gsttestclock.h>

#include <gtest/gtest.h>

#include <functional>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include <fcntl.h>
#include <stdio_ext.h>
#include <unistd.h>

using namespace pi0test;
using pi0test::HarnessPtr;

namespace
{

constexpr GstClockTime kPeriod = 20 * GST_MSECOND; /* control-rate 50 */

const char *kRobot3 = R"({"joints":["shoulder","elbow","gripper"],
  "lower":[-1.0,-2.0,0.0],"upper":[1.0,2.0,0.5],"max_step":[0.1,0.25,0.05]})";
const char *kRobotWide3 = R"({"joints":["a","b","c"],
  "lower":[-100,-100,-100],"upper":[100,100,100],"max_step":[1000,1000,1000]})";

using Fixture = pi0test::SinkFixture;

std::vector<float>
ramp3 (guint horizon, float start, float stepv)
{
  std::vector<float> v;
  for (guint i = 0; i < horizon; i++)
    for (int j = 0; j < 3; j++)
      v.push_back (start + stepv * (float)i + 0.01f * (float)j);
  return v;
}

/* Starts @desc as a lone element on a bus and returns the error text (or "" if it started). */
std::string
start_error (const std::string &desc)
{
  GstElement *e = gst_parse_launch (desc.c_str (), nullptr);
  EXPECT_NE (e, nullptr);
  GstBus *bus = gst_bus_new ();
  gst_element_set_bus (e, bus);
  GstStateChangeReturn r = gst_element_set_state (e, GST_STATE_PAUSED);
  std::string text;
  if (r == GST_STATE_CHANGE_FAILURE) {
    auto m = pi0test::pop_message (bus, GST_MESSAGE_ERROR);
    text = m ? pi0test::message_text (m.get ()) : "(failure without an error message)";
  }
  gst_element_set_state (e, GST_STATE_NULL);
  gst_element_set_bus (e, nullptr);
  gst_object_unref (bus);
  gst_object_unref (e);
  return text;
}

} // namespace

TEST (Pi0ActionSink, BuiltWithoutFastMath)
{
  EXPECT_TRUE (pi0::proto::float_checks_work ());
#if defined(__FAST_MATH__)
  FAIL () << "the test binary itself was built with -ffast-math";
#endif
}

TEST (Pi0ActionSink, PropertiesAndDefaults)
{
  GstElement *e = gst_element_factory_make ("pi0actionsink", nullptr);
  ASSERT_NE (e, nullptr);
  gchar *target = nullptr;
  gdouble rate = 0;
  guint64 hold = 0, stop = 0;
  g_object_get (e, "target", &target, "control-rate", &rate, "hold-timeout", &hold, "stop-timeout",
                &stop, nullptr);
  EXPECT_STREQ (target, "stdout");
  EXPECT_EQ (rate, 50.0);
  EXPECT_EQ (hold, 100 * GST_MSECOND);
  EXPECT_EQ (stop, GST_SECOND);
  g_free (target);
  /* The key is write-only. */
  GParamSpec *ps = g_object_class_find_property (G_OBJECT_GET_CLASS (e), "hmac-key");
  ASSERT_NE (ps, nullptr);
  EXPECT_FALSE (ps->flags & G_PARAM_READABLE);
  /* Every writable property is only mutable in READY or below, and has a blurb. */
  guint n = 0;
  GParamSpec **props = g_object_class_list_properties (G_OBJECT_GET_CLASS (e), &n);
  for (guint i = 0; i < n; i++) {
    if (props[i]->owner_type != G_OBJECT_TYPE (e))
      continue;
    EXPECT_TRUE (g_param_spec_get_blurb (props[i]) && *g_param_spec_get_blurb (props[i]))
        << props[i]->name;
    if (props[i]->flags & G_PARAM_WRITABLE) {
      EXPECT_TRUE (props[i]->flags & GST_PARAM_MUTABLE_READY) << props[i]->name;
    }
  }
  g_free (props);
  gst_object_unref (e);
}

/* ros2:// targets are served by the pi0ros2 plugin (gst/ros2/), found through the registry at
 * start: without it, a clear error and nothing sent (these tests register the pi0 elements only,
 * so the plugin is never there). What the link refuses with it is below, through
 * configure_link; the link itself runs against real ROS 2 in tests/ros2/. */
TEST (Pi0ActionSink, Ros2TargetsNeedThePi0Ros2PluginAndSaySo)
{
  const std::string err =
      start_error ("pi0actionsink mode=chunk target=ros2:///arm/joint_trajectory "
                   "robot-config=" +
                   pi0test::source_root () + "/pipelines/robot-7dof.json");
  EXPECT_NE (err.find ("needs the pi0ros2 plugin, which is not installed"), std::string::npos)
      << err;
  EXPECT_NE (err.find ("-Dros2=enabled"), std::string::npos) << err;
}

TEST (Pi0ActionSink, Ros2TargetsRefuseWhatTheLinkCannotHonour)
{
  /* A table that never opens: configure_link decides before the link is asked. */
  const Pi0ExternalLink table = {PI0_EXTERNAL_LINK_ABI,
                                 "ros2",
                                 [] (const char *, const char *const *, unsigned, char **e) {
                                   *e = g_strdup ("not in this test");
                                   return (void *)nullptr;
                                 },
                                 nullptr,
                                 nullptr,
                                 nullptr,
                                 nullptr};
  auto refused = [&] (const std::function<void (pi0::proto::LinkOptions &)> &set) {
    pi0::proto::LinkOptions o;
    o.target = "ros2:///arm_controller/joint_trajectory";
    o.mode = pi0::proto::SendMode::kChunk;
    o.robot_config = pi0test::source_root () + "/pipelines/robot-7dof.json";
    o.transport.external = &table;
    set (o);
    pi0::proto::LinkConfig cfg;
    std::string err, hint;
    return pi0::proto::configure_link (o, &cfg, &err, &hint) ? std::string () : err;
  };
  EXPECT_EQ (refused ([] (pi0::proto::LinkOptions &) {}), "");
  EXPECT_NE (refused ([] (pi0::proto::LinkOptions &o) {
               o.hmac_key = "k";
               o.hmac_key_set = true;
             }).find ("hmac-key does not apply to a ros2:// target"),
             std::string::npos);
  EXPECT_NE (refused ([] (pi0::proto::LinkOptions &o) {
               o.format = pi0::proto::Format::kJson;
             }).find ("format=json cannot be sent to a ros2:// target"),
             std::string::npos);
  /* The joint names of the trajectories come from the configuration: no unlimited ROS. */
  EXPECT_NE (refused ([] (pi0::proto::LinkOptions &o) {
               o.robot_config.clear ();
               o.allow_unlimited = true;
             }).find ("needs robot-config"),
             std::string::npos);
  EXPECT_NE (refused ([] (pi0::proto::LinkOptions &o) {
               o.mode = pi0::proto::SendMode::kLog;
             }).find ("never goes to a robot"),
             std::string::npos);
  /* Configured, the link's own refusal is what opening says. */
  pi0::proto::LinkOptions o;
  o.target = "ros2:///arm_controller/joint_trajectory";
  o.mode = pi0::proto::SendMode::kChunk;
  o.robot_config = pi0test::source_root () + "/pipelines/robot-7dof.json";
  o.transport.external = &table;
  pi0::proto::LinkConfig cfg;
  std::string err, hint;
  ASSERT_TRUE (pi0::proto::configure_link (o, &cfg, &err, &hint)) << err;
  EXPECT_TRUE (cfg.transport.read_feedback) << "chunk mode reads what the controller executes";
  EXPECT_EQ (cfg.transport.joints.size (), 7u);
  pi0::proto::SenderLink link;
  EXPECT_FALSE (link.open (cfg, &err));
  EXPECT_EQ (err, "not in this test");
  /* A table of another build is refused. */
  Pi0ExternalLink other = table;
  other.abi = PI0_EXTERNAL_LINK_ABI + 1;
  cfg.transport.external = &other;
  EXPECT_FALSE (link.open (cfg, &err));
  EXPECT_NE (err.find ("no link for ros2:// targets"), std::string::npos) << err;
}

TEST (Pi0ActionSink, RefusesToStartWithoutLimitsOrWithABadConfig)
{
  TempDir dir;
  std::string err = start_error ("pi0actionsink target=stdout");
  EXPECT_NE (err.find ("robot-config"), std::string::npos) << err;
  err = start_error (
      "pi0actionsink robot-config=" +
      dir.file ("bad.json", R"({"joints":["a"],"lower":[1],"upper":[0],"max_step":[1]})"));
  EXPECT_NE (err.find ("lower limit is above the upper limit"), std::string::npos) << err;
  err = start_error ("pi0actionsink robot-config=/nonexistent/robot.json");
  EXPECT_NE (err.find ("cannot read robot config"), std::string::npos) << err;
  /* Issue 25: /dev/zero was read until killed, a FIFO with no writer blocked the start. */
  err = start_error ("pi0actionsink robot-config=/dev/zero");
  EXPECT_NE (err.find ("/dev/zero: is a character device, not a regular file"), std::string::npos)
      << err;
  const std::string fifo = dir.path () + "/robot-fifo";
  ASSERT_EQ (mkfifo (fifo.c_str (), 0600), 0);
  err = start_error ("pi0actionsink robot-config=" + fifo);
  EXPECT_NE (err.find ("is a FIFO, not a regular file"), std::string::npos) << err;
  err = start_error ("pi0actionsink allow-unlimited=true target=udp://localhost:9");
  EXPECT_NE (err.find ("not a numeric IP address"), std::string::npos) << err;
  err = start_error ("pi0actionsink allow-unlimited=true target=http://127.0.0.1:9");
  EXPECT_NE (err.find ("is not udp://"), std::string::npos) << err;
  err = start_error ("pi0actionsink allow-unlimited=true target=udp://127.0.0.1");
  EXPECT_NE (err.find ("needs an IP address and a port"), std::string::npos) << err;
  err = start_error (
      "pi0actionsink allow-unlimited=true hold-timeout=500000000 stop-timeout=100000000");
  EXPECT_NE (err.find ("stop-timeout"), std::string::npos) << err;
  err = start_error ("pi0actionsink allow-unlimited=true format=json target=udp://127.0.0.1:9");
  EXPECT_NE (err.find ("cannot be sent over UDP"), std::string::npos) << err;
  err = start_error (
      "pi0actionsink allow-unlimited=true reconnect-min=500000000 reconnect-max=100000000");
  EXPECT_NE (err.find ("reconnect-max"), std::string::npos) << err;
  err = start_error ("pi0actionsink target=udp://127.0.0.1:9 datagram-size=128 robot-config=" +
                     dir.file (
                         "big.json", std::string (R"({"joints":[)") +
                                         [] {
                                           std::string s;
                                           for (int i = 0; i < 40; i++)
                                             s += (i ? ",\"j" : "\"j") + std::to_string (i) + "\"";
                                           return s;
                                         }() +
                                         R"(],"lower":[)" +
                                         [] {
                                           std::string s;
                                           for (int i = 0; i < 40; i++)
                                             s += i ? ",0" : "0";
                                           return s;
                                         }() +
                                         R"(],"upper":[)" +
                                         [] {
                                           std::string s;
                                           for (int i = 0; i < 40; i++)
                                             s += i ? ",1" : "1";
                                           return s;
                                         }() +
                                         R"(],"max_step":[)" +
                                         [] {
                                           std::string s;
                                           for (int i = 0; i < 40; i++)
                                             s += i ? ",1" : "1";
                                           return s;
                                         }() +
                                         "]}"));
  EXPECT_NE (err.find ("cannot hold one action"), std::string::npos) << err;
  err = start_error (
      "pi0actionsink allow-unlimited=true target=file:///nonexistent-dir/actions.jsonl");
  EXPECT_NE (err.find ("cannot open /nonexistent-dir/actions.jsonl"), std::string::npos) << err;
  /* And a good one starts. */
  EXPECT_EQ ("", start_error ("pi0actionsink target=file://" + dir.file ("out.jsonl") +
                              " robot-config=" + dir.file ("ok.json", kRobot3)));
}

TEST (Pi0ActionSink, DimensionMismatchIsAnErrorAndSendsNothing)
{
  Fixture f;
  f.make ("mode=chunk target=file://" + f.dir.file ("out.jsonl"), kRobot3);
  GstBus *bus = gst_bus_new ();
  gst_element_set_bus (f.sink, bus);
  f.rec.take (); /* the greeting HOLD */
  std::vector<float> v (5 * 4, 0.0f);
  EXPECT_EQ (GST_FLOW_NOT_NEGOTIATED, f.push (5, 4, v, 1, 0));
  auto m = pi0test::pop_message (bus, GST_MESSAGE_ERROR);
  ASSERT_TRUE (m);
  std::string text = pi0test::message_text (m.get ());
  EXPECT_NE (text.find ("4 values per action but the robot configuration has 3 joints"),
             std::string::npos)
      << text;
  EXPECT_EQ (f.rec.count ("action"), 0u);
  EXPECT_EQ (stat (f.sink, "sent"), 0u);
  for (auto &l : read_lines (f.dir.path () + "/out.jsonl"))
    EXPECT_EQ (l.find ("\"kind\":\"action\""), std::string::npos) << l;
  gst_element_set_bus (f.sink, nullptr);
  gst_object_unref (bus);
}

TEST (Pi0ActionSink, WithoutConfigTheFirstChunkFixesTheDimension)
{
  Fixture f;
  f.make ("mode=chunk allow-unlimited=true target=file://" + f.dir.file ("out.jsonl"), "");
  EXPECT_EQ (GST_FLOW_OK, f.push (2, 3, ramp3 (2, 0, 1), 1, 0));
  EXPECT_EQ (f.rec.count ("action"), 1u);
  GstBus *bus = gst_bus_new ();
  gst_element_set_bus (f.sink, bus);
  EXPECT_EQ (GST_FLOW_NOT_NEGOTIATED, f.push (2, 2, {0, 0, 0, 0}, 2, 0));
  auto m = pi0test::pop_message (bus, GST_MESSAGE_ERROR);
  ASSERT_TRUE (m);
  EXPECT_NE (pi0test::message_text (m.get ()).find ("this stream started with 3"),
             std::string::npos);
  EXPECT_EQ (f.rec.count ("action"), 1u);
  gst_element_set_bus (f.sink, nullptr);
  gst_object_unref (bus);
}

TEST (Pi0ActionSink, StdoutCarriesJsonLines)
{
  testing::internal::CaptureStdout ();
  {
    Fixture f;
    f.make ("mode=chunk allow-unlimited=true target=stdout", "");
    EXPECT_EQ (GST_FLOW_OK, f.push (2, 3, ramp3 (2, 0.5f, 1), 3, 0));
  }
  const std::string out = testing::internal::GetCapturedStdout ();
  std::vector<std::string> lines;
  gchar **split = g_strsplit (out.c_str (), "\n", -1);
  for (gchar **it = split; *it; it++) {
    if (**it)
      lines.emplace_back (*it);
  }
  g_strfreev (split);
  /* HELLO and HOLD once the first chunk fixes the dimension, the action, HOLD on the way down. */
  ASSERT_EQ (lines.size (), 4u) << out;
  EXPECT_NE (lines[0].find ("\"kind\":\"hello\""), std::string::npos);
  EXPECT_NE (lines[3].find ("\"kind\":\"hold\""), std::string::npos);
  bool found = false;
  for (auto &l : lines) {
    JsonLine j (l);
    ASSERT_TRUE (j.ok ()) << l;
    if (j.str ("kind") == "action") {
      found = true;
      EXPECT_EQ (j.num ("steps"), 2);
      EXPECT_EQ (j.num ("chunk_id"), 3);
    }
  }
  EXPECT_TRUE (found) << out;
}

TEST (Pi0ActionSink, NonFiniteChunksAreNeverForwarded)
{
  /* A smaller count through the whole element than test_protocol's 10^5 through the gate. */
  Fixture f;
  UdpReceiver rx;
  f.make ("mode=chunk target=" + rx.target (), kRobotWide3);
  std::mt19937 rng (2024);
  std::uniform_real_distribution<float> val (-50.f, 50.f);
  const float bad[] = {
      std::numeric_limits<float>::quiet_NaN (), std::numeric_limits<float>::signaling_NaN (),
      std::numeric_limits<float>::infinity (), -std::numeric_limits<float>::infinity ()};
  guint64 injected = 0, good = 0;
  std::vector<guint64> good_ids;
  std::vector<pi0::proto::Frame> wire;
  int bad_frames = 0;
  for (guint64 i = 1; i <= 3000; i++) {
    guint horizon = 1 + rng () % 20;
    std::vector<float> v ((size_t)horizon * 3);
    for (auto &x : v)
      x = val (rng);
    const bool poison = rng () % 2;
    if (poison) {
      for (unsigned k = 0, n = 1 + rng () % 3; k < n; k++)
        v[rng () % v.size ()] = bad[rng () % 4];
      injected++;
    } else {
      good++;
      good_ids.push_back (i);
    }
    ASSERT_EQ (GST_FLOW_OK, f.push (horizon, 3, v, i, 0));
    /* Read as we go: the loopback socket's receive buffer holds only a few hundred frames. */
    if (i % 32 == 0)
      for (auto &fr : rx.drain (&bad_frames))
        wire.push_back (std::move (fr));
  }
  for (auto &fr : rx.drain (&bad_frames))
    wire.push_back (std::move (fr));
  EXPECT_EQ (stat (f.sink, "rejected"), injected);
  EXPECT_EQ (stat (f.sink, "stale"), 0u);
  EXPECT_EQ (stat (f.sink, "dropped"), 0u);
  /* What left: on the signal and on the wire, only finite values from the clean chunks. */
  std::set<guint64> allowed (good_ids.begin (), good_ids.end ());
  size_t actions = 0;
  for (auto &r : f.rec.all ()) {
    for (float x : r.values)
      ASSERT_TRUE (std::isfinite (x));
    if (r.kind == "action") {
      ASSERT_TRUE (allowed.count (r.chunk_id)) << r.chunk_id;
      actions++;
    }
  }
  EXPECT_EQ (actions, good);
  size_t wire_actions = 0;
  for (auto &fr : wire) {
    if (fr.header.kind == pi0::proto::Kind::kAction) {
      ASSERT_TRUE (allowed.count (fr.header.chunk_id));
      wire_actions++;
    }
  }
  EXPECT_EQ (bad_frames, 0);
  EXPECT_EQ (wire_actions, good);
}

TEST (Pi0ActionSink, FlagSetByUpstreamIsHonouredEvenIfValuesLookFinite)
{
  Fixture f;
  f.make ("mode=chunk target=file://" + f.dir.file ("o.jsonl"), kRobotWide3);
  GstBuffer *b = make_chunk (2, 3, ramp3 (2, 0, 1), 9, 0);
  gst_buffer_get_pi0_action_meta (b)->flags = GST_PI0_ACTION_FLAG_NON_FINITE;
  EXPECT_EQ (GST_FLOW_OK, gst_harness_push (f.h.get (), b));
  EXPECT_EQ (stat (f.sink, "rejected"), 1u);
  EXPECT_EQ (f.rec.count ("action"), 0u);
  /* A buffer without any action meta is rejected too. */
  EXPECT_EQ (GST_FLOW_OK, gst_harness_push (f.h.get (), gst_buffer_new ()));
  EXPECT_EQ (stat (f.sink, "rejected"), 2u);
  /* And one without an observation time: its age is unknown. */
  EXPECT_EQ (GST_FLOW_OK, f.push (2, 3, ramp3 (2, 0, 1), 10, GST_CLOCK_TIME_NONE));
  EXPECT_EQ (stat (f.sink, "rejected"), 3u);
  EXPECT_EQ (f.rec.count ("action"), 0u);
}

TEST (Pi0ActionSink, EveryOutputRespectsLimitsAndMaxStep)
{
  /* Property test through the element in stream mode: random chunks with values far outside
   * the limits, at ±1 ulp of them, and 1e30; every row leaving the sink (signal and wire) is
   * inside [lower, upper] and within max_step of the previous command, HOLDs included. */
  Fixture f;
  UdpReceiver rx;
  f.make ("mode=stream target=" + rx.target () + " hold-timeout=30000000 stop-timeout=60000000",
          kRobot3);
  pi0::proto::RobotConfig cfg;
  ASSERT_TRUE (pi0::proto::parse_robot_config (kRobot3, &cfg, nullptr));
  std::mt19937 rng (77);
  std::uniform_real_distribution<float> wide (-3.f, 3.f);
  std::vector<float> specials = {1e30f, -1e30f, 3.4e38f, -3.4e38f, 0.0f};
  for (unsigned j = 0; j < 3; j++)
    for (float b : {cfg.lower[j], cfg.upper[j]})
      for (float d : {-1e30f, 1e30f})
        specials.push_back (std::nextafter (b, d)), specials.push_back (b);
  guint64 seq = 0;
  for (int round = 0; round < 60; round++) {
    guint horizon = 1 + rng () % 8;
    std::vector<float> v ((size_t)horizon * 3);
    for (auto &x : v)
      x = (rng () % 3 == 0) ? specials[rng () % specials.size ()] : wide (rng);
    ASSERT_EQ (GST_FLOW_OK, f.push (horizon, 3, v, ++seq, f.now ()));
    /* Sometimes let the chunk run out so HOLD/STOP happen in between. */
    const int ticks = 1 + rng () % (horizon + 4);
    for (int t = 0; t < ticks; t++)
      f.crank ();
  }
  auto check_rows = [&] (const std::vector<float> &vals, const std::vector<float> *prev) {
    for (unsigned j = 0; j < 3; j++) {
      ASSERT_GE (vals[j], cfg.lower[j]);
      ASSERT_LE (vals[j], cfg.upper[j]);
      if (prev) {
        ASSERT_TRUE (exact_within (vals[j], (*prev)[j], cfg.max_step[j]))
            << "joint " << j << ": " << (*prev)[j] << " -> " << vals[j];
      }
    }
  };
  std::vector<float> prev;
  size_t rows = 0;
  for (auto &r : f.rec.all ()) {
    if (r.steps == 0)
      continue;
    ASSERT_EQ (r.values.size (), 3u);
    check_rows (r.values, prev.empty () ? nullptr : &prev);
    prev = r.values;
    rows += r.kind == "action";
  }
  EXPECT_GT (rows, 30u);
  EXPECT_GT (stat (f.sink, "clamped"), 0u);
  /* The same on the wire, decoded. */
  prev.clear ();
  for (auto &fr : rx.drain ()) {
    if (fr.header.steps == 0)
      continue;
    check_rows (fr.values, prev.empty () ? nullptr : &prev);
    prev = fr.values;
  }
}

TEST (Pi0ActionSink, ChunkModeBoundsEachChunkAgainstTheRowBeingExecuted)
{
  /* In chunk mode the robot runs row i of a chunk at observation + i * period and a new chunk
   * replaces the rest of the old one on arrival, so the first row of a new chunk is bounded
   * against the old chunk's row due at that moment (docs/elements/pi0actionsink.md), and
   * each further row against the row before it. HOLD holds exactly that row. */
  Fixture f;
  f.make ("mode=chunk hold-timeout=40000000 stop-timeout=80000000 target=file://" +
              f.dir.file ("o.jsonl"),
          kRobot3);
  pi0::proto::RobotConfig cfg;
  ASSERT_TRUE (pi0::proto::parse_robot_config (kRobot3, &cfg, nullptr));
  std::mt19937 rng (5);
  std::uniform_real_distribution<float> wide (-3.f, 3.f);
  for (int round = 0; round < 150; round++) {
    guint horizon = 1 + rng () % 10;
    std::vector<float> v ((size_t)horizon * 3);
    for (auto &x : v)
      x = (rng () % 5 == 0) ? (rng () % 2 ? 1e30f : -1e30f) : wide (rng);
    ASSERT_EQ (GST_FLOW_OK, f.push (horizon, 3, v, (guint64)round + 1, f.now ()));
    for (int t = 0, n = (int)(rng () % 12); t < n; t++)
      f.crank ();
  }
  std::vector<float> prev_rows; /* rows of the last chunk sent */
  GstClockTime prev_obs = 0;
  std::vector<float> held; /* position of the last HOLD */
  size_t chunks = 0;
  for (auto &r : f.rec.all ()) {
    const std::vector<float> *ref = nullptr;
    std::vector<float> ref_row;
    if (!prev_rows.empty ()) {
      guint64 j = (r.clock_time - prev_obs) / kPeriod;
      j = std::min<guint64> (j, prev_rows.size () / 3 - 1);
      ref_row.assign (prev_rows.begin () + (long)j * 3, prev_rows.begin () + (long)j * 3 + 3);
      ref = &ref_row;
    } else if (!held.empty ()) {
      ref = &held;
    }
    if (r.kind == "hold") {
      if (ref) {
        EXPECT_EQ (r.values, *ref) << "HOLD must hold the row being executed";
      }
      if (!r.values.empty ())
        held = r.values;
      prev_rows.clear ();
      continue;
    }
    if (r.kind != "action")
      continue;
    ASSERT_EQ (r.step_index, 0u); /* pushed with observation time = now */
    for (guint i = 0; i < r.steps; i++) {
      const float *row = r.values.data () + i * 3;
      const float *before = i ? row - 3 : (ref ? ref->data () : nullptr);
      for (unsigned jn = 0; jn < 3; jn++) {
        ASSERT_GE (row[jn], cfg.lower[jn]);
        ASSERT_LE (row[jn], cfg.upper[jn]);
        if (before) {
          ASSERT_TRUE (exact_within (row[jn], before[jn], cfg.max_step[jn]))
              << "chunk " << r.chunk_id << " row " << i << " joint " << jn << ": " << before[jn]
              << " -> " << row[jn];
        }
      }
    }
    prev_rows = r.values;
    prev_obs = r.clock_time;
    chunks++;
  }
  EXPECT_EQ (chunks, 150u);
  EXPECT_GT (stat (f.sink, "holds"), 10u) << "the test should exercise HOLD between chunks";
  EXPECT_GT (stat (f.sink, "clamped"), 10u);
}

/* Issue 27: a pi0-episode start says the robot was reset: the sink holds where the robot is (a
 * HOLD without a position) and bounds the next chunk's first row against the state measured at
 * its observation, when that state is present, fresh and finite; never against the last
 * episode's commands. */
TEST (Pi0ActionSink, AnEpisodeStartHoldsAndBoundsTheNextChunkByTheMeasuredState)
{
  const std::vector<float> next = {0.9f, 1.5f, 0.4f, 0.9f, 1.5f, 0.4f};
  struct Case {
    bool episode;
    std::vector<float> state;
    GstPi0StateFlags flags;
    std::vector<float> first; /* the first row sent */
  };
  const GstPi0StateFlags present = GST_PI0_STATE_FLAG_PRESENT;
  const GstPi0StateFlags stale =
      (GstPi0StateFlags)(GST_PI0_STATE_FLAG_PRESENT | GST_PI0_STATE_FLAG_STALE);
  const float nan = std::numeric_limits<float>::quiet_NaN ();
  const Case cases[] = {
      /* no event: bounded against the last episode's last row (0.36, 0.37, 0.38) */
      {false, {-0.5f, 0.0f, 0.1f}, present, {0.46f, 0.62f, 0.4f}},
      /* the measured state is the reference */
      {true, {-0.5f, 0.0f, 0.1f}, present, {-0.4f, 0.25f, 0.15f}},
      {true, {0.85f, 1.4f, 0.38f}, present, {0.9f, 1.5f, 0.4f}},
      /* a stale, non-finite or missing state is no reference: the limits alone */
      {true, {-0.5f, 0.0f, 0.1f}, stale, {0.9f, 1.5f, 0.4f}},
      {true, {-0.5f, nan, 0.1f}, present, {0.9f, 1.5f, 0.4f}},
      {true, {}, GST_PI0_STATE_FLAG_NONE, {0.9f, 1.5f, 0.4f}},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE (::testing::Message () << "episode " << c.episode << " flags " << c.flags);
    Fixture f;
    f.make ("mode=chunk hold-timeout=10000000000 stop-timeout=20000000000 target=file://" +
                f.dir.file ("o.jsonl"),
            kRobot3);
    ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 0, 0.04f), 1, 0));
    gst_test_clock_set_time (f.clock (), 300 * GST_MSECOND);
    f.rec.take ();
    if (c.episode) {
      ASSERT_TRUE (gst_harness_push_event (
          f.h.get (), gst_pi0_episode_event_new (GST_PI0_EPISODE_START, nullptr)));
      auto recs = f.rec.take ();
      ASSERT_EQ (recs.size (), 1u);
      EXPECT_EQ (recs[0].kind, "hold");
      EXPECT_TRUE (recs[0].values.empty ()) << "hold where the robot is";
    }
    GstBuffer *b = make_chunk (2, 3, next, 2, 300 * GST_MSECOND);
    GstPi0ObservationMeta *om = gst_buffer_add_pi0_observation_meta (b);
    om->observation_time = 300 * GST_MSECOND;
    if (!c.state.empty ())
      gst_pi0_observation_meta_set_state (om, c.state.data (), 3, 300 * GST_MSECOND, c.flags);
    ASSERT_EQ (GST_FLOW_OK, gst_harness_push (f.h.get (), b));
    auto recs = f.rec.take ();
    ASSERT_EQ (recs.size (), 1u);
    ASSERT_EQ (recs[0].kind, "action");
    ASSERT_EQ (recs[0].values.size (), 6u);
    for (int j = 0; j < 3; j++)
      EXPECT_NEAR (recs[0].values[j], c.first[j], 1e-6) << "joint " << j;
  }
}

TEST (Pi0ActionSink, StaleChunksAreDroppedAndPastStepsSkipped)
{
  Fixture f;
  f.make ("mode=chunk max-action-age=500000000 target=file://" + f.dir.file ("o.jsonl"),
          kRobotWide3);
  gst_test_clock_set_time (f.clock (), 2 * GST_SECOND);
  /* Observation 600 ms old: older than max-action-age. */
  EXPECT_EQ (GST_FLOW_OK, f.push (50, 3, ramp3 (50, 0, 0.01f), 1, 1400 * GST_MSECOND));
  EXPECT_EQ (stat (f.sink, "stale"), 1u);
  EXPECT_EQ (f.rec.count ("action"), 0u);
  /* 70 ms old at 20 ms per row: rows 0..3 are due at 0, 20, 40, 60 ms, so 0-2 are in the past
   * and row 3 (due 60 ms, the current one) is the first sent. */
  EXPECT_EQ (GST_FLOW_OK,
             f.push (10, 3, ramp3 (10, 0, 0.01f), 2, 2 * GST_SECOND - 70 * GST_MSECOND));
  auto recs = f.rec.take ();
  ASSERT_EQ (recs.size (), 1u);
  EXPECT_EQ (recs[0].kind, "action");
  EXPECT_EQ (recs[0].step_index, 3u);
  EXPECT_EQ (recs[0].steps, 7u);
  EXPECT_FLOAT_EQ (recs[0].values[0], 0.03f);
  /* Entirely in the past (10 rows = 200 ms, observation 300 ms old): dropped. */
  EXPECT_EQ (GST_FLOW_OK,
             f.push (10, 3, ramp3 (10, 0, 0.01f), 3, 2 * GST_SECOND - 300 * GST_MSECOND));
  EXPECT_EQ (stat (f.sink, "stale"), 2u);
  EXPECT_EQ (f.rec.count ("action"), 0u);
}

TEST (Pi0ActionSink, StreamModeExecutesRowsAlignedToCaptureTime)
{
  Fixture f;
  f.make ("mode=stream execute-steps=6 target=file://" + f.dir.file ("o.jsonl"), kRobotWide3);
  f.crank (); /* first tick at 0 */
  f.crank_until (100 * GST_MSECOND);
  f.rec.take ();
  /* Captured at 50 ms, arrives at 100 ms (after that tick): rows are due at 50, 70, 90, 110 ms,
   * so at the next tick (120 ms) row 3 is the current one and rows 0-2 are skipped. */
  ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 0, 0.1f), 5, 50 * GST_MSECOND));
  f.crank_until (200 * GST_MSECOND);
  std::vector<guint> steps;
  for (auto &r : f.rec.take ())
    if (r.kind == "action")
      steps.push_back (r.step_index);
  /* execute-steps=6: rows 3..5 only. */
  EXPECT_EQ (steps, (std::vector<guint>{3, 4, 5}));
  /* A newer chunk replaces the rest of an older one at the next tick. */
  ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 5, 0.1f), 6, f.now ()));
  ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 9, 0.1f), 7, f.now ()));
  f.crank_until (f.now () + 3 * kPeriod);
  auto recs = f.rec.take ();
  ASSERT_FALSE (recs.empty ());
  for (auto &r : recs) {
    if (r.kind == "action") {
      EXPECT_EQ (r.chunk_id, 7u);
    }
  }
}

TEST (Pi0ActionSink, StreamModeTellsUpstreamWhatRunsAtEachTick)
{
  Fixture f;
  f.make ("mode=stream execute-steps=6 target=file://" + f.dir.file ("o.jsonl"), kRobotWide3);
  f.crank ();
  f.crank_until (100 * GST_MSECOND);
  pull_executing (f.h.get ());
  /* As in StreamModeExecutesRowsAlignedToCaptureTime: rows 3, 4, 5 at 120, 140, 160 ms. */
  ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 0, 0.1f), 5, 50 * GST_MSECOND));
  f.crank_until (200 * GST_MSECOND);
  std::vector<Executing> got = pull_executing (f.h.get ());
  std::vector<Executing> want = {{5, 3, 120 * GST_MSECOND, kPeriod},
                                 {5, 4, 140 * GST_MSECOND, kPeriod},
                                 {5, 5, 160 * GST_MSECOND, kPeriod}};
  EXPECT_EQ (got, want);
}

TEST (Pi0ActionSink, ChunkModeTellsUpstreamTheFirstRowSent)
{
  Fixture f;
  f.make ("mode=chunk target=file://" + f.dir.file ("o.jsonl"), kRobotWide3);
  f.crank ();
  f.crank_until (100 * GST_MSECOND);
  pull_executing (f.h.get ());
  const GstClockTime at = f.now ();
  ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 0, 0.1f), 8, 50 * GST_MSECOND));
  std::vector<Executing> got = pull_executing (f.h.get ());
  ASSERT_EQ (got.size (), 1u);
  EXPECT_EQ (got[0].chunk, 8u);
  EXPECT_EQ (got[0].time, at);
  EXPECT_EQ (got[0].period, kPeriod);
  /* Captured at 50 ms, sent at 100 ms or later: rows before (now - 50 ms) / 20 ms are past. */
  EXPECT_EQ (got[0].row, (guint)((at - 50 * GST_MSECOND) / kPeriod));
}

TEST (Pi0ActionSinkLog, SendsNoFeedbackUpstream)
{
  Fixture f;
  f.make ("mode=log target=file://" + f.dir.file ("o.jsonl"), "");
  ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 0, 0.1f), 8, 50 * GST_MSECOND));
  EXPECT_TRUE (pull_executing (f.h.get ()).empty ());
}

TEST (Pi0ActionSink, WatchdogHoldsThenStopsOnTheClockAndThenStaysQuiet)
{
  Fixture f;
  f.make ("mode=stream hold-timeout=50000000 stop-timeout=200000000 target=file://" +
              f.dir.file ("o.jsonl"),
          kRobotWide3);
  f.rec.take ();
  ASSERT_EQ (GST_FLOW_OK, f.push (5, 3, ramp3 (5, 0, 0.1f), 1, 0));
  f.crank_until (600 * GST_MSECOND);
  auto recs = f.rec.take ();
  GstClockTime last_action = GST_CLOCK_TIME_NONE, hold = GST_CLOCK_TIME_NONE,
               stop = GST_CLOCK_TIME_NONE;
  std::vector<float> last_values;
  size_t after_stop = 0;
  for (auto &r : recs) {
    if (GST_CLOCK_TIME_IS_VALID (stop)) {
      after_stop++;
      continue;
    }
    if (r.kind == "action") {
      last_action = r.clock_time;
      last_values = r.values;
    } else if (r.kind == "hold" && !GST_CLOCK_TIME_IS_VALID (hold)) {
      hold = r.clock_time;
      EXPECT_EQ (r.values, last_values) << "HOLD must keep the last commanded position";
    } else if (r.kind == "stop") {
      stop = r.clock_time;
    }
  }
  ASSERT_EQ (last_action, 80 * GST_MSECOND); /* rows 0-4 at 0, 20, ... 80 ms */
  ASSERT_TRUE (GST_CLOCK_TIME_IS_VALID (hold));
  ASSERT_TRUE (GST_CLOCK_TIME_IS_VALID (stop));
  /* HOLD within one tick after hold-timeout, STOP at stop-timeout, then nothing at all. */
  EXPECT_GE (hold, last_action + 50 * GST_MSECOND);
  EXPECT_LE (hold, last_action + 50 * GST_MSECOND + kPeriod);
  EXPECT_GE (stop, last_action + 200 * GST_MSECOND);
  EXPECT_LE (stop, last_action + 200 * GST_MSECOND + kPeriod);
  EXPECT_EQ (after_stop, 0u);
  EXPECT_EQ (stat (f.sink, "holds"), 1u);
  EXPECT_EQ (stat (f.sink, "stops"), 1u);
  /* A fresh chunk resumes. */
  ASSERT_EQ (GST_FLOW_OK, f.push (5, 3, ramp3 (5, 0, 0.1f), 2, f.now ()));
  f.crank_until (f.now () + kPeriod);
  EXPECT_GE (f.rec.count ("action"), 1u);
}

TEST (Pi0ActionSink, WatchdogInChunkModeCountsFromTheLastRowsDueTime)
{
  Fixture f;
  f.make ("mode=chunk hold-timeout=50000000 stop-timeout=100000000 target=file://" +
              f.dir.file ("o.jsonl"),
          kRobotWide3);
  f.rec.take ();
  ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 0, 0.01f), 1, 0)); /* rows due 0..180 ms */
  f.crank_until (400 * GST_MSECOND);
  GstClockTime hold = GST_CLOCK_TIME_NONE, stop = GST_CLOCK_TIME_NONE;
  for (auto &r : f.rec.all ()) {
    if (r.kind == "hold" && !GST_CLOCK_TIME_IS_VALID (hold))
      hold = r.clock_time;
    if (r.kind == "stop")
      stop = r.clock_time;
  }
  EXPECT_GE (hold, 230 * GST_MSECOND);
  EXPECT_LE (hold, 230 * GST_MSECOND + kPeriod);
  EXPECT_GE (stop, 280 * GST_MSECOND);
  EXPECT_LE (stop, 280 * GST_MSECOND + kPeriod);
}

TEST (Pi0ActionSink, SequenceNumbersIncreaseAndSessionsChangeOnRestart)
{
  Fixture f;
  UdpReceiver rx;
  f.make ("mode=stream target=" + rx.target (), kRobotWide3);
  for (int i = 0; i < 20; i++) {
    ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 0, 0.01f), (guint64)i + 1, f.now ()));
    f.crank ();
    f.crank ();
  }
  gst_element_set_state (f.sink, GST_STATE_NULL); /* sends HOLD in the first session */
  auto first = rx.drain ();
  ASSERT_GT (first.size (), 20u);
  EXPECT_EQ (first.back ().header.kind, pi0::proto::Kind::kHold);
  gst_element_set_state (f.sink, GST_STATE_PLAYING);
  gst_harness_set_src_caps_str (f.h.get (), GST_PI0_OBSERVATION_MEDIA_TYPE);
  ASSERT_EQ (GST_FLOW_OK, f.push (10, 3, ramp3 (10, 0, 0.01f), 100, f.now ()));
  ASSERT_TRUE (gst_harness_crank_single_clock_wait (f.h.get ()));
  ASSERT_TRUE (gst_harness_wait_for_clock_id_waits (f.h.get (), 1, 10));
  auto second = rx.drain ();
  ASSERT_FALSE (second.empty ());
  /* The first frames of each session: HELLO then HOLD. */
  EXPECT_EQ (first[0].header.kind, pi0::proto::Kind::kHello);
  EXPECT_EQ (first[1].header.kind, pi0::proto::Kind::kHold);
  EXPECT_EQ (second[0].header.kind, pi0::proto::Kind::kHello);
  for (auto *s : {&first, &second}) {
    for (size_t i = 1; i < s->size (); i++) {
      EXPECT_EQ ((*s)[i].header.session_id, (*s)[0].header.session_id);
      EXPECT_GT ((*s)[i].header.seq, (*s)[i - 1].header.seq);
    }
    EXPECT_EQ ((*s)[0].header.seq, 1u);
  }
  EXPECT_NE (first[0].header.session_id, second[0].header.session_id);
}

TEST (Pi0ActionSink, FlushHoldsAndDiscardsPendingActions)
{
  Fixture f;
  f.make ("mode=stream target=file://" + f.dir.file ("o.jsonl"), kRobotWide3);
  ASSERT_EQ (GST_FLOW_OK, f.push (50, 3, ramp3 (50, 0, 0.01f), 1, 0));
  f.crank ();
  f.crank ();
  auto before = f.rec.take ();
  ASSERT_GE (before.size (), 2u);
  const std::vector<float> last = before.back ().values;
  ASSERT_TRUE (gst_harness_push_event (f.h.get (), gst_event_new_flush_start ()));
  auto recs = f.rec.take ();
  ASSERT_EQ (recs.size (), 1u);
  EXPECT_EQ (recs[0].kind, "hold");
  EXPECT_EQ (recs[0].values, last);
  ASSERT_TRUE (gst_harness_push_event (f.h.get (), gst_event_new_flush_stop (TRUE)));
  f.crank_until (f.now () + 10 * kPeriod);
  EXPECT_EQ (f.rec.count ("action"), 0u) << "no action of a pre-flush chunk after the flush";
}

TEST (Pi0ActionSink, EosHoldsAndDropsPendingActions)
{
  Fixture f;
  f.make ("mode=stream target=file://" + f.dir.file ("o.jsonl"), kRobotWide3);
  ASSERT_EQ (GST_FLOW_OK, f.push (50, 3, ramp3 (50, 0, 0.01f), 1, 0));
  f.crank ();
  f.rec.take ();
  ASSERT_TRUE (gst_harness_push_event (f.h.get (), gst_event_new_eos ()));
  auto recs = f.rec.take ();
  ASSERT_EQ (recs.size (), 1u);
  EXPECT_EQ (recs[0].kind, "hold");
  f.crank_until (f.now () + 10 * kPeriod);
  EXPECT_EQ (f.rec.count ("action"), 0u);
  /* The file ends with the HOLD (and later perhaps a STOP), never with an action. */
  auto lines = read_lines (f.dir.path () + "/o.jsonl");
  ASSERT_FALSE (lines.empty ());
  EXPECT_NE (lines.back ().find ("\"kind\":\"hold\""), std::string::npos);
}

TEST (Pi0ActionSink, PauseSendsHoldAndStopsTicking)
{
  Fixture f;
  f.make ("mode=stream target=file://" + f.dir.file ("o.jsonl"), kRobotWide3);
  ASSERT_EQ (GST_FLOW_OK, f.push (50, 3, ramp3 (50, 0, 0.01f), 1, 0));
  f.crank ();
  f.rec.take ();
  gst_element_set_state (f.sink, GST_STATE_PAUSED);
  auto recs = f.rec.take ();
  ASSERT_EQ (recs.size (), 1u);
  EXPECT_EQ (recs[0].kind, "hold");
  /* No clock wait is pending any more: the control thread is gone. */
  EXPECT_FALSE (gst_test_clock_peek_next_pending_id (f.clock (), nullptr));
}

/* Issue 16 item 5: an empty key would silently turn authentication off. */
TEST (Pi0ActionSink, RefusesAnEmptyHmacKey)
{
  std::string err = start_error ("pi0actionsink allow-unlimited=true hmac-key=\"\"");
  EXPECT_NE (err.find ("hmac-key is empty"), std::string::npos) << err;
  GstElement *e = gst_element_factory_make ("pi0actionsink", nullptr);
  ASSERT_NE (e, nullptr);
  g_object_set (e, "allow-unlimited", TRUE, "hmac-key", "", nullptr);
  GstBus *bus = gst_bus_new ();
  gst_element_set_bus (e, bus);
  EXPECT_EQ (gst_element_set_state (e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  auto m = pi0test::pop_message (bus, GST_MESSAGE_ERROR);
  ASSERT_TRUE (m);
  EXPECT_NE (pi0test::message_text (m.get ()).find ("hmac-key is empty"), std::string::npos);
  /* Unset again (NULL): no key, no authentication, starts. */
  g_object_set (e, "hmac-key", nullptr, nullptr);
  EXPECT_NE (gst_element_set_state (e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  gst_element_set_state (e, GST_STATE_NULL);
  gst_element_set_bus (e, nullptr);
  gst_object_unref (bus);
  gst_object_unref (e);
}

/* Issue 16 item 9: a file or stdout whose writes fail is an error (or, when tolerated, a
 * warning and a counter), never a recording that silently loses its data. */
TEST (Pi0ActionSink, FailedFileWritesAreAnError)
{
  TempDir dir;
  /* With a robot configuration the session's HELLO is written at start: start fails. */
  std::string err = start_error ("pi0actionsink target=file:///dev/full robot-config=" +
                                 dir.file ("r.json", kRobot3));
  EXPECT_NE (err.find ("/dev/full"), std::string::npos) << err;
  EXPECT_NE (err.find (g_strerror (ENOSPC)), std::string::npos) << err;

  /* Without one, the first chunk's frames are the first writes: the render fails. */
  Fixture f;
  f.make ("mode=chunk allow-unlimited=true target=file:///dev/full", "");
  GstBus *bus = gst_bus_new ();
  gst_element_set_bus (f.sink, bus);
  EXPECT_EQ (GST_FLOW_ERROR, f.push (2, 3, ramp3 (2, 0, 1), 1, 0));
  auto m = pi0test::pop_message (bus, GST_MESSAGE_ERROR);
  ASSERT_TRUE (m);
  const std::string text = pi0test::message_text (m.get ());
  EXPECT_NE (text.find (g_strerror (ENOSPC)), std::string::npos) << text;
  EXPECT_GE (stat (f.sink, "write-errors"), 1u);
  /* It stays an error (posted once). */
  EXPECT_EQ (GST_FLOW_ERROR, f.push (2, 3, ramp3 (2, 0, 1), 2, 0));
  EXPECT_FALSE (pi0test::pop_message (bus, GST_MESSAGE_ERROR));
  gst_element_set_bus (f.sink, nullptr);
  gst_object_unref (bus);
}

/* Issue 25: a launcher that closed stdout leaves descriptor 1 to the next thing opened (a
 * socket of GStreamer's, which no one reads). target=stdout blocked forever in write(),
 * holding the sink's lock. Each frame now waits at most a second, then RESOURCE/WRITE. */
TEST (Pi0ActionSink, StdoutThatTakesNothingIsAWriteErrorNotAHang)
{
  const int saved = dup (STDOUT_FILENO);
  ASSERT_GE (saved, 0);
  fflush (stdout);
  close (STDOUT_FILENO);
  int sv[2];
  ASSERT_EQ (socketpair (AF_UNIX, SOCK_STREAM, 0, sv), 0);
  /* The reuse the launcher causes: the lowest free descriptor, 1, is the new socket. */
  const bool reused = sv[0] == STDOUT_FILENO || sv[1] == STDOUT_FILENO;
  const int unread = sv[0] == STDOUT_FILENO ? sv[1] : sv[0];
  if (!reused)
    dup2 (sv[1], STDOUT_FILENO); /* sv[0] stays unread */
  const int small = 4096;
  setsockopt (STDOUT_FILENO, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  setsockopt (unread, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);

  GstFlowReturn last = GST_FLOW_OK;
  std::string text;
  guint64 errors = 0;
  int pushes = 0;
  {
    Fixture f;
    f.make ("mode=chunk allow-unlimited=true target=stdout", "");
    GstBus *bus = gst_bus_new ();
    gst_element_set_bus (f.sink, bus);
    for (; pushes < 2000 && last == GST_FLOW_OK; pushes++)
      last = f.push (2, 3, ramp3 (2, 0, 1), pushes + 1, 0);
    if (auto m = pi0test::pop_message (bus, GST_MESSAGE_ERROR)) {
      GError *e = nullptr;
      gst_message_parse_error (m.get (), &e, nullptr);
      EXPECT_TRUE (g_error_matches (e, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_WRITE)) << e->message;
      g_clear_error (&e);
      text = pi0test::message_text (m.get ());
    }
    errors = stat (f.sink, "write-errors");
    gst_element_set_bus (f.sink, nullptr);
    gst_object_unref (bus);
  }
  dup2 (saved, STDOUT_FILENO); /* closes the socket that was descriptor 1 */
  close (saved);
  close (unread);
  if (!reused)
    close (sv[1]);
  EXPECT_EQ (last, GST_FLOW_ERROR) << "after " << pushes << " chunks";
  EXPECT_NE (text.find ("writing to stdout failed: it took nothing for 1000 ms"), std::string::npos)
      << text;
  EXPECT_GE (errors, 1u);
}

TEST (Pi0ActionSink, FailedWritesCanBeToleratedWithAWarningAndACounter)
{
  Fixture f;
  f.make ("mode=chunk allow-unlimited=true tolerate-write-errors=true target=file:///dev/full", "");
  GstBus *bus = gst_bus_new ();
  gst_element_set_bus (f.sink, bus);
  EXPECT_EQ (GST_FLOW_OK, f.push (2, 3, ramp3 (2, 0, 1), 1, 0));
  EXPECT_EQ (GST_FLOW_OK, f.push (2, 3, ramp3 (2, 0, 1), 2, 0));
  int errors = 0, warnings = 0;
  while (GstMessage *m = gst_bus_pop (bus)) {
    errors += GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR;
    if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_WARNING) {
      warnings++;
      EXPECT_NE (pi0test::message_text (m).find (g_strerror (ENOSPC)), std::string::npos);
    }
    gst_message_unref (m);
  }
  EXPECT_EQ (errors, 0);
  EXPECT_GE (warnings, 1);
  /* HELLO, HOLD and an action per chunk: every one counted. */
  EXPECT_EQ (stat (f.sink, "write-errors"), 4u);
  EXPECT_EQ (stat (f.sink, "frames"), 0u);
  gst_element_set_bus (f.sink, nullptr);
  gst_object_unref (bus);
}

TEST (Pi0ActionSink, AClosedStdoutIsAnError)
{
  /* fd 1 replaced by a read-only descriptor: every write to it fails (EBADF), as on a closed
   * stdout, without the risk of fd 1 being reused by a socket meanwhile. */
  fflush (stdout);
  const int saved = dup (1);
  ASSERT_GE (saved, 0);
  const int ro = open ("/dev/null", O_RDONLY);
  ASSERT_GE (ro, 0);
  dup2 (ro, 1);
  close (ro);
  GstFlowReturn ret;
  std::string text;
  guint64 errors = 0;
  {
    Fixture f;
    f.make ("mode=chunk allow-unlimited=true target=stdout", "");
    GstBus *bus = gst_bus_new ();
    gst_element_set_bus (f.sink, bus);
    ret = f.push (2, 3, ramp3 (2, 0, 1), 1, 0);
    auto m = pi0test::pop_message (bus, GST_MESSAGE_ERROR);
    text = m ? pi0test::message_text (m.get ()) : "(no error)";
    errors = stat (f.sink, "write-errors");
    gst_element_set_bus (f.sink, nullptr);
    gst_object_unref (bus);
  }
  __fpurge (stdout); /* what the failed writes left in stdio's buffer */
  clearerr (stdout);
  dup2 (saved, 1);
  close (saved);
  EXPECT_EQ (ret, GST_FLOW_ERROR);
  EXPECT_NE (text.find ("stdout"), std::string::npos) << text;
  EXPECT_NE (text.find (g_strerror (EBADF)), std::string::npos) << text;
  EXPECT_GE (errors, 1u);
}

/* ---- TCP faults ------------------------------------------------------------------------ */

TEST (Pi0ActionSinkTcp, PeerAbsentNeverBlocksAndReconnectsWhenItAppears)
{
  TempDir dir;
  const int port = free_port ();
  Fixture f;
  f.make ("mode=chunk target=tcp://127.0.0.1:" + std::to_string (port) +
              " reconnect-min=10000000 reconnect-max=40000000",
          kRobotWide3);
  for (int i = 0; i < 50; i++)
    ASSERT_EQ (GST_FLOW_OK, f.push (5, 3, ramp3 (5, 0, 0.01f), (guint64)i + 1, 0));
  EXPECT_EQ (stat (f.sink, "sent"), 0u);
  EXPECT_GT (stat (f.sink, "dropped"), 0u);
  /* The peer appears: the next pushes connect; the session starts with HELLO, HOLD. */
  SimProc sim;
  ASSERT_TRUE (
      sim.start ({"--proto=tcp", "--port=" + std::to_string (port)}, dir.file ("sim.jsonl")));
  bool connected = false;
  for (int i = 0; i < 1000 && !connected; i++) {
    ASSERT_EQ (GST_FLOW_OK, f.push (5, 3, ramp3 (5, 0, 0.01f), 100 + (guint64)i, 0));
    connected = sim.count ("execute") > 0;
    if (!connected)
      g_usleep (5000);
  }
  ASSERT_TRUE (connected);
  auto lines = sim.lines ();
  std::vector<std::string> events;
  for (auto &l : lines) {
    JsonLine j (l);
    events.push_back (j.str ("event"));
  }
  /* listening, connected, session, hello, hold, execute... */
  auto it = std::find (events.begin (), events.end (), "session");
  ASSERT_NE (it, events.end ());
  ASSERT_GE (events.end () - it, 4);
  EXPECT_EQ (*(it + 1), "hello");
  EXPECT_EQ (*(it + 2), "hold");
  EXPECT_EQ (*(it + 3), "execute");
  EXPECT_EQ (sim.count ("reject"), 0u);
  /* No action queued while there was no peer was replayed: every executed chunk id is >= 100. */
  for (auto &l : lines) {
    JsonLine j (l);
    if (j.str ("event") == "execute") {
      EXPECT_GE (j.num ("chunk_id"), 100);
    }
  }
}

TEST (Pi0ActionSinkTcp, PeerNotReadingKeepsTheBufferBoundedAndNeverBlocks)
{
  StalledPeer peer;
  Fixture f;
  const guint max_buf = 16384;
  f.make ("mode=chunk max-send-buffer=" + std::to_string (max_buf) +
              " target=tcp://127.0.0.1:" + std::to_string (peer.port),
          kRobotWide3);
  /* Let the non-blocking connect complete (bounded). */
  for (int i = 0; i < 1000 && stat (f.sink, "frames") == 0; i++) {
    ASSERT_EQ (GST_FLOW_OK, f.push (1, 3, ramp3 (1, 0, 0.01f), 1, 0));
    g_usleep (1000);
  }
  ASSERT_GT (stat (f.sink, "frames"), 0u);
  guint64 max_queued = 0;
  for (int i = 0; i < 4000; i++) {
    ASSERT_EQ (GST_FLOW_OK, f.push (50, 3, ramp3 (50, 0, 0.0f), (guint64)i + 10, 0));
    max_queued = std::max (max_queued, stat (f.sink, "queued-bytes"));
  }
  EXPECT_LE (max_queued, max_buf);
  EXPECT_GT (stat (f.sink, "dropped"), 0u)
      << "a peer that never reads must cost dropped frames, not memory";
  /* Shutting down with the peer still stalled completes. */
  EXPECT_EQ (gst_element_set_state (f.sink, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
}

TEST (Pi0ActionSinkTcp, PeerKilledMidStreamThenReplaced)
{
  TempDir dir;
  const int port = free_port ();
  SimProc sim1;
  ASSERT_TRUE (
      sim1.start ({"--proto=tcp", "--port=" + std::to_string (port)}, dir.file ("sim1.jsonl")));
  Fixture f;
  f.make ("mode=chunk target=tcp://127.0.0.1:" + std::to_string (port) +
              " reconnect-min=5000000 reconnect-max=20000000",
          kRobotWide3);
  guint64 seq = 0;
  ASSERT_TRUE (sim1.wait_for ([&] {
    EXPECT_EQ (GST_FLOW_OK, f.push (50, 3, ramp3 (50, 0, 0.0f), ++seq, 0));
    return sim1.count ("execute") >= 100;
  }));
  sim1.stop (SIGKILL);
  /* The sink keeps accepting chunks (dropping them) while the robot is gone. */
  for (int i = 0; i < 200; i++)
    ASSERT_EQ (GST_FLOW_OK, f.push (50, 3, ramp3 (50, 0, 0.0f), ++seq, 0));
  SimProc sim2;
  ASSERT_TRUE (
      sim2.start ({"--proto=tcp", "--port=" + std::to_string (port)}, dir.file ("sim2.jsonl")));
  ASSERT_TRUE (sim2.wait_for ([&] {
    EXPECT_EQ (GST_FLOW_OK, f.push (50, 3, ramp3 (50, 0, 0.0f), ++seq, 0));
    return sim2.count ("execute") >= 50;
  }));
  EXPECT_GE (stat (f.sink, "reconnects"), 1u);
  EXPECT_GE (stat (f.sink, "sessions"), 2u);
  EXPECT_EQ (sim2.count ("reject"), 0u);
  EXPECT_EQ (sim2.count ("partial"), 0u);
  sim2.stop_and_check ();
  EXPECT_TRUE (sim2.exited_cleanly ());
}

TEST (Pi0ActionSinkTcp, ThousandStateCyclesWithAStalledPeer)
{
  /* Each cycle: PLAYING, one chunk rendered (TCP connect to a peer that never accepts nor
   * reads), NULL. No deadlock, no GLib warning, and the fd count back to where it was. */
  StalledPeer peer;
  Fixture f;
  f.make ("mode=chunk max-send-buffer=4096 target=tcp://127.0.0.1:" + std::to_string (peer.port),
          kRobotWide3);
  ASSERT_EQ (GST_FLOW_OK, f.push (5, 3, ramp3 (5, 0, 0.01f), 1, 0));
  /* Warm-up cycle, so lazily created fds (GLib wakeups, clock threads) exist already. */
  ASSERT_EQ (gst_element_set_state (f.sink, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  const int baseline = count_fds ();
  for (int i = 0; i < 1000; i++) {
    ASSERT_NE (gst_element_set_state (f.sink, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE)
        << "cycle " << i;
    gst_harness_set_src_caps_str (f.h.get (), GST_PI0_OBSERVATION_MEDIA_TYPE);
    ASSERT_EQ (GST_FLOW_OK, f.push (5, 3, ramp3 (5, 0, 0.01f), (guint64)i + 2, 0)) << "cycle " << i;
    ASSERT_EQ (gst_element_set_state (f.sink, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS)
        << "cycle " << i;
    ASSERT_LE (count_fds (), baseline + 4) << "cycle " << i; /* one socket at most while PLAYING */
  }
  EXPECT_EQ (count_fds (), baseline);
  EXPECT_GE (f.rec.count ("hold"), 1000u) << "every PLAYING->PAUSED sends HOLD";
}

/* ---- with the robot simulator ----------------------------------------------------------- */

TEST (Pi0ActionSinkSim, UdpFramesAreValidatedByTheSimulator)
{
  TempDir dir;
  SimProc sim;
  const std::string key = "shared secret";
  ASSERT_TRUE (sim.start ({"--proto=udp", "--port=0", "--key=" + key, "--dim=3",
                           "--robot-config=" + dir.file ("robot.json", kRobot3)},
                          dir.file ("sim.jsonl")));
  Fixture f;
  f.make ("mode=stream hmac-key=\"" + key +
              "\" target=udp://127.0.0.1:" + std::to_string (sim.port ()),
          kRobot3);
  for (int c = 0; c < 5; c++) {
    ASSERT_EQ (GST_FLOW_OK,
               f.push (8, 3, ramp3 (8, -0.5f + 0.2f * (float)c, 0.03f), (guint64)c + 1, f.now ()));
    for (int t = 0; t < 4; t++)
      f.crank ();
  }
  f.crank_until (f.now () + 2 * GST_SECOND); /* let the watchdog HOLD and STOP */
  std::vector<std::vector<float>> sent;
  for (auto &r : f.rec.all ())
    if (r.kind == "action")
      sent.push_back (r.values);
  ASSERT_GE (sent.size (), 20u);
  ASSERT_TRUE (sim.wait_count ("stop", 1));
  sim.stop_and_check ();
  EXPECT_TRUE (sim.exited_cleanly ());
  std::vector<std::vector<float>> executed;
  for (auto &l : sim.lines ()) {
    JsonLine j (l);
    ASSERT_TRUE (j.ok ()) << l;
    EXPECT_NE (j.str ("event"), "reject") << l;
    if (j.str ("event") == "execute")
      executed.push_back (j.row ());
  }
  EXPECT_EQ (executed, sent);
  EXPECT_EQ (sim.count ("session"), 1u);
  EXPECT_EQ (sim.count ("hello"), 1u);
  EXPECT_GE (sim.count ("hold"), 2u); /* greeting + watchdog */
  EXPECT_EQ (sim.count ("stop"), 1u);
}

TEST (Pi0ActionSinkSim, LargeChunksAreSplitIntoDatagramsAndReassembledInOrder)
{
  TempDir dir;
  SimProc sim;
  ASSERT_TRUE (sim.start ({"--proto=udp", "--port=0", "--dim=14"}, dir.file ("sim.jsonl")));
  std::string joints, lo, hi, st;
  for (int i = 0; i < 14; i++) {
    joints += (i ? ",\"j" : "\"j") + std::to_string (i) + "\"";
    lo += i ? ",-10" : "-10";
    hi += i ? ",10" : "10";
    st += i ? ",10" : "10";
  }
  Fixture f;
  f.make ("mode=chunk target=udp://127.0.0.1:" + std::to_string (sim.port ()),
          "{\"joints\":[" + joints + "],\"lower\":[" + lo + "],\"upper\":[" + hi +
              "],\"max_step\":[" + st + "]}");
  std::vector<float> v (50 * 14);
  for (size_t i = 0; i < v.size (); i++)
    v[i] = 0.001f * (float)i;
  ASSERT_EQ (GST_FLOW_OK, f.push (50, 14, v, 1, 0));
  ASSERT_TRUE (sim.wait_count ("execute", 50));
  std::vector<gint64> steps;
  for (auto &l : sim.lines ()) {
    JsonLine j (l);
    if (j.str ("event") == "execute") {
      steps.push_back (j.num ("step_index"));
      auto row = j.row ();
      ASSERT_EQ (row.size (), 14u);
      EXPECT_EQ (row[0], v[(size_t)j.num ("step_index") * 14]);
    }
  }
  ASSERT_EQ (steps.size (), 50u);
  for (gint64 i = 0; i < 50; i++)
    EXPECT_EQ (steps[(size_t)i], i);
  EXPECT_EQ (sim.count ("reject"), 0u);
}

/* ---- mode=log: the policy's output, whole and unmodified, for recordings and replays ---- */

TEST (Pi0ActionSinkLog, WritesEveryChunkWholeAndUnclampedWithoutHandshake)
{
  Fixture f;
  const std::string path = f.dir.file ("log.jsonl");
  /* No robot-config needed; values far outside any limit and a chunk far older than
   * max-action-age are written as they are. */
  f.make ("mode=log target=file://" + path, "");
  gst_test_clock_set_time (f.clock (), 10 * GST_SECOND);
  std::vector<float> big = ramp3 (4, 100.0f, 7.0f);
  EXPECT_EQ (GST_FLOW_OK, f.push (4, 3, big, 11, 1 * GST_SECOND));
  std::vector<float> nan = ramp3 (2, 0, 1);
  nan[4] = NAN;
  EXPECT_EQ (GST_FLOW_OK, f.push (2, 3, nan, 12, 9 * GST_SECOND));
  EXPECT_EQ (stat (f.sink, "holds"), 0u);
  f.h.reset (); /* EOS and stop: no HOLD in a log either */

  gchar *text = nullptr;
  ASSERT_TRUE (g_file_get_contents (path.c_str (), &text, nullptr, nullptr));
  gchar **lines = g_strsplit (text, "\n", -1);
  g_free (text);
  std::vector<std::string> ls;
  for (gchar **it = lines; *it; it++)
    if (**it)
      ls.emplace_back (*it);
  g_strfreev (lines);
  ASSERT_EQ (ls.size (), 2u) << "only the two chunks, no hello/hold";
  JsonLine a (ls[0]), b (ls[1]);
  ASSERT_TRUE (a.ok () && b.ok ());
  EXPECT_EQ (a.str ("kind"), "action");
  EXPECT_EQ (a.num ("chunk_id"), 11);
  EXPECT_EQ (a.num ("steps"), 4);
  EXPECT_EQ (a.num ("observation_time_ns"), (gint64)GST_SECOND);
  const pi0::json::Value &rows = a.value ()["values"];
  ASSERT_EQ (rows.size (), 4u);
  for (size_t r = 0; r < 4; r++) {
    for (size_t c = 0; c < 3; c++)
      EXPECT_EQ (rows[r][c].get<float> (), big[r * 3 + c]) << r << "," << c;
  }
  /* A non-finite value is logged as null (the log says what the policy did). */
  EXPECT_NE (ls[1].find ("null"), std::string::npos) << ls[1];
  EXPECT_EQ (b.num ("chunk_id"), 12);
}

TEST (Pi0ActionSinkLog, RefusesNetworkTargets)
{
  for (const char *t : {"udp://127.0.0.1:9", "tcp://127.0.0.1:9"}) {
    std::string e = start_error (std::string ("pi0actionsink mode=log target=") + t);
    EXPECT_NE (e.find ("never goes to a robot"), std::string::npos) << t << ": " << e;
  }
}

/* ---- End-to-end latency from the metas' stamps ---- */

TEST (Pi0ActionSinkLatency, StagesComeFromTheMetasStamps)
{
  Fixture f;
  f.make ("mode=chunk target=file://" + f.dir.file ("o.jsonl"), kRobotWide3);
  /* Observation captured at 1.000 s, muxed at 1.004, prepared at 1.005, inferred at 1.015 and
   * handed to the sink when the clock reads 1.016 s. */
  auto push_stamped = [&] (guint64 seq, GstClockTime cap, bool with_tensor) {
    GstBuffer *b = make_chunk (10, 3, ramp3 (10, 0, 0.01f), seq, cap);
    gst_buffer_get_pi0_action_meta (b)->done_time = cap + 15 * GST_MSECOND;
    GstPi0ObservationMeta *om = gst_buffer_add_pi0_observation_meta (b);
    om->observation_time = cap;
    om->muxed_time = cap + 4 * GST_MSECOND;
    if (with_tensor) {
      const gint64 shape[1] = {1};
      GstPi0TensorStorage *st = gst_pi0_tensor_storage_new_host (4);
      GstPi0TensorMeta *tm =
          gst_buffer_add_pi0_tensor_meta (b, st, GST_PI0_DTYPE_FLOAT32, 1, shape);
      gst_pi0_tensor_storage_unref (st);
      tm->prepared_time = cap + 5 * GST_MSECOND;
    }
    gst_test_clock_set_time (f.clock (), cap + 16 * GST_MSECOND);
    return gst_harness_push (f.h.get (), b);
  };
  ASSERT_EQ (GST_FLOW_OK, push_stamped (1, 1 * GST_SECOND, true));
  EXPECT_EQ (stat (f.sink, "latency-chunks"), 1u);
  EXPECT_EQ (stat (f.sink, "mux-p50"), 4 * GST_MSECOND);
  EXPECT_EQ (stat (f.sink, "prep-p50"), 1 * GST_MSECOND);
  EXPECT_EQ (stat (f.sink, "infer-p99"), 10 * GST_MSECOND);
  EXPECT_EQ (stat (f.sink, "sink-max"), 1 * GST_MSECOND);
  EXPECT_EQ (stat (f.sink, "end-to-end-p50"), 16 * GST_MSECOND);

  /* Without a tensor meta (no cudaprep): prep and infer cannot be told apart and are left
   * out; the rest still counts. */
  ASSERT_EQ (GST_FLOW_OK, push_stamped (2, 2 * GST_SECOND, false));
  EXPECT_EQ (stat (f.sink, "latency-chunks"), 2u);
  EXPECT_EQ (stat (f.sink, "prep-max"), 1 * GST_MSECOND); /* only the first chunk's */
  EXPECT_EQ (stat (f.sink, "end-to-end-max"), 16 * GST_MSECOND);
}

TEST (Pi0ActionSinkLatency, NoStagesBeforeAnythingIsSent)
{
  Fixture f;
  f.make ("mode=chunk target=file://" + f.dir.file ("o.jsonl"), kRobotWide3);
  EXPECT_EQ (stat (f.sink, "latency-chunks"), 0u);
  GstStructure *s = nullptr;
  g_object_get (f.sink, "stats", &s, nullptr);
  EXPECT_FALSE (gst_structure_has_field (s, "end-to-end-p50"));
  gst_structure_free (s);
}
