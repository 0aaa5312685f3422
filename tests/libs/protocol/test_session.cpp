/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The robot session (protocol/pi0session.*) without a socket, a clock or a subprocess: the
 * sender's and the receiver's rules one by one, then property tests that drive each side, and
 * the two chained, through millions of random events (chunks with NaN/Inf/out-of-limit values,
 * late and future chunks, pauses, flushes, EOS, reconnects, clock jumps, lost, duplicated and
 * reordered frames) and check after every step that nothing non-finite, out of limits or over
 * max_step is ever sent or executed, that sequence and session rules hold, and that HOLD and STOP
 * come at the first tick at or after their deadlines. Each property test prints what it
 * covered; none depends on timing. */

#include "tests/pi0testexact.h"
#include "protocol/pi0frame.h"
#include "protocol/pi0safety.h"
#include "protocol/pi0session.h"

#include <gtest/gtest.h>

#include <deque>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>

using namespace pi0::proto;
using pi0test::exact_within;

namespace
{

constexpr uint64_t kMs = 1000000;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN ();
constexpr float kInf = std::numeric_limits<float>::infinity ();

const char *kRobot = R"({"joints":["shoulder","elbow","gripper"],
  "lower":[-1.0,-2.0,0.0],"upper":[1.0,2.0,0.5],"max_step":[0.1,0.25,0.05]})";
const char *kRobotInitial = R"({"joints":["shoulder","elbow","gripper"],
  "lower":[-1.0,-2.0,0.0],"upper":[1.0,2.0,0.5],"max_step":[0.1,0.25,0.05],
  "initial":[0.0,0.5,0.25]})";

RobotConfig
robot (const char *json = kRobot)
{
  RobotConfig cfg;
  std::string err;
  EXPECT_TRUE (parse_robot_config (json, &cfg, &err)) << err;
  return cfg;
}

/* Deterministic session ids for the tests. */
std::function<uint64_t ()>
counter_ids (uint64_t first = 0x1000)
{
  auto next = std::make_shared<uint64_t> (first);
  return [next] {
    return (*next)++;
  };
}

SenderSettings
stream_settings ()
{
  SenderSettings s;
  s.mode = SendMode::kStream;
  s.period_ns = 20 * kMs;
  s.hold_timeout_ns = 50 * kMs;
  s.stop_timeout_ns = 200 * kMs;
  s.robot = robot ();
  return s;
}

ChunkIn
chunk_of (const std::vector<float> &v, uint32_t horizon, uint64_t id, uint64_t obs)
{
  ChunkIn c;
  c.values = v.data ();
  c.horizon = horizon;
  c.dim = (uint32_t)(v.size () / horizon);
  c.chunk_id = id;
  c.observation_time_ns = obs;
  c.model_id = "test";
  return c;
}

std::vector<float>
ramp (uint32_t horizon, float start, float step)
{
  std::vector<float> v;
  for (uint32_t i = 0; i < horizon; i++)
    for (int j = 0; j < 3; j++)
      v.push_back (start + step * (float)i + 0.01f * (float)j);
  return v;
}

std::vector<uint8_t>
encoded (const Header &h, const std::vector<float> &v, const std::string &key = "")
{
  std::vector<uint8_t> out;
  encode (h, v.data (), key, out);
  return out;
}

Header
stream_row (uint64_t session, uint64_t seq)
{
  Header h;
  h.kind = Kind::kAction;
  h.flags = kFlagStream | kFlagLast;
  h.session_id = session;
  h.seq = seq;
  h.chunk_id = seq;
  h.step_period_ns = 20 * kMs;
  h.steps = 1;
  h.chunk_steps = 1;
  h.dim = 3;
  return h;
}

/* The last frame of chunk 9 of session 42 in chunk mode (3 joints, 20 ms rows), sent at 100 ms
 * on the sender's clock: rows [first, first + steps) of @chunk_steps, captured at @obs. */
Header
chunk_rows (uint64_t seq, uint64_t obs, uint32_t first, uint32_t steps, uint32_t chunk_steps)
{
  Header h;
  h.kind = Kind::kAction;
  h.flags = kFlagLast;
  h.session_id = 42;
  h.seq = seq;
  h.chunk_id = 9;
  h.observation_time_ns = obs;
  h.send_time_ns = 100 * kMs;
  h.step_period_ns = 20 * kMs;
  h.step_index = first;
  h.chunk_steps = chunk_steps;
  h.steps = (uint16_t)steps;
  h.dim = 3;
  return h;
}

} // namespace

/* ---- Sender, rule by rule ----------------------------------------------------------------- */

TEST (SenderRules, AnnouncesHelloThenHoldOnceTheLinkIsUp)
{
  Sender s (stream_settings (), counter_ids (77));
  SenderOutput out;
  s.link (kTimeNone, false, false, out);
  EXPECT_TRUE (out.frames.empty ()) << "nothing before the link is up";
  s.link (0, true, false, out);
  ASSERT_EQ (out.frames.size (), 2u);
  EXPECT_EQ (out.frames[0].header.kind, Kind::kHello);
  EXPECT_EQ (out.frames[0].header.dim, 3u);
  EXPECT_EQ (out.frames[1].header.kind, Kind::kHold);
  EXPECT_EQ (out.frames[1].header.steps, 0u) << "nothing commanded yet: hold where it is";
  for (size_t i = 0; i < 2; i++) {
    EXPECT_EQ (out.frames[i].header.session_id, 77u);
    EXPECT_EQ (out.frames[i].header.seq, i + 1);
  }
  EXPECT_EQ (s.counters ().holds, 0u) << "the greeting HOLD is not a watchdog event";
  out.clear ();
  s.link (0, true, false, out);
  EXPECT_TRUE (out.frames.empty ()) << "once per session";
  /* A new connection: a new session, announced again. */
  s.link (0, true, true, out);
  ASSERT_EQ (out.frames.size (), 2u);
  EXPECT_EQ (out.frames[0].header.session_id, 78u);
  EXPECT_EQ (out.frames[0].header.seq, 1u);
  EXPECT_EQ (s.counters ().sessions, 2u);
}

TEST (SenderRules, SplitsChunksIntoDatagramsWithConsecutiveSeqAndOneLastFlag)
{
  SenderSettings st = stream_settings ();
  st.mode = SendMode::kChunk;
  st.robot = robot (R"({"joints":["a","b","c"],"lower":[-100,-100,-100],
                       "upper":[100,100,100],"max_step":[1000,1000,1000]})");
  st.max_frame_size = frame_size (4, 3, true); /* four rows per frame, with HMAC */
  st.hmac = true;
  ASSERT_TRUE (validate (st, nullptr));
  Sender s (st, counter_ids ());
  SenderOutput out;
  s.link (0, true, false, out);
  s.event (0, SenderEvent::kPlaying, out);
  out.clear ();
  const std::vector<float> v = ramp (10, 0, 0.5f);
  std::string err;
  ASSERT_EQ (ChunkResult::kSent, s.chunk (0, chunk_of (v, 10, 5, 0), out, &err));
  ASSERT_EQ (out.frames.size (), 3u);
  uint32_t step = 0;
  for (size_t i = 0; i < 3; i++) {
    const Header &h = out.frames[i].header;
    EXPECT_EQ (h.seq, 3 + i);
    EXPECT_EQ (h.step_index, step);
    EXPECT_EQ (h.chunk_steps, 10u);
    EXPECT_EQ ((h.flags & kFlagLast) != 0, i == 2);
    step += h.steps;
  }
  EXPECT_EQ (step, 10u);
  ASSERT_EQ (out.sent.size (), 1u) << "one message for the application";
  EXPECT_EQ (out.sent[0].steps, 10u);
  /* A budget too small for one action is refused up front. */
  st.max_frame_size = frame_size (0, 0, true) + 4;
  std::string e;
  EXPECT_FALSE (validate (st, &e));
  EXPECT_NE (e.find ("cannot hold one action"), std::string::npos) << e;
}

TEST (SenderRules, StreamRowsFollowTheCaptureTimeAndHoldComesAtItsDeadline)
{
  Sender s (stream_settings (), counter_ids ());
  SenderOutput out;
  s.link (0, true, false, out);
  s.event (0, SenderEvent::kPlaying, out);
  const std::vector<float> v = ramp (5, 0, 0.05f);
  std::string err;
  /* Captured 50 ms before it arrives: rows 0-1 are past, row 2 is due now. */
  ASSERT_EQ (ChunkResult::kQueued, s.chunk (100 * kMs, chunk_of (v, 5, 1, 50 * kMs), out, &err));
  out.clear ();
  std::vector<uint32_t> steps;
  uint64_t hold_at = 0, stop_at = 0;
  uint64_t now = 100 * kMs;
  for (int i = 0; i < 40 && !stop_at; i++) {
    s.tick (now, out);
    for (auto &f : out.frames) {
      if (f.header.kind == Kind::kAction)
        steps.push_back (f.header.step_index);
      if (f.header.kind == Kind::kHold)
        hold_at = now;
      if (f.header.kind == Kind::kStop)
        stop_at = now;
    }
    out.clear ();
    now = s.next_deadline ();
  }
  EXPECT_EQ (steps, (std::vector<uint32_t>{2, 3, 4}));
  /* Row 4 was due at 50 + 4·20 = 130 ms: HOLD at 130 + 50, STOP at 130 + 200, exactly (the
   * ticks are taken at next_deadline()). */
  EXPECT_EQ (hold_at, 180 * kMs);
  EXPECT_EQ (stop_at, 330 * kMs);
}

/* A chunk whose observation time lies in the future (a non-live replay driving a robot, or a
 * clock mix-up upstream) used to set the watchdog from that future time: the robot got no HOLD
 * until long after the last row ran. The watchdog now counts from when the row really runs. */
TEST (SenderRules, AFutureObservationTimeCannotPushTheWatchdogAway)
{
  for (SendMode mode : {SendMode::kStream, SendMode::kChunk}) {
    SenderSettings st = stream_settings ();
    st.mode = mode;
    Sender s (st, counter_ids ());
    SenderOutput out;
    s.link (0, true, false, out);
    s.event (0, SenderEvent::kPlaying, out);
    const std::vector<float> v = ramp (3, 0, 0.05f);
    std::string err;
    /* Observation 10 s ahead of the clock. */
    s.chunk (1000 * kMs, chunk_of (v, 3, 1, 11000 * kMs), out, &err);
    out.clear ();
    uint64_t now = 1000 * kMs, hold_at = 0;
    for (int i = 0; i < 100 && !hold_at; i++) {
      s.tick (now, out);
      for (auto &f : out.frames)
        if (f.header.kind == Kind::kHold)
          hold_at = now;
      out.clear ();
      now = s.next_deadline ();
    }
    /* Stream: row 0 runs at 1000 ms and nothing follows until 11 s: HOLD at 1050 ms. Chunk:
     * the robot runs rows 0-2 at 1000, 1020, 1040 ms: HOLD at 1090 ms. */
    EXPECT_EQ (hold_at, mode == SendMode::kStream ? 1050 * kMs : 1090 * kMs)
        << (mode == SendMode::kStream ? "stream" : "chunk");
  }
}

TEST (SenderRules, FeedbackFromTheRobotMovesTheReferenceOfHoldAndOfTheNextChunk)
{
  SenderSettings st = stream_settings ();
  st.mode = SendMode::kChunk;
  Sender s (st, counter_ids ());
  SenderOutput out;
  s.link (0, true, false, out);
  s.event (0, SenderEvent::kPlaying, out);
  const std::vector<float> v = ramp (10, 0, 0.04f); /* within max_step: sent as it is */
  std::string err;
  ASSERT_EQ (ChunkResult::kSent, s.chunk (0, chunk_of (v, 10, 1, 0), out, &err));
  out.clear ();
  /* By the clock, at 100 ms the robot runs row 5. It reports that row 2 started at 60 ms
   * (it began late), so at 100 ms it runs row 4. */
  s.feedback (100 * kMs, {1, 2, 60 * kMs});
  s.event (100 * kMs, SenderEvent::kPaused, out);
  ASSERT_EQ (out.frames.size (), 1u);
  EXPECT_EQ (out.frames[0].values, std::vector<float> (v.begin () + 12, v.begin () + 15));
  /* A report about another chunk, or a row that was not sent, changes nothing. */
  Sender s2 (st, counter_ids ());
  s2.link (0, true, false, out);
  s2.event (0, SenderEvent::kPlaying, out);
  ASSERT_EQ (ChunkResult::kSent, s2.chunk (0, chunk_of (v, 10, 1, 0), out, &err));
  s2.feedback (100 * kMs, {7, 2, 60 * kMs});
  s2.feedback (100 * kMs, {1, 99, 60 * kMs});
  out.clear ();
  s2.event (100 * kMs, SenderEvent::kPaused, out);
  ASSERT_EQ (out.frames.size (), 1u);
  EXPECT_EQ (out.frames[0].values, std::vector<float> (v.begin () + 15, v.begin () + 18));
}

/* Issue 25: the first row of a new chunk (and a HOLD) is bounded against the row the robot runs
 * when it receives it. The robot runs row `first` of a chunk on receipt and one row a period
 * after ("Timing of rows"), so the row it runs when the next frame arrives is counted from the
 * chunk's send time: the one-way delay is in both and cancels. Counting from the rows' due times
 * (observation + i periods) put the reference up to a row ahead of the robot. */
/* A chunk-mode sender, link up and playing, for the tests of its reference row. */
struct PlayingSender {
  Sender s;
  SenderOutput out;
  explicit PlayingSender (const SenderSettings &st) : s (st, counter_ids ())
  {
    s.link (0, true, false, out);
    s.event (0, SenderEvent::kPlaying, out);
  }
  /* The HOLD a pause at @now sends: the row the sender bounds against at @now. */
  std::vector<float> hold_at (uint64_t now)
  {
    out.clear ();
    s.event (now, SenderEvent::kPaused, out);
    EXPECT_EQ (out.frames.size (), 1u);
    return out.frames.empty () ? std::vector<float> () : out.frames[0].values;
  }
};

TEST (SenderRules, TheReferenceIsTheRowTheRobotRunsWhenTheFrameArrives)
{
  SenderSettings st = stream_settings ();
  st.mode = SendMode::kChunk;
  st.hold_timeout_ns = 10000 * kMs;
  st.stop_timeout_ns = 20000 * kMs;
  const std::vector<float> v = ramp (10, 0, 0.04f); /* within max_step: sent as it is */
  auto row = [&] (uint32_t i) {
    return std::vector<float> (v.begin () + 3 * i, v.begin () + 3 * i + 3);
  };
  std::string err;
  {
    PlayingSender p (st);
    Sender &s = p.s;
    SenderOutput &out = p.out;
    /* Captured at 0, sent at 19 ms: row 0 (due at 0) starts on receipt, 19 ms + d. */
    ASSERT_EQ (ChunkResult::kSent, s.chunk (19 * kMs, chunk_of (v, 10, 1, 0), out, &err));
    EXPECT_EQ (out.frames.back ().header.step_index, 0u);
    /* A frame sent at 40 ms arrives at 40 ms + d, when the robot runs row (40 - 19) / 20 = 1
     * (the rows' due times would say row 2). */
    EXPECT_EQ (p.hold_at (40 * kMs), row (1));
  }
  {
    /* The robot starts rows later than that schedule (its controller's own ticks): its report
     * about an older chunk gives the lag, which the next chunks are counted with. */
    PlayingSender p (st);
    Sender &s = p.s;
    SenderOutput &out = p.out;
    ASSERT_EQ (ChunkResult::kSent, s.chunk (0, chunk_of (v, 10, 1, 0), out, &err));
    out.clear ();
    ASSERT_EQ (ChunkResult::kSent, s.chunk (60 * kMs, chunk_of (v, 10, 2, 60 * kMs), out, &err));
    const std::vector<float> sent = out.frames.back ().values; /* clamped from chunk 1's row 3 */
    /* Chunk 1's row 0 started at 30 ms: 30 ms behind its schedule. Not an anchor (chunk 2 is
     * the one running), but the lag counts: at 100 ms chunk 2 runs row (100 - 60 - 30) / 20 = 0,
     * not row 2. */
    s.feedback (70 * kMs, {1, 0, 30 * kMs});
    EXPECT_EQ (p.hold_at (100 * kMs), std::vector<float> (sent.begin (), sent.begin () + 3));
  }
  {
    /* A lag beyond max-action-age is not planned on: it is capped there. */
    st.max_action_age_ns = 40 * kMs;
    PlayingSender p (st);
    Sender &s = p.s;
    SenderOutput &out = p.out;
    ASSERT_EQ (ChunkResult::kSent, s.chunk (0, chunk_of (v, 10, 1, 0), out, &err));
    out.clear ();
    ASSERT_EQ (ChunkResult::kSent, s.chunk (20 * kMs, chunk_of (v, 10, 2, 20 * kMs), out, &err));
    const std::vector<float> sent = out.frames.back ().values;
    s.feedback (30 * kMs, {1, 0, 5000 * kMs});
    EXPECT_EQ (p.hold_at (140 * kMs), std::vector<float> (sent.begin () + 12, sent.begin () + 15))
        << "row (140 - 20 - 40) / 20 = 4";
  }
}

/* Issue 27: after an episode starts the robot may be anywhere (it was reset): the sender holds
 * without a position and bounds the new episode's first row against the state measured at its
 * observation, not against the last episode's commands or `initial`. */
/* Whether @got is @want, value by value within 1e-6. */
static testing::AssertionResult
close_row (const std::vector<float> &got, const std::vector<float> &want)
{
  bool ok = got.size () == want.size ();
  for (size_t i = 0; ok && i < got.size (); i++)
    ok = std::fabs (got[i] - want[i]) <= 1e-6f;
  if (ok)
    return testing::AssertionSuccess ();
  std::string g;
  for (float v : got)
    g += std::to_string (v) + " ";
  return testing::AssertionFailure () << "got " << g;
}

TEST (SenderRules, AnEpisodeStartHoldsAndBoundsTheNextFirstRowByTheMeasuredState)
{
  SenderSettings st = stream_settings ();
  st.mode = SendMode::kChunk;
  st.hold_timeout_ns = 10000 * kMs;
  st.stop_timeout_ns = 20000 * kMs;
  st.robot = robot (kRobotInitial);
  const std::vector<float> before = ramp (10, 0, 0.04f);
  const std::vector<float> far (30, 0.0f);
  std::vector<float> next;
  for (int i = 0; i < 10; i++)
    next.insert (next.end (), {0.9f, 1.5f, 0.4f});
  std::string err;
  /* What the first row of `next` becomes, sent at 300 ms after `before` ran, with or without an
   * episode start at 250 ms and a measured state. */
  auto first_row = [&] (bool episode, const float *measured, std::vector<float> *hold) {
    PlayingSender p (st);
    EXPECT_EQ (ChunkResult::kSent, p.s.chunk (0, chunk_of (before, 10, 1, 0), p.out, &err));
    p.out.clear ();
    if (episode) {
      p.s.event (250 * kMs, SenderEvent::kEpisode, p.out);
      EXPECT_EQ (p.out.frames.size (), 1u);
      if (!p.out.frames.empty ()) {
        EXPECT_EQ (p.out.frames[0].header.kind, Kind::kHold);
        *hold = p.out.frames[0].values;
      }
      p.out.clear ();
    }
    ChunkIn c = chunk_of (next, 10, 2, 300 * kMs);
    c.measured = measured;
    EXPECT_EQ (ChunkResult::kSent, p.s.chunk (300 * kMs, c, p.out, &err));
    const std::vector<float> sent = p.out.frames.back ().values;
    return std::vector<float> (sent.begin (), sent.begin () + 3);
  };
  std::vector<float> hold = {1.0f};
  const float near[3] = {0.85f, 1.4f, 0.38f};
  const float away[3] = {-0.5f, 0.0f, 0.1f};
  /* Without the event: bounded against the last episode's last row (0.36, 0.37, 0.38). */
  EXPECT_TRUE (close_row (first_row (false, near, &hold), {0.46f, 0.62f, 0.4f}));
  /* With it: the measured state is the reference; the HOLD carried no position. */
  EXPECT_TRUE (close_row (first_row (true, near, &hold), {0.9f, 1.5f, 0.4f}));
  EXPECT_TRUE (hold.empty ());
  EXPECT_TRUE (close_row (first_row (true, away, &hold), {-0.4f, 0.25f, 0.15f}));
  /* No measured state: the limits alone (not `initial`, which would give 0.1, 0.75, 0.3). */
  EXPECT_TRUE (close_row (first_row (true, nullptr, &hold), {0.9f, 1.5f, 0.4f}));

  /* A HOLD before the new episode's first chunk has no position either; after that chunk the
   * bound is the usual one (its rows). */
  PlayingSender p (st);
  ASSERT_EQ (ChunkResult::kSent, p.s.chunk (0, chunk_of (before, 10, 1, 0), p.out, &err));
  p.s.event (250 * kMs, SenderEvent::kEpisode, p.out);
  EXPECT_TRUE (p.hold_at (260 * kMs).empty ());
  ChunkIn c = chunk_of (next, 10, 2, 300 * kMs);
  c.measured = near;
  ASSERT_EQ (ChunkResult::kSent, p.s.chunk (300 * kMs, c, p.out, &err));
  p.out.clear ();
  ASSERT_EQ (ChunkResult::kSent,
             p.s.chunk (340 * kMs, chunk_of (far, 10, 3, 340 * kMs), p.out, &err));
  EXPECT_TRUE (close_row (std::vector<float> (p.out.frames.back ().values.begin (),
                                              p.out.frames.back ().values.begin () + 3),
                          {0.8f, 1.25f, 0.35f}))
      << "bounded against chunk 2's row, not the measured state";

  /* Stream mode: the first row after the event is bounded against the measured state too. */
  SenderSettings ss = stream_settings ();
  ss.robot = robot (kRobotInitial);
  Sender s (ss, counter_ids ());
  SenderOutput out;
  s.link (0, true, false, out);
  s.event (0, SenderEvent::kPlaying, out);
  s.event (0, SenderEvent::kEpisode, out);
  out.clear ();
  c = chunk_of (next, 10, 1, 0);
  c.measured = away;
  ASSERT_EQ (ChunkResult::kQueued, s.chunk (0, c, out, &err));
  s.tick (0, out);
  ASSERT_FALSE (out.frames.empty ());
  EXPECT_EQ (out.frames.back ().header.kind, Kind::kAction);
  EXPECT_TRUE (close_row (out.frames.back ().values, {-0.4f, 0.25f, 0.15f}));
}

TEST (SenderRules, StreamSteppingReportsWhatTheRobotExecutes)
{
  Sender s (stream_settings (), counter_ids ());
  SenderOutput out;
  s.link (0, true, false, out);
  s.event (0, SenderEvent::kPlaying, out);
  const std::vector<float> v = ramp (4, 0, 0.05f);
  std::string err;
  s.chunk (0, chunk_of (v, 4, 9, 0), out, &err);
  std::vector<Feedback> fb;
  for (uint64_t now = 0; now <= 60 * kMs; now += 20 * kMs) {
    out.clear ();
    s.tick (now, out);
    fb.insert (fb.end (), out.executing.begin (), out.executing.end ());
  }
  ASSERT_EQ (fb.size (), 4u);
  for (uint32_t i = 0; i < 4; i++) {
    EXPECT_EQ (fb[i].chunk_id, 9u);
    EXPECT_EQ (fb[i].row, i);
    EXPECT_EQ (fb[i].time_ns, i * 20 * kMs);
  }
}

/* ---- FEEDBACK: the robot's reports, checked by the sender, made by the receiver ------------ */

namespace
{

constexpr uint64_t kFirstSession = 0x1000; /* counter_ids ()'s first id */

/* A FEEDBACK frame as docs/protocol.md describes it. */
std::vector<uint8_t>
report (uint64_t session, uint64_t seq, uint64_t chunk, uint32_t row, uint64_t t,
        const std::string &key = "")
{
  Header h;
  h.kind = Kind::kFeedback;
  h.session_id = session;
  h.seq = seq;
  h.chunk_id = chunk;
  h.step_index = row;
  h.send_time_ns = t;
  h.observation_time_ns = kTimeNone;
  h.step_period_ns = 0;
  return encoded (h, {}, key);
}

/* A chunk-mode sender (20 ms period, execute-steps 8) that sent chunk 5 at 100 ms, captured at
 * 60 ms: rows [2, 8) went out, row 2 starting on receipt. */
struct ChunkSender {
  SenderSettings st;
  Sender s;
  SenderOutput out;
  std::vector<float> v = ramp (10, 0, 0.04f); /* within max_step: sent as it is */

  static SenderSettings settings (const std::string &key, SendMode mode)
  {
    SenderSettings st = stream_settings ();
    st.mode = mode;
    st.execute_steps = 8;
    st.hold_timeout_ns = 10000 * kMs; /* no watchdog HOLD in the way */
    st.stop_timeout_ns = 20000 * kMs;
    st.key = key;
    st.hmac = !key.empty ();
    return st;
  }
  explicit ChunkSender (const std::string &key = "", SendMode mode = SendMode::kChunk)
      : st (settings (key, mode)), s (st, counter_ids ())
  {
    s.link (0, true, false, out);
    s.event (0, SenderEvent::kPlaying, out);
    std::string err;
    EXPECT_NE (ChunkResult::kError, s.chunk (100 * kMs, chunk_of (v, 10, 5, 60 * kMs), out, &err));
    out.clear ();
  }
  /* The HOLD a pause at @now sends: where the sender believes the robot is. */
  std::vector<float> hold_at (uint64_t now)
  {
    out.clear ();
    s.event (now, SenderEvent::kPaused, out);
    EXPECT_EQ (out.frames.size (), 1u);
    return out.frames.empty () ? std::vector<float> () : out.frames.back ().values;
  }
  std::vector<float> row (uint32_t i) const
  {
    return std::vector<float> (v.begin () + 3 * i, v.begin () + 3 * i + 3);
  }
};

} // namespace

TEST (SenderFeedback, AReportIsTakenMovesTheReferenceAndReplacesTheEstimate)
{
  /* Without a report, at 150 ms the sender counts row 4 (captured at 60 ms, 20 ms a row). */
  ChunkSender plain;
  EXPECT_EQ (plain.hold_at (150 * kMs), plain.row (4));
  /* The robot says row 2 started at 140 ms (it began late): at 150 ms it runs row 2. */
  ChunkSender f;
  EXPECT_EQ (nullptr,
             f.s.robot_frame (150 * kMs, report (kFirstSession, 1, 5, 2, 140 * kMs).data (),
                              kFeedbackFrameSize, f.out));
  ASSERT_EQ (f.out.executing.size (), 1u);
  EXPECT_EQ (f.out.executing[0].chunk_id, 5u);
  EXPECT_EQ (f.out.executing[0].row, 2u);
  EXPECT_EQ (f.out.executing[0].time_ns, 140 * kMs);
  EXPECT_TRUE (f.out.frames.empty ()) << "a report is never answered";
  EXPECT_EQ (f.s.counters ().feedback, 1u);
  EXPECT_EQ (f.s.counters ().feedback_dropped, 0u);
  EXPECT_TRUE (f.s.robot_reports ());
  EXPECT_EQ (f.hold_at (150 * kMs), f.row (2));
  /* Once the robot reports, a chunk sent brings no estimate: the robot's reports say it. */
  ChunkSender g;
  std::string err;
  g.s.chunk (120 * kMs, chunk_of (g.v, 10, 6, 110 * kMs), g.out, &err);
  ASSERT_EQ (g.out.executing.size (), 1u) << "before any report: the estimate";
  g.out.clear ();
  ASSERT_EQ (nullptr,
             g.s.robot_frame (130 * kMs, report (kFirstSession, 1, 6, 0, 120 * kMs).data (),
                              kFeedbackFrameSize, g.out));
  g.out.clear ();
  g.s.chunk (140 * kMs, chunk_of (g.v, 10, 7, 140 * kMs), g.out, &err);
  EXPECT_FALSE (g.out.frames.empty ());
  EXPECT_TRUE (g.out.executing.empty ());
}

TEST (SenderFeedback, EveryMalformedReportIsDroppedCountedAndChangesNothing)
{
  const uint64_t S = kFirstSession;
  const uint64_t now = 150 * kMs;
  const auto good = report (S, 9, 5, 3, 130 * kMs);
  auto flipped = good;
  flipped[20] ^= 0x01; /* a bit of seq: the CRC no longer matches */
  auto longer = good;
  longer.push_back (0);
  std::vector<uint8_t> garbage (76);
  std::mt19937_64 rng (5);
  for (auto &b : garbage)
    b = (uint8_t)rng ();
  Header h;
  h.kind = Kind::kFeedback, h.session_id = S, h.seq = 9, h.chunk_id = 5, h.step_index = 3;
  h.send_time_ns = 130 * kMs, h.observation_time_ns = kTimeNone;
  Header flagged = h;
  flagged.flags = kFlagLast;
  Header with_obs = h;
  with_obs.observation_time_ns = 60 * kMs;
  Header with_period = h;
  with_period.step_period_ns = 20 * kMs;
  Header with_dim = h;
  with_dim.dim = 3;
  Header hold;
  hold.kind = Kind::kHold, hold.session_id = S, hold.seq = 3, hold.steps = 1, hold.chunk_steps = 1;
  hold.dim = 3;
  Header big = stream_row (S, 4);
  big.steps = big.chunk_steps = 10;
  struct Case {
    const char *what;
    std::vector<uint8_t> bytes;
    const char *reason;
    std::string key = ""; /* the sender's */
    SendMode mode = SendMode::kChunk;
    uint64_t at = 150 * kMs;
  };
  const std::vector<Case> cases = {
      {"random bytes", garbage, "bad-magic"},
      {"cut short", std::vector<uint8_t> (good.begin (), good.end () - 1), "truncated"},
      {"a header only", std::vector<uint8_t> (good.begin (), good.begin () + 72), "truncated"},
      {"a byte too many", longer, "trailing-bytes"},
      {"larger than any FEEDBACK", encoded (big, ramp (10, 0, 0)), "too-large"},
      {"flipped bit", flipped, "bad-crc"},
      {"an ACTION flag", encoded (flagged, {}), "bad-flags"},
      {"a dimension", encoded (with_dim, {}), "bad-dims"},
      {"authenticated, sender has no key", report (S, 9, 5, 3, 130 * kMs, "k"), "hmac-unexpected"},
      {"not authenticated", good, "hmac-missing", "k"},
      {"another key", report (S, 9, 5, 3, 130 * kMs, "K"), "bad-hmac", "k"},
      {"the sender's own HOLD reflected", encoded (hold, {0.1f, 0.2f, 0.3f}), "not-feedback"},
      {"an observation time", encoded (with_obs, {}), "bad-field"},
      {"a step period", encoded (with_period, {}), "bad-field"},
      {"stream mode", good, "not-chunk-mode", "", SendMode::kStream},
      {"another session", report (S + 1, 9, 5, 3, 130 * kMs), "wrong-session"},
      {"session 0", report (0, 9, 5, 3, 130 * kMs), "wrong-session"},
      {"seq 0", report (S, 0, 5, 3, 130 * kMs), "bad-seq"},
      {"seq 2^63", report (S, kMaxSeq + 1, 5, 3, 130 * kMs), "bad-seq"},
      {"a chunk never sent", report (S, 9, 4, 3, 130 * kMs), "unknown-chunk"},
      {"a row skipped as past", report (S, 9, 5, 1, 130 * kMs), "bad-row"},
      {"a row beyond execute-steps", report (S, 9, 5, 8, 130 * kMs), "bad-row"},
      {"a row beyond the chunk", report (S, 9, 5, 4000, 130 * kMs), "bad-row"},
      {"no time", report (S, 9, 5, 3, kTimeNone), "no-time"},
      {"no clock", good, "no-time", "", SendMode::kChunk, kTimeNone},
      {"before the chunk was sent", report (S, 9, 5, 3, 100 * kMs - 1), "too-early"},
      {"in the future", report (S, 9, 5, 3, now + 20 * kMs + 1), "future"},
      {"absurdly old", report (S, 9, 5, 3, 100 * kMs), "too-old", "", SendMode::kChunk,
       100 * kMs + 1000 * kMs + 20 * kMs + 1},
  };
  for (const Case &c : cases) {
    ChunkSender f (c.key, c.mode), twin (c.key, c.mode);
    const char *why = f.s.robot_frame (c.at, c.bytes.data (), c.bytes.size (), f.out);
    ASSERT_NE (why, nullptr) << c.what;
    EXPECT_STREQ (why, c.reason) << c.what;
    EXPECT_EQ (f.s.counters ().feedback_dropped, 1u) << c.what;
    EXPECT_EQ (f.s.counters ().feedback, 0u) << c.what;
    EXPECT_TRUE (f.out.frames.empty () && f.out.executing.empty () && f.out.sent.empty ())
        << c.what;
    EXPECT_FALSE (f.s.robot_reports ()) << c.what;
    /* Nothing changed: what the sender sends next is what its twin, which got nothing, sends. */
    std::string err;
    f.out.clear (), twin.out.clear ();
    f.s.chunk (160 * kMs, chunk_of (f.v, 10, 6, 150 * kMs), f.out, &err);
    twin.s.chunk (160 * kMs, chunk_of (twin.v, 10, 6, 150 * kMs), twin.out, &err);
    ASSERT_EQ (f.out.frames.size (), twin.out.frames.size ()) << c.what;
    for (size_t i = 0; i < f.out.frames.size (); i++) {
      EXPECT_EQ (f.out.frames[i].values, twin.out.frames[i].values) << c.what;
      EXPECT_EQ (f.out.frames[i].header.seq, twin.out.frames[i].header.seq) << c.what;
    }
    EXPECT_EQ (f.hold_at (170 * kMs), twin.hold_at (170 * kMs)) << c.what;
  }
  /* The same report, well formed, is taken. */
  ChunkSender f;
  EXPECT_EQ (nullptr, f.s.robot_frame (now, good.data (), good.size (), f.out));
  ChunkSender k ("k");
  const auto signed_ok = report (S, 9, 5, 3, 130 * kMs, "k");
  EXPECT_EQ (nullptr, k.s.robot_frame (now, signed_ok.data (), signed_ok.size (), k.out));
  /* Slack of exactly one period and the oldest report allowed are taken too. */
  ChunkSender edge;
  const auto at_edge = report (S, 1, 5, 3, now + 20 * kMs);
  EXPECT_EQ (nullptr, edge.s.robot_frame (now, at_edge.data (), at_edge.size (), edge.out));
}

TEST (SenderFeedback, RepliesAndReportsOfAnotherSessionAreNeverTaken)
{
  ChunkSender f;
  const uint64_t S = kFirstSession;
  auto send = [&] (uint64_t session, uint64_t seq, uint64_t chunk, uint32_t row, uint64_t t,
                   uint64_t now) {
    const auto b = report (session, seq, chunk, row, t);
    const char *why = f.s.robot_frame (now, b.data (), b.size (), f.out);
    return std::string (why ? why : "ok");
  };
  EXPECT_EQ (send (S, 5, 5, 2, 100 * kMs, 110 * kMs), "ok");
  EXPECT_EQ (send (S, 5, 5, 3, 120 * kMs, 125 * kMs), "old-seq") << "a replay";
  EXPECT_EQ (send (S, 4, 5, 3, 120 * kMs, 125 * kMs), "old-seq") << "reordered";
  EXPECT_EQ (send (S, 1000000, 5, 3, 120 * kMs, 125 * kMs), "ok") << "seq may jump";
  /* A reconnection starts a new session: the old one's reports, and its chunks, are gone. */
  f.out.clear ();
  f.s.link (130 * kMs, true, true, f.out);
  const uint64_t S2 = f.s.session_id ();
  ASSERT_NE (S2, S);
  EXPECT_EQ (send (S, 1000001, 5, 3, 120 * kMs, 135 * kMs), "wrong-session");
  EXPECT_EQ (send (S2, 1, 5, 3, 120 * kMs, 135 * kMs), "unknown-chunk");
  std::string err;
  f.s.chunk (140 * kMs, chunk_of (f.v, 10, 6, 140 * kMs), f.out, &err);
  EXPECT_EQ (send (S2, 1, 6, 0, 140 * kMs, 145 * kMs), "ok") << "seq starts afresh";
  /* Only the last kFeedbackHistory chunks can be named. */
  for (uint64_t c = 7; c < 7 + kFeedbackHistory; c++)
    f.s.chunk (150 * kMs, chunk_of (f.v, 10, c, 150 * kMs), f.out, &err);
  EXPECT_EQ (send (S2, 2, 6, 0, 150 * kMs, 155 * kMs), "unknown-chunk");
  EXPECT_EQ (send (S2, 2, 7, 0, 150 * kMs, 155 * kMs), "ok");
  EXPECT_EQ (f.s.counters ().feedback, 4u);
  EXPECT_EQ (f.s.counters ().feedback_dropped, 5u);
}

TEST (ReceiverFeedback, ReportsEachChunkRowOnceOnTheSendersClock)
{
  ReceiverSettings rs;
  rs.dim = 3;
  Receiver rx (rs);
  Received r;
  /* Chunk 9, rows [2, 10) in one frame, sent at 100 ms on the sender's clock, received at 5 s
   * on the robot's. */
  const Header h = chunk_rows (1, 60 * kMs, 2, 8, 10);
  const uint64_t R = 5000 * kMs;
  const auto chunk = encoded (h, ramp (8, 0, 0.01f));
  rx.receive (R, chunk.data (), chunk.size (), r);
  ASSERT_EQ (r.reject, nullptr);
  Header fb;
  ASSERT_TRUE (rx.feedback (R, &fb));
  EXPECT_EQ (fb.kind, Kind::kFeedback);
  EXPECT_EQ (fb.session_id, 42u);
  EXPECT_EQ (fb.seq, R / 1000 + 1) << "starts at the robot's clock in microseconds";
  EXPECT_EQ (fb.chunk_id, 9u);
  EXPECT_EQ (fb.step_index, 2u);
  EXPECT_EQ (fb.send_time_ns, 100 * kMs);
  EXPECT_EQ (fb.observation_time_ns, kTimeNone);
  EXPECT_EQ (fb.step_period_ns, 0u);
  EXPECT_EQ (fb.steps, 0u);
  EXPECT_EQ (fb.dim, 0u);
  EXPECT_FALSE (rx.feedback (R, &fb)) << "each row once";
  EXPECT_FALSE (rx.feedback (R + 19 * kMs, &fb));
  EXPECT_EQ (rx.next_row (), R + 20 * kMs);
  ASSERT_TRUE (rx.feedback (R + 20 * kMs, &fb));
  EXPECT_EQ (fb.step_index, 3u);
  EXPECT_EQ (fb.send_time_ns, 120 * kMs);
  EXPECT_EQ (fb.seq, R / 1000 + 2);
  /* Late: rows 4 and 5 started; the last one is reported. */
  ASSERT_TRUE (rx.feedback (R + 65 * kMs, &fb));
  EXPECT_EQ (fb.step_index, 5u);
  EXPECT_EQ (fb.send_time_ns, 160 * kMs);
  /* What the robot encodes, the sender decodes (with the key, if any). */
  std::vector<uint8_t> b;
  encode (fb, nullptr, "k", b);
  Frame out;
  EXPECT_EQ (Error::kOk, decode (b.data (), b.size (), Limits (), "k", &out));
  /* A HOLD ends the chunk: nothing more to report, whatever the time (rows 6 and 7, which
   * started before it arrived, included). */
  Header hold;
  hold.kind = Kind::kHold;
  hold.session_id = 42;
  hold.seq = 2;
  const auto hb = encoded (hold, {});
  rx.receive (R + 110 * kMs, hb.data (), hb.size (), r);
  ASSERT_EQ (r.reject, nullptr);
  EXPECT_FALSE (rx.feedback (R + 10000 * kMs, &fb));
  EXPECT_EQ (rx.next_row (), kTimeNone);
  /* Stream rows are never reported: the sender decides them itself. */
  const auto sr = encoded (stream_row (42, 3), {0.1f, 0.2f, 0.3f});
  rx.receive (R + 200 * kMs, sr.data (), sr.size (), r);
  ASSERT_EQ (r.reject, nullptr);
  EXPECT_FALSE (rx.feedback (R + 200 * kMs, &fb));
  /* A robot never executes a FEEDBACK, whoever sends it. */
  const auto fbb = report (42, 4, 9, 3, 120 * kMs);
  rx.receive (R + 210 * kMs, fbb.data (), fbb.size (), r);
  EXPECT_STREQ (r.reject, "bad-kind");
}

TEST (ReceiverFeedback, AChunkWhoseFirstFrameWasLostIsReportedFromWhereItBegan)
{
  ReceiverSettings rs;
  rs.dim = 3;
  Receiver rx (rs);
  Received r;
  const Header h = chunk_rows (2, 100 * kMs, 4, 4, 8); /* seq 1, rows [0, 4), was lost */
  const auto b = encoded (h, ramp (4, 0, 0.01f));
  rx.receive (7000 * kMs, b.data (), b.size (), r);
  ASSERT_EQ (r.reject, nullptr);
  Header fb;
  ASSERT_TRUE (rx.feedback (7000 * kMs, &fb));
  EXPECT_EQ (fb.step_index, 4u);
  EXPECT_EQ (fb.send_time_ns, 100 * kMs) << "row 4 began on receipt";
  /* The sender takes it: row 4 was sent, and it did not start before it was sent. */
  SenderSettings st = ChunkSender::settings ("", SendMode::kChunk);
  st.execute_steps = 0;
  Sender s (st, [] { return (uint64_t)42; });
  SenderOutput out;
  s.link (0, true, false, out);
  s.event (0, SenderEvent::kPlaying, out);
  const auto v = ramp (8, 0, 0.01f);
  std::string err;
  ASSERT_EQ (ChunkResult::kSent, s.chunk (100 * kMs, chunk_of (v, 8, 9, 100 * kMs), out, &err));
  std::vector<uint8_t> wire;
  encode (fb, nullptr, "", wire);
  EXPECT_EQ (nullptr, s.robot_frame (110 * kMs, wire.data (), wire.size (), out));
}

/* ---- Receiver, rule by rule --------------------------------------------------------------- */

TEST (ReceiverRules, SessionsSequenceNumbersAndReplays)
{
  ReceiverSettings rs;
  rs.key = "k";
  rs.dim = 3;
  Receiver rx (rs);
  Received r;
  const std::vector<float> row = {0.1f, 0.2f, 0.3f};
  auto send = [&] (uint64_t session, uint64_t seq) {
    const auto b = encoded (stream_row (session, seq), row, "k");
    rx.receive (0, b.data (), b.size (), r);
    return r.reject ? std::string (r.reject) : std::string ("ok");
  };
  EXPECT_EQ (send (5, 0), "bad-seq");
  EXPECT_EQ (send (0, 1), "bad-session");
  EXPECT_EQ (send (5, kMaxSeq + 1), "bad-seq");
  EXPECT_EQ (send (5, UINT64_MAX), "bad-seq");
  EXPECT_EQ (send (5, 1), "ok");
  EXPECT_TRUE (r.new_session);
  EXPECT_EQ (send (5, 1), "old-seq");
  EXPECT_EQ (send (5, 2 + kMaxSeqJump), "seq-jump");
  EXPECT_EQ (send (5, 1 + kMaxSeqJump), "ok") << "a jump of exactly kMaxSeqJump is allowed";
  EXPECT_EQ (send (6, 1000), "ok") << "a new session may start at any seq";
  EXPECT_EQ (send (5, 2 + kMaxSeqJump), "old-session");
  EXPECT_EQ (send (6, 1001), "ok");
  EXPECT_EQ (rx.counters ().sessions, 2u);
  /* Unauthenticated frames are refused before any session rule. */
  const auto plain = encoded (stream_row (7, 1), row);
  rx.receive (0, plain.data (), plain.size (), r);
  EXPECT_STREQ (r.reject, "hmac-missing");
}

TEST (ReceiverRules, RetiredSessionsAreRememberedUpToTheBound)
{
  ReceiverSettings rs;
  rs.retired_sessions = 3;
  Receiver rx (rs);
  Received r;
  const std::vector<float> row = {0.1f, 0.2f, 0.3f};
  auto send = [&] (uint64_t session, uint64_t seq) {
    const auto b = encoded (stream_row (session, seq), row);
    rx.receive (0, b.data (), b.size (), r);
    return r.reject ? std::string (r.reject) : std::string ("ok");
  };
  for (uint64_t id = 1; id <= 5; id++)
    EXPECT_EQ (send (id, 1), "ok");
  EXPECT_EQ (send (4, 2), "old-session");
  EXPECT_EQ (send (2, 2), "old-session");
  EXPECT_EQ (send (1, 2), "ok") << "beyond the bound (documented): only the last 3 are kept";
}

TEST (ReceiverRules, ChunkRowsAreScheduledHoldAndStopCancelThem)
{
  ReceiverSettings rs;
  rs.robot = robot ();
  Receiver rx (rs);
  Received r;
  Header h = stream_row (1, 1);
  h.flags = kFlagLast;
  h.steps = 4;
  h.chunk_steps = 4;
  const std::vector<float> v = ramp (4, 0.0f, 0.05f);
  auto b = encoded (h, v);
  rx.receive (1000, b.data (), b.size (), r);
  ASSERT_EQ (r.reject, nullptr);
  ASSERT_EQ (r.rows.size (), 4u);
  for (uint32_t i = 0; i < 4; i++)
    EXPECT_EQ (r.rows[i].at_ns, 1000 + i * 20 * kMs);
  EXPECT_EQ (rx.position (1000 + 25 * kMs), std::vector<float> (v.begin () + 3, v.begin () + 6));
  EXPECT_EQ (rx.executing (1000 + 25 * kMs).row, 1u);
  /* Frames of one chunk come in row order. */
  h.seq = 2;
  h.step_index = 2;
  h.steps = 1;
  h.chunk_steps = 4;
  b = encoded (h, std::vector<float> (v.begin () + 6, v.begin () + 9));
  rx.receive (1000 + 30 * kMs, b.data (), b.size (), r);
  EXPECT_STREQ (r.reject, "step-order");
  /* HOLD at 30 ms: rows 2 and 3 never run. */
  Header hold;
  hold.kind = Kind::kHold;
  hold.session_id = 1;
  hold.seq = 3;
  b = encoded (hold, {});
  rx.receive (1000 + 30 * kMs, b.data (), b.size (), r);
  ASSERT_EQ (r.reject, nullptr);
  EXPECT_EQ (rx.position (1000 + 500 * kMs), std::vector<float> (v.begin () + 3, v.begin () + 6));
  /* A period of 0 would run every row at once: refused. */
  h = stream_row (1, 4);
  h.flags = kFlagLast;
  h.step_period_ns = 0;
  b = encoded (h, {0.1f, 0.5f, 0.25f});
  rx.receive (1000 + 40 * kMs, b.data (), b.size (), r);
  EXPECT_STREQ (r.reject, "bad-period");
}

TEST (ReceiverRules, MaxStepIsClampedAgainstTheRowRunningNow)
{
  ReceiverSettings rs;
  rs.robot = robot (kRobotInitial); /* starts at 0, 0.5, 0.25; max_step 0.1, 0.25, 0.05 */
  Receiver rx (rs);
  Received r;
  auto b = encoded (stream_row (1, 1), {0.9f, 0.5f, 0.25f});
  rx.receive (0, b.data (), b.size (), r);
  ASSERT_EQ (r.reject, nullptr);
  ASSERT_EQ (r.rows.size (), 1u);
  EXPECT_TRUE (r.rows[0].limited);
  EXPECT_FLOAT_EQ (r.rows[0].values[0], 0.1f);
  EXPECT_EQ (r.rows[0].requested, (std::vector<float>{0.9f, 0.5f, 0.25f}));
  /* A HOLD far from where the robot is: it moves at most max_step towards it. */
  Header hold;
  hold.kind = Kind::kHold;
  hold.session_id = 1;
  hold.seq = 2;
  hold.steps = 1;
  hold.chunk_steps = 1;
  hold.dim = 3;
  b = encoded (hold, {-0.9f, 0.5f, 0.25f});
  rx.receive (0, b.data (), b.size (), r);
  ASSERT_EQ (r.reject, nullptr);
  EXPECT_TRUE (r.hold_limited);
  EXPECT_TRUE (exact_within (r.hold[0], 0.1f, 0.1f));
  EXPECT_EQ (rx.counters ().limited, 2u);
  /* Outside the joint limits: refused whole, as before. */
  b = encoded (stream_row (1, 3), {0.0f, 2.5f, 0.25f});
  rx.receive (0, b.data (), b.size (), r);
  EXPECT_STREQ (r.reject, "limit");
}

TEST (ReceiverRules, TheRobotsOwnWatchdogHoldsThenStops)
{
  ReceiverSettings rs;
  rs.hold_timeout_ns = 100 * kMs;
  rs.stop_timeout_ns = 300 * kMs;
  ASSERT_TRUE (validate (rs, nullptr));
  Receiver rx (rs);
  Received r;
  std::vector<WatchdogEvent> ev;
  EXPECT_EQ (rx.next_deadline (), kTimeNone) << "nothing commanded, nothing to watch";
  auto b = encoded (stream_row (1, 1), {0.1f, 0.2f, 0.3f});
  rx.receive (50 * kMs, b.data (), b.size (), r);
  EXPECT_EQ (rx.next_deadline (), 150 * kMs);
  rx.tick (149 * kMs, ev);
  EXPECT_TRUE (ev.empty ());
  rx.tick (150 * kMs, ev);
  ASSERT_EQ (ev.size (), 1u);
  EXPECT_EQ (ev[0].kind, Kind::kHold);
  EXPECT_EQ (rx.next_deadline (), 350 * kMs);
  ev.clear ();
  rx.tick (400 * kMs, ev);
  ASSERT_EQ (ev.size (), 1u);
  EXPECT_EQ (ev[0].kind, Kind::kStop);
  EXPECT_EQ (ev[0].at_ns, 350 * kMs);
  EXPECT_TRUE (rx.stopped ());
  EXPECT_EQ (rx.next_deadline (), kTimeNone);
  rs.stop_timeout_ns = 50 * kMs;
  std::string e;
  EXPECT_FALSE (validate (rs, &e));
}

/* ---- CommandTimeline: the receiver's rules replayed from what was sent -------------------- */

TEST (CommandTimeline, ChunkRowsRunFromTheirSendTimeAndANewMessageReplacesWhatIsPending)
{
  CommandTimeline t (10);
  EXPECT_EQ (t.at (0), nullptr);
  const float a[] = {1, 2, 3}, b[] = {7};
  t.add ("action", 1, 0, 100, a, 3, 1); /* rows at 100, 110, 120 */
  EXPECT_EQ (t.at (99), nullptr);
  EXPECT_EQ ((*t.at (100))[0], 1);
  EXPECT_EQ ((*t.at (115))[0], 2);
  EXPECT_EQ ((*t.at (1000))[0], 3);
  t.add ("action", 2, 0, 112, b, 1, 1); /* another chunk: replaces the row due at 120 */
  EXPECT_EQ ((*t.at (111))[0], 2);
  EXPECT_EQ ((*t.at (125))[0], 7);
  t.add ("hold", 0, 0, 130, nullptr, 0, 0); /* no position: the robot stays */
  EXPECT_EQ ((*t.at (140))[0], 7);
  const float h[] = {5};
  t.add ("hold", 0, 0, 150, h, 1, 1);
  EXPECT_EQ ((*t.at (150))[0], 5);
  t.add ("stop", 0, 0, 160, nullptr, 0, 0);
  EXPECT_EQ ((*t.at (170))[0], 5);
  t.prune (150);
  EXPECT_EQ ((*t.at (150))[0], 5);
}

TEST (CommandTimeline, ALaterMessageOfAChunkKeepsItsRowsWhereTheChunkPutThem)
{
  CommandTimeline t (10);
  const float a[] = {1, 2}, b[] = {3, 4}, back[] = {9};
  t.add ("action", 4, 2, 100, a, 2, 1); /* rows 2, 3 at 100, 110 */
  t.add ("action", 4, 4, 105, b, 2, 1); /* rows 4, 5 at 120, 130: from the chunk's base */
  EXPECT_EQ ((*t.at (115))[0], 2);
  EXPECT_EQ ((*t.at (120))[0], 3);
  EXPECT_EQ ((*t.at (135))[0], 4);
  t.add ("action", 4, 3, 107, back, 1, 1); /* back into rows given: refused, changes nothing */
  EXPECT_EQ ((*t.at (110))[0], 2);
  EXPECT_EQ ((*t.at (135))[0], 4);
  t.add ("hello", 0, 0, 108, nullptr, 0, 0);
  EXPECT_EQ ((*t.at (135))[0], 4);
  /* After a HOLD the same chunk begins anew, its first row on receipt. */
  t.add ("hold", 0, 0, 140, nullptr, 0, 0);
  t.add ("action", 4, 6, 145, back, 1, 1);
  EXPECT_EQ ((*t.at (144))[0], 4);
  EXPECT_EQ ((*t.at (145))[0], 9);
  /* Stream rows run on receipt and replace what was planned, whatever their row. */
  CommandTimeline st (10, true);
  st.add ("action", 4, 2, 100, a, 2, 1); /* 1 at 100, 2 at 110 */
  st.add ("action", 4, 3, 103, b, 1, 1);
  EXPECT_EQ ((*st.at (102))[0], 1);
  EXPECT_EQ ((*st.at (103))[0], 3);
  EXPECT_EQ ((*st.at (500))[0], 3);
}

namespace
{

/* A Receiver and a CommandTimeline given the same messages at the same times (the robot's clock
 * is the sender's: no latency), asked the same question at every step: what is commanded now. */
struct TimelineCheck {
  Receiver rx{ReceiverSettings ()};
  CommandTimeline tl;
  Received r;
  uint64_t frames = 0, messages = 0;                        /* what deliver() passed on */
  uint64_t rows = 0, holds = 0, stops = 0;                  /* what the receiver took */
  std::vector<std::pair<uint64_t, std::vector<float>>> ran; /* what it ran, step by step */

  TimelineCheck (uint64_t period_ns, bool stream) : tl ((int64_t)period_ns, stream) {}

  /* The robot receives @f at @now. */
  void frame (uint64_t now, const OutFrame &f)
  {
    const auto b = encoded (f.header, f.values);
    rx.receive (now, b.data (), b.size (), r);
    ASSERT_EQ (r.reject, nullptr);
    rows += r.rows.size ();
    holds += f.header.kind == Kind::kHold && !r.hold.empty ();
    stops += f.header.kind == Kind::kStop;
  }
  /* pi0actionsink's `action` signal reports a message (its arguments) sent at @now. */
  void message (uint64_t now, uint64_t chunk_id, Kind kind, uint32_t step_index, uint32_t steps,
                uint32_t dim, const std::vector<float> &values)
  {
    tl.add (kind_name (kind), chunk_id, step_index, (int64_t)now,
            values.empty () ? nullptr : values.data (), steps, dim);
  }
  /* A frame as a message of its own (a chunk split into several messages). */
  void both (uint64_t now, const OutFrame &f)
  {
    frame (now, f);
    const Header &h = f.header;
    message (now, h.chunk_id, h.kind, h.step_index, h.steps, h.dim, f.values);
    /* Each row the receiver scheduled is the timeline's command from its start. */
    for (const ExecRow &row : r.rows) {
      const std::vector<float> *cmd = tl.at ((int64_t)row.at_ns);
      ASSERT_NE (cmd, nullptr);
      EXPECT_EQ (*cmd, row.values) << "row " << row.step_index << " at " << row.at_ns;
    }
  }
  /* The frames to the receiver, the messages to the timeline, at @now. */
  void deliver (uint64_t now, SenderOutput &out)
  {
    frames += out.frames.size ();
    messages += out.sent.size ();
    for (const OutFrame &f : out.frames)
      frame (now, f);
    for (const SentMessage &m : out.sent)
      message (now, m.chunk_id, m.kind, m.step_index, m.steps, m.dim, m.values);
    out.clear ();
  }
  static ::testing::AssertionResult same (uint64_t now, const std::vector<float> &pos,
                                          const std::vector<float> *cmd)
  {
    if ((pos.empty () && !cmd) || (cmd && *cmd == pos))
      return ::testing::AssertionSuccess ();
    auto show = [] (const std::vector<float> *v) {
      return !v || v->empty () ? std::string ("nothing") : std::to_string ((*v)[0]) + ", ...";
    };
    return ::testing::AssertionFailure () << "at " << now / kMs << " ms the receiver runs "
                                          << show (&pos) << ", the timeline says " << show (cmd);
  }
  /* The receiver runs at @now what the timeline, told what was sent until now, says. */
  ::testing::AssertionResult agree (uint64_t now)
  {
    ran.emplace_back (now, rx.position (now));
    return same (now, ran.back ().second, tl.at ((int64_t)now));
  }
  /* Afterwards, as pi0lerobotsink asks it: at every step the receiver ran what the whole
   * timeline says (true when no row came after it was due). */
  ::testing::AssertionResult agree_afterwards () const
  {
    for (const auto &[now, pos] : ran) {
      auto ok = same (now, pos, tl.at ((int64_t)now));
      if (!ok)
        return ok;
    }
    return ::testing::AssertionSuccess ();
  }
};

/* Drives a Sender with @st into @c for @end_ms, a step a millisecond: link up and PLAYING at 0,
 * a chunk of 10 rows at each time in @chunks (its observation that many ms older), a tick at
 * every step but those @late names (the control thread is late). The receiver and the timeline
 * agree at every step. */
void
run_sender (TimelineCheck &c, const SenderSettings &st, const std::map<uint64_t, uint64_t> &chunks,
            uint64_t end_ms, const std::function<bool (uint64_t)> &late = nullptr)
{
  Sender s (st, counter_ids ());
  SenderOutput out;
  s.link (0, true, false, out);
  s.event (0, SenderEvent::kPlaying, out);
  c.deliver (0, out);
  const ChunkResult taken =
      st.mode == SendMode::kStream ? ChunkResult::kQueued : ChunkResult::kSent;
  uint64_t id = 1;
  std::string err;
  for (uint64_t ms = 0; ms <= end_ms; ms++) {
    const uint64_t now = ms * kMs;
    auto it = chunks.find (ms);
    if (it != chunks.end ()) {
      const auto v = ramp (10, 0.05f * (float)id, 0.02f);
      ASSERT_EQ (taken, s.chunk (now, chunk_of (v, 10, id, now - it->second * kMs), out, &err))
          << err;
      id++;
    }
    if (!late || !late (ms))
      s.tick (now, out);
    c.deliver (now, out);
    ASSERT_TRUE (c.agree (now));
  }
}

} // namespace

TEST (CommandTimeline, AgreesWithTheReceiverOnAChunkModeRunSplitIntoDatagrams)
{
  /* Chunk mode, each chunk one message for the timeline and two or three frames for the robot:
   * fresh and late chunks, one replacing the rest of another, the watchdog's HOLD (with the
   * position running then) and STOP, and a chunk after them. */
  SenderSettings st;
  st.mode = SendMode::kChunk;
  st.period_ns = 20 * kMs;
  st.hold_timeout_ns = 100 * kMs;
  st.stop_timeout_ns = 300 * kMs;
  st.max_frame_size = frame_size (4, 3, false);
  ASSERT_TRUE (validate (st, nullptr));
  TimelineCheck c (st.period_ns, false);
  ASSERT_NO_FATAL_FAILURE (
      run_sender (c, st, {{10, 3}, {95, 45}, {700, 10}, {760, 60}, {1500, 0}}, 2000));
  EXPECT_TRUE (c.agree_afterwards ());
  EXPECT_GE (c.frames, c.messages + 8) << "the chunks were split into datagrams";
  EXPECT_GT (c.rows, 30u);
  EXPECT_GE (c.holds, 2u) << "a HOLD with a position after each burst";
  EXPECT_GE (c.stops, 2u);
}

TEST (CommandTimeline, AgreesWithTheReceiverOnAChunkWhoseFramesComeApart)
{
  /* The frames of a chunk as messages of their own, the later ones delayed (one until after its
   * first row was due), a chunk whose first frame was lost, then a HOLD: each row runs where the
   * chunk's base puts it, not where its frame arrived. */
  SenderSettings st;
  st.mode = SendMode::kChunk;
  st.period_ns = 20 * kMs;
  st.max_frame_size = frame_size (4, 3, false);
  Sender s (st, counter_ids ());
  TimelineCheck c (st.period_ns, false);
  SenderOutput out;
  s.link (0, true, false, out);
  s.event (0, SenderEvent::kPlaying, out);
  std::multimap<uint64_t, OutFrame> wire; /* arrival (ms) -> frame */
  auto send = [&] (uint64_t ms, uint64_t id, const std::vector<uint64_t> &delays) {
    const auto v = ramp (10, 0.1f * (float)id, 0.01f);
    std::string err;
    ASSERT_EQ (ChunkResult::kSent, s.chunk (ms * kMs, chunk_of (v, 10, id, ms * kMs), out, &err))
        << err;
    size_t k = 0;
    for (OutFrame &f : out.frames) {
      if (f.header.kind != Kind::kAction) {
        wire.emplace (ms, std::move (f)); /* HELLO, the greeting HOLD */
        continue;
      }
      ASSERT_LT (k, delays.size ());
      if (delays[k] != UINT64_MAX)
        wire.emplace (ms + delays[k], std::move (f));
      k++;
    }
    out.clear ();
  };
  send (100, 1, {0, 30, 150});        /* rows 8, 9 (due at 260, 280) arrive at 250 */
  send (400, 2, {UINT64_MAX, 5, 90}); /* rows 0-3 lost: row 4 runs at 405; row 8, due at 485,
                                       * arrives at 490 */
  Header hold;
  hold.kind = Kind::kHold;
  hold.session_id = s.session_id ();
  hold.seq = s.seq () + 1;
  OutFrame hf;
  hf.header = hold;
  wire.emplace (520, hf);
  for (uint64_t ms = 0; ms <= 800; ms++) {
    const uint64_t now = ms * kMs;
    for (auto it = wire.lower_bound (ms); it != wire.upper_bound (ms); ++it)
      c.both (now, it->second);
    ASSERT_TRUE (c.agree (now));
  }
  const auto v1 = ramp (10, 0.1f, 0.01f);
  /* Rows 8 and 9 arrived at 250: row 7 (due at 240) goes on until row 8 is due. */
  EXPECT_EQ (*c.tl.at (255 * kMs), std::vector<float> (v1.begin () + 21, v1.begin () + 24));
  EXPECT_EQ (*c.tl.at (260 * kMs), std::vector<float> (v1.begin () + 24, v1.begin () + 27));
  const auto v2 = ramp (10, 0.2f, 0.01f);
  EXPECT_EQ (*c.tl.at (405 * kMs), std::vector<float> (v2.begin () + 12, v2.begin () + 15));
  EXPECT_EQ (*c.tl.at (440 * kMs), std::vector<float> (v2.begin () + 15, v2.begin () + 18));
  EXPECT_EQ (*c.tl.at (700 * kMs), *c.tl.at (519 * kMs)) << "HOLD: the robot stays";
}

TEST (CommandTimeline, AgreesWithTheReceiverOnAStreamModeRun)
{
  /* Stream mode: a row per tick from the newest chunk, one tick late (its row runs on receipt,
   * not where the chunk's rows would put it), the watchdog's HOLD (with the row last sent) and
   * STOP, and a chunk after them. */
  SenderSettings st = stream_settings ();
  TimelineCheck c (st.period_ns, true);
  /* The control thread is late from 160 to 167 ms: row 4 of chunk 2 leaves at 167. */
  ASSERT_NO_FATAL_FAILURE (run_sender (c, st, {{5, 5}, {105, 25}, {600, 0}}, 1200,
                                       [] (uint64_t ms) { return ms >= 160 && ms < 167; }));
  EXPECT_TRUE (c.agree_afterwards ());
  EXPECT_GT (c.rows, 15u);
  EXPECT_GE (c.holds, 2u);
  EXPECT_GE (c.stops, 2u);
}

/* ---- Property: the sender ----------------------------------------------------------------- */

namespace
{

/* An independent model of what the sender may send, written from docs/protocol.md: the robot
 * runs stream rows on receipt and row i of a chunk at observation + i·period (or, after a
 * report from the robot, at report.time + (i - report.row)·period); HOLD holds the row running
 * now; every row is within max_step of the row before it in that order. */
class SenderOracle
{
public:
  SenderOracle (const SenderSettings &s) : s_ (s)
  {
    if (s.robot && !s.robot->initial.empty ()) {
      pos_ = s.robot->initial;
    }
  }

  enum class Call { kTick, kChunk, kEvent, kLink };

  /* Checks one call's output. */
  void check (Call call, uint64_t now, const SenderOutput &out, ::testing::AssertionResult *res)
  {
    for (const OutFrame &f : out.frames) {
      if (!frame (call, now, f, res))
        return;
    }
    if (call == Call::kTick && now != kTimeNone) {
      /* HOLD and STOP at the first tick at or after their deadline. */
      if (hold_pending_ && now >= t_last_ + s_.hold_timeout_ns)
        return fail (res, "no HOLD at a tick after its deadline");
      if (stop_pending_ && now >= t_last_ + s_.stop_timeout_ns)
        return fail (res, "no STOP at a tick after its deadline");
    }
  }
  /* The sender's next deadline must not lie past a pending HOLD or STOP. */
  void check_deadline (uint64_t deadline, ::testing::AssertionResult *res)
  {
    if (hold_pending_ && deadline > t_last_ + s_.hold_timeout_ns)
      fail (res, "next_deadline() is past the HOLD deadline");
    if (stop_pending_ && deadline > t_last_ + s_.stop_timeout_ns)
      fail (res, "next_deadline() is past the STOP deadline");
  }
  void playing (uint64_t now)
  {
    t_last_ = now;
    stop_pending_ = true;
    paused_ = false;
  }
  void paused () { paused_ = true; }
  void link (bool up) { link_up_ = up; }
  void flushing (bool f) { flushing_ = f; }
  void feedback (const Feedback &fb)
  {
    if (s_.mode != SendMode::kChunk || plan_.empty () || fb.time_ns == kTimeNone)
      return;
    /* A report about any chunk of this session gives the robot's lag behind its schedule (row
     * `first` on receipt), at most max-action-age. */
    for (const Sent &c : sent_)
      if (c.chunk_id == fb.chunk_id && fb.row >= c.first && fb.row < c.limit) {
        const uint64_t due = c.at + (uint64_t)(fb.row - c.first) * s_.period_ns;
        lag_ = std::min<uint64_t> (fb.time_ns > due ? fb.time_ns - due : 0,
                                   s_.max_action_age_ns);
      }
    if (fb.chunk_id != plan_chunk_ || fb.row < plan_first_ ||
        fb.row - plan_first_ >= plan_.size () / dim ())
      return;
    anchor_ = fb;
  }
  uint64_t rows () const { return rows_; }
  uint64_t holds () const { return holds_; }
  uint64_t stops () const { return stops_; }

private:
  unsigned dim () const { return s_.robot ? s_.robot->dim () : 3; }
  void fail (::testing::AssertionResult *res, const std::string &why)
  {
    if (*res)
      *res = ::testing::AssertionFailure () << why;
  }

  /* The row the robot runs at @t, by the sender's picture of it (nullptr: unknown). */
  const float *position (uint64_t t) const
  {
    const unsigned d = dim ();
    if (!plan_.empty ()) {
      const uint64_t n = plan_.size () / d;
      uint64_t j = plan_first_; /* with no time known: the first row sent */
      if (t != kTimeNone && anchor_)
        j = anchor_->row + (t > anchor_->time_ns ? (t - anchor_->time_ns) / s_.period_ns : 0);
      else if (t != kTimeNone && t > plan_sent_ + lag_)
        j = plan_first_ + (t - plan_sent_ - lag_) / s_.period_ns;
      j = std::min (std::max<uint64_t> (j, plan_first_), plan_first_ + n - 1);
      return plan_.data () + (j - plan_first_) * d;
    }
    return pos_.empty () ? nullptr : pos_.data ();
  }

  /* What a new chunk's first row or a stream row is bounded against: the row running now, or
   * after an episode start with nothing commanded since, the state measured at the chunk's
   * observation (a HOLD then has no position: position() is nullptr). */
  const float *reference (uint64_t t) const
  {
    const float *p = position (t);
    if (!p && episode_ && !measured_.empty ())
      return measured_.data ();
    return p;
  }

  bool row_ok (const float *row, const float *prev, ::testing::AssertionResult *res)
  {
    const unsigned d = dim ();
    for (unsigned j = 0; j < d; j++) {
      if (!std::isfinite (row[j])) {
        fail (res, "non-finite value sent");
        return false;
      }
      if (!s_.robot)
        continue;
      if (row[j] < s_.robot->lower[j] || row[j] > s_.robot->upper[j]) {
        fail (res, "value outside the joint limits sent");
        return false;
      }
      if (prev && !exact_within (row[j], prev[j], s_.robot->max_step[j])) {
        fail (res, "step over max_step sent: joint " + std::to_string (j) + " " +
                       std::to_string (prev[j]) + " -> " + std::to_string (row[j]));
        return false;
      }
    }
    return true;
  }

  bool frame (Call call, uint64_t now, const OutFrame &f, ::testing::AssertionResult *res)
  {
    const Header &h = f.header;
    const unsigned d = dim ();
    /* Sessions and sequence numbers. */
    if (!have_session_ || h.session_id != session_) {
      /* seq 1, and HELLO first on a link that is up (frames made while it is down are dropped
       * by the transport; the session is announced when it comes up). Before the dimension is
       * known (no configuration, no chunk yet) there is no HELLO, and HOLD and STOP carry no
       * row. */
      if (h.seq != 1 || (link_up_ && h.kind != Kind::kHello &&
                         (s_.robot || h.kind == Kind::kAction || h.steps > 0))) {
        fail (res, std::string ("a session must start with HELLO, seq 1; got ") +
                       kind_name (h.kind) + " seq " + std::to_string (h.seq) +
                       (link_up_ ? " link up" : " link down"));
        return false;
      }
      have_session_ = true;
      session_ = h.session_id;
      sent_.clear ();
      lag_ = 0;
    } else if (h.seq != seq_ + 1) {
      fail (res, "seq must grow by one within a session");
      return false;
    }
    seq_ = h.seq;
    if (f.values.size () != (size_t)h.steps * d && h.kind != Kind::kHello) {
      fail (res, "payload size does not match the header");
      return false;
    }
    switch (h.kind) {
      case Kind::kHello:
        after_hello_ = true;
        return true;
      case Kind::kHold: {
        const bool greeting = after_hello_;
        after_hello_ = false;
        const float *p = position (now);
        if (h.steps == 1) {
          if (!row_ok (f.values.data (), nullptr, res))
            return false;
          if (!p || !std::equal (f.values.begin (), f.values.end (), p)) {
            fail (res, "HOLD does not hold the row running now");
            return false;
          }
          pos_ = f.values;
        } else if (p) {
          fail (res, "HOLD without a position although one is known");
          return false;
        }
        plan_.clear ();
        anchor_.reset ();
        mid_chunk_ = false;
        if (!greeting) {
          holds_++;
          if (call == Call::kTick) {
            if (!hold_pending_ || now < t_last_ + s_.hold_timeout_ns) {
              fail (res, "watchdog HOLD before its deadline");
              return false;
            }
          } else if (call != Call::kEvent) {
            fail (res, "HOLD outside a tick, an event or a greeting");
            return false;
          }
          hold_pending_ = false;
        }
        return true;
      }
      case Kind::kStop:
        after_hello_ = false;
        if (call != Call::kTick || !stop_pending_ || now < t_last_ + s_.stop_timeout_ns) {
          fail (res, "STOP before its deadline or outside a tick");
          return false;
        }
        stops_++;
        stop_pending_ = hold_pending_ = false;
        stopped_ = true;
        return true;
      case Kind::kFeedback:
        fail (res, "the sender sent a FEEDBACK (robot -> sender only)");
        return false;
      case Kind::kAction:
        break;
    }
    after_hello_ = false;
    if (flushing_ || paused_ || now == kTimeNone) {
      fail (res, "ACTION while flushing, paused or without a clock");
      return false;
    }
    if (stopped_ && call == Call::kTick) {
      fail (res, "ACTION after STOP without a fresh chunk");
      return false;
    }
    const uint64_t obs = h.observation_time_ns;
    if (obs <= now && now - obs > s_.max_action_age_ns) {
      fail (res, "ACTION older than max-action-age");
      return false;
    }
    if (obs <= now && h.step_index < (now - obs) / s_.period_ns && !mid_chunk_) {
      fail (res, "a row already in the past was sent");
      return false;
    }
    rows_ += h.steps;
    if (h.flags & kFlagStream) {
      if (h.steps != 1 || s_.mode != SendMode::kStream) {
        fail (res, "stream frames carry one row, in stream mode");
        return false;
      }
      if (!row_ok (f.values.data (), reference (now), res))
        return false;
      pos_ = f.values;
      plan_.clear ();
      episode_ = false;
      const uint64_t due = obs + (uint64_t)h.step_index * s_.period_ns;
      t_last_ = std::min (due, now);
    } else {
      if (s_.mode != SendMode::kChunk) {
        fail (res, "chunk frame in stream mode");
        return false;
      }
      const float *prev = nullptr;
      if (mid_chunk_) {
        if (h.chunk_id != plan_chunk_ || h.step_index != next_step_) {
          fail (res, "frames of a split chunk out of order");
          return false;
        }
        prev = plan_.data () + plan_.size () - d;
      } else {
        std::vector<float> ref;
        if (const float *p = reference (now))
          ref.assign (p, p + d);
        episode_ = false;
        plan_.clear ();
        anchor_.reset ();
        plan_first_ = h.step_index;
        plan_obs_ = obs;
        plan_sent_ = now;
        plan_chunk_ = h.chunk_id;
        sent_.push_back ({h.chunk_id, h.step_index, h.chunk_steps, now});
        if (sent_.size () > kFeedbackHistory)
          sent_.pop_front ();
        pos_ref_ = ref;
        prev = pos_ref_.empty () ? nullptr : pos_ref_.data ();
      }
      for (uint32_t r = 0; r < h.steps; r++) {
        const float *row = f.values.data () + (size_t)r * d;
        if (!row_ok (row, prev, res))
          return false;
        plan_.insert (plan_.end (), row, row + d);
        prev = plan_.data () + plan_.size () - d;
      }
      next_step_ = h.step_index + h.steps;
      mid_chunk_ = !(h.flags & kFlagLast);
      if (!mid_chunk_) {
        const uint64_t last = h.chunk_steps - 1;
        t_last_ = std::min (obs + last * s_.period_ns, now + (last - plan_first_) * s_.period_ns);
      }
    }
    hold_pending_ = stop_pending_ = true;
    stopped_ = false;
    return true;
  }

public:
  void fresh_chunk () { stopped_ = false; }
  /* A chunk was taken (sent or queued) with this measured state (nullptr: none): after an
   * episode start, the reference of the next row sent. */
  void chunk_taken (const float *measured)
  {
    if (measured)
      measured_.assign (measured, measured + dim ());
    else
      measured_.clear ();
  }
  /* An episode starts: what was commanded (and `initial`) bounds nothing any more. */
  void episode ()
  {
    plan_.clear ();
    anchor_.reset ();
    pos_.clear ();
    mid_chunk_ = false;
    episode_ = true;
  }

private:
  SenderSettings s_;
  std::vector<float> measured_; /* the last chunk taken's measured state, or empty */
  bool episode_ = false;        /* an episode started and no action was sent since */
  bool have_session_ = false;
  uint64_t session_ = 0, seq_ = 0;
  bool after_hello_ = false;
  std::vector<float> pos_;
  std::vector<float> plan_, pos_ref_;
  uint32_t plan_first_ = 0, next_step_ = 0;
  uint64_t plan_obs_ = 0, plan_chunk_ = 0, plan_sent_ = 0;
  struct Sent {
    uint64_t chunk_id;
    uint32_t first, limit;
    uint64_t at;
  };
  std::deque<Sent> sent_; /* the chunks of this session, as the sender keeps them */
  uint64_t lag_ = 0;
  std::optional<Feedback> anchor_;
  bool mid_chunk_ = false;
  bool hold_pending_ = false, stop_pending_ = false, stopped_ = false;
  uint64_t t_last_ = 0;
  bool flushing_ = false, paused_ = true, link_up_ = true;
  uint64_t rows_ = 0, holds_ = 0, stops_ = 0;
};

/* Random chunk values: a walk inside the limits with jumps, values outside them, and now and
 * then NaN, ±Inf or a huge value. */
std::vector<float>
random_chunk (std::mt19937_64 &rng, uint32_t horizon, bool poison)
{
  std::uniform_real_distribution<float> u (-1.f, 1.f);
  std::vector<float> v ((size_t)horizon * 3);
  float x[3] = {u (rng), 2 * u (rng), 0.25f + 0.25f * u (rng)};
  for (uint32_t i = 0; i < horizon; i++) {
    for (int j = 0; j < 3; j++) {
      const unsigned r = rng () % 100;
      if (r < 70)
        x[j] += 0.08f * u (rng);
      else if (r < 90)
        x[j] = 3 * u (rng); /* jumps, often outside the limits */
      else if (r < 95)
        x[j] = 1e30f * u (rng);
      v[(size_t)i * 3 + j] = x[j];
    }
  }
  if (poison) {
    const float bad[] = {kNaN, -kNaN, kInf, -kInf, std::numeric_limits<float>::signaling_NaN ()};
    for (unsigned k = 0, n = 1 + rng () % 3; k < n; k++)
      v[rng () % v.size ()] = bad[rng () % 5];
  }
  return v;
}

SenderSettings
random_sender_settings (std::mt19937_64 &rng)
{
  SenderSettings s;
  s.mode = rng () % 2 ? SendMode::kStream : SendMode::kChunk;
  const uint64_t periods[] = {5 * kMs, 10 * kMs, 20 * kMs, 33 * kMs};
  s.period_ns = periods[rng () % 4];
  s.execute_steps = rng () % 3 ? 0 : 1 + (uint32_t)(rng () % 30);
  s.max_action_age_ns = (100 + rng () % 900) * kMs;
  s.hold_timeout_ns = s.period_ns * (1 + rng () % 10);
  s.stop_timeout_ns = s.hold_timeout_ns + s.period_ns * (rng () % 20);
  const unsigned c = rng () % 10;
  if (c < 5)
    s.robot = robot (kRobot);
  else if (c < 9)
    s.robot = robot (kRobotInitial);
  /* else: no configuration (allow-unlimited): finiteness only */
  s.hmac = rng () % 2;
  if (rng () % 3 == 0)
    s.max_frame_size = frame_size (1 + rng () % 6, 3, s.hmac); /* split into small datagrams */
  return s;
}

/* One random session of @events events; the first property broken is left in @res. */
void
run_sender_sequence (uint64_t seed, int events, ::testing::AssertionResult *res,
                     std::map<std::string, uint64_t> &cov)
{
  std::mt19937_64 rng (seed);
  SenderSettings st = random_sender_settings (rng);
  st.key = st.hmac ? "k" : "";
  Sender snd (st, counter_ids (seed << 8));
  SenderOracle oracle (st);
  SenderOutput out;
  uint64_t now = (rng () % 1000) * kMs;
  bool playing = false, flushing = false, link_up = true;
  uint64_t chunk_id = 0, fb_seq = 0;
  std::vector<uint8_t> last_taken; /* a report taken, to replay */
  std::string err;
  auto done = [&] (SenderOracle::Call call, uint64_t t) {
    oracle.check (call, t, out, res);
    out.clear ();
    if (playing)
      oracle.check_deadline (snd.next_deadline (), res);
    return (bool)*res;
  };
  snd.link (kTimeNone, link_up, false, out);
  if (!done (SenderOracle::Call::kLink, kTimeNone))
    return;
  for (int e = 0; e < events; e++) {
    const unsigned r = rng () % 100;
    if (!playing) {
      if (r < 40) {
        playing = true;
        now += (rng () % 500) * kMs;
        snd.event (now, SenderEvent::kPlaying, out);
        oracle.playing (now);
        cov["play"]++;
        if (!done (SenderOracle::Call::kEvent, now))
          return;
      } else if (r < 80) {
        /* Rendered while paused (preroll): no clock, nothing may move. */
        const auto v = random_chunk (rng, 1 + rng () % 20, false);
        snd.chunk (kTimeNone, chunk_of (v, (uint32_t)(v.size () / 3), ++chunk_id, now), out, &err);
        if (!done (SenderOracle::Call::kChunk, kTimeNone))
          return;
      } else {
        link_up = rng () % 2;
        oracle.link (link_up);
        snd.link (kTimeNone, link_up, link_up && rng () % 2, out);
        if (!done (SenderOracle::Call::kLink, kTimeNone))
          return;
      }
      continue;
    }
    if (r < 40) {
      /* The control thread wakes at the deadline, up to one period late. */
      const uint64_t d = snd.next_deadline ();
      now = std::max (now, d + (rng () % 4 == 0 ? rng () % st.period_ns : 0));
      snd.tick (now, out);
      cov["tick"]++;
      if (!done (SenderOracle::Call::kTick, now))
        return;
    } else if (r < 72) {
      now += rng () % st.period_ns;
      const uint32_t horizon = 1 + (uint32_t)(rng () % 60);
      const bool poison = rng () % 8 == 0;
      auto v = random_chunk (rng, horizon, poison);
      uint64_t obs;
      const unsigned o = rng () % 100;
      if (o < 75)
        obs = now - std::min<uint64_t> (now, (rng () % 300) * kMs); /* a little late */
      else if (o < 85)
        obs = now + (rng () % 2000) * kMs; /* in the future */
      else if (o < 97)
        obs = now - std::min<uint64_t> (now, (rng () % 3000) * kMs); /* often stale */
      else
        obs = kTimeNone;
      ChunkIn c = chunk_of (v, horizon, ++chunk_id, obs);
      c.flagged_non_finite = rng () % 50 == 0;
      /* The state measured at the observation, within the limits, sometimes absent. */
      std::vector<float> measured;
      if (st.robot && rng () % 4) {
        for (unsigned j = 0; j < st.robot->dim (); j++) {
          const float lo = st.robot->lower[j], hi = st.robot->upper[j];
          measured.push_back (lo + (hi - lo) * (float)(rng () % 1001) / 1000.f);
        }
        c.measured = measured.data ();
      }
      if (st.robot && rng () % 100 == 0)
        c.dim = 2, c.horizon = (uint32_t)(v.size () / 2); /* wrong shape: an error, nothing sent */
      const ChunkResult cr = snd.chunk (now, c, out, &err);
      cov[cr == ChunkResult::kSent       ? "chunk-sent"
          : cr == ChunkResult::kQueued   ? "chunk-queued"
          : cr == ChunkResult::kRejected ? "chunk-rejected"
          : cr == ChunkResult::kStale    ? "chunk-stale"
          : cr == ChunkResult::kIgnored  ? "chunk-ignored"
                                         : "chunk-error"]++;
      if ((poison || c.flagged_non_finite) &&
          (cr == ChunkResult::kSent || cr == ChunkResult::kQueued))
        *res = ::testing::AssertionFailure () << "a non-finite chunk was accepted";
      if (cr == ChunkResult::kSent || cr == ChunkResult::kQueued) {
        oracle.fresh_chunk ();
        oracle.chunk_taken (c.measured);
      }
      if (!done (SenderOracle::Call::kChunk, now))
        return;
    } else if (r < 78) {
      now += (rng () % 5000) * kMs; /* the clock jumps: the control thread was starved */
      snd.tick (now, out);
      cov["jump"]++;
      if (!done (SenderOracle::Call::kTick, now))
        return;
    } else if (r < 84 && rng () % 2) {
      Feedback fb;
      fb.chunk_id = chunk_id - rng () % 2;
      fb.row = (uint32_t)(rng () % 40);
      fb.time_ns = rng () % 10 ? now - std::min<uint64_t> (now, (rng () % 200) * kMs) : kTimeNone;
      snd.feedback (now, fb);
      oracle.feedback (fb);
      cov["feedback"]++;
    } else if (r < 84) {
      /* The robot's FEEDBACK on the wire, from a robot that may lie, replay, forge or corrupt:
       * whatever is taken goes to the oracle's picture too, and the next outputs must still be
       * safe and HOLD hold the row the rules say. A report never makes the sender send. */
      Header h;
      h.kind = rng () % 20 ? Kind::kFeedback : Kind::kStop; /* a STOP reflected back */
      h.session_id = rng () % 8 ? snd.session_id () : rng () % 3;
      h.seq = rng () % 8 ? ++fb_seq : rng () % 4;
      h.chunk_id = chunk_id - rng () % 3;
      h.step_index = (uint32_t)(rng () % 40);
      h.send_time_ns = rng () % 10 ? now - std::min<uint64_t> (now, (rng () % 300) * kMs) : rng ();
      h.observation_time_ns = rng () % 30 ? kTimeNone : now;
      if (h.kind == Kind::kStop)
        h.step_index = 0, h.observation_time_ns = kTimeNone;
      std::vector<uint8_t> b;
      encode (h, nullptr, rng () % 10 ? st.key : "x", b);
      if (rng () % 10 == 0)
        b[rng () % b.size ()] ^= (uint8_t)(1u << (rng () % 8));
      if (rng () % 20 == 0)
        b.resize (rng () % b.size ());
      if (!last_taken.empty () && rng () % 2 == 0)
        b = last_taken; /* a replay */
      const char *why = snd.robot_frame (now, b.data (), b.size (), out);
      if (!why)
        last_taken = b;
      Frame taken;
      if (!why) {
        if (decode (b.data (), b.size (), Limits (), st.key, &taken) != Error::kOk ||
            out.executing.size () != 1)
          *res = ::testing::AssertionFailure () << "a report was taken that does not decode";
        else
          oracle.feedback (
              {taken.header.chunk_id, taken.header.step_index, taken.header.send_time_ns});
      }
      cov[std::string ("robot-") + (why ? why : "taken")]++;
      if (!out.frames.empty () || !out.sent.empty ())
        *res = ::testing::AssertionFailure () << "a robot frame made the sender send";
      out.clear ();
      if (!*res)
        return;
    } else if (r < 88) {
      playing = false;
      snd.event (now, SenderEvent::kPaused, out);
      oracle.paused ();
      cov["pause"]++;
      if (!done (SenderOracle::Call::kEvent, now))
        return;
    } else if (r < 92) {
      flushing = !flushing;
      snd.event (now, flushing ? SenderEvent::kFlushStart : SenderEvent::kFlushStop, out);
      oracle.flushing (flushing);
      cov["flush"]++;
      if (!done (SenderOracle::Call::kEvent, now))
        return;
    } else if (r < 94) {
      snd.event (now, SenderEvent::kEos, out);
      cov["eos"]++;
      if (!done (SenderOracle::Call::kEvent, now))
        return;
    } else if (r < 96) {
      /* An episode starts (pi0-episode): the robot may be anywhere now. */
      snd.event (now, SenderEvent::kEpisode, out);
      oracle.episode ();
      cov["episode"]++;
      if (!done (SenderOracle::Call::kEvent, now))
        return;
    } else {
      /* Link down, up, or a reconnection (a new session). */
      const bool reconnect = rng () % 2;
      link_up = reconnect || rng () % 2;
      oracle.link (link_up);
      snd.link (now, link_up, reconnect, out);
      cov[reconnect ? "reconnect" : "link"]++;
      if (!done (SenderOracle::Call::kLink, now))
        return;
    }
  }
  cov["rows"] += oracle.rows ();
  cov["holds"] += oracle.holds ();
  cov["stops"] += oracle.stops ();
  cov["clamped"] += snd.counters ().clamped;
}

void
print_coverage (const char *what, const std::map<std::string, uint64_t> &cov)
{
  std::string line;
  for (auto &kv : cov)
    line += " " + kv.first + "=" + std::to_string (kv.second);
  printf ("%s:%s\n", what, line.c_str ());
}

} // namespace

TEST (SessionProperty, SenderNeverSendsAnUnsafeActionAndHoldsAndStopsOnTime)
{
  std::map<std::string, uint64_t> cov;
  const int kSequences = 10000, kEvents = 150; /* 1.5·10^6 events */
  for (int i = 0; i < kSequences; i++) {
    ::testing::AssertionResult res = ::testing::AssertionSuccess ();
    run_sender_sequence (1000 + (uint64_t)i, kEvents, &res, cov);
    ASSERT_TRUE (res) << "sequence seed " << 1000 + i;
  }
  print_coverage ("sender", cov);
  /* The sequences must really have exercised what they claim to. */
  for (const char *k : {"chunk-sent", "chunk-queued", "chunk-rejected", "chunk-stale",
                        "chunk-ignored", "chunk-error", "holds", "stops", "clamped", "reconnect",
                        "feedback", "jump", "rows", "episode"})
    EXPECT_GT (cov[k], 1000u) << k;
  for (const char *k :
       {"robot-taken", "robot-not-chunk-mode", "robot-wrong-session", "robot-old-seq",
        "robot-unknown-chunk", "robot-bad-row", "robot-too-early", "robot-future", "robot-bad-crc",
        "robot-bad-hmac", "robot-not-feedback", "robot-bad-field", "robot-truncated"})
    EXPECT_GT (cov[k], 100u) << k;
}

/* ---- Property: the receiver --------------------------------------------------------------- */

namespace
{

/* What a robot may do, written from docs/protocol.md's receiver rules: it executes only
 * finite rows within its limits, each within max_step of the row before it in time; a HOLD,
 * STOP, stream row, new chunk or new session drops every row not yet run; within the current
 * session seq only grows (by at most kMaxSeqJump); a replaced session never comes back; and a
 * frame that keeps every rule is never refused. */
void
run_receiver_sequence (uint64_t seed, int frames, ::testing::AssertionResult *res,
                       std::map<std::string, uint64_t> &cov)
{
  std::mt19937_64 rng (seed);
  ReceiverSettings rs;
  rs.key = rng () % 4 == 0 ? "robot key" : ""; /* HMAC is most of the cost: 1 in 4 */
  rs.robot = robot (rng () % 2 ? kRobot : kRobotInitial);
  if (rng () % 2) {
    rs.hold_timeout_ns = (10 + rng () % 200) * kMs;
    rs.stop_timeout_ns = rs.hold_timeout_ns + (rng () % 300) * kMs;
  }
  const RobotConfig &cfg = *rs.robot;
  Receiver rx (rs);
  Received r;
  std::vector<WatchdogEvent> wd;
  auto fail = [&] (const std::string &why) {
    if (*res)
      *res = ::testing::AssertionFailure () << why;
  };

  /* The test's own picture: the rows still to run and what ran last. */
  std::vector<std::pair<uint64_t, std::vector<float>>> pending;
  std::vector<float> ran = cfg.initial;
  auto run_until = [&] (uint64_t t) {
    size_t k = 0;
    while (k < pending.size () && pending[k].first <= t)
      ran = pending[k++].second;
    pending.erase (pending.begin (), pending.begin () + (long)k);
  };
  bool have_current = false;
  uint64_t current = 0, last_seq = 0;
  std::set<uint64_t> retired;
  uint64_t t_cmd = 0;
  bool commanded = false, hold_pending = false, stop_pending = false;

  std::vector<uint64_t> pool = {1 + rng () % 1000000}; /* sender sessions; the last is live */
  std::map<uint64_t, uint64_t> next_seq;
  uint64_t chunk = 1;
  uint32_t chunk_next = 0, chunk_steps = 0;
  uint64_t now = 0;
  std::uniform_real_distribution<float> u (-1.f, 1.f);
  float walk[3] = {0, 0.5f, 0.25f};

  bool chunk_active = false; /* the receiver's current chunk, as the rules say */
  uint64_t chunk_active_id = 0;
  for (int i = 0; i < frames && *res; i++) {
    const uint64_t before_now = now;
    now += rng () % 8 == 0 ? (rng () % 3000) * kMs : (rng () % 30) * kMs;
    /* The robot's watchdog ticks now and then, sometimes right at its deadline. */
    if (rng () % 3 == 0) {
      const uint64_t d = rx.next_deadline ();
      const uint64_t t = d != kTimeNone && d >= before_now && d <= now && rng () % 2 ? d : now;
      wd.clear ();
      rx.tick (t, wd);
      run_until (t);
      bool held = false, stopped = false;
      for (auto &ev : wd) {
        held |= ev.kind == Kind::kHold;
        stopped |= ev.kind == Kind::kStop;
        if (ev.at_ns > t)
          fail ("watchdog event before its deadline");
      }
      const bool hold_due =
          commanded && hold_pending && rs.hold_timeout_ns && t >= t_cmd + rs.hold_timeout_ns;
      const bool stop_due =
          commanded && stop_pending && rs.stop_timeout_ns && t >= t_cmd + rs.stop_timeout_ns;
      if (held != hold_due || stopped != stop_due)
        fail ("the robot's watchdog did not act at the first tick after its deadline: t=" +
              std::to_string (t) + " t_cmd=" + std::to_string (t_cmd) +
              " held=" + std::to_string (held) + "/" + std::to_string (hold_due) +
              " stopped=" + std::to_string (stopped) + "/" + std::to_string (stop_due) + " frame " +
              std::to_string (i));
      if (held || stopped)
        pending.clear (), chunk_active = false;
      if (held)
        hold_pending = false, cov["wd-hold"]++;
      if (stopped)
        stop_pending = hold_pending = false, cov["wd-stop"]++;
    }
    /* A frame: mostly what a sender would send, sometimes anything. */
    Header h;
    if (rng () % 50 == 0)
      pool.push_back (1 + rng () % 1000000); /* a sender (re)starts */
    const uint64_t session = rng () % 100 < 85 ? pool.back () : pool[rng () % pool.size ()];
    const unsigned k = rng () % 100;
    h.kind = k < 75 ? Kind::kAction : k < 87 ? Kind::kHold : k < 92 ? Kind::kStop : Kind::kHello;
    h.session_id = rng () % 200 ? session : 0;
    uint64_t &ns = next_seq[session];
    const unsigned q = rng () % 100;
    if (q < 80)
      h.seq = ++ns;
    else if (q < 88)
      h.seq = ns; /* a duplicate */
    else if (q < 92)
      h.seq = ns - std::min<uint64_t> (ns, rng () % 10);
    else if (q < 95)
      h.seq = ns + 2 + rng () % 100; /* a gap: frames lost */
    else
      h.seq = std::vector<uint64_t>{
          0, UINT64_MAX, kMaxSeq, kMaxSeq + 1, ns + kMaxSeqJump + 1, ns + kMaxSeqJump}[rng () % 6];
    h.dim = 3;
    h.step_period_ns = rng () % 50 ? (1 + rng () % 30) * kMs
                                   : std::vector<uint64_t>{0, kMaxStepPeriod, kMaxStepPeriod + 1,
                                                           1ull << 62}[rng () % 4];
    std::vector<float> v;
    if (h.kind == Kind::kAction) {
      const bool stream = rng () % 2;
      h.flags = stream ? kFlagStream | kFlagLast : 0;
      if (stream) {
        h.steps = 1;
        h.chunk_steps = 1;
        h.chunk_id = ++chunk;
      } else {
        if (chunk_next >= chunk_steps || rng () % 4 == 0) {
          chunk++;
          chunk_steps = 1 + (uint32_t)(rng () % 50);
          chunk_next = (uint32_t)(rng () % chunk_steps);
        }
        h.chunk_id = chunk;
        h.step_index = rng () % 20 ? chunk_next : (uint32_t)(rng () % chunk_steps);
        h.steps = (uint16_t)(1 + rng () % (chunk_steps - h.step_index));
        h.chunk_steps = chunk_steps;
        chunk_next = h.step_index + h.steps;
        if (chunk_next == chunk_steps)
          h.flags |= kFlagLast;
      }
    } else if (h.kind == Kind::kHold) {
      h.steps = rng () % 2;
      h.chunk_steps = h.steps;
      h.dim = h.steps ? 3 : 0;
    } else if (h.kind == Kind::kStop) {
      h.dim = 0;
    }
    for (uint32_t s = 0; s < h.steps; s++) {
      for (int j = 0; j < 3; j++) {
        const unsigned c = rng () % 100;
        if (c < 80)
          walk[j] = std::min (cfg.upper[j], std::max (cfg.lower[j], walk[j] + 0.2f * u (rng)));
        v.push_back (c < 80 ? walk[j] : c < 95 ? 3 * u (rng) : c < 98 ? kNaN : kInf);
      }
    }
    const unsigned a = rng () % 100;
    const std::string key = a < 95 ? rs.key : a < 98 ? "" : "wrong key";
    std::vector<uint8_t> bytes = encoded (h, v, key);
    const bool corrupted = rng () % 100 == 0;
    if (corrupted)
      bytes[rng () % bytes.size ()] ^= (uint8_t)(1 + rng () % 255);

    /* Would a robot accept it? (The test's own reading of the rules.) */
    bool valid = !corrupted && key == rs.key && h.seq >= 1 && h.seq <= kMaxSeq && h.session_id != 0;
    for (float x : v)
      valid = valid && std::isfinite (x);
    for (size_t n = 0; n < v.size (); n++)
      valid = valid && v[n] >= cfg.lower[n % 3] && v[n] <= cfg.upper[n % 3];
    const bool same = have_current && h.session_id == current;
    if (same)
      valid = valid && h.seq > last_seq && h.seq - last_seq <= kMaxSeqJump;
    else
      valid = valid && !retired.count (h.session_id);
    if (h.kind == Kind::kAction)
      valid = valid && h.step_period_ns != 0 && h.step_period_ns <= kMaxStepPeriod;
    const std::vector<float> before = rx.position (now);
    run_until (now);
    if (!ran.empty () && before != ran)
      fail ("the robot ran rows that should have been dropped");
    rx.receive (now, bytes.data (), bytes.size (), r);
    if (!r.reject) {
      cov["accepted"]++;
      if (h.seq == 0 || h.seq > kMaxSeq || h.session_id == 0)
        fail ("a frame with seq 0, seq > kMaxSeq or session 0 was accepted");
      if (same && (h.seq <= last_seq || h.seq - last_seq > kMaxSeqJump))
        fail ("seq rule broken");
      if (!same && retired.count (h.session_id))
        fail ("a replaced session came back");
      if (!same) {
        if (have_current)
          retired.insert (current);
        have_current = true;
        current = h.session_id;
        pending.clear ();
        chunk_active = false;
      }
      last_seq = h.seq;
    } else {
      cov[std::string ("reject-") + r.reject]++;
      if (valid && h.kind != Kind::kAction)
        fail (std::string ("a valid frame was refused: ") + r.reject);
      if (valid && h.kind == Kind::kAction && strcmp (r.reject, "step-order") != 0)
        fail (std::string ("a valid frame was refused: ") + r.reject);
      continue;
    }
    switch (h.kind) {
      case Kind::kHold:
        pending.clear ();
        chunk_active = false;
        if (!r.hold.empty ()) {
          for (unsigned j = 0; j < 3; j++) {
            if (!ran.empty () && !exact_within (r.hold[j], ran[j], cfg.max_step[j]))
              fail ("HOLD moved the robot more than max_step");
          }
          ran = r.hold;
        }
        hold_pending = false;
        break;
      case Kind::kStop:
        pending.clear ();
        chunk_active = false;
        hold_pending = stop_pending = false;
        break;
      case Kind::kHello:
        break;
      case Kind::kFeedback:
        fail ("a FEEDBACK was accepted by a robot");
        break;
      case Kind::kAction: {
        /* Rows of the chunk being run are added after its pending rows; anything else (a
         * stream row, a new chunk) replaces them. */
        const bool continues =
            !(h.flags & kFlagStream) && chunk_active && chunk_active_id == h.chunk_id;
        if (!continues)
          pending.clear ();
        chunk_active = !(h.flags & kFlagStream);
        chunk_active_id = h.chunk_id;
        std::vector<float> prev = pending.empty () ? ran : pending.back ().second;
        for (const ExecRow &row : r.rows) {
          for (unsigned j = 0; j < 3; j++) {
            if (!std::isfinite (row.values[j]) || row.values[j] < cfg.lower[j] ||
                row.values[j] > cfg.upper[j])
              fail ("an unsafe row was scheduled");
            if (!prev.empty () && !exact_within (row.values[j], prev[j], cfg.max_step[j]))
              fail ("a row over max_step was scheduled");
          }
          cov["rows"]++;
          cov["limited"] += row.limited;
          prev = row.values;
          pending.push_back ({row.at_ns, row.values});
        }
        run_until (now);
        t_cmd = std::max (now, r.rows.back ().at_ns);
        commanded = true;
        hold_pending = stop_pending = true;
        break;
      }
    }
  }
}

} // namespace

TEST (SessionProperty, ReceiverNeverExecutesAnUnsafeRowAndNeverLocksOut)
{
  std::map<std::string, uint64_t> cov;
  const int kSequences = 3000, kFrames = 400; /* 1.2·10^6 frames */
  for (int i = 0; i < kSequences; i++) {
    ::testing::AssertionResult res = ::testing::AssertionSuccess ();
    run_receiver_sequence (5000 + (uint64_t)i, kFrames, &res, cov);
    ASSERT_TRUE (res) << "sequence seed " << 5000 + i;
  }
  print_coverage ("receiver", cov);
  for (const char *k :
       {"accepted", "rows", "limited", "wd-hold", "wd-stop", "reject-old-seq", "reject-old-session",
        "reject-bad-seq", "reject-seq-jump", "reject-limit", "reject-non-finite", "reject-bad-crc",
        "reject-hmac-missing", "reject-bad-period", "reject-step-order", "reject-bad-session"})
    EXPECT_GT (cov[k], 100u) << k;
}

/* ---- Property: sender and receiver chained ------------------------------------------------ */

/* 300 random sender events after the link comes up and the pipeline plays: control ticks,
 * chunks (a tenth of them with NaN/Inf/out-of-limit values, late by up to 0.1 s), pauses of up to
 * 2 s, reconnects; @transmit after each. Stops early when @failure becomes non-empty. */
template <typename Transmit>
void
random_sender_run (Sender &snd, const SenderSettings &st, std::mt19937_64 &rng, uint64_t &now,
                   SenderOutput &out, Transmit &&transmit, const std::string *failure)
{
  uint64_t chunk_id = 0;
  std::string err;
  snd.link (0, true, false, out);
  snd.event (0, SenderEvent::kPlaying, out);
  transmit ();
  for (int e = 0; e < 300 && (!failure || failure->empty ()); e++) {
    const unsigned k = rng () % 10;
    if (k < 5) {
      now = std::max (now, snd.next_deadline ());
      snd.tick (now, out);
    } else if (k < 8) {
      now += rng () % st.period_ns;
      const uint32_t horizon = 1 + (uint32_t)(rng () % 50);
      auto v = random_chunk (rng, horizon, rng () % 10 == 0);
      snd.chunk (now, chunk_of (v, horizon, ++chunk_id, now - std::min (now, (rng () % 100) * kMs)),
                 out, &err);
    } else if (k < 9) {
      now += (rng () % 2000) * kMs;
      snd.tick (now, out);
    } else {
      snd.link (now, true, rng () % 4 == 0, out);
    }
    transmit ();
  }
}

TEST (SessionProperty, WhatTheSenderSendsTheReceiverAccepts)
{
  /* Frames go from a Sender to a Receiver through a lossy link (lost, duplicated and swapped
   * frames, delays): the receiver refuses nothing but duplicates and late frames, never
   * executes an unsafe row, and in stream mode over a perfect link executes exactly what was
   * sent, without having to limit anything. */
  std::map<std::string, uint64_t> cov;
  for (int i = 0; i < 2000; i++) { /* 6·10^5 events */
    std::mt19937_64 rng (9000 + (uint64_t)i);
    SenderSettings st = random_sender_settings (rng);
    st.robot = robot (kRobotInitial);
    const std::string key = st.hmac ? "k" : "";
    const bool lossy = rng () % 2;
    Sender snd (st, counter_ids ((uint64_t)i << 8));
    ReceiverSettings rs;
    rs.key = key;
    rs.robot = st.robot;
    Receiver rx (rs);
    Received r;
    SenderOutput out;
    std::vector<std::vector<float>> sent_rows, run_rows;
    std::vector<std::vector<uint8_t>> wire;
    uint64_t now = 0, rx_now = 0;
    std::string failure;
    auto transmit = [&] () {
      for (const OutFrame &f : out.frames) {
        std::vector<uint8_t> b;
        encode (f.header, f.values.data (), key, b);
        if (f.header.kind == Kind::kAction && (f.header.flags & kFlagStream))
          sent_rows.push_back (f.values);
        if (lossy && rng () % 10 == 0)
          continue; /* lost */
        wire.push_back (b);
        if (lossy && rng () % 20 == 0)
          wire.push_back (b); /* duplicated */
      }
      out.clear ();
      if (lossy && wire.size () >= 2 && rng () % 10 == 0)
        std::swap (wire[wire.size () - 1], wire[wire.size () - 2]);
      rx_now = std::max (rx_now, now + (rng () % 5) * kMs);
      for (auto &b : wire) {
        rx.receive (rx_now, b.data (), b.size (), r);
        if (r.reject) {
          cov[std::string ("reject-") + r.reject]++;
          /* Duplicates and swapped frames are late; a frame of the previous session swapped
           * behind the new one's first frame is of a replaced session. Nothing else. */
          if (strcmp (r.reject, "old-seq") != 0 &&
              !(lossy && strcmp (r.reject, "old-session") == 0) && failure.empty ())
            failure = std::string ("refused: ") + r.reject;
          continue;
        }
        for (const ExecRow &row : r.rows) {
          if (r.frame.header.flags & kFlagStream)
            run_rows.push_back (row.values);
          cov["rows"]++;
          cov["limited"] += row.limited;
          for (unsigned j = 0; j < 3; j++) {
            if (!(std::isfinite (row.values[j]) && row.values[j] >= st.robot->lower[j] &&
                  row.values[j] <= st.robot->upper[j]) &&
                failure.empty ())
              failure = "an unsafe row was executed";
          }
        }
      }
      wire.clear ();
    };
    random_sender_run (snd, st, rng, now, out, transmit, nullptr);
    ASSERT_TRUE (failure.empty ()) << failure << " (seed " << 9000 + i << ")";
    if (st.mode == SendMode::kStream && !lossy) {
      EXPECT_EQ (run_rows, sent_rows) << "seed " << 9000 + i;
      EXPECT_EQ (rx.counters ().limited, 0u) << "seed " << 9000 + i;
    }
  }
  print_coverage ("chained", cov);
  EXPECT_GT (cov["rows"], 100000u);
}

/* ---- Property: the robot's reports, chained back to the sender ----------------------------- */

TEST (SessionProperty, WhatTheReceiverReportsTheSenderTakes)
{
  /* Chunk mode, frames from a Sender to a Receiver through a link that may lose, duplicate and
   * swap frames, and every FEEDBACK the receiver makes straight back, possibly duplicated. The
   * robot's clock is the sender's plus an offset. Every report is taken, except duplicates
   * (old-seq), reports made stale by a clock jump of the sender (too-old) and, on a lossy link,
   * reports of a session or chunk the robot is left with by lost frames; what is taken is
   * what out.executing carries; and the robot only ever reports rows the sender sent. */
  std::map<std::string, uint64_t> cov;
  for (int i = 0; i < 1500; i++) {
    std::mt19937_64 rng (12000 + (uint64_t)i);
    SenderSettings st = random_sender_settings (rng);
    st.mode = SendMode::kChunk;
    st.robot = robot (kRobotInitial);
    st.key = st.hmac ? "k" : "";
    const bool lossy = rng () % 2;
    const uint64_t offset = (rng () % 100000) * kMs;
    Sender snd (st, counter_ids ((uint64_t)i << 8));
    ReceiverSettings rs;
    rs.key = st.key;
    rs.robot = st.robot;
    Receiver rx (rs);
    Received r;
    SenderOutput out;
    std::vector<std::vector<uint8_t>> wire;
    std::map<std::pair<uint64_t, uint64_t>, std::pair<uint32_t, uint32_t>> sent; /* rows sent */
    uint64_t now = 0;
    std::string failure;
    auto fail = [&] (const std::string &why) {
      if (failure.empty ())
        failure = why;
    };
    auto transmit = [&] () {
      for (const OutFrame &f : out.frames) {
        const Header &h = f.header;
        if (h.kind == Kind::kAction) {
          const std::pair<uint32_t, uint32_t> rows = {h.step_index, h.step_index + h.steps};
          auto it = sent.emplace (std::make_pair (h.session_id, h.chunk_id), rows).first;
          it->second.first = std::min (it->second.first, rows.first);
          it->second.second = std::max (it->second.second, rows.second);
        }
        std::vector<uint8_t> b;
        encode (h, f.values.data (), st.key, b);
        if (lossy && rng () % 10 == 0)
          continue;
        wire.push_back (b);
        if (lossy && rng () % 20 == 0)
          wire.push_back (b);
      }
      out.clear ();
      if (lossy && wire.size () >= 2 && rng () % 10 == 0)
        std::swap (wire[wire.size () - 1], wire[wire.size () - 2]);
      for (auto &b : wire)
        rx.receive (now + offset, b.data (), b.size (), r);
      wire.clear ();
      /* The robot's reports, at once. */
      Header fb;
      while (rx.feedback (now + offset, &fb)) {
        const auto it = sent.find ({fb.session_id, fb.chunk_id});
        if (it == sent.end () || fb.step_index < it->second.first ||
            fb.step_index >= it->second.second)
          fail ("the robot reported a row that was never sent");
        std::vector<uint8_t> b;
        encode (fb, nullptr, st.key, b);
        for (int copies = lossy && rng () % 10 == 0 ? 2 : 1; copies > 0; copies--) {
          const char *why = snd.robot_frame (now, b.data (), b.size (), out);
          cov[why ? why : "taken"]++;
          if (!why && (out.executing.empty () || out.executing.back ().row != fb.step_index ||
                       out.executing.back ().time_ns != fb.send_time_ns))
            fail ("a report taken is not what goes upstream");
          /* Lost frames can keep the robot on a session, or a chunk, the sender has left. */
          const bool explained =
              why &&
              (!strcmp (why, "old-seq") || !strcmp (why, "too-old") ||
               (lossy && (!strcmp (why, "wrong-session") || !strcmp (why, "unknown-chunk"))));
          if (why && !explained)
            fail (std::string ("a report was refused: ") + why);
          if (!out.frames.empty ())
            fail ("a report made the sender send");
        }
      }
    };
    random_sender_run (snd, st, rng, now, out, transmit, &failure);
    ASSERT_TRUE (failure.empty ()) << failure << " (seed " << 12000 + i << ")";
  }
  print_coverage ("reports", cov);
  EXPECT_GT (cov["taken"], 10000u);
}
