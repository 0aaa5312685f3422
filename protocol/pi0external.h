/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A robot link that lives outside pi0actionsink's own code: `ros2://` targets, served by the
 * pi0ros2 plugin (gst/ros2/, built with -Dros2), which links ROS 2's rcl. The sink must load and
 * run without ROS 2 installed, so it links nothing of it: it finds this table in the pi0ros2
 * plugin at start (gst/actionsink) and hands it to the transport, which then gives the link
 * exactly the binary frames it would have sent over UDP or TCP (docs/protocol.md, after every
 * check of the sender's session) and takes back the FEEDBACK frames the link makes up for the
 * robot. A plain C table, versioned, so that a plugin of another build refuses cleanly. */

#include <cstddef>
#include <cstdint>

extern "C" {

#define PI0_EXTERNAL_LINK_ABI 1u

typedef void (*Pi0ExternalFrameFunc) (void *user_data, const uint8_t *data, size_t len);

typedef struct {
  uint32_t abi;       /* PI0_EXTERNAL_LINK_ABI */
  const char *scheme; /* the target's URI scheme, e.g. "ros2" */
  /* Opens the link for @uri (the whole target). @joints: the robot configuration's joint names,
   * @n_joints of them. NULL with *error (g_malloc'd) on failure. */
  void *(*open) (const char *uri, const char *const *joints, unsigned n_joints, char **error);
  /* One encoded binary frame (no HMAC). 0: taken; 1: dropped (nobody to take it). */
  int (*send) (void *link, const uint8_t *data, size_t len);
  /* Does the link's own work (messages from the robot side) and hands each frame the robot
   * sends back (FEEDBACK) to @on_frame. @now_ns: the sender's running time now. */
  void (*pump) (void *link, uint64_t now_ns, Pi0ExternalFrameFunc on_frame, void *user_data);
  /* 1 when the link can carry frames now. */
  int (*up) (void *link);
  void (*close) (void *link);
} Pi0ExternalLink;

/* The symbol the pi0ros2 plugin exports. */
#define PI0_EXTERNAL_LINK_SYMBOL "pi0_ros2_external_link"
typedef const Pi0ExternalLink *(*Pi0ExternalLinkGetFunc) (void);
}
