/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The GStreamer tests' shared helpers (pi0testgst.h). */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tests/pi0testgst.h"

#include <gst/pi0/pi0.h>

namespace pi0test
{

namespace
{
GstPadProbeReturn
count_sink_buffer (GstPad *, GstPadProbeInfo *info, gpointer user_data)
{
  auto c = static_cast<SinkCounts *> (user_data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  if (gst_buffer_get_pi0_observation_meta (buf))
    c->observations++;
  if (gst_buffer_get_pi0_action_meta (buf))
    c->actions++;
  return GST_PAD_PROBE_OK;
}
} // namespace

void
watch_sinks (GstElement *pipeline, SinkCounts *counts)
{
  GstIterator *it = gst_bin_iterate_sinks (GST_BIN (pipeline));
  GValue v = G_VALUE_INIT;
  while (gst_iterator_next (it, &v) == GST_ITERATOR_OK) {
    GstElement *sink = GST_ELEMENT (g_value_get_object (&v));
    if (g_object_class_find_property (G_OBJECT_GET_CLASS (sink), "silent"))
      g_object_set (sink, "silent", TRUE, nullptr);
    for (GList *l = sink->sinkpads; l; l = l->next)
      gst_pad_add_probe (GST_PAD (l->data), GST_PAD_PROBE_TYPE_BUFFER, count_sink_buffer, counts,
                         nullptr);
    g_value_reset (&v);
  }
  g_value_unset (&v);
  gst_iterator_free (it);
}

} // namespace pi0test
