/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_PI0_LEROBOT_SRC (gst_pi0_lerobot_src_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0LeRobotSrc, gst_pi0_lerobot_src, GST, PI0_LEROBOT_SRC, GstBin)

GST_ELEMENT_REGISTER_DECLARE (pi0lerobotsrc);

G_END_DECLS
