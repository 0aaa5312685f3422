/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Frames of pi0actionsink into what a ros2_control controller takes (pi0roslinkplan.h). */

#include "ros2/pi0roslinkplan.h"

#include <glib.h>

#include <algorithm>

namespace pi0::ros
{

void
LinkPlan::frame (const uint8_t *data, size_t len, const std::vector<float> *measured,
                 std::vector<Command> &out)
{
  proto::Limits lim;
  lim.max_frame_size = proto::kMaxFrameSize;
  proto::Frame f;
  if (proto::decode (data, len, lim, "", &f) != proto::Error::kOk) {
    c_.refused++;
    return;
  }
  const proto::Header &h = f.header;
  if (h.kind == proto::Kind::kHello || h.session_id != session_) {
    /* A new session: the reports of the old one mean nothing to it. The report counter starts
     * at the monotonic clock in microseconds, as the reference robot's does (docs/protocol.md). */
    session_ = h.session_id;
    fb_seq_ = (uint64_t)std::max<int64_t> (g_get_monotonic_time (), 1);
    have_chunk_ = false;
  }
  auto row = [&] (unsigned r) {
    return std::vector<double> (f.values.begin () + (long)r * h.dim,
                                f.values.begin () + (long)(r + 1) * h.dim);
  };
  auto hold_at = [&] () -> std::optional<std::vector<double>> {
    /* Where the robot is, measured; else where the sender says it is; else nothing. */
    if (measured && measured->size () == dim_)
      return std::vector<double> (measured->begin (), measured->end ());
    if (h.steps == 1 && h.dim == dim_)
      return row (0);
    return std::nullopt;
  };
  Command c;
  c.from = h.kind;
  c.chunk_id = h.chunk_id;
  c.first_step = h.step_index;
  c.start_ns = h.send_time_ns;
  c.period_ns = h.step_period_ns;
  switch (h.kind) {
    case proto::Kind::kHello:
    case proto::Kind::kFeedback:
      return;
    case proto::Kind::kAction: {
      if (h.dim != dim_) {
        c_.refused++;
        return;
      }
      const bool stream = h.flags & proto::kFlagStream;
      if (mode_ == LinkMode::kCommands) {
        if (!stream) {
          /* A forward command controller has no schedule to put a chunk on. */
          c_.refused++;
          return;
        }
        c.kind = Command::Kind::kPosition;
        c.points.push_back (row (0));
        c_.positions++;
        out.push_back (std::move (c));
        return;
      }
      const bool continues =
          have_chunk_ && !stream && h.chunk_id == chunk_id_ && h.step_index == first_ + steps_;
      if (continues) {
        /* The rest of a chunk split over several frames keeps its rows' places. */
        c.start_ns = start_ns_ + (uint64_t)(h.step_index - first_) * period_ns_;
        steps_ += h.steps;
      } else if (!stream) {
        have_chunk_ = true;
        chunk_id_ = h.chunk_id;
        first_ = h.step_index;
        steps_ = h.steps;
        start_ns_ = h.send_time_ns;
        period_ns_ = std::max<uint64_t> (h.step_period_ns, 1);
        reported_row_ = -1;
      } else {
        have_chunk_ = false; /* a stream row replaces any plan */
      }
      c.kind = Command::Kind::kTrajectory;
      for (unsigned r = 0; r < h.steps; r++)
        c.points.push_back (row (r));
      c_.trajectories++;
      out.push_back (std::move (c));
      return;
    }
    case proto::Kind::kHold: {
      have_chunk_ = false;
      c_.holds++;
      std::optional<std::vector<double>> at = hold_at ();
      if (mode_ == LinkMode::kCommands) {
        if (!at)
          return; /* nothing to command: the controller keeps its last command */
        c.kind = Command::Kind::kPosition;
        c.points.push_back (*at);
        c_.positions++;
      } else if (at) {
        c.kind = Command::Kind::kTrajectory;
        c.points.push_back (*at);
        c_.trajectories++;
      } else {
        c.kind = Command::Kind::kStop;
        c_.stops++;
      }
      out.push_back (std::move (c));
      return;
    }
    case proto::Kind::kStop: {
      have_chunk_ = false;
      if (mode_ == LinkMode::kCommands) {
        if (!measured || measured->size () != dim_)
          return;
        c.kind = Command::Kind::kPosition;
        c.points.emplace_back (measured->begin (), measured->end ());
        c_.positions++;
      } else {
        c.kind = Command::Kind::kStop;
        c_.stops++;
      }
      out.push_back (std::move (c));
      return;
    }
  }
}

bool
LinkPlan::feedback (uint64_t now, bool robot_alive, std::vector<uint8_t> *frame)
{
  if (!have_chunk_ || !robot_alive || now == proto::kTimeNone || now < start_ns_ || steps_ == 0)
    return false;
  const uint64_t k = std::min<uint64_t> ((now - start_ns_) / period_ns_, steps_ - 1);
  const int64_t row = (int64_t)first_ + (int64_t)k;
  if (row == reported_row_)
    return false;
  reported_row_ = row;
  proto::Header h;
  h.kind = proto::Kind::kFeedback;
  h.session_id = session_;
  h.seq = ++fb_seq_;
  h.chunk_id = chunk_id_;
  h.observation_time_ns = proto::kTimeNone;
  h.send_time_ns = start_ns_ + k * period_ns_;
  h.step_period_ns = 0;
  h.step_index = (uint32_t)row;
  frame->clear ();
  proto::encode (h, nullptr, "", *frame);
  c_.feedback++;
  return true;
}

} // namespace pi0::ros
