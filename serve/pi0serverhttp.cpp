/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The server's HTTP end: the listening socket and the soup server on it, /healthz, and what
 * refuses a request before its websocket upgrade (origin, API key, capacity, drain). */
#include "serve/pi0serverimpl.h"

#include "serve/pi0serverauth.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstring>

namespace pi0::serve
{

/* The file descriptors left for peers: the open-file limit, less those open now (the pipeline's,
 * the listening socket) and a reserve. */
static int
fd_room_now (int reserve)
{
  struct rlimit rl;
  if (getrlimit (RLIMIT_NOFILE, &rl) != 0)
    return 1 << 20;
  const rlim_t limit = rl.rlim_cur == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_cur;
  int open_now = 0;
  if (GDir *d = g_dir_open ("/proc/self/fd", 0, nullptr)) {
    while (g_dir_read_name (d))
      open_now++;
    g_dir_close (d);
  }
  return (int)std::max<rlim_t> (1, std::min<rlim_t> (limit, 1 << 20) -
                                       std::min<rlim_t> (limit, (rlim_t)open_now + reserve));
}

bool
Server::Impl::open (std::string *error)
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
  GError *err = nullptr;
  listener = g_socket_new (g_inet_address_get_family (addr), G_SOCKET_TYPE_STREAM,
                           G_SOCKET_PROTOCOL_TCP, &err);
  g_object_unref (addr);
  GSocketAddress *effective = nullptr;
  if (listener) {
    g_socket_set_listen_backlog (listener, cfg.listen_backlog);
    g_socket_set_blocking (listener, FALSE); /* on_acceptable takes until WOULD_BLOCK */
    if (g_socket_bind (listener, sa, TRUE, &err) && g_socket_listen (listener, &err))
      effective = g_socket_get_local_address (listener, &err);
  }
  g_object_unref (sa);
  if (!effective) {
    *error = "cannot listen on " + cfg.host + ":" + std::to_string (cfg.port) + ": " +
             (err ? err->message : "no socket");
    g_clear_error (&err);
    return false;
  }
  port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (effective));
  g_object_unref (effective);
  fd_room = fd_room_now (kFdReserve);

  soup = SOUP_SERVER (g_object_new (SOUP_TYPE_SERVER, "server-header", "gst-pi0", nullptr));
  soup_server_add_handler (soup, "/healthz", on_healthz, this, nullptr);
  soup_server_add_handler (soup, nullptr, on_request, this, nullptr);
  soup_server_add_websocket_handler (soup, nullptr, nullptr, nullptr, on_websocket, this, nullptr);
  /* No permessage-deflate: libsoup would inflate a message before its size is checked (1 MiB
   * on the wire, GBs in memory). openpi's server runs with compression=None too; a client
   * that offers it is answered without it and sends plain frames. */
  soup_server_remove_websocket_extension (soup, SOUP_TYPE_WEBSOCKET_EXTENSION_DEFLATE);
  start_accepting ();

  tick = g_timeout_source_new_seconds (1);
  g_source_set_callback (tick, on_tick, this, nullptr);
  g_source_attach (tick, g_main_context_get_thread_default ());
  return true;
}

void
Server::Impl::on_healthz (SoupServer *, SoupServerMessage *msg, const char *, GHashTable *,
                          gpointer data)
{
  auto self = static_cast<Impl *> (data);
  const char *method = soup_server_message_get_method (msg);
  if (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0) {
    soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, nullptr);
    return;
  }
  const bool ready = self->server->ready_.load () && !self->shutting_down && !self->draining;
  soup_server_message_set_status (msg, ready ? SOUP_STATUS_OK : SOUP_STATUS_SERVICE_UNAVAILABLE,
                                  nullptr);
  const char *body = ready ? "OK\n" : "not ready\n";
  soup_server_message_set_response (msg, "text/plain", SOUP_MEMORY_STATIC, body, strlen (body));
}

void
Server::Impl::refuse (SoupServerMessage *msg, guint status, const char *why)
{
  soup_server_message_set_status (msg, status, nullptr);
  soup_server_message_set_response (msg, "text/plain", SOUP_MEMORY_COPY, why, strlen (why));
}

/* Runs before the websocket handshake: a refused request is never upgraded. */
void
Server::Impl::on_request (SoupServer *, SoupServerMessage *msg, const char *, GHashTable *,
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
  if (self->shutting_down || self->draining || (int)self->conns.size () >= self->cfg.max_clients) {
    self->bump ([] (ServerStats &s) { s.refused++; });
    refuse (msg, SOUP_STATUS_SERVICE_UNAVAILABLE,
            self->shutting_down ? "the server is stopping\n"
            : self->draining    ? "the server is draining: connect to another replica\n"
                                : "the server has as many clients as it takes (max-clients)\n");
    return;
  }
}

} // namespace pi0::serve
