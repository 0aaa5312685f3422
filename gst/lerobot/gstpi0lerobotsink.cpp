/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0lerobotsink
 * @title: pi0lerobotsink
 *
 * Records the chain straight into a LeRobotDataset v3 directory that `lerobot`'s
 * `LeRobotDataset` loads unchanged: one frame per observation (the base camera's rate), each
 * camera encoded to H.264 in MP4 by GStreamer's encoders (`nvh264enc` when present, `x264enc`
 * otherwise; `lossless=true` for bit-exact frames), and in Parquet the robot state, the action
 * the robot was actually sent, timestamps and frame/episode/task indices, with `meta/`
 * (info, per-feature stats, tasks, episodes).
 *
 * The action of a frame is the command the robot was executing when the frame's base camera
 * captured it, rebuilt from the messages the `pi0actionsink` named by
 * #GstPi0LeRobotSink:action-sink sent (its `action` signal: after its checks and clamping),
 * with the receiver's timing rules. Before the first command of a run it is the state (the
 * robot holds where it is).
 *
 * Episodes start at the first observation (#GstPi0LeRobotSink:auto-start) or at a
 * `pi0-episode` start event (gst_pi0_episode_event_new()), end at a stop event, at EOS or when
 * the element stops; the task is the instruction (#GstPi0LeRobotSink:instruction, a
 * `pi0-instruction` event, or the start event's task). An episode is committed whole when it
 * ends, info.json last: a crash loses the episode in progress, never a finished one.
 *
 * ## Example
 * |[
 * gst-launch-1.0 -e pi0viewmux name=mux ! tee name=obs \
 *   obs. ! queue ! cudaprep ! pi0infer ! pi0actionsink name=robot target=udp://127.0.0.1:9870 \
 *   obs. ! queue ! pi0lerobotsink location=/data/pick action-sink=robot instruction="pick" ...
 * ]|
 *
 * The element is glue over its engine, pi0::record::Recorder (pi0recorder.h): the dataset, the
 * episodes, the actions' timeline and the cameras' encoders are the recorder's. Here:
 * properties, caps, events, finding the action sink, posting.
 *
 * Threads: the streaming thread (render, events; owns the recorder), the action sink's sending
 * threads (the `action` handler: the recorder's timeline lock only), the application
 * (properties: settings_lock). No two locks are ever held together; no lock is held while
 * waiting on an encoder, posting or writing files.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/lerobot/gstpi0lerobotsink.h"

#include "gst/common/gstpi0enum.h"
#include "gst/common/gstpi0props.h"
#include "gst/common/pi0notice.h"
#include "gst/lerobot/pi0recorder.h"

#include "protocol/pi0safety.h"

#include <gst/pi0/pi0.h>

#include <exception>
#include <mutex>
#include <set>
#include <string>

GST_DEBUG_CATEGORY (gst_pi0_lerobot_sink_debug); /* pi0recorder.cpp logs in it too */
#define GST_CAT_DEFAULT gst_pi0_lerobot_sink_debug

namespace
{

enum {
  PROP_0,
  PROP_LOCATION,
  PROP_APPEND,
  PROP_ACTION_SINK,
  PROP_INSTRUCTION,
  PROP_ENCODER,
  PROP_LOSSLESS,
  PROP_QUANTIZER,
  PROP_GOP_SIZE,
  PROP_FPS,
  PROP_AUTO_START,
  PROP_ROBOT_TYPE,
  PROP_EPISODE_LENGTH,
  PROP_GAP_ACTION,
  PROP_FAIL_PIPELINE,
  PROP_STATS,
};

/* The properties, each starting at its default (the param specs read them here). */
struct Settings {
  std::string location;
  bool append = false;
  std::string action_sink;
  std::string instruction;
  GstPi0LeRobotEncoder encoder = GST_PI0_LEROBOT_ENCODER_AUTO;
  bool lossless = false;
  guint quantizer = 23;
  guint gop = 2;
  guint fps = 0; /* 0: the base camera's */
  bool auto_start = true;
  std::string robot_type;   /* empty: null in info.json */
  guint episode_length = 0; /* 0: episodes end by event, EOS or stop */
  GstPi0LeRobotGapAction gap_action = GST_PI0_LEROBOT_GAP_KEEP;
  bool fail_pipeline = false;

  pi0::record::Settings recorder () const
  {
    pi0::record::Settings r;
    r.location = location;
    r.append = append;
    r.instruction = instruction;
    r.encoder.encoder = (pi0::record::Encoder)encoder;
    r.encoder.lossless = lossless;
    r.encoder.quantizer = quantizer;
    r.encoder.gop = gop;
    r.auto_start = auto_start;
    r.robot_type = robot_type;
    r.episode_length = episode_length;
    r.split_at_gaps = gap_action == GST_PI0_LEROBOT_GAP_SPLIT;
    return r;
  }
};

static_assert ((int)pi0::record::Encoder::Auto == GST_PI0_LEROBOT_ENCODER_AUTO &&
                   (int)pi0::record::Encoder::X264 == GST_PI0_LEROBOT_ENCODER_X264 &&
                   (int)pi0::record::Encoder::Nvh264 == GST_PI0_LEROBOT_ENCODER_NVH264,
               "the property's values are the recorder's");

/* The streaming thread's, between start and stop. */
struct State {
  GstElement *action_sink = nullptr;
  gulong action_handler = 0;
  guint fps = 0;                  /* the fps property, at start */
  std::set<guint32> seen_seqnums; /* episode events taken (they come once per camera) */
  bool fail_pipeline = false;     /* the property, at start */
  bool failed = false;            /* recording stopped by a failure: the rest is dropped */
};

} // namespace

struct GstPi0LeRobotSinkPrivate {
  std::mutex settings_lock;
  Settings settings; /* under settings_lock */
  State state;
  pi0::record::Recorder recorder; /* command() and counts() from any thread */
};

struct _GstPi0LeRobotSink {
  GstBaseSink parent;
  GstPi0LeRobotSinkPrivate *priv;
};

#define gst_pi0_lerobot_sink_parent_class parent_class
G_DEFINE_TYPE (GstPi0LeRobotSink, gst_pi0_lerobot_sink, GST_TYPE_BASE_SINK);
GST_ELEMENT_REGISTER_DEFINE (pi0lerobotsink, "pi0lerobotsink", GST_RANK_NONE,
                             GST_TYPE_PI0_LEROBOT_SINK);

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_lerobot_encoder_get_type, "GstPi0LeRobotEncoder",
                          {GST_PI0_LEROBOT_ENCODER_AUTO,
                           "nvh264enc when it is available, x264enc otherwise", "auto"},
                          {GST_PI0_LEROBOT_ENCODER_X264, "x264enc (CPU)", "x264"},
                          {GST_PI0_LEROBOT_ENCODER_NVH264, "nvh264enc (NVIDIA NVENC)", "nvh264"})

GST_PI0_DEFINE_ENUM_TYPE (gst_pi0_lerobot_gap_action_get_type, "GstPi0LeRobotGapAction",
                          {GST_PI0_LEROBOT_GAP_KEEP,
                           "Keep the frames in the episode (its timeline closes the gap); "
                           "each gap is posted as a warning with its place",
                           "keep"},
                          {GST_PI0_LEROBOT_GAP_SPLIT,
                           "End the episode before the gap and start the next with the frame "
                           "after it (same task)",
                           "split"})

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE (
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_MEDIA_TYPE));

/* The action sink's `action` signal, from its sending threads. */
static void
on_action (GstElement *sink, const gchar *kind, guint64 chunk_id, guint step_index, guint steps,
           guint dim, GBytes *values, gpointer user_data)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (user_data);
  gsize len = 0;
  const float *v = values ? (const float *)g_bytes_get_data (values, &len) : nullptr;
  /* The send time is read inside: anything handled after a commit was sent after it. */
  self->priv->recorder.command (kind, chunk_id, step_index,
                                gst_element_get_current_running_time (GST_ELEMENT (self)), v, len,
                                steps, dim);
}

/* A recording failure (a full disk, an encoder that fails, a camera that changes shape) with
 * fail-pipeline=false: the recorder's error becomes a warning, recording stops (what it left
 * half-written is discarded, committed episodes stay), and the rest of the pipeline, the robot's
 * control among it, goes on. */
static GstFlowReturn
recording_failed (GstPi0LeRobotSink *self, GstFlowReturn ret, pi0::Notices &n)
{
  State &st = self->priv->state;
  if (ret != GST_FLOW_ERROR || st.fail_pipeline)
    return ret;
  const std::string why = n.demote_errors ();
  st.failed = true;
  pi0::Notices stop;
  self->priv->recorder.finish (true, stop);
  stop.demote_errors ();
  n.splice (stop);
  n.warning (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_WRITE,
             "Recording stopped: " + why +
                 "; the rest of the pipeline goes on (fail-pipeline "
                 "is false), nothing more is recorded until the element restarts");
  return GST_FLOW_OK;
}

static GstFlowReturn
gst_pi0_lerobot_sink_render (GstBaseSink *bsink, GstBuffer *buf)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  if (self->priv->state.failed)
    return GST_FLOW_OK;
  pi0::Notices n;
  GstFlowReturn ret;
  try {
    ret = self->priv->recorder.observation (buf, n);
  } catch (const std::exception &e) {
    n.error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_FAILED, e.what ());
    ret = GST_FLOW_ERROR;
  }
  ret = recording_failed (self, ret, n);
  GST_PI0_POST_NOTICES (self, n);
  return ret;
}

static gboolean
gst_pi0_lerobot_sink_event (GstBaseSink *bsink, GstEvent *event)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  GstPi0LeRobotSinkPrivate *priv = self->priv;
  const gchar *text = nullptr;
  GstPi0EpisodeAction action;
  pi0::Notices n;
  if (gst_pi0_instruction_event_parse (event, &text)) {
    priv->recorder.set_task (text);
  } else if (gst_pi0_episode_event_parse (event, &action, &text)) {
    /* The same event reaches us once per camera when sent to the pipeline's sources. */
    std::set<guint32> &seen = priv->state.seen_seqnums;
    if (seen.insert (gst_event_get_seqnum (event)).second) {
      if (seen.size () > 64)
        seen.erase (seen.begin ());
      priv->recorder.episode_event (action == GST_PI0_EPISODE_START, text, n);
    }
  } else if (GST_EVENT_TYPE (event) == GST_EVENT_EOS && !priv->state.failed) {
    priv->recorder.finish (false, n);
    if (n.has_error ())
      recording_failed (self, GST_FLOW_ERROR, n);
  }
  GST_PI0_POST_NOTICES (self, n);
  return GST_BASE_SINK_CLASS (parent_class)->event (bsink, event);
}

static gboolean
gst_pi0_lerobot_sink_send_event (GstElement *element, GstEvent *event)
{
  /* An application may send episode events straight to the recorder: they go in order with
   * the stream, as if they came from upstream. */
  if (gst_pi0_episode_event_parse (event, nullptr, nullptr) ||
      gst_pi0_instruction_event_parse (event, nullptr)) {
    GstPad *pad = GST_BASE_SINK_PAD (element);
    return gst_pad_send_event (pad, event);
  }
  return GST_ELEMENT_CLASS (parent_class)->send_event (element, event);
}

/* The pi0actionsink named @name in the pipeline, and what it says about the robot; nullptr with
 * an error posted. */
static GstElement *
find_action_sink (GstPi0LeRobotSink *self, const std::string &name, pi0::record::Robot *robot)
{
  GstObject *parent = gst_object_get_parent (GST_OBJECT (self));
  GstElement *as = nullptr;
  if (parent && GST_IS_BIN (parent))
    as = gst_bin_get_by_name_recurse_up (GST_BIN (parent), name.c_str ());
  if (parent)
    gst_object_unref (parent);
  if (!as || !g_signal_lookup ("action", G_OBJECT_TYPE (as))) {
    if (as)
      gst_object_unref (as);
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("No pi0actionsink named '%s' in the pipeline", name.c_str ()), (nullptr));
    return nullptr;
  }
  gint mode = 0;
  gdouble rate = 50;
  gchar *cfg = nullptr;
  g_object_get (as, "mode", &mode, "control-rate", &rate, "robot-config", &cfg, nullptr);
  GEnumValue *mv =
      g_enum_get_value ((GEnumClass *)g_type_class_peek (G_PARAM_SPEC_VALUE_TYPE (
                            g_object_class_find_property (G_OBJECT_GET_CLASS (as), "mode"))),
                        mode);
  if (mv && g_strcmp0 (mv->value_nick, "log") == 0) {
    g_free (cfg);
    gst_object_unref (as);
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("'%s' is in mode=log: it sends nothing to a robot, there is no action "
                        "to record",
                        name.c_str ()),
                       (nullptr));
    return nullptr;
  }
  robot->period_ns = (int64_t)(GST_SECOND / rate + 0.5);
  robot->stream = mv && g_strcmp0 (mv->value_nick, "stream") == 0;
  /* The joints' names, when its configuration is readable (it says so itself when not). */
  pi0::proto::RobotConfig rc;
  std::string e;
  if (cfg && *cfg && pi0::proto::load_robot_config (cfg, &rc, &e)) {
    robot->joints = rc.joint_names;
    robot->dim = rc.dim ();
  }
  g_free (cfg);
  return as;
}

static gboolean
gst_pi0_lerobot_sink_start (GstBaseSink *bsink)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  GstPi0LeRobotSinkPrivate *priv = self->priv;
  Settings s;
  {
    std::lock_guard<std::mutex> g (priv->settings_lock);
    s = priv->settings;
  }
  if (s.location.empty ()) {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND, ("No location: set the dataset directory"),
                       (nullptr));
    return FALSE;
  }
  if (s.action_sink.empty ()) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("No action-sink: name the pi0actionsink whose actions are recorded"),
                       (nullptr));
    return FALSE;
  }
  pi0::record::Robot robot;
  GstElement *as = find_action_sink (self, s.action_sink, &robot);
  if (!as)
    return FALSE;
  priv->recorder.start (s.recorder (), robot);
  priv->state = State ();
  priv->state.fps = s.fps;
  priv->state.fail_pipeline = s.fail_pipeline;
  priv->state.action_sink = as;
  priv->state.action_handler = g_signal_connect (as, "action", G_CALLBACK (on_action), self);
  return TRUE;
}

static gboolean
gst_pi0_lerobot_sink_stop (GstBaseSink *bsink)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  GstPi0LeRobotSinkPrivate *priv = self->priv;
  State &st = priv->state;
  if (st.action_sink) {
    g_signal_handler_disconnect (st.action_sink, st.action_handler);
    gst_object_unref (st.action_sink);
  }
  st = State ();
  /* Stopped without EOS (the pipeline set to NULL): the episode so far is still kept. */
  pi0::Notices n;
  priv->recorder.finish (true, n);
  GST_PI0_POST_NOTICES (self, n);
  return TRUE;
}

static gboolean
gst_pi0_lerobot_sink_set_caps (GstBaseSink *bsink, GstCaps *caps)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  GstStructure *s = gst_caps_get_structure (caps, 0);
  gint num = 0, den = 1, fps;
  if (self->priv->state.fps > 0) {
    fps = (int)self->priv->state.fps;
  } else if (gst_structure_get_fraction (s, "framerate", &num, &den) && num > 0 && den > 0 &&
             num % den == 0) {
    fps = num / den;
  } else {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT,
                       ("The base camera's frame rate %d/%d is not a whole number of frames per "
                        "second; LeRobot datasets have an integer fps: set fps",
                        num, den),
                       (nullptr));
    return FALSE;
  }
  /* A dataset has one fps: a new rate mid-recording is a recording failure (what it has
   * recorded so far is kept), which stops the pipeline only with fail-pipeline=true; the caps
   * are accepted otherwise, and the robot's control goes on. */
  if (self->priv->state.failed)
    return TRUE;
  pi0::Notices n;
  GstFlowReturn ret = self->priv->recorder.set_fps (fps, n) ? GST_FLOW_OK : GST_FLOW_ERROR;
  ret = recording_failed (self, ret, n);
  GST_PI0_POST_NOTICES (self, n);
  return ret == GST_FLOW_OK;
}

/* Every settable property, both directions (gstpi0props.h). */
static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_STRING_OR (PROP_LOCATION, location)
    GST_PI0_PROP_FIELD (PROP_APPEND, append, gboolean, boolean)
    GST_PI0_PROP_STRING_OR (PROP_ACTION_SINK, action_sink)
    GST_PI0_PROP_STRING_OR (PROP_INSTRUCTION, instruction)
    GST_PI0_PROP_FIELD (PROP_ENCODER, encoder, gint, enum)
    GST_PI0_PROP_FIELD (PROP_LOSSLESS, lossless, gboolean, boolean)
    GST_PI0_PROP_FIELD (PROP_QUANTIZER, quantizer, guint, uint)
    GST_PI0_PROP_FIELD (PROP_GOP_SIZE, gop, guint, uint)
    GST_PI0_PROP_FIELD (PROP_FPS, fps, guint, uint)
    GST_PI0_PROP_FIELD (PROP_AUTO_START, auto_start, gboolean, boolean)
    GST_PI0_PROP_STRING_OR (PROP_ROBOT_TYPE, robot_type)
    GST_PI0_PROP_FIELD (PROP_EPISODE_LENGTH, episode_length, guint, uint)
    GST_PI0_PROP_FIELD (PROP_GAP_ACTION, gap_action, gint, enum)
    GST_PI0_PROP_FIELD (PROP_FAIL_PIPELINE, fail_pipeline, gboolean, boolean)
  }
  return false;
}

static void
gst_pi0_lerobot_sink_set_property (GObject *object, guint prop_id, const GValue *value,
                                   GParamSpec *pspec)
{
  GstPi0LeRobotSinkPrivate *priv = GST_PI0_LEROBOT_SINK (object)->priv;
  std::lock_guard<std::mutex> g (priv->settings_lock);
  if (!transfer (priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_lerobot_sink_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstPi0LeRobotSinkPrivate *priv = GST_PI0_LEROBOT_SINK (object)->priv;
  if (prop_id == PROP_STATS) {
    const pi0::record::Counts c = priv->recorder.counts ();
    g_value_take_boxed (value, gst_structure_new ("pi0lerobotsink-stats", "episodes", G_TYPE_UINT64,
                                                  c.episodes, "frames", G_TYPE_UINT64, c.frames,
                                                  "skipped", G_TYPE_UINT64, c.skipped,
                                                  "episode-frames", G_TYPE_UINT64, c.current,
                                                  "gaps", G_TYPE_UINT64, c.gaps, nullptr));
    return;
  }
  std::lock_guard<std::mutex> g (priv->settings_lock);
  if (!transfer (priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_lerobot_sink_finalize (GObject *object)
{
  delete GST_PI0_LEROBOT_SINK (object)->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_pi0_lerobot_sink_init (GstPi0LeRobotSink *self)
{
  self->priv = new GstPi0LeRobotSinkPrivate ();
  gst_base_sink_set_sync (GST_BASE_SINK (self), FALSE);
}

static void
gst_pi0_lerobot_sink_class_init (GstPi0LeRobotSinkClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseSinkClass *base_class = GST_BASE_SINK_CLASS (klass);

  gobject_class->set_property = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_sink_set_property);
  gobject_class->get_property = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_sink_get_property);
  gobject_class->finalize = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_sink_finalize);
  const Settings d; /* every default: Settings' initialisers */

  g_object_class_install_property (
      gobject_class, PROP_LOCATION,
      g_param_spec_string ("location", "Location",
                           "The dataset's directory (created if missing; must be empty or hold a "
                           "dataset)",
                           d.location.c_str (), GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_APPEND,
      g_param_spec_boolean ("append", "Append",
                            "Add episodes to the dataset already in location (same fps and "
                            "features); without it an existing dataset is an error",
                            d.append, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_ACTION_SINK,
      g_param_spec_string ("action-sink", "Action sink",
                           "Name of the pi0actionsink in this pipeline whose sent actions are "
                           "recorded",
                           d.action_sink.c_str (), GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_INSTRUCTION,
      g_param_spec_string ("instruction", "Instruction",
                           "The task of the episodes until a pi0-instruction or episode start "
                           "event sets another",
                           d.instruction.c_str (), GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_ENCODER,
      g_param_spec_enum ("encoder", "Encoder", "H.264 encoder for the cameras",
                         GST_TYPE_PI0_LEROBOT_ENCODER, d.encoder, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_LOSSLESS,
      g_param_spec_boolean ("lossless", "Lossless",
                            "Encode every frame exactly (x264 at QP 0; RGB cameras as GBR 4:4:4)",
                            d.lossless, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_QUANTIZER,
      g_param_spec_uint ("quantizer", "Quantizer",
                         "Constant quality of lossy encoding (x264 CRF-like quantizer, nvh264enc "
                         "QP); lower is better",
                         0, 50, d.quantizer, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_GOP_SIZE,
      g_param_spec_uint ("gop-size", "GOP size",
                         "Frames between key frames (LeRobot's default 2 keeps random access "
                         "cheap for its loader)",
                         1, 1000, d.gop, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_FPS,
      g_param_spec_uint ("fps", "FPS",
                         "The dataset's frames per second (0: the base camera's, which must then "
                         "be a whole number)",
                         0, 1000, d.fps, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_AUTO_START,
      g_param_spec_boolean ("auto-start", "Auto start",
                            "Start an episode at the first observation (otherwise wait for a "
                            "pi0-episode start event)",
                            d.auto_start, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_ROBOT_TYPE,
      g_param_spec_string ("robot-type", "Robot type", "info.json's robot_type (empty: null)",
                           d.robot_type.c_str (), GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_EPISODE_LENGTH,
      g_param_spec_uint ("episode-length", "Episode length",
                         "End an episode after this many frames and start the next (0: episodes "
                         "end only by event, EOS or stop)",
                         0, G_MAXUINT, d.episode_length, GST_PI0_PARAM_READY));
  /**
   * GstPi0LeRobotSink:gap-action:
   *
   * What a gap does: a recorded frame more than 1.5 periods after the previous one (a stalled
   * camera, skipped observations). LeRobot's timeline is k / fps, so a kept gap is a transition
   * that never happened; every gap is counted (`stats` gaps) and posted as a warning whose
   * details say where (episode, frame, gap-ms) whatever the action.
   */
  g_object_class_install_property (
      gobject_class, PROP_GAP_ACTION,
      g_param_spec_enum ("gap-action", "Gap action",
                         "What a frame more than 1.5 periods after the previous one does",
                         gst_pi0_lerobot_gap_action_get_type (), d.gap_action,
                         GST_PI0_PARAM_READY));
  /**
   * GstPi0LeRobotSink:fail-pipeline:
   *
   * What a failure to record does once the recording has started (a full disk, an encoder that
   * fails, a camera that changes shape). By default the recorder is a bystander of the robot's
   * control: it posts a warning, keeps the episodes already committed (the one in progress is
   * saved when it still can be, discarded otherwise: nothing half-written stays) and records
   * nothing more, while the pipeline goes on. true: the failure is an error that stops the pipeline. Configuration errors (no
   * location, no action sink, a fractional rate) are errors either way.
   */
  g_object_class_install_property (
      gobject_class, PROP_FAIL_PIPELINE,
      g_param_spec_boolean ("fail-pipeline", "Fail pipeline",
                            "A recording failure stops the pipeline (true) or only the recording, "
                            "with a warning (false: the robot's control goes on)",
                            d.fail_pipeline, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Stats",
                          "Counters since start: episodes (committed), frames (recorded), skipped "
                          "(observations without state or with a masked view), episode-frames "
                          "(in the episode in progress), gaps (frames more than 1.5 periods after "
                          "the previous one)",
                          GST_TYPE_STRUCTURE, GST_PI0_PARAM_READ_ONLY));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 LeRobot dataset recorder", "Sink/Video",
      "Records observations, the actions sent to the robot and the cameras into a "
      "LeRobotDataset v3",
      GST_PI0_AUTHOR);
  element_class->send_event = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_sink_send_event);
  base_class->render = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_sink_render);
  base_class->event = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_sink_event);
  base_class->start = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_sink_start);
  base_class->stop = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_sink_stop);
  base_class->set_caps = GST_DEBUG_FUNCPTR (gst_pi0_lerobot_sink_set_caps);
  GST_DEBUG_CATEGORY_INIT (gst_pi0_lerobot_sink_debug, "pi0lerobotsink", 0,
                           "LeRobotDataset recorder");
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_LEROBOT_ENCODER, (GstPluginAPIFlags)0);
}
