/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "gst/viewmux/pi0pairing.h"

#include <algorithm>
#include <cmath>

namespace pi0::mux
{

namespace
{

Time
sat_add (Time a, Time b)
{
  return a > kNone - 1 - b ? kNone - 1 : a + b;
}

} // namespace

Counts &
Counts::operator+= (const Counts &o)
{
  observations += o.observations;
  dropped_observations += o.dropped_observations;
  state_samples += o.state_samples;
  state_rejected += o.state_rejected;
  state_stale += o.state_stale;
  deadline_observations += o.deadline_observations;
  for (int v = 0; v < kViews; v++) {
    ViewCounts &a = views[v];
    const ViewCounts &b = o.views[v];
    a.frames_in += b.frames_in;
    a.used += b.used;
    a.late += b.late;
    a.skewed += b.skewed;
    a.masked += b.masked;
    a.dropped += b.dropped;
    a.invalid += b.invalid;
    a.backwards += b.backwards;
  }
  return *this;
}

bool
lasts_past (Time t, Time duration, Time limit)
{
  return is_valid (duration) && duration > 0 && sat_add (t, duration) > limit;
}

Step
next_step (const Front &f, Time limit)
{
  if (f.t > limit)
    return Step::Stop;
  const bool proves = lasts_past (f.t, f.duration, limit);
  /* The current frame, or a gap, already counted: it only tells whether the pad is done. */
  if (f.held || f.gap)
    return proves ? Step::Stop : Step::Drop;
  return proves ? Step::TakeAndStop : Step::Take;
}

Time
drain_limit (const Front &f)
{
  if ((f.held || f.gap) && is_valid (f.duration) && f.duration > 0)
    return sat_add (f.t, f.duration);
  return f.t;
}

bool
silent_base_limit (Time now, Time latency, Time slack, Time *limit)
{
  if (!is_valid (now) || !is_valid (latency) || sat_add (now, slack) < latency)
    return false;
  *limit = sat_add (now, slack) - latency;
  return true;
}

Verdict
judge_view (bool have, Time t, Time obs, Time max_skew, Time max_staleness)
{
  Verdict v;
  if (!have)
    return v;
  if (t > obs && t - obs > max_skew) {
    v.ahead = true;
    return v;
  }
  /* A frame from up to max-skew after the observation has a "negative" age: it is fresh. */
  v.valid = t >= obs || obs - t <= max_staleness;
  v.skewed = v.valid && t < obs && obs - t > max_skew;
  v.expired = !v.valid;
  return v;
}

bool
is_late (Time t, Time last_obs, Time max_skew)
{
  return is_valid (last_obs) && t <= sat_add (last_obs, max_skew);
}

bool
state_is_stale (Time t, Time obs, Time max_state_age)
{
  return obs > t && obs - t > max_state_age;
}

bool
goes_backwards (Time t, Time last_obs)
{
  return is_valid (last_obs) && t <= last_obs;
}

Time
base_deadline (Time t, Time max_wait, Time latency)
{
  if (!is_valid (t) || !is_valid (max_wait) || !is_valid (latency) || latency <= max_wait)
    return t;
  const Time end = sat_add (t, max_wait);
  return end > latency ? end - latency : 0;
}

Layout
check_layout (const Plane *planes, unsigned n_planes, uint64_t size, uint64_t *needed)
{
  uint64_t most = 0;
  bool overflow = false;
  Layout problem = Layout::Ok;
  for (unsigned p = 0; p < n_planes; p++) {
    const Plane &pl = planes[p];
    uint64_t span, end;
    if (pl.rows == 0 || pl.stride <= 0) {
      if (problem == Layout::Ok)
        problem = pl.rows == 0 ? Layout::NoRows : Layout::BadStride;
      continue;
    }
    if ((uint64_t)pl.stride < pl.row_bytes && problem == Layout::Ok)
      problem = Layout::ShortStride;
    if (__builtin_mul_overflow ((uint64_t)pl.stride, pl.rows, &span) ||
        __builtin_add_overflow (pl.offset, span, &end)) {
      overflow = true;
      most = UINT64_MAX;
      continue;
    }
    most = std::max (most, end);
  }
  if (needed)
    *needed = most;
  if (problem == Layout::Ok && (overflow || most > size))
    problem = Layout::PastEnd;
  return problem;
}

const char *
layout_problem (Layout l)
{
  switch (l) {
    case Layout::Ok:
      return "fits";
    case Layout::NoRows:
      return "a plane has no rows";
    case Layout::BadStride:
      return "a stride is zero or negative";
    case Layout::ShortStride:
      return "a stride is shorter than a row of pixels";
    case Layout::PastEnd:
      return "a plane reaches past the end of the buffer";
  }
  return "?";
}

bool
MaskReport::should_report (bool now_masked, Time now, Time interval)
{
  if (now_masked == masked)
    return false;
  if (is_valid (at) && now < sat_add (at, interval))
    return false; /* reported once the interval has passed if still changed */
  masked = now_masked;
  at = now;
  return true;
}

bool
RateLimit::allow (Time now, Time interval, uint64_t *held_back)
{
  if (is_valid (last) && now >= last && now - last < interval) {
    held++;
    return false;
  }
  if (held_back)
    *held_back = held;
  held = 0;
  last = now;
  return true;
}

bool
state_sample_ok (const float *values, size_t n, size_t expected)
{
  if (n != expected)
    return false;
  return std::all_of (values, values + n, [] (float x) { return std::isfinite (x); });
}

} // namespace pi0::mux
