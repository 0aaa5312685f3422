/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstpi0elements.h"
#include "gstpi0actionsink.h"
#include "gstpi0viewmux.h"

#include "gstcudaprep.h"

gboolean
gst_pi0_elements_register (GstPlugin *plugin)
{
  gboolean ok = TRUE;

  /* Every element registers even without CUDA or LibTorch, so gst-inspect, caps and property
   * tests work everywhere; elements that cannot run fail in start() with a clear error. */
  ok &= GST_ELEMENT_REGISTER (pi0viewmux, plugin);
  ok &= GST_ELEMENT_REGISTER (pi0actionsink, plugin);
  ok &= GST_ELEMENT_REGISTER (cudaprep, plugin);
  return ok;
}
