/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Websocket sessions: the metadata on connect, each binary message decoded and queued, requests
 * sent ahead answered in order, the answers from the pipeline sent back with their timing, and
 * errors sent as openpi sends them (text, then close 1011). */
#include "serve/pi0serverimpl.h"

#include <algorithm>
#include <cmath>

namespace pi0::serve
{

namespace
{

const char *kErrorCloseReason = "Internal server error. Traceback included in previous frame.";

double
ms_since (gint64 then_us, gint64 now_us)
{
  return (double)(now_us - then_us) / 1000.0;
}

} // namespace

void
Server::Impl::on_websocket (SoupServer *, SoupServerMessage *msg, const char *,
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

void
Server::Impl::on_message (SoupWebsocketConnection *, gint type, GBytes *message, gpointer data)
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

void
Server::Impl::dispatch (Conn &c, GBytes *message, gint64 received_us)
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

void
Server::Impl::error_close (Conn &c, const std::string &text)
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
void
Server::Impl::release_ws (Conn &c)
{
  for (gulong id : {c.sig_message, c.sig_closed, c.sig_pong, c.sig_error})
    g_signal_handler_disconnect (c.ws, id);
  g_object_unref (c.ws);
}

/* libsoup pings in whole seconds, at least one. */
guint
Server::Impl::keepalive_interval_s () const
{
  return (guint)std::max (1.0, std::round (cfg.keepalive_s));
}

void
Server::Impl::on_pong (SoupWebsocketConnection *, GBytes *, gpointer data)
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
void
Server::Impl::on_error (SoupWebsocketConnection *, GError *error, gpointer data)
{
  auto tag = static_cast<Tag *> (data);
  Impl *self = tag->impl;
  const bool too_big =
      (error->domain == SOUP_WEBSOCKET_ERROR && error->code == SOUP_WEBSOCKET_CLOSE_TOO_BIG) ||
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
  frame += (char)0x88;                 /* FIN, close */
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

void
Server::Impl::on_closed (SoupWebsocketConnection *, gpointer data)
{
  auto tag = static_cast<Tag *> (data);
  tag->impl->drop_conn (tag->id);
}

void
Server::Impl::drop_conn (uint64_t id)
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

void
Server::Impl::deliver (uint64_t client, uint64_t number, Reply *reply, const std::string *error)
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
                          " action values per step; mapping '" + cfg.mapping.name + "' sends " +
                          std::to_string (cfg.mapping.action_dim));
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

} // namespace pi0::serve
