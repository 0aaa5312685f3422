/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "serve/pi0server.h"

#include <gio/gio.h>
#include <libsoup/soup.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cmath>
#include <algorithm>
#include <future>
#include <map>

/* Locking: Server::lock_ guards the request queue, the flags and the stats; it is never held
 * while calling into libsoup or GIO except to attach an idle source (post_outcome), which takes
 * only GLib's context lock. Everything in Impl belongs to the server thread. */

namespace pi0::serve
{

namespace
{

std::mutex registry_lock;
std::map<std::string, std::weak_ptr<Server>> registry;

/* The bytes a connection may send between two complete messages: one message, its framing
 * (a fragmented message has a header per fragment) and whatever the next one has started. */
gint64
byte_budget (size_t max_message)
{
  return (gint64)max_message + (gint64)(max_message / 8) + (64 << 10);
}

const char *kErrorCloseReason = "Internal server error. Traceback included in previous frame.";

/* ---- An input stream that refuses more than a budget of bytes ---------------------------- */

struct LimitedInputStream {
  GFilterInputStream parent;
  gint64 budget;
};
struct LimitedInputStreamClass {
  GFilterInputStreamClass parent_class;
};

GType limited_input_stream_get_type (void);
void limited_input_stream_pollable_init (GPollableInputStreamInterface *iface);

G_DEFINE_TYPE_WITH_CODE (LimitedInputStream, limited_input_stream, G_TYPE_FILTER_INPUT_STREAM,
                         G_IMPLEMENT_INTERFACE (G_TYPE_POLLABLE_INPUT_STREAM,
                                                limited_input_stream_pollable_init))

#define LIMITED_INPUT_STREAM(o)                                                                    \
  (G_TYPE_CHECK_INSTANCE_CAST ((o), limited_input_stream_get_type (), LimitedInputStream))

GInputStream *
base_of (gpointer stream)
{
  return g_filter_input_stream_get_base_stream (G_FILTER_INPUT_STREAM (stream));
}

gssize
limited_account (gpointer stream, gssize n, GError **error)
{
  LimitedInputStream *s = LIMITED_INPUT_STREAM (stream);
  if (n <= 0)
    return n;
  if (n > s->budget) {
    s->budget = 0;
    g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                         "the client sent more than the message-size limit allows");
    return -1;
  }
  s->budget -= n;
  return n;
}

gssize
limited_read (GInputStream *stream, void *buffer, gsize count, GCancellable *cancellable,
              GError **error)
{
  gssize n = g_input_stream_read (base_of (stream), buffer, count, cancellable, error);
  return limited_account (stream, n, error);
}

gboolean
limited_can_poll (GPollableInputStream *stream)
{
  GInputStream *b = base_of (stream);
  return G_IS_POLLABLE_INPUT_STREAM (b) &&
         g_pollable_input_stream_can_poll (G_POLLABLE_INPUT_STREAM (b));
}

gboolean
limited_is_readable (GPollableInputStream *stream)
{
  return g_pollable_input_stream_is_readable (G_POLLABLE_INPUT_STREAM (base_of (stream)));
}

GSource *
limited_create_source (GPollableInputStream *stream, GCancellable *cancellable)
{
  GSource *base =
      g_pollable_input_stream_create_source (G_POLLABLE_INPUT_STREAM (base_of (stream)), nullptr);
  GSource *src = g_pollable_source_new_full (stream, base, cancellable);
  g_source_unref (base);
  return src;
}

gssize
limited_read_nonblocking (GPollableInputStream *stream, void *buffer, gsize count,
                          GError **error)
{
  gssize n = g_pollable_input_stream_read_nonblocking (G_POLLABLE_INPUT_STREAM (base_of (stream)),
                                                       buffer, count, nullptr, error);
  return limited_account (stream, n, error);
}

void
limited_input_stream_pollable_init (GPollableInputStreamInterface *iface)
{
  iface->can_poll = limited_can_poll;
  iface->is_readable = limited_is_readable;
  iface->create_source = limited_create_source;
  iface->read_nonblocking = limited_read_nonblocking;
}

void
limited_input_stream_class_init (LimitedInputStreamClass *klass)
{
  GInputStreamClass *ic = G_INPUT_STREAM_CLASS (klass);
  ic->read_fn = limited_read;
  /* GFilterInputStream's skip would bypass the count: GInputStream's reads through read_fn. */
  ic->skip = G_INPUT_STREAM_CLASS (g_type_class_peek (G_TYPE_INPUT_STREAM))->skip;
}

void
limited_input_stream_init (LimitedInputStream *self)
{
  self->budget = 0;
}

LimitedInputStream *
limited_input_stream_new (GInputStream *base, gint64 budget)
{
  auto *s = LIMITED_INPUT_STREAM (g_object_new (limited_input_stream_get_type (), "base-stream",
                                                base, "close-base-stream", TRUE, nullptr));
  s->budget = budget;
  return s;
}

/* Compares in time independent of where the strings differ (and of their lengths: both are
 * hashed first). */
bool
same_secret (const std::string &a, const std::string &b)
{
  guint8 da[32], db[32];
  gsize la = sizeof da, lb = sizeof db;
  GChecksum *ca = g_checksum_new (G_CHECKSUM_SHA256), *cb = g_checksum_new (G_CHECKSUM_SHA256);
  g_checksum_update (ca, (const guchar *)a.data (), (gssize)a.size ());
  g_checksum_update (cb, (const guchar *)b.data (), (gssize)b.size ());
  g_checksum_get_digest (ca, da, &la);
  g_checksum_get_digest (cb, db, &lb);
  g_checksum_free (ca);
  g_checksum_free (cb);
  volatile guint8 diff = 0;
  for (gsize i = 0; i < sizeof da; i++)
    diff |= da[i] ^ db[i];
  return diff == 0;
}

/* An Origin header that names the host the request was sent to ("http://10.0.0.5:8000" with
 * "Host: 10.0.0.5:8000"): what websocket-client sends by default. A web page of another site
 * sends its own origin, which does not match. */
bool
same_origin (const char *origin, const char *host)
{
  if (!host || !*host)
    return false;
  std::string o = origin;
  for (const char *scheme : {"http://", "https://", "ws://", "wss://"})
    if (o.rfind (scheme, 0) == 0) {
      o = o.substr (strlen (scheme));
      if (!o.empty () && o.back () == '/')
        o.pop_back ();
      return g_ascii_strcasecmp (o.c_str (), host) == 0;
    }
  return false;
}

double
ms_since (gint64 then_us, gint64 now_us)
{
  return (double)(now_us - then_us) / 1000.0;
}

} // namespace

/* ---- The server thread ------------------------------------------------------------------- */

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
  GSocketService *service = nullptr;
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

  bool open (std::string *error)
  {
    if (!encode_metadata (cfg.metadata_json, &metadata, error))
      return false;
    GInetAddress *addr = g_inet_address_new_from_string (cfg.host.c_str ());
    if (!addr) {
      *error = "host '" + cfg.host +
               "' is not a numeric IP address (127.0.0.1 for this machine only, 0.0.0.0 or :: "
               "for every interface)";
      return false;
    }
    GSocketAddress *sa = g_inet_socket_address_new (addr, (guint16)cfg.port);
    g_object_unref (addr);
    service = g_socket_service_new ();
    g_socket_listener_set_backlog (G_SOCKET_LISTENER (service), cfg.listen_backlog);
    GSocketAddress *effective = nullptr;
    GError *err = nullptr;
    gboolean ok =
        g_socket_listener_add_address (G_SOCKET_LISTENER (service), sa, G_SOCKET_TYPE_STREAM,
                                       G_SOCKET_PROTOCOL_TCP, nullptr, &effective, &err);
    g_object_unref (sa);
    if (!ok) {
      *error = "cannot listen on " + cfg.host + ":" + std::to_string (cfg.port) + ": " +
               err->message;
      g_error_free (err);
      return false;
    }
    port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (effective));
    g_object_unref (effective);

    soup = SOUP_SERVER (g_object_new (SOUP_TYPE_SERVER, "server-header", "gst-pi0", nullptr));
    soup_server_add_handler (soup, "/healthz", on_healthz, this, nullptr);
    soup_server_add_handler (soup, nullptr, on_request, this, nullptr);
    soup_server_add_websocket_handler (soup, nullptr, nullptr, nullptr, on_websocket, this,
                                       nullptr);
    /* No permessage-deflate: libsoup would inflate a message before its size is checked (1 MiB
     * on the wire, GBs in memory). openpi's server runs with compression=None too; a client
     * that offers it is answered without it and sends plain frames. */
    soup_server_remove_websocket_extension (soup, SOUP_TYPE_WEBSOCKET_EXTENSION_DEFLATE);
    g_signal_connect (service, "incoming", G_CALLBACK (on_incoming), this);
    g_socket_service_start (service);

    tick = g_timeout_source_new_seconds (1);
    g_source_set_callback (tick, on_tick, this, nullptr);
    g_source_attach (tick, g_main_context_get_thread_default ());
    return true;
  }

  /* ---- TCP connections ---- */

  static gboolean on_incoming (GSocketService *, GSocketConnection *tcp, GObject *, gpointer data)
  {
    auto self = static_cast<Impl *> (data);
    if (self->shutting_down) {
      self->bump ([] (ServerStats &s) { s.refused++; });
      return TRUE; /* not kept: closed when GIO drops it */
    }
    self->make_room ();
    GSocket *sock = g_socket_connection_get_socket (tcp);
    /* Small answers must leave at once, not wait for Nagle. */
    g_socket_set_option (sock, IPPROTO_TCP, TCP_NODELAY, 1, nullptr);
    GSocketAddress *local = g_socket_connection_get_local_address (tcp, nullptr);
    GSocketAddress *remote = g_socket_connection_get_remote_address (tcp, nullptr);
    if (!local || !remote) {
      g_clear_object (&local);
      g_clear_object (&remote);
      return TRUE;
    }
    Peer p;
    p.accepted_us = g_get_monotonic_time ();
    p.tcp = G_SOCKET_CONNECTION (g_object_ref (tcp));
    p.in = limited_input_stream_new (g_io_stream_get_input_stream (G_IO_STREAM (tcp)),
                                     byte_budget (self->cfg.max_message));
    GIOStream *io = g_simple_io_stream_new (G_INPUT_STREAM (p.in),
                                            g_io_stream_get_output_stream (G_IO_STREAM (tcp)));
    p.io = io;
    auto tag = new Tag{self, 0, remote};
    p.weak_tag = tag;
    g_object_weak_ref (G_OBJECT (io), on_io_gone, tag);
    p.handshake_timer =
        g_timeout_source_new ((guint)std::max (1.0, self->cfg.handshake_timeout_s * 1000));
    g_source_set_callback (p.handshake_timer, on_handshake_timeout, new Tag{self, 0, remote},
                           [] (gpointer t) { delete static_cast<Tag *> (t); });
    g_source_attach (p.handshake_timer, g_main_context_get_thread_default ());
    self->peers[remote] = p;
    self->bump ([] (ServerStats &) {});

    GError *err = nullptr;
    soup_server_accept_iostream (self->soup, io, local, remote, &err);
    g_clear_error (&err);
    g_object_unref (io); /* soup holds it now */
    g_object_unref (p.in);
    g_object_unref (local);
    return TRUE;
  }

  /* Before a new peer: when max_pending peers are not sessions, the oldest of them is closed
   * (a silent socket, a slow handshake, a probe kept alive). Sessions are not counted and never
   * closed here; they are bounded by max_clients when they ask to upgrade. */
  void make_room ()
  {
    int pending = 0;
    Peer *oldest = nullptr;
    for (auto &kv : peers) {
      Peer &p = kv.second;
      if (p.upgraded || p.evicted)
        continue;
      pending++;
      if (!oldest || p.accepted_us < oldest->accepted_us)
        oldest = &p;
    }
    /* Room for every session's handshake at once (robots reconnecting together), then
     * max_pending more; only a peer pending for a second or more is closed for a new one (a
     * robot's handshake takes milliseconds); a burst younger than that is kept whole. */
    if (pending < cfg.max_pending + cfg.max_clients || !oldest ||
        g_get_monotonic_time () - oldest->accepted_us < G_USEC_PER_SEC)
      return;
    oldest->evicted = true;
    g_io_stream_close (G_IO_STREAM (oldest->tcp), nullptr, nullptr);
    bump ([] (ServerStats &s) { s.evicted++; });
  }

  static void on_io_gone (gpointer data, GObject *)
  {
    auto tag = static_cast<Tag *> (data);
    tag->impl->forget_peer (tag->peer);
    delete tag;
  }

  void forget_peer (GSocketAddress *key)
  {
    auto it = peers.find (key);
    if (it == peers.end ())
      return;
    Peer p = it->second;
    peers.erase (it);
    if (p.handshake_timer) {
      g_source_destroy (p.handshake_timer);
      g_source_unref (p.handshake_timer);
    }
    if (p.linger)
      linger (p.tcp); /* takes the reference */
    else {
      g_io_stream_close (G_IO_STREAM (p.tcp), nullptr, nullptr);
      g_object_unref (p.tcp);
    }
    g_object_unref (key);
    bump ([] (ServerStats &) {});
  }

  /* ---- Lingering close ---- */

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

  void linger (GSocketConnection *tcp)
  {
    GSocket *sock = g_socket_connection_get_socket (tcp);
    auto *l = new Lingering{tcp, g_socket_create_source (sock, G_IO_IN, nullptr),
                            g_get_monotonic_time () + (gint64)(kLingerS * G_USEC_PER_SEC),
                            kLingerBytes};
    g_source_set_callback (l->source, (GSourceFunc)(void (*) ())on_linger_readable,
                           new std::pair<Impl *, Lingering *> (this, l),
                           [] (gpointer d) { delete static_cast<std::pair<Impl *, Lingering *> *> (d); });
    g_source_attach (l->source, g_main_context_get_thread_default ());
    lingering.push_back (l);
    bump ([] (ServerStats &) {});
  }

  static gboolean on_linger_readable (GSocket *sock, GIOCondition, gpointer data)
  {
    auto *d = static_cast<std::pair<Impl *, Lingering *> *> (data);
    Lingering *l = d->second;
    char scratch[16384];
    for (;;) {
      GError *err = nullptr;
      const gssize n = g_socket_receive (sock, scratch, sizeof scratch, nullptr, &err);
      const bool again = n < 0 && g_error_matches (err, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK);
      g_clear_error (&err);
      if (again && g_get_monotonic_time () < l->deadline_us)
        return G_SOURCE_CONTINUE;
      if (n <= 0 || (size_t)n >= l->left || g_get_monotonic_time () >= l->deadline_us) {
        d->first->end_linger (l);
        return G_SOURCE_REMOVE;
      }
      l->left -= (size_t)n;
    }
  }

  void end_linger (Lingering *l)
  {
    lingering.erase (std::find (lingering.begin (), lingering.end (), l));
    g_source_destroy (l->source);
    g_source_unref (l->source);
    g_io_stream_close (G_IO_STREAM (l->tcp), nullptr, nullptr);
    g_object_unref (l->tcp);
    delete l;
    bump ([] (ServerStats &) {});
  }

  /* Peers that send nothing more are not read again: on_tick ends them at their deadline. */
  void end_late_lingers (gint64 now)
  {
    std::vector<Lingering *> late;
    for (Lingering *l : lingering)
      if (now >= l->deadline_us)
        late.push_back (l);
    for (Lingering *l : late)
      end_linger (l);
  }

  static gboolean on_handshake_timeout (gpointer data)
  {
    auto tag = static_cast<Tag *> (data);
    auto it = tag->impl->peers.find (tag->peer);
    if (it != tag->impl->peers.end ()) {
      g_source_unref (it->second.handshake_timer);
      it->second.handshake_timer = nullptr;
      if (!it->second.upgraded)
        g_io_stream_close (G_IO_STREAM (it->second.tcp), nullptr, nullptr);
    }
    return G_SOURCE_REMOVE;
  }

  /* ---- HTTP ---- */

  static void on_healthz (SoupServer *, SoupServerMessage *msg, const char *, GHashTable *,
                          gpointer data)
  {
    auto self = static_cast<Impl *> (data);
    const char *method = soup_server_message_get_method (msg);
    if (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0) {
      soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, nullptr);
      return;
    }
    const bool ready =
        self->server->ready_.load () && !self->shutting_down && !self->draining;
    soup_server_message_set_status (msg, ready ? SOUP_STATUS_OK : SOUP_STATUS_SERVICE_UNAVAILABLE,
                                    nullptr);
    const char *body = ready ? "OK\n" : "not ready\n";
    soup_server_message_set_response (msg, "text/plain", SOUP_MEMORY_STATIC, body, strlen (body));
  }

  static void refuse (SoupServerMessage *msg, guint status, const char *why)
  {
    soup_server_message_set_status (msg, status, nullptr);
    soup_server_message_set_response (msg, "text/plain", SOUP_MEMORY_COPY, why, strlen (why));
  }

  /* Runs before the websocket handshake: a refused request is never upgraded. */
  static void on_request (SoupServer *, SoupServerMessage *msg, const char *, GHashTable *,
                          gpointer data)
  {
    auto self = static_cast<Impl *> (data);
    SoupMessageHeaders *h = soup_server_message_get_request_headers (msg);
    const char *origin = soup_message_headers_get_one (h, "Origin");
    if (origin && !same_origin (origin, soup_message_headers_get_one (h, "Host"))) {
      self->bump ([] (ServerStats &s) { s.refused++; });
      refuse (msg, SOUP_STATUS_FORBIDDEN,
              "requests from web pages of other sites (an Origin header that does not name "
              "this host) are refused\n");
      return;
    }
    if (!self->cfg.api_key.empty ()) {
      const char *auth = soup_message_headers_get_one (h, "Authorization");
      if (!auth || !same_secret (auth, "Api-Key " + self->cfg.api_key)) {
        self->bump ([] (ServerStats &s) { s.refused++; });
        soup_message_headers_replace (soup_server_message_get_response_headers (msg),
                                      "WWW-Authenticate", "Api-Key");
        refuse (msg, SOUP_STATUS_UNAUTHORIZED,
                "a valid 'Authorization: Api-Key <key>' header is required\n");
        return;
      }
    }
    if (self->shutting_down || self->draining ||
        (int)self->conns.size () >= self->cfg.max_clients) {
      self->bump ([] (ServerStats &s) { s.refused++; });
      refuse (msg, SOUP_STATUS_SERVICE_UNAVAILABLE,
              self->shutting_down ? "the server is stopping\n"
              : self->draining    ? "the server is draining: connect to another replica\n"
                                  : "the server has as many clients as it takes (max-clients)\n");
      return;
    }
  }

  /* ---- Websocket sessions ---- */

  static void on_websocket (SoupServer *, SoupServerMessage *msg, const char *,
                            SoupWebsocketConnection *ws, gpointer data)
  {
    auto self = static_cast<Impl *> (data);
    GSocketAddress *key = soup_server_message_get_remote_address (msg);
    auto pit = self->peers.find (key);
    Conn c;
    c.id = self->next_conn++;
    c.ws = SOUP_WEBSOCKET_CONNECTION (g_object_ref (ws));
    c.peer = pit == self->peers.end () ? nullptr : key;
    if (pit != self->peers.end ()) {
      pit->second.upgraded = true;
      pit->second.in->budget = byte_budget (self->cfg.max_message);
    }
    soup_websocket_connection_set_max_incoming_payload_size (ws, self->cfg.max_message);
    /* Pings find a vanished robot (no FIN) once a write fails, and a hung one (TCP alive, no
     * pongs) by the pong timeout (on_tick). */
    soup_websocket_connection_set_keepalive_interval (ws, self->keepalive_interval_s ());
    /* Each handler holds a Tag of this session, freed with the handler. */
    auto on = [&] (const char *signal, GCallback cb) {
      return g_signal_connect_data (
          ws, signal, cb, new Tag{self, c.id, nullptr},
          [] (gpointer t, GClosure *) { delete static_cast<Tag *> (t); }, (GConnectFlags)0);
    };
    c.sig_message = on ("message", G_CALLBACK (on_message));
    c.sig_closed = on ("closed", G_CALLBACK (on_closed));
    c.sig_pong = on ("pong", G_CALLBACK (on_pong));
    c.sig_error = on ("error", G_CALLBACK (on_error));
    c.cycle_start_us = g_get_monotonic_time ();
    c.heard_us = c.cycle_start_us;
    const uint64_t id = c.id;
    self->conns[id] = c;
    self->bump ([] (ServerStats &s) { s.connections++; });
    if (soup_websocket_connection_get_state (ws) == SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_send_binary (ws, self->metadata.data (), self->metadata.size ());
  }

  static void on_message (SoupWebsocketConnection *, gint type, GBytes *message, gpointer data)
  {
    auto tag = static_cast<Tag *> (data);
    Impl *self = tag->impl;
    auto it = self->conns.find (tag->id);
    if (it == self->conns.end ())
      return;
    Conn &c = it->second;
    c.heard_us = g_get_monotonic_time ();
    if (c.peer) {
      auto pit = self->peers.find (c.peer);
      if (pit != self->peers.end ())
        pit->second.in->budget = byte_budget (self->cfg.max_message);
    }
    if (c.closing)
      return;
    if (type != SOUP_WEBSOCKET_DATA_BINARY) {
      self->error_close (c, "the server reads binary msgpack messages (openpi-client's "
                            "msgpack_numpy), not text");
      return;
    }
    if (self->draining && !c.in_flight) {
      self->close_going_away (c);
      return;
    }
    if (c.in_flight) {
      /* Requests sent ahead wait their turn and are answered in order, as openpi answers them;
       * within max_ahead of them, and within one message's size in all (the memory a client
       * may hold here). */
      const size_t size = g_bytes_get_size (message);
      if ((int)c.waiting.size () >= self->cfg.max_ahead ||
          c.waiting_bytes + size > self->cfg.max_message) {
        self->error_close (c, "more than " + std::to_string (self->cfg.max_ahead) +
                                  " requests (or one message's size) sent ahead of their "
                                  "answers");
        return;
      }
      c.waiting.emplace_back (g_bytes_ref (message), g_get_monotonic_time ());
      c.waiting_bytes += size;
      return;
    }
    try {
      self->dispatch (c, message, g_get_monotonic_time ());
    } catch (const std::exception &e) {
      /* Out of memory, most likely: this client's request fails, the server goes on. */
      self->error_close (c, std::string ("the server could not take the request: ") + e.what ());
    }
  }

  void dispatch (Conn &c, GBytes *message, gint64 received_us)
  {
    gsize size = 0;
    const auto *data = static_cast<const uint8_t *> (g_bytes_get_data (message, &size));
    Request r;
    std::string err;
    if (!decode_observation (data, size, cfg.mapping, cfg.limits, &r.obs, &err)) {
      error_close (c, "invalid observation: " + err);
      return;
    }
    r.client = c.id;
    r.number = c.next_number++;
    r.message = std::shared_ptr<GBytes> (g_bytes_ref (message), g_bytes_unref);
    r.prompt = r.obs.prompt ? *r.obs.prompt : cfg.default_prompt;
    r.seed = r.obs.seed ? *r.obs.seed : cfg.seed + r.number;
    r.received_us = received_us;
    c.in_flight = true;
    c.current = r.number;
    c.received_us = received_us;
    c.dispatched_us = g_get_monotonic_time ();
    server->push_request (std::move (r));
  }

  void error_close (Conn &c, const std::string &text)
  {
    if (c.closing)
      return;
    c.closing = true;
    c.in_flight = false;
    for (auto &w : c.waiting)
      g_bytes_unref (w.first);
    c.waiting.clear ();
    c.waiting_bytes = 0;
    server->purge_client (c.id);
    bump ([] (ServerStats &s) { s.errors++; });
    gchar *valid = g_utf8_make_valid (text.c_str (), (gssize)text.size ());
    if (soup_websocket_connection_get_state (c.ws) == SOUP_WEBSOCKET_STATE_OPEN) {
      soup_websocket_connection_send_text (c.ws, valid);
      soup_websocket_connection_close (c.ws, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, kErrorCloseReason);
    }
    g_free (valid);
  }

  /* The session's handlers (their Tags go with them) and its reference to the websocket. */
  static void release_ws (Conn &c)
  {
    for (gulong id : {c.sig_message, c.sig_closed, c.sig_pong, c.sig_error})
      g_signal_handler_disconnect (c.ws, id);
    g_object_unref (c.ws);
  }

  /* libsoup pings in whole seconds, at least one. */
  guint keepalive_interval_s () const
  {
    return (guint)std::max (1.0, std::round (cfg.keepalive_s));
  }

  static void on_pong (SoupWebsocketConnection *, GBytes *, gpointer data)
  {
    auto tag = static_cast<Tag *> (data);
    auto it = tag->impl->conns.find (tag->id);
    if (it != tag->impl->conns.end ())
      it->second.heard_us = g_get_monotonic_time ();
  }

  /* A message over the limit: libsoup (a frame bigger than max_message) and our byte budget (a
   * message in many fragments) both drop the TCP connection without a close frame. Before they
   * do, this writes one with 1009 (message too big) and the limit, as websockets sends it, to the
   * socket itself: libsoup's output is stopped with the input. If libsoup was in the middle of a
   * frame (a full send buffer), the client sees a broken frame instead: it is going anyway. */
  static void on_error (SoupWebsocketConnection *, GError *error, gpointer data)
  {
    auto tag = static_cast<Tag *> (data);
    Impl *self = tag->impl;
    const bool too_big = (error->domain == SOUP_WEBSOCKET_ERROR &&
                          error->code == SOUP_WEBSOCKET_CLOSE_TOO_BIG) ||
                         g_error_matches (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE);
    auto it = self->conns.find (tag->id);
    if (!too_big || it == self->conns.end () || !it->second.peer)
      return;
    auto pit = self->peers.find (it->second.peer);
    if (pit == self->peers.end ())
      return;
    const std::string reason =
        "message over the server's limit of " + std::to_string (self->cfg.max_message) + " bytes";
    std::string frame;
    frame += (char)0x88; /* FIN, close */
    frame += (char)(2 + reason.size ()); /* < 126: no extended length, unmasked (server) */
    frame += (char)(SOUP_WEBSOCKET_CLOSE_TOO_BIG >> 8);
    frame += (char)(SOUP_WEBSOCKET_CLOSE_TOO_BIG & 0xff);
    frame += reason;
    GSocket *sock = g_socket_connection_get_socket (pit->second.tcp);
    g_socket_send (sock, frame.data (), frame.size (), nullptr, nullptr);
    g_socket_shutdown (sock, FALSE, TRUE, nullptr); /* FIN after it; reading goes on */
    pit->second.linger = true;
    self->bump ([] (ServerStats &s) { s.errors++; });
  }

  static void on_closed (SoupWebsocketConnection *, gpointer data)
  {
    auto tag = static_cast<Tag *> (data);
    tag->impl->drop_conn (tag->id);
  }

  void drop_conn (uint64_t id)
  {
    auto it = conns.find (id);
    if (it == conns.end ())
      return;
    Conn c = it->second;
    conns.erase (it);
    server->purge_client (id);
    for (auto &w : c.waiting)
      g_bytes_unref (w.first);
    /* The tags go with the handlers (their destroy notify). */
    release_ws (c);
    bump ([] (ServerStats &) {});
    maybe_quit ();
  }

  /* ---- Answers from the pipeline ---- */

  void deliver (uint64_t client, uint64_t number, Reply *reply, const std::string *error)
  {
    auto it = conns.find (client);
    if (it == conns.end () || it->second.closing || !it->second.in_flight ||
        it->second.current != number) {
      bump ([] (ServerStats &s) { s.dropped++; });
      return;
    }
    Conn &c = it->second;
    /* The client may have sent its close frame while the policy worked: libsoup then holds the
     * session as CLOSING until "closed" runs, and refuses sends. The answer has no one to go to. */
    if (soup_websocket_connection_get_state (c.ws) != SOUP_WEBSOCKET_STATE_OPEN) {
      c.in_flight = false;
      bump ([] (ServerStats &s) { s.dropped++; });
      return;
    }
    if (error) {
      error_close (c, *error);
      return;
    }
    int dim = reply->dim;
    if (cfg.mapping.action_dim > 0) {
      if (reply->dim < cfg.mapping.action_dim) {
        error_close (c, "the policy makes " + std::to_string (reply->dim) +
                            " action values per step; mapping '" + cfg.mapping.name +
                            "' sends " + std::to_string (cfg.mapping.action_dim));
        return;
      }
      dim = cfg.mapping.action_dim;
    }
    const gint64 now = g_get_monotonic_time ();
    Timing t;
    t.server_infer_ms = ms_since (c.received_us, now);
    t.prev_total_ms = c.prev_total_ms;
    t.policy_infer_ms = reply->policy_infer_ms;
    const std::string bytes =
        encode_actions (reply->actions.data (), reply->horizon, dim, reply->dim, t);
    soup_websocket_connection_send_binary (c.ws, bytes.data (), bytes.size ());
    const gint64 sent = g_get_monotonic_time ();
    c.prev_total_ms = ms_since (c.cycle_start_us, sent);
    c.cycle_start_us = sent;
    c.in_flight = false;
    bump ([] (ServerStats &s) { s.replies++; });
    if (!c.waiting.empty ()) {
      auto next = c.waiting.front ();
      c.waiting.pop_front ();
      c.waiting_bytes -= g_bytes_get_size (next.first);
      dispatch (c, next.first, next.second);
      g_bytes_unref (next.first);
    } else if (draining) {
      close_going_away (c);
    }
  }

  /* ---- Drain ---- */

  void close_going_away (Conn &c)
  {
    if (c.closing)
      return;
    c.closing = true;
    if (soup_websocket_connection_get_state (c.ws) == SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_close (c.ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY,
                                       "the server is draining: reconnect");
  }

  void begin_drain ()
  {
    if (draining || shutting_down)
      return;
    draining = true;
    bump ([] (ServerStats &s) { s.draining = true; });
    /* New robots find the port closed (or, behind a Service, another replica). */
    g_socket_service_stop (service);
    g_socket_listener_close (G_SOCKET_LISTENER (service));
    for (auto &kv : conns)
      if (!kv.second.in_flight && kv.second.waiting.empty ())
        close_going_away (kv.second);
    for (auto &kv : peers)
      if (!kv.second.upgraded)
        g_io_stream_close (G_IO_STREAM (kv.second.tcp), nullptr, nullptr);
  }

  /* Sessions that have sent nothing, not even a pong, for a ping interval and the pong
   * timeout: closed as websockets closes them (1011, "keepalive ping timeout"). */
  void close_hung (gint64 now)
  {
    if (cfg.pong_timeout_s <= 0)
      return;
    const gint64 limit = (gint64)((keepalive_interval_s () + cfg.pong_timeout_s) * 1e6);
    for (auto &kv : conns) {
      Conn &c = kv.second;
      if (c.closing || now - c.heard_us <= limit)
        continue;
      c.closing = true;
      c.in_flight = false;
      server->purge_client (c.id);
      bump ([] (ServerStats &s) { s.hung++; });
      if (soup_websocket_connection_get_state (c.ws) == SOUP_WEBSOCKET_STATE_OPEN)
        soup_websocket_connection_close (c.ws, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR,
                                         "keepalive ping timeout");
      /* A peer that answers no ping answers no close either: libsoup closes the stream after
       * its close timeout; this does not wait for that. */
      if (c.peer) {
        auto pit = peers.find (c.peer);
        if (pit != peers.end ())
          g_io_stream_close (G_IO_STREAM (pit->second.tcp), nullptr, nullptr);
      }
    }
  }

  static gboolean on_tick (gpointer data)
  {
    auto self = static_cast<Impl *> (data);
    const gint64 now = g_get_monotonic_time ();
    self->close_hung (now);
    self->end_late_lingers (now);
    if (self->cfg.request_timeout_s <= 0)
      return G_SOURCE_CONTINUE;
    const gint64 limit = (gint64)(self->cfg.request_timeout_s * 1e6);
    std::vector<uint64_t> late;
    for (auto &kv : self->conns)
      if (kv.second.in_flight && !kv.second.closing && now - kv.second.dispatched_us > limit)
        late.push_back (kv.first);
    for (uint64_t id : late) {
      auto it = self->conns.find (id);
      if (it == self->conns.end ())
        continue;
      self->bump ([] (ServerStats &s) { s.timeouts++; });
      char buf[128];
      g_snprintf (buf, sizeof buf, "no answer from the policy within %.1f s (request-timeout)",
                  self->cfg.request_timeout_s);
      self->error_close (it->second, buf);
    }
    return G_SOURCE_CONTINUE;
  }

  /* ---- Shutdown ---- */

  void begin_shutdown ()
  {
    shutting_down = true;
    g_socket_service_stop (service);
    g_socket_listener_close (G_SOCKET_LISTENER (service));
    for (auto &kv : conns) {
      kv.second.closing = true;
      if (soup_websocket_connection_get_state (kv.second.ws) == SOUP_WEBSOCKET_STATE_OPEN)
        soup_websocket_connection_close (kv.second.ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY,
                                         "the server is stopping");
    }
    for (auto &kv : peers)
      if (!kv.second.upgraded)
        g_io_stream_close (G_IO_STREAM (kv.second.tcp), nullptr, nullptr);
    /* Give the close handshakes a moment, then go regardless. */
    quit_timer = g_timeout_source_new (500);
    g_source_set_callback (
        quit_timer,
        [] (gpointer d) -> gboolean {
          g_main_loop_quit (static_cast<Impl *> (d)->loop);
          return G_SOURCE_REMOVE;
        },
        this, nullptr);
    g_source_attach (quit_timer, g_main_context_get_thread_default ());
    maybe_quit ();
  }

  void maybe_quit ()
  {
    if (shutting_down && conns.empty ())
      g_main_loop_quit (loop);
  }

  ~Impl ()
  {
    for (auto &kv : conns) {
      Conn &c = kv.second;
      for (auto &w : c.waiting)
        g_bytes_unref (w.first);
      release_ws (c);
    }
    conns.clear ();
    if (tick) {
      g_source_destroy (tick);
      g_source_unref (tick);
    }
    if (quit_timer) {
      g_source_destroy (quit_timer);
      g_source_unref (quit_timer);
    }
    if (soup) {
      soup_server_disconnect (soup);
      g_object_unref (soup);
    }
    if (service) {
      g_socket_service_stop (service);
      g_socket_listener_close (G_SOCKET_LISTENER (service));
      g_object_unref (service);
    }
    /* Streams soup still holds: forget them here rather than in a weak notify after we are
     * gone. */
    while (!peers.empty ()) {
      auto it = peers.begin ();
      GSocketAddress *key = it->first;
      auto tag = static_cast<Tag *> (it->second.weak_tag);
      g_object_weak_unref (G_OBJECT (it->second.io), on_io_gone, tag);
      delete tag;
      forget_peer (key);
    }
    while (!lingering.empty ())
      end_linger (lingering.back ());
  }
};

/* ---- Server ------------------------------------------------------------------------------- */

std::shared_ptr<Server>
Server::get (const std::string &name)
{
  std::lock_guard<std::mutex> lk (registry_lock);
  auto &slot = registry[name];
  if (auto s = slot.lock ())
    return s;
  std::shared_ptr<Server> s (new Server (name));
  slot = s;
  return s;
}

Server::Server (std::string name) : name_ (std::move (name)) {}

Server::~Server ()
{
  stop ();
  std::lock_guard<std::mutex> lk (registry_lock);
  auto it = registry.find (name_);
  if (it != registry.end () && it->second.expired ())
    registry.erase (it);
}

bool
Server::start (const ServerSettings &settings, std::string *error)
{
  std::lock_guard<std::mutex> sl (start_lock_);
  if (running_.load ()) {
    *error = "the server '" + name_ + "' is already running (two pi0servesrc with one name?)";
    return false;
  }
  if (settings.max_clients < 1 || settings.max_message < 64) {
    *error = "max-clients must be at least 1 and max-message-size at least 64 bytes";
    return false;
  }
  settings_ = settings;
  settings_.limits.max_message = settings.max_message;
  {
    std::lock_guard<std::mutex> lk (lock_);
    queue_.clear ();
    stopping_ = false;
    flushing_ = false;
    stats_ = ServerStats ();
  }
  context_ = g_main_context_new ();
  std::promise<std::string> started;
  auto result = started.get_future ();
  thread_ = std::thread ([this, &started] {
    g_main_context_push_thread_default (context_);
    auto impl = new Impl (this);
    impl->loop = g_main_loop_new (context_, FALSE);
    std::string err;
    if (!impl->open (&err)) {
      GMainLoop *loop = impl->loop;
      delete impl;
      g_main_loop_unref (loop);
      g_main_context_pop_thread_default (context_);
      started.set_value (err.empty () ? "could not start" : err);
      return;
    }
    impl_ = impl;
    port_.store (impl->port);
    started.set_value ("");
    g_main_loop_run (impl->loop);
    GMainLoop *loop = impl->loop;
    impl_ = nullptr;
    delete impl;
    /* What the sockets still had queued (closes, destroy notifies). */
    while (g_main_context_iteration (context_, FALSE))
      ;
    g_main_loop_unref (loop);
    g_main_context_pop_thread_default (context_);
  });
  std::string err = result.get ();
  if (!err.empty ()) {
    thread_.join ();
    g_main_context_unref (context_);
    context_ = nullptr;
    *error = err;
    return false;
  }
  running_.store (true);
  return true;
}

void
Server::drain ()
{
  std::lock_guard<std::mutex> sl (start_lock_);
  if (!running_.load ())
    return;
  on_server_thread ([] (Impl &impl) { impl.begin_drain (); });
}

void
Server::on_server_thread (void (*fn) (Impl &))
{
  struct Call {
    Server *server;
    void (*fn) (Impl &);
  };
  g_main_context_invoke_full (
      context_, G_PRIORITY_DEFAULT,
      [] (gpointer d) -> gboolean {
        auto c = static_cast<Call *> (d);
        if (c->server->impl_)
          c->fn (*c->server->impl_);
        return G_SOURCE_REMOVE;
      },
      new Call{this, fn}, [] (gpointer d) { delete static_cast<Call *> (d); });
}

void
Server::stop ()
{
  std::lock_guard<std::mutex> sl (start_lock_);
  if (!running_.load ())
    return;
  {
    std::lock_guard<std::mutex> lk (lock_);
    stopping_ = true;
    queue_.clear ();
  }
  cond_.notify_all ();
  on_server_thread ([] (Impl &impl) { impl.begin_shutdown (); });
  thread_.join ();
  {
    std::lock_guard<std::mutex> lk (lock_);
    running_.store (false);
    ready_.store (false);
    queue_.clear ();
    stats_.open = 0;
    stats_.peers = 0;
    stats_.queued = 0;
  }
  /* Answers posted after the loop ended are freed with their sources here. */
  g_main_context_unref (context_);
  context_ = nullptr;
  port_.store (0);
}

void
Server::push_request (Request &&r)
{
  {
    std::lock_guard<std::mutex> lk (lock_);
    queue_.push_back (std::move (r));
    stats_.requests++;
    stats_.queued = queue_.size ();
  }
  cond_.notify_one ();
}

void
Server::purge_client (uint64_t client)
{
  std::lock_guard<std::mutex> lk (lock_);
  for (auto it = queue_.begin (); it != queue_.end ();)
    it = it->client == client ? queue_.erase (it) : it + 1;
  stats_.queued = queue_.size ();
}

Server::Pop
Server::pop (Request *out)
{
  std::unique_lock<std::mutex> lk (lock_);
  cond_.wait (lk, [this] { return flushing_ || stopping_ || !queue_.empty (); });
  if (flushing_)
    return Pop::kFlushing;
  if (stopping_ || queue_.empty ())
    return Pop::kStopped;
  *out = std::move (queue_.front ());
  queue_.pop_front ();
  stats_.queued = queue_.size ();
  return Pop::kRequest;
}

void
Server::set_flushing (bool flushing)
{
  {
    std::lock_guard<std::mutex> lk (lock_);
    flushing_ = flushing;
  }
  cond_.notify_all ();
}

namespace
{

struct Outcome {
  Server *server;
  uint64_t client, number;
  Reply reply;
  std::string error;
  bool is_error;
};

} // namespace

void
Server::post_outcome (uint64_t client, uint64_t number, Reply *reply, std::string *error)
{
  std::lock_guard<std::mutex> lk (lock_);
  if (!running_.load () || stopping_ || !context_)
    return;
  auto o = new Outcome{this, client, number, reply ? std::move (*reply) : Reply (),
                       error ? std::move (*error) : std::string (), error != nullptr};
  g_main_context_invoke_full (
      context_, G_PRIORITY_DEFAULT,
      [] (gpointer d) -> gboolean {
        auto o = static_cast<Outcome *> (d);
        try {
          if (o->server->impl_)
            o->server->impl_->deliver (o->client, o->number, &o->reply,
                                       o->is_error ? &o->error : nullptr);
        } catch (const std::exception &e) {
          g_warning ("pi0serve: could not answer client %" G_GUINT64_FORMAT ": %s", o->client,
                     e.what ());
        }
        return G_SOURCE_REMOVE;
      },
      o, [] (gpointer d) { delete static_cast<Outcome *> (d); });
}

void
Server::reply (uint64_t client, uint64_t number, Reply reply)
{
  post_outcome (client, number, &reply, nullptr);
}

void
Server::fail (uint64_t client, uint64_t number, const std::string &message)
{
  std::string m = message;
  post_outcome (client, number, nullptr, &m);
}

ServerStats
Server::stats () const
{
  std::lock_guard<std::mutex> lk (lock_);
  return stats_;
}

} // namespace pi0::serve
