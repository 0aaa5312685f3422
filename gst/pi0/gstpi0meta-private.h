/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS
G_GNUC_INTERNAL void gst_pi0_meta_debug_ensure (void);
G_END_DECLS
