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
 * Threads: the streaming thread (render, events; owns State and the encoders), the
 * action sink's sending threads (the `action` handler: timeline_lock only), the application
 * (properties: settings_lock). No two locks are ever held together; no lock is held while
 * waiting on an encoder, posting or writing files.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "lerobot/gstpi0lerobotsink.h"
#include "common/gstpi0enum.h"
#include "common/gstpi0props.h"

#include "pi0lerobot.h"
#include "pi0safety.h"

#include <gst/app/gstappsrc.h>
#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_lerobot_sink_debug);
#define GST_CAT_DEFAULT gst_pi0_lerobot_sink_debug

namespace
{

constexpr guint kDefaultQuantizer = 23;
constexpr guint kDefaultGop = 2;
constexpr int kStatsSize = 150; /* LeRobot's image stats downsample to about this */

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
  PROP_STATS,
};

struct Settings {
  std::string location;
  bool append = false;
  std::string action_sink;
  std::string instruction;
  GstPi0LeRobotEncoder encoder = GST_PI0_LEROBOT_ENCODER_AUTO;
  bool lossless = false;
  guint quantizer = kDefaultQuantizer;
  guint gop = kDefaultGop;
  guint fps = 0;
  bool auto_start = true;
  std::string robot_type;
  guint episode_length = 0;
};

bool
is_rgb_family (GstVideoFormat f)
{
  switch (f) {
    case GST_VIDEO_FORMAT_RGB:
    case GST_VIDEO_FORMAT_BGR:
    case GST_VIDEO_FORMAT_RGBx:
    case GST_VIDEO_FORMAT_BGRx:
    case GST_VIDEO_FORMAT_xRGB:
    case GST_VIDEO_FORMAT_xBGR:
    case GST_VIDEO_FORMAT_RGBA:
    case GST_VIDEO_FORMAT_BGRA:
    case GST_VIDEO_FORMAT_ARGB:
    case GST_VIDEO_FORMAT_ABGR:
      return true;
    default:
      return false;
  }
}

/* Formats x264enc takes as they are, and what FFmpeg decodes them to. */
const char *
x264_native_pix_fmt (GstVideoFormat f)
{
  switch (f) {
    case GST_VIDEO_FORMAT_I420:
    case GST_VIDEO_FORMAT_YV12:
    case GST_VIDEO_FORMAT_NV12:
      return "yuv420p";
    case GST_VIDEO_FORMAT_Y42B:
      return "yuv422p";
    case GST_VIDEO_FORMAT_Y444:
      return "yuv444p";
    default:
      return nullptr;
  }
}

/* One camera's episode: appsrc ! [videoconvert ! caps] ! encoder ! h264parse ! mp4mux !
 * filesink, a pipeline of its own (its own bus and EOS, nothing shared with the chain). */
class CameraEncoder
{
public:
  ~CameraEncoder () { abort (); }

  /* How the camera's frames are encoded; "" or an error. */
  static std::string plan (const Settings &s, GstVideoFormat f, bool *gbr, bool *convert,
                           std::string *pix_fmt, std::string *encoder)
  {
    *gbr = *convert = false;
    bool nv = false;
    if (s.lossless) {
      *encoder = "x264enc";
    } else if (s.encoder == GST_PI0_LEROBOT_ENCODER_NVH264 ||
               s.encoder == GST_PI0_LEROBOT_ENCODER_AUTO) {
      GstElementFactory *fac = gst_element_factory_find ("nvh264enc");
      nv = fac != nullptr;
      if (fac)
        gst_object_unref (fac);
      if (!nv && s.encoder == GST_PI0_LEROBOT_ENCODER_NVH264)
        return "encoder=nvh264 but nvh264enc is not available (no NVIDIA GPU, or gst-plugins-bad "
               "without nvcodec)";
      *encoder = nv ? "nvh264enc" : "x264enc";
    } else {
      *encoder = "x264enc";
    }
    if (!nv && s.lossless && is_rgb_family (f)) {
      *gbr = true; /* RGB as planar G,B,R in a 4:4:4 stream flagged GBR: exact */
      *pix_fmt = "gbrp";
    } else if (!nv && x264_native_pix_fmt (f)) {
      *pix_fmt = x264_native_pix_fmt (f);
    } else {
      *convert = true;
      *pix_fmt = s.lossless ? "yuv444p" : "yuv420p";
    }
    GstElementFactory *fac = gst_element_factory_find (encoder->c_str ());
    if (!fac)
      return *encoder + " is not installed (gstreamer1.0-plugins-ugly provides x264enc)";
    gst_object_unref (fac);
    return "";
  }

  bool start (const Settings &s, const GstVideoInfo &view, int fps, const std::string &path,
              std::string *error)
  {
    std::string pix;
    std::string enc_name;
    std::string err = plan (s, GST_VIDEO_INFO_FORMAT (&view), &gbr_, &convert_, &pix, &enc_name);
    if (!err.empty ()) {
      *error = err;
      return false;
    }
    pix_fmt = pix;
    fps_ = fps;
    in_info_ = view;
    GstVideoInfo ci = view;
    GST_VIDEO_INFO_FPS_N (&ci) = fps;
    GST_VIDEO_INFO_FPS_D (&ci) = 1;
    if (gbr_) {
      gst_video_info_set_format (&gbr_info_, GST_VIDEO_FORMAT_GBR, view.width, view.height);
      GST_VIDEO_INFO_FPS_N (&gbr_info_) = GST_VIDEO_INFO_FPS_N (&view);
      GST_VIDEO_INFO_FPS_D (&gbr_info_) = GST_VIDEO_INFO_FPS_D (&view);
      converter_ = gst_video_converter_new (
          &in_info_, &gbr_info_,
          gst_structure_new ("options", GST_VIDEO_CONVERTER_OPT_DITHER_METHOD,
                             GST_TYPE_VIDEO_DITHER_METHOD, GST_VIDEO_DITHER_NONE, nullptr));
      if (!converter_) {
        *error = "cannot convert the camera's frames to planar RGB";
        return false;
      }
      /* The planes G, B, R are H.264's Y, Cb, Cr when its matrix says GBR. */
      gst_video_info_set_format (&ci, GST_VIDEO_FORMAT_Y444, view.width, view.height);
      GST_VIDEO_INFO_FPS_N (&ci) = fps;
      GST_VIDEO_INFO_FPS_D (&ci) = 1;
    }
    GstCaps *caps = gst_video_info_to_caps (&ci);
    pipeline_ = gst_pipeline_new ("pi0lerobot-camera");
    GstElement *src = gst_element_factory_make ("appsrc", nullptr);
    GstElement *enc = gst_element_factory_make (enc_name.c_str (), nullptr);
    GstElement *parse = gst_element_factory_make ("h264parse", nullptr);
    GstElement *mux = gst_element_factory_make ("mp4mux", nullptr);
    GstElement *sink = gst_element_factory_make ("filesink", nullptr);
    GstElement *conv = nullptr, *filt = nullptr;
    if (convert_) {
      conv = gst_element_factory_make ("videoconvert", nullptr);
      filt = gst_element_factory_make ("capsfilter", nullptr);
    }
    if (!src || !enc || !parse || !mux || !sink || (convert_ && (!conv || !filt))) {
      for (GstElement *e : {src, enc, parse, mux, sink, conv, filt})
        if (e)
          gst_object_unref (e);
      gst_caps_unref (caps);
      *error = "an element for encoding is missing (appsrc, h264parse, mp4mux, filesink, "
               "videoconvert: gstreamer1.0-plugins-base/-good/-bad)";
      return false;
    }
    g_object_set (src, "caps", caps, "format", GST_FORMAT_TIME, "block", TRUE, "max-bytes",
                  (guint64)0, nullptr);
    if (g_object_class_find_property (G_OBJECT_GET_CLASS (src), "max-time"))
      g_object_set (src, "max-time", (guint64)(2 * GST_SECOND), nullptr);
    else
      g_object_set (src, "max-bytes", (guint64)(256u << 20), nullptr);
    gst_caps_unref (caps);
    if (enc_name == "x264enc") {
      gst_util_set_object_arg (G_OBJECT (enc), "speed-preset", "superfast");
      g_object_set (enc, "bframes", 0u, "key-int-max", s.gop, nullptr);
      if (s.lossless) {
        gst_util_set_object_arg (G_OBJECT (enc), "pass", "quant");
        g_object_set (enc, "quantizer", 0u, nullptr);
      } else {
        gst_util_set_object_arg (G_OBJECT (enc), "pass", "qual");
        g_object_set (enc, "quantizer", std::min (s.quantizer, 50u), nullptr);
      }
      if (gbr_)
        g_object_set (enc, "insert-vui", FALSE, "option-string", "colormatrix=GBR", nullptr);
    } else {
      /* nvh264enc: constant QP, the same GOP, no B-frames. */
      GObjectClass *k = G_OBJECT_GET_CLASS (enc);
      if (g_object_class_find_property (k, "gop-size"))
        g_object_set (enc, "gop-size", (gint)s.gop, nullptr);
      if (g_object_class_find_property (k, "bframes"))
        g_object_set (enc, "bframes", 0u, nullptr);
      if (g_object_class_find_property (k, "rc-mode"))
        gst_util_set_object_arg (G_OBJECT (enc), "rc-mode", "constqp");
      if (g_object_class_find_property (k, "qp-const"))
        g_object_set (enc, "qp-const", (gint)std::min (s.quantizer, 51u), nullptr);
    }
    g_object_set (sink, "location", path.c_str (), "async", FALSE, nullptr);
    gst_bin_add_many (GST_BIN (pipeline_), src, enc, parse, mux, sink, nullptr);
    bool linked;
    if (convert_) {
      GstCaps *fc = gst_caps_new_simple ("video/x-raw", "format", G_TYPE_STRING,
                                         s.lossless ? "Y444" : "I420", nullptr);
      g_object_set (filt, "caps", fc, nullptr);
      gst_caps_unref (fc);
      gst_bin_add_many (GST_BIN (pipeline_), conv, filt, nullptr);
      linked = gst_element_link_many (src, conv, filt, enc, parse, mux, sink, nullptr);
    } else {
      linked = gst_element_link_many (src, enc, parse, mux, sink, nullptr);
    }
    appsrc_ = src;
    if (!linked) {
      *error = "cannot link the encoder of the camera's format " +
               std::string (gst_video_format_to_string (GST_VIDEO_INFO_FORMAT (&view)));
      return false;
    }
    if (gst_element_set_state (pipeline_, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
      *error = "cannot start the encoder: " + bus_error ();
      return false;
    }
    return true;
  }

  /* Frame @index of the episode: the view as it is (its memories, no copy) or repacked. */
  bool push (GstBuffer *obs, const GstPi0ObservationMeta *meta, guint v, guint64 index,
             std::string *error)
  {
    const GstPi0View *view = gst_pi0_observation_meta_get_view (meta, v);
    GstBuffer *out = nullptr;
    if (gbr_) {
      GstVideoFrame in, o;
      if (!gst_pi0_observation_meta_map_view (meta, obs, v, &in, GST_MAP_READ)) {
        *error = "cannot map the frame of view " + std::string (view->name);
        return false;
      }
      out = gst_buffer_new_allocate (nullptr, GST_VIDEO_INFO_SIZE (&gbr_info_), nullptr);
      gst_video_frame_map (&o, &gbr_info_, out, GST_MAP_WRITE);
      gst_video_converter_frame (converter_, &in, &o);
      gst_video_frame_unmap (&o);
      gst_video_frame_unmap (&in);
    } else {
      out = gst_buffer_new ();
      for (guint m = 0; m < view->n_mem; m++)
        gst_buffer_append_memory (out, gst_buffer_get_memory (obs, view->mem_index + m));
      const GstVideoInfo *vi = &view->info;
      gst_buffer_add_video_meta_full (out, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_INFO_FORMAT (vi),
                                      GST_VIDEO_INFO_WIDTH (vi), GST_VIDEO_INFO_HEIGHT (vi),
                                      GST_VIDEO_INFO_N_PLANES (vi), (gsize *)vi->offset,
                                      (gint *)vi->stride);
    }
    GST_BUFFER_PTS (out) = gst_util_uint64_scale (index, GST_SECOND, fps_);
    GST_BUFFER_DTS (out) = GST_BUFFER_PTS (out);
    GST_BUFFER_DURATION (out) =
        gst_util_uint64_scale (index + 1, GST_SECOND, fps_) - GST_BUFFER_PTS (out);
    const GstFlowReturn r = gst_app_src_push_buffer (GST_APP_SRC (appsrc_), out);
    if (r != GST_FLOW_OK) {
      *error = "the encoder stopped: " + bus_error ();
      return false;
    }
    std::string e = bus_error (false);
    if (!e.empty ()) {
      *error = "the encoder failed: " + e;
      return false;
    }
    return true;
  }

  /* EOS, and the MP4 is finalized when this returns true. */
  bool finish (std::string *error)
  {
    if (!pipeline_)
      return true;
    gst_app_src_end_of_stream (GST_APP_SRC (appsrc_));
    GstBus *bus = gst_element_get_bus (pipeline_);
    GstMessage *m = gst_bus_timed_pop_filtered (
        bus, 300 * GST_SECOND, (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
    gst_object_unref (bus);
    bool ok = m && GST_MESSAGE_TYPE (m) == GST_MESSAGE_EOS;
    if (!ok)
      *error = m ? "the encoder failed: " + message_text (m) : "the encoder did not finish";
    if (m)
      gst_message_unref (m);
    abort ();
    return ok;
  }

  void abort ()
  {
    if (pipeline_) {
      gst_element_set_state (pipeline_, GST_STATE_NULL);
      gst_object_unref (pipeline_);
      pipeline_ = nullptr;
      appsrc_ = nullptr;
    }
    if (converter_) {
      gst_video_converter_free (converter_);
      converter_ = nullptr;
    }
  }

  std::string pix_fmt;

private:
  static std::string message_text (GstMessage *m)
  {
    GError *err = nullptr;
    gchar *dbg = nullptr;
    gst_message_parse_error (m, &err, &dbg);
    std::string t = err ? err->message : "unknown error";
    if (dbg)
      t += std::string (" (") + dbg + ")";
    g_clear_error (&err);
    g_free (dbg);
    return t;
  }

  std::string bus_error (bool wait = false)
  {
    if (!pipeline_)
      return "";
    GstBus *bus = gst_element_get_bus (pipeline_);
    GstMessage *m = wait ? gst_bus_timed_pop_filtered (bus, GST_SECOND, GST_MESSAGE_ERROR)
                         : gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
    gst_object_unref (bus);
    if (!m)
      return wait ? "no error message" : "";
    std::string t = message_text (m);
    gst_message_unref (m);
    return t;
  }

  GstElement *pipeline_ = nullptr, *appsrc_ = nullptr;
  GstVideoConverter *converter_ = nullptr;
  GstVideoInfo in_info_, gbr_info_;
  bool gbr_ = false, convert_ = false;
  int fps_ = 30;
};

/* Per camera: RGB thumbnails for the image stats. */
struct StatsSampler {
  GstVideoConverter *conv = nullptr;
  GstVideoInfo out;
  std::vector<uint8_t> buf;
  pi0::lerobot::ImageStats stats;
  ~StatsSampler ()
  {
    if (conv)
      gst_video_converter_free (conv);
  }
  bool init (const GstVideoInfo &in)
  {
    const int w = in.width, h = in.height;
    const int f = std::max (1, std::max (w, h) / kStatsSize);
    gst_video_info_set_format (&out, GST_VIDEO_FORMAT_RGB, std::max (1, w / f),
                               std::max (1, h / f));
    GST_VIDEO_INFO_FPS_N (&out) = GST_VIDEO_INFO_FPS_N (&in);
    GST_VIDEO_INFO_FPS_D (&out) = GST_VIDEO_INFO_FPS_D (&in);
    conv = gst_video_converter_new (
        (GstVideoInfo *)&in, &out,
        gst_structure_new ("options", GST_VIDEO_CONVERTER_OPT_RESAMPLER_METHOD,
                           GST_TYPE_VIDEO_RESAMPLER_METHOD, GST_VIDEO_RESAMPLER_METHOD_NEAREST,
                           GST_VIDEO_CONVERTER_OPT_DITHER_METHOD, GST_TYPE_VIDEO_DITHER_METHOD,
                           GST_VIDEO_DITHER_NONE, nullptr));
    buf.resize (GST_VIDEO_INFO_SIZE (&out));
    return conv != nullptr;
  }
  void add (GstBuffer *obs, const GstPi0ObservationMeta *meta, guint v)
  {
    GstVideoFrame in, o;
    if (!gst_pi0_observation_meta_map_view (meta, obs, v, &in, GST_MAP_READ))
      return;
    GstBuffer *ob = gst_buffer_new_wrapped_full ((GstMemoryFlags)0, buf.data (), buf.size (), 0,
                                                 buf.size (), nullptr, nullptr);
    gst_video_frame_map (&o, &out, ob, GST_MAP_WRITE);
    gst_video_converter_frame (conv, &in, &o);
    stats.add ((const uint8_t *)GST_VIDEO_FRAME_PLANE_DATA (&o, 0), out.width, out.height,
               GST_VIDEO_FRAME_PLANE_STRIDE (&o, 0));
    gst_video_frame_unmap (&o);
    gst_video_frame_unmap (&in);
    gst_buffer_unref (ob);
  }
};

struct PendingFrame {
  GstClockTime t;
  std::vector<float> state;
  std::string task;
};

struct State {
  Settings s;
  bool started = false;
  int fps = 0;
  guint n_views = 0;
  std::vector<std::string> view_names;
  std::vector<GstVideoInfo> view_info; /* format and size fixed for the dataset */
  guint state_dim = 0;
  pi0::lerobot::Schema schema;
  std::unique_ptr<pi0::lerobot::Writer> writer;
  /* Episode in progress. */
  bool recording = false;
  bool auto_done = false;
  std::vector<std::unique_ptr<CameraEncoder>> encoders;
  std::vector<std::unique_ptr<StatsSampler>> samplers;
  std::vector<PendingFrame> frames;
  std::string task;
  std::set<guint32> seen_seqnums;
  guint64 warn_count = 0;
  /* Counters for `stats`. */
  guint64 episodes = 0, recorded = 0, skipped = 0, gaps = 0;
};

struct Private {
  std::mutex settings_lock;
  Settings settings;
  std::mutex timeline_lock;
  pi0::lerobot::CommandTimeline timeline;
  guint action_dim = 0;
  std::string action_error;
  GstElement *action_sink = nullptr;
  gulong action_handler = 0;
  State st;
  std::mutex stats_lock;
  guint64 stat_episodes = 0, stat_frames = 0, stat_skipped = 0, stat_current = 0, stat_gaps = 0;
};

} // namespace

struct _GstPi0LeRobotSink {
  GstBaseSink parent;
  Private *priv;
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

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE (
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_PI0_OBSERVATION_MEDIA_TYPE));

static void
on_action (GstElement *sink, const gchar *kind, guint64 chunk_id, guint step_index, guint steps,
           guint dim, GBytes *values, gpointer user_data)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (user_data);
  Private *priv = self->priv;
  gsize len = 0;
  const float *v = values ? (const float *)g_bytes_get_data (values, &len) : nullptr;
  std::lock_guard<std::mutex> g (priv->timeline_lock);
  /* The send time, read under the lock: anything handled after a commit was sent after it. */
  const GstClockTime now = gst_element_get_current_running_time (GST_ELEMENT (self));
  if (!GST_CLOCK_TIME_IS_VALID (now))
    return;
  if (dim && steps && len < (gsize)steps * dim * sizeof (float))
    return;
  if (dim && g_strcmp0 (kind, "action") == 0) {
    if (priv->action_dim == 0)
      priv->action_dim = dim;
    else if (priv->action_dim != dim)
      priv->action_error = "the action sink sent " + std::to_string (dim) +
                           " values per action after " + std::to_string (priv->action_dim);
  }
  priv->timeline.add (kind ? kind : "", (int64_t)now, v, steps, dim);
}

static void
post_warning (GstPi0LeRobotSink *self, State &st, const std::string &msg)
{
  GST_WARNING_OBJECT (self, "%s", msg.c_str ());
  st.warn_count++;
  if ((st.warn_count & (st.warn_count - 1)) == 0)
    GST_ELEMENT_WARNING (self, STREAM, FAILED, ("%s", msg.c_str ()),
                         ("%" G_GUINT64_FORMAT " warnings so far", st.warn_count));
}

static void
update_stats (GstPi0LeRobotSink *self)
{
  Private *priv = self->priv;
  State &st = priv->st;
  std::lock_guard<std::mutex> g (priv->stats_lock);
  priv->stat_episodes = st.episodes;
  priv->stat_frames = st.recorded;
  priv->stat_skipped = st.skipped;
  priv->stat_current = st.frames.size ();
  priv->stat_gaps = st.gaps;
}

/* Ends the episode in progress: encoders finalized, actions resolved, committed. */
static bool
end_episode (GstPi0LeRobotSink *self, std::string *error)
{
  Private *priv = self->priv;
  State &st = priv->st;
  if (!st.recording)
    return true;
  st.recording = false;
  bool ok = true;
  for (auto &e : st.encoders) {
    std::string err;
    if (!e->finish (&err) && ok) {
      ok = false;
      *error = err;
    }
  }
  st.encoders.clear ();
  if (!ok || st.frames.empty ()) {
    st.writer->discard ();
    st.frames.clear ();
    st.samplers.clear ();
    update_stats (self);
    return ok;
  }
  pi0::lerobot::Episode ep;
  ep.length = st.frames.size ();
  const size_t ad = st.schema.action_names.size ();
  {
    std::lock_guard<std::mutex> g (priv->timeline_lock);
    if (!priv->action_error.empty ()) {
      *error = priv->action_error;
      ok = false;
    }
    for (auto &f : st.frames) {
      ep.state.insert (ep.state.end (), f.state.begin (), f.state.end ());
      const std::vector<float> *cmd = priv->timeline.at ((int64_t)f.t);
      if (cmd && cmd->size () == ad)
        ep.action.insert (ep.action.end (), cmd->begin (), cmd->end ());
      else /* nothing commanded yet: the robot holds where it is */
        ep.action.insert (ep.action.end (), f.state.begin (), f.state.end ());
      ep.task.push_back (f.task);
    }
  }
  for (auto &s : st.samplers)
    ep.camera_stats.push_back (s->stats.finish ());
  st.samplers.clear ();
  const size_t n = st.frames.size ();
  st.frames.clear ();
  if (ok && !st.writer->commit (ep, error))
    ok = false;
  if (ok) {
    st.episodes++;
    GST_INFO_OBJECT (self, "episode committed: %" G_GSIZE_FORMAT " frames", n);
  } else {
    st.writer->discard ();
  }
  update_stats (self);
  return ok;
}

static bool
begin_episode (GstPi0LeRobotSink *self, GstBuffer *buf, const GstPi0ObservationMeta *meta,
               std::string *error)
{
  Private *priv = self->priv;
  State &st = priv->st;
  for (guint v = 0; v < st.n_views; v++) {
    auto enc = std::make_unique<CameraEncoder> ();
    if (!enc->start (st.s, st.view_info[v], st.fps, st.writer->video_part_path (v), error))
      return false;
    st.encoders.push_back (std::move (enc));
    auto smp = std::make_unique<StatsSampler> ();
    if (!smp->init (st.view_info[v])) {
      *error = "cannot convert view " + st.view_names[v] + " for its statistics";
      return false;
    }
    st.samplers.push_back (std::move (smp));
  }
  (void)buf;
  (void)meta;
  st.recording = true;
  /* Rows superseded before this episode are not needed any more. */
  {
    std::lock_guard<std::mutex> g (priv->timeline_lock);
    if (GST_CLOCK_TIME_IS_VALID (meta->observation_time))
      priv->timeline.prune ((int64_t)meta->observation_time);
  }
  return true;
}

/* The dataset's schema from the first observation (views, sizes, state) and the action sink. */
static bool
open_dataset (GstPi0LeRobotSink *self, const GstPi0ObservationMeta *meta, std::string *error)
{
  Private *priv = self->priv;
  State &st = priv->st;
  st.n_views = gst_pi0_observation_meta_get_n_views (meta);
  st.schema = pi0::lerobot::Schema ();
  st.schema.fps = st.fps;
  st.schema.robot_type = st.s.robot_type;
  for (guint v = 0; v < st.n_views; v++) {
    const GstPi0View *view = gst_pi0_observation_meta_get_view (meta, v);
    if (view->flags & GST_PI0_VIEW_FLAG_CUDA) {
      *error = std::string ("view ") + view->name +
               " is in CUDA memory; pi0lerobotsink reads system memory (download it first)";
      return false;
    }
    st.view_names.push_back (view->name);
    st.view_info.push_back (view->info);
    pi0::lerobot::Camera c;
    c.key = std::string ("observation.images.") + view->name;
    c.width = GST_VIDEO_INFO_WIDTH (&view->info);
    c.height = GST_VIDEO_INFO_HEIGHT (&view->info);
    bool gbr, conv;
    std::string enc;
    std::string err = CameraEncoder::plan (st.s, GST_VIDEO_INFO_FORMAT (&view->info), &gbr, &conv,
                                           &c.pix_fmt, &enc);
    if (!err.empty ()) {
      *error = err;
      return false;
    }
    st.schema.cameras.push_back (c);
  }
  st.state_dim = meta->state_dim;
  /* Names: the robot's joints when its configuration is known and the sizes agree. */
  std::vector<std::string> joints;
  guint action_dim = 0;
  if (priv->action_sink) {
    gchar *cfg = nullptr;
    g_object_get (priv->action_sink, "robot-config", &cfg, nullptr);
    if (cfg && *cfg) {
      pi0::proto::RobotConfig rc;
      std::string e;
      if (pi0::proto::load_robot_config (cfg, &rc, &e)) {
        joints = rc.joint_names;
        action_dim = rc.dim ();
      }
    }
    g_free (cfg);
  }
  {
    std::lock_guard<std::mutex> g (priv->timeline_lock);
    if (!action_dim)
      action_dim = priv->action_dim;
  }
  if (!action_dim)
    action_dim = st.state_dim; /* until the first action says otherwise */
  auto names = [&] (guint n, const char *prefix) {
    std::vector<std::string> out;
    for (guint i = 0; i < n; i++)
      out.push_back (joints.size () == n ? joints[i] : prefix + std::to_string (i));
    return out;
  };
  st.schema.state_names = names (st.state_dim, "state_");
  st.schema.action_names = names (action_dim, "action_");
  if (action_dim != st.state_dim) {
    /* Frames before the first command take the state as their action: sizes must agree. */
    *error = "the robot's state has " + std::to_string (st.state_dim) + " values and its actions " +
             std::to_string (action_dim) + "; pi0lerobotsink needs them equal";
    return false;
  }
  st.writer = pi0::lerobot::Writer::open (st.s.location, st.schema, st.s.append, error);
  return st.writer != nullptr;
}

static GstFlowReturn
gst_pi0_lerobot_sink_render (GstBaseSink *bsink, GstBuffer *buf)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  Private *priv = self->priv;
  State &st = priv->st;
  try {
    GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (buf);
    if (!meta) {
      GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("A buffer without an observation meta"),
                         ("pi0lerobotsink records the observations pi0viewmux makes"));
      return GST_FLOW_ERROR;
    }
    std::string err;
    /* The dataset's cameras and state are those of the first complete observation. */
    bool complete = meta->state_dim > 0 && (meta->state_flags & GST_PI0_STATE_FLAG_PRESENT);
    for (guint v = 0; complete && v < gst_pi0_observation_meta_get_n_views (meta); v++)
      complete = gst_pi0_observation_meta_get_view (meta, v)->flags & GST_PI0_VIEW_FLAG_VALID;
    if (!st.writer && !complete) {
      st.skipped++;
      update_stats (self);
      post_warning (self, st,
                    "observation " + std::to_string (meta->sequence) +
                        " not recorded: a camera or the state is missing");
      return GST_FLOW_OK;
    }
    if (!st.writer && !open_dataset (self, meta, &err)) {
      GST_ELEMENT_ERROR (self, RESOURCE, OPEN_WRITE,
                         ("Cannot record the dataset: %s", err.c_str ()), (nullptr));
      return GST_FLOW_ERROR;
    }
    if (!st.recording && st.s.auto_start && !st.auto_done) {
      st.auto_done = true;
      if (!begin_episode (self, buf, meta, &err)) {
        GST_ELEMENT_ERROR (self, LIBRARY, INIT, ("Cannot start an episode: %s", err.c_str ()),
                           (nullptr));
        return GST_FLOW_ERROR;
      }
    }
    if (!st.recording)
      return GST_FLOW_OK;
    /* A frame needs every camera and the state: LeRobot has no masks. */
    guint dim = 0;
    const gfloat *state = gst_pi0_observation_meta_get_state (meta, &dim);
    std::string why;
    if (gst_pi0_observation_meta_get_n_views (meta) != st.n_views)
      why = "a different number of views";
    else if (!state || !(meta->state_flags & GST_PI0_STATE_FLAG_PRESENT) || dim != st.state_dim)
      why = "no robot state";
    for (guint v = 0; why.empty () && v < st.n_views; v++) {
      const GstPi0View *view = gst_pi0_observation_meta_get_view (meta, v);
      if (!(view->flags & GST_PI0_VIEW_FLAG_VALID))
        why = std::string ("view ") + view->name + " masked";
      else if (GST_VIDEO_INFO_FORMAT (&view->info) != GST_VIDEO_INFO_FORMAT (&st.view_info[v]) ||
               view->info.width != st.view_info[v].width ||
               view->info.height != st.view_info[v].height) {
        std::string msg = std::string ("view ") + view->name + " changed to " +
                          gst_video_format_to_string (GST_VIDEO_INFO_FORMAT (&view->info)) + " " +
                          std::to_string (view->info.width) + "x" +
                          std::to_string (view->info.height) +
                          "; a LeRobot dataset has one shape per camera";
        std::string e2;
        end_episode (self, &e2);
        GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("%s", msg.c_str ()), (nullptr));
        return GST_FLOW_ERROR;
      }
    }
    if (!why.empty ()) {
      st.skipped++;
      update_stats (self);
      post_warning (self, st,
                    "observation " + std::to_string (meta->sequence) + " not recorded: " + why);
      return GST_FLOW_OK;
    }
    const guint64 index = st.frames.size ();
    /* The dataset's clock is k / fps: a base frame missing upstream (or an observation skipped
     * above) closes up in it. Said, and counted. */
    if (index > 0 && GST_CLOCK_TIME_IS_VALID (meta->observation_time) &&
        GST_CLOCK_TIME_IS_VALID (st.frames.back ().t) &&
        (meta->observation_time - st.frames.back ().t) * 2 * st.fps > 3 * GST_SECOND) {
      st.gaps++;
      post_warning (self, st,
                    "observation " + std::to_string (meta->sequence) + " comes " +
                        std::to_string ((meta->observation_time - st.frames.back ().t) / 1000000) +
                        " ms after the previous frame recorded; the dataset's timeline (k / fps) "
                        "closes the gap");
    }
    for (guint v = 0; v < st.n_views; v++) {
      if (!st.encoders[v]->push (buf, meta, v, index, &err)) {
        GST_ELEMENT_ERROR (self, LIBRARY, ENCODE,
                           ("Cannot encode view %s: %s", st.view_names[v].c_str (), err.c_str ()),
                           (nullptr));
        return GST_FLOW_ERROR;
      }
      st.samplers[v]->add (buf, meta, v);
    }
    st.frames.push_back (
        {meta->observation_time, std::vector<float> (state, state + dim), st.task});
    st.recorded++;
    update_stats (self);
    if (st.s.episode_length && st.frames.size () >= st.s.episode_length) {
      /* Fixed-length episodes: the next one starts with the next observation. */
      if (!end_episode (self, &err)) {
        GST_ELEMENT_ERROR (self, RESOURCE, WRITE, ("Cannot save the episode: %s", err.c_str ()),
                           (nullptr));
        return GST_FLOW_ERROR;
      }
      st.auto_done = false;
      st.s.auto_start = true;
    }
    return GST_FLOW_OK;
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR (self, LIBRARY, FAILED, ("%s", e.what ()), (nullptr));
    return GST_FLOW_ERROR;
  }
}

static gboolean
gst_pi0_lerobot_sink_event (GstBaseSink *bsink, GstEvent *event)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  State &st = self->priv->st;
  const gchar *text = nullptr;
  GstPi0EpisodeAction action;
  if (gst_pi0_instruction_event_parse (event, &text)) {
    st.task = text;
  } else if (gst_pi0_episode_event_parse (event, &action, &text)) {
    /* The same event reaches us once per camera when sent to the pipeline's sources. */
    const guint32 seq = gst_event_get_seqnum (event);
    if (st.seen_seqnums.insert (seq).second) {
      if (st.seen_seqnums.size () > 64)
        st.seen_seqnums.erase (st.seen_seqnums.begin ());
      std::string err;
      if (!end_episode (self, &err)) {
        GST_ELEMENT_ERROR (self, RESOURCE, WRITE, ("Cannot save the episode: %s", err.c_str ()),
                           (nullptr));
      }
      st.auto_done = true;
      if (action == GST_PI0_EPISODE_START) {
        if (text)
          st.task = text;
        /* The encoders start with the next observation. */
        st.auto_done = false;
        st.s.auto_start = true;
      } else {
        st.s.auto_start = false;
      }
    }
  } else if (GST_EVENT_TYPE (event) == GST_EVENT_EOS) {
    std::string err;
    if (!end_episode (self, &err))
      GST_ELEMENT_ERROR (self, RESOURCE, WRITE, ("Cannot save the episode: %s", err.c_str ()),
                         (nullptr));
  }
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

static gboolean
gst_pi0_lerobot_sink_start (GstBaseSink *bsink)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  Private *priv = self->priv;
  State &st = priv->st;
  {
    std::lock_guard<std::mutex> g (priv->settings_lock);
    st.s = priv->settings;
  }
  if (st.s.location.empty ()) {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND, ("No location: set the dataset directory"),
                       (nullptr));
    return FALSE;
  }
  if (st.s.action_sink.empty ()) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("No action-sink: name the pi0actionsink whose actions are recorded"),
                       (nullptr));
    return FALSE;
  }
  GstObject *parent = gst_object_get_parent (GST_OBJECT (self));
  GstElement *as = nullptr;
  if (parent && GST_IS_BIN (parent))
    as = gst_bin_get_by_name_recurse_up (GST_BIN (parent), st.s.action_sink.c_str ());
  if (parent)
    gst_object_unref (parent);
  if (!as || !g_signal_lookup ("action", G_OBJECT_TYPE (as))) {
    if (as)
      gst_object_unref (as);
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("No pi0actionsink named '%s' in the pipeline", st.s.action_sink.c_str ()),
                       (nullptr));
    return FALSE;
  }
  gint mode = 0;
  g_object_get (as, "mode", &mode, nullptr);
  GEnumValue *mv =
      g_enum_get_value ((GEnumClass *)g_type_class_peek (G_PARAM_SPEC_VALUE_TYPE (
                            g_object_class_find_property (G_OBJECT_GET_CLASS (as), "mode"))),
                        mode);
  if (mv && g_strcmp0 (mv->value_nick, "log") == 0) {
    gst_object_unref (as);
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("'%s' is in mode=log: it sends nothing to a robot, there is no action "
                        "to record",
                        st.s.action_sink.c_str ()),
                       (nullptr));
    return FALSE;
  }
  gdouble rate = 50;
  g_object_get (as, "control-rate", &rate, nullptr);
  {
    std::lock_guard<std::mutex> g (priv->timeline_lock);
    priv->timeline = pi0::lerobot::CommandTimeline ((int64_t)(GST_SECOND / rate + 0.5));
    priv->action_dim = 0;
    priv->action_error.clear ();
  }
  priv->action_sink = as;
  priv->action_handler = g_signal_connect (as, "action", G_CALLBACK (on_action), self);
  st.task = st.s.instruction;
  st.started = true;
  return TRUE;
}

static gboolean
gst_pi0_lerobot_sink_stop (GstBaseSink *bsink)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  Private *priv = self->priv;
  State &st = priv->st;
  /* Stopped without EOS (the pipeline set to NULL): the episode so far is still kept. */
  if (st.recording) {
    std::string err;
    if (!end_episode (self, &err))
      GST_ELEMENT_WARNING (self, RESOURCE, WRITE, ("Cannot save the episode: %s", err.c_str ()),
                           (nullptr));
  }
  if (priv->action_sink) {
    g_signal_handler_disconnect (priv->action_sink, priv->action_handler);
    gst_object_unref (priv->action_sink);
    priv->action_sink = nullptr;
  }
  const Settings s = st.s;
  priv->st.~State ();
  new (&priv->st) State ();
  priv->st.s = s;
  return TRUE;
}

static gboolean
gst_pi0_lerobot_sink_set_caps (GstBaseSink *bsink, GstCaps *caps)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (bsink);
  State &st = self->priv->st;
  GstStructure *s = gst_caps_get_structure (caps, 0);
  gint n = 0, d = 1;
  if (st.s.fps > 0) {
    st.fps = (int)st.s.fps;
  } else if (gst_structure_get_fraction (s, "framerate", &n, &d) && n > 0 && d > 0 && n % d == 0) {
    st.fps = n / d;
  } else {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT,
                       ("The base camera's frame rate %d/%d is not a whole number of frames per "
                        "second; LeRobot datasets have an integer fps: set fps",
                        n, d),
                       (nullptr));
    return FALSE;
  }
  if (st.writer && st.writer->next_episode () >= 0 && st.schema.fps && st.schema.fps != st.fps) {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("The frame rate changed to %d fps", st.fps),
                       (nullptr));
    return FALSE;
  }
  return TRUE;
}

/* Every settable property, both directions (gstpi0props.h). */
static void
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_STRING (PROP_LOCATION, location, false)
    GST_PI0_PROP_FIELD (PROP_APPEND, append, gboolean, boolean)
    GST_PI0_PROP_STRING (PROP_ACTION_SINK, action_sink, false)
    GST_PI0_PROP_STRING (PROP_INSTRUCTION, instruction, false)
    GST_PI0_PROP_FIELD (PROP_ENCODER, encoder, gint, enum)
    GST_PI0_PROP_FIELD (PROP_LOSSLESS, lossless, gboolean, boolean)
    GST_PI0_PROP_FIELD (PROP_QUANTIZER, quantizer, guint, uint)
    GST_PI0_PROP_FIELD (PROP_GOP_SIZE, gop, guint, uint)
    GST_PI0_PROP_FIELD (PROP_FPS, fps, guint, uint)
    GST_PI0_PROP_FIELD (PROP_AUTO_START, auto_start, gboolean, boolean)
    GST_PI0_PROP_STRING (PROP_ROBOT_TYPE, robot_type, false)
    GST_PI0_PROP_FIELD (PROP_EPISODE_LENGTH, episode_length, guint, uint)
  }
}

static void
gst_pi0_lerobot_sink_set_property (GObject *object, guint prop_id, const GValue *value,
                                   GParamSpec *pspec)
{
  Private *priv = GST_PI0_LEROBOT_SINK (object)->priv;
  if (prop_id == PROP_0 || prop_id >= PROP_STATS) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    return;
  }
  std::lock_guard<std::mutex> g (priv->settings_lock);
  transfer (priv->settings, prop_id, (GValue *)value, true);
}

static void
gst_pi0_lerobot_sink_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  Private *priv = GST_PI0_LEROBOT_SINK (object)->priv;
  if (prop_id == PROP_STATS) {
    std::lock_guard<std::mutex> g (priv->stats_lock);
    g_value_take_boxed (value, gst_structure_new ("pi0lerobotsink-stats", "episodes", G_TYPE_UINT64,
                                                  priv->stat_episodes, "frames", G_TYPE_UINT64,
                                                  priv->stat_frames, "skipped", G_TYPE_UINT64,
                                                  priv->stat_skipped, "episode-frames",
                                                  G_TYPE_UINT64, priv->stat_current, nullptr));
    return;
  }
  if (prop_id == PROP_0 || prop_id > PROP_STATS) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    return;
  }
  std::lock_guard<std::mutex> g (priv->settings_lock);
  transfer (priv->settings, prop_id, value, false);
}

static void
gst_pi0_lerobot_sink_finalize (GObject *object)
{
  GstPi0LeRobotSink *self = GST_PI0_LEROBOT_SINK (object);
  delete self->priv;
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_pi0_lerobot_sink_init (GstPi0LeRobotSink *self)
{
  self->priv = new Private ();
  gst_base_sink_set_sync (GST_BASE_SINK (self), FALSE);
}

static void
gst_pi0_lerobot_sink_class_init (GstPi0LeRobotSinkClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseSinkClass *base_class = GST_BASE_SINK_CLASS (klass);
  const GParamFlags rw =
      (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);

  gobject_class->set_property = gst_pi0_lerobot_sink_set_property;
  gobject_class->get_property = gst_pi0_lerobot_sink_get_property;
  gobject_class->finalize = gst_pi0_lerobot_sink_finalize;

  g_object_class_install_property (
      gobject_class, PROP_LOCATION,
      g_param_spec_string ("location", "Location",
                           "The dataset's directory (created if missing; must be empty or hold a "
                           "dataset)",
                           nullptr, rw));
  g_object_class_install_property (
      gobject_class, PROP_APPEND,
      g_param_spec_boolean ("append", "Append",
                            "Add episodes to the dataset already in location (same fps and "
                            "features); without it an existing dataset is an error",
                            FALSE, rw));
  g_object_class_install_property (
      gobject_class, PROP_ACTION_SINK,
      g_param_spec_string ("action-sink", "Action sink",
                           "Name of the pi0actionsink in this pipeline whose sent actions are "
                           "recorded",
                           nullptr, rw));
  g_object_class_install_property (
      gobject_class, PROP_INSTRUCTION,
      g_param_spec_string ("instruction", "Instruction",
                           "The task of the episodes until a pi0-instruction or episode start "
                           "event sets another",
                           nullptr, rw));
  g_object_class_install_property (
      gobject_class, PROP_ENCODER,
      g_param_spec_enum ("encoder", "Encoder", "H.264 encoder for the cameras",
                         GST_TYPE_PI0_LEROBOT_ENCODER, GST_PI0_LEROBOT_ENCODER_AUTO, rw));
  g_object_class_install_property (
      gobject_class, PROP_LOSSLESS,
      g_param_spec_boolean ("lossless", "Lossless",
                            "Encode every frame exactly (x264 at QP 0; RGB cameras as GBR 4:4:4)",
                            FALSE, rw));
  g_object_class_install_property (
      gobject_class, PROP_QUANTIZER,
      g_param_spec_uint ("quantizer", "Quantizer",
                         "Constant quality of lossy encoding (x264 CRF-like quantizer, nvh264enc "
                         "QP); lower is better",
                         0, 50, kDefaultQuantizer, rw));
  g_object_class_install_property (
      gobject_class, PROP_GOP_SIZE,
      g_param_spec_uint ("gop-size", "GOP size",
                         "Frames between key frames (LeRobot's default 2 keeps random access "
                         "cheap for its loader)",
                         1, 1000, kDefaultGop, rw));
  g_object_class_install_property (
      gobject_class, PROP_FPS,
      g_param_spec_uint ("fps", "FPS",
                         "The dataset's frames per second (0: the base camera's, which must then "
                         "be a whole number)",
                         0, 1000, 0, rw));
  g_object_class_install_property (
      gobject_class, PROP_AUTO_START,
      g_param_spec_boolean ("auto-start", "Auto start",
                            "Start an episode at the first observation (otherwise wait for a "
                            "pi0-episode start event)",
                            TRUE, rw));
  g_object_class_install_property (gobject_class, PROP_ROBOT_TYPE,
                                   g_param_spec_string ("robot-type", "Robot type",
                                                        "info.json's robot_type (empty: null)",
                                                        nullptr, rw));
  g_object_class_install_property (
      gobject_class, PROP_EPISODE_LENGTH,
      g_param_spec_uint ("episode-length", "Episode length",
                         "End an episode after this many frames and start the next (0: episodes "
                         "end only by event, EOS or stop)",
                         0, G_MAXUINT, 0, rw));
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Stats",
                          "Counters since start: episodes (committed), frames (recorded), skipped "
                          "(observations without state or with a masked view), episode-frames "
                          "(in the episode in progress), gaps (frames more than 1.5 periods after "
                          "the previous one)",
                          GST_TYPE_STRUCTURE,
                          (GParamFlags)(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 LeRobot dataset recorder", "Sink/Video",
      "Records observations, the actions sent to the robot and the cameras into a "
      "LeRobotDataset v3",
      "gst-pi0");
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
