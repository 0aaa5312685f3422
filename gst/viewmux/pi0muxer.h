/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* pi0viewmux's engine (docs/design.md, "Engines"): everything the muxer does between its pads
 * and its output, apart from the element. It holds each view's current frame and the current
 * robot state sample, checks what becomes current, walks the pads' queues to choose it
 * (selection, as GstVideoAggregator's fill_queues), builds the observation (composition, as its
 * aggregate_frames), says when a live muxer must wake, and words every warning and error for
 * the bus. It reads GstAggregatorPad queues and makes buffers, but knows no element and posts
 * nothing: each call takes the settings snapshot and the running time, and returns the flow,
 * the counters and the notices, which the element (gstpi0viewmux.cpp) adds and posts. The timing
 * rules themselves are pi0pairing.h's; tests/elements/pi0viewmux/test_viewmux_rules.cpp tests both directly.
 *
 * Threads: the aggregate thread only (start, stop and flush run while it is stopped). */

#include "gst/common/pi0notice.h"
#include "gst/viewmux/pi0pairing.h"

#include <gst/base/gstaggregator.h>
#include <gst/video/video.h>

#include <array>
#include <string>
#include <vector>

namespace pi0::mux
{

/* At most one warning of each kind per view per this much running time. */
constexpr Time kReportInterval = GST_SECOND;
constexpr unsigned kMaxStateDim = 1024;

/* "{ RGB, BGR, ... }": the video formats a view takes, for caps and for messages. */
std::string view_formats ();

/* The element's properties, as every call takes them (a snapshot). */
struct Settings {
  int base_view = 0;
  Time max_skew = 0;
  Time max_staleness = 0;
  Time max_state_age = 0;
  bool require_all_views = false;
  Time max_wait = kNone; /* live: the longest an observation waits (kNone: the latency) */
  bool use_pts = false;  /* timestamps=pts */
};

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

/* Checks the caps of a view pad (@view: kViewNames index) or of the state pad (@view -1).
 * Fills @info and @cuda, or @dim; false with the error to post (naming the pad and what it
 * takes) in @why. */
bool parse_caps (int view, GstCaps *caps, GstVideoInfo *info, bool *cuda, unsigned *dim,
                 std::string *why);

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
using Active = std::array<bool, kViews>;

/* The `stats` property: the counters, with a structure for each view that is @active or has
 * counts. */
GstStructure *counts_structure (const Counts &c, const Active &active);

/* The frame's layout (its video meta's, else @caps_info) in @out; nullptr when @buf holds it,
 * else what is wrong. @needed gets the bytes the layout needs. */
const char *frame_layout (const GstVideoInfo *caps_info, GstBuffer *buf, GstVideoInfo *out,
                          uint64_t *needed);

/* The time a buffer is paired by: its running time in @pad's segment, or with @use_pts its PTS
 * (kNone when it has none). */
Time buffer_time (GstAggregatorPad *pad, GstBuffer *buf, bool use_pts);

/* GstAggregator turns a GAP event into an empty buffer flagged GAP: time passing, not a frame. */
bool is_gap (GstBuffer *buf);

class Muxer
{
public:
  Muxer ();
  ~Muxer ();
  Muxer (const Muxer &) = delete;
  Muxer &operator= (const Muxer &) = delete;

  /* Forgets every frame and sample (start, stop, flushing seeks). */
  void clear (bool keep_sequence);

  /* One GstAggregator::aggregate(), as the element is called with @timeout: the observation for
   * the base view's next frame once every other input has proved it has nothing more for it
   * (not live), or at the deadline (live), in @out (to finish; nullptr when none is due or
   * require-all-views dropped it). @now is the running time now, @latency the base class's
   * (gst_aggregator_get_latency()), @live_latency what the last LATENCY query answered (kNone
   * when not live). Returns GST_FLOW_OK, GST_AGGREGATOR_FLOW_NEED_DATA, GST_FLOW_EOS (the base
   * view ended) or an error, which is among @n. */
  GstFlowReturn aggregate (const Pads &pads, const Active &active, const Settings &s, Time now,
                           Time latency, Time live_latency, bool timeout, GstBuffer **out,
                           Counts &c, Notices &n);

  /* The running time a live muxer times out at, before the base class adds its @latency (the
   * LATENCY query's: the base class holds its lock while asking): a waiting base frame times
   * out after the latency, or max-wait (base_deadline()). Without one: at the base view's EOS at
   * once (0), so that aggregate() ends the stream whatever the other inputs do; while the base
   * view is silent, when the first other input's front buffer can no longer be what an on-time
   * base frame would take (drain_limit() less the input's slack), so that aggregate() passes it
   * on; never (kNone) while every input is silent or there is no base pad. */
  Time next_time (const Pads &pads, const Settings &s, Time latency) const;

  /* The observation caps for these inputs, or nullptr while the base view has no caps yet: the
   * views among @active, the state pad's size, the base view's rate, and memory:CUDAMemory
   * when every active view with caps is in CUDA memory. */
  static GstCaps *caps (const Pads &pads, const Active &active, int base_view);

  /* The parts aggregate() is made of, public for the tests. */

  /* The buffer that is view @view's current frame, or (@view -1) the current state sample. */
  GstBuffer *current (int view) const;
  Time last_observation () const { return last_obs_; }

  /* Makes @buf, at @t, view @view's current frame. Refused (false, counted, and a rate-limited
   * notice) when its buffer does not hold its layout or, for the @base view, when it is not
   * after the previous observation. */
  bool take_frame (int view, bool base, GstBuffer *buf, Time t, const GstVideoInfo *caps_info,
                   bool cuda, Time max_skew, Counts &c, Notices &n);

  /* Makes @buf, at @t, the current state sample; refused when it is not @dim finite float32
   * values (the previous one stays until it is too old), counted, with a notice rate-limited per
   * problem (a wrong size, a NaN or infinity): the first at once, then at most one per
   * kReportInterval, saying how many were held back. */
  bool take_sample (GstBuffer *buf, Time t, unsigned dim, Counts &c, Notices &n);

  /* Brings every input but the base view up to the observation at @T (views: T + max-skew; the
   * state: T); @complete: whether each has proved it has nothing more for it (a later buffer
   * queued, the current one lasting past the limit, EOS). With @T kNone (the base view is
   * silent, live, at a timeout), up to what any base frame still to come in time would take at
   * running time @now with the pipeline @latency (silent_base_limit()), so that their queues
   * never fill and block their sources, which could then not even take the EOS of
   * gst-launch -e. Buffers taken leave their queues; one that lasts past the limit stays queued
   * (GstAggregator only aggregates before the deadline when every pad holds data, and a slower
   * input's pad would otherwise be empty at the next base frame). An error is among @n. */
  GstFlowReturn select (const Pads &pads, Time T, Time now, Time latency, const Settings &s,
                        Counts &c, Notices &n, bool *complete);

  /* The observation for the base frame @base_buf at @T: a buffer holding the memories of the
   * valid views among @active, with its GstPi0ObservationMeta (the state when @state_pad; no
   * muxed_time: the element stamps it as it pushes). Views whose frame expired are masked and
   * let go. nullptr when require-all-views drops it. */
  GstBuffer *compose (GstBuffer *base_buf, Time T, const Active &active, bool state_pad,
                      const Settings &s, Counts &c, Notices &n);

private:
  struct View {
    GstBuffer *frame = nullptr;
    GstVideoInfo info;
    bool cuda = false;
    Time t = kNone;
    bool used = false;
    MaskReport report;
    RateLimit bad_layout, backwards;
  };

  GstFlowReturn drain (const Pad &p, Time limit, const Settings &s, Counts &c, Notices &n,
                       bool *complete);

  std::array<View, kViews> views_;
  std::vector<float> state_;
  Time state_t_ = kNone;
  RateLimit bad_state_size_, bad_state_values_;
  GstBuffer *state_buf_ = nullptr;
  uint64_t sequence_ = 0;
  Time last_obs_ = kNone;
  /* The current base frame arrived after its live deadline, when the other inputs may already
   * have been taken past it (stats: deadline-observations). */
  bool base_late_ = false;
};

} // namespace pi0::mux
