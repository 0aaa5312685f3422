/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The GStreamer helpers that the tools, the benches and the tests share (pi0gsttools.cpp, the
 * pi0gsttools library): owning pointers for GStreamer's objects, a pipeline from a launch line
 * with the parser's message, the text of an error or warning message, and the first error on a
 * pipeline's bus. The views are named by pi0::kViewNames (common/pi0views.h), included here for
 * the programs that build launch lines from them. */
#pragma once

#include "common/pi0views.h"

#include <gst/gst.h>

#include <memory>
#include <string>

namespace pi0::tools
{

/* One reference to a GstObject (a child element, a pad, a bus, a clock) dropped. */
struct ObjectUnref {
  void operator() (gpointer o) const { gst_object_unref (o); }
};
/* An element that owns its threads (a pipeline, a lone element): set to NULL before the last
 * unref, so that nothing streams on once it is gone, even when a test stopped half-way. */
struct ElementDeleter {
  void operator() (GstElement *e) const
  {
    gst_element_set_state (e, GST_STATE_NULL);
    gst_object_unref (e);
  }
};
struct MiniObjectUnref {
  void operator() (GstMiniObject *o) const { gst_mini_object_unref (o); }
};
struct BufferUnref {
  void operator() (GstBuffer *b) const { gst_buffer_unref (b); }
};
struct CapsUnref {
  void operator() (GstCaps *c) const { gst_caps_unref (c); }
};
struct MessageUnref {
  void operator() (GstMessage *m) const { gst_message_unref (m); }
};

/* A pipeline, or an element used alone: NULL, then unref. A child of a bin that goes on
 * running (gst_bin_get_by_name) is an ObjectPtr<GstElement> instead. */
using ElementPtr = std::unique_ptr<GstElement, ElementDeleter>;
template <typename T> using ObjectPtr = std::unique_ptr<T, ObjectUnref>;
using BufferPtr = std::unique_ptr<GstBuffer, BufferUnref>;
using CapsPtr = std::unique_ptr<GstCaps, CapsUnref>;
using MessagePtr = std::unique_ptr<GstMessage, MessageUnref>;

/* The pipeline of @line, or null with *error set to the parser's message. A line the parser
 * makes something of despite an error (an unknown property, a missing element with
 * GST_PARSE_FLAG_NONE) is refused too: what it made is not the line. */
ElementPtr launch (const std::string &line, std::string *error);

/* The parts of an error, warning or info message: the name of the object that posted it, the
 * message and the debug text (empty when there is none). */
struct MessageParts {
  std::string source, message, debug;
};
MessageParts message_parts (GstMessage *msg);

/* An error, warning or info message as one line: "element: message (debug)". */
std::string message_text (GstMessage *msg);

/* Takes every message now on @bus; returns the first one of @types (or null). */
MessagePtr pop_message (GstBus *bus, GstMessageType types);

/* The first error now on @pipeline's bus, if any, into *error (message_text()); false when
 * there is none (*error is then untouched). */
bool pop_error (GstElement *pipeline, std::string *error);

} // namespace pi0::tools
