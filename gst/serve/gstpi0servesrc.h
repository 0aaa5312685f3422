/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/base/gstpushsrc.h>

G_BEGIN_DECLS

#define GST_TYPE_PI0_SERVE_SRC (gst_pi0_serve_src_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0ServeSrc, gst_pi0_serve_src, GST, PI0_SERVE_SRC, GstPushSrc)

GST_ELEMENT_REGISTER_DECLARE (pi0servesrc);

G_END_DECLS
