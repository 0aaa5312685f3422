/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The per-stage latency table that pi0-demo and bench/e2e print, read from pi0actionsink's
 * `stats` (which it computes from the stamps in the metas). Header-only: two programs use it. */
#pragma once

#include "gst/actionsink/pi0stagelatency.h"

#include <gst/gst.h>

#include <string>

namespace pi0::tools
{

/* Prints one row per stage (p50, p99, max in ms); returns the number of chunks measured. */
inline guint64
print_latency_table (GstElement *sink, const char *indent = "  ")
{
  GstStructure *s = nullptr;
  g_object_get (sink, "stats", &s, nullptr);
  if (!s)
    return 0;
  guint64 n = 0;
  gst_structure_get_uint64 (s, "latency-chunks", &n);
  g_print ("%s%-36s %9s %9s %9s\n", indent, "stage (ms)", "p50", "p99", "max");
  for (const pi0::Stage &r : pi0::kStages) {
    guint64 v[3] = {0, 0, 0};
    const char *suffix[3] = {"-p50", "-p99", "-max"};
    bool have = true;
    for (int i = 0; i < 3; i++)
      have =
          gst_structure_get_uint64 (s, (std::string (r.name) + suffix[i]).c_str (), &v[i]) && have;
    if (have)
      g_print ("%s%-36s %9.2f %9.2f %9.2f\n", indent, r.what, (double)v[0] / GST_MSECOND,
               (double)v[1] / GST_MSECOND, (double)v[2] / GST_MSECOND);
    else
      g_print ("%s%-36s %9s %9s %9s\n", indent, r.what, "-", "-", "-");
  }
  gst_structure_free (s);
  return n;
}

} // namespace pi0::tools
