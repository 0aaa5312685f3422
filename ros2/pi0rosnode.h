/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A ROS 2 node on rcl, as each element of the pi0ros2 plugin holds one (docs/ros2.md, "Nodes"):
 * the process's rcl context (made by the first node, shut down with the last, so that nothing of
 * rcl runs once every element is gone), the node with its name, namespace and --ros-args, the
 * node's clock (ROS time: the system's, or /clock's with use_sim_time), QoS presets, and a wait
 * that another thread can cut short. No GStreamer. A Node is used by one thread at a time except
 * wake(). */

#include <rcl/error_handling.h>
#include <rcl/rcl.h>
#include <rmw/qos_profiles.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pi0::ros
{

/* QoS of a subscription or publisher (docs/ros2.md, "QoS"). kSensorData is best effort: it
 * takes messages from reliable and best-effort publishers alike; kReliable matches reliable
 * publishers only. */
enum class QosPreset { kSensorData, kReliable, kSystemDefault };
rmw_qos_profile_t make_qos (QosPreset p, int depth);
/* "sensor-data", "reliable" or "system-default" into @out; false for anything else. */
bool parse_qos (const std::string &name, QosPreset *out);

/* rcl's last error message (and clears it). */
std::string rcl_error_text ();

struct NodeOptions {
  std::string name;     /* node name; rcl checks it */
  std::string ns;       /* namespace, "" = "/" */
  std::string ros_args; /* this node's own arguments: "-r old:=new -p use_sim_time:=true" */
  bool use_sim_time = false;
};

class Node
{
public:
  Node () = default;
  ~Node () { close (); }
  Node (const Node &) = delete;
  Node &operator= (const Node &) = delete;

  /* Makes the node (and the process's context if it is the first). False with a message. */
  bool open (const NodeOptions &o, std::string *error);
  /* Destroys what open() made, in order; the last node shuts the context down. */
  void close ();
  /* The fully qualified name, e.g. "/robot1/pi0rosjointsrc0". */
  std::string fqn () const;

  bool subscribe (rcl_subscription_t *sub, const rosidl_message_type_support_t *ts,
                  const std::string &topic, const rmw_qos_profile_t &qos, std::string *error);
  bool advertise (rcl_publisher_t *pub, const rosidl_message_type_support_t *ts,
                  const std::string &topic, const rmw_qos_profile_t &qos, std::string *error);
  void unsubscribe (rcl_subscription_t *sub);
  void unadvertise (rcl_publisher_t *pub);
  /* The topic name after remapping and namespace (what `ros2 topic list` shows). */
  std::string resolve (const std::string &topic) const;

  /* ROS time now, ns: the system's, or with use_sim_time the last /clock message's (false
   * before the first one). */
  bool now (int64_t *ns);
  /* use_sim_time: takes the /clock messages waiting. */
  void take_clock ();

  /* Waits until one of @subs has a message, wake() is called or @timeout_ns passes (also
   * takes /clock messages). ready[i] says which subscriptions have something. False on an rcl
   * error (message in *error). */
  bool wait (rcl_subscription_t *const *subs, size_t n, int64_t timeout_ns,
             std::vector<bool> *ready, std::string *error);
  /* From any thread: ends a wait() in progress (or the next one) at once. */
  void wake ();

private:
  bool open_ = false;
  bool sim_ = false;
  rcl_node_t node_ = rcl_get_zero_initialized_node ();
  rcl_clock_t clock_{};
  bool clock_ok_ = false;
  bool sim_time_seen_ = false;
  rcl_subscription_t clock_sub_ = rcl_get_zero_initialized_subscription ();
  bool clock_sub_ok_ = false;
  rcl_guard_condition_t guard_ = rcl_get_zero_initialized_guard_condition ();
  bool guard_ok_ = false;
  rcl_wait_set_t ws_ = rcl_get_zero_initialized_wait_set ();
  bool ws_ok_ = false;
};

} // namespace pi0::ros
