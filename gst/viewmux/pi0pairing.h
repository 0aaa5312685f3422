/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* pi0viewmux's pairing rules, apart from GStreamer: which queued buffer a view or the state
 * takes for an observation, when a view is valid, skewed or masked, when the muxer may stop
 * waiting, which frame layouts are safe to pass on, and how often the bus hears about a
 * problem. Times are nanoseconds of running time (GstClockTime's values, kNone for
 * GST_CLOCK_TIME_NONE); nothing here holds a buffer or takes a lock, so the rules are tested
 * directly (tests/elements/pi0viewmux/test_viewmux_rules.cpp) and the muxer (pi0muxer.h) applies them. */

#include "common/pi0views.h"

#include <array>
#include <cstddef>
#include <cstdint>

namespace pi0::mux
{

using Time = uint64_t;
constexpr Time kNone = UINT64_MAX;
constexpr int kViews = pi0::kNumViews; /* named pi0::kViewNames */

constexpr bool
is_valid (Time t)
{
  return t != kNone;
}

/* Counters of one view since the last start (the element's `stats`). */
struct ViewCounts {
  uint64_t frames_in = 0; /* frames taken from the pad */
  uint64_t used = 0;      /* observations in which the view was valid */
  uint64_t late = 0;      /* frames that arrived after the observation they belonged to */
  uint64_t skewed = 0;    /* valid, but older than max-skew */
  uint64_t masked = 0;    /* observations in which the view was masked */
  uint64_t dropped = 0;   /* frames never used: replaced by a newer one, or refused */
  uint64_t invalid = 0;   /* refused: the buffer does not hold the layout it declares */
  uint64_t backwards = 0; /* base view: refused, not after the previous observation */
};

struct Counts {
  uint64_t observations = 0;
  uint64_t dropped_observations = 0; /* require-all-views */
  uint64_t state_samples = 0;
  uint64_t state_rejected = 0; /* wrong size or non-finite */
  uint64_t state_stale = 0;    /* observations whose state was missing or too old */
  /* Live: observations that went out at the deadline before every other input had proved it had
   * nothing more for them, or for a base frame that came after its deadline. A late buffer may
   * then have been left out, so a replay of the same recording can pair these differently;
   * every other observation pairs as the replay does. */
  uint64_t deadline_observations = 0;
  std::array<ViewCounts, kViews> views{};

  Counts &operator+= (const Counts &o);
};

/* Whether a buffer at @t lasting @duration reaches past @limit: then its successor comes after
 * @limit, which proves that no later buffer of that pad belongs to the observation. */
bool lasts_past (Time t, Time duration, Time limit);

/* The buffer at the front of a pad's queue, as selection sees it. */
struct Front {
  Time t = kNone;        /* its time (running time, or PTS with timestamps=pts) */
  Time duration = kNone; /* kNone when unknown */
  bool held = false;     /* it is already the pad's current frame or sample (left queued) */
  bool gap = false;      /* an empty GAP buffer: no frame, only time passing */
};

enum class Step {
  Stop,        /* leave it queued: the pad has nothing more at or before the limit */
  Drop,        /* remove it from the queue and look at the next one */
  Take,        /* it becomes the current frame; remove it and look at the next one */
  TakeAndStop, /* it becomes the current frame and, lasting past the limit, proves the pad
                * complete: leave it queued so that the pad still holds data next time */
};

/* What bringing a pad up to @limit does with its front buffer. A pad is complete for the limit
 * once a step is Stop or TakeAndStop (or its queue is empty at EOS). */
Step next_step (const Front &f, Time limit);

/* The smallest limit at which next_step (@f, limit) is no longer Stop: when a live muxer whose
 * base view is silent can pass this buffer on. */
Time drain_limit (const Front &f);

/* The limit up to which a live muxer may drain a pad while its base view is silent, at running
 * time @now: every base frame still to come on time is captured at or after now - @latency, so
 * it would take at least this much. @slack is max-skew for views, 0 for the state. Returns false
 * when nothing can be drained yet. */
bool silent_base_limit (Time now, Time latency, Time slack, Time *limit);

/* How a view's current frame (captured at @t, or none) serves the observation at @obs. */
struct Verdict {
  bool valid = false;   /* use it */
  bool skewed = false;  /* valid, but older than max-skew */
  bool expired = false; /* older than max-staleness: masked, and never usable again */
  bool ahead = false;   /* captured after obs + max-skew (a late base frame): masked, kept */
};
Verdict judge_view (bool have, Time t, Time obs, Time max_skew, Time max_staleness);

/* A frame captured at @t arrived after the observation it belonged to went out. */
bool is_late (Time t, Time last_obs, Time max_skew);

/* A state sample from @t is too old for the observation at @obs. */
bool state_is_stale (Time t, Time obs, Time max_state_age);

/* A base frame at @t would not come after the previous observation (observation_time must
 * increase). */
bool goes_backwards (Time t, Time last_obs);

/* When a live observation for a base frame at @t times out, as the time the base class adds
 * its @latency to: the latency, or @max_wait after @t when that is shorter. */
Time base_deadline (Time t, Time max_wait, Time latency);

/* One plane as the frame's layout declares it: where it starts, its stride (negative is
 * refused), how many rows it has and how many bytes of each row are pixels. */
struct Plane {
  uint64_t offset = 0;
  int64_t stride = 0;
  uint64_t rows = 0;
  uint64_t row_bytes = 0;
};

enum class Layout {
  Ok,
  NoRows,      /* a plane of height zero */
  BadStride,   /* zero or negative */
  ShortStride, /* smaller than a row of pixels: rows would overlap and the last one overrun */
  PastEnd,     /* a plane reaches past the end of the buffer (or the sum overflows) */
};

/* Whether the planes fit in @size bytes, each reaching offset + stride * rows (the bound
 * gst_pi0_observation_meta_map_view() checks too). @needed gets the bytes the layout needs, or
 * UINT64_MAX when that overflows. */
Layout check_layout (const Plane *planes, unsigned n_planes, uint64_t size, uint64_t *needed);
const char *layout_problem (Layout l);

/* What the bus was last told about a view being masked, and when: a change is reported at most
 * once per @interval of running time, and the report catches up once the interval has passed. */
struct MaskReport {
  bool masked = false;
  Time at = kNone;

  bool should_report (bool now_masked, Time now, Time interval);
};

/* At most one warning per @interval of running time; a time that goes back starts a new
 * interval (the warning may be about just that). When it allows one, @held_back gets how many
 * it held back since the last one. */
struct RateLimit {
  Time last = kNone;
  uint64_t held = 0;

  bool allow (Time now, Time interval, uint64_t *held_back);
};

/* A robot state sample: exactly @expected values, all finite. */
bool state_sample_ok (const float *values, size_t n, size_t expected);

} // namespace pi0::mux
