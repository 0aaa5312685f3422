/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* LeRobotDataset v3 on disk, written and read the way lerobot 0.6.1 (its `LeRobotDataset`
 * loader) expects, with Parquet through Arrow C++ (the pyarrow wheel's libarrow/libparquet).
 * No GStreamer, no GLib: `pi0lerobotsink` and `pi0lerobotsrc` call this; the tests call it too.
 *
 * Layout (one Parquet file and one MP4 per camera per episode, which v3 allows: each episode's
 * row in meta/episodes says which file holds it):
 *   meta/info.json                      features, fps, counts, path templates
 *   meta/stats.json                     per-feature stats over all episodes
 *   meta/tasks.parquet                  task_index, task (the pandas index)
 *   meta/episodes/chunk-C/file-F.parquet  one row per episode (one file per writing session)
 *   data/chunk-C/file-E.parquet         the frames of episode E
 *   videos/<key>/chunk-C/file-E.mp4     camera <key> of episode E
 *
 * Crash safety: an episode becomes part of the dataset only when info.json (written last,
 * atomically by rename) counts it. Everything written before is either a new file no committed
 * metadata points to, or a metadata file that still loads. Videos in progress are `*.mp4.part`.
 * Opening for append removes what a crash left behind (files and rows of uncommitted episodes).
 *
 * Errors: `false` plus a message in *error (the common/ convention). */

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pi0::lerobot
{

/* LeRobot's per-feature statistics: per dimension (vectors) or per channel (images, in [0,1]). */
struct Stats {
  std::vector<double> min, max, mean, std, q01, q10, q50, q90, q99;
  int64_t count = 0;
};

/* Statistics of @n rows of @dim values (row-major), as LeRobot computes them per episode:
 * quantiles by linear interpolation of the empirical distribution. @n >= 1. */
Stats vector_stats (const double *rows, size_t n, size_t dim);

/* LeRobot's aggregate_stats: count-weighted mean, pooled variance, min of mins, max of maxes,
 * count-weighted quantiles. */
Stats aggregate_stats (const std::vector<Stats> &parts);

/* Per-channel statistics of RGB images in [0,1], accumulated frame by frame (every pixel of
 * every frame given; 256-bin histograms make the quantiles exact for 8-bit values). */
class ImageStats
{
public:
  void add (const uint8_t *rgb, int width, int height, int stride);
  /* count = frames added. Requires at least one frame. */
  Stats finish () const;
  int64_t frames () const { return frames_; }

private:
  uint64_t hist_[3][256] = {};
  int64_t frames_ = 0;
};

struct Camera {
  std::string key; /* "observation.images.main" */
  int width = 0, height = 0;
  std::string codec = "h264"; /* FFmpeg's name, as LeRobot's info.json carries it */
  std::string pix_fmt;        /* "yuv420p", "gbrp", ... */
  /* The encoder's settings as LeRobot 0.6.1 records them (video.g, video.crf, video.preset):
   * 0 / -1 / empty write null. */
  int gop = 0, crf = -1;
  std::string preset;
};

struct Schema {
  int fps = 0;
  std::string robot_type; /* empty: null */
  std::vector<std::string> state_names, action_names;
  std::vector<Camera> cameras;
};

/* One finished episode, frame by frame. */
struct Episode {
  size_t length = 0;
  std::vector<float> state;        /* length x state dim */
  std::vector<float> action;       /* length x action dim */
  std::vector<std::string> task;   /* per frame */
  std::vector<Stats> camera_stats; /* per camera, in Schema::cameras order */
};

class Writer
{
public:
  /* Opens @root for writing. A missing or empty directory gets a new dataset (written at the
   * first commit). An existing dataset is appended to only when @append, and only when its
   * fps and features match @schema; what a crash left behind is cleaned up first. */
  static std::unique_ptr<Writer> open (const std::string &root, const Schema &schema, bool append,
                                       std::string *error);
  virtual ~Writer () = default;

  virtual int64_t next_episode () const = 0;
  virtual int64_t total_frames () const = 0;
  /* Where camera @cam of the episode in progress is encoded (renamed at commit). */
  virtual std::string video_part_path (size_t cam) const = 0;
  /* Makes the episode part of the dataset: data Parquet, videos renamed, tasks, episode row,
   * stats, and info.json last. The videos must be complete at video_part_path(). */
  virtual bool commit (const Episode &ep, std::string *error) = 0;
  /* Drops the episode in progress (its partial videos). */
  virtual void discard () = 0;

private:
  static std::unique_ptr<Writer> open_checked (const std::string &root, const Schema &schema,
                                               bool append, std::string *error);
};

struct EpisodeInfo {
  int64_t index = 0, length = 0, from = 0, to = 0;
  int64_t data_chunk = 0, data_file = 0;
  std::vector<std::string> tasks;
  struct Video {
    int64_t chunk = 0, file = 0;
    double from_ts = 0, to_ts = 0;
  };
  std::vector<Video> videos; /* per camera, in Reader::schema().cameras order */
};

class Reader
{
public:
  static std::unique_ptr<Reader> open (const std::string &root, std::string *error);
  virtual ~Reader () = default;

  virtual const Schema &schema () const = 0;
  virtual const std::vector<EpisodeInfo> &episodes () const = 0;
  /* meta/tasks.parquet: the task of each task_index. */
  virtual const std::vector<std::string> &tasks () const = 0;
  virtual std::string video_path (const EpisodeInfo &ep, size_t cam) const = 0;
  /* The frames of episode @ep: state and action (row-major), timestamps (s), and when
   * @task_index is given each frame's task_index (an index into tasks(), checked). */
  virtual bool read_frames (const EpisodeInfo &ep, std::vector<float> *state,
                            std::vector<float> *action, std::vector<double> *timestamp,
                            std::string *error, std::vector<int64_t> *task_index = nullptr) = 0;

private:
  static std::unique_ptr<Reader> open_checked (const std::string &root, std::string *error);
};

} // namespace pi0::lerobot
