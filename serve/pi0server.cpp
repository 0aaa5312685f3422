/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "pi0server.h"

#include <gio/gio.h>
#include <libsoup/soup.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

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

/* Extra TCP connections beyond the websocket sessions: health probes, handshakes. */
constexpr int kPeerSlack = 8;

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
    std::deque<std::pair<GBytes *, gint64>> waiting; /* a request sent ahead, its arrival */
    gulong sig_message = 0, sig_closed = 0;
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
  int port = 0;

  template <typename F> void bump (F f)
  {
    std::lock_guard<std::mutex> lk (server->lock_);
    f (server->stats_);
    server->stats_.open = conns.size ();
    server->stats_.peers = peers.size ();
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
    if (self->shutting_down || (int)self->peers.size () >= self->cfg.max_clients + kPeerSlack) {
      self->bump ([] (ServerStats &s) { s.refused++; });
      return TRUE; /* not kept: closed when GIO drops it */
    }
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
    g_io_stream_close (G_IO_STREAM (p.tcp), nullptr, nullptr);
    g_object_unref (p.tcp);
    g_object_unref (key);
    bump ([] (ServerStats &) {});
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
    const bool ready = self->server->ready_.load () && !self->shutting_down;
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
    if (soup_message_headers_get_one (h, "Origin")) {
      self->bump ([] (ServerStats &s) { s.refused++; });
      refuse (msg, SOUP_STATUS_FORBIDDEN,
              "requests from web pages (with an Origin header) are refused\n");
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
    if (self->shutting_down || (int)self->conns.size () >= self->cfg.max_clients) {
      self->bump ([] (ServerStats &s) { s.refused++; });
      refuse (msg, SOUP_STATUS_SERVICE_UNAVAILABLE,
              self->shutting_down ? "the server is stopping\n"
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
    /* Pings find a vanished robot (no FIN) once a write fails. */
    soup_websocket_connection_set_keepalive_interval (ws, 20);
    auto tag_destroy = [] (gpointer t, GClosure *) { delete static_cast<Tag *> (t); };
    c.sig_message = g_signal_connect_data (ws, "message", G_CALLBACK (on_message),
                                           new Tag{self, c.id, nullptr}, tag_destroy,
                                           (GConnectFlags)0);
    c.sig_closed = g_signal_connect_data (ws, "closed", G_CALLBACK (on_closed),
                                          new Tag{self, c.id, nullptr}, tag_destroy,
                                          (GConnectFlags)0);
    c.cycle_start_us = g_get_monotonic_time ();
    const uint64_t id = c.id;
    self->conns[id] = c;
    self->bump ([] (ServerStats &s) { s.connections++; });
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
    if (c.in_flight) {
      /* openpi's clients wait for each answer; one request ahead is tolerated. */
      if (!c.waiting.empty ()) {
        self->error_close (c, "more than one request sent ahead of its answer");
        return;
      }
      c.waiting.emplace_back (g_bytes_ref (message), g_get_monotonic_time ());
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
    server->purge_client (c.id);
    bump ([] (ServerStats &s) { s.errors++; });
    gchar *valid = g_utf8_make_valid (text.c_str (), (gssize)text.size ());
    if (soup_websocket_connection_get_state (c.ws) == SOUP_WEBSOCKET_STATE_OPEN) {
      soup_websocket_connection_send_text (c.ws, valid);
      soup_websocket_connection_close (c.ws, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, kErrorCloseReason);
    }
    g_free (valid);
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
    g_signal_handler_disconnect (c.ws, c.sig_message);
    g_signal_handler_disconnect (c.ws, c.sig_closed);
    g_object_unref (c.ws);
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
      dispatch (c, next.first, next.second);
      g_bytes_unref (next.first);
    }
  }

  static gboolean on_tick (gpointer data)
  {
    auto self = static_cast<Impl *> (data);
    if (self->cfg.request_timeout_s <= 0)
      return G_SOURCE_CONTINUE;
    const gint64 now = g_get_monotonic_time ();
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
      g_signal_handler_disconnect (c.ws, c.sig_message);
      g_signal_handler_disconnect (c.ws, c.sig_closed);
      g_object_unref (c.ws);
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
  g_main_context_invoke (
      context_,
      [] (gpointer d) -> gboolean {
        auto self = static_cast<Server *> (d);
        if (self->impl_)
          self->impl_->begin_shutdown ();
        return G_SOURCE_REMOVE;
      },
      this);
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
