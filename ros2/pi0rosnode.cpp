/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A ROS 2 node on rcl (pi0rosnode.h). */

#include "ros2/pi0rosnode.h"

#include <glib.h>
#include <rcl/error_handling.h>
#include <rcl/remap.h>
#include <rosgraph_msgs/msg/clock.h>

#include <mutex>

namespace pi0::ros
{

namespace
{

/* The usual reason why a subscription or publisher cannot be made: rmw loads the message
 * packages' type supports with dlopen, which finds them (and what they need) only on
 * LD_LIBRARY_PATH. */
const char *const kEnvHint =
    " (is the ROS 2 environment set? rmw loads the message type supports from LD_LIBRARY_PATH: "
    "source /opt/ros/<distro>/setup.bash, or scripts/ros2-env.sh for the PyPI wheels)";

/* The process's one rcl context, shared by every node: rcl_init once, rcl_shutdown when the
 * last node closes. */
std::mutex context_lock;
int context_users = 0;
rcl_context_t context = rcl_get_zero_initialized_context ();
rcl_init_options_t init_options = rcl_get_zero_initialized_init_options ();

bool
acquire_context (std::string *error)
{
  std::lock_guard<std::mutex> g (context_lock);
  if (context_users > 0) {
    context_users++;
    return true;
  }
  init_options = rcl_get_zero_initialized_init_options ();
  if (rcl_init_options_init (&init_options, rcl_get_default_allocator ()) != RCL_RET_OK) {
    *error = "rcl_init_options_init: " + rcl_error_text ();
    return false;
  }
  context = rcl_get_zero_initialized_context ();
  /* No process arguments: a plugin does not own argv. Each node takes its own (ros-args). */
  if (rcl_init (0, nullptr, &init_options, &context) != RCL_RET_OK) {
    *error = "rcl_init: " + rcl_error_text ();
    if (rcl_init_options_fini (&init_options) != RCL_RET_OK)
      rcl_reset_error ();
    return false;
  }
  context_users = 1;
  return true;
}

void
release_context ()
{
  std::lock_guard<std::mutex> g (context_lock);
  if (context_users <= 0 || --context_users > 0)
    return;
  if (rcl_shutdown (&context) != RCL_RET_OK)
    rcl_reset_error ();
  if (rcl_context_fini (&context) != RCL_RET_OK)
    rcl_reset_error ();
  if (rcl_init_options_fini (&init_options) != RCL_RET_OK)
    rcl_reset_error ();
}

} // namespace

std::string
rcl_error_text ()
{
  std::string s = rcl_error_is_set () ? rcl_get_error_string ().str : "unknown error";
  rcl_reset_error ();
  return s;
}

rmw_qos_profile_t
make_qos (QosPreset p, int depth)
{
  rmw_qos_profile_t q = rmw_qos_profile_default;
  switch (p) {
    case QosPreset::kSensorData:
      q = rmw_qos_profile_sensor_data;
      break;
    case QosPreset::kReliable:
      q = rmw_qos_profile_default; /* reliable, volatile, keep last */
      break;
    case QosPreset::kSystemDefault:
      q = rmw_qos_profile_system_default;
      break;
  }
  if (depth > 0) {
    q.history = RMW_QOS_POLICY_HISTORY_KEEP_LAST;
    q.depth = (size_t)depth;
  }
  return q;
}

bool
parse_qos (const std::string &name, QosPreset *out)
{
  if (name == "sensor-data")
    *out = QosPreset::kSensorData;
  else if (name == "reliable")
    *out = QosPreset::kReliable;
  else if (name == "system-default")
    *out = QosPreset::kSystemDefault;
  else
    return false;
  return true;
}

bool
Node::open (const NodeOptions &o, std::string *error)
{
  close ();
  if (!acquire_context (error))
    return false;
  rcl_allocator_t alloc = rcl_get_default_allocator ();
  rcl_node_options_t opts = rcl_node_get_default_options ();
  bool ok = true;
  if (!o.ros_args.empty ()) {
    gchar **argv = nullptr;
    gint argc = 0;
    GError *e = nullptr;
    const std::string line = "--ros-args " + o.ros_args;
    if (!g_shell_parse_argv (line.c_str (), &argc, &argv, &e)) {
      *error = std::string ("ros-args: ") + e->message;
      g_clear_error (&e);
      ok = false;
    } else if (rcl_parse_arguments (argc, (const char *const *)argv, alloc, &opts.arguments) !=
               RCL_RET_OK) {
      *error = "ros-args \"" + o.ros_args + "\": " + rcl_error_text ();
      ok = false;
    } else {
      int unparsed = rcl_arguments_get_count_unparsed_ros (&opts.arguments);
      if (unparsed > 0) {
        *error = "ros-args \"" + o.ros_args + "\": " + std::to_string (unparsed) +
                 " argument(s) rcl does not understand (give remappings as -r from:=to, "
                 "parameters as -p name:=value)";
        ok = false;
      }
    }
    g_strfreev (argv);
  }
  if (ok) {
    node_ = rcl_get_zero_initialized_node ();
    if (rcl_node_init (&node_, o.name.c_str (), o.ns.c_str (), &context, &opts) != RCL_RET_OK) {
      *error = "cannot make ROS 2 node \"" + o.name + "\" in namespace \"" + o.ns +
               "\": " + rcl_error_text ();
      ok = false;
    }
  }
  if (rcl_node_options_fini (&opts) != RCL_RET_OK)
    rcl_reset_error ();
  if (!ok) {
    release_context ();
    return false;
  }
  open_ = true;
  sim_ = o.use_sim_time;
  sim_time_seen_ = false;
  if (rcl_ros_clock_init (&clock_, &alloc) != RCL_RET_OK) {
    *error = "rcl clock: " + rcl_error_text ();
    close ();
    return false;
  }
  clock_ok_ = true;
  if (sim_) {
    if (rcl_enable_ros_time_override (&clock_) != RCL_RET_OK) {
      *error = "use-sim-time: " + rcl_error_text ();
      close ();
      return false;
    }
    /* /clock as rclcpp's and rclpy's time sources take it: reliable, keep last 1... but a
     * best-effort subscription also matches a best-effort publisher (Gazebo's bridge). */
    if (!subscribe (&clock_sub_, ROSIDL_GET_MSG_TYPE_SUPPORT (rosgraph_msgs, msg, Clock), "/clock",
                    make_qos (QosPreset::kSensorData, 1), error)) {
      close ();
      return false;
    }
    clock_sub_ok_ = true;
  }
  guard_ = rcl_get_zero_initialized_guard_condition ();
  if (rcl_guard_condition_init (&guard_, &context, rcl_guard_condition_get_default_options ()) !=
      RCL_RET_OK) {
    *error = "rcl guard condition: " + rcl_error_text ();
    close ();
    return false;
  }
  guard_ok_ = true;
  ws_ = rcl_get_zero_initialized_wait_set ();
  if (rcl_wait_set_init (&ws_, 8, 1, 0, 0, 0, 0, &context, alloc) != RCL_RET_OK) {
    *error = "rcl wait set: " + rcl_error_text ();
    close ();
    return false;
  }
  ws_ok_ = true;
  return true;
}

void
Node::close ()
{
  if (!open_)
    return;
  if (ws_ok_ && rcl_wait_set_fini (&ws_) != RCL_RET_OK)
    rcl_reset_error ();
  ws_ok_ = false;
  if (guard_ok_ && rcl_guard_condition_fini (&guard_) != RCL_RET_OK)
    rcl_reset_error ();
  guard_ok_ = false;
  if (clock_sub_ok_)
    unsubscribe (&clock_sub_);
  clock_sub_ok_ = false;
  if (clock_ok_ && rcl_clock_fini (&clock_) != RCL_RET_OK)
    rcl_reset_error ();
  clock_ok_ = false;
  if (rcl_node_fini (&node_) != RCL_RET_OK)
    rcl_reset_error ();
  open_ = false;
  release_context ();
}

std::string
Node::fqn () const
{
  const char *n = open_ ? rcl_node_get_fully_qualified_name (&node_) : nullptr;
  return n ? n : "";
}

bool
Node::subscribe (rcl_subscription_t *sub, const rosidl_message_type_support_t *ts,
                 const std::string &topic, const rmw_qos_profile_t &qos, std::string *error)
{
  *sub = rcl_get_zero_initialized_subscription ();
  rcl_subscription_options_t so = rcl_subscription_get_default_options ();
  so.qos = qos;
  if (rcl_subscription_init (sub, &node_, ts, topic.c_str (), &so) != RCL_RET_OK) {
    *error = "cannot subscribe to \"" + topic + "\": " + rcl_error_text () + kEnvHint;
    return false;
  }
  return true;
}

bool
Node::advertise (rcl_publisher_t *pub, const rosidl_message_type_support_t *ts,
                 const std::string &topic, const rmw_qos_profile_t &qos, std::string *error)
{
  *pub = rcl_get_zero_initialized_publisher ();
  rcl_publisher_options_t po = rcl_publisher_get_default_options ();
  po.qos = qos;
  if (rcl_publisher_init (pub, &node_, ts, topic.c_str (), &po) != RCL_RET_OK) {
    *error = "cannot publish on \"" + topic + "\": " + rcl_error_text () + kEnvHint;
    return false;
  }
  return true;
}

void
Node::unsubscribe (rcl_subscription_t *sub)
{
  if (rcl_subscription_is_valid (sub) && rcl_subscription_fini (sub, &node_) != RCL_RET_OK)
    rcl_reset_error ();
  rcl_reset_error (); /* rcl_subscription_is_valid sets one when it is not */
  *sub = rcl_get_zero_initialized_subscription ();
}

void
Node::unadvertise (rcl_publisher_t *pub)
{
  if (rcl_publisher_is_valid (pub) && rcl_publisher_fini (pub, &node_) != RCL_RET_OK)
    rcl_reset_error ();
  rcl_reset_error ();
  *pub = rcl_get_zero_initialized_publisher ();
}

std::string
Node::resolve (const std::string &topic) const
{
  char *out = nullptr;
  rcl_allocator_t alloc = rcl_get_default_allocator ();
  if (!open_ ||
      rcl_node_resolve_name (&node_, topic.c_str (), alloc, false, false, &out) != RCL_RET_OK) {
    rcl_reset_error ();
    return topic;
  }
  std::string r = out;
  alloc.deallocate (out, alloc.state);
  return r;
}

bool
Node::now (int64_t *ns)
{
  if (!clock_ok_)
    return false;
  if (sim_) {
    take_clock ();
    if (!sim_time_seen_)
      return false;
  }
  rcl_time_point_value_t t = 0;
  if (rcl_clock_get_now (&clock_, &t) != RCL_RET_OK) {
    rcl_reset_error ();
    return false;
  }
  *ns = t;
  return true;
}

void
Node::take_clock ()
{
  if (!clock_sub_ok_)
    return;
  for (int i = 0; i < 64; i++) {
    rosgraph_msgs__msg__Clock m;
    rosgraph_msgs__msg__Clock__init (&m);
    rmw_message_info_t info;
    const rcl_ret_t r = rcl_take (&clock_sub_, &m, &info, nullptr);
    if (r == RCL_RET_OK) {
      const int64_t t = (int64_t)m.clock.sec * 1000000000 + m.clock.nanosec;
      if (rcl_set_ros_time_override (&clock_, t) == RCL_RET_OK)
        sim_time_seen_ = true;
      else
        rcl_reset_error ();
    } else {
      rcl_reset_error ();
    }
    rosgraph_msgs__msg__Clock__fini (&m);
    if (r != RCL_RET_OK)
      break;
  }
}

bool
Node::wait (rcl_subscription_t *const *subs, size_t n, int64_t timeout_ns, std::vector<bool> *ready,
            std::string *error)
{
  ready->assign (n, false);
  if (!ws_ok_ || n + 1 > 8) {
    *error = "wait: no wait set";
    return false;
  }
  if (rcl_wait_set_clear (&ws_) != RCL_RET_OK) {
    *error = "rcl_wait_set_clear: " + rcl_error_text ();
    return false;
  }
  std::vector<size_t> idx (n, 0);
  for (size_t i = 0; i < n; i++)
    if (rcl_wait_set_add_subscription (&ws_, subs[i], &idx[i]) != RCL_RET_OK) {
      *error = "rcl_wait_set_add_subscription: " + rcl_error_text ();
      return false;
    }
  size_t clock_idx = 0;
  if (clock_sub_ok_ && rcl_wait_set_add_subscription (&ws_, &clock_sub_, &clock_idx) != RCL_RET_OK)
    rcl_reset_error ();
  if (rcl_wait_set_add_guard_condition (&ws_, &guard_, nullptr) != RCL_RET_OK) {
    *error = "rcl_wait_set_add_guard_condition: " + rcl_error_text ();
    return false;
  }
  const rcl_ret_t r = rcl_wait (&ws_, timeout_ns);
  if (r == RCL_RET_TIMEOUT) {
    rcl_reset_error ();
    return true;
  }
  if (r != RCL_RET_OK) {
    *error = "rcl_wait: " + rcl_error_text ();
    return false;
  }
  for (size_t i = 0; i < n; i++)
    (*ready)[i] = ws_.subscriptions[idx[i]] != nullptr;
  if (clock_sub_ok_)
    take_clock ();
  return true;
}

void
Node::wake ()
{
  if (guard_ok_ && rcl_trigger_guard_condition (&guard_) != RCL_RET_OK)
    rcl_reset_error ();
}

} // namespace pi0::ros
