/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/pi0/pi0.h"
#include "gst/pi0/gstpi0meta-private.h"

GST_DEBUG_CATEGORY (gst_pi0_meta_debug);

void
gst_pi0_meta_debug_ensure (void)
{
  static gsize done = 0;

  if (g_once_init_enter (&done)) {
    GST_DEBUG_CATEGORY_INIT (gst_pi0_meta_debug, "pi0meta", 0, "gst-pi0 metas");
    g_once_init_leave (&done, 1);
  }
}
