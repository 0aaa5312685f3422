/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the two ROS 2 sources share (pi0rossrc.h). */

#include "gst/ros2/pi0rossrc.h"

#include "gst/common/gstpi0enum.h"
#include "gst/common/gstpi0props.h"
#include "ros2/pi0rosconvert.h"

#include <new>

GST_DEBUG_CATEGORY_STATIC (gst_pi0_ros_src_debug);
#define GST_CAT_DEFAULT gst_pi0_ros_src_debug

struct GstPi0RosSrcPrivate {
  pi0::ros::SourceNode node;
  guint64 latency = 0; /* of the settings taken at start */
};

G_DEFINE_ABSTRACT_TYPE_WITH_CODE (GstPi0RosSrc, gst_pi0_ros_src, GST_TYPE_PUSH_SRC,
                                  G_ADD_PRIVATE (GstPi0RosSrc));

/* A C++ struct in GObject's instance private storage: built in init, destroyed in finalize. */
static GstPi0RosSrcPrivate *
private_of (GstPi0RosSrc *src)
{
  return (GstPi0RosSrcPrivate *)gst_pi0_ros_src_get_instance_private (src);
}

static gboolean
gst_pi0_ros_src_stop (GstBaseSrc *bsrc)
{
  private_of (GST_PI0_ROS_SRC (bsrc))->node.close ();
  return TRUE;
}

static gboolean
gst_pi0_ros_src_unlock (GstBaseSrc *bsrc)
{
  private_of (GST_PI0_ROS_SRC (bsrc))->node.set_flushing (true);
  return TRUE;
}

static gboolean
gst_pi0_ros_src_unlock_stop (GstBaseSrc *bsrc)
{
  private_of (GST_PI0_ROS_SRC (bsrc))->node.set_flushing (false);
  return TRUE;
}

static gboolean
gst_pi0_ros_src_query (GstBaseSrc *bsrc, GstQuery *query)
{
  if (GST_QUERY_TYPE (query) == GST_QUERY_LATENCY) {
    gst_query_set_latency (query, TRUE, private_of (GST_PI0_ROS_SRC (bsrc))->latency,
                           GST_CLOCK_TIME_NONE);
    return TRUE;
  }
  return GST_BASE_SRC_CLASS (gst_pi0_ros_src_parent_class)->query (bsrc, query);
}

static void
gst_pi0_ros_src_finalize (GObject *object)
{
  private_of (GST_PI0_ROS_SRC (object))->~GstPi0RosSrcPrivate ();
  G_OBJECT_CLASS (gst_pi0_ros_src_parent_class)->finalize (object);
}

static void
gst_pi0_ros_src_class_init (GstPi0RosSrcClass *klass)
{
  GstBaseSrcClass *bsrc_class = GST_BASE_SRC_CLASS (klass);
  G_OBJECT_CLASS (klass)->finalize = gst_pi0_ros_src_finalize;
  bsrc_class->stop = GST_DEBUG_FUNCPTR (gst_pi0_ros_src_stop);
  bsrc_class->unlock = GST_DEBUG_FUNCPTR (gst_pi0_ros_src_unlock);
  bsrc_class->unlock_stop = GST_DEBUG_FUNCPTR (gst_pi0_ros_src_unlock_stop);
  bsrc_class->query = GST_DEBUG_FUNCPTR (gst_pi0_ros_src_query);
  gst_type_mark_as_plugin_api (GST_TYPE_PI0_ROS_SRC, (GstPluginAPIFlags)0);
  GST_DEBUG_CATEGORY_INIT (gst_pi0_ros_src_debug, "pi0rossrc", 0, "Pi0 ROS 2 sources");
}

static void
gst_pi0_ros_src_init (GstPi0RosSrc *self)
{
  new (gst_pi0_ros_src_get_instance_private (self)) GstPi0RosSrcPrivate ();
  gst_base_src_set_live (GST_BASE_SRC (self), TRUE);
  gst_base_src_set_format (GST_BASE_SRC (self), GST_FORMAT_TIME);
}

namespace pi0::ros
{

gboolean
source_open (GstPi0RosSrc *src, const SourceSettings &s, const rosidl_message_type_support_t *ts)
{
  GstPi0RosSrcPrivate *priv = private_of (src);
  std::string err;
  if (!priv->node.open (GST_ELEMENT (src), s, ts, &err)) {
    GST_ELEMENT_ERROR (src, RESOURCE, OPEN_READ, ("ROS 2: %s", err.c_str ()), (nullptr));
    return FALSE;
  }
  priv->latency = s.latency;
  GST_INFO_OBJECT (src, "node %s subscribes %s", priv->node.node ().fqn ().c_str (),
                   priv->node.node ().resolve (s.topic).c_str ());
  return TRUE;
}

SourceNode &
source_node (GstPi0RosSrc *src)
{
  return private_of (src)->node;
}

enum {
  PROP_TOPIC = kSourcePropFirst,
  PROP_NODE_NAME,
  PROP_NAMESPACE,
  PROP_ROS_ARGS,
  PROP_USE_SIM_TIME,
  PROP_QOS,
  PROP_DEPTH,
  PROP_MAX_AGE,
  PROP_MAX_AHEAD,
  PROP_LATENCY,
};

GST_PI0_DEFINE_ENUM_TYPE (
    qos_preset_get_type, "GstPi0RosQos",
    {(gint)QosPreset::kSensorData,
     "Best effort, volatile, keep last: takes messages from reliable and best-effort publishers",
     "sensor-data"},
    {(gint)QosPreset::kReliable, "Reliable, volatile, keep last: reliable publishers only",
     "reliable"},
    {(gint)QosPreset::kSystemDefault, "The RMW's defaults", "system-default"})

void
install_source_properties (GObjectClass *k, const SourceSettings &d, const char *topic_blurb)
{
  g_object_class_install_property (
      k, PROP_TOPIC,
      g_param_spec_string ("topic", "Topic", topic_blurb, d.topic.c_str (), GST_PI0_PARAM_READY));
  g_object_class_install_property (
      k, PROP_NODE_NAME,
      g_param_spec_string ("node-name", "Node name",
                           "Name of this element's ROS 2 node (default: the element's name)",
                           nullptr, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      k, PROP_NAMESPACE,
      g_param_spec_string ("namespace", "Namespace",
                           "Namespace of the node (relative topics resolve in it)", d.ns.c_str (),
                           GST_PI0_PARAM_READY));
  g_object_class_install_property (
      k, PROP_ROS_ARGS,
      g_param_spec_string ("ros-args", "ROS arguments",
                           "This node's own ROS arguments, as after --ros-args: remappings "
                           "(-r /joint_states:=/robot/joint_states) and parameters",
                           d.ros_args.c_str (), GST_PI0_PARAM_READY));
  g_object_class_install_property (
      k, PROP_USE_SIM_TIME,
      g_param_spec_boolean ("use-sim-time", "Use sim time",
                            "ROS time from /clock (a simulator's) instead of the system clock",
                            d.use_sim_time, GST_PI0_PARAM_READY));
  g_object_class_install_property (k, PROP_QOS,
                                   g_param_spec_enum ("qos", "QoS", "QoS of the subscription",
                                                      qos_preset_get_type (), d.qos,
                                                      GST_PI0_PARAM_READY));
  g_object_class_install_property (k, PROP_DEPTH,
                                   g_param_spec_int ("depth", "Depth",
                                                     "Messages the subscription keeps (keep last)",
                                                     1, 1000, d.depth, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      k, PROP_MAX_AGE,
      g_param_spec_uint64 ("max-age", "Maximum age",
                           "Drop a message whose header stamp is older than this, in ns",
                           GST_MSECOND, G_MAXUINT64, d.max_age, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      k, PROP_MAX_AHEAD,
      g_param_spec_uint64 ("max-ahead", "Maximum lead",
                           "Drop a message whose header stamp is further than this in the "
                           "future (clocks out of step), in ns",
                           0, G_MAXUINT64, d.max_ahead, GST_PI0_PARAM_READY));
  g_object_class_install_property (
      k, PROP_LATENCY,
      g_param_spec_uint64 ("latency", "Latency",
                           "Latency reported downstream, in ns: how late messages usually "
                           "arrive after their stamp (transport and driver)",
                           0, 10 * GST_SECOND, d.latency, GST_PI0_PARAM_READY));
}

bool
transfer_source_property (SourceSettings &s, guint prop_id, GValue *value, bool set)
{
  switch (prop_id) {
    GST_PI0_PROP_STRING_OR (PROP_TOPIC, topic)
    GST_PI0_PROP_STRING (PROP_NODE_NAME, node_name)
    GST_PI0_PROP_STRING_OR (PROP_NAMESPACE, ns)
    GST_PI0_PROP_STRING_OR (PROP_ROS_ARGS, ros_args)
    GST_PI0_PROP_FIELD (PROP_USE_SIM_TIME, use_sim_time, gboolean, boolean)
    GST_PI0_PROP_FIELD (PROP_QOS, qos, gint, enum)
    GST_PI0_PROP_FIELD (PROP_DEPTH, depth, gint, int)
    GST_PI0_PROP_FIELD (PROP_MAX_AGE, max_age, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_MAX_AHEAD, max_ahead, guint64, uint64)
    GST_PI0_PROP_FIELD (PROP_LATENCY, latency, guint64, uint64)
  }
  return false;
}

bool
SourceNode::open (GstElement *element, const SourceSettings &s,
                  const rosidl_message_type_support_t *ts, std::string *error)
{
  close ();
  NodeOptions o;
  if (s.node_name.empty ()) {
    gchar *n = gst_element_get_name (element);
    o.name = n;
    g_free (n);
  } else {
    o.name = s.node_name;
  }
  o.ns = s.ns;
  o.ros_args = s.ros_args;
  o.use_sim_time = s.use_sim_time;
  if (s.topic.empty ()) {
    *error = "No topic set";
    return false;
  }
  if (!node_.open (o, error))
    return false;
  if (!node_.subscribe (&sub_, ts, s.topic, make_qos ((QosPreset)s.qos, s.depth), error)) {
    node_.close ();
    return false;
  }
  sub_ok_ = true;
  return true;
}

void
SourceNode::close ()
{
  if (sub_ok_)
    node_.unsubscribe (&sub_);
  sub_ok_ = false;
  node_.close ();
}

bool
SourceNode::wait_message ()
{
  rcl_subscription_t *subs[] = {&sub_};
  std::vector<bool> ready;
  const unsigned unlocks = unlocks_;
  while (!flushing_ && unlocks_ == unlocks) {
    std::string err;
    if (!node_.wait (subs, 1, 100 * GST_MSECOND, &ready, &err)) {
      GST_WARNING ("%s", err.c_str ());
      g_usleep (10000); /* an rcl error: do not spin */
      continue;
    }
    if (ready[0])
      return true;
  }
  return false;
}

void
SourceNode::set_flushing (bool f)
{
  flushing_ = f;
  if (f) {
    unlocks_++;
    node_.wake ();
  }
}

bool
SourceNode::stamp (GstElement *element, GstBuffer *buf, int64_t age_ns)
{
  GstClock *clock = gst_element_get_clock (element);
  if (!clock)
    return false;
  const GstClockTime now = gst_clock_get_time (clock);
  gst_object_unref (clock);
  const GstClockTime base = gst_element_get_base_time (element);
  GST_BUFFER_PTS (buf) = running_time_of (now >= base ? now - base : 0, age_ns);
  GST_BUFFER_DTS (buf) = GST_BUFFER_PTS (buf);
  return true;
}

bool
SourceNode::age_of (int64_t stamp_ns, int64_t *age_ns)
{
  int64_t ros_now = 0;
  if (!node_.now (&ros_now))
    return false;
  *age_ns = ros_now - stamp_ns;
  return true;
}

bool
WarnLimiter::allow (unsigned kind)
{
  if (kind >= G_N_ELEMENTS (last_))
    kind = G_N_ELEMENTS (last_) - 1;
  const gint64 now = g_get_monotonic_time ();
  if (last_[kind] && now - last_[kind] < G_USEC_PER_SEC)
    return false;
  last_[kind] = now;
  return true;
}

} // namespace pi0::ros
