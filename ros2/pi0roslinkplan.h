/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the ros2:// link of pi0actionsink publishes for each frame the sink's session sends, and
 * what it reports back as the robot's FEEDBACK (docs/ros2.md, "Actions out"). No rcl here: the
 * link (pi0roslink.cpp) turns Commands into messages and publishes them; the tests check the
 * plan without ROS 2.
 *
 * The robot behind the link is a ros2_control controller: a JointTrajectoryController executes a
 * trajectory from its header.stamp on, point i at stamp + time_from_start; a forward command
 * controller takes each Float64MultiArray at once. Timing follows the protocol's rule for a
 * robot (docs/protocol.md, "Timing of rows"): the first row sent of a chunk starts when it is
 * sent, the next one step period later, and so on. */

#include "protocol/pi0frame.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace pi0::ros
{

enum class LinkMode {
  kTrajectory, /* trajectory_msgs/JointTrajectory, a whole chunk per message */
  kCommands,   /* std_msgs/Float64MultiArray, one row per message on the sink's ticks */
};

struct Command {
  enum class Kind {
    kTrajectory, /* points from start_ns on, period_ns apart (one point: hold there) */
    kStop,       /* an empty trajectory: the controller stops where it is */
    kPosition,   /* kCommands: one position now */
  };
  Kind kind = Kind::kTrajectory;
  uint64_t start_ns = 0;  /* running time of the first point */
  uint64_t period_ns = 0; /* between points */
  std::vector<std::vector<double>> points;
  /* What it came from (for the counters and the log). */
  proto::Kind from = proto::Kind::kAction;
  uint64_t chunk_id = 0;
  uint32_t first_step = 0;
};

struct LinkPlanCounters {
  uint64_t trajectories = 0, stops = 0, positions = 0, holds = 0;
  uint64_t refused = 0;  /* frames that did not decode (never expected: the sink made them) */
  uint64_t feedback = 0; /* FEEDBACK frames made */
};

class LinkPlan
{
public:
  LinkPlan (LinkMode mode, unsigned dim) : mode_ (mode), dim_ (dim) {}

  /* One frame from the sink, sent at its send_time_ns; @measured: the robot's measured joint
   * positions now, in the configuration's order (nullptr: none fresh). Appends what to publish. */
  void frame (const uint8_t *data, size_t len, const std::vector<float> *measured,
              std::vector<Command> &out);
  /* The FEEDBACK frame to send back at running time @now, when a row of the chunk being executed
   * started since the last report (chunk mode, trajectories only); @robot_alive: joint states
   * are arriving (a controller that is gone executes nothing). */
  bool feedback (uint64_t now, bool robot_alive, std::vector<uint8_t> *frame);
  const LinkPlanCounters &counters () const { return c_; }

private:
  LinkMode mode_;
  unsigned dim_;
  LinkPlanCounters c_;
  uint64_t session_ = 0;
  uint64_t fb_seq_ = 0;
  /* The chunk being executed (the last trajectory published from an ACTION chunk). */
  bool have_chunk_ = false;
  uint64_t chunk_id_ = 0;
  uint32_t first_ = 0, steps_ = 0;
  uint64_t start_ns_ = 0, period_ns_ = 0;
  int64_t reported_row_ = -1;
};

} // namespace pi0::ros
