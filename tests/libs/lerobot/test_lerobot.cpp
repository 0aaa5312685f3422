/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lerobot/, the LeRobotDataset v3 library under pi0lerobotsink and pi0lerobotsrc: the stats on
 * their own, and what the writer refuses (the CommandTimeline the sink records actions with is
 * protocol/'s: tests/libs/protocol/test_session.cpp). */

#include "tests/pi0testlerobot.h"

namespace fs = std::filesystem;
using namespace pi0test;
using namespace pi0test::lerobot;

TEST (LeRobotStats, VectorStatsAreThoseOfNumpyAndAggregateIsPooled)
{
  const double v[] = {1, 10, 2, 20, 3, 30, 4, 40};
  auto s = pi0::lerobot::vector_stats (v, 4, 2);
  EXPECT_DOUBLE_EQ (s.mean[0], 2.5);
  EXPECT_DOUBLE_EQ (s.std[1], std::sqrt (125.0));
  EXPECT_DOUBLE_EQ (s.min[1], 10);
  EXPECT_DOUBLE_EQ (s.max[0], 4);
  EXPECT_DOUBLE_EQ (s.q50[0], 2.5);
  EXPECT_DOUBLE_EQ (s.q10[0], 1.3);
  EXPECT_EQ (s.count, 4);
  auto a = pi0::lerobot::vector_stats (v, 2, 2), b = pi0::lerobot::vector_stats (v + 4, 2, 2);
  auto m = pi0::lerobot::aggregate_stats ({a, b});
  EXPECT_DOUBLE_EQ (m.mean[0], 2.5);
  EXPECT_NEAR (m.std[1], std::sqrt (125.0), 1e-12);
  EXPECT_EQ (m.count, 4);
  pi0::lerobot::ImageStats im;
  const uint8_t px[6] = {0, 255, 51, 255, 0, 51};
  im.add (px, 2, 1, 6);
  auto is = im.finish ();
  EXPECT_DOUBLE_EQ (is.mean[0], 0.5);
  EXPECT_DOUBLE_EQ (is.max[1], 1.0);
  EXPECT_DOUBLE_EQ (is.min[2], 0.2);
  EXPECT_EQ (is.count, 1);
}

TEST (LeRobotWriter, RefusesWhatWouldDamageADataset)
{
  TempDir d;
  std::string err;
  /* A non-empty directory that is not a dataset. */
  g_file_set_contents ((d.path () + "/notes.txt").c_str (), "x", -1, nullptr);
  EXPECT_EQ (pi0::lerobot::Writer::open (d.path (), tiny_schema (), true, &err), nullptr);
  EXPECT_NE (err.find ("not empty"), std::string::npos) << err;
  /* A dataset, without append; then with append but another fps. */
  TempDir d2;
  auto w = pi0::lerobot::Writer::open (d2.path () + "/ds", tiny_schema (), false, &err);
  ASSERT_NE (w, nullptr) << err;
  pi0::lerobot::Episode ep;
  ep.length = 2;
  ep.state = {1, 2, 3, 4};
  ep.action = {1, 2, 3, 4};
  ep.task = {"t", "t"};
  EXPECT_TRUE (w->commit (ep, &err)) << err;
  w.reset ();
  EXPECT_EQ (pi0::lerobot::Writer::open (d2.path () + "/ds", tiny_schema (), false, &err), nullptr);
  EXPECT_NE (err.find ("already holds a dataset"), std::string::npos) << err;
  auto other = tiny_schema ();
  other.fps = 30;
  EXPECT_EQ (pi0::lerobot::Writer::open (d2.path () + "/ds", other, true, &err), nullptr);
  EXPECT_NE (err.find ("fps"), std::string::npos) << err;
  /* The dataset read back. */
  auto r = pi0::lerobot::Reader::open (d2.path () + "/ds", &err);
  ASSERT_NE (r, nullptr) << err;
  ASSERT_EQ (r->episodes ().size (), 1u);
  std::vector<float> st, ac;
  std::vector<double> ts;
  ASSERT_TRUE (r->read_frames (r->episodes ()[0], &st, &ac, &ts, &err)) << err;
  EXPECT_EQ (st, ep.state);
  EXPECT_EQ (ts, (std::vector<double>{0.0, (double)(float)0.1}));
}

/* info.json has one codec and one pixel format per camera: appending H.264 episodes onto a
 * dataset LeRobot recorded in AV1 (its default) would leave its features describing only some of
 * its files, so it is refused, naming the camera and both codecs; the same dataset in H.264 is
 * appended to. */
TEST (LeRobotWriter, RefusesToAppendAnotherCodecThanTheDatasets)
{
  REQUIRE_LEROBOT_PYTHON (py, "make the datasets with the real lerobot");
  TempDir dir;
  for (const char *codec : {"libsvtav1", "h264"}) {
    SCOPED_TRACE (codec);
    const std::string root = dir.path () + "/" + codec;
    ASSERT_TRUE (lerobot_made (py, dir.path (), root, {"--codec", codec, "--lengths", "3"}));
    std::string err;
    auto r = pi0::lerobot::Reader::open (root, &err);
    ASSERT_TRUE (r) << err;
    /* What pi0lerobotsink records with x264 from I420 frames. */
    pi0::lerobot::Schema ours = r->schema ();
    ASSERT_FALSE (ours.cameras.empty ());
    for (auto &c : ours.cameras) {
      c.codec = "h264";
      c.pix_fmt = "yuv420p";
    }
    auto w = pi0::lerobot::Writer::open (root, ours, true, &err);
    if (std::string (codec) == "h264") {
      EXPECT_NE (w, nullptr) << err;
      continue;
    }
    EXPECT_EQ (w, nullptr);
    EXPECT_NE (err.find ("its " + ours.cameras[0].key +
                         " is av1 video and this recording "
                         "encodes h264"),
               std::string::npos)
        << err;
  }
}
