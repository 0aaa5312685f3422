/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/viewmux/pi0muxer.h"

#include "kernels/pi0prep.h"

#include <gst/pi0/pi0.h>

#include <algorithm>

namespace pi0::mux
{


namespace
{

bool
format_supported (GstVideoFormat fmt)
{
  pi0::prep::Format f;
  return pi0::prep::format_from_name (gst_video_format_to_string (fmt), &f);
}

/* A problem with an input's data that stops the stream, worded once for every pad and path:
 * "View 'main' sent data without usable caps." (CORE/NEGOTIATION, not-negotiated) or "The
 * state pad sent a sample without a usable timestamp." (STREAM/FORMAT, an error). */
GstFlowReturn
pad_error (Notices &n, int view, bool not_negotiated)
{
  const std::string label =
      view >= 0 ? std::string ("View '") + kViewNames[view] + "'" : std::string ("The state pad");
  if (not_negotiated) {
    n.error (GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION, label + " sent data without usable caps.");
    return GST_FLOW_NOT_NEGOTIATED;
  }
  n.error (GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT,
           label + " sent a " + (view >= 0 ? "frame" : "sample") + " without a usable timestamp.",
           "a PTS inside the segment is needed to pair it with the other inputs");
  return GST_FLOW_ERROR;
}

/* An input's front buffer as the pairing rules see it. */
Front
front_of (const Muxer &m, int view, GstBuffer *buf, Time t)
{
  Front f;
  f.t = t;
  f.duration = GST_BUFFER_DURATION (buf);
  f.held = buf == m.current (view);
  f.gap = is_gap (buf);
  return f;
}

} // namespace

std::string
view_formats ()
{
  return "{ " + pi0::prep::format_list () + " }";
}

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

bool
parse_caps (int view, GstCaps *caps, GstVideoInfo *info, bool *cuda, unsigned *dim,
            std::string *why)
{
  const GstStructure *s = gst_caps_get_structure (caps, 0);
  if (view < 0) {
    gint d = 0;
    if (gst_structure_has_name (s, GST_PI0_STATE_MEDIA_TYPE) &&
        gst_structure_get_int (s, "dim", &d) && d >= 1 && d <= (gint)kMaxStateDim) {
      *dim = (unsigned)d;
      return true;
    }
    gchar *str = gst_caps_to_string (caps);
    *why = strf ("The state pad needs " GST_PI0_STATE_MEDIA_TYPE " with dim=(int)N, 1 <= N <= %u "
                 "(one float32 vector per buffer), but got %s.",
                 kMaxStateDim, str);
    g_free (str);
    return false;
  }

  const char *name = kViewNames[view];
  if (!gst_structure_has_name (s, "video/x-raw")) {
    *why = strf ("View '%s' needs raw video (video/x-raw, formats %s), but got %s.", name,
                 view_formats ().c_str (), gst_structure_get_name (s));
  } else if (!gst_video_info_from_caps (info, caps)) {
    *why = strf ("View '%s' got incomplete or invalid video caps.", name);
  } else if (!format_supported (GST_VIDEO_INFO_FORMAT (info))) {
    *why = strf ("View '%s' cannot take video format %s; use one of %s (add videoconvert).", name,
                 gst_video_format_to_string (GST_VIDEO_INFO_FORMAT (info)),
                 view_formats ().c_str ());
  } else {
    GstCapsFeatures *f = gst_caps_get_features (caps, 0);
    *cuda = f && gst_caps_features_contains (f, "memory:CUDAMemory");
    return true;
  }
  return false;
}

GstStructure *
counts_structure (const Counts &c, const Active &active)
{
  GstStructure *st = gst_structure_new (
      "pi0viewmux-stats", "observations", G_TYPE_UINT64, c.observations, "dropped-observations",
      G_TYPE_UINT64, c.dropped_observations, "state-samples", G_TYPE_UINT64, c.state_samples,
      "state-rejected", G_TYPE_UINT64, c.state_rejected, "state-stale", G_TYPE_UINT64,
      c.state_stale, "deadline-observations", G_TYPE_UINT64, c.deadline_observations, nullptr);
  for (int v = 0; v < kViews; v++) {
    const ViewCounts &vc = c.views[v];
    if (!active[v] && vc.frames_in == 0)
      continue;
    GstStructure *vst = gst_structure_new (
        kViewNames[v], "frames-in", G_TYPE_UINT64, vc.frames_in, "used", G_TYPE_UINT64, vc.used,
        "late", G_TYPE_UINT64, vc.late, "skewed", G_TYPE_UINT64, vc.skewed, "masked", G_TYPE_UINT64,
        vc.masked, "dropped", G_TYPE_UINT64, vc.dropped, "invalid", G_TYPE_UINT64, vc.invalid,
        "backwards", G_TYPE_UINT64, vc.backwards, nullptr);
    gst_structure_set (st, kViewNames[v], GST_TYPE_STRUCTURE, vst, nullptr);
    gst_structure_free (vst);
  }
  return st;
}

const char *
frame_layout (const GstVideoInfo *caps_info, GstBuffer *buf, GstVideoInfo *out, uint64_t *needed)
{
  *out = *caps_info;
  *needed = 0;
  if (GstVideoMeta *vmeta = gst_buffer_get_video_meta (buf)) {
    if (vmeta->format != GST_VIDEO_INFO_FORMAT (caps_info))
      return "its video meta's format is not its caps' format";
    /* Beyond any camera, and where the sizes computed below would overflow a gint. */
    if (vmeta->width == 0 || vmeta->height == 0 || vmeta->width > G_MAXINT / 16 ||
        vmeta->height > G_MAXINT / 16)
      return "its video meta's size is out of range";
    out->width = (gint)vmeta->width;
    out->height = (gint)vmeta->height;
    for (guint i = 0; i < vmeta->n_planes && i < GST_VIDEO_MAX_PLANES; i++) {
      out->offset[i] = vmeta->offset[i];
      out->stride[i] = vmeta->stride[i];
    }
  }
  Plane planes[GST_VIDEO_MAX_PLANES];
  const guint n = GST_VIDEO_INFO_N_PLANES (out);
  for (guint p = 0; p < n; p++) {
    gint comp[GST_VIDEO_MAX_COMPONENTS];
    gst_video_format_info_component (out->finfo, p, comp);
    const gint w = GST_VIDEO_FORMAT_INFO_SCALE_WIDTH (out->finfo, comp[0], out->width);
    planes[p].offset = GST_VIDEO_INFO_PLANE_OFFSET (out, p);
    planes[p].stride = GST_VIDEO_INFO_PLANE_STRIDE (out, p);
    planes[p].rows =
        (uint64_t)GST_VIDEO_FORMAT_INFO_SCALE_HEIGHT (out->finfo, comp[0], out->height);
    planes[p].row_bytes =
        (uint64_t)w * (uint64_t)GST_VIDEO_FORMAT_INFO_PSTRIDE (out->finfo, comp[0]);
  }
  const Layout l = check_layout (planes, n, gst_buffer_get_size (buf), needed);
  return l == Layout::Ok ? nullptr : layout_problem (l);
}

Muxer::Muxer ()
{
  for (View &v : views_)
    gst_video_info_init (&v.info);
}

Muxer::~Muxer ()
{
  clear (false);
}

void
Muxer::clear (bool keep_sequence)
{
  for (View &v : views_) {
    gst_clear_buffer (&v.frame);
    v = View ();
    gst_video_info_init (&v.info);
  }
  state_.clear ();
  state_t_ = kNone;
  bad_state_size_ = bad_state_values_ = RateLimit ();
  gst_clear_buffer (&state_buf_);
  last_obs_ = kNone;
  base_late_ = false;
  if (!keep_sequence)
    sequence_ = 0;
}

GstBuffer *
Muxer::current (int view) const
{
  return view >= 0 ? views_[view].frame : state_buf_;
}

bool
Muxer::take_frame (int view, bool base, GstBuffer *buf, Time t, const GstVideoInfo *caps_info,
                    bool cuda, Time max_skew, Counts &c, Notices &n)
{
  View &vs = views_[view];
  ViewCounts &vc = c.views[view];
  const char *name = kViewNames[view];
  GstVideoInfo info;
  uint64_t needed, held_back;

  vc.frames_in++;
  if (base && goes_backwards (t, last_obs_)) {
    vc.backwards++;
    vc.dropped++;
    if (vs.backwards.allow (t, kReportInterval, &held_back))
      n.warning (GST_STREAM_ERROR, 
          GST_STREAM_ERROR_FORMAT,
          strf ("View '%s' (the base view) went back in time: its frame at %" GST_TIME_FORMAT
                " is not after the previous observation at %" GST_TIME_FORMAT "; it is dropped.",
                name, GST_TIME_ARGS (t), GST_TIME_ARGS (last_obs_)),
          strf ("%" G_GUINT64_FORMAT " more dropped since the last warning", held_back),
          gst_structure_new ("pi0viewmux-backwards", "view", G_TYPE_STRING, name, "running-time",
                             G_TYPE_UINT64, t, "last-observation", G_TYPE_UINT64, last_obs_,
                             "held-back", G_TYPE_UINT64, held_back, nullptr));
    return false;
  }
  if (const char *problem = frame_layout (caps_info, buf, &info, &needed)) {
    vc.invalid++;
    vc.dropped++;
    const uint64_t size = gst_buffer_get_size (buf);
    if (vs.bad_layout.allow (t, kReportInterval, &held_back))
      n.warning (GST_STREAM_ERROR, 
          GST_STREAM_ERROR_FORMAT,
          strf ("View '%s' sent a frame that its buffer does not hold (%s); it is dropped.", name,
                problem),
          strf ("frame at %" GST_TIME_FORMAT ": %" G_GUINT64_FORMAT
                " bytes, its layout needs %" G_GUINT64_FORMAT "; %" G_GUINT64_FORMAT
                " more refused since the last warning",
                GST_TIME_ARGS (t), size, needed, held_back),
          gst_structure_new ("pi0viewmux-invalid-frame", "view", G_TYPE_STRING, name, "problem",
                             G_TYPE_STRING, problem, "running-time", G_TYPE_UINT64, t, "size",
                             G_TYPE_UINT64, size, "needed", G_TYPE_UINT64, needed, "held-back",
                             G_TYPE_UINT64, held_back, nullptr));
    return false;
  }
  if (!base && is_late (t, last_obs_, max_skew))
    vc.late++;
  if (vs.frame && !vs.used)
    vc.dropped++;
  gst_buffer_replace (&vs.frame, buf);
  vs.info = info;
  vs.cuda = cuda;
  vs.t = t;
  vs.used = false;
  return true;
}

bool
Muxer::take_sample (GstBuffer *buf, Time t, unsigned dim, Counts &c, Notices &n)
{
  const gsize size = gst_buffer_get_size (buf);
  std::vector<float> vals (dim);

  c.state_samples++;
  const bool sized =
      size == dim * sizeof (float) && gst_buffer_extract (buf, 0, vals.data (), size) == size;
  if (!sized || !state_sample_ok (vals.data (), vals.size (), dim)) {
    c.state_rejected++;
    /* A broken state source sends at its own rate: each problem is said at once, then at most
     * once per interval, with how many more there were. */
    const char *problem = sized ? "non-finite" : "size";
    uint64_t held_back;
    if ((sized ? bad_state_values_ : bad_state_size_).allow (t, kReportInterval, &held_back))
      n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT,
                  strf ("Rejected a robot state sample: it must be %u finite float32 values.", dim),
                  strf ("%" GST_PTR_FORMAT " (%s); %" G_GUINT64_FORMAT
                        " more rejected for it since the last warning",
                        buf, problem, held_back),
                  gst_structure_new ("pi0viewmux-rejected-state", "running-time", G_TYPE_UINT64, t,
                                     "size", G_TYPE_UINT64, (guint64)size, "dim", G_TYPE_UINT, dim,
                                     "problem", G_TYPE_STRING, problem, "held-back", G_TYPE_UINT64,
                                     held_back, nullptr));
    return false;
  }
  state_ = std::move (vals);
  state_t_ = t;
  gst_buffer_replace (&state_buf_, buf);
  return true;
}

GstBuffer *
Muxer::compose (GstBuffer *base_buf, Time T, const Active &active, bool state_pad,
                const Settings &l, Counts &c, Notices &n)
{
  GstBuffer *out = gst_buffer_new ();
  GstPi0ObservationMeta *meta = gst_buffer_add_pi0_observation_meta (out);
  meta->observation_time = T;
  bool any_masked = false;

  for (int v = 0; v < kViews; v++) {
    if (!active[v])
      continue;
    View &vs = views_[v];
    const Verdict j = judge_view (vs.frame != nullptr, vs.t, T, l.max_skew, l.max_staleness);
    if (j.valid) {
      gst_pi0_observation_meta_add_frame (
          meta, out, kViewNames[v], &vs.info, vs.frame,
          (GstPi0ViewFlags)((vs.cuda ? GST_PI0_VIEW_FLAG_CUDA : 0) |
                            (j.skewed ? GST_PI0_VIEW_FLAG_SKEWED : 0)),
          vs.t);
      c.views[v].skewed += j.skewed;
      vs.used = true;
      c.views[v].used++;
    } else {
      /* Masked: no memory in the buffer, nothing zero-filled. */
      GstPi0View *view = gst_pi0_observation_meta_add_view (meta, kViewNames[v]);
      any_masked = true;
      c.views[v].masked++;
      if (vs.frame) {
        view->capture_time = vs.t;
        view->pts = GST_BUFFER_PTS (vs.frame);
      }
      if (j.expired) {
        /* Too old to use ever again. */
        c.views[v].dropped += !vs.used;
        gst_clear_buffer (&vs.frame);
      }
    }
    /* The bus hears of a view becoming masked or valid again; a frame ahead of a late base
     * frame is no news about the camera. */
    if (j.ahead || !vs.report.should_report (!j.valid, T, kReportInterval))
      continue;
    const Time age = is_valid (vs.t) && T > vs.t ? T - vs.t : kNone;
    GstStructure *details = gst_structure_new (
        "pi0viewmux-view", "view", G_TYPE_STRING, kViewNames[v], "masked", G_TYPE_BOOLEAN, !j.valid,
        "running-time", G_TYPE_UINT64, T, "age", G_TYPE_UINT64, age, nullptr);
    if (j.valid)
      n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
                  strf ("Camera view '%s' recovered: it is no longer masked.", kViewNames[v]),
                  strf ("observation at %" GST_TIME_FORMAT, GST_TIME_ARGS (T)), details);
    else
      n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
                  strf ("Camera view '%s' is stale: it is masked until it delivers frames again.",
                        kViewNames[v]),
                  strf ("no frame within max-staleness %" GST_TIME_FORMAT
                        " of the observation at %" GST_TIME_FORMAT
                        " (newest frame age %" GST_TIME_FORMAT ")",
                        GST_TIME_ARGS (l.max_staleness), GST_TIME_ARGS (T), GST_TIME_ARGS (age)),
                  details);
  }

  if (state_pad) {
    if (state_buf_) {
      const bool stale = state_is_stale (state_t_, T, l.max_state_age);
      c.state_stale += stale;
      gst_pi0_observation_meta_set_state (meta, state_.data (), (guint)state_.size (), state_t_,
                                          stale ? GST_PI0_STATE_FLAG_STALE
                                                : GST_PI0_STATE_FLAG_NONE);
    } else {
      c.state_stale++;
    }
  }

  last_obs_ = T;
  if (any_masked && l.require_all_views) {
    c.dropped_observations++;
    gst_buffer_unref (out);
    return nullptr;
  }
  meta->sequence = sequence_++;
  GST_BUFFER_PTS (out) = GST_BUFFER_PTS (base_buf);
  GST_BUFFER_DURATION (out) = GST_BUFFER_DURATION (base_buf);
  if (GST_BUFFER_FLAG_IS_SET (base_buf, GST_BUFFER_FLAG_DISCONT))
    GST_BUFFER_FLAG_SET (out, GST_BUFFER_FLAG_DISCONT);
  c.observations++;
  return out;
}


/* ------------------------------------------------------------------------------------------ */
/* Selection (as GstVideoAggregator's fill_queues): each input's current frame or sample      */

/* Brings one input up to @limit: takes its queued buffers at or before @limit in order, the
 * newest becoming its current frame or sample (next_step()). Sets @complete when no other such
 * buffer can still come: a later one is queued, the current one lasts past @limit, or the pad is
 * at EOS. */
GstFlowReturn
Muxer::drain (const Pad &p, Time limit, const Settings &s, Counts &c, Notices &n, bool *complete)
{
  const PadFormat &f = *p.format;
  *complete = false;
  while (true) {
    g_autoptr (GstBuffer) buf = gst_aggregator_pad_peek_buffer (p.pad);
    if (!buf) {
      *complete = gst_aggregator_pad_is_eos (p.pad);
      return GST_FLOW_OK;
    }
    if (!f.negotiated ())
      return pad_error (n, f.view, true);
    const Time t = buffer_time (p.pad, buf, s.use_pts);
    if (!is_valid (t))
      return pad_error (n, f.view, false);

    const Step step = next_step (front_of (*this, f.view, buf, t), limit);
    if (step == Step::Stop) {
      *complete = true;
      return GST_FLOW_OK;
    }
    if (step != Step::Drop) {
      const bool taken = f.view >= 0 ? take_frame (f.view, f.view == s.base_view, buf, t, &f.info,
                                                   f.cuda, s.max_skew, c, n)
                                     : take_sample (buf, t, f.state_dim, c, n);
      if (taken && step == Step::TakeAndStop) {
        *complete = true;
        return GST_FLOW_OK;
      }
    }
    gst_aggregator_pad_drop_buffer (p.pad);
  }
}

GstFlowReturn
Muxer::select (const Pads &pads, Time T, Time now, Time latency, const Settings &s, Counts &c,
               Notices &n, bool *complete)
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
    const GstFlowReturn ret = drain (pads[i], limit, s, c, n, &done);
    if (ret != GST_FLOW_OK)
      return ret;
    *complete = *complete && done;
  }
  return GST_FLOW_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Aggregation: selection, then composition                                                    */

GstFlowReturn
Muxer::aggregate (const Pads &pads, const Active &active, const Settings &s, Time now, Time latency,
                  Time live_latency, bool timeout, GstBuffer **out, Counts &c, Notices &n)
{
  *out = nullptr;
  const PadFormat *base = pads[s.base_view].format;
  if (!base) {
    n.error (GST_CORE_ERROR, GST_CORE_ERROR_PAD,
             std::string ("The base view '") + kViewNames[s.base_view] +
                 "' has no pad: link a source to it or set base-view.");
    return GST_FLOW_ERROR;
  }
  GstAggregatorPad *abase = pads[s.base_view].pad;
  g_autoptr (GstBuffer) base_buf = gst_aggregator_pad_peek_buffer (abase);
  bool complete;
  if (!base_buf && gst_aggregator_pad_is_eos (abase))
    return GST_FLOW_EOS; /* the base view ended: so does the stream, whatever the others do */
  if (!base_buf && timeout) {
    const GstFlowReturn ret = select (pads, kNone, now, latency, s, c, n, &complete);
    return ret == GST_FLOW_OK ? GST_AGGREGATOR_FLOW_NEED_DATA : ret;
  }
  if (!base_buf)
    return GST_AGGREGATOR_FLOW_NEED_DATA;
  if (is_gap (base_buf)) {
    gst_aggregator_pad_drop_buffer (abase);
    return GST_FLOW_OK;
  }
  if (!base->negotiated ())
    return pad_error (n, s.base_view, true);
  const Time T = buffer_time (abase, base_buf, s.use_pts);
  if (!is_valid (T))
    return pad_error (n, s.base_view, false);

  /* The base frame becomes the base view's current frame once (it stays queued while the others
   * are waited for); a refused one paces no observation. */
  if (base_buf != current (s.base_view)) {
    if (!take_frame (s.base_view, true, base_buf, T, &base->info, base->cuda, s.max_skew, c, n)) {
      gst_aggregator_pad_drop_buffer (abase);
      return GST_FLOW_OK;
    }
    base_late_ = is_valid (live_latency) && is_valid (now) &&
                 now > base_deadline (T, s.max_wait, live_latency) + live_latency;
  }

  /* Wait until every other input proves it has nothing more for T: for data when not live, and
   * at most until the deadline (timeout) when live. */
  GstFlowReturn ret = select (pads, T, now, latency, s, c, n, &complete);
  if (ret == GST_FLOW_OK && !complete && !timeout)
    ret = GST_AGGREGATOR_FLOW_NEED_DATA;
  if (ret != GST_FLOW_OK)
    return ret;
  gst_aggregator_pad_drop_buffer (abase);
  *out = compose (base_buf, T, active, pads[kStateInput].pad != nullptr, s, c, n);
  /* Live, made at the deadline before every input proved complete, or for a base frame that came
   * after its deadline: a replay may pair it differently. */
  if (*out && (!complete || base_late_))
    c.deadline_observations++;
  return GST_FLOW_OK;
}

Time
Muxer::next_time (const Pads &pads, const Settings &s, Time latency) const
{
  GstAggregatorPad *base = pads[s.base_view].pad;
  if (!base)
    return kNone;
  if (GstBuffer *buf = gst_aggregator_pad_peek_buffer (base)) {
    const Time t = buffer_time (base, buf, false);
    gst_buffer_unref (buf);
    return base_deadline (t, s.max_wait, latency);
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
      const Time limit = drain_limit (front_of (*this, pads[i].format->view, buf, t));
      const Time slack = i < kViews ? s.max_skew : 0;
      next = std::min (next, limit > slack ? limit - slack : 0);
    }
    gst_buffer_unref (buf);
  }
  return next;
}

GstCaps *
Muxer::caps (const Pads &pads, const Active &active, int base_view)
{
  const PadFormat *base = pads[base_view].format;
  if (!base || !base->info_valid)
    return nullptr;
  bool all_cuda = true;
  const gchar *names[kViews];
  guint n_views = 0;
  for (int v = 0; v < kViews; v++) {
    const PadFormat *f = pads[v].format;
    if (active[v] && f && f->info_valid && !f->cuda)
      all_cuda = false;
    if (active[v])
      names[n_views++] = kViewNames[v];
  }
  const PadFormat *state = pads[kStateInput].format;
  return gst_pi0_observation_caps_new (names, n_views, kViewNames[base_view],
                                       state ? state->state_dim : 0,
                                       GST_VIDEO_INFO_FPS_N (&base->info),
                                       GST_VIDEO_INFO_FPS_D (&base->info), all_cuda);
}

} // namespace pi0::mux
