/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0servesink
 * @title: pi0servesink
 *
 * The end of a policy server pipeline: sends each observation's #GstPi0ActionMeta back to the
 * client whose request it answers (its #GstPi0RequestMeta, made by `pi0servesrc`), as openpi's
 * server does: `actions` (float32 [horizon, dim], the mapping's `action_dim` columns),
 * `policy_timing` and `server_timing`.
 *
 * An observation that reaches the sink without actions (the policy skipped or failed it) or
 * with non-finite ones gets its client an error instead: nothing unsafe is sent, and no client
 * waits for an answer that will not come. Buffers without a request meta are dropped with a
 * warning (they did not come from a `pi0servesrc`).
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 pi0servesrc mapping=libero ! cudaprep width=224 height=224 ! \
 *   pi0infer model=/models/pi0_libero ! pi0servesink
 * ]|
 *
 * Since: 0.3
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/serve/gstpi0servesink.h"

#include "gst/common/gstpi0props.h"

#include "serve/pi0server.h"

#include <gst/pi0/pi0.h>

#include <mutex>
#include <string>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_serve_sink_debug);
#define GST_CAT_DEFAULT gst_pi0_serve_sink_debug

/* Locking: settings_lock guards the server property, stats_lock the counters. Never held
 * together nor while answering. */

namespace
{

namespace serve = pi0::serve;

enum {
  PROP_0,
  PROP_SERVER,
  PROP_STATS,
};

/* The properties, each starting at its default (the param specs read them here). */
struct Settings {
  std::string server; /* NULL when empty: the server named in each request */
};

struct Stats {
  guint64 replies = 0;      /* chunks handed to the server */
  guint64 no_actions = 0;   /* observations without actions: the client got an error */
  guint64 non_finite = 0;   /* chunks refused: the client got an error */
  guint64 not_requests = 0; /* buffers without a request meta, dropped */
};

} // namespace

/* The streaming thread's. */
struct State {
  bool warned_not_request = false;
};

struct GstPi0ServeSinkPrivate {
  std::mutex settings_lock;
  Settings settings; /* under settings_lock */
  State state;
  std::mutex stats_lock;
  Stats stats; /* under stats_lock */
};

struct _GstPi0ServeSink {
  GstBaseSink parent;
  GstPi0ServeSinkPrivate *priv;
};

#define gst_pi0_serve_sink_parent_class parent_class
G_DEFINE_TYPE (GstPi0ServeSink, gst_pi0_serve_sink, GST_TYPE_BASE_SINK);
GST_ELEMENT_REGISTER_DEFINE (pi0servesink, "pi0servesink", GST_RANK_NONE, GST_TYPE_PI0_SERVE_SINK);

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE (
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_CAPS));

/* Copies @value into the settings (@set) or out of them: one table for both directions. */
static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_STRING (PROP_SERVER, server)
  }
  return false;
}

static void
gst_pi0_serve_sink_set_property (GObject *object, guint prop_id, const GValue *value,
                                 GParamSpec *pspec)
{
  auto self = GST_PI0_SERVE_SINK (object);
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_serve_sink_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  auto self = GST_PI0_SERVE_SINK (object);
  if (prop_id == PROP_STATS) {
    Stats s;
    {
      std::lock_guard<std::mutex> lk (self->priv->stats_lock);
      s = self->priv->stats;
    }
    g_value_take_boxed (value, gst_structure_new ("pi0servesink-stats", "replies", G_TYPE_UINT64,
                                                  s.replies, "no-actions", G_TYPE_UINT64,
                                                  s.no_actions, "non-finite", G_TYPE_UINT64,
                                                  s.non_finite, "not-requests", G_TYPE_UINT64,
                                                  s.not_requests, nullptr));
    return;
  }
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static GstFlowReturn
gst_pi0_serve_sink_render (GstBaseSink *bsink, GstBuffer *buf)
{
  auto self = GST_PI0_SERVE_SINK (bsink);
  auto priv = self->priv;
  GstPi0RequestMeta *rm = gst_buffer_get_pi0_request_meta (buf);
  std::string only;
  {
    std::lock_guard<std::mutex> lk (priv->settings_lock);
    only = priv->settings.server;
  }
  if (!rm || (!only.empty () && only != rm->server)) {
    {
      std::lock_guard<std::mutex> lk (priv->stats_lock);
      priv->stats.not_requests++;
    }
    if (!priv->state.warned_not_request) {
      priv->state.warned_not_request = true;
      GST_ELEMENT_WARNING (self, STREAM, FORMAT,
                           ("An observation that %s reached pi0servesink: dropped.",
                            rm ? "came through another server" : "no client asked for"),
                           ("put pi0servesrc at the head of the pipeline (server '%s')",
                            rm ? rm->server : only.c_str ()));
    }
    return GST_FLOW_OK;
  }

  /* A server that is not running (stopped meanwhile) drops the answer itself. */
  auto srv = serve::Server::get (rm->server);
  GstPi0ActionMeta *am = gst_buffer_get_pi0_action_meta (buf);
  if (!am || am->horizon == 0 || am->dim == 0 || !am->actions) {
    {
      std::lock_guard<std::mutex> lk (priv->stats_lock);
      priv->stats.no_actions++;
    }
    GST_INFO_OBJECT (self, "client %" G_GUINT64_FORMAT " request %" G_GUINT64_FORMAT ": no actions",
                     rm->client_id, rm->request_id);
    srv->fail (rm->client_id, rm->request_id,
               rm->error ? std::string ("the policy failed on this request: ") + rm->error
                         : "the policy gave no actions for this observation (see the server's log)");
    return GST_FLOW_OK;
  }
  if (!gst_pi0_action_meta_check_finite (am)) {
    {
      std::lock_guard<std::mutex> lk (priv->stats_lock);
      priv->stats.non_finite++;
    }
    GST_WARNING_OBJECT (self,
                        "client %" G_GUINT64_FORMAT " request %" G_GUINT64_FORMAT
                        ": non-finite actions, refused",
                        rm->client_id, rm->request_id);
    srv->fail (rm->client_id, rm->request_id,
               "the policy's actions for this observation were not finite; none were sent");
    return GST_FLOW_OK;
  }

  serve::Reply reply;
  reply.horizon = (int)am->horizon;
  reply.dim = (int)am->dim;
  reply.actions.assign (am->actions, am->actions + (size_t)am->horizon * am->dim);
  if (GST_CLOCK_TIME_IS_VALID (am->inference_time))
    reply.policy_infer_ms = (double)am->inference_time / GST_MSECOND;
  srv->reply (rm->client_id, rm->request_id, std::move (reply));
  {
    std::lock_guard<std::mutex> lk (priv->stats_lock);
    priv->stats.replies++;
  }
  return GST_FLOW_OK;
}

static gboolean
gst_pi0_serve_sink_start (GstBaseSink *bsink)
{
  auto self = GST_PI0_SERVE_SINK (bsink);
  std::lock_guard<std::mutex> lk (self->priv->stats_lock);
  self->priv->stats = Stats ();
  self->priv->state.warned_not_request = false;
  return TRUE;
}

static void
gst_pi0_serve_sink_finalize (GObject *object)
{
  delete GST_PI0_SERVE_SINK (object)->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_pi0_serve_sink_class_init (GstPi0ServeSinkClass *klass)
{
  auto gobject_class = G_OBJECT_CLASS (klass);
  auto element_class = GST_ELEMENT_CLASS (klass);
  auto bsink_class = GST_BASE_SINK_CLASS (klass);

  gobject_class->set_property = GST_DEBUG_FUNCPTR (gst_pi0_serve_sink_set_property);
  gobject_class->get_property = GST_DEBUG_FUNCPTR (gst_pi0_serve_sink_get_property);
  gobject_class->finalize = GST_DEBUG_FUNCPTR (gst_pi0_serve_sink_finalize);

  /**
   * GstPi0ServeSink:server:
   *
   * Answer only requests from this server (a `pi0servesrc`'s #GstPi0ServeSrc:server); unset,
   * each request is answered through the server it came from.
   */
  g_object_class_install_property (
      gobject_class, PROP_SERVER,
      g_param_spec_string (
          "server", "Server name",
          "Answer only requests of this server (default: any, each through its "
          "own)",
          nullptr, GST_PI0_PARAM_READY));
  /**
   * GstPi0ServeSink:stats:
   *
   * `replies`, `no-actions` and `non-finite` (the client got an error instead), `not-requests`
   * (buffers no client asked for, dropped).
   */
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics", "Replies, errors, dropped buffers",
                          GST_TYPE_STRUCTURE, GST_PI0_PARAM_READ_ONLY));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 policy server sink", "Sink/Network",
      "Sends each action chunk back to the robot that asked for it (openpi's protocol)",
      GST_PI0_AUTHOR);

  bsink_class->render = GST_DEBUG_FUNCPTR (gst_pi0_serve_sink_render);
  bsink_class->start = GST_DEBUG_FUNCPTR (gst_pi0_serve_sink_start);

  GST_DEBUG_CATEGORY_INIT (gst_pi0_serve_sink_debug, "pi0servesink", 0, "Pi0 policy server sink");
}

static void
gst_pi0_serve_sink_init (GstPi0ServeSink *self)
{
  self->priv = new GstPi0ServeSinkPrivate ();
  /* Answers go out as soon as they exist: there is nothing to synchronise with. */
  gst_base_sink_set_sync (GST_BASE_SINK (self), FALSE);
  /* Nothing to preroll either: the source is live and the first buffer comes only when a robot
   * asks, so an async state change would leave the pipeline short of PLAYING (and /healthz at
   * 503) until then. */
  gst_base_sink_set_async_enabled (GST_BASE_SINK (self), FALSE);
  /* A robot's images and actions are not kept after the answer. */
  gst_base_sink_set_last_sample_enabled (GST_BASE_SINK (self), FALSE);
}
