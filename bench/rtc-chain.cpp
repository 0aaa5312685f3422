/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench/rtc-chain: chunk-switch jumps on the whole chain, rtc=off vs rtc=guided (issue 13).
 *
 * Three live synthetic cameras -> pi0viewmux -> cudaprep -> leaky queue -> pi0infer (rtc=X)
 * -> pi0actionsink mode=stream (a robot configuration with max_step) for --duration seconds,
 * once per rtc mode. The control rate is high enough that several rows run during each
 * inference. What the sink sends each tick is recorded from its `action` signal, the chunks as
 * the policy made them from a probe on pi0infer's src pad. At each tick where the sink switches
 * to a new chunk, the jump is the largest |requested row of the new chunk - row sent the tick
 * before| over the joints, before the sink's clamp; the clamped rows are the sink's
 * stats.clamped. The within-chunk step (same measure between consecutive ticks of one chunk) is
 * printed as the floor a policy's own motion sets, and the plan change (the new chunk's row vs
 * the row the old chunk had for the same tick) isolates what the switch itself adds.
 *
 *   rtc-chain --duration 8 --rate 100 --max-step 0.5 --csv-dir /tmp/rtc
 *
 * With --csv-dir, one CSV per mode (time, chunk, row, switch, joint 0 sent and requested) for
 * scripts/rtc_plot.py. Never asserted: numbers go to docs/perf.md with machine, date, command. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "bench/pi0benchutil.h"
#include "tools/common/pi0gsttools.h"

#include <glib/gstdio.h>
#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace
{

struct Options {
  double duration = 8.0;
  double rate = 100.0;
  double max_step = 0.5;
  int fps = 30;
  int num_steps = 10;
  gchar *csv_dir = nullptr;
  gchar *modes = nullptr;
  gchar *model = nullptr;
};

struct Row {
  guint64 chunk;
  guint step;
  std::vector<float> sent;
  gint64 t_us;
};

struct Recording {
  std::mutex m;
  std::vector<Row> rows;
  std::map<guint64, std::vector<float>> chunks; /* sequence -> horizon x dim, as made */
  guint dim = 0;
};

void
on_action (GstElement *, const gchar *kind, guint64 chunk, guint step, guint steps, guint dim,
           GBytes *values, gpointer ud)
{
  if (g_strcmp0 (kind, "action") != 0 || steps != 1)
    return;
  Recording *r = (Recording *)ud;
  gsize len = 0;
  const float *v = (const float *)g_bytes_get_data (values, &len);
  std::lock_guard<std::mutex> g (r->m);
  r->dim = dim;
  r->rows.push_back ({chunk, step, std::vector<float> (v, v + dim), g_get_monotonic_time ()});
}

GstPadProbeReturn
on_chunk (GstPad *, GstPadProbeInfo *info, gpointer ud)
{
  Recording *r = (Recording *)ud;
  GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER (info);
  if (GstPi0ActionMeta *am = b ? gst_buffer_get_pi0_action_meta (b) : nullptr) {
    std::lock_guard<std::mutex> g (r->m);
    r->chunks[am->sequence].assign (am->actions, am->actions + (size_t)am->horizon * am->dim);
  }
  return GST_PAD_PROBE_OK;
}

double
max_abs_diff (const float *a, const float *b, guint dim)
{
  double m = 0;
  for (guint j = 0; j < dim; j++)
    m = std::max (m, (double)std::fabs (a[j] - b[j]));
  return m;
}

double
pct (std::vector<double> v, double q)
{
  if (v.empty ())
    return 0;
  std::sort (v.begin (), v.end ());
  return v[(size_t)std::min<double> (v.size () - 1, q * (v.size () - 1) + 0.5)];
}

struct Result {
  std::string mode;
  guint64 chunks = 0, switches = 0, clamped = 0, sent = 0, guided = 0;
  double jump_max = 0, jump_p50 = 0, within_p99 = 0, within_max = 0, infer_p50 = 0;
  double plan_max = 0, plan_p50 = 0;
  double delay_rows = 0;
};

bool
run_mode (const Options &o, const std::string &mode, const std::string &robot_json, Result *res)
{
  std::string desc =
      "pi0viewmux name=mux ! cudaprep width=32 height=32 ! queue max-size-buffers=1 "
      "leaky=downstream ! pi0infer name=infer model=\"" +
      std::string (o.model ? o.model : "builtin:pi0-tiny") +
      "\" device=cpu seed=1 require-state=false num-steps=" + std::to_string (o.num_steps) +
      " rtc=" + mode +
      " ! pi0actionsink name=sink mode=stream control-rate=" + std::to_string (o.rate) +
      " robot-config=" + robot_json +
      " target=file:///dev/null hold-timeout=" + std::to_string ((guint64)(2 * GST_SECOND)) +
      " stop-timeout=" + std::to_string ((guint64)(4 * GST_SECOND)) + " ";
  desc += pi0::bench::live_cameras (
      "video/x-raw,width=64,height=48,framerate=" + std::to_string (o.fps) + "/1");
  std::string error;
  const pi0::tools::ElementPtr pipeline = pi0::tools::launch (desc, &error);
  if (!pipeline) {
    g_printerr ("pipeline: %s\n", error.c_str ());
    return false;
  }
  GstElement *pipe = pipeline.get ();
  GstElement *infer = gst_bin_get_by_name (GST_BIN (pipe), "infer");
  GstElement *sink = gst_bin_get_by_name (GST_BIN (pipe), "sink");
  Recording rec;
  g_signal_connect (sink, "action", G_CALLBACK (on_action), &rec);
  GstPad *src = gst_element_get_static_pad (infer, "src");
  gst_pad_add_probe (src, GST_PAD_PROBE_TYPE_BUFFER, on_chunk, &rec, nullptr);
  gst_object_unref (src);

  GstBus *bus = gst_element_get_bus (pipe);
  bool ok = true;
  if (gst_element_set_state (pipe, GST_STATE_PAUSED) == GST_STATE_CHANGE_FAILURE ||
      gst_element_get_state (pipe, nullptr, nullptr, GST_CLOCK_TIME_NONE) ==
          GST_STATE_CHANGE_FAILURE)
    ok = false;
  if (ok) {
    gst_element_set_state (pipe, GST_STATE_PLAYING);
    const pi0::tools::MessagePtr m (gst_bus_timed_pop_filtered (
        bus, (GstClockTime)(o.duration * GST_SECOND), GST_MESSAGE_ERROR));
    if (m) {
      g_printerr ("error: %s\n", pi0::tools::message_text (m.get ()).c_str ());
      ok = false;
    }
  }
  res->mode = mode;
  res->chunks = pi0::bench::stat<guint64> (infer, "chunks");
  res->guided = pi0::bench::stat<guint64> (infer, "rtc-guided");
  res->infer_p50 = pi0::bench::stat<double> (infer, "inference-p50-ms");
  res->delay_rows = (double)pi0::bench::stat<guint64> (infer, "rtc-delay");
  res->clamped = pi0::bench::stat<guint64> (sink, "clamped");
  res->sent = pi0::bench::stat<guint64> (sink, "sent");
  gst_element_set_state (pipe, GST_STATE_NULL);

  /* Jumps at switches (before the clamp) and the steps within chunks. */
  std::vector<double> jumps, within, plan;
  FILE *csv = nullptr;
  if (o.csv_dir) {
    std::string path = std::string (o.csv_dir) + "/rtc-" + mode + ".csv";
    g_mkdir_with_parents (o.csv_dir, 0755);
    csv = fopen (path.c_str (), "w");
    if (csv)
      fprintf (csv, "t_s,chunk,row,switch,sent0,requested0\n");
    else
      g_printerr ("rtc-chain: cannot write %s: %s\n", path.c_str (), g_strerror (errno));
  }
  const guint dim = rec.dim;
  for (size_t i = 1; i < rec.rows.size (); i++) {
    const Row &prev = rec.rows[i - 1], &cur = rec.rows[i];
    auto it = rec.chunks.find (cur.chunk);
    if (it == rec.chunks.end () || (size_t)(cur.step + 1) * dim > it->second.size ())
      continue;
    const float *requested = it->second.data () + (size_t)cur.step * dim;
    const double d = max_abs_diff (requested, prev.sent.data (), dim);
    const bool sw = cur.chunk != prev.chunk;
    (sw ? jumps : within).push_back (d);
    /* The change of plan: the new chunk's row vs the row the old chunk had for this tick. */
    auto old = rec.chunks.find (prev.chunk);
    if (sw && old != rec.chunks.end () && (size_t)(prev.step + 2) * dim <= old->second.size ())
      plan.push_back (
          max_abs_diff (requested, old->second.data () + (size_t)(prev.step + 1) * dim, dim));
    if (csv)
      fprintf (csv, "%.4f,%" G_GUINT64_FORMAT ",%u,%d,%.6f,%.6f\n",
               (double)(cur.t_us - rec.rows[0].t_us) / 1e6, cur.chunk, cur.step, sw ? 1 : 0,
               cur.sent[0], requested[0]);
  }
  if (csv)
    fclose (csv);
  res->switches = jumps.size ();
  res->jump_max = jumps.empty () ? 0 : *std::max_element (jumps.begin (), jumps.end ());
  res->jump_p50 = pct (jumps, 0.5);
  res->within_p99 = pct (within, 0.99);
  res->plan_max = plan.empty () ? 0 : *std::max_element (plan.begin (), plan.end ());
  res->plan_p50 = pct (plan, 0.5);
  res->within_max = within.empty () ? 0 : *std::max_element (within.begin (), within.end ());

  gst_object_unref (bus);
  gst_object_unref (infer);
  gst_object_unref (sink);
  return ok;
}

} // namespace

int
main (int argc, char **argv)
{
  Options o;
  GOptionEntry entries[] = {
      {"duration", 'd', 0, G_OPTION_ARG_DOUBLE, &o.duration, "seconds per mode (default 8)", "S"},
      {"rate", 'r', 0, G_OPTION_ARG_DOUBLE, &o.rate, "control rate in Hz (default 100)", "HZ"},
      {"max-step", 0, 0, G_OPTION_ARG_DOUBLE, &o.max_step,
       "robot configuration's max_step for every joint (default 0.5)", "X"},
      {"fps", 0, 0, G_OPTION_ARG_INT, &o.fps, "camera rate (default 30)", "N"},
      {"num-steps", 0, 0, G_OPTION_ARG_INT, &o.num_steps, "flow-matching steps (default 10)", "N"},
      {"modes", 0, 0, G_OPTION_ARG_STRING, &o.modes,
       "comma-separated rtc modes (default off,guided,guided-identity)", "M"},
      {"model", 'm', 0, G_OPTION_ARG_FILENAME, &o.model,
       "pi0infer's model (default builtin:pi0-tiny; models/pi0-tiny-sines is smooth)", "URI"},
      {"csv-dir", 0, 0, G_OPTION_ARG_FILENAME, &o.csv_dir,
       "write rtc-MODE.csv here (for scripts/rtc_plot.py)", "DIR"},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr},
  };
  if (int rc = pi0::bench::init (&argc, &argv, "- chunk-switch jumps, rtc off vs guided", entries);
      rc >= 0)
    return rc;

  /* pi0-tiny's 32 dims as 32 joints: wide limits, max_step as asked. */
  gchar *tmp = g_dir_make_tmp ("rtc-chain-XXXXXX", nullptr);
  std::string robot = std::string (tmp) + "/robot.json";
  std::string json = "{\"joints\":[";
  std::string lo, hi, ms;
  for (int j = 0; j < 32; j++) {
    const char *sep = j ? "," : "";
    json += std::string (sep) + "\"j" + std::to_string (j) + "\"";
    lo += std::string (sep) + "-1000";
    hi += std::string (sep) + "1000";
    ms += std::string (sep) + std::to_string (o.max_step);
  }
  json += "],\"lower\":[" + lo + "],\"upper\":[" + hi + "],\"max_step\":[" + ms + "]}";
  g_file_set_contents (robot.c_str (), json.c_str (), -1, nullptr);

  std::vector<std::string> modes;
  gchar **parts = g_strsplit (o.modes ? o.modes : "off,guided,guided-identity", ",", -1);
  for (gchar **p = parts; *p; p++)
    modes.push_back (*p);
  g_strfreev (parts);

  g_print ("bench/rtc-chain: 3 live cameras 64x48 @ %d fps -> pi0viewmux -> cudaprep 32x32 -> "
           "leaky queue -> pi0infer %s (CPU, %d steps, rtc=MODE) -> pi0actionsink "
           "stream @ %.0f Hz, max_step %.3f; %.1f s per mode\n\n",
           o.fps, o.model ? o.model : "builtin:pi0-tiny", o.num_steps, o.rate, o.max_step,
           o.duration);
  std::vector<Result> results;
  int rc = 0;
  for (const std::string &m : modes) {
    Result r;
    if (!run_mode (o, m, robot, &r))
      rc = 1;
    results.push_back (r);
  }
  g_print (
      "| rtc | chunks | guided | infer p50 ms | delay rows | switches | switch jump max | "
      "switch jump p50 | plan change max | plan change p50 | within-chunk step p99 | within max | "
      "rows sent | rows clamped |\n");
  g_print ("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
           "---: | ---: |\n");
  for (const Result &r : results)
    g_print ("| %s | %" G_GUINT64_FORMAT " | %" G_GUINT64_FORMAT
             " | %.1f | %.0f | %" G_GUINT64_FORMAT
             " | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %" G_GUINT64_FORMAT
             " | %" G_GUINT64_FORMAT " |\n",
             r.mode.c_str (), r.chunks, r.guided, r.infer_p50, r.delay_rows, r.switches, r.jump_max,
             r.jump_p50, r.plan_max, r.plan_p50, r.within_p99, r.within_max, r.sent, r.clamped);
  /* "N.Nx" or, when the mode has none at all, "none (off: N)" rather than a ratio of infinity. */
  /* "5.7x smaller" or, when the mode has none at all, "none (off: 415)", not a ratio of infinity. */
  auto ratio = [] (double off, double on, const char *word) {
    char b[64];
    if (on > 0)
      g_snprintf (b, sizeof b, "%.1fx %s", off / on, word);
    else
      g_snprintf (b, sizeof b, "none (off: %.3g)", off);
    return std::string (b);
  };
  if (results.size () > 1 && results[0].mode == "off")
    for (size_t i = 1; i < results.size (); i++) {
      const Result &b = results[0], &r = results[i];
      g_print ("%s vs off: switch jump max %s, p50 %s; plan change max %s, p50 %s; clamped rows "
               "%s\n",
               r.mode.c_str (), ratio (b.jump_max, r.jump_max, "smaller").c_str (),
               ratio (b.jump_p50, r.jump_p50, "smaller").c_str (),
               ratio (b.plan_max, r.plan_max, "smaller").c_str (),
               ratio (b.plan_p50, r.plan_p50, "smaller").c_str (),
               ratio ((double)b.clamped, (double)r.clamped, "fewer").c_str ());
    }
  g_unlink (robot.c_str ());
  g_rmdir (tmp);
  g_free (tmp);
  return rc;
}
