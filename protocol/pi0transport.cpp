/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The transport of pi0actionsink (pi0transport.h). */

#include "protocol/pi0transport.h"

#include <gio/gio.h>
#include <glib/gstdio.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pi0::proto
{

namespace
{

int64_t
mono_ns ()
{
  return g_get_monotonic_time () * 1000;
}

/* Writes all of @len bytes to @fd without ever blocking longer than @timeout_ms in all: poll()
 * for room, then at most PIPE_BUF bytes (a pipe with room takes that many without blocking),
 * sockets with MSG_DONTWAIT. Returns 0, or the errno (ETIMEDOUT: no room in time). */
int
write_bounded (int fd, bool socket, const uint8_t *data, size_t len, int timeout_ms)
{
  const int64_t give_up = g_get_monotonic_time () + int64_t (timeout_ms) * 1000;
  while (len > 0) {
    const int64_t left_us = give_up - g_get_monotonic_time ();
    struct pollfd p = {fd, POLLOUT, 0};
    const int r = poll (&p, 1, (int)std::max<int64_t> ((left_us + 999) / 1000, 0));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return errno;
    if (r == 0)
      return ETIMEDOUT;
    if (p.revents & POLLNVAL)
      return EBADF;
    if ((p.revents & (POLLERR | POLLHUP)) && !(p.revents & POLLOUT))
      return EPIPE;
    const size_t n = std::min<size_t> (len, PIPE_BUF);
    const ssize_t w =
        socket ? send (fd, data, n, MSG_DONTWAIT | MSG_NOSIGNAL) : ::write (fd, data, n);
    if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (w < 0)
      return errno;
    data += w;
    len -= (size_t)w;
  }
  return 0;
}

/* The same IP address and port (IPv4 or IPv6). */
bool
same_address (const struct sockaddr_storage &a, const struct sockaddr_storage &b)
{
  if (a.ss_family != b.ss_family)
    return false;
  if (a.ss_family == AF_INET) {
    const auto &x = (const struct sockaddr_in &)a, &y = (const struct sockaddr_in &)b;
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto &x = (const struct sockaddr_in6 &)a, &y = (const struct sockaddr_in6 &)b;
    return x.sin6_port == y.sin6_port && memcmp (&x.sin6_addr, &y.sin6_addr, 16) == 0;
  }
  return false;
}

} // namespace

bool
parse_target (const std::string &t, Target *out, std::string *err)
{
  Target r;
  if (t == "stdout") {
    r.type = TargetType::kStdout;
    *out = r;
    return true;
  }
  if (g_str_has_prefix (t.c_str (), "file://")) {
    GError *e = nullptr;
    gchar *p = g_filename_from_uri (t.c_str (), nullptr, &e);
    if (!p) {
      *err = "invalid file URI \"" + t + "\": " + e->message;
      g_clear_error (&e);
      return false;
    }
    r.type = TargetType::kFile;
    r.path = p;
    g_free (p);
    *out = r;
    return true;
  }
  if (g_str_has_prefix (t.c_str (), "ros2://")) {
    r.type = TargetType::kExternal;
    r.scheme = "ros2";
    r.uri = t;
    *out = r;
    return true;
  }
  const bool udp = g_str_has_prefix (t.c_str (), "udp://");
  const bool tcp = g_str_has_prefix (t.c_str (), "tcp://");
  if (!udp && !tcp) {
    *err = "target \"" + t +
           "\" is not udp://IP:PORT, tcp://IP:PORT, file:///path, stdout or ros2:///TOPIC";
    return false;
  }
  GUri *uri = g_uri_parse (t.c_str (), G_URI_FLAGS_NONE, nullptr);
  const char *host = uri ? g_uri_get_host (uri) : nullptr;
  const int port = uri ? g_uri_get_port (uri) : -1;
  bool ok = false;
  if (!host || port <= 0 || port > 65535) {
    *err = "target \"" + t + "\" needs an IP address and a port, e.g. udp://127.0.0.1:9870";
  } else if (GInetAddress *ia = g_inet_address_new_from_string (host)) {
    g_object_unref (ia);
    r.type = udp ? TargetType::kUdp : TargetType::kTcp;
    r.host = host;
    r.port = (uint16_t)port;
    *out = r;
    ok = true;
  } else {
    *err = std::string ("target host \"") + host +
           "\" is not a numeric IP address (names are not resolved)";
  }
  if (uri)
    g_uri_unref (uri);
  return ok;
}

bool
Transport::open (const Target &target, const TransportSettings &s, std::string *err)
{
  close ();
  /* Everything per connection and per start begins afresh (counters are per start). */
  connected_ = ever_connected_ = new_connection_ = false;
  reconnects_ = dropped_in_queue_ = 0;
  counters_ = TransportCounters ();
  next_attempt_ = connect_started_ = 0;
  target_ = target;
  s_ = s;
  backoff_ = s.reconnect_min_ns;
  error_.clear ();
  if (target.type == TargetType::kUdp || target.type == TargetType::kTcp) {
    GInetAddress *ia = g_inet_address_new_from_string (target.host.c_str ());
    if (!ia) {
      *err = "\"" + target.host + "\" is not a numeric IP address";
      return false;
    }
    addr_ = G_INET_SOCKET_ADDRESS (g_inet_socket_address_new (ia, target.port));
    g_object_unref (ia);
  }
  GError *e = nullptr;
  switch (target.type) {
    case TargetType::kStdout: {
      /* Written with write(2) on descriptor 1, never blocking: a launcher that closed stdout
       * leaves descriptor 1 to whatever is opened next (GStreamer's own sockets), which no one
       * reads. */
      struct stat st;
      if (fstat (STDOUT_FILENO, &st) != 0) {
        *err = std::string ("target=stdout, but standard output is closed: ") + g_strerror (errno);
        return false;
      }
      stdout_socket_ = S_ISSOCK (st.st_mode);
      fflush (stdout); /* what was printed before comes first */
      stdout_open_ = true;
      stdout_stalled_ = false;
      return true;
    }
    case TargetType::kFile:
      file_ = g_fopen (target.path.c_str (), "wb");
      if (!file_) {
        *err = "cannot open " + target.path + " for writing: " + g_strerror (errno);
        return false;
      }
      own_file_ = true;
      return true;
    case TargetType::kUdp:
      sock_ = g_socket_new (g_socket_address_get_family (G_SOCKET_ADDRESS (addr_)),
                            G_SOCKET_TYPE_DATAGRAM, G_SOCKET_PROTOCOL_UDP, &e);
      if (!sock_) {
        *err = std::string ("cannot create UDP socket: ") + e->message;
        g_clear_error (&e);
        return false;
      }
      g_socket_set_blocking (sock_, FALSE);
      connected_ = true;
      return true;
    case TargetType::kTcp:
      /* The first connection attempt happens in pump(): open() must not wait on a peer. */
      return true;
    case TargetType::kExternal: {
      if (!s.external || s.external->abi != PI0_EXTERNAL_LINK_ABI ||
          target.scheme != s.external->scheme) {
        *err = "no link for " + target.scheme + ":// targets is loaded";
        return false;
      }
      std::vector<const char *> names;
      for (const std::string &j : s.joints)
        names.push_back (j.c_str ());
      char *why = nullptr;
      external_ =
          s.external->open (target.uri.c_str (), names.data (), (unsigned)names.size (), &why);
      if (!external_) {
        *err = why ? why : "the " + target.scheme + " link did not open";
        g_free (why);
        return false;
      }
      return true;
    }
  }
  return false;
}

bool
Transport::up () const
{
  if (target_.type == TargetType::kExternal)
    return external_ && s_.external->up (external_);
  return !is_network () || connected_;
}

void
Transport::close ()
{
  drop_connection ();
  if (sock_)
    g_object_unref (sock_);
  sock_ = nullptr;
  if (own_file_ && file_)
    fclose (file_);
  file_ = nullptr;
  stdout_open_ = false;
  own_file_ = false;
  g_clear_object (&addr_);
  if (external_)
    s_.external->close (external_);
  external_ = nullptr;
}

void
Transport::pump (const FrameCallback &on_frame, uint64_t now_running)
{
  if (target_.type == TargetType::kExternal) {
    if (!external_)
      return;
    /* What the robot side sends back goes to @on_frame only when feedback is read. */
    const FrameCallback *cb = s_.read_feedback && on_frame ? &on_frame : nullptr;
    s_.external->pump (
        external_, now_running,
        [] (void *ud, const uint8_t *d, size_t len) {
          if (ud)
            (*(const FrameCallback *)ud) (d, len);
        },
        (void *)cb);
    return;
  }
  if (target_.type == TargetType::kUdp)
    read_udp (on_frame);
  if (target_.type != TargetType::kTcp)
    return;
  const int64_t now = mono_ns ();
  if (!sock_) {
    if (now >= next_attempt_)
      start_connect (now);
    return;
  }
  if (!connected_) {
    GIOCondition c =
        g_socket_condition_check (sock_, (GIOCondition)(G_IO_OUT | G_IO_ERR | G_IO_HUP));
    if (!c) {
      /* A peer that drops SYNs would keep us "connecting" forever: give up and retry. */
      if (now - connect_started_ > (int64_t)std::max<uint64_t> (s_.reconnect_max_ns, 1000000000))
        fail (now);
      return;
    }
    GError *e = nullptr;
    if (!g_socket_check_connect_result (sock_, &e)) {
      error_ = std::string ("connect: ") + (e ? e->message : "?");
      g_clear_error (&e);
      fail (now);
      return;
    }
    on_connected ();
  }
  if (!read_tcp (now, on_frame))
    return;
  flush (now);
}

/* What the robot sent: frames for @on_frame (read_feedback), otherwise read and thrown away;
 * either way a close is noticed. At most max_read_per_pump bytes: a robot that talks too much
 * waits for the next pump (TCP's flow control slows it down), it does not take the thread. */
bool
Transport::read_tcp (int64_t now, const FrameCallback &on_frame)
{
  GIOCondition c = g_socket_condition_check (sock_, (GIOCondition)(G_IO_IN | G_IO_ERR | G_IO_HUP));
  if (c & (G_IO_ERR | G_IO_HUP)) {
    fail (now);
    return false;
  }
  uint8_t chunk[4096];
  for (size_t total = 0; (c & G_IO_IN) && total < s_.max_read_per_pump;) {
    GError *e = nullptr;
    gssize n = g_socket_receive (sock_, (gchar *)chunk, sizeof chunk, nullptr, &e);
    const bool would_block = n < 0 && g_error_matches (e, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK);
    g_clear_error (&e);
    if (would_block)
      break;
    if (n <= 0) {
      fail (now);
      return false;
    }
    total += (size_t)n;
    if (!s_.read_feedback)
      break; /* one read per pump sees a close, as before feedback existed */
    in_.push (chunk, (size_t)n, [&] (const uint8_t *d, size_t len) {
      if (on_frame)
        on_frame (d, len);
    });
  }
  counters_.garbage += in_.resyncs () - in_resyncs_;
  in_resyncs_ = in_.resyncs ();
  return true;
}

/* Datagrams on the sink's own socket: only the target's address may speak (anyone can send a
 * datagram), and at most max_read_per_pump bytes' worth per pump. */
void
Transport::read_udp (const FrameCallback &on_frame)
{
  if (!s_.read_feedback || !on_frame || !sock_)
    return;
  struct sockaddr_storage want;
  if (!g_socket_address_to_native (G_SOCKET_ADDRESS (addr_), &want, sizeof want, nullptr))
    return;
  const int fd = g_socket_get_fd (sock_);
  uint8_t buf[kMaxFeedbackFrameSize + 1];
  for (size_t total = 0; total < s_.max_read_per_pump;) {
    struct sockaddr_storage from;
    socklen_t fromlen = sizeof from;
    /* MSG_TRUNC: the datagram's real size, so an oversized one is seen as such. */
    const ssize_t n = recvfrom (fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC,
                                (struct sockaddr *)&from, &fromlen);
    if (n < 0)
      return; /* nothing more now (or an error the next send will meet) */
    total += std::max<size_t> ((size_t)n, 1);
    if (!same_address (from, want)) {
      counters_.foreign++;
      continue;
    }
    if ((size_t)n > kMaxFeedbackFrameSize) {
      counters_.garbage++;
      continue;
    }
    on_frame (buf, (size_t)n);
  }
}

SendResult
Transport::write (const uint8_t *data, size_t len)
{
  switch (target_.type) {
    case TargetType::kStdout: {
      if (!stdout_open_)
        return SendResult::kDropped;
      /* After one timeout, later frames do not wait again until stdout takes data. */
      const int e = write_bounded (STDOUT_FILENO, stdout_socket_, data, len,
                                   stdout_stalled_ ? 0 : kStdoutTimeoutMs);
      stdout_stalled_ = e == ETIMEDOUT;
      if (e != 0) {
        error_ = e == ETIMEDOUT ? "writing to stdout failed: it took nothing for " +
                                      std::to_string (kStdoutTimeoutMs) +
                                      " ms (a reader that stopped reading, or stdout closed by "
                                      "the launcher and its descriptor reused)"
                                : std::string ("writing to stdout failed: ") + g_strerror (e);
        return SendResult::kFailed;
      }
      return SendResult::kSent;
    }
    case TargetType::kFile:
      if (!file_)
        return SendResult::kDropped;
      errno = 0;
      if (fwrite (data, 1, len, file_) != len || fflush (file_) != 0) {
        /* A recording that loses data must say so: the caller posts this. */
        error_ = std::string ("writing to ") + target_.path +
                 " failed: " + g_strerror (errno ? errno : EIO);
        return SendResult::kFailed;
      }
      return SendResult::kSent;
    case TargetType::kUdp: {
      GError *e = nullptr;
      gssize n =
          g_socket_send_to (sock_, G_SOCKET_ADDRESS (addr_), (const gchar *)data, len, nullptr, &e);
      g_clear_error (&e);
      return n == (gssize)len ? SendResult::kSent : SendResult::kDropped;
    }
    case TargetType::kExternal:
      return external_ && s_.external->send (external_, data, len) == 0 ? SendResult::kSent
                                                                        : SendResult::kDropped;
    case TargetType::kTcp: {
      if (!connected_ || len > s_.max_send_buffer)
        return SendResult::kDropped;
      /* Make room by dropping the oldest frames not yet begun: the newest command matters, and
       * a frame already partly on the wire must be finished or the stream breaks. */
      while (queued_ + len > s_.max_send_buffer && queue_.size () > (head_off_ ? 1u : 0u)) {
        auto victim = queue_.begin () + (head_off_ ? 1 : 0);
        queued_ -= victim->size ();
        queue_.erase (victim);
        dropped_in_queue_++;
      }
      if (queued_ + len > s_.max_send_buffer)
        return SendResult::kDropped;
      queue_.emplace_back (data, data + len);
      queued_ += len;
      flush (mono_ns ());
      return SendResult::kSent;
    }
  }
  return SendResult::kDropped;
}

SendResult
Transport::send (const OutFrame &f)
{
  buf_.clear ();
  if (s_.binary) {
    encode (f.header, f.values.data (), s_.key, buf_);
  } else {
    const std::string line = to_json (f.header, f.values.data (), f.model_id) + "\n";
    buf_.assign (line.begin (), line.end ());
  }
  const SendResult r = write (buf_.data (), buf_.size ());
  if (r == SendResult::kSent) {
    counters_.frames++;
    if (f.header.kind == Kind::kAction)
      counters_.action_rows += f.header.steps;
  } else {
    counters_.dropped++;
    counters_.write_errors += r == SendResult::kFailed;
  }
  return r;
}

const TransportCounters &
Transport::counters ()
{
  counters_.dropped += take_queue_drops ();
  return counters_;
}

bool
Transport::take_new_connection ()
{
  const bool r = new_connection_;
  new_connection_ = false;
  return r;
}

uint64_t
Transport::take_queue_drops ()
{
  const uint64_t d = dropped_in_queue_;
  dropped_in_queue_ = 0;
  return d;
}

void
Transport::start_connect (int64_t now)
{
  GError *e = nullptr;
  sock_ = g_socket_new (g_socket_address_get_family (G_SOCKET_ADDRESS (addr_)),
                        G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, &e);
  if (!sock_) {
    error_ = std::string ("cannot create TCP socket: ") + e->message;
    g_clear_error (&e);
    next_attempt_ = now + (int64_t)backoff_;
    return;
  }
  g_socket_set_blocking (sock_, FALSE);
  g_socket_set_option (sock_, IPPROTO_TCP, TCP_NODELAY, 1, nullptr);
  /* Keep the kernel's share of the backlog small too: the bound we promise is ours plus this. */
  g_socket_set_option (sock_, SOL_SOCKET, SO_SNDBUF, (gint)s_.max_send_buffer, nullptr);
  connected_ = false;
  connect_started_ = now;
  if (g_socket_connect (sock_, G_SOCKET_ADDRESS (addr_), nullptr, &e)) {
    on_connected ();
    return;
  }
  if (g_error_matches (e, G_IO_ERROR, G_IO_ERROR_PENDING)) {
    g_clear_error (&e);
    return;
  }
  error_ = std::string ("connect: ") + e->message;
  g_clear_error (&e);
  fail (now);
}

/* A connect completed, at once or later in pump(): the caller starts a new session on it, and
 * the next failure waits the shortest backoff again. */
void
Transport::on_connected ()
{
  connected_ = true;
  new_connection_ = true;
  backoff_ = s_.reconnect_min_ns;
  if (ever_connected_)
    reconnects_++;
  ever_connected_ = true;
}

void
Transport::flush (int64_t now)
{
  while (connected_ && !queue_.empty ()) {
    auto &f = queue_.front ();
    GError *e = nullptr;
    gssize n = g_socket_send (sock_, (const gchar *)f.data () + head_off_, f.size () - head_off_,
                              nullptr, &e);
    if (n < 0) {
      const bool would_block = g_error_matches (e, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK);
      g_clear_error (&e);
      if (!would_block)
        fail (now);
      return;
    }
    head_off_ += (size_t)n;
    if (head_off_ == f.size ()) {
      queued_ -= f.size ();
      queue_.pop_front ();
      head_off_ = 0;
    }
  }
}

void
Transport::drop_connection ()
{
  if (target_.type == TargetType::kTcp && sock_) {
    g_socket_close (sock_, nullptr);
    g_object_unref (sock_);
    sock_ = nullptr;
  }
  if (target_.type == TargetType::kTcp)
    connected_ = false;
  in_.clear (); /* a frame cut by the close is never handed on */
  dropped_in_queue_ += queue_.size ();
  queue_.clear ();
  queued_ = 0;
  head_off_ = 0;
}

void
Transport::fail (int64_t now)
{
  drop_connection ();
  next_attempt_ = now + (int64_t)backoff_;
  backoff_ = std::min (backoff_ * 2, s_.reconnect_max_ns);
}

} // namespace pi0::proto
