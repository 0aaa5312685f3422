/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0servesrc
 * @title: pi0servesrc
 *
 * A policy server for robots that speak openpi's websocket protocol (openpi-client's
 * `WebsocketClientPolicy`, unchanged): each request a robot sends becomes one observation
 * buffer, exactly as `pi0viewmux` makes them from cameras (the views' frames as the buffer's
 * memories, a #GstPi0ObservationMeta with the robot state), plus a #GstPi0RequestMeta saying
 * which client asked, with which prompt and noise seed. Downstream, `cudaprep` resizes and
 * normalizes the views (any image size) and `pi0infer` computes the action chunk; at the end of
 * the chain `pi0servesink` sends each chunk back to the client that asked.
 *
 * The mapping (#GstPi0ServeSrc:mapping) says which observation keys are which camera, the
 * state and the prompt: the presets `aloha`, `droid` and `libero` (and `aloha_towel`,
 * `aloha_tupperware`, `aloha_pen_uncap`, `aloha_sim`) follow openpi's configs; a JSON file
 * describes any other robot (docs/serve.md). A request without a prompt gets
 * #GstPi0ServeSrc:prompt, else the mapping's default prompt; with neither it is refused, as
 * openpi refuses it. The mapping also names the robot transforms of the checkpoint it is for,
 * which are `pi0infer`'s to apply (its `transforms` property: `pi0-serve` sets it from the
 * mapping). Images are uint8, HWC or CHW, of any
 * size. Keys the mapping does not know, malformed msgpack, numpy dtypes outside a numeric
 * whitelist, a non-finite state or a message over #GstPi0ServeSrc:max-message-size get that
 * client an error (openpi's way: a text message, then the connection closes) and never reach
 * the pipeline; the other clients are not affected.
 *
 * It listens on 127.0.0.1 unless #GstPi0ServeSrc:host says otherwise, requires
 * `Authorization: Api-Key <key>` when #GstPi0ServeSrc:api-key (or api-key-file) is set, and
 * answers `GET /healthz` with 200 only while PLAYING (503 otherwise: a readiness probe).
 *
 * Each connection's requests are numbered from 0; request N is drawn with noise seed
 * #GstPi0ServeSrc:seed + N (unless the mapping reads a seed key that the client sends), so a
 * client gets the same actions whether it is alone or one of many. The prompt and the seed
 * travel once, in the request meta, and `pi0infer` uses both per request (in a batch too).
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 pi0servesrc mapping=aloha port=8000 ! cudaprep width=224 height=224 ! \
 *   pi0infer model=/models/pi0_aloha norm-stats=/models/pi0_aloha/assets ! pi0servesink
 * ]|
 *
 * Since: 0.3
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/serve/gstpi0servesrc.h"

#include "gst/common/gstpi0props.h"

#include "common/pi0file.h"
#include "serve/pi0mapping.h"
#include "serve/pi0server.h"

#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <exception>
#include <memory>
#include <mutex>
#include <string>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_serve_src_debug);
#define GST_CAT_DEFAULT gst_pi0_serve_src_debug

/* Locking: settings_lock guards Settings; lock guards `server` and `caps`. Never held
 * together, and never while waiting for a request (pop) or pushing. */

namespace
{

namespace serve = pi0::serve;

enum {
  PROP_0,
  PROP_SERVER,
  PROP_HOST,
  PROP_PORT,
  PROP_BOUND_PORT,
  PROP_API_KEY,
  PROP_API_KEY_FILE,
  PROP_MAPPING,
  PROP_MAX_MESSAGE_SIZE,
  PROP_MAX_CLIENTS,
  PROP_REQUEST_TIMEOUT,
  PROP_SEED,
  PROP_PROMPT,
  PROP_METADATA,
  PROP_STATS,
};

/* The properties, each starting at its default (the param specs read them here). */
struct Settings {
  std::string server = "pi0serve";
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;      /* write-only */
  std::string api_key_file; /* NULL when empty */
  std::string mapping = "aloha";
  guint max_message = 16u << 20;
  int max_clients = 16;
  guint64 request_timeout = 60 * GST_SECOND; /* 0: wait forever */
  guint64 seed = 0;
  std::string prompt; /* "": the mapping's default_prompt */
  std::string metadata = "{}";
};

/* Between start() and stop(): the server, and the caps of its observations. */
struct State {
  std::shared_ptr<serve::Server> server;
  GstCaps *caps = nullptr;
};

} // namespace

struct GstPi0ServeSrcPrivate {
  std::mutex settings_lock;
  Settings settings; /* under settings_lock */
  std::mutex lock;
  State state; /* under lock: read by the application's threads (stats, bound-port, unlock) */
};

struct _GstPi0ServeSrc {
  GstPushSrc parent;
  GstPi0ServeSrcPrivate *priv;
};

#define gst_pi0_serve_src_parent_class parent_class
G_DEFINE_TYPE (GstPi0ServeSrc, gst_pi0_serve_src, GST_TYPE_PUSH_SRC);
GST_ELEMENT_REGISTER_DEFINE (pi0servesrc, "pi0servesrc", GST_RANK_NONE, GST_TYPE_PI0_SERVE_SRC);

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE (
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_MEDIA_TYPE));

static std::shared_ptr<serve::Server>
get_server (GstPi0ServeSrc *self)
{
  std::lock_guard<std::mutex> lk (self->priv->lock);
  return self->priv->state.server;
}

static GstStructure *
make_stats (GstPi0ServeSrc *self)
{
  auto srv = get_server (self);
  serve::ServerStats s = srv ? srv->stats () : serve::ServerStats ();
  return gst_structure_new (
      "pi0servesrc-stats", "connections", G_TYPE_UINT64, (guint64)s.connections, "open",
      G_TYPE_UINT64, (guint64)s.open, "refused", G_TYPE_UINT64, (guint64)s.refused, "requests",
      G_TYPE_UINT64, (guint64)s.requests, "replies", G_TYPE_UINT64, (guint64)s.replies, "errors",
      G_TYPE_UINT64, (guint64)s.errors, "dropped", G_TYPE_UINT64, (guint64)s.dropped, "timeouts",
      G_TYPE_UINT64, (guint64)s.timeouts, "queued", G_TYPE_UINT64, (guint64)s.queued, "peers",
      G_TYPE_UINT64, (guint64)s.peers, "evicted", G_TYPE_UINT64, (guint64)s.evicted, "hung",
      G_TYPE_UINT64, (guint64)s.hung, "fd-limited", G_TYPE_UINT64, (guint64)s.fd_limited,
      "draining", G_TYPE_BOOLEAN, (gboolean)s.draining, nullptr);
}

/* The "drain" action signal (serve::Server::drain()). */
static void
gst_pi0_serve_src_drain (GstPi0ServeSrc *self)
{
  if (auto srv = get_server (self)) {
    GST_INFO_OBJECT (self, "draining: answering what was sent, then closing each session");
    srv->drain ();
  }
}

/* Copies @value into the settings (@set) or out of them: one table for both directions. */
static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_STRING_OR (PROP_SERVER, server)
    GST_PI0_PROP_STRING_OR (PROP_HOST, host)
    GST_PI0_PROP_FIELD (PROP_PORT, port, gint, int)
    GST_PI0_PROP_STRING (PROP_API_KEY_FILE, api_key_file)
    GST_PI0_PROP_STRING_OR (PROP_MAPPING, mapping)
    GST_PI0_PROP_FIELD (PROP_MAX_MESSAGE_SIZE, max_message, guint, uint)
    GST_PI0_PROP_FIELD (PROP_MAX_CLIENTS, max_clients, gint, int)
    GST_PI0_PROP_FIELD (PROP_REQUEST_TIMEOUT, request_timeout, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_SEED, seed, guint64, uint64)
    GST_PI0_PROP_STRING_OR (PROP_PROMPT, prompt)
    GST_PI0_PROP_STRING_OR (PROP_METADATA, metadata)
    case PROP_API_KEY: /* write-only: a key must not be readable back */
      if (set)
        s.api_key = g_value_get_string (value) ? g_value_get_string (value) : "";
      return true;
  }
  return false;
}

static void
gst_pi0_serve_src_set_property (GObject *object, guint prop_id, const GValue *value,
                                GParamSpec *pspec)
{
  auto self = GST_PI0_SERVE_SRC (object);
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_serve_src_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  auto self = GST_PI0_SERVE_SRC (object);
  if (prop_id == PROP_STATS) {
    g_value_take_boxed (value, make_stats (self));
    return;
  }
  if (prop_id == PROP_BOUND_PORT) {
    auto srv = get_server (self);
    g_value_set_int (value, srv && srv->running () ? srv->port () : 0);
    return;
  }
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

/* The key from api-key-file: its first line, surrounding whitespace removed. */
static bool
read_key_file (const std::string &path, std::string *key, std::string *error)
{
  std::string text;
  if (!pi0::read_regular_file (path, 64 * 1024, &text, error))
    return false;
  text = text.substr (0, text.find ('\n'));
  gchar *stripped = g_strstrip (g_strdup (text.c_str ()));
  *key = stripped;
  g_free (stripped);
  if (key->empty ()) {
    *error = "the file holds no key";
    return false;
  }
  return true;
}

static gboolean
gst_pi0_serve_src_start (GstBaseSrc *bsrc)
{
  auto self = GST_PI0_SERVE_SRC (bsrc);
  Settings s;
  {
    std::lock_guard<std::mutex> lk (self->priv->settings_lock);
    s = self->priv->settings;
  }

  serve::ServerSettings ss;
  std::string err;
  try {
    auto mapping = serve::load_mapping (s.mapping, &err);
    if (!mapping) {
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("Invalid mapping: %s", err.c_str ()),
                         (nullptr));
      return FALSE;
    }
    ss.mapping = *mapping;
    ss.api_key = s.api_key;
    if (!s.api_key_file.empty ()) {
      if (!s.api_key.empty ()) {
        GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("Set api-key or api-key-file, not both."),
                           (nullptr));
        return FALSE;
      }
      if (!read_key_file (s.api_key_file, &ss.api_key, &err)) {
        GST_ELEMENT_ERROR (
            self, RESOURCE, OPEN_READ,
            ("Cannot read the API key from '%s': %s", s.api_key_file.c_str (), err.c_str ()),
            (nullptr));
        return FALSE;
      }
    }
    ss.host = s.host;
    ss.port = s.port;
    ss.max_message = s.max_message;
    ss.max_clients = s.max_clients;
    ss.request_timeout_s = (double)s.request_timeout / GST_SECOND;
    ss.seed = s.seed;
    /* openpi's InjectDefaultPrompt: the server's own default first (openpi's serve_policy.py
     * --default_prompt), then the config's. */
    ss.default_prompt = !s.prompt.empty () ? s.prompt : mapping->default_prompt;
    if (mapping->prompt.empty () && ss.default_prompt.empty ()) {
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                         ("Mapping '%s' reads no prompt and has no default prompt: set prompt=.",
                          mapping->name.c_str ()),
                         (nullptr));
      return FALSE;
    }
    ss.metadata_json = s.metadata;
    if (!g_utf8_validate (s.prompt.c_str (), -1, nullptr)) {
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("prompt is not valid UTF-8."), (nullptr));
      return FALSE;
    }

    auto srv = serve::Server::get (s.server);
    if (!srv->start (ss, &err)) {
      GST_ELEMENT_ERROR (
          self, RESOURCE, OPEN_READ_WRITE,
          ("Cannot start the policy server '%s': %s", s.server.c_str (), err.c_str ()), (nullptr));
      return FALSE;
    }
    GST_INFO_OBJECT (self, "serving on %s:%d with mapping '%s'", s.host.c_str (), srv->port (),
                     ss.mapping.name.c_str ());

    /* Requests come when robots ask: a variable rate (0/1). */
    GstCaps *caps = gst_pi0_observation_caps_new (
        pi0::kViewNames, pi0::kNumViews, pi0::kViewNames[0], ss.mapping.state_dim, 0, 1, FALSE);
    {
      std::lock_guard<std::mutex> lk (self->priv->lock);
      self->priv->state.server = srv;
      gst_caps_replace (&self->priv->state.caps, caps);
    }
    gst_caps_unref (caps);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR (self, RESOURCE, FAILED, ("Cannot start the policy server: %s", e.what ()),
                       (nullptr));
    return FALSE;
  }
  g_object_notify (G_OBJECT (self), "bound-port");
  return TRUE;
}

static gboolean
gst_pi0_serve_src_stop (GstBaseSrc *bsrc)
{
  auto self = GST_PI0_SERVE_SRC (bsrc);
  std::shared_ptr<serve::Server> srv;
  {
    std::lock_guard<std::mutex> lk (self->priv->lock);
    srv = std::move (self->priv->state.server);
    self->priv->state.server.reset ();
    gst_clear_caps (&self->priv->state.caps);
  }
  if (srv)
    srv->stop ();
  return TRUE;
}

static GstCaps *
gst_pi0_serve_src_get_caps (GstBaseSrc *bsrc, GstCaps *filter)
{
  auto self = GST_PI0_SERVE_SRC (bsrc);
  GstCaps *caps = nullptr;
  {
    std::lock_guard<std::mutex> lk (self->priv->lock);
    if (self->priv->state.caps)
      caps = gst_caps_ref (self->priv->state.caps);
  }
  if (!caps)
    caps = gst_pad_get_pad_template_caps (GST_BASE_SRC_PAD (bsrc));
  if (filter) {
    GstCaps *i = gst_caps_intersect_full (filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref (caps);
    caps = i;
  }
  return caps;
}

static gboolean
gst_pi0_serve_src_unlock (GstBaseSrc *bsrc)
{
  if (auto srv = get_server (GST_PI0_SERVE_SRC (bsrc)))
    srv->set_flushing (true);
  return TRUE;
}

static gboolean
gst_pi0_serve_src_unlock_stop (GstBaseSrc *bsrc)
{
  if (auto srv = get_server (GST_PI0_SERVE_SRC (bsrc)))
    srv->set_flushing (false);
  return TRUE;
}

static GstStateChangeReturn
gst_pi0_serve_src_change_state (GstElement *element, GstStateChange transition)
{
  auto self = GST_PI0_SERVE_SRC (element);
  /* /healthz says ready only while requests are being answered. */
  if (transition == GST_STATE_CHANGE_PLAYING_TO_PAUSED)
    if (auto srv = get_server (self))
      srv->set_ready (false);
  GstStateChangeReturn ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (ret != GST_STATE_CHANGE_FAILURE && transition == GST_STATE_CHANGE_PAUSED_TO_PLAYING)
    if (auto srv = get_server (self))
      srv->set_ready (true);
  return ret;
}

/* One view's pixels as a memory: HWC is wrapped in place (the message, or a float image's
 * conversion, stays alive as long as the memory), CHW is transposed to HWC (cudaprep reads
 * packed RGB). */
static GstMemory *
view_memory (const serve::ImageView &v, const std::shared_ptr<GBytes> &message)
{
  const gsize size = v.size ();
  if (!v.chw && v.owned) /* a float image, converted: its pixels live as long as the memory */
    return gst_memory_new_wrapped (
        GST_MEMORY_FLAG_READONLY, (gpointer)v.data, size, 0, size,
        new std::shared_ptr<std::vector<uint8_t>> (v.owned),
        [] (gpointer p) { delete static_cast<std::shared_ptr<std::vector<uint8_t>> *> (p); });
  if (!v.chw) {
    return gst_memory_new_wrapped (GST_MEMORY_FLAG_READONLY, (gpointer)v.data, size, 0, size,
                                   g_bytes_ref (message.get ()), (GDestroyNotify)g_bytes_unref);
  }
  GstMemory *mem = gst_allocator_alloc (nullptr, size, nullptr);
  GstMapInfo map;
  if (!mem || !gst_memory_map (mem, &map, GST_MAP_WRITE)) {
    if (mem)
      gst_memory_unref (mem);
    return nullptr;
  }
  const size_t plane = (size_t)v.width * v.height;
  for (size_t i = 0; i < plane; i++)
    for (int c = 0; c < 3; c++)
      map.data[i * 3 + c] = v.data[c * plane + i];
  gst_memory_unmap (mem, &map);
  return mem;
}

/* The observation buffer of request @r; nullptr (the client told) when memory runs out. */
static GstBuffer *
build_observation (GstPi0ServeSrc *self, serve::Server &srv, const serve::Request &r)
{
  const GstClockTime now = gst_element_get_current_running_time (GST_ELEMENT (self));
  GstBuffer *buf = gst_buffer_new ();
  GstPi0ObservationMeta *om = gst_buffer_add_pi0_observation_meta (buf);
  for (int v = 0; v < pi0::kNumViews; v++) {
    const serve::ImageView &iv = r.obs.views[v];
    if (!iv.present) {
      gst_pi0_observation_meta_add_view (om, pi0::kViewNames[v]); /* masked: the model ignores it */
      continue;
    }
    GstMemory *mem = view_memory (iv, r.message);
    if (!mem) {
      gst_buffer_unref (buf);
      srv.fail (r.client, r.number, "the server could not allocate memory for an image");
      GST_ELEMENT_WARNING (
          self, RESOURCE, NO_SPACE_LEFT,
          ("Could not allocate %" G_GSIZE_FORMAT " bytes for an image.", iv.size ()), (nullptr));
      return nullptr;
    }
    GstVideoInfo info;
    gst_video_info_set_format (&info, GST_VIDEO_FORMAT_RGB, (guint)iv.width, (guint)iv.height);
    /* Packed rows, as numpy holds them (GStreamer's default would round rows up to 4 bytes). */
    GST_VIDEO_INFO_PLANE_STRIDE (&info, 0) = iv.width * 3;
    GST_VIDEO_INFO_PLANE_OFFSET (&info, 0) = 0;
    GST_VIDEO_INFO_SIZE (&info) = iv.size ();
    GstBuffer *frame = gst_buffer_new ();
    gst_buffer_append_memory (frame, mem);
    GST_BUFFER_PTS (frame) = now;
    gst_pi0_observation_meta_add_frame (om, buf, pi0::kViewNames[v], &info, frame,
                                        GST_PI0_VIEW_FLAG_NONE, now);
    gst_buffer_unref (frame);
  }
  gst_pi0_observation_meta_set_state (om, r.obs.state.data (), (guint)r.obs.state.size (), now,
                                      GST_PI0_STATE_FLAG_PRESENT);
  om->sequence = r.number;
  om->observation_time = now;
  om->muxed_time = now;

  GstPi0RequestMeta *rm = gst_buffer_add_pi0_request_meta (buf, srv.name ().c_str (), r.client,
                                                           r.number, r.prompt.c_str (), r.seed);
  if (rm) {
    if (r.obs.seed)
      rm->flags = GST_PI0_REQUEST_FLAG_CLIENT_SEED;
    const GstClockTime waited = (GstClockTime)(g_get_monotonic_time () - r.received_us) * 1000;
    if (GST_CLOCK_TIME_IS_VALID (now))
      rm->received_time = now > waited ? now - waited : 0;
  }
  return buf;
}

static GstFlowReturn
gst_pi0_serve_src_create (GstPushSrc *psrc, GstBuffer **outbuf)
{
  auto self = GST_PI0_SERVE_SRC (psrc);
  auto srv = get_server (self);
  if (!srv)
    return GST_FLOW_FLUSHING;

  GstBuffer *buf = nullptr;
  serve::Request r;
  while (!buf) {
    if (srv->pop (&r) != serve::Server::Pop::kRequest)
      return GST_FLOW_FLUSHING;
    if (!r.obs.prompt && srv->settings ().default_prompt.empty ()) {
      /* openpi refuses it too ("Prompt is required") unless its config has a default. */
      const serve::Mapping &m = srv->settings ().mapping;
      srv->fail (r.client, r.number,
                 "invalid observation: no prompt: send one under '" +
                     serve::key_path_text (m.prompt) + "' (mapping '" + m.name +
                     "' has no default prompt, and none was given to the server)");
      continue;
    }
    buf = build_observation (self, *srv, r);
  }

  /* The prompt and the seed travel once, in the request meta: pi0infer uses them per request. */
  GST_LOG_OBJECT (self, "client %" G_GUINT64_FORMAT " request %" G_GUINT64_FORMAT, r.client,
                  r.number);
  *outbuf = buf;
  return GST_FLOW_OK;
}

static void
gst_pi0_serve_src_finalize (GObject *object)
{
  auto self = GST_PI0_SERVE_SRC (object);
  if (self->priv->state.server)
    self->priv->state.server->stop ();
  gst_clear_caps (&self->priv->state.caps);
  delete self->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_pi0_serve_src_class_init (GstPi0ServeSrcClass *klass)
{
  auto gobject_class = G_OBJECT_CLASS (klass);
  auto element_class = GST_ELEMENT_CLASS (klass);
  auto bsrc_class = GST_BASE_SRC_CLASS (klass);
  auto psrc_class = GST_PUSH_SRC_CLASS (klass);

  gobject_class->set_property = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_set_property);
  gobject_class->get_property = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_get_property);
  gobject_class->finalize = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_finalize);
  const Settings d; /* every default: Settings' initialisers */

  /**
   * GstPi0ServeSrc:server:
   *
   * The server's name: `pi0servesink` answers through the server a request came from, and two
   * sources in one process need different names.
   */
  g_object_class_install_property (
      gobject_class, PROP_SERVER,
      g_param_spec_string ("server", "Server name",
                           "Name of the policy server (unique per process)", d.server.c_str (),
                           GST_PI0_PARAM_READY));
  /**
   * GstPi0ServeSrc:host:
   *
   * The address to listen on, numeric. The default serves this machine only; `0.0.0.0` (or
   * `::`) serves the network: then set an API key.
   */
  g_object_class_install_property (
      gobject_class, PROP_HOST,
      g_param_spec_string ("host", "Host",
                           "Numeric address to listen on (0.0.0.0 or :: for every interface)",
                           d.host.c_str (), GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_PORT,
      g_param_spec_int ("port", "Port", "TCP port to listen on (0: any free port, see bound-port)",
                        0, 65535, d.port, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_BOUND_PORT,
      g_param_spec_int ("bound-port", "Bound port",
                        "The port the server listens on (0 when not running)", 0, 65535, 0,
                        GST_PI0_PARAM_READ_ONLY));
  /**
   * GstPi0ServeSrc:api-key:
   *
   * When set, clients must send `Authorization: Api-Key <key>` (what openpi-client sends when
   * given `api_key`); compared in constant time. Write-only: it is never shown. Prefer
   * #GstPi0ServeSrc:api-key-file, which keeps the key out of command lines.
   */
  g_object_class_install_property (
      gobject_class, PROP_API_KEY,
      g_param_spec_string ("api-key", "API key",
                           "Key clients must send as 'Authorization: Api-Key <key>' (write-only)",
                           nullptr, GST_PI0_PARAM_WRITE_ONLY));
  g_object_class_install_property (
      gobject_class, PROP_API_KEY_FILE,
      g_param_spec_string ("api-key-file", "API key file",
                           "File whose first line is the API key (instead of api-key)", nullptr,
                           GST_PI0_PARAM_READY));
  /**
   * GstPi0ServeSrc:mapping:
   *
   * Which observation keys are which view, the state and the prompt: `aloha`, `droid`,
   * `libero`, `aloha_towel`, `aloha_tupperware`, `aloha_pen_uncap`, `aloha_sim` (openpi's
   * configs), or the path of a JSON mapping file (docs/serve.md).
   */
  g_object_class_install_property (
      gobject_class, PROP_MAPPING,
      g_param_spec_string ("mapping", "Mapping",
                           "Observation keys: a preset (aloha, droid, libero) or a JSON file",
                           d.mapping.c_str (), GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_MAX_MESSAGE_SIZE,
      g_param_spec_uint ("max-message-size", "Max message size",
                         "Largest request in bytes; a client that sends more is disconnected", 1024,
                         1u << 30, d.max_message, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_MAX_CLIENTS,
      g_param_spec_int ("max-clients", "Max clients",
                        "Clients served at once; more are refused with HTTP 503", 1, 4096,
                        d.max_clients, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_REQUEST_TIMEOUT,
      g_param_spec_uint64 ("request-timeout", "Request timeout",
                           "Nanoseconds after which an unanswered request gets an error (0: wait "
                           "forever)",
                           0, G_MAXUINT64, d.request_timeout, GST_PI0_PARAM_READY));
  /**
   * GstPi0ServeSrc:seed:
   *
   * Request N of a connection draws its flow-matching noise from seed + N (unless the client
   * sends its own, see the mapping's "seed"): the same client, the same actions, however many
   * others share the server.
   */
  g_object_class_install_property (
      gobject_class, PROP_SEED,
      g_param_spec_uint64 ("seed", "Seed", "Noise seed: request N of each connection uses seed + N",
                           0, G_MAXUINT64, d.seed, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_PROMPT,
      g_param_spec_string ("prompt", "Default prompt",
                           "Instruction for requests that carry no prompt (default: the "
                           "mapping's default_prompt; with neither, they are refused)",
                           d.prompt.c_str (), GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_METADATA,
      g_param_spec_string ("metadata", "Metadata",
                           "JSON object sent to each client on connect (openpi's policy "
                           "metadata)",
                           d.metadata.c_str (), GST_PI0_PARAM_READY));
  /**
   * GstPi0ServeSrc:stats:
   *
   * `connections` (sessions opened), `open`, `refused` (key, origin, capacity), `requests`,
   * `replies`, `errors` (sent to clients), `dropped` (answers for clients that had gone),
   * `timeouts`, `queued` (waiting for the pipeline), `peers` (TCP connections now), `evicted`
   * (peers that were not sessions, closed to make room for new ones), `hung` (sessions closed
   * for answering no ping), `draining` (after the `drain` signal).
   */
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics", "Connections, requests, replies, errors",
                          GST_TYPE_STRUCTURE, GST_PI0_PARAM_READ_ONLY));

  /**
   * GstPi0ServeSrc::drain:
   *
   * Action signal: drain the server gracefully (what `pi0-serve` does on SIGTERM, for a rolling
   * restart). It stops listening, `/healthz` and new upgrades answer 503, each session gets the
   * answers to what it has sent and is then closed with 1001 (going away), so its robot
   * reconnects elsewhere. The pipeline keeps running: stop it once the `open` stat is 0.
   */
  g_signal_new_class_handler (
      "drain", G_TYPE_FROM_CLASS (klass), (GSignalFlags)(G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION),
      G_CALLBACK (gst_pi0_serve_src_drain), nullptr, nullptr, nullptr, G_TYPE_NONE, 0);

  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 policy server source", "Source/Network",
      "Serves robots over openpi's websocket protocol: each request becomes an observation",
      GST_PI0_AUTHOR);
  element_class->change_state = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_change_state);

  bsrc_class->start = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_start);
  bsrc_class->stop = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_stop);
  bsrc_class->get_caps = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_get_caps);
  bsrc_class->unlock = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_unlock);
  bsrc_class->unlock_stop = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_unlock_stop);
  psrc_class->create = GST_DEBUG_FUNCPTR (gst_pi0_serve_src_create);

  GST_DEBUG_CATEGORY_INIT (gst_pi0_serve_src_debug, "pi0servesrc", 0, "Pi0 policy server source");
}

static void
gst_pi0_serve_src_init (GstPi0ServeSrc *self)
{
  self->priv = new GstPi0ServeSrcPrivate ();
  gst_base_src_set_live (GST_BASE_SRC (self), TRUE);
  gst_base_src_set_format (GST_BASE_SRC (self), GST_FORMAT_TIME);
  gst_base_src_set_do_timestamp (GST_BASE_SRC (self), TRUE);
}
