/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0viewmux's rules without the element: the pairing rules (gst/viewmux/pi0pairing.h) against
 * plain oracles on random streams, and its engine (gst/viewmux/pi0muxer.h) on hand-made buffers. */

#include "tests/pi0testgst.h"

#include "gst/viewmux/pi0muxer.h"
#include "gst/viewmux/pi0pairing.h"

#include <gst/pi0/pi0.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace pi0::mux;
using namespace pi0test;

namespace
{

const Time ms = 1000000;

/* One input's queue as the element sees it: buffers in arrival order, the current one, and
 * whether it is still queued. */
struct Queue {
  struct Buf {
    Time t, d;
    bool gap;
  };
  std::vector<Buf> bufs;
  size_t front = 0;  /* index of the next queued buffer */
  long current = -1; /* index of the current frame, or -1 */
  bool current_queued = false;

  /* Selection's drain loop (Muxer::drain in gst/viewmux/pi0muxer.cpp) over this queue. */
  bool drain (Time limit)
  {
    while (front < bufs.size ()) {
      const Buf &b = bufs[front];
      Front f;
      f.t = b.t;
      f.duration = b.d;
      f.gap = b.gap;
      f.held = current_queued && (long)front == current;
      switch (next_step (f, limit)) {
        case Step::Stop:
          return true;
        case Step::TakeAndStop:
          current = (long)front;
          current_queued = true;
          return true;
        case Step::Take:
          current = (long)front;
          current_queued = false;
          front++;
          break;
        case Step::Drop:
          if ((long)front == current)
            current_queued = false;
          front++;
          break;
      }
    }
    return false; /* empty queue (not at EOS) */
  }
};

/* A stream with honest durations: a buffer never lasts past its successor's time. Some have no
 * duration, some are gaps. */
Queue
random_stream (std::mt19937 &rng, int n)
{
  Queue q;
  Time t = std::uniform_int_distribution<Time> (0, 50 * ms) (rng);
  for (int i = 0; i < n; i++) {
    const Time step = std::uniform_int_distribution<Time> (0, 80 * ms) (rng);
    Queue::Buf b;
    b.t = t;
    const int kind = std::uniform_int_distribution<int> (0, 9) (rng);
    b.d = kind < 2 ? kNone : kind < 4 ? 0 : std::uniform_int_distribution<Time> (0, step) (rng);
    b.gap = kind == 9;
    q.bufs.push_back (b);
    t += step;
  }
  return q;
}

/* The newest non-gap buffer at or before @limit: what the current frame must be. */
long
oracle_newest (const Queue &q, Time limit)
{
  long best = -1;
  for (size_t i = 0; i < q.bufs.size (); i++) {
    if (q.bufs[i].t <= limit && !q.bufs[i].gap)
      best = (long)i;
  }
  return best;
}

GstVideoInfo
info_of (const char *caps_str)
{
  GstVideoInfo info;
  CapsPtr caps (gst_caps_from_string (caps_str));
  EXPECT_TRUE (gst_video_info_from_caps (&info, caps.get ()));
  return info;
}

GstBuffer *
frame (const GstVideoInfo &info, Time t, guint8 fill)
{
  GstBuffer *b = gst_buffer_new_allocate (nullptr, GST_VIDEO_INFO_SIZE (&info), nullptr);
  gst_buffer_memset (b, 0, fill, GST_VIDEO_INFO_SIZE (&info));
  GST_BUFFER_PTS (b) = t;
  return b;
}

} // namespace

TEST (Pairing, LastsPast)
{
  EXPECT_TRUE (lasts_past (0, 20 * ms, 10 * ms));
  EXPECT_FALSE (lasts_past (0, 10 * ms, 10 * ms)); /* reaches the limit, not past it */
  EXPECT_FALSE (lasts_past (0, kNone, 10 * ms));
  EXPECT_FALSE (lasts_past (0, 0, 10 * ms));
  EXPECT_TRUE (lasts_past (kNone - 2, kNone - 2, kNone - 3)); /* saturates, no wrap */
}

TEST (Pairing, NextStep)
{
  Front f;
  f.t = 30 * ms;
  EXPECT_EQ (next_step (f, 29 * ms), Step::Stop);
  EXPECT_EQ (next_step (f, 30 * ms), Step::Take);
  f.duration = 33 * ms;
  EXPECT_EQ (next_step (f, 40 * ms), Step::TakeAndStop);
  EXPECT_EQ (next_step (f, 63 * ms), Step::Take);
  f.held = true;
  EXPECT_EQ (next_step (f, 40 * ms), Step::Stop);
  EXPECT_EQ (next_step (f, 63 * ms), Step::Drop);
  f.held = false;
  f.gap = true;
  EXPECT_EQ (next_step (f, 40 * ms), Step::Stop);
  EXPECT_EQ (next_step (f, 63 * ms), Step::Drop);
}

/* On random streams and random increasing limits: after each drain the current buffer is the
 * newest frame at or before the limit (never a gap), the pad claims completeness only when it
 * has proved it, and drain_limit () says exactly when the front buffer can move. Draining in
 * several steps gives what one drain to the last limit gives (what lets a silent base view's
 * inputs be drained early). */
TEST (Pairing, DrainTakesTheNewestAtOrBeforeTheLimit)
{
  std::mt19937 rng (11);
  for (int iter = 0; iter < 3000; iter++) {
    Queue q = random_stream (rng, std::uniform_int_distribution<int> (1, 12) (rng));
    Queue once = q;
    const Time end = q.bufs.back ().t + 100 * ms;
    Time limit = 0;
    while (limit < end) {
      limit += std::uniform_int_distribution<Time> (0, 60 * ms) (rng);
      const bool complete = q.drain (limit);
      SCOPED_TRACE (::testing::Message () << "iter " << iter << " limit " << limit);
      const long expect = oracle_newest (q, limit);
      if (expect >= 0 || q.current >= 0) {
        ASSERT_EQ (q.current, expect);
      }
      if (complete) {
        /* Proof: a later buffer is queued, or the current/queued front lasts past the limit. */
        ASSERT_LT (q.front, q.bufs.size ());
        const auto &b = q.bufs[q.front];
        ASSERT_TRUE (b.t > limit || lasts_past (b.t, b.d, limit));
        /* The front moves exactly from drain_limit () on. */
        Front f;
        f.t = b.t;
        f.duration = b.d;
        f.gap = b.gap;
        f.held = q.current_queued && (long)q.front == q.current;
        const Time dl = drain_limit (f);
        ASSERT_GT (dl, limit);
        ASSERT_EQ (next_step (f, dl - 1), Step::Stop);
        ASSERT_NE (next_step (f, dl), Step::Stop);
      } else {
        ASSERT_EQ (q.front, q.bufs.size ());
      }
      once.front = 0;
      once.current = -1;
      once.current_queued = false;
      once.drain (limit);
      ASSERT_EQ (once.current, q.current);
    }
  }
}

TEST (Pairing, SilentBaseLimit)
{
  Time limit = 0;
  EXPECT_FALSE (silent_base_limit (5 * ms, 20 * ms, 10 * ms, &limit));
  EXPECT_TRUE (silent_base_limit (30 * ms, 20 * ms, 10 * ms, &limit));
  EXPECT_EQ (limit, 20 * ms);
  EXPECT_TRUE (silent_base_limit (30 * ms, 20 * ms, 0, &limit));
  EXPECT_EQ (limit, 10 * ms);
  EXPECT_FALSE (silent_base_limit (kNone, 20 * ms, 0, &limit));
  EXPECT_FALSE (silent_base_limit (30 * ms, kNone, 0, &limit));
}

TEST (Pairing, JudgeView)
{
  const Time skew = 10 * ms, stale = 200 * ms, T = 1000 * ms;
  EXPECT_FALSE (judge_view (false, 0, T, skew, stale).valid);
  Verdict v = judge_view (true, T - 5 * ms, T, skew, stale);
  EXPECT_TRUE (v.valid);
  EXPECT_FALSE (v.skewed);
  v = judge_view (true, T - 50 * ms, T, skew, stale);
  EXPECT_TRUE (v.valid && v.skewed);
  v = judge_view (true, T + 8 * ms, T, skew, stale); /* captured just after: fresh */
  EXPECT_TRUE (v.valid && !v.skewed);
  v = judge_view (true, T - 200 * ms, T, skew, stale);
  EXPECT_TRUE (v.valid);
  v = judge_view (true, T - 201 * ms, T, skew, stale);
  EXPECT_TRUE (!v.valid && v.expired && !v.ahead);
  v = judge_view (true, T + 11 * ms, T, skew, stale); /* after T + skew: not this observation's */
  EXPECT_TRUE (!v.valid && v.ahead && !v.expired);
}

TEST (Pairing, TimesAndDeadlines)
{
  EXPECT_FALSE (is_late (50 * ms, kNone, 10 * ms));
  EXPECT_TRUE (is_late (50 * ms, 40 * ms, 10 * ms));
  EXPECT_FALSE (is_late (51 * ms, 40 * ms, 10 * ms));
  EXPECT_FALSE (state_is_stale (90 * ms, 100 * ms, 10 * ms));
  EXPECT_TRUE (state_is_stale (89 * ms, 100 * ms, 10 * ms));
  EXPECT_FALSE (goes_backwards (0, kNone));
  EXPECT_TRUE (goes_backwards (40 * ms, 40 * ms));
  EXPECT_TRUE (goes_backwards (39 * ms, 40 * ms));
  EXPECT_FALSE (goes_backwards (41 * ms, 40 * ms));
  /* max-wait moves the deadline (base class: next + latency) to T + max-wait. */
  EXPECT_EQ (base_deadline (500 * ms, kNone, 110 * ms), 500 * ms);
  EXPECT_EQ (base_deadline (500 * ms, 20 * ms, 110 * ms) + 110 * ms, 520 * ms);
  EXPECT_EQ (base_deadline (50 * ms, 20 * ms, 110 * ms), 0u); /* not before the latency */
  EXPECT_EQ (base_deadline (500 * ms, 200 * ms, 110 * ms), 500 * ms);
}

/* check_layout against a plain oracle in 128-bit arithmetic, on random planes (negative,
 * short and huge strides, offsets near the top of the range). */
TEST (Pairing, CheckLayoutAgainstAnOracle)
{
  std::mt19937_64 rng (5);
  auto pick = [&] (std::initializer_list<uint64_t> v) {
    return *(v.begin () + std::uniform_int_distribution<size_t> (0, v.size () - 1) (rng));
  };
  for (int iter = 0; iter < 100000; iter++) {
    Plane planes[4];
    const unsigned n = 1 + rng () % 4;
    const uint64_t size = pick ({0, 1, 4096, 1u << 20, UINT64_MAX});
    for (unsigned p = 0; p < n; p++) {
      planes[p].offset = pick ({0, 100, 4000, size, UINT64_MAX - 16, rng () % 8192});
      planes[p].stride = (int64_t)pick ({0, 1, 64, 2048, (uint64_t)-64, (uint64_t)INT32_MAX});
      planes[p].rows = pick ({0, 1, 24, 1u << 20, rng () % 64});
      planes[p].row_bytes = pick ({0, 1, 64, 96, rng () % 128});
    }
    uint64_t needed = 0;
    const Layout got = check_layout (planes, n, size, &needed);

    Layout expect = Layout::Ok;
    unsigned __int128 most = 0;
    for (unsigned p = 0; p < n; p++) {
      const Plane &pl = planes[p];
      if (expect == Layout::Ok && pl.rows == 0)
        expect = Layout::NoRows;
      else if (expect == Layout::Ok && pl.stride <= 0)
        expect = Layout::BadStride;
      else if (expect == Layout::Ok && (uint64_t)pl.stride < pl.row_bytes)
        expect = Layout::ShortStride;
      if (pl.rows == 0 || pl.stride <= 0)
        continue;
      unsigned __int128 end = (unsigned __int128)pl.offset +
                              (unsigned __int128)(uint64_t)pl.stride * (unsigned __int128)pl.rows;
      most = std::max (most, end);
    }
    if (expect == Layout::Ok && most > size)
      expect = Layout::PastEnd;
    ASSERT_EQ (got, expect) << "iter " << iter;
    if (most <= UINT64_MAX) {
      ASSERT_EQ (needed, (uint64_t)most) << "iter " << iter;
    } else {
      ASSERT_EQ (needed, UINT64_MAX) << "iter " << iter;
    }
  }
}

TEST (Pairing, ReportsAreRateLimited)
{
  MaskReport r;
  EXPECT_FALSE (r.should_report (false, 0, 1000 * ms)); /* nothing changed */
  EXPECT_TRUE (r.should_report (true, 0, 1000 * ms));
  EXPECT_FALSE (r.should_report (false, 500 * ms, 1000 * ms)); /* within the interval */
  EXPECT_TRUE (r.should_report (false, 1000 * ms, 1000 * ms)); /* caught up */
  EXPECT_FALSE (r.should_report (false, 1001 * ms, 1000 * ms));

  RateLimit l;
  uint64_t held = 99;
  EXPECT_TRUE (l.allow (100 * ms, 1000 * ms, &held));
  EXPECT_EQ (held, 0u);
  EXPECT_FALSE (l.allow (200 * ms, 1000 * ms, &held));
  EXPECT_FALSE (l.allow (1099 * ms, 1000 * ms, &held));
  EXPECT_TRUE (l.allow (1100 * ms, 1000 * ms, &held));
  EXPECT_EQ (held, 2u);
  EXPECT_TRUE (l.allow (50 * ms, 1000 * ms, &held)); /* time went back: a new interval */
  EXPECT_EQ (held, 0u);
}

TEST (Pairing, StateSamples)
{
  const float ok[] = {1.f, -2.f, 0.f};
  const float nan[] = {1.f, NAN, 0.f};
  const float inf[] = {1.f, INFINITY, 0.f};
  EXPECT_TRUE (state_sample_ok (ok, 3, 3));
  EXPECT_FALSE (state_sample_ok (ok, 2, 3));
  EXPECT_FALSE (state_sample_ok (nan, 3, 3));
  EXPECT_FALSE (state_sample_ok (inf, 3, 3));
}

/* The inputs on hand-made buffers: what becomes current, what is refused, and the observation
 * built from it. */
TEST (Muxer, TakeAndCompose)
{
  GstVideoInfo im = info_of ("video/x-raw,format=RGB,width=8,height=4,framerate=30/1");
  GstVideoInfo is = info_of ("video/x-raw,format=NV12,width=8,height=4,framerate=30/1");
  Muxer in;
  Counts c;
  pi0::Notices n;
  Settings l;
  l.max_skew = 10 * ms;
  l.max_staleness = 100 * ms;
  l.max_state_age = 50 * ms;

  BufferPtr side0 (frame (is, 0, 7));
  ASSERT_TRUE (in.take_frame (1, false, side0.get (), 0, &is, false, l.max_skew, c, n));
  EXPECT_EQ (in.current (1), side0.get ());
  /* Half a frame: refused, the previous one stays, one notice with details. */
  BufferPtr short1 (frame (is, 33 * ms, 8));
  gst_buffer_resize (short1.get (), 0, 10);
  EXPECT_FALSE (in.take_frame (1, false, short1.get (), 33 * ms, &is, false, l.max_skew, c, n));
  EXPECT_EQ (in.current (1), side0.get ());
  EXPECT_EQ (c.views[1].invalid, 1u);
  ASSERT_EQ (n.size (), 1u);
  EXPECT_NE (n.items ()[0].text.find ("'side'"), std::string::npos);
  ASSERT_NE (n.items ()[0].details, nullptr);
  EXPECT_STREQ (gst_structure_get_string (n.items ()[0].details, "view"), "side");
  n.clear ();

  const float st[] = {1.f, 2.f};
  BufferPtr sample (gst_buffer_new_memdup (st, sizeof (st)));
  ASSERT_TRUE (in.take_sample (sample.get (), 20 * ms, 2, c, n));
  BufferPtr bad (gst_buffer_new_memdup (st, sizeof (float)));
  EXPECT_FALSE (in.take_sample (bad.get (), 25 * ms, 2, c, n));
  EXPECT_EQ (c.state_rejected, 1u);
  n.clear ();

  BufferPtr base (frame (im, 30 * ms, 1));
  ASSERT_TRUE (in.take_frame (0, true, base.get (), 30 * ms, &im, false, l.max_skew, c, n));
  std::array<bool, kViews> active{true, true, false};
  BufferPtr obs (in.compose (base.get (), 30 * ms, active, true, l, c, n));
  ASSERT_NE (obs, nullptr);
  GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (obs.get ());
  ASSERT_NE (meta, nullptr);
  EXPECT_EQ (meta->observation_time, 30 * ms);
  EXPECT_EQ (meta->muxed_time, GST_CLOCK_TIME_NONE); /* the element stamps it as it pushes */
  ASSERT_EQ (meta->n_views, 2u);
  EXPECT_TRUE (meta->views[1].flags & GST_PI0_VIEW_FLAG_VALID);
  EXPECT_TRUE (meta->views[1].flags & GST_PI0_VIEW_FLAG_SKEWED); /* 30 ms old, skew 10 */
  EXPECT_EQ (meta->views[1].capture_time, 0u);
  EXPECT_EQ (meta->state_dim, 2u);
  EXPECT_EQ (meta->state_flags & GST_PI0_STATE_FLAG_STALE, 0);
  EXPECT_EQ (c.observations, 1u);
  EXPECT_TRUE (n.empty ());

  /* A base frame at the same time again goes back: refused, counted, one notice. */
  BufferPtr again (frame (im, 30 * ms, 2));
  EXPECT_FALSE (in.take_frame (0, true, again.get (), 30 * ms, &im, false, l.max_skew, c, n));
  EXPECT_EQ (c.views[0].backwards, 1u);
  ASSERT_EQ (n.size (), 1u);
  guint64 last = 0;
  EXPECT_TRUE (gst_structure_get_uint64 (n.items ()[0].details, "last-observation", &last));
  EXPECT_EQ (last, 30 * ms);
  n.clear ();

  /* 200 ms later the side frame has expired: masked (one notice), let go, no memory. */
  BufferPtr base2 (frame (im, 230 * ms, 3));
  ASSERT_TRUE (in.take_frame (0, true, base2.get (), 230 * ms, &im, false, l.max_skew, c, n));
  BufferPtr obs2 (in.compose (base2.get (), 230 * ms, active, true, l, c, n));
  meta = gst_buffer_get_pi0_observation_meta (obs2.get ());
  EXPECT_FALSE (meta->views[1].flags & GST_PI0_VIEW_FLAG_VALID);
  EXPECT_EQ (meta->views[1].n_mem, 0u);
  EXPECT_EQ (gst_buffer_n_memory (obs2.get ()), 1u);
  EXPECT_EQ (in.current (1), nullptr);
  EXPECT_TRUE (meta->state_flags & GST_PI0_STATE_FLAG_STALE);
  ASSERT_EQ (n.size (), 1u);
  EXPECT_NE (n.items ()[0].text.find ("'side' is stale"), std::string::npos);
  EXPECT_EQ (meta->sequence, 1u);
}

/* A state source that keeps sending bad samples: each problem (a NaN, a wrong size) is warned
 * about at once, then at most once per second of running time with the number held back, while
 * every sample is counted and refused; good samples in between still pass. */
TEST (Muxer, RejectedStateSamplesAreRateLimited)
{
  Muxer in;
  Counts c;
  pi0::Notices n;
  const float nan3[] = {1.f, NAN, 3.f}, good[] = {1.f, 2.f, 3.f};
  auto details = [&] (size_t i, const char *field) {
    guint64 v = G_MAXUINT64;
    EXPECT_NE (n.items ()[i].details, nullptr);
    if (n.items ()[i].details) {
      EXPECT_TRUE (gst_structure_get_uint64 (n.items ()[i].details, field, &v)) << field;
    }
    return v;
  };

  /* 1.5 s of NaN samples at 100 Hz, with a good one every 100 ms. */
  for (int i = 0; i < 150; i++) {
    const bool ok = i % 10 == 5;
    BufferPtr b (gst_buffer_new_memdup (ok ? good : nan3, sizeof (nan3)));
    EXPECT_EQ (in.take_sample (b.get (), i * 10 * ms, 3, c, n), ok) << i;
  }
  EXPECT_EQ (c.state_samples, 150u);
  EXPECT_EQ (c.state_rejected, 135u);
  ASSERT_EQ (n.size (), 2u) << "one at 0 s, one at 1 s, not 135";
  EXPECT_EQ (details (0, "running-time"), 0u);
  EXPECT_EQ (details (0, "held-back"), 0u);
  EXPECT_EQ (details (1, "running-time"), 1000 * ms);
  EXPECT_EQ (details (1, "held-back"), 89u) << "the NaN samples between 0 and 1 s";
  EXPECT_STREQ (gst_structure_get_string (n.items ()[1].details, "problem"), "non-finite");
  EXPECT_NE (n.items ()[1].text.find ("finite float32"), std::string::npos);
  EXPECT_NE (n.items ()[1].debug.find ("89 more"), std::string::npos);

  /* A short sample at 1.2 s: another problem, said at once. */
  BufferPtr short1 (gst_buffer_new_memdup (good, sizeof (float)));
  EXPECT_FALSE (in.take_sample (short1.get (), 1200 * ms, 3, c, n));
  ASSERT_EQ (n.size (), 3u);
  EXPECT_STREQ (gst_structure_get_string (n.items ()[2].details, "problem"), "size");

  /* A new stream starts afresh. */
  in.clear (false);
  n.clear ();
  BufferPtr again (gst_buffer_new_memdup (nan3, sizeof (nan3)));
  EXPECT_FALSE (in.take_sample (again.get (), 1210 * ms, 3, c, n));
  EXPECT_EQ (n.size (), 1u);
}

TEST (Muxer, CapsWording)
{
  GstVideoInfo info;
  bool cuda = false;
  unsigned dim = 0;
  std::string why;
  CapsPtr audio (gst_caps_from_string ("audio/x-raw,format=S16LE,rate=8000,channels=1"));
  EXPECT_FALSE (parse_caps (-1, audio.get (), &info, &cuda, &dim, &why));
  EXPECT_NE (why.find ("The state pad needs application/x-pi0-state"), std::string::npos) << why;
  EXPECT_NE (why.find ("audio/x-raw"), std::string::npos) << why;
  EXPECT_FALSE (parse_caps (2, audio.get (), &info, &cuda, &dim, &why));
  EXPECT_NE (why.find ("View 'top' needs raw video"), std::string::npos) << why;
  CapsPtr rgb16 (gst_caps_from_string ("video/x-raw,format=RGB16,width=4,height=2"));
  EXPECT_FALSE (parse_caps (0, rgb16.get (), &info, &cuda, &dim, &why));
  EXPECT_NE (why.find ("cannot take video format RGB16"), std::string::npos) << why;
  CapsPtr nv12 (
      gst_caps_from_string ("video/x-raw(memory:CUDAMemory),format=NV12,width=4,height=2"));
  EXPECT_TRUE (parse_caps (0, nv12.get (), &info, &cuda, &dim, &why));
  EXPECT_TRUE (cuda);
  CapsPtr state (gst_caps_from_string ("application/x-pi0-state,dim=(int)7"));
  EXPECT_TRUE (parse_caps (-1, state.get (), &info, &cuda, &dim, &why));
  EXPECT_EQ (dim, 7u);
}
