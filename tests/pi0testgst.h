/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the GStreamer tests share (pi0testgst.cpp): a harness's owner, the tools' RAII for
 * GStreamer objects and messages under the tests' names, counting what reaches a pipeline's
 * sinks; and (pi0testlog.h) a way to say that a test expects a GLib warning or critical, which
 * otherwise fails it (pi0testmain.cpp). */

#include "tests/pi0testlog.h"
#include "tools/common/pi0gsttools.h"

#include <gst/gst.h>
#include <gst/check/gstharness.h>

#include <atomic>
#include <memory>

namespace pi0test
{

struct HarnessDeleter {
  void operator() (GstHarness *h) const { gst_harness_teardown (h); }
};
using HarnessPtr = std::unique_ptr<GstHarness, HarnessDeleter>;

/* The owning pointers and bus helpers are the tools' (tools/common/pi0gsttools.h): ElementPtr
 * sets the element to NULL before the last unref, so a failing ASSERT cannot leak threads;
 * pop_message() takes every message on a bus and returns the first of the types asked for;
 * message_text() is an error or warning message as "element: message (debug)". */
using pi0::tools::BufferPtr;
using pi0::tools::CapsPtr;
using pi0::tools::ElementPtr;
using pi0::tools::message_text;
using pi0::tools::MessagePtr;
using pi0::tools::ObjectPtr;
using pi0::tools::pop_message;

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
