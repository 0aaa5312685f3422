/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Leak checks through GStreamer's leaks tracer (the test runs with GST_TRACERS=leaks). Its
 * activity checkpoints list types and addresses only and take no references, so they are
 * safe mid-run, unlike get-live-objects. */

#include <gst/gst.h>

#include <map>
#include <string>
#include <utility>

namespace pi0test
{

/* The active leaks tracer (a new reference), or nullptr. */
inline GstTracer *
leaks_tracer ()
{
  GstTracer *found = nullptr;
  GList *tracers = gst_tracing_get_active_tracers ();
  for (GList *l = tracers; l; l = l->next) {
    if (!found && g_str_equal (G_OBJECT_TYPE_NAME (l->data), "GstLeaksTracer"))
      found = (GstTracer *)gst_object_ref (l->data);
  }
  g_list_free_full (tracers, gst_object_unref);
  return found;
}

/* Objects created since "activity-start-tracking" (or the last checkpoint) and not destroyed
 * since, by type name. */
inline std::map<std::string, int>
alive_since_start (GstTracer *tracer)
{
  std::map<std::pair<std::string, std::string>, int> balance;
  std::map<std::string, int> out;
  GstStructure *cp = nullptr;
  g_signal_emit_by_name (tracer, "activity-get-checkpoint", &cp);
  if (!cp)
    return out;
  for (auto [field, delta] :
       {std::make_pair ("objects-created-list", 1), std::make_pair ("objects-removed-list", -1)}) {
    const GValue *list = gst_structure_get_value (cp, field);
    for (guint i = 0; list && i < gst_value_list_get_size (list); i++) {
      const GstStructure *o = gst_value_get_structure (gst_value_list_get_value (list, i));
      balance[{gst_structure_get_string (o, "type-name"),
               gst_structure_get_string (o, "address")}] += delta;
    }
  }
  gst_structure_free (cp);
  for (const auto &kv : balance) {
    if (kv.second > 0)
      out[kv.first.first] += kv.second;
  }
  return out;
}

} // namespace pi0test
