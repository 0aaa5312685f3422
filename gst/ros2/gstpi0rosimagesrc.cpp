/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0rosimagesrc
 * @title: pi0rosimagesrc
 *
 * A ROS 2 node that subscribes one camera topic and outputs its frames: `sensor_msgs/msg/Image`
 * as `video/x-raw` (rgb8, bgr8, rgba8, bgra8, mono8, mono16, yuv422, yuv422_yuy2, nv12, nv21),
 * the message's memory handed on without a copy (padded rows described by a GstVideoMeta, or
 * repacked when downstream cannot read one), or with `compressed=true`
 * `sensor_msgs/msg/CompressedImage` as `image/jpeg` or `image/png` for GStreamer's decoders
 * (`jpegdec`, `pngdec`, `decodebin`). Each frame is stamped with its header stamp on the
 * pipeline's running time. A topic that stops publishing pushes nothing: pi0viewmux sees a
 * stalled camera (masked and warned), not the end of the stream. Sensor-data QoS by default.
 * docs/elements/pi0rosimagesrc.md, docs/ros2.md.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 pi0rosimagesrc topic=/cam_high/image_raw ! videoconvert ! autovideosink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/ros2/gstpi0rosimagesrc.h"

#include "gst/common/gstpi0props.h"
#include "gst/ros2/pi0rossrc.h"
#include "ros2/pi0rosconvert.h"

#include <gst/video/video.h>
#include <sensor_msgs/msg/compressed_image.h>
#include <sensor_msgs/msg/image.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_ros_image_src_debug);
#define GST_CAT_DEFAULT gst_pi0_ros_image_src_debug

namespace ros = pi0::ros;

namespace
{

enum { PROP_0, PROP_COMPRESSED, PROP_STATS };

/* Why a frame was dropped (stats.dropped-<name>). */
enum Drop { kDropEncoding, kDropGeometry, kDropStamp, kDropFormat, kDropCount };
const char *const drop_names[kDropCount] = {"encoding", "geometry", "stamp", "format"};

struct Settings : ros::SourceSettings {
  bool compressed = false;
  Settings ()
  {
    topic = "/camera/image_raw";
    qos = (gint)ros::QosPreset::kSensorData;
    depth = 5;
    max_age = GST_SECOND;
    latency = 30 * GST_MSECOND;
  }
};

struct Counters {
  guint64 received = 0, pushed = 0, copied = 0, caps_changes = 0;
  guint64 dropped[kDropCount] = {};
};

} // namespace

struct GstPi0RosImageSrcPrivate {
  std::mutex settings_lock;
  Settings settings;
  Settings s; /* streaming thread's copy, from start */
  ros::WarnLimiter warn;
  GstCaps *caps = nullptr;   /* what was last set */
  GstVideoInfo info;         /* raw: of caps */
  bool video_meta_ok = true; /* downstream reads GstVideoMeta (decide_allocation) */
  std::mutex stats_lock;
  Counters counters;
};

struct _GstPi0RosImageSrc {
  GstPi0RosSrc parent;
  GstPi0RosImageSrcPrivate *priv;
};

G_DEFINE_TYPE (GstPi0RosImageSrc, gst_pi0_ros_image_src, GST_TYPE_PI0_ROS_SRC);
GST_ELEMENT_REGISTER_DEFINE (pi0rosimagesrc, "pi0rosimagesrc", GST_RANK_NONE,
                             GST_TYPE_PI0_ROS_IMAGE_SRC);

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE (
    "src", GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS (GST_VIDEO_CAPS_MAKE ("{ RGB, BGR, RGBA, BGRA, GRAY8, GRAY16_LE, GRAY16_BE, "
                                          "UYVY, YUY2, NV12, NV21 }") "; "
                                                                      "image/jpeg; image/png"));

static void
count (GstPi0RosImageSrc *self, int drop)
{
  std::lock_guard<std::mutex> g (self->priv->stats_lock);
  self->priv->counters.dropped[drop]++;
}

static void
warn_drop (GstPi0RosImageSrc *self, int drop, const std::string &why)
{
  count (self, drop);
  if (self->priv->warn.allow ((unsigned)drop))
    GST_ELEMENT_WARNING (
        self, STREAM, FORMAT,
        ("Dropped a frame from %s: %s", self->priv->s.topic.c_str (), why.c_str ()),
        ("counted in stats.dropped-%s; one warning per second at most", drop_names[drop]));
}

static gboolean
gst_pi0_ros_image_src_start (GstBaseSrc *bsrc)
{
  GstPi0RosImageSrc *self = GST_PI0_ROS_IMAGE_SRC (bsrc);
  GstPi0RosImageSrcPrivate *priv = self->priv;
  {
    std::lock_guard<std::mutex> g (priv->settings_lock);
    priv->s = priv->settings;
  }
  gst_clear_caps (&priv->caps);
  {
    std::lock_guard<std::mutex> g (priv->stats_lock);
    priv->counters = Counters ();
  }
  return ros::source_open (GST_PI0_ROS_SRC (self), priv->s,
                           priv->s.compressed
                               ? ROSIDL_GET_MSG_TYPE_SUPPORT (sensor_msgs, msg, CompressedImage)
                               : ROSIDL_GET_MSG_TYPE_SUPPORT (sensor_msgs, msg, Image));
}

static gboolean
gst_pi0_ros_image_src_stop (GstBaseSrc *bsrc)
{
  GstPi0RosImageSrc *self = GST_PI0_ROS_IMAGE_SRC (bsrc);
  GST_BASE_SRC_CLASS (gst_pi0_ros_image_src_parent_class)->stop (bsrc);
  gst_clear_caps (&self->priv->caps);
  return TRUE;
}

/* The caps come with the first message (its encoding and size): nothing to fix before it. */
static gboolean
gst_pi0_ros_image_src_negotiate (GstBaseSrc *)
{
  return TRUE;
}

static gboolean
gst_pi0_ros_image_src_decide_allocation (GstBaseSrc *bsrc, GstQuery *query)
{
  GstPi0RosImageSrc *self = GST_PI0_ROS_IMAGE_SRC (bsrc);
  self->priv->video_meta_ok =
      gst_query_find_allocation_meta (query, GST_VIDEO_META_API_TYPE, nullptr);
  return GST_BASE_SRC_CLASS (gst_pi0_ros_image_src_parent_class)->decide_allocation (bsrc, query);
}

/* Sets @caps when they differ from the last ones. */
static bool
ensure_caps (GstPi0RosImageSrc *self, GstCaps *caps)
{
  GstPi0RosImageSrcPrivate *priv = self->priv;
  if (priv->caps && gst_caps_is_equal (priv->caps, caps)) {
    gst_caps_unref (caps);
    return true;
  }
  if (!gst_base_src_set_caps (GST_BASE_SRC (self), caps)) {
    gst_caps_unref (caps);
    return false;
  }
  {
    std::lock_guard<std::mutex> g (priv->stats_lock);
    if (priv->caps)
      priv->counters.caps_changes++;
  }
  gst_caps_replace (&priv->caps, caps);
  /* Whether downstream reads a GstVideoMeta (padded rows without a copy), asked for these caps:
   * the base class's allocation query ran before there were any. */
  GstQuery *q = gst_query_new_allocation (caps, FALSE);
  priv->video_meta_ok = gst_pad_peer_query (GST_BASE_SRC_PAD (self), q) &&
                        gst_query_find_allocation_meta (q, GST_VIDEO_META_API_TYPE, nullptr);
  gst_query_unref (q);
  gst_caps_unref (caps);
  return true;
}

/* The message's bytes as a buffer, without a copy: the sequence's malloc'd data is taken over
 * (rosidl's default allocator is malloc). */
static GstBuffer *
take_bytes (rosidl_runtime_c__uint8__Sequence *seq, size_t size)
{
  guint8 *data = seq->data;
  const size_t capacity = seq->capacity;
  seq->data = nullptr;
  seq->size = seq->capacity = 0;
  return gst_buffer_new_wrapped_full ((GstMemoryFlags)0, data, capacity, 0, size, data, free);
}

/* A raw Image: caps from its encoding and size; its rows as they are, described by a
 * GstVideoMeta where the step is not GStreamer's default stride. Null when dropped. */
static GstBuffer *
raw_frame (GstPi0RosImageSrc *self, sensor_msgs__msg__Image &m, GstFlowReturn *ret)
{
  GstPi0RosImageSrcPrivate *priv = self->priv;
  const std::string enc = m.encoding.data ? m.encoding.data : "";
  const ros::ImageLayout l = ros::image_layout (enc, m.is_bigendian != 0);
  if (!l.gst_format) {
    warn_drop (self, kDropEncoding,
               "encoding \"" + enc + "\" is not one of " + ros::supported_encodings ());
    return nullptr;
  }
  const std::string bad = ros::check_image (l, m.width, m.height, m.step, m.data.size);
  if (!bad.empty ()) {
    warn_drop (self, kDropGeometry, bad);
    return nullptr;
  }
  GstVideoInfo info;
  gst_video_info_set_format (&info, gst_video_format_from_string (l.gst_format), m.width, m.height);
  GstCaps *caps = gst_video_info_to_caps (&info);
  gst_caps_set_simple (caps, "framerate", GST_TYPE_FRACTION, 0, 1, nullptr);
  if (!ensure_caps (self, caps)) {
    *ret = GST_FLOW_NOT_NEGOTIATED;
    return nullptr;
  }
  priv->info = info;
  gsize offsets[GST_VIDEO_MAX_PLANES] = {0};
  gint strides[GST_VIDEO_MAX_PLANES] = {(gint)m.step};
  bool tight = m.step == (uint32_t)GST_VIDEO_INFO_PLANE_STRIDE (&info, 0);
  if (GST_VIDEO_INFO_N_PLANES (&info) == 2) {
    offsets[1] = (gsize)m.step * m.height;
    strides[1] = (gint)m.step;
    tight = tight && offsets[1] == GST_VIDEO_INFO_PLANE_OFFSET (&info, 1);
  }
  const size_t used = (size_t)m.step * m.height * l.size_num / l.size_den;
  if (tight || priv->video_meta_ok) {
    GstBuffer *buf = take_bytes (&m.data, used);
    if (!tight)
      gst_buffer_add_video_meta_full (buf, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_INFO_FORMAT (&info),
                                      m.width, m.height, GST_VIDEO_INFO_N_PLANES (&info), offsets,
                                      strides);
    return buf;
  }
  /* Downstream reads only GStreamer's own layout: repack the rows. */
  GstBuffer *buf = gst_buffer_new_allocate (nullptr, GST_VIDEO_INFO_SIZE (&info), nullptr);
  GstMapInfo map;
  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  for (guint p = 0; p < GST_VIDEO_INFO_N_PLANES (&info); p++) {
    const guint rows = GST_VIDEO_INFO_COMP_HEIGHT (&info, p == 0 ? 0 : 1);
    const gsize row_bytes = GST_VIDEO_INFO_COMP_WIDTH (&info, p == 0 ? 0 : 1) *
                            GST_VIDEO_INFO_COMP_PSTRIDE (&info, p == 0 ? 0 : 1);
    for (guint r = 0; r < rows; r++)
      memcpy (map.data + GST_VIDEO_INFO_PLANE_OFFSET (&info, p) +
                  (gsize)r * GST_VIDEO_INFO_PLANE_STRIDE (&info, p),
              m.data.data + offsets[p] + (gsize)r * strides[p], row_bytes);
  }
  gst_buffer_unmap (buf, &map);
  std::lock_guard<std::mutex> g (priv->stats_lock);
  priv->counters.copied++;
  return buf;
}

static GstBuffer *
compressed_frame (GstPi0RosImageSrc *self, sensor_msgs__msg__CompressedImage &m, GstFlowReturn *ret)
{
  const std::string fmt = m.format.data ? m.format.data : "";
  const char *media = ros::compressed_media_type (fmt);
  if (!media) {
    warn_drop (self, kDropFormat, "format \"" + fmt + "\" is neither jpeg nor png");
    return nullptr;
  }
  if (m.data.size == 0) {
    warn_drop (self, kDropGeometry, "no data");
    return nullptr;
  }
  GstCaps *caps = gst_caps_new_simple (media, "framerate", GST_TYPE_FRACTION, 0, 1, nullptr);
  if (!ensure_caps (self, caps)) {
    *ret = GST_FLOW_NOT_NEGOTIATED;
    return nullptr;
  }
  return take_bytes (&m.data, m.data.size);
}

static GstFlowReturn
gst_pi0_ros_image_src_create (GstPushSrc *psrc, GstBuffer **out)
{
  GstPi0RosImageSrc *self = GST_PI0_ROS_IMAGE_SRC (psrc);
  GstPi0RosImageSrcPrivate *priv = self->priv;
  while (ros::source_node (GST_PI0_ROS_SRC (self)).wait_message ()) {
    sensor_msgs__msg__Image raw;
    sensor_msgs__msg__CompressedImage comp;
    builtin_interfaces__msg__Time *stamp;
    rcl_ret_t r;
    rmw_message_info_t info;
    if (priv->s.compressed) {
      sensor_msgs__msg__CompressedImage__init (&comp);
      r = rcl_take (ros::source_node (GST_PI0_ROS_SRC (self)).subscription (), &comp, &info,
                    nullptr);
      stamp = &comp.header.stamp;
    } else {
      sensor_msgs__msg__Image__init (&raw);
      r = rcl_take (ros::source_node (GST_PI0_ROS_SRC (self)).subscription (), &raw, &info,
                    nullptr);
      stamp = &raw.header.stamp;
    }
    GstBuffer *buf = nullptr;
    GstFlowReturn ret = GST_FLOW_OK;
    int64_t age = 0;
    if (r != RCL_RET_OK) {
      rcl_reset_error ();
    } else {
      {
        std::lock_guard<std::mutex> g (priv->stats_lock);
        priv->counters.received++;
      }
      const int64_t t = (int64_t)stamp->sec * 1000000000 + stamp->nanosec;
      const bool have_time = ros::source_node (GST_PI0_ROS_SRC (self)).age_of (t, &age);
      std::string why;
      if (ros::check_stamp (have_time, t == 0, age, (int64_t)priv->s.max_age,
                            (int64_t)priv->s.max_ahead, &why) != ros::JointIssue::kNone)
        warn_drop (self, kDropStamp, why);
      else
        buf =
            priv->s.compressed ? compressed_frame (self, comp, &ret) : raw_frame (self, raw, &ret);
    }
    if (priv->s.compressed)
      sensor_msgs__msg__CompressedImage__fini (&comp);
    else
      sensor_msgs__msg__Image__fini (&raw);
    if (ret != GST_FLOW_OK)
      return ret;
    if (!buf)
      continue;
    if (!ros::SourceNode::stamp (GST_ELEMENT (self), buf, age)) {
      gst_buffer_unref (buf); /* no clock yet: not PLAYING */
      continue;
    }
    {
      std::lock_guard<std::mutex> g (priv->stats_lock);
      priv->counters.pushed++;
    }
    *out = buf;
    return GST_FLOW_OK;
  }
  return GST_FLOW_FLUSHING;
}

static GstStructure *
make_stats (GstPi0RosImageSrc *self)
{
  std::lock_guard<std::mutex> g (self->priv->stats_lock);
  const Counters &c = self->priv->counters;
  GstStructure *st =
      gst_structure_new ("pi0rosimagesrc-stats", "received", G_TYPE_UINT64, c.received, "pushed",
                         G_TYPE_UINT64, c.pushed, "copied", G_TYPE_UINT64, c.copied, "caps-changes",
                         G_TYPE_UINT64, c.caps_changes, nullptr);
  for (int i = 0; i < kDropCount; i++) {
    gchar *name = g_strdup_printf ("dropped-%s", drop_names[i]);
    gst_structure_set (st, name, G_TYPE_UINT64, c.dropped[i], nullptr);
    g_free (name);
  }
  return st;
}

static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_FIELD (PROP_COMPRESSED, compressed, gboolean, boolean)
  }
  return ros::transfer_source_property (s, prop_id, value, set);
}

static void
gst_pi0_ros_image_src_set_property (GObject *object, guint prop_id, const GValue *value,
                                    GParamSpec *pspec)
{
  GstPi0RosImageSrc *self = GST_PI0_ROS_IMAGE_SRC (object);
  std::lock_guard<std::mutex> g (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_ros_image_src_get_property (GObject *object, guint prop_id, GValue *value,
                                    GParamSpec *pspec)
{
  GstPi0RosImageSrc *self = GST_PI0_ROS_IMAGE_SRC (object);
  if (prop_id == PROP_STATS) {
    g_value_take_boxed (value, make_stats (self));
    return;
  }
  std::lock_guard<std::mutex> g (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_ros_image_src_finalize (GObject *object)
{
  GstPi0RosImageSrc *self = GST_PI0_ROS_IMAGE_SRC (object);
  gst_clear_caps (&self->priv->caps);
  delete self->priv;
  G_OBJECT_CLASS (gst_pi0_ros_image_src_parent_class)->finalize (object);
}

static void
gst_pi0_ros_image_src_class_init (GstPi0RosImageSrcClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseSrcClass *bsrc_class = GST_BASE_SRC_CLASS (klass);
  GstPushSrcClass *psrc_class = GST_PUSH_SRC_CLASS (klass);
  gobject_class->set_property = gst_pi0_ros_image_src_set_property;
  gobject_class->get_property = gst_pi0_ros_image_src_get_property;
  gobject_class->finalize = gst_pi0_ros_image_src_finalize;

  const Settings d;
  g_object_class_install_property (
      gobject_class, PROP_COMPRESSED,
      g_param_spec_boolean ("compressed", "Compressed",
                            "Subscribe sensor_msgs/msg/CompressedImage (jpeg, png) instead of "
                            "sensor_msgs/msg/Image",
                            d.compressed, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
                          "Counters since start: received, pushed, copied (rows repacked), "
                          "caps-changes, dropped-encoding, dropped-geometry, dropped-stamp, "
                          "dropped-format",
                          GST_TYPE_STRUCTURE, GST_PI0_PARAM_READ_ONLY));
  ros::install_source_properties (gobject_class, d,
                                  "The camera topic (sensor_msgs/msg/Image, or CompressedImage "
                                  "with compressed=true)");

  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 ROS 2 camera source", "Source/Video",
      "Subscribes a ROS 2 sensor_msgs/Image or CompressedImage topic and outputs its frames",
      GST_PI0_AUTHOR);
  bsrc_class->start = GST_DEBUG_FUNCPTR (gst_pi0_ros_image_src_start);
  bsrc_class->stop = GST_DEBUG_FUNCPTR (gst_pi0_ros_image_src_stop);
  bsrc_class->negotiate = GST_DEBUG_FUNCPTR (gst_pi0_ros_image_src_negotiate);
  bsrc_class->decide_allocation = GST_DEBUG_FUNCPTR (gst_pi0_ros_image_src_decide_allocation);
  psrc_class->create = GST_DEBUG_FUNCPTR (gst_pi0_ros_image_src_create);
  GST_DEBUG_CATEGORY_INIT (gst_pi0_ros_image_src_debug, "pi0rosimagesrc", 0,
                           "Pi0 ROS 2 camera source");
}

static void
gst_pi0_ros_image_src_init (GstPi0RosImageSrc *self)
{
  self->priv = new GstPi0RosImageSrcPrivate ();
}
