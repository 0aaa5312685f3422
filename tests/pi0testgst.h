/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the GStreamer tests share (pi0testgst.cpp): RAII for GStreamer objects, messages, counting
 * what reaches a pipeline's sinks; and (pi0testlog.h) a way to say that a test expects a GLib
 * warning or critical, which otherwise fails it (pi0testmain.cpp). */

#include "tests/pi0testlog.h"

#include <gst/gst.h>
#include <gst/check/gstharness.h>

#include <atomic>
#include <memory>
#include <string>

namespace pi0test
{

struct HarnessDeleter {
  void operator() (GstHarness *h) const { gst_harness_teardown (h); }
};
struct ObjectDeleter {
  void operator() (gpointer o) const { gst_object_unref (o); }
};
struct MiniObjectDeleter {
  void operator() (GstMiniObject *o) const { gst_mini_object_unref (o); }
};
struct BufferDeleter {
  void operator() (GstBuffer *b) const { gst_buffer_unref (b); }
};
struct CapsDeleter {
  void operator() (GstCaps *c) const { gst_caps_unref (c); }
};
struct MessageDeleter {
  void operator() (GstMessage *m) const { gst_message_unref (m); }
};
struct ElementDeleter {
  void operator() (GstElement *e) const
  {
    gst_element_set_state (e, GST_STATE_NULL);
    gst_object_unref (e);
  }
};

using HarnessPtr = std::unique_ptr<GstHarness, HarnessDeleter>;
using BufferPtr = std::unique_ptr<GstBuffer, BufferDeleter>;
using CapsPtr = std::unique_ptr<GstCaps, CapsDeleter>;
using MessagePtr = std::unique_ptr<GstMessage, MessageDeleter>;
/* Sets the element to NULL before the last unref, so a failing ASSERT cannot leak threads. */
using ElementPtr = std::unique_ptr<GstElement, ElementDeleter>;
template <typename T> using ObjectPtr = std::unique_ptr<T, ObjectDeleter>;

/* Takes every message currently on @bus; returns the first one of @types (or nullptr). */
MessagePtr pop_message (GstBus *bus, GstMessageType types);

/* The text of an error or warning message: "<message> | <debug>". */
std::string message_text (GstMessage *msg);

/* Buffers with an observation meta and with an action meta that reached the sinks of a
 * pipeline (see watch_sinks). */
struct SinkCounts {
  std::atomic<int> observations{0};
  std::atomic<int> actions{0};
};

/* Counts what reaches every sink of @pipeline into @counts (which must outlive the pipeline's
 * streaming) and silences sinks that have a "silent" property. */
void watch_sinks (GstElement *pipeline, SinkCounts *counts);

} // namespace pi0test
