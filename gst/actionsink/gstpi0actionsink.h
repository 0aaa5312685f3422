/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gst/base/gstbasesink.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_PI0_ACTION_SINK (gst_pi0_action_sink_get_type ())
G_DECLARE_FINAL_TYPE (GstPi0ActionSink, gst_pi0_action_sink, GST, PI0_ACTION_SINK, GstBaseSink)

/**
 * GstPi0ActionSinkMode:
 * @GST_PI0_ACTION_SINK_MODE_CHUNK: send each chunk whole when it arrives
 * @GST_PI0_ACTION_SINK_MODE_STREAM: send one action per control tick from the newest chunk
 * @GST_PI0_ACTION_SINK_MODE_LOG: write every chunk whole, unmodified (file:// and stdout only)
 */
typedef enum {
  GST_PI0_ACTION_SINK_MODE_CHUNK = 0,
  GST_PI0_ACTION_SINK_MODE_STREAM = 1,
  GST_PI0_ACTION_SINK_MODE_LOG = 2,
} GstPi0ActionSinkMode;

/**
 * GstPi0ActionSinkFormat:
 * @GST_PI0_ACTION_SINK_FORMAT_AUTO: binary for udp/tcp targets, JSON lines for file/stdout
 * @GST_PI0_ACTION_SINK_FORMAT_JSON: one JSON object per line
 * @GST_PI0_ACTION_SINK_FORMAT_BINARY: docs/protocol.md frames
 */
typedef enum {
  GST_PI0_ACTION_SINK_FORMAT_AUTO = 0,
  GST_PI0_ACTION_SINK_FORMAT_JSON = 1,
  GST_PI0_ACTION_SINK_FORMAT_BINARY = 2,
} GstPi0ActionSinkFormat;

GType gst_pi0_action_sink_mode_get_type (void);
#define GST_TYPE_PI0_ACTION_SINK_MODE (gst_pi0_action_sink_mode_get_type ())
GType gst_pi0_action_sink_format_get_type (void);
#define GST_TYPE_PI0_ACTION_SINK_FORMAT (gst_pi0_action_sink_format_get_type ())

GST_ELEMENT_REGISTER_DECLARE (pi0actionsink);

G_END_DECLS
