/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The GStreamer pieces that the lock-step loop (pi0simloop.cpp) and the robot's end across a
 * network (pi0simremote.cpp) both use, beside the tools' own (tools/common/pi0gsttools.h): the
 * sim's cameras as the chain's views, a camera frame drawn into a buffer, and a timed push into
 * an appsrc. */
#pragma once

#include "tools/common/pi0gsttools.h"
#include "sim/pi0simrender.h"
#include "sim/pi0simworld.h"

#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <string>

namespace pi0::tools::sim
{

using pi0::sim::Camera;
using pi0::sim::World;

/* The sim's cameras on the chain's pads, in their order: the overhead camera is the base
 * (main) view, the wrist camera the side (left wrist) one, the front camera the top one. */
struct Feed {
  const char *pad;
  Camera camera;
};
inline constexpr Feed kFeeds[] = {{pi0::kViewNames[0], Camera::Overhead},
                                  {pi0::kViewNames[1], Camera::Wrist},
                                  {pi0::kViewNames[2], Camera::Front}};

/* @camera's view of @w as a packed RGB buffer of @width x @height, or nullptr (*error says
 * why). */
inline GstBuffer *
camera_frame (const World &w, Camera camera, int width, int height, std::string *error)
{
  GstVideoInfo info;
  gst_video_info_set_format (&info, GST_VIDEO_FORMAT_RGB, width, height);
  GstBuffer *buf = gst_buffer_new_allocate (nullptr, GST_VIDEO_INFO_SIZE (&info), nullptr);
  GstMapInfo map;
  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  const bool drawn =
      render (w, camera, width, height, map.data, GST_VIDEO_INFO_PLANE_STRIDE (&info, 0), error);
  gst_buffer_unmap (buf, &map);
  if (!drawn) {
    gst_buffer_unref (buf);
    return nullptr;
  }
  return buf;
}

/* @buf (taken) into the appsrc @src at running time @t, lasting @duration. */
inline bool
push_timed (GstElement *src, GstBuffer *buf, GstClockTime t, GstClockTime duration)
{
  GST_BUFFER_PTS (buf) = t;
  GST_BUFFER_DTS (buf) = t;
  GST_BUFFER_DURATION (buf) = duration;
  return gst_app_src_push_buffer (GST_APP_SRC (src), buf) == GST_FLOW_OK;
}

} // namespace pi0::tools::sim
