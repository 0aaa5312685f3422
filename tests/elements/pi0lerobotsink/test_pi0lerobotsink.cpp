/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0lerobotsink.
 *
 * - Bad settings: clear errors, nothing written.
 * - Gaps inside an episode, and recording failures that stop the recording and not the pipeline.
 * - pipelines/record-lerobot.txt live against the robot simulator, lossless, two episodes
 *   (started and stopped by pi0-episode events); then the real lerobot (LeRobotDataset, Python
 *   3.12 in .lerobot-venv) loads it and tests/lerobot/check_dataset.py holds frame counts,
 *   timestamps, states, actions (the commands the robot was sent), tasks, stats and the video
 *   frames against what this test saw in the chain; then pipelines/replay-lerobot.txt plays
 *   episode 1 back through the chain and its chunks are bitwise the live run's.
 * - The same line in a gst-launch-1.0 killed mid-episode: the finished episodes load; appending
 *   afterwards cleans up and the dataset loads with one more episode. */

#include "tests/pi0testlerobot.h"

namespace fs = std::filesystem;
using namespace pi0test;
using namespace pi0test::lerobot;

TEST (Pi0LeRobotSink, RefusesToStartWithoutLocationOrActionSink)
{
  for (const char *desc :
       {"videotestsrc num-buffers=1 ! fakesink pi0lerobotsink name=d action-sink=robot",
        "fakesrc num-buffers=0 ! fakesink pi0lerobotsink name=d location=/tmp/pi0-lerobot-never"}) {
    std::string parse_error;
    ElementPtr pipe = pi0::tools::launch (desc, &parse_error);
    ASSERT_TRUE (pipe) << parse_error;
    EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    GstBus *bus = gst_element_get_bus (pipe.get ());
    MessagePtr m (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR));
    gst_object_unref (bus);
    ASSERT_NE (m, nullptr) << desc;
    const std::string t = message_text (m.get ());
    EXPECT_TRUE (t.find ("location") != std::string::npos ||
                 t.find ("action-sink") != std::string::npos)
        << t;
  }
}

TEST (Pi0LeRobotSink, RefusesAnActionSinkThatDrivesNoRobot)
{
  TempDir d;
  const std::string desc =
      "fakesrc num-buffers=0 ! pi0actionsink name=robot mode=log target=stdout "
      "pi0lerobotsink name=rec action-sink=robot location=" +
      d.path () + "/ds";
  std::string parse_error;
  ElementPtr pipe = pi0::tools::launch (desc, &parse_error);
  ASSERT_TRUE (pipe) << parse_error;
  EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  GstBus *bus = gst_element_get_bus (pipe.get ());
  MessagePtr m (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR));
  gst_object_unref (bus);
  ASSERT_NE (m, nullptr);
  EXPECT_NE (message_text (m.get ()).find ("mode=log"), std::string::npos)
      << message_text (m.get ());
  EXPECT_FALSE (g_file_test ((d.path () + "/ds").c_str (), G_FILE_TEST_EXISTS));
}

/* LeRobot's fps is an integer: a base camera at 30000/1001 is refused (unless fps is set)
 * before anything is written. */
TEST (Pi0LeRobotSink, RefusesABaseCameraAtAFractionalRateUnlessFpsIsSet)
{
  for (int with_fps = 0; with_fps < 2; with_fps++) {
    TempDir d;
    const std::string desc =
        "videotestsrc num-buffers=3 ! video/x-raw,format=I420,width=64,height=48,"
        "framerate=30000/1001 ! pi0viewmux name=mux ! pi0lerobotsink name=rec action-sink=robot "
        "location=" +
        d.path () + "/ds" + (with_fps ? " fps=30" : "") +
        " fakesrc num-buffers=0 ! pi0actionsink name=robot allow-unlimited=true "
        "target=file:///dev/null";
    std::string parse_error;
    ElementPtr pipe = pi0::tools::launch (desc, &parse_error);
    ASSERT_TRUE (pipe) << parse_error;
    gst_element_set_state (pipe.get (), GST_STATE_PLAYING);
    GstBus *bus = gst_element_get_bus (pipe.get ());
    MessagePtr m (gst_bus_timed_pop_filtered (
        bus, 60 * GST_SECOND, (GstMessageType)(GST_MESSAGE_ERROR | GST_MESSAGE_EOS)));
    gst_object_unref (bus);
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
    ASSERT_NE (m, nullptr);
    if (!with_fps) {
      ASSERT_EQ (GST_MESSAGE_TYPE (m.get ()), GST_MESSAGE_ERROR);
      EXPECT_NE (message_text (m.get ()).find ("30000/1001"), std::string::npos)
          << message_text (m.get ());
      EXPECT_FALSE (g_file_test ((d.path () + "/ds/meta/info.json").c_str (), G_FILE_TEST_EXISTS));
    } else {
      /* fps=30: recorded (no state here: every observation is skipped, nothing committed). */
      EXPECT_EQ (GST_MESSAGE_TYPE (m.get ()), GST_MESSAGE_EOS) << message_text (m.get ());
    }
  }
}

/* Drops the base camera's frames 4..7 (by PTS): a 133 ms hole in the recorded timeline. */
static GstPadProbeReturn
drop_four_frames (GstPad *, GstPadProbeInfo *info, gpointer)
{
  GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER (info);
  const GstClockTime t = GST_BUFFER_PTS (b), period = GST_SECOND / 30;
  return t + period / 2 >= 4 * period && t + period / 2 < 8 * period ? GST_PAD_PROBE_DROP
                                                                     : GST_PAD_PROBE_OK;
}

/* A gap inside an episode is counted and posted with its place however far the skip warnings
 * have gone, and gap-action chooses: keep (one episode, closed up) or split (two episodes, each
 * with a true timeline). The episode is replayed from a dataset LeRobot wrote. */
TEST (Pi0LeRobotSink, AGapIsCountedPostedAndKeptOrSplitAsAsked)
{
  REQUIRE_LEROBOT_PYTHON (py, "make the dataset with the real lerobot");
  TempDir dir;
  const std::string good = dir.path () + "/good";
  ASSERT_TRUE (lerobot_made (py, dir.path (), good));
  for (const char *action : {"keep", "split"}) {
    SCOPED_TRACE (action);
    const std::string rec = dir.path () + "/rec-" + action;
    const std::string line =
        "pi0lerobotsrc name=ds location=" + good +
        " episode=1 ds.main ! identity name=cut ! queue ! mux.main ds.state ! queue ! mux.state "
        "pi0viewmux name=mux ! pi0lerobotsink name=rec action-sink=robot location=" +
        rec + " gap-action=" + action +
        " fakesrc num-buffers=0 ! pi0actionsink name=robot allow-unlimited=true "
        "target=file:///dev/null";
    std::string parse_error;
    ElementPtr pipe = pi0::tools::launch (line, &parse_error);
    ASSERT_TRUE (pipe) << parse_error;
    ObjectPtr<GstElement> cut (by_name (pipe.get (), "cut")), sink (by_name (pipe.get (), "rec"));
    ObjectPtr<GstPad> cp (gst_element_get_static_pad (cut.get (), "src"));
    gst_pad_add_probe (cp.get (), GST_PAD_PROBE_TYPE_BUFFER, drop_four_frames, nullptr, nullptr);
    ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
    ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    const GstStructure *gap = nullptr;
    MessagePtr gap_msg;
    MessagePtr m;
    for (;;) {
      m.reset (gst_bus_timed_pop_filtered (
          bus.get (), 60 * GST_SECOND,
          (GstMessageType)(GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_WARNING)));
      if (!m || GST_MESSAGE_TYPE (m.get ()) != GST_MESSAGE_WARNING)
        break;
      const GstStructure *d = nullptr;
      gst_message_parse_warning_details (m.get (), &d);
      if (d && gst_structure_has_name (d, "pi0lerobotsink-gap")) {
        gap = d;
        gap_msg = std::move (m);
      }
    }
    ASSERT_NE (m, nullptr) << "no EOS";
    EXPECT_EQ (GST_MESSAGE_TYPE (m.get ()), GST_MESSAGE_EOS) << message_text (m.get ());
    EXPECT_EQ (stat (sink.get (), "gaps"), 1u);
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
    ASSERT_NE (gap, nullptr) << "the gap was not posted";
    guint64 frame = 0, ms = 0;
    EXPECT_TRUE (gst_structure_get_uint64 (gap, "frame", &frame));
    EXPECT_TRUE (gst_structure_get_uint64 (gap, "gap-ms", &ms));
    EXPECT_EQ (frame, 4u);
    EXPECT_NEAR ((double)ms, 166.0, 1.0) << "frame 3 to frame 8";
    std::string e;
    auto r = pi0::lerobot::Reader::open (rec, &e);
    ASSERT_TRUE (r) << e;
    std::vector<int64_t> lengths;
    for (auto &ep : r->episodes ())
      lengths.push_back (ep.length);
    if (std::string (action) == "keep")
      EXPECT_EQ (lengths, (std::vector<int64_t>{8}));
    else
      EXPECT_EQ (lengths, (std::vector<int64_t>{4, 4}));
  }
}

/* The EOS or error that ends a run on @bus (nullptr when neither comes within 60 s), and the last
 * "Recording stopped" warning before it in *@warning. */
static MessagePtr
until_the_end (GstBus *bus, std::string *warning)
{
  for (;;) {
    MessagePtr m (gst_bus_timed_pop_filtered (
        bus, 60 * GST_SECOND,
        (GstMessageType)(GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_WARNING)));
    if (!m || GST_MESSAGE_TYPE (m.get ()) != GST_MESSAGE_WARNING)
      return m;
    if (message_text (m.get ()).find ("Recording stopped") != std::string::npos)
      *warning = message_text (m.get ());
  }
}

/* At the base camera's 10th frame its caps change to 15 fps (a camera reconfigured mid-run). */
static GstPadProbeReturn
halve_the_rate (GstPad *pad, GstPadProbeInfo *, gpointer data)
{
  int *seen = static_cast<int *> (data);
  if (++*seen != 10)
    return GST_PAD_PROBE_OK;
  GstCaps *caps = gst_pad_get_current_caps (pad);
  GstCaps *slower = gst_caps_make_writable (caps);
  gst_caps_set_simple (slower, "framerate", GST_TYPE_FRACTION, 15, 1, nullptr);
  gst_pad_push_event (pad, gst_event_new_caps (slower));
  gst_caps_unref (slower);
  return GST_PAD_PROBE_OK;
}

/* A LeRobot dataset has one fps: a base camera whose rate changes mid-episode ends the recording
 * (the frames before it committed, at the old rate) with a "Recording stopped" warning, and the
 * pipeline, the robot's control among it, goes on to its end; fail-pipeline=true makes it the
 * error that stops the pipeline. */
TEST (Pi0LeRobotSink, AFrameRateChangeStopsTheRecordingNotThePipelineUnlessAsked)
{
  REQUIRE_LEROBOT_PYTHON (py, "make the dataset with the real lerobot");
  TempDir dir;
  const std::string good = dir.path () + "/good";
  ASSERT_TRUE (lerobot_made (py, dir.path (), good));
  for (int fail = 0; fail < 2; fail++) {
    SCOPED_TRACE (fail);
    const std::string rec = dir.path () + "/rec-" + std::to_string (fail);
    const std::string line =
        "pi0lerobotsrc name=ds location=" + good +
        " episode=1 ds.main ! identity name=cut ! queue ! mux.main ds.state ! queue ! mux.state "
        "pi0viewmux name=mux ! pi0lerobotsink name=rec action-sink=robot location=" +
        rec + " fail-pipeline=" + (fail ? "true" : "false") +
        " fakesrc num-buffers=0 ! pi0actionsink name=robot allow-unlimited=true "
        "target=file:///dev/null";
    std::string parse_error;
    ElementPtr pipe = pi0::tools::launch (line, &parse_error);
    ASSERT_TRUE (pipe) << parse_error;
    ObjectPtr<GstElement> cut (by_name (pipe.get (), "cut")), sink (by_name (pipe.get (), "rec"));
    ObjectPtr<GstPad> cp (gst_element_get_static_pad (cut.get (), "src"));
    int frames = 0;
    gst_pad_add_probe (cp.get (), GST_PAD_PROBE_TYPE_BUFFER, halve_the_rate, &frames, nullptr);
    ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
    ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    std::string warning;
    MessagePtr m = until_the_end (bus.get (), &warning);
    ASSERT_NE (m, nullptr) << "neither EOS nor an error";
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
    if (fail) {
      ASSERT_EQ (GST_MESSAGE_TYPE (m.get ()), GST_MESSAGE_ERROR);
      EXPECT_NE (message_text (m.get ()).find ("frame rate changed to 15 fps"), std::string::npos)
          << message_text (m.get ());
      continue;
    }
    EXPECT_EQ (GST_MESSAGE_TYPE (m.get ()), GST_MESSAGE_EOS) << message_text (m.get ());
    EXPECT_GT (frames, 10) << "the camera's frames went on after the change";
    EXPECT_NE (warning.find ("frame rate changed to 15 fps"), std::string::npos) << warning;
    /* The episode so far is kept, at the dataset's one rate. */
    std::string e;
    auto r = pi0::lerobot::Reader::open (rec, &e);
    ASSERT_TRUE (r) << e;
    ASSERT_EQ (r->episodes ().size (), 1u);
    EXPECT_GE (r->episodes ()[0].length, 8);
    EXPECT_LE (r->episodes ()[0].length, 9);
    /* And LeRobot loads it: the frames recorded before the change, every video frame decoded. */
    std::string out;
    EXPECT_EQ (run ({py, "-c",
                     "import sys\n"
                     "from lerobot.datasets import LeRobotDataset\n"
                     "ds = LeRobotDataset('local/rate-change', root=sys.argv[1])\n"
                     "for i in range(len(ds)): ds[i]\n"
                     "print('frames', len(ds), 'fps', ds.fps)\n",
                     rec},
                    &out, python_env (dir.path ())),
               0)
        << out;
    EXPECT_NE (out.find ("frames " + std::to_string (r->episodes ()[0].length) + " fps 30"),
               std::string::npos)
        << out;
  }
}

/* A recording that cannot be written (here: a location under /proc) stops only the recording
 * by default: a warning, and the pipeline plays to its end; fail-pipeline=true makes it an
 * error that stops the pipeline. */
TEST (Pi0LeRobotSink, ARecordingFailureStopsTheRecordingNotThePipelineUnlessAsked)
{
  REQUIRE_LEROBOT_PYTHON (py, "make the dataset with the real lerobot");
  TempDir dir;
  const std::string good = dir.path () + "/good";
  ASSERT_TRUE (lerobot_made (py, dir.path (), good));
  for (int fail = 0; fail < 2; fail++) {
    SCOPED_TRACE (fail);
    const std::string line =
        "pi0lerobotsrc name=ds location=" + good +
        " episode=1 ds.main ! queue ! mux.main ds.state ! queue ! mux.state "
        "pi0viewmux name=mux ! pi0lerobotsink name=rec action-sink=robot "
        "location=/proc/pi0-not-writable/ds fail-pipeline=" +
        (fail ? "true" : "false") +
        " fakesrc num-buffers=0 ! pi0actionsink name=robot allow-unlimited=true "
        "target=file:///dev/null";
    std::string parse_error;
    ElementPtr pipe = pi0::tools::launch (line, &parse_error);
    ASSERT_TRUE (pipe) << parse_error;
    ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
    ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    std::string warning;
    MessagePtr m = until_the_end (bus.get (), &warning);
    ASSERT_NE (m, nullptr) << "neither EOS nor an error";
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
    if (fail) {
      EXPECT_EQ (GST_MESSAGE_TYPE (m.get ()), GST_MESSAGE_ERROR);
      EXPECT_NE (message_text (m.get ()).find ("/proc/pi0-not-writable"), std::string::npos)
          << message_text (m.get ());
    } else {
      EXPECT_EQ (GST_MESSAGE_TYPE (m.get ()), GST_MESSAGE_EOS) << message_text (m.get ());
      EXPECT_NE (warning.find ("/proc/pi0-not-writable"), std::string::npos) << warning;
    }
  }
}

/* A lossy recording of several episodes (EPISODE_LENGTH) with a moving 720p camera: its frames
 * keep the quality the element promises (the quantizer, not a bitrate ceiling, sets it), and
 * LeRobot's aggregate_datasets, merge_datasets and lerobot-edit-dataset merge it with a copy of
 * itself, frames intact (tests/lerobot/merge_and_quality.py). */
TEST (Pi0LeRobotSinkRecord, LossyEpisodesKeepTheirQualityAndLeRobotMergesThem)
{
  REQUIRE_LEROBOT_PYTHON (py, "merge the recording with the real lerobot");
  TempDir dir;
  auto vars = robot_vars (dir.path ());
  vars["EPISODE_LENGTH"] = "8";
  vars["TOP_PATTERN"] = "smpte";
  vars["TOP_SPEED"] = "24";
  vars["TOP_FPS"] = "30";
  Seen seen;
  seen.dump_dir = dir.path ();
  {
    SimProc sim;
    ASSERT_TRUE (start_robot (sim, vars, dir.path () + "/robot.jsonl"));
    ElementPtr pipe (launch_line (pipeline_line ("record-lerobot"), vars));
    ASSERT_NE (pipe, nullptr);
    ObjectPtr<GstElement> rec (by_name (pipe.get (), "dataset"));
    ObjectPtr<GstPad> rp (gst_element_get_static_pad (rec.get (), "sink"));
    gst_pad_add_probe (
        rp.get (),
        (GstPadProbeType)(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
        on_recorder_pad, &seen, nullptr);
    ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    /* The episodes split by length, which the probe does not see: one run of frames. */
    ASSERT_EQ (wait_for (
                   pipe.get (), [&] { return seen.frames_in (0) >= 36; }, 120),
               "");
    gst_element_send_event (pipe.get (), gst_event_new_eos ());
    EXPECT_EQ (run_to_eos (pipe.get (), 120), "");
    EXPECT_GE (stat (rec.get (), "episodes"), 4u);
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
  }
  std::ostringstream o;
  o << "{\"fps\":30,\"min_psnr\":40,\"dumps\":[";
  for (size_t i = 0; i < seen.dumps.size (); i++)
    o << (i ? "," : "") << seen.dumps[i];
  o << "]}";
  const std::string expect = dir.path () + "/expect.json";
  std::ofstream (expect) << o.str ();
  fs::create_directories (dir.path () + "/work");
  std::string out;
  EXPECT_EQ (run ({py, source_root () + "/tests/lerobot/merge_and_quality.py",
                   dir.path () + "/lerobot", expect, dir.path () + "/work"},
                  &out, python_env (dir.path ())),
             0)
      << out;
  const size_t q = out.find ("quality:");
  if (q != std::string::npos)
    std::printf ("%s\n", out.substr (q, out.find ('\n', q) - q).c_str ());
}

/* Record two lossless episodes from the demo chain, load them with lerobot, replay one. */
TEST (Pi0LeRobotSinkRecord, TwoEpisodesLoadInLeRobotAndReplayGivesTheLiveActions)
{
  REQUIRE_LEROBOT_PYTHON (py, "load the recording with the real lerobot");
  TempDir dir;
  auto vars = robot_vars (dir.path ());
  vars["LOSSLESS"] = "true";
  vars["SEED"] = "0";
  Seen seen;
  seen.dump_dir = dir.path ();
  {
    SimProc sim;
    ASSERT_TRUE (start_robot (sim, vars, dir.path () + "/robot.jsonl"));
    ElementPtr pipe (launch_line (pipeline_line ("record-lerobot"), vars));
    ASSERT_NE (pipe, nullptr);
    ObjectPtr<GstElement> rec (by_name (pipe.get (), "dataset")),
        robot (by_name (pipe.get (), "robot"));
    ASSERT_TRUE (rec && robot);
    ObjectPtr<GstPad> rp (gst_element_get_static_pad (rec.get (), "sink")),
        ap (gst_element_get_static_pad (robot.get (), "sink"));
    gst_pad_add_probe (
        rp.get (),
        (GstPadProbeType)(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
        on_recorder_pad, &seen, nullptr);
    gst_pad_add_probe (ap.get (), GST_PAD_PROBE_TYPE_BUFFER, on_robot_pad, &seen, nullptr);
    g_signal_connect (robot.get (), "action", G_CALLBACK (on_action), &seen);
    g_signal_connect_after (robot.get (), "action", G_CALLBACK (on_action_after), &seen);
    ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    ASSERT_EQ (wait_for (
                   pipe.get (), [&] { return seen.frames_in (0) >= 25; }, 120),
               "");
    /* A start event ends the episode in progress and begins the next. */
    gst_element_send_event (rec.get (), gst_pi0_episode_event_new (GST_PI0_EPISODE_START, nullptr));
    ASSERT_EQ (wait_for (
                   pipe.get (), [&] { return seen.frames_in (1) >= 25; }, 120),
               "");
    gst_element_send_event (pipe.get (), gst_event_new_eos ());
    EXPECT_EQ (run_to_eos (pipe.get (), 120), "");
    EXPECT_EQ (stat (rec.get (), "episodes"), 2u);
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
  }
  ASSERT_EQ (seen.episodes.size (), 2u);

  /* What the chain produced, for the checker. */
  std::ostringstream o;
  o << "{\"fps\":30,\"instruction\":\"pick up the red cube\",\"period_ns\":20000000,"
    << "\"views\":[\"main\",\"side\",\"top\"],\"episodes\":[";
  for (size_t e = 0; e < seen.episodes.size (); e++) {
    o << (e ? "," : "") << "{\"frames\":[";
    for (size_t k = 0; k < seen.episodes[e].size (); k++) {
      auto &f = seen.episodes[e][k];
      o << (k ? "," : "") << "{\"t\":" << f.t << ",\"seq\":" << f.seq
        << ",\"state\":" << floats_json (f.state.data (), f.state.size ()) << "}";
    }
    o << "]}";
  }
  o << "],\"messages\":[";
  for (size_t i = 0; i < seen.messages.size (); i++)
    o << (i ? "," : "") << seen.messages[i];
  o << "],\"dumps\":[";
  for (size_t i = 0; i < seen.dumps.size (); i++)
    o << (i ? "," : "") << seen.dumps[i];
  o << "]}";
  const std::string expect = dir.path () + "/expect.json";
  ASSERT_TRUE (g_file_set_contents (expect.c_str (), o.str ().c_str (), -1, nullptr));
  std::string out;
  const int rc = run (
      {py, source_root () + "/tests/lerobot/check_dataset.py", dir.path () + "/lerobot", expect},
      &out, python_env (dir.path ()));
  EXPECT_EQ (rc, 0) << out;
  std::cout << out;

  /* Episode 1 back through the chain: its first observation had sequence s0, so the replay's
   * noise seed is the live seed (0) + s0 and replay chunk k answers live observation s0 + k. */
  const auto &ep1 = seen.episodes[1];
  const guint64 s0 = ep1[0].seq;
  auto rv = vars;
  rv["EPISODE"] = "1";
  rv["SEED"] = std::to_string (s0);
  rv["REPLAY_LOG"] = "replay1.jsonl";
  {
    ElementPtr pipe (launch_line (pipeline_line ("replay-lerobot"), rv));
    ASSERT_NE (pipe, nullptr);
    ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    EXPECT_EQ (run_to_eos (pipe.get (), 300), "");
  }
  auto replay = read_chunks (dir.path () + "/replay1.jsonl");
  EXPECT_EQ (replay.size (), ep1.size ()) << "the replay infers every recorded frame";
  size_t compared = 0;
  for (size_t k = 0; k < ep1.size (); k++) {
    if (ep1[k].seq != s0 + k)
      break; /* an observation skipped live: the sequences no longer line up */
    auto live = seen.chunks.find (ep1[k].seq);
    if (live == seen.chunks.end ())
      continue; /* the live leaky queue skipped it */
    auto it = replay.find (k);
    ASSERT_NE (it, replay.end ()) << k;
    EXPECT_EQ (it->second, live->second)
        << "frame " << k << " (live observation " << ep1[k].seq << ") differs";
    compared++;
  }
  std::cout << "replay of episode 1: " << replay.size () << " chunks, " << compared
            << " compared with the live run's, bitwise\n";
  EXPECT_GE (compared, 3u) << "too few live chunks to compare";
}

/* A recording killed mid-episode keeps its finished episodes loadable; appending cleans up. */
TEST (Pi0LeRobotSinkRecord, KilledRecordingKeepsItsFinishedEpisodes)
{
  REQUIRE_LEROBOT_PYTHON (py, "load the recording with the real lerobot");
  TempDir dir;
  auto vars = robot_vars (dir.path ());
  vars["EPISODE_LENGTH"] = "12";
  SimProc sim;
  ASSERT_TRUE (start_robot (sim, vars, dir.path () + "/robot.jsonl"));
  auto env = vars;
  env["PI0_LINE"] = pipeline_line ("record-lerobot");
  for (auto &kv : gst_child_env (dir.path ()))
    env[kv.first] = kv.second;
  const gchar *argv[] = {"bash", "-c", "eval exec gst-launch-1.0 -q \"$PI0_LINE\"", nullptr};
  GSubprocessLauncher *l = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_SILENCE);
  const std::string log = dir.path () + "/gst-launch.log"; /* its errors, for a failure's message */
  g_subprocess_launcher_set_stderr_file_path (l, log.c_str ());
  for (auto &kv : env)
    g_subprocess_launcher_setenv (l, kv.first.c_str (), kv.second.c_str (), TRUE);
  g_subprocess_launcher_set_cwd (l, source_root ().c_str ());
  GSubprocess *p = g_subprocess_launcher_spawnv (l, argv, nullptr);
  g_object_unref (l);
  ASSERT_NE (p, nullptr);
  const std::string info = dir.path () + "/lerobot/meta/info.json";
  auto committed = [&] () -> int64_t {
    std::string err;
    auto j = pi0::json::load_strict (info, &err);
    return j ? j->value ("total_episodes", (int64_t)0) : 0;
  };
  /* Two episodes committed, then killed while the third is being recorded. */
  for (int i = 0; i < 2400 && committed () < 2 && g_subprocess_get_identifier (p); i++)
    g_usleep (50000);
  g_subprocess_force_exit (p); /* SIGKILL: no EOS, no cleanup */
  g_subprocess_wait (p, nullptr, nullptr);
  g_object_unref (p);
  const int64_t n = committed ();
  gchar *launch_err = nullptr;
  g_file_get_contents (log.c_str (), &launch_err, nullptr, nullptr);
  const std::string launch_text = launch_err ? launch_err : "";
  g_free (launch_err);
  ASSERT_GE (n, 2) << "the recording did not commit two episodes; gst-launch-1.0 said:\n"
                   << launch_text;
  int parts = 0;
  for (auto &f : fs::recursive_directory_iterator (dir.path () + "/lerobot"))
    parts += f.path ().extension () == ".part";
  std::cout << "killed with " << n << " episodes committed, " << parts
            << " files of the episode in progress left\n";
  std::string out;
  EXPECT_EQ (run ({py, source_root () + "/tests/lerobot/check_dataset.py", dir.path () + "/lerobot",
                   "--episodes", std::to_string (n)},
                  &out, python_env (dir.path ())),
             0)
      << out;
  std::cout << out;

  /* Appending: what the crash left is removed, one more episode is added. */
  vars["EPISODE_LENGTH"] = "0";
  {
    ElementPtr pipe (launch_line (pipeline_line ("record-lerobot"), vars));
    ASSERT_NE (pipe, nullptr);
    ObjectPtr<GstElement> rec (by_name (pipe.get (), "dataset"));
    ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    ASSERT_EQ (wait_for (
                   pipe.get (), [&] { return stat (rec.get (), "frames") >= 10; }, 120),
               "");
    gst_element_send_event (pipe.get (), gst_event_new_eos ());
    EXPECT_EQ (run_to_eos (pipe.get (), 120), "");
  }
  EXPECT_EQ (committed (), n + 1);
  for (auto &f : fs::recursive_directory_iterator (dir.path () + "/lerobot"))
    EXPECT_NE (f.path ().extension (), ".part") << "left over: " << f.path ();
  EXPECT_EQ (run ({py, source_root () + "/tests/lerobot/check_dataset.py", dir.path () + "/lerobot",
                   "--episodes", std::to_string (n + 1)},
                  &out, python_env (dir.path ())),
             0)
      << out;
  std::cout << out;
}
