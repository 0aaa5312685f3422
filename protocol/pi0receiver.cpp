/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The robot session's receiving end, pi0::proto::Receiver (pi0session.h): what a robot accepts,
 * when each row runs, what it reports back, its watchdog; and the CommandTimeline of what was
 * commanded when. Any change of a rule here is a change of docs/protocol.md and needs a test in
 * tests/libs/protocol/test_session.cpp. */

#include "protocol/pi0session.h"
#include "protocol/pi0sessiontime.h"

#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "pi0receiver.cpp must be built without -ffast-math/-ffinite-math-only: they break NaN checks"
#endif

#include <algorithm>
#include <cstring>
#include <iterator>

namespace pi0::proto
{

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
