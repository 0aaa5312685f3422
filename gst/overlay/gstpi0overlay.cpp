/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0overlay
 * @title: pi0overlay
 *
 * Draws the action chunk a policy plans over a video stream, so that a person sees what the
 * robot is about to do. Two sink pads, like textoverlay's: `video_sink` takes the frames
 * (32-bit BGRx or BGRA: put `videoconvert` before it), `actions_sink` takes any buffers that
 * carry a #GstPi0ActionMeta (what `pi0infer` outputs, through a `tee`) and keeps the latest
 * chunk; every frame is drawn on with it and pushed on `src`.
 *
 * - `mode=plot` (the default, any robot): each joint's planned trajectory over the chunk's
 *   rows, in an inset at the bottom left, scaled to the joint limits of `robot-config` (the
 *   file `pi0actionsink` reads) or, without one, to the chunk's own range.
 * - `mode=planar`: the path of the tool of a planar arm whose joint i turns link i (`links`,
 *   in metres; the arm of `pi0-sim`), each row's tool position mapped into the frame by an
 *   affine `projection` (six numbers: px = a x + b y + c, py = d x + e y + f, in pixels):
 *   a line through the rows, the row the robot runs first ringed, the last a dot.
 *
 * A chunk is drawn on the frames from its observation on (a frame's running time against the
 * chunk's `observation_time`), so a frame never shows a plan made from a later one. With
 * `wait-actions` (like textoverlay's `wait-text`) each frame waits until the actions stream
 * has reached its time (a chunk observed at or after it, the actions pad's EOS, a flush, or the
 * pad unlinked), so each frame shows the plan made from it whatever the threads do: for
 * recordings and lock-step runs; a live view leaves it off (the frames would wait for the
 * policy). A chunk with a value that is not finite (which `pi0actionsink` refuses) clears the
 * plan: no drawing until the next finite one. A chunk older than `max-age` is not drawn.
 * Without a chunk the frames pass as they came.
 *
 * ## Example
 * |[
 * gst-launch-1.0 ... pi0infer name=inf ! tee name=t  t. ! queue ! pi0actionsink ...  \
 *   t. ! queue ! ov.actions_sink \
 *   cam. ! videoconvert ! video/x-raw,format=BGRx ! pi0overlay name=ov mode=planar \
 *     links="0.30,0.25,0.10" projection="68.57,0,48,0,-68.57,70.63" ! videoconvert ! autovideosink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/overlay/gstpi0overlay.h"

#include "gst/common/gstpi0enum.h"
#include "gst/common/gstpi0props.h"
#include "gst/overlay/pi0overlaydraw.h"

#include "protocol/pi0safety.h"

#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_overlay_debug);
#define GST_CAT_DEFAULT gst_pi0_overlay_debug

/* Threads and locks. Two streaming threads, one per sink pad, meet in State: the actions pad's
 * fills it, the video pad's draws from it (and with wait-actions waits on cond for it). The
 * application thread sets properties and changes state.
 *  - settings_lock guards Settings, the properties; held only to copy them.
 *  - lock guards State (the plans, the flushing flag, the stats); held while asking whether the
 *    actions pad is linked, which takes that pad's object lock after it.
 *  - VideoState has no lock: the video pad's streaming thread alone uses it, and READY to PAUSED
 *    fills it before that thread starts.
 * Lock order: settings_lock and lock are never held together; neither is held while pushing or
 * posting. */

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_overlay_mode_get_type, "GstPi0OverlayMode",
                          {GST_PI0_OVERLAY_PLOT,
                           "Each joint's trajectory over the chunk, in an inset (any robot)",
                           "plot"},
                          {GST_PI0_OVERLAY_PLANAR,
                           "The tool's path of a planar arm (links), projected into the frame",
                           "planar"})

namespace
{

enum {
  PROP_0,
  PROP_MODE,
  PROP_LINKS,
  PROP_PROJECTION,
  PROP_ROBOT_CONFIG,
  PROP_MAX_AGE,
  PROP_WAIT_ACTIONS,
  PROP_STATS,
};

/* The properties, each starting at its default (the param specs read them here). */
struct Settings {
  GstPi0OverlayMode mode = GST_PI0_OVERLAY_PLOT;
  std::string links, projection, robot_config; /* NULL when empty */
  guint64 max_age = GST_SECOND;
  gboolean wait_actions = FALSE;
};

bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_FIELD (PROP_MODE, mode, gint, enum)
    GST_PI0_PROP_STRING (PROP_LINKS, links)
    GST_PI0_PROP_STRING (PROP_PROJECTION, projection)
    GST_PI0_PROP_STRING (PROP_ROBOT_CONFIG, robot_config)
    GST_PI0_PROP_FIELD (PROP_MAX_AGE, max_age, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_WAIT_ACTIONS, wait_actions, gboolean, boolean)
  }
  return false;
}

#define FORMATS "{ BGRx, BGRA }"

GstStaticPadTemplate video_sink_template = GST_STATIC_PAD_TEMPLATE (
    "video_sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_VIDEO_CAPS_MAKE (FORMATS)));
GstStaticPadTemplate actions_sink_template =
    GST_STATIC_PAD_TEMPLATE ("actions_sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS_ANY);
GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE (
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_VIDEO_CAPS_MAKE (FORMATS)));

struct Stats {
  guint64 chunks = 0, no_meta = 0, non_finite = 0, frames = 0, drawn = 0, stale = 0, waited = 0;
};

/* A chunk that came on the actions pad, to be drawn from its observation time on; a non-finite
 * one clears the plan from then. */
struct Plan {
  bool finite = false;
  pi0::overlay::Chunk chunk;
  GstClockTime time = GST_CLOCK_TIME_NONE;
};

/* Chunks observed after the frame being drawn wait here; past this many (the video far behind)
 * the oldest is taken as the plan at once. */
constexpr size_t kMaxPending = 64;

/* What the two pads' streaming threads share, under the private struct's lock: the plan drawn
 * now (the latest chunk observed at or before the last frame), the chunks observed after it, how
 * far the actions stream has come, whether the video pad is flushing, and the stats. The actions
 * pad fills it; the video pad draws from it, and with wait-actions waits for it. */
struct State {
  bool have_chunk = false;
  pi0::overlay::Chunk chunk;
  GstClockTime chunk_time = GST_CLOCK_TIME_NONE;
  std::deque<Plan> pending;
  GstClockTime actions_time = GST_CLOCK_TIME_NONE; /* the latest chunk's observation */
  bool actions_untimed = false;                    /* a chunk without one: no waiting */
  bool actions_eos = false;
  bool flushing = false; /* the video pad flushing or the element going down */
  Stats stats;
};

/* The video pad's streaming thread's alone, no lock: the settings taken at READY to PAUSED (the
 * application thread, before the streaming threads start), and the pad's format and segment
 * (its serialized events; a flush stops the thread first). */
struct VideoState {
  GstPi0OverlayMode mode{};
  pi0::overlay::Style style;
  guint64 max_age = 0;
  bool wait_actions = false;
  GstVideoInfo info;
  bool have_info = false;
  GstSegment segment;
  bool warned = false; /* a drawing failure is posted once */

  VideoState ()
  {
    gst_video_info_init (&info);
    gst_segment_init (&segment, GST_FORMAT_TIME);
  }
};

} // namespace

struct GstPi0OverlayPrivate {
  std::mutex settings_lock; /* guards settings; held only to copy them */
  Settings settings;
  std::mutex lock;              /* guards state; cond is waited on with it */
  std::condition_variable cond; /* a chunk, the actions' EOS or a flush: a waiting frame looks */
  State state;
  VideoState video; /* the video pad's streaming thread's (see VideoState) */
};

struct _GstPi0Overlay {
  GstElement parent;
  GstPad *video_sink, *actions_sink, *src;
  GstPi0OverlayPrivate *priv;
};

G_DEFINE_TYPE (GstPi0Overlay, gst_pi0_overlay, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE (pi0overlay, "pi0overlay", GST_RANK_NONE, GST_TYPE_PI0_OVERLAY);

/* Video and src are each other's only internal link; the actions pad has none (its events
 * and queries stay here). */
static GstIterator *
gst_pi0_overlay_iterate_internal_links (GstPad *pad, GstObject *parent)
{
  GstPi0Overlay *self = GST_PI0_OVERLAY (parent);
  GstPad *other = pad == self->src          ? self->video_sink
                  : pad == self->video_sink ? self->src
                                            : nullptr;
  if (!other)
    return gst_iterator_new_single (GST_TYPE_PAD, nullptr);
  GValue v = G_VALUE_INIT;
  g_value_init (&v, GST_TYPE_PAD);
  g_value_set_object (&v, other);
  GstIterator *it = gst_iterator_new_single (GST_TYPE_PAD, &v);
  g_value_unset (&v);
  return it;
}

/* Settings → what the streaming threads use; false with a posted error naming the property. */
static bool
take_settings (GstPi0Overlay *self)
{
  GstPi0OverlayPrivate *priv = self->priv;
  Settings s;
  {
    std::lock_guard<std::mutex> g (priv->settings_lock);
    s = priv->settings;
  }
  pi0::overlay::Style style;
  std::string err;
  if (!pi0::overlay::parse_numbers (s.links, "links", &style.links, &err)) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", err.c_str ()), (nullptr));
    return false;
  }
  std::vector<double> proj;
  if (!pi0::overlay::parse_numbers (s.projection, "projection", &proj, &err)) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", err.c_str ()), (nullptr));
    return false;
  }
  if (s.mode == GST_PI0_OVERLAY_PLANAR) {
    if (style.links.empty ()) {
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                         ("mode=planar needs links: the arm's link lengths, one per joint"),
                         (nullptr));
      return false;
    }
    if (proj.size () != 6) {
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                         ("mode=planar needs projection: six numbers (px = a x + b y + c, py = "
                          "d x + e y + f), it has %u",
                          (guint)proj.size ()),
                         (nullptr));
      return false;
    }
    std::copy (proj.begin (), proj.end (), style.projection.begin ());
  }
  if (!s.robot_config.empty ()) {
    pi0::proto::RobotConfig cfg;
    if (!pi0::proto::load_robot_config (s.robot_config, &cfg, &err)) {
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                         ("Cannot read robot-config %s: %s", s.robot_config.c_str (), err.c_str ()),
                         (nullptr));
      return false;
    }
    style.lower = cfg.lower;
    style.upper = cfg.upper;
  }
  priv->video.mode = s.mode;
  priv->video.style = std::move (style);
  priv->video.max_age = s.max_age;
  priv->video.wait_actions = s.wait_actions;
  return true;
}

/* A chunk becomes the plan (under lock). */
static void
take_plan (State &st, Plan &&p)
{
  st.have_chunk = p.finite;
  st.chunk = std::move (p.chunk);
  st.chunk_time = p.time;
}

/* Forget every chunk (under lock): a flush or a new start. */
static void
reset_plans (State &st)
{
  st.have_chunk = false;
  st.chunk_time = GST_CLOCK_TIME_NONE;
  st.pending.clear ();
  st.actions_time = GST_CLOCK_TIME_NONE;
  st.actions_untimed = false;
  st.actions_eos = false;
}

static GstFlowReturn
gst_pi0_overlay_actions_chain (GstPad *, GstObject *parent, GstBuffer *buf)
{
  GstPi0Overlay *self = GST_PI0_OVERLAY (parent);
  GstPi0OverlayPrivate *priv = self->priv;
  GstPi0ActionMeta *meta = gst_buffer_get_pi0_action_meta (buf);
  std::lock_guard<std::mutex> g (priv->lock);
  if (!meta) {
    priv->state.stats.no_meta++;
    GST_LOG_OBJECT (self, "a buffer without an action chunk");
    gst_buffer_unref (buf);
    return GST_FLOW_OK;
  }
  Plan p;
  p.time = meta->observation_time;
  p.finite = gst_pi0_action_meta_check_finite (meta);
  if (!p.finite) {
    priv->state.stats.non_finite++; /* the robot is not sent it: no plan to show from then */
    GST_DEBUG_OBJECT (self, "chunk %" G_GUINT64_FORMAT " is not finite: it clears the plan",
                      meta->sequence);
  } else {
    priv->state.stats.chunks++;
    p.chunk.horizon = meta->horizon;
    p.chunk.dim = meta->dim;
    p.chunk.actions.assign (meta->actions, meta->actions + (size_t)meta->horizon * meta->dim);
  }
  gst_buffer_unref (buf);
  if (GST_CLOCK_TIME_IS_VALID (p.time))
    priv->state.actions_time = p.time;
  else
    priv->state.actions_untimed = true;
  if (priv->state.pending.size () >= kMaxPending) {
    take_plan (priv->state, std::move (priv->state.pending.front ()));
    priv->state.pending.pop_front ();
  }
  priv->state.pending.push_back (std::move (p));
  priv->cond.notify_all ();
  return GST_FLOW_OK;
}

static gboolean
gst_pi0_overlay_actions_event (GstPad *, GstObject *parent, GstEvent *ev)
{
  GstPi0Overlay *self = GST_PI0_OVERLAY (parent);
  GstPi0OverlayPrivate *priv = self->priv;
  if (GST_EVENT_TYPE (ev) == GST_EVENT_FLUSH_STOP) {
    std::lock_guard<std::mutex> g (priv->lock);
    reset_plans (priv->state);
  } else if (GST_EVENT_TYPE (ev) == GST_EVENT_EOS) {
    std::lock_guard<std::mutex> g (priv->lock);
    priv->state.actions_eos = true; /* no chunk to wait for any more */
    priv->cond.notify_all ();
  } else if (GST_EVENT_TYPE (ev) == GST_EVENT_STREAM_START) {
    std::lock_guard<std::mutex> g (priv->lock);
    priv->state.actions_eos = false;
  }
  /* The actions stream ends here: its caps, segments and EOS are not the video's. */
  gst_event_unref (ev);
  return TRUE;
}

static gboolean
gst_pi0_overlay_actions_query (GstPad *pad, GstObject *parent, GstQuery *q)
{
  if (GST_QUERY_TYPE (q) == GST_QUERY_CAPS || GST_QUERY_TYPE (q) == GST_QUERY_ACCEPT_CAPS)
    return gst_pad_query_default (pad, parent, q);
  return FALSE;
}

static gboolean
gst_pi0_overlay_video_event (GstPad *pad, GstObject *parent, GstEvent *ev)
{
  GstPi0Overlay *self = GST_PI0_OVERLAY (parent);
  GstPi0OverlayPrivate *priv = self->priv;
  switch (GST_EVENT_TYPE (ev)) {
    case GST_EVENT_CAPS: {
      GstCaps *caps;
      gst_event_parse_caps (ev, &caps);
      if (!gst_video_info_from_caps (&priv->video.info, caps)) {
        GST_ELEMENT_ERROR (self, STREAM, FORMAT,
                           ("Caps that are not video: %" GST_PTR_FORMAT, caps), (nullptr));
        gst_event_unref (ev);
        return FALSE;
      }
      priv->video.have_info = true;
      break;
    }
    case GST_EVENT_SEGMENT:
      gst_event_copy_segment (ev, &priv->video.segment);
      break;
    case GST_EVENT_FLUSH_START: {
      std::lock_guard<std::mutex> g (priv->lock);
      priv->state.flushing = true; /* a frame waiting for its chunk leaves */
      priv->cond.notify_all ();
      break;
    }
    case GST_EVENT_FLUSH_STOP: {
      gst_segment_init (&priv->video.segment, GST_FORMAT_TIME);
      std::lock_guard<std::mutex> g (priv->lock);
      priv->state.flushing = false;
      break;
    }
    default:
      break;
  }
  return gst_pad_event_default (pad, parent, ev);
}

static GstFlowReturn
gst_pi0_overlay_video_chain (GstPad *, GstObject *parent, GstBuffer *buf)
{
  GstPi0Overlay *self = GST_PI0_OVERLAY (parent);
  GstPi0OverlayPrivate *priv = self->priv;
  if (!priv->video.have_info) {
    gst_buffer_unref (buf);
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, ("A video frame came before its caps"), (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  const GstClockTime rt =
      priv->video.segment.format == GST_FORMAT_TIME && GST_BUFFER_PTS_IS_VALID (buf)
          ? gst_segment_to_running_time (&priv->video.segment, GST_FORMAT_TIME,
                                         GST_BUFFER_PTS (buf))
          : GST_CLOCK_TIME_NONE;
  pi0::overlay::Chunk chunk;
  bool draw = false;
  {
    std::unique_lock<std::mutex> g (priv->lock);
    priv->state.stats.frames++;
    /* wait-actions: until the actions stream has come as far as this frame. Unlinking the pad
     * notifies nothing: looked at again every 100 ms. */
    bool waited = false;
    while (
        priv->video.wait_actions && GST_CLOCK_TIME_IS_VALID (rt) && !priv->state.flushing &&
        !priv->state.actions_eos && !priv->state.actions_untimed &&
        gst_pad_is_linked (self->actions_sink) &&
        !(GST_CLOCK_TIME_IS_VALID (priv->state.actions_time) && priv->state.actions_time >= rt)) {
      waited = true;
      priv->cond.wait_for (g, std::chrono::milliseconds (100));
    }
    if (priv->state.flushing) {
      gst_buffer_unref (buf);
      return GST_FLOW_FLUSHING;
    }
    priv->state.stats.waited += waited;
    /* The plan for this frame: the latest chunk observed at or before it. */
    while (!priv->state.pending.empty () &&
           (!GST_CLOCK_TIME_IS_VALID (rt) ||
            !GST_CLOCK_TIME_IS_VALID (priv->state.pending.front ().time) ||
            priv->state.pending.front ().time <= rt)) {
      take_plan (priv->state, std::move (priv->state.pending.front ()));
      priv->state.pending.pop_front ();
    }
    if (priv->state.have_chunk) {
      const bool stale = priv->video.max_age > 0 && GST_CLOCK_TIME_IS_VALID (rt) &&
                         GST_CLOCK_TIME_IS_VALID (priv->state.chunk_time) &&
                         rt > priv->state.chunk_time + priv->video.max_age;
      if (stale)
        priv->state.stats.stale++;
      else {
        chunk = priv->state.chunk;
        draw = true;
      }
    }
  }
  if (!draw)
    return gst_pad_push (self->src, buf);
  buf = gst_buffer_make_writable (buf);
  GstVideoFrame frame;
  if (!gst_video_frame_map (&frame, &priv->video.info, buf, GST_MAP_READWRITE)) {
    gst_buffer_unref (buf);
    GST_ELEMENT_ERROR (self, STREAM, FAILED, ("Cannot map a video frame to draw on"), (nullptr));
    return GST_FLOW_ERROR;
  }
  const bool alpha = GST_VIDEO_INFO_FORMAT (&priv->video.info) == GST_VIDEO_FORMAT_BGRA;
  uint8_t *data = (uint8_t *)GST_VIDEO_FRAME_PLANE_DATA (&frame, 0);
  const int w = GST_VIDEO_FRAME_WIDTH (&frame), h = GST_VIDEO_FRAME_HEIGHT (&frame);
  const int stride = GST_VIDEO_FRAME_PLANE_STRIDE (&frame, 0);
  std::string err;
  const bool ok =
      priv->video.mode == GST_PI0_OVERLAY_PLANAR
          ? pi0::overlay::draw_planar (data, w, h, stride, alpha, chunk, priv->video.style, &err)
          : pi0::overlay::draw_plot (data, w, h, stride, alpha, chunk, priv->video.style, &err);
  gst_video_frame_unmap (&frame);
  if (ok) {
    std::lock_guard<std::mutex> g (priv->lock);
    priv->state.stats.drawn++;
  } else if (!priv->video.warned) {
    priv->video.warned = true;
    GST_ELEMENT_WARNING (self, STREAM, FAILED, ("Cannot draw the chunk: %s", err.c_str ()),
                         ("frames pass undrawn while it lasts; posted once"));
  }
  return gst_pad_push (self->src, buf);
}

static GstStateChangeReturn
gst_pi0_overlay_change_state (GstElement *element, GstStateChange transition)
{
  GstPi0Overlay *self = GST_PI0_OVERLAY (element);
  GstPi0OverlayPrivate *priv = self->priv;
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) {
    std::lock_guard<std::mutex> g (priv->lock);
    priv->state.flushing = true; /* before the pads deactivate: a waiting frame must leave */
    priv->cond.notify_all ();
  }
  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
    if (!take_settings (self))
      return GST_STATE_CHANGE_FAILURE;
    {
      std::lock_guard<std::mutex> g (priv->lock);
      reset_plans (priv->state);
      priv->state.flushing = false;
      priv->state.stats = Stats ();
    }
    priv->video.warned = false;
    priv->video.have_info = false;
    gst_segment_init (&priv->video.segment, GST_FORMAT_TIME);
  }
  return GST_ELEMENT_CLASS (gst_pi0_overlay_parent_class)->change_state (element, transition);
}

static void
gst_pi0_overlay_set_property (GObject *object, guint prop_id, const GValue *value,
                              GParamSpec *pspec)
{
  GstPi0Overlay *self = GST_PI0_OVERLAY (object);
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_overlay_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstPi0Overlay *self = GST_PI0_OVERLAY (object);
  if (prop_id == PROP_STATS) {
    std::lock_guard<std::mutex> g (self->priv->lock);
    const Stats &st = self->priv->state.stats;
    g_value_take_boxed (
        value, gst_structure_new ("pi0overlay-stats", "chunks", G_TYPE_UINT64, st.chunks, "no-meta",
                                  G_TYPE_UINT64, st.no_meta, "non-finite", G_TYPE_UINT64,
                                  st.non_finite, "frames", G_TYPE_UINT64, st.frames, "drawn",
                                  G_TYPE_UINT64, st.drawn, "stale", G_TYPE_UINT64, st.stale,
                                  "waited", G_TYPE_UINT64, st.waited, nullptr));
    return;
  }
  std::lock_guard<std::mutex> lk (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_overlay_finalize (GObject *object)
{
  delete GST_PI0_OVERLAY (object)->priv;
  G_OBJECT_CLASS (gst_pi0_overlay_parent_class)->finalize (object);
}

static void
gst_pi0_overlay_init (GstPi0Overlay *self)
{
  self->priv = new GstPi0OverlayPrivate ();
  self->video_sink = gst_pad_new_from_static_template (&video_sink_template, "video_sink");
  gst_pad_set_chain_function (self->video_sink, gst_pi0_overlay_video_chain);
  gst_pad_set_event_function (self->video_sink, gst_pi0_overlay_video_event);
  gst_pad_set_iterate_internal_links_function (self->video_sink,
                                               gst_pi0_overlay_iterate_internal_links);
  GST_PAD_SET_PROXY_CAPS (self->video_sink);
  GST_PAD_SET_PROXY_ALLOCATION (self->video_sink);
  gst_element_add_pad (GST_ELEMENT (self), self->video_sink);
  self->actions_sink = gst_pad_new_from_static_template (&actions_sink_template, "actions_sink");
  gst_pad_set_chain_function (self->actions_sink, gst_pi0_overlay_actions_chain);
  gst_pad_set_event_function (self->actions_sink, gst_pi0_overlay_actions_event);
  gst_pad_set_query_function (self->actions_sink, gst_pi0_overlay_actions_query);
  gst_pad_set_iterate_internal_links_function (self->actions_sink,
                                               gst_pi0_overlay_iterate_internal_links);
  gst_element_add_pad (GST_ELEMENT (self), self->actions_sink);
  self->src = gst_pad_new_from_static_template (&src_template, "src");
  gst_pad_set_iterate_internal_links_function (self->src, gst_pi0_overlay_iterate_internal_links);
  GST_PAD_SET_PROXY_CAPS (self->src);
  GST_PAD_SET_PROXY_ALLOCATION (self->src);
  gst_element_add_pad (GST_ELEMENT (self), self->src);
}

static void
gst_pi0_overlay_class_init (GstPi0OverlayClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  gobject_class->set_property = GST_DEBUG_FUNCPTR (gst_pi0_overlay_set_property);
  gobject_class->get_property = GST_DEBUG_FUNCPTR (gst_pi0_overlay_get_property);
  gobject_class->finalize = GST_DEBUG_FUNCPTR (gst_pi0_overlay_finalize);
  const Settings d; /* every default: Settings' initialisers */
  g_object_class_install_property (gobject_class, PROP_MODE,
                                   g_param_spec_enum ("mode", "Mode", "What to draw of the chunk",
                                                      GST_TYPE_PI0_OVERLAY_MODE, d.mode,
                                                      GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_LINKS,
      g_param_spec_string ("links", "Links",
                           "mode=planar: the arm's link lengths in metres, joint i turning link i "
                           "(e.g. \"0.30,0.25,0.10\")",
                           nullptr, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_PROJECTION,
      g_param_spec_string ("projection", "Projection",
                           "mode=planar: six numbers a,b,c,d,e,f mapping the tool's x, y (metres) "
                           "to pixels: px = a x + b y + c, py = d x + e y + f",
                           nullptr, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_ROBOT_CONFIG,
      g_param_spec_string ("robot-config", "Robot configuration",
                           "mode=plot: a robot configuration (JSON, as pi0actionsink reads) whose "
                           "joint limits scale the plot; unset: each chunk's own range",
                           nullptr, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_MAX_AGE,
      g_param_spec_uint64 ("max-age", "Maximum age",
                           "A chunk is not drawn on frames later than its observation by more "
                           "than this (running time, ns; 0: always drawn)",
                           0, G_MAXUINT64, d.max_age, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_WAIT_ACTIONS,
      g_param_spec_boolean ("wait-actions", "Wait for actions",
                            "Each frame waits for the chunk observed from it (or a later one, the "
                            "actions pad's EOS or unlinking): every frame shows its own plan. For "
                            "recordings and lock-step runs; a live view leaves it off",
                            d.wait_actions, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Stats",
                          "chunks (finite ones kept), no-meta (buffers without a chunk), "
                          "non-finite (chunks that cleared the plan), frames, drawn, stale, "
                          "waited (frames that waited for their chunk)",
                          GST_TYPE_STRUCTURE, GST_PI0_PARAM_READ_ONLY));
  gst_element_class_add_static_pad_template (element_class, &video_sink_template);
  gst_element_class_add_static_pad_template (element_class, &actions_sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 action overlay", "Filter/Editor/Video",
      "Draws the action chunk a policy plans over a video stream", GST_PI0_AUTHOR);
  element_class->change_state = GST_DEBUG_FUNCPTR (gst_pi0_overlay_change_state);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_OVERLAY_MODE, (GstPluginAPIFlags)0);
  GST_DEBUG_CATEGORY_INIT (gst_pi0_overlay_debug, "pi0overlay", 0, "Pi0 action overlay");
}
