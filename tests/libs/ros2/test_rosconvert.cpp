/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ROS 2 messages into the chain's terms, and pi0actionsink's frames into what a ros2_control
 * controller takes (ros2/pi0rosconvert.h, ros2/pi0roslinkplan.h): no ROS 2 needed. The nodes
 * themselves are tested against real ROS 2 in tests/ros2/. */

#include "protocol/pi0frame.h"
#include "ros2/pi0rosconvert.h"
#include "ros2/pi0roslinkplan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace pi0::ros;
namespace proto = pi0::proto;

namespace
{

const std::vector<std::string> kArm = {"shoulder", "elbow", "wrist"};
constexpr int64_t kMs = 1000000;

JointPick
pick (std::vector<const char *> names, std::vector<double> pos, int64_t age = 0, bool zero = false)
{
  /* As pi0rosjointsrc takes a sample: its stamp, then its joints. */
  JointPick r;
  r.issue = check_stamp (true, zero, age, 500 * kMs, 50 * kMs, &r.detail);
  if (r.issue != JointIssue::kNone)
    return r;
  return pick_joints (kArm, names.data (), names.size (), pos.data (), pos.size ());
}

} // namespace

TEST (RosJoints, PickedByNameInTheConfigurationsOrderWhateverTheMessagesOrder)
{
  /* A driver publishes its own order, with a gripper and a wheel the arm does not have. */
  JointPick p = pick ({"wheel", "wrist", "gripper", "shoulder", "elbow"}, {9, 3, 8, 1, 2});
  ASSERT_EQ (p.issue, JointIssue::kNone) << p.detail;
  EXPECT_EQ (p.values, (std::vector<float>{1, 2, 3}));
}

TEST (RosJoints, EveryBadSampleIsRefusedWithItsReasonNeverPassedOnAsZeros)
{
  EXPECT_EQ (pick ({"shoulder", "wrist"}, {1, 3}).issue, JointIssue::kMissingJoint);
  EXPECT_NE (pick ({"shoulder", "wrist"}, {1, 3}).detail.find ("elbow"), std::string::npos);
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, 2}).issue, JointIssue::kLengths);
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist", "elbow"}, {1, 2, 3, 4}).issue,
             JointIssue::kDuplicate);
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, NAN, 3}).issue, JointIssue::kNonFinite);
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, INFINITY, 3}).issue, JointIssue::kNonFinite);
  /* Finite as a double, infinite as the float32 the state is. */
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, 1e300, 3}).issue, JointIssue::kNonFinite);
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, 2, 3}, 0, true).issue, JointIssue::kNoStamp);
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, 2, 3}, 501 * kMs).issue,
             JointIssue::kStampPast);
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, 2, 3}, -51 * kMs).issue,
             JointIssue::kStampFuture);
  /* Within the bounds: used. */
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, 2, 3}, 500 * kMs).issue, JointIssue::kNone);
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, 2, 3}, -50 * kMs).issue, JointIssue::kNone);
  /* Velocities and efforts may be absent; longer position arrays are fine. */
  EXPECT_EQ (pick ({"shoulder", "elbow", "wrist"}, {1, 2, 3, 4}).issue, JointIssue::kNone);
  /* Sim time before the first /clock: no time to judge the stamp by. */
  std::string why;
  EXPECT_EQ (check_stamp (false, false, 0, 500 * kMs, 50 * kMs, &why), JointIssue::kStampPast);
  EXPECT_NE (why.find ("no ROS time yet"), std::string::npos) << why;
  for (int i = 1; i < (int)JointIssue::kCount; i++)
    EXPECT_STRNE (joint_issue_name ((JointIssue)i), "?");
}

TEST (RosJoints, AStampBecomesTheRunningTimeItWasThatLongAgo)
{
  EXPECT_EQ (running_time_of (1000 * kMs, 200 * kMs), (uint64_t)800 * kMs);
  EXPECT_EQ (running_time_of (1000 * kMs, 0), (uint64_t)1000 * kMs);
  /* A little ahead (clocks out of step, within max-ahead): now, never later. */
  EXPECT_EQ (running_time_of (1000 * kMs, -20 * kMs), (uint64_t)1000 * kMs);
  /* Before the pipeline started: 0. */
  EXPECT_EQ (running_time_of (100 * kMs, 200 * kMs), 0u);
}

TEST (RosImages, EncodingsAsGStreamerFormats)
{
  struct Case {
    const char *enc;
    bool be;
    const char *fmt;
    unsigned bpp;
  } cases[] = {{"rgb8", false, "RGB", 3},         {"bgr8", false, "BGR", 3},
               {"rgba8", false, "RGBA", 4},       {"bgra8", false, "BGRA", 4},
               {"mono8", false, "GRAY8", 1},      {"mono16", false, "GRAY16_LE", 2},
               {"mono16", true, "GRAY16_BE", 2},  {"yuv422", false, "UYVY", 2},
               {"yuv422_yuy2", false, "YUY2", 2}, {"nv12", false, "NV12", 1},
               {"nv21", false, "NV21", 1}};
  for (const Case &c : cases) {
    ImageLayout l = image_layout (c.enc, c.be);
    ASSERT_NE (l.gst_format, nullptr) << c.enc;
    EXPECT_STREQ (l.gst_format, c.fmt) << c.enc;
    EXPECT_EQ (l.bytes_per_pixel, c.bpp) << c.enc;
  }
  EXPECT_EQ (image_layout ("bayer_rggb8", false).gst_format, nullptr);
  EXPECT_EQ (image_layout ("32FC1", false).gst_format, nullptr);
  EXPECT_EQ (image_layout ("", false).gst_format, nullptr);
}

TEST (RosImages, GeometryIsCheckedBeforeAnyByteIsRead)
{
  const ImageLayout rgb = image_layout ("rgb8", false);
  EXPECT_EQ (check_image (rgb, 640, 480, 1920, 1920 * 480), "");
  /* Rows padded to 64 bytes: fine, the step is honoured. */
  EXPECT_EQ (check_image (rgb, 100, 10, 320, 320 * 10), "");
  EXPECT_NE (check_image (rgb, 640, 480, 1919, 1919 * 480).find ("shorter than a row"),
             std::string::npos);
  EXPECT_NE (check_image (rgb, 640, 480, 1920, 1920 * 480 - 1).find ("needs"), std::string::npos);
  EXPECT_NE (check_image (rgb, 0, 480, 0, 0).find ("size"), std::string::npos);
  EXPECT_NE (check_image (rgb, 20000, 1, 60000, 60000).find ("size"), std::string::npos);
  const ImageLayout nv12 = image_layout ("nv12", false);
  EXPECT_EQ (check_image (nv12, 64, 48, 64, 64 * 48 * 3 / 2), "");
  EXPECT_NE (check_image (nv12, 64, 48, 64, 64 * 48).find ("needs"), std::string::npos);
  EXPECT_NE (check_image (nv12, 63, 48, 64, 64 * 48 * 3 / 2).find ("even"), std::string::npos);
}

TEST (RosImages, CompressedFormatsAsCaps)
{
  EXPECT_STREQ (compressed_media_type ("jpeg"), "image/jpeg");
  EXPECT_STREQ (compressed_media_type ("png"), "image/png");
  /* What image_transport's compressed plugin writes. */
  EXPECT_STREQ (compressed_media_type ("rgb8; jpeg compressed bgr8"), "image/jpeg");
  EXPECT_STREQ (compressed_media_type ("bgr8; png compressed bgr8"), "image/png");
  EXPECT_STREQ (compressed_media_type ("JPEG"), "image/jpeg");
  EXPECT_EQ (compressed_media_type ("h264"), nullptr);
  EXPECT_EQ (compressed_media_type (""), nullptr);
}

/* ---- the ros2:// link's plan ---- */

namespace
{

std::vector<uint8_t>
frame (proto::Kind kind, uint8_t flags, uint64_t session, uint64_t chunk, uint64_t send_ns,
       uint32_t step, std::vector<std::vector<float>> rows, uint64_t period = 20 * kMs)
{
  proto::Header h;
  h.kind = kind;
  h.flags = flags;
  h.session_id = session;
  h.seq = 1;
  h.chunk_id = chunk;
  h.observation_time_ns = kind == proto::Kind::kAction ? send_ns - 5 * kMs : proto::kTimeNone;
  h.send_time_ns = send_ns;
  h.step_period_ns = period;
  h.step_index = step;
  h.steps = (uint16_t)rows.size ();
  h.chunk_steps = step + h.steps;
  h.dim = rows.empty () ? (kind == proto::Kind::kHello ? 3 : 0) : (uint16_t)rows[0].size ();
  if (kind == proto::Kind::kHello)
    h.steps = 0;
  std::vector<float> v;
  for (auto &r : rows)
    v.insert (v.end (), r.begin (), r.end ());
  std::vector<uint8_t> out;
  proto::encode (h, v.data (), "", out);
  return out;
}

} // namespace

TEST (RosLinkPlan, AChunkIsOneTrajectoryWhoseFirstPointIsDueWhenSent)
{
  LinkPlan plan (LinkMode::kTrajectory, 3);
  std::vector<Command> out;
  auto hello = frame (proto::Kind::kHello, 0, 7, 0, 1000 * kMs, 0, {});
  plan.frame (hello.data (), hello.size (), nullptr, out);
  EXPECT_TRUE (out.empty ());
  auto a = frame (proto::Kind::kAction, proto::kFlagLast, 7, 42, 2000 * kMs, 3,
                  {{0.1f, 0.2f, 0.3f}, {0.2f, 0.3f, 0.4f}, {0.3f, 0.4f, 0.5f}});
  plan.frame (a.data (), a.size (), nullptr, out);
  ASSERT_EQ (out.size (), 1u);
  EXPECT_EQ (out[0].kind, Command::Kind::kTrajectory);
  EXPECT_EQ (out[0].start_ns, (uint64_t)2000 * kMs);
  EXPECT_EQ (out[0].period_ns, (uint64_t)20 * kMs);
  ASSERT_EQ (out[0].points.size (), 3u);
  EXPECT_DOUBLE_EQ (out[0].points[2][1], (double)0.4f);
  EXPECT_EQ (out[0].first_step, 3u);
  EXPECT_EQ (plan.counters ().trajectories, 1u);
}

TEST (RosLinkPlan, FeedbackReportsTheRowTheControllerRunsOnceEach)
{
  LinkPlan plan (LinkMode::kTrajectory, 2);
  std::vector<Command> out;
  auto a = frame (proto::Kind::kAction, proto::kFlagLast, 9, 5, 1000 * kMs, 2,
                  {{0, 0}, {0.1f, 0}, {0.2f, 0}, {0.3f, 0}});
  plan.frame (a.data (), a.size (), nullptr, out);
  std::vector<uint8_t> fb;
  EXPECT_FALSE (plan.feedback (999 * kMs, true, &fb)) << "before the trajectory starts";
  EXPECT_FALSE (plan.feedback (1000 * kMs, false, &fb)) << "no joint states: a robot gone";
  ASSERT_TRUE (plan.feedback (1000 * kMs, true, &fb));
  proto::Frame f;
  ASSERT_EQ (proto::decode (fb.data (), fb.size (), proto::Limits (), "", &f), proto::Error::kOk);
  EXPECT_EQ (f.header.kind, proto::Kind::kFeedback);
  EXPECT_EQ (f.header.session_id, 9u);
  EXPECT_EQ (f.header.chunk_id, 5u);
  EXPECT_EQ (f.header.step_index, 2u);
  EXPECT_EQ (f.header.send_time_ns, (uint64_t)1000 * kMs);
  const uint64_t seq = f.header.seq;
  EXPECT_FALSE (plan.feedback (1010 * kMs, true, &fb)) << "the same row again";
  ASSERT_TRUE (plan.feedback (1045 * kMs, true, &fb));
  ASSERT_EQ (proto::decode (fb.data (), fb.size (), proto::Limits (), "", &f), proto::Error::kOk);
  EXPECT_EQ (f.header.step_index, 4u);
  EXPECT_EQ (f.header.send_time_ns, (uint64_t)1040 * kMs);
  EXPECT_GT (f.header.seq, seq);
  /* After its last point the controller holds it: nothing new to report. */
  ASSERT_TRUE (plan.feedback (5000 * kMs, true, &fb));
  ASSERT_EQ (proto::decode (fb.data (), fb.size (), proto::Limits (), "", &f), proto::Error::kOk);
  EXPECT_EQ (f.header.step_index, 5u);
  EXPECT_FALSE (plan.feedback (6000 * kMs, true, &fb));
}

TEST (RosLinkPlan, HoldIsOnePointAtTheMeasuredPositionStopIsAnEmptyTrajectory)
{
  LinkPlan plan (LinkMode::kTrajectory, 2);
  std::vector<Command> out;
  const std::vector<float> measured = {0.5f, -0.5f};
  auto hold = frame (proto::Kind::kHold, 0, 1, 0, 100 * kMs, 0, {{0.4f, -0.4f}});
  plan.frame (hold.data (), hold.size (), &measured, out);
  ASSERT_EQ (out.size (), 1u);
  EXPECT_EQ (out[0].kind, Command::Kind::kTrajectory);
  ASSERT_EQ (out[0].points.size (), 1u);
  EXPECT_DOUBLE_EQ (out[0].points[0][0], 0.5);
  /* No measured position: the one the sender holds. */
  out.clear ();
  plan.frame (hold.data (), hold.size (), nullptr, out);
  ASSERT_EQ (out.size (), 1u);
  EXPECT_DOUBLE_EQ (out[0].points[0][0], (double)0.4f);
  /* Neither: an empty trajectory (the controller stops where it is). */
  out.clear ();
  auto bare = frame (proto::Kind::kHold, 0, 1, 0, 100 * kMs, 0, {});
  plan.frame (bare.data (), bare.size (), nullptr, out);
  ASSERT_EQ (out.size (), 1u);
  EXPECT_EQ (out[0].kind, Command::Kind::kStop);
  out.clear ();
  auto stop = frame (proto::Kind::kStop, 0, 1, 0, 200 * kMs, 0, {});
  plan.frame (stop.data (), stop.size (), &measured, out);
  ASSERT_EQ (out.size (), 1u);
  EXPECT_EQ (out[0].kind, Command::Kind::kStop);
  EXPECT_TRUE (out[0].points.empty ());
  std::vector<uint8_t> fb;
  EXPECT_FALSE (plan.feedback (300 * kMs, true, &fb)) << "nothing executes after a STOP";
}

TEST (RosLinkPlan, CommandsModeTakesStreamRowsAndRefusesChunks)
{
  LinkPlan plan (LinkMode::kCommands, 2);
  std::vector<Command> out;
  auto row = frame (proto::Kind::kAction, proto::kFlagLast | proto::kFlagStream, 3, 1, 100 * kMs, 0,
                    {{0.25f, 0.5f}});
  plan.frame (row.data (), row.size (), nullptr, out);
  ASSERT_EQ (out.size (), 1u);
  EXPECT_EQ (out[0].kind, Command::Kind::kPosition);
  EXPECT_DOUBLE_EQ (out[0].points[0][1], 0.5);
  out.clear ();
  auto chunk = frame (proto::Kind::kAction, proto::kFlagLast, 3, 2, 200 * kMs, 0,
                      {{0.25f, 0.5f}, {0.3f, 0.5f}});
  plan.frame (chunk.data (), chunk.size (), nullptr, out);
  EXPECT_TRUE (out.empty ());
  EXPECT_EQ (plan.counters ().refused, 1u);
  /* Wrong dimension or garbage: refused, nothing published. */
  auto wide = frame (proto::Kind::kAction, proto::kFlagLast | proto::kFlagStream, 3, 3, 300 * kMs,
                     0, {{0.1f, 0.2f, 0.3f}});
  plan.frame (wide.data (), wide.size (), nullptr, out);
  const uint8_t junk[10] = {1, 2, 3};
  plan.frame (junk, sizeof junk, nullptr, out);
  EXPECT_TRUE (out.empty ());
  EXPECT_EQ (plan.counters ().refused, 3u);
}
