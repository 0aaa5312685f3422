/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_PI0_OVERLAY (gst_pi0_overlay_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0Overlay, gst_pi0_overlay, GST, PI0_OVERLAY, GstElement)

typedef enum {
  GST_PI0_OVERLAY_PLOT,
  GST_PI0_OVERLAY_PLANAR,
} GstPi0OverlayMode;

GType gst_pi0_overlay_mode_get_type (void);
#define GST_TYPE_PI0_OVERLAY_MODE (gst_pi0_overlay_mode_get_type ())

GST_ELEMENT_REGISTER_DECLARE (pi0overlay);

G_END_DECLS
