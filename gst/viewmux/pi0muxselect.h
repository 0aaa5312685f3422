/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* pi0viewmux's selection, as GstVideoAggregator's fill_queues: which buffers of each input's
 * queue become its current frame or sample for an observation (pi0pairing.h's rules, handed to
 * pi0muxinputs.h's Inputs), which inputs have proved they have nothing more for it, and when a
 * muxer whose base view is silent must wake up. It walks GstAggregatorPad queues but knows no
 * element: a problem that stops the stream comes back as a PadError, worded here, which the
 * element (gst/gstpi0viewmux.cpp) posts. Called from the aggregate thread only. */

#include "viewmux/pi0muxinputs.h"

#include <gst/base/gstaggregator.h>

#include <array>
#include <string>

namespace pi0::mux
{

/* What an input pad's caps said (kept in the pad; written by its CAPS event, on the aggregate
 * thread, like everything that reads it). */
struct PadFormat {
  int view = -1; /* 0..kViews-1, or -1 for the state pad */
  GstVideoInfo info;
  bool info_valid = false, cuda = false, not_negotiated = false;
  unsigned state_dim = 0;

  PadFormat () { gst_video_info_init (&info); }
  bool negotiated () const { return !not_negotiated && (view >= 0 ? info_valid : state_dim > 0); }
  /* The pad's CAPS event (parse_caps()): false, and unusable until new caps come, with the error
   * to post in @why. */
  bool take_caps (GstCaps *caps, std::string *why);
};

/* The input a request pad template's name stands for: a view (kViewNames index), kStateInput for
 * "state", -1 for anything else. */
int input_by_name (const char *name);

/* An input: its pad and the pad's format (both null: no pad). */
struct Pad {
  GstAggregatorPad *pad = nullptr;
  const PadFormat *format = nullptr;
};
/* The views' pads (kViewNames order), then the state pad. */
constexpr int kStateInput = kViews;
using Pads = std::array<Pad, kViews + 1>;

/* The observation caps for these inputs (observation_caps()), or nullptr while the base view has
 * no caps yet: the views among @active, the state pad's size, the base view's rate, and
 * memory:CUDAMemory when every active view with caps is in CUDA memory. */
GstCaps *inputs_caps (const Pads &pads, const std::array<bool, kViews> &active, int base_view);

/* A problem with an input's data that stops the stream. */
struct PadError {
  enum Kind { None, NotNegotiated, NoTimestamp } kind = None;
  int view = -1;

  explicit operator bool () const { return kind != None; }
  /* "View 'main' sent data without usable caps.", "The state pad sent a sample without a usable
   * timestamp." */
  std::string text () const;
  /* NotNegotiated: GST_FLOW_NOT_NEGOTIATED (CORE/NEGOTIATION); NoTimestamp: GST_FLOW_ERROR
   * (STREAM/FORMAT, with debug()). */
  GstFlowReturn flow () const;
  const char *debug () const;
};

/* The time a buffer is paired by: its running time in @pad's segment, or with @use_pts its PTS
 * (kNone when it has none). */
Time buffer_time (GstAggregatorPad *pad, GstBuffer *buf, bool use_pts);

/* GstAggregator turns a GAP event into an empty buffer flagged GAP: time passing, not a frame. */
bool is_gap (GstBuffer *buf);

/* The settings selection depends on. */
struct SelectSettings {
  int base_view = 0;
  Time max_skew = 0;
  bool use_pts = false;
};

/* Brings every input but the base view up to the observation at @T (views: T + max-skew; the
 * state: T); @complete: whether each has proved it has nothing more for it (a later buffer
 * queued, the current one lasting past the limit, EOS). With @T kNone (the base view is silent,
 * live, at a timeout), up to what any base frame still to come in time would take at running
 * time @now with the pipeline @latency (silent_base_limit()), so that their queues never fill
 * and block their sources, which could then not even take the EOS of gst-launch -e. Buffers
 * taken leave their queues; one that lasts past the limit stays queued (GstAggregator only
 * aggregates before the deadline when every pad holds data, and a slower input's pad would
 * otherwise be empty at the next base frame). */
PadError select_inputs (const Pads &pads, Time T, Time now, Time latency, const SelectSettings &s,
                        Inputs &in, Counts &c, Notices &n, bool *complete);

/* The running time a live muxer times out at, before the base class adds its @latency (for
 * max-wait): a waiting base frame times out after the latency, or @max_wait (base_deadline()).
 * Without one: at the base view's EOS at once (0), so that aggregate() ends the stream whatever
 * the other inputs do; while the base view is silent, when the first other input's front buffer
 * can no longer be what an on-time base frame would take (drain_limit() less the input's slack),
 * so that aggregate() passes it on; never (kNone) while every input is silent or there is no
 * base pad. */
Time next_time (const Pads &pads, const SelectSettings &s, Time max_wait, Time latency,
                const Inputs &in);

} // namespace pi0::mux
