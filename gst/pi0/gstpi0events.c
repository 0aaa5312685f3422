/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/pi0/gstpi0events.h"

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
 * @event: any event
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

/**
 * gst_pi0_episode_event_new:
 * @action: start or stop an episode
 * @task: (nullable): for a start, the episode's task (instruction); %NULL keeps the current one
 *
 * Returns: (transfer full): a custom serialized downstream event for `pi0lerobotsink`: push it
 *   into the stream (a source, a pad) or send it to the recorder with gst_element_send_event().
 */
GstEvent *
gst_pi0_episode_event_new (GstPi0EpisodeAction action, const gchar *task)
{
  GstStructure *s;

  g_return_val_if_fail (action == GST_PI0_EPISODE_START || action == GST_PI0_EPISODE_STOP, NULL);
  s = gst_structure_new (GST_PI0_EPISODE_EVENT_NAME, "action", G_TYPE_STRING,
                         action == GST_PI0_EPISODE_START ? "start" : "stop", NULL);
  if (task && action == GST_PI0_EPISODE_START)
    gst_structure_set (s, "task", G_TYPE_STRING, task, NULL);
  return gst_event_new_custom (GST_EVENT_CUSTOM_DOWNSTREAM, s);
}

/**
 * gst_pi0_episode_action_get_type:
 *
 * The #GstPi0EpisodeAction enum as a GType, for bindings (nicks `start`, `stop`, the event's
 * `action` field).
 *
 * Since: 0.4
 */
GType
gst_pi0_episode_action_get_type (void)
{
  static gsize id = 0;
  static const GEnumValue values[] = {{GST_PI0_EPISODE_START, "GST_PI0_EPISODE_START", "start"},
                                      {GST_PI0_EPISODE_STOP, "GST_PI0_EPISODE_STOP", "stop"},
                                      {0, NULL, NULL}};
  if (g_once_init_enter (&id))
    g_once_init_leave (&id, g_enum_register_static ("GstPi0EpisodeAction", values));
  return (GType)id;
}

/**
 * gst_pi0_episode_event_parse:
 * @event: any event
 * @action: (out) (optional): start or stop
 * @task: (out) (transfer none) (optional): the task of a start, or %NULL
 *
 * Returns: %TRUE when @event is a well-formed episode event.
 */
gboolean
gst_pi0_episode_event_parse (GstEvent *event, GstPi0EpisodeAction *action, const gchar **task)
{
  const GstStructure *s;
  const gchar *a;

  g_return_val_if_fail (GST_IS_EVENT (event), FALSE);
  if (GST_EVENT_TYPE (event) != GST_EVENT_CUSTOM_DOWNSTREAM)
    return FALSE;
  s = gst_event_get_structure (event);
  if (!s || !gst_structure_has_name (s, GST_PI0_EPISODE_EVENT_NAME))
    return FALSE;
  a = gst_structure_get_string (s, "action");
  if (!a || (g_strcmp0 (a, "start") != 0 && g_strcmp0 (a, "stop") != 0))
    return FALSE;
  if (action)
    *action = g_strcmp0 (a, "start") == 0 ? GST_PI0_EPISODE_START : GST_PI0_EPISODE_STOP;
  if (task)
    *task = gst_structure_get_string (s, "task");
  return TRUE;
}

/**
 * gst_pi0_executing_event_new:
 * @chunk_id: the #GstPi0ActionMeta sequence of the chunk being executed
 * @row: the row of that chunk that started at @time
 * @time: running time (pipeline clock) at which @row started
 * @period: the control period in ns (one row per period), > 0
 *
 * Returns: (transfer full): a custom upstream (non-serialized) event, sent by `pi0actionsink`
 *   to tell `pi0infer` what the robot executes (real-time chunking, docs/rtc.md).
 */
GstEvent *
gst_pi0_executing_event_new (guint64 chunk_id, guint row, GstClockTime time, guint64 period)
{
  return gst_event_new_custom (GST_EVENT_CUSTOM_UPSTREAM,
                               gst_structure_new (GST_PI0_EXECUTING_EVENT_NAME, "chunk-id",
                                                  G_TYPE_UINT64, chunk_id, "row", G_TYPE_UINT, row,
                                                  "time", G_TYPE_UINT64, time, "period",
                                                  G_TYPE_UINT64, period, NULL));
}

/**
 * gst_pi0_executing_event_parse:
 * @event: any event
 * @chunk_id: (out) (optional): the #GstPi0ActionMeta sequence of the chunk being executed
 * @row: (out) (optional): the row of that chunk that started at @time
 * @time: (out) (optional): running time at which @row started
 * @period: (out) (optional): the control period in ns
 *
 * Returns: %TRUE when @event is a well-formed executing event: an upstream custom event named
 *   #GST_PI0_EXECUTING_EVENT_NAME whose four fields are there with their types, a valid @time
 *   and a non-zero @period. A structure with that name but anything else (a missing field, a
 *   field of another type such as a double, a NaN) gives %FALSE.
 */
gboolean
gst_pi0_executing_event_parse (GstEvent *event, guint64 *chunk_id, guint *row, GstClockTime *time,
                               guint64 *period)
{
  const GstStructure *s;
  guint64 c = 0, t = 0, p = 0;
  guint r = 0;

  g_return_val_if_fail (GST_IS_EVENT (event), FALSE);
  if (GST_EVENT_TYPE (event) != GST_EVENT_CUSTOM_UPSTREAM)
    return FALSE;
  s = gst_event_get_structure (event);
  if (!s || !gst_structure_has_name (s, GST_PI0_EXECUTING_EVENT_NAME))
    return FALSE;
  if (!gst_structure_get_uint64 (s, "chunk-id", &c) || !gst_structure_get_uint (s, "row", &r) ||
      !gst_structure_get_uint64 (s, "time", &t) || !gst_structure_get_uint64 (s, "period", &p))
    return FALSE;
  if (!GST_CLOCK_TIME_IS_VALID (t) || p == 0)
    return FALSE;
  if (chunk_id)
    *chunk_id = c;
  if (row)
    *row = r;
  if (time)
    *time = t;
  if (period)
    *period = p;
  return TRUE;
}
