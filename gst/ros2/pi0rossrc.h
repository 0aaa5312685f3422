/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What pi0rosjointsrc and pi0rosimagesrc share (docs/ros2.md): their base class GstPi0RosSrc
 * (the node made at start by the subclass, gone at stop: a pipeline in NULL holds nothing of
 * rcl; unlock() cutting the wait for a message short; the LATENCY answer), the node's and the
 * subscription's properties, a message's stamp on the pipeline's running time, and
 * rate-limited warnings. */

#include "ros2/pi0rosnode.h"

#include <gst/base/gstpushsrc.h>
#include <gst/gst.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

G_BEGIN_DECLS

#define GST_TYPE_PI0_ROS_SRC (gst_pi0_ros_src_get_type ())
G_DECLARE_DERIVABLE_TYPE (GstPi0RosSrc, gst_pi0_ros_src, GST, PI0_ROS_SRC, GstPushSrc)

struct _GstPi0RosSrcClass {
  GstPushSrcClass parent_class;
};

G_END_DECLS

namespace pi0::ros
{

class SourceNode;
/* The subclass's start: makes the node and subscribes @ts with the snapshot @s of the shared
 * properties (whose latency the LATENCY query answers from then on). FALSE after posting the
 * error. */
gboolean source_open (GstPi0RosSrc *src, const struct SourceSettings &s,
                      const rosidl_message_type_support_t *ts);
SourceNode &source_node (GstPi0RosSrc *src);

/* The properties both sources have, with their defaults. */
struct SourceSettings {
  std::string topic;
  std::string node_name; /* "" = the element's name */
  std::string ns;
  std::string ros_args;
  bool use_sim_time = false;
  gint qos = 0; /* QosPreset: sensor-data */
  gint depth = 5;
  guint64 max_age = 500 * GST_MSECOND;  /* older stamps are dropped */
  guint64 max_ahead = 50 * GST_MSECOND; /* stamps further ahead are dropped */
  guint64 latency = 30 * GST_MSECOND;   /* reported downstream */
};

/* Property ids of the shared properties start at this one in each element. */
enum { kSourcePropFirst = 100 };

GType qos_preset_get_type (void);
/* Installs topic, node-name, namespace, ros-args, use-sim-time, qos, depth, max-age, max-ahead
 * and latency, with @d's values as defaults and @topic_blurb for the topic. */
void install_source_properties (GObjectClass *klass, const SourceSettings &d,
                                const char *topic_blurb);
/* set/get of those properties; false for another id. */
bool transfer_source_property (SourceSettings &s, guint prop_id, GValue *value, bool set);

/* The node and the wait, for one source element. */
class SourceNode
{
public:
  /* Makes the node and subscribes @ts on the settings' topic. False with a message. */
  bool open (GstElement *element, const SourceSettings &s, const rosidl_message_type_support_t *ts,
             std::string *error);
  void close ();
  /* Waits for a message, 100 ms at a time, until one is there (true) or unlock() (false): also
   * an unlock() that unlock_stop() followed at once, as GstBaseSrc does to hand an EOS event to
   * the streaming thread. */
  bool wait_message ();
  rcl_subscription_t *subscription () { return &sub_; }
  Node &node () { return node_; }
  /* From unlock/unlock_stop. */
  void set_flushing (bool f);

  /* How long ago a message's stamp (ROS time, ns) was, on the ROS clock: false while ROS time is
   * not known (sim time before the first /clock). */
  bool age_of (int64_t stamp_ns, int64_t *age_ns);
  /* Stamps @buf with the running time @age_ns before now on @element's clock (PTS and DTS):
   * false while the element has no clock (not PLAYING). */
  static bool stamp (GstElement *element, GstBuffer *buf, int64_t age_ns);

private:
  Node node_;
  rcl_subscription_t sub_ = rcl_get_zero_initialized_subscription ();
  bool sub_ok_ = false;
  std::atomic<bool> flushing_{false};
  std::atomic<unsigned> unlocks_{0}; /* unlock() calls: a wait that saw one end returns */
};

/* At most one warning per second per kind (a flood of bad messages must not flood the bus). */
class WarnLimiter
{
public:
  bool allow (unsigned kind);

private:
  gint64 last_[16] = {};
};

} // namespace pi0::ros
