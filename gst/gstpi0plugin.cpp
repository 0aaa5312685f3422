/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/gstpi0elements.h"

static gboolean
plugin_init (GstPlugin *plugin)
{
  return gst_pi0_elements_register (plugin);
}

/* The loader finds gst_plugin_pi0_get_desc from the file name libgstpi0.so. */
GST_PLUGIN_DEFINE (GST_VERSION_MAJOR, GST_VERSION_MINOR, pi0,
                   "Pi0 vision-language-action policies: camera muxing, GPU preprocessing, "
                   "inference and safe action output",
                   plugin_init, VERSION, GST_LICENSE, GST_PACKAGE_NAME, GST_PACKAGE_ORIGIN)
