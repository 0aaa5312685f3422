/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0actionsink
 * @title: pi0actionsink
 *
 * Sends the action chunks of #GstPi0ActionMeta to a robot, safely: a chunk holding any NaN or
 * infinite value is rejected whole; every action is clamped into the robot configuration's
 * joint limits and within its maximum change per tick of the previous command; actions from
 * observations older than #GstPi0ActionSink:max-action-age are dropped; a watchdog on the
 * pipeline clock sends HOLD after #GstPi0ActionSink:hold-timeout without a fresh action and
 * STOP after #GstPi0ActionSink:stop-timeout. HOLD is also sent on pause, flush and EOS.
 *
 * Targets: `udp://IP:PORT`, `tcp://IP:PORT` (non-blocking, reconnects with bounded backoff,
 * bounded send buffer), `file:///path` and `stdout`. Frames are described in docs/protocol.md.
 *
 * `mode=log` is for recordings and replays, not robots: every chunk is written whole, as the
 * policy produced it (no clamping, no age check, no HOLD/STOP, no robot-config needed), and
 * only to `file://` or `stdout`. Replaying a recording with the same seed gives the same log.
 *
 * The #GstPi0ActionSink:stats include the latency of each stage of the chain, from the
 * capture of the observation's base frame to the send, computed from the running-time stamps
 * that `pi0viewmux`, `cudaprep` and `pi0infer` leave in their metas.
 *
 * ## Example
 * |[
 * gst-launch-1.0 ... ! pi0infer ! pi0actionsink target=udp://127.0.0.1:9870 \
 *     robot-config=robot.json mode=stream control-rate=50
 * ]|
 *
 * Threads: the streaming thread (render, events), the control thread (ticks, watchdog; runs
 * only in PLAYING, waits on single-shot pipeline clock ids) and the application thread (state
 * changes). Locks: settings_lock (properties) and lock (everything else: State, transport,
 * stats). They are never held together. No lock is held while posting messages or emitting
 * the `action` signal; sockets are non-blocking, so sending under `lock` never waits on a peer.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "pi0actionsink must be built without -ffast-math/-ffinite-math-only"
#endif

#include "gstpi0actionsink.h"
#include "gstpi0enum.h"

#include "pi0frame.h"
#include "pi0percentile.h"
#include "pi0safety.h"

#include <gio/gio.h>
#include <glib/gstdio.h>
#include <gst/pi0/pi0.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_action_sink_debug);
#define GST_CAT_DEFAULT gst_pi0_action_sink_debug

namespace
{

constexpr GstClockTime kDefaultMaxActionAge = GST_SECOND;
constexpr GstClockTime kDefaultHoldTimeout = 100 * GST_MSECOND;
constexpr GstClockTime kDefaultStopTimeout = GST_SECOND;
constexpr GstClockTime kDefaultReconnectMin = 100 * GST_MSECOND;
constexpr GstClockTime kDefaultReconnectMax = 2 * GST_SECOND;
constexpr double kDefaultControlRate = 50.0;
constexpr guint kDefaultSendBuffer = 64 * 1024;
constexpr guint kDefaultDatagramSize = (guint)pi0::proto::kDefaultDatagramSize;
constexpr const char *kDefaultTarget = "stdout";

enum {
  PROP_0,
  PROP_TARGET,
  PROP_FORMAT,
  PROP_MODE,
  PROP_CONTROL_RATE,
  PROP_EXECUTE_STEPS,
  PROP_ROBOT_CONFIG,
  PROP_ALLOW_UNLIMITED,
  PROP_MAX_ACTION_AGE,
  PROP_HOLD_TIMEOUT,
  PROP_STOP_TIMEOUT,
  PROP_HMAC_KEY,
  PROP_MAX_SEND_BUFFER,
  PROP_DATAGRAM_SIZE,
  PROP_RECONNECT_MIN,
  PROP_RECONNECT_MAX,
  PROP_STATS,
};

enum { SIGNAL_ACTION, N_SIGNALS };
guint signals[N_SIGNALS];

struct Settings {
  std::string target = kDefaultTarget;
  GstPi0ActionSinkFormat format = GST_PI0_ACTION_SINK_FORMAT_AUTO;
  GstPi0ActionSinkMode mode = GST_PI0_ACTION_SINK_MODE_STREAM;
  double control_rate = kDefaultControlRate;
  guint execute_steps = 0;
  std::string robot_config;
  bool allow_unlimited = false;
  GstClockTime max_action_age = kDefaultMaxActionAge;
  GstClockTime hold_timeout = kDefaultHoldTimeout;
  GstClockTime stop_timeout = kDefaultStopTimeout;
  std::string hmac_key;
  guint max_send_buffer = kDefaultSendBuffer;
  guint datagram_size = kDefaultDatagramSize;
  GstClockTime reconnect_min = kDefaultReconnectMin;
  GstClockTime reconnect_max = kDefaultReconnectMax;
};

struct Stats {
  guint64 sent = 0;     /* action rows handed to the transport */
  guint64 frames = 0;   /* messages of any kind handed to the transport */
  guint64 rejected = 0; /* chunks refused whole (non-finite, no meta, no time) */
  guint64 clamped = 0;  /* action rows with at least one value clamped */
  guint64 stale = 0;    /* chunks dropped for age, or wholly in the past */
  guint64 holds = 0;
  guint64 stops = 0;
  guint64 reconnects = 0; /* TCP connections established after the first */
  guint64 dropped = 0;    /* frames the transport could not take (full buffer, no peer) */
  guint64 sessions = 0;
};

/* Running times at which one chunk's observation passed each stage, from the metas. */
struct Stamps {
  GstClockTime capture = GST_CLOCK_TIME_NONE;  /* observation_time: the base frame */
  GstClockTime muxed = GST_CLOCK_TIME_NONE;    /* GstPi0ObservationMeta.muxed_time */
  GstClockTime prepared = GST_CLOCK_TIME_NONE; /* GstPi0TensorMeta.prepared_time */
  GstClockTime done = GST_CLOCK_TIME_NONE;     /* GstPi0ActionMeta.done_time */
};

/* Per-stage latencies of the last kLatencyWindow chunks sent, for the stats. */
constexpr size_t kLatencyWindow = 1024;
enum Stage { kStageMux, kStagePrep, kStageInfer, kStageSink, kStageEndToEnd, kNumStages };
const char *const kStageNames[kNumStages] = {"mux", "prep", "infer", "sink", "end-to-end"};

struct LatencyWindow {
  std::deque<GstClockTime> samples[kNumStages];
  guint64 chunks = 0; /* chunks measured since start */

  void add (const Stamps &t, GstClockTime sent)
  {
    const GstClockTime points[kNumStages + 1] = {t.capture, t.muxed, t.prepared, t.done, sent};
    auto push = [this] (Stage s, GstClockTime a, GstClockTime b) {
      if (!GST_CLOCK_TIME_IS_VALID (a) || !GST_CLOCK_TIME_IS_VALID (b) || b < a)
        return;
      samples[s].push_back (b - a);
      if (samples[s].size () > kLatencyWindow)
        samples[s].pop_front ();
    };
    for (int s = kStageMux; s <= kStageSink; s++)
      push ((Stage)s, points[s], points[s + 1]);
    push (kStageEndToEnd, t.capture, sent);
    chunks++;
  }
};

/* ---- Transport: where frames go. Never blocks: every socket is non-blocking. ---- */

enum class TargetType { kUdp, kTcp, kFile, kStdout };

bool
parse_target (const std::string &t, TargetType *type, GInetSocketAddress **addr, std::string *path,
              std::string *err)
{
  if (t == "stdout") {
    *type = TargetType::kStdout;
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
    *type = TargetType::kFile;
    *path = p;
    g_free (p);
    return true;
  }
  const bool udp = g_str_has_prefix (t.c_str (), "udp://");
  const bool tcp = g_str_has_prefix (t.c_str (), "tcp://");
  if (!udp && !tcp) {
    *err = "target \"" + t + "\" is not udp://IP:PORT, tcp://IP:PORT, file:///path or stdout";
    return false;
  }
  GUri *uri = g_uri_parse (t.c_str (), G_URI_FLAGS_NONE, nullptr);
  const char *host = uri ? g_uri_get_host (uri) : nullptr;
  const int port = uri ? g_uri_get_port (uri) : -1;
  bool ok = false;
  if (!host || port <= 0 || port > 65535) {
    *err = "target \"" + t + "\" needs an IP address and a port, e.g. udp://127.0.0.1:9870";
  } else {
    /* Numeric addresses only: resolving a name would block, and an action target should be
     * an explicit, reviewable address. */
    GInetAddress *ia = g_inet_address_new_from_string (host);
    if (!ia) {
      *err = std::string ("target host \"") + host +
             "\" is not a numeric IP address (names are not resolved)";
    } else {
      *addr = G_INET_SOCKET_ADDRESS (g_inet_socket_address_new (ia, (guint16)port));
      g_object_unref (ia);
      *type = udp ? TargetType::kUdp : TargetType::kTcp;
      ok = true;
    }
  }
  if (uri)
    g_uri_unref (uri);
  return ok;
}

enum class SendResult { kSent, kDropped };

class Transport
{
public:
  ~Transport () { close (); }

  bool open (TargetType type, GInetSocketAddress *addr, const std::string &path, const Settings &s,
             std::string *err)
  {
    close ();
    /* Everything per connection and per start begins afresh (counters are per start). */
    connected_ = ever_connected_ = new_connection_ = false;
    reconnects_ = dropped_in_queue_ = 0;
    next_attempt_ = connect_started_ = 0;
    type_ = type;
    max_buffer_ = s.max_send_buffer;
    backoff_min_ = s.reconnect_min;
    backoff_max_ = s.reconnect_max;
    backoff_ = backoff_min_;
    if (addr)
      addr_ = G_INET_SOCKET_ADDRESS (g_object_ref (addr));
    GError *e = nullptr;
    switch (type) {
      case TargetType::kStdout:
        file_ = stdout;
        return true;
      case TargetType::kFile:
        file_ = g_fopen (path.c_str (), "wb");
        if (!file_) {
          *err = "cannot open " + path + " for writing: " + g_strerror (errno);
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
        /* The first connection attempt happens in pump(): start() must not wait on a peer. */
        next_attempt_ = 0;
        return true;
    }
    return false;
  }

  void close ()
  {
    drop_connection ();
    if (sock_)
      g_object_unref (sock_);
    sock_ = nullptr;
    if (own_file_ && file_)
      fclose (file_);
    else if (file_)
      fflush (file_);
    file_ = nullptr;
    own_file_ = false;
    g_clear_object (&addr_);
  }

  /* Drives TCP: completes a pending connect, retries with backoff, flushes the queue, notices
   * a closed peer. Cheap when nothing is to be done. */
  void pump ()
  {
    if (type_ != TargetType::kTcp)
      return;
    const gint64 now = g_get_monotonic_time () * 1000;
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
        if (now - connect_started_ > (gint64)std::max<GstClockTime> (backoff_max_, GST_SECOND))
          fail (now);
        return;
      }
      GError *e = nullptr;
      if (!g_socket_check_connect_result (sock_, &e)) {
        GST_DEBUG ("connect failed: %s", e ? e->message : "?");
        g_clear_error (&e);
        fail (now);
        return;
      }
      connected_ = true;
      new_connection_ = true;
      backoff_ = backoff_min_;
      if (ever_connected_)
        reconnects_++;
      ever_connected_ = true;
    }
    /* Read and discard whatever the peer sends (we expect nothing), to see it close. */
    GIOCondition c =
        g_socket_condition_check (sock_, (GIOCondition)(G_IO_IN | G_IO_ERR | G_IO_HUP));
    if (c & (G_IO_ERR | G_IO_HUP)) {
      fail (now);
      return;
    }
    if (c & G_IO_IN) {
      char junk[4096];
      GError *e = nullptr;
      gssize n = g_socket_receive (sock_, junk, sizeof junk, nullptr, &e);
      if (n == 0 || (n < 0 && !g_error_matches (e, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))) {
        g_clear_error (&e);
        fail (now);
        return;
      }
      g_clear_error (&e);
    }
    flush (now);
  }

  /* Queues or sends one frame. Frames never wait for a peer: with no connection they are
   * dropped (a reconnect starts a new session and must not replay old actions). */
  SendResult write (const uint8_t *data, size_t len)
  {
    switch (type_) {
      case TargetType::kStdout:
      case TargetType::kFile:
        if (fwrite (data, 1, len, file_) != len || fflush (file_) != 0)
          return SendResult::kDropped;
        return SendResult::kSent;
      case TargetType::kUdp: {
        GError *e = nullptr;
        gssize n = g_socket_send_to (sock_, G_SOCKET_ADDRESS (addr_), (const gchar *)data, len,
                                     nullptr, &e);
        g_clear_error (&e);
        return n == (gssize)len ? SendResult::kSent : SendResult::kDropped;
      }
      case TargetType::kTcp: {
        if (!connected_)
          return SendResult::kDropped;
        if (len > max_buffer_)
          return SendResult::kDropped;
        /* Make room by dropping the oldest frames not yet begun: the newest command matters,
         * and a frame already partly on the wire must be finished or the stream breaks. */
        while (queued_ + len > max_buffer_ && queue_.size () > (head_off_ ? 1u : 0u)) {
          auto victim = queue_.begin () + (head_off_ ? 1 : 0);
          queued_ -= victim->size ();
          queue_.erase (victim);
          dropped_in_queue_++;
        }
        if (queued_ + len > max_buffer_)
          return SendResult::kDropped;
        queue_.emplace_back (data, data + len);
        queued_ += len;
        flush (g_get_monotonic_time () * 1000);
        return SendResult::kSent;
      }
    }
    return SendResult::kDropped;
  }

  /* True once after each new TCP connection (the caller starts a new session on it). */
  bool take_new_connection ()
  {
    bool r = new_connection_;
    new_connection_ = false;
    return r;
  }
  bool connected () const { return connected_; }
  guint64 reconnects () const { return reconnects_; }
  guint64 take_queue_drops ()
  {
    guint64 d = dropped_in_queue_;
    dropped_in_queue_ = 0;
    return d;
  }
  size_t queued_bytes () const { return queued_; }
  bool is_datagram () const { return type_ == TargetType::kUdp; }
  bool is_network () const { return type_ == TargetType::kUdp || type_ == TargetType::kTcp; }

private:
  void start_connect (gint64 now)
  {
    GError *e = nullptr;
    sock_ = g_socket_new (g_socket_address_get_family (G_SOCKET_ADDRESS (addr_)),
                          G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, &e);
    if (!sock_) {
      GST_WARNING ("cannot create TCP socket: %s", e->message);
      g_clear_error (&e);
      next_attempt_ = now + (gint64)backoff_;
      return;
    }
    g_socket_set_blocking (sock_, FALSE);
    g_socket_set_option (sock_, IPPROTO_TCP, TCP_NODELAY, 1, nullptr);
    /* Keep the kernel's share of the backlog small too: the bound we promise is ours plus this. */
    g_socket_set_option (sock_, SOL_SOCKET, SO_SNDBUF, (gint)max_buffer_, nullptr);
    connected_ = false;
    connect_started_ = now;
    if (g_socket_connect (sock_, G_SOCKET_ADDRESS (addr_), nullptr, &e)) {
      connected_ = true;
      new_connection_ = true;
      backoff_ = backoff_min_;
      if (ever_connected_)
        reconnects_++;
      ever_connected_ = true;
      return;
    }
    if (g_error_matches (e, G_IO_ERROR, G_IO_ERROR_PENDING)) {
      g_clear_error (&e);
      return;
    }
    GST_DEBUG ("connect: %s", e->message);
    g_clear_error (&e);
    fail (now);
  }

  void flush (gint64 now)
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

  void drop_connection ()
  {
    if (type_ == TargetType::kTcp && sock_) {
      g_socket_close (sock_, nullptr);
      g_object_unref (sock_);
      sock_ = nullptr;
    }
    if (type_ == TargetType::kTcp)
      connected_ = false;
    dropped_in_queue_ += queue_.size ();
    queue_.clear ();
    queued_ = 0;
    head_off_ = 0;
  }

  void fail (gint64 now)
  {
    drop_connection ();
    next_attempt_ = now + (gint64)backoff_;
    backoff_ = std::min (backoff_ * 2, backoff_max_);
  }

  TargetType type_ = TargetType::kStdout;
  GInetSocketAddress *addr_ = nullptr;
  GSocket *sock_ = nullptr;
  FILE *file_ = nullptr;
  bool own_file_ = false;
  bool connected_ = false;
  bool ever_connected_ = false;
  bool new_connection_ = false;
  gint64 next_attempt_ = 0;
  gint64 connect_started_ = 0;
  GstClockTime backoff_ = 0, backoff_min_ = 0, backoff_max_ = 0;
  std::deque<std::vector<uint8_t>> queue_;
  size_t head_off_ = 0;
  size_t queued_ = 0;
  size_t max_buffer_ = 0;
  guint64 reconnects_ = 0;
  guint64 dropped_in_queue_ = 0;
};

/* What was sent, for the `action` signal, collected under the lock and emitted after it. */
struct Emitted {
  const char *kind;
  guint64 chunk_id;
  guint step_index;
  guint steps;
  guint dim;
  std::vector<float> values;
};

/* Warnings to post after the lock is released. */
struct Pending {
  std::vector<Emitted> emitted;
  std::vector<std::string> warnings;
};

struct Chunk {
  std::vector<float> values; /* finite, raw (clamping happens when a row is sent) */
  guint horizon = 0;
  guint limit = 0; /* rows usable: min (horizon, execute-steps) */
  guint next = 0;  /* first row not yet sent */
  guint64 chunk_id = 0;
  GstClockTime obs = GST_CLOCK_TIME_NONE;
  std::string model_id;
  Stamps stamps;
};

struct State {
  Settings s; /* snapshot taken in start() */
  bool started = false;
  bool binary = true;
  bool have_cfg = false;
  pi0::proto::RobotConfig cfg;
  guint dim = 0; /* from the config, or fixed by the first chunk */
  GstClockTime period = 0;
  Transport transport;
  guint64 session_id = 0;
  guint64 seq = 0;
  bool announced = false;
  bool flushing = false;
  bool unlocked = false;

  /* Stream mode: the chunk being executed. */
  bool have_chunk = false;
  Chunk chunk;
  /* Chunk mode: rows of the last chunk sent, after clamping, to know what is being executed. */
  std::vector<float> sent_rows;
  guint sent_first = 0;
  GstClockTime sent_obs = GST_CLOCK_TIME_NONE;

  std::vector<float> last_cmd; /* position last commanded (stream rows, HOLD position) */
  bool have_last = false;

  /* Watchdog: due time of the last action row sent. */
  GstClockTime last_fresh = 0;
  bool hold_sent = false;
  bool stop_sent = false;

  /* Control thread. */
  GThread *thread = nullptr;
  bool thread_running = false;
  GstClock *clock = nullptr;
  GstClockTime base_time = 0;
  GstClockID wait_id = nullptr;
  GstClockTime next_tick = 0;

  Stats stats;
  LatencyWindow latency;
  guint64 warn_count = 0;
  std::vector<uint8_t> buf;
};

struct Private {
  std::mutex settings_lock;
  Settings settings;
  std::mutex lock;
  State st;
};

} // namespace

struct _GstPi0ActionSink {
  GstBaseSink parent;
  Private *priv;
};

#define gst_pi0_action_sink_parent_class parent_class
G_DEFINE_TYPE (GstPi0ActionSink, gst_pi0_action_sink, GST_TYPE_BASE_SINK);
GST_ELEMENT_REGISTER_DEFINE (pi0actionsink, "pi0actionsink", GST_RANK_NONE,
                             GST_TYPE_PI0_ACTION_SINK);

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE (
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_MEDIA_TYPE));

GST_PI0_DEFINE_ENUM_TYPE (
    gst_pi0_action_sink_mode_get_type, "GstPi0ActionSinkMode",
    {GST_PI0_ACTION_SINK_MODE_CHUNK, "Send each chunk whole when it arrives", "chunk"},
    {GST_PI0_ACTION_SINK_MODE_STREAM, "Send one action per control tick from the newest chunk",
     "stream"},
    {GST_PI0_ACTION_SINK_MODE_LOG,
     "Record every chunk whole, as the policy made it (file:// or stdout only; no limits, no "
     "age check, no HOLD)",
     "log"})

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_action_sink_format_get_type, "GstPi0ActionSinkFormat",
                          {GST_PI0_ACTION_SINK_FORMAT_AUTO,
                           "Binary for udp/tcp, JSON lines for file/stdout", "auto"},
                          {GST_PI0_ACTION_SINK_FORMAT_JSON, "One JSON object per line", "json"},
                          {GST_PI0_ACTION_SINK_FORMAT_BINARY, "Binary frames (docs/protocol.md)",
                           "binary"})

/* ---------------------------------------------------------------------------------------- */
/* Everything below that takes State & is called with priv->lock held.                       */

namespace
{

void
warn (State &st, Pending &p, const std::string &msg)
{
  GST_WARNING ("%s", msg.c_str ());
  /* Rate limit: post the 1st, 2nd, 4th, 8th... so a stream of bad chunks cannot flood the bus. */
  st.warn_count++;
  if ((st.warn_count & (st.warn_count - 1)) == 0)
    p.warnings.push_back (msg + " (" + std::to_string (st.warn_count) + " warnings so far)");
}

GstClockTime
running_now (State &st)
{
  if (!st.clock)
    return GST_CLOCK_TIME_NONE;
  GstClockTime t = gst_clock_get_time (st.clock);
  return t >= st.base_time ? t - st.base_time : 0;
}

/* Encodes and writes one message; splits ACTION rows into datagram-sized frames. */
void
send_message (State &st, Pending &p, pi0::proto::Kind kind, const float *values, guint steps,
              guint step_index, guint chunk_steps, guint64 chunk_id, GstClockTime obs,
              GstClockTime now, uint8_t flags, const std::string &model_id)
{
  const guint dim = st.dim;
  guint rows_per = steps ? steps : 1;
  if (st.binary && st.transport.is_datagram () && steps > 0)
    rows_per = pi0::proto::rows_per_frame (dim, !st.s.hmac_key.empty (), st.s.datagram_size);
  /* start() and render refuse a dim for which this is 0, so rows_per >= 1 here. */
  if (rows_per == 0)
    rows_per = 1;
  guint done = 0;
  do {
    const guint n = steps ? std::min (rows_per, steps - done) : 0;
    pi0::proto::Header h;
    h.kind = kind;
    h.flags = flags;
    if (kind == pi0::proto::Kind::kAction) {
      h.flags &= (uint8_t)~pi0::proto::kFlagLast;
      if (done + n == steps && (flags & pi0::proto::kFlagLast))
        h.flags |= pi0::proto::kFlagLast;
    }
    h.session_id = st.session_id;
    h.seq = ++st.seq;
    h.chunk_id = chunk_id;
    h.observation_time_ns = GST_CLOCK_TIME_IS_VALID (obs) ? obs : pi0::proto::kTimeNone;
    h.send_time_ns = GST_CLOCK_TIME_IS_VALID (now) ? now : pi0::proto::kTimeNone;
    h.step_period_ns = st.period;
    h.step_index = step_index + done;
    h.chunk_steps = kind == pi0::proto::Kind::kAction ? chunk_steps : n;
    h.steps = (uint16_t)n;
    h.dim = (uint16_t)((n || kind == pi0::proto::Kind::kHello) ? dim : 0);
    const float *rows = values ? values + (size_t)done * dim : nullptr;
    st.buf.clear ();
    if (st.binary) {
      pi0::proto::encode (h, rows, st.s.hmac_key, st.buf);
    } else {
      std::string line = pi0::proto::to_json (h, rows, model_id);
      line += '\n';
      st.buf.assign (line.begin (), line.end ());
    }
    if (st.transport.write (st.buf.data (), st.buf.size ()) == SendResult::kSent) {
      st.stats.frames++;
      if (kind == pi0::proto::Kind::kAction)
        st.stats.sent += n;
    } else {
      st.stats.dropped++;
    }
    done += n;
  } while (done < steps);
  st.stats.dropped += st.transport.take_queue_drops ();
  if (kind != pi0::proto::Kind::kHello) {
    Emitted e{pi0::proto::kind_name (kind), chunk_id, step_index, steps,
              (guint)(steps ? dim : 0),     {}};
    if (steps)
      e.values.assign (values, values + (size_t)steps * dim);
    p.emitted.push_back (std::move (e));
  }
}

/* Position the robot is presumed to be commanded to at @now, or nullptr if unknown. */
const float *
commanded_now (State &st, GstClockTime now)
{
  if (!st.sent_rows.empty () && st.dim) {
    const guint nrows = (guint)(st.sent_rows.size () / st.dim);
    guint j = st.sent_first;
    if (GST_CLOCK_TIME_IS_VALID (now) && GST_CLOCK_TIME_IS_VALID (st.sent_obs) &&
        now > st.sent_obs && st.period)
      j = (guint)std::min<guint64> ((now - st.sent_obs) / st.period, G_MAXUINT);
    if (j < st.sent_first)
      j = st.sent_first;
    if (j > st.sent_first + nrows - 1)
      j = st.sent_first + nrows - 1;
    return st.sent_rows.data () + (size_t)(j - st.sent_first) * st.dim;
  }
  if (st.have_last)
    return st.last_cmd.data ();
  if (st.have_cfg && !st.cfg.initial.empty ())
    return st.cfg.initial.data ();
  return nullptr;
}

Stamps
stamps_of (GstBuffer *buf, const GstPi0ActionMeta *meta)
{
  Stamps t;
  t.capture = meta->observation_time;
  t.done = meta->done_time;
  if (GstPi0ObservationMeta *om = gst_buffer_get_pi0_observation_meta (buf))
    t.muxed = om->muxed_time;
  if (GstPi0TensorMeta *tm = gst_buffer_get_pi0_tensor_meta (buf))
    t.prepared = tm->prepared_time;
  return t;
}

void
send_hold (State &st, Pending &p, GstClockTime now)
{
  if (st.s.mode == GST_PI0_ACTION_SINK_MODE_LOG)
    return; /* a log is not a robot: nothing to hold */
  const float *pos = commanded_now (st, now);
  std::vector<float> hold;
  if (pos)
    hold.assign (pos, pos + st.dim);
  send_message (st, p, pi0::proto::Kind::kHold, pos ? hold.data () : nullptr, pos ? 1 : 0, 0, 0, 0,
                GST_CLOCK_TIME_NONE, now, 0, "");
  /* From now on the robot holds this position: it is the reference for the next step bound. */
  if (pos) {
    st.last_cmd = hold;
    st.have_last = true;
  }
  st.sent_rows.clear ();
  st.hold_sent = true;
  st.stats.holds++;
}

/* A new session: on start and on every TCP (re)connection. */
void
new_session (State &st)
{
  do {
    st.session_id = ((guint64)g_random_int () << 32) | g_random_int ();
  } while (st.session_id == 0);
  st.seq = 0;
  st.announced = false;
  st.stats.sessions++;
}

/* HELLO then HOLD, once per session, as soon as the dimension is known. */
void
announce (State &st, Pending &p, GstClockTime now)
{
  if (st.announced || st.dim == 0 || st.s.mode == GST_PI0_ACTION_SINK_MODE_LOG)
    return;
  if (st.transport.is_network () && !st.transport.connected ())
    return;
  st.announced = true;
  send_message (st, p, pi0::proto::Kind::kHello, nullptr, 0, 0, 0, 0, GST_CLOCK_TIME_NONE, now, 0,
                "");
  const guint64 holds = st.stats.holds;
  const bool hold_sent = st.hold_sent;
  send_hold (st, p, now);
  /* The greeting HOLD is part of the handshake, not a watchdog event. */
  st.stats.holds = holds;
  st.hold_sent = hold_sent;
}

void
pump (State &st, Pending &p, GstClockTime now)
{
  st.transport.pump ();
  if (st.transport.take_new_connection ()) {
    /* Nothing queued for the old connection is replayed (the transport dropped it); the
     * new session starts with HELLO and HOLD (announce), then stream mode resumes from the
     * newest chunk at the next tick and chunk mode with the next chunk. */
    if (st.seq > 0)
      new_session (st);
  }
  st.stats.reconnects = st.transport.reconnects ();
  st.stats.dropped += st.transport.take_queue_drops ();
  announce (st, p, now);
}

/* One row of the stream, from the current chunk, if one is due at @now. */
void
stream_step (State &st, Pending &p, GstClockTime now)
{
  if (!st.have_chunk || !GST_CLOCK_TIME_IS_VALID (now))
    return;
  Chunk &c = st.chunk;
  const GstClockTime age = now > c.obs ? now - c.obs : 0;
  if (age > st.s.max_action_age) {
    st.have_chunk = false;
    st.stats.stale++;
    warn (st, p,
          "chunk " + std::to_string (c.chunk_id) + " became older than max-action-age; dropped");
    return;
  }
  const guint64 k = age / st.period;
  if (k >= c.limit) {
    st.have_chunk = false; /* ran out: the watchdog takes over */
    return;
  }
  if (k < c.next)
    return; /* already sent (tick faster than the chunk's rows) */
  std::vector<float> row (st.dim);
  const float *prev =
      st.have_last ? st.last_cmd.data ()
                   : (st.have_cfg && !st.cfg.initial.empty () ? st.cfg.initial.data () : nullptr);
  const float *in = c.values.data () + (size_t)k * st.dim;
  unsigned changed = 0;
  if (st.have_cfg)
    changed = pi0::proto::limit_action (st.cfg, prev, in, row.data ());
  else
    row.assign (in, in + st.dim);
  if (changed)
    st.stats.clamped++;
  uint8_t flags = pi0::proto::kFlagStream | (changed ? pi0::proto::kFlagClamped : 0);
  if (k + 1 == c.limit)
    flags |= pi0::proto::kFlagLast;
  send_message (st, p, pi0::proto::Kind::kAction, row.data (), 1, (guint)k, c.limit, c.chunk_id,
                c.obs, now, flags, c.model_id);
  if (c.next == 0)
    st.latency.add (c.stamps, now); /* the chunk's first row leaves: its latency */
  st.last_cmd = row;
  st.have_last = true;
  c.next = (guint)k + 1;
  st.last_fresh = c.obs + k * st.period;
  st.hold_sent = st.stop_sent = false;
}

void
watchdog (State &st, Pending &p, GstClockTime now)
{
  if (!GST_CLOCK_TIME_IS_VALID (now) || now < st.last_fresh)
    return;
  const GstClockTime idle = now - st.last_fresh;
  if (!st.hold_sent && idle >= st.s.hold_timeout) {
    send_hold (st, p, now);
    GST_INFO ("no fresh action for %" GST_TIME_FORMAT ": HOLD", GST_TIME_ARGS (idle));
  }
  if (!st.stop_sent && idle >= st.s.stop_timeout) {
    send_message (st, p, pi0::proto::Kind::kStop, nullptr, 0, 0, 0, 0, GST_CLOCK_TIME_NONE, now, 0,
                  "");
    st.stop_sent = true;
    st.hold_sent = true;
    st.stats.stops++;
    st.have_chunk = false;
    warn (st, p, "no fresh action for stop-timeout: STOP sent");
  }
}

/* a + b, saturating: timeouts may be set to G_MAXUINT64 ("never"). */
GstClockTime
sat_add (GstClockTime a, GstClockTime b)
{
  return a > G_MAXUINT64 - b ? G_MAXUINT64 : a + b;
}

GstClockTime
next_wake (State &st)
{
  GstClockTime wake = st.next_tick;
  if (!st.hold_sent)
    wake = std::min (wake, sat_add (st.last_fresh, st.s.hold_timeout));
  if (!st.stop_sent)
    wake = std::min (wake, sat_add (st.last_fresh, st.s.stop_timeout));
  return wake;
}

void
flush_pending (GstPi0ActionSink *self, Pending &p)
{
  for (auto &e : p.emitted) {
    GBytes *b = g_bytes_new (e.values.data (), e.values.size () * sizeof (float));
    g_signal_emit (self, signals[SIGNAL_ACTION], 0, e.kind, e.chunk_id, e.step_index, e.steps,
                   e.dim, b);
    g_bytes_unref (b);
  }
  for (auto &w : p.warnings)
    GST_ELEMENT_WARNING (self, STREAM, FAILED, ("%s", w.c_str ()), (nullptr));
  p.emitted.clear ();
  p.warnings.clear ();
}

gpointer
control_thread (gpointer data)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (data);
  Private *priv = self->priv;
  State &st = priv->st;
  Pending p;
  std::unique_lock<std::mutex> lk (priv->lock);
  while (st.thread_running) {
    const GstClockTime wake = next_wake (st);
    GstClockID id = gst_clock_new_single_shot_id (st.clock, st.base_time + wake);
    st.wait_id = id;
    lk.unlock ();
    GstClockReturn r = gst_clock_id_wait (id, nullptr);
    lk.lock ();
    st.wait_id = nullptr;
    gst_clock_id_unref (id);
    if (!st.thread_running || r == GST_CLOCK_UNSCHEDULED)
      continue;
    const GstClockTime now = running_now (st);
    pump (st, p, now);
    if (now >= st.next_tick) {
      if (st.s.mode == GST_PI0_ACTION_SINK_MODE_STREAM && !st.flushing)
        stream_step (st, p, now);
      /* Skip ticks we were too late for rather than bursting to catch up. */
      st.next_tick += st.period;
      if (st.next_tick <= now)
        st.next_tick += ((now - st.next_tick) / st.period + 1) * st.period;
    }
    watchdog (st, p, now);
    if (!p.emitted.empty () || !p.warnings.empty ()) {
      lk.unlock ();
      flush_pending (self, p);
      lk.lock ();
    }
  }
  return nullptr;
}

/* Called with the lock held; returns with it held, thread joined. */
void
stop_control_thread (Private *priv, std::unique_lock<std::mutex> &lk)
{
  State &st = priv->st;
  if (!st.thread)
    return;
  st.thread_running = false;
  if (st.wait_id)
    gst_clock_id_unschedule (st.wait_id);
  GThread *t = st.thread;
  st.thread = nullptr;
  if (t == g_thread_self ()) {
    /* A state change from an `action` handler runs on the control thread itself: it cannot
     * join itself; it sees thread_running == false and ends when the handler returns. */
    g_thread_unref (t);
    return;
  }
  lk.unlock ();
  g_thread_join (t);
  lk.lock ();
}

} // namespace

/* ---------------------------------------------------------------------------------------- */

static gboolean
gst_pi0_action_sink_start (GstBaseSink *bsink)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  Private *priv = self->priv;
  Settings s;
  {
    std::lock_guard<std::mutex> g (priv->settings_lock);
    s = priv->settings;
  }

  TargetType type;
  GInetSocketAddress *addr = nullptr;
  std::string path, err;
  if (!parse_target (s.target, &type, &addr, &path, &err)) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("Invalid target: %s", err.c_str ()), (nullptr));
    return FALSE;
  }
  if (s.reconnect_max < s.reconnect_min) {
    g_clear_object (&addr);
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("reconnect-max must not be shorter than reconnect-min"), (nullptr));
    return FALSE;
  }
  if (s.stop_timeout < s.hold_timeout) {
    g_clear_object (&addr);
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("stop-timeout must not be shorter than hold-timeout"), (nullptr));
    return FALSE;
  }
  const bool log = s.mode == GST_PI0_ACTION_SINK_MODE_LOG;
  if (log && (type == TargetType::kUdp || type == TargetType::kTcp)) {
    g_clear_object (&addr);
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("mode=log writes the policy's raw chunks and never goes to a robot: use a "
                        "file:// or stdout target"),
                       (nullptr));
    return FALSE;
  }
  pi0::proto::RobotConfig cfg;
  bool have_cfg = false;
  if (log) {
    /* Nothing here moves a robot: no limits to apply (robot-config, if set, is not used). */
  } else if (!s.robot_config.empty ()) {
    if (!pi0::proto::load_robot_config (s.robot_config, &cfg, &err)) {
      g_clear_object (&addr);
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                         ("Invalid robot configuration: %s", err.c_str ()), (nullptr));
      return FALSE;
    }
    have_cfg = true;
  } else if (!s.allow_unlimited) {
    g_clear_object (&addr);
    GST_ELEMENT_ERROR (
        self, RESOURCE, SETTINGS,
        ("No robot-config: refusing to send actions without joint limits"),
        ("Set robot-config to a JSON file with joints, lower, upper and max_step, or set "
         "allow-unlimited=true to send unclamped (but still finite) actions, e.g. for recording."));
    return FALSE;
  }
  const bool binary = s.format == GST_PI0_ACTION_SINK_FORMAT_BINARY ||
                      (s.format == GST_PI0_ACTION_SINK_FORMAT_AUTO &&
                       (type == TargetType::kUdp || type == TargetType::kTcp));
  if (!binary && type == TargetType::kUdp) {
    g_clear_object (&addr);
    GST_ELEMENT_ERROR (
        self, RESOURCE, SETTINGS,
        ("format=json cannot be sent over UDP: a line may not fit a datagram; use binary"),
        (nullptr));
    return FALSE;
  }
  if (have_cfg && binary && type == TargetType::kUdp &&
      pi0::proto::rows_per_frame (cfg.dim (), !s.hmac_key.empty (), s.datagram_size) == 0) {
    g_clear_object (&addr);
    GST_ELEMENT_ERROR (
        self, RESOURCE, SETTINGS,
        ("datagram-size %u cannot hold one action of %u joints", s.datagram_size, cfg.dim ()),
        (nullptr));
    return FALSE;
  }

  std::unique_lock<std::mutex> lk (priv->lock);
  State &st = priv->st;
  st.transport.close ();
  if (!st.transport.open (type, addr, path, s, &err)) {
    lk.unlock ();
    g_clear_object (&addr);
    GST_ELEMENT_ERROR (self, RESOURCE, OPEN_WRITE,
                       ("Cannot open target %s: %s", s.target.c_str (), err.c_str ()), (nullptr));
    return FALSE;
  }
  g_clear_object (&addr);
  st.s = s;
  st.binary = binary;
  st.cfg = cfg;
  st.have_cfg = have_cfg;
  st.dim = have_cfg ? cfg.dim () : 0;
  st.period = (GstClockTime)(GST_SECOND / s.control_rate + 0.5);
  if (st.period == 0)
    st.period = 1;
  st.stats = Stats ();
  st.latency = LatencyWindow ();
  st.warn_count = 0;
  st.have_chunk = false;
  st.sent_rows.clear ();
  st.have_last = false;
  st.last_cmd.clear ();
  st.flushing = false;
  st.unlocked = false;
  st.hold_sent = true; /* the greeting HOLD */
  st.stop_sent = false;
  new_session (st);
  st.started = true;
  Pending p;
  pump (st, p, GST_CLOCK_TIME_NONE);
  lk.unlock ();
  flush_pending (self, p);
  GST_INFO_OBJECT (self, "sending to %s (%s, %s mode, %.1f Hz)", s.target.c_str (),
                   binary ? "binary" : "json",
                   log                                         ? "log"
                   : s.mode == GST_PI0_ACTION_SINK_MODE_STREAM ? "stream"
                                                               : "chunk",
                   s.control_rate);
  return TRUE;
}

static gboolean
gst_pi0_action_sink_stop (GstBaseSink *bsink)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  std::unique_lock<std::mutex> lk (self->priv->lock);
  State &st = self->priv->st;
  stop_control_thread (self->priv, lk);
  st.transport.close ();
  st.started = false;
  st.have_chunk = false;
  st.chunk = Chunk ();
  st.sent_rows.clear ();
  return TRUE;
}

static GstStateChangeReturn
gst_pi0_action_sink_change_state (GstElement *element, GstStateChange transition)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (element);
  Private *priv = self->priv;

  if (transition == GST_STATE_CHANGE_PLAYING_TO_PAUSED) {
    /* Stop ticking first, then tell the robot to hold: nothing is sent after the HOLD. */
    Pending p;
    {
      std::unique_lock<std::mutex> lk (priv->lock);
      State &st = priv->st;
      stop_control_thread (priv, lk);
      st.have_chunk = false;
      if (st.started) {
        st.transport.pump ();
        send_hold (st, p, running_now (st));
      }
      g_clear_object (&st.clock);
    }
    flush_pending (self, p);
  }

  if (transition == GST_STATE_CHANGE_PAUSED_TO_PLAYING) {
    /* Before chaining up: the prerolled buffer is rendered as soon as the base class lets it
     * go, and it needs the clock to judge its age. The pipeline sets base_time before this. */
    GstClock *clock = gst_element_get_clock (element);
    if (!clock)
      clock = gst_system_clock_obtain (); /* an element used alone has no pipeline clock */
    std::unique_lock<std::mutex> lk (priv->lock);
    State &st = priv->st;
    if (st.started && !st.thread) {
      g_clear_object (&st.clock);
      st.clock = clock;
      clock = nullptr;
      st.base_time = gst_element_get_base_time (element);
      const GstClockTime now = running_now (st);
      st.next_tick = now;
      st.last_fresh = now;
      st.stop_sent = false;
      if (st.s.mode != GST_PI0_ACTION_SINK_MODE_LOG) {
        st.thread_running = true;
        st.thread = g_thread_new ("pi0actionsink-ctl", control_thread, self);
      }
    }
    if (clock)
      gst_object_unref (clock);
  }

  GstStateChangeReturn ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (ret == GST_STATE_CHANGE_FAILURE && transition == GST_STATE_CHANGE_PAUSED_TO_PLAYING) {
    std::unique_lock<std::mutex> lk (priv->lock);
    stop_control_thread (priv, lk);
    g_clear_object (&priv->st.clock);
  }

  return ret;
}

static gboolean
gst_pi0_action_sink_event (GstBaseSink *bsink, GstEvent *event)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  Private *priv = self->priv;
  Pending p;
  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_FLUSH_START:
    case GST_EVENT_EOS: {
      /* Pending actions belong to a stream that is being thrown away or has ended: the robot
       * holds rather than finishing a plan nobody will follow up. */
      std::lock_guard<std::mutex> g (priv->lock);
      State &st = priv->st;
      if (GST_EVENT_TYPE (event) == GST_EVENT_FLUSH_START)
        st.flushing = true;
      st.have_chunk = false;
      if (st.started) {
        const GstClockTime now = running_now (st);
        send_hold (st, p, now);
      }
      break;
    }
    case GST_EVENT_FLUSH_STOP: {
      std::lock_guard<std::mutex> g (priv->lock);
      priv->st.flushing = false;
      priv->st.have_chunk = false;
      break;
    }
    default:
      break;
  }
  flush_pending (self, p);
  return GST_BASE_SINK_CLASS (parent_class)->event (bsink, event);
}

static gboolean
gst_pi0_action_sink_unlock (GstBaseSink *bsink)
{
  /* render never waits on a peer or the clock (sockets are non-blocking and sync is off), so
   * there is nothing to interrupt; the flag makes a render racing with a flush drop its chunk. */
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  std::lock_guard<std::mutex> g (self->priv->lock);
  self->priv->st.unlocked = true;
  return TRUE;
}

static gboolean
gst_pi0_action_sink_unlock_stop (GstBaseSink *bsink)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  std::lock_guard<std::mutex> g (self->priv->lock);
  self->priv->st.unlocked = false;
  return TRUE;
}

static GstFlowReturn
render_locked (GstPi0ActionSink *self, State &st, GstBuffer *buf, Pending &p, std::string *error)
{
  GstPi0ActionMeta *meta = gst_buffer_get_pi0_action_meta (buf);
  if (!meta) {
    st.stats.rejected++;
    warn (st, p, "buffer without GstPi0ActionMeta: nothing sent");
    return GST_FLOW_OK;
  }
  if (meta->horizon == 0 || meta->dim == 0 || !meta->actions ||
      meta->horizon > pi0::proto::kMaxSteps || meta->dim > pi0::proto::kMaxDim) {
    *error = "action chunk of " + std::to_string (meta->horizon) + "x" +
             std::to_string (meta->dim) +
             " is outside what the protocol carries (1..4096 x 1..256)";
    return GST_FLOW_NOT_NEGOTIATED;
  }
  if (st.dim == 0) {
    if (st.binary && st.transport.is_datagram () &&
        pi0::proto::rows_per_frame (meta->dim, !st.s.hmac_key.empty (), st.s.datagram_size) == 0) {
      *error = "datagram-size " + std::to_string (st.s.datagram_size) +
               " cannot hold one action of " + std::to_string (meta->dim) + " values";
      return GST_FLOW_NOT_NEGOTIATED;
    }
    st.dim = meta->dim; /* no configuration: the first chunk fixes the session's dimension */
  }
  if (meta->dim != st.dim) {
    *error =
        "action chunk has " + std::to_string (meta->dim) + " values per action but " +
        (st.have_cfg ? "the robot configuration has " + std::to_string (st.cfg.dim ()) + " joints"
                     : "this stream started with " + std::to_string (st.dim));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  if (st.flushing || st.unlocked)
    return GST_FLOW_OK;

  const GstClockTime now = running_now (st);
  if (st.s.mode == GST_PI0_ACTION_SINK_MODE_LOG) {
    /* The policy's output as it is, for recordings and replays: a file, never a robot (start()
     * refuses network targets), so no limits, no age check. Non-finite values are written as
     * null; the model_id says when the chunk came from an untrained model. */
    send_message (st, p, pi0::proto::Kind::kAction, meta->actions, meta->horizon, 0, meta->horizon,
                  meta->sequence, meta->observation_time, now, pi0::proto::kFlagLast,
                  meta->model_id ? meta->model_id : "");
    st.latency.add (stamps_of (buf, meta), now);
    return GST_FLOW_OK;
  }
  pump (st, p, now);

  /* Whole-chunk gate: the meta's flag and our own scan (the flag can be stale if someone
   * wrote the actions after adding the meta). */
  const pi0::proto::Verdict v = pi0::proto::check_chunk (st.have_cfg ? &st.cfg : nullptr,
                                                         meta->actions, meta->horizon, meta->dim);
  if (v != pi0::proto::Verdict::kOk || (meta->flags & GST_PI0_ACTION_FLAG_NON_FINITE)) {
    st.stats.rejected++;
    warn (st, p,
          "chunk " + std::to_string (meta->sequence) +
              " holds a non-finite value: rejected whole, nothing sent");
    return GST_FLOW_OK;
  }
  if (!GST_CLOCK_TIME_IS_VALID (meta->observation_time)) {
    st.stats.rejected++;
    warn (st, p,
          "chunk " + std::to_string (meta->sequence) +
              " has no observation time: cannot tell its age, rejected");
    return GST_FLOW_OK;
  }
  if (!GST_CLOCK_TIME_IS_VALID (now)) {
    /* Not PLAYING (no clock): nothing may move the robot. */
    return GST_FLOW_OK;
  }
  const GstClockTime obs = meta->observation_time;
  const GstClockTime age = now > obs ? now - obs : 0;
  guint limit = meta->horizon;
  if (st.s.execute_steps && st.s.execute_steps < limit)
    limit = st.s.execute_steps;
  const guint64 first = age / st.period;
  if (age > st.s.max_action_age || first >= limit) {
    st.stats.stale++;
    warn (st, p,
          "chunk " + std::to_string (meta->sequence) + " is stale (observation " +
              std::to_string (age / GST_MSECOND) + " ms old): dropped");
    return GST_FLOW_OK;
  }

  if (st.s.mode == GST_PI0_ACTION_SINK_MODE_STREAM) {
    /* The newest chunk replaces whatever is left of the previous one at the next tick. */
    st.chunk.values.assign (meta->actions, meta->actions + (size_t)meta->horizon * meta->dim);
    st.chunk.horizon = meta->horizon;
    st.chunk.limit = limit;
    st.chunk.next = 0;
    st.chunk.chunk_id = meta->sequence;
    st.chunk.obs = obs;
    st.chunk.model_id = meta->model_id ? meta->model_id : "";
    st.chunk.stamps = stamps_of (buf, meta);
    st.have_chunk = true;
    return GST_FLOW_OK;
  }

  /* Chunk mode: rows [first, limit) now, clamped in order; the first against what the robot
   * is executing at this moment. */
  const guint rows = limit - (guint)first;
  std::vector<float> out ((size_t)rows * st.dim);
  std::vector<float> prev_buf;
  const float *ref = commanded_now (st, now);
  if (ref)
    prev_buf.assign (ref, ref + st.dim);
  bool any_clamped = false;
  for (guint r = 0; r < rows; r++) {
    const float *in = meta->actions + (size_t)(first + r) * st.dim;
    float *o = out.data () + (size_t)r * st.dim;
    if (st.have_cfg) {
      const float *prev = r ? o - st.dim : (prev_buf.empty () ? nullptr : prev_buf.data ());
      if (pi0::proto::limit_action (st.cfg, prev, in, o)) {
        st.stats.clamped++;
        any_clamped = true;
      }
    } else {
      memcpy (o, in, st.dim * sizeof (float));
    }
  }
  send_message (st, p, pi0::proto::Kind::kAction, out.data (), rows, (guint)first, limit,
                meta->sequence, obs, now,
                (uint8_t)(pi0::proto::kFlagLast | (any_clamped ? pi0::proto::kFlagClamped : 0)),
                meta->model_id ? meta->model_id : "");
  st.latency.add (stamps_of (buf, meta), now);
  st.sent_rows = std::move (out);
  st.sent_first = (guint)first;
  st.sent_obs = obs;
  st.have_last = false;
  st.last_fresh = obs + (limit - 1) * st.period;
  st.hold_sent = st.stop_sent = false;
  return GST_FLOW_OK;
}

static GstFlowReturn
gst_pi0_action_sink_render (GstBaseSink *bsink, GstBuffer *buf)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (bsink);
  Private *priv = self->priv;
  Pending p;
  std::string error;
  GstFlowReturn ret;
  try {
    std::lock_guard<std::mutex> g (priv->lock);
    ret = render_locked (self, priv->st, buf, p, &error);
  } catch (const std::exception &e) {
    error = std::string ("internal error: ") + e.what ();
    ret = GST_FLOW_ERROR;
  }
  flush_pending (self, p);
  if (ret == GST_FLOW_NOT_NEGOTIATED) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                       ("Action chunk does not match the robot: %s", error.c_str ()),
                       ("nothing of this chunk was sent"));
  } else if (ret != GST_FLOW_OK) {
    GST_ELEMENT_ERROR (self, STREAM, FAILED, ("%s", error.c_str ()), (nullptr));
  }
  return ret;
}

/* ---------------------------------------------------------------------------------------- */

static GstStructure *
make_stats (Private *priv)
{
  std::lock_guard<std::mutex> g (priv->lock);
  const Stats &s = priv->st.stats;
  const LatencyWindow &lw = priv->st.latency;
  GstStructure *st = gst_structure_new (
      "pi0actionsink-stats", "sent", G_TYPE_UINT64, s.sent, "frames", G_TYPE_UINT64, s.frames,
      "rejected", G_TYPE_UINT64, s.rejected, "clamped", G_TYPE_UINT64, s.clamped, "stale",
      G_TYPE_UINT64, s.stale, "holds", G_TYPE_UINT64, s.holds, "stops", G_TYPE_UINT64, s.stops,
      "reconnects", G_TYPE_UINT64, s.reconnects, "dropped", G_TYPE_UINT64, s.dropped, "sessions",
      G_TYPE_UINT64, s.sessions, "queued-bytes", G_TYPE_UINT64,
      (guint64)priv->st.transport.queued_bytes (), nullptr);
  gst_structure_set (st, "latency-chunks", G_TYPE_UINT64, lw.chunks, nullptr);
  for (int i = 0; i < kNumStages; i++) {
    const auto &d = lw.samples[i];
    if (d.empty ())
      continue;
    std::vector<GstClockTime> v (d.begin (), d.end ());
    const std::string n = kStageNames[i];
    const GstClockTime max = *std::max_element (v.begin (), v.end ());
    gst_structure_set (st, (n + "-p50").c_str (), G_TYPE_UINT64, pi0::percentile (v, 0.50),
                       (n + "-p99").c_str (), G_TYPE_UINT64, pi0::percentile (v, 0.99),
                       (n + "-max").c_str (), G_TYPE_UINT64, max, nullptr);
  }
  return st;
}

static void
gst_pi0_action_sink_set_property (GObject *object, guint prop_id, const GValue *value,
                                  GParamSpec *pspec)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (object);
  std::lock_guard<std::mutex> g (self->priv->settings_lock);
  Settings &s = self->priv->settings;
  switch (prop_id) {
    case PROP_TARGET:
      s.target = g_value_get_string (value) ? g_value_get_string (value) : kDefaultTarget;
      break;
    case PROP_FORMAT:
      s.format = (GstPi0ActionSinkFormat)g_value_get_enum (value);
      break;
    case PROP_MODE:
      s.mode = (GstPi0ActionSinkMode)g_value_get_enum (value);
      break;
    case PROP_CONTROL_RATE:
      s.control_rate = g_value_get_double (value);
      break;
    case PROP_EXECUTE_STEPS:
      s.execute_steps = g_value_get_uint (value);
      break;
    case PROP_ROBOT_CONFIG:
      s.robot_config = g_value_get_string (value) ? g_value_get_string (value) : "";
      break;
    case PROP_ALLOW_UNLIMITED:
      s.allow_unlimited = g_value_get_boolean (value);
      break;
    case PROP_MAX_ACTION_AGE:
      s.max_action_age = g_value_get_uint64 (value);
      break;
    case PROP_HOLD_TIMEOUT:
      s.hold_timeout = g_value_get_uint64 (value);
      break;
    case PROP_STOP_TIMEOUT:
      s.stop_timeout = g_value_get_uint64 (value);
      break;
    case PROP_HMAC_KEY:
      s.hmac_key = g_value_get_string (value) ? g_value_get_string (value) : "";
      break;
    case PROP_MAX_SEND_BUFFER:
      s.max_send_buffer = g_value_get_uint (value);
      break;
    case PROP_DATAGRAM_SIZE:
      s.datagram_size = g_value_get_uint (value);
      break;
    case PROP_RECONNECT_MIN:
      s.reconnect_min = g_value_get_uint64 (value);
      break;
    case PROP_RECONNECT_MAX:
      s.reconnect_max = g_value_get_uint64 (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
gst_pi0_action_sink_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (object);
  if (prop_id == PROP_STATS) {
    g_value_take_boxed (value, make_stats (self->priv));
    return;
  }
  std::lock_guard<std::mutex> g (self->priv->settings_lock);
  const Settings &s = self->priv->settings;
  switch (prop_id) {
    case PROP_TARGET:
      g_value_set_string (value, s.target.c_str ());
      break;
    case PROP_FORMAT:
      g_value_set_enum (value, s.format);
      break;
    case PROP_MODE:
      g_value_set_enum (value, s.mode);
      break;
    case PROP_CONTROL_RATE:
      g_value_set_double (value, s.control_rate);
      break;
    case PROP_EXECUTE_STEPS:
      g_value_set_uint (value, s.execute_steps);
      break;
    case PROP_ROBOT_CONFIG:
      g_value_set_string (value, s.robot_config.empty () ? nullptr : s.robot_config.c_str ());
      break;
    case PROP_ALLOW_UNLIMITED:
      g_value_set_boolean (value, s.allow_unlimited);
      break;
    case PROP_MAX_ACTION_AGE:
      g_value_set_uint64 (value, s.max_action_age);
      break;
    case PROP_HOLD_TIMEOUT:
      g_value_set_uint64 (value, s.hold_timeout);
      break;
    case PROP_STOP_TIMEOUT:
      g_value_set_uint64 (value, s.stop_timeout);
      break;
    case PROP_MAX_SEND_BUFFER:
      g_value_set_uint (value, s.max_send_buffer);
      break;
    case PROP_DATAGRAM_SIZE:
      g_value_set_uint (value, s.datagram_size);
      break;
    case PROP_RECONNECT_MIN:
      g_value_set_uint64 (value, s.reconnect_min);
      break;
    case PROP_RECONNECT_MAX:
      g_value_set_uint64 (value, s.reconnect_max);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
gst_pi0_action_sink_finalize (GObject *object)
{
  GstPi0ActionSink *self = GST_PI0_ACTION_SINK (object);
  {
    std::unique_lock<std::mutex> lk (self->priv->lock);
    stop_control_thread (self->priv, lk);
    self->priv->st.transport.close ();
    g_clear_object (&self->priv->st.clock);
  }
  delete self->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_pi0_action_sink_init (GstPi0ActionSink *self)
{
  self->priv = new Private ();
  /* Send as soon as a chunk arrives: the observation's capture time, not the buffer's
   * timestamp, decides when each action is due, and waiting on the clock here would only add
   * latency (and make render block). */
  gst_base_sink_set_sync (GST_BASE_SINK (self), FALSE);
  /* Nobody needs the last chunk kept alive by the base class. */
  gst_base_sink_set_last_sample_enabled (GST_BASE_SINK (self), FALSE);
}

static void
gst_pi0_action_sink_class_init (GstPi0ActionSinkClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseSinkClass *bsink_class = GST_BASE_SINK_CLASS (klass);
  const GParamFlags rw_ready =
      (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);

  GST_DEBUG_CATEGORY_INIT (gst_pi0_action_sink_debug, "pi0actionsink", 0, "Pi0 action sink");

  gobject_class->set_property = gst_pi0_action_sink_set_property;
  gobject_class->get_property = gst_pi0_action_sink_get_property;
  gobject_class->finalize = gst_pi0_action_sink_finalize;

  /**
   * GstPi0ActionSink:target:
   *
   * Where actions go: `udp://IP:PORT`, `tcp://IP:PORT`, `file:///path` or `stdout`. Numeric
   * addresses only; examples use loopback, anything else must be set explicitly.
   */
  g_object_class_install_property (
      gobject_class, PROP_TARGET,
      g_param_spec_string ("target", "Target",
                           "Where actions go: udp://IP:PORT, tcp://IP:PORT, file:///path or stdout",
                           kDefaultTarget, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_FORMAT,
      g_param_spec_enum (
          "format", "Format",
          "Message encoding: auto (binary for udp/tcp, JSON lines for file/stdout), json or binary",
          gst_pi0_action_sink_format_get_type (), GST_PI0_ACTION_SINK_FORMAT_AUTO, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_MODE,
      g_param_spec_enum ("mode", "Mode",
                         "chunk: send each chunk whole on arrival; stream: one action per control "
                         "tick from the newest chunk; log: write every chunk whole and unmodified "
                         "(file:// or stdout only: recordings, replays)",
                         gst_pi0_action_sink_mode_get_type (), GST_PI0_ACTION_SINK_MODE_STREAM,
                         rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_CONTROL_RATE,
      g_param_spec_double ("control-rate", "Control rate",
                           "Robot control rate in Hz: one chunk row per tick (also the step period "
                           "written in frames)",
                           0.1, 1000.0, kDefaultControlRate, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_EXECUTE_STEPS,
      g_param_spec_uint ("execute-steps", "Execute steps",
                         "Use at most this many rows of each chunk (0 = all rows)", 0, G_MAXUINT, 0,
                         rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_ROBOT_CONFIG,
      g_param_spec_string ("robot-config", "Robot configuration",
                           "JSON file with joints, lower/upper limits and max_step per tick; every "
                           "action is clamped to it",
                           nullptr, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_ALLOW_UNLIMITED,
      g_param_spec_boolean (
          "allow-unlimited", "Allow unlimited",
          "Start without robot-config (actions are still checked for NaN/Inf but not clamped)",
          FALSE, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_MAX_ACTION_AGE,
      g_param_spec_uint64 (
          "max-action-age", "Maximum action age",
          "Drop actions whose observation was captured longer ago than this, in nanoseconds",
          GST_MSECOND, G_MAXUINT64, kDefaultMaxActionAge, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_HOLD_TIMEOUT,
      g_param_spec_uint64 (
          "hold-timeout", "Hold timeout",
          "Send HOLD after this long without a fresh action, in nanoseconds of pipeline clock",
          GST_MSECOND, G_MAXUINT64, kDefaultHoldTimeout, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_STOP_TIMEOUT,
      g_param_spec_uint64 (
          "stop-timeout", "Stop timeout",
          "Send STOP after this long without a fresh action, in nanoseconds (>= hold-timeout)",
          GST_MSECOND, G_MAXUINT64, kDefaultStopTimeout, rw_ready));
  /* Write-only: a key must not be readable back through gst-inspect or a property dump. */
  g_object_class_install_property (
      gobject_class, PROP_HMAC_KEY,
      g_param_spec_string (
          "hmac-key", "HMAC key",
          "Shared key: when set, every binary frame carries an HMAC-SHA256 trailer (write-only)",
          nullptr,
          (GParamFlags)(G_PARAM_WRITABLE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY)));
  g_object_class_install_property (
      gobject_class, PROP_MAX_SEND_BUFFER,
      g_param_spec_uint (
          "max-send-buffer", "Maximum send buffer",
          "TCP: bytes queued for a slow peer before the oldest unsent frames are dropped", 1024,
          64 * 1024 * 1024, kDefaultSendBuffer, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_DATAGRAM_SIZE,
      g_param_spec_uint (
          "datagram-size", "Datagram size",
          "UDP: largest frame in bytes; bigger chunks are split per docs/protocol.md", 128, 65507,
          kDefaultDatagramSize, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_RECONNECT_MIN,
      g_param_spec_uint64 (
          "reconnect-min", "Reconnect minimum",
          "TCP: first reconnect delay in nanoseconds (doubles per failure up to reconnect-max)",
          GST_MSECOND, 60 * GST_SECOND, kDefaultReconnectMin, rw_ready));
  g_object_class_install_property (
      gobject_class, PROP_RECONNECT_MAX,
      g_param_spec_uint64 ("reconnect-max", "Reconnect maximum",
                           "TCP: longest reconnect delay in nanoseconds", GST_MSECOND,
                           600 * GST_SECOND, kDefaultReconnectMax, rw_ready));
  /**
   * GstPi0ActionSink:stats:
   *
   * Counters since start: sent (action rows), frames, rejected (chunks), clamped (rows), stale
   * (chunks), holds, stops, reconnects, dropped (frames), sessions, queued-bytes.
   *
   * End-to-end latency, from the stamps the upstream elements leave in the metas, over the
   * last 1024 chunks sent (in stream mode: when a chunk's first row leaves): `latency-chunks`
   * (chunks measured since start) and, for each stage, `STAGE-p50`, `STAGE-p99` and
   * `STAGE-max` in nanoseconds (guint64), where STAGE is `mux` (base frame's capture to the
   * muxer's push: the wait for the other views), `prep` (to cudaprep's push), `infer` (to
   * pi0infer's push: queueing and inference), `sink` (to the send) and `end-to-end` (capture
   * to send). A stage whose stamps are missing (no cudaprep, no clock) has no fields.
   */
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed (
          "stats", "Statistics",
          "Counters: sent, frames, rejected, clamped, stale, holds, stops, reconnects, dropped, "
          "sessions, queued-bytes; latency per stage (mux, prep, infer, sink, end-to-end) as "
          "STAGE-p50/-p99/-max in ns over the last 1024 chunks",
          GST_TYPE_STRUCTURE, (GParamFlags)(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));

  /**
   * GstPi0ActionSink::action:
   * @sink: the element
   * @kind: "action", "hold" or "stop"
   * @chunk_id: the chunk's id (observation sequence), 0 for hold/stop
   * @step_index: chunk row of the first value row
   * @steps: rows in @values (0 for stop, and for a hold with no known position)
   * @dim: values per row
   * @values: @steps × @dim float32 exactly as sent (after clamping)
   *
   * Emitted after every message handed to the transport, from the thread that sent it
   * (streaming, control or application thread), with no lock held.
   */
  signals[SIGNAL_ACTION] =
      g_signal_new ("action", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, nullptr, nullptr,
                    nullptr, G_TYPE_NONE, 6, G_TYPE_STRING, G_TYPE_UINT64, G_TYPE_UINT, G_TYPE_UINT,
                    G_TYPE_UINT, G_TYPE_BYTES);

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 action sink", "Sink/Network",
      "Sends Pi0 action chunks to a robot: finite, clamped, fresh, framed", "gst-pi0 developers");
  element_class->change_state = gst_pi0_action_sink_change_state;
  bsink_class->start = gst_pi0_action_sink_start;
  bsink_class->stop = gst_pi0_action_sink_stop;
  bsink_class->render = gst_pi0_action_sink_render;
  bsink_class->event = gst_pi0_action_sink_event;
  bsink_class->unlock = gst_pi0_action_sink_unlock;
  bsink_class->unlock_stop = gst_pi0_action_sink_unlock_stop;

  gst_type_mark_as_plugin_api (gst_pi0_action_sink_mode_get_type (), (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (gst_pi0_action_sink_format_get_type (), (GstPluginAPIFlags)0);
}
