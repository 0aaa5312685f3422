/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0actionsink's properties turned into the session's and the transport's settings
 * (pi0link.h). The messages are the element's: its tests read them. */

#include "protocol/pi0link.h"

#include <algorithm>

namespace pi0::proto
{

bool
configure_link (const LinkOptions &o, LinkConfig *out, std::string *error, std::string *hint)
{
  auto refuse = [&] (const std::string &msg, const char *how = "") {
    *error = msg;
    *hint = how;
    return false;
  };
  std::string err;
  Target target;
  if (!parse_target (o.target, &target, &err))
    return refuse ("Invalid target: " + err);
  if (o.transport.reconnect_max_ns < o.transport.reconnect_min_ns)
    return refuse ("reconnect-max must not be shorter than reconnect-min");
  if (o.hmac_key_set && o.hmac_key.empty ())
    return refuse ("hmac-key is empty: an empty key would turn authentication off",
                   "Set a non-empty key, or leave hmac-key unset to send without one.");
  const bool log = o.mode == SendMode::kLog;
  const bool external = target.type == TargetType::kExternal;
  if (external && o.hmac_key_set)
    return refuse ("hmac-key does not apply to a " + target.scheme +
                       ":// target: the link is in this process, and ROS 2 secures its own "
                       "traffic (SROS 2)",
                   "Leave hmac-key unset.");
  if (external && o.format == Format::kJson)
    return refuse ("format=json cannot be sent to a " + target.scheme + ":// target");
  if (external && o.robot_config.empty () && !log)
    return refuse ("A " + target.scheme +
                       ":// target needs robot-config: the joint names of what it publishes "
                       "come from its \"joints\"",
                   "Set robot-config to the robot's JSON configuration.");
  if (log && target.is_network ())
    return refuse ("mode=log writes the policy's raw chunks and never goes to a robot: use a "
                   "file:// or stdout target");
  SenderSettings ss = o.sender;
  ss.mode = o.mode;
  if (log) {
    /* Nothing here moves a robot: no limits to apply (robot-config, if set, is not used). */
  } else if (!o.robot_config.empty ()) {
    RobotConfig cfg;
    if (!load_robot_config (o.robot_config, &cfg, &err))
      return refuse ("Invalid robot configuration: " + err);
    ss.robot = std::move (cfg);
  } else if (!o.allow_unlimited) {
    return refuse (
        "No robot-config: refusing to send actions without joint limits",
        "Set robot-config to a JSON file with joints, lower, upper and max_step, or set "
        "allow-unlimited=true to send unclamped (but still finite) actions, e.g. for recording.");
  }
  const bool binary =
      o.format == Format::kBinary || (o.format == Format::kAuto && target.is_network ());
  if (!binary && target.type == TargetType::kUdp)
    return refuse (
        "format=json cannot be sent over UDP: a line may not fit a datagram; use binary");
  ss.period_ns = std::max<uint64_t> ((uint64_t)(1e9 / o.control_rate + 0.5), 1);
  ss.max_frame_size = binary && target.type == TargetType::kUdp ? o.datagram_size : 0;
  ss.hmac = !o.hmac_key.empty ();
  ss.key = binary ? o.hmac_key : ""; /* JSON lines carry no HMAC */
  if (!validate (ss, &err))
    return refuse (err);

  TransportSettings ts = o.transport;
  ts.binary = binary;
  ts.key = ss.key;
  /* The robot reports rows of chunks it schedules itself: chunk mode, on a link that carries
   * frames both ways. */
  ts.read_feedback =
      o.robot_feedback && binary && target.is_network () && o.mode == SendMode::kChunk;
  if (external && ss.robot)
    ts.joints = ss.robot->joint_names;
  out->target = std::move (target);
  out->sender = std::move (ss);
  out->transport = std::move (ts);
  return true;
}

bool
SenderLink::open (const LinkConfig &c, std::string *error)
{
  if (!transport_.open (c.target, c.transport, error))
    return false;
  session_.emplace (c.sender);
  out_.clear ();
  pending_.clear ();
  return true;
}

void
SenderLink::pump (uint64_t now, bool tell_session)
{
  transport_.pump (
      [this, now] (const uint8_t *data, size_t len) {
        if (const char *why = session_->robot_frame (now, data, len, out_))
          pending_.robot_drops.push_back (why);
      },
      now);
  if (tell_session)
    session_->link (now, transport_.up (), transport_.take_new_connection (), out_);
  deliver ();
}

ChunkResult
SenderLink::chunk (uint64_t now, const ChunkIn &c, std::string *error)
{
  const ChunkResult r = session_->chunk (now, c, out_, error);
  deliver ();
  return r;
}

void
SenderLink::tick (uint64_t now)
{
  session_->tick (now, out_);
  deliver ();
}

void
SenderLink::event (uint64_t now, SenderEvent e)
{
  session_->event (now, e, out_);
  deliver ();
}

void
SenderLink::take (LinkOutput &out)
{
  out.clear ();
  std::swap (out, pending_);
  /* Rows in between the first of a chunk and the newest add nothing. */
  std::vector<Feedback> &x = out.executing;
  size_t n = 0;
  for (size_t i = 0; i < x.size (); i++)
    if (i == 0 || i + 1 == x.size () || x[i].chunk_id != x[i - 1].chunk_id)
      x[n++] = x[i];
  x.resize (n);
}

std::vector<std::pair<const char *, uint64_t>>
SenderLink::stats (uint64_t rejected_before)
{
  const TransportCounters &t = transport_.counters ();
  const SenderCounters c = counters ();
  return {{"sent", t.action_rows},
          {"frames", t.frames},
          {"rejected", rejected_before + c.rejected},
          {"clamped", c.clamped},
          {"stale", c.stale},
          {"holds", c.holds},
          {"stops", c.stops},
          {"reconnects", transport_.reconnects ()},
          {"dropped", t.dropped},
          {"sessions", c.sessions},
          {"queued-bytes", transport_.queued_bytes ()},
          {"write-errors", t.write_errors},
          {"feedback", c.feedback},
          /* Refused by the session's rules, or before: garbage bytes, foreign datagrams. */
          {"feedback-dropped", c.feedback_dropped + t.garbage + t.foreign}};
}

/* Frames to the transport, the rest to pending_. */
void
SenderLink::deliver ()
{
  for (const OutFrame &f : out_.frames)
    if (transport_.send (f) == SendResult::kFailed)
      pending_.write_errors.push_back (transport_.error ());
  for (SentMessage &m : out_.sent)
    pending_.sent.push_back (std::move (m));
  for (std::string &w : out_.warnings)
    pending_.warnings.push_back (std::move (w));
  pending_.executing.insert (pending_.executing.end (), out_.executing.begin (),
                             out_.executing.end ());
  out_.clear ();
}

} // namespace pi0::proto
