/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The policy server (serve/pi0server) against the real openpi-client, with a stand-in policy
 * in this process: a thread that pops each request and answers with actions computed from what
 * the request holds (state, images, prompt, seed), so an answer sent to the wrong client, or
 * computed from the wrong request, differs from the one that client gets alone. No GStreamer
 * and no LibTorch: test_serve runs the same clients against the real pipeline.
 *
 * Checked from the server's side: its counters, that every connection is gone at the end, and
 * that no file descriptor outlives the server. */

#include "pi0server.h"
#include "pi0testserve.h"

#include <glib.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <thread>
#include <unistd.h>

using namespace pi0::serve;
using namespace pi0test;

namespace
{

/* Actions [50, 32]: each value mixes the state, the images' bytes, the prompt and the seed. */
Reply
stand_in_policy (const Request &r)
{
  double img = 0;
  for (const auto &v : r.obs.views) {
    if (!v.present)
      continue;
    for (size_t i = 0; i < v.size (); i += 7)
      img += v.data[i] * (1.0 + (i % 13));
    img += v.width * 0.5 + v.height * 0.25 + (v.chw ? 1 : 0);
  }
  double prompt = 0;
  for (unsigned char c : r.prompt)
    prompt = prompt * 1.0001 + c;
  Reply rep;
  rep.horizon = 50;
  rep.dim = 32;
  rep.policy_infer_ms = 0.01;
  rep.actions.resize (50 * 32);
  for (int h = 0; h < 50; h++)
    for (int d = 0; d < 32; d++) {
      const double s = r.obs.state[(size_t)d % r.obs.state.size ()];
      rep.actions[h * 32 + d] = (float)(std::sin (s * (h + 1) + img * 1e-6 * (d + 1)) +
                                        std::cos (prompt * 1e-3 + (double)(r.seed % 9973) * 0.01));
    }
  return rep;
}

class StandIn
{
public:
  explicit StandIn (Server &s) : s_ (s), t_ ([this] { run (); }) {}
  ~StandIn ()
  {
    s_.set_flushing (true);
    t_.join ();
    s_.set_flushing (false);
  }

private:
  void run ()
  {
    Request r;
    while (s_.pop (&r) == Server::Pop::kRequest)
      s_.reply (r.client, r.number, stand_in_policy (r));
  }
  Server &s_;
  std::thread t_;
};

ServerSettings
settings (const char *mapping, size_t max_message = 16u << 20)
{
  ServerSettings s;
  std::string err;
  auto m = load_mapping (mapping, &err);
  EXPECT_TRUE (m) << err;
  if (m)
    s.mapping = *m;
  s.port = 0;
  s.max_message = max_message;
  return s;
}

/* Waits (bounded) for the server to see every client leave. */
bool
all_gone (Server &s)
{
  for (int i = 0; i < 600; i++) {
    ServerStats st = s.stats ();
    if (st.open == 0 && st.peers == 0)
      return true;
    g_usleep (50000);
  }
  return false;
}

class PolicyServer : public ::testing::Test
{
protected:
  void SetUp () override
  {
    if (!have_openpi_client ())
      GTEST_SKIP () << "no .venv with openpi-client (scripts/setup.sh installs it)";
    warm_up ();
    fds_before_ = open_fds ();
  }
  /* GLib opens a few descriptors once per process (the default and worker contexts' wakeup
   * eventfds): a first server run opens them, so that the counts compare servers only. */
  static void warm_up ()
  {
    static bool done = false;
    if (done)
      return;
    done = true;
    auto srv = Server::get ("warm-up");
    std::string err;
    ASSERT_TRUE (srv->start (settings ("aloha"), &err)) << err;
    run_clients ("health", srv->port (), {});
    all_gone (*srv);
    srv->stop ();
  }
  void TearDown () override
  {
    if (IsSkipped ())
      return;
    EXPECT_EQ (open_fds (), fds_before_) << "file descriptors outlived the server";
  }
  int fds_before_ = 0;
};

} // namespace

TEST_F (PolicyServer, OneClientGetsMetadataActionsAndTimings)
{
  for (const char *mapping : {"aloha", "droid", "libero"}) {
    auto srv = Server::get (std::string ("one-") + mapping);
    ServerSettings s = settings (mapping);
    s.metadata_json = R"({"robot": "test", "reset_pose": [0.5, -1]})";
    std::string err;
    ASSERT_TRUE (srv->start (s, &err)) << err;
    ASSERT_GT (srv->port (), 0);
    {
      StandIn policy (*srv);
      auto r = run_clients ("one", srv->port (),
                            {"--mapping", mapping, "--requests", "3", "--expect-metadata",
                             R"({"robot": "test", "reset_pose": [0.5, -1]})"});
      EXPECT_TRUE (r.ok) << mapping << ": " << r.out;
      EXPECT_TRUE (all_gone (*srv));
      ServerStats st = srv->stats ();
      EXPECT_EQ (st.connections, 3u) << mapping; /* metadata check + two runs */
      EXPECT_EQ (st.requests, 6u);
      EXPECT_EQ (st.replies, 6u);
      EXPECT_EQ (st.errors, 0u);
      EXPECT_EQ (st.queued, 0u);
    }
    srv->stop ();
  }
}

TEST_F (PolicyServer, EightConcurrentClientsEachGetWhatTheyGetAlone)
{
  auto srv = Server::get ("many");
  std::string err;
  ASSERT_TRUE (srv->start (settings ("aloha"), &err)) << err;
  {
    StandIn policy (*srv);
    auto r = run_clients ("many", srv->port (), {"--clients", "8", "--requests", "4"});
    EXPECT_TRUE (r.ok) << r.out;
    EXPECT_TRUE (all_gone (*srv));
    EXPECT_EQ (srv->stats ().replies, 64u);
  }
  srv->stop ();
}

TEST_F (PolicyServer, BadClientsGetAnErrorOrAreClosedAndOthersAreUnaffected)
{
  /* A small limit, so that the oversized cases are quick; still above every good request. */
  const size_t max_message = 256 << 10;
  auto srv = Server::get ("bad");
  std::string err;
  ASSERT_TRUE (srv->start (settings ("aloha", max_message), &err)) << err;
  {
    StandIn policy (*srv);
    auto r = run_clients ("bad", srv->port (), {"--max-message", std::to_string (max_message)});
    EXPECT_TRUE (r.ok) << r.out;
    std::cout << r.out;
    EXPECT_TRUE (all_gone (*srv));
    ServerStats st = srv->stats ();
    /* malformed, truncated, unknown key, 4 states, short state, 2 bad images, object dtype,
     * text: errors sent. */
    EXPECT_GE (st.errors, 12u);
    EXPECT_EQ (st.open, 0u);
    EXPECT_EQ (st.queued, 0u);
  }
  srv->stop ();
}

TEST_F (PolicyServer, ManyRequestsOnOneConnectionStayWithinTheByteBudget)
{
  /* 40 requests of ~17 KB on one connection add up to far more than one message's budget: the
   * budget is per message, not per connection. */
  auto srv = Server::get ("budget");
  std::string err;
  ASSERT_TRUE (srv->start (settings ("aloha", 64 << 10), &err)) << err;
  {
    StandIn policy (*srv);
    auto r = run_clients ("one", srv->port (), {"--requests", "40"});
    EXPECT_TRUE (r.ok) << r.out;
    EXPECT_TRUE (all_gone (*srv));
    EXPECT_EQ (srv->stats ().errors, 0u);
  }
  srv->stop ();
}

TEST_F (PolicyServer, ApiKeyIsRequiredAndWebPagesAreRefused)
{
  auto srv = Server::get ("auth");
  ServerSettings s = settings ("aloha");
  s.api_key = "s3cret-key";
  std::string err;
  ASSERT_TRUE (srv->start (s, &err)) << err;
  {
    StandIn policy (*srv);
    auto r = run_clients ("auth", srv->port (), {"--api-key", "s3cret-key"});
    EXPECT_TRUE (r.ok) << r.out;
    EXPECT_TRUE (all_gone (*srv));
    ServerStats st = srv->stats ();
    EXPECT_EQ (st.refused, 4u); /* three keys, one Origin */
    EXPECT_EQ (st.replies, 1u);
  }
  srv->stop ();
}

TEST_F (PolicyServer, HealthzSaysReadyOnlyWhenTold)
{
  auto srv = Server::get ("health");
  std::string err;
  ASSERT_TRUE (srv->start (settings ("aloha"), &err)) << err;
  auto r = run_clients ("health", srv->port (), {});
  ASSERT_TRUE (r.ok) << r.out;
  EXPECT_NE (r.out.find ("\"status\": 503"), std::string::npos) << r.out;
  srv->set_ready (true);
  r = run_clients ("health", srv->port (), {});
  ASSERT_TRUE (r.ok) << r.out;
  EXPECT_NE (r.out.find ("\"status\": 200"), std::string::npos) << r.out;
  EXPECT_NE (r.out.find ("OK\\n"), std::string::npos) << r.out;
  EXPECT_TRUE (all_gone (*srv));
  srv->stop ();
}

TEST_F (PolicyServer, MaxClientsAreServedAndTheNextIsRefused)
{
  auto srv = Server::get ("full");
  ServerSettings s = settings ("aloha");
  s.max_clients = 3;
  std::string err;
  ASSERT_TRUE (srv->start (s, &err)) << err;
  {
    StandIn policy (*srv);
    auto r = run_clients ("full", srv->port (), {"--clients", "3"});
    EXPECT_TRUE (r.ok) << r.out;
    EXPECT_TRUE (all_gone (*srv));
    EXPECT_GE (srv->stats ().refused, 1u);
  }
  srv->stop ();
}

TEST (PolicyServerSettings, BadSettingsAreClearErrors)
{
  auto srv = Server::get ("settings");
  ServerSettings s;
  s.port = 0;
  std::string err;
  s.host = "localhost";
  EXPECT_FALSE (srv->start (s, &err));
  EXPECT_NE (err.find ("numeric IP address"), std::string::npos) << err;
  s.host = "127.0.0.1";
  s.metadata_json = "[1]";
  EXPECT_FALSE (srv->start (s, &err));
  EXPECT_NE (err.find ("metadata"), std::string::npos) << err;
  s.metadata_json = "{}";
  ASSERT_TRUE (srv->start (s, &err)) << err;
  /* The same name twice, and a port already taken. */
  EXPECT_FALSE (srv->start (s, &err));
  EXPECT_NE (err.find ("already running"), std::string::npos) << err;
  auto other = Server::get ("settings-2");
  s.port = srv->port ();
  EXPECT_FALSE (other->start (s, &err));
  EXPECT_NE (err.find ("cannot listen"), std::string::npos) << err;
  srv->stop ();
  srv->stop (); /* twice is fine */
  /* The name finds the same server while someone holds it. */
  EXPECT_EQ (Server::get ("settings").get (), srv.get ());
}
