/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Observation buffers for the cudaprep tests (cpu and gpu suites). */

#include "tests/pi0testprepreference.h"

#include <gst/pi0/pi0.h>
#include <gst/video/video.h>

#include <vector>

namespace pi0test
{

inline GstVideoFormat
to_gst (pi0::prep::Format f)
{
  switch (f) {
    case pi0::prep::Format::RGB:
      return GST_VIDEO_FORMAT_RGB;
    case pi0::prep::Format::BGR:
      return GST_VIDEO_FORMAT_BGR;
    case pi0::prep::Format::RGBx:
      return GST_VIDEO_FORMAT_RGBx;
    case pi0::prep::Format::BGRx:
      return GST_VIDEO_FORMAT_BGRx;
    case pi0::prep::Format::xRGB:
      return GST_VIDEO_FORMAT_xRGB;
    case pi0::prep::Format::xBGR:
      return GST_VIDEO_FORMAT_xBGR;
    case pi0::prep::Format::RGBA:
      return GST_VIDEO_FORMAT_RGBA;
    case pi0::prep::Format::BGRA:
      return GST_VIDEO_FORMAT_BGRA;
    case pi0::prep::Format::ARGB:
      return GST_VIDEO_FORMAT_ARGB;
    case pi0::prep::Format::ABGR:
      return GST_VIDEO_FORMAT_ABGR;
    case pi0::prep::Format::GRAY8:
      return GST_VIDEO_FORMAT_GRAY8;
    case pi0::prep::Format::NV12:
      return GST_VIDEO_FORMAT_NV12;
    case pi0::prep::Format::I420:
      return GST_VIDEO_FORMAT_I420;
    case pi0::prep::Format::NV21:
      return GST_VIDEO_FORMAT_NV21;
    case pi0::prep::Format::YV12:
      return GST_VIDEO_FORMAT_YV12;
    case pi0::prep::Format::Y42B:
      return GST_VIDEO_FORMAT_Y42B;
    case pi0::prep::Format::Y444:
      return GST_VIDEO_FORMAT_Y444;
    case pi0::prep::Format::YUY2:
      return GST_VIDEO_FORMAT_YUY2;
    case pi0::prep::Format::UYVY:
      return GST_VIDEO_FORMAT_UYVY;
  }
  return GST_VIDEO_FORMAT_UNKNOWN;
}

inline /* Appends @f as one memory (planes back to back, with their strides) and a valid view. The
 * frame's YUV matrix is set to what the element derives from the view's colorimetry. */
    void
    add_frame_view (GstBuffer *buf, GstPi0ObservationMeta *meta, const char *name, Frame &f)
{
  GstPi0View *v = gst_pi0_observation_meta_add_view (meta, name);
  gst_video_info_set_format (&v->info, to_gst (f.format), f.width, f.height);
  f.yuv = pi0::prep::make_yuv_matrix (f.height > 576 ? 0.2126 : 0.299,
                                    f.height > 576 ? 0.0722 : 0.114, false);
  std::vector<uint8_t> bytes;
  for (int p = 0; p < pi0::prep::format_n_planes (f.format); p++) {
    v->info.offset[p] = bytes.size ();
    v->info.stride[p] = (gint)f.strides[p];
    bytes.insert (bytes.end (), f.planes[p].begin (), f.planes[p].end ());
  }
  v->info.size = bytes.size ();
  v->flags = GST_PI0_VIEW_FLAG_VALID;
  v->mem_index = gst_buffer_n_memory (buf);
  v->n_mem = 1;
  gpointer copy = g_memdup2 (bytes.data (), bytes.size ());
  gst_buffer_append_memory (buf,
                            gst_memory_new_wrapped (GST_MEMORY_FLAG_READONLY, copy, bytes.size (),
                                                    0, bytes.size (), copy, g_free));
}

} // namespace pi0test
