/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench/e2e: end-to-end latency of the whole chain, stage by stage.
 *
 * Three live synthetic cameras (size, format and rate set by options) -> pi0viewmux ->
 * cudaprep -> leaky queue -> pi0infer -> pi0actionsink -> UDP on loopback, for --duration
 * seconds. Prints the per-stage latency table that pi0actionsink computes from the stamps the
 * elements leave in the metas (capture of the base frame -> muxed -> prepared -> inferred ->
 * sent), how many observations got a chunk, how busy the policy was (time inferring / wall
 * time) and, when nvidia-smi exists, the GPU's mean utilization over the run.
 *
 *   e2e --model builtin:pi0 --device cuda --precision bf16 --width 1920 --height 1080 --fps 30
 *
 * Never asserted: numbers go to docs/perf.md with the machine, date and command. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "bench/pi0benchutil.h"
#include "tools/common/pi0gsttools.h"
#include "tools/common/pi0latencytable.h"

#include <gio/gio.h>
#include <gst/gst.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace
{

struct Options {
  int width = 1920, height = 1080, fps = 30;
  gchar *format = nullptr;
  gchar *model = nullptr;
  gchar *device = nullptr;
  gchar *precision = nullptr;
  double duration = 10.0;
  double max_wait_ms = 20.0;
  double max_action_age_ms = 1000.0;
  int num_steps = 10;
};

/* Samples nvidia-smi's GPU utilization every 100 ms in the background, if it exists. */
class GpuUtil
{
public:
  void start ()
  {
    gchar *smi = g_find_program_in_path ("nvidia-smi");
    if (!smi)
      return;
    const gchar *argv[] = {
        smi,    "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100",
        nullptr};
    proc_ = g_subprocess_newv (argv, G_SUBPROCESS_FLAGS_STDOUT_PIPE, nullptr);
    g_free (smi);
  }
  /* Mean utilization in percent, or -1. */
  double stop ()
  {
    if (!proc_)
      return -1;
    g_subprocess_send_signal (proc_, SIGTERM);
    GBytes *out = nullptr;
    g_subprocess_communicate (proc_, nullptr, nullptr, &out, nullptr, nullptr);
    g_clear_object (&proc_);
    if (!out)
      return -1;
    gsize len = 0;
    std::string text ((const char *)g_bytes_get_data (out, &len), len);
    g_bytes_unref (out);
    double sum = 0;
    int n = 0;
    for (size_t at = 0; at < text.size ();) {
      size_t nl = text.find ('\n', at);
      std::string line = text.substr (at, nl == std::string::npos ? std::string::npos : nl - at);
      at = nl == std::string::npos ? text.size () : nl + 1;
      if (!line.empty ()) {
        sum += atof (line.c_str ());
        n++;
      }
    }
    return n ? sum / n : -1;
  }

private:
  GSubprocess *proc_ = nullptr;
};

} // namespace

int
main (int argc, char **argv)
{
  Options o;
  GOptionEntry entries[] = {
      {"width", 0, 0, G_OPTION_ARG_INT, &o.width, "camera width (default 1920)", "W"},
      {"height", 0, 0, G_OPTION_ARG_INT, &o.height, "camera height (default 1080)", "H"},
      {"fps", 0, 0, G_OPTION_ARG_INT, &o.fps, "frames per second of every camera (default 30)",
       "N"},
      {"format", 0, 0, G_OPTION_ARG_STRING, &o.format, "camera pixel format (default NV12)", "F"},
      {"model", 'm', 0, G_OPTION_ARG_STRING, &o.model,
       "pi0infer model (default builtin:pi0-tiny; builtin:pi0 is the full size)", "M"},
      {"device", 0, 0, G_OPTION_ARG_STRING, &o.device, "auto, cpu or cuda (default auto)", "D"},
      {"precision", 0, 0, G_OPTION_ARG_STRING, &o.precision, "auto, bf16 or fp32 (default auto)",
       "P"},
      {"num-steps", 0, 0, G_OPTION_ARG_INT, &o.num_steps, "flow-matching steps (default 10)", "N"},
      {"duration", 'd', 0, G_OPTION_ARG_DOUBLE, &o.duration, "seconds to run (default 10)", "S"},
      {"max-wait", 'w', 0, G_OPTION_ARG_DOUBLE, &o.max_wait_ms,
       "pi0viewmux max-wait in ms (default 20; -1 = the cameras' latency)", "MS"},
      {"max-action-age", 0, 0, G_OPTION_ARG_DOUBLE, &o.max_action_age_ms,
       "pi0actionsink max-action-age in ms: older chunks are dropped, not sent (default 1000)",
       "MS"},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr},
  };
  if (int rc =
          pi0::bench::init (&argc, &argv, "- end-to-end latency of the gst-pi0 chain", entries);
      rc >= 0)
    return rc;
  const std::string model = o.model ? o.model : "builtin:pi0-tiny";
  const std::string format = o.format ? o.format : "NV12";
  const std::string device = o.device ? o.device : "auto";
  const std::string precision = o.precision ? o.precision : "auto";
  /* The builtin demo model takes 32x32 views; everything else pi0's 224x224. */
  const int side = model == "builtin:pi0-tiny" ? 32 : 224;

  /* The "robot": a UDP socket nobody reads (the kernel drops what overflows its buffer). */
  GSocket *robot =
      g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_DATAGRAM, G_SOCKET_PROTOCOL_UDP, nullptr);
  GInetAddress *lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  GSocketAddress *any = g_inet_socket_address_new (lo, 0);
  g_socket_bind (robot, any, TRUE, nullptr);
  GSocketAddress *bound = g_socket_get_local_address (robot, nullptr);
  const int port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  g_object_unref (bound);
  g_object_unref (any);
  g_object_unref (lo);

  const guint64 max_wait = o.max_wait_ms < 0 ? G_MAXUINT64 : (guint64)(o.max_wait_ms * GST_MSECOND);
  std::string desc =
      "pi0viewmux name=mux max-wait=" + std::to_string (max_wait) +
      " ! cudaprep name=prep width=" + std::to_string (side) + " height=" + std::to_string (side) +
      " device=" + device +
      " ! queue max-size-buffers=1 leaky=downstream ! pi0infer name=infer model=" + model +
      " device=" + device + " precision=" + precision +
      " num-steps=" + std::to_string (o.num_steps) +
      " require-state=false instruction=\"pick up the red cube\" ! "
      "pi0actionsink name=sink mode=chunk allow-unlimited=true max-action-age=" +
      std::to_string ((guint64)(o.max_action_age_ms * GST_MSECOND)) +
      " target=udp://127.0.0.1:" + std::to_string (port) + " ";
  desc += pi0::bench::live_cameras (
      "video/x-raw,format=" + format + ",width=" + std::to_string (o.width) +
      ",height=" + std::to_string (o.height) + ",framerate=" + std::to_string (o.fps) + "/1");
  std::string error;
  const pi0::tools::ElementPtr pipeline = pi0::tools::launch (desc, &error);
  if (!pipeline) {
    g_printerr ("pipeline: %s\n", error.c_str ());
    return 1;
  }
  GstElement *pipe = pipeline.get ();
  GstElement *mux = gst_bin_get_by_name (GST_BIN (pipe), "mux");
  GstElement *infer = gst_bin_get_by_name (GST_BIN (pipe), "infer");
  GstElement *sink = gst_bin_get_by_name (GST_BIN (pipe), "sink");

  g_print ("bench/e2e: 3 live cameras %dx%d %s @ %d fps -> pi0viewmux (max-wait %.0f ms) -> "
           "cudaprep (%dx%d, device %s) -> pi0infer (%s, device %s, precision %s, %d steps) -> "
           "pi0actionsink -> UDP\n",
           o.width, o.height, format.c_str (), o.fps, o.max_wait_ms, side, side, device.c_str (),
           model.c_str (), device.c_str (), precision.c_str (), o.num_steps);

  /* PAUSED first: pi0infer loads and warms the model in start(), outside the measured run. */
  GstBus *bus = gst_element_get_bus (pipe);
  gint64 t_load = g_get_monotonic_time ();
  if (gst_element_set_state (pipe, GST_STATE_PAUSED) == GST_STATE_CHANGE_FAILURE ||
      gst_element_get_state (pipe, nullptr, nullptr, GST_CLOCK_TIME_NONE) ==
          GST_STATE_CHANGE_FAILURE) {
    if (pi0::tools::pop_error (pipe, &error))
      g_printerr ("error: %s\n", error.c_str ());
    return 1;
  }
  g_print ("model loaded and warmed up in %.1f s (pi0infer warmup %.1f ms)\n",
           (double)(g_get_monotonic_time () - t_load) / 1e6,
           pi0::bench::stat<double> (infer, "warmup-ms"));

  GpuUtil gpu;
  gpu.start ();
  gint64 t0 = g_get_monotonic_time ();
  gst_element_set_state (pipe, GST_STATE_PLAYING);
  const pi0::tools::MessagePtr m (
      gst_bus_timed_pop_filtered (bus, (GstClockTime)(o.duration * GST_SECOND),
                                  (GstMessageType)(GST_MESSAGE_ERROR | GST_MESSAGE_EOS)));
  const double wall_s = (double)(g_get_monotonic_time () - t0) / 1e6;
  const double util = gpu.stop ();
  int rc = 0;
  if (m && GST_MESSAGE_TYPE (m.get ()) == GST_MESSAGE_ERROR) {
    g_printerr ("error: %s\n", pi0::tools::message_text (m.get ()).c_str ());
    rc = 1;
  }

  const guint64 observations = pi0::bench::stat<guint64> (mux, "observations");
  const guint64 chunks = pi0::bench::stat<guint64> (infer, "chunks");
  const double busy_ms = pi0::bench::stat<double> (infer, "inference-total-ms");
  g_print ("\n%.1f s: %" G_GUINT64_FORMAT " observations, %" G_GUINT64_FORMAT
           " action chunks (%.0f %% of observations; the leaky queue drops the rest)\n",
           wall_s, observations, chunks, observations ? 100.0 * chunks / observations : 0.0);
  g_print ("inference p50 %.2f ms, p99 %.2f ms; policy busy %.0f %% of the run",
           pi0::bench::stat<double> (infer, "inference-p50-ms"),
           pi0::bench::stat<double> (infer, "inference-p99-ms"),
           100.0 * busy_ms / (wall_s * 1000.0));
  if (util >= 0)
    g_print ("; GPU utilization %.0f %% (nvidia-smi, mean)", util);
  g_print ("\nsink: %" G_GUINT64_FORMAT " chunks measured, %" G_GUINT64_FORMAT
           " dropped as stale (older than max-action-age), %" G_GUINT64_FORMAT " rejected\n",
           pi0::bench::stat<guint64> (sink, "latency-chunks"),
           pi0::bench::stat<guint64> (sink, "stale"), pi0::bench::stat<guint64> (sink, "rejected"));
  g_print ("\nLatency per chunk sent (pi0actionsink stats, from the metas' stamps):\n");
  pi0::tools::print_latency_table (sink);

  gst_element_set_state (pipe, GST_STATE_NULL);
  gst_object_unref (bus);
  for (GstElement *e : {mux, infer, sink})
    gst_object_unref (e);
  g_object_unref (robot);
  return rc;
}
