/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstpi0events.h"

/**
 * gst_pi0_instruction_event_new:
 * @instruction: the new instruction (UTF-8), e.g. "pick up the red block"
 *
 * Returns: (transfer full): a custom serialized downstream event for `pi0infer`; push it into
 *   the pipeline (e.g. with gst_pad_push_event() or gst_element_send_event() on a source).
 */
GstEvent *
gst_pi0_instruction_event_new (const gchar *instruction)
{
  g_return_val_if_fail (instruction != NULL, NULL);
  return gst_event_new_custom (GST_EVENT_CUSTOM_DOWNSTREAM,
                               gst_structure_new (GST_PI0_INSTRUCTION_EVENT_NAME, "instruction",
                                                  G_TYPE_STRING, instruction, NULL));
}

/**
 * gst_pi0_instruction_event_parse:
 * @instruction: (out) (transfer none) (optional): the instruction, valid while @event lives
 *
 * Returns: %TRUE when @event is an instruction event.
 */
gboolean
gst_pi0_instruction_event_parse (GstEvent *event, const gchar **instruction)
{
  const GstStructure *s;
  const gchar *text;

  g_return_val_if_fail (GST_IS_EVENT (event), FALSE);
  if (GST_EVENT_TYPE (event) != GST_EVENT_CUSTOM_DOWNSTREAM)
    return FALSE;
  s = gst_event_get_structure (event);
  if (!s || !gst_structure_has_name (s, GST_PI0_INSTRUCTION_EVENT_NAME))
    return FALSE;
  text = gst_structure_get_string (s, "instruction");
  if (!text)
    return FALSE;
  if (instruction)
    *instruction = text;
  return TRUE;
}
