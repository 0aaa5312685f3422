/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the tests of pi0lerobotsink, pi0lerobotsrc and lerobot/ share: running tools and the real
 * lerobot, the recording pipelines, what the chain saw, small datasets. */
#pragma once

#include "common/pi0json.h"
#include "lerobot/pi0lerobot.h"
#include "tests/pi0testgst.h"
#include "tests/pi0testlaunch.h"
#include "tests/pi0testrun.h"
#include "tests/pi0testsink.h"

#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

namespace pi0test::lerobot
{

namespace fs = std::filesystem;

/* Runs @argv, returns its exit status; its output (bytes, with stderr unless @merge is false)
 * goes to *out. */
inline int
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
inline std::map<std::string, std::string>
python_env (const std::string &dir)
{
  return {{"HF_HUB_OFFLINE", "1"},
          {"HF_DATASETS_CACHE", dir + "/hf-datasets"},
          {"HF_HOME", dir + "/hf-home"}};
}

/* Waits (bounded) until @pred holds or the pipeline posts an error. */
template <typename P>
inline std::string
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

inline std::string
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

inline GstElement *
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

inline std::string
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

inline void
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

inline GstPadProbeReturn
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

inline GstPadProbeReturn
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
inline void
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

inline void
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

inline std::map<std::string, std::string>
robot_vars (const std::string &rec)
{
  return {{"ROBOT_PORT", std::to_string (free_port (G_SOCKET_PROTOCOL_UDP))},
          {"STATE_PORT", std::to_string (free_port (G_SOCKET_PROTOCOL_UDP))},
          {"REC", rec},
          {"ROBOT_CONFIG", source_root () + "/pipelines/robot-7dof.json"}};
}

inline bool
start_robot (SimProc &sim, const std::map<std::string, std::string> &vars, const std::string &log)
{
  return sim.start ({"--proto=udp", "--port=" + vars.at ("ROBOT_PORT"), "--dim=7",
                     "--robot-config=" + vars.at ("ROBOT_CONFIG"),
                     "--state-to=127.0.0.1:" + vars.at ("STATE_PORT")},
                    log);
}

/* chunk_id -> values, from a mode=log file. */
inline std::map<guint64, std::vector<float>>
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

inline pi0::lerobot::Schema
tiny_schema ()
{
  pi0::lerobot::Schema s;
  s.fps = 10;
  s.state_names = {"a", "b"};
  s.action_names = {"a", "b"};
  return s;
}

/* A dataset written by the real lerobot at @root (tests/lerobot/lerobot_made.py make, with
 * @args: codec, lengths), its caches in @dir. */
inline testing::AssertionResult
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

} // namespace pi0test::lerobot
