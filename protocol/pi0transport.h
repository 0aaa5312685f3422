/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Where pi0actionsink's frames go: a UDP socket, a TCP connection (non-blocking connect,
 * reconnection with bounded backoff, a bounded send queue), a file or stdout; and what the robot
 * sends back on the same socket (its FEEDBACK frames, docs/protocol.md). Nothing here ever
 * blocks: sockets are non-blocking, a peer that does not keep up costs dropped frames, not time
 * or memory, and a peer that talks too much is read a bounded amount per pump(). GIO, no
 * GStreamer; not thread-safe (the caller holds its lock). */

#include "protocol/pi0external.h"
#include "protocol/pi0session.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <string>
#include <vector>

typedef struct _GSocket GSocket;
typedef struct _GInetSocketAddress GInetSocketAddress;

namespace pi0::proto
{

/* kExternal: a link outside this library (`ros2://`, pi0external.h). */
enum class TargetType { kUdp, kTcp, kFile, kStdout, kExternal };

struct Target {
  TargetType type = TargetType::kStdout;
  std::string host; /* numeric IP address (udp, tcp) */
  uint16_t port = 0;
  std::string path;   /* file */
  std::string scheme; /* external: "ros2" */
  std::string uri;    /* external: the whole target, for the link to read */
  /* A link to a robot (frames both ways, binary, never a log). */
  bool is_network () const
  {
    return type == TargetType::kUdp || type == TargetType::kTcp || type == TargetType::kExternal;
  }
};

/* `udp://IP:PORT`, `tcp://IP:PORT`, `file:///path`, `stdout` or `ros2:///TOPIC[?...]` (read by
 * the pi0ros2 plugin's link, not here). Numeric addresses only: a name would need a blocking
 * lookup, and an action target should be an explicit address. False with a message otherwise. */
bool parse_target (const std::string &uri, Target *out, std::string *error);

struct TransportSettings {
  bool binary = true; /* frames as docs/protocol.md's binary frames, or as JSON lines */
  std::string key;    /* binary: HMAC key (empty: no HMAC trailer) */
  size_t max_send_buffer = 64 * 1024;    /* TCP: bytes queued before the oldest are dropped */
  uint64_t reconnect_min_ns = 100000000; /* TCP: first retry delay, doubling per failure */
  uint64_t reconnect_max_ns = 2000000000;
  /* udp, tcp: hand what the robot sends to pump()'s callback as candidate frames (TCP:
   * reassembled and resynchronised; UDP: datagrams from the target's address only). Off: what
   * the robot sends is read and thrown away (TCP, to notice a close) or left unread (UDP). */
  bool read_feedback = false;
  size_t max_read_per_pump = 64 * 1024; /* bytes read from the robot per pump() at most */
  /* external targets: the link's table (from the plugin that serves the scheme) and the robot
   * configuration's joint names. */
  const Pi0ExternalLink *external = nullptr;
  std::vector<std::string> joints;
};

enum class SendResult {
  kSent,    /* handed over (TCP: queued or on the wire) */
  kDropped, /* not taken: no peer, full queue, datagram refused */
  kFailed,  /* a file or stdout write failed: error() says why */
};

/* What became of the frames given to send() since open(). */
struct TransportCounters {
  uint64_t frames = 0;       /* handed over */
  uint64_t action_rows = 0;  /* rows of the ACTION frames handed over */
  uint64_t dropped = 0;      /* not taken (no peer, full queue), or lost with a connection */
  uint64_t write_errors = 0; /* file/stdout writes that failed (also counted as dropped) */
  /* From the robot (read_feedback): */
  uint64_t garbage = 0; /* TCP: runs of bytes skipped to find a frame; UDP: oversized datagrams */
  uint64_t foreign = 0; /* UDP datagrams from another address than the target's */
};

/* Called by pump() with each candidate frame from the robot (complete, not yet decoded). */
using FrameCallback = std::function<void (const uint8_t *data, size_t len)>;

class Transport
{
public:
  /* target=stdout: how long one frame may wait for room before the write fails. */
  static constexpr int kStdoutTimeoutMs = 1000;

  Transport () = default;
  ~Transport () { close (); }
  Transport (const Transport &) = delete;
  Transport &operator= (const Transport &) = delete;

  /* Opens @target; TCP only starts connecting in pump(). False with a message. */
  bool open (const Target &target, const TransportSettings &s, std::string *error);
  void close ();

  /* Drives TCP: completes a pending connect, retries with backoff, flushes the queue, notices a
   * closed peer. Reads what the robot sent (read_feedback) and calls @on_frame for each
   * candidate frame. Cheap when nothing is to be done. */
  void pump (const FrameCallback &on_frame = nullptr, uint64_t now = kTimeNone);
  /* Sends or queues one frame. Frames never wait for a peer: with no connection they are
   * dropped (a reconnect starts a new session and must not replay old actions). */
  SendResult write (const uint8_t *data, size_t len);
  /* Encodes @f as the settings say and writes it, counting the outcome. */
  SendResult send (const OutFrame &f);

  /* True once after each new TCP connection (the caller starts a new session on it). */
  bool take_new_connection ();
  /* The link can carry frames now (always for files and UDP). */
  bool up () const;
  bool is_network () const { return target_.is_network (); }
  uint64_t reconnects () const { return reconnects_; }
  const TransportCounters &counters ();
  /* Frames the TCP queue dropped to make room, or lost with a connection, since last asked. */
  uint64_t take_queue_drops ();
  size_t queued_bytes () const { return queued_; }
  /* Why the last file write or connection attempt failed. */
  const std::string &error () const { return error_; }

private:
  void start_connect (int64_t now);
  void on_connected ();
  void flush (int64_t now);
  void drop_connection ();
  void fail (int64_t now);
  /* False when the connection failed (and was dropped). */
  bool read_tcp (int64_t now, const FrameCallback &on_frame);
  void read_udp (const FrameCallback &on_frame);

  Target target_;
  TransportSettings s_;
  GInetSocketAddress *addr_ = nullptr;
  GSocket *sock_ = nullptr;
  void *external_ = nullptr; /* the external link's handle */
  FILE *file_ = nullptr;
  bool own_file_ = false;
  bool stdout_open_ = false;
  bool stdout_socket_ = false;
  bool stdout_stalled_ = false; /* the last write timed out */
  bool connected_ = false;
  bool ever_connected_ = false;
  bool new_connection_ = false;
  int64_t next_attempt_ = 0;
  int64_t connect_started_ = 0;
  uint64_t backoff_ = 0;
  std::deque<std::vector<uint8_t>> queue_;
  size_t head_off_ = 0;
  size_t queued_ = 0;
  uint64_t reconnects_ = 0;
  uint64_t dropped_in_queue_ = 0;
  TransportCounters counters_;
  std::vector<uint8_t> buf_;
  FrameStream in_{kMaxFeedbackFrameSize}; /* TCP: the robot's side of the stream */
  uint64_t in_resyncs_ = 0;               /* in_.resyncs() already counted */
  std::string error_;
};

} // namespace pi0::proto
