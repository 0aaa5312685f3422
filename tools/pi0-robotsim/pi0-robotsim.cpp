/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0-robotsim: plays the robot for pi0actionsink. Listens on UDP or TCP (loopback by default)
 * and hands every frame to the receiver half of the robot session (protocol/pi0session.h),
 * which checks it as docs/protocol.md tells a robot to (size before allocating, CRC, HMAC,
 * finiteness, dimension, session and sequence, joint limits, max_step) and schedules its rows;
 * this program does the I/O and logs, as JSON lines, what a robot would execute and when. It
 * never executes a partial or invalid frame.
 *
 * Modes for tests: normal; slow (reads slowly); dead (never reads); hostile (sends garbage
 * back and resets TCP connections). Exits cleanly on SIGINT/SIGTERM or after --duration.
 *
 * In chunk mode it reports each row it starts back to the sender, as a FEEDBACK frame on the
 * same socket (docs/protocol.md, "FEEDBACK"), unless --no-feedback (a robot of before FEEDBACK).
 *
 * With --state-to IP:PORT it also publishes its joint state, as a robot's driver would: one
 * datagram of dim float32 (little-endian) per tick at --state-rate Hz, the position it is at
 * (the last row executed, a HOLD's position, or the configuration's initial position) — what
 * pi0viewmux's state pad takes from a udpsrc.
 *
 *   pi0-robotsim --proto udp --port 9870 [--bind 127.0.0.1] [--key K] [--log FILE]
 *
 * The first line on stdout is always {"event":"listening",...,"port":N} (useful with --port 0). */

#include "protocol/pi0frame.h"
#include "protocol/pi0safety.h"
#include "protocol/pi0session.h"
#include "tools/common/pi0keyfile.h"

#include <glib.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace
{

volatile sig_atomic_t quit_signal = 0;

void
on_signal (int sig)
{
  quit_signal = sig;
}

enum class Mode { kNormal, kSlow, kDead, kHostile };

struct Options {
  std::string proto = "udp";
  std::string bind = "127.0.0.1";
  int port = 9870;
  std::string key;
  std::string log_path;
  Mode mode = Mode::kNormal;
  double duration = 0;
  size_t max_frame = 64 * 1024;
  unsigned dim = 0;
  std::string robot_config;
  std::string state_to; /* IP:PORT, empty = do not publish */
  double state_rate = 100.0;
  double hold_timeout = 0; /* the robot's own watchdog, seconds (0 = off) */
  double stop_timeout = 0;
  bool feedback = true; /* report the rows it starts (chunk mode) */
};

uint64_t
mono_ns ()
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

class Sim
{
public:
  explicit Sim (const Options &o) : o_ (o) {}

  bool init (std::string *err)
  {
    if (!o_.log_path.empty ()) {
      log_ = fopen (o_.log_path.c_str (), "w");
      if (!log_) {
        *err = "cannot open log " + o_.log_path + ": " + strerror (errno);
        return false;
      }
    } else {
      log_ = stdout;
    }
    pi0::proto::ReceiverSettings rs;
    rs.limits.max_frame_size = o_.max_frame;
    rs.key = o_.key;
    rs.dim = o_.dim;
    rs.hold_timeout_ns = (uint64_t)(o_.hold_timeout * 1e9);
    rs.stop_timeout_ns = (uint64_t)(o_.stop_timeout * 1e9);
    if (!o_.robot_config.empty ()) {
      pi0::proto::RobotConfig cfg;
      if (!pi0::proto::load_robot_config (o_.robot_config, &cfg, err))
        return false;
      rs.robot = std::move (cfg);
    }
    if (!pi0::proto::validate (rs, err))
      return false;
    if (rs.robot) {
      o_.dim = rs.robot->dim ();
      initial_ = rs.robot->initial;
    }
    rx_.emplace (std::move (rs));
    const bool udp = o_.proto == "udp";
    struct sockaddr_in sa;
    memset (&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons ((uint16_t)o_.port);
    if (inet_pton (AF_INET, o_.bind.c_str (), &sa.sin_addr) != 1) {
      *err = "--bind must be a numeric IPv4 address";
      return false;
    }
    fd_ = socket (AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0) {
      *err = std::string ("socket: ") + strerror (errno);
      return false;
    }
    int one = 1;
    setsockopt (fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind (fd_, (struct sockaddr *)&sa, sizeof sa) != 0) {
      *err = std::string ("bind: ") + strerror (errno);
      return false;
    }
    if (!udp && listen (fd_, 4) != 0) {
      *err = std::string ("listen: ") + strerror (errno);
      return false;
    }
    socklen_t len = sizeof sa;
    getsockname (fd_, (struct sockaddr *)&sa, &len);
    port_ = ntohs (sa.sin_port);
    if (!o_.state_to.empty () && !open_state (err))
      return false;
    char line[256];
    snprintf (line, sizeof line,
              "{\"event\":\"listening\",\"proto\":\"%s\",\"address\":\"%s\",\"port\":%d,\"mode\":"
              "\"%s\",\"hmac\":%s}",
              o_.proto.c_str (), o_.bind.c_str (), port_, mode_name (),
              o_.key.empty () ? "false" : "true");
    printf ("%s\n", line);
    fflush (stdout);
    if (log_ != stdout)
      emit (line);
    return true;
  }

  int run ()
  {
    const uint64_t end = o_.duration > 0 ? mono_ns () + (uint64_t)(o_.duration * 1e9) : 0;
    const uint64_t state_period = (uint64_t)(1e9 / o_.state_rate);
    uint64_t next_state = mono_ns ();
    while (!quit_signal && (end == 0 || mono_ns () < end)) {
      int timeout_ms = 50;
      watchdog (mono_ns (), &timeout_ms);
      send_feedback (mono_ns (), &timeout_ms);
      if (state_fd_ >= 0) {
        uint64_t now = mono_ns ();
        if (now >= next_state) {
          publish_state (now);
          next_state += state_period;
          if (next_state <= now) /* late: skip ticks rather than burst */
            next_state = now + state_period;
        }
        const uint64_t until = next_state - std::min (next_state, now);
        timeout_ms = std::min (timeout_ms, (int)std::min<uint64_t> (50, until / 1000000));
      }
      struct pollfd pf[2];
      int n = 0;
      if (o_.mode != Mode::kDead || o_.proto == "tcp") {
        pf[n++] = {fd_, POLLIN, 0};
      }
      if (conn_ >= 0 && o_.mode != Mode::kDead)
        pf[n++] = {conn_, POLLIN, 0};
      int r = poll (pf, (nfds_t)n, timeout_ms);
      if (r < 0 && errno != EINTR)
        break;
      if (r <= 0)
        continue;
      for (int i = 0; i < n; i++) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
          continue;
        if (pf[i].fd == fd_) {
          if (o_.proto == "udp")
            read_datagram ();
          else
            accept_conn ();
        } else if (pf[i].fd == conn_) {
          read_stream ();
        }
      }
    }
    if (conn_ >= 0)
      close_conn ("shutdown");
    const pi0::proto::ReceiverCounters &c = rx_->counters ();
    char line[512];
    snprintf (line, sizeof line,
              "{\"event\":\"exit\",\"signal\":%d,\"frames\":%" PRIu64 ",\"executed\":%" PRIu64
              ",\"rejected\":%" PRIu64 ",\"limited\":%" PRIu64 ",\"partial\":%" PRIu64
              ",\"sessions\":%" PRIu64 ",\"states\":%" PRIu64 "}",
              (int)quit_signal, c.frames, c.executed, c.rejected + rejected_, c.limited, partial_,
              c.sessions, states_);
    emit (line);
    if (log_ && log_ != stdout)
      fclose (log_);
    if (fd_ >= 0)
      close (fd_);
    if (state_fd_ >= 0)
      close (state_fd_);
    return 0;
  }

private:
  bool open_state (std::string *err)
  {
    const auto colon = o_.state_to.rfind (':');
    struct sockaddr_in sa;
    memset (&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    int port = colon == std::string::npos ? -1 : atoi (o_.state_to.c_str () + colon + 1);
    if (port <= 0 || port > 65535 ||
        inet_pton (AF_INET, o_.state_to.substr (0, colon).c_str (), &sa.sin_addr) != 1) {
      *err = "--state-to must be IPv4:PORT, e.g. 127.0.0.1:5005";
      return false;
    }
    sa.sin_port = htons ((uint16_t)port);
    state_addr_ = sa;
    state_fd_ = socket (AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (state_fd_ < 0) {
      *err = std::string ("socket: ") + strerror (errno);
      return false;
    }
    const unsigned dim = o_.dim ? o_.dim : 7;
    position_.assign (dim, 0.0f);
    if (initial_.size () == dim)
      position_ = initial_;
    return true;
  }

  /* The robot's position now: rows whose time has come are executed, in order. */
  void publish_state (uint64_t now)
  {
    const std::vector<float> &pos = rx_->position (now);
    if (pos.size () == position_.size ())
      position_ = pos;
    uint8_t out[4 * 1024];
    const size_t n = std::min (position_.size (), sizeof out / 4);
    for (size_t i = 0; i < n; i++) {
      uint32_t bits;
      memcpy (&bits, &position_[i], 4);
      bits = GUINT32_TO_LE (bits); /* little-endian on the wire, whatever the host */
      memcpy (out + 4 * i, &bits, 4);
    }
    /* Non-blocking, fire and forget: a state nobody listens to is simply lost. */
    sendto (state_fd_, out, n * 4, 0, (struct sockaddr *)&state_addr_, sizeof state_addr_);
    states_++;
  }

  const char *mode_name () const
  {
    switch (o_.mode) {
      case Mode::kNormal:
        return "normal";
      case Mode::kSlow:
        return "slow";
      case Mode::kDead:
        return "dead";
      case Mode::kHostile:
        return "hostile";
    }
    return "?";
  }

  void emit (const std::string &line)
  {
    fputs (line.c_str (), log_);
    fputc ('\n', log_);
    fflush (log_);
  }

  /* The receiver counts its own rejections; @transport ones (an oversized datagram, a bad
   * TCP header) are counted here. */
  void reject (const char *reason, size_t bytes, bool transport = false)
  {
    rejected_ += transport;
    char line[160];
    snprintf (line, sizeof line, "{\"event\":\"reject\",\"reason\":\"%s\",\"bytes\":%zu}", reason,
              bytes);
    emit (line);
  }

  static std::string values_json (const float *v, size_t n)
  {
    std::string s = "[";
    char b[32];
    for (size_t i = 0; i < n; i++) {
      snprintf (b, sizeof b, "%s%.9g", i ? "," : "", (double)v[i]);
      s += b;
    }
    return s + "]";
  }

  void send_garbage (int fd, const struct sockaddr *to, socklen_t tolen)
  {
    uint8_t junk[64];
    for (auto &b : junk)
      b = (uint8_t)g_random_int ();
    if (to)
      (void)sendto (fd, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT, to, tolen);
    else
      (void)send (fd, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  /* The robot's own watchdog: HOLD, then STOP, when commands stop coming. */
  void watchdog (uint64_t now, int *timeout_ms)
  {
    wd_events_.clear ();
    rx_->tick (now, wd_events_);
    for (const auto &ev : wd_events_) {
      char line[160];
      snprintf (line, sizeof line,
                "{\"event\":\"watchdog\",\"action\":\"%s\",\"deadline_ns\":%" PRIu64
                ",\"at_ns\":%" PRIu64 "}",
                pi0::proto::kind_name (ev.kind), ev.at_ns, now);
      emit (line);
    }
    const uint64_t next = rx_->next_deadline ();
    if (next != pi0::proto::kTimeNone)
      *timeout_ms = (int)std::min<uint64_t> ((uint64_t)*timeout_ms,
                                             (next > now ? next - now : 0) / 1000000 + 1);
  }

  /* Reports the row that started last, once, to the sender of the frames (chunk mode), and
   * wakes up for the next row. A report the socket cannot take now is skipped: the next row's
   * says more. */
  void send_feedback (uint64_t now, int *timeout_ms)
  {
    if (!o_.feedback || o_.mode == Mode::kDead)
      return;
    pi0::proto::Header h;
    if (rx_->feedback (now, &h) && (conn_ >= 0 || have_peer_)) {
      fb_buf_.clear ();
      pi0::proto::encode (h, nullptr, o_.key, fb_buf_);
      const ssize_t n =
          conn_ >= 0 ? send (conn_, fb_buf_.data (), fb_buf_.size (), MSG_NOSIGNAL | MSG_DONTWAIT)
                     : sendto (fd_, fb_buf_.data (), fb_buf_.size (), MSG_DONTWAIT,
                               (struct sockaddr *)&peer_, peer_len_);
      char line[256];
      snprintf (line, sizeof line,
                "{\"event\":\"feedback\",\"session\":\"%016" PRIx64 "\",\"seq\":%" PRIu64
                ",\"chunk_id\":%" PRIu64 ",\"step_index\":%u,\"time_ns\":%" PRIu64
                ",\"at_ns\":%" PRIu64 ",\"sent\":%s}",
                h.session_id, h.seq, h.chunk_id, h.step_index, h.send_time_ns, now,
                n == (ssize_t)fb_buf_.size () ? "true" : "false");
      emit (line);
    }
    const uint64_t next = rx_->next_row ();
    if (next != pi0::proto::kTimeNone)
      *timeout_ms = (int)std::min<uint64_t> ((uint64_t)*timeout_ms,
                                             (next > now ? next - now : 0) / 1000000 + 1);
  }

  /* One complete, exactly-sized candidate frame: the receiver decides, this logs. False when
   * it was rejected. */
  bool handle_frame (const uint8_t *data, size_t len)
  {
    const uint64_t now = mono_ns ();
    pi0::proto::Received &r = received_;
    rx_->receive (now, data, len, r);
    if (r.reject) {
      reject (r.reject, len);
      return false;
    }
    const pi0::proto::Header &h = r.frame.header;
    if (r.new_session) {
      char line[128];
      snprintf (line, sizeof line, "{\"event\":\"session\",\"session\":\"%016" PRIx64 "\"}",
                h.session_id);
      emit (line);
    }
    char head[256];
    snprintf (head, sizeof head,
              "\"session\":\"%016" PRIx64 "\",\"seq\":%" PRIu64 ",\"chunk_id\":%" PRIu64
              ",\"recv_ns\":%" PRIu64,
              h.session_id, h.seq, h.chunk_id, now);
    switch (h.kind) {
      case pi0::proto::Kind::kHello:
        emit (std::string ("{\"event\":\"hello\",") + head + ",\"dim\":" + std::to_string (h.dim) +
              "}");
        break;
      case pi0::proto::Kind::kHold:
        emit (std::string ("{\"event\":\"hold\",") + head +
              ",\"values\":" + values_json (r.hold.data (), r.hold.size ()) +
              (r.hold_limited ? ",\"limited\":true" : "") + "}");
        break;
      case pi0::proto::Kind::kStop:
        emit (std::string ("{\"event\":\"stop\",") + head + "}");
        break;
      case pi0::proto::Kind::kAction:
        for (const pi0::proto::ExecRow &row : r.rows) {
          char fields[192];
          snprintf (
              fields, sizeof fields,
              ",\"step_index\":%u,\"at_ns\":%" PRIu64 ",\"clamped\":%s,\"limited\":%s,\"values\":",
              row.step_index, row.at_ns, (h.flags & pi0::proto::kFlagClamped) ? "true" : "false",
              row.limited ? "true" : "false");
          std::string line = std::string ("{\"event\":\"execute\",") + head + fields +
                             values_json (row.values.data (), row.values.size ());
          if (row.limited)
            line += ",\"requested\":" + values_json (row.requested.data (), row.requested.size ());
          emit (line + "}");
        }
        break;
      case pi0::proto::Kind::kFeedback: /* refused by the receiver */
        break;
    }
    return true;
  }

  void read_datagram ()
  {
    /* One datagram is read into a buffer of the largest legal size plus one byte, so an
     * oversized datagram is seen as such (MSG_TRUNC gives its real length). */
    std::vector<uint8_t> buf (o_.max_frame + 1);
    struct sockaddr_storage from;
    socklen_t fromlen = sizeof from;
    ssize_t n =
        recvfrom (fd_, buf.data (), buf.size (), MSG_TRUNC, (struct sockaddr *)&from, &fromlen);
    if (n < 0)
      return;
    if (o_.mode == Mode::kSlow)
      g_usleep (20000);
    if ((size_t)n > o_.max_frame) {
      reject ("too-large", (size_t)n, true);
      return;
    }
    /* Reports go back to whoever sent the last frame accepted: the sender of the session. */
    const struct sockaddr_storage peer = from;
    if (handle_frame (buf.data (), (size_t)n) && fromlen <= sizeof peer_) {
      peer_ = peer;
      peer_len_ = fromlen;
      have_peer_ = true;
      send_feedback (mono_ns (), &unused_timeout_);
    }
    if (o_.mode == Mode::kHostile)
      send_garbage (fd_, (struct sockaddr *)&from, fromlen);
  }

  void accept_conn ()
  {
    int c = accept4 (fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0)
      return;
    if (o_.mode == Mode::kDead) {
      /* Accept and never read: the sender's kernel buffers fill up. Keep only the newest. */
      if (conn_ >= 0)
        close (conn_);
      conn_ = c;
      return;
    }
    /* One controlling peer at a time: a new connection replaces the old one, whose
     * unfinished frame (if any) is discarded. */
    if (conn_ >= 0)
      close_conn ("replaced");
    conn_ = c;
    /* Reports must leave at once (docs/protocol.md, Transports): with Nagle's algorithm a
     * 76-byte FEEDBACK waits for the ACK of the previous one, and the sender's real-time
     * chunking falls back to its own estimate. */
    const int one = 1;
    setsockopt (conn_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int nodelay = 0;
    socklen_t len = sizeof nodelay;
    getsockopt (conn_, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len);
    rbuf_.clear ();
    frames_on_conn_ = 0;
    emit (nodelay ? "{\"event\":\"connected\",\"nodelay\":true}"
                  : "{\"event\":\"connected\",\"nodelay\":false}");
    if (o_.mode == Mode::kHostile)
      send_garbage (conn_, nullptr, 0);
  }

  void close_conn (const char *why)
  {
    if (!rbuf_.empty ()) {
      partial_++;
      char line[128];
      snprintf (line, sizeof line, "{\"event\":\"partial\",\"bytes\":%zu,\"why\":\"%s\"}",
                rbuf_.size (), why);
      emit (line);
    }
    rbuf_.clear ();
    close (conn_);
    conn_ = -1;
    char line[96];
    snprintf (line, sizeof line, "{\"event\":\"disconnected\",\"why\":\"%s\"}", why);
    emit (line);
  }

  void reset_conn ()
  {
    struct linger lg = {1, 0}; /* RST instead of FIN */
    setsockopt (conn_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close_conn ("reset");
  }

  void read_stream ()
  {
    uint8_t tmp[16384];
    const size_t want = o_.mode == Mode::kSlow ? 256 : sizeof tmp;
    ssize_t n = recv (conn_, tmp, want, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      close_conn (n == 0 ? "eof" : "error");
      return;
    }
    if (n < 0)
      return;
    if (o_.mode == Mode::kSlow)
      g_usleep (20000);
    rbuf_.insert (rbuf_.end (), tmp, tmp + n);
    /* Frames are taken off the front only when complete; the header is checked (and the
     * size it announces bounded) before waiting for, or keeping, the rest. */
    size_t off = 0;
    while (rbuf_.size () - off >= pi0::proto::kHeaderSize) {
      size_t size = 0;
      pi0::proto::Error e = pi0::proto::peek_header (rbuf_.data () + off, rbuf_.size () - off,
                                                     rx_->settings ().limits, nullptr, &size);
      if (e != pi0::proto::Error::kOk) {
        reject (pi0::proto::error_name (e), rbuf_.size () - off, true);
        rbuf_.clear ();
        close_conn ("bad-header"); /* a byte stream cannot be resynchronised */
        return;
      }
      if (rbuf_.size () - off < size)
        break;
      handle_frame (rbuf_.data () + off, size);
      send_feedback (mono_ns (), &unused_timeout_); /* the chunk's first row starts on receipt */
      off += size;
      frames_on_conn_++;
      if (o_.mode == Mode::kHostile && frames_on_conn_ % 3 == 0) {
        send_garbage (conn_, nullptr, 0);
        rbuf_.erase (rbuf_.begin (), rbuf_.begin () + (long)off);
        reset_conn ();
        return;
      }
    }
    rbuf_.erase (rbuf_.begin (), rbuf_.begin () + (long)off);
  }

  Options o_;
  std::optional<pi0::proto::Receiver> rx_;
  pi0::proto::Received received_;
  std::vector<pi0::proto::WatchdogEvent> wd_events_;
  std::vector<float> initial_;
  FILE *log_ = nullptr;
  int fd_ = -1;
  int conn_ = -1;
  int port_ = 0;
  std::vector<uint8_t> rbuf_;
  uint64_t frames_on_conn_ = 0;
  uint64_t rejected_ = 0, partial_ = 0;
  int state_fd_ = -1;
  struct sockaddr_in state_addr_ = {};
  std::vector<float> position_;
  uint64_t states_ = 0;
  /* FEEDBACK: the UDP sender's address, and a scratch buffer. */
  struct sockaddr_storage peer_ = {};
  socklen_t peer_len_ = 0;
  bool have_peer_ = false;
  std::vector<uint8_t> fb_buf_;
  int unused_timeout_ = 0;
};

} // namespace

int
main (int argc, char **argv)
{
  Options o;
  gchar *proto = nullptr, *bind_addr = nullptr, *key = nullptr, *key_file = nullptr, *log = nullptr,
        *mode = nullptr, *robot = nullptr, *state_to = nullptr;
  gboolean no_feedback = FALSE;
  gint port = o.port, dim = 0, max_frame = (gint)o.max_frame;
  gdouble duration = 0, state_rate = o.state_rate, hold_timeout = 0, stop_timeout = 0;
  GOptionEntry entries[] = {
      {"proto", 0, 0, G_OPTION_ARG_STRING, &proto, "udp (default) or tcp", "P"},
      {"bind", 0, 0, G_OPTION_ARG_STRING, &bind_addr,
       "IPv4 address to listen on (default 127.0.0.1)", "IP"},
      {"port", 0, 0, G_OPTION_ARG_INT, &port, "port (default 9870; 0 = any free port)", "N"},
      {"key", 0, 0, G_OPTION_ARG_STRING, &key, "HMAC key: frames must carry a valid HMAC-SHA256",
       "K"},
      {"key-file", 0, 0, G_OPTION_ARG_FILENAME, &key_file, "read the HMAC key from a file", "FILE"},
      {"log", 0, 0, G_OPTION_ARG_FILENAME, &log, "write JSON-lines events here instead of stdout",
       "FILE"},
      {"mode", 0, 0, G_OPTION_ARG_STRING, &mode, "normal, slow, dead or hostile", "M"},
      {"duration", 0, 0, G_OPTION_ARG_DOUBLE, &duration,
       "exit after this many seconds (0 = run until signalled)", "S"},
      {"max-frame", 0, 0, G_OPTION_ARG_INT, &max_frame,
       "largest frame accepted, bytes (default 65536)", "B"},
      {"dim", 0, 0, G_OPTION_ARG_INT, &dim, "expected number of joints (0 = any)", "N"},
      {"robot-config", 0, 0, G_OPTION_ARG_FILENAME, &robot,
       "refuse values outside these joint limits; clamp steps over max_step", "FILE"},
      {"state-to", 0, 0, G_OPTION_ARG_STRING, &state_to,
       "publish the joint state (dim float32 LE per datagram) to this IPv4:PORT", "IP:PORT"},
      {"state-rate", 0, 0, G_OPTION_ARG_DOUBLE, &state_rate,
       "state datagrams per second (default 100)", "HZ"},
      {"hold-timeout", 0, 0, G_OPTION_ARG_DOUBLE, &hold_timeout,
       "the robot's own watchdog: hold after this many seconds without a command (0 = off)", "S"},
      {"stop-timeout", 0, 0, G_OPTION_ARG_DOUBLE, &stop_timeout,
       "the robot's own watchdog: stop after this many seconds without a command (0 = off)", "S"},
      {"no-feedback", 0, 0, G_OPTION_ARG_NONE, &no_feedback,
       "never report the rows it executes (FEEDBACK), as a robot of before it", nullptr},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr}};
  GOptionContext *ctx = g_option_context_new ("- robot simulator for pi0actionsink");
  g_option_context_add_main_entries (ctx, entries, nullptr);
  GError *err = nullptr;
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    fprintf (stderr, "pi0-robotsim: %s\n", err->message);
    return 2;
  }
  g_option_context_free (ctx);
  int rc = 0;
  if (proto)
    o.proto = proto;
  if (bind_addr)
    o.bind = bind_addr;
  /* An empty key would turn authentication off without a word: refuse it. */
  if (key && !*key) {
    fprintf (stderr, "pi0-robotsim: --key is empty: an empty key would turn authentication off "
                     "(omit --key to run without authentication)\n");
    rc = 2;
  } else if (key) {
    o.key = key;
  }
  if (key_file) {
    const std::string why = pi0::tools::read_hmac_key_file (key_file, &o.key);
    if (!why.empty ()) {
      fprintf (stderr, "pi0-robotsim: %s\n", why.c_str ());
      rc = 2;
    }
  }
  if (log)
    o.log_path = log;
  if (robot)
    o.robot_config = robot;
  if (state_to)
    o.state_to = state_to;
  o.state_rate = state_rate;
  o.port = port;
  o.duration = duration;
  o.dim = dim > 0 ? (unsigned)dim : 0;
  o.max_frame = max_frame > (gint)(pi0::proto::kHeaderSize + 4) ? (size_t)max_frame : o.max_frame;
  const std::string m = mode ? mode : "normal";
  if (m == "normal")
    o.mode = Mode::kNormal;
  else if (m == "slow")
    o.mode = Mode::kSlow;
  else if (m == "dead")
    o.mode = Mode::kDead;
  else if (m == "hostile")
    o.mode = Mode::kHostile;
  else {
    fprintf (stderr, "pi0-robotsim: unknown --mode %s\n", m.c_str ());
    rc = 2;
  }
  if (o.proto != "udp" && o.proto != "tcp") {
    fprintf (stderr, "pi0-robotsim: --proto must be udp or tcp\n");
    rc = 2;
  }
  if (!(hold_timeout >= 0 && hold_timeout <= 3600) ||
      !(stop_timeout >= 0 && stop_timeout <= 3600)) {
    fprintf (stderr,
             "pi0-robotsim: --hold-timeout and --stop-timeout must be between 0 and 3600 s\n");
    rc = 2;
  }
  o.hold_timeout = hold_timeout;
  o.feedback = !no_feedback;
  o.stop_timeout = stop_timeout;
  if (!(state_rate >= 1.0 && state_rate <= 10000.0)) {
    fprintf (stderr, "pi0-robotsim: --state-rate must be between 1 and 10000\n");
    rc = 2;
  }
  if (port < 0 || port > 65535) {
    fprintf (stderr, "pi0-robotsim: bad --port\n");
    rc = 2;
  }
  g_free (proto);
  g_free (bind_addr);
  g_free (key);
  g_free (key_file);
  g_free (log);
  g_free (mode);
  g_free (robot);
  g_free (state_to);
  if (rc)
    return rc;

  struct sigaction sa;
  memset (&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction (SIGINT, &sa, nullptr);
  sigaction (SIGTERM, &sa, nullptr);
  signal (SIGPIPE, SIG_IGN);

  Sim sim (o);
  std::string e;
  if (!sim.init (&e)) {
    fprintf (stderr, "pi0-robotsim: %s\n", e.c_str ());
    return 1;
  }
  return sim.run ();
}
