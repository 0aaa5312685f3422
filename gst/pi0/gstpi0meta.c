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

/**
 * gst_pi0_error_quark:
 *
 * Returns: the #GST_PI0_ERROR domain.
 *
 * Since: 0.4
 */
/* clang-format reads the quark's name as a subtraction and spaces it out, which would make the
 * domain's string (GLib.Error.domain from Python) "gst - pi0 - error - quark". */
/* clang-format off */
G_DEFINE_QUARK (gst-pi0-error-quark, gst_pi0_error)
/* clang-format on */

/**
 * gst_pi0_error_get_type:
 *
 * The #GstPi0Error enum as a GType, for bindings.
 *
 * Since: 0.4
 */
GType
gst_pi0_error_get_type (void)
{
  static gsize id = 0;
  static const GEnumValue values[] = {
      {GST_PI0_ERROR_INVALID, "GST_PI0_ERROR_INVALID", "invalid"},
      {GST_PI0_ERROR_NOT_WRITABLE, "GST_PI0_ERROR_NOT_WRITABLE", "not-writable"},
      {GST_PI0_ERROR_UNAVAILABLE, "GST_PI0_ERROR_UNAVAILABLE", "unavailable"},
      {0, NULL, NULL}};
  if (g_once_init_enter (&id))
    g_once_init_leave (&id, g_enum_register_static ("GstPi0Error", values));
  return (GType)id;
}

gboolean
gst_pi0_meta_check_writable (GstBuffer *buffer, GError **error)
{
  if (gst_buffer_is_writable (buffer))
    return TRUE;
  g_set_error (error, GST_PI0_ERROR, GST_PI0_ERROR_NOT_WRITABLE,
               "the buffer is not writable: metas can only be added to a buffer with one "
               "reference");
  return FALSE;
}
