/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The robot session's sending end, pi0::proto::Sender (pi0session.h): sessions and sequence
 * numbers, chunks through the safety gate, stream stepping, HOLD/STOP and the watchdog, the
 * robot's frames. Any change of a rule here is a change of docs/protocol.md and needs a test in
 * tests/libs/protocol/test_session.cpp. */

#include "protocol/pi0session.h"
#include "protocol/pi0sessiontime.h"

#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "pi0sender.cpp must be built without -ffast-math/-ffinite-math-only: they break NaN checks"
#endif

#include <glib.h>

#include <algorithm>
#include <cstring>
#include <iterator>

namespace pi0::proto
{

namespace
{

uint64_t
random_session_id ()
{
  return ((uint64_t)g_random_int () << 32) | g_random_int ();
}

} // namespace

bool
validate (const SenderSettings &s, std::string *error)
{
  auto fail = [&] (const std::string &m) {
    if (error)
      *error = m;
    return false;
  };
  if (s.period_ns == 0)
    return fail ("the step period (1 / control-rate) must not be zero");
  if (s.stop_timeout_ns < s.hold_timeout_ns)
    return fail ("stop-timeout must not be shorter than hold-timeout");
  if (s.robot && s.max_frame_size &&
      rows_per_frame (s.robot->dim (), s.hmac, s.max_frame_size) == 0)
    return fail ("datagram-size " + std::to_string (s.max_frame_size) +
                 " cannot hold one action of " + std::to_string (s.robot->dim ()) + " joints");
  return true;
}

Sender::Sender (SenderSettings settings, std::function<uint64_t ()> session_ids)
    : s_ (std::move (settings)), session_ids_ (std::move (session_ids))
{
  if (!session_ids_)
    session_ids_ = random_session_id;
  if (s_.period_ns == 0) /* validate() refuses it; never divide by it */
    s_.period_ns = 1;
  dim_ = s_.robot ? s_.robot->dim () : 0;
  new_session ();
}

/* A new session: on start and on every new connection. */
void
Sender::new_session ()
{
  do {
    session_id_ = session_ids_ ();
  } while (session_id_ == 0);
  seq_ = 0;
  announced_ = false;
  counters_.sessions++;
  /* The robot's reports answer one session: they start afresh with it. */
  sent_chunks_.clear ();
  fb_seq_ = 0;
  robot_reports_ = false;
  robot_lag_ns_ = 0;
}

/* HELLO then HOLD, once per session, as soon as the dimension is known and the link is up. */
void
Sender::announce (uint64_t now, SenderOutput &out)
{
  if (announced_ || dim_ == 0 || s_.mode == SendMode::kLog || !link_up_)
    return;
  announced_ = true;
  emit (Kind::kHello, nullptr, 0, 0, 0, 0, kTimeNone, now, 0, "", false, out);
  /* The greeting HOLD is part of the handshake, not a watchdog event. */
  const uint64_t holds = counters_.holds;
  const bool hold_sent = hold_sent_;
  send_hold (now, out);
  counters_.holds = holds;
  hold_sent_ = hold_sent;
}

/* One message; ACTION rows are split into frames of the datagram budget. */
void
Sender::emit (Kind kind, const float *values, uint32_t steps, uint32_t step_index,
              uint32_t chunk_steps, uint64_t chunk_id, uint64_t obs, uint64_t now, uint8_t flags,
              const std::string &model_id, bool first_of_chunk, SenderOutput &out)
{
  uint32_t rows_per = steps ? steps : 1;
  if (s_.max_frame_size && steps > 0)
    rows_per = rows_per_frame (dim_, s_.hmac, s_.max_frame_size);
  /* validate() and chunk() refuse a dimension for which this is 0. */
  if (rows_per == 0)
    rows_per = 1;
  uint32_t done = 0;
  do {
    const uint32_t n = steps ? std::min (rows_per, steps - done) : 0;
    OutFrame f;
    Header &h = f.header;
    h.kind = kind;
    h.flags = flags;
    if (kind == Kind::kAction) {
      h.flags &= (uint8_t)~kFlagLast;
      if (done + n == steps && (flags & kFlagLast))
        h.flags |= kFlagLast;
    }
    h.session_id = session_id_;
    h.seq = ++seq_;
    h.chunk_id = chunk_id;
    h.observation_time_ns = obs;
    h.send_time_ns = now;
    h.step_period_ns = s_.period_ns;
    h.step_index = step_index + done;
    h.chunk_steps = kind == Kind::kAction ? chunk_steps : n;
    h.steps = (uint16_t)n;
    h.dim = (uint16_t)((n || kind == Kind::kHello) ? dim_ : 0);
    if (n)
      f.values.assign (values + (size_t)done * dim_, values + (size_t)(done + n) * dim_);
    f.model_id = model_id;
    out.frames.push_back (std::move (f));
    done += n;
  } while (done < steps);
  if (kind != Kind::kHello) {
    SentMessage m;
    m.kind = kind;
    m.chunk_id = chunk_id;
    m.step_index = step_index;
    m.steps = steps;
    m.dim = steps ? dim_ : 0;
    if (steps)
      m.values.assign (values, values + (size_t)steps * dim_);
    m.time_ns = now;
    m.first_of_chunk = first_of_chunk;
    out.sent.push_back (std::move (m));
  }
}

/* Position the robot is presumed to be commanded to at @now, or nullptr if unknown. */
const float *
Sender::commanded_now (uint64_t now) const
{
  if (!sent_rows_.empty () && dim_) {
    /* Chunk mode: the row of the last chunk the robot runs when what is sent now reaches it:
     * the row its last report about that chunk puts there (a report's time is early by the
     * one-way delay, docs/protocol.md, FEEDBACK), or else the robot's schedule for it, counted
     * from its send time. Either way the one-way delay cancels. */
    const uint32_t nrows = (uint32_t)(sent_rows_.size () / dim_);
    uint64_t j = sent_first_;
    if (anchor_) {
      j = anchor_->row;
      if (now != kTimeNone && now > anchor_->time_ns)
        j = sat_add (j, (now - anchor_->time_ns) / s_.period_ns);
    } else if (now != kTimeNone && sent_ns_ != kTimeNone) {
      /* The robot's schedule ("Timing of rows"): row `first` on receipt, one row a period
       * after, later by the lag its reports showed. Not the rows' due times
       * (observation + i periods): row `first` was due up to a period before it was sent. */
      const uint64_t start = sat_add (sent_ns_, robot_lag_ns_);
      if (now > start)
        j = sat_add (j, (now - start) / s_.period_ns);
    }
    j = std::max<uint64_t> (j, sent_first_);
    j = std::min<uint64_t> (j, sent_first_ + nrows - 1);
    return sent_rows_.data () + (size_t)(j - sent_first_) * dim_;
  }
  if (have_last_)
    return last_cmd_.data ();
  if (s_.robot && !s_.robot->initial.empty () && !episode_reset_)
    return s_.robot->initial.data ();
  return nullptr;
}

void
Sender::send_hold (uint64_t now, SenderOutput &out)
{
  if (s_.mode == SendMode::kLog)
    return; /* a log is not a robot: nothing to hold */
  const float *pos = commanded_now (now);
  std::vector<float> hold;
  if (pos)
    hold.assign (pos, pos + dim_);
  emit (Kind::kHold, pos ? hold.data () : nullptr, pos ? 1 : 0, 0, 0, 0, kTimeNone, now, 0, "",
        false, out);
  /* From now on the robot holds this position: it is the reference for the next step bound. */
  if (pos) {
    last_cmd_ = std::move (hold);
    have_last_ = true;
  }
  sent_rows_.clear ();
  anchor_.reset ();
  hold_sent_ = true;
  counters_.holds++;
}

ChunkResult
Sender::chunk (uint64_t now, const ChunkIn &c, SenderOutput &out, std::string *error)
{
  auto fail = [&] (const std::string &m) {
    if (error)
      *error = m;
    return ChunkResult::kError;
  };
  if (c.horizon == 0 || c.dim == 0 || !c.values || c.horizon > kMaxSteps || c.dim > kMaxDim)
    return fail ("action chunk of " + std::to_string (c.horizon) + "x" + std::to_string (c.dim) +
                 " is outside what the protocol carries (1..4096 x 1..256)");
  if (dim_ == 0) {
    if (s_.max_frame_size && rows_per_frame (c.dim, s_.hmac, s_.max_frame_size) == 0)
      return fail ("datagram-size " + std::to_string (s_.max_frame_size) +
                   " cannot hold one action of " + std::to_string (c.dim) + " values");
    dim_ = c.dim; /* no configuration: the first chunk fixes the session's dimension */
  }
  if (c.dim != dim_)
    return fail ("action chunk has " + std::to_string (c.dim) + " values per action but " +
                 (s_.robot ? "the robot configuration has " + std::to_string (dim_) + " joints"
                           : "this stream started with " + std::to_string (dim_)));
  if (flushing_)
    return ChunkResult::kIgnored;

  const std::string name = "chunk " + std::to_string (c.chunk_id);
  if (s_.mode == SendMode::kLog) {
    /* The policy's output as it is, for recordings and replays: no limits, no age check.
     * Non-finite values are written as null. */
    emit (Kind::kAction, c.values, c.horizon, 0, c.horizon, c.chunk_id, c.observation_time_ns, now,
          kFlagLast, c.model_id, true, out);
    return ChunkResult::kSent;
  }
  announce (now, out);

  /* Whole-chunk gate: upstream's flag and our own scan (the flag can be stale if someone wrote
   * the actions after adding the meta). */
  if (check_chunk (cfg (), c.values, c.horizon, c.dim) != Verdict::kOk || c.flagged_non_finite) {
    counters_.rejected++;
    out.warnings.push_back (name + " holds a non-finite value: rejected whole, nothing sent");
    return ChunkResult::kRejected;
  }
  if (c.observation_time_ns == kTimeNone) {
    counters_.rejected++;
    out.warnings.push_back (name + " has no observation time: cannot tell its age, rejected");
    return ChunkResult::kRejected;
  }
  if (now == kTimeNone)
    return ChunkResult::kIgnored; /* not PLAYING (no clock): nothing may move the robot */
  const uint64_t obs = c.observation_time_ns;
  const uint64_t age = now > obs ? now - obs : 0;
  uint32_t limit = c.horizon;
  if (s_.execute_steps && s_.execute_steps < limit)
    limit = s_.execute_steps;
  const uint64_t first = age / s_.period_ns;
  if (age > s_.max_action_age_ns || first >= limit) {
    counters_.stale++;
    out.warnings.push_back (name + " is stale (observation " + std::to_string (age / 1000000) +
                            " ms old): dropped");
    return ChunkResult::kStale;
  }

  if (s_.mode == SendMode::kStream) {
    /* The newest chunk replaces whatever is left of the previous one at the next tick. */
    chunk_.values.assign (c.values, c.values + (size_t)c.horizon * c.dim);
    chunk_.limit = limit;
    chunk_.next = 0;
    chunk_.chunk_id = c.chunk_id;
    chunk_.obs = obs;
    chunk_.model_id = c.model_id;
    if (c.measured)
      chunk_.measured.assign (c.measured, c.measured + dim_);
    else
      chunk_.measured.clear ();
    have_chunk_ = true;
    return ChunkResult::kQueued;
  }

  /* Chunk mode: rows [first, limit) now, clamped in order; the first against what the robot is
   * executing at this moment. */
  const uint32_t rows = limit - (uint32_t)first;
  std::vector<float> rows_out ((size_t)rows * dim_);
  std::vector<float> prev_buf;
  if (const float *ref = commanded_now (now))
    prev_buf.assign (ref, ref + dim_);
  else if (episode_reset_ && c.measured)
    prev_buf.assign (c.measured, c.measured + dim_);
  bool any_clamped = false;
  for (uint32_t r = 0; r < rows; r++) {
    const float *in = c.values + (size_t)(first + r) * dim_;
    float *o = rows_out.data () + (size_t)r * dim_;
    if (s_.robot) {
      const float *prev = r ? o - dim_ : (prev_buf.empty () ? nullptr : prev_buf.data ());
      if (limit_action (*s_.robot, prev, in, o)) {
        counters_.clamped++;
        any_clamped = true;
      }
    } else {
      memcpy (o, in, dim_ * sizeof (float));
    }
  }
  emit (Kind::kAction, rows_out.data (), rows, (uint32_t)first, limit, c.chunk_id, obs, now,
        (uint8_t)(kFlagLast | (any_clamped ? kFlagClamped : 0)), c.model_id, true, out);
  /* The sender's estimate: the robot starts the chunk on receipt. Once the robot reports in
   * this session, its reports say it instead. */
  if (!robot_reports_)
    out.executing.push_back ({c.chunk_id, (uint32_t)first, now});
  sent_chunks_.push_back ({c.chunk_id, (uint32_t)first, limit, now});
  if (sent_chunks_.size () > kFeedbackHistory)
    sent_chunks_.pop_front ();
  sent_rows_ = std::move (rows_out);
  sent_first_ = (uint32_t)first;
  sent_ns_ = now;
  sent_chunk_id_ = c.chunk_id;
  sent_obs_ = obs;
  anchor_.reset ();
  have_last_ = false;
  episode_reset_ = false;
  /* The watchdog counts from the time the last row runs: obs + (limit-1)·period, but never
   * later than the robot's schedule puts it (row `first` now, one row per period after), so an
   * observation time in the future cannot push the watchdog away. */
  last_fresh_ = std::min (sat_add (obs, sat_mul (limit - 1, s_.period_ns)),
                          sat_add (now, sat_mul (limit - 1 - first, s_.period_ns)));
  hold_sent_ = stop_sent_ = false;
  return ChunkResult::kSent;
}

/* One row of the stream, from the current chunk, if one is due at @now. */
void
Sender::stream_step (uint64_t now, SenderOutput &out)
{
  if (!have_chunk_)
    return;
  Chunk &c = chunk_;
  const uint64_t age = now > c.obs ? now - c.obs : 0;
  if (age > s_.max_action_age_ns) {
    have_chunk_ = false;
    counters_.stale++;
    out.warnings.push_back ("chunk " + std::to_string (c.chunk_id) +
                            " became older than max-action-age; dropped");
    return;
  }
  const uint64_t k = age / s_.period_ns;
  if (k >= c.limit) {
    have_chunk_ = false; /* ran out: the watchdog takes over */
    return;
  }
  if (k < c.next)
    return; /* already sent (tick faster than the chunk's rows) */
  std::vector<float> row (dim_);
  const float *prev = commanded_now (now);
  if (!prev && episode_reset_ && !c.measured.empty ())
    prev = c.measured.data ();
  const float *in = c.values.data () + (size_t)k * dim_;
  unsigned changed = 0;
  if (s_.robot)
    changed = limit_action (*s_.robot, prev, in, row.data ());
  else
    row.assign (in, in + dim_);
  if (changed)
    counters_.clamped++;
  uint8_t flags = kFlagStream | (changed ? kFlagClamped : 0);
  if (k + 1 == c.limit)
    flags |= kFlagLast;
  emit (Kind::kAction, row.data (), 1, (uint32_t)k, c.limit, c.chunk_id, c.obs, now, flags,
        c.model_id, c.next == 0, out);
  out.executing.push_back ({c.chunk_id, (uint32_t)k, now});
  last_cmd_ = std::move (row);
  have_last_ = true;
  episode_reset_ = false;
  c.next = (uint32_t)k + 1;
  /* Due time of this row, but not later than now (it runs on receipt): an observation time in
   * the future cannot push the watchdog away. */
  last_fresh_ = std::min (sat_add (c.obs, sat_mul (k, s_.period_ns)), now);
  hold_sent_ = stop_sent_ = false;
}

void
Sender::watchdog (uint64_t now, SenderOutput &out)
{
  if (now < last_fresh_)
    return;
  const uint64_t idle = now - last_fresh_;
  if (!hold_sent_ && idle >= s_.hold_timeout_ns)
    send_hold (now, out);
  if (!stop_sent_ && idle >= s_.stop_timeout_ns) {
    emit (Kind::kStop, nullptr, 0, 0, 0, 0, kTimeNone, now, 0, "", false, out);
    stop_sent_ = true;
    hold_sent_ = true;
    counters_.stops++;
    have_chunk_ = false;
    out.warnings.push_back ("no fresh action for stop-timeout: STOP sent");
  }
}

void
Sender::tick (uint64_t now, SenderOutput &out)
{
  if (now == kTimeNone || s_.mode == SendMode::kLog)
    return;
  if (now >= next_tick_) {
    if (s_.mode == SendMode::kStream && !flushing_)
      stream_step (now, out);
    /* Skip ticks we were too late for rather than bursting to catch up. */
    next_tick_ = sat_add (next_tick_, s_.period_ns);
    if (next_tick_ <= now)
      next_tick_ =
          sat_add (next_tick_, sat_mul ((now - next_tick_) / s_.period_ns + 1, s_.period_ns));
  }
  watchdog (now, out);
}

uint64_t
Sender::next_deadline () const
{
  if (s_.mode == SendMode::kLog)
    return kTimeNone;
  uint64_t wake = next_tick_;
  if (!hold_sent_)
    wake = std::min (wake, sat_add (last_fresh_, s_.hold_timeout_ns));
  if (!stop_sent_)
    wake = std::min (wake, sat_add (last_fresh_, s_.stop_timeout_ns));
  return wake;
}

void
Sender::event (uint64_t now, SenderEvent e, SenderOutput &out)
{
  switch (e) {
    case SenderEvent::kPlaying:
      next_tick_ = now == kTimeNone ? 0 : now;
      last_fresh_ = next_tick_;
      stop_sent_ = false;
      break;
    case SenderEvent::kFlushStart:
      flushing_ = true;
      [[fallthrough]]; /* the rest of a flushed stream is not executed: the robot holds */
    case SenderEvent::kPaused:
    case SenderEvent::kEos:
      /* Pending actions belong to a stream that is paused, thrown away or ended: the robot
       * holds rather than finishing a plan nobody will follow up. */
      have_chunk_ = false;
      send_hold (now, out);
      break;
    case SenderEvent::kFlushStop:
      flushing_ = false;
      have_chunk_ = false;
      break;
    case SenderEvent::kEpisode:
      /* Nothing of the last episode's plan runs on, and none of it bounds the next step: the
       * robot holds where it is (a HOLD without a row) until the new episode's first chunk. */
      have_chunk_ = false;
      sent_rows_.clear ();
      anchor_.reset ();
      last_cmd_.clear ();
      have_last_ = false;
      episode_reset_ = true;
      send_hold (now, out);
      break;
  }
}

void
Sender::link (uint64_t now, bool up, bool new_connection, SenderOutput &out)
{
  /* Nothing queued for the old connection is replayed (the transport dropped it); the new
   * session starts with HELLO and HOLD, then stream mode resumes from the newest chunk at the
   * next tick and chunk mode with the next chunk. */
  if (new_connection && seq_ > 0)
    new_session ();
  link_up_ = up;
  announce (now, out);
}

void
Sender::feedback (uint64_t now, const Feedback &fb)
{
  (void)now;
  if (s_.mode != SendMode::kChunk || sent_rows_.empty () || !dim_ || fb.time_ns == kTimeNone)
    return;
  /* Any report about a chunk sent in this session says how late the robot starts rows against
   * its schedule (row `first` on receipt): that lag carries over to the next chunks. */
  for (const SentChunk &c : sent_chunks_) {
    if (c.chunk_id != fb.chunk_id || fb.row < c.first || fb.row >= c.limit)
      continue;
    const uint64_t due = sat_add (c.sent_ns, sat_mul (fb.row - c.first, s_.period_ns));
    /* Bounded: a robot more than max-action-age behind its schedule is not a lag to plan on. */
    robot_lag_ns_ = std::min<uint64_t> (fb.time_ns > due ? fb.time_ns - due : 0,
                                        s_.max_action_age_ns);
  }
  const uint32_t nrows = (uint32_t)(sent_rows_.size () / dim_);
  /* Only a report about the chunk being executed, about a row that was sent, is an anchor: a
   * late report about an older chunk says nothing about where this one is. */
  if (fb.chunk_id != sent_chunk_id_ || fb.row < sent_first_ || fb.row - sent_first_ >= nrows)
    return;
  anchor_ = fb;
}

/* The rules of docs/protocol.md, "What a sender checks", after decoding. Changes nothing. */
const char *
Sender::check_feedback (uint64_t now, const Frame &f) const
{
  const Header &h = f.header;
  if (h.kind != Kind::kFeedback)
    return "not-feedback";
  if (h.observation_time_ns != kTimeNone || h.step_period_ns != 0)
    return "bad-field";
  if (s_.mode != SendMode::kChunk)
    return "not-chunk-mode"; /* stream mode: the sender itself decides which row runs */
  if (h.session_id != session_id_)
    return "wrong-session";
  if (h.seq == 0 || h.seq > kMaxSeq)
    return "bad-seq";
  if (h.seq <= fb_seq_)
    return "old-seq";
  const SentChunk *c = nullptr;
  for (auto it = sent_chunks_.rbegin (); it != sent_chunks_.rend () && !c; ++it)
    if (it->chunk_id == h.chunk_id)
      c = &*it;
  if (!c)
    return "unknown-chunk";
  if (h.step_index < c->first || h.step_index >= c->limit)
    return "bad-row";
  const uint64_t t = h.send_time_ns;
  if (t == kTimeNone || now == kTimeNone)
    return "no-time";
  /* No row of a chunk starts before the chunk was sent. */
  if (t < c->sent_ns)
    return "too-early";
  /* One period of slack, as pi0infer allows: the robot's clock runs at its own rate. */
  if (t > now && t - now > s_.period_ns)
    return "future";
  if (now > t && now - t > sat_add (s_.max_action_age_ns, s_.period_ns))
    return "too-old";
  return nullptr;
}

const char *
Sender::robot_frame (uint64_t now, const uint8_t *data, size_t len, SenderOutput &out)
{
  Limits lim;
  lim.max_frame_size = kMaxFeedbackFrameSize;
  const Error e = decode (data, len, lim, s_.key, &fb_frame_);
  const char *why = e != Error::kOk ? error_name (e) : check_feedback (now, fb_frame_);
  if (why) {
    counters_.feedback_dropped++;
    return why;
  }
  const Header &h = fb_frame_.header;
  fb_seq_ = h.seq;
  const Feedback fb{h.chunk_id, h.step_index, h.send_time_ns};
  feedback (now, fb);
  robot_reports_ = true;
  out.executing.push_back (fb);
  counters_.feedback++;
  return nullptr;
}

} // namespace pi0::proto
