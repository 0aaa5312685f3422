/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/lerobot/pi0recorder.h"

#include <exception>

GST_DEBUG_CATEGORY_EXTERN (gst_pi0_lerobot_sink_debug);
#define GST_CAT_DEFAULT gst_pi0_lerobot_sink_debug

namespace pi0::record
{

void
Recorder::start (const Settings &s, const Robot &robot)
{
  s_ = s;
  robot_ = robot;
  n_views_ = 0;
  view_names_.clear ();
  view_info_.clear ();
  state_dim_ = 0;
  schema_ = pi0::lerobot::Schema ();
  writer_.reset ();
  recording_ = auto_done_ = false;
  encoders_.clear ();
  camera_stats_.clear ();
  frames_.clear ();
  task_ = s.instruction;
  warn_count_ = 0;
  c_ = Counts ();
  {
    std::lock_guard<std::mutex> g (timeline_lock_);
    timeline_ = pi0::proto::CommandTimeline (robot.period_ns, robot.stream);
    action_dim_ = 0;
    action_error_.clear ();
  }
  update_counts ();
}

bool
Recorder::set_fps (int fps, Notices &n)
{
  if (writer_ && writer_->next_episode () >= 0 && schema_.fps && schema_.fps != fps) {
    n.error (GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT,
             "The frame rate changed to " + std::to_string (fps) + " fps");
    return false;
  }
  fps_ = fps;
  return true;
}

void
Recorder::command (const char *kind, guint64 chunk_id, guint step_index, GstClockTime now,
                   const float *values, size_t len, guint steps, guint dim)
{
  std::lock_guard<std::mutex> g (timeline_lock_);
  if (!GST_CLOCK_TIME_IS_VALID (now))
    return;
  if (dim && steps && len < (size_t)steps * dim * sizeof (float))
    return;
  if (dim && g_strcmp0 (kind, "action") == 0) {
    if (action_dim_ == 0)
      action_dim_ = dim;
    else if (action_dim_ != dim)
      action_error_ = "the action sink sent " + std::to_string (dim) +
                      " values per action after " + std::to_string (action_dim_);
  }
  timeline_.add (kind ? kind : "", chunk_id, step_index, (int64_t)now, values, steps, dim);
}

Counts
Recorder::counts () const
{
  std::lock_guard<std::mutex> g (counts_lock_);
  return shown_;
}

void
Recorder::update_counts ()
{
  c_.current = frames_.size ();
  std::lock_guard<std::mutex> g (counts_lock_);
  shown_ = c_;
}

void
Recorder::warn (const std::string &msg, Notices &n)
{
  GST_WARNING ("%s", msg.c_str ());
  warn_count_++;
  if ((warn_count_ & (warn_count_ - 1)) == 0)
    n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED, msg,
               std::to_string (warn_count_) + " warnings so far");
}

/* Ends the episode in progress: encoders finalized, actions resolved, committed. */
bool
Recorder::end_episode (std::string *error)
{
  if (!recording_)
    return true;
  recording_ = false;
  bool ok = true;
  for (auto &e : encoders_) {
    std::string err;
    if (!e->finish (&err) && ok) {
      ok = false;
      *error = err;
    }
  }
  encoders_.clear ();
  if (!ok || frames_.empty ()) {
    writer_->discard ();
    frames_.clear ();
    camera_stats_.clear ();
    update_counts ();
    return ok;
  }
  pi0::lerobot::Episode ep;
  ep.length = frames_.size ();
  const size_t ad = schema_.action_names.size ();
  {
    std::lock_guard<std::mutex> g (timeline_lock_);
    if (!action_error_.empty ()) {
      *error = action_error_;
      ok = false;
    }
    for (auto &f : frames_) {
      ep.state.insert (ep.state.end (), f.state.begin (), f.state.end ());
      const std::vector<float> *cmd = timeline_.at ((int64_t)f.t);
      if (cmd && cmd->size () == ad)
        ep.action.insert (ep.action.end (), cmd->begin (), cmd->end ());
      else /* nothing commanded yet: the robot holds where it is */
        ep.action.insert (ep.action.end (), f.state.begin (), f.state.end ());
      ep.task.push_back (f.task);
    }
  }
  for (auto &s : camera_stats_)
    ep.camera_stats.push_back (s->finish ());
  camera_stats_.clear ();
  const size_t n = frames_.size ();
  frames_.clear ();
  if (ok && !writer_->commit (ep, error))
    ok = false;
  if (ok) {
    c_.episodes++;
    GST_INFO ("episode committed: %" G_GSIZE_FORMAT " frames", n);
  } else {
    writer_->discard ();
  }
  update_counts ();
  return ok;
}

bool
Recorder::begin_episode (const GstPi0ObservationMeta *meta, std::string *error)
{
  for (guint v = 0; v < n_views_; v++) {
    auto enc = std::make_unique<CameraEncoder> ();
    if (!enc->start (s_.encoder, view_info_[v], fps_, writer_->video_part_path (v), error))
      return false;
    encoders_.push_back (std::move (enc));
    auto cs = std::make_unique<CameraStats> ();
    if (!cs->init (view_info_[v])) {
      *error = "cannot convert view " + view_names_[v] + " for its statistics";
      return false;
    }
    camera_stats_.push_back (std::move (cs));
  }
  recording_ = true;
  /* Rows superseded before this episode are not needed any more. */
  std::lock_guard<std::mutex> g (timeline_lock_);
  if (GST_CLOCK_TIME_IS_VALID (meta->observation_time))
    timeline_.prune ((int64_t)meta->observation_time);
  return true;
}

/* The dataset's schema from the first observation (views, sizes, state) and the robot. */
bool
Recorder::open_dataset (const GstPi0ObservationMeta *meta, std::string *error)
{
  n_views_ = gst_pi0_observation_meta_get_n_views (meta);
  schema_ = pi0::lerobot::Schema ();
  schema_.fps = fps_;
  schema_.robot_type = s_.robot_type;
  for (guint v = 0; v < n_views_; v++) {
    const GstPi0View *view = gst_pi0_observation_meta_get_view (meta, v);
    if (view->flags & GST_PI0_VIEW_FLAG_CUDA) {
      *error = std::string ("view ") + view->name +
               " is in CUDA memory; pi0lerobotsink reads system memory (download it first)";
      return false;
    }
    view_names_.push_back (view->name);
    view_info_.push_back (view->info);
    pi0::lerobot::Camera c;
    c.key = std::string ("observation.images.") + view->name;
    c.width = GST_VIDEO_INFO_WIDTH (&view->info);
    c.height = GST_VIDEO_INFO_HEIGHT (&view->info);
    bool gbr, conv;
    std::string enc;
    std::string err = CameraEncoder::plan (s_.encoder, GST_VIDEO_INFO_FORMAT (&view->info), &gbr,
                                           &conv, &c.pix_fmt, &enc);
    if (!err.empty ()) {
      *error = err;
      return false;
    }
    /* The encoder settings in LeRobot's terms (what its writer would use to add episodes of
     * the same kind): x264's quantizer is its CRF (0 with lossless: x264's lossless mode). */
    c.gop = (int)s_.encoder.gop;
    c.crf = s_.encoder.lossless ? 0 : (int)s_.encoder.quantizer;
    c.preset = enc == "x264enc" ? "superfast" : "";
    schema_.cameras.push_back (c);
  }
  state_dim_ = meta->state_dim;
  /* Names: the robot's joints when its configuration is known and the sizes agree. */
  guint action_dim = robot_.dim;
  {
    std::lock_guard<std::mutex> g (timeline_lock_);
    if (!action_dim)
      action_dim = action_dim_;
  }
  if (!action_dim)
    action_dim = state_dim_; /* until the first action says otherwise */
  auto names = [&] (guint n, const char *prefix) {
    std::vector<std::string> out;
    for (guint i = 0; i < n; i++)
      out.push_back (robot_.joints.size () == n ? robot_.joints[i] : prefix + std::to_string (i));
    return out;
  };
  schema_.state_names = names (state_dim_, "state_");
  schema_.action_names = names (action_dim, "action_");
  if (action_dim != state_dim_) {
    /* Frames before the first command take the state as their action: sizes must agree. */
    *error = "the robot's state has " + std::to_string (state_dim_) + " values and its actions " +
             std::to_string (action_dim) + "; pi0lerobotsink needs them equal";
    return false;
  }
  writer_ = pi0::lerobot::Writer::open (s_.location, schema_, s_.append, error);
  return writer_ != nullptr;
}

GstFlowReturn
Recorder::observation (GstBuffer *buf, Notices &n)
{
  GstPi0ObservationMeta *meta = gst_buffer_get_pi0_observation_meta (buf);
  if (!meta) {
    n.error (GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT, "A buffer without an observation meta",
             "pi0lerobotsink records the observations pi0viewmux makes");
    return GST_FLOW_ERROR;
  }
  std::string err;
  /* The dataset's cameras and state are those of the first complete observation. */
  bool complete = meta->state_dim > 0 && (meta->state_flags & GST_PI0_STATE_FLAG_PRESENT);
  for (guint v = 0; complete && v < gst_pi0_observation_meta_get_n_views (meta); v++)
    complete = gst_pi0_observation_meta_get_view (meta, v)->flags & GST_PI0_VIEW_FLAG_VALID;
  if (!writer_ && !complete) {
    c_.skipped++;
    update_counts ();
    warn ("observation " + std::to_string (meta->sequence) +
              " not recorded: a camera or the state is missing",
          n);
    return GST_FLOW_OK;
  }
  if (!writer_ && !open_dataset (meta, &err)) {
    n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_WRITE,
             "Cannot record the dataset: " + err);
    return GST_FLOW_ERROR;
  }
  if (!recording_ && s_.auto_start && !auto_done_) {
    auto_done_ = true;
    if (!begin_episode (meta, &err)) {
      n.error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_INIT, "Cannot start an episode: " + err);
      return GST_FLOW_ERROR;
    }
  }
  if (!recording_)
    return GST_FLOW_OK;
  /* A frame needs every camera and the state: LeRobot has no masks. */
  guint dim = 0;
  const gfloat *state = gst_pi0_observation_meta_get_state (meta, &dim);
  std::string why;
  if (gst_pi0_observation_meta_get_n_views (meta) != n_views_)
    why = "a different number of views";
  else if (!state || !(meta->state_flags & GST_PI0_STATE_FLAG_PRESENT) || dim != state_dim_)
    why = "no robot state";
  for (guint v = 0; why.empty () && v < n_views_; v++) {
    const GstPi0View *view = gst_pi0_observation_meta_get_view (meta, v);
    if (!(view->flags & GST_PI0_VIEW_FLAG_VALID))
      why = std::string ("view ") + view->name + " masked";
    else if (GST_VIDEO_INFO_FORMAT (&view->info) != GST_VIDEO_INFO_FORMAT (&view_info_[v]) ||
             view->info.width != view_info_[v].width ||
             view->info.height != view_info_[v].height) {
      std::string msg = std::string ("view ") + view->name + " changed to " +
                        gst_video_format_to_string (GST_VIDEO_INFO_FORMAT (&view->info)) + " " +
                        std::to_string (view->info.width) + "x" +
                        std::to_string (view->info.height) +
                        "; a LeRobot dataset has one shape per camera";
      std::string e2;
      end_episode (&e2);
      n.error (GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT, msg);
      return GST_FLOW_ERROR;
    }
  }
  if (!why.empty ()) {
    c_.skipped++;
    update_counts ();
    warn ("observation " + std::to_string (meta->sequence) + " not recorded: " + why, n);
    return GST_FLOW_OK;
  }
  /* The dataset's clock is k / fps: a base frame missing upstream (or observations skipped
   * above) would close up in it, a transition that never happened. Every gap is counted and
   * posted (not through warn(): skipped observations before it must not hide it), with where
   * it is; gap-action=split ends the episode there. */
  if (!frames_.empty () && GST_CLOCK_TIME_IS_VALID (meta->observation_time) &&
      GST_CLOCK_TIME_IS_VALID (frames_.back ().t) &&
      meta->observation_time > frames_.back ().t &&
      (meta->observation_time - frames_.back ().t) * 2 * fps_ > 3 * GST_SECOND) {
    c_.gaps++;
    const guint64 gap_ms = (meta->observation_time - frames_.back ().t) / GST_MSECOND;
    const guint64 episode = writer_->next_episode (), frame = frames_.size ();
    n.warning (GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
               "A gap of " + std::to_string (gap_ms) + " ms before frame " +
                   std::to_string (frame) + " of episode " + std::to_string (episode) +
                   (s_.split_at_gaps ? ": the episode ends there"
                                     : ": kept, the dataset's timeline (k / fps) closes it"),
               "observation " + std::to_string (meta->sequence),
               gst_structure_new ("pi0lerobotsink-gap", "episode", G_TYPE_UINT64, episode,
                                  "frame", G_TYPE_UINT64, frame, "gap-ms", G_TYPE_UINT64, gap_ms,
                                  "split", G_TYPE_BOOLEAN, (gboolean)s_.split_at_gaps, nullptr));
    if (s_.split_at_gaps) {
      if (!end_episode (&err)) {
        n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_WRITE, "Cannot save the episode: " + err);
        return GST_FLOW_ERROR;
      }
      if (!begin_episode (meta, &err)) {
        n.error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_INIT, "Cannot start an episode: " + err);
        return GST_FLOW_ERROR;
      }
    }
  }
  const guint64 index = frames_.size ();
  for (guint v = 0; v < n_views_; v++) {
    if (!encoders_[v]->push (buf, meta, v, index, &err)) {
      n.error (GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_ENCODE,
               "Cannot encode view " + view_names_[v] + ": " + err);
      return GST_FLOW_ERROR;
    }
    camera_stats_[v]->add (buf, meta, v);
  }
  frames_.push_back ({meta->observation_time, std::vector<float> (state, state + dim), task_});
  c_.frames++;
  update_counts ();
  if (s_.episode_length && frames_.size () >= s_.episode_length) {
    /* Fixed-length episodes: the next one starts with the next observation. */
    if (!end_episode (&err)) {
      n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_WRITE, "Cannot save the episode: " + err);
      return GST_FLOW_ERROR;
    }
    auto_done_ = false;
    s_.auto_start = true;
  }
  return GST_FLOW_OK;
}

void
Recorder::episode_event (bool start, const char *task, Notices &n)
{
  std::string err;
  if (!end_episode (&err))
    n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_WRITE, "Cannot save the episode: " + err);
  auto_done_ = true;
  if (start) {
    if (task)
      task_ = task;
    /* The encoders start with the next observation. */
    auto_done_ = false;
    s_.auto_start = true;
  } else {
    s_.auto_start = false;
  }
}

void
Recorder::finish (bool stopping, Notices &n)
{
  std::string err;
  if (end_episode (&err))
    return;
  if (stopping)
    n.warning (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_WRITE, "Cannot save the episode: " + err);
  else
    n.error (GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_WRITE, "Cannot save the episode: " + err);
}

} // namespace pi0::record
