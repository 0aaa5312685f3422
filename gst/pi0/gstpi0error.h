/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/pi0/pi0-prelude.h>

G_BEGIN_DECLS

/**
 * GST_PI0_ERROR:
 *
 * The error domain of the library's functions that report bad input as a #GError (the
 * companions made for language bindings, where a GLib critical would only be a log line).
 *
 * Since: 0.4
 */
#define GST_PI0_ERROR (gst_pi0_error_quark ())

/**
 * GstPi0Error:
 * @GST_PI0_ERROR_INVALID: an argument is out of range or its size does not match the others
 * @GST_PI0_ERROR_NOT_WRITABLE: the buffer must be writable (hold the only reference to it)
 * @GST_PI0_ERROR_UNAVAILABLE: the data is not where the caller can read it (device memory)
 *
 * Error codes in the #GST_PI0_ERROR domain.
 *
 * Since: 0.4
 */
typedef enum {
  GST_PI0_ERROR_INVALID = 0,
  GST_PI0_ERROR_NOT_WRITABLE = 1,
  GST_PI0_ERROR_UNAVAILABLE = 2,
} GstPi0Error;

GST_PI0_API GQuark gst_pi0_error_quark (void);

GST_PI0_API GType gst_pi0_error_get_type (void);
#define GST_TYPE_PI0_ERROR (gst_pi0_error_get_type ())

G_END_DECLS
