/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0actionsink with a robot that reports what it executes (FEEDBACK, docs/protocol.md), in
 * chunk mode over TCP and UDP: the robot simulator's reports reach the sink and become the
 * `pi0-executing` events upstream in place of the sink's estimate; `robot-feedback=false`
 * ignores them; and a hostile robot that floods the sink with garbage, forged and replayed
 * reports changes nothing the sink sends, costs no connection, and is counted. Loopback only;
 * every wait is bounded and nothing is asserted about how long anything takes. */

#include "protocol/pi0link.h"
#include "tests/pi0testsink.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>

using namespace pi0test;

namespace
{

constexpr GstClockTime kPeriod = 20 * GST_MSECOND; /* control-rate 50 */

/* Chunk mode without the watchdog or the age check in the way: the test clock only moves when
 * the test moves it, while the robot runs on its own clock. */
std::string
chunk_props (const std::string &target)
{
  return "mode=chunk max-action-age=600000000000 hold-timeout=300000000000 "
         "stop-timeout=600000000000 target=" +
         target;
}

std::vector<float>
ramp (guint horizon, float start)
{
  std::vector<float> v;
  for (guint i = 0; i < horizon; i++)
    for (int j = 0; j < 3; j++)
      v.push_back (start + 0.01f * (float)i + 0.001f * (float)j);
  return v;
}

using Report = std::tuple<guint64, guint, GstClockTime>; /* chunk, row, time */

/* The FEEDBACK the simulator logged having sent. */
std::set<Report>
sim_reports (const SimProc &sim)
{
  std::set<Report> out;
  for (auto &l : sim.lines ()) {
    JsonLine j (l);
    if (j.str ("event") == "feedback" && j.value ().contains ("sent") &&
        j.value ()["sent"].get<bool> ())
      out.insert ({(guint64)j.num ("chunk_id"), (guint)j.num ("step_index"),
                   (GstClockTime)j.num ("time_ns")});
  }
  return out;
}

size_t
sim_reports_of (const SimProc &sim, guint64 chunk)
{
  size_t n = 0;
  for (const Report &r : sim_reports (sim))
    n += std::get<0> (r) == chunk;
  return n;
}

/* Cranks until the TCP connection is up and the session announced (HELLO, HOLD). */
void
connect (SinkFixture &f)
{
  for (int i = 0; i < 2000 && stat (f.sink, "frames") < 2; i++) {
    f.crank ();
    g_usleep (2000);
  }
  ASSERT_GE (stat (f.sink, "frames"), 2u);
}

/* Moves the test clock past @t, then lets the control thread wake once: one pump reads all the
 * robot has sent so far, at a time no report is in the future of. */
void
read_reports_at (SinkFixture &f, GstClockTime t)
{
  if (f.now () < t)
    gst_test_clock_set_time (f.clock (), t);
  f.crank ();
}

/* @key: both ends authenticate (the robot's reports too). */
void
reports_become_the_events (const std::string &proto, bool robot_feedback,
                           const std::string &key = "")
{
  TempDir dir;
  SimProc sim;
  std::vector<std::string> args = {"--proto=" + proto, "--port=0", "--dim=3"};
  if (!key.empty ())
    args.push_back ("--key=" + key);
  ASSERT_TRUE (sim.start (args, dir.file ("sim.jsonl")));
  SinkFixture f;
  f.make (chunk_props (proto + "://127.0.0.1:" + std::to_string (sim.port ())) +
          (robot_feedback ? "" : " robot-feedback=false") +
          (key.empty () ? "" : " hmac-key=" + key));
  if (proto == "tcp")
    connect (f);
  pull_executing (f.h.get ());

  /* Chunk 1: no report yet in this session, so the sink's estimate goes up first. */
  const GstClockTime s1 = f.now ();
  ASSERT_EQ (GST_FLOW_OK, f.push (50, 3, ramp (50, 0), 1, s1));
  const std::vector<Executing> first = pull_executing (f.h.get ());
  ASSERT_EQ (first.size (), 1u);
  EXPECT_EQ (first[0], (Executing{1, 0, s1, kPeriod}));
  /* The robot reports rows 0, 1, 2, 3... as it starts them, at s1 + row periods. */
  ASSERT_TRUE (sim.wait_for ([&] { return sim_reports_of (sim, 1) >= 4; }));
  read_reports_at (f, s1 + 10 * kPeriod);
  const std::vector<Executing> got = pull_executing (f.h.get ());
  const std::set<Report> sent = sim_reports (sim);
  if (!robot_feedback) {
    EXPECT_TRUE (got.empty ());
    EXPECT_EQ (stat (f.sink, "feedback"), 0u);
    EXPECT_EQ (stat (f.sink, "feedback-dropped"), 0u) << "not read at all";
  } else {
    ASSERT_FALSE (got.empty ());
    bool beyond_first = false;
    for (const Executing &e : got) {
      EXPECT_EQ (e.period, kPeriod);
      EXPECT_TRUE (sent.count ({e.chunk, e.row, e.time}))
          << "chunk " << e.chunk << " row " << e.row << " at " << e.time
          << " is not one of the robot's reports";
      EXPECT_EQ (e.time, s1 + e.row * kPeriod) << "row " << e.row;
      beyond_first = beyond_first || e.row > 0;
    }
    EXPECT_TRUE (beyond_first) << "the sink's estimate never says more than the first row";
    EXPECT_GE (stat (f.sink, "feedback"), 4u);
  }

  /* Chunk 2: once the robot reports, the sink's estimate gives way to its reports. */
  const GstClockTime s2 = f.now ();
  ASSERT_EQ (GST_FLOW_OK, f.push (50, 3, ramp (50, 0.1f), 2, s2));
  const std::vector<Executing> at_send = pull_executing (f.h.get ());
  if (robot_feedback) {
    /* (Reports of chunk 1 the robot sent since may come up with it, but no estimate.) */
    for (const Executing &e : at_send)
      EXPECT_NE (e.chunk, 2u) << "the sink's estimate of chunk 2";
    ASSERT_TRUE (sim.wait_for ([&] { return sim_reports_of (sim, 2) >= 1; }));
    read_reports_at (f, s2 + kPeriod);
    const std::vector<Executing> after = pull_executing (f.h.get ());
    EXPECT_NE (std::find (after.begin (), after.end (), Executing{2, 0, s2, kPeriod}), after.end ())
        << "the robot's report of chunk 2's first row";
  } else {
    ASSERT_EQ (at_send.size (), 1u);
    EXPECT_EQ (at_send[0], (Executing{2, 0, s2, kPeriod}));
  }
  EXPECT_EQ (sim.count ("reject"), 0u);
}

} // namespace

TEST (Pi0ActionSinkFeedback, RobotFramesAreReadOnlyInChunkModeOverTheNetwork)
{
  /* What robot-feedback means (protocol/pi0link): the robot's frames are read where a robot
   * schedules chunk rows itself and can answer (chunk mode, binary frames over udp or tcp),
   * checked with the sink's key. */
  struct Case {
    const char *target;
    pi0::proto::SendMode mode;
    pi0::proto::Format format;
    bool robot_feedback;
    bool read;
  };
  using M = pi0::proto::SendMode;
  using F = pi0::proto::Format;
  const Case cases[] = {
      {"udp://127.0.0.1:9", M::kChunk, F::kAuto, true, true},
      {"tcp://127.0.0.1:9", M::kChunk, F::kAuto, true, true},
      {"tcp://127.0.0.1:9", M::kChunk, F::kBinary, true, true},
      {"tcp://127.0.0.1:9", M::kChunk, F::kAuto, false, false},
      {"tcp://127.0.0.1:9", M::kStream, F::kAuto, true, false},
      {"tcp://127.0.0.1:9", M::kChunk, F::kJson, true, false},
      {"stdout", M::kChunk, F::kBinary, true, false},
      {"file:///tmp/x", M::kChunk, F::kAuto, true, false},
  };
  for (const Case &c : cases) {
    pi0::proto::LinkOptions o;
    o.target = c.target;
    o.mode = c.mode;
    o.format = c.format;
    o.robot_feedback = c.robot_feedback;
    o.allow_unlimited = true;
    o.hmac_key = "k";
    o.hmac_key_set = true;
    pi0::proto::LinkConfig cfg;
    std::string err, hint;
    ASSERT_TRUE (pi0::proto::configure_link (o, &cfg, &err, &hint)) << c.target << ": " << err;
    EXPECT_EQ (cfg.transport.read_feedback, c.read) << c.target << " " << (int)c.mode;
    const bool binary = c.format == F::kBinary ||
                        (c.format == F::kAuto && c.target[0] != 's' && c.target[0] != 'f');
    EXPECT_EQ (cfg.sender.key, binary ? "k" : "") << "reports are checked with the frames' key";
  }
}

TEST (Pi0ActionSinkFeedback, TcpRobotReportsBecomeTheExecutingEvents)
{
  reports_become_the_events ("tcp", true);
}

TEST (Pi0ActionSinkFeedback, UdpAuthenticatedRobotReportsBecomeTheExecutingEvents)
{
  reports_become_the_events ("udp", true, "shared-key");
}

TEST (Pi0ActionSinkFeedback, RobotFeedbackOffKeepsTheEstimate)
{
  reports_become_the_events ("tcp", false);
}

/* ---- a hostile robot ----------------------------------------------------------------------- */

namespace
{

/* The robot's end of the link, played by the test: it learns the sink's session and address
 * from what the sink sends, and writes back whatever it is told to. */
class FakeRobot
{
public:
  explicit FakeRobot (bool tcp) : tcp_ (tcp)
  {
    listen_ =
        g_socket_new (G_SOCKET_FAMILY_IPV4, tcp ? G_SOCKET_TYPE_STREAM : G_SOCKET_TYPE_DATAGRAM,
                      tcp ? G_SOCKET_PROTOCOL_TCP : G_SOCKET_PROTOCOL_UDP, nullptr);
    GInetAddress *lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
    GSocketAddress *sa = g_inet_socket_address_new (lo, 0);
    g_socket_bind (listen_, sa, TRUE, nullptr);
    g_object_unref (sa);
    g_object_unref (lo);
    if (tcp)
      g_socket_listen (listen_, nullptr);
    g_socket_set_blocking (listen_, FALSE);
    GSocketAddress *local = g_socket_get_local_address (listen_, nullptr);
    port_ = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (local));
    g_object_unref (local);
  }
  ~FakeRobot ()
  {
    g_clear_object (&conn_);
    g_clear_object (&peer_);
    g_object_unref (listen_);
  }
  std::string target () const
  {
    return std::string (tcp_ ? "tcp" : "udp") + "://127.0.0.1:" + std::to_string (port_);
  }
  /* Takes the sink's connection (TCP) and reads until its HELLO: the session to forge for. */
  bool learn (SinkFixture &f)
  {
    for (int i = 0; i < 2000 && session_ == 0; i++) {
      if (tcp_ && !conn_) {
        conn_ = g_socket_accept (listen_, nullptr, nullptr);
        if (conn_)
          g_socket_set_blocking (conn_, FALSE);
      }
      read ();
      if (session_ == 0) {
        if (tcp_)
          f.crank (); /* the sink connects from its pump */
        g_usleep (2000);
      }
    }
    return session_ != 0;
  }
  /* Drains what the sink sent (keeps TCP's window open). */
  void read ()
  {
    uint8_t buf[65536];
    for (;;) {
      GSocketAddress *from = nullptr;
      gssize n =
          tcp_ ? (conn_ ? g_socket_receive (conn_, (gchar *)buf, sizeof buf, nullptr, nullptr) : -1)
               : g_socket_receive_from (listen_, &from, (gchar *)buf, sizeof buf, nullptr, nullptr);
      if (n <= 0) {
        g_clear_object (&from);
        return;
      }
      if (from && !peer_)
        peer_ = from;
      else
        g_clear_object (&from);
      auto take = [&] (const uint8_t *d, size_t len) {
        pi0::proto::Frame fr;
        if (pi0::proto::decode (d, len, pi0::proto::Limits (), "", &fr) == pi0::proto::Error::kOk &&
            fr.header.kind == pi0::proto::Kind::kHello)
          session_ = fr.header.session_id;
      };
      if (tcp_)
        stream_.push (buf, (size_t)n, take);
      else
        take (buf, (size_t)n);
    }
  }
  /* Sends @bytes to the sink (UDP: one datagram). Never blocks: what does not fit is lost. */
  void send (const std::vector<uint8_t> &bytes)
  {
    if (tcp_ && conn_)
      g_socket_send (conn_, (const gchar *)bytes.data (), bytes.size (), nullptr, nullptr);
    else if (!tcp_ && peer_)
      g_socket_send_to (listen_, peer_, (const gchar *)bytes.data (), bytes.size (), nullptr,
                        nullptr);
  }
  /* UDP: the same bytes from another port (anyone can send a datagram). */
  void send_from_elsewhere (const std::vector<uint8_t> &bytes)
  {
    if (tcp_ || !peer_)
      return;
    GSocket *other =
        g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_DATAGRAM, G_SOCKET_PROTOCOL_UDP, nullptr);
    g_socket_send_to (other, peer_, (const gchar *)bytes.data (), bytes.size (), nullptr, nullptr);
    g_object_unref (other);
  }
  guint64 session () const { return session_; }

private:
  bool tcp_;
  GSocket *listen_ = nullptr, *conn_ = nullptr;
  GSocketAddress *peer_ = nullptr;
  int port_ = 0;
  guint64 session_ = 0;
  pi0::proto::FrameStream stream_{pi0::proto::kMaxFrameSize};
};

std::vector<uint8_t>
report (guint64 session, guint64 seq, guint64 chunk, guint row, GstClockTime t)
{
  pi0::proto::Header h;
  h.kind = pi0::proto::Kind::kFeedback;
  h.session_id = session;
  h.seq = seq;
  h.chunk_id = chunk;
  h.step_index = row;
  h.send_time_ns = t;
  h.observation_time_ns = pi0::proto::kTimeNone;
  std::vector<uint8_t> out;
  pi0::proto::encode (h, nullptr, "", out);
  return out;
}

/* Every way a report can be wrong, about the session @s and chunk 1 sent at @s1 (rows [0, 50)),
 * read at test clock @now. */
std::vector<std::vector<uint8_t>>
forged_reports (guint64 s, GstClockTime s1, GstClockTime now, std::mt19937 &rng)
{
  std::vector<std::vector<uint8_t>> out;
  for (guint64 seq = 1; seq <= 20; seq++) {
    out.push_back (report (s + 1, seq, 1, 2, s1));                /* wrong session */
    out.push_back (report (s, 0, 1, 2, s1));                      /* seq 0 */
    out.push_back (report (s, seq, 99, 2, s1));                   /* unknown chunk */
    out.push_back (report (s, seq, 1, 50, s1));                   /* row beyond it */
    out.push_back (report (s, seq, 1, 2, s1 - 1));                /* before it was sent */
    out.push_back (report (s, seq, 1, 2, now + 10 * GST_SECOND)); /* in the future */
    out.push_back (report (s, seq, 1, 2, pi0::proto::kTimeNone)); /* no time */
    auto bad_crc = report (s, seq, 1, 2, s1);
    bad_crc[30] ^= 0x40;
    out.push_back (bad_crc);
    auto cut = report (s, seq, 1, 2, s1);
    cut.resize (cut.size () - 1 - rng () % 10);
    out.push_back (cut);
    std::vector<uint8_t> junk (1 + rng () % 200);
    for (auto &b : junk)
      b = (uint8_t)rng ();
    out.push_back (junk);
  }
  return out;
}

struct Run {
  std::vector<Rec> sent;
  guint64 feedback = 0, dropped = 0, sessions = 0, reconnects = 0, frames_lost = 0;
};

/* Three chunks in chunk mode to a fake robot, which floods the sink in between when @hostile.
 * The same pushes and clock moves either way. */
Run
run_with (bool tcp, bool hostile)
{
  Run run;
  FakeRobot robot (tcp);
  SinkFixture f;
  f.make (chunk_props (robot.target ()));
  if (tcp)
    connect (f);
  EXPECT_TRUE (robot.learn (f));
  std::mt19937 rng (99);
  const GstClockTime s1 = f.now ();
  EXPECT_EQ (GST_FLOW_OK, f.push (50, 3, ramp (50, 0), 1, s1));
  for (int round = 0; round < 6; round++) {
    robot.read ();
    if (hostile) {
      /* TCP: all of it back to back in the stream, garbage between frames. UDP: a datagram
       * each (a burst small enough for the socket buffer), some from another port. */
      std::vector<uint8_t> stream;
      for (const auto &b : forged_reports (robot.session (), s1, f.now (), rng)) {
        if (tcp)
          stream.insert (stream.end (), b.begin (), b.end ());
        else if (rng () % 4 == 0)
          robot.send_from_elsewhere (b);
        else
          robot.send (b);
      }
      /* A report the sink may take, replayed: taken once at most. */
      const auto replayed = report (robot.session (), 1000, 1, 0, s1);
      for (int k = 0; k < 10; k++) {
        if (tcp)
          stream.insert (stream.end (), replayed.begin (), replayed.end ());
        else
          robot.send (replayed);
      }
      if (tcp)
        robot.send (stream);
      /* UDP: a report that would be taken from the robot's address, from another port. */
      robot.send_from_elsewhere (report (robot.session (), 2000 + (guint64)round, 1, 0, s1));
    }
    for (int k = 0; k < 5; k++)
      f.crank ();
    if (round == 2) {
      EXPECT_EQ (GST_FLOW_OK, f.push (50, 3, ramp (50, 0.5f), 2, f.now ()));
    }
  }
  EXPECT_EQ (GST_FLOW_OK, f.push (50, 3, ramp (50, 0.2f), 3, f.now ()));
  run.sent = f.rec.take ();
  run.feedback = stat (f.sink, "feedback");
  run.dropped = stat (f.sink, "feedback-dropped");
  run.sessions = stat (f.sink, "sessions");
  run.reconnects = stat (f.sink, "reconnects");
  run.frames_lost = stat (f.sink, "dropped");
  EXPECT_EQ (gst_element_set_state (f.sink, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  return run;
}

void
hostile_robot_changes_nothing (bool tcp)
{
  const Run quiet = run_with (tcp, false);
  const Run hostile = run_with (tcp, true);
  EXPECT_EQ (quiet.feedback, 0u);
  EXPECT_EQ (quiet.dropped, 0u);
  EXPECT_GT (hostile.dropped, 100u) << "each forged report and each run of garbage is counted";
  EXPECT_LE (hostile.feedback, 1u)
      << "a replayed report is taken once at most, and nothing from another address";
  EXPECT_EQ (hostile.sessions, quiet.sessions) << "garbage never costs the connection";
  EXPECT_EQ (hostile.reconnects, 0u);
  /* Every frame reached the robot's socket: the link stayed up the whole time. */
  EXPECT_EQ (quiet.frames_lost, 0u);
  EXPECT_EQ (hostile.frames_lost, 0u);
  /* What the sink sent to the robot, message by message, is the same. */
  ASSERT_EQ (hostile.sent.size (), quiet.sent.size ());
  /* Three chunks (and over TCP the greeting HOLD: over UDP it leaves before the recorder is
   * attached). */
  ASSERT_GE (quiet.sent.size (), 3u);
  for (size_t i = 0; i < quiet.sent.size (); i++) {
    EXPECT_EQ (hostile.sent[i].kind, quiet.sent[i].kind) << i;
    EXPECT_EQ (hostile.sent[i].chunk_id, quiet.sent[i].chunk_id) << i;
    EXPECT_EQ (hostile.sent[i].step_index, quiet.sent[i].step_index) << i;
    EXPECT_EQ (hostile.sent[i].values, quiet.sent[i].values) << i;
  }
}

} // namespace

TEST (Pi0ActionSinkFeedback, HostileTcpRobotChangesNothingSentAndIsCounted)
{
  hostile_robot_changes_nothing (true);
}

TEST (Pi0ActionSinkFeedback, HostileUdpRobotChangesNothingSentAndIsCounted)
{
  hostile_robot_changes_nothing (false);
}

/* ---- the order of the pi0-executing events ------------------------------------------------- */

namespace
{

/* Holds the first pi0-executing event at the sink's pad, on whichever thread sends it, until
 * released; the others pass. */
struct HoldFirstEvent {
  std::mutex lock;
  std::condition_variable changed;
  bool holding = false, released = false, held_once = false;

  static GstPadProbeReturn probe (GstPad *, GstPadProbeInfo *info, gpointer data)
  {
    auto *self = static_cast<HoldFirstEvent *> (data);
    GstEvent *e = gst_pad_probe_info_get_event (info);
    if (!gst_event_has_name (e, GST_PI0_EXECUTING_EVENT_NAME))
      return GST_PAD_PROBE_OK;
    std::unique_lock<std::mutex> lk (self->lock);
    if (self->held_once)
      return GST_PAD_PROBE_OK;
    self->held_once = self->holding = true;
    self->changed.notify_all ();
    self->changed.wait (lk, [self] { return self->released; });
    self->holding = false;
    return GST_PAD_PROBE_OK;
  }
  bool wait_holding ()
  {
    std::unique_lock<std::mutex> lk (lock);
    return changed.wait_for (lk, std::chrono::seconds (30), [this] { return holding; });
  }
  void release ()
  {
    std::lock_guard<std::mutex> lk (lock);
    released = true;
    changed.notify_all ();
  }
};

} // namespace

/* The streaming thread (render: the sink's estimate of a chunk's first row) and the control
 * thread (its ticks: the robot's reports) both make pi0-executing events. They go upstream in the
 * order they were made, whichever thread gets to push first: here the streaming thread is held
 * while pushing the estimate, and the control thread reads the robot's report of a later row
 * meanwhile. Each thread pushing its own, the report went up first and the estimate after it:
 * upstream took the robot for being back at row 0, and pi0-sim's lock-step wait for its newest
 * report never ended (issue 44: "no pi0-executing event for the robot's feedback at tick 5"). */
TEST (Pi0ActionSinkFeedback, ExecutingEventsGoUpInTheOrderTheyWereMade)
{
  FakeRobot robot (false);
  SinkFixture f;
  f.make (chunk_props (robot.target ()));
  ASSERT_TRUE (robot.learn (f));
  pull_executing (f.h.get ());
  HoldFirstEvent hold;
  GstPad *pad = gst_element_get_static_pad (f.sink, "sink");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_EVENT_UPSTREAM, HoldFirstEvent::probe, &hold, nullptr);
  gst_object_unref (pad);

  const GstClockTime s1 = f.now ();
  GstFlowReturn pushed = GST_FLOW_ERROR;
  std::thread streaming ([&] { pushed = f.push (50, 3, ramp (50, 0), 1, s1); });
  const bool held = hold.wait_holding ();
  if (held) {
    /* The robot reports row 3, and the control thread reads it on its next tick. */
    robot.read ();
    robot.send (report (robot.session (), 1, 1, 3, s1 + 3 * kPeriod));
    read_reports_at (f, s1 + 5 * kPeriod);
    for (int i = 0; i < 2000 && stat (f.sink, "feedback") < 1; i++) {
      g_usleep (1000);
      f.crank ();
    }
  }
  hold.release ();
  streaming.join ();
  ASSERT_TRUE (held) << "the sink sent no pi0-executing event for its chunk";
  EXPECT_EQ (pushed, GST_FLOW_OK);
  ASSERT_EQ (stat (f.sink, "feedback"), 1u);
  const std::vector<Executing> got = pull_executing (f.h.get ());
  const std::vector<Executing> want = {{1, 0, s1, kPeriod}, {1, 3, s1 + 3 * kPeriod, kPeriod}};
  ASSERT_EQ (got.size (), want.size ());
  for (size_t i = 0; i < got.size (); i++)
    EXPECT_EQ (got[i], want[i]) << "event " << i << ": chunk " << got[i].chunk << " row "
                                << got[i].row;
}
