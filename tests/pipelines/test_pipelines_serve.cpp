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

#include "tests/pi0testservechain.h"

using namespace pi0test;
using namespace pi0test::servechain;


TEST_F (PipelinesServe, OneClientPerMappingGetsTheCameraPathsActions)
{
  for (const char *mapping : {"aloha", "droid", "libero"}) {
    SCOPED_TRACE (mapping);
    TempDir dir;
    Served s = serve (mapping);
    ASSERT_TRUE (s.pipe);
    auto r = run_clients (
        "one", s.port,
        {"--mapping", mapping, "--requests", "3", "--out", dir.path (), "--expect-metadata", "{}"});
    EXPECT_TRUE (r.ok) << r.out;
    EXPECT_TRUE (all_gone (s.src.get ()));
    EXPECT_EQ (stat_of (s.src.get (), "requests"), 6u);
    EXPECT_EQ (stat_of (s.src.get (), "replies"), 6u);
    EXPECT_EQ (stat_of (s.sink.get (), "replies"), 6u);
    EXPECT_EQ (bus_error (s.pipe.get ()), "");
    gst_element_set_state (s.pipe.get (), GST_STATE_NULL);

    auto recorded = read_recorded (dir.path ());
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
