/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/base/gstbasetransform.h>

#include "gst/infer/gstpi0inferenums.h"

G_BEGIN_DECLS

#define GST_TYPE_PI0_INFER (gst_pi0_infer_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0Infer, gst_pi0_infer, GST, PI0_INFER, GstBaseTransform)

GST_ELEMENT_REGISTER_DECLARE (pi0infer);

G_END_DECLS
