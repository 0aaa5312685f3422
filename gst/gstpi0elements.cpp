/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/gstpi0elements.h"
#include "gst/actionsink/gstpi0actionsink.h"
#include "gst/viewmux/gstpi0viewmux.h"

#include "gst/cudaprep/gstcudaprep.h"
#ifdef HAVE_PI0INFER
#include "gst/infer/gstpi0infer.h"
#endif
#ifdef HAVE_PI0LEROBOT
#include "gst/lerobot/gstpi0lerobotsink.h"
#include "gst/lerobot/gstpi0lerobotsrc.h"
#endif
#ifdef HAVE_PI0OVERLAY
#include "gst/overlay/gstpi0overlay.h"
#endif
#ifdef HAVE_PI0SERVE
#include "gst/serve/gstpi0servesink.h"
#include "gst/serve/gstpi0servesrc.h"
#endif

gboolean
gst_pi0_elements_register (GstPlugin *plugin)
{
  gboolean ok = TRUE;

  /* Every element but pi0infer registers without CUDA or LibTorch too, so gst-inspect, caps and
   * property tests work everywhere; an element that cannot run fails in start() with a clear
   * error. pi0infer exists only in builds with LibTorch. */
  ok &= GST_ELEMENT_REGISTER (pi0viewmux, plugin);
  ok &= GST_ELEMENT_REGISTER (pi0actionsink, plugin);
  ok &= GST_ELEMENT_REGISTER (cudaprep, plugin);
#ifdef HAVE_PI0INFER
  ok &= GST_ELEMENT_REGISTER (pi0infer, plugin);
#endif
#ifdef HAVE_PI0LEROBOT
  ok &= GST_ELEMENT_REGISTER (pi0lerobotsink, plugin);
  ok &= GST_ELEMENT_REGISTER (pi0lerobotsrc, plugin);
#endif
#ifdef HAVE_PI0OVERLAY
  ok &= GST_ELEMENT_REGISTER (pi0overlay, plugin);
#endif
#ifdef HAVE_PI0SERVE
  ok &= GST_ELEMENT_REGISTER (pi0servesrc, plugin);
  ok &= GST_ELEMENT_REGISTER (pi0servesink, plugin);
#endif
  return ok;
}
