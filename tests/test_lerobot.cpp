/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0lerobotsink and pi0lerobotsrc, and the library under them (lerobot/).
 *
 * - The stats, on their own (the CommandTimeline the sink records actions with is protocol/'s:
 *   tests/test_session.cpp).
 * - Bad settings: clear errors, nothing written.
 * - pipelines/record-lerobot.txt live against the robot simulator, lossless, two episodes
 *   (started and stopped by pi0-episode events); then the real lerobot (LeRobotDataset, Python
 *   3.12 in .lerobot-venv) loads it and tests/lerobot/check_dataset.py holds frame counts,
 *   timestamps, states, actions (the commands the robot was sent), tasks, stats and the video
 *   frames against what this test saw in the chain; then pipelines/replay-lerobot.txt plays
 *   episode 1 back through the chain and its chunks are bitwise the live run's.
 * - The same line in a gst-launch-1.0 killed mid-episode: the finished episodes load; appending
 *   afterwards cleans up and the dataset loads with one more episode. */

#include "common/pi0json.h"
#include "lerobot/pi0lerobot.h"
#include "tests/pi0testsink.h"
#include "tests/pi0testgst.h"

#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include "tests/pi0testrun.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

namespace fs = std::filesystem;
using namespace pi0test;

namespace
{

std::string
source_root ()
{
  const char *r = g_getenv ("PI0_SOURCE_ROOT");
  return r ? r : ".";
}

std::string
build_root ()
{
  const char *r = g_getenv ("PI0_BUILD_ROOT");
  return r ? r : "build";
}

/* A temporary directory, removed with everything in it. */
struct Dir {
  std::string path;
  Dir ()
  {
    gchar *p = g_dir_make_tmp ("pi0lerobot-XXXXXX", nullptr);
    path = p;
    g_free (p);
  }
  ~Dir ()
  {
    std::error_code ec;
    fs::remove_all (path, ec);
  }
};

/* Runs @argv, returns its exit status; its output (bytes, with stderr unless @merge is false)
 * goes to *out. */
int
run (const std::vector<std::string> &argv, std::string *out,
     const std::map<std::string, std::string> &env = {}, bool merge = true)
{
  std::vector<const gchar *> a;
  for (auto &s : argv)
    a.push_back (s.c_str ());
  a.push_back (nullptr);
  GSubprocessLauncher *l = g_subprocess_launcher_new (
      (GSubprocessFlags)(G_SUBPROCESS_FLAGS_STDOUT_PIPE |
                         (merge ? G_SUBPROCESS_FLAGS_STDERR_MERGE : G_SUBPROCESS_FLAGS_NONE)));
  for (auto &kv : env)
    g_subprocess_launcher_setenv (l, kv.first.c_str (), kv.second.c_str (), TRUE);
  g_subprocess_launcher_set_cwd (l, source_root ().c_str ());
  GError *err = nullptr;
  GSubprocess *p = g_subprocess_launcher_spawnv (l, a.data (), &err);
  g_object_unref (l);
  if (!p) {
    *out = err->message;
    g_clear_error (&err);
    return -1;
  }
  GBytes *o = nullptr;
  g_subprocess_communicate (p, nullptr, nullptr, &o, nullptr, nullptr);
  gsize len = 0;
  const char *d = o ? (const char *)g_bytes_get_data (o, &len) : nullptr;
  *out = d ? std::string (d, len) : "";
  if (o)
    g_bytes_unref (o);
  const int st = g_subprocess_get_if_exited (p) ? g_subprocess_get_exit_status (p) : -1;
  g_object_unref (p);
  return st;
}

/* The environment of the lerobot checker: offline, its caches in @dir. */
std::map<std::string, std::string>
python_env (const std::string &dir)
{
  return {{"HF_HUB_OFFLINE", "1"},
          {"HF_DATASETS_CACHE", dir + "/hf-datasets"},
          {"HF_HOME", dir + "/hf-home"}};
}

std::string
pipeline_line (const std::string &name)
{
  std::ifstream in (source_root () + "/pipelines/" + name + ".txt");
  std::string l, line;
  while (std::getline (in, l))
    if (!l.empty () && l[0] != '#')
      line += l + " ";
  return line;
}

/* The line expanded by bash with @vars, parsed as gst-launch-1.0 does. */
GstElement *
launch_line (const std::string &name, const std::map<std::string, std::string> &vars)
{
  std::map<std::string, std::string> env = vars;
  env["PI0_LINE"] = pipeline_line (name);
  std::string out;
  const int st =
      run ({"bash", "-c", "eval \"set -- $PI0_LINE\" && printf '%s\\0' \"$@\""}, &out, env);
  if (st != 0) {
    ADD_FAILURE () << "cannot expand " << name << ": " << out;
    return nullptr;
  }
  std::vector<std::string> args;
  for (size_t i = 0; i < out.size ();) {
    std::string a (out.c_str () + i);
    i += a.size () + 1;
    args.push_back (a);
  }
  std::vector<const gchar *> argv;
  for (auto &a : args)
    argv.push_back (a.c_str ());
  argv.push_back (nullptr);
  GError *err = nullptr;
  GstElement *p = gst_parse_launchv (argv.data (), &err);
  if (err) {
    ADD_FAILURE () << "cannot parse " << name << ": " << err->message;
    g_clear_error (&err);
  }
  return p;
}

/* Waits (bounded) until @pred holds or the pipeline posts an error. */
template <typename P>
std::string
wait_for (GstElement *pipe, P pred, double seconds)
{
  GstBus *bus = gst_element_get_bus (pipe);
  std::string error;
  for (int i = 0; i < (int)(seconds * 20) && !pred (); i++) {
    MessagePtr m (gst_bus_timed_pop_filtered (bus, GST_SECOND / 20, GST_MESSAGE_ERROR));
    if (m) {
      error = message_text (m.get ());
      break;
    }
  }
  gst_object_unref (bus);
  if (error.empty () && !pred ())
    error = "timed out";
  return error;
}

std::string
run_to_eos (GstElement *pipe, double seconds)
{
  GstBus *bus = gst_element_get_bus (pipe);
  MessagePtr m (gst_bus_timed_pop_filtered (bus, (GstClockTime)(seconds * GST_SECOND),
                                            (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR)));
  gst_object_unref (bus);
  if (!m)
    return "no EOS";
  return GST_MESSAGE_TYPE (m.get ()) == GST_MESSAGE_ERROR ? message_text (m.get ()) : "";
}

GstElement *
by_name (GstElement *pipe, const char *name)
{
  return gst_bin_get_by_name (GST_BIN (pipe), name);
}

/* What the test sees of the chain: observations at the recorder (with the episode events in
 * stream order), chunks at the robot's sink, and the messages the robot was sent. */
struct Seen {
  std::mutex m;
  std::string dump_dir;
  bool recording = true; /* record-lerobot.txt starts an episode by itself */
  guint n_views = 0;
  struct Frame {
    guint64 t, seq;
    std::vector<float> state;
  };
  std::vector<std::vector<Frame>> episodes{1};
  std::vector<std::string> dumps; /* JSON objects */
  std::map<guint64, std::vector<float>> chunks;
  std::vector<std::string> messages;        /* JSON objects */
  std::map<GThread *, std::string> sending; /* a message between its two handlers */
  GstElement *robot = nullptr;

  size_t frames_in (size_t e)
  {
    std::lock_guard<std::mutex> g (m);
    return e < episodes.size () ? episodes[e].size () : 0;
  }
};

std::string
floats_json (const float *v, size_t n)
{
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < n; i++) {
    char b[32];
    g_snprintf (b, sizeof b, "%.9g", v[i]);
    o << (i ? "," : "") << b;
  }
  o << "]";
  return o.str ();
}

void
dump_view (Seen *s, GstBuffer *buf, GstPi0ObservationMeta *meta, guint v, size_t e, size_t k)
{
  GstVideoFrame f;
  if (!gst_pi0_observation_meta_map_view (meta, buf, v, &f, GST_MAP_READ))
    return;
  const GstVideoFormat fmt = GST_VIDEO_FRAME_FORMAT (&f);
  const int w = GST_VIDEO_FRAME_WIDTH (&f), h = GST_VIDEO_FRAME_HEIGHT (&f);
  const std::string view = gst_pi0_observation_meta_get_view (meta, v)->name;
  const std::string file =
      s->dump_dir + "/" + view + "-" + std::to_string (e) + "-" + std::to_string (k) + ".raw";
  std::ofstream out (file, std::ios::binary);
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES (&f); p++) {
    const int rows = GST_VIDEO_FRAME_COMP_HEIGHT (&f, p == 0 ? 0 : 1);
    const int bytes = fmt == GST_VIDEO_FORMAT_RGB      ? w * 3
                      : (fmt == GST_VIDEO_FORMAT_NV12) ? w
                                                       : (p == 0 ? w : w / 2);
    const guint8 *d = (const guint8 *)GST_VIDEO_FRAME_PLANE_DATA (&f, p);
    for (int y = 0; y < rows; y++)
      out.write ((const char *)d + (size_t)y * GST_VIDEO_FRAME_PLANE_STRIDE (&f, p), bytes);
  }
  gst_video_frame_unmap (&f);
  s->dumps.push_back ("{\"episode\":" + std::to_string (e) + ",\"frame\":" + std::to_string (k) +
                      ",\"view\":\"" + view + "\",\"format\":\"" +
                      gst_video_format_to_string (fmt) + "\",\"width\":" + std::to_string (w) +
                      ",\"height\":" + std::to_string (h) + ",\"file\":\"" + file + "\"}");
}

GstPadProbeReturn
on_recorder_pad (GstPad *, GstPadProbeInfo *info, gpointer user_data)
{
  Seen *s = (Seen *)user_data;
  std::lock_guard<std::mutex> g (s->m);
  if (info->type & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM) {
    GstPi0EpisodeAction a;
    if (gst_pi0_episode_event_parse (GST_PAD_PROBE_INFO_EVENT (info), &a, nullptr)) {
      if (a == GST_PI0_EPISODE_START && s->recording && !s->episodes.back ().empty ())
        s->episodes.emplace_back ();
      s->recording = a == GST_PI0_EPISODE_START;
    }
    return GST_PAD_PROBE_OK;
  }
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (buf);
  if (!meta || !s->recording)
    return GST_PAD_PROBE_OK;
  /* The recorder's rule: every view and the state, or the observation is skipped. */
  guint dim = 0;
  const gfloat *st = gst_pi0_observation_meta_get_state (meta, &dim);
  bool ok = st && (meta->state_flags & GST_PI0_STATE_FLAG_PRESENT);
  s->n_views = gst_pi0_observation_meta_get_n_views (meta);
  for (guint v = 0; ok && v < s->n_views; v++)
    ok = gst_pi0_observation_meta_get_view (meta, v)->flags & GST_PI0_VIEW_FLAG_VALID;
  if (!ok)
    return GST_PAD_PROBE_OK;
  const size_t e = s->episodes.size () - 1, k = s->episodes.back ().size ();
  s->episodes.back ().push_back (
      {meta->observation_time, meta->sequence, std::vector<float> (st, st + dim)});
  if (k % 10 == 3)
    for (guint v = 0; v < s->n_views; v++)
      dump_view (s, buf, meta, v, e, k);
  return GST_PAD_PROBE_OK;
}

GstPadProbeReturn
on_robot_pad (GstPad *, GstPadProbeInfo *info, gpointer user_data)
{
  Seen *s = (Seen *)user_data;
  GstPi0ActionMeta *a = gst_buffer_get_pi0_action_meta (GST_PAD_PROBE_INFO_BUFFER (info));
  if (a) {
    std::lock_guard<std::mutex> g (s->m);
    s->chunks[a->sequence] = std::vector<float> (a->actions, a->actions + a->horizon * a->dim);
  }
  return GST_PAD_PROBE_OK;
}

/* The messages the robot was sent, with when: the recorder reads the running time inside its
 * own handler of the sink's `action` signal, so this test reads it in one handler that runs
 * before the recorder's (connected first) and in one that runs after it (connected after):
 * the recorder's reading is within [send, send_hi], whatever the load did between them. */
void
on_action (GstElement *robot, const gchar *kind, guint64, guint, guint steps, guint dim,
           GBytes *values, gpointer user_data)
{
  Seen *s = (Seen *)user_data;
  const GstClockTime now = gst_element_get_current_running_time (robot);
  gsize len = 0;
  const float *v = values ? (const float *)g_bytes_get_data (values, &len) : nullptr;
  std::ostringstream o;
  o << "{\"kind\":\"" << kind << "\",\"send\":" << now << ",\"rows\":[";
  for (guint r = 0; v && dim && r < steps; r++)
    o << (r ? "," : "") << floats_json (v + (size_t)r * dim, dim);
  o << "]";
  std::lock_guard<std::mutex> g (s->m);
  s->sending[g_thread_self ()] = o.str (); // the sink may send from two threads
}

void
on_action_after (GstElement *robot, const gchar *, guint64, guint, guint, guint, GBytes *,
                 gpointer user_data)
{
  Seen *s = (Seen *)user_data;
  const GstClockTime now = gst_element_get_current_running_time (robot);
  std::lock_guard<std::mutex> g (s->m);
  auto it = s->sending.find (g_thread_self ());
  if (it == s->sending.end ())
    return;
  s->messages.push_back (it->second + ",\"send_hi\":" + std::to_string (now) + "}");
  s->sending.erase (it);
}

std::map<std::string, std::string>
robot_vars (const std::string &rec)
{
  return {{"ROBOT_PORT", std::to_string (free_port (G_SOCKET_PROTOCOL_UDP))},
          {"STATE_PORT", std::to_string (free_port (G_SOCKET_PROTOCOL_UDP))},
          {"REC", rec},
          {"ROBOT_CONFIG", source_root () + "/pipelines/robot-7dof.json"}};
}

bool
start_robot (SimProc &sim, const std::map<std::string, std::string> &vars, const std::string &log)
{
  return sim.start ({"--proto=udp", "--port=" + vars.at ("ROBOT_PORT"), "--dim=7",
                     "--robot-config=" + vars.at ("ROBOT_CONFIG"),
                     "--state-to=127.0.0.1:" + vars.at ("STATE_PORT")},
                    log);
}

/* chunk_id -> values, from a mode=log file. */
std::map<guint64, std::vector<float>>
read_chunks (const std::string &path)
{
  std::map<guint64, std::vector<float>> out;
  std::ifstream in (path);
  std::string l;
  while (std::getline (in, l)) {
    std::string err;
    auto j = pi0::json::parse_strict (l, path, &err);
    if (!j || j->value ("kind", "") != "action")
      continue;
    std::vector<float> v;
    auto num = [] (const pi0::json::Value &x) {
      return x.is_number () ? (float)x.get<double> () : std::numeric_limits<float>::quiet_NaN ();
    };
    for (auto &row : (*j)["values"]) {
      if (row.is_array ())
        for (auto &x : row)
          v.push_back (num (x));
      else
        v.push_back (num (row));
    }
    out[(*j)["chunk_id"].get<guint64> ()] = v;
  }
  return out;
}

pi0::lerobot::Schema
tiny_schema ()
{
  pi0::lerobot::Schema s;
  s.fps = 10;
  s.state_names = {"a", "b"};
  s.action_names = {"a", "b"};
  return s;
}

} // namespace

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
  Dir d;
  std::string err;
  /* A non-empty directory that is not a dataset. */
  g_file_set_contents ((d.path + "/notes.txt").c_str (), "x", -1, nullptr);
  EXPECT_EQ (pi0::lerobot::Writer::open (d.path, tiny_schema (), true, &err), nullptr);
  EXPECT_NE (err.find ("not empty"), std::string::npos) << err;
  /* A dataset, without append; then with append but another fps. */
  Dir d2;
  auto w = pi0::lerobot::Writer::open (d2.path + "/ds", tiny_schema (), false, &err);
  ASSERT_NE (w, nullptr) << err;
  pi0::lerobot::Episode ep;
  ep.length = 2;
  ep.state = {1, 2, 3, 4};
  ep.action = {1, 2, 3, 4};
  ep.task = {"t", "t"};
  EXPECT_TRUE (w->commit (ep, &err)) << err;
  w.reset ();
  EXPECT_EQ (pi0::lerobot::Writer::open (d2.path + "/ds", tiny_schema (), false, &err), nullptr);
  EXPECT_NE (err.find ("already holds a dataset"), std::string::npos) << err;
  auto other = tiny_schema ();
  other.fps = 30;
  EXPECT_EQ (pi0::lerobot::Writer::open (d2.path + "/ds", other, true, &err), nullptr);
  EXPECT_NE (err.find ("fps"), std::string::npos) << err;
  /* The dataset read back. */
  auto r = pi0::lerobot::Reader::open (d2.path + "/ds", &err);
  ASSERT_NE (r, nullptr) << err;
  ASSERT_EQ (r->episodes ().size (), 1u);
  std::vector<float> st, ac;
  std::vector<double> ts;
  ASSERT_TRUE (r->read_frames (r->episodes ()[0], &st, &ac, &ts, &err)) << err;
  EXPECT_EQ (st, ep.state);
  EXPECT_EQ (ts, (std::vector<double>{0.0, (double)(float)0.1}));
}

TEST (Pi0LeRobotSink, RefusesToStartWithoutLocationOrActionSink)
{
  for (const char *desc :
       {"videotestsrc num-buffers=1 ! fakesink pi0lerobotsink name=d action-sink=robot",
        "fakesrc num-buffers=0 ! fakesink pi0lerobotsink name=d location=/tmp/pi0-lerobot-never"}) {
    GError *err = nullptr;
    ElementPtr pipe (gst_parse_launch (desc, &err));
    ASSERT_EQ (err, nullptr);
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
  Dir d;
  const std::string desc =
      "fakesrc num-buffers=0 ! pi0actionsink name=robot mode=log target=stdout "
      "pi0lerobotsink name=rec action-sink=robot location=" +
      d.path + "/ds";
  GError *err = nullptr;
  ElementPtr pipe (gst_parse_launch (desc.c_str (), &err));
  ASSERT_EQ (err, nullptr) << err->message;
  EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  GstBus *bus = gst_element_get_bus (pipe.get ());
  MessagePtr m (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR));
  gst_object_unref (bus);
  ASSERT_NE (m, nullptr);
  EXPECT_NE (message_text (m.get ()).find ("mode=log"), std::string::npos)
      << message_text (m.get ());
  EXPECT_FALSE (g_file_test ((d.path + "/ds").c_str (), G_FILE_TEST_EXISTS));
}

/* LeRobot's fps is an integer: a base camera at 30000/1001 is refused (unless fps is set)
 * before anything is written. */
TEST (Pi0LeRobotSink, RefusesABaseCameraAtAFractionalRateUnlessFpsIsSet)
{
  for (int with_fps = 0; with_fps < 2; with_fps++) {
    Dir d;
    const std::string desc =
        "videotestsrc num-buffers=3 ! video/x-raw,format=I420,width=64,height=48,"
        "framerate=30000/1001 ! pi0viewmux name=mux ! pi0lerobotsink name=rec action-sink=robot "
        "location=" +
        d.path + "/ds" + (with_fps ? " fps=30" : "") +
        " fakesrc num-buffers=0 ! pi0actionsink name=robot allow-unlimited=true "
        "target=file:///dev/null";
    GError *err = nullptr;
    ElementPtr pipe (gst_parse_launch (desc.c_str (), &err));
    ASSERT_EQ (err, nullptr) << err->message;
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
      EXPECT_FALSE (g_file_test ((d.path + "/ds/meta/info.json").c_str (), G_FILE_TEST_EXISTS));
    } else {
      /* fps=30: recorded (no state here: every observation is skipped, nothing committed). */
      EXPECT_EQ (GST_MESSAGE_TYPE (m.get ()), GST_MESSAGE_EOS) << message_text (m.get ());
    }
  }
}

/* A dataset of tiny_schema() with one episode of one frame (no cameras) at @path. */
static testing::AssertionResult
one_frame_dataset (const std::string &path)
{
  std::string e;
  auto w = pi0::lerobot::Writer::open (path, tiny_schema (), false, &e);
  if (!w)
    return testing::AssertionFailure () << e;
  pi0::lerobot::Episode ep;
  ep.length = 1;
  ep.state = {1, 2};
  ep.action = {1, 2};
  ep.task = {"t"};
  if (!w->commit (ep, &e))
    return testing::AssertionFailure () << e;
  return testing::AssertionSuccess ();
}

TEST (Pi0LeRobotSrc, AMissingDatasetOrEpisodeIsAnErrorNamingIt)
{
  Dir d;
  for (int missing_episode = 0; missing_episode < 2; missing_episode++) {
    if (missing_episode) {
      /* A dataset with one episode (no cameras), asked for episode 5. */
      ASSERT_TRUE (one_frame_dataset (d.path + "/ds"));
    }
    ElementPtr src (gst_element_factory_make ("pi0lerobotsrc", nullptr));
    ASSERT_NE (src, nullptr);
    g_object_set (src.get (), "location", (d.path + "/ds").c_str (), "episode", 5u, nullptr);
    ElementPtr pipe (gst_pipeline_new (nullptr));
    gst_bin_add (GST_BIN (pipe.get ()), GST_ELEMENT (gst_object_ref (src.get ())));
    EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    GstBus *bus = gst_element_get_bus (pipe.get ());
    MessagePtr m (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR));
    gst_object_unref (bus);
    ASSERT_NE (m, nullptr);
    const std::string t = message_text (m.get ());
    EXPECT_NE (t.find (missing_episode ? "no episode 5" : "info.json"), std::string::npos) << t;
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
  }
}

/* Setting location reads nothing (a set_property never touches the disk): the dataset is read
 * at READY, where its pads appear and n-episodes is known, and they go again at NULL. */
TEST (Pi0LeRobotSrc, TheDatasetIsReadAtReadyNotWhenLocationIsSet)
{
  Dir d;
  ASSERT_TRUE (one_frame_dataset (d.path + "/ds"));

  ElementPtr src (gst_element_factory_make ("pi0lerobotsrc", nullptr));
  ASSERT_NE (src, nullptr);
  g_object_set (src.get (), "location", (d.path + "/ds").c_str (), nullptr);
  guint n = 99;
  g_object_get (src.get (), "n-episodes", &n, nullptr);
  EXPECT_EQ (n, 0u) << "not read yet";
  EXPECT_EQ (src->numsrcpads, 0u);
  ASSERT_EQ (gst_element_set_state (src.get (), GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  g_object_get (src.get (), "n-episodes", &n, nullptr);
  EXPECT_EQ (n, 1u);
  ObjectPtr<GstPad> state (gst_element_get_static_pad (src.get (), "state"));
  EXPECT_NE (state, nullptr) << "the state pad appears at READY";
  ASSERT_EQ (gst_element_set_state (src.get (), GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  EXPECT_EQ (src->numsrcpads, 0u);

  /* A location that names nothing is no warning when set, an error at READY. */
  g_object_set (src.get (), "location", (d.path + "/none").c_str (), nullptr);
  ElementPtr pipe (gst_pipeline_new (nullptr));
  gst_bin_add (GST_BIN (pipe.get ()), GST_ELEMENT (gst_object_ref (src.get ())));
  EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_READY), GST_STATE_CHANGE_FAILURE);
  ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
  MessagePtr m (gst_bus_pop_filtered (bus.get (), GST_MESSAGE_ERROR));
  ASSERT_NE (m, nullptr);
  EXPECT_NE (message_text (m.get ()).find ("Cannot read the dataset"), std::string::npos);
  gst_element_set_state (pipe.get (), GST_STATE_NULL);
}

/* A dataset written by the real lerobot at @root (tests/lerobot/lerobot_made.py make, with
 * @args: codec, lengths), its caches in @dir. */
static testing::AssertionResult
lerobot_made (const std::string &py, const std::string &dir, const std::string &root,
              const std::vector<std::string> &args = {})
{
  std::vector<std::string> argv = {py, source_root () + "/tests/lerobot/lerobot_made.py", "make",
                                   root};
  argv.insert (argv.end (), args.begin (), args.end ());
  std::string out;
  if (run (argv, &out, python_env (dir)) != 0)
    return testing::AssertionFailure () << out;
  return testing::AssertionSuccess ();
}

/* Datasets the real lerobot wrote (LeRobotDataset.create + add_frame + save_episode: every
 * episode of a camera in one MP4, H.264 and LeRobot's default AV1): every episode plays, each
 * of its frames byte for byte the frame LeRobot's decoder selects for it, and its state rows. */
TEST (Pi0LeRobotSrc, PlaysEveryEpisodeOfDatasetsLeRobotWrote)
{
  REQUIRE_LEROBOT_PYTHON (py, source_root (), "play datasets the real lerobot wrote");
  Dir dir;
  const std::string tool = source_root () + "/tests/lerobot/lerobot_made.py";
  for (const char *codec : {"h264", "libsvtav1"}) {
    SCOPED_TRACE (codec);
    const std::string root = dir.path + "/" + codec;
    std::string out;
    ASSERT_TRUE (lerobot_made (py, dir.path, root, {"--codec", codec, "--lengths", "7,12,9"}));
    for (guint e = 0; e < 3; e++) {
      SCOPED_TRACE (e);
      const std::string dump = dir.path + "/" + codec + "-played/" + std::to_string (e);
      fs::create_directories (dump);
      GError *err = nullptr;
      const std::string line =
          "pi0lerobotsrc name=ds location=" + root + " episode=" + std::to_string (e) +
          " ds.main ! video/x-raw,format=I420 ! filesink location=" + dump +
          "/main.yuv ds.state ! filesink location=" + dump + "/state.f32";
      ElementPtr pipe (gst_parse_launch (line.c_str (), &err));
      ASSERT_EQ (err, nullptr) << err->message;
      ASSERT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PLAYING),
                 GST_STATE_CHANGE_ASYNC);
      EXPECT_EQ (run_to_eos (pipe.get (), 60), "") << "every episode ends, the last and the others";
      gst_element_set_state (pipe.get (), GST_STATE_NULL);
    }
    EXPECT_EQ (run ({py, tool, "check", root, dir.path + "/" + codec + "-played"}, &out,
                    python_env (dir.path)),
               0)
        << out;
    /* Many more, one after the other in this process: a camera branch whose decodebin started
     * before its videoconvert was ready stalled for good, with no error and no EOS (about once
     * in 75 pipelines here before the fix; 3,900 in a row since). */
    for (guint k = 0; k < 60; k++) {
      const std::string line = "pi0lerobotsrc name=ds location=" + root +
                               " episode=" + std::to_string (k % 3) +
                               " ds.main ! fakesink ds.state ! fakesink";
      GError *err = nullptr;
      ElementPtr pipe (gst_parse_launch (line.c_str (), &err));
      ASSERT_EQ (err, nullptr) << err->message;
      gst_element_set_state (pipe.get (), GST_STATE_PLAYING);
      const std::string ended = run_to_eos (pipe.get (), 60);
      gst_element_set_state (pipe.get (), GST_STATE_NULL);
      ASSERT_EQ (ended, "") << "play " << k << " (episode " << k % 3 << ") did not end";
    }
  }
}

/* A stand-in AV1 decoder, ranked above the installed ones while a test needs it: gray I420
 * frames at the input's size and PTS. With fail_after_eos, when a frame it pushes is answered
 * GST_FLOW_EOS it then fails as libaom's av1dec now and then does there ("Failed to decode
 * frame", an element error, GST_FLOW_ERROR upstream); with fail_at = N it fails on frame N. */
struct FakeAv1Dec {
  GstElement parent;
  GstPad *sink, *src;
  int width, height, n;
};
struct FakeAv1DecClass {
  GstElementClass parent;
};
static int fake_fail_at = -1;
static bool fake_fail_after_eos = false;
GType fake_av1_dec_get_type (void);
G_DEFINE_TYPE (FakeAv1Dec, fake_av1_dec, GST_TYPE_ELEMENT)

static GstStaticPadTemplate fake_sink_t =
    GST_STATIC_PAD_TEMPLATE ("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS ("video/x-av1"));
static GstStaticPadTemplate fake_src_t = GST_STATIC_PAD_TEMPLATE (
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS ("video/x-raw,format=I420"));

static gboolean
fake_av1_dec_event (GstPad *pad, GstObject *parent, GstEvent *ev)
{
  FakeAv1Dec *d = (FakeAv1Dec *)parent;
  if (GST_EVENT_TYPE (ev) == GST_EVENT_CAPS) {
    GstCaps *in;
    gst_event_parse_caps (ev, &in);
    const GstStructure *st = gst_caps_get_structure (in, 0);
    gint fn = 30, fd = 1;
    gst_structure_get_int (st, "width", &d->width);
    gst_structure_get_int (st, "height", &d->height);
    gst_structure_get_fraction (st, "framerate", &fn, &fd);
    GstCaps *out = gst_caps_new_simple ("video/x-raw", "format", G_TYPE_STRING, "I420", "width",
                                        G_TYPE_INT, d->width, "height", G_TYPE_INT, d->height,
                                        "framerate", GST_TYPE_FRACTION, fn, fd, nullptr);
    gst_event_unref (ev);
    const gboolean ok = gst_pad_push_event (d->src, gst_event_new_caps (out));
    gst_caps_unref (out);
    return ok;
  }
  return gst_pad_event_default (pad, parent, ev);
}

static GstFlowReturn
fake_av1_dec_chain (GstPad *, GstObject *parent, GstBuffer *in)
{
  FakeAv1Dec *d = (FakeAv1Dec *)parent;
  const int k = d->n++;
  if (k == fake_fail_at) {
    gst_buffer_unref (in);
    GST_ELEMENT_ERROR (d, LIBRARY, INIT, ("Failed to decode frame"), ("stand-in, frame %d", k));
    return GST_FLOW_ERROR;
  }
  const gsize size = (gsize)d->width * d->height * 3 / 2;
  GstBuffer *out = gst_buffer_new_allocate (nullptr, size, nullptr);
  gst_buffer_memset (out, 0, 128, size);
  GST_BUFFER_PTS (out) = GST_BUFFER_PTS (in);
  GST_BUFFER_DURATION (out) = GST_BUFFER_DURATION (in);
  gst_buffer_unref (in);
  const GstFlowReturn ret = gst_pad_push (d->src, out);
  if (ret == GST_FLOW_EOS && fake_fail_after_eos) {
    GST_ELEMENT_ERROR (d, LIBRARY, INIT, ("Failed to decode frame"), ("stand-in, after EOS"));
    return GST_FLOW_ERROR;
  }
  return ret;
}

static void
fake_av1_dec_init (FakeAv1Dec *d)
{
  d->width = d->height = 16;
  d->n = 0;
  d->sink = gst_pad_new_from_static_template (&fake_sink_t, "sink");
  gst_pad_set_chain_function (d->sink, fake_av1_dec_chain);
  gst_pad_set_event_function (d->sink, fake_av1_dec_event);
  GST_PAD_SET_PROXY_ALLOCATION (d->sink);
  gst_element_add_pad (GST_ELEMENT (d), d->sink);
  d->src = gst_pad_new_from_static_template (&fake_src_t, "src");
  gst_pad_use_fixed_caps (d->src);
  gst_element_add_pad (GST_ELEMENT (d), d->src);
}

static void
fake_av1_dec_class_init (FakeAv1DecClass *klass)
{
  GstElementClass *ec = GST_ELEMENT_CLASS (klass);
  gst_element_class_add_static_pad_template (ec, &fake_sink_t);
  gst_element_class_add_static_pad_template (ec, &fake_src_t);
  gst_element_class_set_static_metadata (ec, "stand-in AV1 decoder", "Codec/Decoder/Video",
                                         "Gray frames; fails where a test says", "gst-pi0 tests");
}

/* Plays episode @episode of @root's camera `main` with the stand-in decoder; @frames: how
 * many frames came out. */
static std::string
play_with_fake_decoder (const std::string &root, guint episode, int *frames)
{
  GstPluginFeature *f = GST_PLUGIN_FEATURE (gst_element_factory_find ("pi0testfakeav1dec"));
  gst_plugin_feature_set_rank (f, GST_RANK_PRIMARY + 1000);
  GError *err = nullptr;
  const std::string line = "pi0lerobotsrc name=ds location=" + root +
                           " episode=" + std::to_string (episode) +
                           " ds.main ! fakesink name=v signal-handoffs=true ds.state ! fakesink";
  ElementPtr pipe (gst_parse_launch (line.c_str (), &err));
  if (err) {
    std::string m = err->message;
    g_error_free (err);
    return m;
  }
  *frames = 0;
  ObjectPtr<GstElement> v (by_name (pipe.get (), "v"));
  g_signal_connect (
      v.get (), "handoff",
      G_CALLBACK (+[] (GstElement *, GstBuffer *, GstPad *, gpointer n) { ++*(int *)n; }), frames);
  /* Every error posted, also after EOS (the stand-in fails just after the branch's EOS went
   * downstream, and the pipeline's EOS may come first): seen synchronously, counted once the
   * pipeline is back in NULL, its streaming threads joined. */
  std::vector<std::string> errors;
  std::mutex lock;
  ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
  struct Seen {
    std::vector<std::string> *errors;
    std::mutex *lock;
  } seen{&errors, &lock};
  gst_bus_set_sync_handler (
      bus.get (),
      +[] (GstBus *, GstMessage *m, gpointer p) {
        if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
          Seen *s = (Seen *)p;
          std::lock_guard<std::mutex> g (*s->lock);
          s->errors->push_back (message_text (m));
        }
        return GST_BUS_PASS;
      },
      &seen, nullptr);
  gst_element_set_state (pipe.get (), GST_STATE_PLAYING);
  std::string result = run_to_eos (pipe.get (), 60);
  gst_element_set_state (pipe.get (), GST_STATE_NULL);
  gst_bus_set_sync_handler (bus.get (), nullptr, nullptr, nullptr);
  gst_plugin_feature_set_rank (f, GST_RANK_NONE);
  gst_object_unref (f);
  for (auto &e : errors)
    if (result.find (e) == std::string::npos)
      result += (result.empty () ? "" : " ; ") + e;
  return result;
}

/* Once the episode's frames are out, the camera's upstream is told to stop (GST_FLOW_EOS) and
 * the rest of the file is not decoded; a decoder that fails on learning it (libaom's av1dec did,
 * about one run in fifty, and failed CI) does not fail the pipeline: the episode ends with
 * EOS and all its frames. An error before then is the pipeline's, as ever (the control). */
TEST (Pi0LeRobotSrc, ADecoderFailingAfterTheEpisodeEndedDoesNotFailIt)
{
  REQUIRE_LEROBOT_PYTHON (py, source_root (), "play datasets the real lerobot wrote");
  ASSERT_TRUE (
      gst_element_register (nullptr, "pi0testfakeav1dec", GST_RANK_NONE, fake_av1_dec_get_type ()));
  Dir dir;
  const std::string root = dir.path + "/av1";
  ASSERT_TRUE (lerobot_made (py, dir.path, root, {"--codec", "libsvtav1", "--lengths", "7,12,9"}));
  int frames = -1;
  fake_fail_after_eos = true;
  fake_fail_at = -1;
  EXPECT_EQ (play_with_fake_decoder (root, 0, &frames), "");
  EXPECT_EQ (frames, 7) << "episode 0's frames, then EOS";
  EXPECT_EQ (play_with_fake_decoder (root, 1, &frames), "");
  EXPECT_EQ (frames, 12);
  /* The control: the same failure inside the episode (file frame 3 is episode 0's fourth). */
  fake_fail_after_eos = false;
  fake_fail_at = 3;
  const std::string e = play_with_fake_decoder (root, 0, &frames);
  EXPECT_NE (e.find ("Failed to decode frame"), std::string::npos) << e;
  EXPECT_EQ (frames, 3);
  fake_fail_at = -1;
}

/* Damaged and hostile copies of a dataset LeRobot wrote (tests/lerobot/hostile_datasets.py):
 * each gives an element error naming what is wrong, or plays to its end where it is valid or
 * merely short; never an abort (the test process would die), never a hang (bounded waits).
 * Then append=true onto damaged datasets is refused, naming the damage. */
TEST (Pi0LeRobotSrc, HostileDatasetsGiveErrorsNamingTheFieldNeverAbortsOrHangs)
{
  REQUIRE_LEROBOT_PYTHON (py, source_root (), "make the hostile datasets from a LeRobot one");
  Dir dir;
  const std::string good = dir.path + "/good", cases_dir = dir.path + "/cases";
  std::string out;
  ASSERT_TRUE (lerobot_made (py, dir.path, good));
  ASSERT_EQ (run ({py, source_root () + "/tests/lerobot/hostile_datasets.py", good, cases_dir},
                  &out, python_env (dir.path)),
             0)
      << out;
  std::string err;
  auto cases = pi0::json::load_strict (cases_dir + "/cases.json", &err);
  ASSERT_TRUE (cases) << err;
  ASSERT_GE (cases->size (), 20u);
  for (auto &c : *cases) {
    const std::string name = c["name"].get<std::string> ();
    const std::string expect = c["expect"].get<std::string> ();
    SCOPED_TRACE (name);
    GError *gerr = nullptr;
    const std::string line = "pi0lerobotsrc name=ds location=" + cases_dir + "/" + name +
                             " episode=" + std::to_string (c["episode"].get<int> ()) +
                             " ds.main ! fakesink ds.state ! fakesink";
    ElementPtr pipe (gst_parse_launch (line.c_str (), &gerr));
    ASSERT_EQ (gerr, nullptr) << gerr->message;
    std::string result;
    if (gst_element_set_state (pipe.get (), GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
      ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
      MessagePtr m (gst_bus_pop_filtered (bus.get (), GST_MESSAGE_ERROR));
      result = m ? message_text (m.get ()) : "the state change failed with no error posted";
    } else {
      result = run_to_eos (pipe.get (), 30);
    }
    gst_element_set_state (pipe.get (), GST_STATE_NULL);
    if (expect.empty ())
      EXPECT_EQ (result, "") << "plays to its end";
    else
      EXPECT_NE (result.find (expect), std::string::npos)
          << "expected an error with: " << expect << "\ngot: " << result;
  }

  /* Appending onto damage. The stream's schema is the undamaged dataset's. */
  auto r = pi0::lerobot::Reader::open (good, &err);
  ASSERT_TRUE (r) << err;
  const pi0::lerobot::Schema schema = r->schema ();
  for (auto kv : std::vector<std::pair<std::string, std::string>>{
           {"data-missing", "is missing"},
           {"video-missing", "is missing"},
           {"length-wrong", "do not span its length"},
           {"total-frames-wrong", "total_frames is 99"},
           {"state-shape-1e12", "outside 1..4096"},
           {"fps-string", "not a number"}}) {
    SCOPED_TRACE (kv.first);
    err.clear ();
    auto w = pi0::lerobot::Writer::open (cases_dir + "/" + kv.first, schema, true, &err);
    EXPECT_EQ (w, nullptr);
    EXPECT_NE (err.find (kv.second), std::string::npos) << err;
    EXPECT_EQ (err.find ("vector::"), std::string::npos) << err;
  }
  /* And the undamaged one is appended to. */
  err.clear ();
  EXPECT_NE (pi0::lerobot::Writer::open (good, schema, true, &err), nullptr) << err;
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
  REQUIRE_LEROBOT_PYTHON (py, source_root (), "make the dataset with the real lerobot");
  Dir dir;
  const std::string good = dir.path + "/good";
  ASSERT_TRUE (lerobot_made (py, dir.path, good));
  for (const char *action : {"keep", "split"}) {
    SCOPED_TRACE (action);
    const std::string rec = dir.path + "/rec-" + action;
    const std::string line =
        "pi0lerobotsrc name=ds location=" + good +
        " episode=1 ds.main ! identity name=cut ! queue ! mux.main ds.state ! queue ! mux.state "
        "pi0viewmux name=mux ! pi0lerobotsink name=rec action-sink=robot location=" +
        rec + " gap-action=" + action +
        " fakesrc num-buffers=0 ! pi0actionsink name=robot allow-unlimited=true "
        "target=file:///dev/null";
    GError *err = nullptr;
    ElementPtr pipe (gst_parse_launch (line.c_str (), &err));
    ASSERT_EQ (err, nullptr) << err->message;
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

/* A recording that cannot be written (here: a location under /proc) stops only the recording
 * by default: a warning, and the pipeline plays to its end; fail-pipeline=true makes it an
 * error that stops the pipeline. */
TEST (Pi0LeRobotSink, ARecordingFailureStopsTheRecordingNotThePipelineUnlessAsked)
{
  REQUIRE_LEROBOT_PYTHON (py, source_root (), "make the dataset with the real lerobot");
  Dir dir;
  const std::string good = dir.path + "/good";
  ASSERT_TRUE (lerobot_made (py, dir.path, good));
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
    GError *err = nullptr;
    ElementPtr pipe (gst_parse_launch (line.c_str (), &err));
    ASSERT_EQ (err, nullptr) << err->message;
    ObjectPtr<GstBus> bus (gst_element_get_bus (pipe.get ()));
    ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    std::string warning;
    MessagePtr m;
    for (;;) {
      m.reset (gst_bus_timed_pop_filtered (
          bus.get (), 60 * GST_SECOND,
          (GstMessageType)(GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_WARNING)));
      if (!m || GST_MESSAGE_TYPE (m.get ()) != GST_MESSAGE_WARNING)
        break;
      if (message_text (m.get ()).find ("Recording stopped") != std::string::npos)
        warning = message_text (m.get ());
    }
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
  REQUIRE_LEROBOT_PYTHON (py, source_root (), "merge the recording with the real lerobot");
  Dir dir;
  auto vars = robot_vars (dir.path);
  vars["EPISODE_LENGTH"] = "8";
  vars["TOP_PATTERN"] = "smpte";
  vars["TOP_SPEED"] = "24";
  vars["TOP_FPS"] = "30";
  Seen seen;
  seen.dump_dir = dir.path;
  {
    SimProc sim;
    ASSERT_TRUE (start_robot (sim, vars, dir.path + "/robot.jsonl"));
    ElementPtr pipe (launch_line ("record-lerobot", vars));
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
  const std::string expect = dir.path + "/expect.json";
  std::ofstream (expect) << o.str ();
  fs::create_directories (dir.path + "/work");
  std::string out;
  EXPECT_EQ (run ({py, source_root () + "/tests/lerobot/merge_and_quality.py",
                   dir.path + "/lerobot", expect, dir.path + "/work"},
                  &out, python_env (dir.path)),
             0)
      << out;
  const size_t q = out.find ("quality:");
  if (q != std::string::npos)
    std::printf ("%s\n", out.substr (q, out.find ('\n', q) - q).c_str ());
}

/* Record two lossless episodes from the demo chain, load them with lerobot, replay one. */
TEST (Pi0LeRobotSinkRecord, TwoEpisodesLoadInLeRobotAndReplayGivesTheLiveActions)
{
  REQUIRE_LEROBOT_PYTHON (py, source_root (), "load the recording with the real lerobot");
  Dir dir;
  auto vars = robot_vars (dir.path);
  vars["LOSSLESS"] = "true";
  vars["SEED"] = "0";
  Seen seen;
  seen.dump_dir = dir.path;
  {
    SimProc sim;
    ASSERT_TRUE (start_robot (sim, vars, dir.path + "/robot.jsonl"));
    ElementPtr pipe (launch_line ("record-lerobot", vars));
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
  const std::string expect = dir.path + "/expect.json";
  ASSERT_TRUE (g_file_set_contents (expect.c_str (), o.str ().c_str (), -1, nullptr));
  std::string out;
  const int rc =
      run ({py, source_root () + "/tests/lerobot/check_dataset.py", dir.path + "/lerobot", expect},
           &out, python_env (dir.path));
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
    ElementPtr pipe (launch_line ("replay-lerobot", rv));
    ASSERT_NE (pipe, nullptr);
    ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    EXPECT_EQ (run_to_eos (pipe.get (), 300), "");
  }
  auto replay = read_chunks (dir.path + "/replay1.jsonl");
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
  REQUIRE_LEROBOT_PYTHON (py, source_root (), "load the recording with the real lerobot");
  Dir dir;
  auto vars = robot_vars (dir.path);
  vars["EPISODE_LENGTH"] = "12";
  SimProc sim;
  ASSERT_TRUE (start_robot (sim, vars, dir.path + "/robot.jsonl"));
  auto env = vars;
  env["PI0_LINE"] = pipeline_line ("record-lerobot");
  env["GST_PLUGIN_PATH"] = build_root () + "/gst";
  env["GST_PLUGIN_PATH_1_0"] = build_root () + "/gst";
  env["GST_REGISTRY"] = dir.path + "/registry.bin";
  const gchar *argv[] = {"bash", "-c", "eval exec gst-launch-1.0 -q \"$PI0_LINE\"", nullptr};
  GSubprocessLauncher *l = g_subprocess_launcher_new (
      (GSubprocessFlags)(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_SILENCE));
  for (auto &kv : env)
    g_subprocess_launcher_setenv (l, kv.first.c_str (), kv.second.c_str (), TRUE);
  g_subprocess_launcher_set_cwd (l, source_root ().c_str ());
  GSubprocess *p = g_subprocess_launcher_spawnv (l, argv, nullptr);
  g_object_unref (l);
  ASSERT_NE (p, nullptr);
  const std::string info = dir.path + "/lerobot/meta/info.json";
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
  ASSERT_GE (n, 2) << "the recording did not commit two episodes";
  int parts = 0;
  for (auto &f : fs::recursive_directory_iterator (dir.path + "/lerobot"))
    parts += f.path ().extension () == ".part";
  std::cout << "killed with " << n << " episodes committed, " << parts
            << " files of the episode in progress left\n";
  std::string out;
  EXPECT_EQ (run ({py, source_root () + "/tests/lerobot/check_dataset.py", dir.path + "/lerobot",
                   "--episodes", std::to_string (n)},
                  &out, python_env (dir.path)),
             0)
      << out;
  std::cout << out;

  /* Appending: what the crash left is removed, one more episode is added. */
  vars["EPISODE_LENGTH"] = "0";
  {
    ElementPtr pipe (launch_line ("record-lerobot", vars));
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
  for (auto &f : fs::recursive_directory_iterator (dir.path + "/lerobot"))
    EXPECT_NE (f.path ().extension (), ".part") << "left over: " << f.path ();
  EXPECT_EQ (run ({py, source_root () + "/tests/lerobot/check_dataset.py", dir.path + "/lerobot",
                   "--episodes", std::to_string (n + 1)},
                  &out, python_env (dir.path)),
             0)
      << out;
  std::cout << out;
}
