#include "inference/model/pi0rtctracker.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "inference/io/pi0error.h"

namespace pi0
{

void
RtcTracker::reset ()
{
  std::lock_guard<std::mutex> lk (lock_);
  history_.clear ();
  feedback_.reset ();
  first_sequence_ = 0;
}

void
RtcTracker::chunk_made (uint64_t sequence, uint64_t observation_time, uint32_t horizon,
                        uint32_t dim, const float *actions)
{
  const size_t n = (size_t)horizon * dim;
  if (n > 0 && !actions)
    throw Error ("RtcTracker::chunk_made: chunk " + std::to_string (sequence) + " has " +
                 std::to_string (horizon) + "x" + std::to_string (dim) + " actions but none given");
  Chunk c;
  c.sequence = sequence;
  c.observation_time = observation_time;
  c.horizon = horizon;
  c.dim = dim;
  if (n > 0)
    c.actions.assign (actions, actions + n);
  std::lock_guard<std::mutex> lk (lock_);
  if (history_.empty ()) /* only reset() empties it: the first chunk since then */
    first_sequence_ = sequence;
  history_.push_back (std::move (c));
  if (history_.size () > kHistory)
    history_.pop_front ();
}

std::string
RtcTracker::feedback (uint64_t chunk_id, uint32_t row, uint64_t time, uint64_t period, uint64_t now,
                      bool *forgotten)
{
  if (forgotten)
    *forgotten = false;
  if (period == 0)
    return "row " + std::to_string (row) + " of chunk " + std::to_string (chunk_id) +
           " comes with a period of 0";
  /* time > now + period, without overflow. */
  if (now != kTimeNone && time > now && time - now > period)
    return "row " + std::to_string (row) + " of chunk " + std::to_string (chunk_id) +
           " is said to start in the future (" + std::to_string (time) + " ns, now " +
           std::to_string (now) + " ns)";
  std::lock_guard<std::mutex> lk (lock_);
  Chunk *c = nullptr;
  for (Chunk &h : history_)
    if (h.sequence == chunk_id)
      c = &h;
  if (!c && !history_.empty () && chunk_id >= first_sequence_ &&
      chunk_id < history_.front ().sequence) {
    if (forgotten)
      *forgotten = true;
    return "chunk " + std::to_string (chunk_id) + " is older than the last " +
           std::to_string (kHistory) + " chunks made here (a report that came too late)";
  }
  if (!c)
    return "chunk " + std::to_string (chunk_id) + " is not one of the last chunks made here";
  if (row >= c->horizon)
    return "row " + std::to_string (row) + " is beyond chunk " + std::to_string (chunk_id) + "'s " +
           std::to_string (c->horizon) + " rows";
  if (c->first_row < 0)
    c->first_row = row;
  feedback_ = Feedback{chunk_id, row, time, period};
  return "";
}

bool
RtcTracker::guidance (uint64_t observation_time, uint64_t now, double last_inference_ms,
                      int64_t execution_horizon, double max_guidance_weight, bool identity_jacobian,
                      PolicyGuidance *out) const
{
  std::vector<float> rows;
  uint32_t dim = 0;
  int64_t delay = -1, shift = 0;
  uint64_t period = 0;
  {
    std::lock_guard<std::mutex> lk (lock_);
    if (!feedback_ || history_.empty () || observation_time == kTimeNone)
      return false;
    const Chunk &c = history_.back ();
    if (c.observation_time == kTimeNone || observation_time < c.observation_time || c.dim == 0)
      return false;
    period = feedback_->period;
    /* round(elapsed / period), halves up, without overflow. */
    const uint64_t elapsed = observation_time - c.observation_time;
    const uint64_t q = elapsed / period;
    if (q >= c.horizon)
      return false; /* the executing chunk has run out by now */
    shift = (int64_t)q + (elapsed % period >= period - period / 2 ? 1 : 0);
    if (shift >= (int64_t)c.horizon)
      return false;
    dim = c.dim;
    rows.assign (c.actions.begin () + (size_t)shift * dim, c.actions.end ());
    for (auto it = history_.rbegin (); it != history_.rend (); ++it)
      if (it->first_row >= 0) {
        delay = it->first_row;
        break;
      }
  }
  const int64_t n = (int64_t)rows.size () / dim;
  if (delay < 0) {
    double since =
        now != kTimeNone && now > observation_time ? (double)(now - observation_time) : 0.0;
    double ms = last_inference_ms > 0 ? last_inference_ms : 0.0; /* also NaN: 0 */
    double d = std::ceil ((since + ms * 1e6) / (double)period);
    delay = d >= (double)n ? n : (int64_t)d;
  }
  out->prefix = at::from_blob (rows.data (), {n, (int64_t)dim}, at::kFloat).clone ();
  out->delay = std::min (delay, n);
  out->execution_horizon = execution_horizon ? execution_horizon : shift;
  out->max_guidance_weight = max_guidance_weight;
  out->identity_jacobian = identity_jacobian;
  return true;
}

std::optional<RtcTracker::Feedback>
RtcTracker::last_feedback () const
{
  std::lock_guard<std::mutex> lk (lock_);
  return feedback_;
}

size_t
RtcTracker::chunks () const
{
  std::lock_guard<std::mutex> lk (lock_);
  return history_.size ();
}

} // namespace pi0
