/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What pi0viewmux holds between observations, and the observation it builds from it: the
 * current frame of each view and the current robot state sample, the checks a frame or a
 * sample passes before it becomes current, the caps each input takes, and the bus warnings
 * all of this gives, worded here and posted by the element. GStreamer buffers and video info,
 * no GObject and no element: tested directly (tests/test_viewmux_rules.cpp) beside the timing
 * rules of pi0pairing.h. The element (gst/gstpi0viewmux.cpp) walks its pads and posts. */

#include "viewmux/pi0pairing.h"

#include <gst/gst.h>
#include <gst/video/video.h>

#include <string>
#include <vector>

namespace pi0::mux
{

/* The video formats a view takes (the pads' caps, and the wording of their errors). */
#define PI0_VIEW_FORMATS                                                                           \
  "{ RGB, BGR, RGBx, BGRx, xRGB, xBGR, RGBA, BGRA, ARGB, ABGR, NV12, NV21, I420, YV12, Y42B, "     \
  "Y444, GRAY8, YUY2, UYVY }"

/* At most one warning of each kind per view per this much running time. */
constexpr Time kReportInterval = GST_SECOND;
constexpr unsigned kMaxStateDim = 1024;

/* A warning for the bus (GST_STREAM_ERROR domain), posted by the element. */
struct Notice {
  GstStreamError code = GST_STREAM_ERROR_FAILED;
  std::string text, debug;
  GstStructure *details = nullptr; /* owned until posted */

  Notice () = default;
  Notice (const Notice &) = delete;
  Notice (Notice &&o) noexcept;
  ~Notice ();
};
using Notices = std::vector<Notice>;

/* The settings composition depends on. */
struct Limits {
  Time max_skew = 0;
  Time max_staleness = 0;
  Time max_state_age = 0;
  bool require_all_views = false;
};

/* Checks the caps of a view pad (@view: kViewNames index) or of the state pad (@view -1).
 * Fills @info and @cuda, or @dim; false with the error to post (naming the pad and what it
 * takes) in @why. */
bool parse_caps (int view, GstCaps *caps, GstVideoInfo *info, bool *cuda, unsigned *dim,
                 std::string *why);

/* The `stats` property: the counters, with a structure for each view that is @active or has
 * counts. */
GstStructure *counts_structure (const Counts &c, const std::array<bool, kViews> &active);

/* The observation caps: which views (@active, in view order), the base view, the state size,
 * the base view's rate, and memory:CUDAMemory when every view is in CUDA memory (@cuda). */
GstCaps *observation_caps (const std::array<bool, kViews> &active, int base_view,
                           unsigned state_dim, int fps_n, int fps_d, bool cuda);

/* The frame's layout (its video meta's, else @caps_info) in @out; nullptr when @buf holds it,
 * else what is wrong. @needed gets the bytes the layout needs. */
const char *frame_layout (const GstVideoInfo *caps_info, GstBuffer *buf, GstVideoInfo *out,
                          uint64_t *needed);

class Inputs
{
public:
  Inputs ();
  ~Inputs ();
  Inputs (const Inputs &) = delete;
  Inputs &operator= (const Inputs &) = delete;

  /* Forgets every frame and sample (start, stop, flushing seeks). */
  void clear (bool keep_sequence);

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

  /* The observation for the base frame @base_buf at @T: a buffer holding the memories of the
   * valid views among @active, with its GstPi0ObservationMeta (the state when @state_pad).
   * Views whose frame expired are masked and let go. nullptr when require-all-views drops it. */
  GstBuffer *compose (GstBuffer *base_buf, Time T, const std::array<bool, kViews> &active,
                      bool state_pad, const Limits &l, Time muxed_time, Counts &c, Notices &n);

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

  std::array<View, kViews> views_;
  std::vector<float> state_;
  Time state_t_ = kNone;
  RateLimit bad_state_size_, bad_state_values_;
  GstBuffer *state_buf_ = nullptr;
  uint64_t sequence_ = 0;
  Time last_obs_ = kNone;
};

} // namespace pi0::mux
