/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "viewmux/pi0muxselect.h"

#include <algorithm>

namespace pi0::mux
{

namespace
{

/* An input's front buffer as the pairing rules see it. */
Front
front_of (const Inputs &in, int view, GstBuffer *buf, Time t)
{
  Front f;
  f.t = t;
  f.duration = GST_BUFFER_DURATION (buf);
  f.held = buf == in.current (view);
  f.gap = is_gap (buf);
  return f;
}

/* Brings one input up to @limit: takes its queued buffers at or before @limit in order, the
 * newest becoming its current frame or sample (next_step()). Sets @complete when no other such
 * buffer can still come: a later one is queued, the current one lasts past @limit, or the pad is
 * at EOS. */
PadError
drain (const Pad &p, Time limit, const SelectSettings &s, Inputs &in, Counts &c, Notices &n,
       bool *complete)
{
  const PadFormat &f = *p.format;
  *complete = false;
  while (true) {
    g_autoptr (GstBuffer) buf = gst_aggregator_pad_peek_buffer (p.pad);
    if (!buf) {
      *complete = gst_aggregator_pad_is_eos (p.pad);
      return PadError ();
    }
    if (!f.negotiated ())
      return PadError{PadError::NotNegotiated, f.view};
    const Time t = buffer_time (p.pad, buf, s.use_pts);
    if (!is_valid (t))
      return PadError{PadError::NoTimestamp, f.view};

    const Step step = next_step (front_of (in, f.view, buf, t), limit);
    if (step == Step::Stop) {
      *complete = true;
      return PadError ();
    }
    if (step != Step::Drop) {
      const bool taken = f.view >= 0 ? in.take_frame (f.view, f.view == s.base_view, buf, t,
                                                      &f.info, f.cuda, s.max_skew, c, n)
                                     : in.take_sample (buf, t, f.state_dim, c, n);
      if (taken && step == Step::TakeAndStop) {
        *complete = true;
        return PadError ();
      }
    }
    gst_aggregator_pad_drop_buffer (p.pad);
  }
}

} // namespace

bool
PadFormat::take_caps (GstCaps *caps, std::string *why)
{
  not_negotiated = !parse_caps (view, caps, &info, &cuda, &state_dim, why);
  if (not_negotiated)
    return false;
  info_valid = view >= 0;
  return true;
}

int
input_by_name (const char *name)
{
  for (int v = 0; v < kViews; v++) {
    if (g_str_equal (name, kViewNames[v]))
      return v;
  }
  return g_str_equal (name, "state") ? kStateInput : -1;
}

GstCaps *
inputs_caps (const Pads &pads, const std::array<bool, kViews> &active, int base_view)
{
  const PadFormat *base = pads[base_view].format;
  if (!base || !base->info_valid)
    return nullptr;
  bool all_cuda = true;
  for (int v = 0; v < kViews; v++) {
    const PadFormat *f = pads[v].format;
    if (active[v] && f && f->info_valid && !f->cuda)
      all_cuda = false;
  }
  const PadFormat *state = pads[kStateInput].format;
  return observation_caps (active, base_view, state ? state->state_dim : 0,
                           GST_VIDEO_INFO_FPS_N (&base->info), GST_VIDEO_INFO_FPS_D (&base->info),
                           all_cuda);
}

std::string
PadError::text () const
{
  const std::string label =
      view >= 0 ? std::string ("View '") + kViewNames[view] + "'" : std::string ("The state pad");
  switch (kind) {
    case NotNegotiated:
      return label + " sent data without usable caps.";
    case NoTimestamp:
      return label + " sent a " + (view >= 0 ? "frame" : "sample") + " without a usable timestamp.";
    case None:
      break;
  }
  return "";
}

GstFlowReturn
PadError::flow () const
{
  return kind == NotNegotiated ? GST_FLOW_NOT_NEGOTIATED
         : kind == NoTimestamp ? GST_FLOW_ERROR
                               : GST_FLOW_OK;
}

const char *
PadError::debug () const
{
  return kind == NoTimestamp ? "a PTS inside the segment is needed to pair it with the other inputs"
                             : nullptr;
}

Time
buffer_time (GstAggregatorPad *pad, GstBuffer *buf, bool use_pts)
{
  if (!GST_BUFFER_PTS_IS_VALID (buf) || use_pts)
    return GST_BUFFER_PTS (buf);
  GST_OBJECT_LOCK (pad);
  Time rt = gst_segment_to_running_time (&pad->segment, GST_FORMAT_TIME, GST_BUFFER_PTS (buf));
  GST_OBJECT_UNLOCK (pad);
  return rt;
}

bool
is_gap (GstBuffer *buf)
{
  return GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_GAP) && gst_buffer_get_size (buf) == 0;
}

PadError
select_inputs (const Pads &pads, Time T, Time now, Time latency, const SelectSettings &s,
               Inputs &in, Counts &c, Notices &n, bool *complete)
{
  const bool silent = !is_valid (T);
  *complete = true;
  for (int i = 0; i <= kStateInput; i++) {
    const Time slack = i < kViews ? s.max_skew : 0;
    Time limit = T + slack;
    bool done;
    if (!pads[i].pad || i == s.base_view ||
        (silent && !silent_base_limit (now, latency, slack, &limit)))
      continue;
    if (PadError e = drain (pads[i], limit, s, in, c, n, &done))
      return e;
    *complete = *complete && done;
  }
  return PadError ();
}

Time
next_time (const Pads &pads, const SelectSettings &s, Time max_wait, Time latency, const Inputs &in)
{
  GstAggregatorPad *base = pads[s.base_view].pad;
  if (!base)
    return kNone;
  if (GstBuffer *buf = gst_aggregator_pad_peek_buffer (base)) {
    const Time t = buffer_time (base, buf, false);
    gst_buffer_unref (buf);
    return base_deadline (t, max_wait, latency);
  }
  if (gst_aggregator_pad_is_eos (base))
    return 0;

  Time next = kNone;
  for (int i = 0; i <= kStateInput; i++) {
    GstBuffer *buf;
    if (!pads[i].pad || i == s.base_view || !(buf = gst_aggregator_pad_peek_buffer (pads[i].pad)))
      continue;
    const Time t = buffer_time (pads[i].pad, buf, s.use_pts);
    if (is_valid (t)) {
      const Time limit = drain_limit (front_of (in, pads[i].format->view, buf, t));
      const Time slack = i < kViews ? s.max_skew : 0;
      next = std::min (next, limit > slack ? limit - slack : 0);
    }
    gst_buffer_unref (buf);
  }
  return next;
}

} // namespace pi0::mux
