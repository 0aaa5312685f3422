/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/base/gstaggregator.h>

G_BEGIN_DECLS

#define GST_TYPE_PI0_VIEW_MUX_PAD (gst_pi0_view_mux_pad_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0ViewMuxPad, gst_pi0_view_mux_pad, GST, PI0_VIEW_MUX_PAD,
                      GstAggregatorPad)

#define GST_TYPE_PI0_VIEW_MUX (gst_pi0_view_mux_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0ViewMux, gst_pi0_view_mux, GST, PI0_VIEW_MUX, GstAggregator)

GST_ELEMENT_REGISTER_DECLARE (pi0viewmux);

/* Enum types of the element's properties (registered for gst-inspect and bindings). */
#define GST_TYPE_PI0_VIEW_MUX_VIEW (gst_pi0_view_mux_view_get_type ())
GType gst_pi0_view_mux_view_get_type (void);
#define GST_TYPE_PI0_VIEW_MUX_TIMESTAMPS (gst_pi0_view_mux_timestamps_get_type ())
GType gst_pi0_view_mux_timestamps_get_type (void);

G_END_DECLS
