/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/pi0/pi0-prelude.h>

G_BEGIN_DECLS

/**
 * GST_PI0_INSTRUCTION_EVENT_NAME:
 *
 * Structure name of the custom serialized downstream event that changes the policy's
 * instruction from the next observation on: `pi0-instruction, instruction=(string)"..."`.
 * Being serialized, it takes effect at an exact point of the stream (and is recorded and
 * replayed with it).
 */
#define GST_PI0_INSTRUCTION_EVENT_NAME "pi0-instruction"

GST_PI0_API GstEvent *gst_pi0_instruction_event_new (const gchar *instruction);

GST_PI0_API gboolean gst_pi0_instruction_event_parse (GstEvent *event, const gchar **instruction);

/**
 * GST_PI0_EXECUTING_EVENT_NAME:
 *
 * Structure name of the custom upstream event `pi0actionsink` sends to tell `pi0infer` what the
 * robot executes, for real-time chunking (docs/rtc.md):
 * `pi0-executing, chunk-id=(guint64)N, row=(uint)R, time=(guint64)T, period=(guint64)P`:
 * row R of the chunk whose #GstPi0ActionMeta sequence is N started at running time T, and one
 * row runs every P ns. Not serialized: it travels up at once, like QoS.
 */
#define GST_PI0_EXECUTING_EVENT_NAME "pi0-executing"

GST_PI0_API GstEvent *gst_pi0_executing_event_new (guint64 chunk_id, guint row, GstClockTime time,
                                                   guint64 period);

GST_PI0_API gboolean gst_pi0_executing_event_parse (GstEvent *event, guint64 *chunk_id, guint *row,
                                                    GstClockTime *time, guint64 *period);

/**
 * GST_PI0_EPISODE_EVENT_NAME:
 *
 * Structure name of the custom serialized downstream event that starts or ends an episode of
 * a recorder: `pi0-episode, action=(string){start,stop}, task=(string)"..."` (the task only
 * with a start, and optional).
 */
#define GST_PI0_EPISODE_EVENT_NAME "pi0-episode"

/**
 * GstPi0EpisodeAction:
 * @GST_PI0_EPISODE_START: begin an episode (ends the one in progress first)
 * @GST_PI0_EPISODE_STOP: end the episode in progress and keep it
 *
 * What a `pi0-episode` event asks of a recorder (`pi0lerobotsink`).
 */
typedef enum {
  GST_PI0_EPISODE_START = 0,
  GST_PI0_EPISODE_STOP = 1,
} GstPi0EpisodeAction;

GST_PI0_API GType gst_pi0_episode_action_get_type (void);
#define GST_TYPE_PI0_EPISODE_ACTION (gst_pi0_episode_action_get_type ())

GST_PI0_API GstEvent *gst_pi0_episode_event_new (GstPi0EpisodeAction action, const gchar *task);

GST_PI0_API gboolean gst_pi0_episode_event_parse (GstEvent *event, GstPi0EpisodeAction *action,
                                                  const gchar **task);

G_END_DECLS
