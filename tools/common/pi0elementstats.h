/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One guint64 field of a gst-pi0 element's read-only `stats` structure, for the tools. */
#pragma once

#include <gst/gst.h>

namespace pi0::tools
{

/* @field of @element's `stats`, 0 when the structure or the field is absent. */
inline guint64
stat_u64 (GstElement *element, const char *field)
{
  GstStructure *s = nullptr;
  g_object_get (element, "stats", &s, nullptr);
  guint64 v = 0;
  if (s) {
    gst_structure_get_uint64 (s, field, &v);
    gst_structure_free (s);
  }
  return v;
}

} // namespace pi0::tools
