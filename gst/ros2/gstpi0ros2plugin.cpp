/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The pi0ros2 plugin (docs/ros2.md): ROS 2 sources, and the ros2:// link that pi0actionsink
 * finds here (protocol/pi0external.h). A plugin of its own so that the pi0 plugin loads on
 * machines without ROS 2. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/ros2/gstpi0rosimagesrc.h"
#include "gst/ros2/gstpi0rosjointsrc.h"
#include "ros2/pi0roslink.h"

#include <gmodule.h>
#include <gst/gst.h>

/* What pi0actionsink looks up (PI0_EXTERNAL_LINK_SYMBOL). */
extern "C" G_MODULE_EXPORT const Pi0ExternalLink *pi0_ros2_external_link (void);

const Pi0ExternalLink *
pi0_ros2_external_link (void)
{
  return pi0_ros2_link_table ();
}

static gboolean
plugin_init (GstPlugin *plugin)
{
  gboolean ok = TRUE;
  ok &= GST_ELEMENT_REGISTER (pi0rosjointsrc, plugin);
  ok &= GST_ELEMENT_REGISTER (pi0rosimagesrc, plugin);
  return ok;
}

GST_PLUGIN_DEFINE (GST_VERSION_MAJOR, GST_VERSION_MINOR, pi0ros2,
                   "Pi0 on ROS 2: camera and joint-state sources, and the ros2:// target of "
                   "pi0actionsink",
                   plugin_init, VERSION, GST_LICENSE, GST_PACKAGE_NAME, GST_PACKAGE_ORIGIN)
