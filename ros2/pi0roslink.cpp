/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The ros2:// link of pi0actionsink (pi0roslink.h). */

#include "ros2/pi0roslink.h"

#include "ros2/pi0rosconvert.h"
#include "ros2/pi0roslinkplan.h"
#include "ros2/pi0rosnode.h"

#include <glib.h>
#include <rcl/error_handling.h>
#include <rcl/rcl.h>
#include <rosidl_runtime_c/string_functions.h>
#include <rosidl_runtime_c/primitives_sequence_functions.h>
#include <sensor_msgs/msg/joint_state.h>
#include <std_msgs/msg/float64_multi_array.h>
#include <trajectory_msgs/msg/detail/joint_trajectory_point__functions.h>
#include <trajectory_msgs/msg/joint_trajectory.h>

#include <cinttypes>
#include <optional>
#include <string>
#include <vector>

namespace pi0::ros
{
namespace
{

/* The target's options (docs/ros2.md): ros2:///TOPIC?type=...&joint-states=...&... */
struct LinkOptions {
  std::string topic;
  LinkMode mode = LinkMode::kTrajectory;
  std::string joint_states = "/joint_states"; /* "" = none read */
  NodeOptions node;
  QosPreset qos = QosPreset::kReliable; /* controllers subscribe reliably */
  int depth = 10;
  QosPreset state_qos = QosPreset::kSensorData;
  int64_t max_state_age_ns = 500000000;
};

bool
parse_link_uri (const char *uri, LinkOptions *o, std::string *error)
{
  GError *e = nullptr;
  GUri *u = g_uri_parse (uri, G_URI_FLAGS_ENCODED_QUERY, &e);
  if (!u) {
    *error = std::string ("invalid ros2:// target: ") + e->message;
    g_clear_error (&e);
    return false;
  }
  /* ros2:///a/b is the absolute topic /a/b; ros2://a/b the relative topic a/b (in the node's
   * namespace). */
  const char *host = g_uri_get_host (u);
  std::string topic = (host && *host ? std::string (host) : std::string ()) + g_uri_get_path (u);
  o->topic = topic;
  o->node.name = "pi0actionsink";
  bool ok = true;
  if (o->topic.empty () || o->topic == "/") {
    *error = std::string ("ros2:// target \"") + uri +
             "\" names no topic, e.g. "
             "ros2:///arm_controller/joint_trajectory";
    ok = false;
  }
  if (const char *q = g_uri_get_query (u)) {
    GHashTable *t = g_uri_parse_params (q, -1, "&", G_URI_PARAMS_NONE, &e);
    if (!t) {
      *error = std::string ("ros2:// target query: ") + e->message;
      g_clear_error (&e);
      ok = false;
    } else {
      GHashTableIter it;
      gpointer k, v;
      g_hash_table_iter_init (&it, t);
      while (ok && g_hash_table_iter_next (&it, &k, &v)) {
        const std::string key = (const char *)k, val = (const char *)v;
        char *end = nullptr;
        if (key == "type" && (val == "trajectory" || val == "commands")) {
          o->mode = val == "trajectory" ? LinkMode::kTrajectory : LinkMode::kCommands;
        } else if (key == "joint-states") {
          o->joint_states = val;
        } else if (key == "node") {
          o->node.name = val;
        } else if (key == "namespace") {
          o->node.ns = val;
        } else if (key == "ros-args") {
          o->node.ros_args = val;
        } else if (key == "use-sim-time" && (val == "true" || val == "false")) {
          o->node.use_sim_time = val == "true";
        } else if (key == "qos" && parse_qos (val, &o->qos)) {
        } else if (key == "state-qos" && parse_qos (val, &o->state_qos)) {
        } else if (key == "depth" && (o->depth = (int)strtol (val.c_str (), &end, 10)) >= 1 &&
                   o->depth <= 1000 && end && !*end) {
        } else if (key == "max-state-age" &&
                   (o->max_state_age_ns = g_ascii_strtoll (val.c_str (), &end, 10)) > 0 && end &&
                   !*end) {
        } else {
          *error = "ros2:// target: \"" + key + "=" + val +
                   "\" is not an option (type=trajectory|commands, joint-states=TOPIC, node=NAME, "
                   "namespace=NS, ros-args=ARGS, use-sim-time=true|false, "
                   "qos=reliable|sensor-data|system-default, state-qos=..., depth=1..1000, "
                   "max-state-age=NS)";
          ok = false;
        }
      }
      g_hash_table_unref (t);
    }
  }
  g_uri_unref (u);
  return ok;
}

class RosLink
{
public:
  bool open (const char *uri, const char *const *joints, unsigned n, std::string *error)
  {
    if (!parse_link_uri (uri, &o_, error))
      return false;
    for (unsigned i = 0; i < n; i++)
      joints_.emplace_back (joints[i]);
    if (joints_.empty ()) {
      *error = "the robot configuration names no joints";
      return false;
    }
    plan_.emplace (o_.mode, (unsigned)joints_.size ());
    if (!node_.open (o_.node, error))
      return false;
    const rosidl_message_type_support_t *ts =
        o_.mode == LinkMode::kTrajectory
            ? ROSIDL_GET_MSG_TYPE_SUPPORT (trajectory_msgs, msg, JointTrajectory)
            : ROSIDL_GET_MSG_TYPE_SUPPORT (std_msgs, msg, Float64MultiArray);
    if (!node_.advertise (&pub_, ts, o_.topic, make_qos (o_.qos, o_.depth), error))
      return false;
    pub_ok_ = true;
    if (!o_.joint_states.empty ()) {
      if (!node_.subscribe (&sub_, ROSIDL_GET_MSG_TYPE_SUPPORT (sensor_msgs, msg, JointState),
                            o_.joint_states, make_qos (o_.state_qos, 10), error))
        return false;
      sub_ok_ = true;
    }
    return true;
  }

  ~RosLink ()
  {
    if (sub_ok_)
      node_.unsubscribe (&sub_);
    if (pub_ok_) {
      /* What was published last (the HOLD the sink sends as it stops) reaches a matched
       * reliable subscriber before the publisher goes, within 500 ms (at once for best effort):
       * without the wait, the last messages were lost whenever the writer went first. */
      if (rcl_publisher_wait_for_all_acked (&pub_, RCL_MS_TO_NS (500)) != RCL_RET_OK)
        rcl_reset_error ();
      node_.unadvertise (&pub_);
    }
    node_.close ();
  }

  int send (const uint8_t *data, size_t len)
  {
    take_states ();
    proto::Header h;
    size_t size = 0;
    proto::Limits lim;
    lim.max_frame_size = proto::kMaxFrameSize;
    if (proto::peek_header (data, len, lim, &h, &size) == proto::Error::kOk &&
        h.send_time_ns != proto::kTimeNone) {
      /* The sink's running time and ROS time, side by side now: the offset maps one onto the
       * other for this frame's stamps. */
      int64_t ros_now = 0;
      if (node_.now (&ros_now)) {
        offset_ = ros_now - (int64_t)h.send_time_ns;
        have_offset_ = true;
      }
    }
    cmds_.clear ();
    const std::vector<float> *m = fresh () ? &measured_ : nullptr;
    plan_->frame (data, len, m, cmds_);
    for (const Command &c : cmds_)
      publish (c);
    return 0;
  }

  void pump (uint64_t now, Pi0ExternalFrameFunc on_frame, void *ud)
  {
    take_states ();
    std::vector<uint8_t> fb;
    if (plan_->feedback (now, fresh (), &fb))
      on_frame (ud, fb.data (), fb.size ());
  }

private:
  bool fresh () const
  {
    return o_.joint_states.empty ()
               ? false
               : have_state_ && g_get_monotonic_time () * 1000 - state_at_ <= o_.max_state_age_ns;
  }

  /* The newest joint state, in the configuration's order (what HOLD holds, and the robot's
   * liveness). */
  void take_states ()
  {
    if (!sub_ok_)
      return;
    for (int i = 0; i < 64; i++) {
      sensor_msgs__msg__JointState js;
      sensor_msgs__msg__JointState__init (&js);
      rmw_message_info_t info;
      const rcl_ret_t r = rcl_take (&sub_, &js, &info, nullptr);
      if (r == RCL_RET_OK) {
        std::vector<const char *> names (js.name.size);
        for (size_t k = 0; k < js.name.size; k++)
          names[k] = js.name.data[k].data;
        /* Liveness needs no stamp check: the message arrived now. */
        JointPick p =
            pick_joints (joints_, names.data (), names.size (), js.position.data, js.position.size);
        if (p.issue == JointIssue::kNone) {
          measured_ = std::move (p.values);
          have_state_ = true;
          state_at_ = g_get_monotonic_time () * 1000;
        }
      } else {
        rcl_reset_error ();
      }
      sensor_msgs__msg__JointState__fini (&js);
      if (r != RCL_RET_OK)
        break;
    }
  }

  void stamp_of (uint64_t running, builtin_interfaces__msg__Time *t) const
  {
    int64_t ns = have_offset_ ? (int64_t)running + offset_ : 0;
    if (ns < 0)
      ns = 0;
    t->sec = (int32_t)(ns / 1000000000);
    t->nanosec = (uint32_t)(ns % 1000000000);
  }

  void publish (const Command &c)
  {
    if (c.kind == Command::Kind::kPosition) {
      std_msgs__msg__Float64MultiArray m;
      std_msgs__msg__Float64MultiArray__init (&m);
      const std::vector<double> &p = c.points[0];
      if (rosidl_runtime_c__double__Sequence__init (&m.data, p.size ())) {
        for (size_t i = 0; i < p.size (); i++)
          m.data.data[i] = p[i];
        if (rcl_publish (&pub_, &m, nullptr) != RCL_RET_OK)
          rcl_reset_error ();
      }
      std_msgs__msg__Float64MultiArray__fini (&m);
      return;
    }
    trajectory_msgs__msg__JointTrajectory m;
    trajectory_msgs__msg__JointTrajectory__init (&m);
    bool ok = rosidl_runtime_c__String__Sequence__init (&m.joint_names, joints_.size ());
    for (size_t i = 0; ok && i < joints_.size (); i++)
      ok = rosidl_runtime_c__String__assign (&m.joint_names.data[i], joints_[i].c_str ());
    if (c.kind == Command::Kind::kTrajectory) {
      /* Row k is the set point at start + k periods; the first is due when it was sent. */
      stamp_of (c.start_ns, &m.header.stamp);
      ok = ok &&
           trajectory_msgs__msg__JointTrajectoryPoint__Sequence__init (&m.points, c.points.size ());
      for (size_t k = 0; ok && k < c.points.size (); k++) {
        trajectory_msgs__msg__JointTrajectoryPoint &pt = m.points.data[k];
        ok = rosidl_runtime_c__double__Sequence__init (&pt.positions, c.points[k].size ());
        for (size_t j = 0; ok && j < c.points[k].size (); j++)
          pt.positions.data[j] = c.points[k][j];
        const uint64_t t = (uint64_t)k * c.period_ns;
        pt.time_from_start.sec = (int32_t)(t / 1000000000);
        pt.time_from_start.nanosec = (uint32_t)(t % 1000000000);
      }
    }
    /* kStop: no points, stamp 0: "stop now" to a JointTrajectoryController. */
    if (ok && rcl_publish (&pub_, &m, nullptr) != RCL_RET_OK)
      rcl_reset_error ();
    trajectory_msgs__msg__JointTrajectory__fini (&m);
  }

  LinkOptions o_;
  std::vector<std::string> joints_;
  std::optional<LinkPlan> plan_;
  Node node_;
  rcl_publisher_t pub_ = rcl_get_zero_initialized_publisher ();
  rcl_subscription_t sub_ = rcl_get_zero_initialized_subscription ();
  bool pub_ok_ = false, sub_ok_ = false;
  std::vector<float> measured_;
  bool have_state_ = false;
  int64_t state_at_ = 0;
  int64_t offset_ = 0;
  bool have_offset_ = false;
  std::vector<Command> cmds_;
};

void *
link_open (const char *uri, const char *const *joints, unsigned n, char **error)
{
  auto *l = new RosLink ();
  std::string err;
  if (!l->open (uri, joints, n, &err)) {
    delete l;
    *error = g_strdup (err.c_str ());
    return nullptr;
  }
  return l;
}

int
link_send (void *l, const uint8_t *data, size_t len)
{
  return ((RosLink *)l)->send (data, len);
}

void
link_pump (void *l, uint64_t now, Pi0ExternalFrameFunc on_frame, void *ud)
{
  ((RosLink *)l)->pump (now, on_frame, ud);
}

int
link_up (void *)
{
  return 1; /* publishing never waits: a controller that is not there misses the messages */
}

void
link_close (void *l)
{
  delete (RosLink *)l;
}

const Pi0ExternalLink table = {
    PI0_EXTERNAL_LINK_ABI, "ros2", link_open, link_send, link_pump, link_up, link_close};

} // namespace
} // namespace pi0::ros

const Pi0ExternalLink *
pi0_ros2_link_table (void)
{
  return &pi0::ros::table;
}
