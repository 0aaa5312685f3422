/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The ros2:// link of pi0actionsink (docs/ros2.md, "Actions out"): a ROS 2 node that publishes
 * what the sink's session sends, after all of the sink's checks, as trajectory_msgs/
 * JointTrajectory (a JointTrajectoryController) or std_msgs/Float64MultiArray (a forward command
 * controller), reads /joint_states for the robot's measured position (HOLD) and its liveness,
 * and reports what the controller executes back to the sink as FEEDBACK frames. Served to the
 * sink through the table of protocol/pi0external.h. No GStreamer. */

#include "protocol/pi0external.h"

/* The table the pi0ros2 plugin exports. */
const Pi0ExternalLink *pi0_ros2_link_table (void);
