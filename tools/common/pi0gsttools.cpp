/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The GStreamer helpers of the tools, the benches and the tests (pi0gsttools.h). */
#include "tools/common/pi0gsttools.h"

namespace pi0::tools
{

ElementPtr
launch (const std::string &line, std::string *error)
{
  GError *err = nullptr;
  ElementPtr pipeline (gst_parse_launch (line.c_str (), &err));
  if (err) {
    *error = err->message;
    g_error_free (err);
    return nullptr;
  }
  if (!pipeline)
    *error = "the launch line made nothing";
  return pipeline;
}

MessageParts
message_parts (GstMessage *msg)
{
  GError *err = nullptr;
  gchar *dbg = nullptr;
  switch (GST_MESSAGE_TYPE (msg)) {
    case GST_MESSAGE_ERROR:
      gst_message_parse_error (msg, &err, &dbg);
      break;
    case GST_MESSAGE_WARNING:
      gst_message_parse_warning (msg, &err, &dbg);
      break;
    case GST_MESSAGE_INFO:
      gst_message_parse_info (msg, &err, &dbg);
      break;
    default:
      break;
  }
  MessageParts parts;
  const gchar *source = GST_MESSAGE_SRC (msg) ? GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)) : nullptr;
  parts.source = source ? source : "";
  parts.message = err ? err->message : "";
  parts.debug = dbg ? dbg : "";
  g_clear_error (&err);
  g_free (dbg);
  return parts;
}

std::string
message_text (GstMessage *msg)
{
  const MessageParts p = message_parts (msg);
  return p.source + ": " + p.message + (p.debug.empty () ? "" : " (" + p.debug + ")");
}

MessagePtr
pop_message (GstBus *bus, GstMessageType types)
{
  return MessagePtr (gst_bus_pop_filtered (bus, types));
}

bool
pop_error (GstElement *pipeline, std::string *error)
{
  GstBus *bus = gst_element_get_bus (pipeline);
  MessagePtr m = pop_message (bus, GST_MESSAGE_ERROR);
  gst_object_unref (bus);
  if (!m)
    return false;
  *error = message_text (m.get ());
  return true;
}

} // namespace pi0::tools
