/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Server::Impl, the state of the server's thread, shared by the files that hold its parts:
 *   pi0serverhttp.cpp       listening, /healthz, the checks before a websocket upgrade
 *   pi0serverpeers.cpp      TCP peers: admission (max_pending), handshake timeout, lingering close
 *   pi0serverwebsocket.cpp  websocket sessions: metadata, requests in order, answers, errors
 *   pi0serverdrain.cpp      how sessions end: drain, the tick's timeouts, shutdown, teardown
 * Server's own functions, which any thread may call, are pi0server.cpp's (the registry, start
 * and stop) and pi0serverqueue.cpp's (the request queue and the answers back). */

#include "serve/pi0limitedstream.h"
#include "serve/pi0server.h"

#include <gio/gio.h>
#include <libsoup/soup.h>

#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

/* Locking: Server::lock_ guards the request queue, the flags and the stats; it is never held
 * while calling into libsoup or GIO except to attach an idle source (post_outcome), which takes
 * only GLib's context lock. Everything in Impl belongs to the server thread.
 * Order: start_lock_ before lock_ (start() and stop() take both); registry_lock alone. */

namespace pi0::serve
{

/* The bytes a connection may send between two complete messages: one message, its framing
 * (a fragmented message has a header per fragment) and whatever the next one has started. */
inline gint64
byte_budget (size_t max_message)
{
  return (gint64)max_message + (gint64)(max_message / 8) + (64 << 10);
}

struct Server::Impl {
  struct Peer {
    GSocketConnection *tcp = nullptr;
    LimitedInputStream *in = nullptr; /* owned by the stream soup holds */
    GIOStream *io = nullptr;          /* weak */
    GSource *handshake_timer = nullptr;
    void *weak_tag = nullptr; /* the Tag of io's weak reference */
    bool upgraded = false;
    bool linger = false;  /* sent a close frame of its own (1009): drain before closing */
    bool evicted = false; /* closed to make room; forgotten when soup lets go of it */
    gint64 accepted_us = 0;
  };

  struct Conn {
    uint64_t id = 0;
    SoupWebsocketConnection *ws = nullptr;
    GSocketAddress *peer = nullptr; /* key of peers (not owned here) */
    uint64_t next_number = 0;
    bool in_flight = false, closing = false;
    uint64_t current = 0;
    gint64 received_us = 0, dispatched_us = 0, cycle_start_us = 0;
    double prev_total_ms = -1;
    std::deque<std::pair<GBytes *, gint64>> waiting; /* requests sent ahead, their arrival */
    size_t waiting_bytes = 0;
    gint64 heard_us = 0; /* the last message or pong */
    gulong sig_message = 0, sig_closed = 0, sig_pong = 0, sig_error = 0;
  };

  /* Signal and source user data: the Impl plus what the callback is about. */
  struct Tag {
    Impl *impl;
    uint64_t id;
    GSocketAddress *peer;
  };

  explicit Impl (Server *s) : server (s), cfg (s->settings_) {}

  Server *server;
  const ServerSettings &cfg;
  std::string metadata;
  SoupServer *soup = nullptr;
  /* The listening socket, accepted from by hand (not GSocketService, which on EMFILE logs a
   * warning and tries again at once, forever: 100 % CPU and megabytes of log while robots wait). */
  GSocket *listener = nullptr;
  GSource *accept_source = nullptr, *accept_resume = nullptr;
  /* File descriptors this server may hold for peers (sessions, handshakes, lingering closes):
   * the open-file limit found at open(), less what the process held then and a reserve. */
  int fd_room = 0;
  gint64 last_fd_warning_us = 0;
  uint64_t fd_failures_unreported = 0;
  GMainLoop *loop = nullptr;
  GSource *tick = nullptr, *quit_timer = nullptr;
  std::map<GSocketAddress *, Peer> peers;
  std::map<uint64_t, Conn> conns;
  uint64_t next_conn = 1;
  bool shutting_down = false;
  bool draining = false; /* drain(): answer what was sent, then close each session */
  int port = 0;

  template <typename F> void bump (F f)
  {
    std::lock_guard<std::mutex> lk (server->lock_);
    f (server->stats_);
    server->stats_.open = conns.size ();
    server->stats_.peers = peers.size () + lingering.size ();
  }

  /* ---- Listening and HTTP: pi0serverhttp.cpp ---- */

  bool open (std::string *error);
  static void on_healthz (SoupServer *, SoupServerMessage *msg, const char *, GHashTable *,
                          gpointer data);
  static void refuse (SoupServerMessage *msg, guint status, const char *why);
  static void on_request (SoupServer *, SoupServerMessage *msg, const char *, GHashTable *,
                          gpointer data);

  /* ---- TCP peers (admission, handshake timeout) and lingering close: pi0serverpeers.cpp ---- */

  /* A peer that was sent a close frame while it was still sending (an oversized message):
   * closing its socket now would answer its next bytes with a reset, and a reset makes its
   * system drop the close frame unread. So the socket's sending side is already shut (the
   * close frame, then FIN) and what still arrives is read and dropped until the peer closes,
   * for at most kLingerS seconds and kLingerBytes bytes. */
  struct Lingering {
    GSocketConnection *tcp;
    GSource *source;
    gint64 deadline_us;
    size_t left;
  };
  static constexpr double kLingerS = 5;
  static constexpr size_t kLingerBytes = 64u << 20;
  std::vector<Lingering *> lingering;

  static constexpr int kFdReserve = 32; /* for the pipeline, the model, logs, DNS... */
  void start_accepting ();
  void stop_accepting ();
  static gboolean on_acceptable (GSocket *, GIOCondition, gpointer data);
  void out_of_fds (const char *why);
  static gboolean on_incoming (GSocketService *, GSocketConnection *tcp, GObject *, gpointer data);
  /* False when there is no room for one more peer (the new one is then closed). */
  bool make_room ();
  void evict (Peer &p);
  void evict_for_fds (Peer &p); /* evict(), counted as fd_limited */
  bool evict_oldest_pending (); /* false when every peer is a session */
  static void on_io_gone (gpointer data, GObject *);
  void forget_peer (GSocketAddress *key);
  static gboolean on_handshake_timeout (gpointer data);
  void linger (GSocketConnection *tcp);
  static gboolean on_linger_readable (GSocket *sock, GIOCondition, gpointer data);
  void end_linger (Lingering *l);
  void end_late_lingers (gint64 now);

  /* ---- Websocket sessions and the answers from the pipeline: pi0serverwebsocket.cpp ---- */

  static void on_websocket (SoupServer *, SoupServerMessage *msg, const char *,
                            SoupWebsocketConnection *ws, gpointer data);
  static void on_message (SoupWebsocketConnection *, gint type, GBytes *message, gpointer data);
  void dispatch (Conn &c, GBytes *message, gint64 received_us);
  void error_close (Conn &c, const std::string &text);
  static void release_ws (Conn &c);
  guint keepalive_interval_s () const;
  static void on_pong (SoupWebsocketConnection *, GBytes *, gpointer data);
  static void on_error (SoupWebsocketConnection *, GError *error, gpointer data);
  static void on_closed (SoupWebsocketConnection *, gpointer data);
  void drop_conn (uint64_t id);
  void deliver (uint64_t client, uint64_t number, Reply *reply, const std::string *error);

  /* ---- Drain, the tick's timeouts and shutdown: pi0serverdrain.cpp ---- */

  void close_going_away (Conn &c);
  void begin_drain ();
  void close_hung (gint64 now);
  static gboolean on_tick (gpointer data);
  void begin_shutdown ();
  void maybe_quit ();
  ~Impl ();
};

} // namespace pi0::serve
