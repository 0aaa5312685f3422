/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/base/gstbasesink.h>

G_BEGIN_DECLS

#define GST_TYPE_PI0_LEROBOT_SINK (gst_pi0_lerobot_sink_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0LeRobotSink, gst_pi0_lerobot_sink, GST, PI0_LEROBOT_SINK, GstBaseSink)

typedef enum {
  GST_PI0_LEROBOT_ENCODER_AUTO = 0,
  GST_PI0_LEROBOT_ENCODER_X264 = 1,
  GST_PI0_LEROBOT_ENCODER_NVH264 = 2,
} GstPi0LeRobotEncoder;

/* What a gap in an episode's frames does (pi0lerobotsink's gap-action). */
typedef enum {
  GST_PI0_LEROBOT_GAP_KEEP = 0,
  GST_PI0_LEROBOT_GAP_SPLIT = 1,
} GstPi0LeRobotGapAction;

GType gst_pi0_lerobot_encoder_get_type (void);
#define GST_TYPE_PI0_LEROBOT_ENCODER (gst_pi0_lerobot_encoder_get_type ())
GType gst_pi0_lerobot_gap_action_get_type (void);

GST_ELEMENT_REGISTER_DECLARE (pi0lerobotsink);

G_END_DECLS
