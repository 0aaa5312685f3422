/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "viewmux/pi0muxinputs.h"

#include <gst/pi0/pi0.h>

#include <algorithm>
#include <cstdarg>

namespace pi0::mux
{

namespace
{

std::string strf (const char *fmt, ...) G_GNUC_PRINTF (1, 2);

std::string
strf (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  gchar *s = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  std::string out (s);
  g_free (s);
  return out;
}

Notice
notice (GstStreamError code, std::string text, std::string debug, GstStructure *details)
{
  Notice n;
  n.code = code;
  n.text = std::move (text);
  n.debug = std::move (debug);
  n.details = details;
  return n;
}

bool
format_supported (GstVideoFormat fmt)
{
  static const GstVideoFormat formats[] = {
      GST_VIDEO_FORMAT_RGB,   GST_VIDEO_FORMAT_BGR,  GST_VIDEO_FORMAT_RGBx, GST_VIDEO_FORMAT_BGRx,
      GST_VIDEO_FORMAT_xRGB,  GST_VIDEO_FORMAT_xBGR, GST_VIDEO_FORMAT_RGBA, GST_VIDEO_FORMAT_BGRA,
      GST_VIDEO_FORMAT_ARGB,  GST_VIDEO_FORMAT_ABGR, GST_VIDEO_FORMAT_NV12, GST_VIDEO_FORMAT_NV21,
      GST_VIDEO_FORMAT_I420,  GST_VIDEO_FORMAT_YV12, GST_VIDEO_FORMAT_Y42B, GST_VIDEO_FORMAT_Y444,
      GST_VIDEO_FORMAT_GRAY8, GST_VIDEO_FORMAT_YUY2, GST_VIDEO_FORMAT_UYVY,
  };
  return std::find (std::begin (formats), std::end (formats), fmt) != std::end (formats);
}

} // namespace

Notice::Notice (Notice &&o) noexcept
    : code (o.code), text (std::move (o.text)), debug (std::move (o.debug)), details (o.details)
{
  o.details = nullptr;
}

Notice::~Notice ()
{
  if (details)
    gst_structure_free (details);
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
    *why =
        strf ("View '%s' needs raw video (video/x-raw, formats " PI0_VIEW_FORMATS "), but got %s.",
              name, gst_structure_get_name (s));
  } else if (!gst_video_info_from_caps (info, caps)) {
    *why = strf ("View '%s' got incomplete or invalid video caps.", name);
  } else if (!format_supported (GST_VIDEO_INFO_FORMAT (info))) {
    *why = strf ("View '%s' cannot take video format %s; use one of " PI0_VIEW_FORMATS
                 " (add videoconvert).",
                 name, gst_video_format_to_string (GST_VIDEO_INFO_FORMAT (info)));
  } else {
    GstCapsFeatures *f = gst_caps_get_features (caps, 0);
    *cuda = f && gst_caps_features_contains (f, "memory:CUDAMemory");
    return true;
  }
  return false;
}

GstStructure *
counts_structure (const Counts &c, const std::array<bool, kViews> &active)
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

GstCaps *
observation_caps (const std::array<bool, kViews> &active, int base_view, unsigned state_dim,
                  int fps_n, int fps_d, bool cuda)
{
  std::string names;
  int n_views = 0;
  for (int v = 0; v < kViews; v++) {
    if (active[v])
      names += std::string (n_views++ ? "," : "") + kViewNames[v];
  }
  GstCaps *caps = gst_caps_new_simple (
      GST_PI0_OBSERVATION_MEDIA_TYPE, "views", G_TYPE_INT, n_views, "view-names", G_TYPE_STRING,
      names.c_str (), "base-view", G_TYPE_STRING, kViewNames[base_view], "state-dim", G_TYPE_INT,
      (int)state_dim, "framerate", GST_TYPE_FRACTION, fps_n, fps_d, nullptr);
  if (cuda)
    gst_caps_set_features (caps, 0, gst_caps_features_new ("memory:CUDAMemory", nullptr));
  return caps;
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

Inputs::Inputs ()
{
  for (View &v : views_)
    gst_video_info_init (&v.info);
}

Inputs::~Inputs ()
{
  clear (false);
}

void
Inputs::clear (bool keep_sequence)
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
  if (!keep_sequence)
    sequence_ = 0;
}

GstBuffer *
Inputs::current (int view) const
{
  return view >= 0 ? views_[view].frame : state_buf_;
}

bool
Inputs::take_frame (int view, bool base, GstBuffer *buf, Time t, const GstVideoInfo *caps_info,
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
      n.push_back (notice (
          GST_STREAM_ERROR_FORMAT,
          strf ("View '%s' (the base view) went back in time: its frame at %" GST_TIME_FORMAT
                " is not after the previous observation at %" GST_TIME_FORMAT "; it is dropped.",
                name, GST_TIME_ARGS (t), GST_TIME_ARGS (last_obs_)),
          strf ("%" G_GUINT64_FORMAT " more dropped since the last warning", held_back),
          gst_structure_new ("pi0viewmux-backwards", "view", G_TYPE_STRING, name, "running-time",
                             G_TYPE_UINT64, t, "last-observation", G_TYPE_UINT64, last_obs_,
                             "held-back", G_TYPE_UINT64, held_back, nullptr)));
    return false;
  }
  if (const char *problem = frame_layout (caps_info, buf, &info, &needed)) {
    vc.invalid++;
    vc.dropped++;
    const uint64_t size = gst_buffer_get_size (buf);
    if (vs.bad_layout.allow (t, kReportInterval, &held_back))
      n.push_back (notice (
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
                             G_TYPE_UINT64, held_back, nullptr)));
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
Inputs::take_sample (GstBuffer *buf, Time t, unsigned dim, Counts &c, Notices &n)
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
      n.push_back (
          notice (GST_STREAM_ERROR_FORMAT,
                  strf ("Rejected a robot state sample: it must be %u finite float32 values.", dim),
                  strf ("%" GST_PTR_FORMAT " (%s); %" G_GUINT64_FORMAT
                        " more rejected for it since the last warning",
                        buf, problem, held_back),
                  gst_structure_new ("pi0viewmux-rejected-state", "running-time", G_TYPE_UINT64, t,
                                     "size", G_TYPE_UINT64, (guint64)size, "dim", G_TYPE_UINT, dim,
                                     "problem", G_TYPE_STRING, problem, "held-back", G_TYPE_UINT64,
                                     held_back, nullptr)));
    return false;
  }
  state_ = std::move (vals);
  state_t_ = t;
  gst_buffer_replace (&state_buf_, buf);
  return true;
}

GstBuffer *
Inputs::compose (GstBuffer *base_buf, Time T, const std::array<bool, kViews> &active,
                 bool state_pad, const Limits &l, Time muxed_time, Counts &c, Notices &n)
{
  GstBuffer *out = gst_buffer_new ();
  GstPi0ObservationMeta *meta = gst_buffer_add_pi0_observation_meta (out);
  meta->observation_time = T;
  bool any_masked = false;

  for (int v = 0; v < kViews; v++) {
    if (!active[v])
      continue;
    View &vs = views_[v];
    GstPi0View *view = gst_pi0_observation_meta_add_view (meta, kViewNames[v]);
    const Verdict j = judge_view (vs.frame != nullptr, vs.t, T, l.max_skew, l.max_staleness);
    if (j.valid) {
      view->flags =
          (GstPi0ViewFlags)(GST_PI0_VIEW_FLAG_VALID | (vs.cuda ? GST_PI0_VIEW_FLAG_CUDA : 0) |
                            (j.skewed ? GST_PI0_VIEW_FLAG_SKEWED : 0));
      c.views[v].skewed += j.skewed;
      view->info = vs.info;
      view->pts = GST_BUFFER_PTS (vs.frame);
      view->capture_time = vs.t;
      view->mem_index = gst_buffer_n_memory (out);
      view->n_mem = gst_buffer_n_memory (vs.frame);
      for (guint i = 0; i < view->n_mem; i++)
        gst_buffer_append_memory (out, gst_memory_ref (gst_buffer_peek_memory (vs.frame, i)));
      vs.used = true;
      c.views[v].used++;
    } else {
      /* Masked: no memory in the buffer, nothing zero-filled. */
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
      n.push_back (
          notice (GST_STREAM_ERROR_FAILED,
                  strf ("Camera view '%s' recovered: it is no longer masked.", kViewNames[v]),
                  strf ("observation at %" GST_TIME_FORMAT, GST_TIME_ARGS (T)), details));
    else
      n.push_back (
          notice (GST_STREAM_ERROR_FAILED,
                  strf ("Camera view '%s' is stale: it is masked until it delivers frames again.",
                        kViewNames[v]),
                  strf ("no frame within max-staleness %" GST_TIME_FORMAT
                        " of the observation at %" GST_TIME_FORMAT
                        " (newest frame age %" GST_TIME_FORMAT ")",
                        GST_TIME_ARGS (l.max_staleness), GST_TIME_ARGS (T), GST_TIME_ARGS (age)),
                  details));
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
  meta->muxed_time = muxed_time;
  GST_BUFFER_PTS (out) = GST_BUFFER_PTS (base_buf);
  GST_BUFFER_DURATION (out) = GST_BUFFER_DURATION (base_buf);
  /* Appending memories tags a buffer for pools; ours comes from no pool. */
  GST_BUFFER_FLAG_UNSET (out, GST_BUFFER_FLAG_TAG_MEMORY);
  if (GST_BUFFER_FLAG_IS_SET (base_buf, GST_BUFFER_FLAG_DISCONT))
    GST_BUFFER_FLAG_SET (out, GST_BUFFER_FLAG_DISCONT);
  c.observations++;
  return out;
}

} // namespace pi0::mux
