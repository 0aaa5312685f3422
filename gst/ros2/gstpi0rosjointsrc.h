/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "gst/ros2/pi0rossrc.h"

G_BEGIN_DECLS

#define GST_TYPE_PI0_ROS_JOINT_SRC (gst_pi0_ros_joint_src_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0RosJointSrc, gst_pi0_ros_joint_src, GST, PI0_ROS_JOINT_SRC,
                      GstPi0RosSrc)
GST_ELEMENT_REGISTER_DECLARE (pi0rosjointsrc);

G_END_DECLS
