/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The robot session, sender and receiver side by side (pi0session.h). Any change of a rule here
 * is a change of docs/protocol.md and needs a test in tests/libs/protocol/test_session.cpp. */

#include "protocol/pi0session.h"

#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "pi0session.cpp must be built without -ffast-math/-ffinite-math-only: they break NaN checks"
#endif

#include <glib.h>

#include <algorithm>
#include <cstring>
#include <iterator>

namespace pi0::proto
{

namespace
{

/* a + b, saturating: timeouts may be "never" (UINT64_MAX) and times come from the network. */
uint64_t
sat_add (uint64_t a, uint64_t b)
{
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t
sat_mul (uint64_t a, uint64_t b)
{
  return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

uint64_t
random_session_id ()
{
  return ((uint64_t)g_random_int () << 32) | g_random_int ();
}

} // namespace

/* ---- Sender ------------------------------------------------------------------------------ */

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

/* ---- Receiver ---------------------------------------------------------------------------- */

bool
RowTiming::begin (uint64_t now, uint64_t id, uint32_t step_index, uint32_t steps, bool stream)
{
  if (!stream)
    next_step = step_index + steps;
  if (!stream && have_chunk && id == chunk_id)
    return false;
  have_chunk = !stream;
  chunk_id = id;
  base_ns = now;
  base_step = step_index;
  return true;
}

uint64_t
RowTiming::row_at (uint32_t step_index, uint64_t period_ns) const
{
  return sat_add (base_ns, sat_mul (step_index - base_step, period_ns));
}

bool
validate (const ReceiverSettings &s, std::string *error)
{
  auto fail = [&] (const std::string &m) {
    if (error)
      *error = m;
    return false;
  };
  if (s.robot && s.dim && s.dim != s.robot->dim ())
    return fail ("the expected dimension " + std::to_string (s.dim) +
                 " differs from the robot configuration's " + std::to_string (s.robot->dim ()) +
                 " joints");
  if (s.stop_timeout_ns && s.hold_timeout_ns && s.stop_timeout_ns < s.hold_timeout_ns)
    return fail ("the stop timeout must not be shorter than the hold timeout");
  return true;
}

Receiver::Receiver (ReceiverSettings settings) : s_ (std::move (settings))
{
  if (s_.robot) {
    s_.dim = s_.robot->dim ();
    if (!s_.robot->initial.empty ())
      position_ = s_.robot->initial;
  }
}

void
Receiver::advance (uint64_t now)
{
  while (!schedule_.empty () && schedule_.front ().at_ns <= now) {
    Scheduled &r = schedule_.front ();
    position_ = std::move (r.values);
    executing_ = {r.chunk_id, r.step_index, r.at_ns};
    exec_sender_ns_ = r.sender_ns;
    exec_session_ = session_;
    exec_serial_++;
    schedule_.pop_front ();
  }
}

void
Receiver::drop_schedule ()
{
  schedule_.clear ();
  /* A plan replaced, held or stopped: its rows are not reported any more (what runs next is). */
  reported_serial_ = exec_serial_;
}

void
Receiver::clear_schedule ()
{
  drop_schedule ();
  timing_.clear ();
}

const std::vector<float> &
Receiver::position (uint64_t now)
{
  advance (now);
  return position_;
}

Feedback
Receiver::executing (uint64_t now)
{
  advance (now);
  return executing_;
}

bool
Receiver::feedback (uint64_t now, Header *out)
{
  advance (now);
  if (exec_serial_ == reported_serial_ || exec_sender_ns_ == kTimeNone || !have_session_ ||
      exec_session_ != session_ || fb_seq_ >= kMaxSeq)
    return false;
  reported_serial_ = exec_serial_;
  Header h;
  h.kind = Kind::kFeedback;
  h.session_id = session_;
  h.seq = ++fb_seq_;
  h.chunk_id = executing_.chunk_id;
  h.step_index = executing_.row;
  h.send_time_ns = exec_sender_ns_;
  h.observation_time_ns = kTimeNone;
  h.step_period_ns = 0;
  *out = h;
  return true;
}

uint64_t
Receiver::next_row () const
{
  return schedule_.empty () ? kTimeNone : schedule_.front ().at_ns;
}

bool
Receiver::limit (const std::vector<float> *prev, const float *in, std::vector<float> &out)
{
  const unsigned n = s_.robot ? s_.robot->dim () : 0;
  if (!s_.robot || !prev || prev->size () != n)
    return false;
  out.resize (n);
  /* The values are within limits already (check()), so only the step can change them. */
  return limit_action (*s_.robot, prev->data (), in, out.data ()) != 0;
}

/* The rules after decoding, in docs/protocol.md's order. Changes nothing. */
const char *
Receiver::check (const Frame &f) const
{
  const Header &h = f.header;
  if (h.kind == Kind::kFeedback)
    return "bad-kind"; /* robot -> sender only: never executed, whoever reflects it */
  if (s_.dim && h.dim && h.dim != s_.dim)
    return "dim-mismatch";
  if (h.seq == 0 || h.seq > kMaxSeq)
    return "bad-seq";
  if (h.session_id == 0)
    return "bad-session";
  if (have_session_ && h.session_id == session_) {
    if (h.seq <= last_seq_)
      return "old-seq";
    if (h.seq - last_seq_ > kMaxSeqJump)
      return "seq-jump";
  } else if (std::find (retired_.begin (), retired_.end (), h.session_id) != retired_.end ()) {
    return "old-session"; /* a newer session has replaced it: never again */
  }
  if (h.kind == Kind::kAction) {
    if (h.step_period_ns == 0 || h.step_period_ns > kMaxStepPeriod)
      return "bad-period"; /* all rows at once, or a robot left waiting */
    /* Rows of one chunk come in order (frames of a split chunk); a frame going back into rows
     * already scheduled is not a plan the robot can follow. */
    if (timing_.goes_back (h.chunk_id, h.step_index, (h.flags & kFlagStream) != 0))
      return "step-order";
  }
  if (s_.robot && h.steps > 0 && h.dim == s_.robot->dim ()) {
    for (size_t i = 0; i < f.values.size (); i++) {
      const unsigned j = (unsigned)(i % h.dim);
      if (f.values[i] < s_.robot->lower[j] || f.values[i] > s_.robot->upper[j])
        return "limit";
    }
  }
  return nullptr;
}

void
Receiver::receive (uint64_t now, const uint8_t *data, size_t len, Received &out)
{
  out.reject = nullptr;
  out.new_session = false;
  out.rows.clear ();
  out.hold.clear ();
  out.hold_limited = false;
  const Error e = decode (data, len, s_.limits, s_.key, &out.frame);
  out.reject = e != Error::kOk ? error_name (e) : check (out.frame);
  if (out.reject) {
    counters_.rejected++;
    return;
  }
  const Header &h = out.frame.header;
  advance (now);
  if (!have_session_ || h.session_id != session_) {
    /* A new sender session: forget the old one's plan; its id is never accepted again. */
    if (have_session_) {
      retired_.push_back (session_);
      while (retired_.size () > s_.retired_sessions)
        retired_.pop_front ();
    }
    have_session_ = true;
    session_ = h.session_id;
    clear_schedule ();
    counters_.sessions++;
    /* FEEDBACK seq starts at the clock in microseconds, so a robot restarted within a session
     * goes on above the numbers it used before (docs/protocol.md, "FEEDBACK"). */
    fb_seq_ = now == kTimeNone ? 0 : now / 1000;
    out.new_session = true;
  }
  last_seq_ = h.seq;
  counters_.frames++;
  const std::vector<float> &v = out.frame.values;
  switch (h.kind) {
    case Kind::kHello:
      break;
    case Kind::kHold:
      clear_schedule ();
      if (!v.empty ()) {
        out.hold.assign (v.begin (), v.begin () + h.dim);
        std::vector<float> lim;
        if (limit (&position_, out.hold.data (), lim)) {
          out.hold = lim;
          out.hold_limited = true;
          counters_.limited++;
        }
        position_ = out.hold;
      }
      wd_hold_ = true;
      break;
    case Kind::kStop:
      clear_schedule ();
      stopped_ = true;
      wd_hold_ = wd_stop_ = true;
      break;
    case Kind::kFeedback: /* refused by check() */
      break;
    case Kind::kAction: {
      /* A stream row or a new chunk replaces whatever was planned (RowTiming says when rows
       * run). */
      const bool stream = (h.flags & kFlagStream) != 0;
      if (timing_.begin (now, h.chunk_id, h.step_index, h.steps, stream)) {
        drop_schedule ();
        if (!stream)
          chunk_send_ns_ = h.send_time_ns;
      }
      for (uint32_t r = 0; r < h.steps; r++) {
        ExecRow row;
        row.chunk_id = h.chunk_id;
        row.step_index = h.step_index + r;
        row.at_ns = timing_.row_at (row.step_index, h.step_period_ns);
        const float *in = v.data () + (size_t)r * h.dim;
        const std::vector<float> *prev =
            schedule_.empty () ? &position_ : &schedule_.back ().values;
        if (limit (prev, in, row.values)) {
          row.limited = true;
          row.requested.assign (in, in + h.dim);
          counters_.limited++;
        } else {
          row.values.assign (in, in + h.dim);
        }
        /* Its start on the sender's clock, for FEEDBACK: the chunk's send time plus the time
         * from its receipt to the row's start. */
        const uint64_t sender_ns = stream || chunk_send_ns_ == kTimeNone
                                       ? kTimeNone
                                       : sat_add (chunk_send_ns_, row.at_ns - timing_.base_ns);
        schedule_.push_back ({row.at_ns, row.chunk_id, row.step_index, row.values, sender_ns});
        commanded_ = true;
        last_cmd_ns_ = std::max (now, row.at_ns);
        counters_.executed++;
        out.rows.push_back (std::move (row));
      }
      stopped_ = false;
      wd_hold_ = wd_stop_ = false;
      /* Rows due now run now. */
      advance (now);
      break;
    }
  }
}

uint64_t
Receiver::next_deadline () const
{
  uint64_t wake = kTimeNone;
  if (!commanded_)
    return wake;
  if (s_.hold_timeout_ns && !wd_hold_)
    wake = std::min (wake, sat_add (last_cmd_ns_, s_.hold_timeout_ns));
  if (s_.stop_timeout_ns && !wd_stop_)
    wake = std::min (wake, sat_add (last_cmd_ns_, s_.stop_timeout_ns));
  return wake;
}

void
Receiver::tick (uint64_t now, std::vector<WatchdogEvent> &out)
{
  if (!commanded_ || now == kTimeNone)
    return;
  advance (now);
  if (s_.hold_timeout_ns && !wd_hold_ && now >= sat_add (last_cmd_ns_, s_.hold_timeout_ns)) {
    clear_schedule ();
    wd_hold_ = true;
    out.push_back ({Kind::kHold, sat_add (last_cmd_ns_, s_.hold_timeout_ns)});
  }
  if (s_.stop_timeout_ns && !wd_stop_ && now >= sat_add (last_cmd_ns_, s_.stop_timeout_ns)) {
    clear_schedule ();
    wd_hold_ = wd_stop_ = true;
    stopped_ = true;
    out.push_back ({Kind::kStop, sat_add (last_cmd_ns_, s_.stop_timeout_ns)});
  }
}

/* ---- CommandTimeline --------------------------------------------------------------------- */

void
CommandTimeline::drop_after (int64_t t_ns)
{
  while (!entries_.empty () && entries_.back ().t > t_ns)
    entries_.pop_back ();
}

void
CommandTimeline::add (const std::string &kind, uint64_t chunk_id, uint32_t step_index,
                      int64_t send_ns, const float *values, size_t rows, size_t dim)
{
  if (kind == "hold" || kind == "stop") {
    /* The Receiver clears its schedule: the rows still pending never run. */
    timing_.clear ();
    drop_after (send_ns);
    if (kind == "hold" && values && dim && rows)
      entries_.push_back ({send_ns, std::vector<float> (values, values + dim)});
    return; /* STOP, or HOLD without a position: the robot stays where it is */
  }
  if (kind != "action" || timing_.goes_back (chunk_id, step_index, stream_))
    return; /* a HELLO changes nothing; a step-order frame is refused */
  if (timing_.begin ((uint64_t)send_ns, chunk_id, step_index, (uint32_t)rows, stream_))
    drop_after (send_ns);
  if (!values || dim == 0)
    return;
  for (size_t j = 0; j < rows; j++)
    entries_.push_back ({(int64_t)timing_.row_at (step_index + (uint32_t)j, (uint64_t)period_),
                         std::vector<float> (values + j * dim, values + (j + 1) * dim)});
}

const std::vector<float> *
CommandTimeline::at (int64_t t_ns) const
{
  auto it = std::upper_bound (entries_.begin (), entries_.end (), t_ns,
                              [] (int64_t t, const Entry &e) { return t < e.t; });
  if (it == entries_.begin ())
    return nullptr;
  return &std::prev (it)->v;
}

void
CommandTimeline::prune (int64_t t_ns)
{
  auto it = std::upper_bound (entries_.begin (), entries_.end (), t_ns,
                              [] (int64_t t, const Entry &e) { return t < e.t; });
  if (it == entries_.begin ())
    return;
  entries_.erase (entries_.begin (), std::prev (it));
}

} // namespace pi0::proto
