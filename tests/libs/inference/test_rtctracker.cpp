/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0::RtcTracker (inference/model/pi0rtctracker.*), the caller's side of real-time chunking
 * (docs/rtc.md, "In the chain"), without GStreamer, a clock or a model: every refusal of the
 * sink's feedback with its reason, which rows of the newest chunk are the prefix for a given
 * shift, the delay measured from the takeover row against the estimate, the executing chunk
 * having run out, the history of 8 chunks, reset, and feedback and chunks from two threads. */

#include "inference/io/pi0error.h"
#include "inference/model/pi0rtctracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

using pi0::RtcTracker;

namespace
{

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kPeriod = 20 * kMs; /* 50 Hz */
constexpr uint32_t kHorizon = 10, kDim = 3;
constexpr uint64_t kNone = RtcTracker::kTimeNone;

/* Chunk `seq`'s action (row, col): recognisable in a prefix. */
float
value (uint64_t seq, uint32_t row, uint32_t col)
{
  return (float)(seq * 1000 + row * 10 + col);
}

std::vector<float>
chunk_actions (uint64_t seq, uint32_t horizon = kHorizon, uint32_t dim = kDim)
{
  std::vector<float> a ((size_t)horizon * dim);
  for (uint32_t r = 0; r < horizon; r++)
    for (uint32_t c = 0; c < dim; c++)
      a[(size_t)r * dim + c] = value (seq, r, c);
  return a;
}

/* Chunk `seq` made for the observation captured at `obs`. */
void
make (RtcTracker &t, uint64_t seq, uint64_t obs, uint32_t horizon = kHorizon)
{
  std::vector<float> a = chunk_actions (seq, horizon);
  t.chunk_made (seq, obs, horizon, kDim, a.data ());
}

/* The prefix's rows are chunk `seq`'s rows from `first` on. */
void
expect_rows_from (const at::Tensor &prefix, uint64_t seq, uint32_t first)
{
  ASSERT_EQ (prefix.dim (), 2);
  ASSERT_EQ (prefix.size (0), (int64_t)(kHorizon - first));
  ASSERT_EQ (prefix.size (1), (int64_t)kDim);
  ASSERT_EQ (prefix.scalar_type (), at::kFloat);
  at::Tensor p = prefix.contiguous ();
  const float *d = p.data_ptr<float> ();
  for (uint32_t r = 0; r < kHorizon - first; r++)
    for (uint32_t c = 0; c < kDim; c++)
      EXPECT_EQ (d[r * kDim + c], value (seq, first + r, c)) << "row " << r << " col " << c;
}

pi0::PolicyGuidance
guide (const RtcTracker &t, uint64_t obs, uint64_t now = kNone, double last_ms = 0,
       int64_t execution_horizon = 0)
{
  pi0::PolicyGuidance g;
  EXPECT_TRUE (t.guidance (obs, now, last_ms, execution_horizon, 5.0, false, &g));
  return g;
}

bool
no_guidance (const RtcTracker &t, uint64_t obs, uint64_t now = kNone)
{
  pi0::PolicyGuidance g;
  g.delay = 1234; /* left alone when there is none */
  bool got = t.guidance (obs, now, 0, 0, 5.0, false, &g);
  EXPECT_EQ (g.delay, 1234);
  EXPECT_FALSE (g.prefix.defined ());
  return !got;
}

} // namespace

/* ---- feedback: each refusal, its reason, and that a refusal changes nothing ---------------- */

TEST (RtcTrackerFeedback, TakenFeedbackIsRecorded)
{
  RtcTracker t;
  make (t, 5, 1000 * kMs);
  EXPECT_FALSE (t.last_feedback ());
  EXPECT_EQ (t.feedback (5, 2, 1040 * kMs, kPeriod, 1050 * kMs), "");
  auto f = t.last_feedback ();
  ASSERT_TRUE (f);
  EXPECT_EQ (f->chunk_id, 5u);
  EXPECT_EQ (f->row, 2u);
  EXPECT_EQ (f->time, 1040 * kMs);
  EXPECT_EQ (f->period, kPeriod);
}

TEST (RtcTrackerFeedback, UnknownChunkIsRefused)
{
  RtcTracker t;
  EXPECT_EQ (t.feedback (7, 0, 0, kPeriod, kNone),
             "chunk 7 is not one of the last chunks made here");
  make (t, 5, 1000 * kMs);
  EXPECT_EQ (t.feedback (6, 0, 1000 * kMs, kPeriod, 1000 * kMs),
             "chunk 6 is not one of the last chunks made here");
  EXPECT_FALSE (t.last_feedback ());
  EXPECT_TRUE (no_guidance (t, 1040 * kMs));
}

TEST (RtcTrackerFeedback, RowBeyondTheChunkIsRefused)
{
  RtcTracker t;
  make (t, 5, 1000 * kMs);
  EXPECT_EQ (t.feedback (5, kHorizon, 1000 * kMs, kPeriod, 1000 * kMs),
             "row 10 is beyond chunk 5's 10 rows");
  EXPECT_EQ (t.feedback (5, std::numeric_limits<uint32_t>::max (), 1000 * kMs, kPeriod, kNone),
             "row 4294967295 is beyond chunk 5's 10 rows");
  EXPECT_FALSE (t.last_feedback ());
  EXPECT_TRUE (no_guidance (t, 1040 * kMs));
  /* The last row is in the chunk. */
  EXPECT_EQ (t.feedback (5, kHorizon - 1, 1000 * kMs, kPeriod, 1000 * kMs), "");
}

TEST (RtcTrackerFeedback, TimeInTheFutureIsRefused)
{
  RtcTracker t;
  make (t, 5, 1000 * kMs);
  const uint64_t now = 1100 * kMs;
  EXPECT_EQ (t.feedback (5, 3, now + kPeriod + 1, kPeriod, now),
             "row 3 of chunk 5 is said to start in the future (1120000001 ns, now 1100000000 ns)");
  /* Checked before the chunk: a future time about an unknown chunk says the time. */
  EXPECT_EQ (t.feedback (99, 0, kNone - 1, kPeriod, now),
             "row 0 of chunk 99 is said to start in the future (18446744073709551614 ns, now "
             "1100000000 ns)");
  EXPECT_FALSE (t.last_feedback ());
  /* Up to one period ahead is the sink's lead; without a clock there is nothing to check. */
  EXPECT_EQ (t.feedback (5, 3, now + kPeriod, kPeriod, now), "");
  EXPECT_EQ (t.feedback (5, 4, now + 1000 * kPeriod, kPeriod, kNone), "");
  /* Near the top of the range, now + period does not wrap around into a refusal... */
  EXPECT_EQ (t.feedback (5, 5, kNone - 5, 100, kNone - 10), "");
  /* ...nor a huge period into an acceptance. */
  EXPECT_NE (t.feedback (5, 6, kNone - 1, kNone - 2, 0), "");
}

TEST (RtcTrackerFeedback, ZeroPeriodIsRefused)
{
  RtcTracker t;
  make (t, 5, 1000 * kMs);
  EXPECT_EQ (t.feedback (5, 1, 1000 * kMs, 0, 1000 * kMs),
             "row 1 of chunk 5 comes with a period of 0");
  EXPECT_FALSE (t.last_feedback ());
  EXPECT_TRUE (no_guidance (t, 1040 * kMs));
}

TEST (RtcTrackerFeedback, RefusedFeedbackKeepsTheLastTaken)
{
  RtcTracker t;
  make (t, 5, 1000 * kMs);
  ASSERT_EQ (t.feedback (5, 1, 1020 * kMs, kPeriod, 1020 * kMs), "");
  EXPECT_NE (t.feedback (5, 2, 1040 * kMs, 2 * kPeriod, 1040 * kMs - 3 * kPeriod), "");
  EXPECT_NE (t.feedback (6, 2, 1040 * kMs, 2 * kPeriod, 1040 * kMs), "");
  EXPECT_NE (t.feedback (5, 20, 1040 * kMs, 2 * kPeriod, 1040 * kMs), "");
  auto f = t.last_feedback ();
  ASSERT_TRUE (f);
  EXPECT_EQ (f->row, 1u);
  EXPECT_EQ (f->period, kPeriod);
  /* Nor did they move the takeover row. */
  EXPECT_EQ (guide (t, 1040 * kMs).delay, 1);
}

/* ---- guidance: the prefix, the shift, the delay --------------------------------------------- */

TEST (RtcTrackerGuidance, NoneBeforeFeedbackOrWithoutTimes)
{
  RtcTracker t;
  EXPECT_TRUE (no_guidance (t, 1000 * kMs));
  make (t, 5, 1000 * kMs);
  EXPECT_TRUE (no_guidance (t, 1040 * kMs)); /* no feedback yet */
  ASSERT_EQ (t.feedback (5, 0, 1000 * kMs, kPeriod, kNone), "");
  EXPECT_TRUE (no_guidance (t, kNone));          /* observation without a time */
  EXPECT_TRUE (no_guidance (t, 1000 * kMs - 1)); /* older than the executing chunk's */
  make (t, 6, kNone);                            /* newest chunk without a time */
  EXPECT_TRUE (no_guidance (t, 1040 * kMs));
}

TEST (RtcTrackerGuidance, PrefixIsTheNewestChunkFromTheShift)
{
  RtcTracker t;
  const uint64_t obs0 = 1000 * kMs;
  make (t, 5, obs0 - 5 * kPeriod);
  make (t, 6, obs0);
  ASSERT_EQ (t.feedback (5, 0, obs0 - 5 * kPeriod, kPeriod, obs0), ""); /* about the older one */
  for (uint32_t s = 0; s < kHorizon; s++) {
    SCOPED_TRACE (s);
    pi0::PolicyGuidance g = guide (t, obs0 + s * kPeriod);
    expect_rows_from (g.prefix, 6, s); /* the newest chunk, not the one reported */
    EXPECT_EQ (g.execution_horizon, (int64_t)s);
  }
}

TEST (RtcTrackerGuidance, ShiftRoundsToTheNearestRowHalvesUp)
{
  RtcTracker t;
  const uint64_t obs0 = 1000 * kMs;
  make (t, 5, obs0);
  ASSERT_EQ (t.feedback (5, 0, obs0, kPeriod, obs0), "");
  EXPECT_EQ (guide (t, obs0 + kPeriod / 2 - 1).execution_horizon, 0);
  EXPECT_EQ (guide (t, obs0 + kPeriod / 2).execution_horizon, 1);
  EXPECT_EQ (guide (t, obs0 + 3 * kPeriod + kPeriod / 2 - 1).execution_horizon, 3);
  expect_rows_from (guide (t, obs0 + 3 * kPeriod + kPeriod / 2).prefix, 5, 4);
  /* An odd period: 3 ns, 1 ns past a row rounds down, 2 ns up. */
  RtcTracker odd;
  make (odd, 1, 0);
  ASSERT_EQ (odd.feedback (1, 0, 0, 3, kNone), "");
  EXPECT_EQ (guide (odd, 3 * 2 + 1).execution_horizon, 2);
  EXPECT_EQ (guide (odd, 3 * 2 + 2).execution_horizon, 3);
}

TEST (RtcTrackerGuidance, ExecutingChunkRunOutGivesNone)
{
  RtcTracker t;
  const uint64_t obs0 = 1000 * kMs;
  make (t, 5, obs0);
  ASSERT_EQ (t.feedback (5, 0, obs0, kPeriod, obs0), "");
  expect_rows_from (guide (t, obs0 + (kHorizon - 1) * kPeriod).prefix, 5, kHorizon - 1);
  EXPECT_TRUE (no_guidance (t, obs0 + kHorizon * kPeriod - kPeriod / 2)); /* rounds to H */
  EXPECT_TRUE (no_guidance (t, obs0 + kHorizon * kPeriod));
  EXPECT_TRUE (no_guidance (t, kNone - 1)); /* far beyond: no overflow */
}

TEST (RtcTrackerGuidance, DelayIsTheTakeoverRowOfTheNewestReportedChunk)
{
  RtcTracker t;
  const uint64_t obs0 = 1000 * kMs;
  make (t, 5, obs0);
  ASSERT_EQ (t.feedback (5, 3, obs0 + 3 * kPeriod, kPeriod, obs0 + 3 * kPeriod), "");
  /* Later rows of the same chunk do not change when it took over. */
  ASSERT_EQ (t.feedback (5, 4, obs0 + 4 * kPeriod, kPeriod, obs0 + 4 * kPeriod), "");
  ASSERT_EQ (t.feedback (5, 5, obs0 + 5 * kPeriod, kPeriod, obs0 + 5 * kPeriod), "");
  /* Whatever the clock and the last inference time say. */
  EXPECT_EQ (guide (t, obs0 + kPeriod, obs0 + 100 * kPeriod, 1000.0).delay, 3);
  make (t, 6, obs0 + kPeriod);
  EXPECT_EQ (guide (t, obs0 + 2 * kPeriod).delay, 3); /* 6 not reported yet: still 5's */
  ASSERT_EQ (t.feedback (6, 2, obs0 + 3 * kPeriod, kPeriod, obs0 + 3 * kPeriod), "");
  EXPECT_EQ (guide (t, obs0 + 2 * kPeriod).delay, 2); /* now 6's */
  /* Never more than the prefix's rows: taken over at row 8, 1 row is left at shift 9. */
  RtcTracker late;
  make (late, 1, obs0);
  ASSERT_EQ (late.feedback (1, 8, obs0 + 8 * kPeriod, kPeriod, obs0 + 8 * kPeriod), "");
  pi0::PolicyGuidance g = guide (late, obs0 + 9 * kPeriod);
  EXPECT_EQ (g.prefix.size (0), 1);
  EXPECT_EQ (g.delay, 1);
}

TEST (RtcTrackerGuidance, DelayIsEstimatedWhenNoReportedChunkIsRemembered)
{
  RtcTracker t;
  const uint64_t obs0 = 1000 * kMs;
  make (t, 1, obs0);
  ASSERT_EQ (t.feedback (1, 2, obs0 + 2 * kPeriod, kPeriod, obs0 + 2 * kPeriod), "");
  for (uint64_t seq = 2; seq <= 1 + RtcTracker::kHistory; seq++)
    make (t, seq, obs0); /* chunk 1, the only one reported, is forgotten */
  ASSERT_EQ (t.chunks (), RtcTracker::kHistory);
  /* (now - capture + last inference) / period, rounded up: (25 ms + 10 ms) / 20 ms -> 2. */
  EXPECT_EQ (guide (t, obs0, obs0 + 25 * kMs, 10.0).delay, 2);
  /* Exactly 2 periods is 2 rows. */
  EXPECT_EQ (guide (t, obs0, obs0 + 30 * kMs, 10.0).delay, 2);
  /* No clock: the inference time alone; a clock behind the capture counts as 0. */
  EXPECT_EQ (guide (t, obs0, kNone, 41.0).delay, 3);
  EXPECT_EQ (guide (t, obs0, obs0 - kMs, 41.0).delay, 3);
  EXPECT_EQ (guide (t, obs0, kNone, 0.0).delay, 0);
  /* Never more than the prefix; a nonsense inference time is no time at all. */
  EXPECT_EQ (guide (t, obs0, obs0 + 1000 * kPeriod, 0.0).delay, (int64_t)kHorizon);
  EXPECT_EQ (guide (t, obs0, kNone, std::numeric_limits<double>::infinity ()).delay,
             (int64_t)kHorizon);
  EXPECT_EQ (guide (t, obs0, kNone, std::nan ("")).delay, 0);
  EXPECT_EQ (guide (t, obs0, kNone, -50.0).delay, 0);
}

TEST (RtcTrackerGuidance, SettingsPassThrough)
{
  RtcTracker t;
  make (t, 5, 1000 * kMs);
  ASSERT_EQ (t.feedback (5, 1, 1020 * kMs, kPeriod, kNone), "");
  pi0::PolicyGuidance g;
  ASSERT_TRUE (t.guidance (1000 * kMs + 2 * kPeriod, kNone, 0, 6, 10.0, true, &g));
  EXPECT_EQ (g.execution_horizon, 6); /* given: not the shift (2) */
  EXPECT_EQ (g.max_guidance_weight, 10.0);
  EXPECT_TRUE (g.identity_jacobian);
  expect_rows_from (g.prefix, 5, 2);
  ASSERT_TRUE (t.guidance (1000 * kMs + 2 * kPeriod, kNone, 0, 0, 5.0, false, &g));
  EXPECT_EQ (g.execution_horizon, 2);
  EXPECT_EQ (g.max_guidance_weight, 5.0);
  EXPECT_FALSE (g.identity_jacobian);
}

TEST (RtcTrackerGuidance, PrefixIsACopy)
{
  RtcTracker t;
  std::vector<float> a = chunk_actions (5);
  t.chunk_made (5, 1000 * kMs, kHorizon, kDim, a.data ());
  std::fill (a.begin (), a.end (), -1.0f); /* the caller's buffer goes away */
  ASSERT_EQ (t.feedback (5, 0, 1000 * kMs, kPeriod, kNone), "");
  pi0::PolicyGuidance g = guide (t, 1000 * kMs);
  expect_rows_from (g.prefix, 5, 0);
  g.prefix.fill_ (7.0f); /* and the policy may scribble on its copy */
  expect_rows_from (guide (t, 1000 * kMs).prefix, 5, 0);
}

/* ---- chunks: the history, reset, bad input, threads ---------------------------------------- */

/* Issue 25: 8 chunks were fewer than a report's round trip at 60 ms one way over TCP ("chunk N
 * is not one of the last chunks made here" 12 times). The protocol's 16 are kept, and a report
 * about a chunk made here but forgotten says so (pi0infer counts it apart). */
TEST (RtcTrackerChunks, HistoryKeepsTheProtocolsSixteenAndTellsALateReport)
{
  RtcTracker t;
  ASSERT_EQ (RtcTracker::kHistory, 16u);
  for (uint64_t seq = 1; seq <= 18; seq++) {
    make (t, seq, seq * kPeriod);
    EXPECT_EQ (t.chunks (), std::min<size_t> (seq, 16));
  }
  bool forgotten = false;
  EXPECT_EQ (t.feedback (1, 0, kPeriod, kPeriod, kNone, &forgotten),
             "chunk 1 is older than the last 16 chunks made here (a report that came too late)");
  EXPECT_TRUE (forgotten);
  EXPECT_EQ (t.feedback (2, 0, kPeriod, kPeriod, kNone, &forgotten),
             "chunk 2 is older than the last 16 chunks made here (a report that came too late)");
  EXPECT_TRUE (forgotten);
  /* Never made here: not a late report. */
  EXPECT_EQ (t.feedback (19, 0, kPeriod, kPeriod, kNone, &forgotten),
             "chunk 19 is not one of the last chunks made here");
  EXPECT_FALSE (forgotten);
  for (uint64_t seq = 3; seq <= 18; seq++) {
    EXPECT_EQ (t.feedback (seq, 0, seq * kPeriod, kPeriod, kNone, &forgotten), "") << seq;
    EXPECT_FALSE (forgotten);
  }
}

TEST (RtcTrackerChunks, ResetForgetsChunksAndFeedback)
{
  RtcTracker t;
  make (t, 5, 1000 * kMs);
  ASSERT_EQ (t.feedback (5, 1, 1020 * kMs, kPeriod, kNone), "");
  guide (t, 1040 * kMs);
  t.reset ();
  EXPECT_EQ (t.chunks (), 0u);
  EXPECT_FALSE (t.last_feedback ());
  EXPECT_TRUE (no_guidance (t, 1040 * kMs));
  EXPECT_EQ (t.feedback (5, 1, 1020 * kMs, kPeriod, kNone),
             "chunk 5 is not one of the last chunks made here");
  /* A chunk made again starts with no takeover row and needs new feedback. */
  make (t, 5, 1000 * kMs);
  EXPECT_TRUE (no_guidance (t, 1040 * kMs));
  ASSERT_EQ (t.feedback (5, 0, 1000 * kMs, kPeriod, kNone), "");
  EXPECT_EQ (guide (t, 1040 * kMs).delay, 0);
}

TEST (RtcTrackerChunks, MissingActionsAreAClearError)
{
  RtcTracker t;
  EXPECT_THROW (t.chunk_made (5, 0, kHorizon, kDim, nullptr), pi0::Error);
  EXPECT_EQ (t.chunks (), 0u);
  /* An empty chunk is kept but can be no prefix. */
  t.chunk_made (6, 0, 0, kDim, nullptr);
  t.chunk_made (7, 0, kHorizon, 0, nullptr);
  EXPECT_EQ (t.chunks (), 2u);
  EXPECT_EQ (t.feedback (6, 0, 0, kPeriod, kNone), "row 0 is beyond chunk 6's 0 rows");
  ASSERT_EQ (t.feedback (7, 0, 0, kPeriod, kNone), "");
  EXPECT_TRUE (no_guidance (t, 0));
}

/* Feedback on one thread, chunks and guidance on another (as in pi0infer): every guidance seen
 * is a consistent tail of one chunk. Checks consistency, not speed: how often the threads
 * interleave does not matter, and the end is checked once both are done. */
TEST (RtcTrackerChunks, FeedbackAndChunksFromTwoThreads)
{
  RtcTracker t;
  constexpr uint64_t kChunks = 2000;
  std::atomic<uint64_t> made{0};
  std::thread sink ([&] {
    while (made.load () < kChunks) {
      uint64_t seq = made.load ();
      if (seq > 0)
        t.feedback (seq, 1, seq * kPeriod + kPeriod, kPeriod, kNone);
      std::this_thread::yield ();
    }
  });
  bool consistent = true;
  for (uint64_t seq = 1; seq <= kChunks && consistent; seq++) {
    pi0::PolicyGuidance g;
    if (t.guidance (seq * kPeriod, kNone, 0, 0, 5.0, false, &g)) {
      /* The newest chunk, seq - 1, from row 1; the delay is the takeover row (1) of a reported
       * chunk, or the estimate (0: no clock, no inference time) if the sink lagged so far that
       * every reported chunk is forgotten. */
      consistent = g.prefix.size (0) == (int64_t)kHorizon - 1 &&
                   g.prefix.size (1) == (int64_t)kDim &&
                   g.prefix[0][0].item<float> () == value (seq - 1, 1, 0) &&
                   g.prefix[kHorizon - 2][kDim - 1].item<float> () ==
                       value (seq - 1, kHorizon - 1, kDim - 1) &&
                   (g.delay == 1 || g.delay == 0) && g.execution_horizon == 1;
      EXPECT_TRUE (consistent) << "chunk " << seq;
    }
    make (t, seq, seq * kPeriod);
    made.store (seq);
  }
  made.store (kChunks);
  sink.join ();
  EXPECT_EQ (t.chunks (), RtcTracker::kHistory);
  ASSERT_EQ (t.feedback (kChunks, 1, kChunks * kPeriod + kPeriod, kPeriod, kNone), "");
  expect_rows_from (guide (t, (kChunks + 1) * kPeriod).prefix, kChunks, 1);
}
