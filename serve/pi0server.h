/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The policy server's network end: openpi's websocket protocol on libsoup 3, no GStreamer.
 *
 * A Server accepts robots (openpi-client's WebsocketClientPolicy, unchanged), sends each the
 * metadata on connect, decodes every request with the mapping (pi0codec.h), and queues it for
 * whoever computes the answer: `pi0servesrc` pops requests and turns them into observation
 * buffers, `pi0servesink` hands back the action chunk (or an error) for a (client, request)
 * pair. Servers are found by name (get()), which is how the two elements of a pipeline pair up.
 *
 * The protocol, as openpi's server speaks it (src/openpi/serving/websocket_policy_server.py):
 *  - `GET /healthz` answers 200 "OK" (here: only while the pipeline is PLAYING, 503 otherwise,
 *    so it can serve as a Kubernetes readiness probe);
 *  - any other path upgrades to a websocket; the server first sends the metadata (msgpack map);
 *  - each binary message is one observation, answered by one binary message with `actions`,
 *    `policy_timing` and `server_timing` (`infer_ms`, `prev_total_ms`), in order;
 *  - an error is a text message (the reason) followed by a close with code 1011, as openpi's
 *    server sends its traceback; openpi-client raises it as a RuntimeError.
 *  - `Authorization: Api-Key <key>` (the header openpi-client sends when given api_key) is
 *    required when a key is set: anything else gets HTTP 401 before the upgrade.
 *
 * What a client cannot do to the server: send a message over the size limit (libsoup refuses a
 * bigger frame, and the bytes a connection may send between two complete messages are bounded
 * too, which catches a message split into many small fragments), send msgpack that is deeper,
 * longer or of other types than an observation can be (pi0codec), connect more than
 * max_clients times, keep a connection in the handshake for longer than handshake_timeout,
 * lock robots out with sockets that never finish a handshake (at most max_pending of those, the
 * oldest closed first), hold a session while answering no pings (pong_timeout), queue more than
 * max_ahead requests ahead of their answers (those within it are answered in order, as openpi
 * answers them), negotiate compression (permessage-deflate is refused, as openpi's server runs
 * with compression=None: the size limit holds on the wire), or reach the server from a web page
 * of another site (an Origin header must name the host the request is for, which is what
 * websocket-client sends by default; a browser on another site sends its own).
 *
 * Threads: the server runs its own GLib main context in its own thread (so it works in
 * gst-launch-1.0, without the application's main loop). pop(), reply(), fail(), set_ready()
 * and stats() may be called from any thread. */

#include "serve/pi0codec.h"
#include "serve/pi0mapping.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

typedef struct _GBytes GBytes;
typedef struct _GMainContext GMainContext;

namespace pi0::serve
{

struct ServerSettings {
  std::string host = "127.0.0.1"; /* numeric address: 0.0.0.0 or :: to listen on every one */
  int port = 8000;                /* 0: a free port (see Server::port()) */
  std::string api_key;            /* empty: no key required */
  size_t max_message = 16u << 20; /* bytes per websocket message */
  int max_clients = 16;           /* websocket sessions at once */
  /* A TCP peer that has not become a websocket session by then is closed. */
  double handshake_timeout_s = 10;
  /* TCP peers that are not (yet) sessions (handshakes, health probes, refused requests) kept
   * beyond max_clients of them. When there are more, the oldest (pending for a second at least)
   * is closed to make room: silent or slow sockets cannot lock robots out, and sessions are
   * never closed for them. */
  int max_pending = 256;
  int listen_backlog = 1024; /* connections the kernel queues before accept (GLib's: 10) */
  int max_ahead = 16;        /* requests a client may send before their answers */
  double keepalive_s = 20;   /* a ping every this many seconds (websockets' ping_interval) */
  /* A session that sends nothing, not even a pong, for keepalive_s + this is closed (1011),
   * as websockets' ping_timeout closes it: a hung robot does not hold its session forever. */
  double pong_timeout_s = 20;
  double request_timeout_s = 60; /* no answer from the pipeline: error to the client (0: none) */
  Mapping mapping;
  DecodeLimits limits;              /* max_message is set from the field above */
  std::string metadata_json = "{}"; /* sent on connect (msgpack map); the server adds nothing */
  uint64_t seed = 0;          /* request N of a connection uses seed + N, unless it sends one */
  std::string default_prompt; /* for requests without a prompt */
};

/* One decoded request. The image pointers in `obs` point into `message`. */
struct Request {
  uint64_t client = 0; /* connection id, from 1, unique for the server's life */
  uint64_t number = 0; /* the connection's request count, from 0 */
  Observation obs;
  std::shared_ptr<GBytes> message;
  std::string prompt;      /* obs.prompt or the default */
  uint64_t seed = 0;       /* the noise seed of this request */
  int64_t received_us = 0; /* g_get_monotonic_time() when the message arrived */
};

struct Reply {
  std::vector<float> actions; /* horizon x dim, row-major */
  int horizon = 0, dim = 0;
  double policy_infer_ms = -1;
};

struct ServerStats {
  uint64_t connections = 0; /* websocket sessions opened */
  uint64_t open = 0;        /* open now */
  uint64_t refused = 0;     /* HTTP requests refused: key, origin, capacity */
  uint64_t requests = 0;    /* observations accepted */
  uint64_t replies = 0;     /* chunks sent */
  uint64_t errors = 0;      /* errors sent to clients (then closed) */
  uint64_t dropped = 0;     /* answers for clients that had gone */
  uint64_t timeouts = 0;    /* requests the pipeline did not answer in time */
  uint64_t queued = 0;      /* requests waiting for pop() now */
  uint64_t peers = 0;       /* TCP connections now (sessions, handshakes, probes, closing) */
  uint64_t evicted = 0;     /* peers that were not sessions, closed to make room */
  uint64_t hung = 0;        /* sessions closed for answering no ping (pong timeout) */
  uint64_t fd_limited = 0;  /* peers closed or not accepted for the open-file limit */
  bool draining = false;    /* drain() was called */
};

class Server
{
public:
  /* The server called @name, created on first use; shared by whoever asks for the name. */
  static std::shared_ptr<Server> get (const std::string &name);

  ~Server ();
  Server (const Server &) = delete;
  Server &operator= (const Server &) = delete;

  /* Binds and starts serving. False with a message (address in use, bad host, already
   * running). */
  bool start (const ServerSettings &settings, std::string *error);
  /* Closes every connection (code 1001, going away), stops listening, joins the thread. Requests
   * not yet answered are dropped. Safe to call twice. */
  void stop ();
  /* Graceful drain (SIGTERM in pi0-serve, a Kubernetes rollout): stops listening, /healthz
   * answers 503 and new upgrades 503 ("the server is draining"); each session is answered what it
   * has sent (the request in flight and those sent ahead), then closed with 1001 (going away),
   * so its robot reconnects to another replica. A request that arrives on an idle session during
   * the drain is not taken: that session is closed with 1001 at once. stats().open says when
   * every session has gone; stop() then ends what is left. Any thread; twice is fine. */
  void drain ();
  bool running () const { return running_.load (); }
  int port () const { return port_.load (); }
  const std::string &name () const { return name_; }
  /* The settings start() was given (valid while running). */
  const ServerSettings &settings () const { return settings_; }

  /* What /healthz answers: 200 when ready, 503 when not. */
  void set_ready (bool ready) { ready_.store (ready); }

  enum class Pop { kRequest, kFlushing, kStopped };
  /* Waits for the next request. */
  Pop pop (Request *out);
  /* While set, pop() returns kFlushing at once (an element's unlock()). */
  void set_flushing (bool flushing);

  /* The answer to request @number of @client. Ignored when the client has gone or timed out. */
  void reply (uint64_t client, uint64_t number, Reply reply);
  /* An error for that request: sent as text, then the connection is closed (openpi's way). */
  void fail (uint64_t client, uint64_t number, const std::string &message);

  ServerStats stats () const;

  struct Impl; /* the server thread's state (serve/pi0serverimpl.h) */

private:
  explicit Server (std::string name);
  void push_request (Request &&r);
  void purge_client (uint64_t client);
  void post_outcome (uint64_t client, uint64_t number, Reply *reply, std::string *error);
  /* Runs @fn with the server thread's state, on that thread (skipped once it has gone). */
  void on_server_thread (void (*fn) (Impl &));
  friend struct Impl;

  const std::string name_;
  ServerSettings settings_;
  std::atomic<bool> running_{false}, ready_{false};
  std::atomic<int> port_{0};

  mutable std::mutex lock_; /* guards queue_, flushing_, stopping_, stats_ */
  std::condition_variable cond_;
  std::deque<Request> queue_;
  bool flushing_ = false, stopping_ = false;
  ServerStats stats_;

  std::mutex start_lock_; /* serializes start()/stop() */
  GMainContext *context_ = nullptr;
  std::thread thread_;
  Impl *impl_ = nullptr; /* owned by the server thread while running */
};

} // namespace pi0::serve
