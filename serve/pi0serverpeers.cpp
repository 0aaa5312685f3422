/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* TCP peers of the server: each accepted connection read through a byte budget, the oldest
 * non-session closed when too many are pending (admission), a handshake timeout, and the
 * lingering close of a peer that was sent a close frame while it was still sending. */
#include "serve/pi0serverimpl.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>

#include <algorithm>

namespace pi0::serve
{

/* ---- Accepting ---- */

void
Server::Impl::start_accepting ()
{
  if (accept_source || !listener)
    return;
  accept_source = g_socket_create_source (listener, G_IO_IN, nullptr);
  g_source_set_callback (accept_source, (GSourceFunc)(void (*) ())on_acceptable, this, nullptr);
  g_source_attach (accept_source, g_main_context_get_thread_default ());
}

void
Server::Impl::stop_accepting ()
{
  for (GSource **s : {&accept_source, &accept_resume})
    if (*s) {
      g_source_destroy (*s);
      g_source_unref (*s);
      *s = nullptr;
    }
}

/* Takes what the kernel has queued (a bounded number per wake-up, so that sessions are served
 * in between). Out of file descriptors anyway (other code of the process opened some): the
 * oldest peer that is not a session is closed to make room; with none, accepting pauses for
 * 100 ms rather than spinning on a queue it cannot take from. */
gboolean
Server::Impl::on_acceptable (GSocket *, GIOCondition, gpointer data)
{
  auto self = static_cast<Impl *> (data);
  for (int n = 0; n < 64; n++) {
    GError *err = nullptr;
    GSocket *s = g_socket_accept (self->listener, nullptr, &err);
    if (!s) {
      const bool would_block = g_error_matches (err, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK);
      const bool no_fds = g_error_matches (err, G_IO_ERROR, G_IO_ERROR_TOO_MANY_OPEN_FILES);
      g_clear_error (&err);
      if (would_block)
        break;
      if (no_fds) {
        self->out_of_fds ("the process is out of file descriptors");
        if (!self->evict_oldest_pending ()) {
          /* Nothing to close: wait, and try again. */
          if (self->accept_source) {
            g_source_destroy (self->accept_source);
            g_source_unref (self->accept_source);
            self->accept_source = nullptr;
          }
          self->accept_resume = g_timeout_source_new (100);
          g_source_set_callback (
              self->accept_resume,
              [] (gpointer d) -> gboolean {
                auto impl = static_cast<Impl *> (d);
                g_source_unref (impl->accept_resume);
                impl->accept_resume = nullptr;
                impl->start_accepting ();
                return G_SOURCE_REMOVE;
              },
              self, nullptr);
          g_source_attach (self->accept_resume, g_main_context_get_thread_default ());
          return G_SOURCE_REMOVE; /* destroyed above */
        }
        break;
      }
      continue; /* a connection reset before it was taken, and the like */
    }
    GSocketConnection *tcp = g_socket_connection_factory_create_connection (s);
    g_object_unref (s);
    on_incoming (nullptr, tcp, nullptr, self);
    g_object_unref (tcp);
  }
  return G_SOURCE_CONTINUE;
}

/* A counted warning, at most every 10 s. */
void
Server::Impl::out_of_fds (const char *why)
{
  bump ([] (ServerStats &s) { s.fd_limited++; });
  fd_failures_unreported++;
  const gint64 now = g_get_monotonic_time ();
  if (last_fd_warning_us && now - last_fd_warning_us < 10 * G_USEC_PER_SEC)
    return;
  struct rlimit rl;
  getrlimit (RLIMIT_NOFILE, &rl);
  g_warning ("pi0serve: %s (open-file limit %llu, room for %d peers): %" G_GUINT64_FORMAT
             " connections closed or delayed since the last warning; the oldest peers that are "
             "not sessions are closed first. Raise the limit (ulimit -n) for more.",
             why, (unsigned long long)rl.rlim_cur, fd_room, fd_failures_unreported);
  last_fd_warning_us = now;
  fd_failures_unreported = 0;
}

gboolean
Server::Impl::on_incoming (GSocketService *, GSocketConnection *tcp, GObject *, gpointer data)
{
  auto self = static_cast<Impl *> (data);
  if (self->shutting_down) {
    self->bump ([] (ServerStats &s) { s.refused++; });
    return TRUE; /* not kept: closed when GIO drops it */
  }
  if (!self->make_room ()) {
    self->out_of_fds ("no room for another peer");
    g_io_stream_close (G_IO_STREAM (tcp), nullptr, nullptr);
    return TRUE;
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
 * closed here; they are bounded by max_clients when they ask to upgrade. And whatever their
 * age, peers are closed to keep one file descriptor free under the open-file limit (fd_room),
 * so that the next robot can always be accepted: the oldest non-session first, then the oldest
 * lingering close; with neither, false (no room). */
bool
Server::Impl::make_room ()
{
  int pending = 0, holding = (int)lingering.size ();
  Peer *oldest = nullptr;
  for (auto &kv : peers) {
    Peer &p = kv.second;
    if (p.evicted)
      continue; /* its socket is closed */
    holding++;
    if (p.upgraded)
      continue;
    pending++;
    if (!oldest || p.accepted_us < oldest->accepted_us)
      oldest = &p;
  }
  if (holding + 1 >= fd_room) {
    if (oldest) { /* found above: no second scan */
      evict_for_fds (*oldest);
      return true;
    }
    if (!lingering.empty ()) {
      end_linger (lingering.front ());
      return true;
    }
    return false;
  }
  /* Room for every session's handshake at once (robots reconnecting together), then
   * max_pending more; only a peer pending for a second or more is closed for a new one (a
   * robot's handshake takes milliseconds); a burst younger than that is kept whole. */
  if (pending < cfg.max_pending + cfg.max_clients || !oldest ||
      g_get_monotonic_time () - oldest->accepted_us < G_USEC_PER_SEC)
    return true;
  evict (*oldest);
  return true;
}

void
Server::Impl::evict (Peer &p)
{
  p.evicted = true;
  g_io_stream_close (G_IO_STREAM (p.tcp), nullptr, nullptr);
  bump ([] (ServerStats &s) { s.evicted++; });
}

bool
Server::Impl::evict_oldest_pending ()
{
  Peer *oldest = nullptr;
  for (auto &kv : peers)
    if (!kv.second.upgraded && !kv.second.evicted &&
        (!oldest || kv.second.accepted_us < oldest->accepted_us))
      oldest = &kv.second;
  if (!oldest)
    return false;
  evict_for_fds (*oldest);
  return true;
}

void
Server::Impl::evict_for_fds (Peer &p)
{
  evict (p);
  bump ([] (ServerStats &s) { s.fd_limited++; });
}

void
Server::Impl::on_io_gone (gpointer data, GObject *)
{
  auto tag = static_cast<Tag *> (data);
  tag->impl->forget_peer (tag->peer);
  delete tag;
}

void
Server::Impl::forget_peer (GSocketAddress *key)
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

gboolean
Server::Impl::on_handshake_timeout (gpointer data)
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

/* ---- Lingering close (Lingering in pi0serverimpl.h says why) ---- */

void
Server::Impl::linger (GSocketConnection *tcp)
{
  GSocket *sock = g_socket_connection_get_socket (tcp);
  auto *l =
      new Lingering{tcp, g_socket_create_source (sock, G_IO_IN, nullptr),
                    g_get_monotonic_time () + (gint64)(kLingerS * G_USEC_PER_SEC), kLingerBytes};
  g_source_set_callback (l->source, (GSourceFunc)(void (*) ())on_linger_readable,
                         new std::pair<Impl *, Lingering *> (this, l), [] (gpointer d) {
                           delete static_cast<std::pair<Impl *, Lingering *> *> (d);
                         });
  g_source_attach (l->source, g_main_context_get_thread_default ());
  lingering.push_back (l);
  bump ([] (ServerStats &) {});
}

gboolean
Server::Impl::on_linger_readable (GSocket *sock, GIOCondition, gpointer data)
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

void
Server::Impl::end_linger (Lingering *l)
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
void
Server::Impl::end_late_lingers (gint64 now)
{
  std::vector<Lingering *> late;
  for (Lingering *l : lingering)
    if (now >= l->deadline_us)
      late.push_back (l);
  for (Lingering *l : late)
    end_linger (l);
}

} // namespace pi0::serve
