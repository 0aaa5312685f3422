/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* Registers every element of the plugin. @plugin may be NULL for static registration (tests,
 * applications that link the elements in). */
gboolean gst_pi0_elements_register (GstPlugin *plugin);

G_END_DECLS
