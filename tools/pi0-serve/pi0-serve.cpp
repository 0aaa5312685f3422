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
 * SIGTERM drains (no new robots; what was sent is answered; then each session closes with 1001,
 * at most --drain-timeout seconds), SIGINT or a second SIGTERM stops at once.
 *
 * Exit status: 0 after a signal, 1 when the pipeline fails, 2 for bad usage (every option is
 * checked before anything starts). */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/gstpi0elements.h"
#include "tools/common/pi0elementstats.h"
#include "tools/common/pi0gsttools.h"
#include "common/pi0json.h"
#include "serve/pi0mapping.h"
#include "common/pi0transformnames.h"

#include <sys/resource.h>

#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include <glib-unix.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace
{

/* An integer option not given (every property's default applies). */
constexpr gint kUnset = G_MININT;
/* --request-timeout's largest value in seconds (its nanoseconds fit in 64 bits many times). */
constexpr double kMaxTimeoutS = 1e6;

struct Options {
  gchar *model = nullptr, *tokenizer = nullptr, *norm_stats = nullptr, *norm_mode = nullptr;
  gchar *device = nullptr, *precision = nullptr;
  gchar *mapping = nullptr, *host = nullptr, *api_key_file = nullptr, *metadata = nullptr;
  gchar *prompt = nullptr, *print_mapping = nullptr, *server = nullptr, *transforms = nullptr;
  gint port = 8000, image_size = kUnset, num_steps = kUnset, max_clients = 16;
  gint cuda_device_id = kUnset;
  gint batch_size = 1;
  gdouble max_wait_ms = 5;
  gint64 seed = 0, max_message = 16 << 20;
  gdouble request_timeout = 60, stats_interval = 0, drain_timeout = 30;
  gboolean print_pipeline = FALSE;
};

struct Run {
  GMainLoop *loop = nullptr;
  GstElement *pipe = nullptr, *src = nullptr, *sink = nullptr;
  int status = 0;
  bool draining = false;
  double drain_timeout_s = 30;
  gint64 drain_deadline_us = 0;
};

gboolean
on_signal (gpointer data)
{
  auto run = static_cast<Run *> (data);
  g_printerr ("pi0-serve: stopping\n");
  g_main_loop_quit (run->loop);
  return G_SOURCE_CONTINUE;
}

using pi0::tools::stat_u64;

gboolean
on_drain_tick (gpointer data)
{
  auto run = static_cast<Run *> (data);
  const guint64 open = stat_u64 (run->src, "open");
  if (open == 0 || g_get_monotonic_time () >= run->drain_deadline_us) {
    if (open > 0)
      g_printerr ("pi0-serve: %" G_GUINT64_FORMAT " sessions still open after --drain-timeout\n",
                  open);
    else
      g_printerr ("pi0-serve: drained\n");
    g_main_loop_quit (run->loop);
    return G_SOURCE_REMOVE;
  }
  return G_SOURCE_CONTINUE;
}

/* SIGTERM (Kubernetes stops a pod with it): drain first. No new robots, every request already
 * sent is answered, each session is then closed with 1001; the pipeline stops once none is
 * left, or after --drain-timeout. A second SIGTERM stops at once, as SIGINT does. */
gboolean
on_term (gpointer data)
{
  auto run = static_cast<Run *> (data);
  if (run->draining || run->drain_timeout_s <= 0)
    return on_signal (data);
  run->draining = true;
  run->drain_deadline_us =
      g_get_monotonic_time () + (gint64)(run->drain_timeout_s * G_USEC_PER_SEC);
  g_printerr ("pi0-serve: draining (SIGTERM): answering what robots have sent, then closing "
              "their sessions (again to stop now)\n");
  g_signal_emit_by_name (run->src, "drain");
  g_timeout_add (50, on_drain_tick, run);
  return G_SOURCE_CONTINUE;
}

gboolean
on_bus (GstBus *, GstMessage *msg, gpointer data)
{
  auto run = static_cast<Run *> (data);
  if (GST_MESSAGE_TYPE (msg) != GST_MESSAGE_ERROR && GST_MESSAGE_TYPE (msg) != GST_MESSAGE_WARNING)
    return TRUE;
  const pi0::tools::MessageParts m = pi0::tools::message_parts (msg);
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    g_printerr ("pi0-serve: error from %s: %s\n%s%s", m.source.c_str (), m.message.c_str (),
                m.debug.c_str (), m.debug.empty () ? "" : "\n");
    run->status = 1;
    g_main_loop_quit (run->loop);
  } else {
    g_printerr ("pi0-serve: warning from %s: %s\n", m.source.c_str (), m.message.c_str ());
  }
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

std::string
preset_names ()
{
  std::string r;
  for (const auto &n : pi0::serve::mapping_presets ())
    r += (r.empty () ? "" : ", ") + n;
  return r;
}

std::string
transform_names ()
{
  std::string r;
  for (const char *n : pi0::kTransformNames)
    r += (r.empty () ? "" : ", ") + std::string (n);
  return r;
}

bool
is_transform_name (const std::string &name)
{
  for (const char *n : pi0::kTransformNames)
    if (name == n)
      return true;
  return false;
}

/* What pi0-serve set on one element, in order: the --print-pipeline line is made from it, so
 * that line is the server it runs. */
struct Element {
  GstElement *e;
  std::vector<std::pair<std::string, std::string>> props;
};

std::string
range_text (GParamSpec *p)
{
  auto span = [] (auto lo, auto hi) {
    return std::to_string (lo) + ".." + std::to_string (hi);
  };
  if (G_IS_PARAM_SPEC_INT (p))
    return span (G_PARAM_SPEC_INT (p)->minimum, G_PARAM_SPEC_INT (p)->maximum);
  if (G_IS_PARAM_SPEC_UINT (p))
    return span (G_PARAM_SPEC_UINT (p)->minimum, G_PARAM_SPEC_UINT (p)->maximum);
  if (G_IS_PARAM_SPEC_INT64 (p))
    return span (G_PARAM_SPEC_INT64 (p)->minimum, G_PARAM_SPEC_INT64 (p)->maximum);
  if (G_IS_PARAM_SPEC_UINT64 (p))
    return span (G_PARAM_SPEC_UINT64 (p)->minimum, G_PARAM_SPEC_UINT64 (p)->maximum);
  if (G_IS_PARAM_SPEC_DOUBLE (p)) {
    gchar *t = g_strdup_printf ("%g..%g", G_PARAM_SPEC_DOUBLE (p)->minimum,
                                G_PARAM_SPEC_DOUBLE (p)->maximum);
    std::string r = t;
    g_free (t);
    return r;
  }
  if (G_IS_PARAM_SPEC_ENUM (p)) {
    std::string r;
    GEnumClass *k = G_PARAM_SPEC_ENUM (p)->enum_class;
    for (guint i = 0; i < k->n_values; i++)
      r += (r.empty () ? "" : ", ") + std::string (k->values[i].value_nick);
    return "one of " + r;
  }
  return g_type_name (p->value_type);
}

/* Sets @prop of @el from @value as gst-launch-1.0 would read it, and records it for the
 * launch line. A value the property does not take (an unknown enum nick, out of its range,
 * not a number) is @option's usage error: false, with the message printed. Nothing is
 * clamped or replaced by a default. */
bool
set_checked (Element &el, const char *prop, const std::string &value, const char *option)
{
  GParamSpec *p = g_object_class_find_property (G_OBJECT_GET_CLASS (el.e), prop);
  if (!p) {
    g_printerr ("pi0-serve: %s has no property %s\n", GST_ELEMENT_NAME (el.e), prop);
    return false;
  }
  GValue v = G_VALUE_INIT;
  g_value_init (&v, p->value_type);
  bool ok = gst_value_deserialize (&v, value.c_str ());
  if (ok && (G_IS_PARAM_SPEC_DOUBLE (p) && !std::isfinite (g_value_get_double (&v))))
    ok = false;
  if (ok && g_param_value_validate (p, &v)) /* true: it had to change the value */
    ok = false;
  if (!ok) {
    g_printerr ("pi0-serve: %s '%s' is not valid (%s)\n", option, value.c_str (),
                range_text (p).c_str ());
    g_value_unset (&v);
    return false;
  }
  g_object_set_property (G_OBJECT (el.e), prop, &v);
  g_value_unset (&v);
  el.props.emplace_back (prop, value);
  return true;
}

bool
set_checked (Element &el, const char *prop, gint64 value, const char *option)
{
  return set_checked (el, prop, std::to_string (value), option);
}

/* An option that may be absent (nullptr: the property keeps its default). */
bool
set_given (Element &el, const char *prop, const char *value, const char *option)
{
  return !value || set_checked (el, prop, std::string (value), option);
}

/* A gst-launch-1.0 argument that a POSIX shell gives back unchanged. */
std::string
shell_word (const std::string &w)
{
  if (w.find_first_not_of ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                           "=:._/-+,") == std::string::npos)
    return w;
  gchar *q = g_shell_quote (w.c_str ());
  std::string r = q;
  g_free (q);
  return r;
}

/* A property value as gst-launch-1.0's parser reads it back: quoted when it holds more than
 * plain characters (a prompt with spaces, JSON metadata). */
std::string
launch_value (const std::string &v)
{
  if (!v.empty () &&
      v.find_first_not_of ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                           ":._/-+") == std::string::npos)
    return v;
  std::string q = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\')
      q += '\\';
    q += c;
  }
  return q + "\"";
}

std::string
launch_line (const std::vector<Element> &chain)
{
  std::string line = "gst-launch-1.0";
  for (size_t i = 0; i < chain.size (); i++) {
    line +=
        (i ? " ! " : " ") + std::string (GST_OBJECT_NAME (gst_element_get_factory (chain[i].e)));
    for (const auto &[k, v] : chain[i].props)
      line += " " + shell_word (k + "=" + launch_value (v));
  }
  return line;
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
       "Observation keys: a preset (openpi's configs: aloha, droid, libero, aloha_towel, "
       "aloha_tupperware, aloha_pen_uncap, aloha_sim) or a JSON mapping file (default aloha)",
       "MAPPING"},
      {"transforms", 0, 0, G_OPTION_ARG_STRING, &o.transforms,
       "openpi's robot transforms of the checkpoint (aloha, aloha_sim, libero, droid, none; "
       "default: the mapping's, which is what openpi's config for that checkpoint applies)",
       "NAME"},
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
       "Noise seed: request N of each connection uses seed + N (unless the mapping reads the "
       "request's own seed)",
       "SEED"},
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
      {"drain-timeout", 0, 0, G_OPTION_ARG_DOUBLE, &o.drain_timeout,
       "On SIGTERM: seconds to answer what robots have sent before stopping (default 30; 0: stop "
       "at once, as on SIGINT)",
       "S"},
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

  /* Every robot, handshake and silent socket is a file descriptor: the soft open-file limit
   * goes up to the hard one (1024 is a shell's, a systemd service's and a container's usual
   * soft limit, with a hard limit far above). The server keeps within whatever it gets. */
  struct rlimit rl;
  if (getrlimit (RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit (RLIMIT_NOFILE, &rl);
  }

  if (o.print_mapping) {
    const std::string json = pi0::serve::mapping_preset_json (o.print_mapping);
    if (json.empty ()) {
      g_printerr ("pi0-serve: no preset mapping '%s' (%s)\n", o.print_mapping,
                  preset_names ().c_str ());
      return 2;
    }
    fputs (json.c_str (), stdout);
    return 0;
  }

  /* Every option is checked before anything starts: a bad one is exit 2 naming it, never a
   * warning and a default. First those that no element range says enough about. */
  if (!o.model) {
    g_printerr ("pi0-serve: --model is required (a checkpoint, or builtin:pi0-tiny to try it)\n");
    return 2;
  }
  auto usage = [] (const char *what) {
    g_printerr ("pi0-serve: %s\n", what);
    return 2;
  };
  if (o.port < 0 || o.port > 65535)
    return usage ("--port must be 0..65535");
  if (o.max_message < 1024 || o.max_message > (1 << 30))
    return usage ("--max-message-size must be 1 KiB..1 GiB (1024..1073741824)");
  if (o.seed < 0)
    return usage ("--seed must not be negative");
  if (!(o.request_timeout >= 0 && o.request_timeout <= kMaxTimeoutS))
    return usage ("--request-timeout must be 0..1000000 seconds (0: never)");
  if (o.batch_size < 1 || o.batch_size > 64)
    return usage ("--batch-size must be 1..64");
  if (!(o.max_wait_ms >= 0 && o.max_wait_ms <= 60000))
    return usage ("--max-wait-ms must be 0..60000");
  if (!(o.drain_timeout >= 0 && o.drain_timeout <= 3600))
    return usage ("--drain-timeout must be 0..3600 seconds");
  if (!(o.stats_interval >= 0 && o.stats_interval <= 86400))
    return usage ("--stats-interval must be 0..86400 seconds");
  if (o.image_size != kUnset && (o.image_size < 8 || o.image_size > 4096))
    return usage ("--image-size must be 8..4096 pixels");
  /* The mapping, read as pi0servesrc will read it: its transforms are the default of
   * --transforms. */
  std::string error;
  const auto mapping = pi0::serve::load_mapping (o.mapping ? o.mapping : "aloha", &error);
  if (!mapping) {
    g_printerr ("pi0-serve: --mapping: %s\n", error.c_str ());
    return 2;
  }
  const std::string transforms = o.transforms ? o.transforms : mapping->transforms;
  if (!is_transform_name (transforms)) {
    g_printerr ("pi0-serve: --transforms '%s' is not one of %s\n", transforms.c_str (),
                transform_names ().c_str ());
    return 2;
  }
  if (o.prompt && (!g_utf8_validate (o.prompt, -1, nullptr) || !*o.prompt))
    return usage ("--prompt must be non-empty UTF-8");
  if (o.metadata) {
    auto v = pi0::json::parse_strict (o.metadata, "--metadata", &error);
    if (!v || !v->is_object ()) {
      g_printerr ("pi0-serve: --metadata must be a JSON object%s%s\n", v ? "" : ": ",
                  v ? "" : error.c_str ());
      return 2;
    }
  }

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

  /* Then each element's own ranges and names (enum nicks), through one setter that records
   * what it set: --print-pipeline prints exactly that. */
  std::vector<Element> chain = {
      {run.src, {}}, {prep, {}}, {queue, {}}, {infer, {}}, {run.sink, {}}};
  Element &src = chain[0], &pre = chain[1], &q = chain[2], &inf = chain[3];
  const int size = o.image_size != kUnset ? o.image_size
                                          : (g_str_equal (o.model, "builtin:pi0-tiny") ? 32 : 224);
  bool ok =
      set_checked (src, "mapping", o.mapping ? o.mapping : "aloha", "--mapping") &&
      set_checked (src, "host", o.host ? o.host : "127.0.0.1", "--host") &&
      set_checked (src, "port", o.port, "--port") &&
      set_checked (src, "max-clients", o.max_clients, "--max-clients") &&
      set_checked (src, "max-message-size", o.max_message, "--max-message-size") &&
      set_checked (src, "request-timeout", (gint64)std::llround (o.request_timeout * GST_SECOND),
                   "--request-timeout") &&
      set_checked (src, "seed", o.seed, "--seed");
  ok = ok && set_given (src, "api-key-file", o.api_key_file, "--api-key-file") &&
       set_given (src, "metadata", o.metadata, "--metadata") &&
       set_given (src, "prompt", o.prompt, "--prompt") &&
       set_given (src, "server", o.server, "--server-name");
  ok = ok && set_checked (pre, "width", size, "--image-size") &&
       set_checked (pre, "height", size, "--image-size");
  /* Requests wait here while the policy runs, not in the network thread. */
  ok = ok && set_checked (q, "max-size-buffers", 64, "queue") &&
       set_checked (q, "max-size-bytes", 0, "queue") &&
       set_checked (q, "max-size-time", 0, "queue");
  ok = ok && set_checked (inf, "model", o.model, "--model") &&
       set_given (inf, "tokenizer", o.tokenizer, "--tokenizer") &&
       set_given (inf, "norm-stats", o.norm_stats, "--norm-stats") &&
       set_given (inf, "norm-mode",
                  o.norm_mode                    ? o.norm_mode
                  : !mapping->norm_mode.empty () ? mapping->norm_mode.c_str ()
                                                 : nullptr,
                  "--norm-mode") &&
       set_given (inf, "device", o.device, "--device");
  if (ok && o.cuda_device_id != kUnset)
    ok = set_checked (inf, "cuda-device-id", o.cuda_device_id, "--cuda-device-id");
  ok = ok && set_given (inf, "precision", o.precision, "--precision");
  if (ok && o.num_steps != kUnset)
    ok = set_checked (inf, "num-steps", o.num_steps, "--num-steps");
  if (ok && transforms != "none")
    ok = set_checked (inf, "transforms", transforms, "--transforms");
  if (ok && mapping->discrete_state_input)
    ok = set_checked (inf, "discrete-state-input", *mapping->discrete_state_input ? "bins" : "none",
                      "the mapping's discrete_state_input");
  if (ok && o.batch_size > 1)
    ok = set_checked (inf, "max-batch-size", o.batch_size, "--batch-size") &&
         set_checked (inf, "max-batch-wait", (gint64)std::llround (o.max_wait_ms * GST_MSECOND),
                      "--max-wait-ms");
  if (!ok) {
    gst_object_unref (run.pipe);
    return 2;
  }

  if (o.print_pipeline) {
    g_print ("%s\n", launch_line (chain).c_str ());
    gst_object_unref (run.pipe);
    return 0;
  }

  run.loop = g_main_loop_new (nullptr, FALSE);
  GstBus *bus = gst_element_get_bus (run.pipe);
  gst_bus_add_watch (bus, on_bus, &run);
  gst_object_unref (bus);
  g_unix_signal_add (SIGINT, on_signal, &run);
  run.drain_timeout_s = o.drain_timeout;
  g_unix_signal_add (SIGTERM, on_term, &run);
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
  g_print ("pi0-serve: serving %s on ws://%s:%d (mapping %s, transforms %s), /healthz for "
           "readiness\n",
           o.model, o.host ? o.host : "127.0.0.1", port, o.mapping ? o.mapping : "aloha",
           transforms.c_str ());
  fflush (stdout);
  g_main_loop_run (run.loop);

  print_stats (&run); /* while the server still has them: stopped, it has no counters */
  gst_element_set_state (run.pipe, GST_STATE_NULL);
  gst_object_unref (run.pipe);
  g_main_loop_unref (run.loop);
  return run.status;
}
