/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The sender end of a robot link, as pi0actionsink runs it, without GStreamer: what its
 * properties mean (configure_link: which target, which encoding, whether limits are required,
 * the step period, the datagram budget, the key, whether the robot's FEEDBACK is read), and the
 * session and its transport driven together (SenderLink: frames to the transport, the robot's
 * frames to the session, the link's state to the session). The element copies properties in,
 * calls SenderLink with the clock's time under its lock, and posts, signals and pushes what
 * comes out. */

#include "protocol/pi0session.h"
#include "protocol/pi0transport.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pi0::proto
{

/* The encoding of frames (the order of GstPi0ActionSinkFormat). */
enum class Format { kAuto, kJson, kBinary };

/* pi0actionsink's properties, as set. */
struct LinkOptions {
  std::string target = "stdout";
  Format format = Format::kAuto;
  SendMode mode = SendMode::kStream;
  double control_rate = 50.0;
  std::string robot_config; /* path of the JSON configuration; empty: none */
  bool allow_unlimited = false;
  std::string hmac_key;
  bool hmac_key_set = false; /* set, possibly to "" (refused) */
  size_t datagram_size = kDefaultDatagramSize;
  bool robot_feedback = true;  /* chunk mode over udp/tcp: read the robot's FEEDBACK */
  SenderSettings sender;       /* execute-steps, max-action-age, hold/stop-timeout */
  TransportSettings transport; /* max-send-buffer, reconnect-min/max */
};

/* What the sink opens and runs. */
struct LinkConfig {
  Target target;
  SenderSettings sender;
  TransportSettings transport;
};

/* Checks @o and fills @out (the robot configuration file is read here). False with *error, a
 * sentence naming the property, and *hint, how to fix it (may be empty). */
bool configure_link (const LinkOptions &o, LinkConfig *out, std::string *error, std::string *hint);

/* What a SenderLink decided since it was last asked. */
struct LinkOutput {
  std::vector<SentMessage> sent;     /* ACTION, HOLD and STOP messages, in order */
  std::vector<std::string> warnings; /* the session's: rejected or stale chunks, STOP */
  /* What the robot executes, worth telling upstream: the first row of each chunk (the delay it
   * had) and the newest (where the robot is now). */
  std::vector<Feedback> executing;
  std::vector<std::string> write_errors; /* file/stdout writes that failed: why */
  std::vector<const char *> robot_drops; /* robot frames refused: why (static strings) */
  void clear ()
  {
    sent.clear ();
    warnings.clear ();
    executing.clear ();
    write_errors.clear ();
    robot_drops.clear ();
  }
};

/* A Sender and its Transport. Every frame the session makes goes to the transport at once;
 * the rest waits in take(). Not thread-safe: the caller holds its lock. */
class SenderLink
{
public:
  /* Opens the transport for a new session. False with a message. */
  bool open (const LinkConfig &c, std::string *error);
  void close () { transport_.close (); }
  /* The transport's work (connect, flush, read what the robot sent, whose frames go to the
   * session); then, with @tell_session, the link's state to the session (which announces a
   * new session once it can). */
  void pump (uint64_t now, bool tell_session = true);
  ChunkResult chunk (uint64_t now, const ChunkIn &c, std::string *error);
  void tick (uint64_t now);
  void event (uint64_t now, SenderEvent e);
  /* Moves what was decided since the last call into @out (cleared first). */
  void take (LinkOutput &out);

  bool is_open () const { return session_.has_value (); }
  uint64_t next_deadline () const { return session_->next_deadline (); }
  const SenderSettings &settings () const { return session_->settings (); }
  SenderCounters counters () const { return session_ ? session_->counters () : SenderCounters (); }
  Transport &transport () { return transport_; }
  /* The counters since open(), named and ordered as pi0actionsink's stats (docs/elements);
   * @rejected_before: chunks the caller refused before the session saw them. */
  std::vector<std::pair<const char *, uint64_t>> stats (uint64_t rejected_before);

private:
  void deliver ();

  std::optional<Sender> session_;
  Transport transport_;
  SenderOutput out_;
  LinkOutput pending_;
};

} // namespace pi0::proto
