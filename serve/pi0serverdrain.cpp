/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* How sessions end on the server's side: the graceful drain, the one-second tick (sessions that
 * answer no ping, requests the pipeline did not answer in time, lingering peers past their
 * deadline), shutdown, and the teardown of the server thread's state. */
#include "serve/pi0serverimpl.h"

#include <vector>

namespace pi0::serve
{

/* ---- Drain ---- */

void
Server::Impl::close_going_away (Conn &c)
{
  if (c.closing)
    return;
  c.closing = true;
  if (soup_websocket_connection_get_state (c.ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_close (c.ws, SOUP_WEBSOCKET_CLOSE_GOING_AWAY,
                                     "the server is draining: reconnect");
}

void
Server::Impl::begin_drain ()
{
  if (draining || shutting_down)
    return;
  draining = true;
  bump ([] (ServerStats &s) { s.draining = true; });
  /* New robots find the port closed (or, behind a Service, another replica). */
  stop_accepting ();
  g_socket_close (listener, nullptr);
  for (auto &kv : conns)
    if (!kv.second.in_flight && kv.second.waiting.empty ())
      close_going_away (kv.second);
  for (auto &kv : peers)
    if (!kv.second.upgraded)
      g_io_stream_close (G_IO_STREAM (kv.second.tcp), nullptr, nullptr);
}

/* ---- Timeouts ---- */

/* Sessions that have sent nothing, not even a pong, for a ping interval and the pong
 * timeout: closed as websockets closes them (1011, "keepalive ping timeout"). */
void
Server::Impl::close_hung (gint64 now)
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

gboolean
Server::Impl::on_tick (gpointer data)
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

void
Server::Impl::begin_shutdown ()
{
  shutting_down = true;
  stop_accepting ();
  g_socket_close (listener, nullptr);
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

void
Server::Impl::maybe_quit ()
{
  if (shutting_down && conns.empty ())
    g_main_loop_quit (loop);
}

Server::Impl::~Impl ()
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
  stop_accepting ();
  if (listener) {
    g_socket_close (listener, nullptr);
    g_object_unref (listener);
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

} // namespace pi0::serve
