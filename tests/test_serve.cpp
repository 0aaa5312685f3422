/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The policy server as a pipeline: pipelines/serve.txt (pi0servesrc ! cudaprep ! pi0infer with
 * builtin:pi0-tiny ! pi0servesink), expanded by bash and parsed as gst-launch-1.0 would, with the
 * real openpi-client (tests/serve/openpi_clients.py) as robots.
 *
 * - One client per mapping (ALOHA's CHW images, DROID's and LIBERO's HWC; sizes that are not the
 *   model's): metadata, actions, timings; and the actions are those of the camera path: the same
 *   images and state through pi0viewmux ! cudaprep ! pi0infer, with the request's prompt and
 *   seed, give the same chunk.
 * - Eight concurrent clients each get what they get alone.
 * - Bad clients (malformed, truncated, oversized, fragmented, unknown keys, non-finite state,
 *   object dtype, text, killed mid-request and mid-message) get an error or are closed; the
 *   pipeline posts no error, the good client is answered throughout, and at the end no
 *   connection, queued request, buffer or file descriptor is left (leaks tracer, /proc/self/fd).
 * - /healthz follows the pipeline's state. */

#include "tests/pi0testlaunch.h"
#include "common/pi0json.h"
#include "serve/pi0mapping.h"
#include "tests/pi0testserve.h"
#include "tests/pi0testgst.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/pi0/pi0.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include "tests/pi0testleaks.h"

#include <cmath>
#include <csignal>
#include <cstring>
#include <set>
#include <sys/wait.h>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace pi0test;

namespace
{

struct TmpDir {
  std::string path;
  TmpDir ()
  {
    gchar *p = g_dir_make_tmp ("pi0serve-XXXXXX", nullptr);
    path = p ? p : "/tmp";
    g_free (p);
  }
  ~TmpDir ()
  {
    std::error_code ec;
    std::filesystem::remove_all (path, ec);
  }
};

/* pipelines/NAME.txt without its comments, as one line. */
std::string
pipeline_line (const std::string &name)
{
  std::ifstream in (serve_source_root () + "/pipelines/" + name + ".txt");
  std::string line, l;
  while (std::getline (in, l))
    if (!l.empty () && l[0] != '#')
      line += l + " ";
  return line;
}

guint64
stat_of (GstElement *e, const char *field)
{
  GstStructure *s = nullptr;
  g_object_get (e, "stats", &s, nullptr);
  guint64 v = 0;
  if (s)
    gst_structure_get_uint64 (s, field, &v);
  if (s)
    gst_structure_free (s);
  return v;
}

/* The server's side of "every client has gone". */
bool
all_gone (GstElement *src)
{
  for (int i = 0; i < 600; i++) {
    if (stat_of (src, "open") == 0 && stat_of (src, "peers") == 0 && stat_of (src, "queued") == 0)
      return true;
    g_usleep (50000);
  }
  return false;
}

std::string
bus_error (GstElement *pipe)
{
  GstBus *bus = gst_element_get_bus (pipe);
  MessagePtr m (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR));
  gst_object_unref (bus);
  return m ? message_text (m.get ()) : "";
}

/* serve.txt running on a free port; nullptr (and a failure) if it does not start. */
struct Served {
  ElementPtr pipe;
  ObjectPtr<GstElement> src, sink;
  int port = 0;
};

Served
serve (const std::string &mapping,
       const std::vector<std::pair<std::string, std::string>> &extra = {})
{
  Served s;
  LineVars vars (extra.begin (), extra.end ());
  vars["SERVE_PORT"] = "0";
  vars["SERVE_MAPPING"] = mapping;
  s.pipe.reset (launch_line (pipeline_line ("serve"), vars));
  if (!s.pipe)
    return s;
  s.src.reset (find_factory (s.pipe.get (), "pi0servesrc"));
  s.sink.reset (find_factory (s.pipe.get (), "pi0servesink"));
  EXPECT_TRUE (s.src && s.sink);
  if (gst_element_set_state (s.pipe.get (), GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    ADD_FAILURE () << "serve.txt does not start: " << bus_error (s.pipe.get ());
    s.pipe.reset ();
    return s;
  }
  GstState state;
  gst_element_get_state (s.pipe.get (), &state, nullptr, 60 * GST_SECOND);
  EXPECT_EQ (state, GST_STATE_PLAYING);
  g_object_get (s.src.get (), "bound-port", &s.port, nullptr);
  EXPECT_GT (s.port, 0);
  return s;
}

class PipelinesServe : public ::testing::Test
{
protected:
  void SetUp () override
  {
    if (!have_openpi_client ())
      GTEST_SKIP () << "no .venv with openpi-client (scripts/setup.sh installs it)";
  }
};

/* ---- The camera path as the oracle ---- */

struct Recorded {
  std::vector<std::string> view_files; /* "" when the view was not sent */
  std::vector<int> widths, heights;
  std::vector<float> state;
  std::string prompt;
  std::vector<float> actions;
  int horizon = 0, dim = 0;
};

std::vector<Recorded>
read_recorded (const std::string &dir)
{
  std::vector<Recorded> out;
  std::string err;
  auto index = pi0::json::load_strict (dir + "/index.json", &err);
  EXPECT_TRUE (index) << err;
  if (!index)
    return out;
  for (const auto &e : *index) {
    Recorded r;
    for (const auto &v : e["views"]) {
      r.view_files.push_back (v.is_null () ? "" : dir + "/" + v["file"].get<std::string> ());
      r.widths.push_back (v.is_null () ? 0 : v["width"].get<int> ());
      r.heights.push_back (v.is_null () ? 0 : v["height"].get<int> ());
    }
    for (const auto &x : e["state"])
      r.state.push_back (x.get<float> ());
    r.prompt = e["prompt"].get<std::string> ();
    r.horizon = e["horizon"].get<int> ();
    r.dim = e["dim"].get<int> ();
    gchar *data = nullptr;
    gsize len = 0;
    const std::string af = dir + "/" + e["actions_file"].get<std::string> ();
    EXPECT_TRUE (g_file_get_contents (af.c_str (), &data, &len, nullptr)) << af;
    r.actions.resize (len / 4);
    if (data)
      memcpy (r.actions.data (), data, len / 4 * 4);
    g_free (data);
    out.push_back (r);
  }
  return out;
}

/* A packed RGB file as a GStreamer RGB frame (rows padded to 4 bytes, as the caps say). */
GstBuffer *
rgb_frame (const std::string &file, int w, int h)
{
  gchar *data = nullptr;
  gsize len = 0;
  EXPECT_TRUE (g_file_get_contents (file.c_str (), &data, &len, nullptr)) << file;
  EXPECT_EQ (len, (gsize)w * h * 3);
  GstVideoInfo info;
  gst_video_info_set_format (&info, GST_VIDEO_FORMAT_RGB, w, h);
  GstBuffer *b = gst_buffer_new_allocate (nullptr, GST_VIDEO_INFO_SIZE (&info), nullptr);
  GstMapInfo map;
  gst_buffer_map (b, &map, GST_MAP_WRITE);
  for (int y = 0; y < h && data; y++)
    memcpy (map.data + (size_t)y * GST_VIDEO_INFO_PLANE_STRIDE (&info, 0), data + (size_t)y * w * 3,
            (size_t)w * 3);
  gst_buffer_unmap (b, &map);
  g_free (data);
  GST_BUFFER_PTS (b) = 0;
  GST_BUFFER_DURATION (b) = 100 * GST_MSECOND;
  return b;
}

/* The chunk the camera path makes for one recorded request: its views as three cameras (a view
 * that was not sent is a camera with no frame), its state on the state pad, its prompt as the
 * instruction, and seed = the request's number (the server's seed is 0). */
std::vector<float>
camera_path (const Recorded &r, guint64 seed, int *horizon, int *dim)
{
  std::ostringstream line;
  line << "pi0viewmux name=mux ! cudaprep width=32 height=32 ! pi0infer model=builtin:pi0-tiny "
          "seed="
       << seed << " name=infer ! appsink name=out sync=false ";
  const char *pads[] = {"main", "side", "top"};
  for (int v = 0; v < 3; v++)
    if (!r.view_files[v].empty ())
      line << "appsrc name=v" << v
           << " format=time caps=video/x-raw,format=RGB,width=" << r.widths[v]
           << ",height=" << r.heights[v] << ",framerate=10/1 ! mux." << pads[v] << " ";
  line << "appsrc name=st format=time caps=application/x-pi0-state,dim=" << r.state.size ()
       << " ! mux.state";
  GError *err = nullptr;
  ElementPtr pipe (gst_parse_launch (line.str ().c_str (), &err));
  EXPECT_EQ (err, nullptr) << (err ? err->message : "");
  g_clear_error (&err);
  if (!pipe)
    return {};
  GstElement *infer = gst_bin_get_by_name (GST_BIN (pipe.get ()), "infer");
  g_object_set (infer, "instruction", r.prompt.c_str (), nullptr);
  gst_object_unref (infer);
  EXPECT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  for (int v = 0; v < 3; v++) {
    if (r.view_files[v].empty ())
      continue;
    GstElement *src =
        gst_bin_get_by_name (GST_BIN (pipe.get ()), ("v" + std::to_string (v)).c_str ());
    gst_app_src_push_buffer (GST_APP_SRC (src),
                             rgb_frame (r.view_files[v], r.widths[v], r.heights[v]));
    gst_app_src_end_of_stream (GST_APP_SRC (src));
    gst_object_unref (src);
  }
  GstElement *st = gst_bin_get_by_name (GST_BIN (pipe.get ()), "st");
  GstBuffer *sb = gst_buffer_new_memdup (r.state.data (), r.state.size () * sizeof (float));
  GST_BUFFER_PTS (sb) = 0;
  gst_app_src_push_buffer (GST_APP_SRC (st), sb);
  gst_app_src_end_of_stream (GST_APP_SRC (st));
  gst_object_unref (st);

  GstElement *out = gst_bin_get_by_name (GST_BIN (pipe.get ()), "out");
  GstSample *sample = gst_app_sink_try_pull_sample (GST_APP_SINK (out), 120 * GST_SECOND);
  gst_object_unref (out);
  std::vector<float> actions;
  EXPECT_NE (sample, nullptr) << "the camera path made no observation: " << bus_error (pipe.get ());
  if (sample) {
    GstPi0ActionMeta *am = gst_buffer_get_pi0_action_meta (gst_sample_get_buffer (sample));
    EXPECT_NE (am, nullptr);
    if (am) {
      *horizon = (int)am->horizon;
      *dim = (int)am->dim;
      actions.assign (am->actions, am->actions + (size_t)am->horizon * am->dim);
    }
    gst_sample_unref (sample);
  }
  return actions;
}

} // namespace

TEST_F (PipelinesServe, OneClientPerMappingGetsTheCameraPathsActions)
{
  for (const char *mapping : {"aloha", "droid", "libero"}) {
    SCOPED_TRACE (mapping);
    TmpDir dir;
    Served s = serve (mapping);
    ASSERT_TRUE (s.pipe);
    auto r = run_clients (
        "one", s.port,
        {"--mapping", mapping, "--requests", "3", "--out", dir.path, "--expect-metadata", "{}"});
    EXPECT_TRUE (r.ok) << r.out;
    EXPECT_TRUE (all_gone (s.src.get ()));
    EXPECT_EQ (stat_of (s.src.get (), "requests"), 6u);
    EXPECT_EQ (stat_of (s.src.get (), "replies"), 6u);
    EXPECT_EQ (stat_of (s.sink.get (), "replies"), 6u);
    EXPECT_EQ (bus_error (s.pipe.get ()), "");
    gst_element_set_state (s.pipe.get (), GST_STATE_NULL);

    auto recorded = read_recorded (dir.path);
    ASSERT_EQ (recorded.size (), 3u);
    for (size_t n = 0; n < recorded.size (); n++) {
      int h = 0, d = 0;
      auto oracle = camera_path (recorded[n], n, &h, &d);
      ASSERT_EQ (h, recorded[n].horizon);
      ASSERT_GE (d, recorded[n].dim);
      double worst = 0;
      for (int row = 0; row < h; row++)
        for (int c = 0; c < recorded[n].dim; c++)
          worst = std::max (
              worst, (double)std::fabs (oracle[(size_t)row * d + c] -
                                        recorded[n].actions[(size_t)row * recorded[n].dim + c]));
      EXPECT_LE (worst, 1e-6) << "request " << n << ": served and camera-path actions differ";
    }
  }
}

/* Eight clients of 3 requests each (openpi_clients.py "many": each compares what it gets with
 * what it gets alone), all answered, none left behind, no error. */
static void
eight_clients_each_get_what_they_get_alone (const Served &s)
{
  auto r = run_clients ("many", s.port, {"--clients", "8", "--requests", "3"});
  EXPECT_TRUE (r.ok) << r.out;
  EXPECT_TRUE (all_gone (s.src.get ()));
  EXPECT_EQ (stat_of (s.src.get (), "replies"), 48u);
  EXPECT_EQ (stat_of (s.src.get (), "errors"), 0u);
  EXPECT_EQ (bus_error (s.pipe.get ()), "");
}

TEST_F (PipelinesServe, EightConcurrentClientsEachGetWhatTheyGetAlone)
{
  Served s = serve ("aloha");
  ASSERT_TRUE (s.pipe);
  eight_clients_each_get_what_they_get_alone (s);
}

/* The same with batching on (pipelines/serve.txt's SERVE_BATCH_SIZE): requests of robots that
 * wait together run as one forward pass, and each client still gets what it gets alone (1e-5,
 * the client script's tolerance). */
TEST_F (PipelinesServe, EightConcurrentClientsBatchedEachGetWhatTheyGetAlone)
{
  Served s = serve ("aloha", {{"SERVE_BATCH_SIZE", "8"}, {"SERVE_BATCH_WAIT", "20000000"}});
  ASSERT_TRUE (s.pipe);
  ObjectPtr<GstElement> infer (find_factory (s.pipe.get (), "pi0infer"));
  ASSERT_NE (infer, nullptr);
  guint size = 0;
  g_object_get (infer.get (), "max-batch-size", &size, nullptr);
  EXPECT_EQ (size, 8u);
  eight_clients_each_get_what_they_get_alone (s);
}

TEST_F (PipelinesServe, BadClientsDoNotDisturbThePipelineOrOthersAndLeakNothing)
{
  ObjectPtr<GstTracer> tracer (leaks_tracer ());
  const int max_message = 256 << 10;
  Served s = serve ("aloha", {{"SERVE_MAX_MESSAGE", std::to_string (max_message)}});
  ASSERT_TRUE (s.pipe);
  /* Warm-up (first-use allocations of GLib, the model's caches), then count. */
  auto warm = run_clients ("one", s.port, {"--requests", "1"});
  ASSERT_TRUE (warm.ok) << warm.out;
  ASSERT_TRUE (all_gone (s.src.get ()));
  const int fds = open_fds ();
  if (tracer)
    g_signal_emit_by_name (tracer.get (), "activity-start-tracking");

  auto r = run_clients ("bad", s.port, {"--max-message", std::to_string (max_message)});
  EXPECT_TRUE (r.ok) << r.out;
  EXPECT_TRUE (all_gone (s.src.get ()));
  EXPECT_GE (stat_of (s.src.get (), "errors"), 12u);
  EXPECT_EQ (bus_error (s.pipe.get ()), "") << "a bad client reached the pipeline";
  EXPECT_EQ (open_fds (), fds) << "file descriptors outlived the clients";
  if (tracer) {
    auto alive = alive_since_start (tracer.get ());
    g_signal_emit_by_name (tracer.get (), "activity-stop-tracking");
    for (const auto &kv : alive)
      if (kv.first.find ("Buffer") != std::string::npos ||
          kv.first.find ("Memory") != std::string::npos ||
          kv.first.find ("Event") != std::string::npos)
        ADD_FAILURE () << kv.second << " " << kv.first << " still alive after every client left";
  }
}

TEST_F (PipelinesServe, HealthzFollowsThePipelineState)
{
  Served s = serve ("libero");
  ASSERT_TRUE (s.pipe);
  auto r = run_clients ("health", s.port, {});
  EXPECT_NE (r.out.find ("\"status\": 200"), std::string::npos) << r.out;
  ASSERT_NE (gst_element_set_state (s.pipe.get (), GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  gst_element_get_state (s.pipe.get (), nullptr, nullptr, 10 * GST_SECOND);
  r = run_clients ("health", s.port, {});
  EXPECT_NE (r.out.find ("\"status\": 503"), std::string::npos) << r.out;
  ASSERT_NE (gst_element_set_state (s.pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  gst_element_get_state (s.pipe.get (), nullptr, nullptr, 10 * GST_SECOND);
  r = run_clients ("health", s.port, {});
  EXPECT_NE (r.out.find ("\"status\": 200"), std::string::npos) << r.out;
}

TEST (Pi0ServeSrc, StartErrorsSayWhatIsWrong)
{
  struct Case {
    const char *props, *expect;
  } cases[] = {
      {"mapping=robotx", "neither a mapping preset"},
      {"mapping=/nonexistent/map.json", "/nonexistent/map.json"},
      {"host=example.org", "numeric IP address"},
      {"api-key-file=/nonexistent/key", "/nonexistent/key"},
      {"metadata=[1,2]", "metadata"},
  };
  for (const auto &c : cases) {
    std::string line = std::string ("pi0servesrc port=0 ") + c.props + " ! fakesink";
    GError *err = nullptr;
    ElementPtr pipe (gst_parse_launch (line.c_str (), &err));
    ASSERT_EQ (err, nullptr) << line;
    EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE)
        << line;
    std::string e = bus_error (pipe.get ());
    EXPECT_NE (e.find (c.expect), std::string::npos) << line << " -> " << e;
  }
  /* Two sources with one server name: the second says so. */
  GError *err = nullptr;
  ElementPtr pipe (
      gst_parse_launch ("pi0servesrc port=0 ! fakesink pi0servesrc port=0 ! fakesink", &err));
  ASSERT_EQ (err, nullptr);
  EXPECT_EQ (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  EXPECT_NE (bus_error (pipe.get ()).find ("already running"), std::string::npos);
}

/* tools/pi0-serve: bad usage is exit status 2 with the reason, a server that cannot start is 1
 * with the element's message, and --print-pipeline is the launch line it runs. */
TEST (Pi0Serve, UsageAndStartErrorsAreClearExits)
{
  const char *tool = g_getenv ("PI0_SERVE_TOOL");
  if (!tool)
    GTEST_SKIP () << "pi0-serve not built";
  struct Case {
    std::vector<std::string> args;
    int status;
    const char *expect;
  } cases[] = {
      {{"--mapping", "aloha"}, 2, "--model is required"},
      {{"--model", "builtin:pi0-tiny", "--port", "70000"}, 2, "--port must be 0..65535"},
      {{"--model", "builtin:pi0-tiny", "--max-message-size", "10"}, 2, "1 KiB..1 GiB"},
      {{"--print-mapping", "robotx"}, 2, "no preset mapping 'robotx'"},
      {{"--no-such-option"}, 2, "no-such-option"},
      /* Every option is checked before anything starts: exit 2 naming it, never a default. */
      {{"--model", "builtin:pi0-tiny", "--mapping", "robotx"}, 2, "neither a mapping preset"},
      {{"--model", "builtin:pi0-tiny", "--num-steps", "3000"}, 2, "--num-steps '3000'"},
      {{"--model", "builtin:pi0-tiny", "--num-steps", "-1"}, 2, "--num-steps '-1'"},
      {{"--model", "builtin:pi0-tiny", "--image-size", "100000"}, 2, "--image-size must be"},
      {{"--model", "builtin:pi0-tiny", "--max-clients", "0"}, 2, "--max-clients '0'"},
      {{"--model", "builtin:pi0-tiny", "--norm-mode", "bogus"}, 2, "--norm-mode 'bogus'"},
      {{"--model", "builtin:pi0-tiny", "--device", "tpu"}, 2, "--device 'tpu'"},
      {{"--model", "builtin:pi0-tiny", "--precision", "fp8"}, 2, "--precision 'fp8'"},
      {{"--model", "builtin:pi0-tiny", "--request-timeout", "1e30"}, 2, "--request-timeout"},
      {{"--model", "builtin:pi0-tiny", "--cuda-device-id", "-3"}, 2, "--cuda-device-id '-3'"},
      {{"--model", "builtin:pi0-tiny", "--transforms", "bridge"}, 2, "--transforms 'bridge'"},
      {{"--model", "builtin:pi0-tiny", "--metadata", "[1]"}, 2, "--metadata must be a JSON object"},
      {{"--model", "builtin:pi0-tiny", "--stats-interval", "-1"}, 2, "--stats-interval"},
      {{"--model", "builtin:pi0-tiny", "--port", "0", "--host", "example.org"},
       1,
       "numeric IP address"},
      {{"--model", "builtin:pi0-tiny", "--mapping", "droid", "--print-pipeline"},
       0,
       "gst-launch-1.0 pi0servesrc mapping=droid host=127.0.0.1 port=8000 max-clients=16 "
       "max-message-size=16777216 request-timeout=60000000000 seed=0 ! cudaprep width=32 "
       "height=32 ! queue max-size-buffers=64 max-size-bytes=0 max-size-time=0 ! pi0infer "
       "model=builtin:pi0-tiny transforms=droid ! pi0servesink"},
      {{"--model", "builtin:pi0-tiny", "--batch-size", "4", "--max-wait-ms", "2.5",
        "--print-pipeline"},
       0,
       "transforms=aloha max-batch-size=4 max-batch-wait=2500000 ! pi0servesink"},
      {{"--model", "builtin:pi0-tiny", "--batch-size", "0"}, 2, "--batch-size must be 1..64"},
      {{"--model", "builtin:pi0-tiny", "--max-wait-ms", "-1"}, 2, "--max-wait-ms must be 0..60000"},
  };
  for (const auto &c : cases) {
    std::vector<const gchar *> argv{tool};
    std::string shown = "pi0-serve";
    for (const auto &a : c.args) {
      argv.push_back (a.c_str ());
      shown += " " + a;
    }
    argv.push_back (nullptr);
    gchar *out = nullptr, *err = nullptr;
    gint status = 0;
    ASSERT_TRUE (g_spawn_sync (nullptr, (gchar **)argv.data (), nullptr, G_SPAWN_DEFAULT, nullptr,
                               nullptr, &out, &err, &status, nullptr))
        << shown;
    const std::string both = std::string (out ? out : "") + (err ? err : "");
    g_free (out);
    g_free (err);
    EXPECT_TRUE (WIFEXITED (status)) << shown << ": " << both;
    EXPECT_EQ (WEXITSTATUS (status), c.status) << shown << ": " << both;
    EXPECT_NE (both.find (c.expect), std::string::npos) << shown << ": " << both;
  }
}

TEST (Pi0ServeSink, SinkAnswersErrorsForObservationsWithoutActions)
{
  /* No pi0infer: every observation reaches the sink without actions, and each client must hear
   * so instead of waiting forever. */
  if (!have_openpi_client ())
    GTEST_SKIP () << "no .venv with openpi-client";
  GError *err = nullptr;
  ElementPtr pipe (gst_parse_launch ("pi0servesrc port=0 server=noactions ! cudaprep width=32 "
                                     "height=32 ! pi0servesink name=sink",
                                     &err));
  ASSERT_EQ (err, nullptr);
  ASSERT_NE (gst_element_set_state (pipe.get (), GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  gst_element_get_state (pipe.get (), nullptr, nullptr, 10 * GST_SECOND);
  ObjectPtr<GstElement> src (find_factory (pipe.get (), "pi0servesrc"));
  ObjectPtr<GstElement> sink (find_factory (pipe.get (), "pi0servesink"));
  ASSERT_TRUE (src && sink);
  int port = 0;
  g_object_get (src.get (), "bound-port", &port, nullptr);
  auto r = run_clients ("one", port, {"--requests", "1"});
  EXPECT_FALSE (r.ok);
  EXPECT_NE (r.out.find ("the policy gave no actions"), std::string::npos) << r.out;
  EXPECT_TRUE (all_gone (src.get ()));
  EXPECT_EQ (stat_of (sink.get (), "no-actions"), 1u);
  EXPECT_EQ (stat_of (sink.get (), "replies"), 0u);
}

TEST (RequestMeta, RequestMetaSurvivesCopies)
{
  GstBuffer *b = gst_buffer_new ();
  GstPi0RequestMeta *m = gst_buffer_add_pi0_request_meta (b, "srv", 7, 3, "pick it up", 42);
  ASSERT_NE (m, nullptr);
  m->flags = GST_PI0_REQUEST_FLAG_CLIENT_SEED;
  m->received_time = 5 * GST_SECOND;
  GstBuffer *c = gst_buffer_copy (b);
  GstPi0RequestMeta *mc = gst_buffer_get_pi0_request_meta (c);
  ASSERT_NE (mc, nullptr);
  EXPECT_STREQ (mc->server, "srv");
  EXPECT_EQ (mc->client_id, 7u);
  EXPECT_EQ (mc->request_id, 3u);
  EXPECT_STREQ (mc->prompt, "pick it up");
  EXPECT_NE (mc->prompt, m->prompt); /* a deep copy */
  EXPECT_EQ (mc->seed, 42u);
  EXPECT_EQ (mc->flags, GST_PI0_REQUEST_FLAG_CLIENT_SEED);
  EXPECT_EQ (mc->received_time, 5 * GST_SECOND);
  EXPECT_EQ (mc->version, (guint)GST_PI0_META_VERSION);
  gst_buffer_unref (b);
  gst_buffer_unref (c);
  /* A prompt that is not UTF-8 is refused (it would reach a tokenizer). */
  ExpectLog crit ("g_utf8_validate");
  GstBuffer *d = gst_buffer_new ();
  EXPECT_EQ (gst_buffer_add_pi0_request_meta (d, "srv", 1, 0, "caf\xc3", 0), nullptr);
  EXPECT_EQ (crit.count (), 1);
  gst_buffer_unref (d);
}

/* The line --print-pipeline prints is the server pi0-serve runs: parsed as gst-launch-1.0
 * parses it, every option given is a property of its element, with the value given. */
TEST (Pi0Serve, PrintPipelineHoldsEveryOption)
{
  const char *tool = g_getenv ("PI0_SERVE_TOOL");
  if (!tool)
    GTEST_SKIP () << "pi0-serve not built";
  const gchar *argv[] = {tool, "--model", "builtin:pi0-tiny", "--mapping", "droid",
                         "--seed", "7", "--num-steps", "3", "--prompt", "fold it, please",
                         "--batch-size", "4", "--max-wait-ms", "2.5", "--norm-mode",
                         "quantile", "--request-timeout", "5", "--max-clients", "3",
                         "--image-size", "48", "--device", "cpu", "--precision", "fp32",
                         "--metadata", "{\"robot\": \"arm 1\"}", "--print-pipeline",
                         nullptr};
  gchar *out = nullptr;
  gint status = 1;
  ASSERT_TRUE (g_spawn_sync (nullptr, (gchar **)argv, nullptr, G_SPAWN_DEFAULT, nullptr, nullptr,
                             &out, nullptr, &status, nullptr));
  std::string line = out ? out : "";
  g_free (out);
  ASSERT_TRUE (g_spawn_check_wait_status (status, nullptr)) << line;
  ASSERT_EQ (line.rfind ("gst-launch-1.0 ", 0), 0u) << line;
  /* As a shell splits it, then as gst-launch-1.0 joins its arguments. */
  gchar **words = nullptr;
  ASSERT_TRUE (g_shell_parse_argv (line.c_str (), nullptr, &words, nullptr)) << line;
  GError *err = nullptr;
  ElementPtr pipe (gst_parse_launchv ((const gchar **)words + 1, &err));
  g_strfreev (words);
  ASSERT_EQ (err, nullptr) << err->message << ": " << line;
  ObjectPtr<GstElement> src (find_factory (pipe.get (), "pi0servesrc"));
  ObjectPtr<GstElement> prep (find_factory (pipe.get (), "cudaprep"));
  ObjectPtr<GstElement> infer (find_factory (pipe.get (), "pi0infer"));
  ASSERT_TRUE (src && prep && infer) << line;
  gchar *mapping = nullptr, *prompt = nullptr, *metadata = nullptr, *transforms = nullptr;
  guint64 seed = 0, timeout = 0, wait = 0;
  gint clients = 0, steps = 0, width = 0, norm_mode = 0, device = 0, precision = 0;
  guint batch = 0;
  g_object_get (src.get (), "mapping", &mapping, "prompt", &prompt, "metadata", &metadata,
                "seed", &seed, "request-timeout", &timeout, "max-clients", &clients, nullptr);
  g_object_get (prep.get (), "width", &width, nullptr);
  g_object_get (infer.get (), "num-steps", &steps, "max-batch-size", &batch, "max-batch-wait",
                &wait, "transforms", &transforms, "norm-mode", &norm_mode, "device", &device,
                "precision", &precision, nullptr);
  EXPECT_STREQ (mapping, "droid");
  EXPECT_STREQ (prompt, "fold it, please");
  EXPECT_STREQ (metadata, "{\"robot\": \"arm 1\"}");
  EXPECT_STREQ (transforms, "droid");
  EXPECT_EQ (seed, 7u);
  EXPECT_EQ (timeout, 5 * GST_SECOND);
  EXPECT_EQ (clients, 3);
  EXPECT_EQ (width, 48);
  EXPECT_EQ (steps, 3);
  EXPECT_EQ (batch, 4u);
  EXPECT_EQ (wait, 2500000u);
  auto nick = [&] (const char *prop, gint v) {
    GParamSpec *p = g_object_class_find_property (G_OBJECT_GET_CLASS (infer.get ()), prop);
    GEnumValue *e = g_enum_get_value (G_PARAM_SPEC_ENUM (p)->enum_class, v);
    return std::string (e ? e->value_nick : "?");
  };
  EXPECT_EQ (nick ("norm-mode", norm_mode), "quantile");
  EXPECT_EQ (nick ("device", device), "cpu");
  EXPECT_EQ (nick ("precision", precision), "fp32");
  g_free (mapping);
  g_free (prompt);
  g_free (metadata);
  g_free (transforms);
}

namespace
{

/* pi0-serve with builtin:pi0-tiny on a free port, stopped (SIGTERM) when this goes. */
struct ServeProcess {
  GPid pid = 0;
  int port = 0;
  std::string said;

  explicit ServeProcess (const std::vector<std::string> &extra)
  {
    std::vector<std::string> args = {g_getenv ("PI0_SERVE_TOOL"), "--model", "builtin:pi0-tiny",
                                     "--port", "0"};
    args.insert (args.end (), extra.begin (), extra.end ());
    std::vector<gchar *> argv;
    for (auto &a : args)
      argv.push_back ((gchar *)a.c_str ());
    argv.push_back (nullptr);
    gint out_fd = -1;
    if (!g_spawn_async_with_pipes (nullptr, argv.data (), nullptr, G_SPAWN_DO_NOT_REAP_CHILD,
                                   nullptr, nullptr, &pid, nullptr, &out_fd, nullptr, nullptr))
      return;
    out = fdopen (out_fd, "r");
    char line[512];
    /* Bounded: the tool prints this line once serving, or exits (end of its output). */
    while (out && fgets (line, sizeof line, out)) {
      said += line;
      const char *at = strstr (line, "on ws://127.0.0.1:");
      if (at) {
        port = atoi (at + strlen ("on ws://127.0.0.1:"));
        break;
      }
    }
  }
  ~ServeProcess ()
  {
    if (pid > 0)
      kill (pid, SIGTERM);
    /* What it prints at the end (its counters), read so that it never writes to a closed pipe. */
    char line[512];
    while (out && fgets (line, sizeof line, out))
      said += line;
    if (out)
      fclose (out);
    if (pid > 0) {
      int status = 0;
      waitpid (pid, &status, 0);
      g_spawn_close_pid (pid);
    }
  }
  FILE *out = nullptr;
};

/* fleet_clients.py seeds: the sha256 of each chunk, {"first": [...], "second": [...]}. */
pi0::json::Value
chunk_hashes (int port, const std::vector<std::string> &args)
{
  auto r = run_fleet ("seeds", port, args);
  EXPECT_TRUE (r.ok) << r.out;
  const size_t at = r.out.find ("CHUNKS ");
  std::string err;
  auto v = at == std::string::npos
               ? std::nullopt
               : pi0::json::parse_strict (r.out.substr (at + 7, r.out.find ('\n', at) - at - 7),
                                          "chunks", &err);
  EXPECT_TRUE (v) << r.out;
  return v ? *v : pi0::json::Value ();
}

} // namespace

/* pi0-serve --seed and a request's own seed (docs/serve.md, "Seeds"): request N of a connection
 * draws its noise from seed + N, so the same observation gets the same chunk on every
 * connection and after a restart, --seed 5's first request is --seed 0's sixth, and a mapping
 * that reads the request's "seed" makes that seed the chunk's whatever the request's number. */
TEST (Pi0Serve, SeedsGiveTheDocumentedChunks)
{
  if (!g_getenv ("PI0_SERVE_TOOL"))
    GTEST_SKIP () << "pi0-serve not built";
  if (!have_openpi_client ())
    GTEST_SKIP () << "no .venv with openpi-client (scripts/setup.sh installs it)";
  pi0::json::Value base, restarted, five, own;
  {
    ServeProcess srv ({"--seed", "0"});
    ASSERT_GT (srv.port, 0) << srv.said;
    base = chunk_hashes (srv.port, {"--requests", "6"});
  }
  {
    ServeProcess srv ({"--seed", "0"});
    ASSERT_GT (srv.port, 0) << srv.said;
    restarted = chunk_hashes (srv.port, {"--requests", "1"});
  }
  {
    ServeProcess srv ({"--seed", "5"});
    ASSERT_GT (srv.port, 0) << srv.said;
    five = chunk_hashes (srv.port, {"--requests", "1"});
  }
  TmpDir dir;
  {
    std::string err;
    auto m = pi0::json::parse_strict (pi0::serve::mapping_preset_json ("aloha"), "aloha", &err);
    ASSERT_TRUE (m) << err;
    (*m)["seed"] = "seed";
    std::ofstream (dir.path + "/seeded.json") << m->dump ();
    ServeProcess srv ({"--seed", "100", "--mapping", dir.path + "/seeded.json"});
    ASSERT_GT (srv.port, 0) << srv.said;
    own = chunk_hashes (srv.port, {"--requests", "2", "--send-seed", "3"});
  }
  ASSERT_EQ (base["first"].size (), 6u);
  std::set<std::string> distinct;
  for (const auto &h : base["first"])
    distinct.insert (h.get<std::string> ());
  EXPECT_EQ (distinct.size (), 6u) << "request N draws from seed + N: six different chunks";
  EXPECT_EQ (base["second"][0], base["first"][0]) << "another connection, the same chunk";
  EXPECT_EQ (restarted["first"][0], base["first"][0]) << "after a restart, the same chunk";
  EXPECT_EQ (five["first"][0], base["first"][5]) << "--seed 5, request 0 = --seed 0, request 5";
  EXPECT_EQ (own["first"][0], base["first"][3]) << "a request's own seed 3";
  EXPECT_EQ (own["first"][1], base["first"][3]) << "its own seed, whatever its number";
  EXPECT_EQ (own["second"][0], base["first"][3]);
}

/* SIGTERM drains pi0-serve (docs/serve.md, "Rolling restarts"): with no session open it says so
 * and exits 0 at once, not after --drain-timeout. */
TEST (Pi0Serve, SigtermDrainsAndExitsCleanly)
{
  if (!g_getenv ("PI0_SERVE_TOOL"))
    GTEST_SKIP () << "pi0-serve not built";
  int status = -1;
  std::string said;
  {
    ServeProcess srv ({"--drain-timeout", "600"});
    ASSERT_GT (srv.port, 0) << srv.said;
    kill (srv.pid, SIGTERM);
    char line[512];
    while (srv.out && fgets (line, sizeof line, srv.out))
      srv.said += line;
    waitpid (srv.pid, &status, 0);
    g_spawn_close_pid (srv.pid);
    srv.pid = 0;
    said = srv.said;
  }
  EXPECT_TRUE (WIFEXITED (status) && WEXITSTATUS (status) == 0) << said;
  EXPECT_NE (said.find ("connections="), std::string::npos) << said; /* its last counters */
}
