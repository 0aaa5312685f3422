/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Python tests' oracle (tests/libs/gstpi0/gi/test_gstpi0_gi.py): what the C API and the C
 * compiler say about a buffer's metas and the structs' layout, reached from Python through its
 * own small typelib (Pi0TestOracle-1.0, never installed), so that every value read through
 * GstPi0-1.0 is held against C on the very same buffer. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

gchar *pi0_test_oracle_describe (GstBuffer *buffer);

gchar *pi0_test_oracle_layout (void);

GstBuffer *pi0_test_oracle_make_buffer (void);

guint64 pi0_test_oracle_actions_address (GstBuffer *buffer);

GstBuffer *pi0_test_oracle_make_device_tensor_buffer (void);

G_END_DECLS
