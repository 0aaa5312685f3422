/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/lerobot/pi0cameraencoder.h"

#include <gst/app/gstappsrc.h>

#include <algorithm>

namespace pi0::record
{

namespace
{

constexpr int kStatsSize = 150; /* LeRobot's image stats downsample to about this */

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

std::string
message_text (GstMessage *m)
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


} // namespace

std::string
CameraEncoder::plan (const EncoderSettings &s, GstVideoFormat f, bool *gbr, bool *convert,
                         std::string *pix_fmt, std::string *encoder)
{
  *gbr = *convert = false;
  bool nv = false;
  if (s.lossless) {
    *encoder = "x264enc";
  } else if (s.encoder == Encoder::Nvh264 ||
             s.encoder == Encoder::Auto) {
    GstElementFactory *fac = gst_element_factory_find ("nvh264enc");
    nv = fac != nullptr;
    if (fac)
      gst_object_unref (fac);
    if (!nv && s.encoder == Encoder::Nvh264)
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


bool
CameraEncoder::start (const EncoderSettings &s, const GstVideoInfo &view, int fps, const std::string &path,
            std::string *error)
{
  std::string pix;
  std::string enc_name;
  std::string err = plan (s, GST_VIDEO_INFO_FORMAT (&view), &gbr_, &convert_, &pix, &enc_name);
  if (!err.empty ()) {
    *error = err;
    return false;
  }
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
      /* Constant quality: x264enc takes its bitrate (2048 kbit/s by default) as the VBV
       * ceiling of pass=qual, which held a 720p camera to 25-28 dB. The ceiling goes to the
       * property's maximum, so the quantizer alone sets the quality. */
      g_object_set (enc, "quantizer", std::min (s.quantizer, 50u), "bitrate", 2048000u, nullptr);
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
  /* The track's time base as FFmpeg's muxer chooses it (1/fps doubled until at least 1/10000;
   * 1/15360 at 30 fps, what LeRobot's files have): FFmpeg keeps it when LeRobot's tools
   * concatenate our files, where mp4mux's own (100 x fps) was rewritten and then mis-offset. */
  guint timescale = (guint)std::max (fps, 1);
  while (timescale < 10000)
    timescale *= 2;
  g_object_set (mux, "trak-timescale", timescale, nullptr);
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


bool
CameraEncoder::push (GstBuffer *obs, const GstPi0ObservationMeta *meta, guint v, guint64 index,
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


bool
CameraEncoder::finish (std::string *error)
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


void
CameraEncoder::abort ()
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


std::string
CameraEncoder::bus_error (bool wait)
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


/* ------------------------------------------------------------------------------------------ */

CameraStats::~CameraStats ()
{
  if (conv_)
    gst_video_converter_free (conv_);
}

bool
CameraStats::init (const GstVideoInfo &in)
{
  const int w = in.width, h = in.height;
  const int f = std::max (1, std::max (w, h) / kStatsSize);
  gst_video_info_set_format (&out_, GST_VIDEO_FORMAT_RGB, std::max (1, w / f),
                             std::max (1, h / f));
  GST_VIDEO_INFO_FPS_N (&out_) = GST_VIDEO_INFO_FPS_N (&in);
  GST_VIDEO_INFO_FPS_D (&out_) = GST_VIDEO_INFO_FPS_D (&in);
  conv_ = gst_video_converter_new (
      (GstVideoInfo *)&in, &out_,
      gst_structure_new ("options", GST_VIDEO_CONVERTER_OPT_RESAMPLER_METHOD,
                         GST_TYPE_VIDEO_RESAMPLER_METHOD, GST_VIDEO_RESAMPLER_METHOD_NEAREST,
                         GST_VIDEO_CONVERTER_OPT_DITHER_METHOD, GST_TYPE_VIDEO_DITHER_METHOD,
                         GST_VIDEO_DITHER_NONE, nullptr));
  buf_.resize (GST_VIDEO_INFO_SIZE (&out_));
  return conv_ != nullptr;
}

void
CameraStats::add (GstBuffer *obs, const GstPi0ObservationMeta *meta, guint v)
{
  GstVideoFrame in, o;
  if (!gst_pi0_observation_meta_map_view (meta, obs, v, &in, GST_MAP_READ))
    return;
  GstBuffer *ob = gst_buffer_new_wrapped_full ((GstMemoryFlags)0, buf_.data (), buf_.size (), 0,
                                               buf_.size (), nullptr, nullptr);
  gst_video_frame_map (&o, &out_, ob, GST_MAP_WRITE);
  gst_video_converter_frame (conv_, &in, &o);
  stats_.add ((const uint8_t *)GST_VIDEO_FRAME_PLANE_DATA (&o, 0), out_.width, out_.height,
              GST_VIDEO_FRAME_PLANE_STRIDE (&o, 0));
  gst_video_frame_unmap (&o);
  gst_video_frame_unmap (&in);
  gst_buffer_unref (ob);
}

} // namespace pi0::record
