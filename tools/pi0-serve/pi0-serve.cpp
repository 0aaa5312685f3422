/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0-serve: a Pi0 policy server for robots that speak openpi's websocket protocol.
 *
 * It runs the chain pi0servesrc ! cudaprep ! queue ! pi0infer ! pi0servesink (the elements
 * linked in, no plugin path needed) with the options below, until SIGINT or SIGTERM, and prints
 * the server's counters every --stats-interval seconds and at the end. A robot connects with
 * openpi-client, unchanged:
 *
 *   pi0-serve --model /models/pi0_aloha --norm-stats /models/pi0_aloha/assets --mapping aloha
 *   # several robots per forward pass: add --batch-size 8 [--max-wait-ms 5]
 *   # on the robot:
 *   WebsocketClientPolicy(host="gpu-host", port=8000).infer(observation)["actions"]
 *
 * Exit status: 0 after a signal, 1 when the pipeline fails, 2 for bad usage. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstpi0elements.h"
#include "pi0mapping.h"

#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include <glib-unix.h>

#include <cstdio>
#include <string>

namespace
{

struct Options {
  gchar *model = nullptr, *tokenizer = nullptr, *norm_stats = nullptr, *norm_mode = nullptr;
  gchar *device = nullptr, *precision = nullptr;
  gchar *mapping = nullptr, *host = nullptr, *api_key_file = nullptr, *metadata = nullptr;
  gchar *prompt = nullptr, *print_mapping = nullptr, *server = nullptr;
  gint port = 8000, image_size = 0, num_steps = 0, max_clients = 16, cuda_device_id = 0;
  gint batch_size = 1;
  gdouble max_wait_ms = 5;
  gint64 seed = 0, max_message = 16 << 20;
  gdouble request_timeout = 60, stats_interval = 0;
  gboolean print_pipeline = FALSE;
};

struct Run {
  GMainLoop *loop = nullptr;
  GstElement *pipe = nullptr, *src = nullptr, *sink = nullptr;
  int status = 0;
};

gboolean
on_signal (gpointer data)
{
  auto run = static_cast<Run *> (data);
  g_printerr ("pi0-serve: stopping\n");
  g_main_loop_quit (run->loop);
  return G_SOURCE_CONTINUE;
}

gboolean
on_bus (GstBus *, GstMessage *msg, gpointer data)
{
  auto run = static_cast<Run *> (data);
  GError *err = nullptr;
  gchar *dbg = nullptr;
  switch (GST_MESSAGE_TYPE (msg)) {
    case GST_MESSAGE_ERROR:
      gst_message_parse_error (msg, &err, &dbg);
      g_printerr ("pi0-serve: error from %s: %s\n%s%s", GST_OBJECT_NAME (msg->src), err->message,
                  dbg ? dbg : "", dbg ? "\n" : "");
      run->status = 1;
      g_main_loop_quit (run->loop);
      break;
    case GST_MESSAGE_WARNING:
      gst_message_parse_warning (msg, &err, &dbg);
      g_printerr ("pi0-serve: warning from %s: %s\n", GST_OBJECT_NAME (msg->src), err->message);
      break;
    default:
      break;
  }
  g_clear_error (&err);
  g_free (dbg);
  return TRUE;
}

void
print_stats (Run *run)
{
  GstStructure *s = nullptr, *k = nullptr;
  g_object_get (run->src, "stats", &s, nullptr);
  g_object_get (run->sink, "stats", &k, nullptr);
  gchar *a = s ? gst_structure_to_string (s) : g_strdup ("");
  gchar *b = k ? gst_structure_to_string (k) : g_strdup ("");
  g_print ("%s\n%s\n", a, b);
  g_free (a);
  g_free (b);
  if (s)
    gst_structure_free (s);
  if (k)
    gst_structure_free (k);
}

gboolean
on_stats_tick (gpointer data)
{
  print_stats (static_cast<Run *> (data));
  return G_SOURCE_CONTINUE;
}

/* Sets @prop on @e from a string as gst-launch would, so enums take their nicks. */
bool
set_from_string (GstElement *e, const char *prop, const char *value)
{
  if (!g_object_class_find_property (G_OBJECT_GET_CLASS (e), prop)) {
    g_printerr ("pi0-serve: %s has no property %s\n", GST_ELEMENT_NAME (e), prop);
    return false;
  }
  gst_util_set_object_arg (G_OBJECT (e), prop, value);
  return true;
}

} // namespace

int
main (int argc, char **argv)
{
  Options o;
  GOptionEntry entries[] = {
      {"model", 'm', 0, G_OPTION_ARG_STRING, &o.model,
       "Checkpoint directory, model.safetensors, TorchScript file, or builtin:pi0-tiny (random "
       "weights, for trying it out)",
       "MODEL"},
      {"mapping", 0, 0, G_OPTION_ARG_STRING, &o.mapping,
       "Observation keys: aloha, droid, libero or a JSON mapping file (default aloha)", "MAPPING"},
      {"host", 0, 0, G_OPTION_ARG_STRING, &o.host,
       "Numeric address to listen on (default 127.0.0.1; 0.0.0.0 for the network)", "ADDR"},
      {"port", 'p', 0, G_OPTION_ARG_INT, &o.port, "TCP port (default 8000; 0: any free one)",
       "PORT"},
      {"api-key-file", 0, 0, G_OPTION_ARG_FILENAME, &o.api_key_file,
       "Require 'Authorization: Api-Key <key>', the key being this file's first line", "FILE"},
      {"image-size", 0, 0, G_OPTION_ARG_INT, &o.image_size,
       "Model input size in pixels (default 224; 32 for builtin:pi0-tiny)", "N"},
      {"tokenizer", 0, 0, G_OPTION_ARG_FILENAME, &o.tokenizer, "SentencePiece model", "FILE"},
      {"norm-stats", 0, 0, G_OPTION_ARG_FILENAME, &o.norm_stats, "openpi norm_stats.json", "FILE"},
      {"norm-mode", 0, 0, G_OPTION_ARG_STRING, &o.norm_mode, "zscore or quantile", "MODE"},
      {"device", 0, 0, G_OPTION_ARG_STRING, &o.device, "auto, cuda or cpu", "DEVICE"},
      {"cuda-device-id", 0, 0, G_OPTION_ARG_INT, &o.cuda_device_id, "CUDA device ordinal", "N"},
      {"precision", 0, 0, G_OPTION_ARG_STRING, &o.precision, "auto, bf16 or fp32", "P"},
      {"num-steps", 0, 0, G_OPTION_ARG_INT, &o.num_steps, "Denoising steps (default: the model's)",
       "N"},
      {"batch-size", 0, 0, G_OPTION_ARG_INT, &o.batch_size,
       "Requests of different robots run together in one forward pass, at most N (default 1: "
       "one at a time; pi0infer max-batch-size)",
       "N"},
      {"max-wait-ms", 0, 0, G_OPTION_ARG_DOUBLE, &o.max_wait_ms,
       "With --batch-size > 1: how long a request waits for others before a partial batch runs "
       "(default 5; pi0infer max-batch-wait)",
       "MS"},
      {"seed", 0, 0, G_OPTION_ARG_INT64, &o.seed,
       "Noise seed: request N of each connection uses seed + N", "SEED"},
      {"prompt", 0, 0, G_OPTION_ARG_STRING, &o.prompt, "Instruction for requests without one",
       "TEXT"},
      {"max-clients", 0, 0, G_OPTION_ARG_INT, &o.max_clients, "Clients at once (default 16)", "N"},
      {"max-message-size", 0, 0, G_OPTION_ARG_INT64, &o.max_message,
       "Largest request in bytes (default 16 MiB)", "BYTES"},
      {"request-timeout", 0, 0, G_OPTION_ARG_DOUBLE, &o.request_timeout,
       "Seconds before an unanswered request gets an error (default 60; 0: never)", "S"},
      {"metadata", 0, 0, G_OPTION_ARG_STRING, &o.metadata,
       "JSON object sent to each client on connect", "JSON"},
      {"server-name", 0, 0, G_OPTION_ARG_STRING, &o.server, "Name of the server (default pi0serve)",
       "NAME"},
      {"stats-interval", 0, 0, G_OPTION_ARG_DOUBLE, &o.stats_interval,
       "Print the counters every S seconds (default: only at the end)", "S"},
      {"print-mapping", 0, 0, G_OPTION_ARG_STRING, &o.print_mapping,
       "Print a preset mapping's JSON (to start a file of your own) and exit", "NAME"},
      {"print-pipeline", 0, 0, G_OPTION_ARG_NONE, &o.print_pipeline,
       "Print the equivalent gst-launch-1.0 line and exit", nullptr},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr},
  };
  GError *err = nullptr;
  GOptionContext *ctx = g_option_context_new (
      "- serve a Pi0 policy to robots over openpi's websocket protocol (openpi-client)");
  g_option_context_add_main_entries (ctx, entries, nullptr);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    g_printerr ("pi0-serve: %s\n", err->message);
    g_error_free (err);
    g_option_context_free (ctx);
    return 2;
  }
  g_option_context_free (ctx);

  if (o.print_mapping) {
    const std::string json = pi0::serve::mapping_preset_json (o.print_mapping);
    if (json.empty ()) {
      g_printerr ("pi0-serve: no preset mapping '%s' (aloha, droid, libero)\n", o.print_mapping);
      return 2;
    }
    fputs (json.c_str (), stdout);
    return 0;
  }
  if (!o.model) {
    g_printerr ("pi0-serve: --model is required (a checkpoint, or builtin:pi0-tiny to try it)\n");
    return 2;
  }
  if (o.max_message < 1024 || o.max_message > (1 << 30) || o.port < 0 || o.port > 65535 ||
      o.seed < 0 || o.request_timeout < 0 || o.batch_size < 1 || o.batch_size > 64 ||
      !(o.max_wait_ms >= 0 && o.max_wait_ms <= 60000)) {
    g_printerr ("pi0-serve: --max-message-size must be 1 KiB..1 GiB, --port 0..65535, --seed and "
                "--request-timeout not negative, --batch-size 1..64, --max-wait-ms 0..60000\n");
    return 2;
  }
  const int size =
      o.image_size > 0 ? o.image_size : (g_str_equal (o.model, "builtin:pi0-tiny") ? 32 : 224);

  if (!gst_pi0_elements_register (nullptr)) {
    g_printerr ("pi0-serve: could not register the gst-pi0 elements\n");
    return 1;
  }
  Run run;
  run.pipe = gst_pipeline_new ("pi0-serve");
  run.src = gst_element_factory_make ("pi0servesrc", "src");
  GstElement *prep = gst_element_factory_make ("cudaprep", "prep");
  GstElement *queue = gst_element_factory_make ("queue", "queue");
  GstElement *infer = gst_element_factory_make ("pi0infer", "infer");
  run.sink = gst_element_factory_make ("pi0servesink", "sink");
  if (!run.src || !prep || !queue || !infer || !run.sink) {
    g_printerr ("pi0-serve: this build lacks %s\n",
                !infer ? "pi0infer (LibTorch)" : "the serve elements (libsoup 3, msgpack-c++)");
    return 1;
  }
  gst_bin_add_many (GST_BIN (run.pipe), run.src, prep, queue, infer, run.sink, nullptr);
  gst_element_link_many (run.src, prep, queue, infer, run.sink, nullptr);

  g_object_set (run.src, "port", o.port, "max-clients", o.max_clients, "max-message-size",
                (guint)o.max_message, "seed", (guint64)o.seed, "request-timeout",
                (guint64)(o.request_timeout * GST_SECOND), nullptr);
  if (o.mapping)
    g_object_set (run.src, "mapping", o.mapping, nullptr);
  if (o.host)
    g_object_set (run.src, "host", o.host, nullptr);
  if (o.api_key_file)
    g_object_set (run.src, "api-key-file", o.api_key_file, nullptr);
  if (o.metadata)
    g_object_set (run.src, "metadata", o.metadata, nullptr);
  if (o.prompt)
    g_object_set (run.src, "prompt", o.prompt, nullptr);
  if (o.server)
    g_object_set (run.src, "server", o.server, nullptr);
  g_object_set (prep, "width", size, "height", size, nullptr);
  /* Requests wait here while the policy runs, not in the network thread. */
  g_object_set (queue, "max-size-buffers", 64u, "max-size-bytes", 0u, "max-size-time", (guint64)0,
                nullptr);
  bool ok = set_from_string (infer, "model", o.model);
  if (o.tokenizer)
    ok = ok && set_from_string (infer, "tokenizer", o.tokenizer);
  if (o.norm_stats)
    ok = ok && set_from_string (infer, "norm-stats", o.norm_stats);
  if (o.norm_mode)
    ok = ok && set_from_string (infer, "norm-mode", o.norm_mode);
  if (o.device)
    ok = ok && set_from_string (infer, "device", o.device);
  if (o.precision)
    ok = ok && set_from_string (infer, "precision", o.precision);
  if (o.num_steps > 0)
    g_object_set (infer, "num-steps", o.num_steps, nullptr);
  g_object_set (infer, "cuda-device-id", o.cuda_device_id, nullptr);
  const guint64 max_wait_ns = (guint64)(o.max_wait_ms * GST_MSECOND);
  g_object_set (infer, "max-batch-size", (guint)o.batch_size, "max-batch-wait", max_wait_ns,
                nullptr);
  if (!ok)
    return 2;

  if (o.print_pipeline) {
    const std::string batching = o.batch_size > 1
                                     ? " max-batch-size=" + std::to_string (o.batch_size) +
                                           " max-batch-wait=" + std::to_string (max_wait_ns)
                                     : std::string ();
    g_print ("gst-launch-1.0 pi0servesrc mapping=%s host=%s port=%d%s ! cudaprep width=%d "
             "height=%d ! queue max-size-buffers=64 ! pi0infer model=%s%s%s%s ! pi0servesink\n",
             o.mapping ? o.mapping : "aloha", o.host ? o.host : "127.0.0.1", o.port,
             o.api_key_file ? (std::string (" api-key-file=") + o.api_key_file).c_str () : "", size,
             size, o.model, o.norm_stats ? " norm-stats=" : "", o.norm_stats ? o.norm_stats : "",
             batching.c_str ());
    gst_object_unref (run.pipe);
    return 0;
  }

  run.loop = g_main_loop_new (nullptr, FALSE);
  GstBus *bus = gst_element_get_bus (run.pipe);
  gst_bus_add_watch (bus, on_bus, &run);
  gst_object_unref (bus);
  g_unix_signal_add (SIGINT, on_signal, &run);
  g_unix_signal_add (SIGTERM, on_signal, &run);
  if (o.stats_interval > 0)
    g_timeout_add ((guint)(o.stats_interval * 1000), on_stats_tick, &run);

  if (gst_element_set_state (run.pipe, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    /* The error message on the bus says why. */
    while (g_main_context_iteration (nullptr, FALSE))
      ;
    if (run.status == 0)
      g_printerr ("pi0-serve: the pipeline did not start\n");
    gst_element_set_state (run.pipe, GST_STATE_NULL);
    gst_object_unref (run.pipe);
    return 1;
  }
  int port = 0;
  g_object_get (run.src, "bound-port", &port, nullptr);
  g_print ("pi0-serve: serving %s on ws://%s:%d (mapping %s), /healthz for readiness\n", o.model,
           o.host ? o.host : "127.0.0.1", port, o.mapping ? o.mapping : "aloha");
  fflush (stdout);
  g_main_loop_run (run.loop);

  gst_element_set_state (run.pipe, GST_STATE_NULL);
  print_stats (&run);
  gst_object_unref (run.pipe);
  g_main_loop_unref (run.loop);
  return run.status;
}
