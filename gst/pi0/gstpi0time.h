/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/pi0/pi0-prelude.h>

G_BEGIN_DECLS

GST_PI0_API GstClockTime gst_pi0_element_get_running_time (GstElement *element);

G_END_DECLS
