/* SPDX-License-Identifier: LGPL-2.1-or-later */
/**
 * SECTION:element-pi0rosjointsrc
 * @title: pi0rosjointsrc
 *
 * A ROS 2 node that subscribes a `sensor_msgs/msg/JointState` topic and outputs the robot state
 * pi0viewmux's state pad takes: the configured joints, picked by name in the robot
 * configuration's order (extra joints such as grippers or wheels are ignored), stamped with the
 * message's header stamp on the pipeline's running time. A sample with a missing joint, a NaN, a
 * position array shorter than the names, or a stamp too old or too far ahead is dropped, counted
 * and warned about (once a second at most): never passed on, never replaced by zeros.
 * docs/elements/pi0rosjointsrc.md, docs/ros2.md.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 pi0rosjointsrc robot-config=robot.json ! fakesink dump=true
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/ros2/gstpi0rosjointsrc.h"

#include "gst/common/gstpi0props.h"
#include "gst/ros2/pi0rossrc.h"
#include "protocol/pi0safety.h"
#include "ros2/pi0rosconvert.h"

#include <sensor_msgs/msg/joint_state.h>

#include <mutex>
#include <sstream>
#include <vector>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_ros_joint_src_debug);
#define GST_CAT_DEFAULT gst_pi0_ros_joint_src_debug

namespace ros = pi0::ros;

namespace
{

enum { PROP_0, PROP_JOINTS, PROP_ROBOT_CONFIG, PROP_STATS };

struct Settings : ros::SourceSettings {
  std::string joints;       /* "a,b,c" */
  std::string robot_config; /* path; its "joints" */
  Settings ()
  {
    topic = "/joint_states";
    qos = (gint)ros::QosPreset::kSensorData;
    depth = 10;
    latency = 20 * GST_MSECOND;
  }
};

struct Counters {
  guint64 received = 0, pushed = 0;
  guint64 dropped[(int)ros::JointIssue::kCount] = {};
};

} // namespace

struct GstPi0RosJointSrcPrivate {
  std::mutex settings_lock;
  Settings settings;
  /* Streaming thread (and start/stop). */
  Settings s;
  std::vector<std::string> joints;
  ros::WarnLimiter warn;
  std::mutex stats_lock;
  Counters counters;
};

struct _GstPi0RosJointSrc {
  GstPi0RosSrc parent;
  GstPi0RosJointSrcPrivate *priv;
};

G_DEFINE_TYPE (GstPi0RosJointSrc, gst_pi0_ros_joint_src, GST_TYPE_PI0_ROS_SRC);
GST_ELEMENT_REGISTER_DEFINE (pi0rosjointsrc, "pi0rosjointsrc", GST_RANK_NONE,
                             GST_TYPE_PI0_ROS_JOINT_SRC);

static GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE ("src", GST_PAD_SRC, GST_PAD_ALWAYS,
                             GST_STATIC_CAPS ("application/x-pi0-state, dim = (int) [ 1, 1024 ]"));

static std::vector<std::string>
split_joints (const std::string &s)
{
  std::vector<std::string> r;
  std::stringstream in (s);
  std::string item;
  while (std::getline (in, item, ',')) {
    const size_t a = item.find_first_not_of (" \t"), b = item.find_last_not_of (" \t");
    if (a != std::string::npos)
      r.push_back (item.substr (a, b - a + 1));
  }
  return r;
}

static gboolean
gst_pi0_ros_joint_src_start (GstBaseSrc *bsrc)
{
  GstPi0RosJointSrc *self = GST_PI0_ROS_JOINT_SRC (bsrc);
  GstPi0RosJointSrcPrivate *priv = self->priv;
  {
    std::lock_guard<std::mutex> g (priv->settings_lock);
    priv->s = priv->settings;
  }
  const Settings &s = priv->s;
  if (!s.joints.empty () && !s.robot_config.empty ()) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("Set joints or robot-config, not both"),
                       (nullptr));
    return FALSE;
  }
  if (!s.robot_config.empty ()) {
    pi0::proto::RobotConfig cfg;
    std::string err;
    if (!pi0::proto::load_robot_config (s.robot_config, &cfg, &err)) {
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                         ("Invalid robot configuration: %s", err.c_str ()), (nullptr));
      return FALSE;
    }
    priv->joints = cfg.joint_names;
  } else {
    priv->joints = split_joints (s.joints);
  }
  if (priv->joints.empty () || priv->joints.size () > 1024) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
                       ("No joints: set robot-config (its \"joints\") or joints=\"a,b,c\""),
                       ("1 to 1024 joints"));
    return FALSE;
  }
  {
    std::lock_guard<std::mutex> g (priv->stats_lock);
    priv->counters = Counters ();
  }
  return ros::source_open (GST_PI0_ROS_SRC (self), s,
                           ROSIDL_GET_MSG_TYPE_SUPPORT (sensor_msgs, msg, JointState));
}

static GstCaps *
gst_pi0_ros_joint_src_get_caps (GstBaseSrc *bsrc, GstCaps *filter)
{
  GstPi0RosJointSrc *self = GST_PI0_ROS_JOINT_SRC (bsrc);
  GstCaps *caps;
  /* The dimension is known from start on. */
  if (!self->priv->joints.empty ())
    caps = gst_caps_new_simple ("application/x-pi0-state", "dim", G_TYPE_INT,
                                (int)self->priv->joints.size (), nullptr);
  else
    caps = gst_pad_get_pad_template_caps (GST_BASE_SRC_PAD (bsrc));
  if (filter) {
    GstCaps *t = gst_caps_intersect_full (filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref (caps);
    caps = t;
  }
  return caps;
}

static GstFlowReturn
gst_pi0_ros_joint_src_create (GstPushSrc *psrc, GstBuffer **out)
{
  GstPi0RosJointSrc *self = GST_PI0_ROS_JOINT_SRC (psrc);
  GstPi0RosJointSrcPrivate *priv = self->priv;
  while (ros::source_node (GST_PI0_ROS_SRC (self)).wait_message ()) {
    sensor_msgs__msg__JointState m;
    sensor_msgs__msg__JointState__init (&m);
    rmw_message_info_t info;
    if (rcl_take (ros::source_node (GST_PI0_ROS_SRC (self)).subscription (), &m, &info, nullptr) !=
        RCL_RET_OK) {
      rcl_reset_error ();
      sensor_msgs__msg__JointState__fini (&m);
      continue;
    }
    const int64_t stamp = (int64_t)m.header.stamp.sec * 1000000000 + m.header.stamp.nanosec;
    int64_t age = 0;
    const bool have_time = ros::source_node (GST_PI0_ROS_SRC (self)).age_of (stamp, &age);
    std::vector<const char *> names (m.name.size);
    for (size_t i = 0; i < m.name.size; i++)
      names[i] = m.name.data[i].data;
    ros::JointPick p;
    p.issue = ros::check_stamp (have_time, stamp == 0, age, (int64_t)priv->s.max_age,
                                (int64_t)priv->s.max_ahead, &p.detail);
    if (p.issue == ros::JointIssue::kNone)
      p = ros::pick_joints (priv->joints, names.data (), names.size (), m.position.data,
                            m.position.size);
    sensor_msgs__msg__JointState__fini (&m);
    {
      std::lock_guard<std::mutex> g (priv->stats_lock);
      priv->counters.received++;
      if (p.issue != ros::JointIssue::kNone)
        priv->counters.dropped[(int)p.issue]++;
    }
    if (p.issue != ros::JointIssue::kNone) {
      if (priv->warn.allow ((unsigned)p.issue))
        GST_ELEMENT_WARNING (
            self, STREAM, FORMAT,
            ("Dropped a joint state from %s: %s", priv->s.topic.c_str (), p.detail.c_str ()),
            ("%s (counted in stats.dropped-%s; one warning per second at most)",
             ros::joint_issue_name (p.issue), ros::joint_issue_name (p.issue)));
      continue;
    }
    const gsize size = p.values.size () * sizeof (float);
    GstBuffer *buf = gst_buffer_new_allocate (nullptr, size, nullptr);
    gst_buffer_fill (buf, 0, p.values.data (), size);
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
make_stats (GstPi0RosJointSrc *self)
{
  std::lock_guard<std::mutex> g (self->priv->stats_lock);
  const Counters &c = self->priv->counters;
  GstStructure *st = gst_structure_new ("pi0rosjointsrc-stats", "received", G_TYPE_UINT64,
                                        c.received, "pushed", G_TYPE_UINT64, c.pushed, nullptr);
  for (int i = 1; i < (int)ros::JointIssue::kCount; i++) {
    gchar *name = g_strdup_printf ("dropped-%s", ros::joint_issue_name ((ros::JointIssue)i));
    gst_structure_set (st, name, G_TYPE_UINT64, c.dropped[i], nullptr);
    g_free (name);
  }
  return st;
}

static bool
transfer (Settings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_STRING (PROP_JOINTS, joints)
    GST_PI0_PROP_STRING (PROP_ROBOT_CONFIG, robot_config)
  }
  return ros::transfer_source_property (s, prop_id, value, set);
}

static void
gst_pi0_ros_joint_src_set_property (GObject *object, guint prop_id, const GValue *value,
                                    GParamSpec *pspec)
{
  GstPi0RosJointSrc *self = GST_PI0_ROS_JOINT_SRC (object);
  std::lock_guard<std::mutex> g (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, (GValue *)value, true))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_ros_joint_src_get_property (GObject *object, guint prop_id, GValue *value,
                                    GParamSpec *pspec)
{
  GstPi0RosJointSrc *self = GST_PI0_ROS_JOINT_SRC (object);
  if (prop_id == PROP_STATS) {
    g_value_take_boxed (value, make_stats (self));
    return;
  }
  std::lock_guard<std::mutex> g (self->priv->settings_lock);
  if (!transfer (self->priv->settings, prop_id, value, false))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

static void
gst_pi0_ros_joint_src_finalize (GObject *object)
{
  delete GST_PI0_ROS_JOINT_SRC (object)->priv;
  G_OBJECT_CLASS (gst_pi0_ros_joint_src_parent_class)->finalize (object);
}

static void
gst_pi0_ros_joint_src_class_init (GstPi0RosJointSrcClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseSrcClass *bsrc_class = GST_BASE_SRC_CLASS (klass);
  GstPushSrcClass *psrc_class = GST_PUSH_SRC_CLASS (klass);
  gobject_class->set_property = gst_pi0_ros_joint_src_set_property;
  gobject_class->get_property = gst_pi0_ros_joint_src_get_property;
  gobject_class->finalize = gst_pi0_ros_joint_src_finalize;

  const Settings d;
  g_object_class_install_property (
      gobject_class, PROP_JOINTS,
      g_param_spec_string ("joints", "Joints",
                           "The joints of the state, in order, separated by commas (or set "
                           "robot-config)",
                           nullptr, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_ROBOT_CONFIG,
      g_param_spec_string ("robot-config", "Robot configuration",
                           "JSON robot configuration (pi0actionsink's) whose \"joints\" are the "
                           "state's, in order",
                           nullptr, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
                          "Counters since start: received, pushed, dropped-<reason> for each "
                          "reason a sample is dropped",
                          GST_TYPE_STRUCTURE, GST_PI0_PARAM_READ_ONLY));
  ros::install_source_properties (gobject_class, d, "The sensor_msgs/msg/JointState topic");

  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (
      element_class, "Pi0 ROS 2 joint state source", "Source/Robot",
      "Subscribes a ROS 2 sensor_msgs/JointState topic and outputs the robot state by joint name",
      GST_PI0_AUTHOR);
  bsrc_class->start = GST_DEBUG_FUNCPTR (gst_pi0_ros_joint_src_start);
  bsrc_class->get_caps = GST_DEBUG_FUNCPTR (gst_pi0_ros_joint_src_get_caps);
  psrc_class->create = GST_DEBUG_FUNCPTR (gst_pi0_ros_joint_src_create);
  gst_type_mark_as_plugin_api (ros::qos_preset_get_type (), (GstPluginAPIFlags)0);
  GST_DEBUG_CATEGORY_INIT (gst_pi0_ros_joint_src_debug, "pi0rosjointsrc", 0,
                           "Pi0 ROS 2 joint state source");
}

static void
gst_pi0_ros_joint_src_init (GstPi0RosJointSrc *self)
{
  self->priv = new GstPi0RosJointSrcPrivate ();
}
