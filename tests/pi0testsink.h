/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Helpers shared by test_pi0actionsink.cpp, test_pi0actionsink_feedback.cpp and test_robotsim.cpp
 * (and test_lerobot.cpp, test_pipelines.cpp): chunk buffers, a recorder of the sink's `action`
 * signal, an element's `stats` counters, a free loopback port, the sink in a harness on the test
 * clock, its `pi0-executing` events, a loopback UDP receiver that decodes frames, and the robot
 * simulator run as a subprocess. Loopback addresses only; every wait is bounded. */

#include "tests/pi0testexact.h"
#include "protocol/pi0frame.h"
#include "common/pi0json.h"
#include "tests/pi0testenv.h"
#include "tests/pi0testgst.h"

#include <gio/gio.h>
#include <glib/gstdio.h>
#include <gst/check/gstharness.h>
#include <gst/check/gsttestclock.h>
#include <gst/pi0/pi0.h>

#include <gtest/gtest.h>

#include <dirent.h>
#include <csignal>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace pi0test
{

inline GstBuffer *
make_chunk (guint horizon, guint dim, const std::vector<float> &values, guint64 seq,
            GstClockTime obs)
{
  GstBuffer *b = gst_buffer_new ();
  GstPi0ActionMeta *m =
      gst_buffer_add_pi0_action_meta (b, horizon, dim, values.data (), "test-model");
  m->sequence = seq;
  m->observation_time = obs;
  return b;
}

struct Rec {
  std::string kind;
  guint64 chunk_id;
  guint step_index;
  guint steps;
  guint dim;
  std::vector<float> values;
  GstClockTime clock_time; /* test clock time when it was emitted */
};

class Recorder
{
public:
  void attach (GstElement *sink, GstClock *clock = nullptr)
  {
    clock_ = clock;
    g_signal_connect (sink, "action", G_CALLBACK (&Recorder::on_action), this);
  }
  std::vector<Rec> take ()
  {
    std::lock_guard<std::mutex> g (m_);
    std::vector<Rec> r;
    r.swap (recs_);
    return r;
  }
  std::vector<Rec> all ()
  {
    std::lock_guard<std::mutex> g (m_);
    return recs_;
  }
  size_t count (const std::string &kind)
  {
    std::lock_guard<std::mutex> g (m_);
    size_t n = 0;
    for (auto &r : recs_)
      n += r.kind == kind;
    return n;
  }

private:
  static void on_action (GstElement *, const gchar *kind, guint64 chunk, guint step, guint steps,
                         guint dim, GBytes *values, gpointer ud)
  {
    Recorder *self = (Recorder *)ud;
    gsize len = 0;
    const float *v = (const float *)g_bytes_get_data (values, &len);
    Rec r{kind,
          chunk,
          step,
          steps,
          dim,
          std::vector<float> (v, v + len / sizeof (float)),
          self->clock_ ? gst_clock_get_time (self->clock_) : GST_CLOCK_TIME_NONE};
    std::lock_guard<std::mutex> g (self->m_);
    self->recs_.push_back (std::move (r));
  }
  std::mutex m_;
  std::vector<Rec> recs_;
  GstClock *clock_ = nullptr;
};

/* A uint64 counter of @element's `stats` structure (a failure when it has none of that name). */
inline guint64
stat (GstElement *element, const char *field)
{
  GstStructure *s = nullptr;
  g_object_get (element, "stats", &s, nullptr);
  guint64 v = 0;
  EXPECT_TRUE (s && gst_structure_get_uint64 (s, field, &v)) << field;
  if (s)
    gst_structure_free (s);
  return v;
}

/* A robot of three joints whose limits and max_step never bind. */
constexpr const char *kWideRobot3 = R"({"joints":["a","b","c"],
  "lower":[-100,-100,-100],"upper":[100,100,100],"max_step":[1000,1000,1000]})";

/* pi0actionsink in a harness on the test clock, its `action` signal recorded. */
struct SinkFixture {
  TempDir dir;
  Recorder rec;
  HarnessPtr h;
  GstElement *sink = nullptr;

  /* Makes the sink with @props ("name=value ..." pairs as gst-launch would parse), wraps it in
   * a harness (which sets it PLAYING on the test clock, base time 0). */
  void make (const std::string &props, const std::string &config = kWideRobot3)
  {
    std::string desc = "pi0actionsink " + props;
    if (!config.empty ())
      desc += " robot-config=" + dir.file ("robot.json", config);
    std::string error;
    sink = pi0::tools::launch (desc, &error).release ();
    ASSERT_NE (sink, nullptr) << error;
    gst_object_ref_sink (sink);
    h.reset (gst_harness_new_with_element (sink, "sink", nullptr));
    gst_object_unref (sink); /* the harness holds it */
    rec.attach (sink, GST_CLOCK (gst_harness_get_testclock (h.get ())));
    /* get_testclock returned a ref */
    gst_object_unref (gst_harness_get_testclock (h.get ()));
    gst_harness_set_src_caps_str (h.get (), GST_PI0_OBSERVATION_MEDIA_TYPE);
  }
  GstTestClock *clock () { return GST_TEST_CLOCK (GST_ELEMENT_CLOCK (sink)); }
  GstClockTime now () { return gst_clock_get_time (GST_CLOCK (clock ())); }
  /* Releases the control thread's next wait, then waits until it is waiting again (i.e. it
   * has finished everything that wake-up caused, signals included). */
  void crank ()
  {
    ASSERT_TRUE (gst_harness_crank_single_clock_wait (h.get ()));
    ASSERT_TRUE (gst_harness_wait_for_clock_id_waits (h.get (), 1, 10));
  }
  /* Cranks until the test clock reaches @t. */
  void crank_until (GstClockTime t)
  {
    for (int i = 0; i < 100000 && now () < t; i++)
      crank ();
  }
  GstFlowReturn push (guint horizon, guint dim, const std::vector<float> &v, guint64 seq,
                      GstClockTime obs)
  {
    return gst_harness_push (h.get (), make_chunk (horizon, dim, v, seq, obs));
  }
};

/* Real-time chunking (issue 13): what the sink tells upstream about the chunk and row the
 * robot executes (a pi0-executing event), with the clock time of the row and the period. */
struct Executing {
  guint64 chunk;
  guint row;
  GstClockTime time;
  guint64 period;
  bool operator== (const Executing &o) const
  {
    return chunk == o.chunk && row == o.row && time == o.time && period == o.period;
  }
};

inline std::vector<Executing>
pull_executing (GstHarness *h)
{
  std::vector<Executing> v;
  while (GstEvent *e = gst_harness_try_pull_upstream_event (h)) {
    Executing x{};
    if (gst_pi0_executing_event_parse (e, &x.chunk, &x.row, &x.time, &x.period))
      v.push_back (x);
    gst_event_unref (e);
  }
  return v;
}

inline std::vector<std::string>
read_lines (const std::string &path)
{
  std::vector<std::string> out;
  gchar *text = nullptr;
  if (!g_file_get_contents (path.c_str (), &text, nullptr, nullptr))
    return out;
  gchar **lines = g_strsplit (text, "\n", -1);
  for (gchar **l = lines; *l; l++) {
    if (**l)
      out.emplace_back (*l);
  }
  g_strfreev (lines);
  g_free (text);
  return out;
}

/* A parsed JSON line (the robot log and the sink's JSON lines), read with the project's JSON
 * reader. Missing members read as "" / -1 / empty. */
class JsonLine
{
public:
  explicit JsonLine (const std::string &line)
  {
    auto v = pi0::json::parse_strict (line, "json line", nullptr);
    ok_ = v && v->is_object ();
    if (ok_)
      v_ = std::move (*v);
  }
  bool ok () const { return ok_; }
  const pi0::json::Value &value () const { return v_; }
  std::string str (const char *k) const
  {
    return ok_ && v_.contains (k) && v_[k].is_string () ? v_[k].get<std::string> () : "";
  }
  gint64 num (const char *k) const
  {
    return ok_ && v_.contains (k) && v_[k].is_number () ? v_[k].get<gint64> () : -1;
  }
  std::vector<float> row (const char *k = "values") const
  {
    std::vector<float> v;
    if (ok_ && v_.contains (k) && v_[k].is_array ())
      for (const auto &e : v_[k])
        v.push_back (e.is_number () ? e.get<float> () : NAN);
    return v;
  }

private:
  pi0::json::Value v_;
  bool ok_ = false;
};

/* Loopback UDP socket that decodes whatever arrives. */
class UdpReceiver
{
public:
  explicit UdpReceiver (std::string key = "") : key_ (std::move (key))
  {
    sock_ =
        g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_DATAGRAM, G_SOCKET_PROTOCOL_UDP, nullptr);
    GInetAddress *lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
    GSocketAddress *sa = g_inet_socket_address_new (lo, 0);
    g_socket_bind (sock_, sa, TRUE, nullptr);
    g_object_unref (sa);
    g_object_unref (lo);
    GSocketAddress *local = g_socket_get_local_address (sock_, nullptr);
    port_ = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (local));
    g_object_unref (local);
    g_socket_set_blocking (sock_, FALSE);
  }
  ~UdpReceiver () { g_object_unref (sock_); }
  int port () const { return port_; }
  std::string target () const { return "udp://127.0.0.1:" + std::to_string (port_); }
  /* Everything queued now (loopback delivery is synchronous with sendto). */
  std::vector<pi0::proto::Frame> drain (int *bad = nullptr)
  {
    std::vector<pi0::proto::Frame> out;
    std::vector<uint8_t> buf (70000);
    for (int i = 0; i < 1000000; i++) {
      gssize n = g_socket_receive (sock_, (gchar *)buf.data (), buf.size (), nullptr, nullptr);
      if (n < 0)
        break;
      pi0::proto::Frame f;
      pi0::proto::Limits lim;
      if (pi0::proto::decode (buf.data (), (size_t)n, lim, key_, &f) == pi0::proto::Error::kOk)
        out.push_back (std::move (f));
      else if (bad)
        (*bad)++;
    }
    return out;
  }

private:
  GSocket *sock_;
  int port_ = 0;
  std::string key_;
};

/* A listening TCP socket on loopback that accepts nothing and reads nothing (a stalled peer:
 * the kernel completes the handshake from the backlog). */
struct StalledPeer {
  GSocket *sock;
  int port;
  StalledPeer ()
  {
    sock =
        g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, nullptr);
    GInetAddress *lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
    GSocketAddress *sa = g_inet_socket_address_new (lo, 0);
    g_socket_bind (sock, sa, TRUE, nullptr);
    g_socket_listen (sock, nullptr);
    g_object_unref (sa);
    g_object_unref (lo);
    GSocketAddress *local = g_socket_get_local_address (sock, nullptr);
    port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (local));
    g_object_unref (local);
  }
  ~StalledPeer () { g_object_unref (sock); }
};

/* A loopback port of @protocol (TCP or UDP) that nobody uses: a socket's, bound then closed. */
inline int
free_port (GSocketProtocol protocol = G_SOCKET_PROTOCOL_TCP)
{
  if (protocol == G_SOCKET_PROTOCOL_UDP)
    return UdpReceiver ().port ();
  return StalledPeer ().port;
}

inline int
count_fds ()
{
  int n = 0;
  if (DIR *d = opendir ("/proc/self/fd")) {
    while (readdir (d))
      n++;
    closedir (d);
  }
  return n;
}

inline std::string
robotsim_path ()
{
  if (const char *p = g_getenv ("PI0_ROBOTSIM"))
    return p;
  return build_root () + "/tools/pi0-robotsim/pi0-robotsim";
}

/* The simulator as a subprocess, logging to a file. */
class SimProc
{
public:
  ~SimProc () { stop (); }

  /* Words run before the simulator's own command line (`ip netns exec NS`). */
  void set_prefix (const std::vector<std::string> &prefix) { prefix_ = prefix; }

  bool start (const std::vector<std::string> &args, const std::string &log)
  {
    log_ = log;
    std::vector<const gchar *> argv;
    for (auto &w : prefix_)
      argv.push_back (w.c_str ());
    std::string path = robotsim_path ();
    argv.push_back (path.c_str ());
    std::string log_arg = "--log=" + log;
    argv.push_back (log_arg.c_str ());
    for (auto &a : args)
      argv.push_back (a.c_str ());
    argv.push_back (nullptr);
    GError *err = nullptr;
    proc_ = g_subprocess_newv (argv.data (), G_SUBPROCESS_FLAGS_STDOUT_PIPE, &err);
    if (!proc_) {
      ADD_FAILURE () << "cannot start " << path << ": " << err->message;
      g_clear_error (&err);
      return false;
    }
    GDataInputStream *in = g_data_input_stream_new (g_subprocess_get_stdout_pipe (proc_));
    gchar *line = g_data_input_stream_read_line (in, nullptr, nullptr, nullptr);
    g_object_unref (in);
    if (!line) {
      ADD_FAILURE () << "robot simulator did not start";
      return false;
    }
    JsonLine j (line);
    g_free (line);
    port_ = j.ok () ? (int)j.num ("port") : -1;
    return port_ > 0;
  }
  int port () const { return port_; }
  std::vector<std::string> lines () const { return read_lines (log_); }
  /* Events of one kind, parsed. */
  size_t count (const std::string &event) const
  {
    size_t n = 0;
    for (auto &l : lines ())
      n += l.find ("\"event\":\"" + event + "\"") != std::string::npos;
    return n;
  }
  /* Polls the log until @pred holds, for at most 10 s. */
  bool wait_for (const std::function<bool ()> &pred) const
  {
    for (int i = 0; i < 1000; i++) {
      if (pred ())
        return true;
      g_usleep (10000);
    }
    return pred ();
  }
  bool wait_count (const std::string &event, size_t n) const
  {
    return wait_for ([&] { return count (event) >= n; });
  }
  void stop (int sig = SIGTERM)
  {
    if (!proc_)
      return;
    g_subprocess_send_signal (proc_, sig);
    g_subprocess_wait (proc_, nullptr, nullptr);
    g_clear_object (&proc_);
  }
  bool exited_cleanly () const { return exited_ok_; }
  void stop_and_check ()
  {
    if (!proc_)
      return;
    g_subprocess_send_signal (proc_, SIGTERM);
    g_subprocess_wait (proc_, nullptr, nullptr);
    exited_ok_ = g_subprocess_get_if_exited (proc_) && g_subprocess_get_exit_status (proc_) == 0;
    g_clear_object (&proc_);
  }

private:
  GSubprocess *proc_ = nullptr;
  int port_ = -1;
  std::string log_;
  std::vector<std::string> prefix_;
  bool exited_ok_ = false;
};

using pi0test::exact_within;

} // namespace pi0test
