/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* tools/pi0-serve: usage and start errors as exit statuses, --print-pipeline, and the seeds of
 * docs/serve.md against a running server. */

#include "tests/pi0testservechain.h"

using namespace pi0test;
using namespace pi0test::servechain;


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
  TempDir dir;
  {
    std::string err;
    auto m = pi0::json::parse_strict (pi0::serve::mapping_preset_json ("aloha"), "aloha", &err);
    ASSERT_TRUE (m) << err;
    (*m)["seed"] = "seed";
    std::ofstream (dir.path () + "/seeded.json") << m->dump ();
    ServeProcess srv ({"--seed", "100", "--mapping", dir.path () + "/seeded.json"});
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
