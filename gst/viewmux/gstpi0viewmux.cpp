/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0viewmux
 * @title: pi0viewmux
 *
 * Combines up to three camera views (`main`, `side`, `top`) and an optional robot state
 * stream (`state`) into one observation per frame of the base view: a buffer whose memories
 * are the chosen view frames (references, no copy), in view order, with a
 * #GstPi0ObservationMeta that says which views are valid, where each frame is, when it was
 * captured, and which robot state goes with it. Each other view gives its newest frame captured
 * at or before the base frame + #GstPi0ViewMux:max-skew; a view with nothing newer than
 * #GstPi0ViewMux:max-staleness is masked, never zero-filled. Live, a stalled camera never
 * stalls the output; not live, the muxer waits for data, so a replay gives the same
 * observations. The base view paces the output, and its end ends the stream. The rules, the
 * counters and the errors are in docs/elements/pi0viewmux.md.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 pi0viewmux name=mux ! fakesink silent=false -v \
 *   videotestsrc num-buffers=60 ! video/x-raw,format=RGB,width=640,height=480,framerate=30/1 ! mux.main \
 *   videotestsrc num-buffers=30 pattern=ball ! video/x-raw,format=NV12,width=320,height=240,framerate=15/1 ! mux.side \
 *   videotestsrc num-buffers=20 pattern=smpte ! video/x-raw,format=I420,width=1280,height=720,framerate=10/1 ! mux.top
 * ]| Three test cameras of different sizes, formats and rates; `fakesink` prints each
 * observation with its `meta:GstPi0ObservationMeta`.
 *
 * Since: 0.1
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/viewmux/gstpi0viewmux.h"

#include "gst/common/gstpi0enum.h"
#include "gst/common/gstpi0props.h"
#include "gst/common/pi0notice.h"
#include "gst/viewmux/pi0muxer.h"

#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_view_mux_debug);
#define GST_CAT_DEFAULT gst_pi0_view_mux_debug

/* The element is glue over its engine, pi0::mux::Muxer (pi0muxer.h): what it holds, selection,
 * composition and every message are the muxer's, the timing rules pi0pairing.h's. Here:
 * properties, pads, caps, events, latency, the clock, stats and posting.
 *
 * Locking: OBJECT_LOCK (self) guards the pad table (which input has which pad). It is taken
 * before settings_lock or stats_lock, never the other way round, and settings_lock and
 * stats_lock are never held together. None of them is held while pushing, posting or
 * querying. The muxer (priv->muxer) belongs to the aggregate thread; start, stop and flush run
 * while that thread is stopped. */

enum { VIEW_MAIN, VIEW_SIDE, VIEW_TOP };
enum { TIMESTAMPS_RUNNING_TIME, TIMESTAMPS_PTS };

static_assert (GST_CLOCK_TIME_NONE == pi0::mux::kNone, "the pairing rules use GStreamer's times");

enum {
  PROP_0,
  PROP_BASE_VIEW,
  PROP_MAX_SKEW,
  PROP_MAX_STALENESS,
  PROP_MAX_STATE_AGE,
  PROP_REQUIRE_ALL_VIEWS,
  PROP_FORCE_LIVE,
  PROP_MAX_WAIT,
  PROP_TIMESTAMPS,
  PROP_STATS
};

/* Inputs are numbered 0..2 for the views (pi0::kViewNames) and STATE_INPUT for the state pad. */
constexpr int N_VIEWS = pi0::mux::kViews, STATE_INPUT = pi0::mux::kStateInput;

#define STATE_CAPS GST_PI0_STATE_MEDIA_TYPE ", dim = (int) [ 1, 1024 ]"

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE (
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_CAPS));

/* The caps a view pad takes: the formats kernels/ reads, in system or CUDA memory. */
static GstCaps *
view_caps ()
{
  const std::string f = pi0::mux::view_formats ();
  const std::string raw = "video/x-raw, format = (string) " + f +
                          ", width = " GST_VIDEO_SIZE_RANGE ", height = " GST_VIDEO_SIZE_RANGE
                          ", framerate = " GST_VIDEO_FPS_RANGE;
  const std::string cuda = "video/x-raw(memory:CUDAMemory)" + raw.substr (strlen ("video/x-raw"));
  return gst_caps_from_string ((raw + "; " + cuda).c_str ());
}

/* ------------------------------------------------------------------------------------------ */
/* The pad                                                                                     */

struct _GstPi0ViewMuxPad {
  GstAggregatorPad parent;
  /* The view is set at creation; the rest is written and read by the aggregate thread only
   * (serialized events are handled there). */
  pi0::mux::PadFormat format;
};

G_DEFINE_TYPE (GstPi0ViewMuxPad, gst_pi0_view_mux_pad, GST_TYPE_AGGREGATOR_PAD);

static void
gst_pi0_view_mux_pad_class_init (GstPi0ViewMuxPadClass *klass)
{
}

static void
gst_pi0_view_mux_pad_init (GstPi0ViewMuxPad *pad)
{
  new (&pad->format) pi0::mux::PadFormat (); /* trivially destructible: nothing to finalize */
}

/* ------------------------------------------------------------------------------------------ */
/* The element                                                                                 */

/* The properties, each starting at its default (the param specs read them here; force-live is
 * the base class's). */
struct Settings {
  int base_view = VIEW_MAIN;
  GstClockTime max_skew = 10 * GST_MSECOND;
  GstClockTime max_staleness = 200 * GST_MSECOND;
  GstClockTime max_state_age = 100 * GST_MSECOND;
  bool require_all_views = false;
  GstClockTime max_wait = G_MAXUINT64; /* -1: the pipeline latency */
  int timestamps = TIMESTAMPS_RUNNING_TIME;

  /* What the muxer takes. */
  pi0::mux::Settings muxer () const
  {
    pi0::mux::Settings m;
    m.base_view = base_view;
    m.max_skew = max_skew;
    m.max_staleness = max_staleness;
    m.max_state_age = max_state_age;
    m.require_all_views = require_all_views;
    m.max_wait = max_wait;
    m.use_pts = timestamps == TIMESTAMPS_PTS;
    return m;
  }
};

struct GstPi0ViewMuxPrivate {
  std::mutex settings_lock;
  Settings settings; /* under settings_lock */

  std::mutex stats_lock;
  pi0::mux::Counts stats; /* under stats_lock */

  /* OBJECT_LOCK: the pad of each input; a view stays active (masked) when its pad is released
   * while running, so downstream keeps the same views until the next stop. */
  std::array<GstPi0ViewMuxPad *, N_VIEWS + 1> pads{};
  std::array<bool, N_VIEWS> active{};
  bool running = false;

  /* The live latency the base class waits (from the last LATENCY query answered), for
   * max-wait; NONE when not live or not yet known. */
  std::atomic<GstClockTime> latency{GST_CLOCK_TIME_NONE};

  pi0::mux::Muxer muxer; /* the aggregate thread's */
};

struct _GstPi0ViewMux {
  GstAggregator parent;
  GstPi0ViewMuxPrivate *priv;
};

#define gst_pi0_view_mux_parent_class parent_class
G_DEFINE_TYPE (GstPi0ViewMux, gst_pi0_view_mux, GST_TYPE_AGGREGATOR);
GST_ELEMENT_REGISTER_DEFINE (pi0viewmux, "pi0viewmux", GST_RANK_NONE, GST_TYPE_PI0_VIEW_MUX);

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_view_mux_view_get_type, "GstPi0ViewMuxView",
                          {VIEW_MAIN, "The main (base) camera", "main"},
                          {VIEW_SIDE, "The side (left wrist) camera", "side"},
                          {VIEW_TOP, "The top (right wrist) camera", "top"})

GST_PI0_DEFINE_ENUM_TYPE (
    gst_pi0_view_mux_timestamps_get_type, "GstPi0ViewMuxTimestamps",
    {TIMESTAMPS_RUNNING_TIME, "Running time of each buffer in its pad's segment", "running-time"},
    {TIMESTAMPS_PTS, "Buffer PTS as they are, ignoring segments (replaying recordings)", "pts"})

static void
gst_pi0_view_mux_init (GstPi0ViewMux *self)
{
  self->priv = new GstPi0ViewMuxPrivate ();
  /* Our own latency: the time we wait for a frame captured up to max-skew after the base. */
  const GstClockTime skew = self->priv->settings.max_skew;
  gst_aggregator_set_latency (GST_AGGREGATOR (self), skew, skew);
}

static void
gst_pi0_view_mux_finalize (GObject *object)
{
  delete GST_PI0_VIEW_MUX (object)->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

/* Copies @value into the settings (@set) or out of them: one table for both directions. */
static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_FIELD (PROP_BASE_VIEW, base_view, gint, enum)
    GST_PI0_PROP_FIELD (PROP_MAX_SKEW, max_skew, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_MAX_STALENESS, max_staleness, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_MAX_STATE_AGE, max_state_age, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_REQUIRE_ALL_VIEWS, require_all_views, gboolean, boolean)
    GST_PI0_PROP_FIELD (PROP_MAX_WAIT, max_wait, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_TIMESTAMPS, timestamps, gint, enum)
  }
  return false;
}

static void
gst_pi0_view_mux_set_property (GObject *object, guint prop_id, const GValue *value,
                               GParamSpec *pspec)
{
  auto self = GST_PI0_VIEW_MUX (object);
  auto priv = self->priv;

  if (prop_id == PROP_FORCE_LIVE) {
    gst_aggregator_set_force_live (GST_AGGREGATOR (self), g_value_get_boolean (value));
    return;
  }
  GstClockTime skew = GST_CLOCK_TIME_NONE;
  bool known;
  {
    std::lock_guard<std::mutex> lk (priv->settings_lock);
    const GstClockTime before = priv->settings.max_skew;
    known = transfer (priv->settings, prop_id, (GValue *)value, true);
    if (priv->settings.max_skew != before)
      skew = priv->settings.max_skew;
  }
  if (!known) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    return;
  }
  /* max-skew is our latency. Outside every lock: the bus handler may query latency at once. */
  if (GST_CLOCK_TIME_IS_VALID (skew)) {
    gst_aggregator_set_latency (GST_AGGREGATOR (self), skew, skew);
    gst_element_post_message (GST_ELEMENT (self), gst_message_new_latency (GST_OBJECT (self)));
  }
}

static void
gst_pi0_view_mux_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  auto self = GST_PI0_VIEW_MUX (object);
  auto priv = self->priv;

  if (prop_id == PROP_STATS) {
    pi0::mux::Counts c;
    {
      std::lock_guard<std::mutex> lk (priv->stats_lock);
      c = priv->stats;
    }
    GST_OBJECT_LOCK (self);
    auto active = priv->active;
    GST_OBJECT_UNLOCK (self);
    g_value_take_boxed (value, pi0::mux::counts_structure (c, active));
    return;
  }
  if (prop_id == PROP_FORCE_LIVE) {
    g_value_set_boolean (value, gst_aggregator_get_force_live (GST_AGGREGATOR (self)));
    return;
  }
  std::lock_guard<std::mutex> lk (priv->settings_lock);
  if (!transfer (priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static Settings
snapshot_settings (GstPi0ViewMux *self)
{
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  return self->priv->settings;
}

/* ------------------------------------------------------------------------------------------ */
/* Pads                                                                                        */

/* One pad per input, named after its template (the base class would number them). */
static GstAggregatorPad *
gst_pi0_view_mux_create_new_pad (GstAggregator *agg, GstPadTemplate *templ, const gchar *req_name,
                                 const GstCaps *caps)
{
  auto self = GST_PI0_VIEW_MUX (agg);
  auto priv = self->priv;
  const gchar *name = GST_PAD_TEMPLATE_NAME_TEMPLATE (templ);
  const int input = pi0::mux::input_by_name (name);
  if (input < 0)
    return nullptr;

  GST_OBJECT_LOCK (self);
  if (priv->pads[input]) {
    GST_OBJECT_UNLOCK (self);
    GST_WARNING_OBJECT (self, "pad %s already exists", name);
    return nullptr;
  }
  auto pad =
      GST_PI0_VIEW_MUX_PAD (g_object_new (GST_TYPE_PI0_VIEW_MUX_PAD, "name", name, "direction",
                                          GST_PAD_SINK, "template", templ, nullptr));
  pad->format.view = input < N_VIEWS ? input : -1;
  priv->pads[input] = pad;
  /* A new view, or the state pad, changes the observation caps. */
  bool was_active = input < N_VIEWS && priv->active[input];
  if (input < N_VIEWS)
    priv->active[input] = true;
  GST_OBJECT_UNLOCK (self);
  if (!was_active)
    gst_pad_mark_reconfigure (GST_AGGREGATOR_SRC_PAD (self));
  GST_DEBUG_OBJECT (self, "added pad %s", name);
  return GST_AGGREGATOR_PAD (pad);
}

static void
gst_pi0_view_mux_release_pad (GstElement *element, GstPad *pad)
{
  auto priv = GST_PI0_VIEW_MUX (element)->priv;
  const int view = GST_PI0_VIEW_MUX_PAD (pad)->format.view;

  GST_OBJECT_LOCK (element);
  priv->pads[view >= 0 ? view : STATE_INPUT] = nullptr;
  /* While running the view stays, masked, so the observation layout does not change under
   * downstream's feet; it goes at the next stop. */
  if (view >= 0 && !priv->running)
    priv->active[view] = false;
  GST_OBJECT_UNLOCK (element);
  GST_DEBUG_OBJECT (element, "releasing pad %s", GST_PAD_NAME (pad));
  GST_ELEMENT_CLASS (parent_class)->release_pad (element, pad);
}

/* The inputs as the aggregate thread sees them now (each pad with a reference), and the active
 * views. */
struct PadSnapshot {
  pi0::mux::Pads in{};
  std::array<bool, N_VIEWS> active{};

  explicit PadSnapshot (GstPi0ViewMux *self)
  {
    GST_OBJECT_LOCK (self);
    for (int i = 0; i <= N_VIEWS; i++) {
      if (GstPi0ViewMuxPad *p = self->priv->pads[i])
        in[i] = {GST_AGGREGATOR_PAD (gst_object_ref (p)), &p->format};
    }
    active = self->priv->active;
    GST_OBJECT_UNLOCK (self);
  }
  PadSnapshot (const PadSnapshot &) = delete;
  PadSnapshot &operator= (const PadSnapshot &) = delete;
  ~PadSnapshot ()
  {
    for (auto &p : in) {
      if (p.pad)
        gst_object_unref (p.pad);
    }
  }
};

/* ------------------------------------------------------------------------------------------ */
/* Lifecycle                                                                                   */

static gboolean
gst_pi0_view_mux_start (GstAggregator *agg)
{
  auto priv = GST_PI0_VIEW_MUX (agg)->priv;

  priv->muxer.clear (false);
  {
    std::lock_guard<std::mutex> lk (priv->stats_lock);
    priv->stats = pi0::mux::Counts ();
  }
  GST_OBJECT_LOCK (agg);
  priv->running = true;
  GST_OBJECT_UNLOCK (agg);
  return TRUE;
}

static gboolean
gst_pi0_view_mux_stop (GstAggregator *agg)
{
  auto priv = GST_PI0_VIEW_MUX (agg)->priv;

  priv->muxer.clear (false);
  priv->latency.store (GST_CLOCK_TIME_NONE);
  GST_OBJECT_LOCK (agg);
  priv->running = false;
  for (int v = 0; v < N_VIEWS; v++)
    priv->active[v] = priv->pads[v] != nullptr;
  GST_OBJECT_UNLOCK (agg);
  return TRUE;
}

static GstFlowReturn
gst_pi0_view_mux_flush (GstAggregator *agg)
{
  /* Frames from before a flushing seek must never pair with frames after it. */
  GST_DEBUG_OBJECT (agg, "flush");
  GST_PI0_VIEW_MUX (agg)->priv->muxer.clear (true);
  auto parent = GST_AGGREGATOR_CLASS (parent_class);
  return parent->flush ? parent->flush (agg) : GST_FLOW_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Caps                                                                                        */

static gboolean
gst_pi0_view_mux_sink_event (GstAggregator *agg, GstAggregatorPad *apad, GstEvent *event)
{
  auto self = GST_PI0_VIEW_MUX (agg);
  auto pad = GST_PI0_VIEW_MUX_PAD (apad);

  if (GST_EVENT_TYPE (event) == GST_EVENT_CAPS) {
    GstCaps *caps;
    std::string why;
    gst_event_parse_caps (event, &caps);
    /* Refused caps leave the pad unusable until new caps come: nothing reads the rest. */
    if (!pad->format.take_caps (caps, &why)) {
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, ("%s", why.c_str ()),
                         ("caps: %" GST_PTR_FORMAT, caps));
      gst_event_unref (event);
      return FALSE;
    }
    GST_DEBUG_OBJECT (pad, "caps %" GST_PTR_FORMAT, caps);
    gst_pad_mark_reconfigure (GST_AGGREGATOR_SRC_PAD (self));
  } else if (GST_EVENT_TYPE (event) == GST_EVENT_SEGMENT) {
    const GstSegment *segment;
    gst_event_parse_segment (event, &segment);
    if (segment->format != GST_FORMAT_TIME) {
      GST_ELEMENT_ERROR (self, STREAM, FORMAT,
                         ("Pad '%s' got a segment in %s, not in time.", GST_PAD_NAME (pad),
                          gst_format_get_name (segment->format)),
                         (nullptr));
      gst_event_unref (event);
      return FALSE;
    }
    /* The output runs in the base view's segment: its PTS are the observations' PTS. */
    if (pad->format.view == snapshot_settings (self).base_view)
      gst_aggregator_update_segment (agg, segment);
  }
  return GST_AGGREGATOR_CLASS (parent_class)->sink_event (agg, apad, event);
}

static gboolean
gst_pi0_view_mux_sink_query (GstAggregator *agg, GstAggregatorPad *apad, GstQuery *query)
{
  if (GST_QUERY_TYPE (query) == GST_QUERY_ACCEPT_CAPS) {
    /* Any fixed caps, so that the CAPS event reaches us and caps we cannot use get an error
     * naming the pad and what it takes, instead of a bare not-negotiated that sources report
     * as "Internal data stream error". CAPS queries still answer with the exact template. */
    GstCaps *caps;
    gst_query_parse_accept_caps (query, &caps);
    gst_query_set_accept_caps_result (query, gst_caps_is_fixed (caps));
    return TRUE;
  }
  return GST_AGGREGATOR_CLASS (parent_class)->sink_query (agg, apad, query);
}

static GstFlowReturn
gst_pi0_view_mux_update_src_caps (GstAggregator *agg, GstCaps *downstream, GstCaps **ret)
{
  auto self = GST_PI0_VIEW_MUX (agg);
  const int base_view = snapshot_settings (self).base_view;
  PadSnapshot snap (self);

  GstCaps *caps = pi0::mux::Muxer::caps (snap.in, snap.active, base_view);
  if (!caps)
    return GST_AGGREGATOR_FLOW_NEED_DATA;
  *ret = gst_caps_intersect (caps, downstream);
  if (gst_caps_is_empty (*ret)) {
    GST_ELEMENT_ERROR (
        self, CORE, NEGOTIATION, ("Downstream does not accept the observations."),
        ("offered %" GST_PTR_FORMAT ", downstream accepts %" GST_PTR_FORMAT, caps, downstream));
    gst_clear_caps (ret);
  }
  gst_caps_unref (caps);
  return *ret ? GST_FLOW_OK : GST_FLOW_NOT_NEGOTIATED;
}

/* ------------------------------------------------------------------------------------------ */
/* Time                                                                                        */

/* The running time the base class times out at, adding its latency (Muxer::next_time(); called
 * from the aggregate thread). */
static GstClockTime
gst_pi0_view_mux_get_next_time (GstAggregator *agg)
{
  auto self = GST_PI0_VIEW_MUX (agg);
  Settings s = snapshot_settings (self);
  PadSnapshot snap (self);
  /* The latency is our record of it: the base class holds its lock while asking us. */
  return self->priv->muxer.next_time (snap.in, s.muxer (), self->priv->latency.load ());
}

static gboolean
gst_pi0_view_mux_src_query (GstAggregator *agg, GstQuery *query)
{
  if (!GST_AGGREGATOR_CLASS (parent_class)->src_query (agg, query))
    return FALSE;
  if (GST_QUERY_TYPE (query) == GST_QUERY_LATENCY) {
    gboolean live;
    GstClockTime min;
    gst_query_parse_latency (query, &live, &min, nullptr);
    GST_PI0_VIEW_MUX (agg)->priv->latency.store (live ? min : GST_CLOCK_TIME_NONE);
  }
  return TRUE;
}

/* ------------------------------------------------------------------------------------------ */
/* Aggregation: the muxer decides, the element counts, posts and pushes                        */

static GstFlowReturn
gst_pi0_view_mux_aggregate (GstAggregator *agg, gboolean timeout)
{
  auto self = GST_PI0_VIEW_MUX (agg);
  auto priv = self->priv;
  const Settings s = snapshot_settings (self);
  PadSnapshot snap (self);
  pi0::mux::Counts d;
  pi0::Notices n;
  GstBuffer *out = nullptr;

  GstFlowReturn ret = priv->muxer.aggregate (
      snap.in, snap.active, s.muxer (), gst_element_get_current_running_time (GST_ELEMENT (self)),
      gst_aggregator_get_latency (agg), priv->latency.load (), timeout, &out, d, n);
  {
    std::lock_guard<std::mutex> lk (priv->stats_lock);
    priv->stats += d;
  }
  GST_PI0_POST_NOTICES (self, n);
  if (ret != GST_FLOW_OK || !out) {
    if (ret == GST_FLOW_OK && d.dropped_observations)
      GST_LOG_OBJECT (self, "dropped an observation: a view is masked");
    return ret;
  }

  /* Stamped as it leaves: the mux stage of pi0actionsink's latency. */
  gst_buffer_get_pi0_observation_meta (out)->muxed_time =
      gst_element_get_current_running_time (GST_ELEMENT (self));
  GST_OBJECT_LOCK (agg->srcpad);
  GST_AGGREGATOR_PAD (agg->srcpad)->segment.position = GST_BUFFER_PTS (out);
  GST_OBJECT_UNLOCK (agg->srcpad);
  gst_aggregator_selected_samples (agg, GST_BUFFER_PTS (out), GST_CLOCK_TIME_NONE,
                                   GST_BUFFER_DURATION (out), nullptr);
  GST_LOG_OBJECT (self, "observation at %" GST_TIME_FORMAT, GST_TIME_ARGS (GST_BUFFER_PTS (out)));
  return gst_aggregator_finish_buffer (agg, out);
}

/* ------------------------------------------------------------------------------------------ */
/* Class                                                                                       */

static void
gst_pi0_view_mux_class_init (GstPi0ViewMuxClass *klass)
{
  auto gobject_class = G_OBJECT_CLASS (klass);
  auto element_class = GST_ELEMENT_CLASS (klass);
  auto agg_class = GST_AGGREGATOR_CLASS (klass);

  gobject_class->finalize = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_finalize);
  gobject_class->set_property = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_set_property);
  gobject_class->get_property = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_get_property);
  auto install = [gobject_class] (guint id, GParamSpec *ps) {
    g_object_class_install_property (gobject_class, id, ps);
  };
  const Settings d; /* every default: Settings' initialisers */

  /**
   * GstPi0ViewMux:base-view:
   *
   * The view whose frames pace the output: one observation per frame of this view.
   */
  install (PROP_BASE_VIEW,
           g_param_spec_enum ("base-view", "Base view",
                              "The view whose frames pace the output: one observation per frame",
                              GST_TYPE_PI0_VIEW_MUX_VIEW, d.base_view, GST_PI0_PARAM_READY));
  /**
   * GstPi0ViewMux:max-skew:
   *
   * How much later than the base frame another view's frame may be captured and still pair
   * with it (in nanoseconds). Live, the muxer waits this long for such frames: it is its own
   * latency. Valid frames older than this are flagged %GST_PI0_VIEW_FLAG_SKEWED.
   */
  install (PROP_MAX_SKEW,
           g_param_spec_uint64 ("max-skew", "Maximum skew",
                                "How much later than the base frame another view's frame may be "
                                "captured and still pair with it (in nanoseconds)",
                                0, 10 * GST_SECOND, d.max_skew, GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0ViewMux:max-staleness:
   *
   * A view whose newest frame is older than this, relative to the observation, is marked
   * invalid (masked) instead of repeating its old frame (in nanoseconds).
   */
  install (PROP_MAX_STALENESS,
           g_param_spec_uint64 ("max-staleness", "Maximum staleness",
                                "A view whose newest frame is older than this, relative to the "
                                "observation, is masked (in nanoseconds)",
                                0, G_MAXUINT64, d.max_staleness, GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0ViewMux:max-state-age:
   *
   * A robot state sample older than this, relative to the observation, is flagged
   * %GST_PI0_STATE_FLAG_STALE in the meta (in nanoseconds).
   */
  install (
      PROP_MAX_STATE_AGE,
      g_param_spec_uint64 ("max-state-age", "Maximum state age",
                           "A robot state sample older than this, relative to the observation, "
                           "is flagged stale (in nanoseconds)",
                           0, G_MAXUINT64, d.max_state_age, GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0ViewMux:require-all-views:
   *
   * Drop observations in which any view is masked, instead of sending them with the view
   * marked invalid.
   */
  install (PROP_REQUIRE_ALL_VIEWS,
           g_param_spec_boolean ("require-all-views", "Require all views",
                                 "Drop observations in which any view is masked instead of sending "
                                 "them with the view marked invalid",
                                 d.require_all_views, GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0ViewMux:force-live:
   *
   * Behave as a live muxer (wait at most the latency for late views) even when no upstream
   * source says it is live, e.g. with an `appsrc` fed from a robot's driver.
   */
  install (PROP_FORCE_LIVE,
           g_param_spec_boolean (
               "force-live", "Force live",
               "Behave as a live muxer even when no upstream source is live",
               FALSE /* construct-only: GObject gives GstAggregator this default at construction */,
               GST_PI0_PARAM_CONSTRUCT_ONLY));
  /**
   * GstPi0ViewMux:max-wait:
   *
   * Live only: the longest an observation waits after its base frame's capture (in
   * nanoseconds), even when a slower camera declares more latency; -1 waits the pipeline
   * latency (exact pairing). With a shorter wait a frame still on its way misses its
   * observation (counted as `late`). See docs/elements/pi0viewmux.md.
   */
  install (PROP_MAX_WAIT,
           g_param_spec_uint64 ("max-wait", "Maximum wait",
                                "Live: the longest an observation waits after its base frame's "
                                "capture, whatever the cameras' latency (in nanoseconds; -1 = the "
                                "pipeline latency)",
                                0, G_MAXUINT64, d.max_wait, GST_PI0_PARAM_PLAYING));
  /**
   * GstPi0ViewMux:timestamps:
   *
   * Which times pair frames and state: `running-time` (the default; live sources, anything
   * in one pipeline), or `pts`, each buffer's PTS as it is, ignoring segments, for replaying
   * a recording whose demuxers rebase segments (all inputs must share one time base). See
   * docs/elements/pi0viewmux.md.
   */
  install (PROP_TIMESTAMPS,
           g_param_spec_enum ("timestamps", "Timestamps",
                              "Pair by running-time (default) or by the buffers' pts as they are "
                              "(replaying recordings whose demuxers rebase segments)",
                              GST_TYPE_PI0_VIEW_MUX_TIMESTAMPS, d.timestamps, GST_PI0_PARAM_READY));
  /**
   * GstPi0ViewMux:stats:
   *
   * Counters since the last start: `observations`, `dropped-observations`, `state-samples`,
   * `state-rejected`, `state-stale`, `deadline-observations` (live: made at the deadline before
   * every input had proved it had nothing more for them, or for a base frame that came after
   * its deadline, so a replay may pair them differently; raise `latency` if it grows), and per
   * view a structure with `frames-in`, `used`, `late`, `skewed`, `masked`, `dropped`, `invalid`
   * (frames whose buffer does not hold their layout) and `backwards` (base frames not after the
   * previous observation).
   */
  install (PROP_STATS,
           g_param_spec_boxed (
               "stats", "Statistics",
               "Counters since the last start: observations, deadline-observations, and per "
               "view frames-in, used, late, skewed, masked, dropped, invalid, backwards",
               GST_TYPE_STRUCTURE, GST_PI0_PARAM_READ_ONLY));

  gst_element_class_add_static_pad_template_with_gtype (element_class, &src_template,
                                                        GST_TYPE_AGGREGATOR_PAD);
  for (int i = 0; i <= N_VIEWS; i++) {
    GstCaps *caps = i < N_VIEWS ? view_caps () : gst_caps_from_string (STATE_CAPS);
    gst_element_class_add_pad_template (
        element_class,
        gst_pad_template_new_with_gtype (i < N_VIEWS ? pi0::kViewNames[i] : "state", GST_PAD_SINK,
                                         GST_PAD_REQUEST, caps, GST_TYPE_PI0_VIEW_MUX_PAD));
    gst_caps_unref (caps);
  }

  gst_element_class_set_static_metadata (
      element_class, "Pi0 camera view muxer", "Combiner/Video",
      "Synchronizes up to three camera views and a robot state stream into one observation "
      "per base-view frame, marking stale views instead of hiding them",
      GST_PI0_AUTHOR);

  element_class->release_pad = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_release_pad);
  agg_class->create_new_pad = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_create_new_pad);

  agg_class->start = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_start);
  agg_class->stop = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_stop);
  agg_class->flush = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_flush);
  agg_class->sink_event = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_sink_event);
  agg_class->sink_query = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_sink_query);
  agg_class->src_query = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_src_query);
  agg_class->update_src_caps = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_update_src_caps);
  agg_class->get_next_time = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_get_next_time);
  agg_class->aggregate = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_aggregate);

  gst_type_mark_as_plugin_api (GST_TYPE_PI0_VIEW_MUX_PAD, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_VIEW_MUX_VIEW, (GstPluginAPIFlags)0);

  GST_DEBUG_CATEGORY_INIT (gst_pi0_view_mux_debug, "pi0viewmux", 0, "Pi0 camera view muxer");
}
