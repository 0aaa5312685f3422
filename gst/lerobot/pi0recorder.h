/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* pi0lerobotsink's engine (docs/design.md, "Engines"): a LeRobotDataset v3 recorded from
 * observations, apart from the element. The dataset's schema comes from the first complete
 * observation (cameras, sizes, state) and the robot (the action sink's joints); episodes begin
 * and end as the element says (auto-start, events, EOS, a fixed length); each frame's action is
 * the command the robot was executing when the frame's base camera captured it, rebuilt from
 * the action sink's messages with the receiver's timing (pi0::proto::CommandTimeline); every
 * camera goes through its CameraEncoder (pi0cameraencoder.h) and the library (lerobot/) writes
 * the files. It posts nothing: each call returns its notices, which the element posts.
 *
 * Threads: the streaming thread owns the recorder (observations, events, start and stop);
 * command() comes from the action sink's sending threads and only takes the timeline's lock;
 * counts() from any thread (the counts' lock). The two locks are never held together, and
 * neither while waiting on an encoder or writing files. */

#include "gst/common/pi0notice.h"
#include "gst/lerobot/pi0cameraencoder.h"

#include "lerobot/pi0lerobot.h"
#include "protocol/pi0session.h"

#include <gst/gst.h>
#include <gst/pi0/pi0.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pi0::record
{

/* The properties the recording takes (a snapshot at start). */
struct Settings {
  std::string location;
  bool append = false;
  std::string instruction;
  EncoderSettings encoder;
  bool auto_start = true;
  std::string robot_type;
  unsigned episode_length = 0; /* 0: episodes end only by event, EOS or stop */
  bool split_at_gaps = false;  /* a gap ends the episode (else: kept, closed up) */
};

/* What the action sink says about the robot. */
struct Robot {
  int64_t period_ns = 20000000; /* its control period: one command row per period */
  bool stream = false;          /* stream mode: each message one row, at once */
  std::vector<std::string> joints; /* its robot configuration's names; empty: unknown */
  unsigned dim = 0;                 /* its robot configuration's size; 0: unknown */
};

/* The element's `stats`. */
struct Counts {
  uint64_t episodes = 0; /* committed */
  uint64_t frames = 0;   /* recorded */
  uint64_t skipped = 0;  /* observations without state or with a masked view */
  uint64_t current = 0;  /* frames of the episode in progress */
  uint64_t gaps = 0;     /* frames more than 1.5 periods after the previous one */
};

class Recorder
{
public:
  Recorder () = default;
  Recorder (const Recorder &) = delete;
  Recorder &operator= (const Recorder &) = delete;

  /* A new recording (nothing is written before the first complete observation). */
  void start (const Settings &s, const Robot &robot);
  /* The dataset's frames per second; false, with the error in @n, when it changes mid-dataset. */
  bool set_fps (int fps, Notices &n);

  /* A message the action sink sent at running time @now (its `action` signal): @len bytes of
   * @steps x @dim floats. Thread-safe. */
  void command (const char *kind, guint64 chunk_id, guint step_index, GstClockTime now,
                const float *values, size_t len, guint steps, guint dim);

  /* One observation: recorded, skipped with a warning, or an error (the flow says). */
  GstFlowReturn observation (GstBuffer *buf, Notices &n);
  /* The task of the frames from now on (a pi0-instruction event). */
  void set_task (const std::string &task) { task_ = task; }
  /* A pi0-episode event: the episode in progress ends; a start begins the next at the next
   * observation (with @task, when given), a stop waits for the next start. */
  void episode_event (bool start, const char *task, Notices &n);
  /* EOS (@stopping false: a failure is an error) or stop (a warning): the episode in progress is
   * committed. */
  void finish (bool stopping, Notices &n);

  Counts counts () const;

private:
  struct Frame {
    GstClockTime t;
    std::vector<float> state;
    std::string task;
  };

  bool open_dataset (const GstPi0ObservationMeta *meta, std::string *error);
  bool begin_episode (const GstPi0ObservationMeta *meta, std::string *error);
  bool end_episode (std::string *error);
  /* The 1st, 2nd, 4th, 8th... warning: a stream of skipped observations cannot flood the bus. */
  void warn (const std::string &msg, Notices &n);
  void update_counts ();

  Settings s_;
  Robot robot_;
  int fps_ = 0;
  guint n_views_ = 0;
  std::vector<std::string> view_names_;
  std::vector<GstVideoInfo> view_info_; /* format and size fixed for the dataset */
  guint state_dim_ = 0;
  pi0::lerobot::Schema schema_;
  std::unique_ptr<pi0::lerobot::Writer> writer_;
  /* The episode in progress. */
  bool recording_ = false;
  bool auto_done_ = false;
  std::vector<std::unique_ptr<CameraEncoder>> encoders_;
  std::vector<std::unique_ptr<CameraStats>> camera_stats_;
  std::vector<Frame> frames_;
  std::string task_;
  guint64 warn_count_ = 0;
  Counts c_;

  std::mutex timeline_lock_;
  pi0::proto::CommandTimeline timeline_; /* under timeline_lock_, as the next two */
  guint action_dim_ = 0;
  std::string action_error_;

  mutable std::mutex counts_lock_;
  Counts shown_; /* under counts_lock_: c_ as last published */
};

} // namespace pi0::record
