/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0-demo: the whole gst-pi0 chain on synthetic input, with a simulated robot at the end.
 *
 * Three test cameras of different sizes, formats and rates and a synthetic 7-joint state feed
 * pi0viewmux -> cudaprep -> pi0infer (the builtin, untrained pi0-tiny) -> pi0actionsink, which
 * sends the chunks over UDP on loopback to pi0-robotsim. The top camera stalls for a while
 * mid-run (--stall-start/--stall-end), so the output shows it masked and coming back. It
 * prints observations with their first action as they go, and at the end a summary:
 * observations, chunks, what the simulated robot executed, and the latency of each stage
 * from the camera's capture to the frame leaving for the robot. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstpi0elements.h"
#include "pi0-latency-table.h"

#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include <glib/gstdio.h>
#include <signal.h>
#include <sys/wait.h>

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
  double max_wait_ms = 20.0;
  bool live = true;
  gchar *instruction = nullptr;
  gchar *rtc = nullptr;
};

struct Demo {
  Options opt;
  GMainLoop *loop = nullptr;
  GstElement *pipeline = nullptr;
  guint64 state_n = 0;
  guint last_mask = 0;
  std::mutex lock; /* counters: the sink's signal comes from two threads */
  guint64 chunks = 0, holds = 0, stops = 0;
};

#ifndef HAVE_PI0INFER
#error "pi0-demo needs pi0infer (a build with LibTorch)"
#endif

const char *PIPELINE =
    "pi0viewmux name=mux max-staleness=200000000 max-state-age=50000000 max-wait=%" G_GUINT64_FORMAT
    " ! "
    "cudaprep name=prep width=32 height=32 ! queue max-size-buffers=1 leaky=downstream ! "
    "pi0infer name=infer model=builtin:pi0-tiny action-dims=7 rtc=guided ! "
    "pi0actionsink name=sink target=udp://127.0.0.1:%d robot-config=%s mode=chunk "
    "max-action-age=500000000 "
    "videotestsrc is-live=%s pattern=smpte name=cam_main ! "
    "video/x-raw,format=RGB,width=640,height=480,framerate=30/1 ! queue ! mux.main "
    "videotestsrc is-live=%s pattern=ball name=cam_side ! "
    "video/x-raw,format=NV12,width=320,height=240,framerate=15/1 ! queue ! mux.side "
    "videotestsrc is-live=%s pattern=snow name=cam_top ! "
    "video/x-raw,format=I420,width=1280,height=720,framerate=10/1 ! queue ! mux.top "
    "appsrc name=state is-live=%s format=time caps=application/x-pi0-state,dim=(int)7 ! "
    "queue ! mux.state";

const char *ROBOT_CONFIG = R"({
  "joints":   ["j1", "j2", "j3", "j4", "j5", "j6", "gripper"],
  "lower":    [-3.0, -3.0, -3.0, -3.0, -3.0, -3.0, 0.0],
  "upper":    [ 3.0,  3.0,  3.0,  3.0,  3.0,  3.0, 1.0],
  "max_step": [ 0.5,  0.5,  0.5,  0.5,  0.5,  0.5, 0.5],
  "initial":  [ 0.0,  0.0,  0.0,  0.0,  0.0,  0.0, 0.0]
}
)";

/* A 7-joint arm waving slowly: the state a robot would publish at 100 Hz. */
void
on_need_state (GstAppSrc *src, guint, gpointer user_data)
{
  auto d = static_cast<Demo *> (user_data);
  GstClockTime t = d->state_n * 10 * GST_MSECOND;
  if (t > (GstClockTime)((d->opt.duration + 1.0) * GST_SECOND)) {
    gst_app_src_end_of_stream (src);
    return;
  }
  float joints[7];
  for (int j = 0; j < 7; j++)
    joints[j] = (float)(0.5 * std::sin (2.0 * M_PI * 0.25 * (double)t / GST_SECOND + j));
  GstBuffer *buf = gst_buffer_new_memdup (joints, sizeof (joints));
  GST_BUFFER_PTS (buf) = t;
  GST_BUFFER_DURATION (buf) = 10 * GST_MSECOND;
  d->state_n++;
  gst_app_src_push_buffer (src, buf);
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
on_bus (GstBus *, GstMessage *msg, gpointer user_data)
{
  auto d = static_cast<Demo *> (user_data);
  switch (GST_MESSAGE_TYPE (msg)) {
    case GST_MESSAGE_WARNING:
    case GST_MESSAGE_ERROR: {
      GError *err = nullptr;
      gchar *dbg = nullptr;
      bool error = GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR;
      if (error)
        gst_message_parse_error (msg, &err, &dbg);
      else
        gst_message_parse_warning (msg, &err, &dbg);
      g_print ("%s from %s: %s\n", error ? "ERROR" : "warning", GST_OBJECT_NAME (msg->src),
               err->message);
      if (error && dbg)
        g_printerr ("  %s\n", dbg);
      g_clear_error (&err);
      g_free (dbg);
      if (error)
        g_main_loop_quit (d->loop);
      break;
    }
    case GST_MESSAGE_EOS:
      g_main_loop_quit (d->loop);
      break;
    default:
      break;
  }
  return TRUE;
}

gboolean
on_timeout (gpointer user_data)
{
  auto d = static_cast<Demo *> (user_data);
  /* Let every element see EOS: the sink sends HOLD, the robot simulator logs it. */
  gst_element_send_event (d->pipeline, gst_event_new_eos ());
  return G_SOURCE_REMOVE;
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
  for (const char *v : {"main", "side", "top"}) {
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

/* Starts the simulator on a free UDP port; returns its port, or -1. */
int
start_robotsim (const std::string &bin, const std::string &config, const std::string &log,
                GPid *pid)
{
  const gchar *argv[] = {
      bin.c_str (), "--proto",        "udp",           "--port", "0",          "--dim",
      "7",          "--robot-config", config.c_str (), "--log",  log.c_str (), nullptr};
  gint out_fd = -1;
  GError *err = nullptr;
  if (!g_spawn_async_with_pipes (nullptr, (gchar **)argv, nullptr, G_SPAWN_DO_NOT_REAP_CHILD,
                                 nullptr, nullptr, pid, nullptr, &out_fd, nullptr, &err)) {
    g_printerr ("cannot start %s: %s\n", bin.c_str (), err->message);
    g_clear_error (&err);
    return -1;
  }
  /* The first line says where it listens: {"event":"listening",...,"port":N}. With --log the
   * events go to the file; the listening line is also there, so read the file. */
  int port = -1;
  for (int i = 0; i < 500 && port < 0; i++) {
    std::ifstream in (log);
    std::string line;
    while (std::getline (in, line)) {
      auto at = line.find ("\"port\":");
      if (line.find ("listening") != std::string::npos && at != std::string::npos)
        port = std::atoi (line.c_str () + at + 7);
    }
    if (port < 0)
      g_usleep (10000);
  }
  if (out_fd >= 0)
    close (out_fd);
  return port;
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
       "pi0viewmux max-wait in ms: how long an observation waits for slower cameras (default 20; "
       "-1 = their full declared latency)",
       "MS"},
      {"instruction", 'i', 0, G_OPTION_ARG_STRING, &d.opt.instruction,
       "The instruction (default \"pick up the red cube\")", "TEXT"},
      {"rtc", 0, 0, G_OPTION_ARG_STRING, &d.opt.rtc,
       "pi0infer's real-time chunking: guided (default; the paper's VJP), guided-identity (J = I, "
       "as cheap as off) or off",
       "MODE"},
      {"non-live", 0, 0, G_OPTION_ARG_NONE, &non_live,
       "Run as fast as possible instead of in real time (no latency figures)", nullptr},
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
  const char *instruction = d.opt.instruction ? d.opt.instruction : "pick up the red cube";

  gst_init (&argc, &argv);
  /* The elements are linked into this program, so it runs from the build tree as it is. */
  if (!gst_pi0_elements_register (nullptr)) {
    g_printerr ("could not register the gst-pi0 elements\n");
    return 1;
  }

  /* --rtc is checked against pi0infer's own enum before anything starts. */
  const char *rtc = d.opt.rtc ? d.opt.rtc : "guided";
  {
    GstElement *probe = gst_element_factory_make ("pi0infer", nullptr);
    GParamSpec *ps = g_object_class_find_property (G_OBJECT_GET_CLASS (probe), "rtc");
    GEnumClass *ec = G_ENUM_CLASS (g_type_class_ref (ps->value_type));
    const bool known = g_enum_get_value_by_nick (ec, rtc) != nullptr;
    g_type_class_unref (ec);
    gst_object_unref (probe);
    if (!known) {
      g_printerr ("--rtc: '%s' is not one of off, guided, guided-identity\n", rtc);
      return 2;
    }
  }

  gchar *tmp = g_dir_make_tmp ("pi0-demo-XXXXXX", nullptr);
  std::string config = std::string (tmp) + "/robot.json",
              robot_log = std::string (tmp) + "/robot.log";
  g_file_set_contents (config.c_str (), ROBOT_CONFIG, -1, nullptr);
  std::string robotsim = find_robotsim (argv[0]);
  if (robotsim.empty ()) {
    g_printerr ("pi0-robotsim not found next to %s or on PATH\n", argv[0]);
    return 1;
  }
  GPid sim_pid = 0;
  int port = start_robotsim (robotsim, config, robot_log, &sim_pid);
  if (port <= 0) {
    g_printerr ("pi0-robotsim did not start (see %s)\n", robot_log.c_str ());
    return 1;
  }

  const char *live = d.opt.live ? "true" : "false";
  gchar *desc = g_strdup_printf (
      PIPELINE, d.opt.max_wait_ms < 0 ? G_MAXUINT64 : (guint64)(d.opt.max_wait_ms * GST_MSECOND),
      port, config.c_str (), live, live, live, live);
  d.pipeline = gst_parse_launch (desc, &err);
  g_free (desc);
  if (!d.pipeline) {
    g_printerr ("pipeline: %s\n", err ? err->message : "?");
    return 1;
  }
  GstElement *infer = gst_bin_get_by_name (GST_BIN (d.pipeline), "infer");
  g_object_set (infer, "instruction", instruction, nullptr);
  gst_util_set_object_arg (G_OBJECT (infer), "rtc", rtc);

  GstElement *mux = gst_bin_get_by_name (GST_BIN (d.pipeline), "mux");
  GstElement *sink = gst_bin_get_by_name (GST_BIN (d.pipeline), "sink");
  GstElement *top = gst_bin_get_by_name (GST_BIN (d.pipeline), "cam_top");
  GstElement *state = gst_bin_get_by_name (GST_BIN (d.pipeline), "state");
  g_signal_connect (state, "need-data", G_CALLBACK (on_need_state), &d);
  g_signal_connect (sink, "action", G_CALLBACK (on_action), &d);

  GstPad *pad = gst_element_get_static_pad (infer, "src");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, print_probe, &d, nullptr);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (top, "src");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, stall_probe, &d, nullptr);
  gst_object_unref (pad);

  g_print ("gst-pi0 demo: 3 cameras (main 640x480 RGB 30 fps, side 320x240 NV12 15 fps, top "
           "1280x720 I420 10 fps) + a 7-joint state at 100 Hz\n"
           "  -> pi0viewmux -> cudaprep (CPU) -> pi0infer (builtin:pi0-tiny: UNTRAINED, random "
           "weights; its actions mean nothing; rtc=%s)\n"
           "  -> pi0actionsink -> udp://127.0.0.1:%d -> pi0-robotsim\n"
           "Instruction: \"%s\". The top camera stalls from %.1f s to %.1f s.\n"
           "Per view: frame age at the observation (* = older than max-skew).\n\n",
           rtc, port, instruction, d.opt.stall_start, d.opt.stall_end);

  d.loop = g_main_loop_new (nullptr, FALSE);
  GstBus *bus = gst_element_get_bus (d.pipeline);
  gst_bus_add_watch (bus, on_bus, &d);
  gst_object_unref (bus);

  if (!d.opt.live) {
    /* Non-live: the cameras stop by themselves after the same amount of stream time. */
    int n[3] = {(int)(d.opt.duration * 30), (int)(d.opt.duration * 15), (int)(d.opt.duration * 10)};
    const char *names[3] = {"cam_main", "cam_side", "cam_top"};
    for (int i = 0; i < 3; i++) {
      GstElement *src = gst_bin_get_by_name (GST_BIN (d.pipeline), names[i]);
      g_object_set (src, "num-buffers", n[i], nullptr);
      gst_object_unref (src);
    }
  } else {
    g_timeout_add ((guint)(d.opt.duration * 1000), on_timeout, &d);
  }

  gst_element_set_state (d.pipeline, GST_STATE_PLAYING);
  g_main_loop_run (d.loop);
  gst_element_set_state (d.pipeline, GST_STATE_NULL);

  /* Stop the robot and read what it did. */
  kill (sim_pid, SIGTERM);
  int status = 0;
  waitpid (sim_pid, &status, 0);
  g_spawn_close_pid (sim_pid);

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

  for (GstElement *e : {infer, mux, sink, top, state})
    gst_object_unref (e);
  gst_object_unref (d.pipeline);
  g_main_loop_unref (d.loop);
  g_unlink (config.c_str ());
  g_free (tmp);
  g_free (d.opt.instruction);
  return d.chunks > 0 ? 0 : 1;
}
