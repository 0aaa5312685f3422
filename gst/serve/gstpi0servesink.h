/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/base/gstbasesink.h>

G_BEGIN_DECLS

#define GST_TYPE_PI0_SERVE_SINK (gst_pi0_serve_sink_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0ServeSink, gst_pi0_serve_sink, GST, PI0_SERVE_SINK, GstBaseSink)

GST_ELEMENT_REGISTER_DECLARE (pi0servesink);

G_END_DECLS
