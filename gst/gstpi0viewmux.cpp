/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0viewmux
 * @title: pi0viewmux
 *
 * Combines up to three camera views (`main`, `side`, `top`) and an optional robot state
 * stream (`state`) into one observation per frame of the base view: a buffer whose memories
 * are the chosen view frames (references, no copy), in view order, with a
 * #GstPi0ObservationMeta that says which views are valid, where each frame is, when it was
 * captured, and which robot state goes with it.
 *
 * For each base frame at running time T, every other view contributes its newest frame
 * captured at or before T + #GstPi0ViewMux:max-skew. The muxer knows it has that frame when the
 * view's next frame has arrived, or, without waiting for it, when the frame's duration reaches
 * past T + max-skew (cameras and decoders set durations): synchronized cameras then pair as
 * soon as their frames are in. A view whose frame is older than
 * #GstPi0ViewMux:max-staleness (or that has none) is marked invalid in the meta (the policy
 * masks it): it is never zero-filled and a frame is never repeated past that age. The state is
 * the newest sample at or before T, flagged stale when older than
 * #GstPi0ViewMux:max-state-age.
 *
 * With live sources the muxer waits for late frames no longer than its latency (max-skew plus
 * the upstream latency and the `latency` property), so a stalled camera never stalls the
 * output: it is masked after max-staleness and unmasked as soon as it delivers again, and the
 * bus gets a (rate-limited) warning each time. Without live sources it waits for data, so
 * replaying a recording always gives the same observations. Observations are paced by the
 * base view: if it stalls, no observations come out.
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

#include "gstpi0viewmux.h"
#include "gstpi0enum.h"

#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <mutex>
#include <vector>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_view_mux_debug);
#define GST_CAT_DEFAULT gst_pi0_view_mux_debug

/* Locking: OBJECT_LOCK (self) guards the pad table (which view has which pad). It is taken
 * before settings_lock or stats_lock, never the other way round, and settings_lock and
 * stats_lock are never held together. None of them is held while pushing, posting or
 * querying. Per-view frame state (State) belongs to the aggregate thread; start, stop and
 * flush run while that thread is stopped. */

#define DEFAULT_BASE_VIEW VIEW_MAIN
#define DEFAULT_MAX_SKEW (10 * GST_MSECOND)
#define DEFAULT_MAX_STALENESS (200 * GST_MSECOND)
#define DEFAULT_MAX_STATE_AGE (100 * GST_MSECOND)
#define DEFAULT_REQUIRE_ALL_VIEWS FALSE
#define DEFAULT_FORCE_LIVE FALSE
/* At most one stale/recovered warning per view per second of running time. */
#define REPORT_INTERVAL GST_SECOND
#define MAX_STATE_DIM 1024

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
  PROP_STATS,
};

typedef enum {
  VIEW_MAIN = 0,
  VIEW_SIDE = 1,
  VIEW_TOP = 2,
} GstPi0ViewMuxView;

constexpr int N_VIEWS = 3;
static const char *const view_names[N_VIEWS] = {"main", "side", "top"};

#define VIDEO_FORMATS                                                                              \
  "{ RGB, BGR, RGBx, BGRx, xRGB, xBGR, RGBA, BGRA, ARGB, ABGR, NV12, NV21, I420, YV12, Y42B, "     \
  "Y444, GRAY8, YUY2, UYVY }"
#define VIEW_CAPS                                                                                  \
  GST_VIDEO_CAPS_MAKE (VIDEO_FORMATS)                                                              \
  "; " GST_VIDEO_CAPS_MAKE_WITH_FEATURES ("memory:CUDAMemory", VIDEO_FORMATS)
#define STATE_CAPS GST_PI0_STATE_MEDIA_TYPE ", dim = (int) [ 1, 1024 ]"

static GstStaticPadTemplate main_template =
    GST_STATIC_PAD_TEMPLATE ("main", GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS (VIEW_CAPS));
static GstStaticPadTemplate side_template =
    GST_STATIC_PAD_TEMPLATE ("side", GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS (VIEW_CAPS));
static GstStaticPadTemplate top_template =
    GST_STATIC_PAD_TEMPLATE ("top", GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS (VIEW_CAPS));
static GstStaticPadTemplate state_template =
    GST_STATIC_PAD_TEMPLATE ("state", GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS (STATE_CAPS));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE (
    "src", GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS (GST_PI0_OBSERVATION_MEDIA_TYPE "; " GST_PI0_OBSERVATION_MEDIA_TYPE
                                                    "(memory:CUDAMemory)"));

/* ------------------------------------------------------------------------------------------ */
/* The pad                                                                                     */

struct GstPi0ViewMuxPadPrivate {
  /* Set at creation. */
  int view = -1; /* VIEW_* or -1 for the state pad */

  /* Written and read by the aggregate thread only (serialized events are handled there). */
  GstVideoInfo info;
  bool info_valid = false;
  bool cuda = false;
  guint state_dim = 0;
  bool not_negotiated = false;
};

struct _GstPi0ViewMuxPad {
  GstAggregatorPad parent;
  GstPi0ViewMuxPadPrivate *priv;
};

G_DEFINE_TYPE (GstPi0ViewMuxPad, gst_pi0_view_mux_pad, GST_TYPE_AGGREGATOR_PAD);

static void
gst_pi0_view_mux_pad_finalize (GObject *object)
{
  delete GST_PI0_VIEW_MUX_PAD (object)->priv;
  G_OBJECT_CLASS (gst_pi0_view_mux_pad_parent_class)->finalize (object);
}

static void
gst_pi0_view_mux_pad_class_init (GstPi0ViewMuxPadClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = gst_pi0_view_mux_pad_finalize;
}

static void
gst_pi0_view_mux_pad_init (GstPi0ViewMuxPad *pad)
{
  pad->priv = new GstPi0ViewMuxPadPrivate ();
  gst_video_info_init (&pad->priv->info);
}

/* ------------------------------------------------------------------------------------------ */
/* The element                                                                                 */

struct Settings {
  int base_view = DEFAULT_BASE_VIEW;
  GstClockTime max_skew = DEFAULT_MAX_SKEW;
  GstClockTime max_staleness = DEFAULT_MAX_STALENESS;
  GstClockTime max_state_age = DEFAULT_MAX_STATE_AGE;
  bool require_all_views = DEFAULT_REQUIRE_ALL_VIEWS;
  GstClockTime max_wait = GST_CLOCK_TIME_NONE;
  bool use_pts = false; /* timestamps=pts */
};

struct ViewStats {
  guint64 frames_in = 0; /* frames taken from the pad */
  guint64 used = 0;      /* observations in which the view was valid */
  guint64 late = 0;      /* frames that arrived after the observation they belonged to */
  guint64 skewed = 0;    /* valid, but older than max-skew */
  guint64 masked = 0;    /* observations in which the view was masked */
  guint64 dropped = 0;   /* frames replaced by a newer one before any observation used them */
};

struct Stats {
  guint64 observations = 0;
  guint64 dropped_observations = 0; /* require-all-views */
  guint64 state_samples = 0;
  guint64 state_rejected = 0; /* wrong size or non-finite */
  guint64 state_stale = 0;    /* observations whose state was missing or too old */
  std::array<ViewStats, N_VIEWS> views{};
};

/* The newest frame of one view at or before the last observation (+ skew). */
struct ViewState {
  GstBuffer *frame = nullptr;
  GstVideoInfo info;
  bool cuda = false;
  GstClockTime rt = GST_CLOCK_TIME_NONE;
  bool used = false;
  /* What the bus was last told about this view, and when. */
  bool reported_masked = false;
  GstClockTime reported_at = GST_CLOCK_TIME_NONE;
};

struct State {
  std::array<ViewState, N_VIEWS> views;
  std::vector<gfloat> state;
  bool have_state = false;
  GstClockTime state_rt = GST_CLOCK_TIME_NONE;
  GstBuffer *state_buf = nullptr; /* the sample @state came from, while it stays queued */
  guint64 sequence = 0;
  GstClockTime last_obs_rt = GST_CLOCK_TIME_NONE;
};

struct GstPi0ViewMuxPrivate {
  std::mutex settings_lock;
  Settings settings;

  std::mutex stats_lock;
  Stats stats;

  /* OBJECT_LOCK: pads by view; a view stays active (masked) when its pad is released while
   * running, so downstream keeps the same views until the next stop. */
  std::array<GstPi0ViewMuxPad *, N_VIEWS> pads{};
  std::array<bool, N_VIEWS> active{};
  GstPi0ViewMuxPad *state_pad = nullptr;
  bool running = false;

  /* The live latency the base class waits (from the last LATENCY query answered), for
   * max-wait; NONE when not live or not yet known. */
  std::atomic<GstClockTime> latency{GST_CLOCK_TIME_NONE};

  State state;
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

typedef enum {
  TIMESTAMPS_RUNNING_TIME = 0,
  TIMESTAMPS_PTS = 1,
} Pi0ViewMuxTimestamps;

GST_PI0_DEFINE_ENUM_TYPE (
    gst_pi0_view_mux_timestamps_get_type, "GstPi0ViewMuxTimestamps",
    {TIMESTAMPS_RUNNING_TIME, "Running time of each buffer in its pad's segment", "running-time"},
    {TIMESTAMPS_PTS, "Buffer PTS as they are, ignoring segments (replaying recordings)", "pts"})

static void gst_pi0_view_mux_finalize (GObject *object);
static void gst_pi0_view_mux_set_property (GObject *object, guint prop_id, const GValue *value,
                                           GParamSpec *pspec);
static void gst_pi0_view_mux_get_property (GObject *object, guint prop_id, GValue *value,
                                           GParamSpec *pspec);
static GstPad *gst_pi0_view_mux_request_new_pad (GstElement *element, GstPadTemplate *templ,
                                                 const gchar *name, const GstCaps *caps);
static void gst_pi0_view_mux_release_pad (GstElement *element, GstPad *pad);
static gboolean gst_pi0_view_mux_start (GstAggregator *agg);
static gboolean gst_pi0_view_mux_stop (GstAggregator *agg);
static GstFlowReturn gst_pi0_view_mux_flush (GstAggregator *agg);
static gboolean gst_pi0_view_mux_sink_event (GstAggregator *agg, GstAggregatorPad *pad,
                                             GstEvent *event);
static gboolean gst_pi0_view_mux_sink_query (GstAggregator *agg, GstAggregatorPad *pad,
                                             GstQuery *query);
static GstFlowReturn gst_pi0_view_mux_update_src_caps (GstAggregator *agg, GstCaps *caps,
                                                       GstCaps **ret);
static GstClockTime gst_pi0_view_mux_get_next_time (GstAggregator *agg);
static gboolean gst_pi0_view_mux_src_query (GstAggregator *agg, GstQuery *query);
static GstFlowReturn gst_pi0_view_mux_aggregate (GstAggregator *agg, gboolean timeout);

static void
gst_pi0_view_mux_class_init (GstPi0ViewMuxClass *klass)
{
  auto gobject_class = G_OBJECT_CLASS (klass);
  auto element_class = GST_ELEMENT_CLASS (klass);
  auto agg_class = GST_AGGREGATOR_CLASS (klass);

  gobject_class->finalize = gst_pi0_view_mux_finalize;
  gobject_class->set_property = gst_pi0_view_mux_set_property;
  gobject_class->get_property = gst_pi0_view_mux_get_property;

  /**
   * GstPi0ViewMux:base-view:
   *
   * The view whose frames pace the output: one observation per frame of this view.
   */
  g_object_class_install_property (
      gobject_class, PROP_BASE_VIEW,
      g_param_spec_enum (
          "base-view", "Base view",
          "The view whose frames pace the output: one observation per frame",
          GST_TYPE_PI0_VIEW_MUX_VIEW, DEFAULT_BASE_VIEW,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY)));

  /**
   * GstPi0ViewMux:max-skew:
   *
   * How much later than the base frame another view's frame may be captured and still pair
   * with it (in nanoseconds). With live sources the muxer waits this long for such frames,
   * so it adds to the latency. Valid frames older than this are flagged
   * %GST_PI0_VIEW_FLAG_SKEWED.
   */
  g_object_class_install_property (
      gobject_class, PROP_MAX_SKEW,
      g_param_spec_uint64 (
          "max-skew", "Maximum skew",
          "How much later than the base frame another view's frame may be "
          "captured and still pair with it (in nanoseconds)",
          0, 10 * GST_SECOND, DEFAULT_MAX_SKEW,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING)));

  /**
   * GstPi0ViewMux:max-staleness:
   *
   * A view whose newest frame is older than this, relative to the observation, is marked
   * invalid (masked) instead of repeating its old frame (in nanoseconds).
   */
  g_object_class_install_property (
      gobject_class, PROP_MAX_STALENESS,
      g_param_spec_uint64 (
          "max-staleness", "Maximum staleness",
          "A view whose newest frame is older than this, relative to the "
          "observation, is masked (in nanoseconds)",
          0, G_MAXUINT64, DEFAULT_MAX_STALENESS,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING)));

  /**
   * GstPi0ViewMux:max-state-age:
   *
   * A robot state sample older than this, relative to the observation, is flagged
   * %GST_PI0_STATE_FLAG_STALE in the meta (in nanoseconds).
   */
  g_object_class_install_property (
      gobject_class, PROP_MAX_STATE_AGE,
      g_param_spec_uint64 (
          "max-state-age", "Maximum state age",
          "A robot state sample older than this, relative to the observation, "
          "is flagged stale (in nanoseconds)",
          0, G_MAXUINT64, DEFAULT_MAX_STATE_AGE,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING)));

  /**
   * GstPi0ViewMux:require-all-views:
   *
   * Drop observations in which any view is masked, instead of sending them with the view
   * marked invalid.
   */
  g_object_class_install_property (
      gobject_class, PROP_REQUIRE_ALL_VIEWS,
      g_param_spec_boolean (
          "require-all-views", "Require all views",
          "Drop observations in which any view is masked instead of sending "
          "them with the view marked invalid",
          DEFAULT_REQUIRE_ALL_VIEWS,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING)));

  /**
   * GstPi0ViewMux:force-live:
   *
   * Behave as a live muxer (wait at most the latency for late views) even when no upstream
   * source says it is live, e.g. with an `appsrc` fed from a robot's driver.
   */
  g_object_class_install_property (
      gobject_class, PROP_FORCE_LIVE,
      g_param_spec_boolean (
          "force-live", "Force live", "Behave as a live muxer even when no upstream source is live",
          DEFAULT_FORCE_LIVE,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_CONSTRUCT_ONLY)));

  /**
   * GstPi0ViewMux:max-wait:
   *
   * Live only: the longest an observation waits after its base frame's capture (in
   * nanoseconds), even when a slower camera declares more latency. By default (-1) the muxer
   * waits the pipeline latency, which pairs frames exactly but lets the slowest camera (one
   * frame of a 10 fps camera: 100 ms) set the delay of every observation. With a shorter wait,
   * a frame still on its way misses its observation (counted as `late`) and the view uses its
   * previous frame, or is masked once that is stale. (The deadline cannot fall before the
   * latency itself, so the first observations of a stream may still wait longer.)
   */
  g_object_class_install_property (
      gobject_class, PROP_MAX_WAIT,
      g_param_spec_uint64 (
          "max-wait", "Maximum wait",
          "Live: the longest an observation waits after its base frame's "
          "capture, whatever the cameras' latency (in nanoseconds; -1 = the "
          "pipeline latency)",
          0, G_MAXUINT64, G_MAXUINT64,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING)));

  /**
   * GstPi0ViewMux:timestamps:
   *
   * Which times pair frames and state. `running-time` (the default) is right for live sources
   * and anything in one pipeline. `pts` takes each buffer's PTS as it is, ignoring segments: for
   * replaying a recording whose inputs come back with different segments, e.g. matroskademux
   * starts its segment at the file's first timestamp while gdpdepay restores the original one.
   * When the recording was made from running times (as pipelines/record.txt does), `pts` gives
   * back exactly the recorded times, so the observations (and their observation_time) are the
   * live run's. All inputs must then share one time base. Not for live sources.
   */
  g_object_class_install_property (
      gobject_class, PROP_TIMESTAMPS,
      g_param_spec_enum (
          "timestamps", "Timestamps",
          "Pair by running-time (default) or by the buffers' pts as they are "
          "(replaying recordings whose demuxers rebase segments)",
          GST_TYPE_PI0_VIEW_MUX_TIMESTAMPS, TIMESTAMPS_RUNNING_TIME,
          (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY)));

  /**
   * GstPi0ViewMux:stats:
   *
   * Counters since the last start: `observations`, `dropped-observations`, `state-samples`,
   * `state-rejected`, `state-stale`, and per view a structure with `frames-in`, `used`,
   * `late`, `skewed`, `masked`, `dropped`.
   */
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
                          "Counters since the last start: observations, and per view frames-in, "
                          "used, late, skewed, masked, dropped",
                          GST_TYPE_STRUCTURE,
                          (GParamFlags)(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));

  gst_element_class_add_static_pad_template_with_gtype (element_class, &src_template,
                                                        GST_TYPE_AGGREGATOR_PAD);
  for (auto templ : {&main_template, &side_template, &top_template, &state_template})
    gst_element_class_add_static_pad_template_with_gtype (element_class, templ,
                                                          GST_TYPE_PI0_VIEW_MUX_PAD);

  gst_element_class_set_static_metadata (
      element_class, "Pi0 camera view muxer", "Combiner/Video",
      "Synchronizes up to three camera views and a robot state stream into one observation "
      "per base-view frame, marking stale views instead of hiding them",
      "gst-pi0 developers");

  element_class->request_new_pad = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_request_new_pad);
  element_class->release_pad = GST_DEBUG_FUNCPTR (gst_pi0_view_mux_release_pad);

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

static void
gst_pi0_view_mux_init (GstPi0ViewMux *self)
{
  self->priv = new GstPi0ViewMuxPrivate ();
  for (auto &v : self->priv->state.views)
    gst_video_info_init (&v.info);
  /* Our own latency: the time we wait for a frame captured up to max-skew after the base. */
  gst_aggregator_set_latency (GST_AGGREGATOR (self), DEFAULT_MAX_SKEW, DEFAULT_MAX_SKEW);
}

static void
clear_view_state (ViewState &v)
{
  gst_clear_buffer (&v.frame);
  v.rt = GST_CLOCK_TIME_NONE;
  v.used = false;
  v.cuda = false;
  gst_video_info_init (&v.info);
}

static void
reset_state (GstPi0ViewMux *self, bool keep_sequence)
{
  auto &st = self->priv->state;
  for (auto &v : st.views) {
    clear_view_state (v);
    v.reported_masked = false;
    v.reported_at = GST_CLOCK_TIME_NONE;
  }
  st.state.clear ();
  st.have_state = false;
  st.state_rt = GST_CLOCK_TIME_NONE;
  gst_clear_buffer (&st.state_buf);
  st.last_obs_rt = GST_CLOCK_TIME_NONE;
  if (!keep_sequence)
    st.sequence = 0;
}

static void
gst_pi0_view_mux_finalize (GObject *object)
{
  auto self = GST_PI0_VIEW_MUX (object);
  reset_state (self, false);
  delete self->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static GstStructure *
make_stats (GstPi0ViewMux *self)
{
  Stats s;
  std::array<bool, N_VIEWS> active;
  {
    std::lock_guard<std::mutex> lk (self->priv->stats_lock);
    s = self->priv->stats;
  }
  GST_OBJECT_LOCK (self);
  active = self->priv->active;
  GST_OBJECT_UNLOCK (self);

  GstStructure *st = gst_structure_new (
      "pi0viewmux-stats", "observations", G_TYPE_UINT64, s.observations, "dropped-observations",
      G_TYPE_UINT64, s.dropped_observations, "state-samples", G_TYPE_UINT64, s.state_samples,
      "state-rejected", G_TYPE_UINT64, s.state_rejected, "state-stale", G_TYPE_UINT64,
      s.state_stale, nullptr);
  for (int v = 0; v < N_VIEWS; v++) {
    if (!active[v] && s.views[v].frames_in == 0)
      continue;
    const ViewStats &vs = s.views[v];
    GstStructure *vst = gst_structure_new (
        view_names[v], "frames-in", G_TYPE_UINT64, vs.frames_in, "used", G_TYPE_UINT64, vs.used,
        "late", G_TYPE_UINT64, vs.late, "skewed", G_TYPE_UINT64, vs.skewed, "masked", G_TYPE_UINT64,
        vs.masked, "dropped", G_TYPE_UINT64, vs.dropped, nullptr);
    gst_structure_set (st, view_names[v], GST_TYPE_STRUCTURE, vst, nullptr);
    gst_structure_free (vst);
  }
  return st;
}

static void
gst_pi0_view_mux_set_property (GObject *object, guint prop_id, const GValue *value,
                               GParamSpec *pspec)
{
  auto self = GST_PI0_VIEW_MUX (object);
  auto priv = self->priv;
  bool latency_changed = false;

  switch (prop_id) {
    case PROP_BASE_VIEW: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      priv->settings.base_view = g_value_get_enum (value);
      break;
    }
    case PROP_MAX_SKEW: {
      GstClockTime skew = g_value_get_uint64 (value);
      {
        std::lock_guard<std::mutex> lk (priv->settings_lock);
        latency_changed = priv->settings.max_skew != skew;
        priv->settings.max_skew = skew;
      }
      gst_aggregator_set_latency (GST_AGGREGATOR (self), skew, skew);
      break;
    }
    case PROP_MAX_STALENESS: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      priv->settings.max_staleness = g_value_get_uint64 (value);
      break;
    }
    case PROP_MAX_STATE_AGE: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      priv->settings.max_state_age = g_value_get_uint64 (value);
      break;
    }
    case PROP_REQUIRE_ALL_VIEWS: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      priv->settings.require_all_views = g_value_get_boolean (value);
      break;
    }
    case PROP_FORCE_LIVE:
      gst_aggregator_set_force_live (GST_AGGREGATOR (self), g_value_get_boolean (value));
      break;
    case PROP_MAX_WAIT: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      priv->settings.max_wait = g_value_get_uint64 (value);
      break;
    }
    case PROP_TIMESTAMPS: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      priv->settings.use_pts = g_value_get_enum (value) == TIMESTAMPS_PTS;
      break;
    }
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }

  /* Outside every lock: the bus handler may query latency synchronously. */
  if (latency_changed)
    gst_element_post_message (GST_ELEMENT (self), gst_message_new_latency (GST_OBJECT (self)));
}

static void
gst_pi0_view_mux_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  auto self = GST_PI0_VIEW_MUX (object);
  auto priv = self->priv;

  switch (prop_id) {
    case PROP_BASE_VIEW: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      g_value_set_enum (value, priv->settings.base_view);
      break;
    }
    case PROP_MAX_SKEW: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      g_value_set_uint64 (value, priv->settings.max_skew);
      break;
    }
    case PROP_MAX_STALENESS: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      g_value_set_uint64 (value, priv->settings.max_staleness);
      break;
    }
    case PROP_MAX_STATE_AGE: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      g_value_set_uint64 (value, priv->settings.max_state_age);
      break;
    }
    case PROP_REQUIRE_ALL_VIEWS: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      g_value_set_boolean (value, priv->settings.require_all_views);
      break;
    }
    case PROP_FORCE_LIVE:
      g_value_set_boolean (value, gst_aggregator_get_force_live (GST_AGGREGATOR (self)));
      break;
    case PROP_MAX_WAIT: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      g_value_set_uint64 (value, priv->settings.max_wait);
      break;
    }
    case PROP_TIMESTAMPS: {
      std::lock_guard<std::mutex> lk (priv->settings_lock);
      g_value_set_enum (value, priv->settings.use_pts ? TIMESTAMPS_PTS : TIMESTAMPS_RUNNING_TIME);
      break;
    }
    case PROP_STATS:
      g_value_take_boxed (value, make_stats (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static Settings
snapshot_settings (GstPi0ViewMux *self)
{
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  return self->priv->settings;
}

/* ------------------------------------------------------------------------------------------ */
/* Pads                                                                                        */

static GstPad *
gst_pi0_view_mux_request_new_pad (GstElement *element, GstPadTemplate *templ, const gchar *name,
                                  const GstCaps *caps)
{
  auto self = GST_PI0_VIEW_MUX (element);
  auto priv = self->priv;
  const gchar *tname = GST_PAD_TEMPLATE_NAME_TEMPLATE (templ);
  int view = -1;

  for (int v = 0; v < N_VIEWS; v++) {
    if (g_strcmp0 (tname, view_names[v]) == 0)
      view = v;
  }
  if (view < 0 && g_strcmp0 (tname, "state") != 0)
    return nullptr;

  GST_OBJECT_LOCK (self);
  bool taken = view >= 0 ? priv->pads[view] != nullptr : priv->state_pad != nullptr;
  GST_OBJECT_UNLOCK (self);
  if (taken) {
    GST_WARNING_OBJECT (self, "pad %s already exists", tname);
    return nullptr;
  }

  auto pad =
      GST_PI0_VIEW_MUX_PAD (g_object_new (GST_TYPE_PI0_VIEW_MUX_PAD, "name", tname, "direction",
                                          GST_PAD_SINK, "template", templ, nullptr));
  pad->priv->view = view;

  GST_OBJECT_LOCK (self);
  if (view >= 0) {
    priv->pads[view] = pad;
    bool was_active = priv->active[view];
    priv->active[view] = true;
    GST_OBJECT_UNLOCK (self);
    /* A new view changes the observation caps. */
    if (!was_active)
      gst_pad_mark_reconfigure (GST_AGGREGATOR_SRC_PAD (self));
  } else {
    priv->state_pad = pad;
    GST_OBJECT_UNLOCK (self);
    gst_pad_mark_reconfigure (GST_AGGREGATOR_SRC_PAD (self));
  }

  if (!gst_element_add_pad (element, GST_PAD (pad))) {
    GST_OBJECT_LOCK (self);
    if (view >= 0)
      priv->pads[view] = nullptr;
    else
      priv->state_pad = nullptr;
    GST_OBJECT_UNLOCK (self);
    return nullptr;
  }
  GST_DEBUG_OBJECT (self, "added pad %s", tname);
  return GST_PAD (pad);
}

static void
gst_pi0_view_mux_release_pad (GstElement *element, GstPad *pad)
{
  auto self = GST_PI0_VIEW_MUX (element);
  auto priv = self->priv;
  auto mpad = GST_PI0_VIEW_MUX_PAD (pad);

  GST_OBJECT_LOCK (self);
  if (mpad->priv->view >= 0) {
    priv->pads[mpad->priv->view] = nullptr;
    /* While running the view stays, masked, so the observation layout does not change under
     * downstream's feet; it goes at the next stop. */
    if (!priv->running)
      priv->active[mpad->priv->view] = false;
  } else if (priv->state_pad == mpad) {
    priv->state_pad = nullptr;
  }
  GST_OBJECT_UNLOCK (self);
  GST_DEBUG_OBJECT (self, "releasing pad %s", GST_PAD_NAME (pad));

  GST_ELEMENT_CLASS (parent_class)->release_pad (element, pad);
}

/* The pads as the aggregate thread sees them now (each with a reference, or nullptr). */
struct PadSnapshot {
  std::array<GstPi0ViewMuxPad *, N_VIEWS> pads{};
  std::array<bool, N_VIEWS> active{};
  GstPi0ViewMuxPad *state = nullptr;

  PadSnapshot () = default;
  PadSnapshot (const PadSnapshot &) = delete;
  PadSnapshot &operator= (const PadSnapshot &) = delete;
  ~PadSnapshot ()
  {
    for (auto p : pads) {
      if (p)
        gst_object_unref (p);
    }
    if (state)
      gst_object_unref (state);
  }
};

static void
snapshot_pads (GstPi0ViewMux *self, PadSnapshot &snap)
{
  GST_OBJECT_LOCK (self);
  for (int v = 0; v < N_VIEWS; v++) {
    snap.pads[v] =
        self->priv->pads[v] ? (GstPi0ViewMuxPad *)gst_object_ref (self->priv->pads[v]) : nullptr;
    snap.active[v] = self->priv->active[v];
  }
  snap.state =
      self->priv->state_pad ? (GstPi0ViewMuxPad *)gst_object_ref (self->priv->state_pad) : nullptr;
  GST_OBJECT_UNLOCK (self);
}

/* ------------------------------------------------------------------------------------------ */
/* Lifecycle                                                                                   */

static gboolean
gst_pi0_view_mux_start (GstAggregator *agg)
{
  auto self = GST_PI0_VIEW_MUX (agg);

  reset_state (self, false);
  {
    std::lock_guard<std::mutex> lk (self->priv->stats_lock);
    self->priv->stats = Stats ();
  }
  GST_OBJECT_LOCK (self);
  self->priv->running = true;
  GST_OBJECT_UNLOCK (self);
  return TRUE;
}

static gboolean
gst_pi0_view_mux_stop (GstAggregator *agg)
{
  auto self = GST_PI0_VIEW_MUX (agg);

  reset_state (self, false);
  self->priv->latency.store (GST_CLOCK_TIME_NONE);
  GST_OBJECT_LOCK (self);
  self->priv->running = false;
  for (int v = 0; v < N_VIEWS; v++)
    self->priv->active[v] = self->priv->pads[v] != nullptr;
  GST_OBJECT_UNLOCK (self);
  return TRUE;
}

static GstFlowReturn
gst_pi0_view_mux_flush (GstAggregator *agg)
{
  auto self = GST_PI0_VIEW_MUX (agg);

  /* Frames from before a flushing seek must never pair with frames after it. */
  GST_DEBUG_OBJECT (self, "flush");
  reset_state (self, true);
  auto parent = GST_AGGREGATOR_CLASS (parent_class);
  return parent->flush ? parent->flush (agg) : GST_FLOW_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Caps                                                                                        */

static bool
view_format_supported (GstVideoFormat fmt)
{
  static const GstVideoFormat formats[] = {
      GST_VIDEO_FORMAT_RGB,   GST_VIDEO_FORMAT_BGR,  GST_VIDEO_FORMAT_RGBx, GST_VIDEO_FORMAT_BGRx,
      GST_VIDEO_FORMAT_xRGB,  GST_VIDEO_FORMAT_xBGR, GST_VIDEO_FORMAT_RGBA, GST_VIDEO_FORMAT_BGRA,
      GST_VIDEO_FORMAT_ARGB,  GST_VIDEO_FORMAT_ABGR, GST_VIDEO_FORMAT_NV12, GST_VIDEO_FORMAT_NV21,
      GST_VIDEO_FORMAT_I420,  GST_VIDEO_FORMAT_YV12, GST_VIDEO_FORMAT_Y42B, GST_VIDEO_FORMAT_Y444,
      GST_VIDEO_FORMAT_GRAY8, GST_VIDEO_FORMAT_YUY2, GST_VIDEO_FORMAT_UYVY,
  };
  return std::find (std::begin (formats), std::end (formats), fmt) != std::end (formats);
}

/* Checks caps for a pad and posts an error the user can act on. Returns false when refused. */
static bool
parse_pad_caps (GstPi0ViewMux *self, GstPi0ViewMuxPad *pad, GstCaps *caps)
{
  auto p = pad->priv;
  const GstStructure *s = gst_caps_get_structure (caps, 0);
  gchar *str = gst_caps_to_string (caps);
  bool ok = false;

  if (p->view >= 0) {
    GstVideoInfo info;
    if (!gst_structure_has_name (s, "video/x-raw")) {
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                         ("View '%s' needs raw video, but got %s.", view_names[p->view],
                          gst_structure_get_name (s)),
                         ("caps: %s", str));
    } else if (!gst_video_info_from_caps (&info, caps)) {
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                         ("View '%s' got incomplete or invalid video caps.", view_names[p->view]),
                         ("caps: %s", str));
    } else if (!view_format_supported (GST_VIDEO_INFO_FORMAT (&info))) {
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                         ("View '%s' cannot take video format %s; use one of " VIDEO_FORMATS
                          " (add videoconvert).",
                          view_names[p->view],
                          gst_video_format_to_string (GST_VIDEO_INFO_FORMAT (&info))),
                         ("caps: %s", str));
    } else {
      GstCapsFeatures *f = gst_caps_get_features (caps, 0);
      p->info = info;
      p->info_valid = true;
      p->cuda = f && gst_caps_features_contains (f, "memory:CUDAMemory");
      ok = true;
    }
  } else {
    gint dim = 0;
    if (!gst_structure_has_name (s, GST_PI0_STATE_MEDIA_TYPE) ||
        !gst_structure_get_int (s, "dim", &dim) || dim < 1 || dim > MAX_STATE_DIM) {
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                         ("The state pad needs " GST_PI0_STATE_MEDIA_TYPE
                          " with dim=(int)N, 1 <= N <= %d (one float32 vector per buffer).",
                          MAX_STATE_DIM),
                         ("caps: %s", str));
    } else {
      p->state_dim = (guint)dim;
      ok = true;
    }
  }
  g_free (str);
  p->not_negotiated = !ok;
  return ok;
}

static gboolean
gst_pi0_view_mux_sink_event (GstAggregator *agg, GstAggregatorPad *apad, GstEvent *event)
{
  auto self = GST_PI0_VIEW_MUX (agg);
  auto pad = GST_PI0_VIEW_MUX_PAD (apad);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS: {
      GstCaps *caps;
      gst_event_parse_caps (event, &caps);
      if (!parse_pad_caps (self, pad, caps)) {
        gst_event_unref (event);
        return FALSE;
      }
      GST_DEBUG_OBJECT (pad, "caps %" GST_PTR_FORMAT, caps);
      gst_pad_mark_reconfigure (GST_AGGREGATOR_SRC_PAD (self));
      break;
    }
    case GST_EVENT_SEGMENT: {
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
      Settings s = snapshot_settings (self);
      if (pad->priv->view == s.base_view)
        gst_aggregator_update_segment (agg, segment);
      break;
    }
    default:
      break;
  }
  return GST_AGGREGATOR_CLASS (parent_class)->sink_event (agg, apad, event);
}

static gboolean
gst_pi0_view_mux_sink_query (GstAggregator *agg, GstAggregatorPad *apad, GstQuery *query)
{
  auto pad = GST_PI0_VIEW_MUX_PAD (apad);

  if (GST_QUERY_TYPE (query) == GST_QUERY_ACCEPT_CAPS) {
    /* Accept any fixed caps of the right media type here so that the CAPS event reaches us and
     * a wrong format gets an error naming the view and the format, instead of a bare
     * not-negotiated from the pad's template check. */
    GstCaps *caps;
    gst_query_parse_accept_caps (query, &caps);
    const GstStructure *s = gst_caps_is_fixed (caps) ? gst_caps_get_structure (caps, 0) : nullptr;
    bool ok = s && gst_structure_has_name (s, pad->priv->view >= 0 ? "video/x-raw"
                                                                   : GST_PI0_STATE_MEDIA_TYPE);
    gst_query_set_accept_caps_result (query, ok);
    return TRUE;
  }
  return GST_AGGREGATOR_CLASS (parent_class)->sink_query (agg, apad, query);
}

static GstFlowReturn
gst_pi0_view_mux_update_src_caps (GstAggregator *agg, GstCaps *downstream, GstCaps **ret)
{
  auto self = GST_PI0_VIEW_MUX (agg);
  Settings s = snapshot_settings (self);
  PadSnapshot snap;
  snapshot_pads (self, snap);

  auto base = snap.pads[s.base_view];
  if (!base || !base->priv->info_valid)
    return GST_AGGREGATOR_FLOW_NEED_DATA;

  GString *names = g_string_new (nullptr);
  gint n_views = 0;
  bool all_cuda = true;
  for (int v = 0; v < N_VIEWS; v++) {
    if (!snap.active[v])
      continue;
    if (n_views++)
      g_string_append_c (names, ',');
    g_string_append (names, view_names[v]);
    if (snap.pads[v] && snap.pads[v]->priv->info_valid && !snap.pads[v]->priv->cuda)
      all_cuda = false;
  }

  GstCaps *caps = gst_caps_new_simple (
      GST_PI0_OBSERVATION_MEDIA_TYPE, "views", G_TYPE_INT, n_views, "view-names", G_TYPE_STRING,
      names->str, "base-view", G_TYPE_STRING, view_names[s.base_view], "state-dim", G_TYPE_INT,
      snap.state ? (gint)snap.state->priv->state_dim : 0, "framerate", GST_TYPE_FRACTION,
      GST_VIDEO_INFO_FPS_N (&base->priv->info), GST_VIDEO_INFO_FPS_D (&base->priv->info), nullptr);
  g_string_free (names, TRUE);
  if (all_cuda)
    gst_caps_set_features (caps, 0, gst_caps_features_new ("memory:CUDAMemory", nullptr));

  *ret = gst_caps_intersect (caps, downstream);
  if (gst_caps_is_empty (*ret)) {
    GST_ELEMENT_ERROR (
        self, CORE, NEGOTIATION, ("Downstream does not accept the observations."),
        ("offered %" GST_PTR_FORMAT ", downstream accepts %" GST_PTR_FORMAT, caps, downstream));
    gst_caps_unref (caps);
    gst_clear_caps (ret);
    return GST_FLOW_NOT_NEGOTIATED;
  }
  gst_caps_unref (caps);
  return GST_FLOW_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Aggregation                                                                                 */

static GstClockTime
buffer_running_time (GstAggregatorPad *pad, GstBuffer *buf)
{
  GstClockTime rt;
  if (!GST_BUFFER_PTS_IS_VALID (buf))
    return GST_CLOCK_TIME_NONE;
  GST_OBJECT_LOCK (pad);
  rt = gst_segment_to_running_time (&pad->segment, GST_FORMAT_TIME, GST_BUFFER_PTS (buf));
  GST_OBJECT_UNLOCK (pad);
  return rt;
}

/* The time a buffer is paired by: its running time, or with timestamps=pts its PTS. */
static GstClockTime
buffer_time (GstAggregatorPad *pad, GstBuffer *buf, const Settings &s)
{
  if (s.use_pts)
    return GST_BUFFER_PTS (buf);
  return buffer_running_time (pad, buf);
}

/* Whether @buf, at time @t, lasts (by its duration) past @limit: then its successor comes after
 * @limit, which proves that no later buffer of that pad belongs to the observation. */
static bool
lasts_past (GstBuffer *buf, GstClockTime t, GstClockTime limit)
{
  const GstClockTime d = GST_BUFFER_DURATION (buf);
  return GST_CLOCK_TIME_IS_VALID (d) && d > 0 && t + d > limit;
}

static GstClockTime
gst_pi0_view_mux_get_next_time (GstAggregator *agg)
{
  auto self = GST_PI0_VIEW_MUX (agg);
  Settings s = snapshot_settings (self);
  GstClockTime next = GST_CLOCK_TIME_NONE;

  /* Time out relative to the waiting base frame; without one there is nothing to time out. */
  GST_OBJECT_LOCK (self);
  GstAggregatorPad *base = self->priv->pads[s.base_view]
                               ? GST_AGGREGATOR_PAD (gst_object_ref (self->priv->pads[s.base_view]))
                               : nullptr;
  GST_OBJECT_UNLOCK (self);
  if (!base)
    return GST_CLOCK_TIME_NONE;
  GstBuffer *buf = gst_aggregator_pad_peek_buffer (base);
  if (buf) {
    next = buffer_running_time (base, buf);
    gst_buffer_unref (buf);
  }
  gst_object_unref (base);

  /* The base class times out at next + latency; max-wait moves that deadline earlier. (The
   * latency is our record of it: the base class holds its lock while asking us.) */
  GstClockTime latency = self->priv->latency.load ();
  if (GST_CLOCK_TIME_IS_VALID (next) && GST_CLOCK_TIME_IS_VALID (s.max_wait) &&
      GST_CLOCK_TIME_IS_VALID (latency) && latency > s.max_wait)
    next = next + s.max_wait > latency ? next + s.max_wait - latency : 0;
  return next;
}

static gboolean
gst_pi0_view_mux_src_query (GstAggregator *agg, GstQuery *query)
{
  auto self = GST_PI0_VIEW_MUX (agg);

  if (!GST_AGGREGATOR_CLASS (parent_class)->src_query (agg, query))
    return FALSE;
  if (GST_QUERY_TYPE (query) == GST_QUERY_LATENCY) {
    gboolean live;
    GstClockTime min;
    gst_query_parse_latency (query, &live, &min, nullptr);
    self->priv->latency.store (live ? min : GST_CLOCK_TIME_NONE);
  }
  return TRUE;
}

/* Copies the frame's video info, taking strides and offsets from its video meta if any. */
static bool
frame_info (const GstVideoInfo *caps_info, GstBuffer *buf, GstVideoInfo *out)
{
  *out = *caps_info;
  GstVideoMeta *vmeta = gst_buffer_get_video_meta (buf);
  if (vmeta) {
    if (vmeta->format != GST_VIDEO_INFO_FORMAT (caps_info))
      return false;
    out->width = vmeta->width;
    out->height = vmeta->height;
    for (guint i = 0; i < vmeta->n_planes && i < GST_VIDEO_MAX_PLANES; i++) {
      out->offset[i] = vmeta->offset[i];
      out->stride[i] = vmeta->stride[i];
    }
  }
  /* The last byte each plane reaches must be inside the buffer. */
  gsize size = gst_buffer_get_size (buf), needed = 0;
  for (guint p = 0; p < GST_VIDEO_INFO_N_PLANES (out); p++) {
    gint comp[GST_VIDEO_MAX_COMPONENTS];
    gst_video_format_info_component (out->finfo, p, comp);
    gint rows =
        GST_VIDEO_FORMAT_INFO_SCALE_HEIGHT (out->finfo, comp[0], GST_VIDEO_INFO_HEIGHT (out));
    if (GST_VIDEO_INFO_PLANE_STRIDE (out, p) <= 0)
      return false;
    needed = std::max (needed, GST_VIDEO_INFO_PLANE_OFFSET (out, p) +
                                   (gsize)GST_VIDEO_INFO_PLANE_STRIDE (out, p) * (gsize)rows);
  }
  return needed <= size;
}

static void
report_view (GstPi0ViewMux *self, int v, bool masked, GstClockTime obs_rt, GstClockTime frame_rt,
             const Settings &s)
{
  ViewState &vs = self->priv->state.views[v];
  if (masked == vs.reported_masked)
    return;
  if (GST_CLOCK_TIME_IS_VALID (vs.reported_at) && obs_rt < vs.reported_at + REPORT_INTERVAL)
    return; /* rate limit; reported once the interval has passed if still changed */

  vs.reported_masked = masked;
  vs.reported_at = obs_rt;
  GstClockTime age = GST_CLOCK_TIME_IS_VALID (frame_rt) && obs_rt > frame_rt ? obs_rt - frame_rt
                                                                             : GST_CLOCK_TIME_NONE;
  if (masked) {
    GST_ELEMENT_WARNING_WITH_DETAILS (
        self, STREAM, FAILED,
        ("Camera view '%s' is stale: it is masked until it delivers frames again.", view_names[v]),
        ("no frame within max-staleness %" GST_TIME_FORMAT
         " of the observation at %" GST_TIME_FORMAT " (newest frame age %" GST_TIME_FORMAT ")",
         GST_TIME_ARGS (s.max_staleness), GST_TIME_ARGS (obs_rt), GST_TIME_ARGS (age)),
        ("view", G_TYPE_STRING, view_names[v], "masked", G_TYPE_BOOLEAN, TRUE, "running-time",
         G_TYPE_UINT64, obs_rt, "age", G_TYPE_UINT64, age, nullptr));
  } else {
    GST_ELEMENT_WARNING_WITH_DETAILS (
        self, STREAM, FAILED,
        ("Camera view '%s' recovered: it is no longer masked.", view_names[v]),
        ("observation at %" GST_TIME_FORMAT, GST_TIME_ARGS (obs_rt)),
        ("view", G_TYPE_STRING, view_names[v], "masked", G_TYPE_BOOLEAN, FALSE, "running-time",
         G_TYPE_UINT64, obs_rt, "age", G_TYPE_UINT64, age, nullptr));
  }
}

/* Takes every queued frame of @pad captured at or before @limit; the newest becomes the
 * view's current frame. Returns whether we know no other such frame can still come (a later
 * frame is queued, or the pad is at EOS or gone). */
static GstFlowReturn
drain_view (GstPi0ViewMux *self, int v, GstPi0ViewMuxPad *pad, GstClockTime limit, Stats &delta,
            bool *complete, const Settings &s)
{
  auto &st = self->priv->state;
  ViewState &vs = st.views[v];
  auto apad = GST_AGGREGATOR_PAD (pad);

  *complete = false;
  while (true) {
    GstBuffer *buf = gst_aggregator_pad_peek_buffer (apad);
    if (!buf) {
      *complete = gst_aggregator_pad_is_eos (apad);
      return GST_FLOW_OK;
    }
    if (pad->priv->not_negotiated || !pad->priv->info_valid) {
      gst_buffer_unref (buf);
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                         ("View '%s' sent frames without usable caps.", view_names[v]), (nullptr));
      return GST_FLOW_NOT_NEGOTIATED;
    }
    GstClockTime rt = buffer_time (apad, buf, s);
    if (!GST_CLOCK_TIME_IS_VALID (rt)) {
      gst_buffer_unref (buf);
      GST_ELEMENT_ERROR (self, STREAM, FORMAT,
                         ("View '%s' sent a frame without a usable timestamp.", view_names[v]),
                         ("a PTS inside the segment is needed to pair frames"));
      return GST_FLOW_ERROR;
    }
    if (rt > limit) {
      gst_buffer_unref (buf);
      *complete = true;
      return GST_FLOW_OK;
    }
    const bool proves = lasts_past (buf, rt, limit);
    if (buf == vs.frame) {
      /* Taken for an earlier observation and left queued (below). */
      gst_buffer_unref (buf);
      if (proves) {
        *complete = true;
        return GST_FLOW_OK;
      }
      gst_aggregator_pad_drop_buffer (apad);
      continue;
    }
    ViewStats &d = delta.views[v];
    d.frames_in++;

    GstVideoInfo info;
    if (!frame_info (&pad->priv->info, buf, &info)) {
      GST_ELEMENT_WARNING (
          self, STREAM, FORMAT,
          ("View '%s' sent a frame smaller than its caps say; dropped.", view_names[v]),
          ("%" GST_PTR_FORMAT, buf));
      d.dropped++;
      gst_buffer_unref (buf);
      gst_aggregator_pad_drop_buffer (apad);
      continue;
    }
    if (GST_CLOCK_TIME_IS_VALID (st.last_obs_rt) && rt <= st.last_obs_rt + s.max_skew)
      d.late++;
    if (vs.frame && !vs.used)
      d.dropped++;
    gst_buffer_replace (&vs.frame, buf);
    gst_buffer_unref (buf);
    vs.info = info;
    vs.cuda = pad->priv->cuda;
    vs.rt = rt;
    vs.used = false;
    /* A frame that lasts past the limit proves that its successor does not belong to this
     * observation: no need to wait for it (live: up to the deadline; not live: for data). The
     * same rule in both modes, so a replay pairs exactly as the live run did. The frame stays
     * queued on the pad: GstAggregator only aggregates before the deadline when every pad
     * holds data, and a slower camera's pad would otherwise be empty at the next base frame. */
    if (proves) {
      *complete = true;
      return GST_FLOW_OK;
    }
    gst_aggregator_pad_drop_buffer (apad);
  }
}

/* Like drain_view, for the state pad: the newest valid sample at or before @limit. */
static GstFlowReturn
drain_state (GstPi0ViewMux *self, GstPi0ViewMuxPad *pad, GstClockTime limit, Stats &delta,
             bool *complete, const Settings &s)
{
  auto &st = self->priv->state;
  auto apad = GST_AGGREGATOR_PAD (pad);

  *complete = false;
  while (true) {
    GstBuffer *buf = gst_aggregator_pad_peek_buffer (apad);
    if (!buf) {
      *complete = gst_aggregator_pad_is_eos (apad);
      return GST_FLOW_OK;
    }
    if (pad->priv->not_negotiated || pad->priv->state_dim == 0) {
      gst_buffer_unref (buf);
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, ("The state pad sent data without usable caps."),
                         (nullptr));
      return GST_FLOW_NOT_NEGOTIATED;
    }
    GstClockTime rt = buffer_time (apad, buf, s);
    if (!GST_CLOCK_TIME_IS_VALID (rt)) {
      gst_buffer_unref (buf);
      GST_ELEMENT_ERROR (self, STREAM, FORMAT,
                         ("The state pad sent a sample without a usable timestamp."),
                         ("a PTS inside the segment is needed to align state with frames"));
      return GST_FLOW_ERROR;
    }
    if (rt > limit) {
      gst_buffer_unref (buf);
      *complete = true;
      return GST_FLOW_OK;
    }
    /* As for frames: a sample that lasts past the limit is the last one at or before it, and
     * stays queued so that the pad still holds data at the next base frame. */
    const bool proves = lasts_past (buf, rt, limit);
    if (buf == st.state_buf) {
      gst_buffer_unref (buf);
      if (proves) {
        *complete = true;
        return GST_FLOW_OK;
      }
      gst_clear_buffer (&st.state_buf);
      gst_aggregator_pad_drop_buffer (apad);
      continue;
    }
    delta.state_samples++;

    guint dim = pad->priv->state_dim;
    std::vector<gfloat> vals (dim);
    bool ok =
        gst_buffer_get_size (buf) == dim * sizeof (gfloat) &&
        gst_buffer_extract (buf, 0, vals.data (), dim * sizeof (gfloat)) == dim * sizeof (gfloat);
    /* A malformed or non-finite sample never reaches the policy; the previous one stays
     * until it is too old. */
    if (ok) {
      for (gfloat x : vals)
        ok = ok && std::isfinite (x);
    }
    if (!ok) {
      delta.state_rejected++;
      GST_ELEMENT_WARNING (
          self, STREAM, FORMAT,
          ("Rejected a robot state sample: it must be %u finite float32 values.", dim),
          ("%" GST_PTR_FORMAT, buf));
      gst_buffer_unref (buf);
      gst_aggregator_pad_drop_buffer (apad);
      continue;
    }
    st.state = std::move (vals);
    st.state_rt = rt;
    st.have_state = true;
    if (proves) {
      gst_buffer_replace (&st.state_buf, buf);
      gst_buffer_unref (buf);
      *complete = true;
      return GST_FLOW_OK;
    }
    gst_clear_buffer (&st.state_buf);
    gst_buffer_unref (buf);
    gst_aggregator_pad_drop_buffer (apad);
  }
}

static void
add_stats (GstPi0ViewMux *self, const Stats &d)
{
  std::lock_guard<std::mutex> lk (self->priv->stats_lock);
  auto &s = self->priv->stats;
  s.observations += d.observations;
  s.dropped_observations += d.dropped_observations;
  s.state_samples += d.state_samples;
  s.state_rejected += d.state_rejected;
  s.state_stale += d.state_stale;
  for (int v = 0; v < N_VIEWS; v++) {
    s.views[v].frames_in += d.views[v].frames_in;
    s.views[v].used += d.views[v].used;
    s.views[v].late += d.views[v].late;
    s.views[v].skewed += d.views[v].skewed;
    s.views[v].masked += d.views[v].masked;
    s.views[v].dropped += d.views[v].dropped;
  }
}

static GstFlowReturn
gst_pi0_view_mux_aggregate (GstAggregator *agg, gboolean timeout)
{
  auto self = GST_PI0_VIEW_MUX (agg);
  auto &st = self->priv->state;
  Settings s = snapshot_settings (self);
  PadSnapshot snap;
  Stats delta;
  GstFlowReturn ret = GST_FLOW_OK;

  snapshot_pads (self, snap);
  GstPi0ViewMuxPad *base = snap.pads[s.base_view];
  if (!base) {
    GST_ELEMENT_ERROR (self, CORE, PAD,
                       ("The base view '%s' has no pad: link a source to it or set base-view.",
                        view_names[s.base_view]),
                       (nullptr));
    return GST_FLOW_ERROR;
  }
  auto abase = GST_AGGREGATOR_PAD (base);

  GstBuffer *base_buf = gst_aggregator_pad_peek_buffer (abase);
  if (!base_buf) {
    if (gst_aggregator_pad_is_eos (abase)) {
      GST_DEBUG_OBJECT (self, "base view at EOS");
      return GST_FLOW_EOS;
    }
    return GST_AGGREGATOR_FLOW_NEED_DATA;
  }
  if (base->priv->not_negotiated || !base->priv->info_valid) {
    gst_buffer_unref (base_buf);
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
                       ("View '%s' sent frames without usable caps.", view_names[s.base_view]),
                       (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  GstClockTime T = buffer_time (abase, base_buf, s);
  if (!GST_CLOCK_TIME_IS_VALID (T)) {
    gst_buffer_unref (base_buf);
    GST_ELEMENT_ERROR (
        self, STREAM, FORMAT,
        ("View '%s' sent a frame without a usable timestamp.", view_names[s.base_view]),
        ("a PTS inside the segment is needed to pair frames"));
    return GST_FLOW_ERROR;
  }

  /* Bring every other view (and the state) up to this observation. Until each one proves it
   * has nothing more for it (a later frame queued, or EOS), wait: for data when not live, and
   * at most until the deadline (timeout) when live. */
  bool complete = true;
  for (int v = 0; v < N_VIEWS && ret == GST_FLOW_OK; v++) {
    if (v == s.base_view || !snap.pads[v])
      continue;
    bool c;
    ret = drain_view (self, v, snap.pads[v], T + s.max_skew, delta, &c, s);
    complete = complete && c;
  }
  if (ret == GST_FLOW_OK && snap.state) {
    bool c;
    ret = drain_state (self, snap.state, T, delta, &c, s);
    complete = complete && c;
  }
  add_stats (self, delta);
  delta = Stats ();
  if (ret != GST_FLOW_OK) {
    gst_buffer_unref (base_buf);
    return ret;
  }
  if (!complete && !timeout) {
    gst_buffer_unref (base_buf);
    return GST_AGGREGATOR_FLOW_NEED_DATA;
  }

  /* The base frame is taken now. */
  gst_aggregator_pad_drop_buffer (abase);
  delta.views[s.base_view].frames_in++;
  GstVideoInfo base_info;
  if (!frame_info (&base->priv->info, base_buf, &base_info)) {
    GST_ELEMENT_WARNING (
        self, STREAM, FORMAT,
        ("View '%s' sent a frame smaller than its caps say; dropped.", view_names[s.base_view]),
        ("%" GST_PTR_FORMAT, base_buf));
    delta.views[s.base_view].dropped++;
    add_stats (self, delta);
    gst_buffer_unref (base_buf);
    return GST_FLOW_OK;
  }
  {
    ViewState &bv = st.views[s.base_view];
    gst_buffer_replace (&bv.frame, base_buf);
    bv.info = base_info;
    bv.cuda = base->priv->cuda;
    bv.rt = T;
    bv.used = false;
  }

  GstBuffer *out = gst_buffer_new ();
  GstPi0ObservationMeta *meta = gst_buffer_add_pi0_observation_meta (out);
  meta->observation_time = T;
  bool any_masked = false;

  for (int v = 0; v < N_VIEWS; v++) {
    if (!snap.active[v])
      continue;
    ViewState &vs = st.views[v];
    GstPi0View *view = gst_pi0_observation_meta_add_view (meta, view_names[v]);
    /* A frame from up to max-skew after T has a "negative" age: it is fresh. */
    bool valid = vs.frame && (vs.rt >= T || T - vs.rt <= s.max_staleness);
    if (valid) {
      view->flags = GST_PI0_VIEW_FLAG_VALID;
      if (vs.cuda)
        view->flags = (GstPi0ViewFlags)(view->flags | GST_PI0_VIEW_FLAG_CUDA);
      if (vs.rt < T && T - vs.rt > s.max_skew) {
        view->flags = (GstPi0ViewFlags)(view->flags | GST_PI0_VIEW_FLAG_SKEWED);
        delta.views[v].skewed++;
      }
      view->info = vs.info;
      view->pts = GST_BUFFER_PTS (vs.frame);
      view->capture_time = vs.rt;
      view->mem_index = gst_buffer_n_memory (out);
      view->n_mem = gst_buffer_n_memory (vs.frame);
      for (guint i = 0; i < view->n_mem; i++)
        gst_buffer_append_memory (out, gst_memory_ref (gst_buffer_peek_memory (vs.frame, i)));
      vs.used = true;
      delta.views[v].used++;
    } else {
      any_masked = true;
      delta.views[v].masked++;
      if (vs.frame) {
        /* Too old to use ever again. */
        view->capture_time = vs.rt;
        view->pts = GST_BUFFER_PTS (vs.frame);
        if (!vs.used)
          delta.views[v].dropped++;
        gst_clear_buffer (&vs.frame);
      }
    }
    report_view (self, v, !valid, T, vs.rt, s);
  }

  if (snap.state) {
    GstPi0StateFlags flags = GST_PI0_STATE_FLAG_NONE;
    if (st.have_state) {
      if (T - st.state_rt > s.max_state_age) {
        flags = GST_PI0_STATE_FLAG_STALE;
        delta.state_stale++;
      }
      gst_pi0_observation_meta_set_state (meta, st.state.data (), (guint)st.state.size (),
                                          st.state_rt, flags);
    } else {
      delta.state_stale++;
    }
  }

  st.last_obs_rt = T;
  if (any_masked && s.require_all_views) {
    GST_LOG_OBJECT (self, "dropping observation at %" GST_TIME_FORMAT ": a view is masked",
                    GST_TIME_ARGS (T));
    delta.dropped_observations++;
    add_stats (self, delta);
    gst_buffer_unref (out);
    gst_buffer_unref (base_buf);
    return GST_FLOW_OK;
  }

  meta->sequence = st.sequence++;
  meta->muxed_time = gst_pi0_element_get_running_time (GST_ELEMENT (self));
  GST_BUFFER_PTS (out) = GST_BUFFER_PTS (base_buf);
  GST_BUFFER_DURATION (out) = GST_BUFFER_DURATION (base_buf);
  /* Appending memories tags a buffer for pools; ours comes from no pool. */
  GST_BUFFER_FLAG_UNSET (out, GST_BUFFER_FLAG_TAG_MEMORY);
  if (GST_BUFFER_FLAG_IS_SET (base_buf, GST_BUFFER_FLAG_DISCONT))
    GST_BUFFER_FLAG_SET (out, GST_BUFFER_FLAG_DISCONT);
  gst_buffer_unref (base_buf);
  delta.observations++;
  add_stats (self, delta);

  GST_OBJECT_LOCK (agg->srcpad);
  GST_AGGREGATOR_PAD (agg->srcpad)->segment.position = GST_BUFFER_PTS (out);
  GST_OBJECT_UNLOCK (agg->srcpad);

  gst_aggregator_selected_samples (agg, GST_BUFFER_PTS (out), GST_CLOCK_TIME_NONE,
                                   GST_BUFFER_DURATION (out), nullptr);
  GST_LOG_OBJECT (self, "observation %" G_GUINT64_FORMAT " at %" GST_TIME_FORMAT, meta->sequence,
                  GST_TIME_ARGS (T));
  return gst_aggregator_finish_buffer (agg, out);
}
