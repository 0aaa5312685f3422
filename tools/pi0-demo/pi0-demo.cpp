/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0-demo: runs the longest gst-pi0 chain that exists today on synthetic cameras and prints
 * what a robot would get: one line per observation (which views are valid, how old each
 * frame is, the robot state) and a summary at the end.
 *
 * Three test cameras of different sizes, formats and rates feed pi0viewmux with a synthetic
 * joint state; the top camera stalls for a while mid-run (--stall), so the output shows it
 * being masked and coming back. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstpi0elements.h"

#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace
{

struct Options {
  double duration = 5.0;
  double stall_start = 1.5, stall_end = 3.0;
  int print_every = 5;
  bool live = true;
};

struct Demo {
  Options opt;
  GMainLoop *loop = nullptr;
  GstElement *pipeline = nullptr;
  GstElement *state_src = nullptr;
  guint64 state_n = 0;
  guint64 observations = 0;
  guint64 printed = 0;
  guint last_mask = 0;
  GstClockTime first_pts = GST_CLOCK_TIME_NONE;
};

const char *PIPELINE =
    "pi0viewmux name=mux max-staleness=200000000 max-state-age=50000000 ! fakesink name=out "
    "sync=false "
    "videotestsrc is-live=%s pattern=smpte name=cam_main ! "
    "video/x-raw,format=RGB,width=640,height=480,framerate=30/1 ! queue ! mux.main "
    "videotestsrc is-live=%s pattern=ball name=cam_side ! "
    "video/x-raw,format=NV12,width=320,height=240,framerate=15/1 ! queue ! mux.side "
    "videotestsrc is-live=%s pattern=snow name=cam_top ! "
    "video/x-raw,format=I420,width=1280,height=720,framerate=10/1 ! queue ! mux.top "
    "appsrc name=state is-live=%s format=time do-timestamp=false "
    "caps=application/x-pi0-state,dim=(int)7 ! queue ! mux.state";

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
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  double t = (double)GST_BUFFER_PTS (buf) / GST_SECOND;
  return t >= d->opt.stall_start && t < d->opt.stall_end ? GST_PAD_PROBE_DROP : GST_PAD_PROBE_OK;
}

std::string
view_summary (const GstPi0View *v, GstClockTime obs_time)
{
  char line[160];
  if (!(v->flags & GST_PI0_VIEW_FLAG_VALID)) {
    snprintf (line, sizeof (line), "%-4s MASKED%-22s", v->name, "");
    return line;
  }
  double age_ms = v->capture_time <= obs_time ? (double)(obs_time - v->capture_time) / GST_MSECOND
                                              : -(double)(v->capture_time - obs_time) / GST_MSECOND;
  snprintf (line, sizeof (line), "%-4s %4dx%-4d %-4s %5.1f ms%s", v->name,
            GST_VIDEO_INFO_WIDTH (&v->info), GST_VIDEO_INFO_HEIGHT (&v->info),
            gst_video_format_to_string (GST_VIDEO_INFO_FORMAT (&v->info)), age_ms,
            (v->flags & GST_PI0_VIEW_FLAG_SKEWED) ? "*" : " ");
  return line;
}

GstPadProbeReturn
print_probe (GstPad *, GstPadProbeInfo *info, gpointer user_data)
{
  auto d = static_cast<Demo *> (user_data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstPi0ObservationMeta *m = gst_buffer_get_pi0_observation_meta (buf);
  if (!m)
    return GST_PAD_PROBE_OK;
  d->observations++;
  guint mask = 0;
  for (guint i = 0; i < m->n_views; i++)
    mask |= (m->views[i].flags & GST_PI0_VIEW_FLAG_VALID) ? 0 : (1u << i);
  /* Every Nth observation, and every one where a view was masked or came back. */
  bool changed = mask != d->last_mask;
  d->last_mask = mask;
  if (m->sequence % d->opt.print_every != 0 && !changed)
    return GST_PAD_PROBE_OK;
  d->printed++;
  std::string line;
  char head[64];
  snprintf (head, sizeof (head), "obs %4" G_GUINT64_FORMAT " t=%6.3fs  ", m->sequence,
            (double)m->observation_time / GST_SECOND);
  line += head;
  for (guint i = 0; i < m->n_views; i++)
    line += view_summary (&m->views[i], m->observation_time) + " | ";
  guint dim = 0;
  const gfloat *st = gst_pi0_observation_meta_get_state (m, &dim);
  if (st) {
    char s[96];
    snprintf (s, sizeof (s), "state[%u] %+.2f %+.2f %+.2f ..%s", dim, st[0], st[1], st[2],
              (m->state_flags & GST_PI0_STATE_FLAG_STALE) ? " STALE" : "");
    line += s;
  } else {
    line += "no state";
  }
  g_print ("%s\n", line.c_str ());
  return GST_PAD_PROBE_OK;
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
  /* Let the sources finish cleanly so every element sees EOS. */
  gst_element_send_event (d->pipeline, gst_event_new_eos ());
  return G_SOURCE_REMOVE;
}

void
print_stats (GstElement *mux)
{
  GstStructure *s = nullptr;
  g_object_get (mux, "stats", &s, nullptr);
  if (!s)
    return;
  guint64 obs = 0, rejected = 0, stale = 0;
  gst_structure_get_uint64 (s, "observations", &obs);
  gst_structure_get_uint64 (s, "state-rejected", &rejected);
  gst_structure_get_uint64 (s, "state-stale", &stale);
  g_print ("\nSummary: %" G_GUINT64_FORMAT
           " observations; state samples rejected %" G_GUINT64_FORMAT
           ", observations with missing/stale state %" G_GUINT64_FORMAT "\n",
           obs, rejected, stale);
  g_print ("  %-5s %10s %8s %8s %8s %8s %8s\n", "view", "frames-in", "used", "skewed", "masked",
           "late", "dropped");
  for (const char *v : {"main", "side", "top"}) {
    const GValue *val = gst_structure_get_value (s, v);
    if (!val)
      continue;
    const GstStructure *vs = gst_value_get_structure (val);
    guint64 f[6] = {0};
    const char *names[6] = {"frames-in", "used", "skewed", "masked", "late", "dropped"};
    for (int i = 0; i < 6; i++)
      gst_structure_get_uint64 (vs, names[i], &f[i]);
    g_print ("  %-5s %10" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT
             " %8" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT "\n",
             v, f[0], f[1], f[2], f[3], f[4], f[5]);
  }
  gst_structure_free (s);
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
       "Print every Nth observation (and each one where a view is masked or returns; default 5)",
       "N"},
      {"non-live", 0, 0, G_OPTION_ARG_NONE, &non_live,
       "Run as fast as possible instead of in real time", nullptr},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr},
  };
  GError *err = nullptr;
  GOptionContext *ctx = g_option_context_new ("- gst-pi0 demo: three cameras and a robot state");
  g_option_context_add_main_entries (ctx, entries, nullptr);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    g_printerr ("%s\n", err->message);
    g_option_context_free (ctx);
    return 2;
  }
  g_option_context_free (ctx);
  d.opt.live = !non_live;
  if (d.opt.print_every < 1)
    d.opt.print_every = 1;

  gst_init (&argc, &argv);
  /* The elements are linked into this program, so it runs from the build tree as it is. */
  if (!gst_pi0_elements_register (nullptr)) {
    g_printerr ("could not register the gst-pi0 elements\n");
    return 1;
  }

  const char *live = d.opt.live ? "true" : "false";
  gchar *desc = g_strdup_printf (PIPELINE, live, live, live, live);
  d.pipeline = gst_parse_launch (desc, &err);
  g_free (desc);
  if (!d.pipeline) {
    g_printerr ("pipeline: %s\n", err ? err->message : "?");
    return 1;
  }

  GstElement *mux = gst_bin_get_by_name (GST_BIN (d.pipeline), "mux");
  GstElement *top = gst_bin_get_by_name (GST_BIN (d.pipeline), "cam_top");
  d.state_src = gst_bin_get_by_name (GST_BIN (d.pipeline), "state");
  g_signal_connect (d.state_src, "need-data", G_CALLBACK (on_need_state), &d);
  GstPad *pad = gst_element_get_static_pad (top, "src");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, stall_probe, &d, nullptr);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (mux, "src");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, print_probe, &d, nullptr);
  gst_object_unref (pad);

  g_print ("gst-pi0 demo: 3 cameras (main 640x480 RGB 30 fps, side 320x240 NV12 15 fps, top "
           "1280x720 I420 10 fps) + a 7-joint state at 100 Hz -> pi0viewmux.\n"
           "The top camera stalls from %.1f s to %.1f s. Not yet in this chain: cudaprep, "
           "pi0infer, pi0actionsink (age = frame age at the observation; * = skewed).\n\n",
           d.opt.stall_start, d.opt.stall_end);

  d.loop = g_main_loop_new (nullptr, FALSE);
  GstBus *bus = gst_element_get_bus (d.pipeline);
  gst_bus_add_watch (bus, on_bus, &d);
  gst_object_unref (bus);

  /* Non-live: the sources stop by themselves after the same amount of stream time. */
  if (!d.opt.live) {
    int n[3] = {(int)(d.opt.duration * 30), (int)(d.opt.duration * 15), (int)(d.opt.duration * 10)};
    const char *names[3] = {"cam_main", "cam_side", "cam_top"};
    for (int i = 0; i < 3; i++) {
      GstElement *src = gst_bin_get_by_name (GST_BIN (d.pipeline), names[i]);
      if (src) {
        g_object_set (src, "num-buffers", n[i], nullptr);
        gst_object_unref (src);
      }
    }
  } else {
    g_timeout_add ((guint)(d.opt.duration * 1000), on_timeout, &d);
  }

  gst_element_set_state (d.pipeline, GST_STATE_PLAYING);
  g_main_loop_run (d.loop);
  print_stats (mux);
  gst_element_set_state (d.pipeline, GST_STATE_NULL);

  gst_object_unref (mux);
  gst_object_unref (top);
  gst_object_unref (d.state_src);
  gst_object_unref (d.pipeline);
  g_main_loop_unref (d.loop);
  return d.observations > 0 ? 0 : 1;
}
