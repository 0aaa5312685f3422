/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0-demo: the whole gst-pi0 chain on synthetic input, with a simulated robot at the end.
 *
 * The chain is pipelines/demo.txt, the line `pipelines/run.sh demo` runs, and the robot is
 * pipelines/robot-7dof.json: three test cameras of different sizes, formats and rates and the
 * robot's 7-joint state over UDP feed pi0viewmux -> cudaprep -> pi0infer (the builtin,
 * untrained pi0-tiny) -> pi0actionsink, which sends the chunks over UDP on loopback to
 * pi0-robotsim, which publishes that state. The top camera stalls for a while mid-run
 * (--stall-start/--stall-end), so the output shows it masked and coming back. It prints
 * observations with their first action as they go, and at the end a summary: observations,
 * chunks, what the simulated robot executed, and the latency of each stage from the camera's
 * capture to the frame leaving for the robot. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/gstpi0elements.h"
#include "tools/common/pi0gsttools.h"
#include "tools/common/pi0latencytable.h"
#include "tools/common/pi0launchline.h"

#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

namespace
{

struct Options {
  double duration = 5.0;
  double stall_start = 1.5, stall_end = 3.0;
  int print_every = 10;
  double max_wait_ms = NAN; /* NAN, instruction and rtc unset: the line's own values */
  bool live = true;
  gchar *instruction = nullptr;
  gchar *rtc = nullptr;
};

struct Demo {
  Options opt;
  GMainLoop *loop = nullptr;
  GstElement *pipeline = nullptr;
  guint last_mask = 0;
  bool timing = false; /* the --duration timer runs */
  std::mutex lock;     /* counters: the sink's signal comes from two threads */
  guint64 chunks = 0, holds = 0, stops = 0;
};

#ifndef HAVE_PI0INFER
#error "pi0-demo needs pi0infer (a build with LibTorch)"
#endif

/* @n distinct UDP ports on loopback that are free now, or an empty vector. The line needs the
 * robot's port and the state's before anything starts, so they are chosen here and released:
 * another program could take one in between, which then shows as a bind error. */
std::vector<int>
free_udp_ports (int n)
{
  std::vector<int> fds, ports;
  for (int i = 0; i < n; i++) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    socklen_t len = sizeof (a);
    const int fd = socket (AF_INET, SOCK_DGRAM, 0);
    if (fd >= 0)
      fds.push_back (fd);
    if (fd >= 0 && bind (fd, (sockaddr *)&a, sizeof (a)) == 0 &&
        getsockname (fd, (sockaddr *)&a, &len) == 0)
      ports.push_back (ntohs (a.sin_port));
  }
  /* All held until here, so that no two are the same. */
  for (int fd : fds)
    close (fd);
  return (int)ports.size () == n ? ports : std::vector<int> ();
}

/* Camera @cam as the line sets it ("main 640x480 RGB 30 fps", from the caps after it), and its
 * frame rate in @fps (0 when the line gives none). */
std::string
describe_camera (GstElement *cam, const char *view, double *fps)
{
  GstPad *src = gst_element_get_static_pad (cam, "src");
  GstPad *peer = src ? gst_pad_get_peer (src) : nullptr;
  GstElement *next = peer ? gst_pad_get_parent_element (peer) : nullptr;
  GstCaps *caps = nullptr;
  if (next && g_object_class_find_property (G_OBJECT_GET_CLASS (next), "caps"))
    g_object_get (next, "caps", &caps, nullptr);
  gint w = 0, h = 0, n = 0, den = 0;
  const char *format = nullptr;
  if (caps && !gst_caps_is_empty (caps)) {
    const GstStructure *st = gst_caps_get_structure (caps, 0);
    gst_structure_get_int (st, "width", &w);
    gst_structure_get_int (st, "height", &h);
    gst_structure_get_fraction (st, "framerate", &n, &den);
    format = gst_structure_get_string (st, "format");
  }
  *fps = den > 0 ? (double)n / den : 0;
  char text[96];
  snprintf (text, sizeof (text), "%s %dx%d %s %g fps", view, w, h, format ? format : "?", *fps);
  if (caps)
    gst_caps_unref (caps);
  if (next)
    gst_object_unref (next);
  if (peer)
    gst_object_unref (peer);
  if (src)
    gst_object_unref (src);
  return text;
}

/* The top camera "stalls": its frames between the two times never arrive. */
GstPadProbeReturn
stall_probe (GstPad *, GstPadProbeInfo *info, gpointer user_data)
{
  auto d = static_cast<Demo *> (user_data);
  double t = (double)GST_BUFFER_PTS (GST_PAD_PROBE_INFO_BUFFER (info)) / GST_SECOND;
  return t >= d->opt.stall_start && t < d->opt.stall_end ? GST_PAD_PROBE_DROP : GST_PAD_PROBE_OK;
}

std::string
view_summary (const GstPi0View *v, GstClockTime obs_time)
{
  char line[96];
  if (!(v->flags & GST_PI0_VIEW_FLAG_VALID)) {
    snprintf (line, sizeof (line), "%-4s MASKED    ", v->name);
    return line;
  }
  double age_ms = v->capture_time <= obs_time ? (double)(obs_time - v->capture_time) / GST_MSECOND
                                              : -(double)(v->capture_time - obs_time) / GST_MSECOND;
  snprintf (line, sizeof (line), "%-4s %5.1f ms%s", v->name, age_ms,
            (v->flags & GST_PI0_VIEW_FLAG_SKEWED) ? "*" : " ");
  return line;
}

/* After pi0infer: the observation and the first step of its chunk. */
GstPadProbeReturn
print_probe (GstPad *, GstPadProbeInfo *info, gpointer user_data)
{
  auto d = static_cast<Demo *> (user_data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstPi0ObservationMeta *m = gst_buffer_get_pi0_observation_meta (buf);
  GstPi0ActionMeta *a = gst_buffer_get_pi0_action_meta (buf);
  if (!m)
    return GST_PAD_PROBE_OK;
  guint mask = 0;
  for (guint i = 0; i < m->n_views; i++)
    mask |= (m->views[i].flags & GST_PI0_VIEW_FLAG_VALID) ? 0 : (1u << i);
  bool changed = mask != d->last_mask;
  d->last_mask = mask;
  if (m->sequence % d->opt.print_every != 0 && !changed)
    return GST_PAD_PROBE_OK;
  std::string line;
  char head[64];
  snprintf (head, sizeof (head), "obs %4" G_GUINT64_FORMAT " t=%6.3fs  ", m->sequence,
            (double)m->observation_time / GST_SECOND);
  line += head;
  for (guint i = 0; i < m->n_views; i++)
    line += view_summary (&m->views[i], m->observation_time) + " ";
  if (a) {
    const gfloat *step0 = gst_pi0_action_meta_get_action (a, 0);
    char s[160];
    snprintf (s, sizeof (s), "| %ux%u chunk in %4.1f ms, step 0: %+.2f %+.2f %+.2f ..", a->horizon,
              a->dim, (double)a->inference_time / GST_MSECOND, step0[0], step0[1], step0[2]);
    line += s;
  } else {
    line += "| no chunk";
  }
  g_print ("%s\n", line.c_str ());
  return GST_PAD_PROBE_OK;
}

/* pi0actionsink's `action` signal: what left for the robot, and when. */
void
on_action (GstElement *, const gchar *kind, guint64, guint, guint, guint, GBytes *,
           gpointer user_data)
{
  auto d = static_cast<Demo *> (user_data);
  std::lock_guard<std::mutex> lk (d->lock);
  if (g_str_equal (kind, "action")) {
    d->chunks++;
  } else if (g_str_equal (kind, "hold")) {
    d->holds++;
  } else if (g_str_equal (kind, "stop")) {
    d->stops++;
  }
}

gboolean
on_timeout (gpointer user_data)
{
  auto d = static_cast<Demo *> (user_data);
  /* Let every element see EOS: the sink sends HOLD, the robot simulator logs it. */
  gst_element_send_event (d->pipeline, gst_event_new_eos ());
  return G_SOURCE_REMOVE;
}

gboolean
on_bus (GstBus *, GstMessage *msg, gpointer user_data)
{
  auto d = static_cast<Demo *> (user_data);
  switch (GST_MESSAGE_TYPE (msg)) {
    case GST_MESSAGE_WARNING:
    case GST_MESSAGE_ERROR: {
      const bool error = GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR;
      const pi0::tools::MessageParts m = pi0::tools::message_parts (msg);
      g_print ("%s from %s: %s\n", error ? "ERROR" : "warning", m.source.c_str (),
               m.message.c_str ());
      if (error && !m.debug.empty ())
        g_printerr ("  %s\n", m.debug.c_str ());
      if (error)
        g_main_loop_quit (d->loop);
      break;
    }
    case GST_MESSAGE_EOS:
      g_main_loop_quit (d->loop);
      break;
    case GST_MESSAGE_STATE_CHANGED: {
      /* --duration counts from PLAYING: opening the model can take seconds on a busy machine,
       * and counting those would leave a short run with no frames at all. */
      GstState state;
      gst_message_parse_state_changed (msg, nullptr, &state, nullptr);
      if (d->opt.live && !d->timing && GST_MESSAGE_SRC (msg) == GST_OBJECT (d->pipeline) &&
          state == GST_STATE_PLAYING) {
        d->timing = true;
        g_timeout_add ((guint)(d->opt.duration * 1000), on_timeout, d);
      }
      break;
    }
    default:
      break;
  }
  return TRUE;
}

void
print_latency (GstElement *sink)
{
  g_print ("\nLatency per chunk sent (pi0actionsink stats, from the stamps in the metas; running "
           "time on the pipeline clock):\n");
  guint64 n = pi0::tools::print_latency_table (sink);
  g_print ("  (%" G_GUINT64_FORMAT " chunks.) A camera whose frame covers the observation pairs at "
           "once; one that is late or stalled\n  is waited for at most pi0viewmux max-wait "
           "(--max-wait; -1 = the slowest camera's declared latency + max-skew).\n",
           n);
}

void
print_mux_stats (GstElement *mux)
{
  GstStructure *s = nullptr;
  g_object_get (mux, "stats", &s, nullptr);
  if (!s)
    return;
  g_print ("\nCameras (pi0viewmux):\n  %-5s %10s %8s %8s %8s\n", "view", "frames-in", "used",
           "skewed", "masked");
  for (const char *v : pi0::kViewNames) {
    const GValue *val = gst_structure_get_value (s, v);
    if (!val)
      continue;
    const GstStructure *vs = gst_value_get_structure (val);
    guint64 f[4] = {0};
    const char *names[4] = {"frames-in", "used", "skewed", "masked"};
    for (int i = 0; i < 4; i++)
      gst_structure_get_uint64 (vs, names[i], &f[i]);
    g_print ("  %-5s %10" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT
             " %8" G_GUINT64_FORMAT "\n",
             v, f[0], f[1], f[2], f[3]);
  }
  guint64 obs = 0, at_deadline = 0;
  gst_structure_get_uint64 (s, "observations", &obs);
  gst_structure_get_uint64 (s, "deadline-observations", &at_deadline);
  g_print ("  %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " observations were made at the live "
           "deadline (an input was stalled or late: a replay may pair them differently)\n",
           at_deadline, obs);
  gst_structure_free (s);
}

/* The simulated robot's log: how many rows it executed, rejected, and held. */
void
print_robot (const std::string &log_path)
{
  std::ifstream in (log_path);
  std::string line;
  guint64 executed = 0, rejected = 0, holds = 0;
  while (std::getline (in, line)) {
    if (line.find ("\"event\":\"execute\"") != std::string::npos)
      executed++;
    else if (line.find ("\"event\":\"reject\"") != std::string::npos)
      rejected++;
    else if (line.find ("\"event\":\"hold\"") != std::string::npos)
      holds++;
  }
  g_print ("\nRobot (pi0-robotsim over UDP on loopback): %" G_GUINT64_FORMAT
           " action rows executed, %" G_GUINT64_FORMAT " frames rejected, %" G_GUINT64_FORMAT
           " HOLDs (log: %s)\n",
           executed, rejected, holds, log_path.c_str ());
}

/* pi0-robotsim next to this program (build tree or installed). */
std::string
find_robotsim (const char *argv0)
{
  gchar *dir = g_path_get_dirname (argv0);
  std::string out;
  for (const char *rel : {"/pi0-robotsim/pi0-robotsim", "/pi0-robotsim"}) {
    std::string c = std::string (dir) + rel;
    if (out.empty () && g_file_test (c.c_str (), G_FILE_TEST_IS_EXECUTABLE) &&
        !g_file_test (c.c_str (), G_FILE_TEST_IS_DIR))
      out = c;
  }
  g_free (dir);
  if (out.empty ()) {
    gchar *p = g_find_program_in_path ("pi0-robotsim");
    if (p)
      out = p;
    g_free (p);
  }
  return out;
}

/* The simulator's process, stopped and reaped however the demo ends. */
struct RobotSim {
  GPid pid = 0;
  ~RobotSim () { stop (); }
  void stop ()
  {
    if (!pid)
      return;
    kill (pid, SIGTERM);
    int status = 0;
    waitpid (pid, &status, 0);
    g_spawn_close_pid (pid);
    pid = 0;
  }
};

/* Starts the simulator on UDP @port, publishing its joint state to @state_port as run.sh's
 * does; true once it listens. */
bool
start_robotsim (const std::string &bin, const std::string &config, int port, int state_port,
                const std::string &log, GPid *pid)
{
  const std::string port_arg = "--port=" + std::to_string (port),
                    state_to = "--state-to=127.0.0.1:" + std::to_string (state_port);
  const gchar *argv[] = {bin.c_str (),     "--proto=udp",   port_arg.c_str (), "--dim=7",
                         "--robot-config", config.c_str (), state_to.c_str (), "--log",
                         log.c_str (),     nullptr};
  gint out_fd = -1;
  GError *err = nullptr;
  if (!g_spawn_async_with_pipes (nullptr, (gchar **)argv, nullptr, G_SPAWN_DO_NOT_REAP_CHILD,
                                 nullptr, nullptr, pid, nullptr, &out_fd, nullptr, &err)) {
    g_printerr ("cannot start %s: %s\n", bin.c_str (), err->message);
    g_clear_error (&err);
    return false;
  }
  /* The first line says where it listens: {"event":"listening",...,"port":N}. With --log the
   * events go to the file; the listening line is also there, so read the file. */
  int listening = -1;
  for (int i = 0; i < 500 && listening < 0; i++) {
    std::ifstream in (log);
    std::string line;
    while (std::getline (in, line)) {
      auto at = line.find ("\"port\":");
      if (line.find ("listening") != std::string::npos && at != std::string::npos)
        listening = std::atoi (line.c_str () + at + 7);
    }
    if (listening < 0)
      g_usleep (10000);
  }
  if (out_fd >= 0)
    close (out_fd);
  return listening == port;
}

} // namespace

int
main (int argc, char **argv)
{
  Demo d;
  gboolean non_live = FALSE;
  GOptionEntry entries[] = {
      {"duration", 'd', 0, G_OPTION_ARG_DOUBLE, &d.opt.duration, "Seconds to run (default 5)", "S"},
      {"stall-start", 0, 0, G_OPTION_ARG_DOUBLE, &d.opt.stall_start,
       "When the top camera stalls, in seconds (default 1.5)", "S"},
      {"stall-end", 0, 0, G_OPTION_ARG_DOUBLE, &d.opt.stall_end,
       "When it comes back, in seconds (default 3.0)", "S"},
      {"print-every", 'n', 0, G_OPTION_ARG_INT, &d.opt.print_every,
       "Print every Nth observation (and each one where a view is masked or returns; default 10)",
       "N"},
      {"max-wait", 'w', 0, G_OPTION_ARG_DOUBLE, &d.opt.max_wait_ms,
       "pi0viewmux max-wait in ms: how long an observation waits for slower cameras (default: "
       "demo.txt's, 20; -1 = their full declared latency)",
       "MS"},
      {"instruction", 'i', 0, G_OPTION_ARG_STRING, &d.opt.instruction,
       "The instruction (default: demo.txt's, \"pick up the red cube\")", "TEXT"},
      {"rtc", 0, 0, G_OPTION_ARG_STRING, &d.opt.rtc,
       "pi0infer's real-time chunking: guided (demo.txt's default; the paper's VJP), "
       "guided-identity (J = I, as cheap as off) or off",
       "MODE"},
      {"non-live", 0, 0, G_OPTION_ARG_NONE, &non_live,
       "Cameras not live: each makes exactly --duration s of frames, the demo ends with them, no "
       "latency table; the robot's state still comes live, so it still runs in real time",
       nullptr},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr},
  };
  GError *err = nullptr;
  GOptionContext *ctx =
      g_option_context_new ("- gst-pi0 demo: three cameras and a robot state to a simulated robot");
  g_option_context_add_main_entries (ctx, entries, nullptr);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    g_printerr ("%s\n", err->message);
    g_option_context_free (ctx);
    return 2;
  }
  g_option_context_free (ctx);
  d.opt.live = !non_live;
  d.opt.print_every = std::max (d.opt.print_every, 1);
  gst_init (&argc, &argv);
  /* The elements are linked into this program, so it runs from the build tree as it is. */
  if (!gst_pi0_elements_register (nullptr)) {
    g_printerr ("could not register the gst-pi0 elements\n");
    return 1;
  }

  /* --rtc is checked against pi0infer's own enum before anything starts; without it the line's
   * own rtc stays. */
  if (d.opt.rtc) {
    GstElement *probe = gst_element_factory_make ("pi0infer", nullptr);
    GParamSpec *ps = g_object_class_find_property (G_OBJECT_GET_CLASS (probe), "rtc");
    GEnumClass *ec = G_ENUM_CLASS (g_type_class_ref (ps->value_type));
    const bool known = g_enum_get_value_by_nick (ec, d.opt.rtc) != nullptr;
    g_type_class_unref (ec);
    gst_object_unref (probe);
    if (!known) {
      g_printerr ("--rtc: '%s' is not one of off, guided, guided-identity\n", d.opt.rtc);
      return 2;
    }
  }

  /* Where pipelines/demo.txt and robot-7dof.json are: $PI0_DATA_DIR, the installed data
   * directory, then the source tree (a run from the build tree), as for pi0infer's tokenizer. */
  std::vector<std::string> dirs = {PI0_DATADIR, PI0_SOURCE_ROOT};
  if (const gchar *env_dir = g_getenv ("PI0_DATA_DIR"))
    dirs.insert (dirs.begin (), env_dir);
  std::string error, line;
  const std::string demo_txt = pi0::tools::find_data_file ("pipelines/demo.txt", dirs, &error);
  if (demo_txt.empty () || !pi0::tools::read_launch_line (demo_txt, &line, &error)) {
    g_printerr ("pi0-demo: %s\n", error.c_str ());
    return 1;
  }
  const std::string config = pi0::tools::find_data_file ("pipelines/robot-7dof.json", dirs, &error);
  if (config.empty ()) {
    g_printerr ("pi0-demo: %s\n", error.c_str ());
    return 1;
  }

  std::string robotsim = find_robotsim (argv[0]);
  if (robotsim.empty ()) {
    g_printerr ("pi0-robotsim not found next to %s or on PATH\n", argv[0]);
    return 1;
  }
  const std::vector<int> ports = free_udp_ports (2);
  if (ports.empty ()) {
    g_printerr ("pi0-demo: no free UDP port on 127.0.0.1\n");
    return 1;
  }
  const int port = ports[0], state_port = ports[1];

  /* The line's variables, as run.sh's environment would give them. MAX_WAIT only with
   * --max-wait: without it the line's default stays, as its instruction and rtc do. */
  pi0::tools::LineVars vars = {
      {"ROBOT_PORT", std::to_string (port)},
      {"STATE_PORT", std::to_string (state_port)},
      {"ROBOT_CONFIG", config},
      {"LIVE", d.opt.live ? "true" : "false"},
  };
  if (!std::isnan (d.opt.max_wait_ms))
    vars["MAX_WAIT"] = std::to_string (
        d.opt.max_wait_ms < 0 ? G_MAXUINT64 : (guint64)(d.opt.max_wait_ms * GST_MSECOND));
  std::string desc;
  if (!pi0::tools::expand_line_vars (line, vars, &desc, &error)) {
    g_printerr ("pi0-demo: %s: %s\n", demo_txt.c_str (), error.c_str ());
    return 1;
  }
  /* A recoverable error (an unknown property) is refused too: it is not the chain the file
   * says. */
  pi0::tools::ElementPtr pipeline = pi0::tools::launch (desc, &error);
  if (!pipeline) {
    g_printerr ("pi0-demo: %s: %s\n", demo_txt.c_str (), error.c_str ());
    return 1;
  }
  d.pipeline = pipeline.release ();

  /* The elements this program drives, by their names in the line. */
  const char *names[] = {"infer", "mux", "sink", "cam_main", "cam_side", "cam_top"};
  GstElement *el[G_N_ELEMENTS (names)] = {};
  bool all = true;
  for (size_t i = 0; i < G_N_ELEMENTS (names); i++) {
    el[i] = gst_bin_get_by_name (GST_BIN (d.pipeline), names[i]);
    if (!el[i]) {
      g_printerr ("pi0-demo: %s has no element named '%s'\n", demo_txt.c_str (), names[i]);
      all = false;
    }
  }
  const auto unref_all = [&] () {
    for (GstElement *e : el)
      if (e)
        gst_object_unref (e);
    gst_object_unref (d.pipeline);
  };
  if (!all) {
    unref_all ();
    return 1;
  }
  GstElement *infer = el[0], *mux = el[1], *sink = el[2], *top = el[5];

  /* Only now, with the line known good, the robot: it publishes its state from the start. */
  gchar *tmp = g_dir_make_tmp ("pi0-demo-XXXXXX", nullptr);
  const std::string robot_log = std::string (tmp) + "/robot.log";
  g_free (tmp);
  RobotSim sim;
  if (!start_robotsim (robotsim, config, port, state_port, robot_log, &sim.pid)) {
    g_printerr ("pi0-robotsim did not start on UDP port %d (see %s)\n", port, robot_log.c_str ());
    unref_all ();
    return 1;
  }

  if (d.opt.instruction)
    g_object_set (infer, "instruction", d.opt.instruction, nullptr);
  if (d.opt.rtc)
    gst_util_set_object_arg (G_OBJECT (infer), "rtc", d.opt.rtc);
  /* What runs, from the element: the line's values unless an option replaced them. */
  gchar *instruction = nullptr;
  g_object_get (infer, "instruction", &instruction, nullptr);
  GValue rtc_value = G_VALUE_INIT;
  g_value_init (&rtc_value,
                g_object_class_find_property (G_OBJECT_GET_CLASS (infer), "rtc")->value_type);
  g_object_get_property (G_OBJECT (infer), "rtc", &rtc_value);
  gchar *rtc = gst_value_serialize (&rtc_value);
  g_value_unset (&rtc_value);

  g_signal_connect (sink, "action", G_CALLBACK (on_action), &d);

  GstPad *pad = gst_element_get_static_pad (infer, "src");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, print_probe, &d, nullptr);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (top, "src");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, stall_probe, &d, nullptr);
  gst_object_unref (pad);

  double fps[pi0::kNumViews];
  std::string cameras;
  for (int i = 0; i < pi0::kNumViews; i++)
    cameras += (i ? ", " : "") + describe_camera (el[3 + i], pi0::kViewNames[i], &fps[i]);
  guint64 max_wait = 0;
  g_object_get (mux, "max-wait", &max_wait, nullptr);
  gchar *wait = max_wait == G_MAXUINT64 ? g_strdup ("the cameras' latency")
                                        : g_strdup_printf ("%g ms", (double)max_wait / GST_MSECOND);
  g_print ("gst-pi0 demo: 3 cameras (%s) + the robot's 7-joint state at 100 Hz over UDP\n"
           "  -> pi0viewmux (waits at most %s) -> cudaprep (CPU) -> pi0infer (builtin:pi0-tiny: "
           "UNTRAINED, random weights; its actions mean nothing; rtc=%s)\n"
           "  -> pi0actionsink -> udp://127.0.0.1:%d -> pi0-robotsim (its state back on "
           "udp://127.0.0.1:%d)\n"
           "Chain: %s, robot: %s.\n"
           "Instruction: \"%s\". The top camera stalls from %.1f s to %.1f s.\n"
           "Per view: frame age at the observation (* = older than max-skew).\n\n",
           cameras.c_str (), wait, rtc, port, state_port, demo_txt.c_str (), config.c_str (),
           instruction, d.opt.stall_start, d.opt.stall_end);
  g_free (wait);
  g_free (instruction);
  g_free (rtc);

  d.loop = g_main_loop_new (nullptr, FALSE);
  GstBus *bus = gst_element_get_bus (d.pipeline);
  gst_bus_add_watch (bus, on_bus, &d);
  gst_object_unref (bus);

  /* Live, on_bus starts the --duration timer once the pipeline plays. Non-live, the cameras
   * stop by themselves after the same amount of stream time, and the muxer ends with the main
   * one (the state's udpsrc never ends by itself). */
  for (int i = 0; i < pi0::kNumViews && !d.opt.live; i++)
    g_object_set (el[3 + i], "num-buffers", (int)(d.opt.duration * fps[i]), nullptr);

  gst_element_set_state (d.pipeline, GST_STATE_PLAYING);
  g_main_loop_run (d.loop);
  gst_element_set_state (d.pipeline, GST_STATE_NULL);

  /* Stop the robot and read what it did. */
  sim.stop ();

  GstStructure *is = nullptr;
  g_object_get (infer, "stats", &is, nullptr);
  guint64 chunks = 0, non_finite = 0;
  double p50 = 0, p99 = 0;
  gst_structure_get_uint64 (is, "chunks", &chunks);
  gst_structure_get_uint64 (is, "non-finite", &non_finite);
  gst_structure_get_double (is, "inference-p50-ms", &p50);
  gst_structure_get_double (is, "inference-p99-ms", &p99);
  gst_structure_free (is);
  guint64 observations = 0;
  GstStructure *ms = nullptr;
  g_object_get (mux, "stats", &ms, nullptr);
  if (ms) {
    gst_structure_get_uint64 (ms, "observations", &observations);
    gst_structure_free (ms);
  }

  g_print ("\nSummary: %" G_GUINT64_FORMAT " observations, %" G_GUINT64_FORMAT
           " action chunks (inference p50 %.2f ms, p99 %.2f ms; %" G_GUINT64_FORMAT
           " non-finite), %" G_GUINT64_FORMAT " sent to the robot, %" G_GUINT64_FORMAT
           " HOLDs, %" G_GUINT64_FORMAT " STOPs\n",
           observations, chunks, p50, p99, non_finite, d.chunks, d.holds, d.stops);
  print_mux_stats (mux);
  print_robot (robot_log);
  if (d.opt.live)
    print_latency (sink);

  unref_all ();
  g_main_loop_unref (d.loop);
  g_free (d.opt.instruction);
  g_free (d.opt.rtc);
  return d.chunks > 0 ? 0 : 1;
}
