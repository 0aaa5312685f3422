/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS
G_GNUC_INTERNAL void gst_pi0_meta_debug_ensure (void);
/* The _full adders' one refusal they share: FALSE with a GST_PI0_ERROR_NOT_WRITABLE error when
 * @buffer cannot take a meta. */
G_GNUC_INTERNAL gboolean gst_pi0_meta_check_writable (GstBuffer *buffer, GError **error);
G_END_DECLS
